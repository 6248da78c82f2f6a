//! The shared tier: Valkey (or Redis) over RESP.
//!
//! Every call is bounded by a short timeout, and after a failure the tier is
//! skipped for a moment (a small circuit breaker), so a slow or dead Valkey
//! costs a request at most one timeout and usually nothing: the lookup falls
//! through to SQLite. redis-rs's `ConnectionManager` reconnects in the
//! background, so hits come back by themselves when Valkey does.
//!
//! A Valkey Cluster works too (`--valkey-url` naming several nodes, or
//! `--valkey-cluster`): redis-rs's cluster client sends each key to the
//! primary that holds its slot, and a DEL of keys in several slots to each.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::AsyncCommands;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use serde::Serialize;

use super::{CacheMode, CacheStats, LinkCache, Lookup};
use std::collections::HashSet;
use std::sync::atomic::AtomicBool;

use crate::domain::{LinkKey, Resolved, TargetUrl, Timestamp};
use crate::store::ExtraColumns;
use crate::tls;
use redis::{ClientTlsConfig, TlsCertificates};
use std::path::PathBuf;

/// Stored for a code the store does not have. A real target is never empty.
const MISSING: &str = "";

/// Invalidations kept to apply once Valkey is back; past this many, the
/// whole key prefix is dropped instead.
const MAX_PENDING: usize = 100_000;

/// Bound on dropping the whole prefix (a SCAN over every key).
const DROP_ALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the tier is skipped after a failure before it is tried again.
const BACKOFF: Duration = Duration::from_millis(500);

/// At most one error log line per this period; the rest are counted.
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct ValkeySettings {
    /// One server, or nodes of a cluster separated by commas.
    pub url: String,
    /// A cluster even when `url` names one node (a seed of the cluster).
    pub cluster: bool,
    /// Prefix of every key litelink writes.
    pub prefix: String,
    /// Expiry of cached links; `None` keeps them until evicted.
    pub ttl: Option<Duration>,
    /// Bound on each cache call.
    pub timeout: Duration,
    /// Certificates for `rediss://` servers.
    pub tls: ValkeyTls,
}

/// Certificates for `rediss://` connections: the cache's and the
/// invalidation channel's. Without a CA file the system's CAs verify the
/// server; there is no way to skip verifying it.
#[derive(Debug, Clone, Default)]
pub struct ValkeyTls {
    /// CA certificates (PEM) to verify the server with, instead of the
    /// system's: for a private CA.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for a server that asks.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl ValkeyTls {
    fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    /// The files, read now, as redis-rs takes them.
    fn certificates(&self) -> Result<TlsCertificates, ValkeyError> {
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: tls::read_certificates_pem(cert, "client certificate")?,
                client_key: tls::read_key_pem(key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(ValkeyError::Tls(
                    "--valkey-cert-file and --valkey-key-file go together".into(),
                ));
            }
        };
        let root_cert = match &self.ca_file {
            Some(path) => {
                tls::read_roots(path)?;
                Some(tls::read_certificates_pem(path, "CA file")?)
            }
            None => None,
        };
        Ok(TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// Why `url` cannot name a Valkey server litelink will talk to, if it
/// cannot: redis-rs's `#insecure` would take any certificate.
fn check_url(url: &str) -> Result<(), ValkeyError> {
    if url.contains('#') {
        return Err(ValkeyError::Tls(format!(
            "{}: no fragment is taken (#insecure would not verify the server; give its CA with --valkey-ca-file)",
            redact(url)
        )));
    }
    Ok(())
}

/// Bound on the first PING, made at start to say why Valkey cannot be
/// reached (a certificate refused, a connection refused) before any
/// request meets it.
const FIRST_PING: Duration = Duration::from_secs(5);

/// Pings Valkey in the background until it answers, for at most
/// [`FIRST_PING`], and logs why it never did: the first error that is not
/// a timeout (a refused certificate says more than the timeouts of the
/// retries behind it). Later failures are counted, and logged at most
/// every 10 s.
fn probe(mut conn: Conn, url: String) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let deadline = tokio::time::Instant::now() + FIRST_PING;
        let mut why: Option<redis::RedisError> = None;
        let ping = redis::cmd("PING");
        loop {
            match tokio::time::timeout_at(deadline, ping.query_async::<String>(&mut conn)).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => {
                    if why.as_ref().is_none_or(|w| w.is_timeout()) {
                        why = Some(e);
                    }
                }
                Err(_) => break,
            }
            if tokio::time::Instant::now() + Duration::from_millis(200) >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        match why {
            Some(e) => tracing::error!(
                url,
                "Valkey cannot be reached; serving from the store until it can: {e}"
            ),
            None => tracing::error!(
                url,
                "Valkey did not answer within {FIRST_PING:?}; serving from the store until it does"
            ),
        }
    });
}

fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

/// A client of the server at `url`, over TLS with `tls`'s certificates for
/// a `rediss://` URL. Certificate files given for a plain `redis://` URL
/// are an error: whoever gave them expects TLS.
pub(crate) fn client(url: &str, tls: &ValkeyTls) -> Result<redis::Client, ValkeyError> {
    check_url(url)?;
    let url_error = |source| ValkeyError::Url {
        url: redact(url),
        source,
    };
    if !is_tls(url) {
        if tls.is_set() {
            return Err(ValkeyError::Tls(format!(
                "certificate files are given, but {} is not a rediss:// URL",
                redact(url)
            )));
        }
        return redis::Client::open(url).map_err(url_error);
    }
    tls::provider();
    redis::Client::build_with_tls(url, tls.certificates()?).map_err(url_error)
}

impl Default for ValkeySettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            prefix: "litelink:".into(),
            ttl: Some(Duration::from_secs(86_400)),
            timeout: Duration::from_millis(50),
            tls: ValkeyTls::default(),
        }
    }
}

/// `/stats` of the Valkey tier.
#[derive(Debug, Clone, Serialize)]
pub struct ValkeyStats {
    /// The server's URL (or the cluster's nodes) without its password.
    pub url: String,
    pub cluster: bool,
    pub hits: u64,
    pub negative_hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub skipped: u64,
    /// Invalidations not yet applied in Valkey; while there are any,
    /// nothing is read from Valkey.
    pub pending_invalidations: u64,
}

/// Invalidations that failed (Valkey down or slow): until they are
/// applied, Valkey may hold a target that was changed or deleted, so it is
/// not read at all.
#[derive(Default)]
struct Pending {
    codes: HashSet<LinkKey>,
    /// Too many to keep: drop every key under the prefix instead.
    drop_all: bool,
}

/// One server through a connection manager, or a cluster through the
/// cluster client; either takes any command.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Deletes every key matching `pattern`: SCAN on the server, or on
    /// each primary of the cluster (a SCAN cursor belongs to one node).
    async fn delete_matching(self, pattern: String) -> redis::RedisResult<()> {
        match self {
            Conn::Single(_) => scan_delete(self, None, &pattern).await,
            Conn::Cluster(ref c) => {
                let mut c = c.clone();
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut c)
                    .await?;
                for (host, port) in cluster_primaries(&nodes) {
                    scan_delete(Conn::Cluster(c.clone()), Some((host, port)), &pattern).await?;
                }
                Ok(())
            }
        }
    }
}

/// The primaries of `CLUSTER NODES`' answer, as (host, port).
fn cluster_primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            // ip:port@cport[,hostname]
            let hostport = address.split('@').next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// SCAN + DEL over one node: the connection's only server (`node`
/// `None`), or the cluster's node at `node`.
async fn scan_delete(
    mut c: Conn,
    node: Option<(String, u16)>,
    pattern: &str,
) -> redis::RedisResult<()> {
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<String>) = match (&mut c, &node) {
            (Conn::Cluster(cluster), Some((host, port))) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                redis::from_redis_value(cluster.route_command(scan, routing).await?)?
            }
            _ => scan.query_async(&mut c).await?,
        };
        if !keys.is_empty() {
            // The cluster client splits a DEL by slot.
            redis::cmd("DEL")
                .arg(keys)
                .query_async::<()>(&mut c)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

pub struct ValkeyCache {
    conn: Conn,
    config: ValkeySettings,
    /// Expiry of "no such code" entries; zero disables them.
    negative_ttl: Duration,
    started: Instant,
    /// Milliseconds since `started` until which the tier is skipped.
    skip_until_ms: AtomicU64,
    counters: Counters,
    log: Mutex<LogLimiter>,
    pending: Mutex<Pending>,
    /// Set while `pending` holds anything: read on every lookup, so an
    /// atomic rather than the lock.
    dirty: AtomicBool,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    negative_hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    skipped: AtomicU64,
}

struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ValkeyError {
    #[error("invalid Valkey URL '{url}': {source}")]
    Url {
        url: String,
        source: redis::RedisError,
    },
    #[error("cannot create the Valkey connection manager: {0}")]
    Manager(redis::RedisError),
    #[error("TLS to Valkey: {0}")]
    Tls(String),
    #[error("TLS to Valkey: {0}")]
    Files(#[from] tls::TlsError),
}

enum CallError {
    Timeout,
    Valkey(redis::RedisError),
}

impl ValkeyCache {
    /// Connects lazily: litelink starts, and serves from SQLite, even when
    /// Valkey is not up yet.
    pub(crate) fn new(config: ValkeySettings, negative_ttl: Duration) -> Result<Self, ValkeyError> {
        let nodes = config.nodes();
        let connect_timeout = config.timeout.max(Duration::from_millis(200));
        let url_error = |source| ValkeyError::Url {
            url: redact(&config.url),
            source,
        };
        let conn = if config.is_cluster() {
            for node in &nodes {
                check_url(node)?;
            }
            let mut builder = redis::cluster::ClusterClient::builder(nodes.clone());
            if nodes.iter().any(|n| is_tls(n)) {
                tls::provider();
                builder = builder.certs(config.tls.certificates()?);
            } else if config.tls.is_set() {
                return Err(ValkeyError::Tls(
                    "certificate files are given, but the cluster's URLs are not rediss://".into(),
                ));
            }
            let client = builder
                .connection_timeout(connect_timeout)
                .response_timeout(config.timeout)
                .retries(2)
                .build()
                .map_err(url_error)?;
            let cluster_config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(connect_timeout)
                .set_response_timeout(config.timeout);
            // Connects in the background, as the manager below does.
            Conn::Cluster(client.get_pending_async_connection_with_config(cluster_config))
        } else {
            let client = client(&config.url, &config.tls)?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(config.timeout))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_secs(1));
            Conn::Single(
                ConnectionManager::new_lazy_with_config(client, manager_config)
                    .map_err(ValkeyError::Manager)?,
            )
        };
        probe(conn.clone(), redact(&config.url));
        Ok(Self {
            conn,
            config,
            negative_ttl,
            started: Instant::now(),
            skip_until_ms: AtomicU64::new(0),
            counters: Counters::default(),
            log: Mutex::new(LogLimiter {
                last: None,
                suppressed: 0,
            }),
            pending: Mutex::new(Pending::default()),
            dirty: AtomicBool::new(false),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers an invalidation that could not be applied.
    fn defer(&self, code: &LinkKey) {
        let mut p = self.pending();
        if !p.drop_all {
            p.codes.insert(code.clone());
            if p.codes.len() > MAX_PENDING {
                p.codes.clear();
                p.drop_all = true;
            }
        }
        self.dirty.store(true, Ordering::Release);
    }

    /// Tries to apply the deferred invalidations; true once none is left.
    async fn apply_pending(&self) -> bool {
        let (codes, drop_all) = {
            let p = self.pending();
            let codes: Vec<LinkKey> = p.codes.iter().take(1000).cloned().collect();
            (codes, p.drop_all)
        };
        if drop_all {
            let pattern = format!("{}*", self.config.prefix);
            let dropped = self
                .call_within("SCAN+DEL", DROP_ALL_TIMEOUT, |c| c.delete_matching(pattern))
                .await;
            if dropped.is_none() {
                return false;
            }
            self.pending().drop_all = false;
        } else if !codes.is_empty() {
            let keys: Vec<String> = codes.iter().map(|c| self.key(c)).collect();
            let deleted = self
                .call("DEL", |mut c| async move { c.del::<_, ()>(keys).await })
                .await;
            if deleted.is_none() {
                return false;
            }
            let mut p = self.pending();
            for c in &codes {
                p.codes.remove(c);
            }
        }
        let p = self.pending();
        let clean = p.codes.is_empty() && !p.drop_all;
        if clean {
            self.dirty.store(false, Ordering::Release);
        }
        clean
    }

    /// Whether Valkey may be used: no invalidation is left to apply.
    async fn consistent(&self) -> bool {
        !self.dirty.load(Ordering::Acquire) || self.apply_pending().await
    }

    fn key(&self, code: &LinkKey) -> String {
        format!("{}{}", self.config.prefix, code.wire())
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Runs one command under the timeout and the circuit breaker. `None`
    /// means the tier could not answer; the failure is counted and logged.
    async fn call<T, F>(&self, what: &'static str, f: impl FnOnce(Conn) -> F) -> Option<T>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        self.call_within(what, self.config.timeout, f).await
    }

    async fn call_within<T, F>(
        &self,
        what: &'static str,
        timeout: Duration,
        f: impl FnOnce(Conn) -> F,
    ) -> Option<T>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        if self.now_ms() < self.skip_until_ms.load(Ordering::Relaxed) {
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let outcome = match tokio::time::timeout(timeout, f(self.conn.clone())).await {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(e)) => CallError::Valkey(e),
            Err(_) => CallError::Timeout,
        };
        self.skip_until_ms.store(
            self.now_ms() + BACKOFF.as_millis() as u64,
            Ordering::Relaxed,
        );
        let message = match outcome {
            CallError::Timeout => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                format!("timed out after {:?}", self.config.timeout)
            }
            // The client's own response timeout is the same event as ours.
            CallError::Valkey(e) if e.is_timeout() => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                e.to_string()
            }
            CallError::Valkey(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                e.to_string()
            }
        };
        self.log_failure(what, &message);
        None
    }

    fn log_failure(&self, what: &str, message: &str) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let due = log.last.is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due {
            tracing::warn!(
                op = what,
                error = message,
                suppressed = log.suppressed,
                request_id = %crate::observability::logging::request_id(),
                "Valkey cache unavailable; serving from the store (skipping Valkey for {BACKOFF:?})"
            );
            log.last = Some(Instant::now());
            log.suppressed = 0;
        } else {
            log.suppressed += 1;
        }
    }

    async fn set(&self, code: &LinkKey, value: &str, ttl: Option<Duration>) {
        let key = self.key(code);
        let value = value.to_owned();
        self.call("SET", |mut c| async move {
            match ttl {
                Some(ttl) => {
                    c.pset_ex::<_, _, ()>(key, value, ttl.as_millis().max(1) as u64)
                        .await
                }
                None => c.set::<_, _, ()>(key, value).await,
            }
        })
        .await;
    }

    pub(super) fn counters(&self) -> ValkeyStats {
        let c = &self.counters;
        ValkeyStats {
            url: redact(&self.config.url),
            cluster: self.config.is_cluster(),
            hits: c.hits.load(Ordering::Relaxed),
            negative_hits: c.negative_hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            pending_invalidations: {
                let p = self.pending();
                if p.drop_all {
                    MAX_PENDING as u64
                } else {
                    p.codes.len() as u64
                }
            },
        }
    }
}

/// A link as stored in Valkey: the target, after `~MILLIS ` when it
/// expires and `#MAX ` when its visits are limited (in that order), all
/// after `!{JSON}` and a newline when it has a password, rules or an
/// expired target (the JSON's strings escape newlines, so it has none).
/// Targets start with `http`, so the parts never mix; an entry without the
/// prefixes is what earlier versions wrote.
fn encode(link: &Resolved) -> String {
    let mut out = String::with_capacity(link.target.as_str().len() + 24);
    if let Some(extra) = &link.extra {
        let columns = ExtraColumns::of(Some(extra));
        let json = serde_json::json!({
            "password": columns.password,
            "rules": columns.rules,
            "expired_url": columns.expired_url,
        });
        out.push('!');
        out.push_str(&json.to_string());
        out.push('\n');
    }
    if let Some(at) = link.expires_at {
        out.push_str(&format!("~{} ", at.millis()));
    }
    if let Some(max) = link.max_visits {
        out.push_str(&format!("#{max} "));
    }
    out.push_str(link.target.as_str());
    out
}

fn decode(value: &str) -> Option<Resolved> {
    let (extra, value) = match value.strip_prefix('!') {
        Some(rest) => {
            let (json, rest) = rest.split_once('\n')?;
            let v: serde_json::Value = serde_json::from_str(json).ok()?;
            let field = |name: &str| v.get(name).and_then(serde_json::Value::as_str);
            let extra =
                ExtraColumns::read(field("password"), field("rules"), field("expired_url")).ok()?;
            (extra, rest)
        }
        None => (None, value),
    };
    let (expires_at, rest) = match value.strip_prefix('~') {
        Some(rest) => {
            let (ms, rest) = rest.split_once(' ')?;
            (Some(Timestamp::from_millis(ms.parse().ok()?)), rest)
        }
        None => (None, value),
    };
    let (max_visits, target) = match rest.strip_prefix('#') {
        Some(rest) => {
            let (max, target) = rest.split_once(' ')?;
            (Some(max.parse().ok()?), target)
        }
        None => (None, rest),
    };
    Some(Resolved {
        target: TargetUrl::parse(target).ok()?,
        expires_at,
        max_visits,
        extra,
    })
}

/// Drops the password from each of `redis://user:pass@host[,...]` for
/// display.
fn redact(urls: &str) -> String {
    urls.split(',')
        .map(|url| match url::Url::parse(url.trim()) {
            Ok(mut u) if u.password().is_some() => {
                let _ = u.set_password(Some("***"));
                u.to_string()
            }
            _ => url.trim().to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl ValkeySettings {
    /// The URLs `url` names.
    pub(crate) fn nodes(&self) -> Vec<String> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// A cluster: asked for, or several nodes named.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster || self.nodes().len() > 1
    }
}

#[async_trait]
impl LinkCache for ValkeyCache {
    /// A PING within the configured timeout, not subject to the backoff
    /// (a readiness probe must see a Valkey that has come back).
    async fn check(&self) -> Result<(), String> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        let bound = self.config.timeout.max(Duration::from_millis(200));
        // The probe is unauthenticated: the reason names no address; the
        // error itself goes to the log, at a limited rate.
        static FAILED: std::sync::LazyLock<crate::observability::logging::Throttle> =
            std::sync::LazyLock::new(|| {
                crate::observability::logging::Throttle::new(Duration::from_secs(10))
            });
        match tokio::time::timeout(bound, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                crate::throttled!(FAILED, warn, error = %e,
                    request_id = %crate::observability::logging::request_id(), "readiness: Valkey does not answer");
                Err("valkey: not reachable; reads and writes go to the store".into())
            }
            Err(_) => Err("valkey: no answer in time; reads and writes go to the store".into()),
        }
    }

    async fn get(&self, code: &LinkKey) -> Lookup {
        if !self.consistent().await {
            return Lookup::Unknown;
        }
        let key = self.key(code);
        let value: Option<Option<String>> = self
            .call("GET", |mut c| async move {
                c.get::<_, Option<String>>(key).await
            })
            .await;
        match value {
            None => Lookup::Unknown,
            Some(None) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Unknown
            }
            Some(Some(s)) if s == MISSING => {
                self.counters.negative_hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Missing
            }
            Some(Some(s)) => match decode(&s) {
                Some(link) => {
                    self.counters.hits.fetch_add(1, Ordering::Relaxed);
                    Lookup::Found(link)
                }
                // Not ours, or corrupted: never serve it, ask the store.
                None => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    Lookup::Unknown
                }
            },
        }
    }

    async fn put(&self, code: &LinkKey, link: &Resolved) {
        if self.dirty.load(Ordering::Acquire) {
            return;
        }
        self.set(code, &encode(link), self.config.ttl).await;
    }

    async fn put_missing(&self, code: &LinkKey) {
        if !self.negative_ttl.is_zero() && !self.dirty.load(Ordering::Acquire) {
            self.set(code, MISSING, Some(self.negative_ttl)).await;
        }
    }

    async fn invalidate(&self, code: &LinkKey) {
        let key = self.key(code);
        let deleted = self
            .call("DEL", |mut c| async move { c.del::<_, ()>(key).await })
            .await;
        if deleted.is_none() {
            self.defer(code);
        }
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            mode: CacheMode::Valkey,
            memory: None,
            valkey: Some(self.counters()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_old_ones_still_read() {
        let target = TargetUrl::parse("https://example.com/#x").expect("url");
        let rules = serde_json::json!([
            {"if": {"language": ["de", "fr"], "query": {"a": "b\nc"}}, "url": "https://example.com/de"},
            {"split": [{"url": "https://example.com/1", "weight": 3},
                       {"url": "https://example.com/2", "weight": 1}]}
        ]);
        let extra = ExtraColumns::read(
            Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaA"),
            Some(&rules.to_string()),
            Some("https://example.com/expired"),
        )
        .expect("valid");
        for expires_at in [None, Some(Timestamp::from_millis(1_700_000_000_000))] {
            for max_visits in [None, Some(50)] {
                for extra in [None, extra.clone()] {
                    let link = Resolved {
                        target: target.clone(),
                        expires_at,
                        max_visits,
                        extra,
                    };
                    assert_eq!(decode(&encode(&link)), Some(link));
                }
            }
        }
        let old = decode("~5 https://example.com/").expect("old entry");
        assert_eq!(old.max_visits, None);
        assert_eq!(decode("#x https://example.com/"), None);
    }
}
