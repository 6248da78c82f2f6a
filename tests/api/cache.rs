//! Cache modes against a real Valkey: the API, write-through, and that a
//! dead or slow Valkey never fails or stalls a request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::exercise_api;
use crate::helpers::{TestApp, spawn_app};
use crate::valkey_server::ValkeyServer;

/// A server with the `mode` cache on `valkey`. Valkey's timeout is a
/// generous 2 s, so that a loaded machine cannot turn a slow answer into a
/// miss; the tests about timeouts set their own.
async fn app_with(mode: &str, valkey: &ValkeyServer) -> TestApp {
    app_with_options(mode, valkey, &["--valkey-timeout-ms", "2000"]).await
}

async fn app_with_options(mode: &str, valkey: &ValkeyServer, extra: &[&str]) -> TestApp {
    let url = valkey.url();
    let mut args = vec![
        "--cache",
        mode,
        "--valkey-url",
        &url,
        "--valkey-prefix",
        "t:",
    ];
    args.extend_from_slice(extra);
    spawn_app(&args).await
}

fn counter(v: &Value, tier: &str, name: &str) -> u64 {
    v["cache"][tier][name]
        .as_u64()
        .unwrap_or_else(|| panic!("cache.{tier}.{name} in {v}"))
}

/// `/stats` names the Valkey server without the password in its URL.
#[tokio::test]
async fn stats_show_the_valkey_url_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("redis://litelink:s3cret-pw@127.0.0.1:{port}/0");
    let app = spawn_app(&["--cache", "tiered", "--valkey-url", &url]).await;
    let stats = app.stats().await;
    let shown = stats["cache"]["valkey"]["url"].as_str().expect("url");
    assert!(!stats.to_string().contains("s3cret-pw"), "{stats}");
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.contains("litelink"), "the user name stays: {shown}");
}

#[tokio::test]
async fn valkey_mode_serves_the_api() {
    let valkey = ValkeyServer::start();
    let app = app_with("valkey", &valkey).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    assert_eq!(s["cache"]["mode"], "valkey");
    assert_eq!(s["cache"]["valkey"]["errors"], 0, "{s}");
    // The reads after the create were answered by Valkey (write-through),
    // and the second unknown-code lookup by its negative entry.
    assert!(counter(&s, "valkey", "hits") > 0, "{s}");
    assert!(counter(&s, "valkey", "negative_hits") > 0, "{s}");
    assert!(s["cache"].get("memory").is_none(), "{s}");
}

#[tokio::test]
async fn tiered_mode_serves_the_api() {
    let valkey = ValkeyServer::start();
    let app = app_with("tiered", &valkey).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    assert_eq!(s["cache"]["mode"], "tiered");
    assert!(s["cache"]["memory"]["hits"].as_u64().unwrap() > 0, "{s}");
}

#[tokio::test]
async fn memory_mode_serves_the_api() {
    let app = spawn_app(&["--cache", "memory"]).await;
    exercise_api(&app).await;
    let s = app.stats().await;
    assert_eq!(s["cache"]["mode"], "memory");
    assert!(counter(&s, "memory", "hits") > 0, "{s}");
    assert!(counter(&s, "memory", "negative_hits") > 0, "{s}");
    // Every read of a created link came from the cache: the store was
    // asked only for the unknown codes, once each before it was cached
    // (`NoSuchCode1`, and the alias asked in capitals).
    assert_eq!(s["readers"]["lookups"], 2, "{s}");
}

#[tokio::test]
async fn the_memory_cache_holds_at_most_its_capacity() {
    let app = spawn_app(&["--cache", "memory", "--cache-capacity", "16"]).await;
    let mut codes = Vec::new();
    for i in 0..200 {
        codes.push(app.create_ok(&format!("https://example.com/cap/{i}")).await);
    }
    for code in &codes {
        assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    }
    let s = app.stats().await;
    let entries = counter(&s, "memory", "entries");
    assert!((1..=16).contains(&entries), "{s}");
    assert_eq!(counter(&s, "memory", "capacity"), 16);
    // Evicted links are read from the store again, and still resolve.
    assert!(
        s["readers"]["lookups"].as_u64().expect("lookups") >= 100,
        "{s}"
    );
}

/// An unknown code is remembered for `--cache-negative-ttl-ms`, then asked
/// of the store again; in Valkey the entry carries that expiry.
#[tokio::test]
async fn the_negative_cache_forgets_after_its_ttl() {
    let valkey = ValkeyServer::start();
    for mode in ["memory", "valkey"] {
        let app = app_with_options(
            mode,
            &valkey,
            &[
                "--cache-negative-ttl-ms",
                "400",
                "--valkey-timeout-ms",
                "2000",
            ],
        )
        .await;
        let lookups = |s: &Value| s["readers"]["lookups"].as_u64().expect("lookups");
        let unknown = format!("/link/Unknown{mode}");
        assert_eq!(app.get(&unknown).await.status(), 404);
        assert_eq!(app.get(&unknown).await.status(), 404);
        let s = app.stats().await;
        assert_eq!(
            lookups(&s),
            1,
            "{mode}: the second answer came from the cache: {s}"
        );
        if mode == "valkey" {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(format!("t:Unknown{mode}"))
                .query(&mut valkey.connection())
                .expect("PTTL");
            assert!((1..=400).contains(&ttl), "{mode}: pttl {ttl}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert_eq!(app.get(&unknown).await.status(), 404);
        assert_eq!(
            lookups(&app.stats().await),
            2,
            "{mode}: asked the store again"
        );
    }
}

#[tokio::test]
async fn a_valkey_ttl_of_zero_keeps_links_until_evicted() {
    let valkey = ValkeyServer::start();
    let app = app_with_options(
        "valkey",
        &valkey,
        &["--valkey-ttl", "0", "--valkey-timeout-ms", "2000"],
    )
    .await;
    let code = app.create_ok("https://example.com/forever").await;
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("t:{code}"))
        .query(&mut valkey.connection())
        .expect("TTL");
    assert_eq!(ttl, -1, "no expiry");
}

#[tokio::test]
async fn creates_are_written_through_before_the_201() {
    let valkey = ValkeyServer::start();
    let app = app_with("valkey", &valkey).await;
    let mut conn = valkey.connection();
    for i in 0..20 {
        let target = format!("https://example.com/wt/{i}");
        let code = app.create_ok(&target).await;
        // Read straight after the 201: no waiting, no retry.
        let stored: Option<String> = redis::cmd("GET")
            .arg(format!("t:{code}"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(stored.as_deref(), Some(target.as_str()));
        let ttl: i64 = redis::cmd("TTL")
            .arg(format!("t:{code}"))
            .query(&mut conn)
            .unwrap();
        assert!(ttl > 0 && ttl <= 86_400, "ttl {ttl}");
    }
}

#[tokio::test]
async fn reads_are_served_from_valkey_after_the_first() {
    let valkey = ValkeyServer::start();
    let app = app_with("valkey", &valkey).await;
    let code = app.create_ok("https://example.com/read-through").await;
    // Remove it from Valkey: the next read misses, reads SQLite, fills Valkey.
    let mut conn = valkey.connection();
    let _: () = redis::cmd("DEL")
        .arg(format!("t:{code}"))
        .query(&mut conn)
        .unwrap();
    for _ in 0..5 {
        assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    }
    let v = &app.stats().await["cache"]["valkey"];
    assert_eq!(v["misses"], 1, "{v}");
    assert_eq!(v["hits"], 4, "{v}");
    let stored: Option<String> = redis::cmd("GET")
        .arg(format!("t:{code}"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(stored.as_deref(), Some("https://example.com/read-through"));
}

/// Reads and creates run while Valkey is killed and later restarted on the
/// same port: not one request fails, and hits resume without a restart of
/// litelink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_valkey_fails_no_request_and_hits_come_back() {
    let mut valkey = ValkeyServer::start();
    let app = app_with("valkey", &valkey).await;
    let mut codes = Vec::new();
    for i in 0..20 {
        codes.push(
            app.create_ok(&format!("https://example.com/dead/{i}"))
                .await,
        );
    }
    let codes = Arc::new(codes);
    let failures = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_millis(2500);
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (client, base, codes, failures, done) = (
            app.client.clone(),
            app.url(""),
            Arc::clone(&codes),
            Arc::clone(&failures),
            Arc::clone(&done),
        );
        workers.push(tokio::spawn(async move {
            let mut i = w;
            while Instant::now() < stop_at && i < 1_000_000 {
                let ok = if i % 10 == 0 {
                    client
                        .post(format!("{base}/link"))
                        .json(&json!({ "url": format!("https://example.com/load/{i}") }))
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 201)
                } else {
                    let code = &codes[i % codes.len()];
                    client
                        .get(format!("{base}/link/{code}"))
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 200)
                };
                if !ok {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 8;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    valkey.kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = app.stats().await["cache"]["valkey"].clone();
    valkey.restart();
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed while Valkey was down"
    );
    assert!(
        done.load(Ordering::Relaxed) > 200,
        "too little load to mean anything"
    );
    let failed_calls = during["errors"].as_u64().unwrap()
        + during["timeouts"].as_u64().unwrap()
        + during["skipped"].as_u64().unwrap();
    assert!(failed_calls > 0, "Valkey's death went unnoticed: {during}");

    // Valkey is back (empty): reads fill it again and then hit it.
    let hits_before = app.stats().await["cache"]["valkey"]["hits"]
        .as_u64()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut hits_after = hits_before;
    while Instant::now() < deadline && hits_after < hits_before + 20 {
        for code in codes.iter() {
            assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
        }
        hits_after = app.stats().await["cache"]["valkey"]["hits"]
            .as_u64()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        hits_after >= hits_before + 20,
        "hits did not come back: {hits_before} -> {hits_after}"
    );
}

/// Valkey stops answering (DEBUG SLEEP blocks the whole server): every
/// request still completes, bounded by the cache timeout, not by Valkey.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_valkey_does_not_stall_requests() {
    let valkey = ValkeyServer::start();
    let app = app_with_options("valkey", &valkey, &["--valkey-timeout-ms", "50"]).await;
    let code = app.create_ok("https://example.com/slow").await;
    let mut sleeper = valkey.connection();
    let sleeping = std::thread::spawn(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SLEEP").arg(6).query(&mut sleeper);
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut slowest = Duration::ZERO;
    for i in 0..40 {
        let started = Instant::now();
        let status = if i % 4 == 0 {
            app.create(&format!("https://example.com/slow/{i}"))
                .await
                .status()
        } else {
            app.get(&format!("/link/{code}")).await.status()
        };
        slowest = slowest.max(started.elapsed());
        assert!(status == 200 || status == 201, "status {status}");
    }
    // Valkey sleeps 6 s; each request is bounded by the 50 ms timeout
    // (and then skips Valkey for a while), not by Valkey. The bound leaves
    // room for a loaded machine; a request that waited for Valkey would
    // take seconds.
    assert!(
        slowest < Duration::from_millis(2000),
        "slowest request took {slowest:?}"
    );
    let v = &app.stats().await["cache"]["valkey"];
    assert!(v["timeouts"].as_u64().unwrap() >= 1, "{v}");
    sleeping.join().unwrap();
}

#[tokio::test]
async fn unknown_code_floods_are_served_from_the_negative_cache() {
    for mode in ["memory", "valkey", "tiered"] {
        let valkey = ValkeyServer::start();
        let app = app_with(mode, &valkey).await;
        for _ in 0..100 {
            assert_eq!(app.get("/link/NoSuchCode99").await.status(), 404);
        }
        let c = &app.stats().await["cache"];
        let negative_hits = match mode {
            "valkey" => c["valkey"]["negative_hits"].as_u64().unwrap(),
            _ => c["memory"]["negative_hits"].as_u64().unwrap(),
        };
        assert_eq!(negative_hits, 99, "{mode}: {c}");
    }
}

#[tokio::test]
async fn litelink_starts_and_serves_while_valkey_is_down() {
    let mut valkey = ValkeyServer::start();
    valkey.kill();
    let app = app_with("tiered", &valkey).await;
    let code = app.create_ok("https://example.com/no-valkey").await;
    let r = app.get(&format!("/link/{code}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["link"],
        "https://example.com/no-valkey"
    );
}

/// Past 100,000 invalidations kept while Valkey is down, the tier drops
/// every key under its prefix once Valkey is back, instead of each; keys
/// under another prefix stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_100000_kept_invalidations_the_whole_prefix_is_dropped() {
    use litelink_service::cache::{CacheMode, CacheSettings, ValkeySettings, build};
    use litelink_service::domain::{LinkKey, ShortCode};
    use redis::Commands;

    let dir = tempfile::tempdir().expect("tempdir");
    let mut valkey = ValkeyServer::start_persistent(dir.path());
    let settings = CacheSettings {
        mode: CacheMode::Valkey,
        valkey: ValkeySettings {
            url: valkey.url(),
            prefix: "drop:".into(),
            timeout: Duration::from_secs(2),
            ..ValkeySettings::default()
        },
        ..CacheSettings::default()
    };
    let cache = build(&settings).expect("cache");
    {
        let mut c = valkey.connection();
        for key in ["drop:a", "drop:b", "keep:c"] {
            let () = c.set(key, "x").expect("SET");
        }
    }
    valkey.kill();
    let pending = |cache: &std::sync::Arc<dyn litelink_service::cache::LinkCache>| {
        cache
            .stats()
            .valkey
            .expect("valkey tier")
            .pending_invalidations
    };
    for i in 0..100_001 {
        let code = ShortCode::parse(&format!("gone{i}")).expect("code");
        cache.invalidate(&LinkKey::default_domain(code)).await;
    }
    assert_eq!(pending(&cache), 100_000, "reported as the cap");
    valkey.restart();
    let probe = LinkKey::default_domain(ShortCode::parse("probe").expect("code"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while pending(&cache) != 0 {
        assert!(
            Instant::now() < deadline,
            "the kept invalidations were never applied"
        );
        let _ = cache.get(&probe).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut c = valkey.connection();
    let left: Vec<String> = c.keys("*").expect("KEYS");
    assert_eq!(left, ["keep:c"], "the prefix went, the rest stayed");
}
