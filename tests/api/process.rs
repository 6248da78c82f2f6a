//! Tests that need litelink as a process of its own: a crash test must
//! kill the server for real.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use serde_json::{Value, json};

use crate::helpers::{Answers, client, create_until_gone, spawn_process, stats_at};

#[tokio::test]
async fn sigterm_finishes_cleanly_and_doctor_approves_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut server = spawn_process(&db, &[]);
    let r = client()
        .post(server.url() + "/link")
        .json(&json!({ "url": "https://example.com" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let status = server.terminate().unwrap();
    assert!(status.success(), "exit status {status}");

    let out = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["doctor", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("DEFAULT_MEMSTATUS=0"), "{text}");
    assert!(text.contains("quick check:        ok"), "{text}");
    assert!(text.contains("writable:           yes"), "{text}");
    assert!(text.contains("links:              1"), "{text}");
    // The sync probe ran next to the database and cleaned up after itself.
    assert!(
        text.contains("disk sync:") && text.contains("fdatasync"),
        "{text}"
    );
    assert!(text.contains("runs)"), "{text}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".litelink-doctor"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn doctor_fails_on_a_missing_or_too_new_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let out = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["doctor", "--db"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!missing.exists(), "doctor must not create a database");

    let newer = dir.path().join("newer.db");
    let conn = rusqlite::Connection::open(&newer).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let out = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["doctor", "--db"])
        .arg(&newer)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NEWER"));
}

/// kill -9 in the middle of concurrent creates, at random moments, a few
/// times over: every code that was answered 201 must still resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_creates_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let acked: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    for round in 0..4 {
        let mut server = spawn_process(&db, &["--cache", "none"]);
        // Everything acknowledged in earlier rounds is still there.
        let earlier = acked.lock().unwrap().clone();
        verify(&server.url(), &earlier).await;

        let answers: Arc<Mutex<Answers>> = Arc::default();
        let workers = create_until_gone(
            &server.url(),
            32,
            &format!("r{round}"),
            Arc::clone(&answers),
        );
        let delay = rand::rng().random_range(150..700);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.kill9();
        for w in workers {
            w.await.unwrap();
        }
        acked
            .lock()
            .unwrap()
            .extend(answers.lock().unwrap().acked.drain());
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "crash test: {} acknowledged creates over 4 kills",
        acked.len()
    );
    assert!(
        acked.len() > 100,
        "too few creates to mean anything: {}",
        acked.len()
    );
    let server = spawn_process(&db, &["--cache", "none"]);
    verify(&server.url(), &acked).await;
    let stats = stats_at(&server.url()).await;
    assert!(stats["links"].as_u64().unwrap() >= acked.len() as u64);
    drop(server);

    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

async fn verify(base: &str, acked: &HashMap<String, String>) {
    let client = client();
    for (code, target) in acked {
        let r = client
            .get(format!("{base}/link/{code}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "acknowledged code {code} was lost");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["link"], target.as_str());
    }
}

/// On one core `litelink serve` runs a current-thread runtime:
/// everything still works there, the blocking pool (a QR code) and the
/// visit flush included, and SIGTERM still stops it gracefully.
#[tokio::test]
async fn one_core_serves_everything_on_a_current_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_litelink"));
    let args = ["--visits-flush-ms", "100"].map(String::from);
    let mut server = litelink_lab::process::ServerProcess::start(
        exe,
        &dir.path().join("one.db"),
        &args,
        Some(0),
    )
    .expect("litelink pinned to CPU 0");
    let allowed = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    assert!(
        allowed
            .lines()
            .any(|l| l.starts_with("Cpus_allowed_list:") && l.trim_end().ends_with('0')),
        "{allowed}"
    );
    let base = server.url();
    let runtime = stats_at(&base).await["runtime"].clone();
    assert_eq!(runtime["flavor"], "current_thread", "{runtime}");
    assert_eq!(runtime["workers"], 1, "{runtime}");
    // Not pinned, on a machine of several CPUs, the other flavour.
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        let mut wide = litelink_lab::process::ServerProcess::start(
            exe,
            &dir.path().join("wide.db"),
            &[],
            None,
        )
        .expect("litelink");
        let runtime = stats_at(&wide.url()).await["runtime"].clone();
        assert_eq!(runtime["flavor"], "multi_thread", "{runtime}");
        wide.stop_with(libc::SIGTERM, Duration::from_secs(5))
            .expect("stops");
    }
    let code = crate::helpers::create_code(&base).await;
    let get = |path: String| client().get(format!("{base}{path}")).send();
    for _ in 0..20 {
        assert_eq!(get(format!("/{code}")).await.unwrap().status(), 302);
    }
    assert_eq!(get(format!("/link/{code}")).await.unwrap().status(), 200);
    let r = get(format!("/{code}/qr.png")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(get("/nosuchcode".into()).await.unwrap().status(), 404);
    let mut flushed = Value::Null;
    for _ in 0..50 {
        flushed = stats_at(&base).await["visits"]["flushed"].clone();
        if flushed == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(flushed, 20);
    let status = server
        .stop_with(libc::SIGTERM, Duration::from_secs(5))
        .expect("exits within 5 s of SIGTERM");
    assert!(status.success(), "{status:?}");
}

/// On SIGTERM a request in flight finishes if it can within
/// `--shutdown-timeout`, and one that would run past it is cut there; the
/// server exits either way. The request waits on a Valkey tier that
/// accepts connections and never answers, for its `--valkey-timeout-ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_get_the_shutdown_timeout() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let valkey = format!("redis://{}", silent.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            open.push(tcp);
        }
    });
    for (shutdown_timeout, valkey_ms, finishes) in [("10", "1500", true), ("1", "60000", false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut server = spawn_process(
            &dir.path().join("s.db"),
            &[
                "--cache",
                "valkey",
                "--valkey-url",
                &valkey,
                "--valkey-timeout-ms",
                valkey_ms,
                "--request-timeout",
                "120",
                "--shutdown-timeout",
                shutdown_timeout,
            ],
        );
        let base = server.url();
        let request = tokio::spawn(client().get(format!("{base}/link/no-such-code")).send());
        // The request is in its handler, waiting on Valkey.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let signalled = std::time::Instant::now();
        server.signal(libc::SIGTERM).expect("SIGTERM");
        let answer = request.await.expect("request task");
        let after = signalled.elapsed();
        if finishes {
            // Valkey gave up at 1.5 s; the store has no such code.
            let r = answer.expect("the request in flight was answered");
            assert_eq!(r.status(), 404, "answered {after:?} after SIGTERM");
        } else {
            assert!(answer.is_err(), "answered past the shutdown timeout");
            assert!(
                after >= Duration::from_millis(900),
                "cut {after:?} after SIGTERM, before the 1 s shutdown timeout"
            );
        }
        eprintln!(
            "shutdown timeout {shutdown_timeout} s: the request ended {after:?} after SIGTERM"
        );
        // Signal 0 sends nothing: this waits for the exit.
        let status =
            tokio::task::spawn_blocking(move || server.stop_with(0, Duration::from_secs(20)))
                .await
                .expect("join")
                .expect("exits on its own after SIGTERM");
        assert!(status.success(), "{status:?}");
    }
    held.abort();
}
