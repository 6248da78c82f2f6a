//! What the docs promise and no other test shows: shutdown with creates
//! in flight, changes made by another process, a failed batch, settings
//! through the environment, and doctor on a damaged file.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Answers, client, create_until_gone, spawn_app, spawn_process};

/// SIGTERM and SIGINT while creates are queued and in flight: the server
/// exits by itself, every create it answered 201 is in the database, and
/// every other answer is a JSON 503 (or no answer at all, which promises
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_creates_loses_nothing_acknowledged() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("stop.db");
        let mut server = spawn_process(&db, &["--cache", "none"]);
        let answers: Arc<Mutex<Answers>> = Arc::default();
        let workers = create_until_gone(&server.url(), 32, "stop", Arc::clone(&answers));
        // Let creates flow, then signal while they do.
        let started = Instant::now();
        while answers.lock().expect("lock").acked.len() < 200
            && started.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let status = server
            .stop_with(signal, Duration::from_secs(30))
            .expect("the server exits by itself after the signal");
        assert!(status.success(), "signal {signal}: exit status {status}");
        for w in workers {
            w.await.expect("worker");
        }
        let answers = std::mem::take(&mut *answers.lock().expect("lock"));
        let acked = answers.acked;
        assert!(
            acked.len() >= 200,
            "signal {signal}: {} acknowledged",
            acked.len()
        );
        for (status, body) in &answers.refused {
            assert_eq!(*status, 503, "signal {signal}: {body}");
            assert!(body["error"].is_string(), "{body}");
        }
        let conn = rusqlite::Connection::open(&db).expect("open");
        let mut stmt = conn
            .prepare("SELECT target FROM links WHERE code = ?1")
            .expect("prepare");
        for (code, target) in &acked {
            let stored: String = stmt
                .query_row([code], |r| r.get(0))
                .unwrap_or_else(|e| panic!("signal {signal}: acknowledged {code} lost: {e}"));
            assert_eq!(&stored, target);
        }
    }
}

/// A row written by another process (an operator's `sqlite3`, say) is
/// served once the readers' snapshots age out, 100 ms after they were
/// taken (docs/architecture.md, "Storage design"): every read asked for 100 ms or more
/// after the write sees it, since the snapshot it might reuse began
/// before the write. Without a cache or link slots, so that the read is
/// SQLite's own.
#[tokio::test]
async fn a_write_by_another_process_becomes_visible() {
    let app = spawn_app(&["--cache", "none", "--sqlite-slots", "off"]).await;
    let code = app.create_ok("https://example.com/ours").await;
    // Our own commit moves the readers on once more when the checkpointer
    // has copied it back; wait for that, so that only the snapshots' age
    // can reveal the outside write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.stats().await["writer"]["checkpoints"] == 0 {
        assert!(Instant::now() < deadline, "no checkpoint after 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The readers hold a snapshot from before the outside write.
    assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    let other = rusqlite::Connection::open(&app.db).expect("open");
    other
        .execute(
            "INSERT INTO links (code, target, created_at) VALUES ('FromOutside1', 'https://example.com/outside', 0)",
            [],
        )
        .expect("insert");
    let written = Instant::now();
    let lookups = app.stats().await["readers"]["lookups"].clone();
    loop {
        let asked = written.elapsed();
        let r = app.get("/link/FromOutside1").await;
        if r.status() == 200 {
            let body: Value = r.json().await.expect("json");
            assert_eq!(body["link"], "https://example.com/outside");
            eprintln!("seen by a read asked {asked:?} after the write");
            break;
        }
        assert_eq!(r.status(), 404);
        assert!(
            asked < Duration::from_millis(100),
            "a read asked {asked:?} after the write did not see it"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The reads were SQLite's.
    assert_ne!(app.stats().await["readers"]["lookups"], lookups);
}

/// A batch that fails (here: a trigger refuses one of its rows) fails its
/// own creates with a 500 that hides the cause; every other create is
/// stored, and the writer goes on.
#[tokio::test]
async fn a_failed_batch_fails_only_its_own_creates() {
    let app = spawn_app(&["--cache", "none"]).await;
    let before = app.create_ok("https://example.com/before").await;
    let conn = rusqlite::Connection::open(&app.db).expect("open");
    conn.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON links WHEN NEW.target LIKE 'https://refused.example/%'
         BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END;",
    )
    .expect("trigger");
    let r = app.create("https://refused.example/alone").await;
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"], "internal server error");
    let after = app.create_ok("https://example.com/after").await;

    // Concurrently: whatever shared a batch with the refused row fails
    // with it; everything answered 201 is stored.
    let mut tasks = app.spawn_creates("mixed", 40);
    let refused = {
        let client = app.client.clone();
        let url = app.url("/link");
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({ "url": "https://refused.example/mixed" }))
                .send()
                .await
                .expect("POST")
                .status()
                .as_u16()
        })
    };
    let mut stored = 2;
    for t in tasks.drain(..) {
        let c = t.await.expect("task");
        match c.status {
            201 => {
                stored += 1;
                let r = app.get(&format!("/link/{}", c.code())).await;
                assert_eq!(r.status(), 200);
            }
            500 => assert_eq!(c.body["error"], "internal server error"),
            other => panic!("unexpected {other}: {}", c.body),
        }
    }
    assert_eq!(refused.await.expect("task"), 500);
    let s = app.stats().await;
    assert!(
        s["writer"]["failed_batches"].as_u64().expect("failed") >= 2,
        "{s}"
    );
    assert_eq!(s["links"], stored, "{s}");
    for code in [before, after] {
        assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    }
}

/// Options set through `LITELINK_*` variables take effect.
#[tokio::test]
async fn options_can_be_set_through_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = litelink_lab::process::ServerProcess::start_with_env(
        std::path::Path::new(env!("CARGO_BIN_EXE_litelink")),
        &dir.path().join("env.db"),
        &[],
        &[
            ("LITELINK_CACHE", "none"),
            ("LITELINK_DURABILITY", "normal"),
            ("LITELINK_REDIRECT_STATUS", "308"),
            ("LITELINK_CODE_LENGTH", "12"),
            ("LITELINK_PUBLIC_URL", "https://s.example.com"),
            ("LITELINK_MAX_BODY_BYTES", "200"),
            ("LITELINK_WRITE_BATCH_MAX", "1"),
            ("LITELINK_SQLITE_MMAP_MIB", "0"),
            // A lab switch: the product does not read it.
            ("LITELINK_SQLITE_PAGE_CACHE", "off"),
        ],
        None,
    )
    .expect("server");
    let client = client();
    let r = client
        .post(server.url() + "/link")
        .json(&json!({ "url": "https://example.com/env" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.expect("json");
    let code = body["short_link"].as_str().expect("code").to_owned();
    assert_eq!(code.len(), 12);
    assert_eq!(body["short_url"], format!("https://s.example.com/{code}"));
    let r = client
        .get(format!("{}/{code}", server.url()))
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status(), 308);
    let long = json!({ "url": format!("https://example.com/{}", "a".repeat(300)) });
    let r = client
        .post(server.url() + "/link")
        .json(&long)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 413);
    let s: Value = client
        .get(server.url() + "/stats")
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    assert_eq!(s["cache"]["mode"], "none", "{s}");
    assert_eq!(s["durability"], "normal", "{s}");
    assert_eq!(s["applied"]["writer"]["synchronous"], "normal", "{s}");
    assert_eq!(s["applied"]["writer"]["mmap_size"], 0, "{s}");
    assert_eq!(s["applied"]["writer"]["cache_size"], -2000, "{s}");
    assert_eq!(s["page_cache"], "on", "{s}");
    assert_eq!(s["writer"]["batch_max"], 1, "{s}");
    assert_eq!(s["redirect_status"], 308, "{s}");
}

/// `doctor` fails on a database with a damaged page.
#[tokio::test]
async fn doctor_fails_on_a_corrupt_page() {
    let app = spawn_app(&["--cache", "none"]).await;
    for i in 0..300 {
        app.create_ok(&format!("https://example.com/corrupt/{i}"))
            .await;
    }
    let db = app.db.clone();
    let dir = app.stop().await;
    let len = std::fs::metadata(&db).expect("db").len();
    assert!(len >= 4 * 4096, "{len}");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&db)
            .expect("open");
        // The last page: a leaf of the table or of its index.
        f.write_all_at(&[0xA5; 4096], len - 4096).expect("damage");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["doctor", "--db"])
        .arg(&db)
        .output()
        .expect("doctor");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAILED") || text.contains("malformed"),
        "{text}"
    );
    drop(dir);
}
