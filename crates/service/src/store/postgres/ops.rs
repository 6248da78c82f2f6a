//! Every read and every write but the grouped creates, each on a pooled
//! connection with prepared statements; a write that changes more than one
//! row is one transaction.

use std::sync::Arc;

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::{is_unique_violation, store_error};
use crate::domain::label::fold_tag;
use crate::domain::user::fold_name;
use crate::domain::visit::{OTHER_HOST, REFERRER_HOSTS_PER_DAY, VALUES_PER_DAY};
use crate::domain::{
    CodeGenerator, Domain, DomainId, DomainRedirects, Host, HourCount, KeyId, Labels, Link,
    LinkKey, LinkRules, Owner, Resolved, Role, ShortCode, TargetUrl, Timestamp, UserId,
    VisitCounts,
};
use crate::store::outbox::EventKind;
use crate::store::{
    ApiKey, Existing, ExtraColumns, FederatedUser, ImportRow, LinkPatch, LinkTotals, ListPage,
    ListQuery, LoginFlow, LoginFlowWrite, NewUser, RankQuery, Record, Session, SessionWrite,
    StorageFailure, StoreError, TagCount, User, UserChange, UserWrite, VisitScope,
};

const LINK_COLUMNS: &str = "l.code, l.target, l.created_at, l.expires_at, l.owner, u.name, \
     l.max_visits, l.visits, l.domain, l.password, l.rules, l.expired_url, l.title, l.tags, \
     l.imported_visits";
const LINK_FROM: &str = "links l LEFT JOIN users u ON u.id = l.owner";
/// From `keys k JOIN users u ON u.id = k.user_id`: a key works on its own
/// domain, else on its user's.
const KEY_COLUMNS: &str = "k.id, k.name, k.hash, k.created_at, k.last_used_at, k.revoked_at, \
     coalesce(k.domain, u.domain), k.user_id, u.name, u.role, \
     (u.disabled_at IS NOT NULL OR u.suspended_at IS NOT NULL)";
/// From `users u`.
const USER_COLUMNS: &str = "u.id, u.name, u.email, u.role, u.domain, u.password, \
     u.must_change, u.disabled_at IS NOT NULL, u.created_at, u.suspended_at IS NOT NULL";
const DOMAIN_COLUMNS: &str = "id, host, root_redirect, not_found_redirect, expired_redirect";

/// A count as PostgreSQL's BIGINT.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn count(row: &Row, i: usize) -> u64 {
    row.get::<_, i64>(i).max(0) as u64
}

fn link_at(row: &Row, at: usize) -> Result<Link, StoreError> {
    let owner = match (
        row.get::<_, Option<i64>>(at + 4),
        row.get::<_, Option<String>>(at + 5),
    ) {
        (Some(id), Some(name)) => Some(Owner {
            id: UserId(id),
            name,
        }),
        _ => None,
    };
    Ok(Link {
        domain: DomainId(row.get(at + 8)),
        code: ShortCode::from_trusted(row.get(at)),
        target: TargetUrl::from_trusted(row.get(at + 1)),
        created_at: Timestamp::from_millis(row.get(at + 2)),
        expires_at: row
            .get::<_, Option<i64>>(at + 3)
            .map(Timestamp::from_millis),
        owner,
        max_visits: row.get::<_, Option<i64>>(at + 6).map(|n| n.max(0) as u64),
        visits: count(row, at + 7),
        imported_visits: count(row, at + 14),
        extra: extra_at(row, at + 9)?,
        labels: Labels {
            title: row.get(at + 12),
            tags: tags_of(row.get(at + 13)),
        },
    })
}

/// A link's tags from their `|`-joined column (a tag has no `|`).
fn tags_of(joined: Option<&str>) -> Vec<String> {
    joined
        .map(|t| t.split('|').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Gives link `id` exactly `tags`, in their order: the tags as shown. A
/// tag new to the store keeps the form it is first written in. The upsert
/// returns the row of a tag that exists as well, whoever made it meanwhile.
pub(super) async fn set_tags(
    c: &impl GenericClient,
    id: i64,
    tags: &[String],
) -> Result<Vec<String>, StoreError> {
    // The link's tags as its row names them go first.
    execute(
        c,
        "DELETE FROM link_tags WHERE link = $1 AND tag IN (SELECT t.id FROM tags t \
         WHERE t.shown = ANY(string_to_array((SELECT tags FROM links WHERE id = $1), '|')))",
        &[&id],
    )
    .await?;
    if tags.is_empty() {
        execute(c, "UPDATE links SET tags = NULL WHERE id = $1", &[&id]).await?;
        return Ok(Vec::new());
    }
    let folded: Vec<String> = tags.iter().map(|t| fold_tag(t)).collect();
    let stmt = c
        .prepare_cached(
            "WITH given AS (SELECT * FROM unnest($2::text[], $3::text[]) \
               WITH ORDINALITY AS g(folded, shown, pos)), \
             made AS (INSERT INTO tags (folded, shown) SELECT folded, shown FROM given \
               ON CONFLICT (folded) DO UPDATE SET folded = excluded.folded \
               RETURNING id, folded, shown), \
             linked AS (INSERT INTO link_tags (tag, link) \
               SELECT m.id, $1 FROM made m ON CONFLICT DO NOTHING) \
             SELECT m.shown FROM given g JOIN made m ON m.folded = g.folded ORDER BY g.pos",
        )
        .await
        .map_err(store_error)?;
    let shown: Vec<String> = c
        .query(&stmt, &[&id, &folded, &tags])
        .await
        .map_err(store_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    execute(
        c,
        "UPDATE links SET tags = $2 WHERE id = $1",
        &[&id, &shown.join("|")],
    )
    .await?;
    Ok(shown)
}

/// The password, rules and expired target in columns `at..at + 3`.
fn extra_at(row: &Row, at: usize) -> Result<Option<Arc<LinkRules>>, StoreError> {
    ExtraColumns::read(row.get(at), row.get(at + 1), row.get(at + 2))
        .map_err(|e| StoreError::Storage(StorageFailure::Corrupt, e))
}

fn key(row: &Row) -> Result<ApiKey, StoreError> {
    let hash: Vec<u8> = row.get(2);
    let hash: [u8; 32] = hash
        .try_into()
        .map_err(|_| StoreError::Task("a key hash is 32 bytes".into()))?;
    Ok(ApiKey {
        id: KeyId(row.get(0)),
        name: row.get(1),
        hash,
        created_at: Timestamp::from_millis(row.get(3)),
        last_used_at: row.get::<_, Option<i64>>(4).map(Timestamp::from_millis),
        revoked_at: row.get::<_, Option<i64>>(5).map(Timestamp::from_millis),
        domain: row.get::<_, Option<i64>>(6).map(DomainId),
        user: UserId(row.get(7)),
        user_name: row.get(8),
        role: role(row, 9)?,
        user_disabled: row.get(10),
    })
}

fn role(row: &Row, at: usize) -> Result<Role, StoreError> {
    row.get::<_, &str>(at)
        .parse()
        .map_err(|_| StoreError::Storage(StorageFailure::Corrupt, "an unknown role".into()))
}

fn user(row: &Row) -> Result<User, StoreError> {
    Ok(User {
        id: UserId(row.get(0)),
        name: row.get(1),
        email: row.get(2),
        role: role(row, 3)?,
        domain: row.get::<_, Option<i64>>(4).map(DomainId),
        password: row.get(5),
        must_change: row.get(6),
        disabled: row.get(7),
        created_at: Timestamp::from_millis(row.get(8)),
        suspended: row.get(9),
    })
}

fn domain(row: &Row) -> Domain {
    let url = |i: usize| row.get::<_, Option<&str>>(i).map(TargetUrl::from_trusted);
    Domain {
        id: DomainId(row.get(0)),
        host: row.get::<_, Option<&str>>(1).map(Host::from_trusted),
        redirects: DomainRedirects {
            root: url(2),
            not_found: url(3),
            expired: url(4),
        },
    }
}

async fn query_opt(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Option<Row>, StoreError> {
    let stmt = c.prepare_cached(sql).await.map_err(store_error)?;
    c.query_opt(&stmt, params).await.map_err(store_error)
}

async fn execute(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, StoreError> {
    let stmt = c.prepare_cached(sql).await.map_err(store_error)?;
    c.execute(&stmt, params).await.map_err(store_error)
}

/// Keeps `litelink_counts` in step with a transaction that changed the
/// number of live links.
pub(super) async fn count_live(c: &impl GenericClient, added: i64) -> Result<(), StoreError> {
    if added != 0 {
        execute(
            c,
            "UPDATE litelink_counts SET live_links = live_links + $1 \
             WHERE shard = pg_backend_pid() % 64",
            &[&added],
        )
        .await?;
    }
    Ok(())
}

/// The number of live links, as the database counts them.
pub(super) async fn live_links(c: &Client) -> Result<i64, StoreError> {
    Ok(query_opt(
        c,
        "SELECT coalesce(sum(live_links), 0)::int8 FROM litelink_counts",
        &[],
    )
    .await?
    .map_or(0, |r| r.get(0)))
}

pub(super) async fn get(c: &Client, key: &LinkKey) -> Result<Option<Resolved>, StoreError> {
    let row = query_opt(
        c,
        "SELECT target, expires_at, max_visits, password, rules, expired_url FROM links \
         WHERE code = $1 AND domain = $2 AND deleted_at IS NULL",
        &[&key.code.as_str(), &key.domain.0],
    )
    .await?;
    row.map(|r| {
        Ok(Resolved {
            target: TargetUrl::from_trusted(r.get(0)),
            expires_at: r.get::<_, Option<i64>>(1).map(Timestamp::from_millis),
            max_visits: r.get::<_, Option<i64>>(2).map(|n| n.max(0) as u64),
            extra: extra_at(&r, 3)?,
        })
    })
    .transpose()
}

pub(super) async fn link(
    c: &impl GenericClient,
    key: &LinkKey,
) -> Result<Option<Link>, StoreError> {
    let sql = format!(
        "SELECT {LINK_COLUMNS} FROM {LINK_FROM} \
         WHERE l.code = $1 AND l.domain = $2 AND l.deleted_at IS NULL"
    );
    query_opt(c, &sql, &[&key.code.as_str(), &key.domain.0])
        .await?
        .map(|r| link_at(&r, 0))
        .transpose()
}

/// Changes a live link, its tags too, in one transaction.
pub(super) async fn update(
    c: &mut Client,
    key: &LinkKey,
    patch: &LinkPatch,
) -> Result<Option<Link>, StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let changed = query_opt(
        &tx,
        "UPDATE links SET target = coalesce($2, target), \
         expires_at = CASE WHEN $3 THEN $4 ELSE expires_at END, \
         max_visits = CASE WHEN $5 THEN $6 ELSE max_visits END, \
         password = CASE WHEN $8 THEN $9 ELSE password END, \
         rules = CASE WHEN $10 THEN $11 ELSE rules END, \
         expired_url = CASE WHEN $12 THEN $13 ELSE expired_url END, \
         title = CASE WHEN $14 THEN $15 ELSE title END \
         WHERE code = $1 AND domain = $7 AND deleted_at IS NULL RETURNING id",
        &[
            &key.code.as_str(),
            &patch.target.as_ref().map(|t| t.as_str()),
            &patch.expires_at.is_some(),
            &patch.expires_at.flatten().map(Timestamp::millis),
            &patch.max_visits.is_some(),
            &patch.max_visits.flatten().map(clamp),
            &key.domain.0,
            &patch.password.is_some(),
            &patch
                .password
                .as_ref()
                .and_then(|p| p.as_ref().map(|p| p.as_str())),
            &patch.rules.is_some(),
            &patch.rules.as_deref().and_then(crate::store::rules_column),
            &patch.expired_url.is_some(),
            &patch
                .expired_url
                .as_ref()
                .and_then(|u| u.as_ref().map(|u| u.as_str())),
            &patch.title.is_some(),
            &patch.title.as_ref().and_then(|t| t.as_deref()),
        ],
    )
    .await?;
    let Some(changed) = changed else {
        return Ok(None);
    };
    if let Some(tags) = &patch.tags {
        set_tags(&tx, changed.get(0), tags).await?;
    }
    if super::webhooks::listening(&tx).await? {
        // The event holds the link as this transaction left it.
        if let Some(now) = link(&tx, key).await? {
            super::webhooks::fan_out(&tx, EventKind::LinkUpdated, &[&now], Timestamp::now())
                .await?;
        }
    }
    tx.commit().await.map_err(store_error)?;
    link(c, key).await
}

pub(super) async fn delete(c: &mut Client, key: &LinkKey) -> Result<bool, StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    if super::webhooks::listening(&tx).await? {
        // The event shows the link as it was.
        if let Some(was) = link(&tx, key).await? {
            super::webhooks::fan_out(&tx, EventKind::LinkDeleted, &[&was], Timestamp::now())
                .await?;
        }
    }
    // The row stays as a tombstone, without its target, so that the code
    // is never issued again; its visits go with it.
    let row = query_opt(
        &tx,
        "WITH old AS (SELECT id, tags FROM links \
           WHERE code = $1 AND domain = $3 AND deleted_at IS NULL), \
         gone AS (UPDATE links l SET deleted_at = $2, target = '', expires_at = NULL, \
           max_visits = NULL, visits = 0, password = NULL, rules = NULL, expired_url = NULL, \
           title = NULL, tags = NULL FROM old WHERE l.id = old.id RETURNING l.id), \
         t AS (DELETE FROM link_tags lt USING old o, tags g WHERE lt.link = o.id \
           AND lt.tag = g.id AND g.shown = ANY(string_to_array(o.tags, '|'))), \
         h AS (DELETE FROM visits_hourly WHERE link IN (SELECT id FROM gone)), \
         r AS (DELETE FROM visits_referrers WHERE link IN (SELECT id FROM gone)), \
         f AS (DELETE FROM visits_facets WHERE link IN (SELECT id FROM gone)), \
         n AS (UPDATE litelink_counts SET live_links = live_links - (SELECT count(*) FROM gone) \
         WHERE shard = pg_backend_pid() % 64) \
         SELECT id FROM gone",
        &[
            &key.code.as_str(),
            &Timestamp::now().millis(),
            &key.domain.0,
        ],
    )
    .await?;
    tx.commit().await.map_err(store_error)?;
    Ok(row.is_some())
}

pub(super) async fn list(c: &Client, q: &ListQuery) -> Result<ListPage, StoreError> {
    let mut sql = format!(
        "SELECT l.id, {LINK_COLUMNS} FROM {LINK_FROM} WHERE l.deleted_at IS NULL AND l.id < $1 \
         AND ($2::int8 IS NULL OR l.owner = $2)"
    );
    sql.push_str(
        " AND ($3::text IS NULL OR (strpos(lower(l.target), lower($3)) > 0 \
           AND (l.password IS NULL OR $7::int8 IS NULL OR l.owner = $7)) \
         OR strpos(lower(l.title), lower($3)) > 0 OR left(l.code, length($3)) = $3)",
    );
    sql.push_str(" AND ($5::int8 IS NULL OR l.domain = $5)");
    // The link has every tag asked for.
    sql.push_str(
        " AND ($6::text[] IS NULL OR (SELECT count(*) FROM tags t JOIN link_tags lt \
         ON lt.tag = t.id AND lt.link = l.id WHERE t.folded = ANY($6)) = cardinality($6))",
    );
    sql.push_str(" ORDER BY l.id DESC LIMIT $4");
    let stmt = c.prepare_cached(&sql).await.map_err(store_error)?;
    let rows = c
        .query(
            &stmt,
            &[
                &q.before.unwrap_or(i64::MAX),
                &q.owner.map(|o| o.0),
                &q.q.as_deref(),
                &(q.limit as i64),
                &q.domain.map(|d| d.0),
                &(!q.tags.is_empty()).then_some(&q.tags),
                &q.searcher.map(|u| u.0),
            ],
        )
        .await
        .map_err(store_error)?;
    let found: Vec<(i64, Link)> = rows
        .iter()
        .map(|r| Ok((r.get(0), link_at(r, 1)?)))
        .collect::<Result<_, StoreError>>()?;
    let next = (found.len() == q.limit)
        .then(|| found.last().map(|(id, _)| *id))
        .flatten();
    Ok(ListPage {
        links: found.into_iter().map(|(_, l)| l).collect(),
        next,
    })
}

/// The live links on `domain` to exactly `target`, oldest first, by the
/// index on the target's hash (migration 10).
pub(super) async fn links_to(
    c: &Client,
    domain: DomainId,
    target: &TargetUrl,
) -> Result<Vec<Link>, StoreError> {
    let sql = format!(
        "SELECT {LINK_COLUMNS} FROM {LINK_FROM} WHERE l.domain = $1 \
         AND litelink_target_hash(l.target) = $2 AND l.deleted_at IS NULL AND l.target = $3 \
         ORDER BY l.id LIMIT $4"
    );
    let hash = crate::store::target_hash(target.as_str());
    let stmt = c.prepare_cached(&sql).await.map_err(store_error)?;
    c.query(
        &stmt,
        &[
            &domain.0,
            &&hash[..],
            &target.as_str(),
            &(crate::store::MAX_LINKS_TO as i64),
        ],
    )
    .await
    .map_err(store_error)?
    .iter()
    .map(|r| link_at(r, 0))
    .collect()
}

/// How many live links `scope` has, and their stored visits.
pub(super) async fn totals(c: &Client, scope: VisitScope) -> Result<LinkTotals, StoreError> {
    // numeric sums cannot overflow; the answer stops at the largest BIGINT.
    let row = query_opt(
        c,
        "SELECT count(*), least(coalesce(sum(l.visits::numeric + l.imported_visits), 0), \
         9223372036854775807)::int8 FROM links l WHERE l.deleted_at IS NULL \
         AND ($1::int8 IS NULL OR l.owner = $1) AND ($2::int8 IS NULL OR l.domain = $2)",
        &[&scope.owner.map(|o| o.0), &scope.domain.map(|d| d.0)],
    )
    .await?;
    Ok(row.map_or_else(LinkTotals::default, |r| LinkTotals {
        links: count(&r, 0),
        visits: count(&r, 1),
    }))
}

/// A page of live links in a scope, ranked.
pub(super) async fn ranked(c: &Client, q: &RankQuery) -> Result<Vec<Link>, StoreError> {
    let order = q.rank.order_by();
    let sql = format!(
        "SELECT {LINK_COLUMNS} FROM {LINK_FROM} WHERE l.deleted_at IS NULL \
         AND ($1::int8 IS NULL OR l.owner = $1) AND ($2::int8 IS NULL OR l.domain = $2) \
         ORDER BY {order} LIMIT $3 OFFSET $4"
    );
    let stmt = c.prepare_cached(&sql).await.map_err(store_error)?;
    c.query(
        &stmt,
        &[
            &q.scope.owner.map(|o| o.0),
            &q.scope.domain.map(|d| d.0),
            &(q.limit as i64),
            &i64::try_from(q.offset).unwrap_or(i64::MAX),
        ],
    )
    .await
    .map_err(store_error)?
    .iter()
    .map(|r| link_at(r, 0))
    .collect()
}

/// Adds counted visits to live links, all in one transaction (rolled back
/// if it fails or is dropped half-way).
pub(super) async fn record_visits(
    c: &mut Client,
    visits: &[(LinkKey, VisitCounts)],
    visited: &[crate::store::outbox::Visited],
) -> Result<(), StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let mut exhausted = Vec::new();
    let mut live = std::collections::HashSet::new();
    for (key, counts) in visits {
        match record_one(&tx, key, counts).await? {
            Recorded::Gone => {}
            Recorded::Live => {
                live.insert(key);
            }
            Recorded::Exhausted => {
                live.insert(key);
                exhausted.push(key);
            }
        }
    }
    let visited: Vec<&crate::store::outbox::Visited> =
        visited.iter().filter(|v| live.contains(&v.key)).collect();
    if !visited.is_empty() && super::webhooks::listening(&tx).await? {
        super::webhooks::visited(&tx, &visited).await?;
    }
    // The flush that stores the visit that used a link up tells of it.
    for key in exhausted {
        if let Some(link) = link(&tx, key).await? {
            super::webhooks::fan_out(&tx, EventKind::LinkExpired, &[&link], Timestamp::now())
                .await?;
        }
    }
    tx.commit().await.map_err(store_error)
}

/// What became of one link's visits.
enum Recorded {
    /// The link is gone: nothing was added.
    Gone,
    Live,
    /// Added, and they used up its `max_visits`.
    Exhausted,
}

/// Adds one link's visits.
async fn record_one(
    c: &impl GenericClient,
    key: &LinkKey,
    counts: &VisitCounts,
) -> Result<Recorded, StoreError> {
    let total = clamp(counts.total());
    // Only a live link: one deleted since these were counted keeps none.
    let Some(row) = query_opt(
        c,
        concat!(
            "UPDATE links SET visits = ",
            saturating_add!("visits", "$2"),
            " WHERE code = $1 AND domain = $3 AND deleted_at IS NULL \
             RETURNING id, visits, max_visits"
        ),
        &[&key.code.as_str(), &total, &key.domain.0],
    )
    .await?
    else {
        return Ok(Recorded::Gone);
    };
    let (visits, max): (i64, Option<i64>) = (row.get(1), row.get(2));
    add_counts(c, row.get(0), counts).await?;
    Ok(
        if max.is_some_and(|max| visits >= max && visits - total < max) {
            Recorded::Exhausted
        } else {
            Recorded::Live
        },
    )
}

/// `link.expired` for the live links whose time ran out since the last
/// scan. Instances take turns: the scan's row is locked for the whole
/// transaction, so a window is scanned once.
pub(super) async fn scan_expiries(c: &mut Client) -> Result<(), StoreError> {
    let now = Timestamp::now();
    let tx = c.transaction().await.map_err(store_error)?;
    execute(
        &tx,
        "INSERT INTO webhook_scans (name, until) VALUES ('expiries', $1) \
         ON CONFLICT (name) DO NOTHING",
        &[&now.millis()],
    )
    .await?;
    let from: i64 = query_opt(
        &tx,
        "SELECT until FROM webhook_scans WHERE name = 'expiries' FOR UPDATE",
        &[],
    )
    .await?
    .map_or(now.millis(), |r| r.get(0));
    if from < now.millis() && super::webhooks::listening(&tx).await? {
        let links = expiring(&tx, from, now.millis()).await?;
        let links: Vec<&Link> = links.iter().collect();
        super::webhooks::fan_out(&tx, EventKind::LinkExpired, &links, now).await?;
    }
    execute(
        &tx,
        "UPDATE webhook_scans SET until = greatest(until, $1) WHERE name = 'expiries'",
        &[&now.millis()],
    )
    .await?;
    tx.commit().await.map_err(store_error)
}

/// The live links whose expiry is in `(from, until]`, soonest first.
pub(super) async fn expiring(
    c: &impl GenericClient,
    from: i64,
    until: i64,
) -> Result<Vec<Link>, StoreError> {
    let sql = format!(
        "SELECT {LINK_COLUMNS} FROM {LINK_FROM} WHERE l.expires_at > $1 \
         AND l.expires_at <= $2 AND l.expires_at IS NOT NULL AND l.deleted_at IS NULL \
         ORDER BY l.expires_at"
    );
    let stmt = c.prepare_cached(&sql).await.map_err(store_error)?;
    let rows = c
        .query(&stmt, &[&from, &until])
        .await
        .map_err(store_error)?;
    rows.iter().map(|r| link_at(r, 0)).collect()
}

/// Adds counts to the row `id`'s hours, referrers and facets (not to its
/// total), each day's values bounded.
async fn add_counts(
    c: &impl GenericClient,
    id: i64,
    counts: &VisitCounts,
) -> Result<(), StoreError> {
    for h in &counts.hours {
        execute(
            c,
            concat!(
                "INSERT INTO visits_hourly (link, hour, humans, bots, browsers) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (link, hour) DO UPDATE SET humans = ",
                saturating_add!("visits_hourly.humans", "excluded.humans"),
                ", bots = ",
                saturating_add!("visits_hourly.bots", "excluded.bots"),
                ", browsers = ",
                saturating_add!("visits_hourly.browsers", "excluded.browsers"),
            ),
            &[
                &id,
                &h.hour,
                &clamp(h.humans),
                &clamp(h.bots),
                &clamp(h.browsers),
            ],
        )
        .await?;
    }
    for (day, host, n) in &counts.referrers {
        let known = execute(
            c,
            concat!(
                "UPDATE visits_referrers SET count = ",
                saturating_add!("count", "$4"),
                " WHERE link = $1 AND day = $2 AND host = $3"
            ),
            &[&id, day, &&**host, &clamp(*n)],
        )
        .await?;
        if known > 0 {
            continue;
        }
        // A day keeps its first hosts; later new ones count as other.
        let hosts: i64 = query_opt(
            c,
            "SELECT count(*) FROM visits_referrers WHERE link = $1 AND day = $2",
            &[&id, day],
        )
        .await?
        .map_or(0, |r| r.get(0));
        let host: &str = if hosts >= REFERRER_HOSTS_PER_DAY as i64 {
            OTHER_HOST
        } else {
            host
        };
        execute(
            c,
            concat!(
                "INSERT INTO visits_referrers (link, day, host, count) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (link, day, host) DO UPDATE SET count = ",
                saturating_add!("visits_referrers.count", "excluded.count"),
            ),
            &[&id, day, &host, &clamp(*n)],
        )
        .await?;
    }
    for (day, dim, value, n) in counts.dimensions() {
        let name: &str = dim.into();
        let n = clamp(n);
        let known = execute(
            c,
            concat!(
                "UPDATE visits_facets SET count = ",
                saturating_add!("count", "$5"),
                " WHERE link = $1 AND day = $2 AND dim = $3 AND value = $4"
            ),
            &[&id, &day, &name, &value, &n],
        )
        .await?;
        if known > 0 {
            continue;
        }
        // As for referrers: a day keeps its first values.
        let values: i64 = query_opt(
            c,
            "SELECT count(*) FROM visits_facets WHERE link = $1 AND day = $2 AND dim = $3",
            &[&id, &day, &name],
        )
        .await?
        .map_or(0, |r| r.get(0));
        let value: &str = if values >= VALUES_PER_DAY as i64 {
            OTHER_HOST
        } else {
            &value
        };
        execute(
            c,
            concat!(
                "INSERT INTO visits_facets (link, day, dim, value, count) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (link, day, dim, value) DO UPDATE SET count = ",
                saturating_add!("visits_facets.count", "excluded.count"),
            ),
            &[&id, &day, &name, &value, &n],
        )
        .await?;
    }
    Ok(())
}

/// The visit counts of every live link in `scope`, summed, in one
/// snapshot.
/// The tags of the live links in `scope`, with how many have each.
pub(super) async fn tags(c: &Client, scope: VisitScope) -> Result<Vec<TagCount>, StoreError> {
    let stmt = c
        .prepare_cached(
            "SELECT t.shown, count(*) FROM link_tags lt JOIN tags t ON t.id = lt.tag \
             JOIN links l ON l.id = lt.link WHERE l.deleted_at IS NULL \
             AND ($1::int8 IS NULL OR l.owner = $1) AND ($2::int8 IS NULL OR l.domain = $2) \
             GROUP BY t.id, t.shown, t.folded ORDER BY count(*) DESC, t.folded",
        )
        .await
        .map_err(store_error)?;
    let rows = c
        .query(
            &stmt,
            &[&scope.owner.map(|o| o.0), &scope.domain.map(|d| d.0)],
        )
        .await
        .map_err(store_error)?;
    Ok(rows
        .iter()
        .map(|r| TagCount {
            tag: r.get(0),
            links: count(r, 1),
        })
        .collect())
}

pub(super) async fn visit_totals(
    c: &mut Client,
    scope: VisitScope,
) -> Result<VisitCounts, StoreError> {
    // A sum past the largest BIGINT stops there instead of failing the
    // whole report (counts may be imported).
    const MAX: i64 = i64::MAX;
    const LINKS: &str = "JOIN links l ON l.id = t.link WHERE l.deleted_at IS NULL \
                         AND ($1::int8 IS NULL OR l.owner = $1) AND ($2::int8 IS NULL OR l.domain = $2)";
    let owner = scope.owner.map(|o| o.0);
    let domain = scope.domain.map(|d| d.0);
    let c = snapshot(c).await?;
    let result = read_counts(
        &c,
        [
            &format!(
                "SELECT t.hour, least(sum(t.humans), {MAX})::int8, least(sum(t.bots), {MAX})::int8, \
                 least(sum(t.browsers), {MAX})::int8 \
                 FROM visits_hourly t {LINKS} GROUP BY t.hour ORDER BY t.hour"
            ),
            &format!(
                "SELECT t.day, t.host, least(sum(t.count), {MAX})::int8 FROM visits_referrers t {LINKS} \
                 GROUP BY t.day, t.host"
            ),
            &format!(
                "SELECT t.day, t.dim, t.value, least(sum(t.count), {MAX})::int8 FROM visits_facets t {LINKS} \
                 GROUP BY t.day, t.dim, t.value"
            ),
        ],
        &[&owner, &domain],
    )
    .await;
    let result = match result {
        Ok(mut counts) => query_opt(
            &c,
            &format!(
                "SELECT least(coalesce(sum(l.imported_visits), 0), {MAX})::int8 FROM links l \
                 WHERE l.deleted_at IS NULL AND ($1::int8 IS NULL OR l.owner = $1) \
                 AND ($2::int8 IS NULL OR l.domain = $2)"
            ),
            &[&owner, &domain],
        )
        .await
        .map(|row| {
            counts.imported = row.map_or(0, |r| count(&r, 0));
            counts
        }),
        Err(e) => Err(e),
    };
    c.commit().await.map_err(store_error)?;
    result
}

/// Visit counts from three queries with the same parameters: hours
/// (`hour, humans, bots, browsers`), referrers (`day, host, count`) and
/// facets (`day, dim, value, count`).
async fn read_counts(
    c: &impl GenericClient,
    [hours, referrers, facets]: [&str; 3],
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<VisitCounts, StoreError> {
    let rows = async |sql: &str| {
        let stmt = c.prepare_cached(sql).await.map_err(store_error)?;
        c.query(&stmt, params).await.map_err(store_error)
    };
    let hours = rows(hours)
        .await?
        .iter()
        .map(|r| HourCount {
            hour: r.get(0),
            humans: count(r, 1),
            bots: count(r, 2),
            browsers: count(r, 3),
        })
        .collect();
    let referrers = rows(referrers)
        .await?
        .iter()
        .map(|r| (r.get(0), r.get::<_, String>(1).into(), count(r, 2)))
        .collect();
    let dims = rows(facets)
        .await?
        .iter()
        .filter_map(|r| {
            // A dimension this build does not know is left out.
            let dim = r.get::<_, String>(1).parse().ok()?;
            Some((r.get(0), dim, r.get::<_, String>(2), count(r, 3)))
        })
        .collect();
    Ok(VisitCounts {
        hours,
        referrers,
        dims,
        ..VisitCounts::default()
    })
}

pub(super) async fn visit_counts(
    c: &mut Client,
    key: &LinkKey,
) -> Result<Option<VisitCounts>, StoreError> {
    // One snapshot for the link and its counts.
    let c = snapshot(c).await?;
    let result = async {
        let Some(row) = query_opt(
            &c,
            "SELECT id, imported_visits FROM links WHERE code = $1 AND domain = $2 \
             AND deleted_at IS NULL",
            &[&key.code.as_str(), &key.domain.0],
        )
        .await?
        else {
            return Ok(None);
        };
        let id: i64 = row.get(0);
        let imported = count(&row, 1);
        read_counts(
            &c,
            [
                "SELECT hour, humans, bots, browsers FROM visits_hourly WHERE link = $1 ORDER BY hour",
                "SELECT day, host, count FROM visits_referrers WHERE link = $1",
                "SELECT day, dim, value, count FROM visits_facets WHERE link = $1",
            ],
            &[&id],
        )
        .await
        .map(|counts| {
            Some(VisitCounts {
                imported,
                ..counts
            })
        })
    }
    .await;
    c.commit().await.map_err(store_error)?;
    result
}

/// A read-only transaction on one snapshot.
async fn snapshot(c: &mut Client) -> Result<deadpool_postgres::Transaction<'_>, StoreError> {
    c.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(store_error)
}

pub(super) async fn keys(c: &Client) -> Result<Vec<ApiKey>, StoreError> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {KEY_COLUMNS} FROM keys k JOIN users u ON u.id = k.user_id ORDER BY k.id"
        ))
        .await
        .map_err(store_error)?;
    c.query(&stmt, &[])
        .await
        .map_err(store_error)?
        .iter()
        .map(key)
        .collect()
}

pub(super) async fn create_key(
    c: &Client,
    name: &str,
    user: UserId,
    hash: [u8; 32],
    domain: Option<DomainId>,
) -> Result<ApiKey, StoreError> {
    // `admin` is no longer read: a key acts with its user's role.
    let stmt = c
        .prepare_cached(&format!(
            "WITH k AS (INSERT INTO keys (name, hash, admin, created_at, domain, user_id) \
             VALUES ($1, $2, false, $3, $4, $5) RETURNING *) \
             SELECT {KEY_COLUMNS} FROM k JOIN users u ON u.id = k.user_id"
        ))
        .await
        .map_err(store_error)?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
        &name,
        &&hash[..],
        &Timestamp::now().millis(),
        &domain.map(|d| d.0),
        &user.0,
    ];
    match c.query_one(&stmt, &params).await {
        Ok(row) => key(&row),
        Err(e) if is_unique_violation(&e) => Err(StoreError::NameTaken(name.to_owned())),
        Err(e) => Err(store_error(e)),
    }
}

pub(super) async fn session(c: &Client, hash: [u8; 32]) -> Result<Option<Session>, StoreError> {
    let row = query_opt(
        c,
        &format!(
            "SELECT {USER_COLUMNS}, s.role, s.created_at, s.seen_at \
             FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.hash = $1"
        ),
        &[&&hash[..]],
    )
    .await?;
    row.map(|row| {
        Ok(Session {
            user: user(&row)?,
            role: role(&row, 10)?,
            created_at: Timestamp::from_millis(row.get(11)),
            seen_at: Timestamp::from_millis(row.get(12)),
        })
    })
    .transpose()
}

pub(super) async fn write_session(c: &Client, write: SessionWrite) -> Result<(), StoreError> {
    let now = Timestamp::now().millis();
    match write {
        SessionWrite::Start {
            hash,
            user,
            role,
            started_before,
            seen_before,
        } => {
            execute(
                c,
                "DELETE FROM sessions WHERE created_at < $1 OR seen_at < $2",
                &[&started_before.millis(), &seen_before.millis()],
            )
            .await?;
            execute(
                c,
                "INSERT INTO sessions (hash, user_id, role, created_at, seen_at) \
                 VALUES ($1, $2, $3, $4, $4)",
                &[&&hash[..], &user.0, &role.as_str(), &now],
            )
            .await?;
            execute(
                c,
                "DELETE FROM sessions WHERE user_id = $1 AND hash NOT IN \
                 (SELECT hash FROM sessions WHERE user_id = $1 \
                  ORDER BY created_at DESC, hash LIMIT $2)",
                &[&user.0, &crate::store::MAX_SESSIONS_PER_USER],
            )
            .await?;
        }
        SessionWrite::Touch { hash, at } => {
            execute(
                c,
                "UPDATE sessions SET seen_at = greatest(seen_at, $2) WHERE hash = $1",
                &[&&hash[..], &at.millis()],
            )
            .await?;
        }
        SessionWrite::End { hash } => {
            execute(c, "DELETE FROM sessions WHERE hash = $1", &[&&hash[..]]).await?;
        }
        SessionWrite::EndOthers { user, keep } => {
            let keep: Option<Vec<u8>> = keep.map(|k| k.to_vec());
            execute(
                c,
                "DELETE FROM sessions WHERE user_id = $1 AND ($2::bytea IS NULL OR hash <> $2)",
                &[&user.0, &keep],
            )
            .await?;
        }
    }
    Ok(())
}

pub(super) async fn users(c: &Client) -> Result<Vec<User>, StoreError> {
    let stmt = c
        .prepare_cached(&format!("SELECT {USER_COLUMNS} FROM users u ORDER BY u.id"))
        .await
        .map_err(store_error)?;
    c.query(&stmt, &[])
        .await
        .map_err(store_error)?
        .iter()
        .map(user)
        .collect()
}

async fn user_named(c: &impl GenericClient, name: &str) -> Result<Option<User>, StoreError> {
    query_opt(
        c,
        &format!("SELECT {USER_COLUMNS} FROM users u WHERE u.folded = $1"),
        &[&fold_name(name)],
    )
    .await?
    .as_ref()
    .map(user)
    .transpose()
}

pub(super) async fn write_login_flow(
    c: &Client,
    write: LoginFlowWrite,
) -> Result<Option<LoginFlow>, StoreError> {
    match write {
        LoginFlowWrite::Begin {
            flow,
            expired_before,
        } => {
            execute(
                c,
                "DELETE FROM login_flows WHERE created_at < $1",
                &[&expired_before.millis()],
            )
            .await?;
            // Concurrent sign-ins may pass the bound together: it is a
            // bound on the table's size, not an exact count.
            let pending: i64 = query_opt(c, "SELECT count(*) FROM login_flows", &[])
                .await?
                .map_or(0, |r| r.get(0));
            if pending >= crate::store::MAX_LOGIN_FLOWS {
                return Err(StoreError::TooMany("sign-ins under way"));
            }
            execute(
                c,
                "INSERT INTO login_flows (state, browser, nonce, verifier, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &&flow.state[..],
                    &&flow.browser[..],
                    &flow.nonce,
                    &flow.verifier,
                    &flow.created_at.millis(),
                ],
            )
            .await?;
            Ok(None)
        }
        LoginFlowWrite::Take { state, browser } => {
            let row = query_opt(
                c,
                "DELETE FROM login_flows WHERE state = $1 AND browser = $2 \
                 RETURNING state, browser, nonce, verifier, created_at",
                &[&&state[..], &&browser[..]],
            )
            .await?;
            let hash = |v: Vec<u8>| <[u8; 32]>::try_from(v).unwrap_or([0; 32]);
            Ok(row.map(|r| LoginFlow {
                state: hash(r.get(0)),
                browser: hash(r.get(1)),
                nonce: r.get(2),
                verifier: r.get(3),
                created_at: Timestamp::from_millis(r.get(4)),
            }))
        }
    }
}

/// The user that (issuer, subject) names, found or made, as SQLite's
/// `sign_in`. Two first sign-ins at once may collide on a name or on the
/// (issuer, subject) index: the loser's is [`StoreError::UserTaken`], and
/// the links service tries it again.
async fn sign_in(
    tx: &deadpool_postgres::Transaction<'_>,
    who: FederatedUser,
    now: i64,
) -> Result<Option<User>, StoreError> {
    let found = query_opt(
        tx,
        "SELECT id FROM users WHERE issuer = $1 AND subject = $2",
        &[&who.issuer, &who.subject],
    )
    .await?;
    let id: i64 = match (found, who.role) {
        (Some(row), Some(role)) => {
            let id = row.get(0);
            execute(
                tx,
                "UPDATE users SET role = $2, email = $3, suspended_at = NULL WHERE id = $1",
                &[&id, &role.as_str(), &who.email],
            )
            .await?;
            id
        }
        (Some(row), None) => {
            let id = row.get(0);
            execute(
                tx,
                "UPDATE users SET suspended_at = coalesce(suspended_at, $2) WHERE id = $1",
                &[&id, &now],
            )
            .await?;
            execute(tx, "DELETE FROM sessions WHERE user_id = $1", &[&id]).await?;
            id
        }
        (None, None) => return Ok(None),
        (None, Some(role)) => {
            let taken = tx
                .query("SELECT folded FROM users", &[])
                .await
                .map_err(store_error)?
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<std::collections::HashSet<_>>();
            let name = crate::domain::user::free_user_name(&who.name, &taken);
            let inserted = tx
                .query_one(
                    "INSERT INTO users (name, folded, email, role, issuer, subject, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                    &[
                        &name,
                        &fold_name(&name),
                        &who.email,
                        &role.as_str(),
                        &who.issuer,
                        &who.subject,
                        &now,
                    ],
                )
                .await;
            match inserted {
                Ok(row) => row.get(0),
                Err(e) if is_unique_violation(&e) => return Err(StoreError::UserTaken(name)),
                Err(e) => return Err(store_error(e)),
            }
        }
    };
    query_opt(
        tx,
        &format!("SELECT {USER_COLUMNS} FROM users u WHERE u.id = $1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(user)
    .transpose()
}

/// A user write, in one transaction; with the link ids a removal moved to
/// another owner.
pub(super) async fn write_user(
    c: &mut Client,
    write: UserWrite,
) -> Result<Option<User>, StoreError> {
    let now = Timestamp::now().millis();
    let tx = c.transaction().await.map_err(store_error)?;
    let written = match write {
        UserWrite::Create(NewUser {
            name,
            email,
            role,
            domain,
            password,
            must_change,
        }) => {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO users (name, folded, email, role, domain, password, \
                     must_change, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .await
                .map_err(store_error)?;
            match tx
                .execute(
                    &stmt,
                    &[
                        &name,
                        &fold_name(&name),
                        &email,
                        &role.as_str(),
                        &domain.map(|d| d.0),
                        &password,
                        &must_change,
                        &now,
                    ],
                )
                .await
            {
                Ok(_) => user_named(&tx, &name).await?,
                Err(e) if is_unique_violation(&e) => return Err(StoreError::UserTaken(name)),
                Err(e) => return Err(store_error(e)),
            }
        }
        UserWrite::Update { name, change } => {
            let Some(found) = user_named(&tx, &name).await? else {
                return Ok(None);
            };
            let UserChange {
                email,
                role,
                domain,
                password,
                disabled,
                suspended,
            } = change;
            let (password, must_change) = match password {
                Some((hash, must)) => (Some(hash), Some(must)),
                None => (None, None),
            };
            execute(
                &tx,
                "UPDATE users SET \
                 email = CASE WHEN $2 THEN $3 ELSE email END, \
                 role = coalesce($4, role), \
                 domain = CASE WHEN $5 THEN $6 ELSE domain END, \
                 password = CASE WHEN $7 THEN $8 ELSE password END, \
                 must_change = coalesce($9, must_change), \
                 disabled_at = CASE WHEN $10::bool IS NULL THEN disabled_at \
                                    WHEN $10 THEN coalesce(disabled_at, $11) ELSE NULL END, \
                 suspended_at = CASE WHEN $12::bool IS NULL THEN suspended_at \
                                    WHEN $12 THEN coalesce(suspended_at, $11) ELSE NULL END \
                 WHERE id = $1",
                &[
                    &found.id.0,
                    &email.is_some(),
                    &email.flatten(),
                    &role.map(|r| r.as_str()),
                    &domain.is_some(),
                    &domain.flatten().map(|d| d.0),
                    &password.is_some(),
                    &password.flatten(),
                    &must_change,
                    &disabled,
                    &now,
                    &suspended,
                ],
            )
            .await?;
            user_named(&tx, &name).await?
        }
        UserWrite::Remove { name, reassign } => {
            let Some(found) = user_named(&tx, &name).await? else {
                return Ok(None);
            };
            execute(
                &tx,
                "UPDATE users SET disabled_at = coalesce(disabled_at, $2) WHERE id = $1",
                &[&found.id.0, &now],
            )
            .await?;
            execute(
                &tx,
                "UPDATE keys SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL",
                &[&found.id.0, &now],
            )
            .await?;
            if let Some(to) = reassign {
                execute(
                    &tx,
                    "UPDATE links SET owner = $2 WHERE owner = $1",
                    &[&found.id.0, &to.0],
                )
                .await?;
            }
            user_named(&tx, &name).await?
        }
        UserWrite::SignIn(who) => sign_in(&tx, who, now).await?,
    };
    tx.commit().await.map_err(store_error)?;
    Ok(written)
}

pub(super) async fn domains(c: &Client) -> Result<Vec<Domain>, StoreError> {
    let stmt = c
        .prepare_cached(&format!("SELECT {DOMAIN_COLUMNS} FROM domains ORDER BY id"))
        .await
        .map_err(store_error)?;
    Ok(c.query(&stmt, &[])
        .await
        .map_err(store_error)?
        .iter()
        .map(domain)
        .collect())
}

fn redirect_params(r: &DomainRedirects) -> [Option<&str>; 3] {
    [&r.root, &r.not_found, &r.expired].map(|t| t.as_ref().map(|t| t.as_str()))
}

pub(super) async fn add_domain(
    c: &Client,
    host: &Host,
    redirects: DomainRedirects,
) -> Result<Domain, StoreError> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO domains (host, root_redirect, not_found_redirect, expired_redirect) \
             VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .await
        .map_err(store_error)?;
    let [root, not_found, expired] = redirect_params(&redirects);
    match c
        .query_one(&stmt, &[&host.as_str(), &root, &not_found, &expired])
        .await
    {
        Ok(row) => Ok(Domain {
            id: DomainId(row.get(0)),
            host: Some(host.clone()),
            redirects,
        }),
        Err(e) if is_unique_violation(&e) => Err(StoreError::HostTaken(host.to_string())),
        Err(e) => Err(store_error(e)),
    }
}

pub(super) async fn set_domain(
    c: &Client,
    id: DomainId,
    redirects: DomainRedirects,
) -> Result<Option<Domain>, StoreError> {
    let [root, not_found, expired] = redirect_params(&redirects);
    let row = query_opt(
        c,
        &format!(
            "UPDATE domains SET root_redirect = $2, not_found_redirect = $3, \
             expired_redirect = $4 WHERE id = $1 RETURNING {DOMAIN_COLUMNS}"
        ),
        &[&id.0, &root, &not_found, &expired],
    )
    .await?;
    Ok(row.as_ref().map(domain))
}

/// Removes an added domain in one transaction, its live links made
/// tombstones (with `force`); `None`: no such domain.
pub(super) async fn remove_domain(
    c: &mut Client,
    id: DomainId,
    force: bool,
) -> Result<Option<Vec<ShortCode>>, StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let exists = query_opt(
        &tx,
        "SELECT 1 FROM domains WHERE id = $1 AND id <> 0 FOR UPDATE",
        &[&id.0],
    )
    .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let live: i64 = query_opt(
        &tx,
        "SELECT count(*) FROM links WHERE domain = $1 AND deleted_at IS NULL",
        &[&id.0],
    )
    .await?
    .map_or(0, |r| r.get(0));
    if live > 0 && !force {
        return Err(StoreError::DomainHasLinks(live as u64));
    }
    if live > 0 && super::webhooks::listening(&tx).await? {
        // Each link deleted with its domain is told of as it was.
        let sql = format!(
            "SELECT {LINK_COLUMNS} FROM {LINK_FROM} WHERE l.domain = $1 \
             AND l.deleted_at IS NULL ORDER BY l.id"
        );
        let stmt = tx.prepare_cached(&sql).await.map_err(store_error)?;
        let rows = tx.query(&stmt, &[&id.0]).await.map_err(store_error)?;
        let links = rows
            .iter()
            .map(|r| link_at(r, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let links: Vec<&Link> = links.iter().collect();
        super::webhooks::fan_out(&tx, EventKind::LinkDeleted, &links, Timestamp::now()).await?;
    }
    let now = Timestamp::now().millis();
    let stmt = tx
        .prepare_cached(
            "WITH old AS (SELECT id, tags FROM links WHERE domain = $1 AND deleted_at IS NULL), \
             gone AS (UPDATE links l SET deleted_at = $2, target = '', expires_at = NULL, \
               max_visits = NULL, visits = 0, password = NULL, rules = NULL, expired_url = NULL, \
               title = NULL, tags = NULL FROM old WHERE l.id = old.id RETURNING l.id, l.code), \
             t AS (DELETE FROM link_tags lt USING old o, tags g WHERE lt.link = o.id \
               AND lt.tag = g.id AND g.shown = ANY(string_to_array(o.tags, '|'))), \
             h AS (DELETE FROM visits_hourly WHERE link IN (SELECT id FROM gone)), \
             r AS (DELETE FROM visits_referrers WHERE link IN (SELECT id FROM gone)), \
             f AS (DELETE FROM visits_facets WHERE link IN (SELECT id FROM gone)) \
             SELECT code FROM gone",
        )
        .await
        .map_err(store_error)?;
    let gone: Vec<ShortCode> = tx
        .query(&stmt, &[&id.0, &now])
        .await
        .map_err(store_error)?
        .iter()
        .map(|r| ShortCode::from_trusted(r.get(0)))
        .collect();
    count_live(&tx, -(gone.len() as i64)).await?;
    execute(&tx, "DELETE FROM domains WHERE id = $1", &[&id.0]).await?;
    execute(
        &tx,
        "UPDATE keys SET revoked_at = $2 WHERE domain = $1 AND revoked_at IS NULL",
        &[&id.0, &now],
    )
    .await?;
    tx.commit().await.map_err(store_error)?;
    Ok(Some(gone))
}

pub(super) async fn revoke_key(c: &Client, name: &str) -> Result<bool, StoreError> {
    let n = execute(
        c,
        "UPDATE keys SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
        &[&name, &Timestamp::now().millis()],
    )
    .await?;
    Ok(n > 0)
}

pub(super) async fn touch_keys(c: &Client, used: &[(KeyId, Timestamp)]) -> Result<(), StoreError> {
    for (id, at) in used {
        execute(
            c,
            "UPDATE keys SET last_used_at = greatest(coalesce(last_used_at, 0), $2) WHERE id = $1",
            &[&id.0, &at.millis()],
        )
        .await?;
    }
    Ok(())
}

/// Every link and tombstone, oldest first, in one snapshot; rows are
/// fetched as they are written, never all held at once.
pub(super) async fn export(
    c: &mut Client,
    mut each: Box<dyn FnMut(Record) -> std::io::Result<()> + Send>,
) -> Result<u64, StoreError> {
    use futures_util::TryStreamExt;
    let c = snapshot(c).await?;
    let result = async {
        let stmt = c
            .prepare_cached(
                "SELECT l.code, l.target, l.created_at, l.expires_at, u.name, l.deleted_at, \
                 l.max_visits, l.visits, d.host, l.password, l.rules, l.expired_url, \
                 l.title, l.tags, l.imported_visits, \
                 CASE WHEN l.visits > 0 OR EXISTS (SELECT 1 FROM visits_hourly WHERE link = l.id) \
                 THEN json_build_array( \
                   (SELECT json_agg(json_build_array(hour, humans, bots, browsers) ORDER BY hour) \
                    FROM visits_hourly WHERE link = l.id), \
                   (SELECT json_agg(json_build_array(day, host, count)) \
                    FROM visits_referrers WHERE link = l.id), \
                   (SELECT json_agg(json_build_array(day, dim, value, count)) \
                    FROM visits_facets WHERE link = l.id))::text END \
                 FROM links l LEFT JOIN users u ON u.id = l.owner \
                 JOIN domains d ON d.id = l.domain ORDER BY l.id",
            )
            .await
            .map_err(store_error)?;
        let rows = c
            .query_raw(&stmt, std::iter::empty::<i64>())
            .await
            .map_err(store_error)?;
        futures_util::pin_mut!(rows);
        let stamp = |ms: Option<i64>| ms.map(|ms| Timestamp::from_millis(ms).to_string());
        let mut n = 0;
        while let Some(r) = rows.try_next().await.map_err(store_error)? {
            let deleted_at: Option<i64> = r.get(5);
            let record = Record {
                domain: r.get(8),
                code: Some(r.get(0)),
                url: deleted_at.is_none().then(|| r.get(1)),
                created_at: Timestamp::from_millis(r.get(2)).to_string(),
                expires_at: stamp(r.get(3)),
                owner: r.get(4),
                deleted_at: stamp(deleted_at),
                max_visits: r.get::<_, Option<i64>>(6).map(|n| n.max(0) as u64),
                visits: Some(count(&r, 7)),
                password_hash: r.get(9),
                rules: r
                    .get::<_, Option<&str>>(10)
                    .and_then(|j| serde_json::from_str(j).ok()),
                expired_url: r.get(11),
                title: r.get(12),
                tags: tags_of(r.get(13)),
                imported_visits: Some(count(&r, 14)).filter(|n| *n > 0),
                history: r
                    .get::<_, Option<String>>(15)
                    .map(|json| history_of_json(&json))
                    .transpose()?
                    .and_then(|counts| crate::store::History::of(&counts)),
            };
            each(record).map_err(|e| StoreError::Task(format!("writing the export: {e}")))?;
            n += 1;
        }
        Ok(n)
    }
    .await;
    c.commit().await.map_err(store_error)?;
    result
}

/// A link's counts from the export query's JSON: `[hours, referrers,
/// facets]`, each an array of arrays or null.
fn history_of_json(json: &str) -> Result<VisitCounts, StoreError> {
    type Lists = (
        Option<Vec<(i64, i64, i64, i64)>>,
        Option<Vec<(i64, String, i64)>>,
        Option<Vec<(i64, String, String, i64)>>,
    );
    let (hours, referrers, facets): Lists = serde_json::from_str(json)
        .map_err(|e| StoreError::Task(format!("reading a link's visits: {e}")))?;
    let n = |v: i64| v.max(0) as u64;
    Ok(VisitCounts {
        hours: hours
            .unwrap_or_default()
            .into_iter()
            .map(|(hour, humans, bots, browsers)| HourCount {
                hour,
                humans: n(humans),
                bots: n(bots),
                browsers: n(browsers),
            })
            .collect(),
        referrers: referrers
            .unwrap_or_default()
            .into_iter()
            .map(|(day, host, c)| (day, host.into(), n(c)))
            .collect(),
        dims: facets
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(day, dim, value, c)| Some((day, dim.parse().ok()?, value, n(c))))
            .collect(),
        ..VisitCounts::default()
    })
}

/// What a row whose code exists becomes beside the row that has it, as
/// SQLite's `existing`.
async fn existing(
    tx: &deadpool_postgres::Transaction<'_>,
    row: &ImportRow,
    code: &ShortCode,
    overwrite: bool,
) -> Result<Existing, StoreError> {
    let found = query_opt(
        tx,
        "SELECT id, target, deleted_at IS NOT NULL FROM links WHERE code = $1 AND domain = $2",
        &[&code.as_str(), &row.domain.0],
    )
    .await?;
    let Some(found) = found else {
        return Ok(Existing::Conflict);
    };
    let (id, target, deleted): (i64, String, bool) = (found.get(0), found.get(1), found.get(2));
    let same = match &row.target {
        None => deleted,
        Some(t) => !deleted && t.as_str() == target,
    };
    if same {
        return Ok(Existing::Unchanged);
    }
    // A deleted code stays deleted: its link never comes back.
    if !overwrite || deleted || row.target.is_none() {
        return Ok(Existing::Conflict);
    }
    let extra = ExtraColumns::of(row.extra.as_deref());
    execute(
        tx,
        "UPDATE links SET target = $2, expires_at = $3, max_visits = $4, password = $5, \
         rules = $6, expired_url = $7, title = $8, imported_visits = $9 WHERE id = $1",
        &[
            &id,
            &row.target.as_ref().map(|t| t.as_str()),
            &row.expires_at.map(Timestamp::millis),
            &row.max_visits.map(clamp),
            &extra.password,
            &extra.rules,
            &extra.expired_url,
            &row.labels.title,
            &clamp(row.imported_visits),
        ],
    )
    .await?;
    set_tags(tx, id, &row.labels.tags).await?;
    Ok(Existing::Overwritten)
}

/// Stores `rows` in one transaction, keeping their codes (a generated one
/// for a row without); a row whose code exists is returned with what
/// became of it.
pub(super) async fn import(
    c: &mut Client,
    rows: Vec<ImportRow>,
    codes: &CodeGenerator,
    overwrite: bool,
) -> Result<(Vec<(u64, Existing)>, i64), StoreError> {
    let tx = c.transaction().await.map_err(store_error)?;
    let stmt = tx
        .prepare_cached(
            "INSERT INTO links (code, target, created_at, expires_at, owner, deleted_at, \
             max_visits, visits, domain, password, rules, expired_url, title, imported_visits) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
             ON CONFLICT (code, domain) DO NOTHING RETURNING id",
        )
        .await
        .map_err(store_error)?;
    let mut skipped = Vec::new();
    let mut live = 0i64;
    let mut sequence = 0u64;
    for row in rows {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let code = row.code.clone().unwrap_or_else(|| {
                sequence += 1;
                codes.generate(sequence)
            });
            let extra = ExtraColumns::of(row.extra.as_deref());
            let inserted = tx
                .query_opt(
                    &stmt,
                    &[
                        &code.as_str(),
                        &row.target.as_ref().map_or("", |t| t.as_str()),
                        &row.created_at.millis(),
                        &row.expires_at.map(Timestamp::millis),
                        &row.owner.map(|o| o.0),
                        &row.deleted_at.map(Timestamp::millis),
                        &row.max_visits.map(clamp),
                        &clamp(row.visits),
                        &row.domain.0,
                        &extra.password,
                        &extra.rules,
                        &extra.expired_url,
                        &row.labels.title,
                        &clamp(row.imported_visits),
                    ],
                )
                .await
                .map_err(store_error)?;
            if let Some(inserted) = inserted {
                live += i64::from(row.deleted_at.is_none());
                if row.deleted_at.is_none() {
                    set_tags(&tx, inserted.get(0), &row.labels.tags).await?;
                }
                if let Some(counts) = &row.history
                    && row.deleted_at.is_none()
                {
                    add_counts(&tx, inserted.get(0), counts).await?;
                }
                break;
            }
            if let Some(code) = &row.code {
                skipped.push((row.line, existing(&tx, &row, code, overwrite).await?));
                break;
            }
            if attempts >= 16 {
                skipped.push((row.line, Existing::Conflict));
                break;
            }
        }
    }
    count_live(&tx, live).await?;
    tx.commit().await.map_err(store_error)?;
    Ok((skipped, live))
}
