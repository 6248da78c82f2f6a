//! Group durability at `--durability full`: one `fdatasync` of the WAL for
//! every commit made since the last one.
//!
//! With group commit the writer commits each batch with `synchronous=NORMAL`
//! (written to the WAL, not yet synced) and holds the batch's replies here;
//! once its queue is empty (or `batch_max` replies are held) it syncs the
//! WAL once and only then answers every held request. That is as durable as
//! `synchronous=FULL` for every acknowledged create: a reply leaves only
//! after an fsync that began after its batch's frames were written, and WAL
//! recovery replays every complete commit.
//!
//! A failed sync stops all further creates until restart
//! ([`SyncStats::writes_stopped`]): Linux may mark the unwritten pages clean
//! after an fsync error, so a later sync could succeed without them, and
//! commits after the lost frames would be acknowledged yet unrecoverable.
//!
//! The WAL is also preallocated with zeros ([`preallocate`]) so that a sync
//! overwrites allocated blocks. Measurements and the designs that lost:
//! docs/benchmarks.md section 5.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rusqlite::Connection;
use serde::Serialize;

use super::replies::{Done, Replies, Reply};
use crate::store::StoreError;

/// The syncs' counters, shared with the writer, which refuses creates once
/// `writes_stopped` is set.
#[derive(Debug, Default)]
pub(super) struct SyncStats {
    syncs: AtomicU64,
    failed_syncs: AtomicU64,
    /// Wall time spent in fdatasync, in microseconds.
    sync_micros: AtomicU64,
    /// Set, with the error, by the first failed sync of the WAL.
    writes_stopped: OnceLock<String>,
}

/// How the WAL's data is put on disk: `File::sync_data` ([`data_sync`]),
/// unless a test injects a sync that fails (no real disk error can be
/// provoked without root) or waits.
pub(super) type Syncer = Arc<dyn Fn(&File) -> std::io::Result<()> + Send + Sync>;

/// The real sync: fdatasync(2).
pub(super) fn data_sync() -> Syncer {
    Arc::new(File::sync_data)
}

/// The `/stats` view of [`SyncStats`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SyncCounts {
    pub syncs: u64,
    pub failed_syncs: u64,
    pub writes_stopped: Option<String>,
    pub sync_ms_total: u64,
}

impl SyncStats {
    /// Why creates are refused, once a sync has failed.
    pub(super) fn writes_stopped(&self) -> Option<&String> {
        self.writes_stopped.get()
    }

    /// Refuses every later write for the rest of this process's life, and
    /// logs why, once. Reads go on.
    pub(super) fn stop(&self, why: String) {
        if self.writes_stopped.set(why.clone()).is_ok() {
            tracing::error!(
                reason = %why,
                "writes stopped: new links and changes are refused until litelink restarts; \
                 existing links still resolve"
            );
        }
    }

    pub(super) fn counts(&self) -> SyncCounts {
        SyncCounts {
            syncs: self.syncs.load(Ordering::Relaxed),
            failed_syncs: self.failed_syncs.load(Ordering::Relaxed),
            writes_stopped: self.writes_stopped.get().cloned(),
            sync_ms_total: self.sync_micros.load(Ordering::Relaxed) / 1000,
        }
    }
}

/// Committed creates whose replies wait for the next sync.
pub(super) struct WalSync {
    wal: PathBuf,
    /// The database's directory, synced once when the WAL is first opened
    /// here, since the WAL may have just been created.
    dir: Option<PathBuf>,
    file: Option<File>,
    held: Vec<(Reply, Done)>,
    stats: Arc<SyncStats>,
    syncer: Syncer,
}

impl WalSync {
    pub(super) fn new(db: &Path, stats: Arc<SyncStats>, syncer: Syncer) -> Self {
        let dir = db
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty());
        Self {
            wal: wal_path(db),
            dir,
            file: None,
            held: Vec::new(),
            stats,
            syncer,
        }
    }

    /// Holds the replies of a committed batch until the next sync.
    pub(super) fn hold(&mut self, acks: impl IntoIterator<Item = (Reply, Done)>) {
        self.held.extend(acks);
    }

    pub(super) fn held(&self) -> usize {
        self.held.len()
    }

    /// Syncs the WAL and answers everything held: 201 material if the sync
    /// succeeded, an error otherwise (committed, but not known to be on
    /// disk, so nobody may be told it is stored).
    pub(super) fn sync_and_answer(&mut self, replies: &Replies) {
        if self.held.is_empty() {
            return;
        }
        let started = Instant::now();
        let synced = self.sync();
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        let took = started.elapsed();
        metrics::histogram!("litelink_wal_sync_seconds").record(took.as_secs_f64());
        self.stats
            .sync_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let held = std::mem::take(&mut self.held);
        match synced {
            Ok(()) => replies.send(
                held.into_iter()
                    .map(|(reply, done)| (reply, Ok(done)))
                    .collect(),
            ),
            Err(e) => {
                self.file = None;
                self.stats.failed_syncs.fetch_add(1, Ordering::Relaxed);
                // No path: this reason is shown in /stats.
                let why = format!("fdatasync of the WAL failed: {e}");
                tracing::error!(error = %e, wal = %self.wal.display(), "fsync of the WAL failed");
                self.stats.stop(why.clone());
                // Committed, but not known to be on disk: nobody may be
                // told these links are stored.
                replies.fail_all(held.into_iter().map(|(reply, _)| reply), || {
                    StoreError::WritesStopped(why.clone())
                });
            }
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let f = File::open(&self.wal)?;
                if let Some(dir) = &self.dir {
                    File::open(dir)?.sync_all()?;
                }
                self.file.insert(f)
            }
        };
        (self.syncer)(file)
    }
}

impl Drop for WalSync {
    /// Replies still held when the writer stops are synced and answered,
    /// not dropped.
    fn drop(&mut self) {
        if !self.held.is_empty() {
            let replies = Replies::direct();
            self.sync_and_answer(&replies);
        }
    }
}

pub(super) fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Extends the WAL with zeros to `bytes`, once at start-up, so that later
/// commits overwrite allocated blocks instead of growing the file.
///
/// Safe for SQLite: recovery reads frames only while their salt and
/// checksum match the WAL header, so zeros after the last frame end the
/// log exactly as stale frames from before a WAL restart do. Only bytes
/// past the current end are written, under the write lock, so that no
/// other connection can be appending frames meanwhile. Returns the bytes
/// added.
pub(super) fn preallocate(conn: &Connection, db: &Path, bytes: u64) -> std::io::Result<u64> {
    let to_io = |e: rusqlite::Error| std::io::Error::other(e);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(to_io)?;
    let extended = extend_with_zeros(&wal_path(db), bytes);
    // Nothing was written in the transaction: this only drops the lock.
    conn.execute_batch("COMMIT").map_err(to_io)?;
    extended
}

fn extend_with_zeros(wal: &Path, bytes: u64) -> std::io::Result<u64> {
    let file = match std::fs::OpenOptions::new().write(true).open(wal) {
        Ok(f) => f,
        // No WAL yet: SQLite creates it on the first write; nothing to do.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let start = file.metadata()?.len();
    if start >= bytes {
        return Ok(0);
    }
    // A speed-up must never take the space the database itself needs.
    let free = free_bytes(wal)?;
    if free < (bytes - start).saturating_mul(4) {
        return Err(std::io::Error::other(format!(
            "only {} MiB free on the WAL's file system",
            free >> 20
        )));
    }
    // Real zeros, not a hole or fallocate's unwritten extents: writing
    // into either would still change block metadata on the first pass.
    let zeros = vec![0u8; 1 << 20];
    let written = (|| {
        let mut at = start;
        while at < bytes {
            let n = (bytes - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_all()
    })();
    if let Err(e) = written {
        // Give the space back; SQLite has not seen the new length.
        let _ = file.set_len(start);
        return Err(e);
    }
    Ok(bytes - start)
}

/// Bytes available to this process on the file system holding `path`.
fn free_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a valid NUL-terminated string and `st` points to
    // writable memory of the right type, which statvfs fills on success.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}
