//! Visits: every redirect counted in memory and flushed; the report per
//! link; max_visits exact under concurrency; nothing lost to a graceful
//! stop, at most one flush interval to kill -9; deleted with the link.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, client, run_keys, spawn_app, spawn_app_in, spawn_app_like, spawn_app_on,
    spawn_process,
};

const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                      Chrome/126.0.0.0 Safari/537.36";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

async fn json(r: reqwest::Response) -> Value {
    r.json().await.expect("json body")
}

/// Creates a link through the management API; returns its code.
async fn create(app: &TestApp, key: &str, body: Value) -> String {
    let r = app
        .api(Method::POST, "/api/v1/links", Some(key), Some(body))
        .await;
    assert_eq!(r.status(), 201);
    json(r).await["code"].as_str().expect("code").to_owned()
}

async fn visit(app: &TestApp, code: &str, ua: Option<&str>, referer: Option<&str>) -> u16 {
    let mut r = app.client.get(app.url(&format!("/{code}")));
    if let Some(ua) = ua {
        r = r.header("user-agent", ua);
    }
    if let Some(referer) = referer {
        r = r.header("referer", referer);
    }
    r.send().await.expect("redirect").status().as_u16()
}

async fn link(app: &TestApp, key: &str, code: &str) -> Value {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    json(r).await
}

async fn report(app: &TestApp, key: &str, code: &str, query: &str) -> Value {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}/visits{query}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status(), 200, "visits{query}");
    json(r).await
}

/// Waits until the server has written `n` visits to the store.
async fn flushed(app: &TestApp, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = app.stats().await;
        if s["visits"]["flushed"].as_u64().expect("flushed") >= n {
            return;
        }
        assert!(Instant::now() < deadline, "visits never flushed: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hour_start(t: time::OffsetDateTime) -> String {
    let t = t.replace_minute(0).unwrap().replace_second(0).unwrap();
    let t = t.replace_nanosecond(0).unwrap();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

crate::on_both_stores! {
    async fn redirects_are_counted_by_class_referrer_and_hour(store: Store) {
    // A long interval: the figures below come from memory until the stop.
    let app = spawn_app_in(&store, &["--visits-flush-ms", "600000"]).await;
    let admin = app.new_key("admin", true).await;
    let code = create(&app, &admin, json!({ "url": "https://example.com/v" })).await;
    let before = time::OffsetDateTime::now_utc();
    for _ in 0..3 {
        let referer = Some("https://News.Example.com/story?id=1");
        assert_eq!(visit(&app, &code, Some(CHROME), referer).await, 302);
    }
    for _ in 0..2 {
        assert_eq!(visit(&app, &code, Some(GOOGLEBOT), None).await, 302);
    }
    let app_ua = "Dalvik/2.1.0 (Linux; U; Android 13; Pixel 7 Build/TQ3A.230805.001)";
    assert_eq!(visit(&app, &code, Some(app_ua), None).await, 302);
    // Neither HEAD nor the JSON read is a visit.
    for _ in 0..2 {
        let head = app.client.head(app.url(&format!("/{code}")));
        assert_eq!(head.send().await.unwrap().status(), 302);
        assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    }

    let expect_all = |r: &Value| {
        assert_eq!(r["total"], 6, "{r}");
        assert_eq!(r["humans"], 4, "{r}");
        assert_eq!(r["bots"], 2, "{r}");
        assert_eq!(
            r["referrers"],
            json!([
                { "host": "(direct)", "count": 3 },
                { "host": "news.example.com", "count": 3 },
            ]),
            "{r}"
        );
        assert_eq!(
            r["agents"],
            json!([
                { "class": "browser", "count": 3 },
                { "class": "bot", "count": 2 },
                { "class": "other", "count": 1 },
            ]),
            "{r}"
        );
    };
    let r = report(&app, &admin, &code, "").await;
    expect_all(&r);
    let series = r["series"].as_array().expect("series");
    let now = time::OffsetDateTime::now_utc();
    // One hour bucket (two if the hour turned during the test).
    let starts: Vec<String> = series
        .iter()
        .map(|p| p["start"].as_str().unwrap().to_owned())
        .collect();
    assert!(starts.contains(&hour_start(now)) || starts.contains(&hour_start(before)));
    let sum: u64 = series
        .iter()
        .map(|p| p["humans"].as_u64().unwrap() + p["bots"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 6);
    assert_eq!(link(&app, &admin, &code).await["visits"], 6);

    // Windows: around now, all of it; in the future, nothing.
    let fmt = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let hour = time::Duration::hours(1);
    let q = format!(
        "?from={}&to={}&interval=day",
        fmt(now - hour),
        fmt(now + hour)
    );
    let r = report(&app, &admin, &code, &q).await;
    expect_all(&r);
    let day = r["series"][0]["start"].as_str().unwrap().to_owned();
    assert!(day.ends_with("T00:00:00Z"), "{r}");
    let q = format!("?from={}", fmt(now + 3 * hour));
    let r = report(&app, &admin, &code, &q).await;
    assert_eq!(r["total"], 0, "{r}");
    assert_eq!(r["series"], json!([]), "{r}");

    // The counts outlive a graceful stop and a restart.
    let (db, pg) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;
    let app = spawn_app_like(&db, &pg, &[]).await;
    expect_all(&report(&app, &admin, &code, "").await);
    assert_eq!(link(&app, &admin, &code).await["visits"], 6);
    drop(app);
    drop(dir);
}
}

crate::on_both_stores! {
    async fn the_visits_report_checks_who_asks_and_what(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let alice = app.new_key("alice", false).await;
    let bob = app.new_key("bob", false).await;
    let code = create(&app, &alice, json!({ "url": "https://example.com/a" })).await;
    let path = format!("/api/v1/links/{code}/visits");
    assert_error(
        app.api(Method::GET, &path, None, None).await,
        401,
        "API key",
    )
    .await;
    assert_error(
        app.api(Method::GET, &path, Some(&bob), None).await,
        404,
        "no link",
    )
    .await;
    let missing = "/api/v1/links/NoSuchLink/visits";
    assert_error(
        app.api(Method::GET, missing, Some(&alice), None).await,
        404,
        "no link",
    )
    .await;
    for (query, needle) in [
        ("?from=yesterday", "from"),
        ("?to=2027-13-01T00:00:00Z", "to"),
        (
            "?from=2027-01-02T00:00:00Z&to=2027-01-01T00:00:00Z",
            "before",
        ),
        (
            "?from=2027-01-01T00:00:00Z&to=2027-01-01T00:00:00Z",
            "before",
        ),
        ("?interval=week", "interval"),
        ("?format=xml", "format"),
    ] {
        let r = app
            .api(Method::GET, &format!("{path}{query}"), Some(&alice), None)
            .await;
        assert_error(r, 400, needle).await;
    }
    let r = report(&app, &alice, &code, "?interval=day").await;
    assert_eq!(
        r,
        json!({ "total": 0, "imported_visits": 0, "humans": 0, "bots": 0, "series": [], "referrers": [], "agents": [],
                "countries": [], "cities": [], "devices": [], "os": [], "browsers": [],
                "rules": [] })
    );
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_visits_is_exact_under_concurrent_redirects() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("owner", false).await;
    let code = create(
        &app,
        &key,
        json!({ "url": "https://example.com/limited", "max_visits": 50 }),
    )
    .await;
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let c = client();
            let url = app.url(&format!("/{code}"));
            tokio::spawn(async move { c.get(url).send().await.expect("GET").status().as_u16() })
        })
        .collect();
    let mut found = 0;
    let mut gone = 0;
    for t in tasks {
        match t.await.expect("task") {
            302 => found += 1,
            410 => gone += 1,
            other => panic!("status {other}"),
        }
    }
    assert_eq!((found, gone), (50, 150));
    let l = link(&app, &key, &code).await;
    assert_eq!(l["visits"], 50, "{l}");
    assert_eq!(l["max_visits"], 50, "{l}");
    assert_error(app.get(&format!("/link/{code}")).await, 410, "visit limit").await;

    // Raising the limit lets that many more through; clearing it, all.
    let path = format!("/api/v1/links/{code}");
    let r = app
        .api(
            Method::PATCH,
            &path,
            Some(&key),
            Some(json!({ "max_visits": 52 })),
        )
        .await;
    assert_eq!(json(r).await["max_visits"], 52);
    let statuses = [
        visit(&app, &code, None, None).await,
        visit(&app, &code, None, None).await,
        visit(&app, &code, None, None).await,
    ];
    assert_eq!(statuses, [302, 302, 410]);
    let r = app
        .api(
            Method::PATCH,
            &path,
            Some(&key),
            Some(json!({ "max_visits": null })),
        )
        .await;
    assert_eq!(json(r).await["max_visits"], Value::Null);
    assert_eq!(visit(&app, &code, None, None).await, 302);
    assert_eq!(link(&app, &key, &code).await["visits"], 53);

    for bad in [json!(0), json!(-1), json!(1.5), json!("5"), json!(u64::MAX)] {
        let body = json!({ "url": "https://example.com/x", "max_visits": bad });
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&key), Some(body))
            .await;
        assert_error(r, 400, "max_visits").await;
        let r = app
            .api(
                Method::PATCH,
                &path,
                Some(&key),
                Some(json!({ "max_visits": bad })),
            )
            .await;
        assert_error(r, 400, "max_visits").await;
    }
}

#[tokio::test]
async fn a_limit_survives_a_restart() {
    let app = spawn_app(&["--visits-flush-ms", "600000"]).await;
    let key = app.new_key("owner", false).await;
    let code = create(
        &app,
        &key,
        json!({ "url": "https://example.com/five", "max_visits": 5 }),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(visit(&app, &code, None, None).await, 302);
    }
    let db = app.db.clone();
    let dir = app.stop().await;
    let app = spawn_app_on(&db, &[]).await;
    for _ in 0..2 {
        assert_eq!(visit(&app, &code, None, None).await, 302);
    }
    assert_eq!(visit(&app, &code, None, None).await, 410);
    drop(app);
    drop(dir);
}

crate::on_both_stores! {
    async fn with_visits_off_only_limited_links_are_counted(store: Store) {
    let app = spawn_app_in(&store, &["--visits", "off"]).await;
    let key = app.new_key("owner", false).await;
    let free = create(&app, &key, json!({ "url": "https://example.com/free" })).await;
    let limited = create(
        &app,
        &key,
        json!({ "url": "https://example.com/l", "max_visits": 1 }),
    )
    .await;
    assert_eq!(visit(&app, &free, None, None).await, 302);
    assert_eq!(visit(&app, &limited, None, None).await, 302);
    assert_eq!(visit(&app, &limited, None, None).await, 410);
    assert_eq!(link(&app, &key, &free).await["visits"], 0);
    assert_eq!(link(&app, &key, &limited).await["visits"], 1);
    assert_eq!(app.stats().await["visits"]["counting"], false);
}
}

/// A flush finds a generated code by the row id it decrypts to, an alias
/// by its name: both reach the stored total and the hourly rows.
#[tokio::test]
async fn a_flush_stores_the_visits_of_generated_codes_and_aliases() {
    let app = spawn_app(&["--visits-flush-ms", "50"]).await;
    let key = app.new_key("owner", false).await;
    let generated = create(&app, &key, json!({ "url": "https://example.com/g" })).await;
    let alias = create(
        &app,
        &key,
        json!({ "url": "https://example.com/a", "code": "flush-alias" }),
    )
    .await;
    assert_eq!(alias, "flush-alias");
    for (code, n) in [(&generated, 3), (&alias, 5)] {
        for _ in 0..n {
            assert_eq!(visit(&app, code, None, None).await, 302);
        }
    }
    flushed(&app, 8).await;
    let conn = rusqlite::Connection::open(&app.db).expect("open");
    for (code, n) in [(&generated, 3), (&alias, 5)] {
        let (total, hourly): (i64, i64) = conn
            .query_row(
                "SELECT l.visits, (SELECT sum(humans) FROM visits_hourly WHERE link = l.id) \
                 FROM links l WHERE l.code = ?1",
                [code],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("row");
        assert_eq!((total, hourly), (n, n), "{code}");
    }
}

/// A leap second is read one way wherever a time is: refused, as an
/// expiry and as a report's bound alike.
#[tokio::test]
async fn a_leap_second_is_refused_as_an_expiry_and_as_a_bound() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("owner", false).await;
    let leap = "2030-12-31T23:59:60Z";
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({ "url": "https://example.com/leap", "expires_at": leap })),
        )
        .await;
    assert_error(r, 400, "RFC 3339").await;
    let code = create(&app, &key, json!({ "url": "https://example.com/l" })).await;
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}/visits?from={leap}"),
            Some(&key),
            None,
        )
        .await;
    assert_error(r, 400, "RFC 3339").await;
}

/// A PATCH answers with the same count as a GET: flushed visits and
/// those still in memory (flushes pushed past the test).
#[tokio::test]
async fn an_edit_answers_with_every_visit_counted() {
    let app = spawn_app(&["--visits-flush-ms", "3600000"]).await;
    let key = app.new_key("owner", false).await;
    let code = create(&app, &key, json!({ "url": "https://example.com/e" })).await;
    for _ in 0..3 {
        assert_eq!(visit(&app, &code, Some(CHROME), None).await, 302);
    }
    assert_eq!(link(&app, &key, &code).await["visits"], 3);
    let r = app
        .api(
            Method::PATCH,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            Some(json!({ "url": "https://example.com/e2" })),
        )
        .await;
    assert_eq!(r.status(), 200);
    let patched = json(r).await;
    assert_eq!(patched["url"], "https://example.com/e2");
    assert_eq!(patched["visits"], 3, "{patched}");
}

#[tokio::test]
async fn a_deleted_link_takes_its_visits_with_it() {
    let app = spawn_app(&["--visits-flush-ms", "50"]).await;
    let key = app.new_key("owner", false).await;
    let code = create(&app, &key, json!({ "url": "https://example.com/d" })).await;
    let keep = create(&app, &key, json!({ "url": "https://example.com/k" })).await;
    for c in [&code, &keep] {
        for _ in 0..4 {
            assert_eq!(
                visit(&app, c, Some(CHROME), Some("https://a.example/")).await,
                302
            );
        }
    }
    flushed(&app, 8).await;
    let id_of = |conn: &rusqlite::Connection, code: &str| -> i64 {
        conn.query_row("SELECT id FROM links WHERE code = ?1", [code], |r| r.get(0))
            .expect("id")
    };
    let rows = |conn: &rusqlite::Connection, id: i64| -> i64 {
        ["visits_hourly", "visits_referrers"]
            .iter()
            .map(|t| {
                conn.query_row(
                    &format!("SELECT count(*) FROM {t} WHERE link = ?1"),
                    [id],
                    |r| r.get::<_, i64>(0),
                )
                .expect("count")
            })
            .sum()
    };
    let conn = rusqlite::Connection::open(&app.db).expect("open");
    let (id, keep_id) = (id_of(&conn, &code), id_of(&conn, &keep));
    assert_eq!(rows(&conn, id), 2);
    // Counted but not yet flushed when the delete comes: dropped too.
    assert_eq!(visit(&app, &code, None, None).await, 302);
    let r = app
        .api(
            Method::DELETE,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rows(&conn, id), 0);
    let visits: i64 = conn
        .query_row("SELECT visits FROM links WHERE id = ?1", [id], |r| r.get(0))
        .expect("visits");
    assert_eq!(visits, 0);
    assert_eq!(rows(&conn, keep_id), 2);
    assert_eq!(link(&app, &key, &keep).await["visits"], 4);
}

fn admin_key(db: &std::path::Path) -> String {
    run_keys(db, &["create", "--name", "admin"], true)
}

async fn visits_of(base: &str, key: &str, code: &str) -> u64 {
    let r = client()
        .get(format!("{base}/api/v1/links/{code}"))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET link");
    assert_eq!(r.status(), 200);
    json(r).await["visits"].as_u64().expect("visits")
}

async fn redirect_n(base: &str, code: &str, n: usize) {
    let c = client();
    for _ in 0..n {
        let r = c.get(format!("{base}/{code}")).send().await.expect("GET");
        assert_eq!(r.status(), 302);
    }
}

#[tokio::test]
async fn sigterm_loses_no_visit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v.db");
    let key = admin_key(&db);
    // No flush before the stop: only the one at shutdown can save them.
    let mut server = spawn_process(&db, &["--visits-flush-ms", "3600000"]);
    let base = server.url();
    let code = crate::helpers::create_code(&base).await;
    redirect_n(&base, &code, 300).await;
    let status = server.terminate().expect("terminate");
    assert!(status.success(), "{status}");
    let server = spawn_process(&db, &[]);
    assert_eq!(visits_of(&server.url(), &key, &code).await, 300);
}

#[tokio::test]
async fn kill_9_loses_at_most_the_last_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v.db");
    let key = admin_key(&db);
    let mut server = spawn_process(&db, &["--visits-flush-ms", "100"]);
    let base = server.url();
    let code = crate::helpers::create_code(&base).await;
    redirect_n(&base, &code, 200).await;
    // Past a few intervals, everything so far is stored...
    tokio::time::sleep(Duration::from_millis(600)).await;
    // ...and what comes in the last one may be lost.
    redirect_n(&base, &code, 50).await;
    server.kill9();
    let server = spawn_process(&db, &[]);
    let total = visits_of(&server.url(), &key, &code).await;
    assert!((200..=250).contains(&total), "{total} visits after kill -9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_read_while_flushes_run_never_go_back() {
    // Redirects keep coming while flushes (every 75 ms, four chunks each)
    // move counts from memory to disk: a reader must never see a count
    // shrink, which it would if it caught a chunk in neither place.
    let app = spawn_app(&["--visits-flush-ms", "100"]).await;
    let admin = app.new_key("admin", true).await;
    let mut codes = Vec::new();
    for i in 0..200 {
        let body = json!({ "url": format!("https://example.com/{i}") });
        codes.push(create(&app, &admin, body).await);
    }
    let visitor = {
        let codes = codes.clone();
        let base = app.url("");
        tokio::spawn(async move {
            let c = client();
            let until = Instant::now() + Duration::from_secs(2);
            let mut rounds = 0u64;
            while Instant::now() < until {
                for code in &codes {
                    let r = c.get(format!("{base}/{code}")).send().await.expect("GET");
                    assert_eq!(r.status(), 302);
                }
                rounds += 1;
            }
            rounds
        })
    };
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    let mut reads = 0;
    while !visitor.is_finished() {
        let page = json(
            app.api(Method::GET, "/api/v1/links?limit=1000", Some(&admin), None)
                .await,
        )
        .await;
        for l in page["links"].as_array().expect("links") {
            let code = l["code"].as_str().expect("code").to_owned();
            let now = l["visits"].as_u64().expect("visits");
            let before = seen.insert(code.clone(), now).unwrap_or(0);
            assert!(now >= before, "{code}: {before} visits, then {now}");
        }
        reads += 1;
    }
    let rounds = visitor.await.expect("visitor");
    assert!(reads > 10, "{reads} reads");
    for code in &codes {
        assert_eq!(link(&app, &admin, code).await["visits"], rounds);
    }
}

/// A redirect from `ua` for a client a proxy says is at `forwarded`, with
/// the proxy's country header when given.
async fn visit_from(app: &TestApp, code: &str, ua: &str, forwarded: &str, country: Option<&str>) {
    let mut r = app
        .client
        .get(app.url(&format!("/{code}")))
        .header("user-agent", ua)
        .header("x-forwarded-for", forwarded);
    if let Some(c) = country {
        r = r.header("cf-ipcountry", c);
    }
    assert_eq!(r.send().await.expect("redirect").status(), 302);
}

/// `[{"country"|"name": value, "count": n}]` as pairs, for comparing.
fn pairs(list: &Value, field: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|v| {
            (
                v[field].as_str().expect(field).to_owned(),
                v["count"].as_u64().expect("count"),
            )
        })
        .collect();
    out.sort();
    out
}

const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 \
                      (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
const WINDOWS_EDGE: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                            Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80";

crate::on_both_stores! {
    /// Countries from the built-in table (addresses a trusted proxy
    /// forwards) and from a trusted proxy's header; devices, systems and
    /// browsers from the User-Agent; kept across a restart; the CSV says
    /// what the JSON says.
    async fn visits_are_counted_by_country_device_system_and_browser(store: Store) {
    let app = spawn_app_in(
        &store,
        &["--trust-proxy", "127.0.0.1", "--country-header", "CF-IPCountry"],
    )
    .await;
    let admin = app.new_key("admin", true).await;
    let code = create(&app, &admin, json!({ "url": "https://example.com/geo" })).await;
    visit_from(&app, &code, IPHONE, "8.8.8.8", None).await;
    visit_from(&app, &code, WINDOWS_EDGE, "194.25.0.60", None).await;
    visit_from(&app, &code, WINDOWS_EDGE, "194.25.0.60", Some("fr")).await;
    visit_from(&app, &code, GOOGLEBOT, "10.0.0.1", None).await;
    visit_from(&app, &code, CHROME, "not an address", Some("XX")).await;
    let expect = |r: &Value| {
        assert_eq!(r["total"], 5, "{r}");
        assert_eq!(
            pairs(&r["countries"], "country"),
            [("DE".into(), 1), ("FR".into(), 1), ("US".into(), 1), ("unknown".into(), 2)],
            "{r}"
        );
        assert_eq!(
            pairs(&r["devices"], "name"),
            [("bot".into(), 1), ("desktop".into(), 3), ("mobile".into(), 1)],
            "{r}"
        );
        assert_eq!(
            pairs(&r["os"], "name"),
            [("Linux".into(), 1), ("Windows".into(), 2), ("iOS".into(), 1), ("unknown".into(), 1)],
            "{r}"
        );
        assert_eq!(
            pairs(&r["browsers"], "name"),
            [("Chrome".into(), 1), ("Edge".into(), 2), ("Safari".into(), 1), ("bot".into(), 1)],
            "{r}"
        );
        assert_eq!(r["cities"], json!([]), "{r}");
    };
    expect(&report(&app, &admin, &code, "").await);

    // The CSV: the same figures in one table.
    let r = app
        .api(Method::GET, &format!("/api/v1/links/{code}/visits?format=csv"), Some(&admin), None)
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().expect("type").starts_with("text/csv"));
    let text = r.text().await.expect("csv");
    let mut rows = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        rows.headers().expect("header").iter().collect::<Vec<_>>(),
        ["dimension", "value", "start", "humans", "bots", "count"]
    );
    let mut sums: std::collections::HashMap<String, u64> = Default::default();
    for row in rows.records() {
        let row = row.expect("row");
        *sums.entry(row[0].to_owned()).or_default() += row[5].parse::<u64>().expect("count");
        if &row[0] == "country" && &row[1] == "FR" {
            assert_eq!(&row[5], "1", "{text}");
        }
    }
    for dim in ["series", "country", "device", "os", "browser", "referrer", "agent"] {
        assert_eq!(sums.get(dim), Some(&5), "{dim} in {text}");
    }

    // Stored, and read back after a restart.
    flushed(&app, 5).await;
    let (db, pg) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;
    let app = spawn_app_like(&db, &pg, &[]).await;
    expect(&report(&app, &admin, &code, "").await);

    // Without --trust-proxy, neither the forwarded address nor the
    // country header counts: the visitor is the loopback peer.
    visit_from(&app, &code, IPHONE, "8.8.8.8", Some("FR")).await;
    let r = report(&app, &admin, &code, "").await;
    assert_eq!(
        pairs(&r["countries"], "country"),
        [("DE".into(), 1), ("FR".into(), 1), ("US".into(), 1), ("unknown".into(), 3)],
        "{r}"
    );
    drop(app);
    drop(dir);
    }
}

/// The visitor's address and User-Agent are nowhere on disk or in the
/// logs once visits are counted: not in the database, not in the WAL, not
/// in a log line, while the server runs and after it stops.
#[tokio::test]
async fn no_address_or_user_agent_is_written_anywhere() {
    const ADDRESS: &str = "8.8.4.4";
    const AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64) UniqueProbe/9.8.7";
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("v.db");
    // Every request logged (tower-http's lines at debug), so that the log
    // is shown to hold something of each visit, but never these.
    let mut server = litelink_lab::process::ServerProcess::start_with_env(
        std::path::Path::new(env!("CARGO_BIN_EXE_litelink")),
        &db,
        &[
            "--trust-proxy".into(),
            "127.0.0.1".into(),
            "--log-format".into(),
            "json".into(),
        ],
        &[("RUST_LOG", "info,litelink_service=debug,tower_http=debug")],
        None,
    )
    .expect("litelink");
    let http = client();
    let r = http
        .post(format!("{}/link", server.url()))
        .json(&json!({ "url": "https://example.com/private" }))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let code = json(r).await["short_link"]
        .as_str()
        .expect("code")
        .to_owned();
    for _ in 0..20 {
        let r = http
            .get(format!("{}/{code}", server.url()))
            .header("user-agent", AGENT)
            .header("x-forwarded-for", ADDRESS)
            .send()
            .await
            .expect("redirect");
        assert_eq!(r.status(), 302);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.stats().expect("stats")["visits"]["flushed"].as_u64() < Some(20) {
        assert!(Instant::now() < deadline, "visits never flushed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let search = |server: &litelink_lab::process::ServerProcess, when: &str| {
        let mut files = vec![db.clone()];
        files.push(db.with_extension("db-wal"));
        for file in files.iter().filter(|f| f.exists()) {
            let bytes = std::fs::read(file).expect("read");
            for needle in [ADDRESS, "UniqueProbe"] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                    "{needle} found in {} {when}",
                    file.display()
                );
            }
        }
        let (_, log) = server.log();
        assert!(
            !log.iter()
                .any(|l| l.contains(ADDRESS) || l.contains("UniqueProbe")),
            "found in the log {when}: {log:#?}"
        );
        // The positive control: each request has its line.
        let visits = log
            .iter()
            .filter(|l| l.contains("finished processing request"))
            .count();
        assert!(visits >= 20, "{visits} visits logged {when}: {log:#?}");
    };
    search(&server, "while serving");
    // What was counted is there: the address became a country.
    let conn = rusqlite::Connection::open(&db).expect("open");
    let us: i64 = conn
        .query_row(
            "SELECT coalesce(sum(count), 0) FROM visits_facets WHERE dim = 'country' AND value = 'US'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(us, 20);
    drop(conn);
    server.terminate().expect("stop");
    search(&server, "after a stop");
}

crate::on_both_stores! {
    /// `GET /api/v1/visits`: the visits of every link a key may manage,
    /// summed, whether still in memory or stored.
    async fn the_dashboard_sums_the_links_a_key_may_manage(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let admin = app.new_key("admin", true).await;
    let alice = app.new_key("alice", false).await;
    let bob = app.new_key("bob", false).await;
    let a1 = create(&app, &alice, json!({ "url": "https://example.com/a1" })).await;
    let a2 = create(&app, &alice, json!({ "url": "https://example.com/a2" })).await;
    let b1 = create(&app, &bob, json!({ "url": "https://example.com/b1" })).await;
    for (code, n, ua) in [(&a1, 2, CHROME), (&a2, 3, GOOGLEBOT), (&b1, 4, IPHONE)] {
        for _ in 0..n {
            assert_eq!(visit(&app, code, Some(ua), Some("https://news.example/x")).await, 302);
        }
    }
    let totals = async |key: &str| {
        let r = app.api(Method::GET, "/api/v1/visits", Some(key), None).await;
        assert_eq!(r.status(), 200);
        json(r).await
    };
    let check = async || {
        let a = totals(&alice).await;
        assert_eq!((a["total"].as_u64(), a["humans"].as_u64(), a["bots"].as_u64()), (Some(5), Some(2), Some(3)), "{a}");
        assert_eq!(pairs(&a["devices"], "name"), [("bot".into(), 3), ("desktop".into(), 2)], "{a}");
        assert_eq!(pairs(&a["referrers"], "host"), [("news.example".into(), 5)], "{a}");
        let b = totals(&bob).await;
        assert_eq!(b["total"], 4, "{b}");
        assert_eq!(pairs(&b["devices"], "name"), [("mobile".into(), 4)], "{b}");
        let all = totals(&admin).await;
        assert_eq!(all["total"], 9, "{all}");
        // Summed: the visits may straddle an hour's turn.
        let humans: u64 = all["series"]
            .as_array()
            .expect("series")
            .iter()
            .map(|p| p["humans"].as_u64().expect("humans"))
            .sum();
        assert_eq!(humans, 6, "{all}");
    };
    // In memory, then stored.
    check().await;
    flushed(&app, 9).await;
    check().await;
    // A deleted link's visits go with it.
    let r = app.api(Method::DELETE, &format!("/api/v1/links/{a2}"), Some(&alice), None).await;
    assert_eq!(r.status(), 204);
    assert_eq!(totals(&alice).await["total"], 2);
    assert_error(app.api(Method::GET, "/api/v1/visits", None, None).await, 401, "key").await;
    assert_error(
        app.api(Method::GET, "/api/v1/visits?interval=week", Some(&alice), None).await,
        400,
        "interval",
    )
    .await;
    let r = app.api(Method::GET, "/api/v1/visits?format=csv", Some(&admin), None).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("csv");
    assert!(text.starts_with("dimension,value,start,humans,bots,count\n"), "{text}");
    assert!(text.contains("\ndevice,mobile,,,,4\n"), "{text}");
    }
}

/// A link keeps at most 50 values a day in each dimension; the rest count
/// as `(other)`, so that made-up values cannot grow the database.
#[tokio::test]
async fn each_dimension_keeps_fifty_values_a_day() {
    let app = spawn_app(&[
        "--trust-proxy",
        "127.0.0.1",
        "--country-header",
        "CF-IPCountry",
    ])
    .await;
    let admin = app.new_key("admin", true).await;
    let code = create(&app, &admin, json!({ "url": "https://example.com/many" })).await;
    let codes: Vec<String> = (0..60u8)
        .map(|i| format!("{}{}", char::from(b'A' + i / 26), char::from(b'A' + i % 26)))
        .collect();
    for country in &codes {
        visit_from(&app, &code, CHROME, "8.8.8.8", Some(country)).await;
    }
    flushed(&app, 60).await;
    let conn = rusqlite::Connection::open(&app.db).expect("open");
    let stored: Vec<(String, i64)> = conn
        .prepare("SELECT value, count FROM visits_facets WHERE dim = 'country' ORDER BY value")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(stored.len(), 51, "{stored:?}");
    assert!(stored.contains(&("(other)".into(), 10)), "{stored:?}");
    let r = report(&app, &admin, &code, "").await;
    let countries = r["countries"].as_array().expect("countries");
    assert_eq!(countries.len(), 51, "{r}");
    assert_eq!(
        countries[50],
        json!({"country": "(other)", "count": 10}),
        "{r}"
    );
    assert_eq!(count_sum(countries), 60);
}

fn count_sum(list: &[Value]) -> u64 {
    list.iter()
        .map(|v| v["count"].as_u64().expect("count"))
        .sum()
}

/// Runs `sql` on the database of a stopped app: its SQLite file, or its
/// PostgreSQL database.
async fn run_sql(db: &std::path::Path, store: &Option<String>, sql: &str) {
    match store {
        None => rusqlite::Connection::open(db)
            .and_then(|c| c.execute_batch(sql))
            .expect("sqlite"),
        Some(url) => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("postgres");
            let task = tokio::spawn(connection);
            client.batch_execute(sql).await.expect("postgres sql");
            drop(client);
            let _ = task.await;
        }
    }
}

crate::on_both_stores! {
    /// Counts near the largest integer (as an earlier import could write)
    /// stop at it instead of failing reports or flushes; and a link whose
    /// counts the store refuses costs the other links of its flush nothing.
    async fn one_links_counts_never_stop_the_others(store: Store) {
    let app = spawn_app_in(&store, &["--visits-flush-ms", "200"]).await;
    let key = app.new_key("owner", true).await;
    for code in ["plain", "huge", "refused"] {
        create(&app, &key, json!({"url": "https://example.com/", "code": code})).await;
    }
    let (db, url) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        / 3600;
    let near = i64::MAX;
    run_sql(
        &db,
        &url,
        &format!(
            "UPDATE links SET visits = {near} WHERE code = 'huge';
             INSERT INTO visits_hourly (link, hour, humans, bots, browsers)
               SELECT id, {hour}, {near}, 0, 0 FROM links WHERE code = 'huge';
             INSERT INTO visits_hourly (link, hour, humans, bots, browsers)
               SELECT id, {hour}, {near}, 0, 0 FROM links WHERE code = 'plain';"
        ),
    )
    .await;
    // The store refuses every write of this one link's counts.
    let refuse = match url {
        None => "CREATE TRIGGER refuse BEFORE UPDATE OF visits ON links \
                 WHEN NEW.code = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END;"
            .to_owned(),
        Some(_) => "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                    $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
                    CREATE TRIGGER refuse BEFORE UPDATE OF visits ON links FOR EACH ROW \
                    WHEN (NEW.code = 'refused') EXECUTE FUNCTION refuse();"
            .to_owned(),
    };
    run_sql(&db, &url, &refuse).await;

    let app = spawn_app_like(&db, &url, &["--visits-flush-ms", "200"]).await;
    for code in ["refused", "plain", "huge", "plain"] {
        assert_eq!(visit(&app, code, Some(CHROME), None).await, 302);
    }
    // The three visits of the other links are written all the same.
    flushed(&app, 3).await;
    let link = |code: &'static str| {
        let app = &app;
        let key = key.clone();
        async move {
            let r = app
                .api(Method::GET, &format!("/api/v1/links/{code}"), Some(&key), None)
                .await;
            assert_eq!(r.status(), 200);
            json(r).await
        }
    };
    assert_eq!(link("plain").await["visits"], 2);
    assert_eq!(link("huge").await["visits"], i64::MAX, "stops at the largest integer");
    // The refused link's visit stays in memory, counted, to be retried.
    assert_eq!(link("refused").await["visits"], 1);
    // Sums over links stop at the largest integer too, never a 500.
    let r = app.api(Method::GET, "/api/v1/visits", Some(&key), None).await;
    assert_eq!(r.status(), 200);
    let report = json(r).await;
    assert!(report["total"].as_u64() >= Some(i64::MAX as u64), "{report}");
    let s = app.stats().await;
    assert!(s["visits"]["failed_flushes"].as_u64() >= Some(1), "{s}");
    app.stop().await;
    drop(dir);
    }
}

/// A value a spreadsheet would run as a formula (a referrer host or a
/// code starting with `-`) is written to CSV with a `'` in front, in the
/// visits report and in the export; the export's import takes it back as
/// it was.
#[tokio::test]
async fn csv_cells_never_start_a_formula() {
    let app = spawn_app(&["--visits-flush-ms", "100"]).await;
    let key = app.new_key("admin", true).await;
    create(
        &app,
        &key,
        json!({"url": "https://example.com/", "code": "-rm"}),
    )
    .await;
    let r = app
        .client
        .get(app.url("/-rm"))
        .header("referer", "http://-cmd.example/x")
        .send()
        .await
        .expect("visit");
    assert_eq!(r.status(), 302);
    let r = app
        .api(
            Method::GET,
            "/api/v1/links/-rm/visits?format=csv",
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let csv = r.text().await.expect("csv");
    assert!(csv.contains("referrer,'-cmd.example,"), "{csv}");
    for line in csv.lines() {
        for cell in line.split(',') {
            assert!(!cell.starts_with(['=', '+', '-', '@']), "{cell} in {csv}");
        }
    }
    flushed(&app, 1).await;
    let db = app.db.clone();
    let dir = app.stop().await.expect("its directory");
    let file = dir.path().join("out.csv");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["export", "--format", "csv", "--out"])
        .arg(&file)
        .arg("--db")
        .arg(&db)
        .output()
        .expect("export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("export");
    assert!(text.lines().any(|l| l.starts_with("'-rm,")), "{text}");
    let again = dir.path().join("again.db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["import", "--format", "csv"])
        .arg(&file)
        .arg("--db")
        .arg(&again)
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let app = spawn_app_on(&again, &[]).await;
    let r = app.client.get(app.url("/-rm")).send().await.expect("visit");
    assert_eq!(r.status(), 302, "the code comes back as it was");
    app.stop().await;
    drop(dir);
}
