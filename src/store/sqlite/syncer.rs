//! Pipelined durability for group commit at `--durability full`.
//!
//! The writer commits each batch with `synchronous=NORMAL` (written to the
//! WAL, not yet synced) and passes the batch's replies here. This thread
//! `fdatasync`s the WAL and only then answers them. Meanwhile the writer is
//! already inserting the next batch, so the CPU works while the disk syncs;
//! one sync covers every batch committed before it.
//!
//! Why this is as durable as `synchronous=FULL` for every acknowledged
//! create: a reply is sent only after an fsync of the WAL that began after
//! the batch's commit had written all its frames, and WAL recovery replays
//! every complete, checksummed commit it finds. A checkpoint in between
//! syncs the WAL and the database itself (that is what NORMAL still does).
//! A crash before the sync can lose only batches nobody was told about.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::replies::Replies;
use super::writer::{Reply, WriterStats};
use crate::domain::ShortCode;
use crate::store::StoreError;

/// Batches waiting for a sync. When the disk falls this far behind, the
/// writer blocks, its queue fills, and `POST /link` answers 503.
const PENDING_BATCHES: usize = 64;

pub(super) type Acks = Vec<(Reply, ShortCode)>;

pub(super) struct Syncer {
    tx: Option<mpsc::SyncSender<Acks>>,
    thread: Option<JoinHandle<()>>,
    /// Batches submitted and not yet answered.
    in_flight: Arc<AtomicUsize>,
}

impl Syncer {
    pub(super) fn start(
        db: &Path,
        stats: Arc<WriterStats>,
        replies: Replies,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(PENDING_BATCHES);
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let dir = db
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&in_flight);
        let thread = std::thread::Builder::new()
            .name("litelink-syncer".into())
            .spawn(move || run(rx, wal, dir, stats, &counter, &replies))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            in_flight,
        })
    }

    /// Hands over a committed batch; blocks while too many wait for a sync.
    pub(super) fn submit(&self, acks: Acks) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Some(tx) = &self.tx
            && let Err(mpsc::SendError(acks)) = tx.send(acks)
        {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            for (reply, _) in acks {
                let _ = reply.send(Err(StoreError::Closed));
            }
        }
    }

    /// Whether a sync is running or waiting: a batch committed now could
    /// not be synced before it ends anyway.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

impl Drop for Syncer {
    /// Syncs and answers everything submitted, then stops.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    rx: mpsc::Receiver<Acks>,
    wal: PathBuf,
    dir: Option<PathBuf>,
    stats: Arc<WriterStats>,
    in_flight: &AtomicUsize,
    replies: &Replies,
) {
    let mut file: Option<File> = None;
    while let Ok(first) = rx.recv() {
        let mut pending = vec![first];
        while let Ok(more) = rx.try_recv() {
            pending.push(more);
        }
        let started = Instant::now();
        let batches = pending.len();
        let synced = sync(&mut file, &wal, dir.as_deref());
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        stats
            .sync_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        in_flight.fetch_sub(batches, Ordering::AcqRel);
        match synced {
            Ok(()) => replies.send(
                pending
                    .into_iter()
                    .flatten()
                    .map(|(reply, code)| (reply, Ok(code)))
                    .collect(),
            ),
            Err(e) => {
                // Committed but not known to be on disk: the client must not
                // be told it is stored. Reopen the file for the next attempt.
                file = None;
                stats.failed_syncs.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, wal = %wal.display(), "fsync of the WAL failed");
                let message = format!("could not sync the write-ahead log: {e}");
                replies.send(
                    pending
                        .into_iter()
                        .flatten()
                        .map(|(reply, _)| (reply, Err(StoreError::Task(message.clone()))))
                        .collect(),
                );
            }
        }
    }
}

fn sync(file: &mut Option<File>, wal: &Path, dir: Option<&Path>) -> std::io::Result<()> {
    if file.is_none() {
        let f = File::open(wal)?;
        // The WAL may have just been created: make its directory entry
        // durable too, once.
        if let Some(dir) = dir {
            File::open(dir)?.sync_all()?;
        }
        *file = Some(f);
    }
    match file {
        Some(f) => f.sync_data(),
        None => Ok(()),
    }
}
