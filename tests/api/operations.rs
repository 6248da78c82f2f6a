//! Operations: health checks, Prometheus metrics, request ids
//! and JSON logs.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{assert_error, client, spawn_app, spawn_process};

#[tokio::test]
async fn health_checks_say_live_and_ready() {
    let app = spawn_app(&[]).await;
    let live = app.get("/health/live").await;
    assert_eq!(live.status(), 200);
    assert_eq!(
        live.json::<Value>().await.unwrap(),
        json!({ "status": "ok" })
    );
    let ready = app.get("/health/ready").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.json::<Value>().await.unwrap(),
        json!({ "status": "ok" })
    );

    // A Valkey that is configured but down: degraded, still 200.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let valkey = format!("redis://127.0.0.1:{port}");
    let degraded = spawn_app(&["--cache", "tiered", "--valkey-url", &valkey]).await;
    let r = degraded.get("/health/ready").await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "degraded", "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("valkey"),
        "{body}"
    );
    // Reads and writes still work.
    let code = degraded.create_ok("https://example.com/degraded").await;
    assert_eq!(degraded.get(&format!("/{code}")).await.status(), 302);
}

#[tokio::test]
async fn ready_is_503_once_the_database_file_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ready.db");
    let server = spawn_process(&db, &[]);
    let url = |p: &str| format!("{}{p}", server.url());
    let r = client().get(url("/health/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    std::fs::remove_file(&db).unwrap();
    let r = client().get(url("/health/ready")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["reason"], "the database file was deleted");
    // Still live: the process serves reads.
    let r = client().get(url("/health/live")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{text}"))
}

#[tokio::test]
async fn metrics_count_what_happens_and_follow_the_stats_rule() {
    let app = spawn_app(&[]).await;
    let scrape = || async {
        let r = app.get("/metrics").await;
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
        );
        r.text().await.unwrap()
    };
    let before = scrape().await;
    let redirects_before = metric(&before, "litelink_redirects_total");
    let code = app.create_ok("https://example.com/m").await;
    for _ in 0..3 {
        assert_eq!(app.get(&format!("/{code}")).await.status(), 302);
    }
    assert_eq!(app.get("/NoSuchCode").await.status(), 404);
    let text = scrape().await;
    assert!(metric(&text, "litelink_redirects_total") >= redirects_before + 3.0);
    assert!(metric(&text, "litelink_creates_total") >= 1.0);
    assert!(metric(&text, "litelink_http_client_errors_total") >= 1.0);
    assert!(
        metric(
            &text,
            "litelink_http_requests_total{route=\"/{code}\",status=\"3xx\"}"
        ) >= 3.0
    );
    assert!(text.contains("litelink_http_request_duration_seconds_bucket{route=\"/{code}\""));
    assert!(metric(&text, "litelink_links") >= 1.0);
    assert!(metric(&text, "litelink_cache_hits_total{tier=\"memory\"}") >= 2.0);
    assert!(metric(&text, "litelink_open_connections") >= 1.0);
    assert!(text.contains("litelink_write_batch_size_bucket"));
    assert!(text.contains("litelink_wal_sync_seconds_bucket"));
    assert!(text.contains("litelink_write_queue_depth"));

    // Keys exist: an admin key is needed, as for /stats.
    let user = app.new_key("user", false).await;
    assert_error(app.get("/metrics").await, 401, "admin key").await;
    let r = app
        .api(reqwest::Method::GET, "/metrics", Some(&user), None)
        .await;
    assert_eq!(r.status(), 403);
    let admin = app.new_key("admin", true).await;
    let r = app
        .api(reqwest::Method::GET, "/metrics", Some(&admin), None)
        .await;
    assert_eq!(r.status(), 200);

    // Off: 404.
    let off = spawn_app(&["--metrics", "off"]).await;
    assert_eq!(off.get("/metrics").await.status(), 404);
}

#[tokio::test]
async fn metrics_listen_serves_them_elsewhere_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    // Port 0, and the address read back from the log: a port picked here
    // and released could be taken by the main listener first.
    let server = spawn_process(
        &dir.path().join("m.db"),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        let found = server.log().1.iter().find_map(|line| {
            let line = line.split_once("serving metrics")?.1;
            let addr = line.split_once("addr=")?.1.split_whitespace().next()?;
            addr.parse::<std::net::SocketAddr>().ok()
        });
        if let Some(addr) = found {
            break addr.port();
        }
        assert!(Instant::now() < deadline, "no metrics address in the log");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let r = client()
        .get(format!("{}/metrics", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "not on the main port");
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        if let Ok(r) = client()
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
        {
            assert_eq!(r.status(), 200);
            break r.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "no metrics listener");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(text.contains("litelink_links"), "{text}");
    let r = client()
        .get(format!("http://127.0.0.1:{port}/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "only /metrics there");
}

#[tokio::test]
async fn request_ids_are_made_or_kept_and_returned() {
    let app = spawn_app(&[]).await;
    let r = app.get("/heart-beat").await;
    let made = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(!made.is_empty());
    let again = app.get("/heart-beat").await.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(made, again);
    let r = app
        .client
        .get(app.url("/NoSuchCode"))
        .header("x-request-id", "lb-1234")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["x-request-id"], "lb-1234");
    let r = app
        .client
        .get(app.url("/heart-beat"))
        .header("x-request-id", "bad id with spaces")
        .send()
        .await
        .unwrap();
    assert_ne!(r.headers()["x-request-id"], "bad id with spaces");
}

/// JSON logs: one object per line, and an error line names the request.
#[tokio::test]
async fn json_logs_carry_the_request_id_of_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    let server = spawn_process(&db, &["--log-format", "json"]);
    // Deleting the file makes the next create fail with a logged 503.
    std::fs::remove_file(&db).unwrap();
    let r = client()
        .post(format!("{}/link", server.url()))
        .header("x-request-id", "trace-me-42")
        .json(&json!({ "url": "https://example.com/j" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, log) = server.log();
    for line in &log {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
    assert!(
        log.iter()
            .any(|l| l.contains("\"request_id\":\"trace-me-42\"")),
        "{log:#?}"
    );
}

/// `litelink health` asks the server at the port of `--listen` (or
/// `LITELINK_LISTEN`, or the config file's `listen`) on 127.0.0.1: exit 0
/// when it is ready, 1 when nothing answers, or nothing answers in 2 s.
#[test]
fn the_health_command_says_whether_the_server_is_ready() {
    let health = |args: &[&str], env: &[(&str, &str)]| {
        let started = std::time::Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .arg("health")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("litelink health");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            started.elapsed(),
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::helpers::spawn_process(&dir.path().join("h.db"), &[]);
    let port = server.url().rsplit(':').next().expect("port").to_owned();
    let listen = format!("0.0.0.0:{port}");
    let (code, said, _) = health(&["--listen", &listen], &[]);
    assert_eq!((code, said.trim()), (Some(0), "ready"));
    assert_eq!(health(&[], &[("LITELINK_LISTEN", &listen)]).0, Some(0));
    let file = dir.path().join("c.toml");
    std::fs::write(&file, format!("listen = \"127.0.0.1:{port}\"\n")).expect("config");
    assert_eq!(
        health(&["--config", file.to_str().expect("path")], &[]).0,
        Some(0)
    );

    // Nothing listening: 1 at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_port = closed.local_addr().expect("addr").port();
    drop(closed);
    let (code, said, _) = health(&["--listen", &format!("127.0.0.1:{closed_port}")], &[]);
    assert_eq!(code, Some(1), "{said}");
    // Something that takes the connection and never answers: 1 after 2 s.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let (code, said, took) = health(&["--listen", &format!("127.0.0.1:{silent_port}")], &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("within"), "{said}");
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    drop(silent);
}
