//! What a hostile caller tried: protected targets read through the YOURLS
//! API or spelled out by search, targets `expand` showed after a redirect
//! stopped serving them, and made-up names that kept the sign-in hashes
//! busy.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

const HIDDEN: &str = "https://secret.example/hidden-path-x7q";

/// A secret for `--yourls-secret-file`, in `dir`.
fn secret_file(dir: &std::path::Path) -> String {
    let path = dir.join("yourls-secret");
    std::fs::write(&path, "a secret of more than sixteen bytes\n").expect("secret");
    path.display().to_string()
}

/// A key for the user `user` with its YOURLS signature token.
async fn key_and_token(app: &TestApp, name: &str, user: &str, secret: &str) -> (String, String) {
    let out = app.run_keys(
        &[
            "create",
            "--name",
            name,
            "--user",
            user,
            "--yourls-secret-file",
            secret,
        ],
        false,
    );
    let mut lines = out.lines();
    let key = lines.next().expect("the key").to_owned();
    let token = lines
        .next()
        .and_then(|l| l.strip_prefix("signature token: "))
        .unwrap_or_else(|| panic!("no signature token in {out:?}"))
        .to_owned();
    app.wait_for_key(&key).await;
    (key, token)
}

async fn yourls(app: &TestApp, params: &[(&str, &str)]) -> (u16, String) {
    let url = reqwest::Url::parse_with_params(&app.url("/yourls-api.php"), params).expect("url");
    let r = app.client.get(url).send().await.expect("yourls");
    (r.status().as_u16(), r.text().await.expect("body"))
}

async fn make_user(app: &TestApp, admin: &str, name: &str, role: &str) {
    let r = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(admin),
            Some(json!({"name": name, "role": role})),
        )
        .await;
    assert_eq!(r.status(), 201, "{name}");
}

async fn create(app: &TestApp, key: &str, body: Value) -> Value {
    let r = app
        .api(Method::POST, "/link", Some(key), Some(body.clone()))
        .await;
    assert_eq!(r.status(), 201, "{body}");
    r.json().await.expect("json")
}

async fn search(app: &TestApp, key: &str, q: &str) -> Vec<String> {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links?q={q}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.expect("json");
    page["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["code"].as_str().unwrap_or("").to_owned())
        .collect()
}

crate::on_both_stores! {
    async fn a_protected_target_is_shown_to_its_owner_and_admins_only(store: Store) {
        let dir = tempfile::tempdir().expect("dir");
        let secret = secret_file(dir.path());
        let app = spawn_app_in(&store, &["--yourls-secret-file", &secret]).await;
        let admin = app.new_key("root", true).await;
        make_user(&app, &admin, "val", "viewer").await;
        make_user(&app, &admin, "mia", "member").await;
        let (val_key, viewer_token) = key_and_token(&app, "val-key", "val", &secret).await;
        let (member, member_token) = key_and_token(&app, "mia-key", "mia", &secret).await;
        create(&app, &admin, json!({"url": HIDDEN, "code": "adminlocked", "password": "sesame-sesame"})).await;
        create(&app, &member, json!({"url": format!("{HIDDEN}/mine"), "code": "mialocked",
            "password": "sesame-sesame"})).await;
        create(&app, &admin, json!({"url": "https://example.com/open", "code": "open",
            "title": "hidden-path-x7q in a title"})).await;

        // The YOURLS API, every format: a viewer sees the open link, and
        // counts every link, but never a protected target.
        for format in ["json", "xml", "simple"] {
            let (status, body) = yourls(&app, &[("action", "stats"), ("format", format),
                ("limit", "10"), ("signature", &viewer_token)]).await;
            assert_eq!(status, 200, "{format}: {body}");
            assert!(!body.contains("secret.example"), "{format}: {body}");
            if format != "simple" {
                assert!(body.contains("example.com/open"), "{format}: {body}");
                assert!(body.contains('3'), "{format}: the total counts every link: {body}");
            }
        }
        // The member sees their own protected target, not the admin's.
        let (_, body) = yourls(&app, &[("action", "stats"), ("format", "json"),
            ("limit", "10"), ("signature", &member_token)]).await;
        assert!(body.contains("secret.example\\/hidden-path-x7q\\/mine")
            || body.contains("secret.example/hidden-path-x7q/mine"), "{body}");
        assert!(!body.contains("adminlocked"), "{body}");

        // Search: a viewer finds the link whose title matches, never by a
        // hidden target; its owner and an admin do.
        assert_eq!(search(&app, &val_key, "hidden-path").await, vec!["open"]);
        assert!(search(&app, &val_key, "secret.exa").await.is_empty());
        let mut mine = search(&app, &member, "secret.exa").await;
        mine.sort();
        assert_eq!(mine, vec!["mialocked"]);
        let mut all = search(&app, &admin, "hidden-path").await;
        all.sort();
        assert_eq!(all, vec!["adminlocked", "mialocked", "open"]);
        // Codes and titles as before.
        assert_eq!(search(&app, &val_key, "adminl").await, vec!["adminlocked"]);
    }
}

/// What `expand` says of `code`: its long URL, if any.
async fn expanded(app: &TestApp, code: &str) -> Option<String> {
    let (status, body) = yourls(
        app,
        &[("action", "expand"), ("shorturl", code), ("format", "json")],
    )
    .await;
    assert!(status == 200 || status == 404, "{status}: {body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    body["longurl"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn expand_answers_what_a_redirect_would_serve_now() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("litelink.db");
    let app = spawn_app_on(&db, &["--visits-flush-ms", "50"]).await;
    let admin = app.new_key("root", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/once", "code": "once", "max_visits": 1}),
    )
    .await;
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let soon = soon
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time");
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/soon", "code": "soon", "expires_at": soon}),
    )
    .await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/soon2", "code": "soon2", "expires_at": soon,
        "expired_url": "https://example.com/after"}),
    )
    .await;
    create(
        &app,
        &admin,
        json!({"url": "https://denied.example/x", "code": "denied"}),
    )
    .await;
    for code in ["once", "soon", "denied"] {
        assert!(expanded(&app, code).await.is_some(), "{code}");
    }

    // Used up: the redirect serves it no more, nor does expand.
    assert_eq!(app.get("/once").await.status(), 302);
    assert_eq!(app.get("/once").await.status(), 410);
    assert_eq!(expanded(&app, "once").await, None);

    // Past its expiry (waited for at the redirect, not by the clock).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while app.get("/soon").await.status() != 410 {
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(expanded(&app, "soon").await, None);
    assert_eq!(
        expanded(&app, "soon2").await.as_deref(),
        Some("https://example.com/after")
    );

    // A host denied since: the same server file, restarted with the list.
    let kept = app.stop().await;
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "denied.example\n").expect("deny list");
    let deny = deny.display().to_string();
    let app = spawn_app_on(&db, &["--deny-hosts", &deny]).await;
    assert_eq!(app.get("/denied").await.status(), 410);
    assert_eq!(expanded(&app, "denied").await, None);
    drop(kept);
}

/// A sign-in form post from `client`.
async fn login(app: &TestApp, name: &str, password: &str, client: &str) -> u16 {
    app.client
        .post(app.url("/login"))
        .form(&[("name", name), ("password", password)])
        .header("origin", "https://s.example.com")
        .header("x-forwarded-for", client)
        .send()
        .await
        .expect("login")
        .status()
        .as_u16()
}

/// One address posting made-up names as fast as it can keeps no real
/// user's right password from being checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn made_up_names_never_make_a_real_sign_in_busy() {
    let app = spawn_app(&[
        "--public-url",
        "https://s.example.com",
        "--trust-proxy",
        "127.0.0.1",
    ])
    .await;
    let admin = app.new_key("root", true).await;
    let r = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(&admin),
            Some(json!({"name": "ann", "role": "member"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let once: Value = r.json().await.expect("json");
    let once = once["password"].as_str().expect("password").to_owned();
    let app = std::sync::Arc::new(app);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut flood = Vec::new();
    for worker in 0..6 {
        let (app, stop, answered) = (app.clone(), stop.clone(), answered.clone());
        flood.push(tokio::spawn(async move {
            let mut sent = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < 2_000 {
                login(
                    &app,
                    &format!("nobody-{worker}-{sent}"),
                    "guess",
                    "198.51.100.7",
                )
                .await;
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                sent += 1;
            }
            sent
        }));
    }
    // The flood is under way before the real sign-ins: it has answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while answered.load(std::sync::atomic::Ordering::Relaxed) < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "the flood never got an answer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(login(&app, "ann", &once, "192.0.2.10").await);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut sent = 0;
    for f in flood {
        sent += f.await.expect("flood");
    }
    assert!(sent > 10, "the flood ran ({sent} posts)");
    assert!(statuses.iter().all(|s| *s == 303), "{statuses:?}");
}
