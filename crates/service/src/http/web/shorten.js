// The shorten page: POST /api/v1/links (on the domain picked, when the
// server has several), then the short URL, a copy button, its QR code,
// and the links made in this browser (localStorage).
"use strict";

const STORE = "litelink.links";
const KEEP = 50;

const $ = (id) => document.getElementById(id);

function remembered() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE) || "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

function remember(link) {
  const list = remembered().filter((l) => l.code !== link.code || l.domain !== link.domain);
  list.unshift({
    code: link.code,
    domain: link.domain,
    short_url: link.short_url,
    url: link.url,
    created_at: link.created_at,
  });
  try {
    localStorage.setItem(STORE, JSON.stringify(list.slice(0, KEEP)));
  } catch {
    // Storage full or disabled: the list is a convenience only.
  }
}

function shortUrl(link) {
  return link.short_url || `${location.origin}/${link.code}`;
}

function showHistory() {
  const list = remembered();
  const ul = $("history");
  ul.replaceChildren();
  $("none").hidden = list.length > 0;
  for (const link of list) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.className = "short";
    a.href = shortUrl(link);
    a.textContent = shortUrl(link);
    const url = document.createElement("div");
    url.className = "url";
    url.textContent = link.url;
    li.append(a, url);
    ul.append(li);
  }
}

function showError(message) {
  const p = $("url-error");
  p.textContent = message;
  p.hidden = !message;
  $("url").setAttribute("aria-invalid", message ? "true" : "false");
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") {
      return body.error;
    }
  } catch {
    // Not JSON: fall through to the status.
  }
  if (response.status === 429) {
    return "Too many links made from here just now; try again in a moment.";
  }
  return `The server answered ${response.status}.`;
}

async function shorten(event) {
  event.preventDefault();
  const url = $("url").value.trim();
  if (!url) {
    showError("Enter the URL to shorten.");
    $("url").focus();
    return;
  }
  showError("");
  $("go").disabled = true;
  try {
    const body = { url };
    if (!$("domain-row").hidden && $("domain").value) body.domain = $("domain").value;
    const response = await fetch("/api/v1/links", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      showError(await errorText(response));
      $("url").focus();
      return;
    }
    const link = await response.json();
    remember(link);
    showResult(link);
    showHistory();
  } catch {
    showError("The server could not be reached.");
  } finally {
    $("go").disabled = false;
  }
}

function showResult(link) {
  $("short").value = shortUrl(link);
  $("target").textContent = link.url;
  const on = link.domain ? `?domain=${encodeURIComponent(link.domain)}` : "";
  $("qr").src = `/${encodeURIComponent(link.code)}/qr.svg${on}`;
  $("copied").textContent = "";
  $("result").hidden = false;
  $("short").focus();
  $("short").select();
}

async function copy() {
  const text = $("short").value;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    $("short").select();
    document.execCommand("copy");
  }
  $("copied").textContent = "Copied to the clipboard.";
}

// The picker, when the server has more than one domain: the default one
// first and chosen.
async function showDomains() {
  try {
    const response = await fetch("/api/v1/domains");
    if (!response.ok) return;
    const { domains } = await response.json();
    if (!Array.isArray(domains) || domains.length < 2) return;
    const select = $("domain");
    for (const d of domains) {
      const option = document.createElement("option");
      option.value = d.default ? "default" : d.host;
      option.textContent = d.host || location.host;
      option.selected = d.default;
      select.append(option);
    }
    $("domain-row").hidden = false;
  } catch {
    // No picker: links go to the default domain.
  }
}

document.addEventListener("DOMContentLoaded", () => {
  showDomains();
  $("shorten").addEventListener("submit", shorten);
  $("copy").addEventListener("click", copy);
  showHistory();
});
