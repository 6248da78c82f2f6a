//! Group commit and back-pressure on the write path.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{spawn_app, spawn_app_on};

#[tokio::test]
async fn concurrent_creates_share_commits() {
    let app = spawn_app(&["--cache", "none"]).await;
    // Whether a burst queues up behind a commit depends on how fast this
    // disk syncs: a few bursts give grouping its chance, and a writer that
    // never groups fails every one.
    let mut bursts = 0;
    let stats = loop {
        bursts += 1;
        for c in app.create_concurrently(&format!("gc{bursts}"), 256).await {
            assert_eq!(c.status, 201, "{}", c.body);
        }
        let stats = app.stats().await;
        if stats["writer"]["largest_batch"].as_u64().unwrap() > 1 || bursts == 5 {
            break stats;
        }
    };
    let w = &stats["writer"];
    let commits = w["commits"].as_u64().unwrap();
    let rows = w["rows"].as_u64().unwrap();
    assert_eq!(rows, 256 * bursts, "{w}");
    assert!(commits < rows, "creates should share commits: {w}");
    assert!(w["largest_batch"].as_u64().unwrap() > 1, "{w}");
    // Full durability with group commit: the writer syncs the WAL at most
    // once per commit, and every reply waited for a sync.
    assert_eq!(w["grouped_sync"], true, "{w}");
    let syncs = w["syncs"].as_u64().unwrap();
    assert!(syncs >= 1 && syncs <= commits, "{w}");
    assert_eq!(w["failed_syncs"], 0);
    // Checkpoints happen off the writer, shortly after commits.
    let mut checkpoints = 0;
    for _ in 0..50 {
        checkpoints = app.stats().await["writer"]["checkpoints"].as_u64().unwrap();
        if checkpoints > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checkpoints > 0, "the checkpointer never ran");
}

#[tokio::test]
async fn a_lone_create_is_committed_and_synced_before_its_201() {
    let app = spawn_app(&["--cache", "none"]).await;
    for i in 1..=5u64 {
        app.create_ok(&format!("https://example.com/lone/{i}"))
            .await;
        // Read after the 201: the writer counts a sync before it replies,
        // so a create answered before its own sync would show here as a
        // missing one (and one that waited for company would never get
        // its 201, as none comes).
        let w = &app.stats().await["writer"];
        assert_eq!(w["commits"], i, "{w}");
        assert_eq!(w["syncs"], i, "{w}");
        assert_eq!(w["rows"], i, "{w}");
    }
}

#[tokio::test]
async fn without_group_commit_every_create_commits_alone() {
    let app = spawn_app(&["--group-commit", "off", "--cache", "none"]).await;
    for c in app.create_concurrently("one", 64).await {
        assert_eq!(c.status, 201, "{}", c.body);
    }
    let w = &app.stats().await["writer"];
    assert_eq!(w["commits"], 64, "{w}");
    assert_eq!(w["largest_batch"], 1, "{w}");
    // The baseline syncs inside each commit (synchronous=FULL), not on
    // its own.
    assert_eq!(w["grouped_sync"], false, "{w}");
    assert_eq!(w["syncs"], 0, "{w}");
}

#[tokio::test]
async fn a_full_queue_answers_503_and_loses_nothing_acknowledged() {
    let app = spawn_app(&[
        "--write-queue",
        "4",
        "--write-batch-max",
        "2",
        "--sqlite-busy-timeout-ms",
        "30000",
        "--cache",
        "none",
    ])
    .await;
    // Slow the writer down for real: another connection holds the write
    // lock, so the writer waits in its busy handler while requests queue.
    let blocker = app.hold_write_lock();
    let tasks = app.spawn_creates("bp", 40);
    // Let every request reach the server before the lock goes.
    let rejected = |s: &Value| s["writer"]["rejected_queue_full"].as_u64().unwrap();
    let mut seen = 0;
    for _ in 0..500 {
        seen = rejected(&app.stats().await);
        if seen >= 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        seen >= 30,
        "expected most creates to be refused, got {seen}"
    );
    blocker.execute_batch("COMMIT").unwrap();

    let mut accepted = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let c = t.await.unwrap();
        match c.status {
            201 => accepted.push((c.code().to_owned(), c.target)),
            503 => {
                refused += 1;
                assert_eq!(c.retry_after.as_deref(), Some("1"));
                assert!(
                    c.body["error"].as_str().unwrap().contains("retry"),
                    "{}",
                    c.body
                );
            }
            other => panic!("unexpected status {other}: {}", c.body),
        }
    }
    assert_eq!(accepted.len() + refused, 40);
    // Counted once every answer is in: each 503 is one refusal.
    assert_eq!(refused as u64, rejected(&app.stats().await));
    assert!(
        !accepted.is_empty() && accepted.len() <= 4 + 2 + 2,
        "{}",
        accepted.len()
    );
    for (code, target) in &accepted {
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap()["link"], target.as_str());
    }
    assert_eq!(app.stats().await["links"], accepted.len() as u64);
}

#[tokio::test]
async fn a_request_over_the_timeout_gets_a_json_503() {
    let app = spawn_app(&[
        "--request-timeout",
        "1",
        "--sqlite-busy-timeout-ms",
        "30000",
        "--cache",
        "none",
    ])
    .await;
    // The writer waits for a lock held elsewhere, longer than the timeout.
    let blocker = app.hold_write_lock();
    let started = std::time::Instant::now();
    let r = app.create("https://example.com/slow").await;
    let waited = started.elapsed();
    blocker.execute_batch("COMMIT").unwrap();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    crate::helpers::assert_error(r, 503, "too long").await;
}

/// Size of the WAL next to `db`, or 0 when there is none.
fn wal_len(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn the_wal_is_preallocated_at_full_durability_only() {
    let full = spawn_app(&["--cache", "none", "--wal-preallocate-mib", "8"]).await;
    assert_eq!(wal_len(&full.db), 8 << 20);
    assert_eq!(
        full.stats().await["writer"]["wal_preallocate_bytes"],
        8 << 20
    );
    // Commits write over the zeros: the file does not grow, and what was
    // written reads back, also from a server started anew on the file.
    let mut created = Vec::new();
    for i in 0..50 {
        let target = format!("https://example.com/prealloc/{i}");
        created.push((full.create_ok(&target).await, target));
    }
    assert_eq!(wal_len(&full.db), 8 << 20);
    let db = full.db.clone();
    let dir = full.stop().await;
    let again = spawn_app_on(&db, &["--cache", "none"]).await;
    for (code, target) in &created {
        let r = again.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap()["link"], target.as_str());
    }
    drop(dir);

    let normal = spawn_app(&["--durability", "normal", "--cache", "none"]).await;
    assert!(wal_len(&normal.db) < 1 << 20, "{}", wal_len(&normal.db));
    assert_eq!(normal.stats().await["writer"]["wal_preallocate_bytes"], 0);
}

/// A flood of 503s from a full write queue is logged once per 10 s, and
/// the next line says how many it held back (`suppressed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_logs_once_with_a_suppressed_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("q.db");
    let server = crate::helpers::spawn_process(
        &db,
        &[
            "--write-queue",
            "2",
            "--write-batch-max",
            "1",
            "--sqlite-busy-timeout-ms",
            "60000",
            "--cache",
            "none",
            "--log-format",
            "json",
        ],
    );
    let base = server.url();
    let create = |i: usize| {
        crate::helpers::client()
            .post(format!("{base}/link"))
            .json(&serde_json::json!({ "url": format!("https://example.com/q/{i}") }))
            .send()
    };
    assert_eq!(create(0).await.expect("create").status(), 201);
    let answered_503 = |lines: &[String]| -> Vec<u64> {
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.to_string().contains("answered 503"))
            .map(|v| {
                let fields = v.get("fields").unwrap_or(&v);
                fields["suppressed"].as_u64().expect("a suppressed count")
            })
            .collect()
    };
    // The writer waits on another connection's write lock; creates pile up.
    let blocker = rusqlite::Connection::open(&db).expect("open");
    blocker.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let flood = |from: usize| {
        (from..from + 30)
            .map(|i| tokio::spawn(create(i)))
            .collect::<Vec<_>>()
    };
    let first = flood(1);
    let mut refused = 0;
    // Refusals answer at once; the few queued wait for the lock.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for t in first.iter().filter(|t| t.is_finished()) {
        let _ = t;
        refused += 1;
    }
    assert!(
        refused >= 20,
        "only {refused} of 30 answered while the lock was held"
    );
    let (_, lines) = server.log();
    assert_eq!(
        answered_503(&lines),
        [0],
        "one line for the flood: {lines:#?}"
    );
    // Past the 10 s window, the next refusal's line carries the count.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let second = flood(100);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, lines) = server.log();
    let counts = answered_503(&lines);
    assert_eq!(counts.len(), 2, "{lines:#?}");
    assert!(
        counts[1] >= 19,
        "suppressed {} of the first flood",
        counts[1]
    );
    blocker.execute_batch("COMMIT").expect("unlock");
    for t in first.into_iter().chain(second) {
        let status = t.await.expect("task").expect("answer").status();
        assert!(status == 201 || status == 503, "{status}");
    }
}
