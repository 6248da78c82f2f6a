//! Group commit on PostgreSQL: one task takes whatever creates are queued
//! (up to `batch_max`), inserts them with one multi-row INSERT in one
//! transaction, and answers each once the transaction is committed (with
//! `synchronous_commit` as the server is configured). A code that is taken
//! (by another instance, or by an alias) is retried with a fresh code in
//! the same transaction; an alias that is taken fails alone.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::replica::Positions;
use super::{PostgresSettings, pool_error, store_error};
use crate::domain::{CodeGenerator, Link, ShortCode, Timestamp};
use crate::store::outbox::EventKind;
use crate::store::queue::{MAX_CODE_ATTEMPTS, Reply, WriteCounters, WriteCounts, WriteQueue};
use crate::store::{ExtraColumns, NewLink, StoreError};

const INSERT: &str = "INSERT INTO links (code, target, created_at, expires_at, owner, max_visits, \
     domain, password, rules, expired_url, title) SELECT * FROM unnest($1::text[], $2::text[], \
     $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[], $8::text[], $9::text[], \
     $10::text[], $11::text[]) ON CONFLICT (code, domain) DO NOTHING RETURNING code, domain, id";

enum Message {
    Create { new: NewLink, reply: Reply<Link> },
    Shutdown(oneshot::Sender<()>),
}

/// The `/stats` view of the writer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WriterCounts {
    pub group_commit: bool,
    pub batch_max: usize,
    pub queue_capacity: usize,
    #[serde(flatten)]
    pub writes: WriteCounts,
}

pub(super) struct Writer {
    queue: WriteQueue<Message>,
    pool: Pool,
    /// Live links as this instance knows them (mod.rs, `LiveCount`).
    pub(super) live: Arc<super::LiveCount>,
    batch_max: usize,
    codes: CodeGenerator,
    positions: Arc<Positions>,
}

impl Writer {
    pub(super) fn start(
        pool: Pool,
        settings: &PostgresSettings,
        codes: CodeGenerator,
        live: Arc<super::LiveCount>,
        positions: Arc<Positions>,
    ) -> Self {
        let (queue, rx) = WriteQueue::new(settings.write_queue);
        let batch_max = settings.batch_max.max(1);
        tokio::spawn(run(
            pool.clone(),
            rx,
            batch_max,
            codes,
            Arc::clone(queue.counters()),
            Arc::clone(&live),
            Arc::clone(&positions),
        ));
        Self {
            queue,
            pool,
            live,
            batch_max,
            codes,
            positions,
        }
    }

    pub(super) fn generator(&self) -> CodeGenerator {
        self.codes
    }

    pub(super) async fn create(&self, new: NewLink) -> Result<Link, StoreError> {
        if self.batch_max == 1 {
            // Without group commit: each create is a transaction of its own
            // on the pool, concurrent with the others (PostgreSQL still
            // shares WAL flushes between concurrent commits).
            let stored = insert_batch(
                &self.pool,
                &[&new],
                &self.codes,
                self.queue.counters(),
                &self.positions,
            )
            .await?;
            let row = stored
                .into_iter()
                .next()
                .unwrap_or(Err(StoreError::Task("a create was not answered".into())));
            if row.is_ok() {
                self.live.add(1);
                self.queue.counters().committed(1);
            }
            return row;
        }
        self.queue.ask(|reply| Message::Create { new, reply }).await
    }

    pub(super) fn counts(&self) -> WriterCounts {
        WriterCounts {
            group_commit: self.batch_max > 1,
            batch_max: self.batch_max,
            queue_capacity: self.queue.capacity(),
            writes: self.queue.counters().counts(),
        }
    }

    /// Lets the writer finish what is queued, then stops it.
    pub(super) async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Message::Shutdown(done)).await {
            let _ = wait.await;
        }
    }
}

async fn run(
    pool: Pool,
    mut rx: mpsc::Receiver<Message>,
    batch_max: usize,
    codes: CodeGenerator,
    stats: Arc<WriteCounters>,
    live: Arc<super::LiveCount>,
    positions: Arc<Positions>,
) {
    let mut batch: Vec<(NewLink, Reply<Link>)> = Vec::with_capacity(batch_max);
    while let Some(first) = rx.recv().await {
        let mut shutdown = None;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Message::Create { new, reply } => batch.push((new, reply)),
                Message::Shutdown(done) => {
                    shutdown = Some(done);
                    break;
                }
            }
            if batch.len() < batch_max {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let links: Vec<&NewLink> = batch.iter().map(|(new, _)| new).collect();
            let answers = insert_batch(&pool, &links, &codes, &stats, &positions).await;
            match answers {
                Ok(rows) => {
                    let n = rows.iter().filter(|r| r.is_ok()).count() as u64;
                    live.add(n as i64);
                    stats.committed(n);
                    for ((_, reply), row) in batch.drain(..).zip(rows) {
                        let _ = reply.send(row);
                    }
                }
                Err(e) => {
                    // Rolled back as a whole: nobody in the batch is told
                    // their link is stored.
                    stats.failed();
                    tracing::error!(error = %e, rows = batch.len(), "PostgreSQL write batch failed");
                    let (kind, why) = match &e {
                        StoreError::Storage(kind, why) => (*kind, why.clone()),
                        other => (crate::store::StorageFailure::Other, other.to_string()),
                    };
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(StoreError::Storage(kind, why.clone())));
                    }
                }
            }
        }
        if let Some(done) = shutdown {
            rx.close();
            while let Ok(Message::Create { reply, .. }) = rx.try_recv() {
                let _ = reply.send(Err(StoreError::Closed));
            }
            let _ = done.send(());
            return;
        }
    }
}

/// One transaction for the whole batch; each row's own outcome.
async fn insert_batch(
    pool: &Pool,
    batch: &[&NewLink],
    codes: &CodeGenerator,
    stats: &WriteCounters,
    positions: &Positions,
) -> Result<Vec<Result<Link, StoreError>>, StoreError> {
    let now = Timestamp::now();
    let mut client = pool.get().await.map_err(pool_error)?;
    let tx = client.transaction().await.map_err(store_error)?;
    let insert = tx.prepare_cached(INSERT).await.map_err(store_error)?;
    let mut out: Vec<Option<Result<Link, StoreError>>> = (0..batch.len()).map(|_| None).collect();
    let mut pending: Vec<usize> = (0..batch.len()).collect();
    let mut attempt = 0;
    let mut sequence = 0u64;
    while !pending.is_empty() {
        attempt += 1;
        let chosen: Vec<(usize, ShortCode)> = pending
            .iter()
            .map(|&i| {
                let code = batch[i].code.clone().unwrap_or_else(|| {
                    sequence += 1;
                    codes.generate(sequence)
                });
                (i, code)
            })
            .collect();
        let column = |f: &dyn Fn(&NewLink) -> Option<i64>| -> Vec<Option<i64>> {
            chosen.iter().map(|(i, _)| f(batch[*i])).collect()
        };
        let code_col: Vec<&str> = chosen.iter().map(|(_, c)| c.as_str()).collect();
        let target_col: Vec<&str> = chosen
            .iter()
            .map(|(i, _)| batch[*i].target.as_str())
            .collect();
        let created_col: Vec<i64> = vec![now.millis(); chosen.len()];
        let expires_col = column(&|n| n.expires_at.map(Timestamp::millis));
        let owner_col = column(&|n| n.owner.as_ref().map(|o| o.id.0));
        let max_col = column(&|n| n.max_visits.map(|m| i64::try_from(m).unwrap_or(i64::MAX)));
        let domain_col: Vec<i64> = chosen.iter().map(|(i, _)| batch[*i].domain.0).collect();
        let extras: Vec<ExtraColumns> = chosen
            .iter()
            .map(|(i, _)| ExtraColumns::of(batch[*i].extra.as_deref()))
            .collect();
        let password_col: Vec<Option<&str>> =
            extras.iter().map(|e| e.password.as_deref()).collect();
        let rules_col: Vec<Option<&str>> = extras.iter().map(|e| e.rules.as_deref()).collect();
        let expired_col: Vec<Option<&str>> =
            extras.iter().map(|e| e.expired_url.as_deref()).collect();
        let title_col: Vec<Option<&str>> = chosen
            .iter()
            .map(|(i, _)| batch[*i].labels.title.as_deref())
            .collect();
        let stored = tx
            .query(
                &insert,
                &[
                    &code_col,
                    &target_col,
                    &created_col,
                    &expires_col,
                    &owner_col,
                    &max_col,
                    &domain_col,
                    &password_col,
                    &rules_col,
                    &expired_col,
                    &title_col,
                ],
            )
            .await
            .map_err(store_error)?;
        // Several requests of one batch may ask for the same alias: the
        // first gets it.
        let mut won: HashMap<(String, i64), usize> = HashMap::new();
        let mut ids: HashMap<(String, i64), i64> = HashMap::new();
        for row in stored {
            let key: (String, i64) = (row.get(0), row.get(1));
            ids.insert(key.clone(), row.get(2));
            if let Some((i, _)) = chosen.iter().find(|(i, c)| {
                c.as_str() == key.0
                    && batch[*i].domain.0 == key.1
                    && out[*i].is_none()
                    && !won.contains_key(&key)
            }) {
                won.insert(key, *i);
            }
        }
        let mut retry = Vec::new();
        for (i, code) in chosen {
            let new = batch[i];
            let key = (code.as_str().to_owned(), new.domain.0);
            if won.get(&key) == Some(&i) {
                let mut labels = new.labels.clone();
                if let Some(&id) = ids.get(&key)
                    && !labels.tags.is_empty()
                {
                    labels.tags = super::ops::set_tags(&tx, id, &labels.tags).await?;
                }
                out[i] = Some(Ok(Link {
                    domain: new.domain,
                    code,
                    target: new.target.clone(),
                    created_at: now,
                    expires_at: new.expires_at,
                    owner: new.owner.clone(),
                    max_visits: new.max_visits,
                    visits: 0,
                    imported_visits: 0,
                    extra: new.extra.clone(),
                    labels,
                }));
            } else if new.code.is_some() {
                out[i] = Some(Err(StoreError::CodeTaken(code.to_string())));
            } else if attempt >= MAX_CODE_ATTEMPTS {
                out[i] = Some(Err(StoreError::CodeSpaceExhausted(MAX_CODE_ATTEMPTS)));
            } else {
                stats.collided(1);
                retry.push(i);
            }
        }
        pending = retry;
    }
    if super::webhooks::listening(&tx).await? {
        let links: Vec<&Link> = out.iter().flatten().flatten().collect();
        super::webhooks::fan_out(&tx, EventKind::LinkCreated, &links, now).await?;
    }
    let stored = out.iter().filter(|r| matches!(r, Some(Ok(_)))).count() as i64;
    super::ops::count_live(&tx, stored).await?;
    tx.commit().await.map_err(store_error)?;
    positions
        .after_write(
            &client,
            out.iter().filter_map(|r| match r {
                Some(Ok(link)) => Some(link.key()),
                _ => None,
            }),
        )
        .await;
    Ok(out
        .into_iter()
        .map(|r| r.unwrap_or(Err(StoreError::Task("a create was not answered".into()))))
        .collect())
}
