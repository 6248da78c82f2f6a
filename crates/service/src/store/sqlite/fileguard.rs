//! Noticing that the database file was deleted or replaced under a running
//! server. SQLite keeps writing to the open (now nameless) file, every
//! create is answered 201, and all of it is gone at the next start. So the
//! file's link count and the path's inode are checked every second and
//! before any write is acknowledged; once they disagree, writes stop.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::walsync::SyncStats;

pub(super) struct FileGuard {
    path: PathBuf,
    /// The database file as opened at start; its link count drops to 0
    /// when every name of it is removed.
    file: File,
    dev: u64,
    ino: u64,
    stops: Arc<SyncStats>,
}

impl FileGuard {
    pub(super) fn new(path: &Path, stops: Arc<SyncStats>) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            dev: meta.dev(),
            ino: meta.ino(),
            stops,
        })
    }

    /// Whether writes may go on: false once they were stopped, or when the
    /// file is found gone now (which stops them, logged once).
    pub(super) fn check(&self) -> bool {
        if self.stops.writes_stopped().is_some() {
            return false;
        }
        match self.problem() {
            None => true,
            Some(why) => {
                self.stops.stop(why.into());
                false
            }
        }
    }

    fn problem(&self) -> Option<&'static str> {
        match std::fs::metadata(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some("the database file was deleted");
            }
            Ok(m) if (m.dev(), m.ino()) != (self.dev, self.ino) => {
                return Some("the database file was replaced by another file");
            }
            _ => {}
        }
        match self.file.metadata() {
            // Still under its name, but not one link left: deleted since.
            Ok(m) if m.nlink() == 0 => Some("the database file was deleted"),
            Ok(_) => None,
            Err(_) => Some("the database file can no longer be examined"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_and_replacement_stop_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("g.db");
        std::fs::write(&db, b"x").unwrap();
        let stops = Arc::new(SyncStats::default());
        let guard = FileGuard::new(&db, Arc::clone(&stops)).unwrap();
        assert!(guard.check());
        // Replaced: a new file under the same name.
        std::fs::rename(&db, dir.path().join("old.db")).unwrap();
        std::fs::write(&db, b"y").unwrap();
        assert!(!guard.check());
        assert_eq!(
            stops.writes_stopped().map(String::as_str),
            Some("the database file was replaced by another file")
        );

        let db2 = dir.path().join("h.db");
        std::fs::write(&db2, b"x").unwrap();
        let stops = Arc::new(SyncStats::default());
        let guard = FileGuard::new(&db2, Arc::clone(&stops)).unwrap();
        std::fs::remove_file(&db2).unwrap();
        assert!(!guard.check());
        assert_eq!(
            stops.writes_stopped().map(String::as_str),
            Some("the database file was deleted")
        );
    }
}
