//! Users and roles: the admin API, `litelink users`, keys acting with
//! their user's role, and the upgrade that gives every key of before a
//! user.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

async fn body(r: reqwest::Response) -> Value {
    r.json().await.expect("json body")
}

/// `litelink ARGS STORE`, which must succeed: its standard output.
fn run(store: &[&str], args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(args)
        .args(store)
        .output()
        .expect("litelink");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// `litelink ARGS STORE`, which must fail: its standard error.
fn run_failing(store: &[&str], args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(args)
        .args(store)
        .output()
        .expect("litelink");
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The store options of `app`, for the tools.
fn store_args(app: &TestApp) -> Vec<String> {
    match &app.store {
        Some(url) => vec!["--store".into(), url.clone()],
        None => vec!["--db".into(), app.db.display().to_string()],
    }
}

/// A key for the user `user`, made with `keys create --user`.
async fn key_for(app: &TestApp, name: &str, user: &str) -> String {
    let store = store_args(app);
    let store: Vec<&str> = store.iter().map(String::as_str).collect();
    let key = run(&store, &["keys", "create", "--name", name, "--user", user]);
    app.wait_for_key(&key).await;
    key
}

/// An app with an admin, two members (alice, bob) and a viewer (val),
/// each with a key.
struct Cast {
    app: TestApp,
    admin: String,
    alice: String,
    bob: String,
    viewer: String,
}

async fn cast(store: &Store) -> Cast {
    let app = spawn_app_in(store, &[]).await;
    let admin = app.new_key("root", true).await;
    let alice = app.new_key("alice", false).await;
    let bob = app.new_key("bob", false).await;
    new_user(&app, &admin, json!({"name": "val", "role": "viewer"})).await;
    let viewer = key_for(&app, "val-key", "val").await;
    Cast {
        app,
        admin,
        alice,
        bob,
        viewer,
    }
}

async fn new_user(app: &TestApp, admin: &str, fields: Value) -> Value {
    let r = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(admin),
            Some(fields.clone()),
        )
        .await;
    assert_eq!(r.status(), 201, "{fields}");
    body(r).await
}

crate::on_both_stores! {
    async fn admins_make_list_change_and_remove_users(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("root", true).await;
        let member = app.new_key("mem", false).await;
        let made = new_user(&app, &admin, json!({"name": "Ann", "role": "viewer",
            "email": "ann@example.com"})).await;
        let password = made["password"].as_str().expect("one-time password").to_owned();
        assert!(password.len() >= 12, "{made}");
        assert_eq!(made, json!({"name": "Ann", "email": "ann@example.com", "role": "viewer",
            "domain": null, "disabled": false, "suspended": false, "password": password}));

        // Listed in the order made; the keys' own users came first.
        let listed = body(app.api(Method::GET, "/api/v1/users", Some(&admin), None).await).await;
        let names: Vec<&str> = listed["users"].as_array().expect("users").iter()
            .map(|u| u["name"].as_str().expect("name")).collect();
        assert_eq!(names, ["root", "mem", "Ann"]);
        assert!(listed["users"][2].get("password").is_none(), "{listed}");
        let got = body(app.api(Method::GET, "/api/v1/users/ANN", Some(&admin), None).await).await;
        assert_eq!(got["name"], "Ann");

        let post = |key: Option<&str>, b: Value| {
            let key = key.map(str::to_owned);
            let app = &app;
            async move { app.api(Method::POST, "/api/v1/users", key.as_deref(), Some(b)).await }
        };
        assert_error(post(Some(&admin), json!({"name": "aNN", "role": "member"})).await,
            409, "exists").await;
        assert_error(post(Some(&admin), json!({"name": "x", "role": "owner"})).await,
            400, "role").await;
        assert_error(post(Some(&admin), json!({"name": "a".repeat(65), "role": "member"})).await,
            400, "name").await;
        assert_error(post(Some(&admin), json!({"name": "e\u{202E}vil", "role": "member"})).await,
            400, "name").await;
        assert_error(post(Some(&admin), json!({"name": "x", "role": "member", "email": "no"})).await,
            400, "email").await;
        assert_error(post(Some(&admin), json!({"name": "x", "role": "member", "domain": "nope.example"})).await,
            400, "domain").await;
        assert_error(post(Some(&admin), json!({"name": "x", "role": "member", "admin": true})).await,
            400, "admin").await;
        assert_error(post(None, json!({"name": "x", "role": "member"})).await, 401, "key").await;
        assert_error(post(Some(&member), json!({"name": "x", "role": "admin"})).await,
            403, "admin").await;
        assert_error(app.api(Method::GET, "/api/v1/users", Some(&member), None).await,
            403, "admin").await;
        assert_error(app.api(Method::GET, "/api/v1/users/nobody", Some(&admin), None).await,
            404, "nobody").await;

        // A change: a field set, one cleared, the rest kept.
        let r = app.api(Method::PATCH, "/api/v1/users/ann", Some(&admin),
            Some(json!({"role": "member", "email": null}))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(body(r).await, json!({"name": "Ann", "email": null, "role": "member",
            "domain": null, "disabled": false, "suspended": false}));
        assert_error(app.api(Method::PATCH, "/api/v1/users/ann", Some(&admin),
            Some(json!({"role": null}))).await, 400, "role").await;
        assert_error(app.api(Method::PATCH, "/api/v1/users/root", Some(&admin),
            Some(json!({"role": "member"}))).await, 409, "own").await;
        assert_error(app.api(Method::PATCH, "/api/v1/users/root", Some(&admin),
            Some(json!({"disabled": true}))).await, 409, "own").await;
        assert_error(app.api(Method::DELETE, "/api/v1/users/root", Some(&admin), None).await,
            409, "themselves").await;

        // A role change counts at once: Ann's key becomes an admin's.
        let ann = key_for(&app, "ann-laptop", "Ann").await;
        assert_error(app.api(Method::GET, "/api/v1/users", Some(&ann), None).await,
            403, "admin").await;
        let r = app.api(Method::PATCH, "/api/v1/users/Ann", Some(&admin),
            Some(json!({"role": "admin"}))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(app.api(Method::GET, "/api/v1/users", Some(&ann), None).await.status(), 200);
        let r = app.api(Method::PATCH, "/api/v1/users/Ann", Some(&admin),
            Some(json!({"role": "member"}))).await;
        assert_eq!(r.status(), 200);

        // Removing a user stops their keys at once; their links stay, or
        // go to another user.
        let mine = app.api(Method::POST, "/api/v1/links", Some(&member),
            Some(json!({"url": "https://example.com/kept"}))).await;
        assert_eq!(mine.status(), 201);
        let code = body(mine).await["code"].as_str().expect("code").to_owned();
        assert_error(app.api(Method::DELETE, "/api/v1/users/mem?reassign=nobody", Some(&admin), None).await,
            400, "reassign").await;
        assert_error(app.api(Method::DELETE, "/api/v1/users/mem?reassign=mem", Some(&admin), None).await,
            400, "reassign").await;
        let r = app.api(Method::DELETE, "/api/v1/users/mem?reassign=ann", Some(&admin), None).await;
        assert_eq!(r.status(), 204);
        assert_error(app.api(Method::GET, "/api/v1/links", Some(&member), None).await, 401, "key").await;
        let link = body(app.api(Method::GET, &format!("/api/v1/links/{code}"), Some(&ann), None).await).await;
        assert_eq!(link["owner"], "Ann", "{link}");
        let gone = body(app.api(Method::GET, "/api/v1/users/mem", Some(&admin), None).await).await;
        assert_eq!(gone["disabled"], true);
        // Disabling through PATCH stops the keys at once too; enabling
        // again brings back the keys it did not revoke.
        let r = app.api(Method::PATCH, "/api/v1/users/ann", Some(&admin),
            Some(json!({"disabled": true}))).await;
        assert_eq!(r.status(), 200);
        assert_error(app.api(Method::GET, "/api/v1/links", Some(&ann), None).await, 401, "key").await;
        let r = app.api(Method::PATCH, "/api/v1/users/ann", Some(&admin),
            Some(json!({"disabled": false}))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(app.api(Method::GET, "/api/v1/links", Some(&ann), None).await.status(), 200);
        let r = app.api(Method::DELETE, "/api/v1/users/nobody", Some(&admin), None).await;
        assert_eq!(r.status(), 404);
    }
}

crate::on_both_stores! {
    async fn members_manage_their_own_and_viewers_read_everything(store: Store) {
        let Cast { app, admin, alice, bob, viewer } = cast(&store).await;

        let create = |key: &str, fields: Value| {
            let key = key.to_owned();
            let app = &app;
            async move { app.api(Method::POST, "/api/v1/links", Some(&key), Some(fields)).await }
        };
        let a = body(create(&alice, json!({"url": "https://example.com/a"})).await).await;
        let b = body(create(&bob, json!({"url": "https://example.com/secret",
            "password": "open sesame", "rules": [{"if": {"device": "ios"}, "url": "https://example.com/ios"}]})).await).await;
        let (a, b) = (a["code"].as_str().expect("code").to_owned(), b["code"].as_str().expect("code").to_owned());

        // A member sees only their own links.
        let codes = async |key: &str| -> Vec<String> {
            let listed = body(app.api(Method::GET, "/api/v1/links", Some(key), None).await).await;
            listed["links"].as_array().expect("links").iter()
                .map(|l| l["code"].as_str().expect("code").to_owned()).collect()
        };
        assert_eq!(codes(&alice).await, vec![a.clone()]);
        assert_eq!(codes(&bob).await, vec![b.clone()]);
        assert_error(app.api(Method::GET, &format!("/api/v1/links/{b}"), Some(&alice), None).await,
            404, "").await;
        assert_error(app.api(Method::PATCH, &format!("/api/v1/links/{b}"), Some(&alice),
            Some(json!({"url": "https://evil.example/"}))).await, 404, "").await;
        assert_error(app.api(Method::DELETE, &format!("/api/v1/links/{b}"), Some(&alice), None).await,
            404, "").await;

        // A viewer reads every link and its visits, but not a protected
        // link's targets, and changes nothing.
        let mut all = codes(&viewer).await;
        all.sort();
        let mut want = vec![a.clone(), b.clone()];
        want.sort();
        assert_eq!(all, want);
        let seen = body(app.api(Method::GET, &format!("/api/v1/links/{b}"), Some(&viewer), None).await).await;
        assert_eq!((seen["protected"].as_bool(), seen["url"].is_null(), seen["rules"].clone()),
            (Some(true), true, json!([])), "{seen}");
        assert_eq!(seen["owner"], "bob");
        let open = body(app.api(Method::GET, &format!("/api/v1/links/{a}"), Some(&viewer), None).await).await;
        assert_eq!(open["url"], "https://example.com/a");
        let owner_view = body(app.api(Method::GET, &format!("/api/v1/links/{b}"), Some(&bob), None).await).await;
        assert_eq!(owner_view["url"], "https://example.com/secret");
        let admin_view = body(app.api(Method::GET, &format!("/api/v1/links/{b}"), Some(&admin), None).await).await;
        assert_eq!(admin_view["rules"][0]["url"], "https://example.com/ios");
        assert_eq!(app.api(Method::GET, &format!("/api/v1/links/{a}/visits"), Some(&viewer), None)
            .await.status(), 200);
        assert_eq!(app.api(Method::GET, "/api/v1/visits", Some(&viewer), None).await.status(), 200);
        assert_error(create(&viewer, json!({"url": "https://example.com/v"})).await, 403, "viewer").await;
        assert_error(app.api(Method::PATCH, &format!("/api/v1/links/{a}"), Some(&viewer),
            Some(json!({"url": "https://evil.example/"}))).await, 403, "viewer").await;
        assert_error(app.api(Method::DELETE, &format!("/api/v1/links/{a}"), Some(&viewer), None).await,
            403, "viewer").await;
        assert_error(app.api(Method::POST, "/api/v1/domains", Some(&viewer),
            Some(json!({"host": "v.example"}))).await, 403, "admin").await;
        // Nothing changed.
        let still = body(app.api(Method::GET, &format!("/api/v1/links/{a}"), Some(&alice), None).await).await;
        assert_eq!(still["url"], "https://example.com/a");

        // An admin manages every link.
        let r = app.api(Method::PATCH, &format!("/api/v1/links/{a}"), Some(&admin),
            Some(json!({"url": "https://example.com/a2"}))).await;
        assert_eq!(r.status(), 200);
    }
}

crate::on_both_stores! {
    async fn people_make_and_revoke_their_own_keys(store: Store) {
        let Cast { app, admin, alice, bob, viewer } = cast(&store).await;
        let post = |key: &str, b: Value| {
            let key = key.to_owned();
            let app = &app;
            async move { app.api(Method::POST, "/api/v1/keys", Some(&key), Some(b)).await }
        };

        let r = post(&alice, json!({"name": "alice-ci"})).await;
        assert_eq!(r.status(), 201);
        let made = body(r).await;
        let secret = made["secret"].as_str().expect("secret").to_owned();
        assert!(secret.starts_with("ll_"), "{made}");
        assert_eq!((made["name"].as_str(), made["user"].as_str(), made["role"].as_str()),
            (Some("alice-ci"), Some("alice"), Some("member")));
        // The new key works at once, as alice.
        let r = app.api(Method::POST, "/api/v1/links", Some(&secret),
            Some(json!({"url": "https://example.com/ci"}))).await;
        assert_eq!(r.status(), 201);
        assert_eq!(body(r).await["owner"], "alice");

        let names = async |key: &str| -> Vec<String> {
            let listed = body(app.api(Method::GET, "/api/v1/keys", Some(key), None).await).await;
            listed["keys"].as_array().expect("keys").iter().map(|k| {
                assert!(k.get("secret").is_none() && k.get("hash").is_none(), "{k}");
                k["name"].as_str().expect("name").to_owned()
            }).collect()
        };
        assert_eq!(names(&alice).await, ["alice", "alice-ci"]);
        assert_eq!(names(&admin).await, ["root", "alice", "bob", "val-key", "alice-ci"]);

        assert_error(post(&bob, json!({"name": "alice-ci"})).await, 409, "exists").await;
        assert_error(post(&bob, json!({"name": ""})).await, 400, "name").await;
        assert_error(post(&bob, json!({"name": "b\u{202E}x"})).await, 400, "name").await;
        assert_error(post(&bob, json!({"name": "b2", "domain": "nope.example"})).await, 400, "domain").await;
        assert_error(post(&bob, json!({"name": "b2", "user": "root"})).await, 400, "user").await;
        assert_error(app.api(Method::POST, "/api/v1/keys", None, Some(json!({"name": "x"}))).await,
            401, "key").await;

        // A viewer's key acts as a viewer.
        let r = post(&viewer, json!({"name": "val-script"})).await;
        assert_eq!(r.status(), 201);
        let val_script = body(r).await["secret"].as_str().expect("secret").to_owned();
        assert_error(app.api(Method::POST, "/api/v1/links", Some(&val_script),
            Some(json!({"url": "https://example.com/v"}))).await, 403, "viewer").await;

        // Only one's own keys are revoked (an admin's: any), at once.
        assert_error(app.api(Method::DELETE, "/api/v1/keys/alice-ci", Some(&bob), None).await,
            404, "alice-ci").await;
        assert_eq!(app.api(Method::DELETE, "/api/v1/keys/alice-ci", Some(&alice), None).await.status(), 204);
        assert_error(app.api(Method::GET, "/api/v1/links", Some(&secret), None).await, 401, "key").await;
        assert_error(app.api(Method::DELETE, "/api/v1/keys/alice-ci", Some(&alice), None).await,
            404, "alice-ci").await;
        assert_eq!(app.api(Method::DELETE, "/api/v1/keys/bob", Some(&admin), None).await.status(), 204);
        assert_error(app.api(Method::GET, "/api/v1/links", Some(&bob), None).await, 401, "key").await;
    }
}

/// `keys create` makes a user of the key's name, or names one; `users`
/// makes, lists and changes users beside a running server, which honours
/// a change within a second.
#[tokio::test]
async fn the_tools_make_users_and_keys_beside_a_running_server() {
    let app = spawn_app(&[]).await;
    let store = store_args(&app);
    let store: Vec<&str> = store.iter().map(String::as_str).collect();
    let admin = app.new_key("root", true).await;

    let password = run(
        &store,
        &[
            "users",
            "create",
            "--name",
            "Dana",
            "--role",
            "viewer",
            "--email",
            "d@example.com",
        ],
    );
    assert!(password.len() >= 12 && password.chars().all(|c| c.is_ascii_alphanumeric()));
    let again = run(&store, &["users", "reset-password", "dana"]);
    assert_ne!(again, password);
    assert!(
        run_failing(
            &store,
            &["users", "create", "--name", "DANA", "--role", "member"]
        )
        .contains("exists")
    );
    assert!(
        run_failing(
            &store,
            &["users", "create", "--name", "x", "--role", "root"]
        )
        .contains("root")
    );
    assert!(run_failing(&store, &["users", "set-role", "nobody", "admin"]).contains("nobody"));

    // A key for Dana acts as a viewer, then as a member once set so.
    let key = key_for(&app, "dana-ci", "Dana").await;
    let create = || {
        app.api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/d"})),
        )
    };
    assert_eq!(create().await.status(), 403);
    run(&store, &["users", "set-role", "Dana", "member"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = create().await.status();
        if status == 201 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the role never changed: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let listed = run(&store, &["users", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("Dana ") && l.contains("member") && l.contains("d@example.com")),
        "{listed}"
    );
    let keys = run(&store, &["keys", "list"]);
    assert!(
        keys.lines()
            .any(|l| l.starts_with("dana-ci ") && l.contains("Dana")),
        "{keys}"
    );

    // Disabled: the key stops within a second.
    run(&store, &["users", "disable", "dana"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while app
        .api(Method::GET, "/api/v1/links", Some(&key), None)
        .await
        .status()
        != 401
    {
        assert!(std::time::Instant::now() < deadline, "the key still works");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Without --user, a key makes its own user; a name taken (in any
    // case) or too long for a user must name one.
    assert!(run_failing(&store, &["keys", "create", "--name", "DANA"]).contains("exists"));
    let long = "k".repeat(80);
    assert!(run_failing(&store, &["keys", "create", "--name", &long]).contains("--user"));
    run(
        &store,
        &["keys", "create", "--name", &long, "--user", "root"],
    );
    assert!(
        run_failing(
            &store,
            &["keys", "create", "--name", "x", "--user", "root", "--admin"]
        )
        .contains("--admin")
    );
    let users = body(
        app.api(Method::GET, "/api/v1/users", Some(&admin), None)
            .await,
    )
    .await;
    let names: Vec<&str> = users["users"]
        .as_array()
        .expect("users")
        .iter()
        .map(|u| u["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["root", "Dana"]);
}

/// Keys of before each get a user of their name (a suffix where a name
/// is too long or taken regardless of case), with the key's role and
/// domain, and go on working; their links are their users'.
async fn keys_of_before_get_users(app: &TestApp, keys: &[(&str, &str)]) {
    for (name, secret) in keys {
        let r = app
            .api(Method::GET, "/api/v1/links", Some(secret), None)
            .await;
        assert_eq!(r.status(), 200, "{name}");
    }
    let admin = keys[0].1;
    let users = body(
        app.api(Method::GET, "/api/v1/users", Some(admin), None)
            .await,
    )
    .await;
    let long = format!("{}-2", "k".repeat(62));
    assert_eq!(
        users["users"],
        json!([
            {"name": "Ops", "email": null, "role": "admin", "domain": null, "disabled": false, "suspended": false},
            {"name": "ops-2", "email": null, "role": "member", "domain": null, "disabled": false, "suspended": false},
            {"name": long, "email": null, "role": "member", "domain": null, "disabled": false, "suspended": false},
        ])
    );
    let link = body(
        app.api(Method::GET, "/api/v1/links/owned", Some(admin), None)
            .await,
    )
    .await;
    assert_eq!(link["owner"], "ops-2", "{link}");
    // The member key still sees its own link, and only that.
    let listed = body(
        app.api(Method::GET, "/api/v1/links", Some(keys[1].1), None)
            .await,
    )
    .await;
    assert_eq!(
        listed["links"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    // New users and keys do not collide with the ids the upgrade used.
    let made = new_user(app, admin, json!({"name": "new", "role": "member"})).await;
    assert_eq!(made["name"], "new");
}

/// The old keys' rows: (name, admin, secret).
fn old_keys() -> Vec<(String, bool, String)> {
    vec![
        (
            "Ops".into(),
            true,
            "ll_oldadminkey0000000000000000000000".into(),
        ),
        (
            "ops".into(),
            false,
            "ll_oldmemberkey000000000000000000000".into(),
        ),
        (
            "k".repeat(100),
            false,
            "ll_oldlongkey00000000000000000000000".into(),
        ),
    ]
}

fn sha256(s: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).to_vec()
}

#[tokio::test]
async fn a_sqlite_database_from_before_users_keeps_its_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("old.db");
    let keys = old_keys();
    {
        let mut conn = rusqlite::Connection::open(&db).expect("open");
        litelink_service::store::sqlite::migrations::migrate_to(&mut conn, 8).expect("schema 8");
        for (i, (name, admin, secret)) in keys.iter().enumerate() {
            conn.execute(
                "INSERT INTO keys (id, name, hash, admin, created_at) VALUES (?1, ?2, ?3, ?4, 1)",
                (i as i64 + 1, name, sha256(secret), admin),
            )
            .expect("key");
        }
        conn.execute_batch(
            "INSERT INTO links (code, target, created_at, named, owner) VALUES
                ('owned', 'https://example.com/1', 1, 1, 2);
             UPDATE meta SET value = 1 WHERE name = 'live_links';",
        )
        .expect("link");
    }
    let app = spawn_app_on(&db, &[]).await;
    let secrets: Vec<(&str, &str)> = keys
        .iter()
        .map(|(n, _, s)| (n.as_str(), s.as_str()))
        .collect();
    keys_of_before_get_users(&app, &secrets).await;
}

#[tokio::test]
async fn a_postgres_database_from_before_users_keeps_its_keys() {
    let url = fresh_postgres_db().await;
    let keys = old_keys();
    {
        let (mut client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        litelink_service::store::postgres::migrations::migrate_to(&mut client, 4)
            .await
            .expect("schema 4");
        for (name, admin, secret) in &keys {
            client
                .execute(
                    "INSERT INTO keys (name, hash, admin, created_at) VALUES ($1, $2, $3, 1)",
                    &[name, &sha256(secret), admin],
                )
                .await
                .expect("key");
        }
        client
            .batch_execute(
                "INSERT INTO links (code, target, created_at, owner) VALUES
                    ('owned', 'https://example.com/1', 1, 2);
                 UPDATE litelink_counts SET live_links = 1 WHERE shard = 0;",
            )
            .await
            .expect("link");
    }
    let app = spawn_app(&["--store", &url]).await;
    let secrets: Vec<(&str, &str)> = keys
        .iter()
        .map(|(n, _, s)| (n.as_str(), s.as_str()))
        .collect();
    keys_of_before_get_users(&app, &secrets).await;
}
