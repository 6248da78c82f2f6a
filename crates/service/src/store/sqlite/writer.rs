//! The single writer and its group commit.
//!
//! SQLite allows one writer at a time, and a durable commit costs an fsync.
//! So all creates go through one bounded queue to one thread, which takes
//! whatever is queued (up to `batch_max`), inserts it in one transaction and
//! commits it; at full durability it then syncs the WAL once for all commits
//! made while creates kept arriving (walsync.rs), and only then answers. A
//! lone create is committed and synced at once: the writer never waits for
//! a batch to fill. Every other write (edits, deletes, keys, imports) goes
//! through the same queue as an [`Op`] in a transaction of its own (ops.rs),
//! so that SQLite only ever has this one writer.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use rusqlite::{Connection, OptionalExtension};
use tokio::sync::mpsc;

use super::connection::{self, Applied};
use super::fileguard::FileGuard;
use super::find;
use super::ops::{self, Op};
use super::readers::Epoch;
use super::replies::{Done, Replies, Reply};
use super::slots::{self, Image, Slots};
use super::walsync::{self, SyncCounts, SyncStats, WalSync};
use super::webhooks;
use super::{SqliteSettings, is_unique_violation};
use crate::domain::{CodeGenerator, Codebook, Link, LinkKey, ShortCode, Timestamp};
use crate::observability::logging::Throttle;
use crate::store::outbox::EventKind;
use crate::store::queue::{MAX_CODE_ATTEMPTS, WriteCounters, WriteCounts, WriteQueue};
use crate::store::{ExtraColumns, NewLink, StorageFailure, StoreError};
use crate::throttled;

const INSERT: &str = "INSERT INTO links (id, code, target, created_at, expires_at, owner, \
                      max_visits, named, domain, password, rules, expired_url, title, target_hash) \
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

enum Message {
    Create {
        new: NewLink,
        reply: Reply,
    },
    Op {
        op: Op,
        reply: Reply,
    },
    /// Time to look for changes made by another process (slots.rs).
    Tick,
    Shutdown,
}

/// What the SQLite writer keeps beside the shared [`WriteCounters`]: for
/// `/stats`, the readiness check and the checkpointer (which looks for
/// new commits).
#[derive(Debug, Default)]
pub(super) struct WriterStats {
    pub(super) writes: Arc<WriteCounters>,
    /// Set while the last write failed because the disk is full; cleared
    /// by the next write that succeeds. For the readiness check.
    disk_full: std::sync::atomic::AtomicBool,
    /// Rows in the table: counted once at start, then one per insert, so
    /// that `/stats` never scans the table.
    links: AtomicU64,
}

/// What the writer shares with the readers: the codebook, the epoch it
/// advances after each commit, and the link slots it writes.
pub(super) struct Shared {
    pub(super) book: Arc<Codebook>,
    pub(super) epoch: Arc<Epoch>,
    pub(super) slots: Option<Arc<Slots>>,
}

/// What the writer's disk and code draws are, injected: the real ones by
/// default; a test's to fail or hold a sync, or to draw chosen codes
/// (to force collisions).
#[derive(Clone)]
pub(super) struct Hooks {
    pub(super) sync: walsync::Syncer,
    /// Codes to draw before any generated one; `None` when there are none.
    pub(super) draw: Option<Arc<dyn Fn() -> Option<ShortCode> + Send + Sync>>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            sync: walsync::data_sync(),
            draw: None,
        }
    }
}

impl WriterStats {
    pub(super) fn commits(&self) -> u64 {
        self.writes.commits()
    }

    pub(super) fn disk_full(&self) -> bool {
        self.disk_full.load(Ordering::Relaxed)
    }
}

/// A failing disk fails every batch: one log line every 10 s, with a count.
static FAILED_WRITES: std::sync::LazyLock<Throttle> =
    std::sync::LazyLock::new(|| Throttle::new(std::time::Duration::from_secs(10)));

pub(super) struct Writer {
    queue: WriteQueue<Message>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
    sync_stats: Arc<SyncStats>,
    /// Is the database file still the one at its path?
    guard: Arc<FileGuard>,
    /// What the writer's connection runs with, read back at start.
    applied: Applied,
}

impl Writer {
    /// Starts the writer thread with the already-migrated connection from
    /// start-up. The writer keeps it in every connection mode: it is a
    /// thread, not a request. That also keeps one connection open at all
    /// times, so a per-request reader is never the last connection, whose
    /// close would checkpoint and delete the WAL on every request.
    pub(super) fn start(
        conn: Connection,
        db: &Path,
        settings: &SqliteSettings,
        codes: CodeGenerator,
        shared: Shared,
        hooks: Hooks,
    ) -> std::io::Result<Self> {
        let Shared { book, epoch, slots } = shared;
        let applied = connection::applied(&conn).map_err(std::io::Error::other)?;
        let (queue, rx) = WriteQueue::new(settings.write_queue);
        let stats = Arc::new(WriterStats {
            writes: Arc::clone(queue.counters()),
            ..WriterStats::default()
        });
        let sync_stats = Arc::new(SyncStats::default());
        let replies = Replies::new();
        let preallocate = settings.wal_preallocate_applied();
        if preallocate > 0 {
            match walsync::preallocate(&conn, db, preallocate) {
                Ok(added) if added > 0 => {
                    tracing::debug!(bytes = added, "preallocated the WAL with zeros");
                }
                Ok(_) => {}
                // Only slower, not less safe: go on without.
                Err(e) => tracing::warn!(error = %e, "could not preallocate the WAL"),
            }
        }
        // Random codes (--code-locality) are numbered on from the highest
        // id, so that a restart continues the current bucket; the live
        // count is kept in `meta`, so nothing is counted here.
        let (sequence, links): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT coalesce(max(id), 0) FROM links), \
                 (SELECT value FROM meta WHERE name = 'live_links')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(std::io::Error::other)?;
        stats.links.store(links.max(0) as u64, Ordering::Relaxed);
        let wal_sync = settings
            .grouped_sync()
            .then(|| WalSync::new(db, Arc::clone(&sync_stats), hooks.sync.clone()));
        let guard = Arc::new(FileGuard::new(db, Arc::clone(&sync_stats))?);
        let thread_guard = Arc::clone(&guard);
        let thread_stats = Arc::clone(&stats);
        let thread_sync_stats = Arc::clone(&sync_stats);
        let batch_max = settings.batch_max;
        let data_version = data_version(&conn).map_err(std::io::Error::other)?;
        let build = slots.as_ref().map(|_| 0);
        let thread = std::thread::Builder::new()
            .name("litelink-writer".into())
            .spawn(move || {
                let mut w = WriterThread {
                    conn,
                    batch_max,
                    codes,
                    draw: hooks.draw,
                    book,
                    sequence: sequence.max(0) as u64,
                    stats: thread_stats,
                    sync_stats: thread_sync_stats,
                    wal_sync,
                    epoch,
                    replies,
                    guard: thread_guard,
                    slots,
                    build,
                    build_started: std::time::Instant::now(),
                    data_version,
                };
                w.run(rx);
            })?;
        if build.is_some() {
            spawn_ticks(queue.downgrade())?;
        }
        Ok(Self {
            queue,
            thread: std::sync::Mutex::new(Some(thread)),
            stats,
            sync_stats,
            guard,
            applied,
        })
    }

    pub(super) fn applied(&self) -> Applied {
        self.applied.clone()
    }

    pub(super) async fn create(&self, new: NewLink) -> Result<Link, StoreError> {
        match self.send(|reply| Message::Create { new, reply }).await? {
            Done::Link(link) => Ok(link),
            other => Err(unexpected(other)),
        }
    }

    /// Runs `op` on the writer thread, in a transaction of its own.
    pub(super) async fn apply(&self, op: Op) -> Result<Done, StoreError> {
        self.send(|reply| Message::Op { op, reply }).await
    }

    async fn send(&self, message: impl FnOnce(Reply) -> Message) -> Result<Done, StoreError> {
        if let Some(why) = self.sync_stats.writes_stopped() {
            return Err(StoreError::WritesStopped(why.clone()));
        }
        self.queue.ask(message).await
    }

    pub(super) fn queue_len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Why writes would fail now, if they would: for the readiness check.
    pub(super) fn unwritable(&self) -> Option<String> {
        if let Some(why) = self.sync_stats.writes_stopped() {
            return Some(why.clone());
        }
        if !self.guard.check() {
            return self.sync_stats.writes_stopped().cloned();
        }
        self.stats
            .disk_full()
            .then(|| "the disk is full: the last write failed for want of space".to_owned())
    }

    pub(super) fn guard(&self) -> Arc<FileGuard> {
        Arc::clone(&self.guard)
    }

    pub(super) fn stats(&self) -> Arc<WriterStats> {
        Arc::clone(&self.stats)
    }

    pub(super) fn links(&self) -> u64 {
        self.stats.links.load(Ordering::Relaxed)
    }

    pub(super) fn counts(&self) -> WriteCounts {
        self.stats.writes.counts()
    }

    pub(super) fn sync_counts(&self) -> SyncCounts {
        self.sync_stats.counts()
    }

    /// Lets the writer finish everything queued before this call, then
    /// waits for its thread to close the connection.
    pub(super) async fn close(&self) {
        // `send` waits for room, so a full queue still drains first.
        let _ = self.queue.send(Message::Shutdown).await;
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
    }
}

/// The ticks that let the writer notice another process's changes (the
/// slots' copy of the table). A weak sender: the queue still closes when
/// the store's own sender is dropped, and the thread ends with it.
fn spawn_ticks(ticks: mpsc::WeakSender<Message>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("litelink-slot-ticks".into())
        .spawn(move || {
            loop {
                std::thread::sleep(slots::TICK);
                let Some(tx) = ticks.upgrade() else {
                    break;
                };
                match tx.try_send(Message::Tick) {
                    Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
        })?;
    Ok(())
}

struct WriterThread {
    conn: Connection,
    batch_max: usize,
    codes: CodeGenerator,
    /// Chosen codes drawn first (a test's).
    draw: Option<Arc<dyn Fn() -> Option<ShortCode> + Send + Sync>>,
    book: Arc<Codebook>,
    /// How many codes were drawn: consecutive creates share a code prefix.
    sequence: u64,
    stats: Arc<WriterStats>,
    sync_stats: Arc<SyncStats>,
    /// Set for full durability with group commit: replies wait for its
    /// fsync.
    wal_sync: Option<WalSync>,
    /// Advanced after every commit, before its replies go out, so that a
    /// client that got a 201 never reads through an older snapshot.
    epoch: Arc<Epoch>,
    replies: Replies,
    guard: Arc<FileGuard>,
    /// The link slots, when on, and the next row id to copy into them
    /// while they are being built (`None`: built).
    slots: Option<Arc<Slots>>,
    build: Option<i64>,
    /// When the current build began.
    build_started: std::time::Instant,
    /// SQLite's `data_version` on this connection: it moves only when
    /// another connection commits, and the writer is the only one of ours
    /// that does.
    data_version: i64,
}

/// `PRAGMA data_version` of `conn`.
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))
}

impl WriterThread {
    fn run(&mut self, mut rx: mpsc::Receiver<Message>) {
        let mut batch: Vec<(NewLink, Reply)> = Vec::with_capacity(self.batch_max);
        let mut shutting_down = false;
        while !shutting_down {
            // While the slots are being built, a step of it runs whenever
            // the queue is empty: a write waits at most one step.
            let first = if self.build.is_some() {
                match rx.try_recv() {
                    Ok(m) => Some(m),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        self.build_step();
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            } else {
                rx.blocking_recv()
            };
            let Some(first) = first else {
                break;
            };
            // Let the request threads run once before taking the batch:
            // on a busy machine they hold creates that are about to be
            // queued, and a bigger batch shares one commit among more of
            // them. With nothing else runnable this returns at once, so a
            // lone create under low load waits for nothing.
            std::thread::yield_now();
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    Message::Create { new, reply } => batch.push((new, reply)),
                    Message::Op { op, reply } => {
                        // In order: the creates queued before it first.
                        if !batch.is_empty() {
                            self.commit_batch(&mut batch);
                        }
                        self.apply(op, reply);
                    }
                    Message::Tick => self.look_for_other_writers(),
                    Message::Shutdown => {
                        shutting_down = true;
                        break;
                    }
                }
                if batch.len() < self.batch_max {
                    next = rx.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                self.commit_batch(&mut batch);
            }
            // Sync once nothing more is queued: everything committed since
            // the last sync shares this one. `batch_max` bounds how long a
            // queue that never empties can defer it.
            if let Some(sync) = &mut self.wal_sync
                && (rx.is_empty() || shutting_down || sync.held() >= self.batch_max)
            {
                sync.sync_and_answer(&self.replies);
            }
        }
        if let Some(sync) = &mut self.wal_sync {
            sync.sync_and_answer(&self.replies);
        }
        rx.close();
        // Anything still queued after a shutdown was sent after close():
        // answer it rather than leave its caller hanging.
        while let Ok(message) = rx.try_recv() {
            if let Message::Create { reply, .. } | Message::Op { reply, .. } = message {
                let _ = reply.send(Err(StoreError::Closed));
            }
        }
        tracing::debug!("writer stopped");
    }

    fn commit_batch(&mut self, batch: &mut Vec<(NewLink, Reply)>) {
        // Creates queued before a sync failed are refused like later ones:
        // nothing more is written to a WAL the disk may not hold.
        if let Some(why) = self.sync_stats.writes_stopped() {
            self.replies
                .fail_all(batch.drain(..).map(|(_, reply)| reply), || {
                    StoreError::WritesStopped(why.clone())
                });
            return;
        }
        let outcome = insert_all(
            &self.conn,
            batch,
            &Codes {
                generator: &self.codes,
                book: &self.book,
                draw: self.draw.as_deref(),
            },
            &mut self.sequence,
            &self.stats,
        );
        match outcome {
            Ok(rows) => {
                // Before anyone hears of the rows: a reader told of one finds
                // its slot written.
                if let Some(slots) = &self.slots {
                    for stored in rows.iter().flatten() {
                        slots.put(&stored.image());
                    }
                }
                self.epoch.advance();
                // A row that could not be stored (its alias is taken, or no
                // free code was found) fails alone; the rest of its batch
                // was stored and is answered as usual.
                let (stored, unstored): (Vec<_>, Vec<_>) = batch
                    .drain(..)
                    .map(|(_, reply)| reply)
                    .zip(rows)
                    .partition(|(_, row)| row.is_ok());
                if !unstored.is_empty() {
                    self.replies.send(
                        unstored
                            .into_iter()
                            .map(|(reply, row)| (reply, row.map(|s| Done::Link(s.link))))
                            .collect(),
                    );
                }
                if !self.guard.check() {
                    // Committed to a file that is no longer the database:
                    // gone at the next start, so nobody is told it is stored.
                    let why = self
                        .sync_stats
                        .writes_stopped()
                        .cloned()
                        .unwrap_or_default();
                    self.replies
                        .fail_all(stored.into_iter().map(|(reply, _)| reply), || {
                            StoreError::WritesStopped(why.clone())
                        });
                    return;
                }
                let n = stored.len() as u64;
                self.stats.disk_full.store(false, Ordering::Relaxed);
                self.stats.writes.committed(n);
                self.stats.links.fetch_add(n, Ordering::Relaxed);
                let acks = stored
                    .into_iter()
                    .filter_map(|(reply, row)| row.ok().map(|s| (reply, Done::Link(s.link))));
                self.acknowledge(acks);
            }
            Err(e) => {
                // The transaction rolled back as a whole: nothing in this
                // batch was stored, so every request in it is told so, and
                // the next batch starts clean.
                self.stats.writes.failed();
                throttled!(FAILED_WRITES, error, error = %e, rows = batch.len(),
                    "write batch failed and was rolled back");
                let kind = match &e {
                    StoreError::Storage(kind, _) => *kind,
                    _ => StorageFailure::Other,
                };
                self.stats
                    .disk_full
                    .store(kind == StorageFailure::DiskFull, Ordering::Relaxed);
                let message = e.to_string();
                self.replies
                    .fail_all(batch.drain(..).map(|(_, reply)| reply), || {
                        StoreError::Storage(kind, message.clone())
                    });
            }
        }
    }

    /// Answers committed writes: after the next sync at full durability,
    /// at once otherwise.
    fn acknowledge(&mut self, acks: impl Iterator<Item = (Reply, Done)>) {
        match &mut self.wal_sync {
            Some(sync) => sync.hold(acks),
            None => self
                .replies
                .send(acks.map(|(reply, done)| (reply, Ok(done))).collect()),
        }
    }

    /// Runs one op in a transaction of its own.
    fn apply(&mut self, op: Op, reply: Reply) {
        if let Some(why) = self.sync_stats.writes_stopped() {
            let _ = reply.send(Err(StoreError::WritesStopped(why.clone())));
            return;
        }
        let waits_for_sync = op.waits_for_sync();
        match ops::apply(&self.conn, &self.book, op) {
            Ok(_) if !self.guard.check() => {
                let why = self
                    .sync_stats
                    .writes_stopped()
                    .cloned()
                    .unwrap_or_default();
                let _ = reply.send(Err(StoreError::WritesStopped(why)));
            }
            Ok(applied) => {
                self.copy_to_slots(applied.changed);
                self.epoch.advance();
                self.stats.writes.committed_other();
                if applied.links_added >= 0 {
                    self.stats
                        .links
                        .fetch_add(applied.links_added as u64, Ordering::Relaxed);
                } else {
                    self.stats
                        .links
                        .fetch_sub(applied.links_added.unsigned_abs(), Ordering::Relaxed);
                }
                if waits_for_sync {
                    self.acknowledge(std::iter::once((reply, applied.done)));
                } else {
                    let _ = reply.send(Ok(applied.done));
                }
            }
            Err(e) => {
                // A refusal the client is told of is no failure of ours.
                if !matches!(
                    e,
                    StoreError::NameTaken(_)
                        | StoreError::UserTaken(_)
                        | StoreError::HostTaken(_)
                        | StoreError::DomainHasLinks(_)
                        | StoreError::TooMany(_)
                ) {
                    throttled!(FAILED_WRITES, error, error = %e, "write failed and was rolled back");
                }
                let _ = reply.send(Err(e));
            }
        }
    }
}

impl WriterThread {
    /// Copies the next rows into the slots; the slots are built once a
    /// step finds fewer rows than it asked for.
    fn build_step(&mut self) {
        let (Some(slots), Some(from)) = (&self.slots, self.build) else {
            return;
        };
        let step = || -> rusqlite::Result<Option<i64>> {
            let mut stmt = self.conn.prepare_cached(&format!(
                "SELECT {} FROM links WHERE id >= ?1 ORDER BY id LIMIT ?2",
                slots::IMAGE_COLUMNS
            ))?;
            let mut rows = stmt.query((from, slots::BUILD_STEP))?;
            let (mut n, mut last) = (0, from - 1);
            while let Some(row) = rows.next()? {
                let image = Image::of_row(row)?;
                slots.put(&image);
                last = image.id;
                n += 1;
            }
            Ok((n == slots::BUILD_STEP).then_some(last + 1))
        };
        match step() {
            Ok(Some(next)) => {
                slots.built_below(next.max(0) as u64);
                self.build = Some(next);
            }
            Ok(None) => {
                // Every row is copied, and every later one is written as it
                // is committed.
                slots.built_below(u64::MAX);
                let ms = self.build_started.elapsed().as_millis() as u64;
                slots.stats.build_ms.store(ms, Ordering::Relaxed);
                slots.stats.builds.fetch_add(1, Ordering::Relaxed);
                self.build = None;
                tracing::debug!(ms, "link slots built");
            }
            Err(e) => {
                // Reads keep going to SQLite for the rows not copied; the
                // build starts over at the next tick.
                throttled!(FAILED_WRITES, warn, error = %e, "building the link slots failed");
                slots.forget();
                self.build = None;
                self.data_version = -1;
            }
        }
    }

    /// Another process committed (an operator's `sqlite3`, `litelink
    /// keys`): the slots may no longer match the rows, so they are
    /// forgotten and built again.
    fn look_for_other_writers(&mut self) {
        let Some(slots) = &self.slots else {
            return;
        };
        let version = data_version(&self.conn).unwrap_or(-1);
        if version == self.data_version && version != -1 {
            return;
        }
        slots.forget();
        self.data_version = version;
        self.build = Some(0);
        self.build_started = std::time::Instant::now();
        tracing::debug!("another process changed the database: building the link slots again");
    }

    /// Brings the slots of the rows an op changed up to date.
    fn copy_to_slots(&mut self, changed: ops::Changed) {
        let Some(slots) = &self.slots else {
            return;
        };
        match changed {
            ops::Changed::Nothing => {}
            ops::Changed::Visits(added) => {
                for (id, n) in added {
                    slots.add_visits(id, n);
                }
            }
            ops::Changed::Rows(ids) => {
                let copy = || -> rusqlite::Result<()> {
                    let mut stmt = self.conn.prepare_cached(&format!(
                        "SELECT {} FROM links WHERE id = ?1",
                        slots::IMAGE_COLUMNS
                    ))?;
                    for id in ids {
                        if let Some(image) = stmt.query_row([id], Image::of_row).optional()? {
                            slots.put(&image);
                        }
                    }
                    Ok(())
                };
                if let Err(e) = copy() {
                    // A slot that may be stale is never read: all are
                    // forgotten and built again.
                    throttled!(FAILED_WRITES, warn, error = %e, "copying rows to the link slots failed");
                    slots.forget();
                    self.build = Some(0);
                    self.build_started = std::time::Instant::now();
                }
            }
        }
    }
}

/// How a create without an alias gets its code: the codebook's code of
/// its row id, or, with `--code-locality`, a random draw.
struct Codes<'a> {
    generator: &'a CodeGenerator,
    book: &'a Codebook,
    draw: Option<&'a (dyn Fn() -> Option<ShortCode> + Send + Sync)>,
}

/// Inserts every target in one transaction and commits it. A row that
/// cannot be stored (alias taken, no free code) is an `Err` of its own and
/// the others are still stored: a failed INSERT undoes only its own
/// statement, not the transaction.
type Row = Result<Stored, StoreError>;

/// A stored row: its link, and what its slot needs (slots.rs).
struct Stored {
    link: Link,
    id: i64,
    named: bool,
}

impl Stored {
    fn image(&self) -> Image {
        let l = &self.link;
        Image {
            id: self.id,
            code_len: l.code.as_str().len(),
            named: self.named,
            deleted: false,
            target: l.target.as_str().to_owned(),
            created_at: l.created_at.millis(),
            expires_at: l.expires_at.map(Timestamp::millis),
            max_visits: l.max_visits.map(super::ops::clamp),
            visits: 0,
            owner: l.owner.as_ref().map(|o| o.id.0),
            has_extra: l.extra.is_some(),
            has_labels: !l.labels.is_empty(),
            domain: l.domain.0,
            code: self.named.then(|| l.code.as_str().to_owned()),
        }
    }
}

fn insert_all(
    conn: &Connection,
    batch: &[(NewLink, Reply)],
    codes: &Codes<'_>,
    sequence: &mut u64,
    stats: &WriterStats,
) -> Result<Vec<Row>, StoreError> {
    let now = Timestamp::now();
    // BEGIN and COMMIT are cached statements like the INSERT: parsing them
    // anew for every batch cost a visible share of the writer's time.
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let written = (|| {
        let mut out = Vec::with_capacity(batch.len());
        let mut next_id = find::next_id(conn)?;
        let mut stmt = conn.prepare_cached(INSERT)?;
        for (new, _) in batch {
            out.push(insert_one(
                conn,
                &mut stmt,
                new,
                now,
                codes,
                &mut next_id,
                sequence,
                stats,
            )?);
        }
        drop(stmt);
        if webhooks::listening(conn)? {
            for stored in out.iter().flatten() {
                webhooks::fan_out(conn, EventKind::LinkCreated, &stored.link, now)?;
            }
        }
        let stored = out.iter().filter(|row| row.is_ok()).count();
        ops::count_live(conn, stored as i64)?;
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(out)
    })();
    if written.is_err() && !conn.is_autocommit() {
        // Undo the whole batch, so that the next one starts clean.
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %e, "rollback of a failed batch failed");
        }
    }
    written
}

#[allow(clippy::too_many_arguments)]
fn insert_one(
    conn: &Connection,
    stmt: &mut rusqlite::CachedStatement<'_>,
    new: &NewLink,
    now: Timestamp,
    codes: &Codes<'_>,
    next_id: &mut i64,
    sequence: &mut u64,
    stats: &WriterStats,
) -> Result<Row, StoreError> {
    let link = |code: ShortCode| Link {
        domain: new.domain,
        code,
        target: new.target.clone(),
        created_at: now,
        expires_at: new.expires_at,
        owner: new.owner.clone(),
        max_visits: new.max_visits,
        visits: 0,
        imported_visits: 0,
        extra: new.extra.clone(),
        labels: new.labels.clone(),
    };
    let extra = ExtraColumns::of(new.extra.as_deref());
    let mut insert = |id: i64, code: &ShortCode, named: bool| -> rusqlite::Result<usize> {
        let inserted = stmt.execute((
            id,
            code.as_str(),
            new.target.as_str(),
            now.millis(),
            new.expires_at.map(Timestamp::millis),
            new.owner.as_ref().map(|o| o.id.0),
            new.max_visits.map(super::ops::clamp),
            named,
            new.domain.0,
            extra.password.as_deref(),
            extra.rules.as_deref(),
            extra.expired_url.as_deref(),
            new.labels.title.as_deref(),
            super::rows::target_key(new.target.as_str()),
        ))?;
        Ok(inserted)
    };
    // A named code (an alias, or a random draw): the partial unique index
    // decides among named codes, and no generated row may have it.
    let mut insert_named = |code: &ShortCode| -> Result<Option<i64>, StoreError> {
        if find::generated_taken(conn, codes.book, &LinkKey::new(new.domain, code.clone()))? {
            return Ok(None);
        }
        let id = *next_id;
        match insert(id, code, true) {
            Ok(_) => {
                *next_id += 1;
                Ok(Some(id))
            }
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    // The tags go in once the row is in; the link shows them as stored.
    let stored = |code: ShortCode, id: i64, named: bool| -> rusqlite::Result<Stored> {
        let mut link = link(code);
        if !link.labels.tags.is_empty() {
            let mut known = ops::KnownTags::default();
            link.labels.tags = ops::add_tags(conn, id, &link.labels.tags, &mut known)?;
        }
        Ok(Stored { link, id, named })
    };
    if let Some(alias) = &new.code {
        return Ok(match insert_named(alias)? {
            Some(id) => Ok(stored(alias.clone(), id, true)?),
            None => Err(StoreError::CodeTaken(alias.to_string())),
        });
    }
    // Chosen codes, when a test injected some: each draw takes one.
    let scripted = || codes.draw.and_then(|draw| draw());
    let mut first = scripted();
    if codes.generator.draws_random() || first.is_some() {
        for _ in 0..MAX_CODE_ATTEMPTS {
            *sequence = sequence.wrapping_add(1);
            let code = first
                .take()
                .or_else(scripted)
                .unwrap_or_else(|| codes.generator.generate(*sequence));
            if let Some(id) = insert_named(&code)? {
                return Ok(Ok(stored(code, id, true)?));
            }
            stats.writes.collided(1);
        }
    } else {
        let mut collisions = 0;
        let fresh = find::fresh(
            conn,
            codes.book,
            next_id,
            MAX_CODE_ATTEMPTS,
            &mut collisions,
        )?;
        stats.writes.collided(collisions);
        if let Some(find::Fresh { id, code }) = fresh {
            insert(id, &code, false)?;
            return Ok(Ok(stored(code, id, false)?));
        }
    }
    tracing::warn!("no free short code found; consider a longer --code-length");
    Ok(Err(StoreError::CodeSpaceExhausted(MAX_CODE_ATTEMPTS)))
}

fn unexpected(done: Done) -> StoreError {
    StoreError::Task(format!("the writer answered {done:?} to a create"))
}
