//! Webhooks and their outbox on SQLite: the registry, the events written
//! beside each change, and claiming and settling them for delivery.

use rusqlite::{Connection, OptionalExtension, Row};

use super::replies::Done;
use crate::domain::{DomainId, Link, LinkKey, ShortCode, Timestamp};
use crate::store::StoreError;
use crate::store::outbox::{
    self, Attempt, AttemptRow, EventKind, EventState, OutboxEvent, Outcome, Webhook, WebhookWrite,
};

/// A count as SQLite's signed 64-bit integer.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

const COLUMNS: &str =
    "id, url, events, domain, enabled, created_at, secret, previous_secret, previous_until";

fn webhook(row: &Row<'_>) -> rusqlite::Result<Webhook> {
    let previous = match (
        row.get::<_, Option<String>>(7)?,
        row.get::<_, Option<i64>>(8)?,
    ) {
        (Some(secret), Some(until)) => Some((secret, Timestamp::from_millis(until))),
        _ => None,
    };
    Ok(Webhook {
        id: row.get(0)?,
        url: row.get(1)?,
        events: outbox::events_of(row.get_ref(2)?.as_str()?),
        domain: row.get::<_, Option<i64>>(3)?.map(DomainId),
        enabled: row.get(4)?,
        created_at: Timestamp::from_millis(row.get(5)?),
        secret: row.get(6)?,
        previous,
    })
}

pub(super) fn list(conn: &Connection) -> rusqlite::Result<Vec<Webhook>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM webhooks ORDER BY id"))?
        .query_map([], webhook)?
        .collect()
}

fn one(conn: &Connection, id: i64) -> rusqlite::Result<Option<Webhook>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = ?1"))?
        .query_row([id], webhook)
        .optional()
}

/// Whether any webhook is listening: a writer asks once a transaction,
/// and builds events only then.
pub(super) fn listening(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM webhooks WHERE enabled = 1)")?
        .query_row([], |r| r.get(0))
}

/// Writes `kind` of `link` to the outbox, once for each enabled webhook
/// that wants it, in the caller's transaction.
pub(super) fn fan_out(
    conn: &Connection,
    kind: EventKind,
    link: &Link,
    now: Timestamp,
) -> rusqlite::Result<()> {
    let host: Option<String> = conn
        .prepare_cached("SELECT host FROM domains WHERE id = ?1")?
        .query_row([link.domain.0], |r| r.get(0))
        .optional()?
        .flatten();
    fan_out_data(
        conn,
        kind,
        (link.domain.0, link.code.as_str()),
        (&outbox::snapshot(link, host.as_deref()), 1),
        now,
    )
}

/// [`fan_out`] of any data holding `count` messages, for the link
/// (domain, code) its order is kept with (`(0, "")` for an event about no
/// one link).
fn fan_out_data(
    conn: &Connection,
    kind: EventKind,
    (domain, code): (i64, &str),
    (data, count): (&str, u32),
    now: Timestamp,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO webhook_events (webhook, kind, domain, code, data, at, due, count) \
         SELECT id, ?1, ?2, ?3, ?4, ?5, ?5, ?6 FROM webhooks WHERE enabled = 1 \
         AND instr(',' || events || ',', ',' || ?1 || ',') > 0 \
         AND (domain IS NULL OR domain = ?2 OR ?3 = '')",
    )?
    .execute((kind.as_str(), domain, code, data, now.millis(), count))?;
    Ok(())
}

/// A link's `link.visited` events from one flush, in its transaction.
pub(super) fn visited(conn: &Connection, v: &outbox::Visited) -> rusqlite::Result<()> {
    fan_out_data(
        conn,
        EventKind::LinkVisited,
        (v.key.domain.0, v.key.code.as_str()),
        (&v.data, v.count),
        v.at,
    )
}

pub(super) fn record_event(
    conn: &Connection,
    kind: EventKind,
    data: &str,
    now: Timestamp,
) -> Result<Done, StoreError> {
    fan_out_data(conn, kind, (0, ""), (data, 1), now)?;
    Ok(Done::Nothing)
}

/// `link.expired` for the live links whose time ran out since the last
/// scan; the scan's end is kept in `meta`, so no link is told of twice.
pub(super) fn scan_expiries(conn: &Connection, now: Timestamp) -> Result<Done, StoreError> {
    let from: Option<i64> = conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'expiries_scanned_until'")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if let Some(from) = from
        && from < now.millis()
        && listening(conn)?
    {
        let expired = conn
            .prepare_cached(&format!(
                "SELECT {} FROM {} WHERE l.expires_at > ?1 AND l.expires_at <= ?2 \
                 AND l.deleted_at IS NULL ORDER BY l.expires_at",
                super::rows::LINK_COLUMNS,
                super::rows::LINK_FROM
            ))?
            .query_map((from, now.millis()), super::rows::link)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for link in &expired {
            fan_out(conn, EventKind::LinkExpired, link, now)?;
        }
    }
    conn.prepare_cached(
        "INSERT INTO meta (name, value) VALUES ('expiries_scanned_until', ?1) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )?
    .execute([now.millis()])?;
    Ok(Done::Nothing)
}

pub(super) fn write(
    conn: &Connection,
    write: WebhookWrite,
    now: Timestamp,
) -> Result<Done, StoreError> {
    let id = match write {
        WebhookWrite::Add {
            url,
            events,
            domain,
            secret,
        } => conn
            .prepare_cached(
                "INSERT INTO webhooks (url, events, domain, enabled, created_at, secret) \
                 VALUES (?1, ?2, ?3, 1, ?4, ?5) RETURNING id",
            )?
            .query_row(
                (
                    url,
                    outbox::events_column(&events),
                    domain.map(|d| d.0),
                    now.millis(),
                    secret,
                ),
                |r| r.get::<_, i64>(0),
            )?,
        WebhookWrite::Set {
            id,
            url,
            events,
            domain,
            enabled,
        } => {
            conn.prepare_cached(
                "UPDATE webhooks SET url = coalesce(?2, url), events = coalesce(?3, events), \
                 domain = CASE WHEN ?4 THEN ?5 ELSE domain END, \
                 enabled = coalesce(?6, enabled) WHERE id = ?1",
            )?
            .execute((
                id,
                url,
                events.map(|e| outbox::events_column(&e)),
                domain.is_some(),
                domain.flatten().map(|d| d.0),
                enabled,
            ))?;
            id
        }
        WebhookWrite::Rotate {
            id,
            secret,
            overlap_until,
        } => {
            conn.prepare_cached(
                "UPDATE webhooks SET previous_secret = secret, previous_until = ?3, \
                 secret = ?2 WHERE id = ?1",
            )?
            .execute((id, secret, overlap_until.millis()))?;
            id
        }
        WebhookWrite::Remove { id } => {
            let removed = conn
                .prepare_cached("DELETE FROM webhooks WHERE id = ?1")?
                .execute([id])?;
            for table in ["webhook_events", "webhook_attempts"] {
                conn.prepare_cached(&format!("DELETE FROM {table} WHERE webhook = ?1"))?
                    .execute([id])?;
            }
            return Ok(Done::Found(removed > 0));
        }
    };
    Ok(Done::Webhook(one(conn, id)?))
}

/// Leases up to `limit` due events, each the oldest not yet delivered of
/// its webhook and link, so that a link's events arrive in order.
pub(super) fn claim(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
    lease_ms: i64,
) -> Result<Done, StoreError> {
    let events = conn
        .prepare_cached(
            "UPDATE webhook_events SET leased_until = ?2 WHERE id IN ( \
               SELECT e.id FROM webhook_events e JOIN webhooks w ON w.id = e.webhook \
               WHERE e.state = 0 AND e.due <= ?1 AND e.leased_until <= ?1 AND w.enabled = 1 \
               AND NOT EXISTS (SELECT 1 FROM webhook_events p WHERE p.webhook = e.webhook \
                 AND p.domain = e.domain AND p.code = e.code AND p.state = 0 AND p.id < e.id) \
               ORDER BY e.due, e.id LIMIT ?3) \
             RETURNING id, webhook, kind, domain, code, data, at, attempts, count, done",
        )?
        .query_map((now.millis(), now.millis() + lease_ms, limit as i64), |r| {
            Ok(OutboxEvent {
                id: r.get(0)?,
                webhook: r.get(1)?,
                kind: r.get(2)?,
                key: LinkKey::new(
                    DomainId(r.get(3)?),
                    ShortCode::from_trusted(r.get_ref(4)?.as_str()?),
                ),
                data: r.get(5)?,
                at: Timestamp::from_millis(r.get(6)?),
                attempts: r.get::<_, i64>(7)?.clamp(0, i64::from(u32::MAX)) as u32,
                count: r.get::<_, i64>(8)?.clamp(1, i64::from(u32::MAX)) as u32,
                done: r.get::<_, i64>(9)?.clamp(0, i64::from(u32::MAX)) as u32,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Done::Events(events))
}

/// Drops the `n` oldest pending `link.visited` events: whole rows, and
/// the oldest visits of the last row reached.
pub(super) fn drop_visited(conn: &Connection, n: u64) -> Result<Done, StoreError> {
    let mut dropped = 0u64;
    let mut oldest = conn.prepare_cached(
        "SELECT id, count - done FROM webhook_events \
         WHERE state = 0 AND kind = 'link.visited' ORDER BY id LIMIT 256",
    )?;
    while dropped < n {
        let rows = oldest
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if rows.is_empty() {
            break;
        }
        for (id, left) in rows {
            let wanted = n - dropped;
            if left <= wanted {
                conn.prepare_cached("DELETE FROM webhook_events WHERE id = ?1")?
                    .execute([id])?;
                dropped += left;
            } else {
                conn.prepare_cached("UPDATE webhook_events SET done = done + ?2 WHERE id = ?1")?
                    .execute((id, clamp(wanted)))?;
                dropped += wanted;
                break;
            }
        }
    }
    Ok(Done::Count(dropped))
}

/// Ends every lease: for a server that starts, when no other can hold one.
pub(super) fn release(conn: &Connection) -> Result<Done, StoreError> {
    conn.prepare_cached("UPDATE webhook_events SET leased_until = 0 WHERE leased_until <> 0")?
        .execute([])?;
    Ok(Done::Nothing)
}

/// Records each attempt, trims each webhook's history, and moves each
/// event on as its outcome says.
pub(super) fn settle(conn: &Connection, outcomes: Vec<Outcome>) -> Result<Done, StoreError> {
    let mut touched = std::collections::BTreeSet::new();
    for Outcome {
        attempt,
        settled,
        done,
    } in outcomes
    {
        conn.prepare_cached(
            "UPDATE webhook_events SET state = ?2, attempts = attempts + ?5, \
             due = coalesce(?3, due), done = max(done, ?4), leased_until = 0 WHERE id = ?1",
        )?
        .execute((
            attempt.event,
            settled.state(),
            settled.due().map(Timestamp::millis),
            done,
            i64::from(settled.is_an_attempt()),
        ))?;
        if settled.disables() {
            conn.prepare_cached("UPDATE webhooks SET enabled = 0 WHERE id = ?1")?
                .execute([attempt.webhook])?;
        }
        if !settled.is_recorded() {
            continue;
        }
        touched.insert(attempt.webhook);
        conn.prepare_cached(
            "INSERT INTO webhook_attempts (webhook, event, at, status, duration_ms, error) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute((
            attempt.webhook,
            attempt.event,
            attempt.at.millis(),
            attempt.status,
            clamp(attempt.duration_ms),
            attempt.error.as_deref(),
        ))?;
    }
    // Once a batch for each webhook, not once an attempt.
    for webhook in touched {
        trim(conn, webhook)?;
    }
    Ok(Done::Nothing)
}

/// Keeps a webhook's last [`outbox::HISTORY`] attempts, and the delivered
/// events that some attempt kept still names (for a retry by hand).
fn trim(conn: &Connection, webhook: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM webhook_attempts WHERE webhook = ?1 AND id <= \
         (SELECT id FROM webhook_attempts WHERE webhook = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
    )?
    .execute((webhook, outbox::HISTORY))?;
    conn.prepare_cached(
        "DELETE FROM webhook_events WHERE webhook = ?1 AND state = 1 AND NOT EXISTS \
         (SELECT 1 FROM webhook_attempts a WHERE a.event = webhook_events.id)",
    )?
    .execute([webhook])?;
    Ok(())
}

/// Makes an event due now, whatever became of it; false when the webhook
/// has no such event.
pub(super) fn retry(
    conn: &Connection,
    webhook: i64,
    event: i64,
    now: Timestamp,
) -> Result<Done, StoreError> {
    let found = conn
        .prepare_cached(
            "UPDATE webhook_events SET state = 0, due = ?3, leased_until = 0, \
             done = CASE WHEN state = 1 THEN 0 ELSE done END WHERE id = ?2 AND webhook = ?1",
        )?
        .execute((webhook, event, now.millis()))?;
    Ok(Done::Found(found > 0))
}

pub(super) fn attempts(conn: &Connection, webhook: i64) -> rusqlite::Result<Vec<AttemptRow>> {
    conn.prepare_cached(
        "SELECT a.id, a.webhook, a.event, a.at, a.status, a.duration_ms, a.error, \
         coalesce(e.kind, ''), coalesce(e.state, 1) FROM webhook_attempts a \
         LEFT JOIN webhook_events e ON e.id = a.event WHERE a.webhook = ?1 \
         ORDER BY a.id DESC LIMIT ?2",
    )?
    .query_map((webhook, outbox::HISTORY), |r| {
        Ok(AttemptRow {
            id: r.get(0)?,
            attempt: Attempt {
                webhook: r.get(1)?,
                event: r.get(2)?,
                at: Timestamp::from_millis(r.get(3)?),
                status: r
                    .get::<_, Option<i64>>(4)?
                    .and_then(|s| u16::try_from(s).ok()),
                duration_ms: r.get::<_, i64>(5)?.max(0) as u64,
                error: r.get(6)?,
            },
            kind: r.get(7)?,
            state: EventState::of(r.get(8)?),
        })
    })?
    .collect()
}

/// Messages not yet delivered, and the time of the oldest event.
pub(super) fn pending(conn: &Connection) -> rusqlite::Result<(u64, Option<Timestamp>)> {
    conn.prepare_cached(
        "SELECT coalesce(sum(count - done), 0), min(at) FROM webhook_events WHERE state = 0",
    )?
    .query_row([], |r| {
        Ok((
            r.get::<_, i64>(0)?.max(0) as u64,
            r.get::<_, Option<i64>>(1)?.map(Timestamp::from_millis),
        ))
    })
}
