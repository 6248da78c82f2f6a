//! `--cache none`: every lookup goes to the store.

use async_trait::async_trait;

use super::{CacheMode, CacheStats, LinkCache, Lookup};
use crate::domain::{Resolved, ShortCode};

#[derive(Debug, Default)]
pub struct NoCache;

#[async_trait]
impl LinkCache for NoCache {
    async fn get(&self, _: &ShortCode) -> Lookup {
        Lookup::Unknown
    }
    async fn put(&self, _: &ShortCode, _: &Resolved) {}
    async fn put_missing(&self, _: &ShortCode) {}
    async fn invalidate(&self, _: &ShortCode) {}
    fn stats(&self) -> CacheStats {
        CacheStats {
            mode: CacheMode::None,
            memory: None,
            valkey: None,
        }
    }
}
