//! Pooled readers keep their read snapshot between lookups (readers.rs).
//! That must never hide an acknowledged create, nor hold back the WAL.

use std::time::{Duration, Instant};

use crate::helpers::spawn_app;

fn readers(stats: &serde_json::Value) -> (u64, u64) {
    let r = &stats["readers"];
    (
        r["lookups"].as_u64().expect("lookups"),
        r["snapshots"].as_u64().expect("snapshots"),
    )
}

#[tokio::test]
async fn lookups_share_a_snapshot_until_something_is_committed() {
    let app = spawn_app(&["--cache", "none"]).await;
    let code = app.create_ok("https://example.com/steady").await;
    let (lookups0, snapshots0) = readers(&app.stats().await);
    let started = Instant::now();
    for _ in 0..200 {
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
    }
    let elapsed = started.elapsed();
    let (lookups1, snapshots1) = readers(&app.stats().await);
    assert_eq!(lookups1 - lookups0, 200);
    // Without reuse there would be one snapshot per lookup. A snapshot is
    // renewed once it is 100 ms old, so a slow (loaded) run may take one
    // per 100 ms it lasted, and no more.
    let taken = snapshots1 - snapshots0;
    let aged = 2 + (elapsed.as_millis() / 100) as u64;
    assert!(
        taken <= aged.min(199),
        "{taken} snapshots for 200 lookups in {elapsed:?}"
    );
}

#[tokio::test]
async fn a_create_is_visible_to_the_very_next_read() {
    let app = spawn_app(&["--cache", "none"]).await;
    // Keep the readers busy, so that they hold snapshots when each create
    // commits: the read right after the 201 must still find the link.
    let warm = app.create_ok("https://example.com/warm").await;
    for i in 0..100 {
        let r = app.get(&format!("/link/{warm}")).await;
        assert_eq!(r.status(), 200);
        let url = format!("https://example.com/fresh/{i}");
        let code = app.create_ok(&url).await;
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200, "create {i} not visible to the next read");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["link"], url.as_str());
    }
}

#[tokio::test]
async fn idle_readers_let_the_wal_be_truncated() {
    let app = spawn_app(&["--cache", "none"]).await;
    let mut codes = Vec::new();
    for i in 0..50 {
        codes.push(app.create_ok(&format!("https://example.com/wal/{i}")).await);
    }
    // Reads right after the commits: their snapshots point into the WAL.
    for c in &codes {
        assert_eq!(app.get(&format!("/link/{c}")).await.status(), 200);
    }
    // Now nothing happens. A TRUNCATE checkpoint from another connection
    // needs every reader out of the WAL; it does not wait (busy timeout
    // 0), so it succeeds only once the idle connections have let go of
    // their snapshots, which the checkpointer sees to within a few ticks.
    let conn = rusqlite::Connection::open(&app.db).unwrap();
    conn.busy_timeout(Duration::ZERO).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (busy, log, checkpointed): (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        if busy == 0 {
            assert_eq!((log, checkpointed), (0, 0), "truncated WAL");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle readers still hold the WAL after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(conn);
    // And the service goes on reading and writing after the truncation.
    let code = app.create_ok("https://example.com/after").await;
    assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    assert_eq!(app.get(&format!("/link/{}", codes[0])).await.status(), 200);
}
