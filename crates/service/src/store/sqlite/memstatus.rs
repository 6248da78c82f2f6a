//! SQLite's memory statistics switch (MEMSTATUS), set once per process.
//!
//! With MEMSTATUS on, every `sqlite3_malloc`/`sqlite3_free` in the process
//! takes one global mutex to keep `sqlite3_memory_used()` exact. Threads that
//! allocate a lot inside SQLite (opening connections, preparing statements)
//! then queue on that mutex. The build sets `SQLITE_DEFAULT_MEMSTATUS=0`
//! (`.cargo/config.toml`), and [`configure`] sets it again at run time so the
//! choice holds even in a build made without that file.

use std::sync::OnceLock;

use rusqlite::ffi;

static CONFIGURED: OnceLock<bool> = OnceLock::new();

#[derive(Debug, thiserror::Error)]
pub(crate) enum MemstatusError {
    #[error(
        "sqlite3_config(SQLITE_CONFIG_MEMSTATUS) returned {0}: SQLite was already initialised, \
         so MEMSTATUS must be configured before the first connection opens"
    )]
    TooLate(i32),
    #[error("MEMSTATUS was already configured as {0} in this process")]
    AlreadySet(bool),
}

/// Turns SQLite's memory statistics on or off for the whole process.
///
/// Must run before anything opens a connection: `sqlite3_config` is refused
/// once SQLite has initialised. Calling it again with the same value is a
/// no-op, so test harnesses can call it from every test.
pub(crate) fn configure(on: bool) -> Result<(), MemstatusError> {
    let mut result = Ok(());
    let set = *CONFIGURED.get_or_init(|| {
        // SAFETY: sqlite3_config is documented as safe to call before
        // sqlite3_initialize, from one thread; OnceLock gives us both. After
        // initialisation it returns SQLITE_MISUSE, which we report.
        let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, i32::from(on)) };
        // Too late to change, but nothing to change: off was asked for and
        // the build's default is off (a process that opened a connection
        // before, such as a test harness).
        if rc != ffi::SQLITE_OK && (on || !built_off()) {
            result = Err(MemstatusError::TooLate(rc));
        }
        on
    });
    result?;
    if set != on {
        return Err(MemstatusError::AlreadySet(set));
    }
    Ok(())
}

/// Whether this SQLite was compiled with `SQLITE_DEFAULT_MEMSTATUS=0`.
fn built_off() -> bool {
    // SAFETY: a NUL-terminated static string; the function only reads it.
    unsafe { ffi::sqlite3_compileoption_used(c"DEFAULT_MEMSTATUS=0".as_ptr()) == 1 }
}

/// Reads the state back from SQLite itself rather than trusting the request:
/// with MEMSTATUS off, `sqlite3_memory_used()` stays 0, and any open
/// connection has allocated memory, so a non-zero count means it is on.
/// Only meaningful while at least one connection is open.
pub(crate) fn active() -> bool {
    // SAFETY: a plain read of a counter; thread-safe in SQLite's API.
    unsafe { ffi::sqlite3_memory_used() > 0 }
}
