//! The application service: resolving, creating and managing links, with
//! the cache in front of the store. Handlers call this and nothing below
//! it, so a request's path reads handler -> links -> cache -> store.

use std::sync::Arc;

use serde::Serialize;

use crate::cache::{CacheStats, LinkCache, Lookup};
use crate::domain::{Link, ShortCode, TargetUrl};
use crate::keys::{KeyRegistry, Principal};
use crate::store::{LinkPatch, LinkStore, ListPage, ListQuery, NewLink, StoreError, StoreStats};

/// What `/stats` shows of the store and the cache: the store's fields at
/// the top level (as they always were), the cache under `cache`.
#[derive(Debug, Clone, Serialize)]
pub struct LinkStats {
    #[serde(flatten)]
    pub store: StoreStats,
    pub cache: CacheStats,
}

/// What a redirect finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Found(TargetUrl),
    /// The link exists but its expiry has passed: 410.
    Expired,
    Missing,
}

#[derive(Clone)]
pub struct Links {
    cache: Arc<dyn LinkCache>,
    store: Arc<dyn LinkStore>,
    keys: Arc<KeyRegistry>,
}

/// Whether `caller` may see and change `link`: its owner, or an admin.
/// Links without an owner are managed by admins only.
fn may_manage(caller: &Principal, link: &Link) -> bool {
    caller.admin || link.owner.as_ref().is_some_and(|o| o.id == caller.id)
}

impl Links {
    pub fn new(
        cache: Arc<dyn LinkCache>,
        store: Arc<dyn LinkStore>,
        keys: Arc<KeyRegistry>,
    ) -> Self {
        Self { cache, store, keys }
    }

    pub fn keys(&self) -> &Arc<KeyRegistry> {
        &self.keys
    }

    pub async fn resolve(&self, code: &ShortCode) -> Result<Resolution, StoreError> {
        let found = match self.cache.get(code).await {
            Lookup::Found(link) => Some(link),
            Lookup::Missing => None,
            Lookup::Unknown => {
                let found = self.store.get(code).await?;
                match &found {
                    Some(link) => self.cache.put(code, link).await,
                    None => self.cache.put_missing(code).await,
                }
                found
            }
        };
        Ok(match found {
            None => Resolution::Missing,
            Some(link) if link.is_expired() => Resolution::Expired,
            Some(link) => Resolution::Found(link.target),
        })
    }

    /// Stores the link durably, then writes it through to the cache, so the
    /// cache never holds a code the store could lose.
    pub async fn create(&self, new: NewLink) -> Result<Link, StoreError> {
        let link = self.store.create(new).await?;
        self.cache.put(&link.code, &link.resolved()).await;
        Ok(link)
    }

    /// The link `caller` may manage; `None` also when it may not see it.
    pub async fn get(
        &self,
        caller: &Principal,
        code: &ShortCode,
    ) -> Result<Option<Link>, StoreError> {
        Ok(self
            .store
            .link(code)
            .await?
            .filter(|link| may_manage(caller, link)))
    }

    /// Changes a link; every cache tier forgets the old version before this
    /// returns, so the next redirect goes to the new target.
    pub async fn update(
        &self,
        caller: &Principal,
        code: &ShortCode,
        patch: LinkPatch,
    ) -> Result<Option<Link>, StoreError> {
        if self.get(caller, code).await?.is_none() {
            return Ok(None);
        }
        let updated = self.store.update(code, patch).await?;
        self.cache.invalidate(code).await;
        Ok(updated)
    }

    /// Deletes a link; gone from every cache tier before this returns.
    pub async fn delete(&self, caller: &Principal, code: &ShortCode) -> Result<bool, StoreError> {
        if self.get(caller, code).await?.is_none() {
            return Ok(false);
        }
        let deleted = self.store.delete(code).await?;
        self.cache.invalidate(code).await;
        Ok(deleted)
    }

    /// A page of the links `caller` may manage, newest first.
    pub async fn list(
        &self,
        caller: &Principal,
        limit: usize,
        before: Option<i64>,
        q: Option<String>,
    ) -> Result<ListPage, StoreError> {
        let query = ListQuery {
            owner: (!caller.admin).then_some(caller.id),
            limit,
            before,
            q,
        };
        self.store.list(query).await
    }

    pub fn stats(&self) -> LinkStats {
        LinkStats {
            store: self.store.stats(),
            cache: self.cache.stats(),
        }
    }

    /// Writes pending key uses, commits what is queued and closes the store.
    pub async fn close(&self) {
        if let Err(e) = self.keys.flush(true).await {
            tracing::warn!(error = %e, "could not record the last use of API keys");
        }
        self.store.close().await;
    }
}
