// litelink's web page in a real browser: Debian's chromium, headless,
// driven by playwright-core, against a real litelink on a free port and a
// small local target server. Run by scripts/test; LITELINK_BIN names the
// binary, LITELINK_SCREENSHOTS a directory to write the README's
// screenshots to.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import jsQR from "jsqr";
import { chromium } from "playwright-core";
import { PNG } from "pngjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.LITELINK_BIN ?? path.resolve(here, "../../target/debug/litelink");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = process.env.LITELINK_SCREENSHOTS;
// The flags this machine's closed network needs (no background fetches).
const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let dir;
let litelink;
let base;
let key;
let targetServer;
let targetBase;
let browser;

function startLitelink(db, extra = []) {
  return new Promise((resolve, reject) => {
    // Loopback is the trusted proxy, so that visits can come "from" the
    // addresses the charts test forwards.
    const listen = extra.includes("--listen") ? [] : ["--listen", "127.0.0.1:0"];
    const args = ["serve", ...listen, "--db", db, "--trust-proxy", "127.0.0.1", ...extra];
    const proc = spawn(BIN, args, {
      env: { ...process.env, RUST_LOG: "warn" },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const timer = setTimeout(() => reject(new Error("litelink did not start in 20 s")), 20_000);
    let seen = "";
    proc.stdout.on("data", (chunk) => {
      seen += chunk;
      const m = seen.match(/litelink listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, base: m[1] });
      }
    });
    proc.on("exit", (code) => reject(new Error(`litelink exited with ${code}`)));
  });
}

/// What the target site was sent: method, path and body of each request.
const targetSeen = [];

function startTarget() {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        targetSeen.push({ method: req.method, url: req.url, body });
        res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
        res.end(`<!doctype html><title>target</title><p id="where">target ${req.url}</p>`);
      });
    });
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/// `/stats`, read with the admin key (a key exists, so it needs one).
async function stats() {
  const r = await fetch(`${base}/stats`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(r.status, 200, "/stats with the admin key");
  return r.json();
}

/// The number of links, which must be a number.
async function linkCount() {
  const links = (await stats()).links;
  assert.equal(typeof links, "number", `links is ${links}`);
  return links;
}

async function newPage(options = {}) {
  const context = await browser.newContext(options);
  return context.newPage();
}

/// Shortens `url` on the page as a person would: type, press Enter.
async function shorten(page, url) {
  await page.goto(`${base}/`);
  await page.getByLabel("Long URL").fill(url);
  await page.keyboard.press("Enter");
  await page.locator("#result").waitFor({ state: "visible" });
  return page.locator("#short").inputValue();
}

function codeOf(short) {
  return new URL(short).pathname.slice(1);
}

async function noHorizontalOverflow(page) {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "litelink-web-"));
  const db = path.join(dir, "web.db");
  key = execFileSync(BIN, ["keys", "create", "--name", "admin", "--admin", "--db", db], {
    encoding: "utf8",
  }).split("\n")[0].trim();
  ({ proc: litelink, base } = await startLitelink(db));
  targetServer = await startTarget();
  targetBase = `http://127.0.0.1:${targetServer.address().port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
});

after(async () => {
  await browser?.close();
  targetServer?.close();
  litelink?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("shorten a URL, see the short URL, follow it to the target", async (t) => {
  const page = await newPage({ permissions: ["clipboard-read", "clipboard-write"] });
  const target = `${targetBase}/landing?x=1`;
  const short = await shorten(page, target);
  assert.match(short, new RegExp(`^${base}/[A-Za-z0-9]{10}$`));
  assert.equal(await page.locator("#target").textContent(), target);

  await page.getByRole("button", { name: "Copy" }).click();
  await page.locator("#copied").filter({ hasText: "Copied" }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), short);

  // The link is listed, and still is after a reload (localStorage).
  await page.reload();
  assert.equal(await page.locator("#history a").first().textContent(), short);

  const timing = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const bytes = performance
      .getEntriesByType("resource")
      .reduce((sum, r) => sum + r.transferSize, nav.transferSize);
    return { ms: nav.loadEventEnd - nav.startTime, bytes };
  });
  t.diagnostic(`page loaded in ${timing.ms.toFixed(1)} ms, ${timing.bytes} bytes transferred`);

  await page.goto(short);
  assert.equal(page.url(), target);
  assert.equal(await page.locator("#where").textContent(), "target /landing?x=1");
  await page.context().close();
});

test("the QR code decodes to the short URL", async () => {
  const page = await newPage();
  const short = await shorten(page, `${targetBase}/qr`);
  await page.waitForFunction(() => {
    const img = document.getElementById("qr");
    return img.complete && img.naturalWidth > 0;
  });
  const shot = PNG.sync.read(await page.locator("#qr").screenshot());
  const found = jsQR(new Uint8ClampedArray(shot.data), shot.width, shot.height);
  assert.equal(found?.data, short);

  // The PNG form, at an exact size, decodes too; sizes outside 64-2048 are 400.
  const png = await fetch(`${base}/${codeOf(short)}/qr.png?size=300`);
  assert.equal(png.headers.get("content-type"), "image/png");
  const image = PNG.sync.read(Buffer.from(await png.arrayBuffer()));
  assert.equal(image.width, 300);
  assert.equal(jsQR(new Uint8ClampedArray(image.data), 300, 300)?.data, short);
  assert.equal((await fetch(`${base}/${codeOf(short)}/qr.png?size=63`)).status, 400);
  assert.equal((await fetch(`${base}/NoSuchCode1/qr.svg`)).status, 404);
  await page.context().close();
});

test("an invalid URL shows the error and creates nothing", async () => {
  const page = await newPage();
  await page.goto(`${base}/`);
  const before = await linkCount();
  await page.getByLabel("Long URL").fill("not a url");
  await page.keyboard.press("Enter");
  const error = page.locator("#url-error");
  await error.waitFor({ state: "visible" });
  assert.match(await error.textContent(), /url/i);
  assert.equal(await page.locator("#result").isVisible(), false);
  await page.getByLabel("Long URL").fill("");
  await page.keyboard.press("Enter");
  assert.equal(await error.textContent(), "Enter the URL to shorten.");
  assert.equal(await linkCount(), before);
  await page.context().close();
});

test("with a key: list, visits chart, edit and delete", async () => {
  const page = await newPage();
  const short = await shorten(page, `${targetBase}/managed`);
  const code = codeOf(short);
  for (let i = 0; i < 3; i++) {
    await page.goto(short);
    assert.equal(page.url(), `${targetBase}/managed`);
  }

  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  const item = page.locator(`li[data-code="${code}"]`);
  await item.waitFor();
  assert.match(await item.locator(".meta").textContent(), /^3 visits/);

  // The chart: the three visits, people and bots apart (a headless
  // browser may well be a bot).
  await item.getByRole("button", { name: "Visits" }).click();
  const day = item.locator(".chart g.day");
  await day.first().waitFor();
  const drawn = await day.evaluateAll((gs) =>
    gs.reduce((n, g) => n + Number(g.dataset.humans) + Number(g.dataset.bots), 0),
  );
  assert.equal(drawn, 3);
  assert.match(await item.locator(".totals").textContent(), /^3 visits/);

  // Edit: the next redirect goes to the new target.
  await item.getByRole("button", { name: "Edit" }).click();
  await item.getByLabel("Target URL").fill(`${targetBase}/moved`);
  await item.getByLabel("Target URL").press("Enter");
  await item.locator(".url").filter({ hasText: `${targetBase}/moved` }).waitFor();
  const moved = await fetch(short, { redirect: "manual" });
  assert.equal(moved.headers.get("location"), `${targetBase}/moved`);

  // Delete, after a confirmation: then the short URL is 404.
  await item.getByRole("button", { name: "Delete" }).click();
  await item.getByRole("button", { name: "Yes, delete" }).click();
  await item.waitFor({ state: "detached" });
  assert.equal((await fetch(short, { redirect: "manual" })).status, 404);

  // Search narrows the list.
  const other = await shorten(page, `${targetBase}/findable-${Date.now()}`);
  await page.goto(`${base}/manage`);
  await page.getByLabel("Search URLs, titles and codes").fill("findable");
  await page.keyboard.press("Enter");
  await page.locator(`li[data-code="${codeOf(other)}"]`).waitFor();
  await page.getByText(/^1 link shown/).waitFor();
  await page.context().close();
});

test("titles and tags: shown, edited, and a tag filters the list", async () => {
  const stamp = Date.now();
  const made = async (body) => {
    const r = await fetch(`${base}/api/v1/links`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    assert.equal(r.status, 201);
    return (await r.json()).code;
  };
  const tag = `Launch-${stamp}`;
  const titled = await made({ url: `${targetBase}/titled`, title: `Spring <b>sale</b> ${stamp}`, tags: [tag, "web"] });
  const other = await made({ url: `${targetBase}/other`, tags: [tag.toLowerCase()] });
  const untagged = await made({ url: `${targetBase}/untagged` });

  const page = await newPage();
  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  const item = page.locator(`li[data-code="${titled}"]`);
  await item.waitFor();
  // The title is text, never markup; each tag is shown as first written.
  assert.equal(await item.locator(".title").textContent(), `Spring <b>sale</b> ${stamp}`);
  assert.deepEqual(await item.locator(".tags .tag").allTextContents(), [tag, "web"]);
  assert.deepEqual(await page.locator(`li[data-code="${other}"] .tag`).allTextContents(), [tag]);

  // A tag filters the list: the links with it, and no other.
  await item.getByRole("button", { name: tag }).click();
  await page.locator(`li[data-code="${untagged}"]`).waitFor({ state: "detached" });
  await page.locator(`li[data-code="${other}"]`).waitFor();
  assert.equal(await page.locator("#list > li").count(), 2);
  assert.equal(await page.getByLabel("Tag").inputValue(), tag);
  await page.getByLabel("Tag").selectOption("");
  await page.locator(`li[data-code="${untagged}"]`).waitFor();

  // Edit: a new title, and the tags replaced.
  await item.getByRole("button", { name: "Edit" }).click();
  await item.getByLabel("Title (empty: none)").fill(`Summer ${stamp}`);
  await item.getByLabel("Tags, separated by commas").fill("summer, Web");
  await item.getByRole("button", { name: "Save" }).click();
  await item.locator(".title").filter({ hasText: `Summer ${stamp}` }).waitFor();
  const saved = await (await fetch(`${base}/api/v1/links/${titled}`, { headers: { authorization: `Bearer ${key}` } })).json();
  assert.equal(saved.title, `Summer ${stamp}`);
  assert.deepEqual(saved.tags, ["summer", "web"]);
  // The search reads titles too.
  await page.getByLabel("Search URLs, titles and codes").fill(`summer ${stamp}`);
  await page.keyboard.press("Enter");
  await page.getByText(/^1 link shown/).waitFor();
  await page.context().close();
});

test("the keyboard alone shortens and copies", async () => {
  const page = await newPage({ permissions: ["clipboard-read", "clipboard-write"] });
  await page.goto(`${base}/`);
  // Tab from the top of the page reaches the URL field within a few steps.
  for (let i = 0; i < 5; i++) {
    await page.keyboard.press("Tab");
    if (await page.evaluate(() => document.activeElement?.id === "url")) break;
  }
  assert.equal(await page.evaluate(() => document.activeElement?.id), "url");
  await page.keyboard.type(`${targetBase}/typed`);
  await page.keyboard.press("Enter");
  await page.locator("#result").waitFor({ state: "visible" });
  // The short URL has the focus; the copy button is the next stop.
  assert.equal(await page.evaluate(() => document.activeElement?.id), "short");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.id), "copy");
  await page.keyboard.press("Enter");
  await page.locator("#copied").filter({ hasText: "Copied" }).waitFor();
  // Every field has a label.
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll("input")].filter((i) => !i.labels?.length && !i.getAttribute("aria-label")).length,
  );
  assert.equal(unlabelled, 0);
  await page.context().close();
});

test("the page follows the system's dark scheme", async () => {
  const background = async (colorScheme) => {
    const page = await newPage({ colorScheme });
    await page.goto(`${base}/`);
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.context().close();
    return bg;
  };
  assert.equal(await background("light"), "rgb(255, 255, 255)");
  assert.equal(await background("dark"), "rgb(16, 20, 24)");
});

test("at 375 px wide nothing overflows", async () => {
  const page = await newPage({ viewport: { width: 375, height: 812 }, isMobile: true });
  await shorten(page, `${targetBase}/${"a-rather-long-path-segment/".repeat(8)}?q=${"x".repeat(80)}`);
  assert.ok(await noHorizontalOverflow(page), "the shorten page overflows");
  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  const first = page.locator("#list > li").first();
  await first.waitFor();
  await first.getByRole("button", { name: "Visits" }).click();
  await first.locator(".visits").waitFor();
  assert.ok(await noHorizontalOverflow(page), "the manage page overflows");
  await page.context().close();
});

/// Creates a link through the API with the admin key.
async function createLink(body) {
  const r = await fetch(`${base}/api/v1/links`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 201, JSON.stringify(body));
  return r.json();
}

test("a link behind a password: a wrong one shows the form again, the right one lands", async () => {
  const link = await createLink({ url: `${targetBase}/behind`, password: "open sesame" });
  const page = await newPage();
  const first = await page.goto(link.short_url);
  assert.equal(first.status(), 401);
  assert.equal(await page.locator("#password-error").isVisible(), false);
  assert.equal(await page.locator("body").textContent().then((t) => t.includes("/behind")), false);

  await page.getByLabel("Password").fill("guess");
  await page.getByRole("button", { name: "Open" }).click();
  const error = page.locator("#password-error");
  await error.waitFor({ state: "visible" });
  assert.match(await error.textContent(), /not the password/);
  assert.equal(page.url(), link.short_url);

  await page.getByLabel("Password").fill("open sesame");
  await page.getByRole("button", { name: "Open" }).click();
  await page.waitForURL(`${targetBase}/behind`);
  assert.equal(await page.locator("#where").textContent(), "target /behind");
  await page.context().close();
});

test("under a 307 or 308 redirect status the right password reaches the target as a GET with no body", async () => {
  for (const status of ["307", "308"]) {
    const db = path.join(dir, `status-${status}.db`);
    const admin = execFileSync(BIN, ["keys", "create", "--name", "admin", "--admin", "--db", db], {
      encoding: "utf8",
    }).split("\n")[0].trim();
    const { proc, base: other } = await startLitelink(db, ["--redirect-status", status]);
    try {
      const r = await fetch(`${other}/api/v1/links`, {
        method: "POST",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
        body: JSON.stringify({ url: `${targetBase}/after-${status}`, password: "open sesame" }),
      });
      assert.equal(r.status, 201);
      const link = await r.json();
      // A plain visit keeps the server's status.
      const plain = await fetch(link.short_url, {
        redirect: "manual",
        headers: { "x-link-password": "open sesame" },
      });
      assert.equal(plain.status, Number(status));
      const page = await newPage();
      await page.goto(link.short_url);
      await page.getByLabel("Password").fill("open sesame");
      await page.getByRole("button", { name: "Open" }).click();
      await page.waitForURL(`${targetBase}/after-${status}`);
      const seen = targetSeen.filter((s) => s.url === `/after-${status}`);
      assert.deepEqual(seen, [{ method: "GET", url: `/after-${status}`, body: "" }], status);
      await page.context().close();
    } finally {
      proc.kill("SIGTERM");
    }
  }
});

test("the manage view sets and clears a password and a rule", async () => {
  const link = await createLink({ url: `${targetBase}/ruled` });
  const page = await newPage();
  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  const item = page.locator(`li[data-code="${link.code}"]`);
  await item.waitFor();

  await item.getByRole("button", { name: "Edit" }).click();
  await item.getByLabel("Password (empty: none)").fill("pw-1");
  const rules = [{ if: { query: { v: "b" } }, url: `${targetBase}/b` }];
  await item.getByLabel("Rules, as JSON (empty: none)").fill(JSON.stringify(rules));
  await item.getByRole("button", { name: "Save" }).click();
  await item.locator(".meta").filter({ hasText: "password" }).waitFor();
  assert.match(await item.locator(".meta").textContent(), /1 rule/);
  assert.equal((await fetch(link.short_url, { redirect: "manual" })).status, 401);
  const b = await fetch(`${link.short_url}?v=b`, { redirect: "manual", headers: { "x-link-password": "pw-1" } });
  assert.equal(b.headers.get("location"), `${targetBase}/b`);

  // A rule that is not JSON is refused in the page, one the server
  // refuses shows its message.
  await item.getByRole("button", { name: "Edit" }).click();
  const box = item.getByLabel("Rules, as JSON (empty: none)");
  await box.fill("[{");
  await item.getByRole("button", { name: "Save" }).click();
  await item.locator(".edit .error").filter({ hasText: "not JSON" }).waitFor();
  await box.fill(JSON.stringify([{ if: { device: "watch" }, url: `${targetBase}/w` }]));
  await item.getByRole("button", { name: "Save" }).click();
  await item.locator(".edit .error").filter({ hasText: "rules[0].if.device" }).waitFor();

  // Cleared: the password removed, the rules emptied.
  await item.getByLabel("Remove the password").check();
  await box.fill("");
  await item.getByRole("button", { name: "Save" }).click();
  await item.locator(".meta").filter({ hasNotText: "password" }).waitFor();
  assert.doesNotMatch(await item.locator(".meta").textContent(), /rule/);
  const plain = await fetch(`${link.short_url}?v=b`, { redirect: "manual" });
  assert.equal(plain.headers.get("location"), `${targetBase}/ruled`);
  await page.context().close();
});

test("the manage view charts countries, devices, systems, browsers and referrers", async () => {
  const page = await newPage({ viewport: { width: 1000, height: 900 } });
  const short = await shorten(page, `${targetBase}/charted`);
  const iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
  const windows = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
  const mac = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.4; rv:125.0) Gecko/20100101 Firefox/125.0";
  // Google's resolver is in the US, Deutsche Telekom's in Germany.
  const visits = [
    [iphone, "8.8.8.8", "https://t.co/a", 3],
    [windows, "194.25.0.60", "https://news.example.com/", 5],
    [mac, "194.25.0.60", "", 2],
  ];
  for (const [ua, from, referer, n] of visits) {
    for (let i = 0; i < n; i++) {
      const headers = { "user-agent": ua, "x-forwarded-for": from };
      if (referer) headers.referer = referer;
      const r = await fetch(short, { headers, redirect: "manual" });
      assert.equal(r.status, 302);
    }
  }
  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  await page.getByLabel("Search URLs, titles and codes").fill("charted");
  await page.keyboard.press("Enter");
  const item = page.locator(`li[data-code="${codeOf(short)}"]`);
  await item.getByRole("button", { name: "Visits" }).click();
  const drawn = async (dimension) => {
    const rows = item.locator(`figure[data-dimension="${dimension}"] g.bar-row`);
    await rows.first().waitFor();
    return rows.evaluateAll((gs) =>
      Object.fromEntries(gs.map((g) => [g.dataset.value, Number(g.dataset.count)])),
    );
  };
  assert.deepEqual(await drawn("countries"), { DE: 7, US: 3 });
  assert.deepEqual(await drawn("devices"), { desktop: 7, mobile: 3 });
  assert.deepEqual(await drawn("systems"), { Windows: 5, iOS: 3, macOS: 2 });
  assert.deepEqual(await drawn("browsers"), { Chrome: 5, Safari: 3, Firefox: 2 });
  assert.deepEqual(await drawn("referrers"), { "news.example.com": 5, "t.co": 3, "(direct)": 2 });
  // The largest value's bar is the longest.
  const widths = await item
    .locator('figure[data-dimension="countries"] rect.fill')
    .evaluateAll((rs) => rs.map((r) => Number(r.getAttribute("width"))));
  assert.ok(widths[0] > widths[1], `${widths}`);
  assert.ok(await noHorizontalOverflow(page), "the charts overflow");
  if (SHOTS) await item.locator(".visits").screenshot({ path: path.join(SHOTS, "web-charts.png") });
  await page.context().close();
});

test("screenshots for the README", { skip: !SHOTS }, async () => {
  const page = await newPage({ viewport: { width: 1100, height: 760 } });
  const short = await shorten(page, "https://example.com/2027/spring/catalogue?campaign=newsletter");
  await page.screenshot({ path: path.join(SHOTS, "web-desktop.png") });
  await page.context().close();

  // The phone: that link's visits, from a few kinds of visitor.
  const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36";
  const iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1";
  const bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
  for (const [ua, referer, n] of [[chrome, "https://news.example.com/", 7], [iphone, "https://t.co/x", 4], [bot, "", 2]]) {
    for (let i = 0; i < n; i++) {
      const headers = { "user-agent": ua };
      if (referer) headers.referer = referer;
      await fetch(short, { headers, redirect: "manual" });
    }
  }
  const phone = await newPage({ viewport: { width: 375, height: 812 }, isMobile: true });
  await phone.goto(`${base}/manage`);
  await phone.getByLabel("API key").fill(key);
  await phone.keyboard.press("Enter");
  await phone.getByLabel("Search URLs, titles and codes").fill("catalogue");
  await phone.keyboard.press("Enter");
  const item = phone.locator(`li[data-code="${codeOf(short)}"]`);
  await item.getByRole("button", { name: "Visits" }).click();
  await item.locator(".chart g.day").first().waitFor();
  await phone.screenshot({ path: path.join(SHOTS, "web-phone.png") });
  await phone.context().close();
});

/// A redirect's answer for `path` on the short domain `host` (Node's
/// client, which sends the Host it is told to).
function onHost(host, path, at = base) {
  const url = new URL(at);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path, headers: { host } },
      (res) => {
        res.resume();
        resolve({ status: res.statusCode, location: res.headers.location });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

// A server of its own: a second domain gives every page a picker, which
// no other test may meet, whatever order the tests run in.
test("with two domains: the picker, the domain's QR code, and the manage filter", async (t) => {
  const db = path.join(dir, "two-domains.db");
  const key = execFileSync(BIN, ["keys", "create", "--name", "admin", "--admin", "--db", db], {
    encoding: "utf8",
  }).split("\n")[0].trim();
  const { proc, base } = await startLitelink(db);
  t.after(() => proc.kill("SIGTERM"));
  const onHere = (host, p) => onHost(host, p, base);
  const added = await fetch(`${base}/api/v1/domains`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ host: "short.test" }),
  });
  assert.equal(added.status, 201);

  const page = await newPage();
  await page.goto(`${base}/`);
  const picker = page.getByLabel("Domain");
  await picker.waitFor({ state: "visible" });
  assert.deepEqual(
    await picker.locator("option").allTextContents(),
    [new URL(base).host, "short.test"],
  );
  await picker.selectOption("short.test");
  await page.getByLabel("Long URL").fill(`${targetBase}/on-short-test`);
  await page.keyboard.press("Enter");
  await page.locator("#result").waitFor({ state: "visible" });
  const short = await page.locator("#short").inputValue();
  assert.match(short, /^https:\/\/short\.test\/[A-Za-z0-9]{10}$/);
  const code = codeOf(short);
  assert.deepEqual(await onHere("short.test", `/${code}`), {
    status: 302,
    location: `${targetBase}/on-short-test`,
  });
  assert.equal((await onHere(new URL(base).host, `/${code}`)).status, 404);
  await page.waitForFunction(() => {
    const img = document.getElementById("qr");
    return img.complete && img.naturalWidth > 0;
  });
  const shot = PNG.sync.read(await page.locator("#qr").screenshot());
  assert.equal(jsQR(new Uint8ClampedArray(shot.data), shot.width, shot.height)?.data, short);

  // The manage view names the domain, filters by it, and deletes there.
  await page.goto(`${base}/manage`);
  await page.getByLabel("API key").fill(key);
  await page.keyboard.press("Enter");
  const filter = page.getByLabel("Domain");
  await filter.waitFor({ state: "visible" });
  await filter.selectOption("short.test");
  const item = page.locator(`li[data-code="${code}"][data-domain="short.test"]`);
  await item.waitFor();
  await page.getByText(/^1 link shown/).waitFor();
  assert.match(await item.locator(".meta").textContent(), /on short\.test/);
  await item.getByRole("button", { name: "Delete" }).click();
  await item.getByRole("button", { name: "Yes, delete" }).click();
  await item.waitFor({ state: "detached" });
  assert.equal((await onHere("short.test", `/${code}`)).status, 404);
  await page.context().close();
});

/// A free loopback port: the signed-in tests need the public URL (and so
/// the port) before litelink starts.
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/// Makes a user with `litelink users create` and signs them in on a new
/// page, changing the one-time password on the way.
async function signIn(at, db, name, role) {
  const once = execFileSync(BIN, ["users", "create", "--name", name, "--role", role, "--db", db], {
    encoding: "utf8",
  }).trim();
  const page = await newPage();
  await page.goto(`${at}/login`);
  await page.getByLabel("Name").fill(name);
  await page.getByLabel("Password").fill(once);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${at}/account/password`);
  await page.getByLabel("Current password").fill(once);
  await page.getByLabel(/New password/).fill(`${name} has a long password`);
  await page.getByRole("button", { name: "Change" }).click();
  await page.waitForURL(`${at}/manage`);
  await page.locator("#who").waitFor({ state: "visible" });
  return page;
}

test("signed in: a member's links, a viewer's view, sign-out and an ended session", async () => {
  const port = await freePort();
  const at = `http://127.0.0.1:${port}`;
  const db = path.join(dir, "accounts.db");
  const admin = execFileSync(BIN, ["keys", "create", "--name", "boss", "--admin", "--db", db], {
    encoding: "utf8",
  }).split("\n")[0].trim();
  const { proc } = await startLitelink(db, ["--listen", `127.0.0.1:${port}`, "--public-url", at]);
  try {
    // A member signs in, creates a link from the page, sees it managed.
    const ann = await signIn(at, db, "ann", "member");
    assert.match(await ann.locator("#who").textContent(), /Signed in as ann \(member\)/);
    await ann.goto(`${at}/`);
    await ann.getByLabel("Long URL").fill("https://example.com/ann-from-the-page");
    await ann.keyboard.press("Enter");
    await ann.locator("#result").waitFor({ state: "visible" });
    const annCode = codeOf(await ann.locator("#short").inputValue());
    // Another member's link, made with a key.
    const bobKey = execFileSync(BIN, ["keys", "create", "--name", "bob", "--db", db], { encoding: "utf8" })
      .split("\n")[0].trim();
    const r = await fetch(`${at}/api/v1/links`, {
      method: "POST",
      headers: { authorization: `Bearer ${bobKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: "https://example.com/bobs" }),
    });
    assert.equal(r.status, 201);
    const bobCode = (await r.json()).code;
    await ann.goto(`${at}/manage`);
    await ann.locator(`li[data-code="${annCode}"]`).waitFor();
    assert.equal(await ann.locator(`li[data-code="${bobCode}"]`).count(), 0, "a member sees only their own");
    assert.equal(await ann.locator(`li[data-code="${annCode}"] button`, { hasText: "Edit" }).count(), 1);

    // A key made in the manage view works with the API.
    await ann.getByLabel("New key's name").fill("ann-script");
    await ann.getByRole("button", { name: "Make key" }).click();
    await ann.locator("#new-secret").waitFor({ state: "visible" });
    const secret = (await ann.locator("#new-secret").textContent()).match(/ll_\w+/)[0];
    const listed = await fetch(`${at}/api/v1/links`, { headers: { authorization: `Bearer ${secret}` } });
    assert.equal(listed.status, 200);
    assert.ok((await listed.json()).links.some((l) => l.code === annCode));

    // A viewer sees every link, with no buttons to change them, and the
    // API refuses a change made from the page.
    const val = await signIn(at, db, "val", "viewer");
    await val.locator(`li[data-code="${bobCode}"]`).waitFor();
    await val.locator(`li[data-code="${annCode}"]`).waitFor();
    assert.equal(await val.locator("#list button", { hasText: "Edit" }).count(), 0);
    assert.equal(await val.locator("#list button", { hasText: "Delete" }).count(), 0);
    const refused = await val.evaluate(async (code) => {
      const res = await fetch(`/api/v1/links/${code}`, { method: "DELETE" });
      return res.status;
    }, annCode);
    assert.equal(refused, 403);

    // Signing out ends the session: the old cookie is refused.
    const cookies = await ann.context().cookies();
    const session = cookies.find((c) => c.name === "litelink_session");
    assert.ok(session && session.httpOnly, "an HttpOnly session cookie");
    await ann.getByRole("button", { name: "Sign out" }).click();
    await ann.waitForURL(`${at}/login`);
    const old = await fetch(`${at}/api/v1/links`, { headers: { cookie: `litelink_session=${session.value}` } });
    assert.equal(old.status, 401);

    const users = await fetch(`${at}/api/v1/users`, { headers: { authorization: `Bearer ${admin}` } });
    assert.equal(users.status, 200, "the admin key still works");
  } finally {
    proc.kill("SIGTERM");
  }
});

test("an ended session sends the person back to sign in", async () => {
  const port = await freePort();
  const at = `http://127.0.0.1:${port}`;
  const db = path.join(dir, "idle.db");
  const { proc } = await startLitelink(db, ["--listen", `127.0.0.1:${port}`, "--public-url", at,
    "--session-idle", "2"]);
  try {
    const page = await signIn(at, db, "ida", "member");
    // Unused for longer than --session-idle.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    await page.goto(`${at}/manage`);
    await page.waitForURL(`${at}/login`);
  } finally {
    proc.kill("SIGTERM");
  }
});

/// `oidc-provider-mock` (scripts/provision-oidc) on a free port, with
/// `people` (subject -> claims) set up; stop it with `proc.kill()`.
async function startProvider(people) {
  const command = process.env.LITELINK_TEST_OIDC_PROVIDER;
  const port = await freePort();
  const proc = spawn(command, ["--host", "127.0.0.1", "--port", String(port), "--require-nonce", "true"], {
    stdio: "ignore",
  });
  const issuer = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const up = await fetch(`${issuer}/.well-known/openid-configuration`).then((r) => r.ok, () => false);
    if (up) break;
    if (i >= 300) throw new Error(`oidc-provider-mock did not answer on ${issuer} within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  for (const [sub, claims] of Object.entries(people)) {
    const r = await fetch(`${issuer}/users/${encodeURIComponent(sub)}`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(claims),
    });
    assert.equal(r.status, 204);
  }
  return { proc, issuer };
}

function oidcFlags(at, issuer) {
  return ["--public-url", at, "--oidc-issuer", issuer, "--oidc-client-id", "litelink-browser",
    "--oidc-client-secret", "a secret of the browser tests", "--oidc-role-claim", "groups",
    "--oidc-admin-values", "ops", "--oidc-member-values", "staff", "--oidc-viewer-values", "audit"];
}

/// Signs `sub` in as a person would: the sign-in page's link, the
/// provider's form, and back to the manage view.
async function signInThroughProvider(at, sub) {
  const page = await newPage();
  // The provider's page asks a CDN for its style sheet; this machine has no network.
  await page.route(/cdn\.jsdelivr\.net/, (route) => route.abort());
  await page.goto(`${at}/login`);
  await page.getByRole("link", { name: "Sign in with your identity provider" }).click();
  await page.getByLabel("Subject").fill(sub);
  await page.getByRole("button", { name: "Authorize", exact: true }).click();
  await page.waitForURL(`${at}/manage`);
  await page.locator("#who").waitFor({ state: "visible" });
  return page;
}

test("signed in through the identity provider: members, a viewer, sign-out and an expired session", {
  skip: !process.env.LITELINK_TEST_OIDC_PROVIDER && "no LITELINK_TEST_OIDC_PROVIDER (scripts/provision-oidc)",
}, async () => {
  const provider = await startProvider({
    "u-mia": { preferred_username: "mia", groups: ["staff"] },
    "u-noa": { preferred_username: "noa", groups: ["staff"] },
    "u-vic": { preferred_username: "vic", groups: ["audit"] },
  });
  const port = await freePort();
  const at = `http://127.0.0.1:${port}`;
  const db = path.join(dir, "oidc.db");
  const { proc } = await startLitelink(db, ["--listen", `127.0.0.1:${port}`, ...oidcFlags(at, provider.issuer)]);
  try {
    // A member signs in through the provider and creates a link from the page.
    const mia = await signInThroughProvider(at, "u-mia");
    assert.match(await mia.locator("#who").textContent(), /Signed in as mia \(member\)/);
    await mia.goto(`${at}/`);
    await mia.getByLabel("Long URL").fill("https://example.com/mia-from-the-page");
    await mia.keyboard.press("Enter");
    await mia.locator("#result").waitFor({ state: "visible" });
    const miaCode = codeOf(await mia.locator("#short").inputValue());
    await mia.goto(`${at}/manage`);
    await mia.locator(`li[data-code="${miaCode}"]`).waitFor();

    // Another member's link is not hers to see.
    const noa = await signInThroughProvider(at, "u-noa");
    await noa.goto(`${at}/`);
    await noa.getByLabel("Long URL").fill("https://example.com/noa-from-the-page");
    await noa.keyboard.press("Enter");
    await noa.locator("#result").waitFor({ state: "visible" });
    const noaCode = codeOf(await noa.locator("#short").inputValue());
    await mia.reload();
    await mia.locator(`li[data-code="${miaCode}"]`).waitFor();
    assert.equal(await mia.locator(`li[data-code="${noaCode}"]`).count(), 0, "a member sees only their own");

    // The viewer sees both, with no buttons to change them; the API refuses.
    const vic = await signInThroughProvider(at, "u-vic");
    assert.match(await vic.locator("#who").textContent(), /Signed in as vic \(viewer\)/);
    await vic.locator(`li[data-code="${miaCode}"]`).waitFor();
    await vic.locator(`li[data-code="${noaCode}"]`).waitFor();
    assert.equal(await vic.locator("#list button", { hasText: "Edit" }).count(), 0);
    assert.equal(await vic.locator("#list button", { hasText: "Delete" }).count(), 0);
    const refused = await vic.evaluate(async (code) => (await fetch(`/api/v1/links/${code}`, { method: "DELETE" })).status, miaCode);
    assert.equal(refused, 403);

    // Signing out ends the session; the old cookie is refused.
    const session = (await mia.context().cookies()).find((c) => c.name === "litelink_session");
    assert.ok(session && session.httpOnly, "an HttpOnly session cookie");
    await mia.getByRole("button", { name: "Sign out" }).click();
    await mia.waitForURL(`${at}/login`);
    const old = await fetch(`${at}/api/v1/links`, { headers: { cookie: `litelink_session=${session.value}` } });
    assert.equal(old.status, 401);
  } finally {
    proc.kill("SIGTERM");
  }

  // An expired session sends the person back to sign in.
  const idlePort = await freePort();
  const idleAt = `http://127.0.0.1:${idlePort}`;
  const idle = await startLitelink(path.join(dir, "oidc-idle.db"), ["--listen", `127.0.0.1:${idlePort}`,
    ...oidcFlags(idleAt, provider.issuer), "--session-idle", "2"]);
  try {
    const page = await signInThroughProvider(idleAt, "u-mia");
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    await page.goto(`${idleAt}/manage`);
    await page.waitForURL(`${idleAt}/login`);
  } finally {
    idle.proc.kill("SIGTERM");
    provider.proc.kill();
  }
});
