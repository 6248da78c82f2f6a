//! Reads from a streaming replica (`--postgres-read-url`) on the private
//! primary and replica that scripts/test makes: never older than a change
//! the instance knows of, made through it or announced to it; the
//! replica's lag, measured; a replica that fails costs no read.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Relay, TestApp, fresh_replicated_db, replica_pair, spawn_app};
use crate::valkey_server::ValkeyServer;

/// The replica's replay is paused by one test at a time; the others only
/// need it to run.
pub static REPLAY: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    tokio::spawn(connection);
    client
}

/// Pauses the replica's replay until dropped (also when the test fails).
struct Paused(String);

impl Paused {
    async fn start() -> Self {
        let (_, replica) = replica_pair();
        let c = connect(&replica).await;
        c.batch_execute("SELECT pg_wal_replay_pause()")
            .await
            .expect("pause replay");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let state: String = c
                .query_one("SELECT pg_get_wal_replay_pause_state()", &[])
                .await
                .expect("pause state")
                .get(0);
            if state == "paused" {
                break;
            }
            assert!(Instant::now() < deadline, "replay never paused");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self(replica)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .arg(&self.0)
            .args(["-qAtc", "SELECT pg_wal_replay_resume()"])
            .output();
    }
}

async fn stats(app: &TestApp, admin: &str) -> Value {
    app.api(Method::GET, "/stats", Some(admin), None)
        .await
        .json()
        .await
        .expect("stats")
}

fn replica_counter(s: &Value, name: &str) -> u64 {
    s["replica"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("replica.{name} in {s}"))
}

/// Waits until `app`'s reads of unchanged codes go to the replica again
/// (it has replayed everything this instance knows of).
async fn until_caught_up(app: &TestApp, admin: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = stats(app, admin).await;
        if s["replica"]["up"] == true && replica_counter(&s, "behind_bytes") == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "never caught up: {s}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn target_of(app: &TestApp, code: &str) -> (u16, Value) {
    let r = app.get(&format!("/link/{code}")).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// With the replica's replay paused, a change made through A (no cache)
/// or announced to B (memory cache, with the change's WAL position) is
/// read from the primary by both, while unchanged codes are still read
/// from the replica; once replay resumes and the replica has caught up,
/// those codes are read from the replica again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_never_come_from_a_replica_behind_a_known_change() {
    let _replay = REPLAY.write().await;
    let (primary, replica) = fresh_replicated_db().await;
    let bus = ValkeyServer::start();
    let bus_url = bus.url();
    let common = [
        "--store",
        primary.as_str(),
        "--postgres-read-url",
        replica.as_str(),
        "--invalidations-url",
        bus_url.as_str(),
    ];
    let a_args: Vec<&str> = common.iter().copied().chain(["--cache", "none"]).collect();
    let b_args: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--cache", "memory", "--cache-negative-ttl-ms", "60000"])
        .collect();
    // C has no channel: it cannot hear the others, so it reads only the
    // primary. D listens on a channel nobody else uses: it has not heard
    // of a change yet, as an instance is before the message arrives.
    let c_args = [
        "--store",
        primary.as_str(),
        "--postgres-read-url",
        replica.as_str(),
        "--cache",
        "none",
    ];
    let other_bus = ValkeyServer::start();
    let other_bus_url = other_bus.url();
    let d_args = [
        "--store",
        primary.as_str(),
        "--postgres-read-url",
        replica.as_str(),
        "--invalidations-url",
        other_bus_url.as_str(),
        "--cache",
        "none",
    ];
    let (a, b, c, d) = tokio::join!(
        spawn_app(&a_args),
        spawn_app(&b_args),
        spawn_app(&c_args),
        spawn_app(&d_args)
    );
    let key = a.new_key("k", false).await;
    let admin = a.new_key("admin", true).await;
    let old = a.create_ok("https://example.com/old").await;
    for app in [&a, &b] {
        until_caught_up(app, &admin).await;
        assert_eq!(
            stats(app, &admin).await["invalidations"]["subscribed"],
            true
        );
    }
    until_caught_up(&c, &admin).await;
    until_caught_up(&d, &admin).await;
    let before = replica_counter(&stats(&a, &admin).await, "reads");
    assert_eq!(target_of(&a, &old).await.0, 200);
    assert!(
        replica_counter(&stats(&a, &admin).await, "reads") > before,
        "an unchanged code is read from the replica"
    );

    let paused = Paused::start().await;
    // B remembers the alias as unknown.
    assert_eq!(target_of(&b, "fresh-one").await.0, 404);
    let r = a
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/v1", "code": "fresh-one"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    // The replica really is behind: read directly, it has no such link.
    let direct = connect(&replica).await;
    let on_replica = direct
        .query_opt("SELECT 1 FROM links WHERE code = 'fresh-one'", &[])
        .await
        .expect("query the replica");
    assert!(on_replica.is_none(), "the paused replica has the link");

    // A made it: read from the primary at once. C reads the primary
    // only. D, which was not told, asks the primary about a code the
    // replica does not have: a link resolves everywhere once its 201 is
    // out.
    for app in [&a, &c, &d] {
        let (status, body) = target_of(app, "fresh-one").await;
        assert_eq!(
            (status, &body["link"]),
            (200, &json!("https://example.com/v1"))
        );
    }
    assert!(replica_counter(&stats(&d, &admin).await, "misses") > 0);
    let c_stats = stats(&c, &admin).await;
    assert_eq!(replica_counter(&c_stats, "reads"), 0, "{c_stats}");
    // B was told, with the position: read from the primary too.
    let started = Instant::now();
    while target_of(&b, "fresh-one").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B never saw the create"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("B saw the create in {:?}", started.elapsed());
    // Unchanged codes still come from the replica.
    let s = stats(&a, &admin).await;
    let (reads, primary_reads) = (
        replica_counter(&s, "reads"),
        replica_counter(&s, "primary_reads"),
    );
    assert!(primary_reads > 0, "{s}");
    assert_eq!(target_of(&a, &old).await.0, 200);
    assert_eq!(
        replica_counter(&stats(&a, &admin).await, "reads"),
        reads + 1,
        "an unchanged code is still read from the replica"
    );
    // A listing knows of the new link (from the primary).
    let listed: Value = a
        .api(Method::GET, "/api/v1/links?limit=10", Some(&key), None)
        .await
        .json()
        .await
        .expect("list");
    assert!(
        listed["links"]
            .as_array()
            .expect("links")
            .iter()
            .any(|l| l["code"] == "fresh-one"),
        "{listed}"
    );

    // An edit through B: A (no cache) and B both read the new target.
    let r = b
        .api(
            Method::PATCH,
            "/api/v1/links/fresh-one",
            Some(&key),
            Some(json!({"url": "https://example.com/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    loop {
        let (_, on_a) = target_of(&a, "fresh-one").await;
        let (_, on_b) = target_of(&b, "fresh-one").await;
        if on_a["link"] == "https://example.com/v2" && on_b["link"] == "https://example.com/v2" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the edit was not seen: A {on_a}, B {on_b}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("A and B served the edit in {:?}", started.elapsed());
    // A delete through A: B stops redirecting.
    let r = a
        .api(Method::DELETE, "/api/v1/links/fresh-one", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    let started = Instant::now();
    while b.get("/fresh-one").await.status() != 404 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B still redirects"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("B stopped redirecting in {:?}", started.elapsed());
    assert_eq!(a.get("/fresh-one").await.status(), 404);

    drop(paused);
    for app in [&a, &b] {
        until_caught_up(app, &admin).await;
    }
    let s = stats(&a, &admin).await;
    let (reads, misses) = (replica_counter(&s, "reads"), replica_counter(&s, "misses"));
    assert_eq!(target_of(&a, &old).await.0, 200);
    assert_eq!(a.get("/fresh-one").await.status(), 404);
    let s = stats(&a, &admin).await;
    assert_eq!(
        (replica_counter(&s, "reads"), replica_counter(&s, "misses")),
        (reads + 1, misses + 1),
        "the replica has it all now, and is read again (a deleted code is then confirmed on the primary)"
    );

    // A link the replica holds, then replay paused, an edit and a delete
    // through A: once B has heard of each, neither B nor C ever serves the
    // old form, which the replica still has (B refills its cache from the
    // primary, held back by the change's position; C reads the primary).
    let r = a
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/held-v1", "code": "held-one"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    for app in [&a, &b, &c] {
        until_caught_up(app, &admin).await;
    }
    let on_replica = async || -> Option<String> {
        direct
            .query_opt(
                "SELECT target FROM links WHERE code = 'held-one' AND deleted_at IS NULL",
                &[],
            )
            .await
            .expect("query the replica")
            .map(|row| row.get(0))
    };
    assert_eq!(
        on_replica().await.as_deref(),
        Some("https://example.com/held-v1")
    );
    for app in [&b, &c] {
        assert_eq!(
            target_of(app, "held-one").await.1["link"],
            "https://example.com/held-v1"
        );
    }
    let paused = Paused::start().await;
    let r = a
        .api(
            Method::PATCH,
            "/api/v1/links/held-one",
            Some(&key),
            Some(json!({"url": "https://example.com/held-v2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    while target_of(&b, "held-one").await.1["link"] != "https://example.com/held-v2" {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B never heard of the edit"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("B served the edit in {:?}", started.elapsed());
    assert_eq!(
        on_replica().await.as_deref(),
        Some("https://example.com/held-v1")
    );
    for _ in 0..50 {
        for app in [&b, &c] {
            let (status, body) = target_of(app, "held-one").await;
            assert_eq!(
                (status, &body["link"]),
                (200, &json!("https://example.com/held-v2"))
            );
            let r = app.get("/held-one").await;
            assert_eq!(r.headers()["location"], "https://example.com/held-v2");
        }
    }
    let r = a
        .api(Method::DELETE, "/api/v1/links/held-one", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    let started = Instant::now();
    while b.get("/held-one").await.status() != 404 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B never heard of the delete"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("B served the delete in {:?}", started.elapsed());
    assert_eq!(
        on_replica().await.as_deref(),
        Some("https://example.com/held-v1")
    );
    for _ in 0..50 {
        for app in [&b, &c] {
            assert_eq!(app.get("/held-one").await.status(), 404);
            assert_eq!(target_of(app, "held-one").await.0, 404);
        }
    }
    drop(paused);

    a.stop().await;
    b.stop().await;
    c.stop().await;
    d.stop().await;
}

/// The replica's lag on this machine: the time from a 201 to the link
/// being visible on the replica, over 200 creates; and the time until the
/// instance reads that code from the replica again (it polls the replay
/// position every 5 ms while behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_lag_is_measured() {
    let _replay = REPLAY.read().await;
    let (primary, replica) = fresh_replicated_db().await;
    // A replica is read only by an instance that hears the others.
    let bus = ValkeyServer::start();
    let app = spawn_app(&[
        "--store",
        &primary,
        "--postgres-read-url",
        &replica,
        "--invalidations-url",
        &bus.url(),
        "--cache",
        "none",
    ])
    .await;
    let admin = app.new_key("admin", true).await;
    until_caught_up(&app, &admin).await;
    let direct = connect(&replica).await;
    let visible = direct
        .prepare("SELECT 1 FROM links WHERE code = $1")
        .await
        .expect("prepare");
    let (mut lag, mut back) = (Vec::new(), Vec::new());
    for i in 0..200 {
        let code = app.create_ok(&format!("https://example.com/lag/{i}")).await;
        let created = Instant::now();
        while direct
            .query_opt(&visible, &[&code])
            .await
            .expect("query")
            .is_none()
        {
            assert!(
                created.elapsed() < Duration::from_secs(5),
                "never replicated"
            );
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        lag.push(created.elapsed());
        if i % 20 == 0 {
            until_caught_up(&app, &admin).await;
            back.push(created.elapsed());
        }
    }
    lag.sort();
    back.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize];
    eprintln!(
        "replica lag after a 201: p50 {:?}, p99 {:?}, max {:?}; reads back on the replica after: p50 {:?}, max {:?}",
        p(&lag, 0.5),
        p(&lag, 0.99),
        p(&lag, 1.0),
        p(&back, 0.5),
        p(&back, 1.0)
    );
    // Loopback streaming replication; the bound in docs/deploy.md.
    assert!(p(&lag, 1.0) < Duration::from_secs(1), "{lag:?}");
    app.stop().await;
}

/// The replica becomes unreachable (its connections cut), then comes back:
/// no read fails meanwhile (they go to the primary), readiness says
/// "degraded" without naming an address, and the replica is read again
/// once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_fails_costs_no_read() {
    let _replay = REPLAY.read().await;
    let (primary, replica) = fresh_replicated_db().await;
    let replica_addr: std::net::SocketAddr = {
        let config: tokio_postgres::Config = replica.parse().expect("url");
        let port = config.get_ports()[0];
        ([127, 0, 0, 1], port).into()
    };
    let mut relay = Relay::start(replica_addr).await;
    let dbname = replica.rsplit_once('/').expect("db").1;
    let through_relay = format!("postgres://postgres@127.0.0.1:{}/{dbname}", relay.port);
    let bus = ValkeyServer::start();
    let app = spawn_app(&[
        "--store",
        &primary,
        "--postgres-read-url",
        &through_relay,
        "--invalidations-url",
        &bus.url(),
        "--cache",
        "none",
    ])
    .await;
    let admin = app.new_key("admin", true).await;
    let code = app.create_ok("https://example.com/kept").await;
    until_caught_up(&app, &admin).await;
    assert_eq!(app.get("/health/ready").await.status(), 200);

    relay.cut();
    for _ in 0..200 {
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
    }
    let s = stats(&app, &admin).await;
    assert_eq!(s["replica"]["up"], false, "{s}");
    let r = app.get("/health/ready").await;
    assert_eq!(r.status(), 200, "degraded still takes traffic");
    let body = r.text().await.expect("body");
    assert!(
        body.contains("degraded") && body.contains("replica"),
        "{body}"
    );
    assert!(
        !body.contains("127.0.0.1") && !body.contains(&relay.port.to_string()),
        "{body}"
    );

    relay.restore().await;
    until_caught_up(&app, &admin).await;
    let reads = replica_counter(&stats(&app, &admin).await, "reads");
    assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    assert_eq!(
        replica_counter(&stats(&app, &admin).await, "reads"),
        reads + 1,
        "the replica is read again"
    );
    assert_eq!(app.get("/health/ready").await.status(), 200);
    app.stop().await;
}

/// A read URL that names a primary is refused at start, and the option
/// needs `--store`.
#[tokio::test]
async fn a_read_url_must_name_a_standby() {
    let (primary, _) = fresh_replicated_db().await;
    let settings = crate::helpers::settings(
        std::path::Path::new("unused.db"),
        &["--store", &primary, "--postgres-read-url", &primary],
    );
    let err = litelink_service::Application::build(settings)
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("not a standby"), "{err:#}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["serve", "--postgres-read-url", &primary])
        .output()
        .expect("litelink");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--store"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
