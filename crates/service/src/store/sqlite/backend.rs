//! The SQLite backend: what opens a [`SqliteStore`] and what checks its file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;

use super::lock::DbLock;
use super::{Durability, SqliteSettings, SqliteStore, build_info, doctor, memstatus};
use crate::domain::CodeGenerator;
use crate::store::{LinkStore, Purpose};

pub(crate) struct Backend {
    db: PathBuf,
    settings: SqliteSettings,
}

impl Backend {
    pub(crate) fn new(db: PathBuf, settings: SqliteSettings) -> Self {
        Self { db, settings }
    }
}

#[async_trait]
impl crate::store::Backend for Backend {
    /// Opens the file on the blocking pool. MEMSTATUS is set first, since
    /// SQLite accepts it only before its first connection.
    async fn open(
        &self,
        codes: CodeGenerator,
        purpose: Purpose,
    ) -> anyhow::Result<Arc<dyn LinkStore>> {
        prepare_file(&self.db)?;
        let lock = match purpose {
            Purpose::Serve => Some(DbLock::acquire(&self.db)?),
            Purpose::Import => Some(DbLock::acquire(&self.db).map_err(|e| {
                anyhow::anyhow!(
                    "import refuses to run while another process holds the database: {e}"
                )
            })?),
            Purpose::Tool => None,
        };
        let mut settings = self.settings.clone();
        if purpose != Purpose::Serve {
            // A tool serves no lookups: no link slots to build.
            settings.slots = false;
        }
        memstatus::configure(settings.memstatus)?;
        let db = self.db.clone();
        let opened = tokio::task::spawn_blocking(move || SqliteStore::open(db, settings, codes))
            .await
            .context("opening the store panicked")
            .and_then(|r| r.map_err(anyhow::Error::from));
        let store = match opened {
            Ok(store) => store.holding(lock),
            Err(e) => {
                if let Some(lock) = lock {
                    lock.abandon();
                }
                return Err(e);
            }
        };
        if purpose == Purpose::Serve {
            // Only one server holds the file: what an earlier one claimed
            // and never settled (it stopped, or was killed) is due now.
            store.release_claims().await?;
        }
        log_opened(&store, &codes);
        Ok(Arc::new(store))
    }

    fn doctor(&self, full: bool) -> anyhow::Result<bool> {
        doctor::run(&self.db, &self.settings, full)
    }
}

/// Refuses a path that is not a regular file (`/dev/null`, a directory,
/// a pipe), and makes a new database only its owner's: it holds key and
/// password hashes, the code key and protected targets. SQLite gives its
/// WAL and shared-memory files the database's mode, so they follow; an
/// operator who wants a group to read it sets 0640 on the file.
fn prepare_file(db: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::metadata(db) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => anyhow::bail!(
            "{} is not a regular file: --db names a database file",
            db.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(db)
            {
                Ok(_) => Ok(()),
                // Made meanwhile by another process: its own mode stands.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                // SQLite says why better (a read-only directory, ...).
                Err(_) => Ok(()),
            }
        }
        Err(_) => Ok(()),
    }
}

fn log_opened(store: &SqliteStore, codes: &CodeGenerator) {
    let s = store.settings();
    tracing::info!(
        sqlite = build_info::sqlite_version(),
        db = %store.path().display(),
        memstatus = store.memstatus(),
        connections = %s.connections,
        read_on = %s.read_on,
        page_cache = s.page_cache,
        durability = %s.durability,
        batch_max = s.batch_max,
        wal_preallocate_mib = s.wal_preallocate_applied() >> 20,
        code_locality = codes.has_locality(),
        "store opened"
    );
    if store.memstatus() {
        tracing::warn!(
            "SQLite MEMSTATUS is on: every SQLite allocation takes one process-wide mutex, \
             which costs throughput when several threads use SQLite at once"
        );
    }
    if s.durability == Durability::Off {
        tracing::warn!(
            "durability is off: acknowledged links can be lost in a crash; use for benchmarks only"
        );
    }
}
