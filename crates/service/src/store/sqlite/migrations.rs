//! The schema, as an ordered list of migrations. `PRAGMA user_version` holds
//! how many have been applied; each runs in its own transaction, so a crash
//! mid-upgrade leaves the previous version intact.

use rusqlite::{Connection, Transaction};

use crate::domain::TargetUrl;

/// One step of the schema: SQL, or code for what SQL cannot do.
enum Migration {
    Sql(&'static str),
    Code(fn(&Transaction<'_>) -> rusqlite::Result<()>),
}

use Migration::{Code, Sql};

/// Each entry moves the schema from version `i` to `i + 1`. Never edit an
/// entry that has shipped: append a new one.
const MIGRATIONS: &[Migration] = &[
    // 1: links. `code` is UNIQUE so the database, not the application,
    // guarantees that no two links share a code and none is overwritten.
    Sql("CREATE TABLE links (
        id         INTEGER PRIMARY KEY,
        code       TEXT    NOT NULL UNIQUE,
        target     TEXT    NOT NULL,
        created_at INTEGER NOT NULL -- Unix time in milliseconds
    ) STRICT;"),
    // 2: link management. API keys (only a SHA-256 of each secret); links
    // gain an expiry, an owner, and a deletion time: a deleted link stays
    // as a tombstone so that its code is never issued again. The owner
    // index is partial: ownerless creates (the seed API) skip its upkeep;
    // so is the one that counts tombstones at start-up.
    Sql("CREATE TABLE keys (
        id           INTEGER PRIMARY KEY,
        name         TEXT    NOT NULL UNIQUE,
        hash         BLOB    NOT NULL UNIQUE,
        admin        INTEGER NOT NULL,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
    ) STRICT;
    ALTER TABLE links ADD COLUMN expires_at INTEGER;
    ALTER TABLE links ADD COLUMN owner INTEGER REFERENCES keys(id);
    ALTER TABLE links ADD COLUMN deleted_at INTEGER;
    CREATE INDEX links_owner ON links (owner, id) WHERE owner IS NOT NULL;
    CREATE INDEX links_deleted ON links (deleted_at) WHERE deleted_at IS NOT NULL;"),
    // 3: visits. Links gain their total of counted redirects and an
    // optional limit on it. Visits are stored as aggregates, never a row
    // per visit and never an address: per link and UTC hour the human and
    // bot counts, and how many of the humans came with a browser (the
    // rest are other agents); per link and UTC day the referrer hosts
    // (bounded: the rest as '(other)'; no referrer as '(direct)'). Keyed
    // by the link's id, which a delete clears them by.
    Sql(
        "ALTER TABLE links ADD COLUMN visits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE links ADD COLUMN max_visits INTEGER;
    CREATE TABLE visits_hourly (
        link   INTEGER NOT NULL,
        hour   INTEGER NOT NULL, -- hours since the Unix epoch, UTC
        humans   INTEGER NOT NULL,
        bots     INTEGER NOT NULL,
        browsers INTEGER NOT NULL,
        PRIMARY KEY (link, hour)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE visits_referrers (
        link  INTEGER NOT NULL,
        day   INTEGER NOT NULL, -- days since the Unix epoch, UTC
        host  TEXT    NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (link, day, host)
    ) STRICT, WITHOUT ROWID;",
    ),
    // 4: canonical targets. Earlier versions stored ASCII URLs as typed;
    // now the stored URL is the WHATWG serialization the parser validated,
    // so rows from before are rewritten to it.
    Code(canonicalize_targets),
];

fn canonicalize_targets(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let mut rewrite = Vec::new();
    {
        let mut rows = tx.prepare("SELECT id, target FROM links WHERE deleted_at IS NULL")?;
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            if let Some(canonical) = TargetUrl::canonical(row.get_ref(1)?.as_str()?) {
                rewrite.push((row.get::<_, i64>(0)?, canonical));
            }
        }
    }
    let mut update = tx.prepare("UPDATE links SET target = ?2 WHERE id = ?1")?;
    for (id, target) in &rewrite {
        update.execute((id, target))?;
    }
    if !rewrite.is_empty() {
        tracing::info!(
            rows = rewrite.len(),
            "rewrote stored targets to their canonical form"
        );
    }
    Ok(())
}

pub const LATEST: u32 = MIGRATIONS.len() as u32;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("database schema version {found} is newer than this litelink knows ({LATEST})")]
    TooNew { found: u32 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

pub fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// Brings the schema up to [`LATEST`]; returns the version it found.
pub fn migrate(conn: &mut Connection) -> Result<u32, MigrationError> {
    let found = version(conn)?;
    if found > LATEST {
        return Err(MigrationError::TooNew { found });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        match step {
            Sql(sql) => tx.execute_batch(sql)?,
            Code(run) => run(&tx)?,
        }
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
        tx.commit()?;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_a_new_database_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("m.db")).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), 0);
        assert_eq!(version(&conn).unwrap(), LATEST);
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
    }

    #[test]
    fn rewrites_targets_to_their_canonical_form() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("m.db")).unwrap();
        conn.pragma_update(None, "user_version", 0).unwrap();
        // Up to schema 3, then rows as an older release stored them.
        for (i, step) in MIGRATIONS.iter().enumerate().take(3) {
            let Sql(sql) = step else {
                panic!("step {i} is SQL")
            };
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        for (code, target) in [
            ("aaa", "https://example.com"),
            ("bbb", "http:\\\\evil.com"),
            ("ccc", "https://example.com/kept"),
        ] {
            conn.execute(
                "INSERT INTO links (code, target, created_at) VALUES (?1, ?2, 0)",
                (code, target),
            )
            .unwrap();
        }
        assert_eq!(migrate(&mut conn).unwrap(), 3);
        let stored: Vec<String> = conn
            .prepare("SELECT target FROM links ORDER BY code")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            stored,
            [
                "https://example.com/",
                "http://evil.com/",
                "https://example.com/kept"
            ]
        );
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("m.db")).unwrap();
        conn.pragma_update(None, "user_version", LATEST + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(MigrationError::TooNew { .. })
        ));
    }
}
