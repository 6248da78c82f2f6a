//! The writes other than plain creates, each run by the writer thread in a
//! transaction of its own.

use rusqlite::{CachedStatement, Connection, OptionalExtension};

use super::find::{self, Rows};
use super::is_unique_violation;
use super::replies::Done;
use super::rows;
use super::webhooks;
use crate::domain::label::fold_tag;
use crate::domain::user::fold_name;
use crate::domain::visit::{OTHER_HOST, REFERRER_HOSTS_PER_DAY, VALUES_PER_DAY};
use crate::domain::{
    Codebook, Domain, DomainId, DomainRedirects, Host, KeyId, LinkKey, ShortCode, Timestamp,
    UserId, VisitCounts,
};
use crate::store::outbox::{EventKind, Outcome, WebhookWrite};
use crate::store::{
    Existing, FederatedUser, ImportRow, LinkPatch, LoginFlow, LoginFlowWrite, NewUser,
    SessionWrite, StoreError, UserChange, UserWrite,
};

#[derive(Debug)]
pub(super) enum Op {
    Update {
        key: LinkKey,
        patch: LinkPatch,
    },
    Delete {
        key: LinkKey,
    },
    CreateKey {
        name: String,
        user: UserId,
        hash: [u8; 32],
        domain: Option<DomainId>,
    },
    User(UserWrite),
    Session(SessionWrite),
    LoginFlow(LoginFlowWrite),
    AddDomain(Host, DomainRedirects),
    SetDomain(DomainId, DomainRedirects),
    RemoveDomain {
        id: DomainId,
        force: bool,
    },
    RevokeKey {
        name: String,
    },
    TouchKeys(Vec<(KeyId, Timestamp)>),
    /// Rows, and for each the row id its code would be generated for.
    Import {
        rows: Vec<ImportRow>,
        generated: Vec<Option<u64>>,
        overwrite: bool,
    },
    RecordVisits(
        std::sync::Arc<[(LinkKey, VisitCounts)]>,
        std::sync::Arc<[crate::store::outbox::Visited]>,
    ),
    Webhook(WebhookWrite),
    ClaimEvents {
        limit: usize,
        lease_ms: i64,
    },
    SettleEvents(Vec<Outcome>),
    RetryEvent {
        webhook: i64,
        event: i64,
    },
    ReleaseClaims,
    RecordEvent {
        kind: EventKind,
        data: String,
    },
    ScanExpiries,
    DropVisited(u64),
}

impl Op {
    /// Whether the caller hears of the op only once the WAL is synced.
    /// Visit counts are answered at commit: a dead process loses nothing
    /// committed, and they are synced by the next create's sync (or the
    /// next checkpoint) instead of adding syncs that creates would wait
    /// behind. Only a power cut can take them, never an acknowledged link.
    pub(super) fn waits_for_sync(&self) -> bool {
        // A lost claim only runs out; a lost settlement only sends an
        // event again, which at-least-once delivery allows.
        !matches!(
            self,
            Op::RecordVisits(..) | Op::ClaimEvents { .. } | Op::SettleEvents(_) | Op::ReleaseClaims
        )
    }
}

/// A count as SQLite's signed 64-bit integer.
pub(super) fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What an op did: its answer, how the number of live links changed, and
/// which rows it changed.
pub(super) struct Applied {
    pub done: Done,
    pub links_added: i64,
    pub changed: Changed,
}

/// The rows an op changed, for their slots (slots.rs).
#[derive(Debug, Default)]
pub(super) enum Changed {
    #[default]
    Nothing,
    /// Rows to copy again from the table.
    Rows(Vec<i64>),
    /// Visits added to each row's count.
    Visits(Vec<(i64, i64)>),
}

pub(super) fn apply(conn: &Connection, book: &Codebook, op: Op) -> Result<Applied, StoreError> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let result = run(conn, book, op).and_then(|applied| {
        count_live(conn, applied.links_added)?;
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(applied)
    });
    if result.is_err()
        && !conn.is_autocommit()
        && let Err(e) = conn.execute_batch("ROLLBACK")
    {
        tracing::error!(error = %e, "rollback of a failed write failed");
    }
    result
}

/// Keeps `meta.live_links` in step with the transaction that changed the
/// number of live links, so that start-up reads it instead of counting.
pub(super) fn count_live(conn: &Connection, added: i64) -> rusqlite::Result<()> {
    if added != 0 {
        conn.prepare_cached("UPDATE meta SET value = value + ?1 WHERE name = 'live_links'")?
            .execute([added])?;
    }
    Ok(())
}

fn applied(done: Done) -> Applied {
    Applied {
        done,
        links_added: 0,
        changed: Changed::Nothing,
    }
}

fn run(conn: &Connection, book: &Codebook, op: Op) -> Result<Applied, StoreError> {
    let now = Timestamp::now();
    match op {
        Op::Update { key, patch } => update(conn, book, key, patch),
        Op::Delete { key } => delete(conn, book, key, now),
        Op::CreateKey {
            name,
            user,
            hash,
            domain,
        } => create_key(conn, name, user, hash, domain, now),
        Op::User(write) => write_user(conn, write, now),
        Op::Session(write) => write_session(conn, write, now),
        Op::LoginFlow(write) => write_login_flow(conn, write),
        Op::AddDomain(host, redirects) => add_domain(conn, host, redirects),
        Op::SetDomain(id, redirects) => set_domain(conn, id, redirects),
        Op::RemoveDomain { id, force } => remove_domain(conn, id, force, now),
        Op::RevokeKey { name } => revoke_key(conn, name, now),
        Op::TouchKeys(used) => touch_keys(conn, used),
        Op::Import {
            rows,
            generated,
            overwrite,
        } => import(conn, book, rows, generated, overwrite),
        Op::RecordVisits(visits, visited) => record_visits(conn, book, visits, &visited),
        Op::Webhook(write) => webhooks::write(conn, write, now).map(applied),
        Op::ClaimEvents { limit, lease_ms } => {
            webhooks::claim(conn, now, limit, lease_ms).map(applied)
        }
        Op::SettleEvents(outcomes) => webhooks::settle(conn, outcomes).map(applied),
        Op::RetryEvent { webhook, event } => {
            webhooks::retry(conn, webhook, event, now).map(applied)
        }
        Op::ReleaseClaims => webhooks::release(conn).map(applied),
        Op::RecordEvent { kind, data } => {
            webhooks::record_event(conn, kind, &data, now).map(applied)
        }
        Op::ScanExpiries => webhooks::scan_expiries(conn, now).map(applied),
        Op::DropVisited(n) => webhooks::drop_visited(conn, n).map(applied),
    }
}

fn update(
    conn: &Connection,
    book: &Codebook,
    key: LinkKey,
    patch: LinkPatch,
) -> Result<Applied, StoreError> {
    let Some(id) = find::id(conn, book, &key, Rows::Live)? else {
        return Ok(applied(Done::MaybeLink(None)));
    };
    let changed = conn
        .prepare_cached(
            "UPDATE links SET target = coalesce(?2, target), \
             target_hash = coalesce(?15, target_hash), \
             expires_at = CASE WHEN ?3 THEN ?4 ELSE expires_at END, \
             max_visits = CASE WHEN ?5 THEN ?6 ELSE max_visits END, \
             password = CASE WHEN ?7 THEN ?8 ELSE password END, \
             rules = CASE WHEN ?9 THEN ?10 ELSE rules END, \
             expired_url = CASE WHEN ?11 THEN ?12 ELSE expired_url END, \
             title = CASE WHEN ?13 THEN ?14 ELSE title END \
             WHERE id = ?1",
        )?
        .execute((
            id,
            patch.target.as_ref().map(|t| t.as_str()),
            patch.expires_at.is_some(),
            patch.expires_at.flatten().map(Timestamp::millis),
            patch.max_visits.is_some(),
            patch.max_visits.flatten().map(clamp),
            patch.password.is_some(),
            patch
                .password
                .as_ref()
                .and_then(|p| p.as_ref().map(|p| p.as_str())),
            patch.rules.is_some(),
            patch.rules.as_deref().and_then(crate::store::rules_column),
            patch.expired_url.is_some(),
            patch
                .expired_url
                .as_ref()
                .and_then(|u| u.as_ref().map(|u| u.as_str())),
            patch.title.is_some(),
            patch.title.as_ref().and_then(|t| t.as_deref()),
            patch
                .target
                .as_ref()
                .map(|t| super::rows::target_key(t.as_str())),
        ))?;
    if changed == 0 {
        return Ok(applied(Done::MaybeLink(None)));
    }
    if let Some(tags) = &patch.tags {
        set_tags(conn, id, tags)?;
    }
    let link = link_row(conn, id)?;
    if let Some(link) = &link
        && webhooks::listening(conn)?
    {
        webhooks::fan_out(conn, EventKind::LinkUpdated, link, Timestamp::now())?;
    }
    Ok(Applied {
        changed: Changed::Rows(vec![id]),
        ..applied(Done::MaybeLink(link))
    })
}

/// Row `id` as a link.
fn link_row(conn: &Connection, id: i64) -> rusqlite::Result<Option<crate::domain::Link>> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM {} WHERE l.id = ?1",
        rows::LINK_COLUMNS,
        rows::LINK_FROM
    ))?
    .query_row([id], rows::link)
    .optional()
}

fn delete(
    conn: &Connection,
    book: &Codebook,
    key: LinkKey,
    now: Timestamp,
) -> Result<Applied, StoreError> {
    let Some(id) = find::id(conn, book, &key, Rows::Live)? else {
        return Ok(applied(Done::Found(false)));
    };
    if webhooks::listening(conn)? {
        // The event shows the link as it was.
        if let Some(link) = link_row(conn, id)? {
            webhooks::fan_out(conn, EventKind::LinkDeleted, &link, now)?;
        }
    }
    let deleted = tombstone(conn, id, now)?;
    Ok(Applied {
        done: Done::Found(deleted),
        links_added: -i64::from(deleted),
        changed: Changed::Rows(vec![id]),
    })
}

/// Makes row `id` a tombstone: it stays, without its target, so that its
/// code is never issued again; its visits go with it.
fn tombstone(conn: &Connection, id: i64, now: Timestamp) -> rusqlite::Result<bool> {
    let deleted = conn
        .prepare_cached(
            "UPDATE links SET deleted_at = ?2, target = '', expires_at = NULL, \
             max_visits = NULL, visits = 0, password = NULL, rules = NULL, \
             expired_url = NULL, title = NULL, target_hash = NULL WHERE id = ?1",
        )?
        .execute((id, now.millis()))?;
    drop_tags(conn, id)?;
    for table in ["visits_hourly", "visits_referrers", "visits_facets"] {
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE link = ?1"))?
            .execute([id])?;
    }
    Ok(deleted > 0)
}

/// Gives row `id` exactly `tags`, in their order: the tags as shown. A tag
/// new to the store keeps the form it is first written in.
pub(super) fn set_tags(
    conn: &Connection,
    id: i64,
    tags: &[String],
) -> rusqlite::Result<Vec<String>> {
    drop_tags(conn, id)?;
    add_tags(conn, id, tags, &mut KnownTags::default())
}

/// Takes row `id`'s tags away, as its own column names them.
fn drop_tags(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    let had: Option<String> = conn
        .prepare_cached("SELECT tags FROM links WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten();
    let mut drop = conn.prepare_cached(
        "DELETE FROM link_tags WHERE link = ?2 AND tag = (SELECT id FROM tags WHERE folded = ?1)",
    )?;
    for tag in super::rows::tags_of(had.as_deref()) {
        drop.execute((fold_tag(&tag), id))?;
    }
    conn.prepare_cached("UPDATE links SET tags = NULL WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Tags found or made during one write: an import of many links with the
/// same few tags looks each up once.
#[derive(Default)]
pub(super) struct KnownTags(std::collections::HashMap<String, (i64, String)>);

/// Gives row `id`, which has no tags yet, `tags`: as [`set_tags`].
pub(super) fn add_tags(
    conn: &Connection,
    id: i64,
    tags: &[String],
    known: &mut KnownTags,
) -> rusqlite::Result<Vec<String>> {
    if tags.is_empty() {
        return Ok(Vec::new());
    }
    let found = find_tags(conn, tags, known)?;
    link_tags(conn, id, &found)?;
    let shown: Vec<String> = found.into_iter().map(|(_, shown)| shown).collect();
    conn.prepare_cached("UPDATE links SET tags = ?2 WHERE id = ?1")?
        .execute((id, shown.join("|")))?;
    Ok(shown)
}

/// Each of `tags`: its id and the form it is shown in, made if new.
pub(super) fn find_tags(
    conn: &Connection,
    tags: &[String],
    known: &mut KnownTags,
) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut found = Vec::with_capacity(tags.len());
    for tag in tags {
        let folded = fold_tag(tag);
        found.push(match known.0.get(&folded) {
            Some(one) => one.clone(),
            None => {
                let one = tag_row(conn, &folded, tag)?;
                known.0.insert(folded, one.clone());
                one
            }
        });
    }
    Ok(found)
}

/// Files row `id` under each of `tags` (found by [`find_tags`]).
fn link_tags(conn: &Connection, id: i64, tags: &[(i64, String)]) -> rusqlite::Result<()> {
    let mut link =
        conn.prepare_cached("INSERT OR IGNORE INTO link_tags (tag, link) VALUES (?1, ?2)")?;
    for (tag, _) in tags {
        link.execute((tag, id))?;
    }
    Ok(())
}

/// The tag `folded`: its id and the form it is shown in, made (as `tag`)
/// if new. The writer is alone, so what it reads stays true until it
/// commits; most tags exist, and are only read.
fn tag_row(conn: &Connection, folded: &str, tag: &str) -> rusqlite::Result<(i64, String)> {
    let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?));
    let found = conn
        .prepare_cached("SELECT id, shown FROM tags WHERE folded = ?1")?
        .query_row([folded], row)
        .optional()?;
    match found {
        Some(found) => Ok(found),
        None => conn
            .prepare_cached("INSERT INTO tags (folded, shown) VALUES (?1, ?2) RETURNING id, shown")?
            .query_row((folded, tag), row),
    }
}

fn create_key(
    conn: &Connection,
    name: String,
    user: UserId,
    hash: [u8; 32],
    domain: Option<DomainId>,
    now: Timestamp,
) -> Result<Applied, StoreError> {
    // `admin` is no longer read: a key acts with its user's role.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO keys (name, hash, admin, created_at, domain, user_id) \
             VALUES (?1, ?2, 0, ?3, ?4, ?5) RETURNING id",
        )?
        .query_row(
            (
                name.as_str(),
                &hash[..],
                now.millis(),
                domain.map(|d| d.0),
                user.0,
            ),
            |r| r.get::<_, i64>(0),
        );
    let id = match inserted {
        Ok(id) => id,
        Err(e) if is_unique_violation(&e) => return Err(StoreError::NameTaken(name)),
        Err(e) => return Err(e.into()),
    };
    let key = conn
        .prepare_cached(&format!(
            "SELECT {} FROM keys k JOIN users u ON u.id = k.user_id WHERE k.id = ?1",
            rows::KEY_COLUMNS
        ))?
        .query_row([id], rows::key)?;
    Ok(applied(Done::Key(key)))
}

fn user_named(conn: &Connection, name: &str) -> rusqlite::Result<Option<crate::store::User>> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM users u WHERE u.folded = ?1",
        rows::USER_COLUMNS
    ))?
    .query_row([fold_name(name)], rows::user)
    .optional()
}

fn write_session(
    conn: &Connection,
    write: SessionWrite,
    now: Timestamp,
) -> Result<Applied, StoreError> {
    match write {
        SessionWrite::Start {
            hash,
            user,
            role,
            started_before,
            seen_before,
        } => {
            conn.prepare_cached("DELETE FROM sessions WHERE created_at < ?1 OR seen_at < ?2")?
                .execute((started_before.millis(), seen_before.millis()))?;
            conn.prepare_cached(
                "INSERT INTO sessions (hash, user_id, role, created_at, seen_at) \
                 VALUES (?1, ?2, ?3, ?4, ?4)",
            )?
            .execute((&hash[..], user.0, role.as_str(), now.millis()))?;
            conn.prepare_cached(
                "DELETE FROM sessions WHERE user_id = ?1 AND hash NOT IN \
                 (SELECT hash FROM sessions WHERE user_id = ?1 \
                  ORDER BY created_at DESC, hash LIMIT ?2)",
            )?
            .execute((user.0, crate::store::MAX_SESSIONS_PER_USER))?;
        }
        SessionWrite::Touch { hash, at } => {
            conn.prepare_cached("UPDATE sessions SET seen_at = max(seen_at, ?2) WHERE hash = ?1")?
                .execute((&hash[..], at.millis()))?;
        }
        SessionWrite::End { hash } => {
            conn.prepare_cached("DELETE FROM sessions WHERE hash = ?1")?
                .execute([&hash[..]])?;
        }
        SessionWrite::EndOthers { user, keep } => {
            conn.prepare_cached(
                "DELETE FROM sessions WHERE user_id = ?1 AND (?2 IS NULL OR hash <> ?2)",
            )?
            .execute((user.0, keep.as_ref().map(|k| &k[..])))?;
        }
    }
    Ok(applied(Done::Nothing))
}

fn write_login_flow(conn: &Connection, write: LoginFlowWrite) -> Result<Applied, StoreError> {
    match write {
        LoginFlowWrite::Begin {
            flow,
            expired_before,
        } => {
            conn.prepare_cached("DELETE FROM login_flows WHERE created_at < ?1")?
                .execute([expired_before.millis()])?;
            let pending: i64 = conn
                .prepare_cached("SELECT count(*) FROM login_flows")?
                .query_row([], |r| r.get(0))?;
            if pending >= crate::store::MAX_LOGIN_FLOWS {
                return Err(StoreError::TooMany("sign-ins under way"));
            }
            conn.prepare_cached(
                "INSERT INTO login_flows (state, browser, nonce, verifier, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute((
                &flow.state[..],
                &flow.browser[..],
                &flow.nonce,
                &flow.verifier,
                flow.created_at.millis(),
            ))?;
            Ok(applied(Done::Flow(None)))
        }
        LoginFlowWrite::Take { state, browser } => {
            let flow = conn
                .prepare_cached(
                    "DELETE FROM login_flows WHERE state = ?1 AND browser = ?2 \
                     RETURNING state, browser, nonce, verifier, created_at",
                )?
                .query_row([&state[..], &browser[..]], |r| {
                    Ok(LoginFlow {
                        state: r.get(0)?,
                        browser: r.get(1)?,
                        nonce: r.get(2)?,
                        verifier: r.get(3)?,
                        created_at: Timestamp::from_millis(r.get(4)?),
                    })
                })
                .optional()?;
            Ok(applied(Done::Flow(flow)))
        }
    }
}

/// The user that (issuer, subject) names: found and given this sign-in's
/// role and email, or made under the first free name.
fn sign_in(conn: &Connection, who: FederatedUser, now: Timestamp) -> Result<Applied, StoreError> {
    let FederatedUser {
        issuer,
        subject,
        name,
        email,
        role,
    } = who;
    let found: Option<i64> = conn
        .prepare_cached("SELECT id FROM users WHERE issuer = ?1 AND subject = ?2")?
        .query_row((&issuer, &subject), |r| r.get(0))
        .optional()?;
    let id = match (found, role) {
        (Some(id), Some(role)) => {
            conn.prepare_cached(
                "UPDATE users SET role = ?2, email = ?3, suspended_at = NULL WHERE id = ?1",
            )?
            .execute((id, role.as_str(), &email))?;
            id
        }
        (Some(id), None) => {
            conn.prepare_cached(
                "UPDATE users SET suspended_at = coalesce(suspended_at, ?2) WHERE id = ?1",
            )?
            .execute((id, now.millis()))?;
            conn.prepare_cached("DELETE FROM sessions WHERE user_id = ?1")?
                .execute([id])?;
            id
        }
        (None, None) => return Ok(applied(Done::User(None))),
        (None, Some(role)) => {
            let taken = conn
                .prepare_cached("SELECT folded FROM users")?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<std::collections::HashSet<_>, _>>()?;
            let name = crate::domain::user::free_user_name(&name, &taken);
            conn.prepare_cached(
                "INSERT INTO users (name, folded, email, role, issuer, subject, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
            )?
            .query_row(
                rusqlite::params![
                    name,
                    fold_name(&name),
                    email,
                    role.as_str(),
                    issuer,
                    subject,
                    now.millis()
                ],
                |r| r.get(0),
            )?
        }
    };
    let user = conn
        .prepare_cached(&format!(
            "SELECT {} FROM users u WHERE u.id = ?1",
            rows::USER_COLUMNS
        ))?
        .query_row([id], rows::user)
        .optional()?;
    Ok(applied(Done::User(user)))
}

fn write_user(conn: &Connection, write: UserWrite, now: Timestamp) -> Result<Applied, StoreError> {
    match write {
        UserWrite::Create(NewUser {
            name,
            email,
            role,
            domain,
            password,
            must_change,
        }) => {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO users (name, folded, email, role, domain, password, \
                     must_change, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(rusqlite::params![
                    name,
                    fold_name(&name),
                    email,
                    role.as_str(),
                    domain.map(|d| d.0),
                    password,
                    must_change,
                    now.millis()
                ]);
            match inserted {
                Ok(_) => Ok(applied(Done::User(user_named(conn, &name)?))),
                Err(e) if is_unique_violation(&e) => Err(StoreError::UserTaken(name)),
                Err(e) => Err(e.into()),
            }
        }
        UserWrite::Update { name, change } => {
            let Some(user) = user_named(conn, &name)? else {
                return Ok(applied(Done::User(None)));
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
            conn.prepare_cached(
                "UPDATE users SET \
                 email = CASE WHEN ?2 THEN ?3 ELSE email END, \
                 role = coalesce(?4, role), \
                 domain = CASE WHEN ?5 THEN ?6 ELSE domain END, \
                 password = CASE WHEN ?7 THEN ?8 ELSE password END, \
                 must_change = coalesce(?9, must_change), \
                 disabled_at = CASE WHEN ?10 IS NULL THEN disabled_at \
                                    WHEN ?10 THEN coalesce(disabled_at, ?11) ELSE NULL END, \
                 suspended_at = CASE WHEN ?12 IS NULL THEN suspended_at \
                                    WHEN ?12 THEN coalesce(suspended_at, ?11) ELSE NULL END \
                 WHERE id = ?1",
            )?
            .execute(rusqlite::params![
                user.id.0,
                email.is_some(),
                email.flatten(),
                role.map(|r| r.as_str()),
                domain.is_some(),
                domain.flatten().map(|d| d.0),
                password.is_some(),
                password.flatten(),
                must_change,
                disabled,
                now.millis(),
                suspended
            ])?;
            Ok(applied(Done::User(user_named(conn, &name)?)))
        }
        UserWrite::SignIn(who) => sign_in(conn, who, now),
        UserWrite::Remove { name, reassign } => {
            let Some(user) = user_named(conn, &name)? else {
                return Ok(applied(Done::User(None)));
            };
            conn.prepare_cached(
                "UPDATE users SET disabled_at = coalesce(disabled_at, ?2) WHERE id = ?1",
            )?
            .execute((user.id.0, now.millis()))?;
            conn.prepare_cached(
                "UPDATE keys SET revoked_at = ?2 WHERE user_id = ?1 AND revoked_at IS NULL",
            )?
            .execute((user.id.0, now.millis()))?;
            let mut moved = Vec::new();
            if let Some(to) = reassign {
                moved = conn
                    .prepare_cached("UPDATE links SET owner = ?2 WHERE owner = ?1 RETURNING id")?
                    .query_map((user.id.0, to.0), |r| r.get::<_, i64>(0))?
                    .collect::<Result<_, _>>()?;
            }
            Ok(Applied {
                done: Done::User(user_named(conn, &name)?),
                links_added: 0,
                changed: Changed::Rows(moved),
            })
        }
    }
}

fn add_domain(
    conn: &Connection,
    host: Host,
    redirects: DomainRedirects,
) -> Result<Applied, StoreError> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO domains (host, root_redirect, not_found_redirect, expired_redirect) \
             VALUES (?1, ?2, ?3, ?4) RETURNING id",
        )?
        .query_row(
            (
                host.as_str(),
                redirects.root.as_ref().map(|t| t.as_str()),
                redirects.not_found.as_ref().map(|t| t.as_str()),
                redirects.expired.as_ref().map(|t| t.as_str()),
            ),
            |r| r.get::<_, i64>(0),
        );
    let id = match inserted {
        Ok(id) => id,
        Err(e) if is_unique_violation(&e) => return Err(StoreError::HostTaken(host.to_string())),
        Err(e) => return Err(e.into()),
    };
    Ok(applied(Done::Domain(Some(Domain {
        id: DomainId(id),
        host: Some(host),
        redirects,
    }))))
}

fn set_domain(
    conn: &Connection,
    id: DomainId,
    redirects: DomainRedirects,
) -> Result<Applied, StoreError> {
    conn.prepare_cached(
        "UPDATE domains SET root_redirect = ?2, not_found_redirect = ?3, expired_redirect = ?4 \
         WHERE id = ?1",
    )?
    .execute((
        id.0,
        redirects.root.as_ref().map(|t| t.as_str()),
        redirects.not_found.as_ref().map(|t| t.as_str()),
        redirects.expired.as_ref().map(|t| t.as_str()),
    ))?;
    let domain = conn
        .prepare_cached(&format!(
            "SELECT {} FROM domains WHERE id = ?1",
            rows::DOMAIN_COLUMNS
        ))?
        .query_row([id.0], rows::domain)
        .optional()?;
    Ok(applied(Done::Domain(domain)))
}

fn remove_domain(
    conn: &Connection,
    id: DomainId,
    force: bool,
    now: Timestamp,
) -> Result<Applied, StoreError> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM domains WHERE id = ?1 AND id <> 0")?
        .query_row([id.0], |_| Ok(()))
        .optional()?
        .is_some();
    if !exists {
        return Ok(applied(Done::Removed(None)));
    }
    let live: Vec<(i64, String)> = conn
        .prepare_cached("SELECT id, code FROM links WHERE domain = ?1 AND deleted_at IS NULL")?
        .query_map([id.0], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if !live.is_empty() && !force {
        return Err(StoreError::DomainHasLinks(live.len() as u64));
    }
    let listening = webhooks::listening(conn)?;
    for (link, _) in &live {
        if listening && let Some(was) = link_row(conn, *link)? {
            webhooks::fan_out(conn, EventKind::LinkDeleted, &was, now)?;
        }
        tombstone(conn, *link, now)?;
    }
    conn.prepare_cached("DELETE FROM domains WHERE id = ?1")?
        .execute([id.0])?;
    // Keys limited to it can do nothing any more.
    conn.prepare_cached(
        "UPDATE keys SET revoked_at = ?2 WHERE domain = ?1 AND revoked_at IS NULL",
    )?
    .execute((id.0, now.millis()))?;
    let n = live.len() as i64;
    let (ids, codes) = live
        .into_iter()
        .map(|(id, code)| (id, ShortCode::from_trusted(&code)))
        .unzip();
    Ok(Applied {
        done: Done::Removed(Some(codes)),
        links_added: -n,
        changed: Changed::Rows(ids),
    })
}

fn revoke_key(conn: &Connection, name: String, now: Timestamp) -> Result<Applied, StoreError> {
    let revoked = conn
        .prepare_cached("UPDATE keys SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL")?
        .execute((name.as_str(), now.millis()))?;
    Ok(applied(Done::Found(revoked > 0)))
}

fn touch_keys(conn: &Connection, used: Vec<(KeyId, Timestamp)>) -> Result<Applied, StoreError> {
    let mut stmt = conn.prepare_cached(
        "UPDATE keys SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE id = ?1",
    )?;
    for (id, at) in used {
        stmt.execute((id.0, at.millis()))?;
    }
    Ok(applied(Done::Nothing))
}

/// What a row whose code exists becomes beside the row that has it; with
/// the id of the row it overwrote, if it did.
fn existing(
    conn: &Connection,
    book: &Codebook,
    row: &ImportRow,
    overwrite: bool,
) -> Result<(Existing, Option<i64>), StoreError> {
    let Some(code) = &row.code else {
        return Ok((Existing::Conflict, None));
    };
    let key = LinkKey::new(row.domain, code.clone());
    let found = find::by_code(conn, book, &key, &find::ROW_ANY, |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
        ))
    })?;
    let Some((id, target, deleted)) = found else {
        return Ok((Existing::Conflict, None));
    };
    let same = match &row.target {
        None => deleted,
        Some(t) => !deleted && t.as_str() == target,
    };
    if same {
        return Ok((Existing::Unchanged, None));
    }
    // A deleted code stays deleted: its link never comes back.
    if !overwrite || deleted || row.target.is_none() {
        return Ok((Existing::Conflict, None));
    }
    let extra = crate::store::ExtraColumns::of(row.extra.as_deref());
    conn.prepare_cached(
        "UPDATE links SET target = ?2, expires_at = ?3, max_visits = ?4, password = ?5, \
         rules = ?6, expired_url = ?7, title = ?8, imported_visits = ?9, target_hash = ?10 \
         WHERE id = ?1",
    )?
    .execute((
        id,
        row.target.as_ref().map(|t| t.as_str()),
        row.expires_at.map(Timestamp::millis),
        row.max_visits.map(clamp),
        extra.password.as_deref(),
        extra.rules.as_deref(),
        extra.expired_url.as_deref(),
        row.labels.title.as_deref(),
        clamp(row.imported_visits),
        row.target
            .as_ref()
            .map(|t| super::rows::target_key(t.as_str())),
    ))?;
    set_tags(conn, id, &row.labels.tags)?;
    Ok((Existing::Overwritten, Some(id)))
}

fn import(
    conn: &Connection,
    book: &Codebook,
    rows: Vec<ImportRow>,
    generated: Vec<Option<u64>>,
    overwrite: bool,
) -> Result<Applied, StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO links (id, code, target, created_at, expires_at, owner, deleted_at, \
         max_visits, visits, named, domain, password, rules, expired_url, title, tags, \
         imported_visits, target_hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18)",
    )?;
    let mut next_id = find::next_id(conn)?;
    let mut history = VisitStatements::prepare(conn)?;
    let mut collisions = 0;
    let mut skipped = Vec::new();
    let mut live = 0;
    let mut ids = Vec::new();
    let mut known = KnownTags::default();
    // Filed once the rows are in, in the index's order: pages of one tag
    // are then written together.
    let mut filed: Vec<(i64, i64)> = Vec::new();
    for (row, generated_id) in rows.into_iter().zip(generated) {
        // A row keeps its code as a named one, unless a generated
        // row has it; a row without one gets the next generated.
        let (id, code, named) = match row.code.clone() {
            Some(code)
                if find::generated_id_taken(
                    conn,
                    generated_id,
                    next_id,
                    &LinkKey::new(row.domain, code.clone()),
                )? =>
            {
                let (what, changed) = existing(conn, book, &row, overwrite)?;
                skipped.push((row.line, what));
                ids.extend(changed);
                continue;
            }
            Some(code) => (next_id, code, true),
            None => match find::fresh(
                conn,
                book,
                &mut next_id,
                crate::store::queue::MAX_CODE_ATTEMPTS,
                &mut collisions,
            )? {
                Some(find::Fresh { id, code }) => (id, code, false),
                None => {
                    skipped.push((row.line, Existing::Conflict));
                    continue;
                }
            },
        };
        let extra = crate::store::ExtraColumns::of(row.extra.as_deref());
        // Found first, so that the row is written once, with them.
        let tags = match row.deleted_at {
            None => find_tags(conn, &row.labels.tags, &mut known)?,
            Some(_) => Vec::new(),
        };
        let shown = (!tags.is_empty()).then(|| {
            tags.iter()
                .map(|(_, s)| s.as_str())
                .collect::<Vec<_>>()
                .join("|")
        });
        let inserted = stmt.execute(rusqlite::params![
            id,
            code.as_str(),
            row.target.as_ref().map_or("", |t| t.as_str()),
            row.created_at.millis(),
            row.expires_at.map(Timestamp::millis),
            row.owner.map(|o| o.0),
            row.deleted_at.map(Timestamp::millis),
            row.max_visits.map(clamp),
            clamp(row.visits),
            named,
            row.domain.0,
            extra.password.as_deref(),
            extra.rules.as_deref(),
            extra.expired_url.as_deref(),
            row.labels.title.as_deref(),
            shown,
            clamp(row.imported_visits),
            row.target
                .as_ref()
                .filter(|_| row.deleted_at.is_none())
                .map(|t| super::rows::target_key(t.as_str())),
        ]);
        match inserted {
            Ok(_) => {
                filed.extend(tags.iter().map(|(tag, _)| (*tag, id)));
                next_id = next_id.max(id + 1);
                live += i64::from(row.deleted_at.is_none());
                ids.push(id);
                if let Some(counts) = &row.history
                    && row.deleted_at.is_none()
                {
                    history.add(id, counts)?;
                }
            }
            Err(e) if named && is_unique_violation(&e) => {
                let (what, changed) = existing(conn, book, &row, overwrite)?;
                skipped.push((row.line, what));
                ids.extend(changed);
            }
            Err(e) => return Err(e.into()),
        }
    }
    filed.sort_unstable();
    let mut file =
        conn.prepare_cached("INSERT OR IGNORE INTO link_tags (tag, link) VALUES (?1, ?2)")?;
    for pair in filed {
        file.execute(pair)?;
    }
    Ok(Applied {
        done: Done::Imported(skipped),
        links_added: live,
        changed: Changed::Rows(ids),
    })
}

fn record_visits(
    conn: &Connection,
    book: &Codebook,
    visits: std::sync::Arc<[(LinkKey, VisitCounts)]>,
    visited: &[crate::store::outbox::Visited],
) -> Result<Applied, StoreError> {
    let mut added = Vec::with_capacity(visits.len());
    let mut exhausted = Vec::new();
    let mut live = std::collections::HashSet::new();
    let mut statements = VisitStatements::prepare(conn)?;
    for (key, counts) in visits.iter() {
        if let Some(recorded) = statements.record(book, key, counts)? {
            added.push((recorded.id, recorded.added));
            live.insert(key);
            if recorded.exhausted {
                exhausted.push(recorded.id);
            }
        }
    }
    drop(statements);
    if !visited.is_empty() && webhooks::listening(conn)? {
        for v in visited.iter().filter(|v| live.contains(&v.key)) {
            webhooks::visited(conn, v)?;
        }
    }
    // The flush that stores the visit that used a link up tells of it.
    if !exhausted.is_empty() && webhooks::listening(conn)? {
        for id in exhausted {
            if let Some(link) = link_row(conn, id)? {
                webhooks::fan_out(conn, EventKind::LinkExpired, &link, Timestamp::now())?;
            }
        }
    }
    Ok(Applied {
        changed: Changed::Visits(added),
        ..applied(Done::Nothing)
    })
}

/// The statements of a visit flush, prepared once for a whole chunk of
/// links rather than looked up in the statement cache for each.
struct VisitStatements<'c> {
    id_by_id: CachedStatement<'c>,
    id_by_name: CachedStatement<'c>,
    add_total: CachedStatement<'c>,
    hourly: CachedStatement<'c>,
    known_host: CachedStatement<'c>,
    hosts: CachedStatement<'c>,
    new_host: CachedStatement<'c>,
    known_value: CachedStatement<'c>,
    values: CachedStatement<'c>,
    new_value: CachedStatement<'c>,
}

/// One link's visits as recorded: its row, the visits added to its total,
/// and whether they used up its `max_visits`.
struct Recorded {
    id: i64,
    added: i64,
    exhausted: bool,
}

impl<'c> VisitStatements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Self {
            id_by_id: conn.prepare_cached(find::ID_LIVE.by_id)?,
            id_by_name: conn.prepare_cached(find::ID_LIVE.by_name)?,
            add_total: conn.prepare_cached(concat!(
                "UPDATE links SET visits = ",
                saturating_add!("visits", "?2"),
                " WHERE id = ?1 RETURNING visits, max_visits"
            ))?,
            hourly: conn.prepare_cached(concat!(
                "INSERT INTO visits_hourly (link, hour, humans, bots, browsers) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (link, hour) DO UPDATE SET humans = ",
                saturating_add!("humans", "excluded.humans"),
                ", bots = ",
                saturating_add!("bots", "excluded.bots"),
                ", browsers = ",
                saturating_add!("browsers", "excluded.browsers"),
            ))?,
            known_host: conn.prepare_cached(concat!(
                "UPDATE visits_referrers SET count = ",
                saturating_add!("count", "?4"),
                " WHERE link = ?1 AND day = ?2 AND host = ?3",
            ))?,
            hosts: conn.prepare_cached(
                "SELECT count(*) FROM visits_referrers WHERE link = ?1 AND day = ?2",
            )?,
            new_host: conn.prepare_cached(concat!(
                "INSERT INTO visits_referrers (link, day, host, count) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (link, day, host) DO UPDATE SET count = ",
                saturating_add!("count", "excluded.count"),
            ))?,
            known_value: conn.prepare_cached(concat!(
                "UPDATE visits_facets SET count = ",
                saturating_add!("count", "?5"),
                " WHERE link = ?1 AND day = ?2 AND dim = ?3 AND value = ?4",
            ))?,
            values: conn.prepare_cached(
                "SELECT count(*) FROM visits_facets WHERE link = ?1 AND day = ?2 AND dim = ?3",
            )?,
            new_value: conn.prepare_cached(concat!(
                "INSERT INTO visits_facets (link, day, dim, value, count) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (link, day, dim, value) \
                 DO UPDATE SET count = ",
                saturating_add!("count", "excluded.count"),
            ))?,
        })
    }

    /// Adds one link's counts to its total and its aggregates: three
    /// statements for a link with one hour and one referrer already seen.
    /// What was recorded, if the link is live.
    fn record(
        &mut self,
        book: &Codebook,
        key: &LinkKey,
        counts: &VisitCounts,
    ) -> Result<Option<Recorded>, StoreError> {
        let total = clamp(counts.total());
        // Only a live link: one deleted since these were counted keeps none.
        let Some(id) = self.live_id(book, key)? else {
            return Ok(None);
        };
        let (visits, max): (i64, Option<i64>) = self
            .add_total
            .query_row((id, total), |r| Ok((r.get(0)?, r.get(1)?)))?;
        self.add(id, counts)?;
        Ok(Some(Recorded {
            id,
            added: total,
            exhausted: max.is_some_and(|max| visits >= max && visits - total < max),
        }))
    }

    /// Adds counts to the row `id`'s hours, referrers and facets (not to
    /// its total), each day's values bounded.
    fn add(&mut self, id: i64, counts: &VisitCounts) -> Result<(), StoreError> {
        for h in &counts.hours {
            self.hourly.execute((
                id,
                h.hour,
                clamp(h.humans),
                clamp(h.bots),
                clamp(h.browsers),
            ))?;
        }
        for (day, host, n) in &counts.referrers {
            if self.known_host.execute((id, day, &**host, clamp(*n)))? > 0 {
                continue;
            }
            // A day keeps its first hosts; later new ones count as other, so
            // that random Referers cannot grow the table without bound.
            let full = self.hosts.query_row((id, day), |r| r.get::<_, i64>(0))?
                >= REFERRER_HOSTS_PER_DAY as i64;
            let host: &str = if full { OTHER_HOST } else { host };
            self.new_host.execute((id, day, host, clamp(*n)))?;
        }
        for (day, dim, value, n) in counts.dimensions() {
            let name: &str = dim.into();
            let n = clamp(n);
            if self.known_value.execute((id, day, name, &value, n))? > 0 {
                continue;
            }
            // As for referrers: a day keeps its first values.
            let full = self
                .values
                .query_row((id, day, name), |r| r.get::<_, i64>(0))?
                >= VALUES_PER_DAY as i64;
            let value: &str = if full { OTHER_HOST } else { &value };
            self.new_value.execute((id, day, name, value, n))?;
        }
        Ok(())
    }

    /// The id of `code`'s live row, found as [`find::id`] finds it (by the
    /// id the code decrypts to, else by name), with the decryption
    /// remembered from earlier flushes.
    fn live_id(&mut self, book: &Codebook, key: &LinkKey) -> rusqlite::Result<Option<i64>> {
        let (code, domain) = (key.code.as_str(), key.domain.0);
        if let Some(id) = book
            .id_of_recent(&key.code)
            .and_then(|id| i64::try_from(id).ok())
        {
            let found = self
                .id_by_id
                .query_row((id, code, domain), |r| r.get(0))
                .optional()?;
            if found.is_some() {
                return Ok(found);
            }
        }
        self.id_by_name
            .query_row((code, domain), |r| r.get(0))
            .optional()
    }
}
