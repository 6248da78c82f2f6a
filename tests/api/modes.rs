//! Every storage and cache configuration serves the same API, and runs with
//! what it was asked for: the settings are read back from SQLite
//! (`/stats` `applied`) and from the store's counters, not from the
//! configuration that `/stats` also repeats.

use serde_json::Value;

use crate::api::exercise_api;
use crate::helpers::spawn_app;

fn applied<'a>(s: &'a Value, side: &str) -> &'a Value {
    &s["applied"][side]
}

#[tokio::test]
async fn per_request_connections_open_one_per_lookup() {
    // SQLite's lookups, not the link slots, which open no connection.
    let app = spawn_app(&[
        "--sqlite-connections",
        "per-request",
        "--cache",
        "none",
        "--sqlite-slots",
        "off",
    ])
    .await;
    exercise_api(&app).await;
    let s = app.stats().await;
    let r = &s["readers"];
    let lookups = r["lookups"].as_u64().expect("lookups");
    assert!(lookups > 0, "{s}");
    // One per lookup, and a few more: one per reload of the API keys
    // (every second) and per listing, which are no lookups.
    let opened = r["connections_opened"].as_u64().expect("opened");
    assert!(opened >= lookups && opened <= lookups + 20, "{s}");
    // Each lookup opens its own, so none reuses a snapshot.
    assert_eq!(r["snapshots"], 0, "{s}");
}

#[tokio::test]
async fn pooled_connections_are_reused() {
    let app = spawn_app(&["--cache", "none", "--sqlite-slots", "off"]).await;
    let code = app.create_ok("https://example.com/pooled").await;
    for _ in 0..50 {
        assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    }
    let s = app.stats().await;
    let opened = s["readers"]["connections_opened"].as_u64().expect("opened");
    assert!((1..=4).contains(&opened), "{s}");
    assert_eq!(applied(&s, "reader")["query_only"], true, "{s}");
}

/// The API is the same with the link slots and the name index and without
/// them, and with them the lookups of generated and named codes are
/// answered from the slots.
#[tokio::test]
async fn link_slots_answer_every_code_and_off_reads_the_table() {
    let on = spawn_app(&["--cache", "none"]).await;
    exercise_api(&on).await;
    let code = on.create_ok("https://example.com/slot").await;
    let key = on.new_key("named", false).await;
    let r = on
        .client
        .post(on.url("/link"))
        .bearer_auth(&key)
        .json(&serde_json::json!({ "url": "https://example.com/named", "code": "a-named-one" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 201);
    // The first `/stats` makes an admin key in another process: the server
    // notices that write (within 100 ms), forgets the slots and builds them
    // again, reading SQLite meanwhile. Wait for that before counting.
    let builds = on.stats().await["slots"]["builds"]
        .as_u64()
        .expect("builds");
    for _ in 0..100 {
        let s = on.stats().await;
        if s["slots"]["builds"].as_u64() > Some(builds) && s["slots"]["state"] == "ready" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let before = on.stats().await["slots"]["hits"].as_u64().expect("hits");
    for code in [code.as_str(), "a-named-one"] {
        for _ in 0..20 {
            assert_eq!(on.get(&format!("/link/{code}")).await.status(), 200);
            assert_eq!(on.get(&format!("/{code}")).await.status(), 302);
        }
    }
    let s = on.stats().await;
    assert_eq!(s["slots"]["state"], "ready", "{s}");
    assert!(
        s["slots"]["hits"].as_u64().expect("hits") >= before + 80,
        "before {before}: {s}"
    );
    // The two aliases exercise_api made, and this one.
    assert_eq!(s["slots"]["named_codes"], 3, "{s}");

    let off = spawn_app(&["--cache", "none", "--sqlite-slots", "off"]).await;
    exercise_api(&off).await;
    let s = off.stats().await;
    assert_eq!(s["slots"], Value::Null, "{s}");
    assert!(
        s["readers"]["lookups"].as_u64().expect("lookups") > 0,
        "{s}"
    );
}

#[tokio::test]
async fn page_cache_off_is_applied_to_every_connection() {
    let app = spawn_app(&["--sqlite-page-cache", "off", "--cache", "none"]).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    for side in ["writer", "reader"] {
        assert_eq!(applied(&s, side)["cache_size"], 0, "{side}: {s}");
        assert_eq!(applied(&s, side)["temp_store"], "file", "{side}: {s}");
    }
    let on = spawn_app(&["--cache", "none"]).await;
    exercise_api(&on).await;
    let s = on.stats().await;
    // SQLite's defaults: 2,000 KiB, written as -2000, and its build's own
    // temporary store.
    assert_eq!(applied(&s, "reader")["cache_size"], -2000, "{s}");
    assert_eq!(applied(&s, "reader")["temp_store"], "default", "{s}");
}

#[tokio::test]
async fn reads_on_the_blocking_pool_serve_the_api() {
    let app = spawn_app(&["--sqlite-read-on", "blocking", "--cache", "none"]).await;
    exercise_api(&app).await;
    assert_eq!(app.stats().await["read_on"], "blocking");
}

#[tokio::test]
async fn no_cache_serves_the_api() {
    let app = spawn_app(&["--cache", "none"]).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    assert!(s["cache"].get("memory").is_none(), "{s}");
    assert!(s["readers"]["lookups"].as_u64().expect("lookups") > 0);
}

/// Each level runs with its own `synchronous` and its own syncs: at `full`
/// the writer's connection runs NORMAL and the writer syncs the WAL itself
/// (one or more syncs); `normal` and `off` never sync.
#[tokio::test]
async fn each_durability_level_runs_with_its_own_sync() {
    for (level, synchronous, syncs) in [
        ("full", "normal", true),
        ("normal", "normal", false),
        ("off", "off", false),
    ] {
        let app = spawn_app(&["--durability", level, "--cache", "none"]).await;
        exercise_api(&app).await;
        let s = app.stats().await;
        assert_eq!(s["durability"], level);
        assert_eq!(
            applied(&s, "writer")["synchronous"],
            synchronous,
            "{level}: {s}"
        );
        let n = s["writer"]["syncs"].as_u64().expect("syncs");
        assert_eq!(n > 0, syncs, "{level}: {n} syncs: {s}");
        assert_eq!(s["writer"]["grouped_sync"], syncs, "{level}: {s}");
    }
}

#[tokio::test]
async fn one_commit_per_create_syncs_inside_each_commit() {
    let app = spawn_app(&["--group-commit", "off", "--cache", "none"]).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    assert_eq!(s["writer"]["group_commit"], false);
    assert_eq!(s["writer"]["batch_max"], 1);
    // synchronous=FULL: SQLite syncs in every commit, the writer never.
    assert_eq!(applied(&s, "writer")["synchronous"], "full", "{s}");
    assert_eq!(s["writer"]["syncs"], 0, "{s}");
}
