//! Links with `max_visits`: an exact limit on one instance, however many
//! redirects run at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Visit, Visits, lock};
use crate::domain::LinkKey;
use crate::store::StoreError;

impl Visits {
    /// A redirect of a link limited to `max` visits: counted and `true`,
    /// or `false` once the limit is reached.
    pub(crate) async fn take(
        &self,
        code: &LinkKey,
        max: u64,
        visit: Visit<'_>,
        target: &crate::domain::TargetUrl,
    ) -> Result<bool, StoreError> {
        let counter = self.limit(code).await?;
        if !take(&counter, max) {
            return Ok(false);
        }
        self.add(code, visit, target);
        Ok(true)
    }

    /// Whether a limited link has visits left, without taking one (HEAD,
    /// `GET /link/{code}`).
    pub(crate) async fn left(&self, code: &LinkKey, max: u64) -> Result<bool, StoreError> {
        Ok(self.limit(code).await?.load(Ordering::Acquire) < max)
    }

    /// The counter of a limited link, made on its first redirect from the
    /// stored total and what waits in memory.
    async fn limit(&self, code: &LinkKey) -> Result<Arc<AtomicU64>, StoreError> {
        if let Some(c) = lock(&self.limits).get(code) {
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
}

/// Takes one visit from a limit: false once `max` have been taken.
fn take(counter: &AtomicU64, max: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_never_passed() {
        let c = AtomicU64::new(0);
        let taken = (0..10).filter(|_| take(&c, 3)).count();
        assert_eq!(taken, 3);
        assert_eq!(c.load(Ordering::Relaxed), 3);
    }
}
