//! Reads from a streaming replica (`--postgres-read-url`), never older than
//! a change this instance knows of.
//!
//! Every change this instance makes is followed by the primary's WAL
//! position (`pg_current_wal_insert_lsn()`, taken after the commit, so at
//! or past its commit record); every change another instance announces
//! carries its position (invalidations.rs). A lookup of a code goes to the
//! replica only once the replica has replayed (`pg_last_wal_replay_lsn()`)
//! past the last known change of that code; a listing, past the newest
//! known change of any code. Otherwise it goes to the primary. What cannot
//! be known (start-up, a broken invalidation channel, a "forget
//! everything") sends every read to the primary until the replica has
//! replayed past the primary's position at that moment.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use crate::domain::LinkKey;
use crate::observability::logging::Throttle;
use crate::store::StoreError;

/// Codes kept with their change's position until the replica has replayed
/// it; past this many, the newest position becomes a floor for every code.
const MAX_RECENT: usize = 100_000;
/// How often the replica's replay position is read while it is behind a
/// known change, and while it is not.
const POLL_BEHIND: Duration = Duration::from_millis(5);
const POLL_IDLE: Duration = Duration::from_millis(100);
/// How long a replica that failed is left alone (every read goes to the
/// primary meanwhile).
const RETRY_DOWN: Duration = Duration::from_secs(1);

static REPLICA_FAILED: std::sync::LazyLock<Throttle> =
    std::sync::LazyLock::new(|| Throttle::new(Duration::from_secs(10)));

/// The primary's current WAL position, as a byte offset.
const PRIMARY_POSITION: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8";
/// How far the replica has replayed; NULL on a server that is not one.
const REPLAYED: &str = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8";

/// WAL positions of the changes this instance knows of, and how far the
/// replica has replayed.
#[derive(Debug, Default)]
pub(super) struct Positions {
    /// Ask the primary for its position after every write: with a replica,
    /// or when the positions go out with invalidations.
    track: bool,
    /// A replica is in use: keep per-code positions for it.
    replica: bool,
    /// The newest change known (own or announced).
    newest: AtomicU64,
    /// Codes changed at positions the replica may not have replayed yet.
    recent: Mutex<HashMap<LinkKey, u64>>,
    /// Set while `recent` holds anything: read on every lookup.
    any_recent: AtomicBool,
    /// No read goes to the replica before it has replayed this far.
    floor: AtomicU64,
    /// Events whose position is not known ("forget everything", a message
    /// without a position, a channel back from an outage); the poller
    /// resolves them into `floor` with the primary's position.
    unknown: AtomicU64,
    resolved: AtomicU64,
    /// The invalidation channel is down: others' changes cannot be heard.
    deaf: AtomicBool,
    /// The replica's replay position, as last read, and whether it answers.
    replayed: AtomicU64,
    up: AtomicBool,
    /// Wakes the poller from its idle wait when a change is noted.
    changed: tokio::sync::Notify,
}

impl Positions {
    pub(super) fn new(track: bool, replica: bool) -> Self {
        Self {
            track: track || replica,
            replica,
            // Nothing is known at start: every read goes to the primary
            // until the replica has replayed past the primary's position.
            unknown: AtomicU64::new(1),
            ..Self::default()
        }
    }

    /// Reads the primary's position after a committed write on `client`
    /// and notes it for `codes`. The write stands whatever happens here: a
    /// position that cannot be read counts as unknown (every read goes to
    /// the primary until the poller has resolved it).
    pub(super) async fn after_write<K: std::borrow::Borrow<LinkKey>>(
        &self,
        client: &impl GenericClient,
        codes: impl IntoIterator<Item = K>,
    ) {
        if !self.track {
            return;
        }
        match primary_position(client).await {
            Ok(at) => {
                self.newest.fetch_max(at, Ordering::AcqRel);
                if self.replica {
                    for code in codes {
                        self.note(code.borrow(), at);
                    }
                }
            }
            Err(_) => {
                self.unknown.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// The newest change this instance knows of, for announcing its own.
    pub(super) fn newest(&self) -> Option<u64> {
        self.track.then(|| self.newest.load(Ordering::Acquire))
    }

    fn note(&self, code: &LinkKey, at: u64) {
        self.newest.fetch_max(at, Ordering::AcqRel);
        if !self.replica || self.replayed.load(Ordering::Acquire) >= at {
            return;
        }
        let mut recent = lock(&self.recent);
        if recent.len() >= MAX_RECENT {
            self.floor
                .fetch_max(self.newest.load(Ordering::Acquire), Ordering::AcqRel);
            recent.clear();
        }
        let slot = recent.entry(code.clone()).or_insert(0);
        *slot = (*slot).max(at);
        self.any_recent.store(true, Ordering::Release);
        drop(recent);
        self.changed.notify_one();
    }

    /// Another instance changed `code` at `at` (`None`: at an unknown
    /// position, which makes every read go to the primary until resolved).
    pub(super) fn heard(&self, code: Option<&LinkKey>, at: Option<u64>) {
        match (code, at) {
            (Some(code), Some(at)) => self.note(code, at),
            (None, Some(at)) => {
                self.newest.fetch_max(at, Ordering::AcqRel);
                self.floor.fetch_max(at, Ordering::AcqRel);
            }
            (_, None) => {
                self.unknown.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.changed.notify_one();
    }

    /// The invalidation channel went down (`false`) or is back (`true`).
    pub(super) fn hearing(&self, on: bool) {
        if on {
            // What was missed is unknown: up to the primary's position now.
            self.unknown.fetch_add(1, Ordering::AcqRel);
        }
        self.deaf.store(!on, Ordering::Release);
    }

    /// Whether a read of `code` (or a listing: `None`) may go to the replica.
    pub(super) fn replica_ok(&self, code: Option<&LinkKey>) -> bool {
        if !self.replica
            || !self.up.load(Ordering::Acquire)
            || self.deaf.load(Ordering::Acquire)
            || self.unknown.load(Ordering::Acquire) != self.resolved.load(Ordering::Acquire)
        {
            return false;
        }
        let replayed = self.replayed.load(Ordering::Acquire);
        if replayed < self.floor.load(Ordering::Acquire) {
            return false;
        }
        match code {
            None => replayed >= self.newest.load(Ordering::Acquire),
            Some(code) => {
                !self.any_recent.load(Ordering::Acquire)
                    || lock(&self.recent)
                        .get(code)
                        .is_none_or(|&at| replayed >= at)
            }
        }
    }

    fn behind(&self) -> bool {
        let replayed = self.replayed.load(Ordering::Acquire);
        self.unknown.load(Ordering::Acquire) != self.resolved.load(Ordering::Acquire)
            || replayed < self.newest.load(Ordering::Acquire)
            || replayed < self.floor.load(Ordering::Acquire)
    }

    /// The replica has replayed up to `at`: codes changed before are its.
    fn replayed_to(&self, at: u64) {
        self.replayed.store(at, Ordering::Release);
        if self.any_recent.load(Ordering::Acquire) {
            let mut recent = lock(&self.recent);
            recent.retain(|_, v| *v > at);
            if recent.is_empty() {
                self.any_recent.store(false, Ordering::Release);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A WAL position that `sql` reads on `client` (`None`: NULL, not known
/// there).
async fn ask_position(client: &impl GenericClient, sql: &str) -> Result<Option<u64>, StoreError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(super::store_error)?;
    let row = client
        .query_one(&stmt, &[])
        .await
        .map_err(super::store_error)?;
    Ok(row.get::<_, Option<i64>>(0).map(|at| at.max(0) as u64))
}

async fn primary_position(client: &impl GenericClient) -> Result<u64, StoreError> {
    Ok(ask_position(client, PRIMARY_POSITION).await?.unwrap_or(0))
}

/// `/stats` of the read replica. No address: `/stats` may be public.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplicaStats {
    /// The replica answers and is a standby.
    pub up: bool,
    /// Reads served by the replica.
    pub reads: u64,
    /// Reads sent to the primary instead: the replica had not replayed a
    /// change this instance knows of, or was down.
    pub primary_reads: u64,
    /// Reads that failed on the replica and were served by the primary.
    pub fallbacks: u64,
    /// Codes the replica did not have, asked of the primary.
    pub misses: u64,
    /// Bytes of WAL between the newest change this instance knows of and
    /// what the replica has replayed (0 when it has caught up).
    pub behind_bytes: u64,
    /// Codes whose last change the replica has not replayed yet.
    pub codes_behind: u64,
}

#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    primary_reads: AtomicU64,
    fallbacks: AtomicU64,
    misses: AtomicU64,
}

/// The replica's pool and the task that follows its replay position.
pub(super) struct Replica {
    pool: Pool,
    positions: Arc<Positions>,
    counters: Counters,
    poller: tokio::task::JoinHandle<()>,
}

impl Replica {
    /// Starts following `pool`'s replay position; `primary` resolves
    /// unknown positions.
    pub(super) fn start(pool: Pool, primary: Pool, positions: Arc<Positions>) -> Self {
        let poller = tokio::spawn(poll(pool.clone(), primary, Arc::clone(&positions)));
        Self {
            pool,
            positions,
            counters: Counters::default(),
            poller,
        }
    }

    /// A replica connection for a read of `code` (a listing: `None`), or
    /// `None`: read the primary.
    pub(super) async fn client(&self, code: Option<&LinkKey>) -> Option<deadpool_postgres::Client> {
        if !self.positions.replica_ok(code) {
            self.counters.primary_reads.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match self.pool.get().await {
            Ok(c) => Some(c),
            Err(e) => {
                self.failed(&super::pool_error(e));
                None
            }
        }
    }

    pub(super) fn served(&self) {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn missed(&self) {
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// A read failed on the replica: it is left alone for a moment and the
    /// read goes to the primary.
    pub(super) fn failed(&self, e: &StoreError) {
        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.positions.up.store(false, Ordering::Release);
        crate::throttled!(REPLICA_FAILED, warn, error = %e,
            "the read replica failed; reading the primary");
    }

    pub(super) fn is_up(&self) -> bool {
        self.positions.up.load(Ordering::Acquire)
    }

    pub(super) fn stats(&self) -> ReplicaStats {
        let p = &self.positions;
        let codes_behind = if p.any_recent.load(Ordering::Acquire) {
            lock(&p.recent).len() as u64
        } else {
            0
        };
        ReplicaStats {
            up: self.is_up(),
            reads: self.counters.reads.load(Ordering::Relaxed),
            primary_reads: self.counters.primary_reads.load(Ordering::Relaxed),
            fallbacks: self.counters.fallbacks.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            behind_bytes: p
                .newest
                .load(Ordering::Acquire)
                .saturating_sub(p.replayed.load(Ordering::Acquire)),
            codes_behind,
        }
    }

    pub(super) fn close(&self) {
        self.poller.abort();
        self.pool.close();
    }
}

/// Follows the replica's replay position: every 5 ms while it is behind a
/// known change, every 100 ms otherwise (or at once when a change is
/// noted), every second while it is down.
async fn poll(replica: Pool, primary: Pool, positions: Arc<Positions>) {
    loop {
        // Unknown positions become the primary's position now.
        let epoch = positions.unknown.load(Ordering::Acquire);
        if epoch != positions.resolved.load(Ordering::Acquire)
            && !positions.deaf.load(Ordering::Acquire)
            && let Ok(client) = primary.get().await
            && let Ok(at) = primary_position(&client).await
        {
            positions.floor.fetch_max(at, Ordering::AcqRel);
            positions.newest.fetch_max(at, Ordering::AcqRel);
            positions.resolved.store(epoch, Ordering::Release);
        }
        let replayed = match replica.get().await {
            Ok(client) => ask_position(&client, REPLAYED).await,
            Err(e) => Err(super::pool_error(e)),
        };
        let idle = match replayed {
            Ok(Some(at)) => {
                positions.replayed_to(at);
                positions.up.store(true, Ordering::Release);
                if positions.behind() {
                    tokio::time::sleep(POLL_BEHIND).await;
                    continue;
                }
                POLL_IDLE
            }
            Ok(None) => {
                positions.up.store(false, Ordering::Release);
                crate::throttled!(
                    REPLICA_FAILED,
                    warn,
                    "the read replica is not a standby (promoted?); reading the primary"
                );
                RETRY_DOWN
            }
            Err(e) => {
                positions.up.store(false, Ordering::Release);
                crate::throttled!(REPLICA_FAILED, warn, error = %e,
                    "the read replica does not answer; reading the primary");
                RETRY_DOWN
            }
        };
        if idle == RETRY_DOWN {
            tokio::time::sleep(idle).await;
            continue;
        }
        // A change noted meanwhile ends the wait (the replica may be
        // behind it): reads come back to the replica within one
        // `POLL_BEHIND` of its replay.
        tokio::select! {
            () = tokio::time::sleep(idle) => {}
            () = positions.changed.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> LinkKey {
        LinkKey::default_domain(crate::domain::ShortCode::parse(s).expect("code"))
    }

    /// A replica that is up and has resolved the start-up floor.
    fn positions() -> Positions {
        let p = Positions::new(true, true);
        p.up.store(true, Ordering::Release);
        p.resolved.store(1, Ordering::Release);
        p.replayed_to(100);
        p
    }

    #[test]
    fn a_code_changed_past_the_replay_position_reads_the_primary_until_replayed() {
        let p = positions();
        assert!(p.replica_ok(Some(&code("abc"))));
        p.note(&code("abc"), 150);
        assert!(!p.replica_ok(Some(&code("abc"))));
        // Other codes are not held back; a listing is.
        assert!(p.replica_ok(Some(&code("other"))));
        assert!(!p.replica_ok(None));
        p.replayed_to(149);
        assert!(!p.replica_ok(Some(&code("abc"))));
        p.replayed_to(150);
        assert!(p.replica_ok(Some(&code("abc"))));
        assert!(p.replica_ok(None));
        assert!(!p.any_recent.load(Ordering::Acquire));
    }

    #[test]
    fn unknown_positions_and_a_deaf_channel_send_everything_to_the_primary() {
        let p = positions();
        p.heard(Some(&code("abc")), None);
        assert!(!p.replica_ok(Some(&code("other"))));
        p.resolved
            .store(p.unknown.load(Ordering::Acquire), Ordering::Release);
        assert!(p.replica_ok(Some(&code("other"))));
        p.hearing(false);
        assert!(!p.replica_ok(Some(&code("other"))));
        p.hearing(true);
        assert!(!p.replica_ok(Some(&code("other"))), "back, but unresolved");
        p.resolved
            .store(p.unknown.load(Ordering::Acquire), Ordering::Release);
        p.floor.fetch_max(120, Ordering::AcqRel);
        assert!(!p.replica_ok(Some(&code("other"))), "below the floor");
        p.replayed_to(120);
        assert!(p.replica_ok(Some(&code("other"))));
    }

    #[test]
    fn too_many_recent_codes_become_a_floor() {
        let p = positions();
        for i in 0..MAX_RECENT + 1 {
            p.note(&code(&format!("c{i}")), 200 + i as u64);
        }
        assert!(lock(&p.recent).len() <= 1);
        assert!(!p.replica_ok(Some(&code("unrelated"))));
        p.replayed_to(200 + MAX_RECENT as u64);
        assert!(p.replica_ok(Some(&code("unrelated"))));
    }

    #[test]
    fn a_replica_that_is_down_is_not_read() {
        let p = positions();
        p.up.store(false, Ordering::Release);
        assert!(!p.replica_ok(Some(&code("abc"))));
    }
}
