//! One server per database: `litelink serve` (and `import`) hold an
//! exclusive lock on `<db>-litelink-lock` for as long as they run. The file
//! holds the holder's PID, so the next one can say who has it. The kernel
//! drops the lock when the process ends, however it ends.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("{db} is in use by another litelink process{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Held { db: PathBuf, pid: Option<u32> },
    #[error(
        "SQLite database {db} cannot be written (its directory is read-only or not \
         writable: {source}); litelink needs to write the database, its WAL and its lock file"
    )]
    ReadOnly { db: PathBuf, source: std::io::Error },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Held for as long as it lives.
#[derive(Debug)]
pub(crate) struct DbLock {
    _file: File,
    path: PathBuf,
    /// This process made the file (it was not there before).
    made: bool,
}

pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-litelink-lock");
    PathBuf::from(p)
}

impl DbLock {
    /// Takes the lock, or says who holds it; never waits.
    pub(crate) fn acquire(db: &Path) -> Result<Self, LockError> {
        let path = lock_path(db);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let made = !path.exists();
        // Only its owner's: it sits beside a file of key and password hashes.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| {
                if source.raw_os_error() == Some(libc::EROFS)
                    || source.kind() == std::io::ErrorKind::PermissionDenied
                {
                    LockError::ReadOnly {
                        db: db.to_path_buf(),
                        source,
                    }
                } else {
                    io(source)
                }
            })?;
        // The standard library's lock is flock(2) on Linux: dropped by the
        // kernel when the process ends, however it ends.
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    db: db.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(io(err)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self {
            _file: file,
            path,
            made,
        })
    }

    /// Lets go of the lock of a start that failed, removing the file if
    /// this process made it: a failed start leaves nothing behind.
    pub(crate) fn abandon(self) {
        if self.made {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_told_the_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("l.db");
        let held = DbLock::acquire(&db).expect("first");
        match DbLock::acquire(&db) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        drop(held);
        DbLock::acquire(&db).expect("free again");
    }
}
