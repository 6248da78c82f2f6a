//! Writing the tallies to the store: every `flush_interval` in the
//! background, and once more at shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{FastMap, VisitRecord, Visits, lock};
use crate::domain::{Facets, LinkKey, VisitCounts};
use crate::store::outbox::{VisitBatch, VisitData, Visited};
use crate::store::{StorageFailure, StoreError};

/// Links per flush transaction: a flush of many links is several short
/// transactions, so creates queued meanwhile wait for one chunk at most.
const FLUSH_CHUNK: usize = 64;

/// A failing flush is logged at most this often, with the count since.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Visits {
    /// Writes every tally to the store, a chunk of links per transaction,
    /// as fast as the store takes them (at shutdown).
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
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
    pub(crate) async fn flush_paced(&self, spread: Duration) -> Result<(), StoreError> {
        {
            let _gate = self.gate.write().await;
            let mut staged = lock(&self.staged);
            let mut staged_records = lock(&self.staged_records);
            for shard in self.shards.iter() {
                // As large as before: the same links are likely counted
                // again, and growing anew would rehash on the redirect path.
                let (taken, records) = {
                    let mut s = lock(shard);
                    let size = s.tallies.len();
                    let records = std::mem::take(&mut s.records);
                    let tallies = std::mem::replace(
                        &mut s.tallies,
                        FastMap::with_capacity_and_hasher(size, Default::default()),
                    );
                    (tallies, records)
                };
                for (code, record) in records {
                    staged_records.entry(code).or_default().push(record);
                }
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
        let codes: Vec<LinkKey> = lock(&self.staged).keys().cloned().collect();
        let chunks = codes.len().div_ceil(FLUSH_CHUNK);
        if chunks == 0 {
            return Ok(());
        }
        let pause = spread / chunks as u32;
        let mut order = self.in_row_order(codes).await.into_iter();
        loop {
            let _gate = self.gate.write().await;
            let chunk: Arc<[(LinkKey, VisitCounts)]> = {
                let mut staged = lock(&self.staged);
                let mut chunk = Vec::with_capacity(FLUSH_CHUNK);
                // A concurrent flush may have written some codes already.
                for code in order.by_ref() {
                    chunk.extend(staged.remove_entry(&code));
                    if chunk.len() == FLUSH_CHUNK {
                        break;
                    }
                }
                // And staged some this one did not order: taken as they come.
                if chunk.len() < FLUSH_CHUNK {
                    let rest: Vec<LinkKey> = staged
                        .keys()
                        .take(FLUSH_CHUNK - chunk.len())
                        .cloned()
                        .collect();
                    chunk.extend(
                        rest.into_iter()
                            .filter_map(|code| staged.remove_entry(&code)),
                    );
                }
                chunk.into()
            };
            if chunk.is_empty() {
                break;
            }
            // The chunk's visit records go in its transaction.
            let records: FastMap<LinkKey, Vec<VisitRecord>> = {
                let mut staged_records = lock(&self.staged_records);
                chunk
                    .iter()
                    .filter_map(|(code, _)| staged_records.remove_entry(code))
                    .collect()
            };
            let visited: Arc<[Visited]> = visited_of(records.iter()).into();
            let n = chunk
                .iter()
                .fold(0, |n: u64, (_, c)| n.saturating_add(c.total()));
            if let Err(e) = self.store.record_visits(Arc::clone(&chunk), visited).await {
                // One link the store refuses must not cost the others
                // theirs: its chunk is written again a link at a time. A
                // store that is down, full or busy is not asked 64 times.
                let refused = matches!(e, StoreError::Storage(StorageFailure::Other, _));
                let (written, failed) = if refused && chunk.len() > 1 {
                    self.one_at_a_time(&chunk, &records).await
                } else {
                    (0, chunk.to_vec())
                };
                self.counters.flushed.fetch_add(written, Ordering::Relaxed);
                let mut staged = lock(&self.staged);
                let mut staged_records = lock(&self.staged_records);
                let none_written = failed.len() == chunk.len();
                // Back with the rest, to be tried again.
                for (code, counts) in failed {
                    if let Some(kept) = records.get(&code) {
                        staged_records
                            .entry(code.clone())
                            .or_default()
                            .extend(kept.iter().cloned());
                    }
                    staged.entry(code).or_default().merge(counts);
                }
                self.counters.failed_flushes.fetch_add(1, Ordering::Relaxed);
                if none_written {
                    return Err(e);
                }
                continue;
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

    /// Writes a failed chunk's links one per transaction: the visits
    /// written, and the links the store still refused, each logged with
    /// its code.
    async fn one_at_a_time(
        &self,
        chunk: &[(LinkKey, VisitCounts)],
        records: &FastMap<LinkKey, Vec<VisitRecord>>,
    ) -> (u64, Vec<(LinkKey, VisitCounts)>) {
        let (mut written, mut failed) = (0u64, Vec::new());
        for (key, counts) in chunk {
            let one: Arc<[(LinkKey, VisitCounts)]> = Arc::new([(key.clone(), counts.clone())]);
            let visited: Arc<[Visited]> = visited_of(records.get_key_value(key).into_iter()).into();
            match self.store.record_visits(one, visited).await {
                Ok(()) => written = written.saturating_add(counts.total()),
                Err(e) => {
                    tracing::warn!(code = %key.code, domain = key.domain.0, error = %e,
                        "cannot write this link's visit counts; kept in memory to retry");
                    failed.push((key.clone(), counts.clone()));
                }
            }
        }
        (written, failed)
    }

    /// `codes` in the store's row order. Found off the runtime's threads:
    /// a code the store has not seen lately costs it a decryption (about
    /// 7 µs), and a flush of many new links must not stall redirects.
    async fn in_row_order(&self, codes: Vec<LinkKey>) -> Vec<LinkKey> {
        let store = Arc::clone(&self.store);
        let sorted = tokio::task::spawn_blocking(move || {
            let mut keyed: Vec<(u64, LinkKey)> = codes
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
    pub(crate) fn spawn_flusher(self: &Arc<Self>) -> Flusher {
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
}

/// The `link.visited` events of `records`: for each link, one row of its
/// visits, in the order they came.
fn visited_of<'r>(
    records: impl Iterator<Item = (&'r LinkKey, &'r Vec<VisitRecord>)>,
) -> Vec<Visited> {
    let mut out = Vec::new();
    for (key, list) in records {
        // The shards' records, in the order the visits came.
        let mut list: Vec<&VisitRecord> = list.iter().collect();
        list.sort_by_key(|r| r.seq);
        let Some(first) = list.first() else { continue };
        let mut batch = VisitBatch::default();
        for r in &list {
            let f = &r.facets;
            batch.push(VisitData {
                at: r.at,
                code: key.code.as_str().into(),
                domain: None,
                target: r.target.as_str().into(),
                rule: match f.rule {
                    Facets::NO_RULES | Facets::FELL_THROUGH => None,
                    n => Some(n - 1),
                },
                referrer_host: r.host.as_str().into(),
                country: f.country.as_str().into(),
                city: r.city.as_deref().map(Into::into),
                device: <&str>::from(f.device).into(),
                system: f.os_name().into(),
                browser: f.browser_name().into(),
                bot: r.bot,
            });
        }
        // Only strings and numbers: it cannot fail.
        let Ok(data) = serde_json::to_string(&batch) else {
            continue;
        };
        out.push(Visited {
            key: key.clone(),
            at: first.at,
            data,
            count: u32::try_from(batch.len()).unwrap_or(u32::MAX),
        });
    }
    out
}

/// The background flush task.
pub(crate) struct Flusher {
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
}

impl Flusher {
    /// Stops the task once any flush it is running has finished.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
    }
}
