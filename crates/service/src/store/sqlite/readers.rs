//! The read side: connections for point lookups, either kept and reused
//! (with their prepared statements and their read snapshot) or opened anew
//! for every request.
//!
//! A kept connection also keeps its read transaction open between lookups
//! for as long as nothing has been committed since it began: a snapshot that
//! no commit has overtaken is as current as a new one, and beginning one
//! costs about a fifth of a pooled lookup (docs/architecture.md, "Storage design").
//! [`Epoch`] is how readers learn that a commit (or a checkpoint) happened.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::connection::{self, Applied, Role};
use super::find::{self, Rows, Statements};
use super::rows;
use super::slots::{Found, Lookup, Slots};
use super::{ConnectionMode, SqliteSettings};
use crate::domain::{
    Codebook, Domain, DomainId, HourCount, Link, LinkKey, Resolved, TargetUrl, Timestamp,
    VisitCounts,
};
use crate::store::{
    ApiKey, LinkTotals, ListPage, ListQuery, RankQuery, Record, Session, TagCount, User, VisitScope,
};

/// What a redirect needs of a live link (find.rs).
const SELECT_TARGET: Statements<&str> = Statements {
    by_id: "SELECT target, expires_at, max_visits, password, rules, expired_url FROM links l \
            WHERE l.id = ?1 AND l.code = ?2 AND l.domain = ?3 AND l.deleted_at IS NULL",
    by_name: "SELECT target, expires_at, max_visits, password, rules, expired_url FROM links l \
              WHERE l.code = ?1 AND l.domain = ?2 AND l.named = 1 AND l.deleted_at IS NULL",
};

/// [`rows::link`] on a row whose first column is the id.
/// [`Readers::links_to`]'s statement: domain, target hash, target, limit.
pub(super) fn links_to_sql() -> String {
    format!(
        "SELECT {} FROM {} WHERE l.domain = ?1 AND l.target_hash = ?2 \
         AND l.deleted_at IS NULL AND l.target = ?3 ORDER BY l.id LIMIT ?4",
        rows::LINK_COLUMNS,
        rows::LINK_FROM
    )
}

fn rows_link_at(r: &rusqlite::Row<'_>) -> rusqlite::Result<Link> {
    rows::link_at(r, 1)
}

/// Longest a read snapshot is reused even when no commit of ours overtook
/// it: it bounds how late a change made by another process (an operator's
/// `sqlite3` session, say) becomes visible, and how long an idle
/// connection can hold on to old WAL frames.
const MAX_SNAPSHOT_AGE: Duration = Duration::from_millis(100);

/// Counts the changes readers must not miss: the writer advances it after
/// every commit (before any reply for that commit is sent) and the
/// checkpointer after every checkpoint. A snapshot taken at epoch `e` is
/// current for as long as the epoch is still `e`.
#[derive(Debug, Default)]
pub(super) struct Epoch(AtomicU64);

impl Epoch {
    pub(super) fn advance(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Counters for `/stats`, and for the test that checks snapshots are
/// reused.
#[derive(Debug, Default)]
pub(super) struct ReaderStats {
    lookups: AtomicU64,
    snapshots: AtomicU64,
    /// Connections opened for reads: one per lookup in per-request mode.
    opened: AtomicU64,
    /// What the first reader connection ran with, read back from SQLite.
    applied: OnceLock<Applied>,
}

/// The `/stats` view of the readers' counters.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ReaderCounts {
    pub lookups: u64,
    pub snapshots: u64,
    pub connections_opened: u64,
}

/// A pooled connection and the read transaction it may hold open.
struct Reader {
    conn: Connection,
    snapshot: Option<Snapshot>,
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    epoch: u64,
    began: Instant,
}

impl Reader {
    fn is_current(&self, epoch: u64) -> bool {
        matches!(self.snapshot, Some(s) if s.epoch == epoch && s.began.elapsed() < MAX_SNAPSHOT_AGE)
    }

    /// Runs `f` inside a read transaction, reusing the open one if it is
    /// still current. `epoch` must have been read before this call: a
    /// commit between that read and the new snapshot only makes the
    /// snapshot look older than it is, never newer.
    fn run<T>(
        &mut self,
        epoch: u64,
        stats: &ReaderStats,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        if !self.is_current(epoch) {
            self.end()?;
        }
        if self.snapshot.is_none() {
            // Deferred: the snapshot itself is taken by the first SELECT.
            self.conn.prepare_cached("BEGIN")?.execute([])?;
            self.snapshot = Some(Snapshot {
                epoch,
                began: Instant::now(),
            });
            stats.snapshots.fetch_add(1, Ordering::Relaxed);
        }
        let result = f(&self.conn);
        if result.is_err() {
            // Start the next lookup from a clean state whatever went wrong.
            let _ = self.end();
        }
        result
    }

    /// Ends the open read transaction, if any.
    fn end(&mut self) -> rusqlite::Result<()> {
        self.snapshot = None;
        if !self.conn.is_autocommit() {
            self.conn.prepare_cached("COMMIT")?.execute([])?;
        }
        Ok(())
    }
}

/// Idle reader connections. A plain mutex-guarded stack: it is held only to
/// push or pop, never during a query, so on a handful of cores it is not
/// contended; a connection is opened when the stack is empty and dropped
/// when it is full, so the pool follows the real concurrency.
pub(super) struct Readers {
    path: PathBuf,
    settings: SqliteSettings,
    idle: Mutex<Vec<Reader>>,
    max_idle: usize,
    epoch: std::sync::Arc<Epoch>,
    /// Cleared while a checkpoint must wait for every reader to leave the
    /// WAL: connections then end their snapshot when they are checked in.
    reuse: AtomicBool,
    stats: ReaderStats,
    book: std::sync::Arc<Codebook>,
    /// Generated links' lookup fields by row id (slots.rs), when on.
    slots: Option<std::sync::Arc<Slots>>,
}

impl Readers {
    pub(super) fn new(
        path: PathBuf,
        settings: SqliteSettings,
        epoch: std::sync::Arc<Epoch>,
        book: std::sync::Arc<Codebook>,
        slots: Option<std::sync::Arc<Slots>>,
    ) -> Self {
        let max_idle = settings.max_readers;
        Self {
            path,
            settings,
            idle: Mutex::new(Vec::with_capacity(max_idle)),
            max_idle,
            epoch,
            reuse: AtomicBool::new(true),
            stats: ReaderStats::default(),
            book,
            slots,
        }
    }

    /// Tests only: readers of the same database that always ask SQLite,
    /// with a connection per read (never a snapshot older than the call).
    #[cfg(test)]
    pub(super) fn of_the_table(&self) -> Self {
        let settings = SqliteSettings {
            connections: ConnectionMode::PerRequest,
            slots: false,
            ..self.settings.clone()
        };
        Self::new(
            self.path.clone(),
            settings,
            std::sync::Arc::default(),
            std::sync::Arc::clone(&self.book),
            None,
        )
    }

    pub(super) fn get(&self, key: &LinkKey) -> rusqlite::Result<Option<Resolved>> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let id = self.book.id_of(key.code.as_str());
        let id = match self.slots.as_ref().map(|s| s.resolve(id, key)) {
            Some(Lookup::Link(l)) => {
                return Ok(Some(Resolved {
                    target: l.target,
                    expires_at: l.expires_at.map(Timestamp::from_millis),
                    max_visits: l.max_visits,
                    // A link with any is never answered from its slot.
                    extra: None,
                }));
            }
            Some(Lookup::Gone) => return Ok(None),
            Some(Lookup::Ask(id)) => id,
            None => id,
        };
        self.with_connection(|conn| {
            find::by_code_with_id(conn, id, key, &SELECT_TARGET, |r| {
                Ok(Resolved {
                    target: TargetUrl::from_trusted(r.get_ref(0)?.as_str()?),
                    expires_at: r.get::<_, Option<i64>>(1)?.map(Timestamp::from_millis),
                    max_visits: r.get::<_, Option<i64>>(2)?.map(|n| n.max(0) as u64),
                    extra: rows::extra_at(r, 3)?,
                })
            })
        })
    }

    /// The live link with `key`, for management.
    pub(super) fn link(&self, key: &LinkKey) -> rusqlite::Result<Option<Link>> {
        let (found, id) = self.slot(self.book.id_of(key.code.as_str()), key);
        match found {
            // A link with an owner is read whole: the owner's name is in
            // `keys`, not in the slot.
            Found::Live(slot) if !slot.has_owner && !slot.has_labels => {
                return Ok(Some(Link {
                    domain: key.domain,
                    code: key.code.clone(),
                    target: slot.target,
                    created_at: Timestamp::from_millis(slot.created_at),
                    expires_at: slot.expires_at.map(Timestamp::from_millis),
                    owner: None,
                    max_visits: slot.max_visits,
                    visits: slot.visits,
                    imported_visits: 0,
                    extra: None,
                    labels: Default::default(),
                }));
            }
            Found::Gone => return Ok(None),
            Found::Live(_) | Found::Unknown => {}
        }
        self.with_connection(|conn| {
            let sql = find::statements(rows::LINK_COLUMNS, rows::LINK_FROM, Rows::Live);
            find::by_code_with_id(conn, id, key, &sql, rows::link)
        })
    }

    /// What the slots say of `key`, whose code decrypts to `id`; with the
    /// row id SQLite is best asked by when they cannot tell.
    fn slot(&self, id: Option<u64>, key: &LinkKey) -> (Found, Option<u64>) {
        match &self.slots {
            Some(slots) => slots.find(id, key),
            None => (Found::Unknown, id),
        }
    }

    /// One page of live links, newest first (by id, so that links created
    /// while paging never shift the pages: keyset pagination).
    pub(super) fn list(&self, q: &ListQuery) -> rusqlite::Result<ListPage> {
        let mut sql = format!(
            "SELECT l.id, {} FROM {} WHERE l.deleted_at IS NULL AND l.id < ?1",
            rows::LINK_COLUMNS,
            rows::LINK_FROM
        );
        if q.owner.is_some() {
            sql.push_str(" AND l.owner = ?2");
        }
        if q.q.is_some() {
            sql.push_str(
                " AND ((instr(lower(l.target), lower(?3)) > 0 \
                   AND (l.password IS NULL OR ?7 IS NULL OR l.owner = ?7)) \
                 OR instr(lower(l.title), lower(?3)) > 0 \
                 OR substr(l.code, 1, length(?3)) = ?3)",
            );
        }
        if !q.tags.is_empty() {
            // The link has every tag asked for.
            sql.push_str(
                " AND (SELECT count(*) FROM tags t JOIN link_tags lt \
                 ON lt.tag = t.id AND lt.link = l.id \
                 WHERE t.folded IN (SELECT value FROM json_each(?6))) = json_array_length(?6)",
            );
        }
        // Always named, so that the statement takes its seven parameters.
        sql.push_str(
            " AND (?5 IS NULL OR l.domain = ?5) AND (?6 IS NULL OR json_valid(?6)) \
             AND (?7 IS NULL OR ?7 = ?7)",
        );
        sql.push_str(" ORDER BY l.id DESC LIMIT ?4");
        self.with_connection(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let before = q.before.unwrap_or(i64::MAX);
            let owner = q.owner.map(|o| o.0);
            let limit = q.limit as i64;
            let found = stmt.query_map(
                rusqlite::params![
                    before,
                    owner,
                    q.q.as_deref(),
                    limit,
                    q.domain.map(|d| d.0),
                    (!q.tags.is_empty()).then(|| serde_json::json!(q.tags).to_string()),
                    q.searcher.map(|u| u.0)
                ],
                |r| Ok((r.get::<_, i64>(0)?, rows_link_at(r)?)),
            )?;
            let found: Vec<(i64, Link)> = found.collect::<Result<_, _>>()?;
            let next = (found.len() == q.limit)
                .then(|| found.last().map(|(id, _)| *id))
                .flatten();
            Ok(ListPage {
                links: found.into_iter().map(|(_, l)| l).collect(),
                next,
            })
        })
    }

    /// The live links on `domain` to exactly `target`, oldest first, by
    /// the index on the target's hash.
    pub(super) fn links_to(
        &self,
        domain: DomainId,
        target: &TargetUrl,
    ) -> rusqlite::Result<Vec<Link>> {
        let key = super::rows::target_key(target.as_str());
        self.with_connection(|conn| {
            conn.prepare_cached(&links_to_sql())?
                .query_map(
                    rusqlite::params![
                        domain.0,
                        key,
                        target.as_str(),
                        crate::store::MAX_LINKS_TO as i64
                    ],
                    rows::link,
                )?
                .collect()
        })
    }

    /// How many live links `scope` has, and their stored visits.
    pub(super) fn totals(&self, scope: VisitScope) -> rusqlite::Result<LinkTotals> {
        let owner = scope.owner.map(|o| o.0);
        let domain = scope.domain.map(|d| d.0);
        self.with_connection(|conn| {
            // total() sums as a float, so that imported counts cannot
            // overflow the sum (see `visit_totals`).
            conn.prepare_cached(
                "SELECT count(*), CAST(total(l.visits) + total(l.imported_visits) AS INTEGER) \
                 FROM links l WHERE l.deleted_at IS NULL \
                 AND (?1 IS NULL OR l.owner = ?1) AND (?2 IS NULL OR l.domain = ?2)",
            )?
            .query_row((owner, domain), |r| {
                Ok(LinkTotals {
                    links: r.get::<_, i64>(0)?.max(0) as u64,
                    visits: r.get::<_, i64>(1)?.max(0) as u64,
                })
            })
        })
    }

    /// A page of live links in a scope, ranked.
    pub(super) fn ranked(&self, q: &RankQuery) -> rusqlite::Result<Vec<Link>> {
        let order = q.rank.order_by();
        let sql = format!(
            "SELECT {} FROM {} WHERE l.deleted_at IS NULL \
             AND (?1 IS NULL OR l.owner = ?1) AND (?2 IS NULL OR l.domain = ?2) \
             ORDER BY {order} LIMIT ?3 OFFSET ?4",
            rows::LINK_COLUMNS,
            rows::LINK_FROM
        );
        self.with_connection(|conn| {
            conn.prepare_cached(&sql)?
                .query_map(
                    rusqlite::params![
                        q.scope.owner.map(|o| o.0),
                        q.scope.domain.map(|d| d.0),
                        q.limit as i64,
                        i64::try_from(q.offset).unwrap_or(i64::MAX)
                    ],
                    rows::link,
                )?
                .collect()
        })
    }

    /// Every key, read through a snapshot begun now: keys are read rarely
    /// (every second, and when an unknown key is sent), and one that
    /// another process just made must be seen.
    pub(super) fn keys(&self) -> rusqlite::Result<Vec<ApiKey>> {
        self.with_fresh_connection(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {} FROM keys k JOIN users u ON u.id = k.user_id ORDER BY k.id",
                rows::KEY_COLUMNS
            ))?
            .query_map([], rows::key)?
            .collect()
        })
    }

    /// The session `hash` names, with its user, through a snapshot begun
    /// now (one just begun must be found).
    pub(super) fn session(&self, hash: [u8; 32]) -> rusqlite::Result<Option<Session>> {
        use rusqlite::OptionalExtension;
        self.with_fresh_connection(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {}, s.role, s.created_at, s.seen_at \
                 FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.hash = ?1",
                rows::USER_COLUMNS
            ))?
            .query_row([&hash[..]], rows::session)
            .optional()
        })
    }

    /// Every user, through a snapshot begun now (as keys are).
    pub(super) fn users(&self) -> rusqlite::Result<Vec<User>> {
        self.with_fresh_connection(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {} FROM users u ORDER BY u.id",
                rows::USER_COLUMNS
            ))?
            .query_map([], rows::user)?
            .collect()
        })
    }

    /// Every domain, the default first, read through a snapshot begun now
    /// (as keys are: one just added beside the server must be seen).
    pub(super) fn domains(&self) -> rusqlite::Result<Vec<Domain>> {
        self.with_fresh_connection(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {} FROM domains ORDER BY id",
                rows::DOMAIN_COLUMNS
            ))?
            .query_map([], rows::domain)?
            .collect()
        })
    }

    /// Every webhook, read fresh.
    pub(super) fn webhooks(&self) -> rusqlite::Result<Vec<crate::store::outbox::Webhook>> {
        self.with_fresh_connection(super::webhooks::list)
    }

    /// A webhook's last attempts, read fresh.
    pub(super) fn attempts(
        &self,
        webhook: i64,
    ) -> rusqlite::Result<Vec<crate::store::outbox::AttemptRow>> {
        self.with_fresh_connection(|conn| super::webhooks::attempts(conn, webhook))
    }

    /// Whether any outbox event is claimed.
    pub(super) fn claimed_events(&self) -> rusqlite::Result<bool> {
        self.with_fresh_connection(|conn| {
            conn.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM webhook_events WHERE state = 0 AND leased_until <> 0)",
            )?
            .query_row([], |r| r.get(0))
        })
    }

    pub(super) fn pending_events(
        &self,
    ) -> rusqlite::Result<(u64, Option<crate::domain::Timestamp>)> {
        self.with_fresh_connection(super::webhooks::pending)
    }

    /// The visit counts of every live link in `scope`, summed, in one
    /// snapshot.
    /// The tags of the live links in `scope`, with how many have each.
    pub(super) fn tags(&self, scope: VisitScope) -> rusqlite::Result<Vec<TagCount>> {
        let owner = scope.owner.map(|o| o.0);
        let domain = scope.domain.map(|d| d.0);
        self.with_connection(|conn| {
            conn.prepare_cached(
                "SELECT t.shown, count(*) FROM link_tags lt JOIN tags t ON t.id = lt.tag \
                 JOIN links l ON l.id = lt.link WHERE l.deleted_at IS NULL \
                 AND (?1 IS NULL OR l.owner = ?1) AND (?2 IS NULL OR l.domain = ?2) \
                 GROUP BY t.id ORDER BY count(*) DESC, t.folded",
            )?
            .query_map((owner, domain), |r| {
                Ok(TagCount {
                    tag: r.get(0)?,
                    links: r.get::<_, i64>(1)?.max(0) as u64,
                })
            })?
            .collect()
        })
    }

    pub(super) fn visit_totals(&self, scope: VisitScope) -> rusqlite::Result<VisitCounts> {
        // total() sums as a float and the cast stops at the largest
        // integer, where sum() would fail the whole report on an overflow
        // (counts may be imported); sums below 2^53 are exact.
        const LINKS: &str = "JOIN links l ON l.id = t.link WHERE l.deleted_at IS NULL \
                             AND (?1 IS NULL OR l.owner = ?1) AND (?2 IS NULL OR l.domain = ?2)";
        let owner = scope.owner.map(|o| o.0);
        let domain = scope.domain.map(|d| d.0);
        self.with_connection(|conn| {
            let mut counts = read_counts(
                conn,
                [
                    &format!(
                        "SELECT t.hour, CAST(total(t.humans) AS INTEGER), \
                         CAST(total(t.bots) AS INTEGER), CAST(total(t.browsers) AS INTEGER) \
                         FROM visits_hourly t {LINKS} GROUP BY t.hour ORDER BY t.hour"
                    ),
                    &format!(
                        "SELECT t.day, t.host, CAST(total(t.count) AS INTEGER) \
                         FROM visits_referrers t {LINKS} \
                         GROUP BY t.day, t.host"
                    ),
                    &format!(
                        "SELECT t.day, t.dim, t.value, CAST(total(t.count) AS INTEGER) \
                         FROM visits_facets t {LINKS} \
                         GROUP BY t.day, t.dim, t.value"
                    ),
                ],
                rusqlite::params![owner, domain],
            )?;
            counts.imported = conn
                .prepare_cached(
                    "SELECT CAST(total(l.imported_visits) AS INTEGER) FROM links l \
                     WHERE l.deleted_at IS NULL AND (?1 IS NULL OR l.owner = ?1) \
                     AND (?2 IS NULL OR l.domain = ?2)",
                )?
                .query_row(rusqlite::params![owner, domain], |r| r.get::<_, i64>(0))?
                .max(0) as u64;
            Ok(counts)
        })
    }

    /// Every stored visit count of the live link `key`, in one snapshot.
    pub(super) fn visit_counts(&self, key: &LinkKey) -> rusqlite::Result<Option<VisitCounts>> {
        self.with_connection(|conn| {
            let Some(id) = find::id(conn, &self.book, key, Rows::Live)? else {
                return Ok(None);
            };
            let mut counts = counts_of(conn, id)?;
            counts.imported = conn
                .prepare_cached("SELECT imported_visits FROM links WHERE id = ?1")?
                .query_row([id], |r| r.get::<_, i64>(0))?
                .max(0) as u64;
            Ok(Some(counts))
        })
    }

    /// Every link and tombstone, oldest first, in one read snapshot.
    pub(super) fn export(
        &self,
        each: &mut dyn FnMut(Record) -> std::io::Result<()>,
    ) -> rusqlite::Result<Result<u64, std::io::Error>> {
        self.with_connection(|conn| {
            let mut stmt = conn.prepare(
                "SELECT l.code, l.target, l.created_at, l.expires_at, u.name, l.deleted_at, \
                 l.max_visits, l.visits, d.host, l.id, l.password, l.rules, l.expired_url, \
                 l.title, l.tags, l.imported_visits, \
                 l.visits > 0 OR EXISTS (SELECT 1 FROM visits_hourly WHERE link = l.id) \
                 FROM links l LEFT JOIN users u ON u.id = l.owner \
                 JOIN domains d ON d.id = l.domain ORDER BY l.id",
            )?;
            let mut rows = stmt.query([])?;
            let mut n = 0;
            let stamp = |ms: Option<i64>| ms.map(|ms| Timestamp::from_millis(ms).to_string());
            while let Some(r) = rows.next()? {
                let deleted_at: Option<i64> = r.get(5)?;
                let record = Record {
                    domain: r.get(8)?,
                    code: r.get(0)?,
                    url: if deleted_at.is_some() {
                        None
                    } else {
                        Some(r.get(1)?)
                    },
                    created_at: Timestamp::from_millis(r.get(2)?).to_string(),
                    expires_at: stamp(r.get(3)?),
                    owner: r.get(4)?,
                    deleted_at: stamp(deleted_at),
                    max_visits: r.get::<_, Option<i64>>(6)?.map(|n| n.max(0) as u64),
                    visits: Some(r.get::<_, i64>(7)?.max(0) as u64),
                    imported_visits: Some(r.get::<_, i64>(15)?.max(0) as u64).filter(|n| *n > 0),
                    // One lookup a link that has any.
                    history: if r.get::<_, bool>(16)? {
                        crate::store::History::of(&counts_of(conn, r.get(9)?)?)
                    } else {
                        None
                    },
                    password_hash: r.get(10)?,
                    rules: r
                        .get_ref(11)?
                        .as_str_or_null()?
                        .and_then(|j| serde_json::from_str(j).ok()),
                    expired_url: r.get(12)?,
                    title: r.get(13)?,
                    tags: rows::tags_of(r.get_ref(14)?.as_str_or_null()?),
                };
                if let Err(e) = each(record) {
                    return Ok(Err(e));
                }
                n += 1;
            }
            Ok(Ok(n))
        })
    }

    pub(super) fn counts(&self) -> ReaderCounts {
        ReaderCounts {
            lookups: self.stats.lookups.load(Ordering::Relaxed),
            snapshots: self.stats.snapshots.load(Ordering::Relaxed),
            connections_opened: self.stats.opened.load(Ordering::Relaxed),
        }
    }

    /// What reader connections run with, once one has been opened.
    pub(super) fn applied(&self) -> Option<Applied> {
        self.stats.applied.get().cloned()
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = connection::open(&self.path, &self.settings, Role::Reader)?;
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        if self.stats.applied.get().is_none()
            && let Ok(applied) = connection::applied(&conn)
        {
            let _ = self.stats.applied.set(applied);
        }
        Ok(conn)
    }

    fn with_connection<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        match self.settings.connections {
            ConnectionMode::PerRequest => {
                let conn = self.open()?;
                f(&conn)
            }
            ConnectionMode::Pooled => {
                let epoch = self.epoch.current();
                let mut reader = self.checkout()?;
                let result = reader.run(epoch, &self.stats, f);
                self.checkin(reader);
                result
            }
        }
    }

    /// [`Self::with_connection`], never through an older snapshot.
    fn with_fresh_connection<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        if self.settings.connections == ConnectionMode::Pooled {
            let epoch = self.epoch.current();
            let mut reader = self.checkout()?;
            let result = reader
                .end()
                .and_then(|()| reader.run(epoch, &self.stats, f));
            self.checkin(reader);
            return result;
        }
        self.with_connection(f)
    }

    fn checkout(&self) -> rusqlite::Result<Reader> {
        let popped = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match popped {
            Some(reader) => Ok(reader),
            None => Ok(Reader {
                conn: self.open()?,
                snapshot: None,
            }),
        }
    }

    fn checkin(&self, mut reader: Reader) {
        // An idle connection must not hold on to a snapshot that a commit
        // has overtaken: it would keep the checkpointer from recycling the
        // WAL. A connection that cannot end its transaction is dropped.
        let keep_snapshot =
            self.reuse.load(Ordering::Acquire) && reader.is_current(self.epoch.current());
        if !keep_snapshot && reader.end().is_err() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(reader);
        }
    }

    /// Ends the snapshots of idle connections that are no longer current
    /// (all of them when `all`). The checkpointer calls this, so that a
    /// connection nobody has used since a commit does not pin old frames.
    pub(super) fn release_snapshots(&self, all: bool) {
        let epoch = self.epoch.current();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain_mut(|reader| (!all && reader.is_current(epoch)) || reader.end().is_ok());
    }

    /// Stops (or resumes) keeping snapshots across lookups.
    pub(super) fn set_reuse(&self, on: bool) {
        self.reuse.store(on, Ordering::Release);
    }

    /// Closes the idle connections; used at shutdown.
    pub(super) fn close(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The stored visit counts of the row `id`.
fn counts_of(conn: &Connection, id: i64) -> rusqlite::Result<VisitCounts> {
    read_counts(
        conn,
        [
            "SELECT hour, humans, bots, browsers FROM visits_hourly WHERE link = ?1 ORDER BY hour",
            "SELECT day, host, count FROM visits_referrers WHERE link = ?1",
            "SELECT day, dim, value, count FROM visits_facets WHERE link = ?1",
        ],
        [id],
    )
}

/// Visit counts from three queries with the same parameters: hours
/// (`hour, humans, bots, browsers`), referrers (`day, host, count`) and
/// facets (`day, dim, value, count`).
fn read_counts<P: rusqlite::Params + Copy>(
    conn: &Connection,
    [hours, referrers, facets]: [&str; 3],
    params: P,
) -> rusqlite::Result<VisitCounts> {
    let count = |r: &rusqlite::Row<'_>, i| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
    let hours = conn
        .prepare_cached(hours)?
        .query_map(params, |r| {
            Ok(HourCount {
                hour: r.get(0)?,
                humans: count(r, 1)?,
                bots: count(r, 2)?,
                browsers: count(r, 3)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let referrers = conn
        .prepare_cached(referrers)?
        .query_map(params, |r| {
            Ok((r.get(0)?, r.get::<_, String>(1)?.into(), count(r, 2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let dims = conn
        .prepare_cached(facets)?
        .query_map(params, |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                count(r, 3)?,
            ))
        })?
        .filter_map(|row| match row {
            // A dimension this build does not know (written by a later
            // one) is left out.
            Ok((day, dim, value, n)) => dim.parse().ok().map(|d| Ok((day, d, value, n))),
            Err(e) => Some(Err(e)),
        })
        .collect::<rusqlite::Result<_>>()?;
    Ok(VisitCounts {
        hours,
        referrers,
        dims,
        ..VisitCounts::default()
    })
}
