//! Opening a connection with the settings every connection must share.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

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
    configure(&conn, settings, role)?;
    Ok(conn)
}

/// Applies the settings every connection of `role` runs with. Run again
/// after a migration: a schema change reloads the schema, and with it the
/// page cache size goes back to SQLite's default.
pub(super) fn configure(
    conn: &Connection,
    settings: &SqliteSettings,
    role: Role,
) -> rusqlite::Result<()> {
    conn.busy_timeout(settings.busy_timeout)?;
    if !settings.page_cache {
        // The second article's experiment: no page cache of SQLite's own,
        // temporary tables in files; only the OS file cache remains.
        conn.pragma_update(None, "cache_size", 0)?;
        conn.pragma_update(None, "temp_store", "FILE")?;
    } else if role == Role::Writer && settings.writer_cache_mib > 0 {
        // Negative: KiB rather than pages.
        conn.pragma_update(
            None,
            "cache_size",
            -1024 * i64::from(settings.writer_cache_mib),
        )?;
    }
    // Off with the page cache: that experiment measures reads through the
    // OS file cache alone, as the second article's service did.
    let mmap = if settings.page_cache {
        settings.mmap_mib
    } else {
        0
    };
    let bytes = i64::try_from(mmap.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
    conn.pragma_update(None, "mmap_size", bytes)?;
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
    Ok(())
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

/// What SQLite says a connection runs with, read back from the connection
/// itself rather than from the settings: `/stats` shows it, so that a
/// setting that was not applied shows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Applied {
    /// `off`, `normal`, `full` or `extra`.
    pub synchronous: &'static str,
    /// Pages (positive) or KiB (negative) of page cache; 0: none.
    pub cache_size: i64,
    /// `default`, `file` or `memory`.
    pub temp_store: &'static str,
    pub query_only: bool,
    /// Bytes of the file mapped into memory (SQLite's cap applied).
    pub mmap_size: i64,
}

pub(super) fn applied(conn: &Connection) -> rusqlite::Result<Applied> {
    let int = |pragma: &str| conn.pragma_query_value(None, pragma, |r| r.get::<_, i64>(0));
    Ok(Applied {
        synchronous: match int("synchronous")? {
            0 => "off",
            1 => "normal",
            2 => "full",
            _ => "extra",
        },
        cache_size: int("cache_size")?,
        temp_store: match int("temp_store")? {
            1 => "file",
            2 => "memory",
            _ => "default",
        },
        query_only: int("query_only")? != 0,
        mmap_size: int("mmap_size")?,
    })
}
