//! Facts about the SQLite this binary was built with, for `/stats` and
//! `litelink doctor`.

use rusqlite::Connection;

pub(crate) fn sqlite_version() -> &'static str {
    rusqlite::version()
}

/// `pragma_compile_options` lists only options that differ from SQLite's own
/// defaults, so `DEFAULT_MEMSTATUS=0` appears there exactly when the build
/// flag took effect.
pub(crate) fn compile_options(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT compile_options FROM pragma_compile_options")?;
    stmt.query_map([], |r| r.get(0))?.collect()
}
