//! Webhooks and their outbox on PostgreSQL, as on SQLite (`sqlite/webhooks.rs`),
//! with one difference: several instances share the outbox, so an event is
//! claimed with `FOR UPDATE SKIP LOCKED` and a lease.

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::store_error;
use crate::domain::{DomainId, Link, LinkKey, ShortCode, Timestamp};
use crate::store::StoreError;
use crate::store::outbox::{
    self, Attempt, AttemptRow, EventKind, EventState, OutboxEvent, Outcome, Webhook, WebhookWrite,
};

const COLUMNS: &str =
    "id, url, events, domain, enabled, created_at, secret, previous_secret, previous_until";

fn webhook(row: &Row) -> Webhook {
    let previous = match (
        row.get::<_, Option<String>>(7),
        row.get::<_, Option<i64>>(8),
    ) {
        (Some(secret), Some(until)) => Some((secret, Timestamp::from_millis(until))),
        _ => None,
    };
    Webhook {
        id: row.get(0),
        url: row.get(1),
        events: outbox::events_of(row.get(2)),
        domain: row.get::<_, Option<i64>>(3).map(DomainId),
        enabled: row.get(4),
        created_at: Timestamp::from_millis(row.get(5)),
        secret: row.get(6),
        previous,
    }
}

async fn prepared(
    c: &impl GenericClient,
    sql: &str,
) -> Result<tokio_postgres::Statement, StoreError> {
    c.prepare_cached(sql).await.map_err(store_error)
}

pub(super) async fn list(c: &Client) -> Result<Vec<Webhook>, StoreError> {
    let stmt = prepared(c, &format!("SELECT {COLUMNS} FROM webhooks ORDER BY id")).await?;
    let rows = c.query(&stmt, &[]).await.map_err(store_error)?;
    Ok(rows.iter().map(webhook).collect())
}

async fn one(c: &impl GenericClient, id: i64) -> Result<Option<Webhook>, StoreError> {
    let stmt = prepared(c, &format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1")).await?;
    let row = c.query_opt(&stmt, &[&id]).await.map_err(store_error)?;
    Ok(row.as_ref().map(webhook))
}

/// Writes `kind` of each of `links` to the outbox, once for each enabled
/// webhook that wants it, in the caller's transaction.
pub(super) async fn fan_out(
    c: &impl GenericClient,
    kind: EventKind,
    links: &[&Link],
    now: Timestamp,
) -> Result<(), StoreError> {
    if links.is_empty() {
        return Ok(());
    }
    let domains: Vec<i64> = links.iter().map(|l| l.domain.0).collect();
    let codes: Vec<&str> = links.iter().map(|l| l.code.as_str()).collect();
    let stmt = prepared(c, "SELECT id, host FROM domains WHERE id = ANY($1)").await?;
    let hosts: std::collections::HashMap<i64, Option<String>> = c
        .query(&stmt, &[&domains])
        .await
        .map_err(store_error)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let data: Vec<String> = links
        .iter()
        .map(|l| outbox::snapshot(l, hosts.get(&l.domain.0).and_then(|h| h.as_deref())))
        .collect();
    let counts = vec![1; data.len()];
    fan_out_data(c, kind, &domains, &codes, (&data, &counts), now).await
}

/// [`fan_out`] of any data, each holding its count of messages, for the
/// link (domain, code) its order is kept with (`(0, "")` for an event
/// about no one link). One statement for the whole batch; rows go in in
/// the given order, which is the order their events are sent in.
async fn fan_out_data(
    c: &impl GenericClient,
    kind: EventKind,
    domains: &[i64],
    codes: &[&str],
    (data, counts): (&[String], &[i32]),
    now: Timestamp,
) -> Result<(), StoreError> {
    let stmt = prepared(
        c,
        "INSERT INTO webhook_events (webhook, kind, domain, code, data, at, due, count) \
         SELECT w.id, $1, l.domain, l.code, l.data, $5, $5, l.count \
         FROM unnest($2::BIGINT[], $3::TEXT[], $4::TEXT[], $6::INTEGER[]) WITH ORDINALITY \
           AS l(domain, code, data, count, n) \
         JOIN webhooks w ON w.enabled AND $1 = ANY(string_to_array(w.events, ',')) \
           AND (w.domain IS NULL OR w.domain = l.domain OR l.code = '') \
         ORDER BY l.n, w.id",
    )
    .await?;
    c.execute(
        &stmt,
        &[
            &kind.as_str(),
            &domains,
            &codes,
            &data,
            &now.millis(),
            &counts,
        ],
    )
    .await
    .map_err(store_error)?;
    Ok(())
}

/// Drops the `n` oldest pending `link.visited` events (skipping any
/// another instance is sending): whole rows, and the oldest visits of the
/// last row reached.
pub(super) async fn drop_visited(c: &mut Client, n: u64) -> Result<u64, StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let oldest = prepared(
        &tx,
        "SELECT id, count - done FROM webhook_events \
         WHERE state = 0 AND kind = 'link.visited' ORDER BY id LIMIT 256 \
         FOR UPDATE SKIP LOCKED",
    )
    .await?;
    let delete = prepared(&tx, "DELETE FROM webhook_events WHERE id = ANY($1)").await?;
    let skip = prepared(
        &tx,
        "UPDATE webhook_events SET done = done + $2 WHERE id = $1",
    )
    .await?;
    let mut dropped = 0u64;
    'rows: while dropped < n {
        let rows = tx.query(&oldest, &[]).await.map_err(store_error)?;
        if rows.is_empty() {
            break;
        }
        let mut whole = Vec::new();
        for row in &rows {
            let (id, left): (i64, i32) = (row.get(0), row.get(1));
            let left = u64::try_from(left).unwrap_or(0);
            let wanted = n - dropped;
            if left <= wanted {
                whole.push(id);
                dropped += left;
            } else {
                let part = i32::try_from(wanted).unwrap_or(i32::MAX);
                tx.execute(&skip, &[&id, &part])
                    .await
                    .map_err(store_error)?;
                dropped += wanted;
                tx.execute(&delete, &[&whole]).await.map_err(store_error)?;
                break 'rows;
            }
        }
        tx.execute(&delete, &[&whole]).await.map_err(store_error)?;
    }
    tx.commit().await.map_err(store_error)?;
    Ok(dropped)
}

/// Each link's `link.visited` events from one flush, in its transaction.
pub(super) async fn visited(
    c: &impl GenericClient,
    visited: &[&outbox::Visited],
) -> Result<(), StoreError> {
    // One statement: each visit's own time is in its data.
    let domains: Vec<i64> = visited.iter().map(|v| v.key.domain.0).collect();
    let codes: Vec<&str> = visited.iter().map(|v| v.key.code.as_str()).collect();
    let data: Vec<String> = visited.iter().map(|v| v.data.clone()).collect();
    let counts: Vec<i32> = visited
        .iter()
        .map(|v| i32::try_from(v.count).unwrap_or(i32::MAX))
        .collect();
    let at = visited
        .iter()
        .map(|v| v.at)
        .min()
        .unwrap_or_else(Timestamp::now);
    fan_out_data(
        c,
        EventKind::LinkVisited,
        &domains,
        &codes,
        (&data, &counts),
        at,
    )
    .await
}

pub(super) async fn record_event(
    c: &Client,
    kind: EventKind,
    data: String,
) -> Result<(), StoreError> {
    fan_out_data(c, kind, &[0], &[""], (&[data], &[1]), Timestamp::now()).await
}

/// Whether any webhook is listening: writers build events only then.
pub(super) async fn listening(c: &impl GenericClient) -> Result<bool, StoreError> {
    let stmt = prepared(c, "SELECT EXISTS (SELECT 1 FROM webhooks WHERE enabled)").await?;
    let row = c.query_one(&stmt, &[]).await.map_err(store_error)?;
    Ok(row.get(0))
}

pub(super) async fn write(
    c: &mut Client,
    write: WebhookWrite,
) -> Result<Option<Webhook>, StoreError> {
    let id: i64 = match write {
        WebhookWrite::Add {
            url,
            events,
            domain,
            secret,
        } => {
            let stmt = prepared(
                &*c,
                "INSERT INTO webhooks (url, events, domain, enabled, created_at, secret) \
                 VALUES ($1, $2, $3, TRUE, $4, $5) RETURNING id",
            )
            .await?;
            c.query_one(
                &stmt,
                &[
                    &url,
                    &outbox::events_column(&events),
                    &domain.map(|d| d.0),
                    &Timestamp::now().millis(),
                    &secret,
                ],
            )
            .await
            .map_err(store_error)?
            .get(0)
        }
        WebhookWrite::Set {
            id,
            url,
            events,
            domain,
            enabled,
        } => {
            let stmt = prepared(
                &*c,
                "UPDATE webhooks SET url = coalesce($2, url), events = coalesce($3, events), \
                 domain = CASE WHEN $4 THEN $5 ELSE domain END, \
                 enabled = coalesce($6, enabled) WHERE id = $1",
            )
            .await?;
            c.execute(
                &stmt,
                &[
                    &id,
                    &url,
                    &events.map(|e| outbox::events_column(&e)),
                    &domain.is_some(),
                    &domain.flatten().map(|d| d.0),
                    &enabled,
                ],
            )
            .await
            .map_err(store_error)?;
            id
        }
        WebhookWrite::Rotate {
            id,
            secret,
            overlap_until,
        } => {
            let stmt = prepared(
                &*c,
                "UPDATE webhooks SET previous_secret = secret, previous_until = $3, \
                 secret = $2 WHERE id = $1",
            )
            .await?;
            c.execute(&stmt, &[&id, &secret, &overlap_until.millis()])
                .await
                .map_err(store_error)?;
            id
        }
        WebhookWrite::Remove { id } => {
            remove(c, id).await?;
            return Ok(None);
        }
    };
    one(&*c, id).await
}

pub(super) async fn remove(c: &mut Client, id: i64) -> Result<bool, StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let stmt = prepared(&tx, "DELETE FROM webhooks WHERE id = $1").await?;
    let removed = tx.execute(&stmt, &[&id]).await.map_err(store_error)?;
    for table in ["webhook_events", "webhook_attempts"] {
        let stmt = prepared(&tx, &format!("DELETE FROM {table} WHERE webhook = $1")).await?;
        tx.execute(&stmt, &[&id]).await.map_err(store_error)?;
    }
    tx.commit().await.map_err(store_error)?;
    Ok(removed > 0)
}

/// Leases up to `limit` due events, each the oldest not yet delivered of
/// its webhook and link; rows another instance holds are skipped.
pub(super) async fn claim(
    c: &Client,
    limit: usize,
    lease_ms: i64,
) -> Result<Vec<OutboxEvent>, StoreError> {
    let now = Timestamp::now().millis();
    let stmt = prepared(
        c,
        "UPDATE webhook_events SET leased_until = $2 WHERE id IN ( \
           SELECT e.id FROM webhook_events e JOIN webhooks w ON w.id = e.webhook \
           WHERE e.state = 0 AND e.due <= $1 AND e.leased_until <= $1 AND w.enabled \
           AND NOT EXISTS (SELECT 1 FROM webhook_events p WHERE p.webhook = e.webhook \
             AND p.domain = e.domain AND p.code = e.code AND p.state = 0 AND p.id < e.id) \
           ORDER BY e.due, e.id LIMIT $3 FOR UPDATE OF e SKIP LOCKED) \
         AND leased_until <= $1 \
         RETURNING id, webhook, kind, domain, code, data, at, attempts, count, done",
    )
    .await?;
    let rows = c
        .query(&stmt, &[&now, &(now + lease_ms), &(limit as i64)])
        .await
        .map_err(store_error)?;
    let mut events: Vec<OutboxEvent> = rows
        .iter()
        .map(|r| OutboxEvent {
            id: r.get(0),
            webhook: r.get(1),
            kind: r.get(2),
            key: LinkKey::new(DomainId(r.get(3)), ShortCode::from_trusted(r.get(4))),
            data: r.get(5),
            at: Timestamp::from_millis(r.get(6)),
            attempts: r.get::<_, i32>(7).max(0) as u32,
            count: r.get::<_, i32>(8).max(1) as u32,
            done: r.get::<_, i32>(9).max(0) as u32,
        })
        .collect();
    events.sort_by_key(|e| e.id);
    Ok(events)
}

pub(super) async fn settle(c: &mut Client, outcomes: Vec<Outcome>) -> Result<(), StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let moved = prepared(
        &tx,
        "UPDATE webhook_events SET state = $2, attempts = attempts + $5, \
         due = coalesce($3, due), done = greatest(done, $4), leased_until = 0 WHERE id = $1",
    )
    .await?;
    let disable = prepared(&tx, "UPDATE webhooks SET enabled = FALSE WHERE id = $1").await?;
    let record = prepared(
        &tx,
        "INSERT INTO webhook_attempts (webhook, event, at, status, duration_ms, error) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .await?;
    let trim_attempts = prepared(
        &tx,
        "DELETE FROM webhook_attempts WHERE webhook = $1 AND id <= (SELECT id FROM \
         webhook_attempts WHERE webhook = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
    )
    .await?;
    let trim_events = prepared(
        &tx,
        "DELETE FROM webhook_events e WHERE e.webhook = $1 AND e.state = 1 AND NOT EXISTS \
         (SELECT 1 FROM webhook_attempts a WHERE a.event = e.id)",
    )
    .await?;
    let mut touched = std::collections::BTreeSet::new();
    for Outcome {
        attempt,
        settled,
        done,
    } in outcomes
    {
        let done = i32::try_from(done).unwrap_or(i32::MAX);
        let due = settled.due().map(Timestamp::millis);
        let counted = i32::from(settled.is_an_attempt());
        tx.execute(
            &moved,
            &[&attempt.event, &settled.state(), &due, &done, &counted],
        )
        .await
        .map_err(store_error)?;
        if settled.disables() {
            tx.execute(&disable, &[&attempt.webhook])
                .await
                .map_err(store_error)?;
        }
        if !settled.is_recorded() {
            continue;
        }
        touched.insert(attempt.webhook);
        tx.execute(
            &record,
            &[
                &attempt.webhook,
                &attempt.event,
                &attempt.at.millis(),
                &attempt.status.map(i32::from),
                &i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX),
                &attempt.error,
            ],
        )
        .await
        .map_err(store_error)?;
    }
    // Once a batch for each webhook, not once an attempt.
    for webhook in touched {
        tx.execute(&trim_attempts, &[&webhook, &outbox::HISTORY])
            .await
            .map_err(store_error)?;
        tx.execute(&trim_events, &[&webhook])
            .await
            .map_err(store_error)?;
    }
    tx.commit().await.map_err(store_error)
}

pub(super) async fn retry(c: &Client, webhook: i64, event: i64) -> Result<bool, StoreError> {
    let stmt = prepared(
        c,
        "UPDATE webhook_events SET state = 0, due = $3, leased_until = 0, \
         done = CASE WHEN state = 1 THEN 0 ELSE done END WHERE id = $2 AND webhook = $1",
    )
    .await?;
    let found = c
        .execute(&stmt, &[&webhook, &event, &Timestamp::now().millis()])
        .await
        .map_err(store_error)?;
    Ok(found > 0)
}

pub(super) async fn attempts(c: &Client, webhook: i64) -> Result<Vec<AttemptRow>, StoreError> {
    let stmt = prepared(
        c,
        "SELECT a.id, a.webhook, a.event, a.at, a.status, a.duration_ms, a.error, \
         coalesce(e.kind, ''), coalesce(e.state, 1::SMALLINT) FROM webhook_attempts a \
         LEFT JOIN webhook_events e ON e.id = a.event WHERE a.webhook = $1 \
         ORDER BY a.id DESC LIMIT $2",
    )
    .await?;
    let rows = c
        .query(&stmt, &[&webhook, &outbox::HISTORY])
        .await
        .map_err(store_error)?;
    Ok(rows
        .iter()
        .map(|r| AttemptRow {
            id: r.get(0),
            attempt: Attempt {
                webhook: r.get(1),
                event: r.get(2),
                at: Timestamp::from_millis(r.get(3)),
                status: r
                    .get::<_, Option<i32>>(4)
                    .and_then(|s| u16::try_from(s).ok()),
                duration_ms: r.get::<_, i64>(5).max(0) as u64,
                error: r.get(6),
            },
            kind: r.get(7),
            state: EventState::of(i64::from(r.get::<_, i16>(8))),
        })
        .collect())
}

pub(super) async fn pending(c: &Client) -> Result<(u64, Option<Timestamp>), StoreError> {
    let stmt = prepared(
        c,
        "SELECT coalesce(sum(count - done), 0)::BIGINT, min(at) FROM webhook_events \
         WHERE state = 0",
    )
    .await?;
    let row = c.query_one(&stmt, &[]).await.map_err(store_error)?;
    Ok((
        row.get::<_, i64>(0).max(0) as u64,
        row.get::<_, Option<i64>>(1).map(Timestamp::from_millis),
    ))
}
