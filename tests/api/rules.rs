//! Link rules: a password in front of a link, targeted redirects (device,
//! language, country, query, time, splits) and an expired link's own
//! target, through the real server.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, run_on, spawn_app, spawn_app_in};
use crate::valkey_server::ValkeyServer;

const PASSWORD: &str = "open sesame";
const TARGET: &str = "https://secret.example/plans";

/// Real User-Agent strings, by what a device rule should see in them.
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 \
                      (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1";
const IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 \
                    (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1";
const ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 \
                       (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";
const ANDROID_TABLET: &str = "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 \
                              (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
const WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                       (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
const MAC_FIREFOX: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.4; rv:125.0) Gecko/20100101 Firefox/125.0";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

async fn json_of(r: reqwest::Response) -> Value {
    r.json().await.expect("json")
}

async fn create(app: &TestApp, key: &str, body: Value) -> Value {
    let r = app
        .api(Method::POST, "/api/v1/links", Some(key), Some(body.clone()))
        .await;
    assert_eq!(r.status(), 201, "{body}");
    json_of(r).await
}

/// A GET of `path` with `headers`.
async fn visit(app: &TestApp, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = app.client.get(app.url(path));
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    r.send().await.expect("GET")
}

/// Where a GET of `path` with `headers` redirects, or its status.
async fn lands(app: &TestApp, path: &str, headers: &[(&str, &str)]) -> Result<String, u16> {
    let r = visit(app, path, headers).await;
    match r.headers().get("location") {
        Some(l) if r.status().is_redirection() => Ok(l.to_str().expect("ascii").to_owned()),
        _ => Err(r.status().as_u16()),
    }
}

/// The link's visits as the API counts them (flushed or not).
async fn visits(app: &TestApp, key: &str, code: &str) -> u64 {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            Some(key),
            None,
        )
        .await;
    json_of(r).await["visits"].as_u64().expect("visits")
}

/// The password flow a browser and an API client see, and nothing that
/// gives the target away before it.
async fn password_flow(app: &TestApp, admin: &str) {
    let link = create(
        app,
        admin,
        json!({"url": TARGET, "code": "locked", "password": PASSWORD}),
    )
    .await;
    assert_eq!(link["protected"], true);
    assert!(!link.to_string().contains("argon2"), "{link}");
    assert!(!link.to_string().contains(PASSWORD), "{link}");

    // An API client: 401 JSON, asking for the password.
    let r = visit(app, "/locked", &[("accept", "application/json")]).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "LinkPassword");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(r.headers().get("location").is_none());
    assert_eq!(json_of(r).await, json!({"error": "password required"}));

    // A browser: the form, under the page's CSP.
    let r = visit(app, "/locked", &[("accept", "text/html,*/*;q=0.8")]).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "LinkPassword");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(
        r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = r.text().await.expect("page");
    assert!(page.contains("<form") && page.contains("name=\"password\""));
    assert!(page.contains("role=\"alert\" hidden"), "no message yet");
    assert!(!page.contains("secret.example"));

    // Nothing else gives the target away.
    for (method, path) in [
        (Method::HEAD, "/locked"),
        (Method::GET, "/link/locked"),
        (Method::HEAD, "/link/locked"),
    ] {
        let r = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 401, "{method} {path}");
        assert!(r.headers().get("location").is_none());
        let body = r.text().await.expect("body");
        assert!(!body.contains("secret.example"), "{method} {path}: {body}");
    }
    let wrong = visit(app, "/locked", &[("x-link-password", "guess")]).await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("location").is_none());
    assert_eq!(json_of(wrong).await, json!({"error": "wrong password"}));
    // Another key cannot see it; the owner's key and admins can.
    let other = app.new_key("other", false).await;
    let r = app
        .api(Method::GET, "/api/v1/links/locked", Some(&other), None)
        .await;
    assert_eq!(r.status(), 404);
    assert!(!r.text().await.unwrap().contains("secret.example"));
    let listed = json_of(
        app.api(Method::GET, "/api/v1/links", Some(&other), None)
            .await,
    )
    .await;
    assert!(!listed.to_string().contains("secret.example"), "{listed}");
    let r = app
        .api(Method::GET, "/api/v1/links/locked", Some(admin), None)
        .await;
    assert_eq!(json_of(r).await["url"], TARGET);

    // No visit is counted until the link opens.
    assert_eq!(visits(app, admin, "locked").await, 0);

    // The header opens it, every time, with nothing a cache keeps.
    let r = visit(app, "/locked", &[("x-link-password", PASSWORD)]).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], TARGET);
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(r.headers().get("set-cookie").is_none());
    assert_eq!(lands(app, "/locked", &[]).await, Err(401));

    // The form: a wrong password gets the form again with its message,
    // the right one the redirect.
    let post = |password: &str| {
        app.client
            .post(app.url("/locked"))
            .header("accept", "text/html")
            .form(&[("password", password)])
            .send()
    };
    let r = post("nope").await.expect("post");
    assert_eq!(r.status(), 401);
    let page = r.text().await.expect("page");
    assert!(page.contains("That is not the password") && !page.contains("role=\"alert\" hidden"));
    let r = post(PASSWORD).await.expect("post");
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], TARGET);
    assert_eq!(r.headers()["cache-control"], "no-store");
    // Sent from this site, it is taken; from another, or from an opaque
    // origin, it is refused before any password is checked.
    let from = |origin: String| {
        app.client
            .post(app.url("/locked"))
            .header("origin", origin)
            .form(&[("password", PASSWORD)])
            .send()
    };
    let r = from(format!("http://{}", app.addr)).await.expect("post");
    assert_eq!(r.status(), 303);
    for origin in ["null", "https://evil.example", "http://127.0.0.1:1"] {
        assert_error(
            from(origin.to_owned()).await.expect("post"),
            403,
            "another site",
        )
        .await;
    }
    // A form that is not one, or has no password.
    let r = app
        .client
        .post(app.url("/locked"))
        .json(&json!({"password": PASSWORD}))
        .send()
        .await
        .expect("post");
    assert_error(r, 415, "application/x-www-form-urlencoded").await;
    let r = app
        .client
        .post(app.url("/locked"))
        .form(&[("pass", PASSWORD)])
        .send()
        .await
        .expect("post");
    assert_error(r, 400, "password").await;
    assert_eq!(visits(app, admin, "locked").await, 3);

    // PATCH: a new password, then none.
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/locked",
            Some(admin),
            Some(json!({"password": "another"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        lands(app, "/locked", &[("x-link-password", PASSWORD)]).await,
        Err(401)
    );
    assert_eq!(
        lands(app, "/locked", &[("x-link-password", "another")]).await,
        Ok(TARGET.into())
    );
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/locked",
            Some(admin),
            Some(json!({"password": null})),
        )
        .await;
    assert_eq!(json_of(r).await["protected"], false);
    assert_eq!(lands(app, "/locked", &[]).await, Ok(TARGET.into()));
    // Bad passwords are refused.
    for bad in [json!(""), json!(5), json!("x".repeat(1025))] {
        assert_error(
            app.api(
                Method::PATCH,
                "/api/v1/links/locked",
                Some(admin),
                Some(json!({ "password": bad })),
            )
            .await,
            400,
            "password",
        )
        .await;
    }
}

/// The form's right password is answered `303 See Other` whatever the
/// server's redirect status: a 307 or 308 would make the browser post the
/// password on to the target. A GET keeps the server's status.
#[tokio::test]
async fn the_form_is_answered_with_a_see_other_under_every_redirect_status() {
    for status in ["301", "302", "307", "308"] {
        let app = spawn_app(&["--redirect-status", status]).await;
        let admin = app.new_key("admin", true).await;
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&admin),
                Some(json!({"url": TARGET, "code": "locked", "password": PASSWORD})),
            )
            .await;
        assert_eq!(r.status(), 201, "{status}");
        let r = app
            .client
            .post(app.url("/locked"))
            .form(&[("password", PASSWORD)])
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 303, "--redirect-status {status}");
        assert_eq!(r.headers()["location"], TARGET);
        let r = visit(&app, "/locked", &[("x-link-password", PASSWORD)]).await;
        assert_eq!(r.status().as_str(), status);
    }
}

crate::on_both_stores! {
    async fn a_password_locks_a_link_until_it_is_given(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("admin", true).await;
        password_flow(&app, &admin).await;
        // Stored as a hash only: export carries it, never the password.
        create(&app, &admin, json!({"url": TARGET, "code": "kept", "password": PASSWORD,
            "rules": [{"if": {"query": {"v": "2"}}, "split": [{"url": "https://example.com/v2", "weight": 1}]}],
            "expired_url": "https://example.com/over"})).await;
        let dir = tempfile::tempdir().expect("dir");
        let out = dir.path().join("links.jsonl");
        let out = out.to_str().expect("utf-8");
        run_on(&app.store, &app.db, &["export", "--out", out], true);
        let exported = std::fs::read_to_string(out).expect("export");
        assert!(exported.contains("\"password_hash\":\"$argon2id$"), "{exported}");
        assert!(!exported.contains(PASSWORD));
        match &app.store {
            None => {
                let mut file = std::fs::read(&app.db).expect("db");
                file.extend(std::fs::read(app.db.with_extension("db-wal")).unwrap_or_default());
                let clear = PASSWORD.as_bytes();
                assert!(!file.windows(clear.len()).any(|w| w == clear), "the password is in the database file");
                // The scan sees what is stored: the hash is there.
                assert!(file.windows(10).any(|w| w == b"$argon2id$"), "no hash in the file");
            }
            Some(url) => {
                // Every row of every table, as text: the hash, never the password.
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .expect("postgres");
                let task = tokio::spawn(connection);
                let tables = client
                    .query("SELECT table_name FROM information_schema.tables \
                            WHERE table_schema = current_schema()", &[])
                    .await
                    .expect("tables");
                let mut hashes = 0;
                for table in tables {
                    let name: String = table.get(0);
                    let rows = client
                        .query(&format!("SELECT t::text FROM \"{name}\" t"), &[])
                        .await
                        .expect("rows");
                    for row in rows {
                        let text: String = row.get(0);
                        assert!(!text.contains(PASSWORD), "the password is in {name}: {text}");
                        hashes += usize::from(text.contains("$argon2id$"));
                    }
                }
                assert!(hashes >= 1, "no hash in any table");
                drop(client);
                let _ = task.await;
            }
        }
        // Imported elsewhere, the same password opens it.
        let elsewhere = tempfile::tempdir().expect("dir");
        let db = elsewhere.path().join("litelink.db");
        run_on(&None, &db, &["import", out], true);
        let other = crate::helpers::spawn_app_on(&db, &[]).await;
        assert_eq!(lands(&other, "/kept", &[]).await, Err(401));
        assert_eq!(lands(&other, "/kept", &[("x-link-password", PASSWORD)]).await, Ok(TARGET.into()));
        assert_eq!(lands(&other, "/kept?v=2", &[("x-link-password", PASSWORD)]).await,
            Ok("https://example.com/v2".into()));
        let admin = other.new_key("admin", true).await;
        let r = other.api(Method::GET, "/api/v1/links/kept", Some(&admin), None).await;
        assert_eq!(json_of(r).await["expired_url"], "https://example.com/over");
    }
}

#[tokio::test]
async fn guessing_a_password_is_bounded() {
    let app = spawn_app(&["--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": TARGET, "code": "guess", "password": PASSWORD}),
    )
    .await;
    let from = |client: &str, password: &str| {
        app.client
            .get(app.url("/guess"))
            .header("x-forwarded-for", client.to_owned())
            .header("x-link-password", password.to_owned())
            .send()
    };
    // Five wrong guesses from one client, then 429 even for the right one.
    for _ in 0..5 {
        assert_eq!(from("192.0.2.1", "nope").await.unwrap().status(), 401);
    }
    let r = from("192.0.2.1", PASSWORD).await.unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=900).contains(&retry), "{retry}");
    assert!(r.headers().get("location").is_none());
    // Another client is not held back by it.
    let r = from("192.0.2.2", PASSWORD).await.unwrap();
    assert_eq!(r.status(), 302);
    // An IPv6 client is one client across its /64.
    for i in 1..=5 {
        let r = from(&format!("2001:db8:7:7::{i}"), "nope").await.unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = from("2001:db8:7:7:ffff::1", PASSWORD).await.unwrap();
    assert_eq!(r.status(), 429, "another address of the same /64");
    assert_eq!(
        from("2001:db8:7:8::1", PASSWORD).await.unwrap().status(),
        302
    );
    // A hundred wrong guesses on the link from anyone close it to every
    // client that has failed as often as guessers do...
    for i in 0..90 {
        let client = format!("198.51.100.{i}");
        let r = from(&client, "nope").await.unwrap();
        assert_eq!(r.status(), 401, "{client}");
    }
    assert_eq!(from("198.51.100.0", "nope").await.unwrap().status(), 401);
    let r = from("198.51.100.0", PASSWORD).await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    // ...but not the owner: a client with no failures gets through.
    let r = from("203.0.113.9", PASSWORD).await.unwrap();
    assert_eq!(r.status(), 302, "strangers cannot lock the owner out");
    // Another link is open to the same clients.
    create(
        &app,
        &admin,
        json!({"url": TARGET, "code": "other", "password": PASSWORD}),
    )
    .await;
    let r = app
        .client
        .get(app.url("/other"))
        .header("x-forwarded-for", "192.0.2.1")
        .header("x-link-password", PASSWORD)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
}

#[tokio::test]
async fn hashing_runs_two_at_a_time_and_refuses_the_rest() {
    let app = spawn_app(&["--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": TARGET, "code": "busy", "password": PASSWORD}),
    )
    .await;
    // Batches of three guesses sent at once, from clients with no
    // failures, while each hash takes tens of milliseconds: with two
    // permits, a batch whose three overlap has exactly one refused, and
    // none ever has two. One permit would refuse two; three or more, none.
    let mut most_busy = 0;
    for batch in 0..10 {
        let guesses = (0..3).map(|i| {
            app.client
                .get(app.url("/busy"))
                .header("x-forwarded-for", format!("10.1.{batch}.{i}"))
                .header("x-link-password", "nope")
                .send()
        });
        let mut busy = 0;
        for r in futures_util::future::join_all(guesses).await {
            let r = r.expect("answer");
            match r.status().as_u16() {
                401 => {}
                503 => {
                    assert_eq!(r.headers()["retry-after"], "1");
                    busy += 1;
                }
                other => panic!("answered {other}"),
            }
        }
        most_busy = most_busy.max(busy);
    }
    assert_eq!(most_busy, 1, "two hashes at once, and the third refused");
}

/// The rules a resolution test sets, and what each visitor should get.
fn rules() -> Value {
    json!([
        {"if": {"device": "ios"}, "url": "https://apps.apple.com/app"},
        {"if": {"device": ["android"]}, "url": "https://play.google.com/app"},
        {"if": {"language": "de", "device": "desktop"}, "url": "https://example.de/"},
        {"if": {"country": ["JP", "KR"]}, "url": "https://example.jp/"},
        {"if": {"query": {"src": ["mail", "news"]}}, "url": "https://example.com/mail"},
        {"if": {"after": "2000-01-01T00:00:00Z", "before": "2001-01-01T00:00:00Z"}, "url": "https://example.com/y2k"},
        {"if": {"device": "mobile"}, "url": "https://m.example.com/"},
    ])
}

/// Checks where each visitor of `/ruled` lands; the number of GETs sent.
async fn check_rules(app: &TestApp, mode: &str) -> u64 {
    let expect = [
        (vec![("user-agent", IPHONE)], "https://apps.apple.com/app"),
        (vec![("user-agent", IPAD)], "https://apps.apple.com/app"),
        (vec![("user-agent", ANDROID)], "https://play.google.com/app"),
        (
            vec![("user-agent", ANDROID_TABLET)],
            "https://play.google.com/app",
        ),
        (
            vec![
                ("user-agent", WINDOWS),
                ("accept-language", "fr;q=0.5, de-AT;q=0.9"),
            ],
            "https://example.de/",
        ),
        (
            vec![
                ("user-agent", MAC_FIREFOX),
                ("accept-language", "en-GB,en;q=0.9,de;q=0.8"),
            ],
            "https://example.com/target",
        ),
        // `*` first: any language, so no language rule holds.
        (
            vec![("user-agent", WINDOWS), ("accept-language", "*, de;q=0.5")],
            "https://example.com/target",
        ),
        (
            vec![("user-agent", WINDOWS), ("cf-ipcountry", "jp")],
            "https://example.jp/",
        ),
        // A bot is no device, and German is not its first language here.
        (
            vec![("user-agent", GOOGLEBOT), ("accept-language", "de")],
            "https://example.com/target",
        ),
        (vec![], "https://example.com/target"),
    ];
    let sent = expect.len() as u64 + 2;
    for (headers, want) in expect {
        assert_eq!(
            lands(app, "/ruled", &headers).await,
            Ok(want.to_owned()),
            "{mode} {headers:?}"
        );
        // A HEAD names the target the GET goes to, and counts nothing.
        let mut head = app.client.head(app.url("/ruled"));
        for (name, value) in &headers {
            head = head.header(*name, *value);
        }
        let r = head.send().await.expect("HEAD");
        assert_eq!(r.status(), 302, "{mode} HEAD {headers:?}");
        assert_eq!(r.headers()["location"], want, "{mode} HEAD {headers:?}");
    }
    assert_eq!(
        lands(app, "/ruled?x=1&src=news", &[("user-agent", WINDOWS)]).await,
        Ok("https://example.com/mail".into()),
        "{mode}"
    );
    assert_eq!(
        lands(app, "/ruled?src=other", &[("user-agent", WINDOWS)]).await,
        Ok("https://example.com/target".into()),
        "{mode}"
    );
    sent
}

#[tokio::test]
async fn rules_passwords_and_expiry_resolve_in_every_cache_mode() {
    let valkey = ValkeyServer::start();
    for mode in ["none", "memory", "valkey", "tiered"] {
        let url = valkey.url();
        let prefix = format!("{mode}:");
        let app = spawn_app(&[
            "--cache",
            mode,
            "--valkey-url",
            &url,
            "--valkey-prefix",
            &prefix,
            "--valkey-timeout-ms",
            "2000",
            "--trust-proxy",
            "127.0.0.1",
            "--country-header",
            "CF-IPCountry",
        ])
        .await;
        let admin = app.new_key("admin", true).await;
        let link = create(
            &app,
            &admin,
            json!({"url": "https://example.com/target", "code": "ruled", "rules": rules()}),
        )
        .await;
        assert_eq!(link["rules"].as_array().map(Vec::len), Some(7), "{mode}");
        // Twice: the second from whatever the cache kept.
        let sent = check_rules(&app, mode).await + check_rules(&app, mode).await;
        // Every GET counted, and no HEAD.
        assert_eq!(visits(&app, &admin, "ruled").await, sent, "{mode}");
        // An edit reaches every tier at once.
        let r = app
            .api(
                Method::PATCH,
                "/api/v1/links/ruled",
                Some(&admin),
                Some(
                    json!({"rules": [{"if": {"device": "ios"}, "url": "https://example.com/new"}]}),
                ),
            )
            .await;
        assert_eq!(r.status(), 200, "{mode}");
        assert_eq!(
            lands(&app, "/ruled", &[("user-agent", IPHONE)]).await,
            Ok("https://example.com/new".into()),
            "{mode}"
        );
        assert_eq!(
            lands(&app, "/ruled", &[("user-agent", ANDROID)]).await,
            Ok("https://example.com/target".into()),
            "{mode}"
        );
        let r = app
            .api(
                Method::PATCH,
                "/api/v1/links/ruled",
                Some(&admin),
                Some(json!({"rules": null, "password": PASSWORD})),
            )
            .await;
        assert_eq!(json_of(r).await["rules"], json!([]), "{mode}");
        for _ in 0..2 {
            assert_eq!(
                lands(&app, "/ruled", &[("user-agent", IPHONE)]).await,
                Err(401),
                "{mode}"
            );
            assert_eq!(
                lands(&app, "/ruled", &[("x-link-password", PASSWORD)]).await,
                Ok("https://example.com/target".into()),
                "{mode}"
            );
        }
        // Out of visits: the link's expired_url, counting nothing.
        create(
            &app,
            &admin,
            json!({"url": "https://example.com/once", "code": "once", "max_visits": 1,
                   "expired_url": "https://example.com/over"}),
        )
        .await;
        for want in [
            "https://example.com/once",
            "https://example.com/over",
            "https://example.com/over",
        ] {
            assert_eq!(lands(&app, "/once", &[]).await, Ok(want.into()), "{mode}");
        }
        assert_eq!(visits(&app, &admin, "once").await, 1, "{mode}");
        app.stop().await;
    }
}

#[tokio::test]
async fn the_visits_report_says_which_rule_served_each_visit() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/target", "code": "ruled", "rules": rules()}),
    )
    .await;
    for _ in 0..3 {
        lands(&app, "/ruled", &[("user-agent", IPHONE)])
            .await
            .unwrap();
    }
    lands(&app, "/ruled?src=mail", &[]).await.unwrap();
    lands(&app, "/ruled", &[]).await.unwrap();
    lands(&app, "/ruled", &[("user-agent", WINDOWS)])
        .await
        .unwrap();
    let want = json!([
        {"index": 0, "count": 3},
        {"index": 4, "count": 1},
        {"index": null, "count": 2},
    ]);
    let path = "/api/v1/links/ruled/visits";
    let r = app.api(Method::GET, path, Some(&admin), None).await;
    assert_eq!(json_of(r).await["rules"], want, "in memory");
    // And from the store alone: a restarted server has nothing in memory.
    let db = app.db.clone();
    let dir = app.stop().await;
    let app = crate::helpers::spawn_app_on(&db, &[]).await;
    let admin = app.new_key("admin2", true).await;
    let r = app.api(Method::GET, path, Some(&admin), None).await;
    assert_eq!(json_of(r).await["rules"], want, "stored");
    let r = app
        .api(
            Method::GET,
            &format!("{path}?format=csv"),
            Some(&admin),
            None,
        )
        .await;
    let csv = r.text().await.expect("csv");
    assert!(
        csv.contains("rule,0,,,,3") && csv.contains("rule,default,,,,2"),
        "{csv}"
    );
    app.stop().await;
    drop(dir);
}

#[tokio::test]
async fn a_split_sends_each_target_its_share() {
    let app = spawn_app(&["--visits", "off"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/", "code": "split", "rules": [
            {"split": [{"url": "https://a.example/", "weight": 70},
                       {"url": "https://b.example/", "weight": 20},
                       {"url": "https://c.example/", "weight": 10}]}
        ]}),
    )
    .await;
    const N: usize = 10_000;
    let mut counts = std::collections::HashMap::<String, usize>::new();
    let mut done = 0;
    while done < N {
        let batch: Vec<_> = (0..50).map(|_| lands(&app, "/split", &[])).collect();
        for landed in futures_util::future::join_all(batch).await {
            *counts.entry(landed.expect("a redirect")).or_default() += 1;
        }
        done += 50;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    // Each share within five standard deviations of a binomial count: a
    // fair draw misses that about once in two million runs.
    for (target, p) in [
        ("https://a.example/", 0.7),
        ("https://b.example/", 0.2),
        ("https://c.example/", 0.1),
    ] {
        let got = counts[target] as f64;
        let mean = N as f64 * p;
        let sd = (N as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (got - mean).abs() <= 5.0 * sd,
            "{target}: {got} of {N}, expected about {mean}"
        );
    }
}

#[tokio::test]
async fn an_invalid_rule_is_refused_naming_its_index_and_field() {
    let dir = tempfile::tempdir().expect("dir");
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "denied.example\n").expect("deny list");
    let deny = deny.to_str().expect("utf-8");
    let app = spawn_app(&["--refuse-private-targets", "--deny-hosts", deny]).await;
    let admin = app.new_key("admin", true).await;
    let ok = json!({"url": "https://example.com/"});
    let cases = [
        (
            json!([ok, {"if": {"device": "watch"}, "url": "https://e.com/"}]),
            "rules[1].if.device",
        ),
        (
            json!([{"if": {"language": "deutsch!"}, "url": "https://e.com/"}]),
            "rules[0].if.language",
        ),
        (
            json!([{"if": {"country": ["DE", "Germany"]}, "url": "https://e.com/"}]),
            "rules[0].if.country[1]",
        ),
        (
            json!([{"if": {"after": "tomorrow"}, "url": "https://e.com/"}]),
            "rules[0].if.after",
        ),
        (
            json!([{"if": {"query": {"a": 1}}, "url": "https://e.com/"}]),
            "rules[0].if.query.a",
        ),
        (json!([{"url": "javascript:alert(1)"}]), "rules[0].url"),
        (json!([{"url": "https://user:pw@e.com/"}]), "rules[0].url"),
        (json!([{"url": "http://127.0.0.1/admin"}]), "rules[0].url"),
        (
            json!([ok, ok, {"url": "https://www.denied.example/"}]),
            "rules[2].url",
        ),
        (
            json!([{"split": [{"url": "https://e.com/", "weight": 0}]}]),
            "rules[0].split[0].weight",
        ),
        (
            json!([{"split": [{"url": "ftp://e.com/", "weight": 1}]}]),
            "rules[0].split[0].url",
        ),
        (json!([{"if": {}}]), "rules[0]: 'url' is required"),
        (
            json!([{"if": {"colour": "red"}, "url": "https://e.com/"}]),
            "rules[0].if.colour",
        ),
        (Value::Array(vec![ok.clone(); 17]), "at most 16"),
        // Rules that can never hold.
        (
            json!([{"if": {"country": "XX"}, "url": "https://e.com/"}]),
            "rules[0].if.country",
        ),
        (
            json!([{"if": {"language": "x"}, "url": "https://e.com/"}]),
            "rules[0].if.language",
        ),
        (
            json!([{"if": {"after": "2031-01-01T00:00:00Z", "before": "2030-01-01T00:00:00Z"},
                    "url": "https://e.com/"}]),
            "can never hold",
        ),
        (json!({"url": "https://e.com/"}), "rules"),
    ];
    for (rules, needle) in cases {
        let body = json!({"url": "https://example.com/", "rules": rules});
        assert_error(
            app.api(Method::POST, "/api/v1/links", Some(&admin), Some(body))
                .await,
            400,
            needle,
        )
        .await;
    }
    assert_error(
        app.api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/", "expired_url": "http://10.0.0.1/"})),
        )
        .await,
        400,
        "expired_url",
    )
    .await;
    // Nothing of those was stored.
    let listed = json_of(
        app.api(Method::GET, "/api/v1/links", Some(&admin), None)
            .await,
    )
    .await;
    assert_eq!(listed["links"], json!([]));
}

#[tokio::test]
async fn an_expired_link_goes_to_its_own_target_then_its_domains() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("admin", true).await;
    let r = app
        .api(
            Method::POST,
            "/api/v1/domains",
            Some(&admin),
            Some(
                json!({"host": "ex.co", "expired_redirect": "https://ex.co/expired",
                        "not_found_redirect": "https://ex.co/missing"}),
            ),
        )
        .await;
    assert_eq!(r.status(), 201);
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let soon = soon
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time");
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/a", "code": "own", "domain": "ex.co",
               "expires_at": soon, "expired_url": "https://example.com/own-expired"}),
    )
    .await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/b", "code": "theirs", "domain": "ex.co",
               "expires_at": soon}),
    )
    .await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/c", "code": "plain", "expires_at": soon}),
    )
    .await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/d", "code": "gone", "domain": "ex.co",
               "expired_url": "https://example.com/own-expired"}),
    )
    .await;
    let on = |path: &'static str| lands(&app, path, &[("host", "ex.co")]);
    assert_eq!(on("/own").await, Ok("https://example.com/a".into()));
    assert_eq!(on("/theirs").await, Ok("https://example.com/b".into()));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        on("/own").await,
        Ok("https://example.com/own-expired".into())
    );
    assert_eq!(on("/theirs").await, Ok("https://ex.co/expired".into()));
    assert_eq!(lands(&app, "/plain", &[]).await, Err(410));
    // A deleted link is not expired: the domain's not-found rule.
    let r = app
        .api(
            Method::DELETE,
            "/api/v1/links/gone?domain=ex.co",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(on("/gone").await, Ok("https://ex.co/missing".into()));
    // The expired redirect counted no visit.
    let r = app
        .api(
            Method::GET,
            "/api/v1/links/own?domain=ex.co",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(json_of(r).await["visits"], 1);
    // expired_url can be cleared.
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/own?domain=ex.co",
            Some(&admin),
            Some(json!({"expired_url": null})),
        )
        .await;
    assert_eq!(json_of(r).await["expired_url"], Value::Null);
    assert_eq!(on("/own").await, Ok("https://ex.co/expired".into()));
}

#[tokio::test]
async fn country_rules_read_the_geoip_database() {
    let Some(python) = crate::analytics::writer() else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let mmdb = dir.path().join("geo.mmdb");
    crate::analytics::build(
        &python,
        &mmdb,
        json!([
            ["81.2.69.0/24", "DE", "Berlin"],
            ["1.0.16.0/20", "JP", "Tokyo"]
        ]),
    );
    let app = spawn_app(&[
        "--trust-proxy",
        "127.0.0.1",
        "--geoip-db",
        mmdb.to_str().expect("utf-8"),
        "--visits",
        "off",
    ])
    .await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/", "code": "where", "rules": [
            {"if": {"country": "DE"}, "url": "https://example.de/"},
            {"if": {"country": ["JP"]}, "url": "https://example.jp/"}
        ]}),
    )
    .await;
    for (from, want) in [
        ("81.2.69.160", "https://example.de/"),
        ("1.0.16.1", "https://example.jp/"),
        // Outside the file: the built-in table says US.
        ("8.8.8.8", "https://example.com/"),
    ] {
        assert_eq!(
            lands(&app, "/where", &[("x-forwarded-for", from)]).await,
            Ok(want.into()),
            "{from}"
        );
    }
}

#[tokio::test]
async fn time_windows_hold_between_their_times() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("admin", true).await;
    let at = |secs: i64| {
        (time::OffsetDateTime::now_utc() + time::Duration::seconds(secs))
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time")
    };
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/after", "code": "window", "rules": [
            {"if": {"before": at(-60)}, "url": "https://example.com/past"},
            {"if": {"after": at(-60), "before": at(2)}, "url": "https://example.com/now"},
            {"if": {"after": [at(3600), at(1)]}, "url": "https://example.com/soon"},
        ]}),
    )
    .await;
    assert_eq!(
        lands(&app, "/window", &[]).await,
        Ok("https://example.com/now".into())
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        lands(&app, "/window", &[]).await,
        Ok("https://example.com/soon".into())
    );
}

/// What the rules' documentation promises, condition by condition: every
/// name of a `query` condition must match; the language is the most
/// preferred one by q-value, not the first listed; a country header from
/// a client that is no trusted proxy counts for nothing; a split takes 1
/// to 16 targets with weights up to 1,000,000.
#[tokio::test]
async fn conditions_and_splits_hold_as_documented() {
    let app = spawn_app(&["--country-header", "CF-IPCountry"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/else", "code": "promised", "rules": [
            {"if": {"query": {"a": "1", "b": "2"}}, "url": "https://example.com/both"},
            {"if": {"language": "fr"}, "url": "https://example.fr/"},
            {"if": {"country": "JP"}, "url": "https://example.jp/"},
        ]}),
    )
    .await;
    let at = async |path: &str, headers: &[(&str, &str)]| lands(&app, path, headers).await;
    assert_eq!(
        at("/promised?a=1&b=2", &[]).await,
        Ok("https://example.com/both".into())
    );
    assert_eq!(
        at("/promised?b=2&a=1&c=3", &[]).await,
        Ok("https://example.com/both".into())
    );
    for one in ["/promised?a=1", "/promised?b=2", "/promised?a=1&b=3"] {
        assert_eq!(
            at(one, &[]).await,
            Ok("https://example.com/else".into()),
            "{one}"
        );
    }
    for (header, lands_on) in [
        ("fr;q=0.5, de;q=0.9", "https://example.com/else"),
        ("de;q=0.4, fr", "https://example.fr/"),
        ("de, fr", "https://example.com/else"),
        ("fr-CA;q=0.8, en;q=0.7", "https://example.fr/"),
    ] {
        assert_eq!(
            at("/promised", &[("accept-language", header)]).await,
            Ok(lands_on.into()),
            "{header}"
        );
    }
    // No --trust-proxy: the loopback client's country header is ignored.
    assert_eq!(
        at("/promised", &[("cf-ipcountry", "JP")]).await,
        Ok("https://example.com/else".into())
    );

    let split = |targets: usize, weight: u64| {
        let each: Vec<Value> = (0..targets)
            .map(|i| json!({"url": format!("https://example.com/s{i}"), "weight": weight}))
            .collect();
        json!({"url": "https://example.com/", "rules": [{"split": each}]})
    };
    for (body, why) in [
        (split(17, 1), "1 to 16 targets"),
        (split(0, 1), "1 to 16 targets"),
        (split(2, 1_000_001), "weight"),
        (split(2, 0), "weight"),
    ] {
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(body))
            .await;
        assert_error(r, 400, why).await;
    }
    for body in [split(16, 1), split(1, 1_000_000)] {
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(body))
            .await;
        assert_eq!(r.status(), 201);
    }
}

/// A password of 1,024 bytes (the most) is taken and opens its link; the
/// 429 after too many wrong ones says how many seconds of its window are
/// left, and fewer as time passes.
#[tokio::test]
async fn the_longest_password_works_and_retry_after_counts_down() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("admin", true).await;
    let longest = "p".repeat(1024);
    create(
        &app,
        &admin,
        json!({"url": TARGET, "code": "longest", "password": longest}),
    )
    .await;
    assert_eq!(
        lands(&app, "/longest", &[("x-link-password", &longest)]).await,
        Ok(TARGET.into())
    );
    let r = app
        .client
        .post(app.url("/longest"))
        .form(&[("password", longest.as_str())])
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 303);
    for _ in 0..5 {
        assert_eq!(
            lands(&app, "/longest", &[("x-link-password", "nope")]).await,
            Err(401)
        );
    }
    let retry_after = async || {
        let r = visit(&app, "/longest", &[("x-link-password", "nope")]).await;
        assert_eq!(r.status(), 429);
        r.headers()["retry-after"]
            .to_str()
            .expect("ascii")
            .parse::<u64>()
            .expect("seconds")
    };
    let first = retry_after().await;
    assert!(
        (895..=900).contains(&first),
        "{first}: 15 minutes, less what has passed"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let later = retry_after().await;
    assert!(
        later <= first - 2 && later >= first - 4,
        "{first} then {later}"
    );
}

/// A flood of guesses, which keeps every checking permit busy, leaves an
/// owner's write that sets a password untouched: its hash has permits of
/// its own.
#[tokio::test]
async fn an_owner_sets_a_password_during_a_flood_of_guesses() {
    let app = spawn_app(&["--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": TARGET, "code": "flooded", "password": PASSWORD}),
    )
    .await;
    create(&app, &admin, json!({"url": TARGET, "code": "mine"})).await;
    let until = std::time::Instant::now() + Duration::from_millis(1500);
    let floods: Vec<_> = (0..6u32)
        .map(|worker| {
            let (client, url) = (app.client.clone(), app.url("/flooded"));
            tokio::spawn(async move {
                let mut busy = 0;
                let mut n = 0u32;
                while std::time::Instant::now() < until {
                    n += 1;
                    let r = client
                        .get(&url)
                        .header(
                            "x-forwarded-for",
                            format!("10.{worker}.{}.{}", n / 250, n % 250),
                        )
                        .header("x-link-password", "nope")
                        .send()
                        .await
                        .expect("guess");
                    busy += u32::from(r.status() == 503);
                }
                busy
            })
        })
        .collect();
    let mut set = 0;
    while std::time::Instant::now() < until {
        let r = app
            .api(
                Method::PATCH,
                "/api/v1/links/mine",
                Some(&admin),
                Some(json!({"password": format!("new-{set}")})),
            )
            .await;
        assert_eq!(r.status(), 200, "{}", json_of(r).await);
        set += 1;
    }
    let mut busy = 0;
    for f in floods {
        busy += f.await.expect("flood");
    }
    assert!(set >= 3, "{set} writes");
    assert!(busy > 0, "the guesses never took every permit");
}
