//! The read side: connections for point lookups, either kept and reused
//! (with their prepared statements) or opened anew for every request.

use std::path::PathBuf;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension};

use super::connection::{self, Role};
use super::{ConnectionMode, SqliteConfig};
use crate::domain::{ShortCode, TargetUrl};

const SELECT_TARGET: &str = "SELECT target FROM links WHERE code = ?1";

/// Idle reader connections. A plain mutex-guarded stack: it is held only to
/// push or pop, never during a query, so on a handful of cores it is not
/// contended; a connection is opened when the stack is empty and dropped
/// when it is full, so the pool follows the real concurrency.
pub(super) struct Readers {
    path: PathBuf,
    config: SqliteConfig,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
}

impl Readers {
    pub(super) fn new(path: PathBuf, config: SqliteConfig) -> Self {
        let max_idle = config.max_readers;
        Self {
            path,
            config,
            idle: Mutex::new(Vec::with_capacity(max_idle)),
            max_idle,
        }
    }

    pub(super) fn get(&self, code: &ShortCode) -> rusqlite::Result<Option<TargetUrl>> {
        self.with_connection(|conn| {
            conn.prepare_cached(SELECT_TARGET)?
                .query_row([code.as_str()], |r| {
                    r.get_ref(0)?
                        .as_str()
                        .map(TargetUrl::from_trusted)
                        .map_err(Into::into)
                })
                .optional()
        })
    }

    pub(super) fn with_connection<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        match self.config.connections {
            ConnectionMode::PerRequest => {
                let conn = connection::open(&self.path, &self.config, Role::Reader)?;
                f(&conn)
            }
            ConnectionMode::Pooled => {
                let conn = self.checkout()?;
                let result = f(&conn);
                self.checkin(conn);
                result
            }
        }
    }

    fn checkout(&self) -> rusqlite::Result<Connection> {
        let popped = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match popped {
            Some(conn) => Ok(conn),
            None => connection::open(&self.path, &self.config, Role::Reader),
        }
    }

    fn checkin(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }

    /// Closes the idle connections; used at shutdown.
    pub(super) fn close(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
