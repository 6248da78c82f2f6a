//! Signing in with a local password: the forms, the session cookie, the
//! one-time password, CSRF by `Origin`, sessions that end, and the
//! bounds on guessing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

const PUBLIC: &str = "https://s.example.com";

async fn body(r: reqwest::Response) -> Value {
    r.json().await.expect("json body")
}

/// A form post to `path`, from `origin` (if any), with `cookie` (if any),
/// from the client `client` (through the trusted proxy).
async fn form(
    app: &TestApp,
    path: &str,
    fields: &[(&str, &str)],
    origin: Option<&str>,
    cookie: Option<&str>,
    client: &str,
) -> reqwest::Response {
    let mut r = app
        .client
        .post(app.url(path))
        .form(fields)
        .header("x-forwarded-for", client);
    if let Some(origin) = origin {
        r = r.header("origin", origin);
    }
    if let Some(cookie) = cookie {
        r = r.header("cookie", format!("__Host-litelink_session={cookie}"));
    }
    r.send().await.expect("form post")
}

/// The session id a sign-in's `Set-Cookie` carries, after checking its
/// attributes.
fn session_of(r: &reqwest::Response) -> String {
    let set = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("set-cookie")
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Secure"] {
        assert!(set.contains(attribute), "{set}");
    }
    let (pair, _) = set.split_once(';').expect("attributes");
    let id = pair
        .strip_prefix("__Host-litelink_session=")
        .expect("the cookie");
    assert!(id.len() >= 40, "{set}");
    id.to_owned()
}

/// A request to the API with the session cookie (and `origin`, if any).
async fn with_cookie(
    app: &TestApp,
    method: Method,
    path: &str,
    cookie: &str,
    origin: Option<&str>,
    json: Option<Value>,
) -> reqwest::Response {
    let mut r = app
        .client
        .request(method, app.url(path))
        .header("cookie", format!("a=b; __Host-litelink_session={cookie}"));
    if let Some(origin) = origin {
        r = r.header("origin", origin);
    }
    if let Some(json) = json {
        r = r.json(&json);
    }
    r.send().await.expect("request")
}

/// Makes the member `name` through the admin API: their one-time password.
async fn member_password(app: &TestApp, admin: &str, name: &str) -> String {
    let made = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(admin),
            Some(json!({"name": name, "role": "member"})),
        )
        .await;
    assert_eq!(made.status(), 201);
    body(made).await["password"]
        .as_str()
        .expect("password")
        .to_owned()
}

async fn sign_in(app: &TestApp, name: &str, password: &str) -> reqwest::Response {
    form(
        app,
        "/login",
        &[("name", name), ("password", password)],
        Some(PUBLIC),
        None,
        "192.0.2.10",
    )
    .await
}

fn location(r: &reqwest::Response) -> &str {
    r.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

crate::on_both_stores! {
    async fn people_sign_in_with_a_password_and_sessions_end(store: Store) {
        let app = spawn_app_in(&store, &["--public-url", PUBLIC, "--trust-proxy", "127.0.0.1"]).await;
        let admin = app.new_key("root", true).await;
        let bob = app.new_key("bob", false).await;
        let once = member_password(&app, &admin, "Ann").await;

        // The page, and the form's refusals.
        let page = app.client.get(app.url("/login")).send().await.expect("page");
        assert_eq!(page.status(), 200);
        assert!(page.text().await.expect("html").contains("name=\"password\""));
        let fields = [("name", "ann"), ("password", once.as_str())];
        assert_error(form(&app, "/login", &fields, None, None, "192.0.2.10").await, 403, "origin").await;
        assert_error(form(&app, "/login", &fields, Some("https://evil.example"), None, "192.0.2.10").await,
            403, "origin").await;
        assert_error(form(&app, "/login", &[("name", "ann")], Some(PUBLIC), None, "192.0.2.10").await,
            400, "field 'password' is required").await;
        let wrong = sign_in(&app, "ann", "not it at all").await;
        assert_eq!(wrong.status(), 401);
        let wrong = wrong.text().await.expect("html");
        let unknown = sign_in(&app, "nobody", "not it at all").await;
        assert_eq!(unknown.status(), 401);
        assert_eq!(unknown.text().await.expect("html"), wrong, "one answer for both");

        // The one-time password leads only to the password form.
        let r = sign_in(&app, "ANN", &once).await;
        assert_eq!((r.status().as_u16(), location(&r)), (303, "/account/password"));
        let first = session_of(&r);
        assert_error(with_cookie(&app, Method::GET, "/api/v1/links", &first, None, None).await,
            403, "one-time password").await;
        let change = |current: &str, new: &str, cookie: &str| {
            let (current, new, cookie) = (current.to_owned(), new.to_owned(), cookie.to_owned());
            let app = &app;
            async move {
                form(app, "/account/password", &[("current_password", &current), ("new_password", &new)],
                    Some(PUBLIC), Some(&cookie), "192.0.2.10").await
            }
        };
        assert_eq!(change(&once, "short", &first).await.status(), 400);
        assert_eq!(change("wrong password!", "a long new password", &first).await.status(), 401);
        let r = change(&once, "a long new password", &first).await;
        assert_eq!((r.status().as_u16(), location(&r)), (303, "/manage"));

        // Signed in: reads with the cookie; writes only from the public
        // origin; a key, when sent, decides alone.
        let r = with_cookie(&app, Method::GET, "/api/v1/links", &first, None, None).await;
        assert_eq!(r.status(), 200);
        let link = json!({"url": "https://example.com/ann"});
        assert_error(with_cookie(&app, Method::POST, "/api/v1/links", &first, None, Some(link.clone())).await,
            403, "origin").await;
        assert_error(with_cookie(&app, Method::POST, "/api/v1/links", &first,
            Some("https://evil.example"), Some(link.clone())).await, 403, "origin").await;
        let r = with_cookie(&app, Method::POST, "/api/v1/links", &first, Some(PUBLIC), Some(link.clone())).await;
        assert_eq!(r.status(), 201);
        assert_eq!(body(r).await["owner"], "Ann");
        let r = app.client.post(app.url("/api/v1/links")).bearer_auth(&bob)
            .header("cookie", format!("__Host-litelink_session={first}")).json(&link).send().await.expect("post");
        assert_eq!(body(r).await["owner"], "bob");

        // A password change ends the user's other sessions.
        let r = sign_in(&app, "ann", "a long new password").await;
        assert_eq!((r.status().as_u16(), location(&r)), (303, "/manage"));
        let second = session_of(&r);
        assert_ne!(second, first, "a new id at every sign-in");
        let r = change("a long new password", "another long password", &first).await;
        assert_eq!(r.status(), 303);
        assert_error(with_cookie(&app, Method::GET, "/api/v1/links", &second, None, None).await,
            401, "sign in again").await;
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &first, None, None).await.status(), 200);

        // Disabled, or given another role: the session is over at once.
        let patch = |b: Value| app.api(Method::PATCH, "/api/v1/users/ann", Some(&admin), Some(b));
        assert_eq!(patch(json!({"disabled": true})).await.status(), 200);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &first, None, None).await.status(), 401);
        assert_eq!(patch(json!({"disabled": false})).await.status(), 200);
        let third = session_of(&sign_in(&app, "ann", "another long password").await);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &third, None, None).await.status(), 200);
        assert_eq!(patch(json!({"role": "viewer"})).await.status(), 200);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &third, None, None).await.status(), 401);

        // Signing out ends the session; there is no sign-out by GET.
        let fourth = session_of(&sign_in(&app, "ann", "another long password").await);
        assert_error(form(&app, "/logout", &[], Some("https://evil.example"), Some(&fourth), "192.0.2.10").await,
            403, "origin").await;
        assert_eq!(app.client.get(app.url("/logout")).send().await.expect("get").status(), 405);
        let r = form(&app, "/logout", &[], Some(PUBLIC), Some(&fourth), "192.0.2.10").await;
        assert_eq!((r.status().as_u16(), location(&r)), (303, "/login"));
        let cleared = r.headers().get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(cleared.contains("Max-Age=0"), "{cleared}");
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &fourth, None, None).await.status(), 401);

        // Signing in again from a browser that has a session replaces it.
        let fifth = session_of(&sign_in(&app, "ann", "another long password").await);
        let r = form(&app, "/login", &[("name", "ann"), ("password", "another long password")],
            Some(PUBLIC), Some(&fifth), "192.0.2.10").await;
        let sixth = session_of(&r);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &fifth, None, None).await.status(), 401);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &sixth, None, None).await.status(), 200);

        // A user keeps at most 20 sessions: the oldest go.
        let mut sessions = vec![sixth];
        for _ in 0..20 {
            sessions.push(session_of(&sign_in(&app, "ann", "another long password").await));
        }
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &sessions[0], None, None).await.status(), 401);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &sessions[1], None, None).await.status(), 200);

        // A password reset by an admin ends every session of the user.
        let mut reset = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"));
        reset.args(["users", "reset-password", "ann"]);
        match &app.store {
            Some(url) => reset.args(["--store", url]),
            None => reset.arg("--db").arg(&app.db),
        };
        let out = reset.output().expect("litelink users reset-password");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/links", &sessions[20], None, None).await.status(), 401);
    }
}

/// Ten failed sign-ins from one client on one account, and that client
/// waits (even with the right password); another client does not.
#[tokio::test]
async fn a_sign_in_flood_gets_429() {
    let app = spawn_app(&["--public-url", PUBLIC, "--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("root", true).await;
    let once = member_password(&app, &admin, "ann").await;
    let attempt = |password: &str, client: &str| {
        let (password, client) = (password.to_owned(), client.to_owned());
        let app = &app;
        async move {
            form(
                app,
                "/login",
                &[("name", "ann"), ("password", &password)],
                Some(PUBLIC),
                None,
                &client,
            )
            .await
        }
    };
    for _ in 0..10 {
        assert_eq!(attempt("guess guess", "198.51.100.7").await.status(), 401);
    }
    let refused = attempt(&once, "198.51.100.7").await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("retry-after");
    assert!(wait > 60, "{wait}");
    assert_eq!(attempt(&once, "198.51.100.8").await.status(), 303);
}

/// Sessions end after `--session-idle` without a request, and signing in
/// needs the public URL.
#[tokio::test]
async fn an_idle_session_ends_and_accounts_need_the_public_url() {
    let app = spawn_app(&["--public-url", PUBLIC, "--session-idle", "1"]).await;
    let admin = app.new_key("root", true).await;
    let once = member_password(&app, &admin, "ann").await;
    let cookie = session_of(&sign_in(&app, "ann", &once).await);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let r = with_cookie(&app, Method::GET, "/account/password", &cookie, None, None).await;
    assert_eq!((r.status().as_u16(), location(&r)), (303, "/login"));

    let plain = spawn_app(&[]).await;
    assert_error(
        plain
            .client
            .get(plain.url("/login"))
            .send()
            .await
            .expect("get"),
        404,
        "public-url",
    )
    .await;
    assert_error(
        form(
            &plain,
            "/login",
            &[("name", "a"), ("password", "b")],
            Some(PUBLIC),
            None,
            "192.0.2.1",
        )
        .await,
        404,
        "public-url",
    )
    .await;
}

/// With `--local-login off`, users get no password and `/login` takes
/// none; `users create --local-login off` prints none.
#[tokio::test]
async fn without_local_passwords_users_get_none() {
    let app = spawn_app(&["--public-url", PUBLIC, "--local-login", "off"]).await;
    let admin = app.new_key("root", true).await;
    let made = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(&admin),
            Some(json!({"name": "ann", "role": "member"})),
        )
        .await;
    assert_eq!(made.status(), 201);
    let made = body(made).await;
    assert!(made.get("password").is_none(), "{made}");
    assert_error(
        sign_in(&app, "ann", "anything at all").await,
        404,
        "local passwords",
    )
    .await;
    let page = app
        .client
        .get(app.url("/login"))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args([
            "users",
            "create",
            "--name",
            "bo",
            "--role",
            "viewer",
            "--local-login",
            "off",
            "--db",
        ])
        .arg(&app.db)
        .output()
        .expect("litelink users");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "no password is printed");
}
