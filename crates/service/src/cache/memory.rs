//! The in-process tier: a bounded, concurrent code -> URL map.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;

use super::{CacheMode, CacheStats, LinkCache, Lookup};
use crate::domain::{LinkKey, Resolved};

#[derive(Clone)]
enum Entry {
    /// A link, and when it was put here.
    Found(Resolved, Instant),
    /// Unknown until this instant (and put here at the second). Misses
    /// expire so that a code created by another instance becomes visible
    /// here within the TTL.
    Missing(Instant, Instant),
}

impl Entry {
    fn put_at(&self) -> Instant {
        match self {
            Entry::Found(_, at) | Entry::Missing(_, at) => *at,
        }
    }
}

/// What the tier may serve: everything (other instances' changes reach
/// it), only entries younger than the TTL (they cannot: the invalidation
/// channel is down), or nothing.
const SERVING: u8 = 0;
const YOUNG_ONLY: u8 = 1;
const OFF: u8 = 2;

/// `/stats` of the in-process tier.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryStats {
    pub capacity: usize,
    pub entries: usize,
    pub hits: u64,
    pub negative_hits: u64,
    pub misses: u64,
    pub errors: u64,
}

/// quick_cache's sharded S3-FIFO map: bounded by entry count, lock-sharded
/// so concurrent readers rarely meet, and it keeps frequently read codes
/// through a scan of one-off ones.
pub(crate) struct MemoryCache {
    map: quick_cache::sync::Cache<LinkKey, Entry>,
    negative_ttl: Duration,
    capacity: usize,
    hits: AtomicU64,
    negative_hits: AtomicU64,
    misses: AtomicU64,
    /// [`SERVING`], or while changes made by other instances cannot reach
    /// this one (invalidations.rs) [`YOUNG_ONLY`] (`unheard_ttl` > 0) or
    /// [`OFF`].
    state: AtomicU8,
    /// How old an entry may be while other instances cannot be heard.
    unheard_ttl: Duration,
    /// Counts forgets, so that a fill that raced with one is dropped.
    generation: AtomicU64,
}

impl MemoryCache {
    pub(crate) fn new(capacity: usize, negative_ttl: Duration) -> Self {
        Self {
            map: quick_cache::sync::Cache::new(capacity.max(1)),
            negative_ttl,
            capacity,
            hits: AtomicU64::new(0),
            negative_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            state: AtomicU8::new(SERVING),
            unheard_ttl: Duration::ZERO,
            generation: AtomicU64::new(0),
        }
    }

    /// While other instances cannot be heard, entries are served for `ttl`
    /// after they were put here (zero: none is served).
    pub(crate) fn with_unheard_ttl(mut self, ttl: Duration) -> Self {
        self.unheard_ttl = ttl;
        self
    }

    /// Serves everything again (`true`: other instances are heard), or
    /// only young entries, or nothing (`false`). Back to serving it starts
    /// empty: what changed meanwhile was not heard.
    pub(super) fn set_usable(&self, on: bool) {
        let state = match (on, self.unheard_ttl.is_zero()) {
            (true, _) => SERVING,
            (false, false) => YOUNG_ONLY,
            (false, true) => OFF,
        };
        if self.state.swap(state, Ordering::AcqRel) != state {
            self.generation.fetch_add(1, Ordering::AcqRel);
            if state != YOUNG_ONLY {
                self.map.clear();
            }
        }
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The synchronous core, so the tiered cache can use it without awaits.
    pub(super) fn lookup(&self, code: &LinkKey) -> Lookup {
        let state = self.state.load(Ordering::Relaxed);
        if state == OFF {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Unknown;
        }
        let entry = match self.map.get(code) {
            Some(e) if state == YOUNG_ONLY && e.put_at().elapsed() >= self.unheard_ttl => {
                self.map.remove(code);
                None
            }
            other => other,
        };
        match entry {
            Some(Entry::Found(t, _)) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Found(t)
            }
            Some(Entry::Missing(until, _)) if Instant::now() < until => {
                self.negative_hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Missing
            }
            Some(Entry::Missing(..)) => {
                self.map.remove(code);
                self.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Unknown
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Unknown
            }
        }
    }

    pub(super) fn insert(&self, code: &LinkKey, link: &Resolved) {
        if self.state.load(Ordering::Acquire) != OFF {
            self.map
                .insert(code.clone(), Entry::Found(link.clone(), Instant::now()));
        }
    }

    pub(super) fn insert_missing(&self, code: &LinkKey) {
        if !self.negative_ttl.is_zero() && self.state.load(Ordering::Acquire) != OFF {
            let now = Instant::now();
            self.map
                .insert(code.clone(), Entry::Missing(now + self.negative_ttl, now));
        }
    }

    pub(super) fn remove(&self, code: &LinkKey) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.map.remove(code);
    }

    pub(super) fn counters(&self) -> MemoryStats {
        MemoryStats {
            capacity: self.capacity,
            entries: self.map.len(),
            hits: self.hits.load(Ordering::Relaxed),
            negative_hits: self.negative_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            errors: 0,
        }
    }
}

#[async_trait]
impl LinkCache for MemoryCache {
    async fn get(&self, code: &LinkKey) -> Lookup {
        self.lookup(code)
    }
    fn get_now(&self, code: &LinkKey) -> Option<Lookup> {
        Some(self.lookup(code))
    }
    async fn put(&self, code: &LinkKey, link: &Resolved) {
        self.insert(code, link);
    }
    async fn put_missing(&self, code: &LinkKey) {
        self.insert_missing(code);
    }
    async fn invalidate(&self, code: &LinkKey) {
        self.remove(code);
    }
    fn forget_local(&self, code: &LinkKey) {
        self.remove(code);
    }
    fn set_local(&self, usable: bool) {
        self.set_usable(usable);
    }
    fn generation(&self) -> u64 {
        MemoryCache::generation(self)
    }
    fn stats(&self) -> CacheStats {
        CacheStats {
            mode: CacheMode::Memory,
            memory: Some(self.counters()),
            valkey: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> LinkKey {
        LinkKey::default_domain(crate::domain::ShortCode::parse(s).unwrap())
    }

    #[test]
    fn remembers_links_and_misses_until_their_ttl() {
        // A TTL long enough that no preemption between the insert and the
        // check below can outlast it.
        let c = MemoryCache::new(100, Duration::from_millis(1000));
        let t = Resolved {
            target: crate::domain::TargetUrl::parse("https://example.com").unwrap(),
            expires_at: None,
            max_visits: Some(3),
            extra: None,
        };
        assert_eq!(c.lookup(&code("abc")), Lookup::Unknown);
        c.insert(&code("abc"), &t);
        assert_eq!(c.lookup(&code("abc")), Lookup::Found(t));
        c.insert_missing(&code("nope"));
        assert_eq!(c.lookup(&code("nope")), Lookup::Missing);
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(c.lookup(&code("nope")), Lookup::Unknown);
        c.remove(&code("abc"));
        assert_eq!(c.lookup(&code("abc")), Lookup::Unknown);
    }

    #[test]
    fn while_others_are_not_heard_only_young_entries_are_served() {
        let t = Resolved {
            target: crate::domain::TargetUrl::parse("https://example.com").unwrap(),
            expires_at: None,
            max_visits: None,
            extra: None,
        };
        let c = MemoryCache::new(100, Duration::from_secs(60))
            .with_unheard_ttl(Duration::from_millis(300));
        c.insert(&code("before"), &t);
        std::thread::sleep(Duration::from_millis(350));
        c.set_usable(false);
        assert_eq!(c.lookup(&code("before")), Lookup::Unknown, "too old");
        c.insert(&code("during"), &t);
        c.insert_missing(&code("nope"));
        assert_eq!(c.lookup(&code("during")), Lookup::Found(t.clone()));
        assert_eq!(c.lookup(&code("nope")), Lookup::Missing);
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(c.lookup(&code("during")), Lookup::Unknown);
        assert_eq!(c.lookup(&code("nope")), Lookup::Unknown);
        c.insert(&code("during"), &t);
        c.set_usable(true);
        assert_eq!(c.lookup(&code("during")), Lookup::Unknown, "starts empty");
        // Without a TTL the tier is off while others are not heard.
        let off = MemoryCache::new(100, Duration::from_secs(60));
        off.set_usable(false);
        off.insert(&code("x"), &t);
        assert_eq!(off.lookup(&code("x")), Lookup::Unknown);
    }

    #[test]
    fn zero_negative_ttl_caches_no_misses() {
        let c = MemoryCache::new(10, Duration::ZERO);
        c.insert_missing(&code("nope"));
        assert_eq!(c.lookup(&code("nope")), Lookup::Unknown);
    }
}
