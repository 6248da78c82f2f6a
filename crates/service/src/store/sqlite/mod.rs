//! The embedded SQLite store: WAL mode, reader connections for lookups and
//! one group-committing writer thread for creates.
//!
//! Modules, in the order a create meets them: `writer` (queue, batches,
//! inserts), `walsync` (one fdatasync per group at full durability),
//! `replies` (answers go back to the runtime as one task). Lookups go
//! through `readers`, which answer a generated code from its row's slot
//! (`slots`, kept by the writer) when they can; `checkpointer` copies the
//! WAL back on its own thread;
//! `connection` opens connections alike; `migrations` holds the schema;
//! `memstatus` and `build_info` are SQLite's process and build facts.

mod backend;
pub(crate) mod build_info;
mod checkpointer;
pub(crate) mod connection;
mod doctor;
mod fileguard;
mod find;
pub(crate) mod lock;
mod mapped;
pub(crate) mod memstatus;
pub mod migrations;
mod names;
mod ops;
mod readers;
mod replies;
mod rows;
mod slots;
mod walsync;
mod webhooks;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;
use strum::{Display, EnumString, VariantNames};

pub(crate) use self::backend::Backend;
use self::checkpointer::Checkpointer;
use self::connection::Role;
use self::ops::Op;
use self::readers::{Epoch, Readers};
use self::replies::Done;
use self::slots::Slots;
use self::writer::{Hooks, Writer};
use super::outbox::{AttemptRow, EventKind, OutboxEvent, Outcome, Visited, Webhook, WebhookWrite};
use super::{
    ApiKey, Existing, ImportRow, LinkPatch, LinkStore, LinkTotals, ListPage, ListQuery, LoginFlow,
    LoginFlowWrite, NewLink, RankQuery, Record, Session, SessionWrite, StorageFailure, StoreError,
    StoreMetrics, StoreStats, TagCount, User, UserWrite, VisitScope,
};
use crate::domain::{
    CodeGenerator, Codebook, Domain, DomainId, DomainRedirects, Host, KeyId, Link, LinkKey,
    Resolved, ShortCode, TargetUrl, Timestamp, UserId, VisitCounts,
};
use rusqlite::Connection;

/// What kind of failure a SQLite error is.
pub(crate) fn failure(e: &rusqlite::Error) -> StorageFailure {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DiskFull) => StorageFailure::DiskFull,
        Some(C::SystemIoFailure | C::CannotOpen) => StorageFailure::Io,
        Some(C::ReadOnly) => StorageFailure::ReadOnly,
        Some(C::DatabaseBusy | C::DatabaseLocked) => StorageFailure::Busy,
        Some(C::DatabaseCorrupt | C::NotADatabase) => StorageFailure::Corrupt,
        _ => StorageFailure::Other,
    }
}

/// A UNIQUE constraint failed: the code (or key name) is in use.
pub(super) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == rusqlite::ErrorCode::ConstraintViolation
            && f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

/// SQLite's errors leave this folder as what kind of failure they are,
/// and what SQLite said.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Storage(failure(&e), format!("sqlite: {e}"))
    }
}

/// How reader connections live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ConnectionMode {
    /// Long-lived connections reused across requests, with cached statements.
    Pooled,
    /// A new connection for every read, as the first article's service
    /// had; kept to reproduce its experiment. The writer thread keeps its
    /// one connection either way.
    PerRequest,
}

/// Where a lookup runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ReadOn {
    /// Directly on the async worker thread that serves the request: a point
    /// read on a warm database takes less than a hop to another thread
    /// (docs/benchmarks.md).
    Worker,
    /// On tokio's blocking pool, so a slow disk never stalls a worker.
    Blocking,
}

/// What a 201 promises about the row it announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Durability {
    /// The WAL is synced before the 201: an acknowledged create survives a
    /// crash of the process and of power.
    Full,
    /// WAL with `synchronous=NORMAL`: survives a process crash; the last
    /// commits may be lost on power loss.
    Normal,
    /// No sync at all. For benchmarks only.
    Off,
}

/// The SQLite store's settings; their defaults are the ones below and
/// nowhere else.
#[derive(Debug, Clone)]
pub struct SqliteSettings {
    /// SQLite's process-wide memory statistics (a global allocator mutex).
    /// Applied by [`memstatus::configure`] before any connection opens.
    pub memstatus: bool,
    pub connections: ConnectionMode,
    pub read_on: ReadOn,
    /// `false` sets `cache_size=0` and `temp_store=FILE` on every connection.
    pub page_cache: bool,
    pub durability: Durability,
    pub busy_timeout: Duration,
    /// Most creates committed in one transaction; 1 turns group commit off.
    pub batch_max: usize,
    /// Creates that may wait for the writer before `POST /link` answers 503.
    pub write_queue: usize,
    /// Most idle reader connections kept.
    pub max_readers: usize,
    /// Bytes of zeros the WAL is extended to at start-up at full
    /// durability (0: never), so that syncs overwrite allocated blocks.
    pub wal_preallocate: u64,
    /// Page cache of the writer's connection in MiB (0: SQLite's 2 MB).
    /// `import` raises it: inserts at random places of a large index touch
    /// more pages than the default holds.
    pub writer_cache_mib: u32,
    /// Bytes of the database file every connection maps into memory
    /// (`mmap_size`; 0: none): reads of mapped pages are memory reads, not
    /// `pread` calls. SQLite caps it at 2 GiB less 64 KiB (its build's
    /// `SQLITE_MAX_MMAP_SIZE`); the rest of a larger file is read as usual.
    pub mmap_mib: u64,
    /// Keep every generated link's lookup fields in a slot by row id, in a
    /// file beside the database (slots.rs): a lookup reads one slot instead
    /// of searching the table's B-tree.
    pub slots: bool,
}

impl SqliteSettings {
    /// Full durability with group commit: the writer syncs the WAL itself,
    /// once for all commits made while creates kept arriving (walsync.rs).
    /// Without group commit, `synchronous=FULL` syncs inside every commit.
    pub(crate) fn grouped_sync(&self) -> bool {
        self.durability == Durability::Full && self.batch_max > 1
    }

    /// Bytes the WAL is preallocated to, as applied: only at full durability.
    pub(crate) fn wal_preallocate_applied(&self) -> u64 {
        if self.durability == Durability::Full {
            self.wal_preallocate
        } else {
            0
        }
    }
}

impl Default for SqliteSettings {
    fn default() -> Self {
        Self {
            memstatus: false,
            connections: ConnectionMode::Pooled,
            read_on: ReadOn::Worker,
            page_cache: true,
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            batch_max: 512,
            write_queue: 4096,
            max_readers: 64,
            wal_preallocate: 64 << 20,
            writer_cache_mib: 0,
            mmap_mib: 2048,
            slots: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("cannot open SQLite database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("cannot migrate SQLite database {path}: {source}")]
    Migrate {
        path: PathBuf,
        source: migrations::MigrationError,
    },
    #[error("cannot start the writer thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error(
        "SQLite database {path} cannot be written (the file or its file system is read-only): \
         litelink needs to write it; check its permissions and mount"
    )]
    ReadOnly { path: PathBuf },
    #[error(
        "SQLite database {path} is corrupt ({detail}): run `litelink doctor --full`; restore \
         a backup, or `litelink export` what can still be read"
    )]
    Corrupt { path: PathBuf, detail: String },
}

/// Longest the start-up `quick_check` may run: it reads every page, so on
/// a large database it stops here and leaves the rest to `doctor` (which
/// checks all of it); start-up stays under a second at 10M links.
const QUICK_CHECK_BUDGET: Duration = Duration::from_millis(300);

/// Refuses a database that cannot be written: otherwise the server would
/// start and answer every create with an error.
fn check_writable(conn: &Connection, path: &Path) -> Result<(), OpenError> {
    let read_only = conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false);
    let probe = || conn.execute_batch("BEGIN IMMEDIATE; COMMIT;");
    match probe() {
        _ if read_only => Err(OpenError::ReadOnly {
            path: path.to_path_buf(),
        }),
        Err(e) if matches!(failure(&e), StorageFailure::ReadOnly | StorageFailure::Io) => {
            Err(OpenError::ReadOnly {
                path: path.to_path_buf(),
            })
        }
        _ => Ok(()),
    }
}

/// `PRAGMA quick_check`, stopped after [`QUICK_CHECK_BUDGET`].
fn quick_check(conn: &Connection, path: &Path) -> Result<(), OpenError> {
    let started = Instant::now();
    let interrupt = conn.get_interrupt_handle();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if wait.recv_timeout(QUICK_CHECK_BUDGET) == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            interrupt.interrupt();
        }
    });
    let result = conn.prepare("PRAGMA quick_check").and_then(|mut s| {
        s.query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
    });
    drop(done);
    let _ = watchdog.join();
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    match result {
        Ok(rows) if rows == ["ok"] => {
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "quick check: ok");
            Ok(())
        }
        Ok(rows) => Err(corrupt(
            rows.into_iter().take(3).collect::<Vec<_>>().join("; "),
        )),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => {
            tracing::info!(
                budget_ms = QUICK_CHECK_BUDGET.as_millis() as u64,
                "quick check stopped at its time budget (a large database); \
                 `litelink doctor` checks all of it"
            );
            Ok(())
        }
        Err(e) if failure(&e) == StorageFailure::Corrupt => Err(corrupt(e.to_string())),
        Err(e) => Err(OpenError::Open {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// `/stats` of the SQLite store. The JSON shape is documented in docs/api.md.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SqliteStats {
    pub file: String,
    pub sqlite_version: &'static str,
    pub compile_options: Vec<String>,
    pub memstatus: bool,
    pub connections: ConnectionMode,
    pub read_on: ReadOn,
    pub page_cache: &'static str,
    pub durability: Durability,
    /// Rows in `links`: counted once at open, then kept by the writer.
    pub links: u64,
    pub readers: readers::ReaderCounts,
    /// The link slots (`null` when off).
    pub slots: Option<slots::SlotCounts>,
    pub writer: WriterReport,
    /// What the connections run with, as SQLite reports it.
    pub applied: AppliedReport,
}

/// `PRAGMA`s read back from the writer's connection and from the first
/// reader connection (`null` until a lookup has opened one).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AppliedReport {
    pub writer: connection::Applied,
    pub reader: Option<connection::Applied>,
}

/// The `writer` object of [`SqliteStats`]: the writer's settings and the
/// counters of the writer, its WAL syncs and the checkpointer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WriterReport {
    pub group_commit: bool,
    pub batch_max: usize,
    pub queue_capacity: usize,
    pub queue_len: usize,
    #[serde(flatten)]
    pub writes: crate::store::queue::WriteCounts,
    pub code_locality: bool,
    pub grouped_sync: bool,
    pub wal_preallocate_bytes: u64,
    #[serde(flatten)]
    pub syncs: walsync::SyncCounts,
    pub checkpoints: u64,
}

pub(crate) struct SqliteStore {
    inner: Arc<Inner>,
    /// The file's one-server lock, when this store serves it.
    _lock: Option<lock::DbLock>,
}

struct Inner {
    path: PathBuf,
    settings: SqliteSettings,
    readers: Arc<Readers>,
    writer: Writer,
    checkpointer: std::sync::Mutex<Option<Checkpointer>>,
    checkpoints: Arc<checkpointer::CheckpointStats>,
    compile_options: Vec<String>,
    /// Read back from SQLite at open, while a connection was certainly
    /// open: in per-request mode none may be open when `/stats` asks.
    memstatus: bool,
    /// Whether generated codes share a bucket prefix (CodeGenerator).
    code_locality: bool,
    slots: Option<Arc<Slots>>,
    /// Codes to row ids, for [`LinkStore::visit_order`].
    book: Arc<Codebook>,
}

/// The link slots' file, beside the database; without it (a file system
/// that cannot hold it, no address space) lookups read SQLite as before.
fn open_slots(db: &Path) -> Option<Arc<Slots>> {
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match Slots::create(dir) {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            tracing::warn!(error = %e, "no link slots: lookups search the table");
            None
        }
    }
}

impl SqliteStore {
    /// Opens (or creates) the database, migrates it, switches it to WAL and
    /// starts the writer. MEMSTATUS must have been configured before this.
    pub(crate) fn open(
        path: impl AsRef<Path>,
        settings: SqliteSettings,
        codes: CodeGenerator,
    ) -> Result<Self, OpenError> {
        Self::open_with(path, settings, codes, Hooks::default())
    }

    /// [`Self::open`] with the writer's disk and code draws given.
    fn open_with(
        path: impl AsRef<Path>,
        settings: SqliteSettings,
        codes: CodeGenerator,
        hooks: Hooks,
    ) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |source| OpenError::Open {
            path: path.clone(),
            source,
        };
        let mut conn = connection::open(&path, &settings, Role::Writer).map_err(open_err)?;
        check_writable(&conn, &path)?;
        connection::enable_wal(&conn).map_err(open_err)?;
        migrations::migrate(&mut conn).map_err(|source| OpenError::Migrate {
            path: path.clone(),
            source,
        })?;
        connection::configure(&conn, &settings, Role::Writer).map_err(open_err)?;
        quick_check(&conn, &path)?;
        let key = migrations::code_key(&conn).map_err(open_err)?;
        let book = Arc::new(Codebook::new(&key, codes.length()));
        let compile_options = build_info::compile_options(&conn).map_err(open_err)?;
        let memstatus = memstatus::active();
        let epoch = Arc::new(Epoch::default());
        let slots = settings.slots.then(|| open_slots(&path)).flatten();
        let readers = Arc::new(Readers::new(
            path.clone(),
            settings.clone(),
            Arc::clone(&epoch),
            Arc::clone(&book),
            slots.clone(),
        ));
        // Checkpoints run on their own thread (checkpointer.rs), not inside
        // the writer's commits.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(open_err)?;
        let code_locality = codes.has_locality();
        let writer = Writer::start(
            conn,
            &path,
            &settings,
            codes,
            writer::Shared {
                book: Arc::clone(&book),
                epoch: Arc::clone(&epoch),
                slots: slots.clone(),
            },
            hooks,
        )?;
        let checkpoints = Arc::new(checkpointer::CheckpointStats::default());
        let checkpointer = Checkpointer::start(
            path.clone(),
            settings.clone(),
            writer.guard(),
            writer.stats(),
            Arc::clone(&checkpoints),
            Arc::clone(&readers),
            epoch,
        )?;
        Ok(Self {
            _lock: None,
            inner: Arc::new(Inner {
                path,
                settings,
                readers,
                writer,
                checkpointer: std::sync::Mutex::new(Some(checkpointer)),
                checkpoints,
                compile_options,
                memstatus,
                code_locality,
                slots,
                book,
            }),
        })
    }

    pub(crate) fn settings(&self) -> &SqliteSettings {
        &self.inner.settings
    }

    /// Whether SQLite's memory statistics (and their global mutex) are on
    /// in this process, as SQLite reported it when the store opened.
    pub(crate) fn memstatus(&self) -> bool {
        self.inner.memstatus
    }

    pub(crate) fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The store, holding `lock` for as long as it lives.
    pub(crate) fn holding(mut self, lock: Option<lock::DbLock>) -> Self {
        self._lock = lock;
        self
    }

    /// The typed form of `/stats` for this store.
    pub(crate) fn sqlite_stats(&self) -> SqliteStats {
        let inner = &self.inner;
        let c = &inner.settings;
        let writes = inner.writer.counts();
        SqliteStats {
            // The file's name only: an absolute path tells an attacker
            // about the host (and /stats may be public).
            file: inner
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sqlite_version: build_info::sqlite_version(),
            compile_options: inner.compile_options.clone(),
            memstatus: inner.memstatus,
            connections: c.connections,
            read_on: c.read_on,
            page_cache: if c.page_cache { "on" } else { "off" },
            durability: c.durability,
            links: inner.writer.links(),
            readers: inner.readers.counts(),
            slots: inner.slots.as_ref().map(|s| s.counts()),
            applied: AppliedReport {
                writer: inner.writer.applied(),
                reader: inner.readers.applied(),
            },
            writer: WriterReport {
                group_commit: c.batch_max > 1,
                batch_max: c.batch_max,
                queue_capacity: inner.writer.capacity(),
                queue_len: inner.writer.queue_len(),
                writes,
                code_locality: inner.code_locality,
                grouped_sync: c.grouped_sync(),
                wal_preallocate_bytes: c.wal_preallocate_applied(),
                syncs: inner.writer.sync_counts(),
                checkpoints: inner.checkpoints.count(),
            },
        }
    }
}

impl SqliteStore {
    /// Runs a read on the configured thread: here, or on the blocking pool.
    /// Lets every outbox event claimed by an earlier server go again.
    pub(crate) async fn release_claims(&self) -> Result<(), StoreError> {
        // Read first: most starts find none, and then write nothing.
        if !self.read(|r| r.claimed_events()).await? {
            return Ok(());
        }
        self.inner.writer.apply(Op::ReleaseClaims).await.map(drop)
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Readers) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        match self.inner.settings.read_on {
            ReadOn::Worker => Ok(f(&self.inner.readers)?),
            ReadOn::Blocking => {
                let inner = Arc::clone(&self.inner);
                tokio::task::spawn_blocking(move || f(&inner.readers))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))?
                    .map_err(StoreError::from)
            }
        }
    }
}

fn unexpected(done: Done) -> StoreError {
    StoreError::Task(format!("unexpected answer from the writer: {done:?}"))
}

#[async_trait]
impl LinkStore for SqliteStore {
    async fn get(&self, key: &LinkKey) -> Result<Option<Resolved>, StoreError> {
        match self.inner.settings.read_on {
            // No closure, no clone: the lookup runs right here.
            ReadOn::Worker => Ok(self.inner.readers.get(key)?),
            ReadOn::Blocking => {
                let key = key.clone();
                self.read(move |r| r.get(&key)).await
            }
        }
    }

    async fn create(&self, new: NewLink) -> Result<Link, StoreError> {
        self.inner.writer.create(new).await
    }

    async fn link(&self, key: &LinkKey) -> Result<Option<Link>, StoreError> {
        let key = key.clone();
        self.read(move |r| r.link(&key)).await
    }

    async fn update(&self, key: &LinkKey, patch: LinkPatch) -> Result<Option<Link>, StoreError> {
        let op = Op::Update {
            key: key.clone(),
            patch,
        };
        match self.inner.writer.apply(op).await? {
            Done::MaybeLink(link) => Ok(link),
            other => Err(unexpected(other)),
        }
    }

    async fn delete(&self, key: &LinkKey) -> Result<bool, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::Delete { key: key.clone() })
            .await?
        {
            Done::Found(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    async fn list(&self, query: ListQuery) -> Result<ListPage, StoreError> {
        self.read(move |r| r.list(&query)).await
    }

    /// The row id a generated code decrypts to (remembered: the writer
    /// then finds it decrypted), named codes last.
    fn visit_order(&self, key: &LinkKey) -> u64 {
        self.inner.book.id_of_recent(&key.code).unwrap_or(u64::MAX)
    }

    async fn record_visits(
        &self,
        visits: Arc<[(LinkKey, VisitCounts)]>,
        visited: Arc<[Visited]>,
    ) -> Result<(), StoreError> {
        self.inner
            .writer
            .apply(Op::RecordVisits(visits, visited))
            .await
            .map(|_| ())
    }

    async fn visit_counts(&self, key: &LinkKey) -> Result<Option<VisitCounts>, StoreError> {
        let key = key.clone();
        self.read(move |r| r.visit_counts(&key)).await
    }

    async fn visit_totals(&self, scope: VisitScope) -> Result<VisitCounts, StoreError> {
        self.read(move |r| r.visit_totals(scope)).await
    }

    async fn tags(&self, scope: VisitScope) -> Result<Vec<TagCount>, StoreError> {
        self.read(move |r| r.tags(scope)).await
    }

    async fn links_to(
        &self,
        domain: DomainId,
        target: &TargetUrl,
    ) -> Result<Vec<Link>, StoreError> {
        let target = target.clone();
        self.read(move |r| r.links_to(domain, &target)).await
    }

    async fn totals(&self, scope: VisitScope) -> Result<LinkTotals, StoreError> {
        self.read(move |r| r.totals(scope)).await
    }

    async fn ranked(&self, query: RankQuery) -> Result<Vec<Link>, StoreError> {
        self.read(move |r| r.ranked(&query)).await
    }

    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        self.read(|r| r.keys()).await
    }

    async fn create_key(
        &self,
        name: &str,
        user: UserId,
        hash: [u8; 32],
        domain: Option<DomainId>,
    ) -> Result<ApiKey, StoreError> {
        let op = Op::CreateKey {
            name: name.to_owned(),
            user,
            hash,
            domain,
        };
        match self.inner.writer.apply(op).await? {
            Done::Key(key) => Ok(key),
            other => Err(unexpected(other)),
        }
    }

    async fn users(&self) -> Result<Vec<User>, StoreError> {
        self.read(|r| r.users()).await
    }

    async fn write_user(&self, write: UserWrite) -> Result<Option<User>, StoreError> {
        match self.inner.writer.apply(Op::User(write)).await? {
            Done::User(user) => Ok(user),
            other => Err(unexpected(other)),
        }
    }

    async fn session(&self, hash: [u8; 32]) -> Result<Option<Session>, StoreError> {
        self.read(move |r| r.session(hash)).await
    }

    async fn write_session(&self, write: SessionWrite) -> Result<(), StoreError> {
        self.inner
            .writer
            .apply(Op::Session(write))
            .await
            .map(|_| ())
    }

    async fn write_login_flow(
        &self,
        write: LoginFlowWrite,
    ) -> Result<Option<LoginFlow>, StoreError> {
        match self.inner.writer.apply(Op::LoginFlow(write)).await? {
            Done::Flow(flow) => Ok(flow),
            other => Err(unexpected(other)),
        }
    }

    async fn domains(&self) -> Result<Vec<Domain>, StoreError> {
        self.read(|r| r.domains()).await
    }

    async fn webhooks(&self) -> Result<Vec<Webhook>, StoreError> {
        self.read(|r| r.webhooks()).await
    }

    async fn write_webhook(&self, write: WebhookWrite) -> Result<Option<Webhook>, StoreError> {
        match self.inner.writer.apply(Op::Webhook(write)).await? {
            Done::Webhook(webhook) => Ok(webhook),
            Done::Found(_) => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    async fn remove_webhook(&self, id: i64) -> Result<bool, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::Webhook(WebhookWrite::Remove { id }))
            .await?
        {
            Done::Found(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    async fn claim_events(
        &self,
        limit: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<OutboxEvent>, StoreError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        match self
            .inner
            .writer
            .apply(Op::ClaimEvents { limit, lease_ms })
            .await?
        {
            Done::Events(events) => Ok(events),
            other => Err(unexpected(other)),
        }
    }

    async fn settle_events(&self, outcomes: Vec<Outcome>) -> Result<(), StoreError> {
        self.inner
            .writer
            .apply(Op::SettleEvents(outcomes))
            .await
            .map(drop)
    }

    async fn attempts(&self, webhook: i64) -> Result<Vec<AttemptRow>, StoreError> {
        self.read(move |r| r.attempts(webhook)).await
    }

    async fn retry_event(&self, webhook: i64, event: i64) -> Result<bool, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::RetryEvent { webhook, event })
            .await?
        {
            Done::Found(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    async fn record_event(&self, kind: EventKind, data: String) -> Result<(), StoreError> {
        self.inner
            .writer
            .apply(Op::RecordEvent { kind, data })
            .await
            .map(drop)
    }

    async fn drop_visited(&self, n: u64) -> Result<u64, StoreError> {
        match self.inner.writer.apply(Op::DropVisited(n)).await? {
            Done::Count(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }

    async fn scan_expiries(&self) -> Result<(), StoreError> {
        self.inner.writer.apply(Op::ScanExpiries).await.map(drop)
    }

    async fn pending_events(&self) -> Result<(u64, Option<Timestamp>), StoreError> {
        self.read(|r| r.pending_events()).await
    }

    async fn add_domain(
        &self,
        host: &Host,
        redirects: DomainRedirects,
    ) -> Result<Domain, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::AddDomain(host.clone(), redirects))
            .await?
        {
            Done::Domain(Some(domain)) => Ok(domain),
            other => Err(unexpected(other)),
        }
    }

    async fn set_domain(
        &self,
        id: DomainId,
        redirects: DomainRedirects,
    ) -> Result<Option<Domain>, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::SetDomain(id, redirects))
            .await?
        {
            Done::Domain(domain) => Ok(domain),
            other => Err(unexpected(other)),
        }
    }

    async fn remove_domain(
        &self,
        id: DomainId,
        force: bool,
    ) -> Result<Option<Vec<ShortCode>>, StoreError> {
        match self
            .inner
            .writer
            .apply(Op::RemoveDomain { id, force })
            .await?
        {
            Done::Removed(removed) => Ok(removed),
            other => Err(unexpected(other)),
        }
    }

    async fn revoke_key(&self, name: &str) -> Result<bool, StoreError> {
        let op = Op::RevokeKey {
            name: name.to_owned(),
        };
        match self.inner.writer.apply(op).await? {
            Done::Found(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    async fn touch_keys(&self, used: Vec<(KeyId, Timestamp)>) -> Result<(), StoreError> {
        self.inner
            .writer
            .apply(Op::TouchKeys(used))
            .await
            .map(|_| ())
    }

    async fn export(
        &self,
        mut each: Box<dyn FnMut(Record) -> std::io::Result<()> + Send>,
    ) -> Result<u64, StoreError> {
        let inner = Arc::clone(&self.inner);
        // A long scan: never on an async worker.
        tokio::task::spawn_blocking(move || inner.readers.export(&mut *each))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))??
            .map_err(|e| StoreError::Task(format!("writing the export: {e}")))
    }

    async fn import(
        &self,
        rows: Vec<ImportRow>,
        overwrite: bool,
    ) -> Result<Vec<(u64, Existing)>, StoreError> {
        // The id each named code would be generated for: an FF1 decryption
        // a row, made here, beside the writer, rather than on its thread.
        let generated = rows
            .iter()
            .map(|r| {
                r.code
                    .as_ref()
                    .and_then(|c| self.inner.book.id_of(c.as_str()))
            })
            .collect();
        let op = Op::Import {
            rows,
            generated,
            overwrite,
        };
        match self.inner.writer.apply(op).await? {
            Done::Imported(lines) => Ok(lines),
            other => Err(unexpected(other)),
        }
    }

    fn stats(&self) -> StoreStats {
        let s = self.sqlite_stats();
        let metrics = StoreMetrics {
            links: s.links,
            writes: s.writer.writes.clone(),
            gauges: vec![
                ("litelink_write_queue_depth", s.writer.queue_len as f64),
                (
                    "litelink_writes_stopped",
                    f64::from(u8::from(s.writer.syncs.writes_stopped.is_some())),
                ),
            ],
            counters: vec![
                ("litelink_wal_syncs_total", s.writer.syncs.syncs),
                ("litelink_reader_lookups_total", s.readers.lookups),
            ],
        };
        StoreStats::new("sqlite", &s, metrics)
    }

    fn unwritable(&self) -> Option<String> {
        self.inner.writer.unwritable()
    }

    async fn close(&self) {
        self.inner.writer.close().await;
        let checkpointer = self
            .inner
            .checkpointer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(c) = checkpointer {
            let _ = tokio::task::spawn_blocking(move || drop(c)).await;
        }
        self.inner.readers.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TargetUrl;

    /// A failed sync of the WAL must never be followed by a 201: the pages
    /// it failed to write may be gone from the disk while later syncs
    /// succeed (walsync.rs). The disk error is injected; the database, its
    /// WAL, the writer and the syncs around it are real.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_wal_sync_stops_creates_and_keeps_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        // How many of the next syncs fail as if the disk returned EIO.
        let failures = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let hooks = Hooks {
            sync: {
                let failures = Arc::clone(&failures);
                Arc::new(move |file: &std::fs::File| {
                    let fail = failures.fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| n.checked_sub(1),
                    );
                    match fail {
                        Ok(_) => Err(std::io::Error::from_raw_os_error(libc::EIO)),
                        Err(_) => file.sync_data(),
                    }
                })
            },
            ..Hooks::default()
        };
        let store = SqliteStore::open_with(
            dir.path().join("l.db"),
            SqliteSettings::default(),
            CodeGenerator::new(crate::domain::CodeSettings {
                length: 8,
                locality: true,
            })
            .expect("generator"),
            hooks,
        )
        .expect("open");
        let url = |i: u32| {
            NewLink::to(TargetUrl::parse(&format!("https://example.com/{i}")).expect("url"))
        };

        let kept = store
            .create(url(1))
            .await
            .expect("create before the failure")
            .key();

        failures.store(1, std::sync::atomic::Ordering::Relaxed);
        let failed = store.create(url(2)).await;
        assert!(
            matches!(failed, Err(StoreError::WritesStopped(ref why)) if why.contains("fdatasync")),
            "the create whose sync failed: {failed:?}"
        );
        // The injected failure is used up: this create would sync fine,
        // and must still be refused.
        let later = store.create(url(3)).await;
        assert!(
            matches!(later, Err(StoreError::WritesStopped(_))),
            "a create after the failure: {later:?}"
        );

        assert_eq!(
            store.get(&kept).await.expect("read").map(|r| r.target),
            Some(url(1).target),
            "reads go on"
        );
        let stats = store.sqlite_stats().writer;
        assert_eq!(stats.syncs.failed_syncs, 1);
        assert!(
            stats
                .syncs
                .writes_stopped
                .as_deref()
                .is_some_and(|s| s.contains("fdatasync")),
            "{stats:?}"
        );
        // The second create was committed before its sync failed; the
        // third never reached the database.
        assert_eq!(stats.writes.rows, 2);
        store.close().await;
    }

    /// Every lookup a slot answers is the one the table gives, through
    /// creates, edits, visits, deletes, a change by another process and a
    /// restart; and the slots do answer the generated codes they can.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_answer_as_the_table_does_through_every_change() {
        use crate::domain::{AgentClass, VisitCounts};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        let target = |s: &str| TargetUrl::parse(s).expect("url");
        let create = |new: NewLink| {
            let store = &store;
            async move { store.create(new).await.expect("create").key() }
        };
        let short = create(url(1)).await;
        let limited = create(NewLink {
            expires_at: Some(Timestamp::from_millis(4_102_444_800_000)),
            max_visits: Some(3),
            ..url(2)
        })
        .await;
        let long_url = format!("https://example.com/{}", "x".repeat(slots::TARGET_MAX));
        let long = create(NewLink::to(target(&long_url))).await;
        let alias = create(NewLink {
            code: Some(ShortCode::parse("my-alias").expect("alias")),
            ..url(4)
        })
        .await;
        let nobody = LinkKey::default_domain(ShortCode::parse("ZZZZZZZZZZ").expect("code"));
        // On another domain: a generated link, an alias with the code of
        // `short`, and `limited`'s code, which is no link there.
        let elsewhere = DomainId(2);
        let other_generated = create(NewLink {
            domain: elsewhere,
            ..url(5)
        })
        .await;
        let same_code = create(NewLink {
            domain: elsewhere,
            code: Some(short.code.clone()),
            ..url(6)
        })
        .await;
        let not_there = LinkKey::new(elsewhere, limited.code.clone());
        // Named codes found through the name index: imported on both
        // domains, an alias with a target too long for its slot, one that
        // is deleted later, and one another process inserts.
        let named = |domain: DomainId, code: &str| {
            LinkKey::new(domain, ShortCode::parse(code).expect("code"))
        };
        let (imported, imported_there, imported_other) = (
            named(DomainId::DEFAULT, "Imported01"),
            named(elsewhere, "Imported01"),
            named(elsewhere, "Imported02"),
        );
        let row = |line: u64, key: &LinkKey| ImportRow {
            line,
            domain: key.domain,
            code: Some(key.code.clone()),
            target: Some(url(100 + line as u32).target),
            created_at: Timestamp::from_millis(1_700_000_000_000),
            expires_at: None,
            owner: None,
            deleted_at: None,
            max_visits: Some(50),
            history: None,
            visits: 4,
            imported_visits: 0,
            extra: None,
            labels: Default::default(),
        };
        let skipped = store
            .import(
                vec![
                    row(1, &imported),
                    row(2, &imported_there),
                    row(3, &imported_other),
                ],
                false,
            )
            .await
            .expect("import");
        assert!(skipped.is_empty(), "{skipped:?}");
        let long_alias = create(NewLink {
            code: Some(ShortCode::parse("long-alias").expect("alias")),
            ..NewLink::to(target(&long_url))
        })
        .await;
        let gone_alias = create(NewLink {
            code: Some(ShortCode::parse("gone-alias").expect("alias")),
            ..url(7)
        })
        .await;
        let to_rename = create(NewLink {
            code: Some(ShortCode::parse("to-rename1").expect("alias")),
            ..url(8)
        })
        .await;
        let (inserted, renamed) = (
            named(DomainId::DEFAULT, "Inserted01"),
            named(DomainId::DEFAULT, "renamed-01"),
        );
        let codes = [
            &short,
            &limited,
            &long,
            &alias,
            &nobody,
            &other_generated,
            &same_code,
            &not_there,
            &imported,
            &imported_there,
            &imported_other,
            &long_alias,
            &gone_alias,
            &to_rename,
            &inserted,
            &renamed,
        ];
        let check = |store: &SqliteStore, when: &str| {
            let table = store.inner.readers.of_the_table();
            for code in codes {
                let from_slots = store.inner.readers.get(code).expect("get");
                assert_eq!(
                    from_slots
                        .as_ref()
                        .map(|r| (&r.target, r.expires_at, r.max_visits)),
                    table.get(code).expect("table get").as_ref().map(|r| (
                        &r.target,
                        r.expires_at,
                        r.max_visits
                    )),
                    "{when}: get {code}"
                );
                assert_eq!(
                    store.inner.readers.link(code).expect("link"),
                    table.link(code).expect("table link"),
                    "{when}: link {code}"
                );
            }
        };
        let hits = |store: &SqliteStore| store.sqlite_stats().slots.expect("slots on").hits;
        check(&store, "created");
        let before = hits(&store);
        check(&store, "again");
        // Twice each (get, link): `short`, `limited`, `other_generated`,
        // and the named codes but `long-alias`. Long targets are read from
        // the table, and a slot says nothing of a code on a domain that is
        // not its row's.
        assert_eq!(hits(&store) - before, 20);

        let patch = |t: Option<&str>, max: Option<Option<u64>>| LinkPatch {
            target: t.map(target),
            expires_at: Some(None),
            max_visits: max,
            ..LinkPatch::default()
        };
        store
            .update(&short, patch(Some("https://example.com/edited"), None))
            .await
            .expect("edit");
        store
            .update(
                &long,
                patch(Some("https://example.com/short-now"), Some(Some(9))),
            )
            .await
            .expect("edit");
        store
            .update(&limited, patch(None, Some(None)))
            .await
            .expect("edit");
        store
            .update(
                &alias,
                patch(Some("https://example.com/alias-edited"), None),
            )
            .await
            .expect("edit");
        store
            .update(&imported_there, patch(Some(&long_url), None))
            .await
            .expect("edit");
        store
            .update(&long_alias, patch(Some("https://example.com/fits"), None))
            .await
            .expect("edit");
        check(&store, "edited");
        assert!(matches!(
            store.inner.readers.get(&alias).expect("get"),
            Some(r) if r.target.as_str() == "https://example.com/alias-edited"
        ));
        assert!(matches!(
            store.inner.readers.get(&long).expect("get"),
            Some(r) if r.target.as_str() == "https://example.com/short-now"
        ));

        let mut counts = VisitCounts::default();
        for _ in 0..5 {
            counts.add(Timestamp::now(), AgentClass::Browser, "");
        }
        let visits: Arc<[(LinkKey, VisitCounts)]> = vec![
            (short.clone(), counts.clone()),
            (imported.clone(), counts.clone()),
            (limited.clone(), counts),
        ]
        .into();
        store
            .record_visits(visits, Arc::new([]))
            .await
            .expect("visits");
        check(&store, "visited");
        assert_eq!(
            store
                .inner
                .readers
                .link(&short)
                .expect("link")
                .map(|l| l.visits),
            Some(5)
        );

        assert!(store.delete(&short).await.expect("delete"));
        assert!(store.delete(&gone_alias).await.expect("delete"));
        check(&store, "deleted");
        assert!(store.inner.readers.get(&short).expect("get").is_none());
        assert!(store.inner.readers.get(&gone_alias).expect("get").is_none());

        // Another process edits a row: the slots are built again from the
        // table, and the edit is served within a few ticks.
        let other = Connection::open(dir.path().join("l.db")).expect("open");
        // One transaction: a reader that sees the first edit sees all.
        other
            .execute_batch(&format!(
                "BEGIN;
                 UPDATE links SET target = 'https://example.com/by-sqlite3' WHERE code = '{}';
                 UPDATE links SET target = 'https://example.com/named-by-sqlite3' \
                 WHERE code = 'Imported02';
                 INSERT INTO links (code, target, created_at, named, domain) \
                 VALUES ('Inserted01', 'https://example.com/inserted', 0, 1, 0);
                 UPDATE links SET code = 'renamed-01' WHERE code = 'to-rename1';
                 COMMIT;",
                limited.code
            ))
            .expect("update");
        drop(other);
        let readers = Arc::clone(&store.inner.readers);
        let code = limited.clone();
        wait_for("the other process's edit", move || {
            readers
                .get(&code)
                .ok()
                .flatten()
                .is_some_and(|r| r.target.as_str() == "https://example.com/by-sqlite3")
        })
        .await;
        let slots = || store.sqlite_stats().slots.expect("slots on");
        wait_for("the slots built again", || slots().state == "ready").await;
        assert_eq!(slots().builds, 2);
        // A code the index no longer holds is read from SQLite, whose
        // pooled snapshots see another process's commit within 100 ms.
        let readers = Arc::clone(&store.inner.readers);
        let code = to_rename.clone();
        wait_for("the renamed code gone", move || {
            readers.get(&code).is_ok_and(|r| r.is_none())
        })
        .await;
        check(&store, "changed by another process");
        assert!(matches!(
            store.inner.readers.get(&inserted).expect("get"),
            Some(r) if r.target.as_str() == "https://example.com/inserted"
        ));
        assert!(matches!(
            store.inner.readers.get(&imported_other).expect("get"),
            Some(r) if r.target.as_str() == "https://example.com/named-by-sqlite3"
        ));
        assert!(store.inner.readers.get(&renamed).expect("get").is_some());
        // Every named row of the table is in the index again, the deleted
        // one too (its code stays taken): all nine.
        assert_eq!(slots().named_codes, 9);

        // A restart builds them from the table.
        store.close().await;
        store = open(dir.path());
        check(&store, "reopened");
        wait_for("the slots built", || {
            store.sqlite_stats().slots.expect("slots").state == "ready"
        })
        .await;
        let before = hits(&store);
        check(&store, "reopened and built");
        // Twice each: `limited`, `long` (its target is short now), the
        // deleted `short` and `gone-alias`, whose slots say they are gone,
        // the generated link on the other domain, and the named codes but
        // `Imported01` on the other domain, whose target is long now, and
        // the code renamed away.
        assert_eq!(hits(&store) - before, 24);
        assert_eq!(store.sqlite_stats().slots.expect("slots").named_codes, 9);
        store.close().await;
    }

    fn open(dir: &Path) -> SqliteStore {
        open_hooked(dir, Hooks::default())
    }

    fn open_hooked(dir: &Path, hooks: Hooks) -> SqliteStore {
        SqliteStore::open_with(
            dir.join("l.db"),
            SqliteSettings::default(),
            CodeGenerator::new(crate::domain::CodeSettings::default()).expect("generator"),
            hooks,
        )
        .expect("open")
    }

    fn url(i: u32) -> NewLink {
        NewLink::to(TargetUrl::parse(&format!("https://example.com/{i}")).expect("url"))
    }

    /// Polls `done` every 5 ms for up to 10 s.
    async fn wait_for(what: &str, done: impl Fn() -> bool) {
        for _ in 0..2000 {
            if done() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// The 201's promise at full durability: the reply waits for the sync.
    /// The sync is held until the test lets it go; a writer that answered
    /// after its commit but before its sync would answer meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_create_is_answered_only_after_its_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The next sync waits until the test lets it go.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = std::sync::Mutex::new(Some(held));
        let hooks = Hooks {
            sync: Arc::new(move |file: &std::fs::File| {
                let wait = held.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(wait) = wait {
                    let _ = wait.recv();
                }
                file.sync_data()
            }),
            ..Hooks::default()
        };
        let store = Arc::new(open_hooked(dir.path(), hooks));
        let creating = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.create(url(1)).await })
        };
        wait_for("the commit", || {
            store.sqlite_stats().writer.writes.commits == 1
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!creating.is_finished(), "answered before its sync");
        assert_eq!(store.sqlite_stats().writer.syncs.syncs, 0);
        release.send(()).expect("release the sync");
        let code = tokio::time::timeout(std::time::Duration::from_secs(10), creating)
            .await
            .expect("answered after the sync")
            .expect("task")
            .expect("created")
            .key();
        assert_eq!(store.sqlite_stats().writer.syncs.syncs, 1);
        assert!(store.get(&code).await.expect("read").is_some());
        store.close().await;
    }

    #[tokio::test]
    async fn a_colliding_code_is_retried_and_an_exhausted_one_fails_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Codes drawn before any generated one, to force collisions.
        let script = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let hooks = Hooks {
            draw: Some({
                let script = Arc::clone(&script);
                Arc::new(move || script.lock().unwrap_or_else(|e| e.into_inner()).pop_front())
            }),
            ..Hooks::default()
        };
        let store = open_hooked(dir.path(), hooks);
        let taken = ShortCode::parse("CCCCCCCCCC").expect("code");
        script
            .lock()
            .unwrap()
            .extend([taken.clone(), taken.clone()]);
        assert_eq!(store.create(url(1)).await.expect("first").code, taken);
        // The second draw collides and is retried with a generated code.
        let second = store.create(url(2)).await.expect("retried").code;
        assert_ne!(second, taken);
        assert_eq!(store.sqlite_stats().writer.writes.code_collisions, 1);

        script.lock().unwrap().extend(std::iter::repeat_n(
            taken.clone(),
            crate::store::queue::MAX_CODE_ATTEMPTS as usize,
        ));
        let exhausted = store.create(url(3)).await;
        assert!(
            matches!(exhausted, Err(StoreError::CodeSpaceExhausted(_))),
            "{exhausted:?}"
        );
        // Only that create failed: the next is stored, and the count of
        // links is right.
        let fourth = store.create(url(4)).await.expect("after exhaustion").key();
        let stats = store.sqlite_stats();
        assert_eq!(stats.links, 3);
        assert_eq!(stats.writer.writes.failed_batches, 0);
        assert!(store.get(&fourth).await.expect("read").is_some());
        store.close().await;
    }

    /// The rows of `links` as (id, code, named, deleted).
    fn rows(dir: &Path) -> Vec<(i64, String, bool, bool)> {
        let conn = Connection::open(dir.join("l.db")).expect("open");
        conn.prepare("SELECT id, code, named, deleted_at IS NOT NULL FROM links ORDER BY id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    fn book(dir: &Path) -> Codebook {
        let conn = Connection::open(dir.join("l.db")).expect("open");
        Codebook::new(&migrations::code_key(&conn).expect("key"), 10)
    }

    /// An imported code that a generated row holds is skipped, whether the
    /// row was there before or came earlier in the same batch; one that a
    /// row id past the table would generate is imported, and that id then
    /// never generates it again.
    #[tokio::test]
    async fn imported_codes_never_take_a_generated_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let first = store.create(url(1)).await.expect("create").key();
        let book = book(dir.path());
        let row = |line: u64, code: Option<ShortCode>| ImportRow {
            line,
            domain: DomainId::DEFAULT,
            code,
            target: Some(url(line as u32).target),
            created_at: Timestamp::now(),
            expires_at: None,
            owner: None,
            deleted_at: None,
            max_visits: None,
            history: None,
            visits: 0,
            imported_visits: 0,
            extra: None,
            labels: Default::default(),
        };
        // Ids: 1 is `first`; line 2 generates id 2; line 3 names id 2's
        // code (taken in this batch), line 4 id 1's (taken before), line 5
        // the code of id 5 (free: no row yet), which then goes to id 3.
        let skipped = store
            .import(
                vec![
                    row(2, None),
                    row(3, book.code_of(2)),
                    row(4, Some(first.code.clone())),
                    row(5, book.code_of(5)),
                ],
                false,
            )
            .await
            .expect("import");
        // Both codes exist with other targets.
        assert_eq!(skipped, [(3, Existing::Conflict), (4, Existing::Conflict)]);
        // Later creates skip the code the import named.
        let mut made = Vec::new();
        for i in 0..3 {
            made.push(store.create(url(10 + i)).await.expect("create").key());
        }
        store.close().await;
        let rows = rows(dir.path());
        let codes: Vec<&str> = rows.iter().map(|(_, c, _, _)| c.as_str()).collect();
        let mut unique = codes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), codes.len(), "{rows:?}");
        let named: Vec<_> = rows.iter().filter(|r| r.2).map(|r| r.1.clone()).collect();
        assert_eq!(named, [book.code_of(5).expect("code").to_string()]);
    }

    #[tokio::test]
    async fn generated_codes_are_their_row_ids_under_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let mut codes = Vec::new();
        for i in 0..5 {
            codes.push(store.create(url(i)).await.expect("create").key());
        }
        for (i, code) in codes.iter().enumerate() {
            let found = store.get(code).await.expect("read").expect("found");
            assert_eq!(found.target, url(i as u32).target);
        }
        store.close().await;
        let book = book(dir.path());
        let rows = rows(dir.path());
        assert_eq!(rows.len(), 5);
        for (i, (id, code, named, _)) in rows.into_iter().enumerate() {
            assert_eq!(id, i as i64 + 1, "ids ascend: creates append");
            assert!(!named);
            assert_eq!(code, codes[i].code.as_str());
            assert_eq!(book.code_of(id as u64).as_ref(), Some(&codes[i].code));
        }
    }

    #[tokio::test]
    async fn aliases_and_generated_codes_never_share_a_code_and_ids_never_come_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let first = store.create(url(1)).await.expect("create").key();
        let book = book(dir.path());
        // An alias that is the code of the row id after it (the alias
        // takes id 2): id 3 is skipped, and both links keep their own code.
        let next = book.code_of(3).expect("code");
        let alias = NewLink {
            code: Some(next.clone()),
            ..url(2)
        };
        assert_eq!(store.create(alias).await.expect("alias").code, next);
        let next = LinkKey::default_domain(next);
        let third = store.create(url(3)).await.expect("create").key();
        assert_ne!(third, next);
        assert_eq!(
            book.code_of(4).as_ref(),
            Some(&third.code),
            "id 3 is skipped"
        );
        assert_eq!(store.sqlite_stats().writer.writes.code_collisions, 1);
        for (code, i) in [(&first, 1), (&next, 2), (&third, 3)] {
            let found = store.get(code).await.expect("read").expect("found");
            assert_eq!(found.target, url(i).target, "{code}");
        }
        // A generated code cannot be taken as an alias, live or deleted.
        let taken = |key: &LinkKey| NewLink {
            code: Some(key.code.clone()),
            ..url(9)
        };
        assert!(matches!(
            store.create(taken(&first)).await,
            Err(StoreError::CodeTaken(_))
        ));
        assert!(store.delete(&third).await.expect("delete"));
        assert!(store.get(&third).await.expect("read").is_none());
        assert!(matches!(
            store.create(taken(&third)).await,
            Err(StoreError::CodeTaken(_))
        ));
        store.close().await;
        // After a restart the ids go on from the highest ever stored.
        let store = open(dir.path());
        let fifth = store.create(url(5)).await.expect("create").key();
        assert_eq!(book.code_of(5).as_ref(), Some(&fifth.code));
        assert_eq!(store.sqlite_stats().links, 3);
        store.close().await;
    }

    #[tokio::test]
    async fn a_schema_4_database_keeps_its_codes_through_migration_5() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let mut conn = Connection::open(dir.path().join("l.db")).expect("open");
            migrations::migrate_to(&mut conn, 4).expect("schema 4");
            conn.execute_batch(
                "INSERT INTO links (code, target, created_at, visits) VALUES
                    ('Legacy0001', 'https://example.com/1', 1, 7),
                    ('Legacy0002', '', 2, 0),
                    ('my-alias', 'https://example.com/3', 3, 0);
                 UPDATE links SET deleted_at = 5 WHERE code = 'Legacy0002';",
            )
            .expect("rows");
        }
        let store = open(dir.path());
        assert_eq!(store.sqlite_stats().links, 2, "the live count of meta");
        let code = |s: &str| LinkKey::default_domain(ShortCode::parse(s).expect("code"));
        let legacy = store.link(&code("Legacy0001")).await.expect("read");
        assert_eq!(legacy.map(|l| l.visits), Some(7));
        assert!(store.get(&code("my-alias")).await.expect("read").is_some());
        assert!(
            store
                .get(&code("Legacy0002"))
                .await
                .expect("read")
                .is_none()
        );
        // Old codes, live or deleted, stay taken; new creates get ids.
        for old in ["Legacy0001", "Legacy0002", "my-alias"] {
            let again = NewLink {
                code: Some(code(old).code),
                ..url(4)
            };
            assert!(matches!(
                store.create(again).await,
                Err(StoreError::CodeTaken(_))
            ));
        }
        let fresh = store.create(url(5)).await.expect("create").key();
        store.close().await;
        let rows = rows(dir.path());
        assert_eq!(rows.len(), 4);
        assert!(rows[..3].iter().all(|r| r.2), "old rows are named");
        assert_eq!((rows[3].0, rows[3].2), (4, false));
        assert_eq!(book(dir.path()).code_of(4), Some(fresh.code));
    }
}
