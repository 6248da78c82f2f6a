//! `--cache none`: every lookup goes to the store.

use async_trait::async_trait;

use super::{CacheMode, CacheStats, LinkCache, Lookup};
use crate::domain::{LinkKey, Resolved};

#[derive(Debug, Default)]
pub(crate) struct NoCache;

#[async_trait]
impl LinkCache for NoCache {
    async fn get(&self, _: &LinkKey) -> Lookup {
        Lookup::Unknown
    }
    async fn put(&self, _: &LinkKey, _: &Resolved) {}
    async fn put_missing(&self, _: &LinkKey) {}
    async fn invalidate(&self, _: &LinkKey) {}
    fn stats(&self) -> CacheStats {
        CacheStats {
            mode: CacheMode::None,
            memory: None,
            valkey: None,
        }
    }
}
