//! WAL checkpoints on a thread of their own.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses 1,000
//! WAL pages, on the writer, and (unless durability is off) fsyncs the WAL
//! and the database file there: every creating client waits for it. Here
//! the writer's auto-checkpoint is off and this thread runs a PASSIVE
//! checkpoint shortly after commits, which copies pages back to the database
//! without blocking the writer or the readers. Should the WAL still grow past
//! `MAX_WAL_FRAMES` (writes that never pause leave a PASSIVE checkpoint no
//! moment to finish), one RESTART checkpoint bounds it, briefly holding up
//! the writer.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::SqliteSettings;
use super::connection::{self, Role};
use super::fileguard::FileGuard;
use super::readers::{Epoch, Readers};
use super::writer::WriterStats;

/// Checkpoints run, for `/stats`.
#[derive(Debug, Default)]
pub(super) struct CheckpointStats {
    checkpoints: AtomicU64,
}

impl CheckpointStats {
    pub(super) fn count(&self) -> u64 {
        self.checkpoints.load(Ordering::Relaxed)
    }

    fn add(&self) {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
    }
}

/// How often the thread looks for new commits to checkpoint.
const INTERVAL: Duration = Duration::from_millis(200);

/// WAL size (in 4 KiB pages) that triggers a RESTART checkpoint: 64 MiB.
const MAX_WAL_FRAMES: i64 = 16_384;

pub(super) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(
        path: PathBuf,
        settings: SqliteSettings,
        guard: Arc<FileGuard>,
        writes: Arc<WriterStats>,
        stats: Arc<CheckpointStats>,
        readers: Arc<Readers>,
        epoch: Arc<Epoch>,
    ) -> std::io::Result<Self> {
        let (stop, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("litelink-checkpoint".into())
            .spawn(move || {
                let context = Context {
                    guard,
                    writes,
                    stats,
                    readers,
                    epoch,
                };
                run(rx, path, settings, context)
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the checkpointer works with besides its own connection.
struct Context {
    /// Checked every second, so that a deleted database file is noticed
    /// even while nothing is written.
    guard: Arc<FileGuard>,
    /// Read for its commit count: no new commits, no checkpoint.
    writes: Arc<WriterStats>,
    stats: Arc<CheckpointStats>,
    /// Readers keep read snapshots open between lookups (readers.rs); the
    /// checkpointer makes them let go, so that the WAL can be recycled.
    readers: Arc<Readers>,
    epoch: Arc<Epoch>,
}

fn run(stop: mpsc::Receiver<()>, path: PathBuf, settings: SqliteSettings, cx: Context) {
    // Role::Writer: a checkpoint syncs according to the connection's
    // `synchronous`, which must match the configured durability.
    let conn = match connection::open(&path, &settings, Role::Writer) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "checkpointer cannot open the database; the WAL will only shrink at shutdown");
            return;
        }
    };
    let mut seen = 0;
    let mut rounds = 0u64;
    loop {
        match stop.recv_timeout(INTERVAL) {
            Err(RecvTimeoutError::Timeout) => {}
            // Stopped: the last connection to close checkpoints for us.
            _ => return,
        }
        rounds += 1;
        if rounds.is_multiple_of(5) {
            cx.guard.check();
        }
        // Idle connections whose snapshot has aged out let go of it even
        // when nothing is being written.
        cx.readers.release_snapshots(false);
        let commits = cx.writes.commits();
        if commits == seen {
            continue;
        }
        seen = commits;
        let outcome = checkpoint(&conn, "PASSIVE");
        // Readers that took their snapshot before the checkpoint may still
        // be reading frames from the WAL; moving them on to a new snapshot
        // (served from the database file once everything is backfilled)
        // lets the writer start the WAL over from its beginning.
        cx.epoch.advance();
        cx.readers.release_snapshots(false);
        match outcome {
            Ok(frames) if frames > MAX_WAL_FRAMES => {
                // RESTART waits until no reader uses the WAL: stop keeping
                // snapshots meanwhile, or an idle one would make it wait
                // for its whole busy timeout.
                cx.readers.set_reuse(false);
                cx.readers.release_snapshots(true);
                if let Err(e) = checkpoint(&conn, "RESTART") {
                    tracing::warn!(error = %e, "RESTART checkpoint failed");
                }
                cx.readers.set_reuse(true);
                cx.epoch.advance();
                cx.stats.add();
            }
            Ok(_) => {
                cx.stats.add();
            }
            Err(e) => tracing::warn!(error = %e, "checkpoint failed"),
        }
    }
}

/// Runs one checkpoint; returns the WAL's size in frames.
fn checkpoint(conn: &rusqlite::Connection, mode: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))
}
