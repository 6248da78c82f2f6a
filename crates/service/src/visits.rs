//! Counting visits without slowing redirects: each redirect adds to a tally
//! in memory, in one of a few shards picked by the worker thread (so no
//! lock is shared by all requests), and a background task flushes the
//! tallies to the store every `flush_interval`, through the writer, and
//! once more at shutdown.
//!
//! A link with `max_visits` also has an atomic counter here, started from
//! its stored total plus what is waiting in memory: a redirect takes one
//! from it or gets 410, which makes the limit exact on one instance however
//! many redirects run at once.
//!
//! Counts read for the API (a link's `visits`, its report) are the stored
//! ones plus those waiting in memory. [`Visits::gate`] keeps the two
//! consistent: a flush holds it for writing from taking the tallies until
//! the store has committed them, a read holds it for reading.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{RwLock, RwLockReadGuard, watch};

use crate::domain::visit::{DIRECT_HOST, OTHER_HOST};
use crate::domain::{AgentClass, ShortCode, Timestamp, VisitCounts};
use crate::store::{LinkStore, StoreError};

/// Whether and how often visits are counted.
#[derive(Debug, Clone)]
pub struct VisitSettings {
    /// Count every redirect. Off, only links with `max_visits` are counted,
    /// since their limit needs it.
    pub counting: bool,
    /// How often the tallies in memory are written to the store: what a
    /// `kill -9` can lose at most.
    pub flush_interval: Duration,
}

impl Default for VisitSettings {
    fn default() -> Self {
        Self {
            counting: true,
            flush_interval: Duration::from_millis(1000),
        }
    }
}

/// Links per flush transaction: a flush of many links is several short
/// transactions, so creates queued meanwhile wait for one chunk at most.
const FLUSH_CHUNK: usize = 64;

/// Tally shards. A worker thread always uses the same one, so with no more
/// threads than shards a shard's lock is only ever contended by a flush.
const SHARDS: usize = 16;

/// User-agent strings whose class a shard remembers (it forgets them all
/// when full), and the longest one looked at: a longer one is classed by
/// its first bytes.
const AGENTS_PER_SHARD: usize = 1024;
const AGENT_MAX_BYTES: usize = 512;

/// A failing flush is logged at most this often, with the count since.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The known-bot patterns, compiled once per process.
static BOTS: LazyLock<isbot::Bots> = LazyLock::new(isbot::Bots::default);

/// What a redirect knows about its visit, from its headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Visit<'a> {
    /// The header values as sent: bytes, so that nothing scans them for
    /// UTF-8 on the redirect path.
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
}

/// `/stats` figures of visit counting.
#[derive(Debug, Clone, Serialize)]
pub struct VisitStats {
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

/// One worker's tallies, and the classes of the user agents it has seen:
/// both under the one lock a redirect takes.
#[derive(Default)]
struct Shard {
    tallies: FastMap<ShortCode, VisitCounts>,
    agents: FastMap<Box<[u8]>, AgentClass>,
    /// Visits counted here since start (under the lock already held, so
    /// no atomic operation per redirect).
    counted: u64,
}

pub struct Visits {
    settings: VisitSettings,
    shards: Box<[Mutex<Shard>]>,
    /// Tallies a flush has taken from the shards and not yet written.
    staged: Mutex<FastMap<ShortCode, VisitCounts>>,
    limits: Mutex<HashMap<ShortCode, Arc<AtomicU64>>>,
    gate: RwLock<()>,
    store: Arc<dyn LinkStore>,
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

/// What a byte of a `Referer` is to [`referrer_host`], as bit flags, so
/// that the scan of the authority does one table lookup a byte instead of
/// a match and two tests (about a third of the instructions, callgrind).
const HOST: u8 = 1; // may be in a host: letters, digits, `-._`, and `[]:` of IPv6
const UPPER: u8 = 2; // an upper-case letter
const END: u8 = 4; // `/`, `?`, `#`: the authority ends
const AT: u8 = 8; // `@`: what came before was user info
const SCHEME: u8 = 16; // may be in a scheme after its first letter

const REFERER_BYTES: [u8; 256] = {
    let mut table = [0; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut f = 0;
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':') {
            f |= HOST;
        }
        if b.is_ascii_uppercase() {
            f |= UPPER;
        }
        if matches!(b, b'/' | b'?' | b'#') {
            f |= END;
        }
        if b == b'@' {
            f |= AT;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            f |= SCHEME;
        }
        table[i] = f;
        i += 1;
    }
    table
};

/// The host a `Referer` names, in lower case; [`DIRECT_HOST`] without one,
/// [`OTHER_HOST`] when it names none.
///
/// By hand rather than with a URL parser: this runs on every redirect, and
/// `http::Uri` copies the header and `url::Url` allocates its
/// serialization, where the host is only a slice of what was sent. One pass
/// over the authority after `scheme://` finds its end, drops user info,
/// and checks that what is left is made of host characters; then the port
/// goes.
pub fn referrer_host(referer: Option<&[u8]>) -> Cow<'_, str> {
    let Some(raw) = referer.map(<[u8]>::trim_ascii).filter(|r| !r.is_empty()) else {
        return Cow::Borrowed(DIRECT_HOST);
    };
    // The scheme ends at the first ':', which must start "://".
    let Some(colon) = raw.iter().position(|b| *b == b':') else {
        return Cow::Borrowed(OTHER_HOST);
    };
    let scheme = &raw[..colon];
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|b| REFERER_BYTES[usize::from(*b)] & SCHEME != 0);
    if !scheme_ok || raw.get(colon + 1..colon + 3) != Some(&b"//"[..]) {
        return Cow::Borrowed(OTHER_HOST);
    }
    let rest = &raw[colon + 3..];
    let (mut start, mut end) = (0, rest.len());
    // `all` keeps HOST while every byte is a host byte; `any` gets UPPER
    // from any upper-case letter. User info (up to an `@`) starts both over.
    let (mut all, mut any) = (HOST, 0);
    for (i, &b) in rest.iter().enumerate() {
        let f = REFERER_BYTES[usize::from(b)];
        if f & (END | AT) == 0 {
            all &= f;
            any |= f;
        } else if f & END != 0 {
            end = i;
            break;
        } else {
            (start, all, any) = (i + 1, HOST, 0);
        }
    }
    let (valid, upper) = (all & HOST != 0, any & UPPER != 0);
    let host_port = &rest[start..end];
    let host = if host_port.first() == Some(&b'[') {
        // An IPv6 literal keeps its brackets and loses only the port.
        match host_port.iter().position(|b| *b == b']') {
            Some(close) => &host_port[..=close],
            None => &[][..],
        }
    } else {
        let port = host_port.iter().position(|b| *b == b':');
        &host_port[..port.unwrap_or(host_port.len())]
    };
    if !valid || host.is_empty() || host.len() > 255 {
        return Cow::Borrowed(OTHER_HOST);
    }
    // Every byte of `host` has HOST in REFERER_BYTES, which only ASCII
    // bytes have: the check cannot fail.
    let Ok(host) = std::str::from_utf8(host) else {
        return Cow::Borrowed(OTHER_HOST);
    };
    if upper {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// The part of a `User-Agent` that is classed: trimmed, at most
/// [`AGENT_MAX_BYTES`]; `None` when there is nothing.
fn agent_key(user_agent: Option<&[u8]>) -> Option<&[u8]> {
    let ua = user_agent
        .map(<[u8]>::trim_ascii)
        .filter(|u| !u.is_empty())?;
    Some(&ua[..ua.len().min(AGENT_MAX_BYTES)])
}

/// The class of a non-empty `User-Agent`, by the `isbot` patterns first.
fn class_of(ua: &[u8]) -> AgentClass {
    let ua = String::from_utf8_lossy(ua);
    if BOTS.is_bot(&ua) {
        AgentClass::Bot
    } else if ua.starts_with("Mozilla/") || ua.starts_with("Opera/") {
        AgentClass::Browser
    } else {
        AgentClass::Other
    }
}

/// Takes one visit from a limit: false once `max` have been taken.
fn take(counter: &AtomicU64, max: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

impl Visits {
    pub fn new(settings: VisitSettings, store: Arc<dyn LinkStore>) -> Self {
        Self {
            settings,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            staged: Mutex::default(),
            limits: Mutex::default(),
            gate: RwLock::new(()),
            store,
            counters: Counters::default(),
            failures: Mutex::new((None, 0)),
        }
    }

    /// Counts a redirect of a link without a limit (when counting is on).
    pub fn record(&self, code: &ShortCode, visit: Visit<'_>) {
        if self.settings.counting {
            self.add(code, visit);
        }
    }

    fn add(&self, code: &ShortCode, visit: Visit<'_>) {
        let agent = agent_key(visit.user_agent);
        let host = referrer_host(visit.referer);
        let now = Timestamp::now();
        let shard = &self.shards[shard_index()];
        let mut s = lock(shard);
        let class = match agent {
            None => AgentClass::Other,
            Some(ua) => match s.agents.get(ua) {
                Some(class) => *class,
                None => {
                    // The patterns take microseconds: not under the lock.
                    drop(s);
                    let class = class_of(ua);
                    s = lock(shard);
                    if s.agents.len() >= AGENTS_PER_SHARD {
                        s.agents.clear();
                    }
                    s.agents.insert(ua.into(), class);
                    class
                }
            },
        };
        match s.tallies.get_mut(code.as_str()) {
            Some(counts) => counts.add(now, class, &host),
            None => {
                let mut counts = VisitCounts::default();
                counts.add(now, class, &host);
                s.tallies.insert(code.clone(), counts);
            }
        }
        s.counted += 1;
    }

    /// A redirect of a link limited to `max` visits: counted and `true`,
    /// or `false` once the limit is reached.
    pub async fn take(
        &self,
        code: &ShortCode,
        max: u64,
        visit: Visit<'_>,
    ) -> Result<bool, StoreError> {
        let counter = self.limit(code).await?;
        if !take(&counter, max) {
            return Ok(false);
        }
        self.add(code, visit);
        Ok(true)
    }

    /// Whether a limited link has visits left, without taking one (HEAD,
    /// `GET /link/{code}`).
    pub async fn left(&self, code: &ShortCode, max: u64) -> Result<bool, StoreError> {
        Ok(self.limit(code).await?.load(Ordering::Acquire) < max)
    }

    /// The counter of a limited link, made on its first redirect from the
    /// stored total and what waits in memory.
    async fn limit(&self, code: &ShortCode) -> Result<Arc<AtomicU64>, StoreError> {
        if let Some(c) = lock(&self.limits).get(code.as_str()) {
            return Ok(Arc::clone(c));
        }
        let _gate = self.gate.read().await;
        let stored = self.store.link(code).await?.map_or(0, |l| l.visits);
        let total = stored + self.pending(code).total();
        Ok(Arc::clone(
            lock(&self.limits)
                .entry(code.clone())
                .or_insert_with(|| Arc::new(AtomicU64::new(total))),
        ))
    }

    /// What waits in memory for `code`.
    pub fn pending(&self, code: &ShortCode) -> VisitCounts {
        let mut out = VisitCounts::default();
        for shard in self.shards.iter() {
            if let Some(c) = lock(shard).tallies.get(code.as_str()) {
                out.merge(c.clone());
            }
        }
        if let Some(c) = lock(&self.staged).get(code.as_str()) {
            out.merge(c.clone());
        }
        out
    }

    /// Held while reading stored counts to add [`pending`](Self::pending)
    /// to: no flush moves counts from memory to the store meanwhile.
    pub async fn read_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Drops what is counted in memory for a deleted link.
    pub fn forget(&self, code: &ShortCode) {
        for shard in self.shards.iter() {
            lock(shard).tallies.remove(code.as_str());
        }
        lock(&self.staged).remove(code.as_str());
        lock(&self.limits).remove(code.as_str());
    }

    /// Writes every tally to the store, a chunk of links per transaction,
    /// as fast as the store takes them (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.flush_paced(Duration::ZERO).await
    }

    /// Writes every tally to the store, a chunk of links per transaction,
    /// spreading the chunks over about `spread`: the writer then has room
    /// for creates between them, and a one-CPU server for redirects. What
    /// could not be written stays in memory for the next flush.
    ///
    /// The gate is held while tallies move (from the shards to `staged`,
    /// and from `staged` into a committed chunk), never in between, so a
    /// reader always finds each count either in memory or in the store.
    pub async fn flush_paced(&self, spread: Duration) -> Result<(), StoreError> {
        {
            let _gate = self.gate.write().await;
            let mut staged = lock(&self.staged);
            for shard in self.shards.iter() {
                // As large as before: the same links are likely counted
                // again, and growing anew would rehash on the redirect path.
                let taken = {
                    let mut s = lock(shard);
                    let size = s.tallies.len();
                    std::mem::replace(
                        &mut s.tallies,
                        FastMap::with_capacity_and_hasher(size, Default::default()),
                    )
                };
                if staged.is_empty() {
                    *staged = taken;
                } else {
                    for (code, counts) in taken {
                        staged.entry(code).or_default().merge(counts);
                    }
                }
            }
        }
        // Written in the store's row order, so that each chunk's
        // transaction rewrites a few neighbouring pages of each table
        // rather than one for nearly every link in it (about 6x the
        // write-ahead log otherwise, docs/benchmarks.md).
        let codes: Vec<ShortCode> = lock(&self.staged).keys().cloned().collect();
        let chunks = codes.len().div_ceil(FLUSH_CHUNK);
        if chunks == 0 {
            return Ok(());
        }
        let pause = spread / chunks as u32;
        let mut order = self.in_row_order(codes).await.into_iter();
        loop {
            let _gate = self.gate.write().await;
            let chunk: Arc<[(ShortCode, VisitCounts)]> = {
                let mut staged = lock(&self.staged);
                let mut chunk = Vec::with_capacity(FLUSH_CHUNK);
                // A concurrent flush may have written some codes already.
                for code in order.by_ref() {
                    chunk.extend(staged.remove_entry(code.as_str()));
                    if chunk.len() == FLUSH_CHUNK {
                        break;
                    }
                }
                // And staged some this one did not order: taken as they come.
                if chunk.len() < FLUSH_CHUNK {
                    let rest: Vec<ShortCode> = staged
                        .keys()
                        .take(FLUSH_CHUNK - chunk.len())
                        .cloned()
                        .collect();
                    chunk.extend(
                        rest.into_iter()
                            .filter_map(|code| staged.remove_entry(code.as_str())),
                    );
                }
                chunk.into()
            };
            if chunk.is_empty() {
                break;
            }
            let n: u64 = chunk.iter().map(|(_, c)| c.total()).sum();
            if let Err(e) = self.store.record_visits(Arc::clone(&chunk)).await {
                // Back with the rest, to be tried again.
                let mut staged = lock(&self.staged);
                for (code, counts) in chunk.iter().cloned() {
                    staged.entry(code).or_default().merge(counts);
                }
                self.counters.failed_flushes.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            self.counters.flushed.fetch_add(n, Ordering::Relaxed);
            drop(_gate);
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `codes` in the store's row order. Found off the runtime's threads:
    /// a code the store has not seen lately costs it a decryption (about
    /// 7 µs), and a flush of many new links must not stall redirects.
    async fn in_row_order(&self, codes: Vec<ShortCode>) -> Vec<ShortCode> {
        let store = Arc::clone(&self.store);
        let sorted = tokio::task::spawn_blocking(move || {
            let mut keyed: Vec<(u64, ShortCode)> = codes
                .into_iter()
                .map(|code| (store.visit_order(&code), code))
                .collect();
            keyed.sort_unstable_by_key(|(at, _)| *at);
            keyed.into_iter().map(|(_, code)| code).collect::<Vec<_>>()
        });
        // Only a runtime shutting down fails it; the flush then takes the
        // codes as they come (the chunks fill up from what is staged).
        sorted.await.unwrap_or_default()
    }

    /// Flushes until `stop` changes; a flush that has started always
    /// finishes.
    pub fn spawn_flusher(self: &Arc<Self>) -> Flusher {
        let me = Arc::clone(self);
        let (stop, mut stopped) = watch::channel(false);
        let handle = tokio::spawn(async move {
            // A flush starts every 3/4 of the interval and is spread over
            // the last 1/4, so a count is on disk within one interval of
            // its redirect: what `kill -9` can lose at most.
            let every = me.settings.flush_interval * 3 / 4;
            let spread = me.settings.flush_interval / 4;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                if let Err(e) = me.flush_paced(spread).await {
                    me.log_failure(&e);
                }
            }
        });
        Flusher { stop, handle }
    }

    fn log_failure(&self, e: &StoreError) {
        let mut f = lock(&self.failures);
        f.1 += 1;
        if f.0.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            tracing::warn!(error = %e, failures = f.1, "cannot write visit counts; kept in memory to retry");
            *f = (Some(Instant::now()), 0);
        }
    }

    pub fn stats(&self) -> VisitStats {
        let c = &self.counters;
        VisitStats {
            counting: self.settings.counting,
            flush_interval_ms: self.settings.flush_interval.as_millis() as u64,
            counted: self.shards.iter().map(|s| lock(s).counted).sum(),
            flushed: c.flushed.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            failed_flushes: c.failed_flushes.load(Ordering::Relaxed),
            limited_links: lock(&self.limits).len(),
        }
    }
}

/// Buckets of a visit report's series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Interval {
    Hour,
    Day,
}

/// What a visit report covers: `[from, to)`, all time by default. A bucket
/// (an hour, or a day for referrers and agents) counts when it overlaps.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    pub interval: Interval,
}

impl Window {
    fn overlaps(&self, start_ms: i64, len_ms: i64) -> bool {
        self.from.is_none_or(|f| start_ms + len_ms > f.millis())
            && self.to.is_none_or(|t| start_ms < t.millis())
    }
}

/// Referrer hosts a report names; the rest are summed as `(other)`.
pub const REPORT_REFERRERS: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SeriesPoint {
    /// Start of the hour or day (UTC).
    #[schema(value_type = String, format = DateTime)]
    pub start: Timestamp,
    pub humans: u64,
    pub bots: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HostCount {
    pub host: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ClassCount {
    pub class: AgentClass,
    pub count: u64,
}

/// `GET /api/v1/links/{code}/visits`: every figure covers the window.
/// The series lists buckets with visits only, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct VisitReport {
    pub total: u64,
    pub humans: u64,
    pub bots: u64,
    pub series: Vec<SeriesPoint>,
    pub referrers: Vec<HostCount>,
    pub agents: Vec<ClassCount>,
}

impl VisitReport {
    pub fn build(counts: &VisitCounts, window: &Window) -> Self {
        use crate::domain::visit::{DAY_MS, HOUR_MS};
        use std::collections::BTreeMap;
        let mut series: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for h in &counts.hours {
            if !window.overlaps(h.hour * HOUR_MS, HOUR_MS) {
                continue;
            }
            let start = match window.interval {
                Interval::Hour => h.hour * HOUR_MS,
                Interval::Day => h.hour.div_euclid(24) * DAY_MS,
            };
            let b = series.entry(start).or_default();
            b.0 += h.humans;
            b.1 += h.bots;
        }
        let humans = series.values().map(|b| b.0).sum();
        let bots = series.values().map(|b| b.1).sum();
        let in_window = |day: i64| window.overlaps(day * DAY_MS, DAY_MS);
        let mut hosts: HashMap<&str, u64> = HashMap::new();
        for (day, host, n) in &counts.referrers {
            if in_window(*day) {
                *hosts.entry(host).or_default() += n;
            }
        }
        let other = hosts.remove(OTHER_HOST).unwrap_or(0);
        let mut referrers: Vec<HostCount> = hosts
            .into_iter()
            .map(|(host, count)| HostCount {
                host: host.to_owned(),
                count,
            })
            .collect();
        referrers.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.host.cmp(&b.host)));
        let rest: u64 = referrers
            .iter()
            .skip(REPORT_REFERRERS)
            .map(|r| r.count)
            .sum();
        referrers.truncate(REPORT_REFERRERS);
        if other + rest > 0 {
            referrers.push(HostCount {
                host: OTHER_HOST.to_owned(),
                count: other + rest,
            });
        }
        // Agent classes at day granularity, like referrers: every hour of
        // a day that overlaps the window.
        let (mut browser, mut other, mut bot) = (0, 0, 0);
        for h in &counts.hours {
            if in_window(h.hour.div_euclid(24)) {
                browser += h.browsers;
                other += h.others();
                bot += h.bots;
            }
        }
        let mut agents: Vec<ClassCount> = [
            (AgentClass::Browser, browser),
            (AgentClass::Bot, bot),
            (AgentClass::Other, other),
        ]
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(class, count)| ClassCount { class, count })
        .collect();
        agents.sort_by(|a, b| b.count.cmp(&a.count).then(a.class.cmp(&b.class)));
        Self {
            total: humans + bots,
            humans,
            bots,
            series: series
                .into_iter()
                .map(|(start, (humans, bots))| SeriesPoint {
                    start: Timestamp::from_millis(start),
                    humans,
                    bots,
                })
                .collect(),
            referrers,
            agents,
        }
    }
}

/// The background flush task.
pub struct Flusher {
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
}

impl Flusher {
    /// Stops the task once any flush it is running has finished.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn referrers_are_hosts_in_lower_case() {
        let referrer_host = |r: Option<&'static str>| referrer_host(r.map(str::as_bytes));
        assert_eq!(referrer_host(None), DIRECT_HOST);
        assert_eq!(referrer_host(Some("")), DIRECT_HOST);
        assert_eq!(
            referrer_host(Some("https://News.Example.com/a?b=c")),
            "news.example.com"
        );
        assert_eq!(referrer_host(Some("android-app://com.x")), "com.x");
        assert_eq!(
            referrer_host(Some("https://u:p@Host.example:8443/x")),
            "host.example"
        );
        assert_eq!(referrer_host(Some("http://[::1]:8080/")), "[::1]");
        assert_eq!(
            referrer_host(Some("https://example.com?q#f")),
            "example.com"
        );
        assert_eq!(referrer_host(Some("not a url")), OTHER_HOST);
        assert_eq!(referrer_host(Some("/relative")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://a b.example/")), OTHER_HOST);
        assert_eq!(referrer_host(Some("1http://x.example/")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://exämple.com/")), OTHER_HOST);
        assert_eq!(
            referrer_host(Some("https://ü:pä@ok.example/")),
            "ok.example"
        );
        assert_eq!(referrer_host(Some("http:/x.example/")), OTHER_HOST);
        let raw: &[u8] = b"https://a\xff.example/";
        assert_eq!(super::referrer_host(Some(raw)), OTHER_HOST);
    }

    /// The table-driven scan finds what a plain match on each byte finds
    /// (the scan as it was before the table), on values made of the bytes
    /// that matter to it.
    fn referrer_host_by_match(referer: Option<&[u8]>) -> Cow<'_, str> {
        let Some(raw) = referer.map(<[u8]>::trim_ascii).filter(|r| !r.is_empty()) else {
            return Cow::Borrowed(DIRECT_HOST);
        };
        let Some(colon) = raw.iter().position(|b| *b == b':') else {
            return Cow::Borrowed(OTHER_HOST);
        };
        let scheme = &raw[..colon];
        let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
            && scheme
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !scheme_ok || raw.get(colon + 1..colon + 3) != Some(&b"//"[..]) {
            return Cow::Borrowed(OTHER_HOST);
        }
        let rest = &raw[colon + 3..];
        let (mut start, mut end) = (0, rest.len());
        let (mut valid, mut upper) = (true, false);
        for (i, &b) in rest.iter().enumerate() {
            match b {
                b'/' | b'?' | b'#' => {
                    end = i;
                    break;
                }
                b'@' => (start, valid, upper) = (i + 1, true, false),
                _ => {
                    valid &= b.is_ascii_alphanumeric()
                        || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':');
                    upper |= b.is_ascii_uppercase();
                }
            }
        }
        let host_port = &rest[start..end];
        let host = if host_port.first() == Some(&b'[') {
            match host_port.iter().position(|b| *b == b']') {
                Some(close) => &host_port[..=close],
                None => &[][..],
            }
        } else {
            let port = host_port.iter().position(|b| *b == b':');
            &host_port[..port.unwrap_or(host_port.len())]
        };
        if !valid || host.is_empty() || host.len() > 255 {
            return Cow::Borrowed(OTHER_HOST);
        }
        let host = String::from_utf8_lossy(host);
        if upper {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            host
        }
    }

    proptest::proptest! {
        #[test]
        fn the_referrer_scan_agrees_with_a_match_per_byte(
            scheme in "(https?|[a-zA-Z][a-zA-Z0-9+.-]{0,6}|1x|h_x|)",
            sep in "(://|:/|:|//|)",
            user in "([a-zA-Z0-9 %é:]{0,6}@)?",
            body in "[a-zA-Z0-9:/?#@.\\[\\]_+ %é-]{0,40}",
        ) {
            let raw = format!(" {scheme}{sep}{user}{body} ");
            let want = referrer_host_by_match(Some(raw.as_bytes()));
            proptest::prop_assert_eq!(referrer_host(Some(raw.as_bytes())), want);
        }
    }

    #[test]
    fn agents_are_bots_browsers_or_other() {
        assert_eq!(agent_key(Some(b"  ")), None);
        assert_eq!(
            agent_key(Some("é".repeat(400).as_bytes())).map(<[u8]>::len),
            Some(512)
        );
        let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                      (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36";
        let class_of = |ua: &str| class_of(ua.as_bytes());
        assert_eq!(class_of(chrome), AgentClass::Browser);
        let bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
        assert_eq!(class_of(bot), AgentClass::Bot);
        assert_eq!(class_of("curl/8.5.0"), AgentClass::Bot);
        assert_eq!(
            class_of("Dalvik/2.1.0 (Linux; U; Android 13)"),
            AgentClass::Other
        );
    }

    #[test]
    fn a_report_covers_its_window_and_names_the_top_referrers() {
        use crate::domain::visit::{DAY_MS, HOUR_MS};
        let mut counts = VisitCounts::default();
        let day0 = 20_000 * DAY_MS;
        // Day 0, 10:00: 12 hosts, host i with i + 1 visits; day 1, 03:00:
        // 5 bot visits without a referrer.
        for i in 0..12u64 {
            for _ in 0..=i {
                let at = Timestamp::from_millis(day0 + 10 * HOUR_MS);
                counts.add(at, AgentClass::Browser, &format!("h{i:02}.example"));
            }
        }
        for _ in 0..5 {
            let at = Timestamp::from_millis(day0 + DAY_MS + 3 * HOUR_MS + 59_000);
            counts.add(at, AgentClass::Bot, DIRECT_HOST);
        }
        let all = |interval| Window {
            from: None,
            to: None,
            interval,
        };
        let r = VisitReport::build(&counts, &all(Interval::Hour));
        assert_eq!((r.total, r.humans, r.bots), (78 + 5, 78, 5));
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.series[0].start.to_string(), "2024-10-04T10:00:00Z");
        // The ten largest by count (h11 down to h03, with (direct) at 5
        // beside h04), then the rest: h02, h01 and h00.
        assert_eq!(r.referrers.len(), REPORT_REFERRERS + 1);
        assert_eq!(r.referrers[0].host, "h11.example");
        let other = r.referrers.last().expect("other");
        assert_eq!((other.host.as_str(), other.count), (OTHER_HOST, 3 + 2 + 1));
        let sum: u64 = r.referrers.iter().map(|h| h.count).sum();
        assert_eq!(sum, r.total);
        assert_eq!(
            r.agents,
            vec![
                ClassCount {
                    class: AgentClass::Browser,
                    count: 78
                },
                ClassCount {
                    class: AgentClass::Bot,
                    count: 5
                },
            ]
        );
        let daily = VisitReport::build(&counts, &all(Interval::Day));
        assert_eq!(daily.series[1].start.to_string(), "2024-10-05T00:00:00Z");
        // From 03:30 on day 1: its 03:00 hour overlaps, day 0 does not.
        let late = Window {
            from: Some(Timestamp::from_millis(
                day0 + DAY_MS + 3 * HOUR_MS + 1_800_000,
            )),
            to: None,
            interval: Interval::Hour,
        };
        let r = VisitReport::build(&counts, &late);
        assert_eq!((r.total, r.bots), (5, 5));
        assert_eq!(
            r.referrers,
            vec![HostCount {
                host: DIRECT_HOST.into(),
                count: 5
            }]
        );
        // Up to 10:00 on day 0, exclusive: nothing.
        let early = Window {
            from: None,
            to: Some(Timestamp::from_millis(day0 + 10 * HOUR_MS)),
            interval: Interval::Hour,
        };
        assert_eq!(VisitReport::build(&counts, &early).total, 0);
    }

    #[test]
    fn a_limit_is_never_passed() {
        let c = AtomicU64::new(0);
        let taken = (0..10).filter(|_| take(&c, 3)).count();
        assert_eq!(taken, 3);
        assert_eq!(c.load(Ordering::Relaxed), 3);
    }
}
