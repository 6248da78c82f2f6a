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
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::SqliteConfig;
use super::connection::{self, Role};
use super::writer::WriterStats;

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
        config: SqliteConfig,
        stats: Arc<WriterStats>,
    ) -> std::io::Result<Self> {
        let (stop, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("litelink-checkpoint".into())
            .spawn(move || run(rx, path, config, stats))?;
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

fn run(stop: mpsc::Receiver<()>, path: PathBuf, config: SqliteConfig, stats: Arc<WriterStats>) {
    // Role::Writer: a checkpoint syncs according to the connection's
    // `synchronous`, which must match the configured durability.
    let conn = match connection::open(&path, &config, Role::Writer) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "checkpointer cannot open the database; the WAL will only shrink at shutdown");
            return;
        }
    };
    let mut seen = 0;
    loop {
        match stop.recv_timeout(INTERVAL) {
            Err(RecvTimeoutError::Timeout) => {}
            // Stopped: the last connection to close checkpoints for us.
            _ => return,
        }
        let commits = stats.commits.load(Ordering::Relaxed);
        if commits == seen {
            continue;
        }
        seen = commits;
        match checkpoint(&conn, "PASSIVE") {
            Ok(frames) if frames > MAX_WAL_FRAMES => {
                if let Err(e) = checkpoint(&conn, "RESTART") {
                    tracing::warn!(error = %e, "RESTART checkpoint failed");
                }
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "checkpoint failed"),
        }
    }
}

/// Runs one checkpoint; returns the WAL's size in frames.
fn checkpoint(conn: &rusqlite::Connection, mode: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))
}
