//! Where links live. The [`LinkStore`] trait is what the rest of the service
//! sees; `sqlite` is the embedded default, and a shared PostgreSQL store can
//! sit behind the same trait so that several stateless instances share data.

pub mod sqlite;

use async_trait::async_trait;

use crate::domain::{ShortCode, TargetUrl};

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

    /// Backend-specific facts and counters for `/stats`.
    async fn stats(&self) -> Result<serde_json::Value, StoreError>;

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
