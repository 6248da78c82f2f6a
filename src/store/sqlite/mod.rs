//! The embedded SQLite store: WAL mode, reader connections for lookups and
//! one group-committing writer thread for creates.

mod checkpointer;
mod connection;
pub mod memstatus;
pub mod migrations;
mod readers;
mod replies;
mod walsync;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use self::checkpointer::Checkpointer;
use self::connection::Role;
use self::readers::{Epoch, Readers};
use self::writer::Writer;
use super::{LinkStore, StoreError};
use crate::domain::{CodeGenerator, ShortCode, TargetUrl};

pub use connection::DEFAULT_BUSY_TIMEOUT;

/// How connections live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectionMode {
    /// Long-lived connections reused across requests, with cached statements.
    Pooled,
    /// A new connection for every read, as the first article's service
    /// had; kept to reproduce its experiment. The writer thread keeps its
    /// one connection either way.
    PerRequest,
}

/// Where a lookup runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadOn {
    /// Directly on the async worker thread that serves the request. A point
    /// read on a warm database takes microseconds, less than a hop to
    /// another thread; see docs/benchmarks.md for the measurement.
    Worker,
    /// On tokio's blocking pool, so a slow disk never stalls a worker.
    Blocking,
}

/// What a 201 promises about the row it announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// WAL with `synchronous=FULL`: the WAL is fsynced at every commit, so
    /// an acknowledged create survives a crash of the process and of power.
    Full,
    /// WAL with `synchronous=NORMAL`: survives a process crash; the last
    /// commits may be lost on power loss.
    Normal,
    /// No sync at all. For benchmarks only.
    Off,
}

#[derive(Debug, Clone)]
pub struct SqliteConfig {
    pub connections: ConnectionMode,
    pub read_on: ReadOn,
    /// `false` sets `cache_size=0` and `temp_store=0` on every connection.
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
}

impl SqliteConfig {
    /// Full durability with group commit: the writer syncs the WAL itself,
    /// once for all commits made while creates kept arriving (see
    /// `walsync.rs`). Without group commit, `synchronous=FULL` syncs inside
    /// every commit, the classic one-sync-per-create baseline.
    pub fn grouped_sync(&self) -> bool {
        self.durability == Durability::Full && self.batch_max > 1
    }
}

impl Default for SqliteConfig {
    fn default() -> Self {
        Self {
            connections: ConnectionMode::Pooled,
            read_on: ReadOn::Worker,
            page_cache: true,
            durability: Durability::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            batch_max: 512,
            write_queue: 4096,
            max_readers: 64,
            wal_preallocate: 64 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
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
}

pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: SqliteConfig,
    readers: Arc<Readers>,
    writer: Writer,
    checkpointer: std::sync::Mutex<Option<Checkpointer>>,
    compile_options: Vec<String>,
    /// Read back from SQLite at open, while a connection was certainly
    /// open: in per-request mode none may be open when `/stats` asks.
    memstatus: bool,
    /// Whether generated codes share a bucket prefix (CodeGenerator).
    code_locality: bool,
}

impl SqliteStore {
    /// Opens (or creates) the database, migrates it, switches it to WAL and
    /// starts the writer. MEMSTATUS must have been configured before this.
    pub fn open(
        path: impl AsRef<Path>,
        config: SqliteConfig,
        codes: CodeGenerator,
    ) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |source| OpenError::Open {
            path: path.clone(),
            source,
        };
        let mut conn = connection::open(&path, &config, Role::Writer).map_err(open_err)?;
        connection::enable_wal(&conn).map_err(open_err)?;
        migrations::migrate(&mut conn).map_err(|source| OpenError::Migrate {
            path: path.clone(),
            source,
        })?;
        let compile_options = memstatus::compile_options(&conn).map_err(open_err)?;
        let memstatus = memstatus::active();
        let epoch = Arc::new(Epoch::default());
        let readers = Arc::new(Readers::new(
            path.clone(),
            config.clone(),
            Arc::clone(&epoch),
        ));
        // Checkpoints run on their own thread (checkpointer.rs), not inside
        // the writer's commits.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(open_err)?;
        let code_locality = codes.has_locality();
        let writer = Writer::start(conn, &path, &config, codes, Arc::clone(&epoch))?;
        let checkpointer = Checkpointer::start(
            path.clone(),
            config.clone(),
            Arc::clone(&writer.stats),
            Arc::clone(&readers),
            epoch,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                config,
                readers,
                writer,
                checkpointer: std::sync::Mutex::new(Some(checkpointer)),
                compile_options,
                memstatus,
                code_locality,
            }),
        })
    }

    pub fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    /// Whether SQLite's memory statistics (and their global mutex) are on
    /// in this process, as SQLite reported it when the store opened.
    pub fn memstatus(&self) -> bool {
        self.inner.memstatus
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Readers) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        match self.inner.config.read_on {
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

#[async_trait]
impl LinkStore for SqliteStore {
    async fn get(&self, code: &ShortCode) -> Result<Option<TargetUrl>, StoreError> {
        match self.inner.config.read_on {
            // No closure, no clone: the lookup runs right here.
            ReadOn::Worker => Ok(self.inner.readers.get(code)?),
            ReadOn::Blocking => {
                let code = code.clone();
                self.read(move |r| r.get(&code)).await
            }
        }
    }

    async fn create(&self, target: TargetUrl) -> Result<ShortCode, StoreError> {
        self.inner.writer.create(target).await
    }

    async fn stats(&self) -> Result<serde_json::Value, StoreError> {
        let links: i64 = self
            .read(|r| {
                r.with_connection(|c| c.query_row("SELECT count(*) FROM links", [], |r| r.get(0)))
            })
            .await?;
        let c = &self.inner.config;
        let w = &self.inner.writer.stats;
        Ok(json!({
            "backend": "sqlite",
            "path": self.inner.path.display().to_string(),
            "sqlite_version": memstatus::sqlite_version(),
            "compile_options": self.inner.compile_options,
            "memstatus": self.inner.memstatus,
            "connections": c.connections,
            "read_on": c.read_on,
            "page_cache": if c.page_cache { "on" } else { "off" },
            "durability": c.durability,
            "links": links,
            "readers": {
                "lookups": self.inner.readers.stats.lookups.load(Ordering::Relaxed),
                "snapshots": self.inner.readers.stats.snapshots.load(Ordering::Relaxed),
            },
            "writer": {
                "group_commit": c.batch_max > 1,
                "batch_max": c.batch_max,
                "queue_capacity": self.inner.writer.capacity(),
                "queue_len": self.inner.writer.queue_len(),
                "commits": w.commits.load(Ordering::Relaxed),
                "rows": w.rows.load(Ordering::Relaxed),
                "largest_batch": w.largest_batch.load(Ordering::Relaxed),
                "failed_batches": w.failed_batches.load(Ordering::Relaxed),
                "code_collisions": w.code_collisions.load(Ordering::Relaxed),
                "code_locality": self.inner.code_locality,
                "rejected_queue_full": w.rejected_full.load(Ordering::Relaxed),
                "grouped_sync": c.grouped_sync(),
                "wal_preallocate_bytes": if c.durability == Durability::Full { c.wal_preallocate } else { 0 },
                "syncs": w.syncs.load(Ordering::Relaxed),
                "failed_syncs": w.failed_syncs.load(Ordering::Relaxed),
                "writes_stopped": w.writes_stopped.get(),
                "sync_ms_total": w.sync_micros.load(Ordering::Relaxed) / 1000,
                "checkpoints": w.checkpoints.load(Ordering::Relaxed),
            },
        }))
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

    /// A failed sync of the WAL must never be followed by a 201: the pages
    /// it failed to write may be gone from the disk while later syncs
    /// succeed (walsync.rs). The disk error is injected; the database, its
    /// WAL, the writer and the syncs around it are real.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_wal_sync_stops_creates_and_keeps_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(
            dir.path().join("l.db"),
            SqliteConfig::default(),
            CodeGenerator::new(8, true),
        )
        .expect("open");
        let url = |i: u32| TargetUrl::parse(&format!("https://example.com/{i}")).expect("url");

        let kept = store
            .create(url(1))
            .await
            .expect("create before the failure");

        store
            .inner
            .writer
            .stats
            .fail_syncs
            .store(1, Ordering::Relaxed);
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
            store.get(&kept).await.expect("read").map(|t| t.to_string()),
            Some(url(1).to_string()),
            "reads go on"
        );
        let stats = store.stats().await.expect("stats");
        assert_eq!(stats["writer"]["failed_syncs"], 1);
        assert!(
            stats["writer"]["writes_stopped"]
                .as_str()
                .is_some_and(|s| s.contains("fdatasync")),
            "{stats}"
        );
        // The second create was committed before its sync failed; the
        // third never reached the database.
        assert_eq!(stats["writer"]["rows"], 2);
        store.close().await;
    }
}
