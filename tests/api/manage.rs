//! Link management and API keys: every status the API documents,
//! the ownership matrix, edits and deletes through every cache mode, paging
//! while links are created, export and import, and the schema migration.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, run_keys, run_keys_like, spawn_app, spawn_app_in, spawn_app_like,
    spawn_app_on,
};
use crate::valkey_server::ValkeyServer;

/// A key printed by `litelink keys create` beside a running server works
/// at once: an unknown key makes the server read its keys again (at most
/// every 100 ms), not wait for the next periodic reload.
#[tokio::test]
async fn a_new_key_works_as_soon_as_it_is_printed() {
    let app = spawn_app(&[]).await;
    for i in 0..5 {
        let key = app.run_keys(&["create", "--name", &format!("at-once-{i}")], false);
        let r = app
            .api(Method::GET, "/api/v1/links?limit=1", Some(&key), None)
            .await;
        assert_eq!(r.status(), 200, "key {i} refused right after it was made");
    }
}

/// Unknown and revoked keys get one answer, so that it does not confirm a
/// leaked string was once a key.
#[tokio::test]
async fn unknown_and_revoked_keys_get_the_same_answer() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("gone", false).await;
    app.run_keys(&["revoke", "gone"], false);
    let deadline = Instant::now() + Duration::from_secs(5);
    let answer = |k: String| {
        let app = &app;
        async move {
            let r = app.api(Method::GET, "/api/v1/links", Some(&k), None).await;
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    let revoked = loop {
        let a = answer(key.clone()).await;
        if a.0 == 401 {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "the revoked key is still accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let unknown = answer(format!("ll_{}", "x".repeat(32))).await;
    assert_eq!(revoked, unknown);
    // Every 401 names the scheme it wants, with or without a key sent.
    for key in [None, Some(key.as_str())] {
        let r = app.api(Method::GET, "/api/v1/links", key, None).await;
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
    }
}

/// Key names are unique; a key's last use is written once, then not again
/// within the minute however often it is used, and once more at shutdown.
#[tokio::test]
async fn key_names_are_unique_and_last_use_is_written_at_most_once_a_minute() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("alice", false).await;
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["keys", "create", "--name", "alice", "--db"])
        .arg(&app.db)
        .output()
        .expect("litelink keys");
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("alice") && err.contains("exists"), "{err}");

    let last_used = || -> Option<i64> {
        rusqlite::Connection::open(&app.db)
            .expect("open")
            .query_row(
                "SELECT last_used_at FROM keys WHERE name = 'alice'",
                [],
                |r| r.get(0),
            )
            .expect("alice")
    };
    let use_key = async || {
        let r = app
            .api(Method::GET, "/api/v1/links", Some(&key), None)
            .await;
        assert_eq!(r.status(), 200);
    };
    use_key().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Some(at) = last_used() {
            break at;
        }
        assert!(Instant::now() < deadline, "the first use was never written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Used again for 2.5 s, through two or more of the once-a-second
    // writes: the stored time stays.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        use_key().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last_used(), Some(first));
    let db = app.db.clone();
    let _dir = app.stop().await;
    let at_shutdown: Option<i64> = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT last_used_at FROM keys WHERE name = 'alice'",
            [],
            |r| r.get(0),
        )
        .expect("alice");
    assert!(
        at_shutdown.is_some_and(|t| t > first),
        "{at_shutdown:?} after {first}"
    );
}

/// A key that is sent must be valid in whichever header it is sent: a
/// valid admin key in one header does not cover a bad one in the other,
/// and two different keys are refused.
#[tokio::test]
async fn both_key_headers_must_name_one_valid_key() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("root", true).await;
    let other = app.new_key("other", false).await;
    app.run_keys(&["revoke", "other"], false);
    let send = |bearer: String, x_api_key: String, path: &'static str| {
        let app = &app;
        async move {
            app.client
                .get(app.url(path))
                .header("authorization", format!("Bearer {bearer}"))
                .header("x-api-key", x_api_key)
                .send()
                .await
                .expect("request")
        }
    };
    for path in ["/api/v1/links", "/stats", "/metrics"] {
        for bad in [other.clone(), "ll_unknown".to_owned()] {
            let r = send(bad.clone(), admin.clone(), path).await;
            assert_error(r, 400, "two different API keys").await;
            let r = send(admin.clone(), bad, path).await;
            assert_error(r, 400, "two different API keys").await;
        }
        let same = send(admin.clone(), admin.clone(), path).await;
        assert_eq!(same.status(), 200, "{path}");
        // One header twice, naming two keys: refused as two headers are.
        for header in ["x-api-key", "authorization"] {
            let value = |k: &str| match header {
                "authorization" => format!("Bearer {k}"),
                _ => k.to_owned(),
            };
            let mut headers = reqwest::header::HeaderMap::new();
            headers.append(header, value(&admin).parse().expect("value"));
            headers.append(header, value("ll_unknown").parse().expect("value"));
            let r = app
                .client
                .get(app.url(path))
                .headers(headers)
                .send()
                .await
                .expect("request");
            assert_error(r, 400, "two different API keys").await;
        }
    }
}

async fn create_with(app: &TestApp, key: Option<&str>, body: Value) -> reqwest::Response {
    app.api(Method::POST, "/api/v1/links", key, Some(body))
        .await
}

async fn json(r: reqwest::Response) -> Value {
    r.json().await.expect("json")
}

crate::on_both_stores! {
    async fn keys_are_sent_either_way_and_revocation_counts_within_a_second(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let key = app.new_key("alice", false).await;
    assert!(key.starts_with("ll_") && key.len() == 35, "{key}");
    let list = |k: &str| {
        app.client
            .get(app.url("/api/v1/links"))
            .header("x-api-key", k)
            .send()
    };
    assert_eq!(list(&key).await.expect("x-api-key").status(), 200);
    assert_error(
        app.api(Method::GET, "/api/v1/links", None, None).await,
        401,
        "key",
    )
    .await;
    assert_error(
        app.api(Method::GET, "/api/v1/links", Some("ll_wrong"), None)
            .await,
        401,
        "invalid API key",
    )
    .await;
    // Only a hash is stored (in the file and its WAL; PostgreSQL's own
    // files are not ours to read, but its rows are the same).
    let db = std::fs::read(&app.db).unwrap_or_default();
    let wal = std::fs::read(format!("{}-wal", app.db.display())).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(
            !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
            "the secret is in the database"
        );
    }
    app.run_keys(&["revoke", "alice"], false);
    let revoked = Instant::now();
    loop {
        let r = app
            .api(Method::GET, "/api/v1/links", Some(&key), None)
            .await;
        if r.status() == 401 {
            assert_error(r, 401, "invalid API key").await;
            break;
        }
        assert!(revoked.elapsed() < Duration::from_secs(3), "still accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = app.run_keys(&["list"], false);
    assert!(listed.contains("alice"), "{listed}");
    // The key's use is recorded (at the latest when the server stops).
    let (db, pg) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;
    let listed = run_keys_like(&db, &pg, &["list"], false);
    let line = listed
        .lines()
        .find(|l| l.starts_with("alice"))
        .expect("alice");
    assert_eq!(
        line.matches("Z").count(),
        3,
        "created, last used, revoked: {line}"
    );
    drop(dir);
}
}

crate::on_both_stores! {
    async fn creates_follow_the_rules_on_both_routes(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let key = app.new_key("alice", false).await;
    // Open mode: no key is fine, and makes an ownerless link.
    let r = create_with(&app, None, json!({"url": "https://example.com/open"})).await;
    assert_eq!(r.status(), 201);
    let body = json(r).await;
    assert_eq!(body["owner"], Value::Null);
    assert_eq!(body["expired"], false);
    // A key that is sent must be valid, on either route.
    for path in ["/link", "/api/v1/links"] {
        let r = app
            .api(
                Method::POST,
                path,
                Some("ll_nope"),
                Some(json!({"url": "https://e.com"})),
            )
            .await;
        assert_error(r, 401, "invalid API key").await;
        let r = app
            .api(
                Method::POST,
                path,
                None,
                Some(json!({"url": "https://e.com", "code": "mine"})),
            )
            .await;
        assert_error(r, 401, "key").await;
        let r = app
            .api(
                Method::POST,
                path,
                None,
                Some(json!({"url": "https://e.com", "expire_at": "x"})),
            )
            .await;
        assert_error(r, 400, "unknown field 'expire_at'").await;
    }
    // An alias with a key, and its link object.
    let r = create_with(
        &app,
        Some(&key),
        json!({"url": "https://example.com/sale", "code": "spring-sale", "expires_at": "2999-03-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(r.status(), 201);
    let body = json(r).await;
    assert_eq!(body["code"], "spring-sale");
    assert_eq!(body["url"], "https://example.com/sale");
    assert_eq!(body["owner"], "alice");
    assert_eq!(body["expires_at"], "2999-03-01T00:00:00Z");
    assert_eq!(
        body["short_url"],
        format!("http://{}/spring-sale", app.addr)
    );
    assert!(
        body["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    // Taken, reserved, malformed, past.
    for (body, status, needle) in [
        (
            json!({"url": "https://e.com", "code": "spring-sale"}),
            409,
            "taken",
        ),
        (
            json!({"url": "https://e.com", "code": "health"}),
            400,
            "reserved",
        ),
        (
            json!({"url": "https://e.com", "code": "_hidden"}),
            400,
            "reserved",
        ),
        (
            json!({"url": "https://e.com", "code": "ab"}),
            400,
            "3 to 64",
        ),
        (
            json!({"url": "https://e.com", "code": "a/b/c"}),
            400,
            "characters",
        ),
        (
            json!({"url": "https://e.com", "expires_at": "2001-01-01T00:00:00Z"}),
            400,
            "future",
        ),
        (
            json!({"url": "https://e.com", "expires_at": "soon"}),
            400,
            "RFC 3339",
        ),
    ] {
        assert_error(create_with(&app, Some(&key), body).await, status, needle).await;
    }
    // The seed route takes the same fields and keeps its answer's shape.
    let r = app
        .api(
            Method::POST,
            "/link",
            Some(&key),
            Some(json!({"url": "https://e.com/s", "code": "seed-alias"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let body = json(r).await;
    assert_eq!(body["short_link"], "seed-alias");
    assert_eq!(body["link"], "https://e.com/s");
    // A deleted code is never issued again.
    let r = app
        .api(Method::DELETE, "/api/v1/links/seed-alias", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    let r = create_with(
        &app,
        Some(&key),
        json!({"url": "https://e.com", "code": "seed-alias"}),
    )
    .await;
    assert_error(r, 409, "taken").await;

    // Key-only creation.
    let closed = spawn_app_in(&store, &["--create-auth", "key"]).await;
    let k = closed.new_key("bob", false).await;
    for path in ["/link", "/api/v1/links"] {
        let body = Some(json!({"url": "https://e.com/closed"}));
        let r = closed.api(Method::POST, path, None, body.clone()).await;
        assert_error(r, 401, "key").await;
        assert_eq!(
            closed
                .api(Method::POST, path, Some(&k), body)
                .await
                .status(),
            201
        );
    }
}
}

// Who may see and change which link: the owner, an admin; not another
// key (404: no existence leak), not a caller without a key, not a
// revoked key (401).
crate::on_both_stores! {
    async fn the_ownership_matrix_holds(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let owner = app.new_key("owner", false).await;
    let other = app.new_key("other", false).await;
    let admin = app.new_key("admin", true).await;
    let revoked = app.new_key("revoked", false).await;
    app.run_keys(&["revoke", "revoked"], false);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let owned =
        json(create_with(&app, Some(&owner), json!({"url": "https://e.com/owned"})).await).await;
    let ownerless =
        json(create_with(&app, None, json!({"url": "https://e.com/ownerless"})).await).await;
    for (link, who, key, expect) in [
        (&owned, "owner", Some(&owner), 200),
        (&owned, "admin", Some(&admin), 200),
        (&owned, "other", Some(&other), 404),
        (&owned, "no key", None, 401),
        (&owned, "revoked", Some(&revoked), 401),
        (&ownerless, "admin", Some(&admin), 200),
        (&ownerless, "owner", Some(&owner), 404),
        (&ownerless, "no key", None, 401),
    ] {
        let path = format!("/api/v1/links/{}", link["code"].as_str().expect("code"));
        let key = key.map(String::as_str);
        let got = app.api(Method::GET, &path, key, None).await.status();
        assert_eq!(got, expect, "GET by {who}");
        let patch = Some(json!({"url": "https://e.com/patched"}));
        let got = app.api(Method::PATCH, &path, key, patch).await.status();
        assert_eq!(got, expect, "PATCH by {who}");
    }
    // Deletes last: other keys cannot, the owner can.
    let path = format!("/api/v1/links/{}", owned["code"].as_str().expect("code"));
    assert_eq!(
        app.api(Method::DELETE, &path, Some(&other), None)
            .await
            .status(),
        404
    );
    assert_eq!(
        app.api(Method::DELETE, &path, None, None).await.status(),
        401
    );
    assert_eq!(
        app.api(Method::DELETE, &path, Some(&revoked), None)
            .await
            .status(),
        401
    );
    // An ownerless link is an admin's to delete, and any link is.
    let unowned = format!("/api/v1/links/{}", ownerless["code"].as_str().expect("code"));
    assert_eq!(
        app.api(Method::DELETE, &unowned, Some(&owner), None)
            .await
            .status(),
        404
    );
    let second =
        json(create_with(&app, Some(&owner), json!({"url": "https://e.com/second"})).await).await;
    let second = format!("/api/v1/links/{}", second["code"].as_str().expect("code"));
    assert_eq!(
        app.api(Method::DELETE, &second, Some(&admin), None)
            .await
            .status(),
        204
    );
    assert_eq!(app.api(Method::GET, &second, Some(&owner), None).await.status(), 404);
    assert_eq!(app.stats().await["links"], 2);
    assert_eq!(
        app.api(Method::DELETE, &path, Some(&owner), None)
            .await
            .status(),
        204
    );
    // The count of links follows deletes, also across a restart.
    assert_eq!(app.stats().await["links"], 1);
    assert_eq!(
        app.api(Method::DELETE, &path, Some(&owner), None)
            .await
            .status(),
        404
    );
    // Listing shows a key its own links, an admin all of them.
    let mine = json(
        app.api(Method::GET, "/api/v1/links", Some(&owner), None)
            .await,
    )
    .await;
    assert_eq!(mine["links"].as_array().expect("links").len(), 0, "{mine}");
    let all = json(
        app.api(Method::GET, "/api/v1/links", Some(&admin), None)
            .await,
    )
    .await;
    assert_eq!(all["links"].as_array().expect("links").len(), 1, "{all}");
    let (db, pg) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;
    let again = spawn_app_like(&db, &pg, &[]).await;
    assert_eq!(again.stats().await["links"], 1);
    drop(dir);
}
}

crate::on_both_stores! {
    async fn expired_links_answer_410_and_stay_manageable(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let key = app.new_key("alice", false).await;
    let soon = time_in(Duration::from_millis(1500));
    let r = create_with(
        &app,
        Some(&key),
        json!({"url": "https://e.com/brief", "code": "brief", "expires_at": soon}),
    )
    .await;
    assert_eq!(r.status(), 201);
    assert_eq!(app.get("/brief").await.status(), 302);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert_error(app.get("/brief").await, 410, "expired").await;
    assert_error(app.get("/link/brief").await, 410, "expired").await;
    let r = app
        .api(Method::GET, "/api/v1/links/brief", Some(&key), None)
        .await;
    assert_eq!(json(r).await["expired"], true);
    // Clearing the expiry brings it back at once.
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/brief",
            Some(&key),
            Some(json!({"expires_at": null})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.get("/brief").await.status(), 302);
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/brief",
            Some(&key),
            Some(json!({"expires_at": "2001-01-01T00:00:00Z"})),
        )
        .await;
    assert_error(r, 400, "future").await;
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/brief",
            Some(&key),
            Some(json!({"url": null})),
        )
        .await;
    assert_error(r, 400, "url").await;
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/brief",
            Some(&key),
            Some(json!({"target": "x"})),
        )
        .await;
    assert_error(r, 400, "unknown field").await;
}
}

/// A field given twice is refused, as an unknown one is: a filter in
/// front that reads the first `url` would otherwise see another URL than
/// the one stored.
#[tokio::test]
async fn a_field_given_twice_is_refused() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("dup", false).await;
    let code = app.create_ok("https://example.com/dup").await;
    let twice = r#"{"url": "https://a.example/", "url": "https://b.example/"}"#;
    for (method, path, auth) in [
        (Method::POST, "/link".to_owned(), None),
        (Method::POST, "/api/v1/links".to_owned(), Some(&key)),
        (Method::PATCH, format!("/api/v1/links/{code}"), Some(&key)),
    ] {
        let mut req = app
            .client
            .request(method.clone(), app.url(&path))
            .header("content-type", "application/json")
            .body(twice);
        if let Some(key) = auth {
            req = req.bearer_auth(key);
        }
        let r = req.send().await.expect("request");
        assert_error(r, 400, "given twice").await;
    }
    let r = app
        .client
        .post(app.url("/link"))
        .header("content-type", "application/json")
        .body(r#"{"url": "https://a.example/", "max_visits": 1, "max_visits": 2}"#)
        .send()
        .await
        .expect("request");
    assert_error(r, 400, "given twice").await;
}

/// RFC 3339 for now + `d`.
fn time_in(d: Duration) -> String {
    let at = std::time::SystemTime::now() + d;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, dd) = civil(days);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

crate::on_both_stores! {
    async fn edits_and_deletes_are_seen_at_once_in_every_cache_mode(store: Store) {
    let valkey = ValkeyServer::start();
    for mode in ["none", "memory", "valkey", "tiered"] {
        let url = valkey.url();
        let prefix = format!("{mode}:");
        let app = spawn_app_in(&store, &[
            "--cache",
            mode,
            "--valkey-url",
            &url,
            "--valkey-prefix",
            &prefix,
            "--valkey-timeout-ms",
            "2000",
        ])
        .await;
        let key = app.new_key("alice", false).await;
        let code = format!("edit-{mode}");
        let r = create_with(
            &app,
            Some(&key),
            json!({"url": "https://e.com/old", "code": code}),
        )
        .await;
        assert_eq!(r.status(), 201, "{mode}");
        for _ in 0..3 {
            assert_eq!(
                app.get(&format!("/{code}")).await.headers()["location"],
                "https://e.com/old"
            );
        }
        let path = format!("/api/v1/links/{code}");
        let r = app
            .api(
                Method::PATCH,
                &path,
                Some(&key),
                Some(json!({"url": "https://e.com/new"})),
            )
            .await;
        assert_eq!(r.status(), 200, "{mode}");
        let r = app.get(&format!("/{code}")).await;
        assert_eq!(r.headers()["location"], "https://e.com/new", "{mode}");
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(json(r).await["link"], "https://e.com/new", "{mode}");
        assert_eq!(
            app.api(Method::DELETE, &path, Some(&key), None)
                .await
                .status(),
            204
        );
        assert_eq!(app.get(&format!("/{code}")).await.status(), 404, "{mode}");
        assert_eq!(
            app.get(&format!("/link/{code}")).await.status(),
            404,
            "{mode}"
        );
        if mode == "valkey" || mode == "tiered" {
            let left: Option<String> = redis::cmd("GET")
                .arg(format!("{prefix}{code}"))
                .query(&mut valkey.connection())
                .expect("GET");
            assert!(
                left.as_deref() != Some("https://e.com/new"),
                "{mode}: {left:?}"
            );
        }
    }
}
}

/// The store is the truth: an edit made while Valkey cannot be reached
/// succeeds, and Valkey's stale copy is never served afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valkey_outage_never_brings_back_a_stale_target() {
    let valkey = ValkeyServer::start();
    let url = valkey.url();
    let app = spawn_app(&[
        "--cache",
        "valkey",
        "--valkey-url",
        &url,
        "--valkey-prefix",
        "o:",
        "--valkey-timeout-ms",
        "100",
    ])
    .await;
    let key = app.new_key("alice", false).await;
    let r = create_with(
        &app,
        Some(&key),
        json!({"url": "https://e.com/v1", "code": "outage"}),
    )
    .await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        app.get("/outage").await.headers()["location"],
        "https://e.com/v1"
    );
    // Valkey stops answering but keeps its data (DEBUG SLEEP).
    let mut sleeper = valkey.connection();
    let sleeping = std::thread::spawn(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SLEEP").arg(2).query(&mut sleeper);
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/outage",
            Some(&key),
            Some(json!({"url": "https://e.com/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200, "the edit succeeds without Valkey");
    assert_eq!(
        app.get("/outage").await.headers()["location"],
        "https://e.com/v2"
    );
    sleeping.join().expect("sleeper");
    // Valkey answers again with the old value still in it: it must not be
    // served, now or later.
    for _ in 0..20 {
        assert_eq!(
            app.get("/outage").await.headers()["location"],
            "https://e.com/v2"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.stats().await["cache"]["valkey"]["pending_invalidations"] != 0 {
        assert!(Instant::now() < deadline, "invalidations never applied");
        assert_eq!(
            app.get("/outage").await.headers()["location"],
            "https://e.com/v2"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stored: Option<String> = redis::cmd("GET")
        .arg("o:outage")
        .query(&mut valkey.connection())
        .expect("GET");
    assert_ne!(stored.as_deref(), Some("https://e.com/v1"));
}

/// Valkey stopped (its data kept on disk) and restarted: what it held
/// before the outage comes back with it, and must not be served after an
/// edit or a delete made while it was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_valkey_never_serves_what_was_changed_while_it_was_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut valkey = ValkeyServer::start_persistent(dir.path());
    let url = valkey.url();
    let app = spawn_app(&[
        "--cache",
        "valkey",
        "--valkey-url",
        &url,
        "--valkey-prefix",
        "p:",
        "--valkey-timeout-ms",
        "200",
    ])
    .await;
    let key = app.new_key("alice", false).await;
    for code in ["edited", "deleted"] {
        let r = create_with(
            &app,
            Some(&key),
            json!({"url": format!("https://e.com/{code}/v1"), "code": code}),
        )
        .await;
        assert_eq!(r.status(), 201);
        assert_eq!(app.get(&format!("/{code}")).await.status(), 302);
    }
    let held: Option<String> = redis::cmd("GET")
        .arg("p:edited")
        .query(&mut valkey.connection())
        .expect("GET");
    assert_eq!(
        held.as_deref(),
        Some("https://e.com/edited/v1"),
        "in Valkey before the outage"
    );

    valkey.kill();
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/edited",
            Some(&key),
            Some(json!({"url": "https://e.com/edited/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200, "the edit succeeds without Valkey");
    assert_eq!(
        app.api(Method::DELETE, "/api/v1/links/deleted", Some(&key), None)
            .await
            .status(),
        204
    );
    assert_eq!(
        app.get("/edited").await.headers()["location"],
        "https://e.com/edited/v2"
    );
    assert_eq!(app.get("/deleted").await.status(), 404);

    valkey.restart();
    let back: Option<String> = redis::cmd("GET")
        .arg("p:edited")
        .query(&mut valkey.connection())
        .expect("GET");
    assert_eq!(
        back.as_deref(),
        Some("https://e.com/edited/v1"),
        "Valkey came back with the old copy"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(
            app.get("/edited").await.headers()["location"],
            "https://e.com/edited/v2"
        );
        assert_eq!(app.get("/deleted").await.status(), 404);
        if app.stats().await["cache"]["valkey"]["pending_invalidations"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "invalidations never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Applied in Valkey itself, and Valkey is used again.
    let left: Option<String> = redis::cmd("GET")
        .arg("p:edited")
        .query(&mut valkey.connection())
        .expect("GET");
    assert_ne!(left.as_deref(), Some("https://e.com/edited/v1"));
    for _ in 0..5 {
        assert_eq!(
            app.get("/edited").await.headers()["location"],
            "https://e.com/edited/v2"
        );
    }
    assert!(
        app.stats().await["cache"]["valkey"]["hits"]
            .as_u64()
            .expect("hits")
            > 0
    );
}

// Keyset pagination: paging through 2,500 links while more are created
// neither repeats nor skips one that existed when the first page was read.
crate::on_both_stores! {
    async fn listing_pages_through_links_while_more_are_created(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let admin = app.new_key("admin", true).await;
    let mut existing = HashSet::new();
    for round in 0..20 {
        for c in app.create_concurrently(&format!("page{round}"), 125).await {
            assert_eq!(c.status, 201);
            existing.insert(c.code().to_owned());
        }
    }
    assert_eq!(existing.len(), 2500);
    let creating = {
        let (client, url) = (app.client.clone(), app.url("/link"));
        tokio::spawn(async move {
            for i in 0..300 {
                let _ = client
                    .post(&url)
                    .json(&json!({"url": format!("https://e.com/more/{i}")}))
                    .send()
                    .await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/links?limit=97&cursor={c}"),
            None => "/api/v1/links?limit=97".to_owned(),
        };
        let page = json(app.api(Method::GET, &path, Some(&admin), None).await).await;
        for l in page["links"].as_array().expect("links") {
            seen.push(l["code"].as_str().expect("code").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    creating.await.expect("creator");
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a link was listed twice");
    let missing: Vec<_> = existing.difference(&unique).collect();
    assert!(missing.is_empty(), "{} links skipped", missing.len());
    // The query filter, and limits.
    let found = json(
        app.api(Method::GET, "/api/v1/links?q=PAGE7/1", Some(&admin), None)
            .await,
    )
    .await;
    let urls: Vec<&str> = found["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["url"].as_str().expect("url"))
        .collect();
    assert!(
        !urls.is_empty() && urls.iter().all(|u| u.contains("page7/1")),
        "{urls:?}"
    );
    // Without a limit: 50, newest first.
    let first = json(app.api(Method::GET, "/api/v1/links", Some(&admin), None).await).await;
    let links = first["links"].as_array().expect("links");
    assert_eq!(links.len(), 50);
    let made: Vec<time::OffsetDateTime> = links
        .iter()
        .map(|l| {
            let at = l["created_at"].as_str().expect("created_at");
            time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
                .expect("RFC 3339")
        })
        .collect();
    assert!(made.windows(2).all(|w| w[0] >= w[1]), "{made:?}");
    let newest = json(
        app.api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/newest"})),
        )
        .await,
    )
    .await;
    let page = json(app.api(Method::GET, "/api/v1/links?limit=1", Some(&admin), None).await).await;
    assert_eq!(page["links"][0]["code"], newest["code"], "{page}");
    // `q` is also a prefix of the code, in its case.
    let code = newest["code"].as_str().expect("code");
    let found = json(
        app.api(
            Method::GET,
            &format!("/api/v1/links?q={}&limit=1000", &code[..5]),
            Some(&admin),
            None,
        )
        .await,
    )
    .await;
    let codes: Vec<&str> = found["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["code"].as_str().expect("code"))
        .collect();
    assert!(codes.contains(&code), "{codes:?}");
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=x"] {
        let r = app
            .api(
                Method::GET,
                &format!("/api/v1/links?{bad}"),
                Some(&admin),
                None,
            )
            .await;
        assert_error(r, 400, "").await;
    }
}
}

fn litelink(args: &[&str], db: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("litelink")
}

#[tokio::test]
async fn export_and_import_round_trip_in_both_formats() {
    let app = spawn_app(&["--cache", "none"]).await;
    let alice = app.new_key("alice", false).await;
    let bob = app.new_key("bob", false).await;
    for (key, body) in [
        (
            Some(&alice),
            json!({"url": "https://e.com/a,1", "code": "alias-a"}),
        ),
        (
            Some(&bob),
            json!({"url": "https://e.com/b\"q", "expires_at": "2999-01-01T00:00:00Z"}),
        ),
        (None, json!({"url": "https://de.wikipedia.org/wiki/Köln"})),
        (
            Some(&alice),
            json!({"url": "https://e.com/gone", "code": "gone"}),
        ),
    ] {
        assert_eq!(
            create_with(&app, key.map(String::as_str), body)
                .await
                .status(),
            201
        );
    }
    assert_eq!(
        app.api(Method::DELETE, "/api/v1/links/gone", Some(&alice), None)
            .await
            .status(),
        204
    );
    let dir = tempfile::tempdir().expect("tempdir");
    for format in ["jsonl", "csv"] {
        let first = dir.path().join(format!("first.{format}"));
        let out = litelink(
            &[
                "export",
                "--format",
                format,
                "--out",
                first.to_str().expect("path"),
            ],
            &app.db,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&first).expect("export");
        assert!(
            text.contains("alias-a") && text.contains("gone") && text.contains("bob"),
            "{text}"
        );

        // Into a fresh database with keys of the same names.
        let fresh = dir.path().join(format!("fresh-{format}.db"));
        run_keys(&fresh, &["create", "--name", "alice"], false);
        run_keys(&fresh, &["create", "--name", "bob"], false);
        let out = litelink(
            &["import", first.to_str().expect("path"), "--format", format],
            &fresh,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let again = dir.path().join(format!("again.{format}"));
        let out = litelink(
            &[
                "export",
                "--format",
                format,
                "--out",
                again.to_str().expect("path"),
            ],
            &fresh,
        );
        assert!(out.status.success());
        assert_eq!(
            std::fs::read_to_string(&again).expect("again"),
            text,
            "{format} round trip"
        );

        // Importing again: every code exists with its target, so nothing
        // lands and nothing is wrong.
        let out = litelink(
            &["import", first.to_str().expect("path"), "--format", format],
            &fresh,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(
            err.contains("imported 0 links and 0 tombstones; 4 unchanged, 0 skipped, 0 conflicts"),
            "{err}"
        );
    }
    // A deleted code that was imported is never issued again.
    let fresh = dir.path().join("fresh-jsonl.db");
    let served = spawn_app_on(&fresh, &[]).await;
    let carol = served.new_key("carol", false).await;
    let r = create_with(
        &served,
        Some(&carol),
        json!({"url": "https://e.com", "code": "gone"}),
    )
    .await;
    assert_error(r, 409, "taken").await;
    // Import refuses to run beside a server.
    let out = litelink(
        &[
            "import",
            dir.path().join("first.jsonl").to_str().expect("path"),
        ],
        &fresh,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refuses"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn import_takes_only_password_hashes_this_server_could_have_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.jsonl");
    // A salt and a hash of the right lengths; only the costs differ.
    let tail = "c2FsdHNhbHRzYWx0c2FsdA$YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE";
    let line = |code: &str, params: &str| {
        format!(
            r#"{{"code":"{code}","url":"https://e.com/{code}","created_at":"2026-01-01T00:00:00Z","password_hash":"$argon2id$v=19${params}${tail}"}}"#
        )
    };
    std::fs::write(
        &file,
        [
            line("huge", "m=4194304,t=4294967295,p=1"),
            line("weak", "m=8,t=1,p=1"),
            line("own", "m=19456,t=2,p=1"),
        ]
        .join("\n"),
    )
    .expect("write");
    let db = dir.path().join("i.db");
    let out = litelink(&["import", file.to_str().expect("path")], &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "line 1: password_hash",
        "line 2: password_hash",
        "imported 1 links",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

/// CSV has no columns for a password, rules or an expired target: a CSV
/// export refuses links with them (naming each, leaving no file), and
/// writes them without those only when told `--lossy`, naming them still.
#[tokio::test]
async fn a_csv_export_refuses_links_it_cannot_carry_unless_lossy() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("admin", true).await;
    for body in [
        json!({"url": "https://e.com/open", "code": "open"}),
        json!({"url": "https://e.com/a", "code": "secret", "password": "correct horse"}),
        json!({"url": "https://e.com/b", "code": "later", "expires_at": "2030-01-01T00:00:00Z",
               "expired_url": "https://e.com/gone"}),
        json!({"url": "https://e.com/c", "code": "ruled",
               "rules": [{"if": {"device": "ios"}, "url": "https://e.com/ios"}]}),
    ] {
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&key), Some(body))
            .await;
        assert_eq!(r.status(), 201);
    }
    let db = app.db.clone();
    let dir = app.stop().await.expect("its directory");
    let file = dir.path().join("out.csv");
    let path = file.to_str().expect("path");
    let out = litelink(&["export", "--format", "csv", "--out", path], &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for needle in ["3 links", "secret", "later", "ruled", "--lossy"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(!file.exists(), "no partial export is left");

    let out = litelink(
        &["export", "--format", "csv", "--lossy", "--out", path],
        &db,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for needle in [
        "secret: written without",
        "later: written without",
        "ruled: written without",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(!err.contains("open:"), "{err}");
    let text = std::fs::read_to_string(&file).expect("export");
    assert_eq!(text.lines().count(), 5, "a header and four links: {text}");
    // JSON lines carry them whole, with no flag.
    let out = litelink(&["export", "--out", path], &db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(dir);
}

/// Counts no link could have, values the visit counter never writes
/// (spreadsheet formulas, markup, unknown families), more values on a day
/// than the counter keeps, and a creation in the future: each line is
/// refused, naming its line, and the good line is imported.
#[test]
fn import_refuses_visit_counts_and_values_no_counter_could_have_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.jsonl");
    let line = |code: &str, rest: &str| {
        format!(
            r#"{{"code":"{code}","url":"https://e.com/{code}","created_at":"2026-01-01T00:00:00Z"{rest}}}"#
        )
    };
    let hosts: Vec<String> = (0..51)
        .map(|i| format!(r#"["2026-01-02T00:00:00Z","h{i}.example",1]"#))
        .collect();
    let lines = [
        line("a1", r#","visits":18446744073709551615"#),
        line("a2", r#","visits":9007199254740992"#),
        line(
            "a3",
            r#","history":{"hours":[["2026-01-02T05:00:00Z",9223372036854775807,0,0]]}"#,
        ),
        line(
            "a4",
            r#","history":{"hours":[["2026-01-02T05:00:00Z",4294967297,0,0]]}"#,
        ),
        line(
            "a5",
            r#","history":{"referrers":[["2026-01-02T00:00:00Z","=cmd|' /C calc'!A0",3]]}"#,
        ),
        line(
            "a6",
            r#","history":{"facets":[["2026-01-02T00:00:00Z","country","=1+1",3]]}"#,
        ),
        line(
            "a7",
            r#","history":{"facets":[["2026-01-02T00:00:00Z","browser","<b>x</b>",3]]}"#,
        ),
        line(
            "a8",
            r#","history":{"facets":[["2026-01-02T00:00:00Z","city","DE/@SUM(1)",3]]}"#,
        ),
        line(
            "a9",
            &format!(r#","history":{{"referrers":[{}]}}"#, hosts.join(",")),
        ),
        r#"{"code":"a10","url":"https://e.com/a10","created_at":"2999-01-01T00:00:00Z"}"#
            .to_owned(),
        line(
            "good",
            r#","visits":4294967296,"history":{"hours":[["2026-01-02T05:00:00Z",4294967296,0,0]],"referrers":[["2026-01-02T00:00:00Z","news.example",2],["2026-01-02T00:00:00Z","(direct)",1]],"facets":[["2026-01-02T00:00:00Z","country","DE",3],["2026-01-02T00:00:00Z","city","DE/Frankfurt am Main",3],["2026-01-02T00:00:00Z","browser","Firefox",3],["2026-01-02T00:00:00Z","os","(other)",3]]}"#,
        ),
    ];
    std::fs::write(&file, lines.join("\n")).expect("write");
    let db = dir.path().join("i.db");
    let out = litelink(&["import", file.to_str().expect("path")], &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "line 1: visits",
        "line 2: visits",
        "line 3: history hour",
        "line 4: history hour",
        "line 5: history referrer",
        "line 6: history country",
        "line 7: history browser",
        "line 8: history city",
        "line 9: history: more than 50 referrer hosts",
        "line 10: created_at",
        "imported 1 links",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(!err.contains("line 11:"), "{err}");
}

#[test]
fn import_reports_bad_lines_and_unknown_owners_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.jsonl");
    std::fs::write(
        &file,
        [
            r#"{"code":"good1","url":"https://e.com/1","created_at":"2026-01-01T00:00:00Z","expires_at":"2001-01-01T00:00:00Z","owner":"nobody","deleted_at":null}"#,
            r#"{"code":"bad url","url":"https://e.com/2","created_at":"2026-01-01T00:00:00Z","expires_at":null,"owner":null,"deleted_at":null}"#,
            "not json",
            r#"{"code":"good2","url":"ftp://e.com","created_at":"2026-01-01T00:00:00Z","expires_at":null,"owner":null,"deleted_at":null}"#,
            r#"{"code":"good3","url":"https://e.com/3","created_at":"2026-01-01T00:00:00Z","expires_at":null,"owner":"nobody","deleted_at":null}"#,
            r#"{"code":"good1","url":"https://e.com/dup","created_at":"2026-01-01T00:00:00Z","expires_at":null,"owner":null,"deleted_at":null}"#,
        ]
        .join("\n"),
    )
    .expect("write");
    let db = dir.path().join("i.db");
    let out = litelink(&["import", file.to_str().expect("path")], &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "line 2:",
        "line 3:",
        "line 4:",
        "conflicts (the code exists with another target; skipped): lines 6",
        "imported 2 links",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert_eq!(err.matches("no user named 'nobody'").count(), 1, "{err}");
    // Past expiries are kept: the imported link is expired.
    let conn = rusqlite::Connection::open(&db).expect("open");
    let expires: Option<i64> = conn
        .query_row(
            "SELECT expires_at FROM links WHERE code = 'good1'",
            [],
            |r| r.get(0),
        )
        .expect("row");
    assert_eq!(expires, Some(978_307_200_000), "2001-01-01T00:00:00Z");
}

/// Import refuses what the API refuses: with the server's options, a
/// private target, a denied host and the service's own host are each a
/// refused line, named in the report, and the rest is imported.
#[test]
fn import_checks_targets_as_the_api_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.jsonl");
    let line = |code: &str, url: &str| {
        format!(r#"{{"code":"{code}","url":"{url}","created_at":"2026-01-01T00:00:00Z"}}"#)
    };
    std::fs::write(
        &file,
        [
            line("fine1", "https://example.com/1"),
            line("priv1", "http://10.0.0.1/"),
            line("priv2", "http://[64:ff9b::127.0.0.1]/"),
            line("deny1", "https://login.evil.example/"),
            line("self1", "https://s.example/fine1"),
            line("fine2", "https://example.org/2"),
        ]
        .join("\n"),
    )
    .expect("write");
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "evil.example\n").expect("write");
    let db = dir.path().join("i.db");
    let out = litelink(
        &[
            "import",
            file.to_str().expect("path"),
            "--refuse-private-targets",
            "--deny-hosts",
            deny.to_str().expect("path"),
            "--public-url",
            "https://s.example",
        ],
        &db,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "line 2: url: url points to a private",
        "line 3: url: url points to a private",
        "line 4: url: url's host is on the deny list",
        "line 5: url: url points to this service itself",
        "imported 2 links",
        "4 invalid",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // Without the options, the same file is taken whole.
    let out = litelink(
        &["import", file.to_str().expect("path")],
        &dir.path().join("j.db"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("imported 6 links"), "{err}");
}

#[tokio::test]
async fn a_schema_1_database_is_migrated_and_keeps_its_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("old.db");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v1.db"),
        &db,
    )
    .expect("fixture");
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    for (code, target) in [
        ("AA8EAf8MxG", "https://example.com/fixture/one"),
        ("AAVX9cJ9ND", "https://example.com/fixture/two?x=1"),
        ("AA5q7I5nwa", "https://de.wikipedia.org/wiki/K%C3%B6ln"),
    ] {
        let r = app.get(&format!("/{code}")).await;
        assert_eq!(r.status(), 302);
        assert_eq!(r.headers()["location"], target);
    }
    assert_eq!(app.stats().await["links"], 3);
    let admin = app.new_key("admin", true).await;
    let all = json(
        app.api(Method::GET, "/api/v1/links", Some(&admin), None)
            .await,
    )
    .await;
    assert_eq!(all["links"].as_array().expect("links").len(), 3);
    assert_eq!(all["links"][0]["owner"], Value::Null);
    let conn = rusqlite::Connection::open(&db).expect("open");
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, litelink_service::store::sqlite::migrations::LATEST);
}

/// Migration 5 rebuilds the links table in one transaction: a process
/// killed in the middle of it leaves the schema it started from, with
/// every row, and the next start runs it again to the end.
#[tokio::test]
async fn a_migration_killed_midway_is_rolled_back_and_run_again() {
    use std::io::{BufRead, BufReader};
    const ROWS: i64 = 300_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("old.db");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema-v1.db"),
        &db,
    )
    .expect("fixture");
    {
        let conn = rusqlite::Connection::open(&db).expect("open");
        conn.execute_batch("BEGIN").expect("begin");
        let mut insert = conn
            .prepare("INSERT INTO links (code, target, created_at) VALUES (?1, ?2, 0)")
            .expect("prepare");
        for i in 0..ROWS {
            insert
                .execute((format!("old-{i:07}"), format!("https://example.com/{i}")))
                .expect("insert");
        }
        drop(insert);
        conn.execute_batch("COMMIT").expect("commit");
    }
    let count = |db: &std::path::Path| -> (u32, i64, String) {
        let conn = rusqlite::Connection::open(db).expect("open");
        let version = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("version");
        let rows = conn
            .query_row("SELECT count(*) FROM links", [], |r| r.get(0))
            .expect("count");
        let check = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .expect("check");
        (version, rows, check)
    };
    let mut midway = 0;
    for attempt in 0..4u64 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .args(["--listen", "127.0.0.1:0", "--db"])
            .arg(&db)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        // Wait for the rebuild to start, then kill the process a little
        // later each time.
        let started = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("rebuilding the links table"));
        assert!(started, "the server never said it was rebuilding");
        std::thread::sleep(Duration::from_millis(20 + 40 * attempt));
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        let (version, rows, check) = count(&db);
        assert_eq!(check, "ok");
        assert_eq!(rows, ROWS + 3, "every row survives a kill");
        if version == 4 {
            midway += 1;
        } else {
            break;
        }
    }
    eprintln!("{midway} kills landed inside the rebuild");
    assert!(midway > 0, "no kill landed inside the rebuild");
    // The next start finishes it, and every code is found.
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    for code in ["AA8EAf8MxG", "old-0000000", "old-0150000", "old-0299999"] {
        assert_eq!(
            app.get(&format!("/link/{code}")).await.status(),
            200,
            "{code}"
        );
    }
    assert_eq!(app.stats().await["links"], ROWS + 3);
    let new = app.create_ok("https://example.com/after").await;
    assert_eq!(app.get(&format!("/link/{new}")).await.status(), 200);
    app.stop().await;
    assert_eq!(
        count(&db).0,
        litelink_service::store::sqlite::migrations::LATEST
    );
}

/// A record without a code gets a generated one, as a create would; a
/// record whose code is some link's generated code is skipped like any
/// taken code, and a tombstone needs its code.
#[tokio::test]
async fn import_generates_codes_for_records_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("i.db");
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    let generated = app.create_ok("https://example.com/made").await;
    app.stop().await;
    let file = dir.path().join("in.jsonl");
    std::fs::write(
        &file,
        [
            r#"{"url":"https://e.com/1","created_at":"2026-01-01T00:00:00Z"}"#.to_owned(),
            r#"{"code":null,"url":"https://e.com/2","created_at":"2026-01-01T00:00:00Z"}"#
                .to_owned(),
            format!(
                r#"{{"code":"{generated}","url":"https://e.com/3","created_at":"2026-01-01T00:00:00Z"}}"#
            ),
            r#"{"url":null,"created_at":"2026-01-01T00:00:00Z","deleted_at":"2026-01-02T00:00:00Z"}"#
                .to_owned(),
        ]
        .join("\n"),
    )
    .expect("write");
    let out = litelink(&["import", file.to_str().expect("path")], &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "conflicts (the code exists with another target; skipped): lines 3",
        "line 4: a deleted link needs its code",
        "imported 2 links",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    let admin = app.new_key("admin", true).await;
    let all = json(
        app.api(Method::GET, "/api/v1/links", Some(&admin), None)
            .await,
    )
    .await;
    let links = all["links"].as_array().expect("links");
    assert_eq!(links.len(), 3);
    for link in links {
        let code = link["code"].as_str().expect("code");
        assert_eq!(code.len(), 10);
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["link"], link["url"]);
    }
    let r = app.get(&format!("/link/{generated}")).await;
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["link"], "https://example.com/made", "not overwritten");
    app.stop().await;
}

/// Codes made at one `--code-length` keep working after it changes: each
/// length is its own permutation of the row ids, and an alias can take
/// none of them.
#[tokio::test]
async fn codes_of_an_earlier_code_length_keep_resolving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("l.db");
    let app = spawn_app_on(&db, &["--cache", "none", "--code-length", "7"]).await;
    let short = app.create_ok("https://example.com/short").await;
    assert_eq!(short.len(), 7);
    app.stop().await;
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    let long = app.create_ok("https://example.com/long").await;
    assert_eq!(long.len(), 10);
    let key = app.new_key("k", false).await;
    for (code, target) in [
        (&short, "https://example.com/short"),
        (&long, "https://example.com/long"),
    ] {
        let r = app.get(&format!("/{code}")).await;
        assert_eq!(r.status(), 302, "{code}");
        assert_eq!(r.headers()["location"], target);
        let taken = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&key),
                Some(json!({"url": "https://e.com/x", "code": code})),
            )
            .await;
        assert_error(taken, 409, "taken").await;
    }
    app.stop().await;
}

/// A key name that mixes scripts (a Cyrillic `а` in `admin`) would pass
/// for another in `keys list`: `keys create` refuses it, and takes names
/// in one script, or Latin beside Chinese, Japanese or Korean.
#[test]
fn key_names_that_mix_look_alike_scripts_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("k.db");
    let create = |name: &str| litelink(&["keys", "create", "--name", name], &db);
    let out = create("\u{0430}dmin");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("may not mix scripts"), "{err}");
    for good in ["admin", "Иван Петров", "Tokyo 東京チーム"] {
        let out = create(good);
        assert!(
            out.status.success(),
            "{good}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let listed = litelink(&["keys", "list"], &db);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed.lines().any(|l| l.starts_with("\u{0430}dmin")),
        "{listed}"
    );
}
