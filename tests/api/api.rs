//! The HTTP API: success paths and every documented error path.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, spawn_app, spawn_app_in, spawn_app_on};

/// The API contract, run against every configuration in `modes.rs`.
pub async fn exercise_api(app: &TestApp) {
    // heart-beat
    let r = app.get("/heart-beat").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({ "OK": true }));

    // create, read as JSON, redirect
    let target = "https://example.com/some/page?q=1&r=two#frag";
    let r = app.create(target).await;
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    let code = body["short_link"].as_str().unwrap().to_owned();
    assert_eq!(code.len(), 10);
    assert!(code.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(body["link"], target);
    assert_eq!(
        body["short_url"].as_str().unwrap(),
        format!("http://{}/{code}", app.addr)
    );

    let r = app.get(&format!("/link/{code}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({ "link": target }));

    // A redirect has no body, and says so, to a HEAD too.
    let r = app.get(&format!("/{code}")).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], target);
    assert_eq!(r.headers()["content-length"], "0");
    let r = app
        .client
        .head(app.url(&format!("/{code}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], target);
    assert_eq!(r.headers()["content-length"], "0");

    // a link limited to two visits: HEAD and GET /link/{code} are not
    // visits; the third redirect is 410, and so is every look after it
    // (through whatever cache this mode has)
    let r = app
        .client
        .post(app.url("/link"))
        .json(&json!({ "url": target, "max_visits": 2 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let limited = r.json::<Value>().await.unwrap()["short_link"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..2 {
        assert_eq!(app.get(&format!("/link/{limited}")).await.status(), 200);
        let head = app.client.head(app.url(&format!("/{limited}")));
        assert_eq!(head.send().await.unwrap().status(), 302);
        assert_eq!(app.get(&format!("/{limited}")).await.status(), 302);
    }
    assert_error(app.get(&format!("/{limited}")).await, 410, "visit limit").await;
    assert_error(
        app.get(&format!("/link/{limited}")).await,
        410,
        "visit limit",
    )
    .await;
    let head = app.client.head(app.url(&format!("/{limited}")));
    assert_eq!(head.send().await.unwrap().status(), 410);

    // unknown codes, twice so a negative cache answers the second time
    for _ in 0..2 {
        assert_error(app.get("/link/NoSuchCode1").await, 404, "no link").await;
        assert_error(app.get("/NoSuchCode1").await, 404, "no link").await;
    }

    // malformed codes
    assert_error(app.get("/link/bad.code").await, 400, "malformed short code").await;
    assert_error(app.get("/bad%20code").await, 400, "malformed short code").await;
    let long = "a".repeat(65);
    assert_error(app.get(&format!("/link/{long}")).await, 400, "malformed").await;

    // bad bodies
    let post = |body: &'static str, ct: Option<&'static str>| {
        let mut req = app.client.post(app.url("/link")).body(body);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        req.send()
    };
    let json_ct = Some("application/json");
    assert_error(post("{}", json_ct).await.unwrap(), 400, "'url' is required").await;
    assert_error(
        post(r#"{"url":null}"#, json_ct).await.unwrap(),
        400,
        "'url' is required",
    )
    .await;
    assert_error(
        post(r#"{"url":""}"#, json_ct).await.unwrap(),
        400,
        "must not be empty",
    )
    .await;
    assert_error(
        post(r#"{"url":42}"#, json_ct).await.unwrap(),
        400,
        "must be a string",
    )
    .await;
    assert_error(
        post(r#"{"url": "https://x.com""#, json_ct).await.unwrap(),
        400,
        "not valid JSON",
    )
    .await;
    assert_error(post("", json_ct).await.unwrap(), 400, "not valid JSON").await;
    assert_error(
        post(r#"["https://x.com"]"#, json_ct).await.unwrap(),
        400,
        "JSON object",
    )
    .await;
    assert_error(
        post(r#""https://x.com""#, json_ct).await.unwrap(),
        400,
        "JSON object",
    )
    .await;
    assert_error(
        post(r#"{"url":"https://x.com"}"#, None).await.unwrap(),
        415,
        "application/json",
    )
    .await;
    assert_error(
        post(r#"{"url":"https://x.com"}"#, Some("text/plain"))
            .await
            .unwrap(),
        415,
        "application/json",
    )
    .await;
    assert_error(
        post(
            "url=https://x.com",
            Some("application/x-www-form-urlencoded"),
        )
        .await
        .unwrap(),
        415,
        "application/json",
    )
    .await;

    // bad URLs
    for (url, needle) in [
        ("example.com", "not a valid absolute URL"),
        ("/relative/path", "not a valid absolute URL"),
        ("ftp://example.com/file", "scheme must be http or https"),
        ("javascript:alert(1)", "scheme must be http or https"),
        ("https://exa\nmple.com", "control characters"),
        ("https://example.com/\u{0007}", "control characters"),
        ("https://example.com/a b", "whitespace"),
    ] {
        assert_error(app.create(url).await, 400, needle).await;
    }
    let too_long = format!(
        "https://example.com/{}",
        "a".repeat(litelink_service::domain::MAX_URL_BYTES)
    );
    assert_error(app.create(&too_long).await, 400, "longer than").await;

    // body over the limit (default 16 KiB)
    let huge = json!({ "url": format!("https://example.com/{}", "a".repeat(20_000)) }).to_string();
    let r = app
        .client
        .post(app.url("/link"))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_error(r, 413, "too large").await;

    // unknown routes and wrong methods
    assert_error(app.get("/no/such/route").await, 404, "no route").await;
    let r = app.client.delete(app.url("/link")).send().await.unwrap();
    assert_error(r, 405, "method not allowed").await;
    let r = app.client.put(app.url("/heart-beat")).send().await.unwrap();
    assert_error(r, 405, "method not allowed").await;
    let r = app
        .client
        .post(app.url(&format!("/link/{code}")))
        .send()
        .await
        .unwrap();
    assert_error(r, 405, "method not allowed").await;

    // nothing above stored a link it should not have: exactly two were
    // created (one of them limited)
    let admin = app.new_key("contract-admin", true).await;
    let r = app
        .api(
            reqwest::Method::GET,
            "/api/v1/links?limit=100",
            Some(&admin),
            None,
        )
        .await;
    let all: Value = r.json().await.unwrap();
    assert_eq!(all["links"].as_array().map(Vec::len), Some(2), "{all}");
    let stats = app.stats().await;
    assert_eq!(stats["links"], 2, "{stats}");

    // An alias (a named code) reads, redirects and counts visits as a
    // generated code does; its code is taken once it is stored.
    let alias = format!(
        "alias-{:08x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    // Choosing a code takes a key; made last, as keys change what some
    // routes ask of anonymous callers.
    let key = app.new_key("aliases", false).await;
    let named = |code: String, max_visits: Option<u64>| {
        app.client
            .post(app.url("/link"))
            .bearer_auth(&key)
            .json(&json!({ "url": target, "code": code, "max_visits": max_visits }))
            .send()
    };
    let r = named(alias.clone(), None).await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.json::<Value>().await.unwrap()["short_link"], alias);
    for _ in 0..2 {
        let r = app.get(&format!("/link/{alias}")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap(), json!({ "link": target }));
        let r = app.get(&format!("/{alias}")).await;
        assert_eq!(r.status(), 302);
        assert_eq!(r.headers()["location"], target);
    }
    assert_error(named(alias.clone(), None).await.unwrap(), 409, "taken").await;
    // Another case is another code.
    assert_error(
        app.get(&format!("/link/{}", alias.to_uppercase())).await,
        404,
        "no link",
    )
    .await;
    let once = format!("{alias}-once");
    assert_eq!(named(once.clone(), Some(1)).await.unwrap().status(), 201);
    assert_eq!(app.get(&format!("/{once}")).await.status(), 302);
    assert_error(app.get(&format!("/{once}")).await, 410, "visit limit").await;
}

crate::on_both_stores! {
    async fn the_default_configuration_serves_the_api(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    exercise_api(&app).await;
}
}

#[tokio::test]
async fn stats_reports_the_build_and_the_configuration() {
    let app = spawn_app(&[]).await;
    app.create_ok("https://example.com").await;
    let s = app.stats().await;
    assert_eq!(s["sqlite_version"], rusqlite::version());
    let options: Vec<&str> = s["compile_options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // The build flag from .cargo/config.toml reached the bundled SQLite.
    assert!(options.contains(&"DEFAULT_MEMSTATUS=0"), "{options:?}");
    assert!(
        options.contains(&"DISABLE_PAGECACHE_OVERFLOW_STATS"),
        "{options:?}"
    );
    assert_eq!(s["memstatus"], false);
    assert_eq!(s["connections"], "pooled");
    assert_eq!(s["page_cache"], "on");
    assert_eq!(s["durability"], "full");
    assert_eq!(s["links"], 1);
    assert_eq!(s["cache"]["mode"], "memory");
}

crate::on_both_stores! {
    async fn the_redirect_status_is_configurable(store: Store) {
    for status in ["301", "302", "307", "308"] {
        let app = spawn_app_in(&store, &["--redirect-status", status]).await;
        let code = app.create_ok("https://example.org/x").await;
        let r = app.get(&format!("/{code}")).await;
        assert_eq!(r.status().as_str(), status);
        assert_eq!(r.headers()["location"], "https://example.org/x");
        assert_eq!(
            app.stats().await["redirect_status"],
            status.parse::<u16>().unwrap()
        );
    }
}
}

crate::on_both_stores! {
    async fn code_length_and_public_url_are_configurable(store: Store) {
    let app = spawn_app_in(&store, &["--code-length", "16", "--public-url", "https://s.example/"]).await;
    let r = app.create("https://example.com").await;
    let body: Value = r.json().await.unwrap();
    let code = body["short_link"].as_str().unwrap();
    assert_eq!(code.len(), 16);
    assert_eq!(body["short_url"], format!("https://s.example/{code}"));
}
}

crate::on_both_stores! {
    async fn iris_are_stored_percent_encoded(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let code = app.create_ok("https://de.wikipedia.org/wiki/Köln").await;
    let r = app.get(&format!("/{code}")).await;
    assert_eq!(
        r.headers()["location"],
        "https://de.wikipedia.org/wiki/K%C3%B6ln"
    );
}
}

crate::on_both_stores! {
    async fn two_hundred_concurrent_creates_get_distinct_codes_that_resolve(store: Store) {
    let app = spawn_app_in(&store, &["--cache", "none"]).await;
    let created: Vec<(String, String)> = app
        .create_concurrently("page", 200)
        .await
        .into_iter()
        .map(|c| {
            assert_eq!(c.status, 201, "{}", c.body);
            (c.code().to_owned(), c.target)
        })
        .collect();
    let codes: HashSet<&str> = created.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes.len(), 200, "codes must be distinct");
    for (code, target) in &created {
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap()["link"], target.as_str());
    }
    let s = app.stats().await;
    assert_eq!(s["links"], 200, "{s}");
    if app.store.is_some() {
        assert!(
            s["writer"]["largest_batch"].as_u64() > Some(1),
            "grouped: {s}"
        );
    }
}
}

#[tokio::test]
async fn links_survive_a_restart() {
    let app = spawn_app(&[]).await;
    let code = app.create_ok("https://example.com/persisted").await;
    let db = app.db.clone();
    let dir = app.stop().await;
    let app = spawn_app_on(&db, &[]).await;
    let r = app.get(&format!("/link/{code}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["link"],
        "https://example.com/persisted"
    );
    drop(dir);
}

#[tokio::test]
async fn internal_failures_are_a_generic_500() {
    let app = spawn_app(&["--cache", "none"]).await;
    // Break the database under the running server, from outside it.
    let conn = rusqlite::Connection::open(&app.db).unwrap();
    conn.execute_batch("DROP TABLE links").unwrap();
    // Readers see the change once their snapshot ages out (100 ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let r = loop {
        let r = app.get("/link/abcdefghij").await;
        if r.status() != 404 || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, json!({ "error": "internal server error" }));
    let r = app.create("https://example.com").await;
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({ "error": "internal server error" })
    );
}

#[tokio::test]
async fn with_locality_on_consecutive_codes_share_a_prefix_that_survives_a_restart() {
    let app = spawn_app(&["--cache", "none", "--code-locality", "on"]).await;
    assert_eq!(app.stats().await["writer"]["code_locality"], true);
    // 1,030 creates: the first 1,023 share "AA", the rest move on to "AB".
    // In rounds of 128 concurrent creates, so that the test's connections
    // stay well under a 1,024 descriptor limit.
    let mut prefixes = Vec::new();
    for (round, n) in [128; 8].into_iter().chain([6]).enumerate() {
        for c in app.create_concurrently(&format!("bucket{round}"), n).await {
            assert_eq!(c.status, 201, "{}", c.body);
            prefixes.push(c.code()[..2].to_owned());
        }
    }
    let aa = prefixes.iter().filter(|p| *p == "AA").count();
    let ab = prefixes.iter().filter(|p| *p == "AB").count();
    assert_eq!((aa, ab), (1023, 7), "{prefixes:?}");
    // A restart numbers creates on from the highest id: still "AB".
    let db = app.db.clone();
    let dir = app.stop().await;
    let again = spawn_app_on(&db, &["--cache", "none", "--code-locality", "on"]).await;
    let code = again.create_ok("https://example.com/after-restart").await;
    assert!(code.starts_with("AB"), "{code}");
    drop(dir);

    // The default: every character random.
    let random = spawn_app(&["--cache", "none"]).await;
    assert_eq!(random.stats().await["writer"]["code_locality"], false);
    let mut prefixes: Vec<String> = random
        .create_concurrently("random", 64)
        .await
        .iter()
        .map(|c| c.code()[..2].to_owned())
        .collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    assert!(prefixes.len() > 32, "{prefixes:?}");
}
