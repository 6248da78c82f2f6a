//! Counting visits without slowing redirects (`tally`): each redirect adds to a tally
//! in memory, in one of a few shards picked by the worker thread (so no
//! lock is shared by all requests), and a background task flushes the
//! tallies to the store every `flush_interval`, through the writer, and
//! once more at shutdown (`flush`). Reports of the counts are `report`.
//!
//! A link with `max_visits` also has an atomic counter (`limits`), started from
//! its stored total plus what is waiting in memory: a redirect takes one
//! from it or gets 410, which makes the limit exact on one instance however
//! many redirects run at once.
//!
//! Counts read for the API (a link's `visits`, its report) are the stored
//! ones plus those waiting in memory. [`Visits::gate`] keeps the two
//! consistent: a flush holds it for writing from taking the tallies until
//! the store has committed them, a read holds it for reading.

mod flush;
mod limits;
mod report;
mod tally;

pub(crate) use flush::Flusher;
pub(crate) use report::{Interval, VisitReport, Window};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::RwLock;

use crate::domain::classify::Agent;
use crate::domain::{LinkKey, VisitCounts};
use crate::geo::{Geo, GeoSettings};
use crate::store::LinkStore;

/// Whether and how often visits are counted.
#[derive(Debug, Clone)]
pub struct VisitSettings {
    /// Count every redirect. Off, only links with `max_visits` are counted,
    /// since their limit needs it.
    pub counting: bool,
    /// How often the tallies in memory are written to the store: what a
    /// `kill -9` can lose at most.
    pub flush_interval: Duration,
    /// Where a visitor's country comes from.
    pub geo: GeoSettings,
}

impl Default for VisitSettings {
    fn default() -> Self {
        Self {
            counting: true,
            flush_interval: Duration::from_millis(1000),
            geo: GeoSettings::default(),
        }
    }
}

/// Tally shards. A worker thread always uses the same one, so with no more
/// threads than shards a shard's lock is only ever contended by a flush.
const SHARDS: usize = 16;

/// User-agent strings whose class a shard remembers (it forgets them all
/// when full).
const AGENTS_PER_SHARD: usize = 1024;

/// What a redirect knows about its visit, from its headers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Visit<'a> {
    /// The header values as sent: bytes, so that nothing scans them for
    /// UTF-8 on the redirect path.
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    /// The client's address (the connection's, or the one a trusted
    /// proxy forwarded): turned into a country, then dropped.
    pub client: Option<std::net::IpAddr>,
    /// The `--country-header` value, when a trusted proxy sent it.
    pub country: Option<&'a [u8]>,
    /// `Accept-Language`, for a link's language rules.
    pub accept_language: Option<&'a [u8]>,
    /// The short URL's query string, for rules on it.
    pub query: Option<&'a str>,
    /// The password sent: a form's, or else `X-Link-Password`.
    pub password: Option<&'a [u8]>,
    /// Which rule served the visit (`Facets::rule`), set by the links
    /// service.
    pub rule: u8,
    /// What the User-Agent says, when a rule has already read it.
    pub agent: Option<Agent>,
}

/// The header an API client sends a link's password in.
pub(crate) const X_LINK_PASSWORD: &str = "x-link-password";

/// `/stats` figures of visit counting.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VisitStats {
    pub counting: bool,
    pub flush_interval_ms: u64,
    /// Visits counted since start.
    pub counted: u64,
    /// Visits written to the store since start.
    pub flushed: u64,
    pub flushes: u64,
    pub failed_flushes: u64,
    /// Links with a limit whose counter is in memory.
    pub limited_links: usize,
    /// Reads of a changed GeoIP file that failed, the one in use kept.
    pub geoip_failed_reads: u64,
}

#[derive(Default)]
struct Counters {
    flushed: AtomicU64,
    flushes: AtomicU64,
    failed_flushes: AtomicU64,
}

/// foldhash rather than SipHash: the keys are codes of stored links and
/// user agents, hashed on every redirect.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One counted visit as `link.visited` tells of it, kept only while some
/// webhook or stream wants those events: a few handles and small values,
/// made under the shard's lock already held; its JSON is made by the flush.
#[derive(Debug, Clone)]
pub(crate) struct VisitRecord {
    /// The order visits came in, across shards (the time's milliseconds
    /// may be the same).
    pub seq: u64,
    pub at: crate::domain::Timestamp,
    pub target: crate::domain::TargetUrl,
    pub facets: crate::domain::Facets,
    pub bot: bool,
    pub host: compact_str::CompactString,
    pub city: Option<compact_str::CompactString>,
}

/// One worker's tallies, and the classes of the user agents it has seen:
/// both under the one lock a redirect takes.
#[derive(Default)]
struct Shard {
    tallies: FastMap<LinkKey, VisitCounts>,
    /// Each visit since the last flush, while `link.visited` is wanted.
    records: Vec<(LinkKey, VisitRecord)>,
    agents: FastMap<Box<[u8]>, Agent>,
    /// Visits counted here since start (under the lock already held, so
    /// no atomic operation per redirect).
    counted: u64,
}

pub(crate) struct Visits {
    settings: VisitSettings,
    shards: Box<[Mutex<Shard>]>,
    /// Tallies a flush has taken from the shards and not yet written.
    staged: Mutex<FastMap<LinkKey, VisitCounts>>,
    /// Visit records likewise, per link.
    staged_records: Mutex<FastMap<LinkKey, Vec<VisitRecord>>>,
    /// Whether some webhook or stream wants `link.visited`.
    recording: std::sync::atomic::AtomicBool,
    limits: Mutex<HashMap<LinkKey, Arc<AtomicU64>>>,
    gate: RwLock<()>,
    store: Arc<dyn LinkStore>,
    geo: Arc<Geo>,
    counters: Counters,
    failures: Mutex<(Option<Instant>, u64)>,
}

/// Locks a std mutex, whose data stays usable if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

impl Visits {
    pub(crate) fn new(settings: VisitSettings, store: Arc<dyn LinkStore>, geo: Arc<Geo>) -> Self {
        Self {
            settings,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            staged: Mutex::default(),
            staged_records: Mutex::default(),
            recording: Default::default(),
            limits: Mutex::default(),
            gate: RwLock::new(()),
            store,
            geo,
            counters: Counters::default(),
            failures: Mutex::new((None, 0)),
        }
    }

    /// Keeps a record of each counted visit from now on (for `link.visited`),
    /// or stops.
    pub(crate) fn keep_records(&self, on: bool) {
        self.recording.store(on, Ordering::Relaxed);
    }

    /// The header a trusted proxy names a visitor's country in, if set.
    pub(crate) fn country_header(&self) -> Option<&axum::http::HeaderName> {
        self.geo.header()
    }

    pub(crate) fn stats(&self) -> VisitStats {
        let c = &self.counters;
        VisitStats {
            counting: self.settings.counting,
            flush_interval_ms: self.settings.flush_interval.as_millis() as u64,
            counted: self.shards.iter().map(|s| lock(s).counted).sum(),
            flushed: c.flushed.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            failed_flushes: c.failed_flushes.load(Ordering::Relaxed),
            limited_links: lock(&self.limits).len(),
            geoip_failed_reads: self.geo.failed_reads(),
        }
    }
}
