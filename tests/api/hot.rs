//! The hot path (`GET|HEAD /{code}`, `/link/{code}`, `/heart-beat`
//! answered in front of the router) against the router alone
//! (`--hot-path off`): the same API, the same answers, header for header,
//! and the same request timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::api::exercise_api;
use crate::helpers::{TestApp, assert_error, spawn_app};

#[tokio::test]
async fn the_router_alone_serves_the_api() {
    for extra in [
        &["--hot-path", "off"][..],
        &["--hot-path", "off", "--cache", "none"],
    ] {
        let app = spawn_app(extra).await;
        exercise_api(&app).await;
    }
}

/// What a comparison looks at: the status, every header but `date` (and
/// `x-request-id`, whose value is new on every answer unless the client
/// sent one), and the body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

async fn answer(app: &TestApp, method: &Method, path: &str, id: Option<&str>) -> Answer {
    answer_at(&app.client, method, &app.url(path), path, id).await
}

async fn answer_at(
    client: &reqwest::Client,
    method: &Method,
    url: &str,
    path: &str,
    id: Option<&str>,
) -> Answer {
    let mut req = client.request(method.clone(), url);
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    let mut headers = BTreeMap::new();
    for (name, value) in r.headers() {
        let value = value.to_str().expect("ascii header").to_owned();
        match name.as_str() {
            "date" => {}
            "x-request-id" => {
                match id {
                    Some(sane) if !sane.contains(' ') => assert_eq!(value, sane, "{path}"),
                    _ => assert!(!value.is_empty() && !value.contains(' '), "{path}: {value}"),
                }
                headers.insert("x-request-id".into(), "present".into());
            }
            _ => {
                headers.insert(name.as_str().to_owned(), value);
            }
        }
    }
    let body = r.text().await.expect("body");
    Answer {
        status,
        headers,
        body,
    }
}

/// Creates with a chosen code (which takes a key).
async fn create(app: &TestApp, key: &str, body: serde_json::Value) {
    let r = app
        .api(Method::POST, "/link", Some(key), Some(body.clone()))
        .await;
    assert_eq!(r.status(), 201, "{body}");
}

#[tokio::test]
async fn both_paths_answer_alike() {
    let extra = ["--referrer-policy", "no-referrer"];
    let hot = spawn_app(&extra).await;
    let routed = spawn_app(&[&extra[..], &["--hot-path", "off"]].concat()).await;
    // Far enough ahead that making keys and links on a loaded machine
    // cannot outlast it; the wait below runs until it has passed.
    let expiry = time::OffsetDateTime::now_utc() + Duration::from_secs(8);
    let soon = expiry
        .format(&time::format_description::well_known::Rfc3339)
        .expect("time");
    let mut keys = Vec::new();
    for app in [&hot, &routed] {
        let key = app.new_key("owner", false).await;
        create(
            app,
            &key,
            json!({"url": "https://example.com/a?b=1&c=%22x%22", "code": "same-code1"}),
        )
        .await;
        create(
            app,
            &key,
            json!({"url": "https://example.com/once", "code": "limited-1", "max_visits": 1}),
        )
        .await;
        create(
            app,
            &key,
            json!({"url": "https://example.com/soon", "code": "soon-gone", "expires_at": soon}),
        )
        .await;
        keys.push(key);
    }
    let (get, head) = (Method::GET, Method::HEAD);
    let mut requests = vec![
        (&get, "/heart-beat", None),
        (&head, "/heart-beat", None),
        (&get, "/heart-beat?x=1", None),
        (&get, "/same-code1", None),
        (&head, "/same-code1", None),
        (&get, "/same-code1?utm_source=x", None),
        (&get, "/same-code1", Some("client-id-1")),
        (&get, "/same-code1", Some("not a sane id")),
        (&get, "/link/same-code1", None),
        (&head, "/link/same-code1", None),
        (&get, "/link/same-code1", Some("client.id:2/x")),
        (&get, "/no-such-code", None),
        // The second from the negative cache.
        (&get, "/no-such-code", None),
        (&head, "/no-such-code", None),
        (&get, "/link/no-such-code", None),
        (&head, "/limited-1", None),
        (&get, "/limited-1", None),
        (&get, "/limited-1", None),
        (&head, "/limited-1", None),
        (&get, "/link/limited-1", None),
        // Not hot: the same router behind both.
        (&get, "/a%62c", None),
        (&get, "/bad.code", None),
        (&get, "/link/bad.code", None),
        // Keys exist: 401 on both.
        (&get, "/stats", None),
        (&get, "/link", None),
    ];
    let long = format!("/{}", "a".repeat(65));
    requests.push((&get, &long, None));
    for (method, path, id) in &requests {
        let a = answer(&hot, method, path, *id).await;
        let b = answer(&routed, method, path, *id).await;
        assert_eq!(a, b, "{method} {path}");
    }
    // Past its expiry: 410 on both, as a redirect and as a look.
    let left = expiry - time::OffsetDateTime::now_utc();
    if left.is_positive() {
        tokio::time::sleep(left.unsigned_abs() + Duration::from_millis(100)).await;
    }
    for path in ["/soon-gone", "/link/soon-gone"] {
        let a = answer(&hot, &get, path, None).await;
        assert_eq!(a.status, 410, "{path}: {a:?}");
        assert_eq!(a, answer(&routed, &get, path, None).await, "{path}");
    }
    // Both counted the same visits: one of same-code1's redirects per GET.
    for (app, key) in [&hot, &routed].into_iter().zip(&keys) {
        let r = app
            .api(Method::GET, "/api/v1/links/same-code1", Some(key), None)
            .await;
        let link: serde_json::Value = r.json().await.expect("link");
        assert_eq!(link["visits"], 4, "{link}");
    }
}

/// A lookup that the cache cannot answer at once runs under the request
/// timeout on the hot path too: here the Valkey tier is a server that
/// accepts connections and never answers, given longer than the request.
#[tokio::test]
async fn a_slow_lookup_times_out_on_both_paths() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            open.push(tcp);
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    for path in ["on", "off"] {
        let app = spawn_app(&[
            "--cache",
            "valkey",
            "--valkey-url",
            &url,
            "--valkey-timeout-ms",
            "60000",
            "--request-timeout",
            "1",
            "--hot-path",
            path,
        ])
        .await;
        for read in ["/some-code", "/link/some-code"] {
            let started = std::time::Instant::now();
            let r = app.get(read).await;
            let took = started.elapsed();
            // Not before the request timeout; and far before Valkey's own
            // (a minute), with room for a loaded machine.
            eprintln!("{path} {read}: answered after {took:?}");
            assert!(
                took >= Duration::from_millis(900) && took < Duration::from_secs(30),
                "{path} {read}: {took:?}"
            );
            assert!(r.headers().contains_key("x-request-id"));
            assert_error(r, 503, "too long").await;
        }
    }
    held.abort();
}
