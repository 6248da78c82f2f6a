//! How a code finds its row (schema 5). A generated code decrypts to its
//! row id (domain/codebook.rs), so it is found by the table's own B-tree;
//! a named code (an alias, an imported code, a random code from before
//! schema 5) through the partial index `links_named`. A code is tried
//! both ways: first by the id it decrypts to, if it decrypts at all, and
//! that row must have this very code, or it is another link's row.

use rusqlite::{Connection, OptionalExtension, Params, Row};

use crate::domain::{Codebook, LinkKey, ShortCode};

/// Which rows a lookup may find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rows {
    /// Live links only.
    Live,
}

impl Rows {
    fn filter(self) -> &'static str {
        match self {
            Rows::Live => " AND l.deleted_at IS NULL",
        }
    }
}

/// The two statements that find a row by its code on a domain: by the id
/// it decrypts to (`?1` the id, `?2` the code, `?3` the domain), and by
/// the named-code index (`?1` the code, `?2` the domain). A generated code
/// is on one domain only: on another, the same code can only be an alias.
pub(super) struct Statements<S> {
    pub by_id: S,
    pub by_name: S,
}

/// [`Statements`] selecting `columns` from `from`, which names the links
/// table `l`.
pub(super) fn statements(columns: &str, from: &str, rows: Rows) -> Statements<String> {
    let filter = rows.filter();
    Statements {
        by_id: format!(
            "SELECT {columns} FROM {from} WHERE l.id = ?1 AND l.code = ?2 AND l.domain = ?3{filter}"
        ),
        by_name: format!(
            "SELECT {columns} FROM {from} WHERE l.code = ?1 AND l.domain = ?2 AND l.named = 1{filter}"
        ),
    }
}

/// The first row of `key` that `sql` finds, mapped with `map`.
pub(super) fn by_code<T, S: AsRef<str>>(
    conn: &Connection,
    book: &Codebook,
    key: &LinkKey,
    sql: &Statements<S>,
    map: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    by_code_with_id(conn, book.id_of(key.code.as_str()), key, sql, map)
}

/// [`by_code`] for a code already decrypted to `id` (`book.id_of(code)`).
pub(super) fn by_code_with_id<T, S: AsRef<str>>(
    conn: &Connection,
    id: Option<u64>,
    key: &LinkKey,
    sql: &Statements<S>,
    map: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    let (code, domain) = (key.code.as_str(), key.domain.0);
    if let Some(id) = id.and_then(|id| i64::try_from(id).ok()) {
        let found = query(conn, sql.by_id.as_ref(), (id, code, domain), &map)?;
        if found.is_some() {
            return Ok(found);
        }
    }
    query(conn, sql.by_name.as_ref(), (code, domain), &map)
}

/// The row id of `key`.
pub(super) fn id(
    conn: &Connection,
    book: &Codebook,
    key: &LinkKey,
    rows: Rows,
) -> rusqlite::Result<Option<i64>> {
    let sql = match rows {
        Rows::Live => &ID_LIVE,
    };
    by_code(conn, book, key, sql, |r| r.get(0))
}

/// The row of a code, live or deleted: its id, target, and whether it is
/// deleted.
pub(super) const ROW_ANY: Statements<&str> = Statements {
    by_id: "SELECT l.id, l.target, l.deleted_at IS NOT NULL FROM links l \
            WHERE l.id = ?1 AND l.code = ?2 AND l.domain = ?3",
    by_name: "SELECT l.id, l.target, l.deleted_at IS NOT NULL FROM links l \
              WHERE l.code = ?1 AND l.domain = ?2 AND l.named = 1",
};

pub(super) const ID_LIVE: Statements<&str> = Statements {
    by_id: "SELECT l.id FROM links l WHERE l.id = ?1 AND l.code = ?2 AND l.domain = ?3 \
            AND l.deleted_at IS NULL",
    by_name: "SELECT l.id FROM links l WHERE l.code = ?1 AND l.domain = ?2 AND l.named = 1 \
              AND l.deleted_at IS NULL",
};

fn query<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    map: &impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    conn.prepare_cached(sql)?.query_row(params, map).optional()
}

/// The id the next row gets: one past the highest ever stored. Rows are
/// never removed (a delete keeps a tombstone), so no id, and so no
/// generated code, is ever issued twice.
pub(super) fn next_id(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT coalesce(max(id), 0) + 1 FROM links")?
        .query_row([], |r| r.get(0))
}

/// Whether a generated row (live or a tombstone) on `key`'s domain has
/// its code: a named code there must not take it.
pub(super) fn generated_taken(
    conn: &Connection,
    book: &Codebook,
    key: &LinkKey,
) -> rusqlite::Result<bool> {
    let code = key.code.as_str();
    let Some(id) = book.id_of(code).and_then(|id| i64::try_from(id).ok()) else {
        return Ok(false);
    };
    conn.prepare_cached("SELECT 1 FROM links WHERE id = ?1 AND code = ?2 AND domain = ?3")?
        .query_row((id, code, key.domain.0), |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// [`generated_taken`] with the id already worked out (`None`: no id has
/// `code`); an id at or past `next_id` has no row yet.
pub(super) fn generated_id_taken(
    conn: &Connection,
    id: Option<u64>,
    next_id: i64,
    key: &LinkKey,
) -> rusqlite::Result<bool> {
    let code = key.code.as_str();
    let Some(id) = id
        .and_then(|id| i64::try_from(id).ok())
        .filter(|&id| id < next_id)
    else {
        return Ok(false);
    };
    conn.prepare_cached("SELECT 1 FROM links WHERE id = ?1 AND code = ?2 AND domain = ?3")?
        .query_row((id, code, key.domain.0), |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Whether a named row (live or a tombstone) on any domain has `code`: a
/// generated code never takes one, so that it is one domain's alone.
pub(super) fn named_taken(conn: &Connection, code: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM links WHERE code = ?1 AND named = 1")?
        .query_row([code], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// A row id and its generated code, for a new row.
pub(super) struct Fresh {
    pub id: i64,
    pub code: ShortCode,
}

/// The next free id and its code, from `*next_id` on. An id whose code is
/// a reserved word, or a named code already, is skipped for good (it never
/// gets a row); each skip for a named code counts in `collisions`. `None`
/// after `attempts` skips in a row: the ids have outgrown the code length.
pub(super) fn fresh(
    conn: &Connection,
    book: &Codebook,
    next_id: &mut i64,
    attempts: u32,
    collisions: &mut u64,
) -> rusqlite::Result<Option<Fresh>> {
    for _ in 0..attempts {
        let id = *next_id;
        *next_id += 1;
        let Some(code) = u64::try_from(id).ok().and_then(|id| book.code_of(id)) else {
            continue;
        };
        if named_taken(conn, code.as_str())? {
            *collisions += 1;
            continue;
        }
        return Ok(Some(Fresh { id, code }));
    }
    Ok(None)
}
