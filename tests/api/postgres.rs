//! What only a shared database has: several instances on one PostgreSQL
//! database at once. (The API contract itself runs on both stores through
//! `on_both_stores!` in the other files.)

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{assert_error, fresh_postgres_db, spawn_app};
use crate::valkey_server::ValkeyServer;

/// Three instances start at once on a new database (one migrates, the
/// others wait for it), and each sees what the others wrote.
#[tokio::test]
async fn instances_on_one_database_share_their_links_and_their_codes() {
    let url = fresh_postgres_db().await;
    let args = ["--store", url.as_str(), "--cache", "none"];
    let (a, b, c) = tokio::join!(spawn_app(&args), spawn_app(&args), spawn_app(&args));
    let code = a.create_ok("https://example.com/from-a").await;
    for app in [&b, &c] {
        let r = app.get(&format!("/link/{code}")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<Value>().await.expect("json")["link"],
            "https://example.com/from-a"
        );
    }
    // One key store: a key made through one instance's database works on
    // all, and an alias taken on one is taken on the others.
    let key = a.new_key("shared", false).await;
    b.wait_for_key(&key).await;
    c.wait_for_key(&key).await;
    let body = json!({"url": "https://example.com/sale", "code": "shared-sale"});
    let r = b
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = c
        .api(Method::POST, "/api/v1/links", Some(&key), Some(body))
        .await;
    assert_error(r, 409, "taken").await;
    // A delete through one is seen by the others (no cache here: the
    // invalidation between instances' caches is not built yet).
    let r = c
        .api(
            Method::DELETE,
            "/api/v1/links/shared-sale",
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(a.get("/link/shared-sale").await.status(), 404);
    // Creates from all three at once get distinct codes.
    let mut codes = std::collections::HashSet::new();
    for app in [&a, &b, &c] {
        for created in app.create_concurrently("many", 50).await {
            assert_eq!(created.status, 201, "{}", created.body);
            assert!(codes.insert(created.code().to_owned()));
        }
    }
    assert_eq!(codes.len(), 150);
    for app in [a, b, c] {
        app.stop().await;
    }
}

/// Export from one PostgreSQL database, import into another, export
/// again: the same file.
#[tokio::test]
async fn export_and_import_round_trip_between_postgres_databases() {
    let from = fresh_postgres_db().await;
    let app = spawn_app(&["--store", from.as_str()]).await;
    let key = app.new_key("alice", false).await;
    app.create_ok("https://example.com/one").await;
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/two", "code": "two-alias", "max_visits": 3})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = app
        .api(Method::DELETE, "/api/v1/links/two-alias", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    app.stop().await;

    let to = fresh_postgres_db().await;
    // The target needs a key of the same name for the owner to carry over.
    let target = spawn_app(&["--store", to.as_str()]).await;
    target.new_key("alice", false).await;
    target.stop().await;

    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .args(args)
            .output()
            .expect("litelink");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("links.jsonl");
    let exported = run(&["export", "--store", &from]);
    assert_eq!(exported.lines().count(), 2, "{exported}");
    std::fs::write(&file, &exported).expect("write");
    run(&["import", "--store", &to, file.to_str().expect("path")]);
    assert_eq!(run(&["export", "--store", &to]), exported);
}

/// Without an invalidation channel, instances on one database cannot hear
/// each other: an in-process entry is served for at most the down TTL
/// (1 s by default) after it was cached, so an edit or a delete made
/// through another instance is never served in its old form for longer.
#[tokio::test]
async fn without_a_channel_cached_links_live_at_most_the_down_ttl() {
    let url = fresh_postgres_db().await;
    let args = ["--store", url.as_str()];
    let (a, b) = tokio::join!(spawn_app(&args), spawn_app(&args));
    let key = a.new_key("k", false).await;
    let r = a
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/v1", "code": "shared-doc"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let ttl = Duration::from_secs(1);
    // B caches the link (twice: the second read is a hit), then A edits
    // it; any read B is asked a TTL after its last fill has the edit.
    let cached_on_b = async |want: &str| -> Instant {
        for _ in 0..2 {
            let r = b.get("/shared-doc").await;
            assert_eq!(r.status(), 302);
            assert_eq!(r.headers()["location"], want);
        }
        Instant::now()
    };
    let cached = cached_on_b("https://example.com/v1").await;
    let r = a
        .api(
            Method::PATCH,
            "/api/v1/links/shared-doc",
            Some(&key),
            Some(json!({"url": "https://example.com/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    loop {
        let asked_at = cached.elapsed();
        let r = b.get("/shared-doc").await;
        if r.headers()["location"] == "https://example.com/v2" {
            eprintln!("B served the edit {asked_at:?} after it cached the link");
            break;
        }
        assert!(
            asked_at < ttl,
            "B served the old target {asked_at:?} after caching it"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The same for a delete, and for the unknown code B then remembers.
    let cached = cached_on_b("https://example.com/v2").await;
    let r = a
        .api(Method::DELETE, "/api/v1/links/shared-doc", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    loop {
        let asked_at = cached.elapsed();
        if b.get("/shared-doc").await.status() == 404 {
            eprintln!("B served the delete {asked_at:?} after it cached the link");
            break;
        }
        assert!(
            asked_at < ttl,
            "B served a deleted link {asked_at:?} after caching it"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.stop().await;
    b.stop().await;
}

/// Polls `GET path` on `app` every millisecond until it answers `status`;
/// how long that took. Panics after 5 s.
async fn until_status(app: &crate::helpers::TestApp, path: &str, status: u16) -> Duration {
    let started = Instant::now();
    loop {
        if app.get(path).await.status() == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path} never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// With the in-process cache on, what one instance changes reaches the
/// other's cache through the invalidation channel (within 5 s here, a
/// bound for a loaded machine; the latencies are printed): a delete, an
/// edit, and a create of a code the other remembered as unknown; while the channel is down, the other's cache serves an entry
/// only for its short down TTL, and starts empty when the channel is back.
#[tokio::test]
async fn caches_follow_changes_made_through_another_instance() {
    let mut bus = ValkeyServer::start();
    let url = fresh_postgres_db().await;
    let bus_url = bus.url();
    let args = [
        "--store",
        url.as_str(),
        "--invalidations-url",
        bus_url.as_str(),
        "--cache-negative-ttl-ms",
        "60000",
        "--invalidations-down-ttl-ms",
        "500",
    ];
    let mut c_args = args.to_vec();
    let last = c_args.len() - 1;
    c_args[last] = "0";
    let (a, b, c) = tokio::join!(spawn_app(&args), spawn_app(&args), spawn_app(&c_args));
    let key = a.new_key("k", false).await;
    let admin = a.new_key("admin", true).await;
    let stats = async |app: &crate::helpers::TestApp| -> Value {
        let r = app.api(Method::GET, "/stats", Some(&admin), None).await;
        r.json().await.expect("stats")
    };
    let wait_subscribed = async |app: &crate::helpers::TestApp| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats(app).await["invalidations"]["subscribed"] != true {
            assert!(Instant::now() < deadline, "never subscribed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    wait_subscribed(&a).await;
    wait_subscribed(&b).await;
    wait_subscribed(&c).await;

    // B remembers an alias as unknown; A creates it; B resolves it.
    assert_eq!(b.get("/link/team-page").await.status(), 404);
    let r = a
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/v1", "code": "team-page"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let seen = until_status(&b, "/link/team-page", 200).await;

    // B now has it cached; A edits it, B follows.
    let r = a
        .api(
            Method::PATCH,
            "/api/v1/links/team-page",
            Some(&key),
            Some(json!({"url": "https://example.com/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    loop {
        let r = b.get("/link/team-page").await;
        let body: Value = r.json().await.expect("json");
        if body["link"] == "https://example.com/v2" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "edit never seen"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let edit = started.elapsed();

    // A deletes it, B stops redirecting.
    assert_eq!(b.get("/team-page").await.status(), 302);
    let r = a
        .api(Method::DELETE, "/api/v1/links/team-page", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    let gone = until_status(&b, "/team-page", 404).await;
    eprintln!("seen on the other instance: create {seen:?}, edit {edit:?}, delete {gone:?}");

    // The channel goes down: B serves what it cached for at most its
    // down TTL (500 ms here), C (TTL 0) nothing, so an edit made through
    // A meanwhile is seen by B within the TTL and by C at once.
    let code = a.create_ok("https://example.com/before").await;
    bus.kill();
    for app in [&b, &c] {
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats(app).await["invalidations"]["subscribed"] != false {
            assert!(
                Instant::now() < deadline,
                "the broken channel went unnoticed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let link_on = async |app: &crate::helpers::TestApp| -> Value {
        let r = app.get(&format!("/link/{code}")).await;
        r.json::<Value>().await.expect("json")["link"].clone()
    };
    assert_eq!(link_on(&b).await, "https://example.com/before");
    let cached = Instant::now();
    let r = a
        .api(
            Method::PATCH,
            &format!("/api/v1/links/{code}"),
            Some(&admin),
            Some(json!({"url": "https://example.com/after"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(link_on(&c).await, "https://example.com/after");
    loop {
        let asked_at = cached.elapsed();
        if link_on(&b).await == "https://example.com/after" {
            break;
        }
        assert!(
            asked_at < Duration::from_millis(500),
            "B served the old target past its down TTL"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stale_for = cached.elapsed();
    for _ in 0..20 {
        assert_eq!(link_on(&b).await, "https://example.com/after");
    }
    eprintln!("with the channel down, the edit was seen by B after {stale_for:?}");

    // The channel comes back: B starts empty, and hears changes again.
    bus.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats(&b).await["invalidations"]["subscribed"] != true {
        assert!(Instant::now() < deadline, "never subscribed again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(link_on(&b).await, "https://example.com/after");
    let r = a
        .api(
            Method::PATCH,
            &format!("/api/v1/links/{code}"),
            Some(&admin),
            Some(json!({"url": "https://example.com/again"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    while link_on(&b).await != "https://example.com/again" {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B did not hear the edit after the outage"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!(
        "after the outage, B heard the edit in {:?}",
        started.elapsed()
    );
    c.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A read that waits past the 5 s `statement_timeout` (another session
/// holds a lock on the table), and reads that wait for the pool's only
/// connection meanwhile (the second gets it when the first gives up and
/// waits on the lock in turn; the third waits past the pool's 5 s), all
/// answer 503, never 500 and never a hang; once the lock goes, reads work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_and_pool_timeouts_answer_503() {
    let url = fresh_postgres_db().await;
    let app = spawn_app(&[
        "--store",
        url.as_str(),
        "--cache",
        "none",
        "--postgres-pool-size",
        "1",
        "--request-timeout",
        "60",
    ])
    .await;
    let code = app.create_ok("https://example.com/locked").await;
    let (locker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    locker
        .batch_execute("BEGIN; LOCK TABLE links IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let read = |app: &crate::helpers::TestApp| {
        let request = app.client.get(app.url(&format!("/link/{code}")));
        tokio::spawn(async move {
            let started = Instant::now();
            let r = request.send().await.expect("answered");
            let status = r.status().as_u16();
            (status, r.text().await.expect("body"), started.elapsed())
        })
    };
    let on_statement = read(&app);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = read(&app);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let on_pool = read(&app);
    for (what, answer) in [
        ("statement", on_statement),
        ("statement, after waiting for the pool", next),
        ("pool", on_pool),
    ] {
        let (status, body, took) = answer.await.expect("task");
        eprintln!("{what} timeout: {status} after {took:?}");
        assert_eq!(status, 503, "{what}: {body}");
        assert!(body.contains("busy"), "{what}: {body}");
        assert!(
            took >= Duration::from_secs(4),
            "{what}: before its 5 s bound: {took:?}"
        );
    }
    locker.batch_execute("ROLLBACK").await.expect("unlock");
    assert_eq!(app.get(&format!("/link/{code}")).await.status(), 200);
    task.abort();
}
