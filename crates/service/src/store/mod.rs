//! Where links live. The [`LinkStore`] trait is what the rest of the service
//! sees; `sqlite/` is the embedded default. A new backend is a folder here
//! that implements the trait, a variant of [`StoreStats`], and a branch in
//! `startup.rs` that opens it.

pub mod sqlite;

use std::path::PathBuf;

use async_trait::async_trait;
use serde::Serialize;

use crate::domain::{ShortCode, TargetUrl};

/// Where and how links are stored.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// The SQLite database file; created with its schema on first start.
    pub db: PathBuf,
    pub sqlite: sqlite::SqliteSettings,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            db: PathBuf::from("litelink.db"),
            sqlite: sqlite::SqliteSettings::default(),
        }
    }
}

/// What a store reports for `/stats`, tagged with its backend's name.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum StoreStats {
    Sqlite(sqlite::SqliteStats),
}

/// Durable storage of code -> URL mappings.
///
/// `create` returning `Ok` is a promise: the row is committed with the
/// configured durability before the caller hears about it.
#[async_trait]
pub trait LinkStore: Send + Sync + 'static {
    /// Looks a code up. `Ok(None)` is an unknown code, not an error.
    async fn get(&self, code: &ShortCode) -> Result<Option<TargetUrl>, StoreError>;

    /// Stores a new link under a freshly generated code and returns the code.
    async fn create(&self, target: TargetUrl) -> Result<ShortCode, StoreError>;

    /// Facts and counters for `/stats`. Cheap: no query runs for it.
    fn stats(&self) -> StoreStats;

    /// Finishes queued writes and closes the database. Later calls fail with
    /// [`StoreError::Closed`].
    async fn close(&self);
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write queue is full: the client should retry shortly.
    #[error("the write queue is full")]
    Busy,
    #[error("the store is closed")]
    Closed,
    #[error("no free short code found after {0} attempts")]
    CodeSpaceExhausted(u32),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("background task failed: {0}")]
    Task(String),
    /// Creates are refused for the rest of this process's life because a
    /// sync of the write-ahead log failed (see `sqlite::walsync`); reads go
    /// on. The string is the failure, for the log.
    #[error("writes are stopped: {0}")]
    WritesStopped(String),
}
