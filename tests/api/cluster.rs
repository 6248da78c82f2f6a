//! The Valkey cache on a Valkey Cluster of three primaries: the API, keys
//! spread over every node, and a node's outage failing no request and
//! bringing nothing stale back.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::api::exercise_api;
use crate::helpers::spawn_app;
use crate::valkey_server::ValkeyCluster;

fn counter(s: &Value, name: &str) -> u64 {
    s["cache"]["valkey"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("cache.valkey.{name} in {s}"))
}

/// Every node named, or one node and `--valkey-cluster`: either way the
/// API works, each key goes to the primary that holds its slot, and a
/// second read is a hit.
#[tokio::test]
async fn the_valkey_cache_serves_the_api_on_a_cluster() {
    let cluster = ValkeyCluster::start();
    let urls = cluster.urls();
    let seed = cluster.nodes[1].url();
    for (mode, prefix, args) in [
        ("valkey", "all:", vec!["--valkey-url", urls.as_str()]),
        (
            "tiered",
            "seed:",
            vec!["--valkey-url", seed.as_str(), "--valkey-cluster"],
        ),
    ] {
        let mut all = vec![
            "--cache",
            mode,
            "--valkey-prefix",
            prefix,
            "--valkey-timeout-ms",
            "2000",
        ];
        all.extend_from_slice(&args);
        let app = spawn_app(&all).await;
        exercise_api(&app).await;
        let mut codes = Vec::new();
        for i in 0..60 {
            codes.push(
                app.create_ok(&format!("https://example.com/{mode}/{i}"))
                    .await,
            );
        }
        for code in &codes {
            let r = app.get(&format!("/link/{code}")).await;
            assert_eq!(r.status(), 200);
        }
        let s = app.stats().await;
        assert_eq!(s["cache"]["valkey"]["cluster"], true, "{s}");
        assert_eq!(counter(&s, "errors"), 0, "{s}");
        assert_eq!(counter(&s, "timeouts"), 0, "{s}");
        if mode == "valkey" {
            assert!(counter(&s, "hits") >= 60, "{mode}: {s}");
        }
        let spread = cluster.keys_per_node(prefix);
        assert!(
            spread.iter().all(|&n| n > 0),
            "{mode}: keys on every primary: {spread:?}"
        );
        assert!(spread.iter().sum::<usize>() >= 60, "{spread:?}");
        app.stop().await;
    }
}

/// One primary of the cluster is killed (its data kept on disk): every
/// request is still answered, from the store; a link edited and one
/// deleted while it is down are never served in their old form, not even
/// after the node comes back with its old copies; then Valkey is used
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_outage_fails_no_request_and_brings_nothing_stale_back() {
    let mut cluster = ValkeyCluster::start();
    let urls = cluster.urls();
    let app = spawn_app(&[
        "--cache",
        "valkey",
        "--valkey-url",
        &urls,
        "--valkey-prefix",
        "o:",
        "--valkey-timeout-ms",
        "300",
    ])
    .await;
    let key = app.new_key("alice", false).await;
    let mut codes = Vec::new();
    for i in 0..30 {
        let code = format!("link-{i}");
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&key),
                Some(json!({"url": format!("https://e.com/{code}/v1"), "code": code})),
            )
            .await;
        assert_eq!(r.status(), 201);
        codes.push(code);
    }
    // Two links whose keys the node about to die holds.
    let victim = 1;
    let held: Vec<String> = codes
        .iter()
        .filter(|code| {
            redis::cmd("EXISTS")
                .arg(format!("o:{code}"))
                .query::<i64>(&mut cluster.nodes[victim].connection())
                .unwrap_or(0)
                == 1
        })
        .cloned()
        .collect();
    assert!(held.len() >= 2, "the node holds {held:?}");
    let (edited, deleted) = (held[0].clone(), held[1].clone());

    cluster.nodes[victim].kill();
    let r = app
        .api(
            Method::PATCH,
            &format!("/api/v1/links/{edited}"),
            Some(&key),
            Some(json!({"url": format!("https://e.com/{edited}/v2")})),
        )
        .await;
    assert_eq!(r.status(), 200, "the edit succeeds without the node");
    let r = app
        .api(
            Method::DELETE,
            &format!("/api/v1/links/{deleted}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    let check_all = async || {
        for code in &codes {
            let r = app.get(&format!("/{code}")).await;
            if *code == deleted {
                assert_eq!(r.status(), 404, "{code}");
                continue;
            }
            assert_eq!(r.status(), 302, "{code}");
            let want = if *code == edited { "v2" } else { "v1" };
            assert_eq!(
                r.headers()["location"],
                format!("https://e.com/{code}/{want}").as_str()
            );
        }
    };
    // Through the outage, as the cluster notices it (node timeout 1 s).
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        check_all().await;
    }
    let s = app.stats().await;
    assert!(
        counter(&s, "errors") + counter(&s, "timeouts") + counter(&s, "skipped") > 0,
        "the outage was seen: {s}"
    );
    assert!(counter(&s, "pending_invalidations") > 0, "{s}");

    cluster.nodes[victim].restart();
    cluster.wait_ok();
    let old: Option<String> = redis::cmd("GET")
        .arg(format!("o:{edited}"))
        .query(&mut cluster.nodes[victim].connection())
        .expect("GET");
    assert_eq!(
        old,
        Some(format!("https://e.com/{edited}/v1")),
        "the node came back with its old copy"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        check_all().await;
        if counter(&app.stats().await, "pending_invalidations") == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "invalidations never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left: Option<String> = redis::cmd("GET")
        .arg(format!("o:{edited}"))
        .query(&mut cluster.nodes[victim].connection())
        .expect("GET");
    assert_ne!(left, Some(format!("https://e.com/{edited}/v1")));
    let hits = counter(&app.stats().await, "hits");
    check_all().await;
    check_all().await;
    assert!(
        counter(&app.stats().await, "hits") > hits,
        "Valkey is used again"
    );
    app.stop().await;
}
