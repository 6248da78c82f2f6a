//! Memory in front of Valkey in front of the store: most reads never leave
//! the process, and instances share what one of them has read or created.

use async_trait::async_trait;

use super::{CacheMode, CacheStats, LinkCache, Lookup, MemoryCache, ValkeyCache};
use crate::domain::{LinkKey, Resolved};

pub(crate) struct TieredCache {
    memory: MemoryCache,
    valkey: ValkeyCache,
}

impl TieredCache {
    pub(crate) fn new(memory: MemoryCache, valkey: ValkeyCache) -> Self {
        Self { memory, valkey }
    }
}

#[async_trait]
impl LinkCache for TieredCache {
    async fn get(&self, code: &LinkKey) -> Lookup {
        match self.get_now(code) {
            Some(known) => known,
            None => self.get_rest(code).await,
        }
    }

    fn get_now(&self, code: &LinkKey) -> Option<Lookup> {
        match self.memory.lookup(code) {
            Lookup::Unknown => None,
            known => Some(known),
        }
    }

    async fn get_rest(&self, code: &LinkKey) -> Lookup {
        let found = self.valkey.get(code).await;
        match &found {
            Lookup::Found(t) => self.memory.insert(code, t),
            Lookup::Missing => self.memory.insert_missing(code),
            Lookup::Unknown => {}
        }
        found
    }

    async fn put(&self, code: &LinkKey, link: &Resolved) {
        self.memory.insert(code, link);
        self.valkey.put(code, link).await;
    }

    async fn put_missing(&self, code: &LinkKey) {
        self.memory.insert_missing(code);
        self.valkey.put_missing(code).await;
    }

    async fn invalidate(&self, code: &LinkKey) {
        self.memory.remove(code);
        self.valkey.invalidate(code).await;
    }

    async fn check(&self) -> Result<(), String> {
        self.valkey.check().await
    }

    fn forget_local(&self, code: &LinkKey) {
        self.memory.remove(code);
    }

    fn set_local(&self, usable: bool) {
        self.memory.set_usable(usable);
    }

    fn generation(&self) -> u64 {
        self.memory.generation()
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            mode: CacheMode::Tiered,
            memory: Some(self.memory.counters()),
            valkey: Some(self.valkey.counters()),
        }
    }
}
