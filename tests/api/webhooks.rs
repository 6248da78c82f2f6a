//! Webhooks: a receiver on loopback takes each delivery, and the Standard
//! Webhooks verifier from PyPI (`standardwebhooks`, not this project's)
//! checks every signature.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::on_both_stores;

/// What the receiver does with one delivery.
#[derive(Debug, Clone)]
enum Reply {
    Status(u16),
    /// Answers 200 after this long.
    Slow(Duration),
    /// A redirect to a URL that would answer 200.
    Redirect,
    /// 200, with a body far over what litelink reads.
    Huge,
}

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Delivery {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
    json: Value,
}

#[derive(Default)]
struct Shared {
    got: Vec<Delivery>,
    plan: VecDeque<Reply>,
}

/// A webhook receiver on a free loopback port.
struct Receiver {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn take(
    axum::extract::State(shared): axum::extract::State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let reply = {
        let mut shared = shared.lock().unwrap();
        shared.got.push(Delivery {
            id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            body: text,
        });
        shared.plan.pop_front().unwrap_or(Reply::Status(200))
    };
    match reply {
        Reply::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
        Reply::Slow(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Reply::Redirect => (StatusCode::FOUND, [("location", "/elsewhere")]).into_response(),
        Reply::Huge => (StatusCode::OK, vec![b'x'; 4 << 20]).into_response(),
    }
}

impl Receiver {
    async fn start() -> Self {
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(take))
            .route("/elsewhere", axum::routing::post(take))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn plan(&self, replies: &[Reply]) {
        self.shared
            .lock()
            .unwrap()
            .plan
            .extend(replies.iter().cloned());
    }

    fn got(&self) -> Vec<Delivery> {
        self.shared.lock().unwrap().got.clone()
    }

    /// Waits (up to 30 s) until at least `n` deliveries came.
    async fn wait_for(&self, n: usize) -> Vec<Delivery> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.got();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} deliveries of {n}: {got:?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The Python that has `standardwebhooks`; `None` (and a skip, or a
/// failure under scripts/test) without one.
fn verifier() -> Option<std::ffi::OsString> {
    let python = std::env::var_os("LITELINK_TEST_WEBHOOKS_PYTHON").filter(|p| !p.is_empty());
    if python.is_none() {
        missing("no Python with standardwebhooks (LITELINK_TEST_WEBHOOKS_PYTHON)");
    }
    python
}

const VERIFY: &str = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
for item in json.load(sys.stdin):
    try:
        Webhook(item["secret"]).verify(item["body"], item["headers"])
        print("ok")
    except Exception as e:
        print("fail " + type(e).__name__)
"#;

/// Whether each delivery verifies under `secret`, as the Standard
/// Webhooks library decides.
async fn verified(python: &std::ffi::OsStr, secret: &str, got: &[Delivery]) -> Vec<bool> {
    let items: Vec<Value> = got
        .iter()
        .map(|d| {
            json!({
                "secret": secret,
                "body": d.body,
                "headers": {
                    "webhook-id": d.id,
                    "webhook-timestamp": d.timestamp,
                    "webhook-signature": d.signature,
                },
            })
        })
        .collect();
    let python = python.to_owned();
    let input = serde_json::to_vec(&items).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(python)
            .arg("-c")
            .arg(VERIFY)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python");
        child.stdin.take().unwrap().write_all(&input).unwrap();
        child.wait_with_output().expect("verifier")
    })
    .await
    .unwrap();
    assert!(out.status.success(), "the verifier failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l == "ok")
        .collect()
}

/// Registers a webhook through the API: its id and secret.
async fn register(app: &TestApp, admin: &str, body: Value) -> (i64, String) {
    let r = app
        .api(Method::POST, "/api/v1/webhooks", Some(admin), Some(body))
        .await;
    assert_eq!(r.status(), 201, "register");
    let created: Value = r.json().await.unwrap();
    (
        created["id"].as_i64().expect("id"),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn deliveries(app: &TestApp, admin: &str, id: i64) -> Vec<Value> {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/webhooks/{id}/deliveries"),
            Some(admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    body["deliveries"].as_array().expect("deliveries").clone()
}

/// Waits (up to 30 s) until `check` holds of the webhook's history.
async fn wait_for_history(
    app: &TestApp,
    admin: &str,
    id: i64,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let history = deliveries(app, admin, id).await;
        if check(&history) {
            return history;
        }
        assert!(Instant::now() < deadline, "history: {history:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn webhook(app: &TestApp, admin: &str, id: i64) -> Value {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/webhooks/{id}"),
            Some(admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

on_both_stores! {
    async fn each_change_is_delivered_signed_and_in_order(store: Store) {
        let Some(python) = verifier() else { return };
        let receiver = Receiver::start().await;
        let app = spawn_app_in(&store, &["--webhooks-allow-private"]).await;
        let admin = app.new_key("root", true).await;
        let (id, secret) = register(
            &app,
            &admin,
            json!({"url": receiver.url(), "events": ["link.created", "link.updated", "link.deleted"]}),
        )
        .await;
        let view = webhook(&app, &admin, id).await;
        assert_eq!(view["url"], receiver.url());
        assert_eq!(view["enabled"], true);
        assert!(view.get("secret").is_none(), "the secret is shown once: {view}");

        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin),
                Some(json!({"url": "https://example.com/a", "code": "hooked", "title": "A", "tags": ["x"]})))
            .await;
        assert_eq!(r.status(), 201);
        let r = app
            .api(Method::PATCH, "/api/v1/links/hooked", Some(&admin),
                Some(json!({"url": "https://example.com/b"})))
            .await;
        assert_eq!(r.status(), 200);
        let r = app
            .api(Method::DELETE, "/api/v1/links/hooked", Some(&admin), None)
            .await;
        assert_eq!(r.status(), 204);

        let got = receiver.wait_for(3).await;
        let types: Vec<&str> = got.iter().map(|d| d.json["type"].as_str().unwrap_or("")).collect();
        assert_eq!(types, ["link.created", "link.updated", "link.deleted"], "in order");
        let created = &got[0].json["data"];
        assert_eq!(created["code"], "hooked");
        assert_eq!(created["url"], "https://example.com/a");
        assert_eq!(created["title"], "A");
        assert_eq!(created["tags"], json!(["x"]));
        assert_eq!(created["owner"], "root");
        assert!(created["short_url"].as_str().unwrap().ends_with("/hooked"), "{created}");
        assert_eq!(got[1].json["data"]["url"], "https://example.com/b");
        assert_eq!(got[2].json["data"]["code"], "hooked");
        for d in &got {
            assert!(d.json["timestamp"].as_str().is_some(), "{}", d.body);
            assert!(d.id.starts_with("msg_"), "{}", d.id);
            assert!(d.signature.starts_with("v1,"), "{}", d.signature);
        }
        let ids: std::collections::HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids.len(), 3, "each event its own id");
        assert_eq!(verified(&python, &secret, &got).await, [true, true, true]);
        // The specification's verifier refuses the same deliveries under
        // another secret.
        let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        assert_eq!(verified(&python, other, &got).await, [false, false, false]);

        let history = wait_for_history(&app, &admin, id, |h| h.len() == 3).await;
        for attempt in &history {
            assert_eq!(attempt["status"], 200);
            assert_eq!(attempt["state"], "delivered");
        }
        assert_eq!(history[0]["type"], "link.deleted", "newest first");
    }
}

on_both_stores! {
    async fn failures_are_retried_then_the_webhook_is_disabled(store: Store) {
        let receiver = Receiver::start().await;
        let app = spawn_app_in(
            &store,
            &["--webhooks-allow-private", "--webhooks-retry-delays", "1,1"],
        )
        .await;
        let admin = app.new_key("root", true).await;
        let (id, _) = register(&app, &admin, json!({"url": receiver.url(), "events": ["link.created"]})).await;

        // 500, then 200: delivered on the second attempt, with the same id.
        receiver.plan(&[Reply::Status(500)]);
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({"url": "https://example.com/1"})))
            .await;
        assert_eq!(r.status(), 201);
        let got = receiver.wait_for(2).await;
        assert_eq!(got[0].id, got[1].id, "the same webhook-id on every attempt");
        let history = wait_for_history(&app, &admin, id, |h| h.len() == 2).await;
        assert_eq!(history[1]["status"], 500);
        assert!(history[1]["error"].as_str().unwrap().contains("500"));
        assert_eq!(history[0]["status"], 200);
        assert_eq!(history[0]["state"], "delivered");

        // A redirect is not followed, and counts as a failure; then the
        // receiver fails until the schedule is used up.
        receiver.plan(&[Reply::Redirect, Reply::Status(503), Reply::Status(500)]);
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({"url": "https://example.com/2"})))
            .await;
        assert_eq!(r.status(), 201);
        let history = wait_for_history(&app, &admin, id, |h| {
            h.first().is_some_and(|a| a["state"] == "failed")
        })
        .await;
        assert_eq!(history.len(), 5, "{history:?}");
        assert_eq!(history[2]["status"], 302);
        let failed_event = history[0]["event"].as_i64().unwrap();
        assert_eq!(webhook(&app, &admin, id).await["enabled"], false, "disabled once failed");
        assert_eq!(receiver.got().len(), 5);
        assert!(receiver.got().iter().all(|d| !d.body.is_empty()));

        // Enabled again, and sent again by hand: delivered.
        let r = app
            .api(Method::PATCH, &format!("/api/v1/webhooks/{id}"), Some(&admin), Some(json!({"enabled": true})))
            .await;
        assert_eq!(r.status(), 200);
        let r = app
            .api(
                Method::POST,
                &format!("/api/v1/webhooks/{id}/deliveries/{failed_event}/retry"),
                Some(&admin),
                None,
            )
            .await;
        assert_eq!(r.status(), 202);
        wait_for_history(&app, &admin, id, |h| {
            h.first().is_some_and(|a| a["event"] == failed_event && a["state"] == "delivered")
        })
        .await;
        let r = app
            .api(Method::POST, &format!("/api/v1/webhooks/{id}/deliveries/999999/retry"), Some(&admin), None)
            .await;
        assert_error(r, 404, "no event").await;

        // 410 Gone disables the webhook at once.
        receiver.plan(&[Reply::Status(410)]);
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({"url": "https://example.com/3"})))
            .await;
        assert_eq!(r.status(), 201);
        wait_for_history(&app, &admin, id, |h| h.first().is_some_and(|a| a["status"] == 410)).await;
        assert_eq!(webhook(&app, &admin, id).await["enabled"], false, "410 disables");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_and_oversized_answers_are_bounded() {
    let receiver = Receiver::start().await;
    let app = spawn_app(&["--webhooks-allow-private", "--webhooks-retry-delays", "1"]).await;
    let admin = app.new_key("root", true).await;
    let (id, _) = register(
        &app,
        &admin,
        json!({"url": receiver.url(), "events": ["link.created"]}),
    )
    .await;
    // Over the 10 s timeout: an error, then a retry that succeeds.
    receiver.plan(&[Reply::Slow(Duration::from_secs(12))]);
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/slow"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let history = wait_for_history(&app, &admin, id, |h| h.len() == 2).await;
    assert_eq!(history[1]["status"], Value::Null);
    assert!(
        history[1]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 10s"),
        "{history:?}"
    );
    assert!(history[1]["duration_ms"].as_u64().unwrap() >= 10_000);
    assert_eq!(history[0]["state"], "delivered");

    // A 2xx whose body is megabytes long: delivered, the body cut off.
    receiver.plan(&[Reply::Huge]);
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/huge"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let history = wait_for_history(&app, &admin, id, |h| h.len() == 3).await;
    assert_eq!(history[0]["status"], 200);
    assert_eq!(history[0]["state"], "delivered");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_secret_and_the_old_one_both_verify() {
    let Some(python) = verifier() else { return };
    let receiver = Receiver::start().await;
    let app = spawn_app(&["--webhooks-allow-private"]).await;
    let admin = app.new_key("root", true).await;
    let (id, old) = register(
        &app,
        &admin,
        json!({"url": receiver.url(), "events": ["link.created"]}),
    )
    .await;
    let r = app
        .api(
            Method::POST,
            &format!("/api/v1/webhooks/{id}/rotate-secret"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    let rotated: Value = r.json().await.unwrap();
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/r"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let got = receiver.wait_for(1).await;
    assert_eq!(
        got[0].signature.split(' ').count(),
        2,
        "{}",
        got[0].signature
    );
    assert_eq!(verified(&python, &new, &got).await, [true]);
    assert_eq!(verified(&python, &old, &got).await, [true]);
    let r = app
        .api(
            Method::POST,
            "/api/v1/webhooks/4242/rotate-secret",
            Some(&admin),
            None,
        )
        .await;
    assert_error(r, 404, "no webhook").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_an_admins_and_their_urls_are_checked() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("root", true).await;
    let member = app.new_key("member", false).await;
    let body = json!({"url": "https://hooks.example.com/in", "events": ["link.created"]});
    let r = app
        .api(Method::POST, "/api/v1/webhooks", None, Some(body.clone()))
        .await;
    assert_error(r, 401, "API key").await;
    let r = app
        .api(
            Method::POST,
            "/api/v1/webhooks",
            Some(&member),
            Some(body.clone()),
        )
        .await;
    assert_error(r, 403, "admin").await;
    let r = app
        .api(Method::GET, "/api/v1/webhooks", Some(&member), None)
        .await;
    assert_error(r, 403, "admin").await;

    for (url, why) in [
        ("http://hooks.example.com/in", "https"),
        ("https://127.0.0.1/in", "private"),
        ("https://localhost:8443/in", "private"),
        ("https://10.1.2.3/in", "private"),
        ("https://[::ffff:192.168.0.1]/in", "private"),
        ("https://169.254.169.254/latest", "private"),
        (
            "https://user:pw@hooks.example.com/in",
            "user name or password",
        ),
        ("ftp://hooks.example.com/in", "scheme"),
    ] {
        let r = app
            .api(
                Method::POST,
                "/api/v1/webhooks",
                Some(&admin),
                Some(json!({"url": url, "events": ["link.created"]})),
            )
            .await;
        assert_error(r, 400, why).await;
    }
    for (body, why) in [
        (
            json!({"url": "https://hooks.example.com/in", "events": []}),
            "at least one",
        ),
        (
            json!({"url": "https://hooks.example.com/in", "events": ["link.clicked"]}),
            "unknown event",
        ),
        (json!({"url": "https://hooks.example.com/in"}), "events"),
        (json!({"events": ["link.created"]}), "url"),
        (
            json!({"url": "https://hooks.example.com/in", "events": ["link.created"], "domain": "nope.example"}),
            "domain",
        ),
        (
            json!({"url": "https://hooks.example.com/in", "events": ["link.created"], "secret": "x"}),
            "unknown field",
        ),
    ] {
        let r = app
            .api(Method::POST, "/api/v1/webhooks", Some(&admin), Some(body))
            .await;
        assert_error(r, 400, why).await;
    }
    let (id, secret) = register(&app, &admin, body).await;
    assert!(secret.starts_with("whsec_"));
    for path in [
        "/api/v1/webhooks/0",
        "/api/v1/webhooks/abc",
        "/api/v1/webhooks/1/deliveries/x/retry",
    ] {
        let method = if path.ends_with("retry") {
            Method::POST
        } else {
            Method::GET
        };
        let r = app.api(method, path, Some(&admin), None).await;
        assert_error(r, 400, "positive whole number").await;
    }
    let r = app
        .api(Method::GET, "/api/v1/webhooks/999", Some(&admin), None)
        .await;
    assert_error(r, 404, "no webhook").await;
    let r = app
        .api(
            Method::PATCH,
            &format!("/api/v1/webhooks/{id}"),
            Some(&admin),
            Some(json!({"url": "https://192.168.1.1/x"})),
        )
        .await;
    assert_error(r, 400, "private").await;
    let r = app
        .api(
            Method::PATCH,
            &format!("/api/v1/webhooks/{id}"),
            Some(&admin),
            Some(json!({"events": ["link.deleted"], "domain": "default", "enabled": false})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let changed: Value = r.json().await.unwrap();
    assert_eq!(changed["events"], json!(["link.deleted"]));
    assert_eq!(changed["domain"], "default");
    assert_eq!(changed["enabled"], false);
    let r = app
        .api(Method::GET, "/api/v1/webhooks", Some(&admin), None)
        .await;
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
    assert!(list["webhooks"][0].get("secret").is_none());
    let r = app
        .api(
            Method::DELETE,
            &format!("/api/v1/webhooks/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    let r = app
        .api(
            Method::DELETE,
            &format!("/api/v1/webhooks/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_error(r, 404, "no webhook").await;
}

/// A webhook on a name that resolves to loopback is refused when it is
/// registered, and a delivery would check the address again.
#[tokio::test(flavor = "multi_thread")]
async fn a_private_receiver_gets_nothing_without_the_switch() {
    let receiver = Receiver::start().await;
    let app = spawn_app(&[]).await;
    let admin = app.new_key("root", true).await;
    let r = app
        .api(
            Method::POST,
            "/api/v1/webhooks",
            Some(&admin),
            Some(json!({"url": receiver.url(), "events": ["link.created"]})),
        )
        .await;
    assert_error(r, 400, "https").await;
    // Registered beside the server (as another server with the switch
    // would), it is still never posted to: the address is checked at
    // each delivery.
    let db = app.db.display().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args([
            "webhooks",
            "add",
            &receiver.url(),
            "--events",
            "link.created",
            "--webhooks-allow-private",
            "--db",
            &db,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/p"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let history = wait_for_history(&app, &admin, 1, |h| !h.is_empty()).await;
    assert!(
        history[0]["error"]
            .as_str()
            .unwrap()
            .contains("private or loopback"),
        "{history:?}"
    );
    assert!(receiver.got().is_empty(), "nothing reached the receiver");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_line_manages_webhooks_beside_a_running_server() {
    let Some(python) = verifier() else { return };
    let receiver = Receiver::start().await;
    let app = spawn_app(&["--webhooks-allow-private"]).await;
    let admin = app.new_key("root", true).await;
    let db = app.db.display().to_string();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .arg("webhooks")
            .args(args)
            .args(["--db", &db])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, said) = run(&["add", &receiver.url(), "--events", "link.created"]);
    assert!(!ok && said.contains("https"), "{said}");
    let (ok, _, said) = run(&["add", "https://hooks.example.com/", "--events", "link.nope"]);
    assert!(!ok && said.contains("unknown event"), "{said}");
    let (ok, secret, said) = run(&[
        "add",
        &receiver.url(),
        "--events",
        "link.created,link.deleted",
        "--webhooks-allow-private",
    ]);
    assert!(ok, "{said}");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let (ok, list, _) = run(&["list"]);
    assert!(
        ok && list.contains(&receiver.url()) && list.contains("link.created,link.deleted"),
        "{list}"
    );

    // The running server sends to it within a second or so.
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/cli"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let got = receiver.wait_for(1).await;
    assert_eq!(verified(&python, &secret, &got).await, [true]);

    let (ok, ..) = run(&["disable", "1"]);
    assert!(ok);
    let (_, list, _) = run(&["list"]);
    assert!(
        list.lines().nth(1).is_some_and(|l| l.contains(" no ")),
        "{list}"
    );
    let (ok, ..) = run(&["enable", "1"]);
    assert!(ok);
    let (ok, rotated, _) = run(&["rotate", "1"]);
    assert!(ok && rotated.starts_with("whsec_") && rotated != secret);
    let (ok, ..) = run(&["remove", "1"]);
    assert!(ok);
    let (ok, _, said) = run(&["remove", "1"]);
    assert!(!ok && said.contains("no webhook 1"), "{said}");
}

/// Events written before a kill -9 are all delivered after the restart.
#[tokio::test(flavor = "multi_thread")]
async fn events_pending_at_a_kill_9_are_delivered_after_the_restart() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hooks.db");
    let args = ["--webhooks-allow-private", "--webhooks-retry-delays", "1"];
    let mut server = spawn_process(&db, &args);
    let admin = run_keys(&db, &["create", "--name", "root"], true);
    let client = reqwest::Client::new();
    let base = server.url();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .get(format!("{base}/api/v1/webhooks"))
        .bearer_auth(&admin)
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        assert!(Instant::now() < deadline, "key never accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = client
        .post(format!("{base}/api/v1/webhooks"))
        .bearer_auth(&admin)
        .json(&json!({"url": receiver.url(), "events": ["link.created"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The receiver holds every delivery past the kill.
    receiver.plan(&vec![Reply::Slow(Duration::from_secs(3)); 40]);
    let mut codes = Vec::new();
    for i in 0..20 {
        let r = client
            .post(format!("{base}/api/v1/links"))
            .bearer_auth(&admin)
            .json(&json!({"url": format!("https://example.com/k/{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let link: Value = r.json().await.unwrap();
        codes.push(link["code"].as_str().unwrap().to_owned());
    }
    server.kill9();
    receiver.shared.lock().unwrap().plan.clear();
    let server = spawn_process(&db, &args);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: std::collections::HashSet<String> = receiver
            .got()
            .iter()
            .filter_map(|d| d.json["data"]["code"].as_str().map(str::to_owned))
            .collect();
        if codes.iter().all(|c| got.contains(c)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} links heard of",
            got.len(),
            codes.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(server);
}

/// Two instances on one PostgreSQL database share the outbox: each event
/// is delivered once.
#[tokio::test(flavor = "multi_thread")]
async fn two_instances_deliver_each_event_once() {
    let receiver = Receiver::start().await;
    let url = fresh_postgres_db().await;
    let args = ["--store", url.as_str(), "--webhooks-allow-private"];
    let one = spawn_app(&args).await;
    let two = spawn_app(&args).await;
    let admin = one.new_key("root", true).await;
    two.wait_for_key(&admin).await;
    register(
        &one,
        &admin,
        json!({"url": receiver.url(), "events": ["link.created"]}),
    )
    .await;
    let mut codes = std::collections::HashSet::new();
    for i in 0..40 {
        let app = if i % 2 == 0 { &one } else { &two };
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&admin),
                Some(json!({"url": format!("https://example.com/two/{i}")})),
            )
            .await;
        assert_eq!(r.status(), 201);
        let link: Value = r.json().await.unwrap();
        codes.insert(link["code"].as_str().unwrap().to_owned());
    }
    receiver.wait_for(40).await;
    // Time for a second delivery of any event to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = receiver.got();
    let ids: std::collections::HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got.len(), 40, "no event twice");
    assert_eq!(ids.len(), 40);
    let heard: std::collections::HashSet<String> = got
        .iter()
        .filter_map(|d| d.json["data"]["code"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(heard, codes);
}

on_both_stores! {
    async fn expiries_imports_and_domain_removals_are_told(store: Store) {
        let receiver = Receiver::start().await;
        let args = ["--webhooks-allow-private", "--webhooks-expiry-scan-ms", "200"];
        let app = spawn_app_in(&store, &args).await;
        let admin = app.new_key("root", true).await;
        let r = app
            .api(Method::POST, "/api/v1/domains", Some(&admin), Some(json!({"host": "go.example"})))
            .await;
        assert_eq!(r.status(), 201);
        register(
            &app,
            &admin,
            json!({"url": receiver.url(), "events": ["link.expired", "link.deleted", "links.imported"]}),
        )
        .await;

        // Used up by its second visit: told by the flush that stores it.
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin),
                Some(json!({"url": "https://example.com/capped", "code": "capped", "max_visits": 2})))
            .await;
        assert_eq!(r.status(), 201);
        for _ in 0..2 {
            let r = app.client.get(app.url("/capped")).send().await.unwrap();
            assert_eq!(r.status(), 302);
        }
        // Its time runs out in two seconds: told by the scan.
        let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
        let soon = soon.format(&time::format_description::well_known::Rfc3339).unwrap();
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin),
                Some(json!({"url": "https://example.com/timed", "code": "timed", "expires_at": soon})))
            .await;
        assert_eq!(r.status(), 201);
        // Deleted with its domain.
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin),
                Some(json!({"url": "https://example.com/on", "code": "ondomain", "domain": "go.example"})))
            .await;
        assert_eq!(r.status(), 201);
        let r = app
            .api(Method::DELETE, "/api/v1/domains/go.example?force=true", Some(&admin), None)
            .await;
        assert_eq!(r.status(), 204);

        let got = receiver.wait_for(3).await;
        let mut told: Vec<(String, String)> = got
            .iter()
            .map(|d| {
                (
                    d.json["type"].as_str().unwrap().to_owned(),
                    d.json["data"]["code"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        told.sort();
        assert_eq!(
            told,
            [
                ("link.deleted".to_owned(), "ondomain".to_owned()),
                ("link.expired".to_owned(), "capped".to_owned()),
                ("link.expired".to_owned(), "timed".to_owned()),
            ]
        );
        let capped = got.iter().find(|d| d.json["data"]["code"] == "capped").unwrap();
        assert_eq!(capped.json["data"]["visits"], 2);
        assert_eq!(capped.json["data"]["max_visits"], 2);
        let timed = got.iter().find(|d| d.json["data"]["code"] == "timed").unwrap();
        assert_eq!(timed.json["data"]["expired"], true);
        let on = got.iter().find(|d| d.json["data"]["code"] == "ondomain").unwrap();
        assert_eq!(on.json["data"]["domain"], "go.example");

        // An import is one event with its counts.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("links.jsonl");
        let path = file.to_str().unwrap();
        let db = app.db.clone();
        let source = app.store.clone();
        run_on(&source, &db, &["export", "--out", path], true);
        let _kept = app.stop().await;
        let (ok, said) = run_on(&source, &db, &["import", path], false);
        assert!(ok, "{said}");
        let again = spawn_app_like(&db, &source, &args).await;
        let got = receiver.wait_for(4).await;
        let imported = &got[3].json;
        assert_eq!(imported["type"], "links.imported", "{imported}");
        assert_eq!(imported["data"]["source"], "litelink");
        assert_eq!(imported["data"]["imported"], 0);
        assert!(imported["data"]["unchanged"].as_u64().unwrap() >= 2, "{imported}");
        drop(again);
        // Nothing more: each expiry was told once.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(receiver.got().len(), 4);
    }
}

/// Runs tests/fixtures/webhooks/streams.py with `args`: its output.
async fn streams_py(python: &std::ffi::OsStr, args: Vec<String>) -> String {
    let python = python.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/webhooks/streams.py"
            ))
            .args(args)
            .output()
            .expect("python")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "streams.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn create_links(app: &TestApp, key: &str, label: &str, n: usize) -> Vec<String> {
    let mut codes = Vec::new();
    for i in 0..n {
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(key),
                Some(json!({"url": format!("https://example.com/{label}/{i}")})),
            )
            .await;
        assert_eq!(r.status(), 201);
        let link: Value = r.json().await.unwrap();
        codes.push(link["code"].as_str().unwrap().to_owned());
    }
    codes
}

/// Events reach RabbitMQ through a relay that is cut while some are
/// pending: every one arrives once the relay is back, each once, in order.
#[tokio::test(flavor = "multi_thread")]
async fn events_go_to_rabbitmq_and_wait_out_an_outage() {
    let Some(python) = verifier() else { return };
    let name = format!("litelink_test_{}", std::process::id());
    let direct = "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned();
    let said = streams_py(
        &python,
        vec![
            "amqp-bind".into(),
            direct.clone(),
            name.clone(),
            name.clone(),
        ],
    )
    .await;
    assert_eq!(said, "bound");
    let mut relay = Relay::start("127.0.0.1:5672".parse().unwrap()).await;
    let via = format!("amqp://guest:guest@127.0.0.1:{}/%2f", relay.port);
    let app = spawn_app(&[
        "--events-amqp-url",
        &via,
        "--events-amqp-exchange",
        &name,
        "--webhooks-retry-delays",
        "1",
    ])
    .await;
    let admin = app.new_key("root", true).await;
    let r = app
        .api(Method::GET, "/api/v1/webhooks", Some(&admin), None)
        .await;
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["webhooks"], json!([]), "the stream is not a webhook");
    let mut codes = create_links(&app, &admin, "before", 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    relay.cut();
    codes.extend(create_links(&app, &admin, "during", 3).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.restore().await;
    let out = streams_py(
        &python,
        vec![
            "amqp-drain".into(),
            direct,
            name.clone(),
            name,
            codes.len().to_string(),
        ],
    )
    .await;
    let got: Vec<Value> = serde_json::from_str(&out).unwrap();
    let heard: Vec<&str> = got
        .iter()
        .map(|m| m["body"]["data"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(heard.len(), codes.len(), "each event once: {out}");
    let mut sorted = heard.clone();
    sorted.sort();
    let mut want: Vec<&str> = codes.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(sorted, want);
    for m in &got {
        assert_eq!(m["key"], "link.created");
        assert_eq!(m["body"]["type"], "link.created");
        assert_eq!(m["content_type"], "application/json");
        assert_eq!(m["headers"]["webhook-id"], m["message_id"]);
        assert!(
            m["headers"]["webhook-signature"]
                .as_str()
                .unwrap()
                .starts_with("v1,")
        );
    }
}

/// A private nats-server on a free port, with JetStream, kept in `dir`.
struct NatsServer {
    child: std::process::Child,
    port: u16,
}

impl NatsServer {
    fn start(dir: &std::path::Path, port: u16) -> Self {
        let child = std::process::Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Events reach JetStream, on a private server that is killed while some
/// are pending and started again: each arrives, once.
#[tokio::test(flavor = "multi_thread")]
async fn events_go_to_nats_jetstream_and_wait_out_an_outage() {
    let Some(python) = verifier() else { return };
    if std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        missing("no nats-server");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut nats = NatsServer::start(dir.path(), port);
    let url = format!("nats://127.0.0.1:{}", nats.port);
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    let app = spawn_app(&["--events-nats-url", &url, "--webhooks-retry-delays", "1"]).await;
    let admin = app.new_key("root", true).await;
    let mut codes = create_links(&app, &admin, "before", 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    nats.kill();
    codes.extend(create_links(&app, &admin, "during", 3).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nats = NatsServer::start(dir.path(), port);
    // A link's visits of one flush: one outbox row, published as one
    // message each, in order.
    for i in 0..6 {
        let r = app
            .client
            .get(app.url(&format!("/{}", codes[0])))
            .header("referer", format!("https://r{i}.example/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 302);
    }
    let mut args = vec![
        "nats-read".to_owned(),
        url,
        since.to_string(),
        (codes.len() + 6).to_string(),
    ];
    args.extend(codes.iter().cloned());
    let out = streams_py(&python, args).await;
    let got: Vec<Value> = serde_json::from_str(&out).unwrap();
    let (visited, created): (Vec<&Value>, Vec<&Value>) = got
        .iter()
        .partition(|m| m["subject"] == "litelink.link.visited");
    let mut heard: Vec<&str> = created
        .iter()
        .map(|m| m["body"]["data"]["code"].as_str().unwrap())
        .collect();
    heard.sort();
    let mut want: Vec<&str> = codes.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(heard, want, "each event once: {out}");
    for m in &created {
        assert_eq!(m["subject"], "litelink.link.created");
    }
    let hosts: Vec<&str> = visited
        .iter()
        .map(|m| m["body"]["data"]["referrer_host"].as_str().unwrap())
        .collect();
    assert_eq!(
        hosts,
        [
            "r0.example",
            "r1.example",
            "r2.example",
            "r3.example",
            "r4.example",
            "r5.example"
        ],
        "each visit once, in order: {out}"
    );
    let mut ids: Vec<&str> = got
        .iter()
        .map(|m| m["headers"]["Nats-Msg-Id"].as_str().unwrap())
        .collect();
    for m in &got {
        assert_eq!(m["headers"]["Nats-Msg-Id"], m["headers"]["webhook-id"]);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), got.len(), "each message its own id");
    drop(nats);
}

/// The NATS this project's machines run: the stream is made if missing,
/// and the events of this test are on it.
#[tokio::test(flavor = "multi_thread")]
async fn events_go_to_the_machines_nats() {
    let Some(python) = verifier() else { return };
    let url = "nats://127.0.0.1:4222".to_owned();
    if std::net::TcpStream::connect("127.0.0.1:4222").is_err() {
        missing("no NATS on 127.0.0.1:4222");
        return;
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0;
    let app = spawn_app(&["--events-nats-url", &url]).await;
    let admin = app.new_key("root", true).await;
    let codes = create_links(&app, &admin, "shared", 2).await;
    let r = app
        .api(
            Method::DELETE,
            &format!("/api/v1/links/{}", codes[0]),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    let mut args = vec!["nats-read".to_owned(), url, since.to_string(), "3".into()];
    args.extend(codes.iter().cloned());
    let out = streams_py(&python, args).await;
    let got: Vec<Value> = serde_json::from_str(&out).unwrap();
    let told: Vec<(String, String)> = got
        .iter()
        .map(|m| {
            (
                m["subject"].as_str().unwrap().to_owned(),
                m["body"]["data"]["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(told.len(), 3, "{out}");
    // In order for each link: created, then deleted.
    let first: Vec<&str> = told
        .iter()
        .filter(|(_, c)| *c == codes[0])
        .map(|(s, _)| s.as_str())
        .collect();
    assert_eq!(first, ["litelink.link.created", "litelink.link.deleted"]);
}

on_both_stores! {
    async fn each_counted_visit_is_told_without_the_address_or_agent(store: Store) {
        let Some(python) = verifier() else { return };
        let receiver = Receiver::start().await;
        let app = spawn_app_in(
            &store,
            &["--webhooks-allow-private", "--trust-proxy", "127.0.0.1/32", "--country-header", "cf-ipcountry"],
        )
        .await;
        let admin = app.new_key("root", true).await;
        let (_, secret) = register(&app, &admin, json!({"url": receiver.url(), "events": ["link.visited"]})).await;
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({
                "url": "https://example.com/plain", "code": "seen",
                "rules": [{"if": {"device": "ios"}, "url": "https://apps.example.com/ios"}],
            })))
            .await;
        assert_eq!(r.status(), 201);
        // The deliverer turns records on within a poll.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1";
        let r = app.client.get(app.url("/seen"))
            .header("user-agent", iphone)
            .header("referer", "https://news.example.org/item?id=1")
            .header("cf-ipcountry", "FR")
            .header("x-forwarded-for", "203.0.113.7")
            .send().await.unwrap();
        assert_eq!(r.headers()["location"], "https://apps.example.com/ios");
        let r = app.client.get(app.url("/seen"))
            .header("user-agent", "Googlebot/2.1 (+http://www.google.com/bot.html)")
            .send().await.unwrap();
        assert_eq!(r.headers()["location"], "https://example.com/plain");
        // A HEAD is not a visit.
        let r = app.client.head(app.url("/seen")).send().await.unwrap();
        assert_eq!(r.status(), 302);

        let got = receiver.wait_for(2).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(receiver.got().len(), 2, "one event for each counted visit");
        assert_eq!(verified(&python, &secret, &got).await, [true, true]);
        let mut visits: Vec<&Value> = got.iter().map(|d| &d.json["data"]).collect();
        visits.sort_by_key(|v| v["bot"].as_bool());
        let (person, bot) = (visits[0], visits[1]);
        assert_eq!(got[0].json["type"], "link.visited");
        assert_eq!(person["code"], "seen");
        assert_eq!(person["target"], "https://apps.example.com/ios");
        assert_eq!(person["rule"], 0);
        assert_eq!(person["referrer_host"], "news.example.org");
        assert_eq!(person["country"], "FR");
        assert_eq!(person["device"], "mobile");
        assert_eq!(person["system"], "iOS");
        assert_eq!(person["bot"], false);
        assert!(person["at"].as_str().is_some());
        assert_eq!(bot["bot"], true);
        assert_eq!(bot["target"], "https://example.com/plain");
        assert_eq!(bot["rule"], Value::Null);
        for d in &got {
            assert!(!d.body.contains("203.0.113.7"), "no address: {}", d.body);
            assert!(!d.body.contains("Mozilla") && !d.body.contains("Googlebot/2.1"), "no User-Agent: {}", d.body);
        }
        // The counts are kept as before.
        let r = app.api(Method::GET, "/api/v1/links/seen", Some(&admin), None).await;
        let link: Value = r.json().await.unwrap();
        assert_eq!(link["visits"], 2);
    }
}

on_both_stores! {
    /// A link's visits of one flush are kept together, but each is its own
    /// message, in order, and a failure part way resumes where it stopped.
    async fn a_links_visits_go_one_by_one_and_a_retry_resumes(store: Store) {
        let receiver = Receiver::start().await;
        let app = spawn_app_in(
            &store,
            &["--webhooks-allow-private", "--webhooks-retry-delays", "1"],
        )
        .await;
        let admin = app.new_key("root", true).await;
        register(&app, &admin, json!({"url": receiver.url(), "events": ["link.visited"]})).await;
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({
                "url": "https://example.com/many", "code": "many",
            })))
            .await;
        assert_eq!(r.status(), 201);
        // The deliverer turns records on within a poll.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ok = Reply::Status(200);
        receiver.plan(&[ok.clone(), ok.clone(), ok, Reply::Status(500)]);
        for i in 0..8 {
            let r = app.client.get(app.url("/many"))
                .header("referer", format!("https://r{i}.example/"))
                .send().await.unwrap();
            assert_eq!(r.status(), 302);
        }
        let got = receiver.wait_for(9).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(receiver.got().len(), 9, "eight visits and one repeat: {got:?}");
        let hosts: Vec<&str> = got
            .iter()
            .map(|d| d.json["data"]["referrer_host"].as_str().unwrap())
            .collect();
        assert_eq!(
            hosts,
            ["r0.example", "r1.example", "r2.example", "r3.example", "r3.example",
             "r4.example", "r5.example", "r6.example", "r7.example"],
            "in order, and only the refused one again"
        );
        assert_eq!(got[3].id, got[4].id, "the same id on a retry");
        let mut ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 8, "each visit its own id");
        for d in &got {
            assert_eq!(d.json["type"], "link.visited");
            assert_eq!(d.json["timestamp"], d.json["data"]["at"]);
            assert_eq!(d.json["data"]["code"], "many");
            assert_eq!(d.json["data"]["target"], "https://example.com/many");
        }
    }
}

on_both_stores! {
    /// More visits of a link in one flush than one claim sends: the rest
    /// go at the next claims, each once and in order.
    async fn a_links_many_visits_go_over_several_claims(store: Store) {
        let receiver = Receiver::start().await;
        let app = spawn_app_in(
            &store,
            &["--webhooks-allow-private", "--visits-flush-ms", "4000"],
        )
        .await;
        let admin = app.new_key("root", true).await;
        let (id, _) = register(&app, &admin, json!({"url": receiver.url(), "events": ["link.visited"]})).await;
        let r = app
            .api(Method::POST, "/api/v1/links", Some(&admin), Some(json!({
                "url": "https://example.com/hot", "code": "hot",
            })))
            .await;
        assert_eq!(r.status(), 201);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = 1_500;
        for i in 0..n {
            let r = app.client.get(app.url("/hot"))
                .header("referer", format!("https://r{i}.example/"))
                .send().await.unwrap();
            assert_eq!(r.status(), 302);
        }
        let got = receiver.wait_for(n).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(receiver.got().len(), n, "each visit once");
        let hosts: Vec<String> = got
            .iter()
            .map(|d| d.json["data"]["referrer_host"].as_str().unwrap().to_owned())
            .collect();
        let want: Vec<String> = (0..n).map(|i| format!("r{i}.example")).collect();
        assert!(hosts == want, "in order");
        // Two flushes at most: at least one row held more than a claim sends.
        let attempts = deliveries(&app, &admin, id).await;
        assert!(attempts.len() >= 2, "{attempts:?}");
        assert!(attempts.iter().all(|a| a["status"] == 200), "{attempts:?}");
    }
}

/// Held by the backlog test, whose figure is in the process's metrics.
static BACKLOG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `litelink_webhook_events_dropped_total` as `/metrics` shows it now.
async fn dropped(app: &TestApp, admin: &str) -> u64 {
    let text = app
        .api(Method::GET, "/metrics", Some(admin), None)
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("litelink_webhook_events_dropped_total "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

on_both_stores! {
    /// A receiver away for long: past `--webhooks-max-pending`, the oldest
    /// `link.visited` events go, never a change event.
    async fn a_full_outbox_drops_the_oldest_visits_first(store: Store) {
        // The metrics are the test process's, shared by every app in it:
        // one store's run at a time, each counting from where it starts.
        let _alone = BACKLOG.lock().await;
        let receiver = Receiver::start().await;
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let delays = vec!["1"; 30].join(",");
        let app = spawn_app_in(&store, &[
            "--webhooks-allow-private",
            "--webhooks-max-pending",
            "3",
            "--webhooks-retry-delays",
            &delays,
        ])
        .await;
        let admin = app.new_key("root", true).await;
        let before = dropped(&app, &admin).await;
        let (id, _) = register(
            &app,
            &admin,
            json!({
                "url": format!("http://127.0.0.1:{closed}/nobody"),
                "events": ["link.created", "link.visited"],
            }),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&admin),
                Some(json!({"url": "https://example.com/full", "code": "full"})),
            )
            .await;
        assert_eq!(r.status(), 201);
        for i in 0..10 {
            let r = app
                .client
                .get(app.url("/full"))
                .header("referer", format!("https://r{i}.example/"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 302);
        }
        // Wait until the bound is enforced: the metric counts 8 dropped.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = dropped(&app, &admin).await;
            if now == before + 8 {
                break;
            }
            assert!(Instant::now() < deadline, "{} dropped", now - before);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The receiver is back: the create and the two newest visits arrive.
        let r = app
            .api(
                Method::PATCH,
                &format!("/api/v1/webhooks/{id}"),
                Some(&admin),
                Some(json!({"url": receiver.url()})),
            )
            .await;
        assert_eq!(r.status(), 200);
        let got = receiver.wait_for(3).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(receiver.got().len(), 3);
        assert_eq!(
            got[0].json["type"], "link.created",
            "first, as it was made first"
        );
        let hosts: Vec<&str> = got[1..]
            .iter()
            .map(|d| d.json["data"]["referrer_host"].as_str().unwrap())
            .collect();
        assert_eq!(
            hosts,
            ["r8.example", "r9.example"],
            "the newest visits are kept"
        );
    }
}
