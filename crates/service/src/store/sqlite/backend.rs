//! The SQLite backend: what opens a [`SqliteStore`] and what checks its file.

use std::path::PathBuf;
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
        let store = tokio::task::spawn_blocking(move || SqliteStore::open(db, settings, codes))
            .await
            .context("opening the store panicked")??
            .holding(lock);
        log_opened(&store, &codes);
        Ok(Arc::new(store))
    }

    fn doctor(&self, full: bool) -> anyhow::Result<bool> {
        doctor::run(&self.db, &self.settings, full)
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
