//! Opening a connection with the settings every connection must share.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::{Durability, SqliteSettings};

/// What a connection is for: readers are opened `query_only`, so a bug on
/// the read path cannot write, and only the writer's `synchronous` matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Reader,
    Writer,
}

pub(super) fn open(
    path: &Path,
    settings: &SqliteSettings,
    role: Role,
) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(settings.busy_timeout)?;
    if !settings.page_cache {
        // The second article's experiment: no page cache of SQLite's own,
        // temporary tables on disk; only the OS file cache remains.
        conn.pragma_update(None, "cache_size", 0)?;
        conn.pragma_update(None, "temp_store", 0)?;
    }
    match role {
        Role::Reader => conn.pragma_update(None, "query_only", true)?,
        Role::Writer => {
            let sync = match settings.durability {
                // The writer syncs the WAL itself before any reply: see
                // walsync.rs.
                Durability::Full if settings.grouped_sync() => "NORMAL",
                Durability::Full => "FULL",
                Durability::Normal => "NORMAL",
                Durability::Off => "OFF",
            };
            conn.pragma_update(None, "synchronous", sync)?;
        }
    }
    Ok(conn)
}

/// Puts the database in WAL mode. The mode is stored in the file, so this
/// runs once at start-up rather than on every connection; WAL lets readers
/// run while the writer commits.
pub(super) fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("journal_mode stayed '{mode}'; WAL is required")),
        ));
    }
    Ok(())
}
