//! Group commit and back-pressure on the write path.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::spawn_app;

#[tokio::test]
async fn concurrent_creates_share_commits() {
    let app = spawn_app(&["--cache", "none"]).await;
    let mut tasks = Vec::new();
    for i in 0..256 {
        let client = app.client.clone();
        let url = app.url("/link");
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({ "url": format!("https://example.com/{i}") }))
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 201);
    }
    let w = &app.stats().await["writer"];
    let commits = w["commits"].as_u64().unwrap();
    let rows = w["rows"].as_u64().unwrap();
    assert_eq!(rows, 256, "{w}");
    assert!(commits < rows, "creates should share commits: {w}");
    assert!(w["largest_batch"].as_u64().unwrap() > 1, "{w}");
    // Full durability with group commit: the WAL is synced on the syncer
    // thread, at most once per commit, and every reply waited for a sync.
    assert_eq!(w["pipelined_sync"], true, "{w}");
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
async fn without_group_commit_every_create_commits_alone() {
    let app = spawn_app(&["--group-commit", "off", "--cache", "none"]).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = app.client.clone();
        let url = app.url("/link");
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&json!({ "url": format!("https://example.com/{i}") }))
                .send()
                .await
                .unwrap();
            r.status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 201);
    }
    let w = &app.stats().await["writer"];
    assert_eq!(w["commits"], 64, "{w}");
    assert_eq!(w["largest_batch"], 1, "{w}");
    // The baseline syncs inside each commit (synchronous=FULL), no syncer.
    assert_eq!(w["pipelined_sync"], false, "{w}");
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
    let blocker = rusqlite::Connection::open(&app.db).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let mut tasks = Vec::new();
    for i in 0..40 {
        let client = app.client.clone();
        let url = app.url("/link");
        tasks.push(tokio::spawn(async move {
            let target = format!("https://example.com/bp/{i}");
            let r = client
                .post(url)
                .json(&json!({ "url": target }))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let retry_after = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let body: Value = r.json().await.unwrap();
            (status, retry_after, body, target)
        }));
    }
    // Let every request reach the server before the lock goes.
    let mut rejected = 0;
    for _ in 0..100 {
        rejected = app.stats().await["writer"]["rejected_queue_full"]
            .as_u64()
            .unwrap();
        if rejected >= 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        rejected >= 30,
        "expected most creates to be refused, got {rejected}"
    );
    blocker.execute_batch("COMMIT").unwrap();

    let mut accepted = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let (status, retry_after, body, target) = t.await.unwrap();
        match status {
            201 => accepted.push((body["short_link"].as_str().unwrap().to_owned(), target)),
            503 => {
                refused += 1;
                assert_eq!(retry_after.as_deref(), Some("1"));
                assert!(body["error"].as_str().unwrap().contains("retry"), "{body}");
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert_eq!(accepted.len() + refused, 40);
    assert_eq!(refused as u64, rejected);
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
    let blocker = rusqlite::Connection::open(&app.db).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
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
