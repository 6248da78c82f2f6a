// The manage page: the signed-in person's links (or a key holder's),
// searched and paged, edited, deleted (after a confirmation), and each
// one's visits as a chart, with the buttons their role allows; and their
// own API keys. A typed key stays in this tab's sessionStorage; a
// signed-in person's session is the server's cookie.
"use strict";

const KEY = "litelink.key";
const PAGE = 20;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);
let cursor = null;
// Who is managing: `{name, role, domain, via}` from /api/v1/account.
let account = null;

function key() {
  return sessionStorage.getItem(KEY) || "";
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

async function api(method, path, body) {
  const headers = {};
  // A typed key decides alone; without one, the session cookie goes.
  if (key()) headers.authorization = `Bearer ${key()}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  if (response.status !== 204) {
    try {
      data = await response.json();
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const message = data && typeof data.error === "string" ? data.error : `The server answered ${response.status}.`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return data;
}

function status(text) {
  $("status").textContent = text;
}

function when(t) {
  return t ? new Date(t).toLocaleString() : "never";
}

function localInput(t) {
  // A datetime-local value is local time without a zone.
  if (!t) return "";
  const d = new Date(t);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// A link's own API path: its code, and its domain unless the default.
function linkPath(link, rest = "") {
  const on = link.domain ? `?domain=${encodeURIComponent(link.domain)}` : "";
  const path = `/api/v1/links/${encodeURIComponent(link.code)}${rest}`;
  if (!on) return path;
  return rest.includes("?") ? `${path}&${on.slice(1)}` : `${path}${on}`;
}

function render(link) {
  const li = el("li", { "data-code": link.code, "data-domain": link.domain || "" });
  fill(li, link);
  return li;
}

function fill(li, link) {
  const short = link.short_url || `${location.origin}/${link.code}`;
  const meta = `${link.visits} visit${link.visits === 1 ? "" : "s"}` +
    (link.max_visits ? ` of ${link.max_visits}` : "") +
    ` · made ${when(link.created_at)}` +
    (link.expires_at ? ` · expires ${when(link.expires_at)}` : "") +
    (link.expired ? " · expired" : "") +
    (link.protected ? " · password" : "") +
    (link.rules && link.rules.length ? ` · ${link.rules.length} rule${link.rules.length === 1 ? "" : "s"}` : "") +
    (link.domain && several ? ` · on ${link.domain}` : "");
  const edit = el("button", { type: "button", class: "secondary", text: "Edit" });
  const visits = el("button", { type: "button", class: "secondary", text: "Visits", "aria-expanded": "false" });
  const del = el("button", { type: "button", class: "secondary", text: "Delete" });
  // A viewer reads everything and changes nothing: no buttons to change.
  const changes = !(account && account.role === "viewer");
  const actions = changes ? el("div", { class: "actions" }, edit, visits, del) : el("div", { class: "actions" }, visits);
  const panel = el("div", { class: "panel" });
  // A tag shows the links that have it.
  const tags = (link.tags || []).map((tag) => {
    const chip = el("button", { type: "button", class: "tag", text: tag, title: `Links tagged ${tag}` });
    chip.addEventListener("click", () => filterByTag(tag));
    return chip;
  });
  li.replaceChildren(
    el("a", { class: "short", href: short, text: short }),
    ...(link.title ? [el("div", { class: "title", text: link.title })] : []),
    el("div", { class: "url", text: link.url }),
    el("div", { class: "meta", text: meta }),
    ...(tags.length ? [el("div", { class: "tags" }, ...tags)] : []),
    actions,
    panel,
  );
  edit.addEventListener("click", () => showEdit(li, link, panel));
  visits.addEventListener("click", () => toggleVisits(link, panel, visits));
  del.addEventListener("click", () => confirmDelete(li, link, actions));
}

function showEdit(li, link, panel) {
  const url = el("input", { type: "url", id: `url-${link.code}`, value: link.url, spellcheck: "false" });
  const title = el("input", { id: `title-${link.code}`, value: link.title || "", maxlength: "512" });
  const tags = el("input", { id: `tags-${link.code}`, value: (link.tags || []).join(", "), spellcheck: "false" });
  const expires = el("input", { type: "datetime-local", id: `exp-${link.code}`, value: localInput(link.expires_at) });
  const expiredUrl = el("input", { type: "url", id: `expired-${link.code}`, value: link.expired_url || "", spellcheck: "false" });
  const password = el("input", {
    type: "password", id: `pw-${link.code}`, autocomplete: "new-password",
    placeholder: link.protected ? "unchanged" : "none",
  });
  const removePassword = el("input", { type: "checkbox", id: `nopw-${link.code}` });
  const rules = el("textarea", { id: `rules-${link.code}`, rows: "4", spellcheck: "false" });
  rules.value = link.rules && link.rules.length ? JSON.stringify(link.rules, null, 1) : "";
  const error = el("p", { class: "error", role: "alert", hidden: "" });
  const save = el("button", { type: "submit", text: "Save" });
  const cancel = el("button", { type: "button", class: "secondary", text: "Cancel" });
  const form = el(
    "form",
    { class: "edit", novalidate: "" },
    el("label", { for: url.id, text: "Target URL" }), url,
    el("label", { for: title.id, text: "Title (empty: none)" }), title,
    el("label", { for: tags.id, text: "Tags, separated by commas" }), tags,
    el("label", { for: expires.id, text: "Expires (empty: never)" }), expires,
    el("label", { for: expiredUrl.id, text: "Once expired, go to (empty: the domain's page, or 410)" }), expiredUrl,
    el("label", { for: password.id, text: link.protected ? "New password" : "Password (empty: none)" }), password,
    ...(link.protected
      ? [el("label", { for: removePassword.id, class: "check" }, removePassword, "Remove the password")]
      : []),
    el("label", { for: rules.id, text: "Rules, as JSON (empty: none)" }), rules,
    el("div", { class: "actions" }, save, cancel),
    error,
  );
  panel.replaceChildren(form);
  url.focus();
  cancel.addEventListener("click", () => panel.replaceChildren());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { url: url.value.trim() };
    body.title = title.value.trim() || null;
    body.tags = tags.value.split(",").map((t) => t.trim()).filter((t) => t);
    body.expires_at = expires.value ? new Date(expires.value).toISOString() : null;
    body.expired_url = expiredUrl.value.trim() || null;
    if (removePassword.checked) body.password = null;
    else if (password.value) body.password = password.value;
    try {
      body.rules = rules.value.trim() ? JSON.parse(rules.value) : null;
    } catch (e) {
      error.textContent = `The rules are not JSON: ${e.message}`;
      error.hidden = false;
      return;
    }
    save.disabled = true;
    try {
      const updated = await api("PATCH", linkPath(link), body);
      fill(li, updated);
      status(`Saved ${updated.code}.`);
      showTags();
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      save.disabled = false;
    }
  });
}

function confirmDelete(li, link, actions) {
  const yes = el("button", { type: "button", class: "danger", text: "Yes, delete" });
  const no = el("button", { type: "button", class: "secondary", text: "Keep it" });
  const ask = el("div", { class: "actions", role: "group", "aria-label": "Confirm delete" },
    el("span", { text: `Delete ${link.code}? Its visits go with it.` }), yes, no);
  actions.replaceWith(ask);
  no.focus();
  no.addEventListener("click", () => fill(li, link));
  yes.addEventListener("click", async () => {
    yes.disabled = true;
    try {
      await api("DELETE", linkPath(link));
      li.remove();
      status(`Deleted ${link.code}.`);
    } catch (e) {
      status(e.message);
      fill(li, link);
    }
  });
}

async function toggleVisits(link, panel, button) {
  if (button.getAttribute("aria-expanded") === "true") {
    button.setAttribute("aria-expanded", "false");
    panel.replaceChildren();
    return;
  }
  button.setAttribute("aria-expanded", "true");
  panel.replaceChildren(el("p", { class: "note", text: "Loading visits…" }));
  try {
    const report = await api("GET", linkPath(link, "/visits?interval=day"));
    panel.replaceChildren(visitsView(report));
  } catch (e) {
    panel.replaceChildren(el("p", { class: "error", role: "alert", text: e.message }));
  }
}

function visitsView(report) {
  const box = el("div", { class: "visits" });
  box.append(el("p", {
    class: "totals",
    text: `${report.total} visits: ${report.humans} by people, ${report.bots} by bots`,
  }));
  box.append(chart(report.series));
  box.append(el("div", { class: "legend" },
    el("span", {}, el("span", { class: "swatch human" }), "people"),
    el("span", {}, el("span", { class: "swatch bot" }), "bots")));
  const tops = [
    ["Countries", report.countries, (c) => c.country],
    ["Devices", report.devices, (d) => d.name],
    ["Systems", report.os, (o) => o.name],
    ["Browsers", report.browsers, (b) => b.name],
    ["Referrers", report.referrers, (r) => r.host],
  ];
  const grid = el("div", { class: "tops" });
  for (const [title, items, name] of tops) {
    if (items && items.length) grid.append(bars(title, items.map((i) => [name(i), i.count])));
  }
  if (grid.children.length) box.append(grid);
  if (report.agents.length) {
    box.append(el("p", {
      class: "meta",
      text: "Agents: " + report.agents.map((a) => `${a.class} ${a.count}`).join(", "),
    }));
  }
  return box;
}

// The largest values of one dimension as horizontal bars, scaled to the
// largest; at most TOP of them, as the report orders them.
const TOP = 10;

function bars(title, items) {
  const shown = items.slice(0, TOP);
  const row = 26;
  const width = 300;
  const labelWidth = 110;
  const countWidth = 44;
  const height = shown.length * row + 4;
  const max = Math.max(1, ...shown.map(([, n]) => n));
  const figure = el("figure", { class: "dim-chart", "data-dimension": title.toLowerCase() });
  figure.append(el("figcaption", { text: title }));
  const s = svg("svg", {
    class: "bars",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `${title}: ` + shown.map(([v, n]) => `${v} ${n}`).join(", "),
  });
  shown.forEach(([value, count], i) => {
    const y = i * row + 2;
    const g = svg("g", { class: "bar-row", "data-value": value, "data-count": count });
    const label = svg("text", { x: 0, y: y + row * 0.65 });
    label.textContent = value.length > 14 ? `${value.slice(0, 13)}…` : value;
    const span = width - labelWidth - countWidth;
    const fill = svg("rect", {
      class: "fill",
      x: labelWidth,
      y: y + 4,
      width: Math.max(1, (count / max) * span),
      height: row - 8,
    });
    const title = svg("title");
    title.textContent = `${value}: ${count}`;
    const n = svg("text", { class: "count", x: width - 2, y: y + row * 0.65, "text-anchor": "end" });
    n.textContent = String(count);
    g.append(title, label, fill, n);
    s.append(g);
  });
  figure.append(s);
  return figure;
}

// Bars per day, people below and bots above, scaled to the busiest day.
function chart(series) {
  const width = 600;
  const height = 200;
  const pad = 30;
  const s = svg("svg", {
    class: "chart",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `Visits per day, ${series.length} day${series.length === 1 ? "" : "s"} with visits`,
  });
  s.append(svg("line", { class: "axis", x1: pad, y1: height - pad, x2: width - 4, y2: height - pad }));
  const max = Math.max(1, ...series.map((p) => p.humans + p.bots));
  const slot = (width - pad - 4) / Math.max(series.length, 1);
  const bar = Math.max(2, Math.min(48, slot * 0.7));
  series.forEach((p, i) => {
    const x = pad + i * slot + (slot - bar) / 2;
    const scale = (height - 2 * pad) / max;
    const hh = p.humans * scale;
    const bh = p.bots * scale;
    const g = svg("g", { class: "day", "data-start": p.start, "data-humans": p.humans, "data-bots": p.bots });
    const title = svg("title");
    title.textContent = `${p.start.slice(0, 10)}: ${p.humans} by people, ${p.bots} by bots`;
    g.append(title);
    g.append(svg("rect", { class: "human", x, y: height - pad - hh, width: bar, height: hh }));
    g.append(svg("rect", { class: "bot", x, y: height - pad - hh - bh, width: bar, height: bh }));
    const label = svg("text", { x: x + bar / 2, y: height - 8, "text-anchor": "middle" });
    label.textContent = p.start.slice(5, 10);
    g.append(label);
    s.append(g);
  });
  const top = svg("text", { x: 2, y: pad });
  top.textContent = String(max);
  s.append(top);
  return s;
}

// Each load's number: an answer to a load that a newer one replaced (a
// search typed while the list was loading) is dropped, not appended.
let loads = 0;

async function load(reset) {
  const mine = ++loads;
  if (reset) {
    cursor = null;
    $("list").replaceChildren();
  }
  const params = new URLSearchParams({ limit: String(PAGE) });
  const q = $("q").value.trim();
  if (q) params.set("q", q);
  const domain = $("domain").value;
  if (domain) params.set("domain", domain);
  const tag = $("tag").value;
  if (tag) params.set("tag", tag);
  if (cursor) params.set("cursor", cursor);
  status("Loading…");
  try {
    const page = await api("GET", `/api/v1/links?${params}`);
    if (mine !== loads) return true;
    for (const link of page.links) $("list").append(render(link));
    cursor = page.next_cursor;
    $("more").hidden = !cursor;
    const n = $("list").children.length;
    status(n ? `${n} link${n === 1 ? "" : "s"} shown.` : "No links.");
    return true;
  } catch (e) {
    if (mine !== loads) return true;
    if (e.status === 401) {
      signedOut(e.message);
    } else {
      status(e.message);
    }
    return false;
  }
}

function showKeyError(message) {
  $("key-error").textContent = message;
  $("key-error").hidden = !message;
}

function forget() {
  sessionStorage.removeItem(KEY);
  account = null;
  $("manage").hidden = true;
  $("keys").hidden = true;
  $("key-form").hidden = false;
  $("sign-in-note").hidden = false;
  $("key").value = "";
}

// A 401: a typed key that stopped working, or a session that ended (then
// back to the sign-in page).
function signedOut(message) {
  const session = account && account.via === "session";
  forget();
  if (session || /sign in again/.test(message)) {
    location.assign("/login");
    return;
  }
  showKeyError(message);
}

async function showKeys() {
  try {
    const { keys } = await api("GET", "/api/v1/keys");
    const list = $("key-list");
    list.replaceChildren();
    for (const k of keys) {
      const li = el("li", { "data-key": k.name },
        el("div", { class: "url", text: k.name }),
        el("div", { class: "meta", text: `${k.role} · made ${when(k.created_at)} · last used ${when(k.last_used_at)}` +
          (k.revoked_at ? ` · revoked ${when(k.revoked_at)}` : "") }));
      if (!k.revoked_at) {
        const revoke = el("button", { type: "button", class: "secondary", text: "Revoke" });
        revoke.addEventListener("click", async () => {
          try {
            await api("DELETE", `/api/v1/keys/${encodeURIComponent(k.name)}`);
            await showKeys();
          } catch (e) {
            status(e.message);
          }
        });
        li.append(el("div", { class: "actions" }, revoke));
      }
      list.append(li);
    }
    $("keys").hidden = false;
  } catch {
    $("keys").hidden = true;
  }
}

async function newKey(event) {
  event.preventDefault();
  const name = $("key-name").value.trim();
  if (!name) return;
  try {
    const made = await api("POST", "/api/v1/keys", { name });
    $("new-secret").textContent = made.signature_token
      ? `Your new key (shown this once): ${made.secret}\nIts YOURLS API signature token (shown this once too): ${made.signature_token}`
      : `Your new key (shown this once): ${made.secret}`;
    $("new-secret").hidden = false;
    $("key-name").value = "";
    await showKeys();
  } catch (e) {
    $("new-secret").textContent = e.message;
    $("new-secret").hidden = false;
  }
}

async function useKey(event) {
  event.preventDefault();
  const value = $("key").value.trim();
  if (!value) {
    showKeyError("Enter an API key.");
    $("key").focus();
    return;
  }
  sessionStorage.setItem(KEY, value);
  await start();
}

// Whether the server has several domains: then each link names its own,
// and the list can be filtered by one.
let several = false;

async function showDomains() {
  try {
    // With the key: a domain-limited key sees its own domain only.
    const { domains } = await api("GET", "/api/v1/domains");
    several = Array.isArray(domains) && domains.length > 1;
    if (!several) return;
    const select = $("domain");
    select.replaceChildren(el("option", { value: "", text: "All domains" }));
    for (const d of domains) {
      select.append(el("option", { value: d.default ? "default" : d.host, text: d.host || "default" }));
    }
    $("domain-row").hidden = false;
  } catch {
    several = false;
  }
}

/// The tags of the links this person may manage, to filter by.
async function showTags() {
  try {
    const { tags } = await api("GET", "/api/v1/tags");
    const select = $("tag");
    const chosen = select.value;
    select.replaceChildren(el("option", { value: "", text: "All tags" }));
    for (const t of tags) {
      select.append(el("option", { value: t.tag, text: `${t.tag} (${t.links})` }));
    }
    select.value = tags.some((t) => t.tag === chosen) ? chosen : "";
    $("tag-row").hidden = tags.length === 0;
  } catch {
    $("tag-row").hidden = true;
  }
}

function filterByTag(tag) {
  const select = $("tag");
  if (![...select.options].some((o) => o.value === tag)) {
    select.append(el("option", { value: tag, text: tag }));
  }
  select.value = tag;
  $("tag-row").hidden = false;
  load(true);
}

async function start() {
  try {
    account = await api("GET", "/api/v1/account");
  } catch (e) {
    if (e.status === 401) {
      signedOut(e.message);
      return;
    }
    account = null;
  }
  const session = account && account.via === "session";
  $("who").textContent = account ? `${session ? "Signed in as" : "Key of"} ${account.name} (${account.role})` : "";
  $("who").hidden = !account;
  $("forget").hidden = session;
  $("sign-out-form").hidden = !session;
  $("sign-in-note").hidden = true;
  await showDomains();
  await showTags();
  showKeyError("");
  $("key-form").hidden = true;
  $("manage").hidden = false;
  if (session) await showKeys();
  if (!(await load(true))) {
    $("key").focus();
  } else {
    $("q").focus();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", useKey);
  $("forget").addEventListener("click", () => {
    forget();
    $("key").focus();
  });
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    load(true);
  });
  $("more").addEventListener("click", () => load(false));
  $("domain").addEventListener("change", () => load(true));
  $("tag").addEventListener("change", () => load(true));
  $("new-key").addEventListener("submit", newKey);
  if (key()) {
    start();
  } else {
    // Signed in? The session cookie answers for itself.
    api("GET", "/api/v1/account").then((who) => {
      if (who && who.via === "session") start();
    }, (e) => {
      // A session that ended: back to the sign-in page.
      if (e.status === 401 && /sign in again/.test(e.message)) location.assign("/login");
    });
  }
});
