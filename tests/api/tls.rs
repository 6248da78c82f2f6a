//! TLS to PostgreSQL and Valkey, against servers with a certificate from a
//! CA made for the tests (scripts/provision-tls): a PostgreSQL that takes
//! TLS connections only, the replica pair with TLS on, and Valkey servers
//! with a TLS port, with and without client certificates.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use litelink_lab::process::ServerProcess;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{missing, replica_pair, spawn_app};
use crate::valkey_server::{ValkeyCluster, ValkeyServer};

/// The test CA's files, and the TLS-only PostgreSQL's `postgres`
/// database URL (host `localhost`, the only name its certificate has).
pub(crate) struct Tls {
    dir: PathBuf,
    postgres: String,
}

pub(crate) fn tls() -> Option<Tls> {
    let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var("LITELINK_TEST_TLS_DIR"), var("LITELINK_TEST_PG_TLS")) {
        (Some(dir), Some(postgres)) => Some(Tls {
            dir: dir.into(),
            postgres,
        }),
        _ => {
            missing(
                "the test CA and a PostgreSQL with TLS (LITELINK_TEST_TLS_DIR, \
                 LITELINK_TEST_PG_TLS; scripts/provision-tls)",
            );
            None
        }
    }
}

impl Tls {
    pub(crate) fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A new database on the TLS server, owned by `owner`: its URL for
    /// that user, with `host`, and no TLS parameter yet.
    pub(crate) fn fresh_db(&self, owner: &str, host: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("litelink_tls_{}_{n}", std::process::id());
        self.psql(&format!("CREATE DATABASE {name} OWNER {owner}"));
        let (server, _) = self.postgres.rsplit_once('/').expect("a database part");
        let server = server
            .replace("postgres@", &format!("{owner}@"))
            .replace("localhost", host);
        format!("{server}/{name}")
    }

    /// Runs `sql` on the TLS server with psql (libpq), as `postgres`.
    fn psql(&self, sql: &str) -> String {
        let url = format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            self.postgres,
            self.file("ca.crt")
        );
        psql(&url, sql)
    }
}

fn psql(url: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `litelink serve` with `args`: its process once it listens, or the
/// error with its log when it exits first.
fn serve(args: &[&str]) -> (tempfile::TempDir, Result<ServerProcess, String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let started = ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_litelink")),
        &dir.path().join("unused.db"),
        &args,
        None,
    )
    .map_err(|e| format!("{e:#}"));
    (dir, started)
}

fn refused(args: &[&str], says: &[&str]) {
    let (_dir, started) = serve(args);
    let Err(log) = started else {
        panic!("litelink started with {args:?}");
    };
    for needle in says {
        assert!(log.contains(needle), "{args:?}: no '{needle}' in\n{log}");
    }
}

/// How many of litelink's connections to `db` are open, and how many of
/// those use TLS (`pg_stat_ssl`).
pub(crate) fn litelink_connections(tls: &Tls, db_url: &str) -> (i64, i64) {
    let db = db_url
        .split('?')
        .next()
        .and_then(|u| u.rsplit('/').next())
        .expect("db");
    let row = tls.psql(&format!(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'litelink' AND a.datname = '{db}'"
    ));
    let (all, ssl) = row.split_once('|').expect("two columns");
    (all.parse().expect("count"), ssl.parse().expect("count"))
}

/// A link made and read back through `server`.
fn round_trip(server: &ServerProcess) {
    use std::io::{Read, Write};
    let body = r#"{"url":"https://example.com/over-tls"}"#;
    let mut s = std::net::TcpStream::connect(server.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "POST /link HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.addr,
        body.len()
    )
    .expect("write");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

/// Every `sslmode`, against a server that takes TLS connections only and
/// whose certificate names `localhost`: `disable` is refused (so it really
/// is plain), `prefer` and `require` encrypt and say they do not verify,
/// `verify-ca` checks the chain but not the name, `verify-full` both.
#[test]
fn postgres_in_every_sslmode() {
    let Some(tls) = tls() else { return };
    let (ca, other) = (tls.file("ca.crt"), tls.file("other-ca.crt"));
    let by_name = tls.fresh_db("postgres", "localhost");
    let by_address = by_name.replace("localhost", "127.0.0.1");

    refused(
        &["--store", &format!("{by_name}?sslmode=disable")],
        &["no encryption"],
    );
    for (url, warns) in [
        (by_name.clone(), true),
        (format!("{by_name}?sslmode=prefer"), true),
        (format!("{by_name}?sslmode=require"), true),
        (
            format!("{by_address}?sslmode=verify-ca&sslrootcert={ca}"),
            false,
        ),
        (
            format!("{by_name}?sslmode=verify-full&sslrootcert={ca}"),
            false,
        ),
        // libpq verifies the chain whenever a root certificate is given.
        (
            format!("{by_address}?sslmode=require&sslrootcert={ca}"),
            false,
        ),
    ] {
        let (_dir, started) = serve(&["--store", &url, "--cache", "none"]);
        let server = started.unwrap_or_else(|log| panic!("{url}: {log}"));
        round_trip(&server);
        let (all, ssl) = litelink_connections(&tls, &url);
        assert!(all > 0 && ssl == all, "{url}: {ssl} of {all} over TLS");
        let (_, log) = server.log();
        let said = log.iter().any(|l| l.contains("does not verify"));
        assert_eq!(said, warns, "{url}: {log:#?}");
        drop(server);
    }

    refused(
        &[
            "--store",
            &format!("{by_name}?sslmode=verify-ca&sslrootcert={other}"),
        ],
        &["refused the server's TLS certificate", "UnknownIssuer"],
    );
    refused(
        &[
            "--store",
            &format!("{by_address}?sslmode=verify-full&sslrootcert={ca}"),
        ],
        &["refused the server's TLS certificate", "not valid for name"],
    );
    refused(
        &[
            "--store",
            &format!("{by_name}?sslmode=require&sslrootcert={other}"),
        ],
        &["UnknownIssuer"],
    );
    // What litelink does not take is said before anything connects.
    refused(
        &["--store", &format!("{by_name}?sslmode=verify-full")],
        &["needs sslrootcert"],
    );
    refused(
        &[
            "--store",
            &format!("{by_name}?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt"),
        ],
        &["/nonexistent/ca.crt"],
    );
}

/// A user that signs in with a client certificate (`cert` in pg_hba.conf):
/// in with `sslcert` and `sslkey`, out without, and a key others may read
/// is refused before it is sent.
#[test]
fn postgres_client_certificates() {
    let Some(tls) = tls() else { return };
    let (ca, cert, key) = (
        tls.file("ca.crt"),
        tls.file("client.crt"),
        tls.file("client.key"),
    );
    let db = tls.fresh_db("litelink_cert", "localhost");
    let verified = format!("{db}?sslmode=verify-full&sslrootcert={ca}");
    let url = format!("{verified}&sslcert={cert}&sslkey={key}");
    let (_dir, started) = serve(&["--store", &url, "--cache", "none"]);
    let server = started.unwrap_or_else(|log| panic!("{log}"));
    round_trip(&server);
    let name = db.rsplit('/').next().expect("db");
    let users = tls.psql(&format!(
        "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = '{name}' AND application_name = 'litelink'"
    ));
    assert_eq!(users, "litelink_cert");
    drop(server);

    refused(&["--store", &verified], &["certificate"]);

    let loose = tempfile::tempdir().expect("tempdir");
    let loose_key = loose.path().join("client.key");
    std::fs::copy(&key, &loose_key).expect("copy the key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose_key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    refused(
        &[
            "--store",
            &format!("{verified}&sslcert={cert}&sslkey={}", loose_key.display()),
        ],
        &["chmod 600"],
    );
}

/// The replica and `doctor` connect with the same TLS settings as the
/// primary: a replica read over verified TLS, a wrong CA for the replica
/// alone stops the start, and doctor verifies as serve does.
#[tokio::test]
async fn replica_and_doctor_over_tls() {
    let Some(tls) = tls() else { return };
    let (ca, other) = (tls.file("ca.crt"), tls.file("other-ca.crt"));
    let (primary, replica) = crate::helpers::fresh_replicated_db().await;
    let bus = ValkeyServer::start();
    let verified = |url: &str, ca: &str| format!("{url}?sslmode=verify-ca&sslrootcert={ca}");
    let (p, r) = (verified(&primary, &ca), verified(&replica, &ca));
    let app = spawn_app(&[
        "--store",
        &p,
        "--postgres-read-url",
        &r,
        "--invalidations-url",
        &bus.url(),
    ])
    .await;
    let code = app.create_ok("https://example.com/replicated").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.get(&format!("/link/{code}")).await.status() != 200 {
        assert!(Instant::now() < deadline, "never read back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, replica_server) = replica_pair();
    let name = replica.rsplit('/').next().expect("db");
    let on_replica = psql(
        &format!("{replica_server}?sslmode=require"),
        &format!(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'litelink' AND a.datname = '{name}'"
        ),
    );
    let (all, ssl) = on_replica.split_once('|').expect("two columns");
    assert!(all != "0" && all == ssl, "replica: {ssl} of {all} over TLS");
    app.stop().await;

    refused(
        &[
            "--store",
            &p,
            "--postgres-read-url",
            &verified(&replica, &other),
            "--invalidations-url",
            &bus.url(),
        ],
        &["read replica", "UnknownIssuer"],
    );

    let doctor = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .args(["doctor", "--store", url])
            .output()
            .expect("doctor")
    };
    let db = tls.fresh_db("postgres", "localhost");
    let out = doctor(&format!("{db}?sslmode=verify-full&sslrootcert={ca}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("PostgreSQL version"));
    let out = doctor(&format!("{db}?sslmode=verify-full&sslrootcert={other}"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"));
    let out = doctor(&format!("{db}?sslmode=disable"));
    assert!(!out.status.success());
}

/// Two instances on one database, with the shared cache and the
/// invalidation channel on a Valkey over TLS verified with the test CA:
/// links are cached there (seen on its plain port), and an edit on one
/// instance reaches the other's in-process cache.
#[tokio::test]
async fn valkey_cache_and_invalidations_over_tls() {
    let Some(tls) = tls() else { return };
    let Some((valkey, port)) = ValkeyServer::start_tls(false) else {
        return;
    };
    let url = format!("rediss://localhost:{port}");
    let ca = tls.file("ca.crt");
    let store = crate::helpers::fresh_postgres_db().await;
    let args = [
        "--store",
        store.as_str(),
        "--cache",
        "tiered",
        "--valkey-url",
        &url,
        "--invalidations-url",
        &url,
        "--valkey-ca-file",
        &ca,
        "--valkey-prefix",
        "tls:",
    ];
    let (a, b) = tokio::join!(spawn_app(&args), spawn_app(&args));
    let key = a.new_key("k", false).await;
    let admin = a.new_key("admin", true).await;
    for app in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = app.api(Method::GET, "/stats", Some(&admin), None).await;
            let s: Value = r.json().await.expect("stats");
            if s["invalidations"]["subscribed"] == true {
                break;
            }
            assert!(Instant::now() < deadline, "never subscribed: {s}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let r = a
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&key),
            Some(json!({"url": "https://example.com/v1", "code": "tls-page"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(b.get("/tls-page").await.status(), 302);
    let cached: Vec<String> = redis::cmd("KEYS")
        .arg("tls:*")
        .query(&mut valkey.connection())
        .expect("KEYS");
    assert!(!cached.is_empty(), "nothing cached over TLS");
    let r = a
        .api(
            Method::PATCH,
            "/api/v1/links/tls-page",
            Some(&key),
            Some(json!({"url": "https://example.com/v2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body: Value = b.get("/link/tls-page").await.json().await.expect("json");
        if body["link"] == "https://example.com/v2" {
            break;
        }
        assert!(Instant::now() < deadline, "the edit never reached b");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = b.api(Method::GET, "/stats", Some(&admin), None).await;
    let s: Value = r.json().await.expect("stats");
    assert_eq!(s["cache"]["valkey"]["errors"], 0, "{s}");
    assert!(s["invalidations"]["received"].as_u64() > Some(0), "{s}");
    a.stop().await;
    b.stop().await;
}

/// What is refused: a certificate from another CA or for another name (the
/// cache falls through to the store and the log says why; the invalidation
/// channel, which must be heard, stops the start), `#insecure`, and
/// certificate files for a plain `redis://` URL.
#[test]
fn valkey_refusals() {
    let Some(tls) = tls() else { return };
    let Some((_valkey, port)) = ValkeyServer::start_tls(false) else {
        return;
    };
    let (ca, other) = (tls.file("ca.crt"), tls.file("other-ca.crt"));
    for (host, ca, says) in [
        ("localhost", other.as_str(), "UnknownIssuer"),
        ("127.0.0.1", ca.as_str(), "not valid for name"),
    ] {
        let url = format!("rediss://{host}:{port}");
        let args = [
            "--cache",
            "valkey",
            "--valkey-url",
            &url,
            "--valkey-ca-file",
            ca,
        ];
        let (_dir, started) = serve(&args);
        let server = started.unwrap_or_else(|log| panic!("{log}"));
        // Served from the store all the same.
        round_trip(&server);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, log) = server.log();
            if log.iter().any(|l| l.contains(says)) {
                break;
            }
            assert!(Instant::now() < deadline, "{url}: no '{says}' in {log:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let stats = server.stats().expect("stats");
        assert_eq!(stats["cache"]["valkey"]["hits"], 0, "{stats}");
        refused(
            &["--invalidations-url", &url, "--valkey-ca-file", ca],
            &[says],
        );
    }
    refused(
        &[
            "--cache",
            "valkey",
            "--valkey-url",
            &format!("rediss://localhost:{port}/#insecure"),
        ],
        &["#insecure"],
    );
    refused(
        &[
            "--invalidations-url",
            &format!("rediss://localhost:{port}#insecure"),
        ],
        &["#insecure"],
    );
    refused(
        &[
            "--cache",
            "valkey",
            "--valkey-url",
            "redis://127.0.0.1:6379",
            "--valkey-ca-file",
            &ca,
        ],
        &["not a rediss:// URL"],
    );
}

/// A Valkey that asks for client certificates: without one nothing is
/// cached; with `--valkey-cert-file` and `--valkey-key-file`, the cache
/// and the invalidation channel work.
#[tokio::test]
async fn valkey_client_certificates() {
    let Some(tls) = tls() else { return };
    let Some((valkey, port)) = ValkeyServer::start_tls(true) else {
        return;
    };
    let url = format!("rediss://localhost:{port}");
    let (ca, cert, key) = (
        tls.file("ca.crt"),
        tls.file("client.crt"),
        tls.file("client.key"),
    );
    refused(
        &["--invalidations-url", &url, "--valkey-ca-file", &ca],
        &["invalidation channel"],
    );
    let app = spawn_app(&[
        "--cache",
        "valkey",
        "--valkey-url",
        &url,
        "--invalidations-url",
        &url,
        "--valkey-ca-file",
        &ca,
        "--valkey-cert-file",
        &cert,
        "--valkey-key-file",
        &key,
        "--valkey-prefix",
        "mtls:",
    ])
    .await;
    let code = app.create_ok("https://example.com/mutual").await;
    assert_eq!(app.get(&format!("/{code}")).await.status(), 302);
    let cached: Vec<String> = redis::cmd("KEYS")
        .arg("mtls:*")
        .query(&mut valkey.connection())
        .expect("KEYS");
    assert!(!cached.is_empty(), "nothing cached over mutual TLS");
    let s = app.stats().await;
    assert_eq!(s["cache"]["valkey"]["errors"], 0, "{s}");
    assert_eq!(s["invalidations"]["subscribed"], true, "{s}");
    app.stop().await;
}

/// A Valkey Cluster over TLS (clients and the cluster bus): the cache
/// reaches every node by `rediss://`, verified with the test CA, and the
/// links land on several nodes.
#[tokio::test]
async fn valkey_cluster_over_tls() {
    let Some(tls) = tls() else { return };
    let Some(cluster) = ValkeyCluster::start_tls() else {
        return;
    };
    let urls: Vec<String> = cluster
        .tls_ports
        .iter()
        .map(|p| format!("rediss://localhost:{p}"))
        .collect();
    let ca = tls.file("ca.crt");
    let app = spawn_app(&[
        "--cache",
        "valkey",
        "--valkey-url",
        &urls.join(","),
        "--valkey-ca-file",
        &ca,
        "--valkey-prefix",
        "ctls:",
    ])
    .await;
    let mut codes = Vec::new();
    for i in 0..30 {
        codes.push(app.create_ok(&format!("https://example.com/{i}")).await);
    }
    for code in &codes {
        assert_eq!(app.get(&format!("/{code}")).await.status(), 302);
    }
    let per_node = cluster.keys_per_node("ctls:");
    assert!(
        per_node.iter().sum::<usize>() >= codes.len()
            && per_node.iter().filter(|n| **n > 0).count() >= 2,
        "{per_node:?}"
    );
    let s = app.stats().await;
    assert_eq!(s["cache"]["valkey"]["errors"], 0, "{s}");
    assert!(
        s["cache"]["valkey"]["hits"].as_u64() >= Some(codes.len() as u64),
        "{s}"
    );
    app.stop().await;
}
