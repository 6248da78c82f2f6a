//! The PostgreSQL store, for several litelink instances on one database
//! (`--store postgres://...`). The same trait as SQLite's, on a pool of
//! connections with prepared statements; creates keep group commit: the
//! creates queued while one batch is written go into the next, as one
//! multi-row INSERT in one transaction (writer.rs). Every other write is a
//! transaction of its own on the pool: PostgreSQL serializes them itself.
//!
//! Codes are drawn at random (the CSPRNG of `CodeGenerator`) and the
//! unique index on `code` decides between instances: a collision is
//! retried with a fresh code in the same transaction.

mod backend;
mod doctor;
pub mod migrations;
mod ops;
mod replica;
mod tls;
mod webhooks;
mod writer;

pub(crate) use backend::Backend;
pub(crate) use replica::ReplicaStats;
use replica::{Positions, Replica};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde::Serialize;
use tokio_postgres::error::SqlState;

use super::outbox;
use super::{
    ApiKey, Existing, ImportRow, LinkPatch, LinkStore, LinkTotals, ListPage, ListQuery, LoginFlow,
    LoginFlowWrite, NewLink, RankQuery, Record, Session, SessionWrite, StorageFailure, StoreError,
    StoreMetrics, StoreStats, TagCount, User, UserWrite, VisitScope,
};
use crate::domain::{
    CodeGenerator, Domain, DomainId, DomainRedirects, Host, KeyId, Link, LinkKey, Resolved,
    ShortCode, TargetUrl, Timestamp, UserId, VisitCounts,
};

/// The PostgreSQL store's settings; their defaults are the ones below and
/// nowhere else.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// Connections of the pool; a request waits at most `wait` for one.
    pub pool_size: usize,
    pub wait: Duration,
    /// Most creates in one group commit (1: one transaction per create).
    pub batch_max: usize,
    /// Creates that may wait for the writer before `POST /link` answers 503.
    pub write_queue: usize,
    /// `statement_timeout` of every connection: no query runs longer.
    pub statement_timeout: Duration,
    /// A streaming replica of the same database for lookups and listings
    /// (`--postgres-read-url`); the pool has `pool_size` connections too.
    pub read_url: Option<String>,
    /// Read the WAL position after every write, to announce it with the
    /// change (set with `--invalidations-url`; always with a replica).
    pub track_positions: bool,
    /// Other instances tell this one of their changes (`--invalidations-url`).
    /// Without it a replica is never read: a change made elsewhere could
    /// not be told from the replica's older copy.
    pub hears_others: bool,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            url: String::new(),
            pool_size: 16,
            wait: Duration::from_secs(5),
            batch_max: 512,
            write_queue: 4096,
            statement_timeout: Duration::from_secs(5),
            read_url: None,
            track_positions: false,
            hears_others: false,
        }
    }
}

impl PostgresSettings {
    /// Why `url` is not a PostgreSQL URL litelink can use, if it is not.
    pub fn check_url(url: &str) -> Result<(), String> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err("expected postgres://user@host/database (SQLite is --db PATH)".into());
        }
        let (rest, _) = tls::split(url)?;
        rest.parse::<tokio_postgres::Config>()
            .map(|_| ())
            .map_err(|e| format!("not a PostgreSQL URL: {e}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    #[error("TLS to PostgreSQL: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("cannot connect to PostgreSQL at {host}: {source}")]
    Connect {
        host: String,
        source: deadpool_postgres::PoolError,
    },
    #[error("cannot migrate the PostgreSQL schema: {0}")]
    Migrate(#[from] migrations::MigrationError),
    #[error("cannot set up the PostgreSQL pool: {0}")]
    Pool(String),
    #[error("cannot connect to the PostgreSQL read replica at {host}: {source}")]
    ReplicaConnect {
        host: String,
        source: deadpool_postgres::PoolError,
    },
    #[error(
        "the --postgres-read-url server at {0} is not a standby (pg_is_in_recovery() is false)"
    )]
    NotAReplica(String),
    #[error("PostgreSQL read replica: {0}")]
    Replica(tokio_postgres::Error),
}

/// The number of live links for `/stats`, which runs no query: this
/// instance's own writes change it at once, and a refresh from the
/// database every second brings in the other instances' (one that raced
/// with a write of ours is dropped, so it never undoes one).
#[derive(Debug, Default)]
pub(super) struct LiveCount {
    links: std::sync::atomic::AtomicI64,
    writes: AtomicU64,
}

impl LiveCount {
    pub(super) fn add(&self, n: i64) {
        self.writes.fetch_add(1, Ordering::AcqRel);
        self.links.fetch_add(n, Ordering::AcqRel);
    }

    fn get(&self) -> u64 {
        self.links.load(Ordering::Acquire).max(0) as u64
    }

    async fn refresh(&self, pool: &Pool) {
        let before = self.writes.load(Ordering::Acquire);
        let Ok(client) = pool.get().await else {
            return;
        };
        if let Ok(n) = ops::live_links(&client).await
            && self.writes.load(Ordering::Acquire) == before
        {
            self.links.store(n, Ordering::Release);
        }
    }
}

/// Longest wait for a replica connection (connecting included).
const REPLICA_WAIT: Duration = Duration::from_secs(1);

/// How often the live count is read back from the database.
const LIVE_COUNT_REFRESH: Duration = Duration::from_secs(1);

/// `/stats` of the PostgreSQL store. Nothing in it names a host, a user or
/// a database: `/stats` may be public.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PostgresStats {
    pub server_version: String,
    /// Live links: exact for this instance's writes, others' within a second.
    pub links: u64,
    pub pool_size: usize,
    pub pool_idle: usize,
    pub pool_waiting: usize,
    pub writer: writer::WriterCounts,
    /// Present with `--postgres-read-url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaStats>,
}

pub(crate) struct PostgresStore {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pool: Pool,
    /// Where this instance's reads may go, and the positions that decide.
    positions: Arc<Positions>,
    replica: Option<Replica>,
    writer: writer::Writer,
    server_version: String,
    /// Set while the last write failed for want of the database, cleared by
    /// the next that succeeds: for the readiness check.
    failing: std::sync::Mutex<Option<String>>,
    errors: AtomicU64,
    refresher: tokio::task::JoinHandle<()>,
}

/// A PostgreSQL error as the HTTP layer's kinds: a database that cannot be
/// reached or is shutting down is a 503 to retry, not a 500.
pub(super) fn failure(e: &tokio_postgres::Error) -> StorageFailure {
    match e.code() {
        None => StorageFailure::Io,
        Some(c) if c == &SqlState::DISK_FULL || c == &SqlState::INSUFFICIENT_RESOURCES => {
            StorageFailure::DiskFull
        }
        Some(c) if c == &SqlState::READ_ONLY_SQL_TRANSACTION => StorageFailure::ReadOnly,
        Some(c)
            if c == &SqlState::ADMIN_SHUTDOWN
                || c == &SqlState::CRASH_SHUTDOWN
                || c == &SqlState::CANNOT_CONNECT_NOW
                || c == &SqlState::TOO_MANY_CONNECTIONS =>
        {
            StorageFailure::Io
        }
        Some(c)
            if c == &SqlState::T_R_SERIALIZATION_FAILURE
                || c == &SqlState::T_R_DEADLOCK_DETECTED
                || c == &SqlState::QUERY_CANCELED
                || c == &SqlState::LOCK_NOT_AVAILABLE =>
        {
            StorageFailure::Busy
        }
        Some(_) => StorageFailure::Other,
    }
}

pub(super) fn store_error(e: tokio_postgres::Error) -> StoreError {
    StoreError::Storage(failure(&e), e.to_string())
}

pub(super) fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => store_error(e),
        deadpool_postgres::PoolError::Timeout(_) => {
            StoreError::Storage(StorageFailure::Busy, "no PostgreSQL connection free".into())
        }
        other => StoreError::Storage(StorageFailure::Io, other.to_string()),
    }
}

pub(super) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// tokio-postgres's configuration of `url`, the TLS connector its
/// `sslmode` and certificates ask for, and the host(s) it names, for
/// errors (never shown to clients).
fn connect_config(
    url: &str,
) -> Result<
    (
        tokio_postgres::Config,
        tokio_postgres_rustls::MakeRustlsConnect,
        String,
    ),
    OpenError,
> {
    let (rest, tls) = tls::split(url).map_err(OpenError::Url)?;
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e: tokio_postgres::Error| OpenError::Url(e.to_string()))?;
    let host = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let (mode, connector) = tls.connector(&host)?;
    config.ssl_mode(mode);
    Ok((config, connector, host))
}

/// A pool of connections to `url` with `settings`' bounds, and the
/// host(s) it names, for errors.
fn pool(url: &str, settings: &PostgresSettings) -> Result<(Pool, String), OpenError> {
    let (mut config, connector, host) = connect_config(url)?;
    config.connect_timeout(settings.wait);
    config.options(format!(
        "-c statement_timeout={}",
        settings.statement_timeout.as_millis()
    ));
    config.application_name("litelink");
    let manager = Manager::from_config(
        config,
        connector,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(settings.pool_size)
        .wait_timeout(Some(settings.wait))
        .create_timeout(Some(settings.wait))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| OpenError::Pool(e.to_string()))?;
    Ok((pool, host))
}

/// Connects to the read replica, checks that it is a standby, and starts
/// following its replay position.
async fn open_replica(
    url: &str,
    settings: &PostgresSettings,
    primary: &Pool,
    positions: &Arc<Positions>,
) -> Result<Replica, OpenError> {
    // A replica that does not answer costs a read at most this before it
    // goes to the primary (then the replica is left alone for a second).
    let settings = PostgresSettings {
        wait: settings.wait.min(REPLICA_WAIT),
        ..settings.clone()
    };
    let (pool, host) = pool(url, &settings)?;
    let client = pool
        .get()
        .await
        .map_err(|source| OpenError::ReplicaConnect {
            host: host.clone(),
            source,
        })?;
    let standby: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(OpenError::Replica)?
        .get(0);
    if !standby {
        return Err(OpenError::NotAReplica(host));
    }
    drop(client);
    Ok(Replica::start(pool, primary.clone(), Arc::clone(positions)))
}

impl PostgresStore {
    /// Connects, migrates (one instance at a time) and starts the writer;
    /// with a read URL, connects to the replica and checks it is one.
    pub(crate) async fn open(
        settings: PostgresSettings,
        codes: CodeGenerator,
    ) -> Result<Self, OpenError> {
        let (pool, host) = pool(&settings.url, &settings)?;
        let mut client = pool.get().await.map_err(|source| OpenError::Connect {
            host: host.clone(),
            source,
        })?;
        migrations::migrate(&mut client).await?;
        let server_version: String = client
            .query_one("SHOW server_version", &[])
            .await
            .map(|r| r.get(0))
            .map_err(migrations::MigrationError::from)?;
        let live = Arc::new(LiveCount::default());
        live.links.store(
            ops::live_links(&client).await.unwrap_or(0),
            Ordering::Release,
        );
        drop(client);
        let positions = Arc::new(Positions::new(
            settings.track_positions,
            settings.read_url.is_some(),
        ));
        if settings.read_url.is_some() && !settings.hears_others {
            tracing::warn!(
                "a read replica without --invalidations-url: other instances' changes \
                 cannot be heard, so every read goes to the primary"
            );
            positions.hearing(false);
        }
        let replica = match &settings.read_url {
            Some(url) => Some(open_replica(url, &settings, &pool, &positions).await?),
            None => None,
        };
        let refresher = {
            let (live, pool) = (Arc::downgrade(&live), pool.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(LIVE_COUNT_REFRESH);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(live) = live.upgrade() else { return };
                    live.refresh(&pool).await;
                }
            })
        };
        let writer =
            writer::Writer::start(pool.clone(), &settings, codes, live, Arc::clone(&positions));
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                positions,
                replica,
                writer,
                server_version,
                failing: std::sync::Mutex::new(None),
                errors: AtomicU64::new(0),
                refresher,
            }),
        })
    }

    pub(crate) fn postgres_stats(&self) -> PostgresStats {
        let status = self.inner.pool.status();
        PostgresStats {
            server_version: self.inner.server_version.clone(),
            links: self.inner.writer.live.get(),
            pool_size: status.max_size,
            pool_idle: status.available,
            pool_waiting: status.waiting,
            writer: self.inner.writer.counts(),
            replica: self.inner.replica.as_ref().map(Replica::stats),
        }
    }

    /// A pooled connection; a failure to get one is remembered for the
    /// readiness check.
    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        let client = self.inner.pool.get().await.map_err(pool_error);
        if let Err(e) = &client {
            self.inner.note_error(e);
        }
        client
    }
}

/// Runs `$op` with a pooled connection `$c`, and remembers whether the
/// database answered, for the readiness check.
macro_rules! with_client {
    ($store:expr, |$c:ident| $op:expr) => {{
        #[allow(unused_mut)]
        let mut $c = $store.client().await?;
        let result = $op.await;
        $store.inner.note(&result);
        result
    }};
}

/// Runs a read on the replica when it has replayed every change of `$code`
/// this instance knows of (`None`: of any code, for a listing), else, or
/// when the replica fails, on the primary. With `misses: primary`, a code
/// the replica does not have is asked of the primary too: it may have been
/// created a moment ago through another instance that this one has not
/// heard from yet, and a link must resolve everywhere once its 201 is out.
macro_rules! read {
    ($store:expr, $code:expr, misses: $misses:ident, |$c:ident| $op:expr) => {{
        if let Some(replica) = &$store.inner.replica
            && let Some($c) = replica.client($code).await
        {
            match $op.await {
                Ok(found) if read!(@keep $misses, found) => {
                    replica.served();
                    return Ok(found);
                }
                Ok(_) => replica.missed(),
                Err(e) => replica.failed(&e),
            }
        }
        with_client!($store, |$c| $op)
    }};
    (@keep primary, $found:expr) => { $found.is_some() };
    (@keep replica, $found:expr) => { true };
}

impl Inner {
    pub(super) fn note<T>(&self, result: &Result<T, StoreError>) {
        match result {
            Ok(_) => *self.failing.lock().unwrap_or_else(|e| e.into_inner()) = None,
            Err(e) => self.note_error(e),
        }
    }

    fn note_error(&self, e: &StoreError) {
        if let StoreError::Storage(kind, why) = e
            && matches!(kind, StorageFailure::Io | StorageFailure::Busy)
        {
            self.errors.fetch_add(1, Ordering::Relaxed);
            *self.failing.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(format!("PostgreSQL: {why}"));
        }
    }
}

#[async_trait]
impl LinkStore for PostgresStore {
    async fn get(&self, code: &LinkKey) -> Result<Option<Resolved>, StoreError> {
        read!(self, Some(code), misses: primary, |c| ops::get(&c, code))
    }

    async fn create(&self, new: NewLink) -> Result<Link, StoreError> {
        let result = self.inner.writer.create(new).await;
        self.inner.note(&result);
        result
    }

    async fn link(&self, code: &LinkKey) -> Result<Option<Link>, StoreError> {
        read!(self, Some(code), misses: primary, |c| ops::link(&c, code))
    }

    async fn update(&self, code: &LinkKey, patch: LinkPatch) -> Result<Option<Link>, StoreError> {
        with_client!(self, |c| async {
            let updated = ops::update(&mut c, code, &patch).await?;
            self.inner.positions.after_write(&c, [code]).await;
            Ok(updated)
        })
    }

    async fn delete(&self, code: &LinkKey) -> Result<bool, StoreError> {
        let deleted = with_client!(self, |c| async {
            let deleted = ops::delete(&mut c, code).await?;
            self.inner.positions.after_write(&c, [code]).await;
            Ok(deleted)
        })?;
        if deleted {
            self.inner.writer.live.add(-1);
        }
        Ok(deleted)
    }

    async fn list(&self, query: ListQuery) -> Result<ListPage, StoreError> {
        read!(self, None, misses: replica, |c| ops::list(&c, &query))
    }

    async fn record_visits(
        &self,
        visits: Arc<[(LinkKey, VisitCounts)]>,
        visited: Arc<[outbox::Visited]>,
    ) -> Result<(), StoreError> {
        // The counts a visit limit is checked against must not be read
        // back from a replica that has not replayed them.
        with_client!(self, |c| async {
            ops::record_visits(&mut c, &visits, &visited).await?;
            self.inner
                .positions
                .after_write(&c, visits.iter().map(|(code, _)| code))
                .await;
            Ok(())
        })
    }

    async fn visit_counts(&self, code: &LinkKey) -> Result<Option<VisitCounts>, StoreError> {
        with_client!(self, |c| ops::visit_counts(&mut c, code))
    }

    async fn visit_totals(&self, scope: VisitScope) -> Result<VisitCounts, StoreError> {
        with_client!(self, |c| ops::visit_totals(&mut c, scope))
    }

    async fn tags(&self, scope: VisitScope) -> Result<Vec<TagCount>, StoreError> {
        read!(self, None, misses: replica, |c| ops::tags(&c, scope))
    }

    async fn links_to(
        &self,
        domain: DomainId,
        target: &TargetUrl,
    ) -> Result<Vec<Link>, StoreError> {
        // From the primary: a link just made must be found, or a client
        // that sends its URL twice gets two links.
        with_client!(self, |c| ops::links_to(&c, domain, target))
    }

    async fn totals(&self, scope: VisitScope) -> Result<LinkTotals, StoreError> {
        read!(self, None, misses: replica, |c| ops::totals(&c, scope))
    }

    async fn ranked(&self, query: RankQuery) -> Result<Vec<Link>, StoreError> {
        read!(self, None, misses: replica, |c| ops::ranked(&c, &query))
    }

    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        with_client!(self, |c| ops::keys(&c))
    }

    async fn create_key(
        &self,
        name: &str,
        user: UserId,
        hash: [u8; 32],
        domain: Option<DomainId>,
    ) -> Result<ApiKey, StoreError> {
        with_client!(self, |c| ops::create_key(&c, name, user, hash, domain))
    }

    async fn users(&self) -> Result<Vec<User>, StoreError> {
        with_client!(self, |c| ops::users(&c))
    }

    async fn write_user(&self, write: UserWrite) -> Result<Option<User>, StoreError> {
        with_client!(self, |c| ops::write_user(&mut c, write))
    }

    async fn session(&self, hash: [u8; 32]) -> Result<Option<Session>, StoreError> {
        with_client!(self, |c| ops::session(&c, hash))
    }

    async fn write_session(&self, write: SessionWrite) -> Result<(), StoreError> {
        with_client!(self, |c| ops::write_session(&c, write))
    }

    async fn write_login_flow(
        &self,
        write: LoginFlowWrite,
    ) -> Result<Option<LoginFlow>, StoreError> {
        with_client!(self, |c| ops::write_login_flow(&c, write))
    }

    async fn domains(&self) -> Result<Vec<Domain>, StoreError> {
        with_client!(self, |c| ops::domains(&c))
    }

    async fn add_domain(
        &self,
        host: &Host,
        redirects: DomainRedirects,
    ) -> Result<Domain, StoreError> {
        with_client!(self, |c| ops::add_domain(&c, host, redirects.clone()))
    }

    async fn set_domain(
        &self,
        id: DomainId,
        redirects: DomainRedirects,
    ) -> Result<Option<Domain>, StoreError> {
        with_client!(self, |c| ops::set_domain(&c, id, redirects.clone()))
    }

    async fn remove_domain(
        &self,
        id: DomainId,
        force: bool,
    ) -> Result<Option<Vec<ShortCode>>, StoreError> {
        let removed = with_client!(self, |c| async {
            let removed = ops::remove_domain(&mut c, id, force).await?;
            if let Some(gone) = &removed {
                let keys = gone.iter().map(|code| LinkKey::new(id, code.clone()));
                self.inner.positions.after_write(&c, keys).await;
            }
            Ok(removed)
        })?;
        if let Some(gone) = &removed {
            self.inner.writer.live.add(-(gone.len() as i64));
        }
        Ok(removed)
    }

    async fn webhooks(&self) -> Result<Vec<outbox::Webhook>, StoreError> {
        with_client!(self, |c| webhooks::list(&c))
    }

    async fn write_webhook(
        &self,
        write: outbox::WebhookWrite,
    ) -> Result<Option<outbox::Webhook>, StoreError> {
        with_client!(self, |c| webhooks::write(&mut c, write))
    }

    async fn remove_webhook(&self, id: i64) -> Result<bool, StoreError> {
        with_client!(self, |c| webhooks::remove(&mut c, id))
    }

    async fn claim_events(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<outbox::OutboxEvent>, StoreError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        with_client!(self, |c| webhooks::claim(&c, limit, lease_ms))
    }

    async fn settle_events(&self, outcomes: Vec<outbox::Outcome>) -> Result<(), StoreError> {
        with_client!(self, |c| webhooks::settle(&mut c, outcomes))
    }

    async fn attempts(&self, webhook: i64) -> Result<Vec<outbox::AttemptRow>, StoreError> {
        with_client!(self, |c| webhooks::attempts(&c, webhook))
    }

    async fn retry_event(&self, webhook: i64, event: i64) -> Result<bool, StoreError> {
        with_client!(self, |c| webhooks::retry(&c, webhook, event))
    }

    async fn record_event(&self, kind: outbox::EventKind, data: String) -> Result<(), StoreError> {
        with_client!(self, |c| webhooks::record_event(&c, kind, data))
    }

    async fn drop_visited(&self, n: u64) -> Result<u64, StoreError> {
        with_client!(self, |c| webhooks::drop_visited(&mut c, n))
    }

    async fn scan_expiries(&self) -> Result<(), StoreError> {
        with_client!(self, |c| ops::scan_expiries(&mut c))
    }

    async fn pending_events(&self) -> Result<(u64, Option<Timestamp>), StoreError> {
        with_client!(self, |c| webhooks::pending(&c))
    }

    async fn revoke_key(&self, name: &str) -> Result<bool, StoreError> {
        with_client!(self, |c| ops::revoke_key(&c, name))
    }

    async fn touch_keys(&self, used: Vec<(KeyId, Timestamp)>) -> Result<(), StoreError> {
        with_client!(self, |c| ops::touch_keys(&c, &used))
    }

    async fn export(
        &self,
        each: Box<dyn FnMut(Record) -> std::io::Result<()> + Send>,
    ) -> Result<u64, StoreError> {
        with_client!(self, |c| ops::export(&mut c, each))
    }

    async fn import(
        &self,
        rows: Vec<ImportRow>,
        overwrite: bool,
    ) -> Result<Vec<(u64, Existing)>, StoreError> {
        let generator = self.inner.writer.generator();
        let mut client = self.inner.pool.get().await.map_err(pool_error)?;
        let result = ops::import(&mut client, rows, &generator, overwrite).await;
        self.inner.note(&result);
        let (skipped, live) = result?;
        self.inner.writer.live.add(live);
        Ok(skipped)
    }

    fn stats(&self) -> StoreStats {
        let s = self.postgres_stats();
        let metrics = StoreMetrics {
            links: s.links,
            writes: s.writer.writes.clone(),
            gauges: vec![
                ("litelink_postgres_pool_idle", s.pool_idle as f64),
                ("litelink_postgres_pool_waiting", s.pool_waiting as f64),
            ],
            counters: Vec::new(),
        };
        StoreStats::new("postgres", &s, metrics)
    }

    fn shared(&self) -> bool {
        true
    }

    fn position(&self) -> Option<u64> {
        self.inner.positions.newest()
    }

    fn changed_elsewhere(&self, code: Option<&LinkKey>, position: Option<u64>) {
        self.inner.positions.heard(code, position);
    }

    fn hearing_others(&self, on: bool) {
        self.inner.positions.hearing(on);
    }

    fn degraded(&self) -> Option<String> {
        self.inner
            .replica
            .as_ref()
            .filter(|r| !r.is_up())
            .map(|_| "read replica: not available; reads go to the primary".to_owned())
    }

    fn unwritable(&self) -> Option<String> {
        self.inner
            .failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn close(&self) {
        self.inner.writer.close().await;
        self.inner.refresher.abort();
        if let Some(replica) = &self.inner.replica {
            replica.close();
        }
        self.inner.pool.close();
    }
}
