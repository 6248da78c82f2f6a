//! Caches in front of the store. A cache may make a lookup faster; it may
//! never make one fail. Every implementation swallows its own errors
//! (counting and logging them) and answers [`Lookup::Unknown`] instead, so
//! the caller falls through to the store.

mod memory;
mod tiered;
mod valkey;

use async_trait::async_trait;

use crate::domain::{ShortCode, TargetUrl};

pub use memory::MemoryCache;
pub use tiered::TieredCache;
pub use valkey::{ValkeyCache, ValkeyConfig, ValkeyError};

/// What a cache knows about a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(TargetUrl),
    /// The store was asked recently and had no such code (negative cache).
    Missing,
    /// The cache cannot say: ask the store.
    Unknown,
}

#[async_trait]
pub trait LinkCache: Send + Sync + 'static {
    async fn get(&self, code: &ShortCode) -> Lookup;
    async fn put(&self, code: &ShortCode, target: &TargetUrl);
    /// Remembers, briefly, that the store has no such code.
    async fn put_missing(&self, code: &ShortCode);
    /// Forgets a code in every tier, for a later delete or update.
    async fn invalidate(&self, code: &ShortCode);
    /// Counters for `/stats`, one object per tier.
    fn stats(&self) -> serde_json::Value;
}

/// `--cache none`: every lookup goes to the store.
#[derive(Debug, Default)]
pub struct NoCache;

#[async_trait]
impl LinkCache for NoCache {
    async fn get(&self, _: &ShortCode) -> Lookup {
        Lookup::Unknown
    }
    async fn put(&self, _: &ShortCode, _: &TargetUrl) {}
    async fn put_missing(&self, _: &ShortCode) {}
    async fn invalidate(&self, _: &ShortCode) {}
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "mode": "none" })
    }
}
