//! Caches in front of the store. A cache may make a lookup faster; it may
//! never make one fail. Every implementation swallows its own errors
//! (counting and logging them) and answers [`Lookup::Unknown`] instead, so
//! the caller falls through to the store.
//!
//! A new tier is one file here implementing [`LinkCache`], a [`CacheMode`]
//! and a line in [`build`].

pub(crate) mod invalidations;
mod memory;
mod none;
mod tiered;
mod valkey;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use strum::{Display, EnumString, VariantNames};

use crate::domain::{LinkKey, Resolved};

pub(crate) use memory::{MemoryCache, MemoryStats};
pub(crate) use none::NoCache;
pub(crate) use tiered::TieredCache;
pub use valkey::{ValkeyCache, ValkeyError, ValkeySettings, ValkeyStats, ValkeyTls};

/// Which cache sits in front of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CacheMode {
    /// Every lookup reads the store.
    None,
    /// A bounded in-process cache.
    Memory,
    /// Valkey (or Redis), shared by every instance.
    Valkey,
    /// Memory in front of Valkey.
    Tiered,
}

#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub mode: CacheMode,
    /// Entries the in-process tier holds.
    pub capacity: usize,
    /// How long an unknown code is remembered as unknown; zero: never.
    pub negative_ttl: Duration,
    /// While the invalidation channel is down, in-process entries are
    /// served only this long after they were cached (zero: not at all).
    pub unheard_ttl: Duration,
    pub valkey: ValkeySettings,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            mode: CacheMode::Memory,
            capacity: 100_000,
            negative_ttl: Duration::from_secs(5),
            unheard_ttl: Duration::from_secs(1),
            valkey: ValkeySettings::default(),
        }
    }
}

/// `/stats` of the cache: its mode and one object per tier it has.
#[derive(Debug, Clone, Serialize)]
pub struct CacheStats {
    pub mode: CacheMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valkey: Option<ValkeyStats>,
}

/// Builds the cache `settings` ask for. Valkey connects lazily, so this
/// fails only on a malformed URL.
pub fn build(settings: &CacheSettings) -> Result<Arc<dyn LinkCache>, ValkeyError> {
    let memory = || {
        MemoryCache::new(settings.capacity, settings.negative_ttl)
            .with_unheard_ttl(settings.unheard_ttl)
    };
    let valkey = || ValkeyCache::new(settings.valkey.clone(), settings.negative_ttl);
    Ok(match settings.mode {
        CacheMode::None => Arc::new(NoCache),
        CacheMode::Memory => Arc::new(memory()),
        CacheMode::Valkey => Arc::new(valkey()?),
        CacheMode::Tiered => Arc::new(TieredCache::new(memory(), valkey()?)),
    })
}

/// What a cache knows about a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(Resolved),
    /// The store was asked recently and had no such code (negative cache).
    Missing,
    /// The cache cannot say: ask the store.
    Unknown,
}

#[async_trait]
pub trait LinkCache: Send + Sync + 'static {
    async fn get(&self, code: &LinkKey) -> Lookup;
    /// What the cache can say at once, without waiting on anything (an
    /// in-process tier); `None`: only [`LinkCache::get_rest`] can tell.
    /// A cache hit then costs no future and no allocation.
    fn get_now(&self, _code: &LinkKey) -> Option<Lookup> {
        None
    }
    /// The rest of a lookup that [`LinkCache::get_now`] could not answer
    /// (the tiers it did not ask).
    async fn get_rest(&self, code: &LinkKey) -> Lookup {
        self.get(code).await
    }
    async fn put(&self, code: &LinkKey, link: &Resolved);
    /// Remembers, briefly, that the store has no such code.
    async fn put_missing(&self, code: &LinkKey);
    /// Forgets a code in every tier, for a later delete or update.
    async fn invalidate(&self, code: &LinkKey);
    /// Forgets a code in the in-process tier only: another instance
    /// changed it (and the shared tier with it).
    fn forget_local(&self, _code: &LinkKey) {}
    /// Turns the in-process tier off (and empties it) while other
    /// instances' changes cannot reach this one, and on again.
    fn set_local(&self, _usable: bool) {}
    /// Changes whenever the in-process tier forgets something: a lookup
    /// that began before a change fills nothing in (its answer may be the
    /// old one).
    fn generation(&self) -> u64 {
        0
    }
    /// Counters for `/stats`.
    fn stats(&self) -> CacheStats;
    /// Whether an outside tier answers now (the readiness check); an
    /// in-process cache always does.
    async fn check(&self) -> Result<(), String> {
        Ok(())
    }
}
