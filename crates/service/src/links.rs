//! The application service: resolving and creating links, with the cache in
//! front of the store. Handlers call this and nothing below it, so a
//! request's path reads handler -> cache -> store and back.

use std::sync::Arc;

use serde::Serialize;

use crate::cache::{CacheStats, LinkCache, Lookup};
use crate::domain::{ShortCode, TargetUrl};
use crate::store::{LinkStore, StoreError, StoreStats};

/// What `/stats` shows of the store and the cache: the store's fields at
/// the top level (as they always were), the cache under `cache`.
#[derive(Debug, Clone, Serialize)]
pub struct LinkStats {
    #[serde(flatten)]
    pub store: StoreStats,
    pub cache: CacheStats,
}

#[derive(Clone)]
pub struct Links {
    cache: Arc<dyn LinkCache>,
    store: Arc<dyn LinkStore>,
}

impl Links {
    pub fn new(cache: Arc<dyn LinkCache>, store: Arc<dyn LinkStore>) -> Self {
        Self { cache, store }
    }

    pub async fn resolve(&self, code: &ShortCode) -> Result<Option<TargetUrl>, StoreError> {
        match self.cache.get(code).await {
            Lookup::Found(target) => return Ok(Some(target)),
            Lookup::Missing => return Ok(None),
            Lookup::Unknown => {}
        }
        let found = self.store.get(code).await?;
        match &found {
            Some(target) => self.cache.put(code, target).await,
            None => self.cache.put_missing(code).await,
        }
        Ok(found)
    }

    /// Stores the link durably, then writes it through to the cache, so the
    /// cache never holds a code the store could lose.
    pub async fn create(&self, target: TargetUrl) -> Result<ShortCode, StoreError> {
        let code = self.store.create(target.clone()).await?;
        self.cache.put(&code, &target).await;
        Ok(code)
    }

    pub fn stats(&self) -> LinkStats {
        LinkStats {
            store: self.store.stats(),
            cache: self.cache.stats(),
        }
    }

    /// Commits what is queued and closes the store.
    pub async fn close(&self) {
        self.store.close().await;
    }
}
