//! Signing in through OpenID Connect. The flow runs against a real
//! provider that this project did not write (`oidc-provider-mock` from
//! PyPI, which scripts/test provisions); the tokens such a provider will
//! not make (another key, a wrong audience, no nonce, `alg: none`...) come
//! from a hostile provider run here, with discovery, keys and a token
//! endpoint of its own.

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use openidconnect::core::{
    CoreGenderClaim, CoreHmacKey, CoreJsonWebKeySet, CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey,
};
use openidconnect::{AdditionalClaims, IdToken, IdTokenClaims, JsonWebKeyId, PrivateSigningKey};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

const PUBLIC: &str = "https://s.example.com";
const CLIENT_ID: &str = "litelink-test";
const CLIENT_SECRET: &str = "a client secret of the tests";

fn header<'r>(r: &'r reqwest::Response, name: &str) -> &'r str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The value of the cookie `name` among a response's `Set-Cookie`s.
fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.split_once('='))
        .find(|(n, v)| *n == name && !v.is_empty())
        .map(|(_, v)| v.to_owned())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `oidc-provider-mock` on a free port, stopped when dropped.
struct MockProvider {
    child: Child,
    issuer: String,
    http: reqwest::Client,
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MockProvider {
    /// The provider, or `None` (said, or failed under scripts/test) when
    /// it is not installed.
    async fn start() -> Option<Self> {
        let Some(command) =
            std::env::var_os("LITELINK_TEST_OIDC_PROVIDER").filter(|c| !c.is_empty())
        else {
            missing(
                "an OpenID Connect provider (LITELINK_TEST_OIDC_PROVIDER; scripts/provision-oidc)",
            );
            return None;
        };
        // Another port when the mock could not bind the one picked: a port
        // released here may be taken by another test's server first.
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new(&command)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--require-nonce", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start oidc-provider-mock");
            let mut provider = Self {
                child,
                issuer: format!("http://127.0.0.1:{port}"),
                http: reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(Duration::from_secs(30))
                    .build()
                    .expect("client"),
            };
            let discovery = format!("{}/.well-known/openid-configuration", provider.issuer);
            let mut exited = false;
            for _ in 0..300 {
                if let Ok(r) = provider.http.get(&discovery).send().await
                    && r.status() == 200
                {
                    return Some(provider);
                }
                if provider.child.try_wait().expect("mock status").is_some() {
                    exited = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(
                exited,
                "oidc-provider-mock did not answer on {discovery} within 30s"
            );
        }
        panic!("oidc-provider-mock did not start on any of five ports");
    }

    /// Sets the claims the provider gives the person `sub`.
    async fn person(&self, sub: &str, claims: Value) {
        let r = self
            .http
            .put(format!("{}/users/{sub}", self.issuer))
            .json(&claims)
            .send()
            .await
            .expect("PUT /users");
        assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    }
}

/// The flags of a server that signs people in through `issuer`, with
/// roles from `groups`.
fn oidc_flags(issuer: &str) -> Vec<String> {
    [
        "--public-url",
        PUBLIC,
        "--oidc-issuer",
        issuer,
        "--oidc-client-id",
        CLIENT_ID,
        "--oidc-client-secret",
        CLIENT_SECRET,
        "--oidc-scopes",
        "openid,profile,email",
        "--oidc-role-claim",
        "groups",
        "--oidc-admin-values",
        "ops",
        "--oidc-member-values",
        "staff,writers",
        "--oidc-viewer-values",
        "audit",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn spawn_with(store: &Store, flags: &[String]) -> TestApp {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    spawn_app_in(store, &flags).await
}

/// A sign-in begun at `/login/oidc`: where it sends the browser, and the
/// flow cookie.
async fn begin(app: &TestApp) -> (url::Url, String) {
    let r = app
        .client
        .get(app.url("/login/oidc"))
        .send()
        .await
        .expect("/login/oidc");
    assert_eq!(r.status(), 303, "{}", header(&r, "content-type"));
    let flow = set_cookie(&r, "__Host-litelink_oidc").expect("the flow cookie");
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for attribute in [
        "HttpOnly",
        "SameSite=Lax",
        "Path=/;",
        "Max-Age=600",
        "Secure",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let to = url::Url::parse(header(&r, "location")).expect("a location");
    (to, flow)
}

fn query(url: &url::Url, name: &str) -> String {
    url.query_pairs()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("{name} in {url}"))
}

/// The callback with `query`, from a browser holding `flow` (if any).
async fn callback(app: &TestApp, query: &str, flow: Option<&str>) -> reqwest::Response {
    let mut r = app.client.get(app.url(&format!("/auth/callback?{query}")));
    if let Some(flow) = flow {
        r = r.header("cookie", format!("__Host-litelink_oidc={flow}"));
    }
    r.send().await.expect("/auth/callback")
}

/// Signs `sub` in through the mock provider's form: the callback's
/// answer, and the query it was sent (to replay).
async fn through_mock(
    app: &TestApp,
    provider: &MockProvider,
    sub: &str,
) -> (reqwest::Response, String) {
    let (to, flow) = begin(app).await;
    assert!(to.as_str().starts_with(&provider.issuer), "{to}");
    assert_eq!(
        query(&to, "redirect_uri"),
        format!("{PUBLIC}/auth/callback")
    );
    assert_eq!(query(&to, "code_challenge_method"), "S256");
    let form = provider
        .http
        .post(to.as_str())
        .form(&[("sub", sub)])
        .send()
        .await
        .expect("the provider's form");
    assert_eq!(
        form.status(),
        302,
        "{}",
        form.text().await.unwrap_or_default()
    );
    let back = url::Url::parse(header(&form, "location")).expect("back");
    assert!(
        back.as_str()
            .starts_with(&format!("{PUBLIC}/auth/callback?")),
        "{back}"
    );
    let sent = back.query().unwrap_or("").to_owned();
    (callback(app, &sent, Some(&flow)).await, sent)
}

/// The session a successful callback started.
fn session_of(r: &reqwest::Response) -> String {
    assert_eq!(r.status(), 303, "{}", header(r, "content-type"));
    assert_eq!(header(r, "location"), "/manage");
    set_cookie(r, "__Host-litelink_session").expect("a session cookie")
}

async fn with_cookie(
    app: &TestApp,
    method: Method,
    path: &str,
    session: &str,
    json: Option<Value>,
) -> reqwest::Response {
    let mut r = app
        .client
        .request(method, app.url(path))
        .header("cookie", format!("__Host-litelink_session={session}"))
        .header("origin", PUBLIC);
    if let Some(json) = json {
        r = r.json(&json);
    }
    r.send().await.expect("request")
}

async fn account(app: &TestApp, session: &str) -> Value {
    let r = with_cookie(app, Method::GET, "/api/v1/account", session, None).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

crate::on_both_stores! {
    async fn people_sign_in_through_a_real_provider_with_roles_from_a_claim(store: Store) {
        let Some(provider) = MockProvider::start().await else { return };
        // The secret from a file, here; from a flag against the hostile provider.
        let dir = tempfile::tempdir().expect("dir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, format!("{CLIENT_SECRET}\n")).expect("secret file");
        let mut flags = oidc_flags(&provider.issuer);
        let at = flags.iter().position(|f| f == "--oidc-client-secret").expect("flag");
        flags[at] = "--oidc-client-secret-file".into();
        flags[at + 1] = secret.display().to_string();
        let app = spawn_with(&store, &flags).await;
        let admin_key = app.new_key("root", true).await;
        provider.person("u-alice", json!({"preferred_username": "alice", "groups": ["ops", "x"],
            "email": "alice@example.com"})).await;
        provider.person("u-bob", json!({"preferred_username": "bob", "groups": "staff"})).await;
        provider.person("u-carol", json!({"email": "carol@example.com", "groups": ["audit"]})).await;
        provider.person("u-dave", json!({"preferred_username": "dave", "groups": ["other"]})).await;

        let page = app.client.get(app.url("/login")).send().await.expect("page");
        assert!(page.text().await.expect("html").contains("href=\"/login/oidc\""));

        // A local user named bob is never the provider's bob.
        let local = app.api(Method::POST, "/api/v1/users", Some(&admin_key),
            Some(json!({"name": "Bob", "role": "admin"}))).await;
        assert_eq!(local.status(), 201);

        let (r, used) = through_mock(&app, &provider, "u-alice").await;
        let alice = session_of(&r);
        let me = account(&app, &alice).await;
        assert_eq!((me["name"].as_str(), me["role"].as_str()), (Some("alice"), Some("admin")), "{me}");

        let (r, _) = through_mock(&app, &provider, "u-bob").await;
        let bob = session_of(&r);
        let me = account(&app, &bob).await;
        assert_eq!((me["name"].as_str(), me["role"].as_str()), (Some("bob-2"), Some("member")), "{me}");

        let (r, _) = through_mock(&app, &provider, "u-carol").await;
        let carol = session_of(&r);
        let me = account(&app, &carol).await;
        assert_eq!((me["name"].as_str(), me["role"].as_str()),
            (Some("carol@example.com"), Some("viewer")), "{me}");

        // No role: refused, with a page that says so, and no session.
        let (r, _) = through_mock(&app, &provider, "u-dave").await;
        assert_eq!(r.status(), 403);
        assert!(set_cookie(&r, "__Host-litelink_session").is_none());
        assert!(header(&r, "content-type").starts_with("text/html"));
        assert!(r.text().await.expect("html").contains("no role on this server"));

        // A callback replayed, or without the browser's flow cookie.
        let replayed = callback(&app, &used, Some("whatever")).await;
        assert_eq!(replayed.status(), 400);
        assert!(set_cookie(&replayed, "__Host-litelink_session").is_none());
        let (to, _) = begin(&app).await;
        let form = provider.http.post(to.as_str()).form(&[("sub", "u-alice")]).send().await.expect("form");
        let back = url::Url::parse(header(&form, "location")).expect("back");
        let stolen = callback(&app, back.query().unwrap_or(""), None).await;
        assert_eq!(stolen.status(), 400);
        assert!(stolen.text().await.expect("html").contains("another browser"));
        // ... and the code cannot be used afterwards from the right one.
        let (_, flow) = begin(&app).await;
        assert_eq!(callback(&app, back.query().unwrap_or(""), Some(&flow)).await.status(), 400);

        // Roles act in the application layer: the member writes, the viewer reads.
        let made = with_cookie(&app, Method::POST, "/api/v1/links", &bob,
            Some(json!({"url": "https://example.com/from-bob"}))).await;
        assert_eq!(made.status(), 201);
        let code = made.json::<Value>().await.expect("json")["code"].as_str().expect("code").to_owned();
        let listed = with_cookie(&app, Method::GET, "/api/v1/links", &carol, None).await;
        assert!(listed.text().await.expect("json").contains(&code));
        let refused = with_cookie(&app, Method::POST, "/api/v1/links", &carol,
            Some(json!({"url": "https://example.com/from-carol"}))).await;
        assert_eq!(refused.status(), 403);
        // A cross-origin write with the cookie is refused.
        let evil = app.client.post(app.url("/api/v1/links"))
            .header("cookie", format!("__Host-litelink_session={bob}"))
            .header("origin", "https://evil.example")
            .json(&json!({"url": "https://example.com/evil"}))
            .send().await.expect("post");
        assert_eq!(evil.status(), 403);

        // A key made with the session works on the management API.
        let key = with_cookie(&app, Method::POST, "/api/v1/keys", &bob, Some(json!({"name": "bob-script"}))).await;
        assert_eq!(key.status(), 201);
        let key = key.json::<Value>().await.expect("json")["secret"].as_str().expect("key").to_owned();
        let mine = app.api(Method::GET, &format!("/api/v1/links/{code}"), Some(&key), None).await;
        assert_eq!(mine.status(), 200);

        // Each sign-in takes the role from the claim again; the sessions
        // begun under the old role end.
        provider.person("u-bob", json!({"preferred_username": "bob", "groups": ["audit"]})).await;
        let (r, _) = through_mock(&app, &provider, "u-bob").await;
        let bob_again = session_of(&r);
        assert_eq!(account(&app, &bob_again).await["role"], "viewer");
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/account", &bob, None).await.status(), 401);

        // A disabled user's keys and sessions stop; the provider cannot sign them in.
        let off = app.api(Method::PATCH, "/api/v1/users/bob-2", Some(&admin_key),
            Some(json!({"disabled": true}))).await;
        assert_eq!(off.status(), 200);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/account", &bob_again, None).await.status(), 401);
        assert_eq!(app.api(Method::GET, "/api/v1/links", Some(&key), None).await.status(), 401);
        let (r, _) = through_mock(&app, &provider, "u-bob").await;
        assert_eq!(r.status(), 403);
        assert!(r.text().await.expect("html").contains("disabled"));

        // Signing out ends the session; the old cookie is refused.
        let out = with_cookie(&app, Method::POST, "/logout", &alice, None).await;
        assert_eq!(out.status(), 303);
        assert_eq!(with_cookie(&app, Method::GET, "/api/v1/account", &alice, None).await.status(), 401);

        // The users the provider made, found by (issuer, sub), not by name.
        let users = app.api(Method::GET, "/api/v1/users", Some(&admin_key), None).await;
        let users: Value = users.json().await.expect("json");
        let names: Vec<&str> = users["users"].as_array().expect("list").iter()
            .filter_map(|u| u["name"].as_str()).collect();
        for name in ["alice", "Bob", "bob-2", "carol@example.com"] {
            assert!(names.contains(&name), "{names:?}");
        }
        assert!(!names.contains(&"dave"), "{names:?}");
    }
}

/// The claims beyond the standard ones, for the tokens minted here.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Extra {
    #[serde(flatten)]
    claims: serde_json::Map<String, Value>,
}
impl AdditionalClaims for Extra {}

type Token =
    IdToken<Extra, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm>;

/// An RSA key made by openssl, as PKCS#1 PEM.
fn rsa_pem(dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(name);
    let made = Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&path)
        .arg("2048")
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(made.success(), "openssl genrsa");
    std::fs::read_to_string(path).expect("the key")
}

fn signing_key(pem: &str, kid: &str) -> CoreRsaPrivateSigningKey {
    CoreRsaPrivateSigningKey::from_pem(pem, Some(JsonWebKeyId::new(kid.into()))).expect("a key")
}

/// What the hostile provider serves: its keys, the next token answer, and
/// its userinfo claims; and how often its keys were fetched.
#[derive(Default)]
struct Hostile {
    keys: Vec<CoreRsaPrivateSigningKey>,
    id_token: Option<String>,
    /// The PKCE challenge of the flow under way, which the token request's
    /// verifier must answer.
    challenge: String,
    userinfo: Value,
    key_fetches: usize,
    /// The signing algorithms its discovery lists (RS256, HS256 and none
    /// when empty).
    algs: Vec<&'static str>,
    discoveries: usize,
}

async fn hostile_provider(state: Arc<Mutex<Hostile>>) -> String {
    use axum::Json;
    use axum::extract::State;
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let metadata = move |algs: &[&str]| {
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "userinfo_endpoint": format!("{issuer}/userinfo"),
            "jwks_uri": format!("{issuer}/jwks"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": if algs.is_empty() {
                vec!["RS256", "HS256", "none"]
            } else {
                algs.to_vec()
            },
        })
    };
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    type Shared = Arc<Mutex<Hostile>>;
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move |State(s): State<Shared>| {
                let metadata = metadata.clone();
                async move {
                    let mut s = s.lock().expect("state");
                    s.discoveries += 1;
                    Json(metadata(&s.algs))
                }
            }),
        )
        .route(
            "/jwks",
            get(|State(s): State<Shared>| async move {
                let mut s = s.lock().expect("state");
                s.key_fetches += 1;
                let keys = s
                    .keys
                    .iter()
                    .map(PrivateSigningKey::as_verification_key)
                    .collect();
                Json(serde_json::to_value(CoreJsonWebKeySet::new(keys)).expect("jwks"))
            }),
        )
        .route("/token", post(token))
        .route(
            "/userinfo",
            get(|State(s): State<Shared>| async move {
                Json(s.lock().expect("state").userinfo.clone())
            }),
        )
        .with_state(state);
    tokio::spawn(async move { axum::serve(listener, app).await });
    issuer
}

/// The hostile provider's token endpoint: the client authenticates as RFC
/// 6749 says (its form-encoded id and secret, in Basic) and proves the flow
/// with its PKCE verifier; then it gets whatever token the test set.
async fn token(
    axum::extract::State(s): axum::extract::State<Arc<Mutex<Hostile>>>,
    headers: axum::http::HeaderMap,
    body: String,
) -> (axum::http::StatusCode, axum::Json<Value>) {
    use sha2::Digest;
    let s = s.lock().expect("state");
    let basic = format!("{}:{}", form_encode(CLIENT_ID), form_encode(CLIENT_SECRET));
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(basic)
    );
    let sent = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let verifier = url::form_urlencoded::parse(body.as_bytes())
        .find(|(name, _)| name == "code_verifier")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let proved = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes())) == s.challenge;
    if sent != expected || !proved {
        let error = json!({"error": "invalid_client"});
        return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(error));
    }
    let answer = json!({"access_token": "an access token", "token_type": "Bearer",
        "expires_in": 300, "id_token": s.id_token});
    (axum::http::StatusCode::OK, axum::Json(answer))
}

/// `s` as `application/x-www-form-urlencoded` writes it.
fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Claims as a provider would make them for `nonce`, with `changes`.
fn claims(issuer: &str, nonce: &str, changes: Value) -> IdTokenClaims<Extra, CoreGenderClaim> {
    let mut claims = json!({
        "iss": issuer, "aud": [CLIENT_ID], "sub": "h-1", "nonce": nonce,
        "iat": now(), "exp": now() + 300,
        "preferred_username": "hostile-user", "groups": ["staff"],
    });
    if let (Some(claims), Some(changes)) = (claims.as_object_mut(), changes.as_object()) {
        for (name, value) in changes {
            match value {
                Value::Null => claims.remove(name),
                value => claims.insert(name.clone(), value.clone()),
            };
        }
    }
    serde_json::from_value(claims).expect("claims")
}

fn rs256(claims: IdTokenClaims<Extra, CoreGenderClaim>, key: &CoreRsaPrivateSigningKey) -> String {
    Token::new(
        claims,
        key,
        CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
        None,
        None,
    )
    .expect("signed")
    .to_string()
}

/// A sign-in against the hostile provider whose token answer is made by
/// `mint` from the flow's nonce: the callback's answer.
async fn with_token(
    app: &TestApp,
    state: &Arc<Mutex<Hostile>>,
    mint: impl FnOnce(&str) -> String,
) -> reqwest::Response {
    let (to, flow) = begin(app).await;
    let token = mint(&query(&to, "nonce"));
    {
        let mut s = state.lock().expect("state");
        s.id_token = Some(token);
        s.challenge = query(&to, "code_challenge");
    }
    let sent = format!("code=any&state={}", query(&to, "state"));
    callback(app, &sent, Some(&flow)).await
}

crate::on_both_stores! {
    async fn tokens_the_provider_should_not_have_made_are_refused(store: Store) {
        let dir = tempfile::tempdir().expect("dir");
        let (pem, other_pem, next_pem) =
            (rsa_pem(dir.path(), "a"), rsa_pem(dir.path(), "b"), rsa_pem(dir.path(), "c"));
        let key = signing_key(&pem, "k1");
        let state = Arc::new(Mutex::new(Hostile {
            keys: vec![signing_key(&pem, "k1")],
            userinfo: json!({"sub": "h-1"}),
            ..Hostile::default()
        }));
        let issuer = hostile_provider(Arc::clone(&state)).await;
        let app = spawn_with(&store, &oidc_flags(&issuer)).await;

        // The hostile provider's own token is taken: the refusals below
        // are the checks', not a broken provider's.
        let good = with_token(&app, &state, |nonce| rs256(claims(&issuer, nonce, json!({})), &key)).await;
        let session = session_of(&good);
        assert_eq!(account(&app, &session).await["role"], "member");

        let public_pem = {
            let out = Command::new("openssl")
                .args(["rsa", "-pubout"])
                .arg("-in").arg(dir.path().join("a"))
                .stderr(Stdio::null())
                .output().expect("openssl rsa");
            String::from_utf8(out.stdout).expect("pem")
        };
        let unsigned = |token: String| {
            let payload = token.split('.').nth(1).expect("payload").to_owned();
            let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
            format!("{header}.{payload}.")
        };
        type Mint = Box<dyn FnOnce(&str) -> String>;
        let cases: Vec<(&str, Mint)> = vec![
            ("signed by another key", {
                let (issuer, other) = (issuer.clone(), signing_key(&other_pem, "k1"));
                Box::new(move |n| rs256(claims(&issuer, n, json!({})), &other))
            }),
            ("for another audience", {
                let (issuer, key) = (issuer.clone(), signing_key(&pem, "k1"));
                Box::new(move |n| rs256(claims(&issuer, n, json!({"aud": ["someone-else"]})), &key))
            }),
            ("from another issuer", {
                let key = signing_key(&pem, "k1");
                Box::new(move |n| rs256(claims("https://evil.example", n, json!({})), &key))
            }),
            ("expired", {
                let (issuer, key) = (issuer.clone(), signing_key(&pem, "k1"));
                Box::new(move |n| rs256(claims(&issuer, n,
                    json!({"iat": now() - 7200, "exp": now() - 3600})), &key))
            }),
            ("without a nonce", {
                let (issuer, key) = (issuer.clone(), signing_key(&pem, "k1"));
                Box::new(move |n| rs256(claims(&issuer, n, json!({"nonce": null})), &key))
            }),
            ("with another flow's nonce", {
                let (issuer, key) = (issuer.clone(), signing_key(&pem, "k1"));
                Box::new(move |_| rs256(claims(&issuer, "a nonce of another sign-in", json!({})), &key))
            }),
            ("with alg none", {
                let (issuer, key) = (issuer.clone(), signing_key(&pem, "k1"));
                Box::new(move |n| unsigned(rs256(claims(&issuer, n, json!({})), &key)))
            }),
            ("HS256 keyed with the provider's public key", {
                let (issuer, mac) = (issuer.clone(), CoreHmacKey::new(public_pem.clone().into_bytes()));
                Box::new(move |n| Token::new(claims(&issuer, n, json!({})), &mac,
                    CoreJwsSigningAlgorithm::HmacSha256, None, None).expect("mac").to_string())
            }),
            ("HS256 keyed with the client secret", {
                let (issuer, mac) = (issuer.clone(), CoreHmacKey::new(CLIENT_SECRET.as_bytes().to_vec()));
                Box::new(move |n| Token::new(claims(&issuer, n, json!({})), &mac,
                    CoreJwsSigningAlgorithm::HmacSha256, None, None).expect("mac").to_string())
            }),
        ];
        for (case, mint) in cases {
            let r = with_token(&app, &state, mint).await;
            assert_eq!(r.status(), 401, "a token {case}");
            assert!(set_cookie(&r, "__Host-litelink_session").is_none(), "a token {case}");
            assert!(r.text().await.expect("html").contains("ID token was refused"), "a token {case}");
        }

        // A replayed state: the flow was used by the good sign-in above.
        let (to, flow) = begin(&app).await;
        let sent = format!("code=any&state={}", query(&to, "state"));
        {
            let mut s = state.lock().expect("state");
            s.id_token = Some(rs256(claims(&issuer, &query(&to, "nonce"), json!({})), &key));
            s.challenge = query(&to, "code_challenge");
        }
        assert_eq!(callback(&app, &sent, Some(&flow)).await.status(), 303);
        let replayed = callback(&app, &sent, Some(&flow)).await;
        assert_eq!(replayed.status(), 400);
        assert!(replayed.text().await.expect("html").contains("was used already"));
        // Without the browser's flow cookie, or with another browser's.
        let (to, _) = begin(&app).await;
        let (_, other_flow) = begin(&app).await;
        let sent = format!("code=any&state={}", query(&to, "state"));
        assert_eq!(callback(&app, &sent, Some(&other_flow)).await.status(), 400);
        let (to, _) = begin(&app).await;
        let sent = format!("code=any&state={}", query(&to, "state"));
        assert_eq!(callback(&app, &sent, None).await.status(), 400);
        // The provider said no, for a flow of this browser: its words.
        let (to, flow) = begin(&app).await;
        let sent = format!("error=access_denied&error_description=no%20thanks&state={}",
            query(&to, "state"));
        let declined = callback(&app, &sent, Some(&flow)).await;
        assert_eq!(declined.status(), 401);
        assert!(declined.text().await.expect("html").contains("access_denied: no thanks"));
        assert_eq!(callback(&app, "state=only", None).await.status(), 400);

        // No role claim in the ID token: the userinfo endpoint's is read.
        state.lock().expect("state").userinfo = json!({"sub": "h-1", "groups": ["audit"]});
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({"groups": null})), &key)).await;
        assert_eq!(account(&app, &session_of(&r)).await["role"], "viewer");
        // ... but only for the person the ID token names.
        state.lock().expect("state").userinfo = json!({"sub": "someone-else", "groups": ["ops"]});
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({"groups": null})), &key)).await;
        assert_eq!(r.status(), 502);

        // A new key id: the keys are fetched again, at most once a minute.
        let fetches = state.lock().expect("state").key_fetches;
        let rotated = signing_key(&next_pem, "k2");
        state.lock().expect("state").keys.push(signing_key(&next_pem, "k2"));
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})), &rotated)).await;
        session_of(&r);
        assert_eq!(state.lock().expect("state").key_fetches, fetches + 1);
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})),
            &signing_key(&other_pem, "k3"))).await;
        assert_eq!(r.status(), 401);
        assert_eq!(state.lock().expect("state").key_fetches, fetches + 1, "once a minute at most");

        // Sign-ins begun from one address are bounded.
        let mut statuses = HashMap::new();
        for _ in 0..80 {
            let r = app.client.get(app.url("/login/oidc")).send().await.expect("begin");
            if r.status() == 429 {
                assert!(header(&r, "retry-after").parse::<u32>().is_ok_and(|s| s >= 1));
            }
            *statuses.entry(r.status().as_u16()).or_insert(0) += 1;
        }
        assert!(statuses.get(&429).is_some_and(|n| *n > 0), "{statuses:?}");
    }
}

#[tokio::test]
async fn the_provider_settings_are_checked_at_start_and_the_secret_never_printed() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("l.db");
    let start = |extra: Vec<String>| {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let settings = settings(&db, &extra);
        async move {
            litelink_service::Application::build(settings)
                .await
                .err()
                .map(|e| format!("{e:#}"))
        }
    };
    let issuer = "http://127.0.0.1:9".to_owned();
    let mut flags = oidc_flags(&issuer);
    flags.drain(0..2); // no --public-url
    let refused = start(flags).await.expect("refused");
    assert!(refused.contains("--public-url"), "{refused}");
    let mut flags = oidc_flags(&issuer);
    flags.truncate(8); // no role mapping
    let refused = start(flags).await.expect("refused");
    assert!(refused.contains("no one could sign in"), "{refused}");
    let mut flags = oidc_flags(&issuer);
    flags.extend([
        "--oidc-client-secret-file".into(),
        dir.path().join("none").display().to_string(),
    ]);
    let refused = start(flags).await.expect("refused");
    assert!(refused.contains("not both"), "{refused}");

    // The secret, from a flag or the environment, is masked.
    let by_flag = (oidc_flags(&issuer), None);
    let by_env = (Vec::new(), Some("from-the-environment"));
    for (flags, env) in [by_flag, by_env] {
        let mut print = Command::new(env!("CARGO_BIN_EXE_litelink"));
        print
            .args(["serve", "--print-config", "--db"])
            .arg(&db)
            .args(flags);
        if let Some(secret) = env {
            print.env("LITELINK_OIDC_CLIENT_SECRET", secret);
        }
        let out = print.output().expect("litelink");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            printed.contains("oidc-client-secret = \"***\""),
            "{printed}"
        );
        for secret in [CLIENT_SECRET, "from-the-environment"] {
            assert!(!printed.contains(secret), "{printed}");
        }
    }
}

fn signed(
    claims: IdTokenClaims<Extra, CoreGenderClaim>,
    key: &CoreRsaPrivateSigningKey,
    alg: CoreJwsSigningAlgorithm,
) -> String {
    Token::new(claims, key, alg, None, None)
        .expect("signed")
        .to_string()
}

/// A server signing in through a hostile provider whose discovery lists
/// `algs`, with one RSA key (`k1`, kept in the returned folder).
async fn with_hostile(
    store: &Store,
    algs: Vec<&'static str>,
) -> (
    TestApp,
    Arc<Mutex<Hostile>>,
    String,
    CoreRsaPrivateSigningKey,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("dir");
    let pem = rsa_pem(dir.path(), "a");
    let state = Arc::new(Mutex::new(Hostile {
        keys: vec![signing_key(&pem, "k1")],
        userinfo: json!({"sub": "h-1"}),
        algs,
        ..Hostile::default()
    }));
    let issuer = hostile_provider(Arc::clone(&state)).await;
    let app = spawn_with(store, &oidc_flags(&issuer)).await;
    (app, state, issuer, signing_key(&pem, "k1"), dir)
}

crate::on_both_stores! {
    async fn a_provider_may_change_its_algorithm_and_strangers_neither_speak_nor_cancel(store: Store) {
        let (app, state, issuer, key, _dir) = with_hostile(&store, vec!["RS256"]).await;
        let good = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})), &key)).await;
        let session = session_of(&good);
        assert_eq!(account(&app, &session).await["role"], "member");

        // Under an https public URL only the __Host- cookie signs in.
        let old_name = app.client.get(app.url("/api/v1/account"))
            .header("cookie", format!("litelink_session={session}"))
            .send().await.expect("account");
        assert_eq!(old_name.status(), 401);

        // The provider moves from RS256 to PS256: discovered again, once,
        // and sign-ins go on without a restart.
        let discoveries = state.lock().expect("state").discoveries;
        state.lock().expect("state").algs = vec!["PS256"];
        let ps256 = CoreJwsSigningAlgorithm::RsaSsaPssSha256;
        let r = with_token(&app, &state, |n| signed(claims(&issuer, n, json!({})), &key, ps256.clone())).await;
        session_of(&r);
        assert_eq!(state.lock().expect("state").discoveries, discoveries + 1);
        // Discovery may list what it likes: a MAC and none stay refused.
        state.lock().expect("state").algs = vec!["HS256", "none", "PS256"];
        let r = with_token(&app, &state, |n| Token::new(claims(&issuer, n, json!({})),
            &CoreHmacKey::new(CLIENT_SECRET.as_bytes().to_vec()),
            CoreJwsSigningAlgorithm::HmacSha256, None, None).expect("mac").to_string()).await;
        assert_eq!(r.status(), 401);

        // A token issued to another client, or dated ahead, is refused;
        // a clock a little ahead is not.
        for (case, changes, status) in [
            ("issued to another client", json!({"azp": "another-client"}), 401),
            ("issued a year ahead", json!({"iat": now() + 365 * 24 * 3600, "exp": now() + 366 * 24 * 3600}), 401),
            ("issued to this client", json!({"azp": CLIENT_ID}), 303),
            ("issued two minutes ahead", json!({"iat": now() + 120}), 303),
        ] {
            let r = with_token(&app, &state, |n| signed(claims(&issuer, n, changes), &key, ps256.clone())).await;
            assert_eq!(r.status(), status, "a token {case}");
            if status == 401 {
                assert!(r.text().await.expect("html").contains("ID token was refused"), "{case}");
            }
        }

        // A provider's error with no flow of this browser shows no one's
        // words on this server's page.
        let planted = "error=access_denied&error_description=call%20%2B1-555-0100%20now";
        let r = callback(&app, planted, None).await;
        assert_eq!(r.status(), 400);
        assert!(!r.text().await.expect("html").contains("555-0100"));
        // Nor with another browser's flow cookie, which cancels nothing:
        // the flow is still there for the browser that began it.
        let (to, flow) = begin(&app).await;
        let (_, other) = begin(&app).await;
        let with_state = format!("{planted}&state={}", query(&to, "state"));
        let r = callback(&app, &with_state, Some(&other)).await;
        assert_eq!(r.status(), 400);
        assert!(!r.text().await.expect("html").contains("555-0100"));
        let sent = format!("code=any&state={}", query(&to, "state"));
        assert_eq!(callback(&app, &sent, Some(&other)).await.status(), 400);
        {
            let mut s = state.lock().expect("state");
            s.id_token = Some(signed(claims(&issuer, &query(&to, "nonce"), json!({})), &key, ps256.clone()));
            s.challenge = query(&to, "code_challenge");
        }
        session_of(&callback(&app, &sent, Some(&flow)).await);
    }
}

crate::on_both_stores! {
    async fn a_sign_in_with_no_role_suspends_the_user_until_one_with_a_role(store: Store) {
        let (app, state, issuer, key, _dir) = with_hostile(&store, Vec::new()).await;
        let admin = app.new_key("root", true).await;
        let first = session_of(&with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})), &key)).await);
        let second = session_of(&with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})), &key)).await);
        let api_key = app.run_keys(&["create", "--name", "h-key", "--user", "hostile-user"], false);
        app.wait_for_key(&api_key).await;
        let user = |admin: String| {
            let app = &app;
            async move {
                let r = app.api(Method::GET, "/api/v1/users/hostile-user", Some(&admin), None).await;
                assert_eq!(r.status(), 200);
                r.json::<Value>().await.expect("json")
            }
        };
        assert_eq!(user(admin.clone()).await["suspended"], false);

        // Removed from every group at the provider: refused, and suspended.
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({"groups": ["other"]})), &key)).await;
        assert_eq!(r.status(), 403);
        assert!(set_cookie(&r, "__Host-litelink_session").is_none());
        let shown = user(admin.clone()).await;
        assert_eq!((shown["suspended"].as_bool(), shown["disabled"].as_bool()), (Some(true), Some(false)), "{shown}");
        for session in [&first, &second] {
            let r = with_cookie(&app, Method::GET, "/api/v1/account", session, None).await;
            assert_eq!(r.status(), 401, "a session of the suspended user");
        }
        let r = app.api(Method::GET, "/api/v1/links", Some(&api_key), None).await;
        assert_eq!(r.status(), 401, "a key of the suspended user");
        let mut list = Command::new(env!("CARGO_BIN_EXE_litelink"));
        list.args(["users", "list"]);
        match &app.store {
            Some(url) => list.args(["--store", url]),
            None => list.arg("--db").arg(&app.db),
        };
        let listed = String::from_utf8(list.output().expect("users list").stdout).expect("utf-8");
        let row = listed.lines().find(|l| l.starts_with("hostile-user")).expect("listed");
        assert!(row.split_whitespace().filter(|w| *w == "yes").count() == 1, "{listed}");

        // An admin cannot suspend by hand, but lifts it.
        let r = app.api(Method::PATCH, "/api/v1/users/hostile-user", Some(&admin),
            Some(json!({"suspended": true}))).await;
        assert_eq!(r.status(), 400);
        let r = app.api(Method::PATCH, "/api/v1/users/hostile-user", Some(&admin),
            Some(json!({"suspended": false}))).await;
        assert_eq!(r.status(), 200);
        app.wait_for_key(&api_key).await;

        // Suspended again, then a sign-in with a role lifts it.
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({"groups": []})), &key)).await;
        assert_eq!(r.status(), 403);
        assert_eq!(user(admin.clone()).await["suspended"], true);
        let back = session_of(&with_token(&app, &state, |n| rs256(claims(&issuer, n, json!({})), &key)).await);
        assert_eq!(account(&app, &back).await["role"], "member");
        assert_eq!(user(admin.clone()).await["suspended"], false);
        app.wait_for_key(&api_key).await;

        // A person the server never knew, with no role, is made no user.
        let r = with_token(&app, &state, |n| rs256(claims(&issuer, n,
            json!({"sub": "h-2", "preferred_username": "stranger", "groups": ["other"]})), &key)).await;
        assert_eq!(r.status(), 403);
        let r = app.api(Method::GET, "/api/v1/users/stranger", Some(&admin), None).await;
        assert_eq!(r.status(), 404);
    }
}
