//! `spawn_app` starts litelink in this process on 127.0.0.1:0; `spawn_process`
//! runs the built binary as a child, for what needs a process of its own
//! (MEMSTATUS on, kill -9).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use litelink_lab::cli::{LabCli, LabCommand};
use litelink_lab::process::ServerProcess;
use litelink_service::{Application, Settings};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// `GET {base}/stats` of a server that serves it without a key.
pub async fn stats_at(base: &str) -> Value {
    client()
        .get(format!("{base}/stats"))
        .send()
        .await
        .expect("GET /stats")
        .json()
        .await
        .expect("/stats is JSON")
}

/// A piece of the machine a test needs is missing (a tmpfs mount, a lower
/// file limit): under `scripts/test`, which provides it, that is a failure
/// (`LITELINK_TEST_STRICT`); elsewhere the test says so and passes.
pub fn missing(what: &str) {
    if std::env::var_os("LITELINK_TEST_STRICT").is_some_and(|v| v != "0") {
        panic!("{what}: scripts/test provides this, so its absence is a failure");
    }
    eprintln!("SKIPPED: {what}");
}

/// Parses arguments exactly as the binary does, so tests run the same
/// configuration path as users; the lab's switches (`--hot-path off`, ...)
/// are read as `litelink-lab serve` reads them.
pub fn settings(db: &Path, extra: &[&str]) -> Settings {
    let mut argv = vec![
        "litelink-lab".to_owned(),
        "serve".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--db".to_owned(),
        db.display().to_string(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    match LabCli::try_parse_from(argv).expect("arguments").command {
        LabCommand::Serve(a) => a.settings(),
        other => panic!("not serve: {other:?}"),
    }
}

/// The answer to one of several concurrent creates.
pub struct Created {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
    /// The URL that was sent.
    pub target: String,
}

impl Created {
    pub fn code(&self) -> &str {
        self.body["short_link"].as_str().expect("short_link")
    }
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    pub db: PathBuf,
    /// The PostgreSQL database the app keeps its links in, if not `db`.
    pub store: Option<String>,
    dir: Option<TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    admin: std::sync::Mutex<Option<String>>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

/// Starts a server on a fresh database with extra command-line options.
pub async fn spawn_app(extra: &[&str]) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("litelink.db");
    let mut app = spawn_app_on(&db, extra).await;
    app.dir = Some(dir);
    app
}

/// Starts a server on an existing (or new) database file.
pub async fn spawn_app_on(db: &Path, extra: &[&str]) -> TestApp {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let app = Application::build(settings(db, extra))
        .await
        .expect("the service builds");
    let addr = app.addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    let app = TestApp {
        addr,
        client: client(),
        db: db.to_path_buf(),
        store: extra
            .windows(2)
            .find(|w| w[0] == "--store")
            .map(|w| w[1].to_owned()),
        dir: None,
        shutdown: Some(tx),
        admin: Default::default(),
        handle: Some(handle),
    };
    app.wait_ready().await;
    app
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    async fn wait_ready(&self) {
        for _ in 0..200 {
            if let Ok(r) = self.client.get(self.url("/heart-beat")).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("server at {} never became ready", self.addr);
    }

    pub async fn create(&self, url: &str) -> reqwest::Response {
        self.client
            .post(self.url("/link"))
            .json(&json!({ "url": url }))
            .send()
            .await
            .expect("POST /link")
    }

    /// Creates a link and returns its code, asserting the 201.
    pub async fn create_ok(&self, url: &str) -> String {
        let r = self.create(url).await;
        assert_eq!(r.status(), 201, "create {url}");
        let body: Value = r.json().await.expect("json");
        body["short_link"].as_str().expect("short_link").to_owned()
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("GET")
    }

    /// Starts `n` creates at once, for `https://example.com/{label}/{i}`,
    /// and returns their tasks, so a test can act while they are in flight.
    pub fn spawn_creates(&self, label: &str, n: usize) -> Vec<JoinHandle<Created>> {
        (0..n)
            .map(|i| {
                let (client, url) = (self.client.clone(), self.url("/link"));
                let target = format!("https://example.com/{label}/{i}");
                tokio::spawn(async move {
                    let r = client
                        .post(url)
                        .json(&json!({ "url": target }))
                        .send()
                        .await
                        .expect("POST /link");
                    let status = r.status().as_u16();
                    let retry_after = r
                        .headers()
                        .get("retry-after")
                        .map(|v| v.to_str().unwrap_or("").to_owned());
                    let body: Value = r.json().await.expect("JSON answer");
                    Created {
                        status,
                        retry_after,
                        body,
                        target,
                    }
                })
            })
            .collect()
    }

    /// `n` concurrent creates; every answer, in order.
    pub async fn create_concurrently(&self, label: &str, n: usize) -> Vec<Created> {
        let mut out = Vec::with_capacity(n);
        for t in self.spawn_creates(label, n) {
            out.push(t.await.expect("create task"));
        }
        out
    }

    /// Holds the database's write lock from another connection, as another
    /// process would: the writer waits in its busy handler until it is let go.
    pub fn hold_write_lock(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(&self.db).expect("open");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("BEGIN IMMEDIATE");
        conn
    }

    /// Runs `litelink keys ARGS` on this app's store.
    pub fn run_keys(&self, args: &[&str], admin: bool) -> String {
        run_keys_like(&self.db, &self.store, args, admin)
    }

    /// Makes an API key with `litelink keys create`, as an operator would
    /// beside the running server, and waits until the server accepts it.
    pub async fn new_key(&self, name: &str, admin: bool) -> String {
        let key = match &self.store {
            Some(url) => run_keys_on(&["--store", url], &["create", "--name", name], admin),
            None => run_keys(&self.db, &["create", "--name", name], admin),
        };
        if admin {
            let mut first = self.admin.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| key.clone());
        }
        self.wait_for_key(&key).await;
        key
    }

    /// Waits until this server accepts `key` (servers read the keys of
    /// their store again every second).
    pub async fn wait_for_key(&self, key: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let r = self
                .api(
                    reqwest::Method::GET,
                    "/api/v1/links?limit=1",
                    Some(key),
                    None,
                )
                .await;
            if r.status() == 200 {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "key never accepted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A request to the management API, with `key` as a Bearer token.
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut r = self.client.request(method, self.url(path));
        if let Some(key) = key {
            r = r.bearer_auth(key);
        }
        if let Some(body) = body {
            r = r.json(&body);
        }
        r.send().await.expect("request")
    }

    /// `/stats`, with the first admin key this test made, if any (once
    /// keys exist, `/stats` needs one); if the test made only user keys, one admin key is made for it.
    pub async fn stats(&self) -> Value {
        let admin = self.admin.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut r = self
            .api(reqwest::Method::GET, "/stats", admin.as_deref(), None)
            .await;
        if r.status() == 401 && admin.is_none() {
            let admin = self.new_key("stats-reader", true).await;
            r = self
                .api(reqwest::Method::GET, "/stats", Some(&admin), None)
                .await;
        }
        assert_eq!(r.status(), 200, "/stats");
        r.json().await.expect("stats json")
    }

    /// Graceful shutdown; returns the directory so the database outlives it.
    pub async fn stop(mut self) -> Option<TempDir> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.expect("server task").expect("server result");
        }
        self.dir.take()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Asserts a JSON error response: its status and that the message says
/// something containing `needle`.
pub async fn assert_error(r: reqwest::Response, status: u16, needle: &str) {
    assert_eq!(r.status(), status, "status");
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    let body: Value = r.json().await.expect("json error body");
    let msg = body["error"].as_str().expect("error field");
    assert!(
        msg.to_lowercase().contains(&needle.to_lowercase()),
        "error '{msg}' should mention '{needle}'"
    );
}

/// The built binary as a child process, on a free port.
pub fn spawn_process(db: &Path, extra: &[&str]) -> ServerProcess {
    let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_litelink")), db, &args, None)
        .expect("litelink server process")
}

/// Runs `litelink keys ARGS --db DB` and returns its standard output.
pub fn run_keys(db: &Path, args: &[&str], admin: bool) -> String {
    let db = db.display().to_string();
    run_keys_on(&["--db", &db], args, admin)
}

/// Runs `litelink keys ARGS STORE` (`--db PATH` or `--store URL`).
pub fn run_keys_on(store: &[&str], args: &[&str], admin: bool) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"));
    cmd.arg("keys").args(args).args(store);
    if admin {
        cmd.arg("--admin");
    }
    let out = cmd.output().expect("litelink keys");
    assert!(
        out.status.success(),
        "keys {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// What creating workers heard: 201s (code -> target) and every other answer.
#[derive(Default)]
pub struct Answers {
    pub acked: std::collections::HashMap<String, String>,
    pub refused: Vec<(u16, Value)>,
}

/// `workers` tasks that each create `https://example.com/{label}/{w}/{i}`
/// in a loop (at most 100,000 each) until the server stops answering.
pub fn create_until_gone(
    base: &str,
    workers: usize,
    label: &str,
    answers: std::sync::Arc<std::sync::Mutex<Answers>>,
) -> Vec<JoinHandle<()>> {
    (0..workers)
        .map(|w| {
            let url = format!("{base}/link");
            let label = label.to_owned();
            let answers = std::sync::Arc::clone(&answers);
            tokio::spawn(async move {
                let client = client();
                for i in 0..100_000u32 {
                    let target = format!("https://example.com/{label}/{w}/{i}");
                    let Ok(r) = client
                        .post(&url)
                        .json(&json!({ "url": target }))
                        .send()
                        .await
                    else {
                        return;
                    };
                    let status = r.status().as_u16();
                    let Ok(body) = r.json::<Value>().await else {
                        return;
                    };
                    let mut a = answers.lock().expect("answers");
                    match body["short_link"].as_str() {
                        Some(code) if status == 201 => {
                            a.acked.insert(code.to_owned(), target);
                        }
                        _ => a.refused.push((status, body)),
                    }
                }
            })
        })
        .collect()
}

/// Creates a link on a server process with the seed API; returns its code.
pub async fn create_code(base: &str) -> String {
    let r = client()
        .post(format!("{base}/link"))
        .json(&json!({ "url": "https://example.com/counted" }))
        .send()
        .await
        .expect("POST /link");
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.expect("json");
    body["short_link"].as_str().expect("short_link").to_owned()
}

/// Where a test's links live: each store runs the same test body
/// (`on_both_stores!`).
#[derive(Debug, Clone, Copy)]
pub enum Store {
    /// A fresh SQLite file for every app.
    Sqlite,
    /// A fresh database on the test PostgreSQL server for every app.
    Postgres,
}

/// [`spawn_app`] with its links in a fresh database of `store`.
pub async fn spawn_app_in(store: &Store, extra: &[&str]) -> TestApp {
    match store {
        Store::Sqlite => spawn_app(extra).await,
        Store::Postgres => {
            let url = fresh_postgres_db().await;
            let mut args = vec!["--store", url.as_str()];
            args.extend_from_slice(extra);
            spawn_app(&args).await
        }
    }
}

/// Starts an app again on the links of one that stopped: its SQLite file
/// `db`, or its PostgreSQL database `store`.
pub async fn spawn_app_like(db: &Path, store: &Option<String>, extra: &[&str]) -> TestApp {
    match store {
        None => spawn_app_on(db, extra).await,
        Some(url) => {
            let mut args = vec!["--store", url.as_str()];
            args.extend_from_slice(extra);
            spawn_app_on(db, &args).await
        }
    }
}

/// [`run_keys`] on the store of an app that may have stopped.
pub fn run_keys_like(db: &Path, store: &Option<String>, args: &[&str], admin: bool) -> String {
    match store {
        None => run_keys(db, args, admin),
        Some(url) => run_keys_on(&["--store", url], args, admin),
    }
}

/// The server `scripts/test` provides (`scripts/provision-postgres`).
fn postgres_base() -> String {
    std::env::var("LITELINK_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Creates an empty database named for this test process and returns its
/// URL; `scripts/test` drops every `litelink_test_*` database afterwards.
pub async fn fresh_postgres_db() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = postgres_base();
    let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} (LITELINK_TEST_POSTGRES): {e}"));
    let task = tokio::spawn(connection);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("litelink_test_{}_{n}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        client
            .batch_execute(&sql)
            .await
            .expect("create the test database");
    }
    drop(client);
    let _ = task.await;
    match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("LITELINK_TEST_POSTGRES has no database part: {base}"),
    }
}

/// Runs one test body on each store: `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! on_both_stores {
    ($(#[$meta:meta])* async fn $name:ident($store:ident: Store) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::helpers::Store;

            async fn run($store: Store) $body

            #[tokio::test]
            async fn sqlite() {
                run(Store::Sqlite).await
            }

            #[tokio::test]
            async fn postgres() {
                run(Store::Postgres).await
            }
        }
    };
}

/// The private primary and its streaming replica that scripts/test makes
/// (`scripts/provision-replica`).
pub fn replica_pair() -> (String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run the tests through scripts/test, which makes a primary and a replica")
        })
    };
    (
        var("LITELINK_TEST_PG_PRIMARY"),
        var("LITELINK_TEST_PG_REPLICA"),
    )
}

/// A fresh database on the private primary, once its replica has it too:
/// its URL on each.
pub async fn fresh_replicated_db() -> (String, String) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let (primary, replica) = replica_pair();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("litelink_repl_{}_{n}", std::process::id());
    let (client, connection) = tokio_postgres::connect(&primary, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("the test primary at {primary}: {e}"));
    let task = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create the database");
    drop(client);
    let _ = task.await;
    let on = |url: &str| match url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("no database part in {url}"),
    };
    let (primary_db, replica_db) = (on(&primary), on(&replica));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tokio_postgres::connect(&replica_db, tokio_postgres::NoTls)
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never reached the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (primary_db, replica_db)
}

/// A TCP relay from a free local port to `to`, which can be cut (every
/// connection closed, nothing accepted) and restored on the same port:
/// a network outage between litelink and a server.
pub struct Relay {
    pub port: u16,
    to: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Relay {
    pub async fn start(to: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut relay = Self {
            port,
            to,
            task: None,
        };
        relay.task = Some(tokio::spawn(Self::serve(listener, to)));
        relay
    }

    async fn serve(listener: tokio::net::TcpListener, to: SocketAddr) {
        let mut tasks = tokio::task::JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            tasks.spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }

    /// Closes every relayed connection and stops accepting.
    pub fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            // Dropping the JoinSet with the task aborts every connection.
            task.abort();
        }
    }

    /// Accepts again, on the same port.
    pub async fn restore(&mut self) {
        self.cut();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(std::time::Instant::now() < deadline, "rebind: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.task = Some(tokio::spawn(Self::serve(listener, self.to)));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Runs `litelink ARGS` on a store; `expect_ok` asserts success.
pub fn run_on(
    store: &Option<String>,
    db: &std::path::Path,
    args: &[&str],
    expect_ok: bool,
) -> (bool, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"));
    cmd.args(args);
    match store {
        Some(url) => cmd.args(["--store", url]),
        None => cmd.arg("--db").arg(db),
    };
    let out = cmd.output().expect("litelink");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    if expect_ok {
        assert!(out.status.success(), "{args:?}: {said}");
    }
    (out.status.success(), said)
}
