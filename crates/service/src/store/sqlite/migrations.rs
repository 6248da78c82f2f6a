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
    // 5: codes found by row id. Generated codes are now a keyed permutation
    // of the row id (domain/codebook.rs): a lookup decrypts the code and
    // reads the row by id, and a create appends. Only named codes (aliases,
    // imported codes, and the random codes of earlier versions) keep an
    // index, which is partial; `named` tells them apart. The table is
    // rebuilt because its UNIQUE on `code` cannot be dropped otherwise.
    // `meta` keeps the codebook's key (secret: it lists every code) and the
    // number of live links, so that start-up counts nothing. A row written
    // by hand (an operator's `sqlite3`) is named unless it says otherwise.
    Code(codes_by_row_id),
    // 6: short domains. Every link is on a domain; the default one is 0
    // and has no host here (it is configured). A named code is unique on
    // its domain, so the index leads with the code: a create's check that
    // a generated code is no domain's alias reads it too. Ids are never
    // reused (AUTOINCREMENT), so nothing cached under a removed domain is
    // ever found again. A key may be limited to one domain.
    Sql("CREATE TABLE domains (
        id                 INTEGER PRIMARY KEY AUTOINCREMENT,
        host               TEXT UNIQUE,
        root_redirect      TEXT,
        not_found_redirect TEXT,
        expired_redirect   TEXT
    ) STRICT;
    INSERT INTO domains (id, host) VALUES (0, NULL);
    ALTER TABLE links ADD COLUMN domain INTEGER NOT NULL DEFAULT 0;
    DROP INDEX links_named;
    CREATE UNIQUE INDEX links_named ON links (code, domain) WHERE named = 1;
    ALTER TABLE keys ADD COLUMN domain INTEGER;"),
    // 7: visits by country, city, device, OS and browser, per link and
    // UTC day (bounded per dimension as referrers are). `dim` is the
    // dimension's name; a city's value is `CC/City`.
    Sql("CREATE TABLE visits_facets (
        link  INTEGER NOT NULL,
        day   INTEGER NOT NULL,
        dim   TEXT    NOT NULL,
        value TEXT    NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (link, day, dim, value)
    ) STRICT, WITHOUT ROWID;"),
    // 8: link rules. A password (only its Argon2id hash, in PHC form),
    // targeted redirects (their JSON, as the API takes them) and where an
    // expired or exhausted link sends its visitors. NULL: none.
    Sql("ALTER TABLE links ADD COLUMN password TEXT;
    ALTER TABLE links ADD COLUMN rules TEXT;
    ALTER TABLE links ADD COLUMN expired_url TEXT;"),
    // 9: users. Keys and links belong to users, and a key acts with its
    // user's role (keys.admin is no longer read). Each key of before gets
    // a user whose id is the key's, so that the owners of links (which
    // held key ids) are now user ids, and `links.owner` refers to users.
    // `folded` makes names unique regardless of case. Ids are never
    // reused. A user signed in through OpenID Connect is found by
    // (issuer, subject).
    Code(users),
    // 10: signed-in sessions, kept only as a SHA-256 of their id, with the
    // role their user had when they began. The sign-in routes' names are
    // reserved from now on: links of before with those codes are logged.
    Code(sessions),
    // 11: sign-ins through OpenID Connect under way, kept in the store so
    // that the callback may reach any instance. The state and the
    // browser's flow cookie are kept as SHA-256 hashes.
    Sql("CREATE TABLE login_flows (
        state      BLOB    PRIMARY KEY,
        browser    BLOB    NOT NULL,
        nonce      TEXT    NOT NULL,
        verifier   TEXT    NOT NULL,
        created_at INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;"),
    // 12: titles and tags. A tag is kept once, in lower case (`folded`)
    // and as first written (`shown`). A link's row holds its tags as shown,
    // in order, joined by `|` (which no tag has), so that reading a link
    // joins nothing; `link_tags` is read by tag, for filters and counts.
    Sql("ALTER TABLE links ADD COLUMN title TEXT;
    ALTER TABLE links ADD COLUMN tags TEXT;
    CREATE TABLE tags (
        id     INTEGER PRIMARY KEY AUTOINCREMENT,
        folded TEXT    NOT NULL UNIQUE,
        shown  TEXT    NOT NULL
    ) STRICT;
    CREATE TABLE link_tags (
        tag  INTEGER NOT NULL,
        link INTEGER NOT NULL,
        PRIMARY KEY (tag, link)
    ) STRICT, WITHOUT ROWID;"),
    // 13: visits carried over from another shortener without a time:
    // counted in a report's total, never toward `max_visits`.
    Sql("ALTER TABLE links ADD COLUMN imported_visits INTEGER NOT NULL DEFAULT 0;"),
    // 14: the first 8 bytes of the SHA-256 of each live link's target,
    // indexed per domain, to find a link by its target (the YOURLS API's
    // duplicate check).
    Code(target_hashes),
    // 15: webhooks, and the outbox of their events: one row for each event
    // and webhook, written in the transaction of the change it reports,
    // and each delivery attempt (a webhook's last 100 are kept); live
    // links by expiry, for the scan that tells of those whose time ran out.
    Sql("CREATE TABLE webhooks (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        url             TEXT    NOT NULL,
        events          TEXT    NOT NULL, -- event types, comma-separated
        domain          INTEGER,          -- NULL: every domain
        enabled         INTEGER NOT NULL,
        created_at      INTEGER NOT NULL,
        secret          TEXT    NOT NULL, -- whsec_<base64>: it signs, so it is kept
        previous_secret TEXT,             -- the secret before a rotation,
        previous_until  INTEGER           -- which signs too until then
    ) STRICT;
    CREATE TABLE webhook_events (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        webhook      INTEGER NOT NULL,
        kind         TEXT    NOT NULL,
        domain       INTEGER NOT NULL,
        code         TEXT    NOT NULL,
        data         TEXT    NOT NULL, -- the link at the change, as JSON
        at           INTEGER NOT NULL,
        state        INTEGER NOT NULL DEFAULT 0, -- 0 pending, 1 delivered, 2 failed
        attempts     INTEGER NOT NULL DEFAULT 0,
        due          INTEGER NOT NULL,
        leased_until INTEGER NOT NULL DEFAULT 0
    ) STRICT;
    CREATE INDEX webhook_events_due ON webhook_events (due) WHERE state = 0;
    CREATE INDEX webhook_events_link ON webhook_events (webhook, domain, code, id)
        WHERE state = 0;
    CREATE INDEX webhook_events_webhook ON webhook_events (webhook, state);
    CREATE TABLE webhook_attempts (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        webhook     INTEGER NOT NULL,
        event       INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        status      INTEGER, -- NULL: no answer
        duration_ms INTEGER NOT NULL,
        error       TEXT
    ) STRICT;
    CREATE INDEX webhook_attempts_webhook ON webhook_attempts (webhook, id);
    CREATE INDEX webhook_attempts_event ON webhook_attempts (event);
    CREATE INDEX links_expiring ON links (expires_at)
        WHERE expires_at IS NOT NULL AND deleted_at IS NULL;"),
    // 16: a link's visits from one flush are one outbox row of many
    // messages: how many it holds, and how many are behind it (delivered
    // or dropped), so that a retry resumes after them.
    Sql(
        "ALTER TABLE webhook_events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE webhook_events ADD COLUMN done INTEGER NOT NULL DEFAULT 0;",
    ),
    // 17: a user who signed in through the identity provider with no role
    // is suspended until a sign-in with a role, or an admin, lifts it.
    Sql("ALTER TABLE users ADD COLUMN suspended_at INTEGER;"),
];

fn sessions(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE sessions (
            hash       BLOB    PRIMARY KEY,
            user_id    INTEGER NOT NULL,
            role       TEXT    NOT NULL,
            created_at INTEGER NOT NULL,
            seen_at    INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID;
        CREATE INDEX sessions_user ON sessions (user_id);",
    )?;
    let mut hidden = tx.prepare(
        "SELECT l.code, d.host FROM links l JOIN domains d ON d.id = l.domain \
         WHERE l.deleted_at IS NULL AND l.code IN ('account', 'auth', 'logout')",
    )?;
    let mut rows = hidden.query([])?;
    while let Some(row) = rows.next()? {
        let code: String = row.get(0)?;
        let host: Option<String> = row.get(1)?;
        tracing::warn!(
            code,
            domain = host.as_deref().unwrap_or(crate::domain::DEFAULT_NAME),
            "this link's code is now a route of litelink's own, which hides it: give it an alias"
        );
    }
    Ok(())
}

fn users(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE users (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            name        TEXT    NOT NULL,
            folded      TEXT    NOT NULL UNIQUE,
            email       TEXT,
            role        TEXT    NOT NULL,
            domain      INTEGER,
            password    TEXT,    -- Argon2id, PHC form
            must_change INTEGER NOT NULL DEFAULT 0,
            issuer      TEXT,
            subject     TEXT,
            disabled_at INTEGER,
            created_at  INTEGER NOT NULL
        ) STRICT;
        CREATE UNIQUE INDEX users_oidc ON users (issuer, subject) WHERE issuer IS NOT NULL;
        ALTER TABLE keys ADD COLUMN user_id INTEGER REFERENCES users(id);",
    )?;
    let keys: Vec<(i64, String, bool, Option<i64>, i64)> = tx
        .prepare("SELECT id, name, admin, domain, created_at FROM keys ORDER BY id")?
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let named: Vec<(i64, String, bool)> = keys
        .iter()
        .map(|(id, name, admin, ..)| (*id, name.clone(), *admin))
        .collect();
    let mut insert = tx.prepare(
        "INSERT INTO users (id, name, folded, role, domain, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (user, (_, _, _, domain, created_at)) in crate::domain::user::users_for_keys(&named)
        .iter()
        .zip(&keys)
    {
        insert.execute((
            user.id,
            &user.name,
            crate::domain::user::fold_name(&user.name),
            user.role.as_str(),
            domain,
            created_at,
        ))?;
    }
    tx.execute("UPDATE keys SET user_id = id", [])?;
    owners_are_users(tx)?;
    if !keys.is_empty() {
        tracing::info!(
            users = keys.len(),
            "each API key now belongs to a user of its name"
        );
    }
    Ok(())
}

fn codes_by_row_id(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    // The sort that builds the code index gets room to work in memory
    // (256 MiB at most); the writer's own setting comes back afterwards.
    let cache: i64 = tx.pragma_query_value(None, "cache_size", |r| r.get(0))?;
    tx.pragma_update(None, "cache_size", -256 * 1024)?;
    let started = std::time::Instant::now();
    let rows: i64 = tx.query_row("SELECT coalesce(max(id), 0) FROM links", [], |r| r.get(0))?;
    if rows > 0 {
        tracing::info!(rows, "rebuilding the links table (schema 5)");
    }
    let rebuilt = tx.execute_batch(
        "CREATE TABLE links_v5 (
            id         INTEGER PRIMARY KEY,
            code       TEXT    NOT NULL,
            target     TEXT    NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER,
            owner      INTEGER REFERENCES keys(id),
            deleted_at INTEGER,
            visits     INTEGER NOT NULL DEFAULT 0,
            max_visits INTEGER,
            named      INTEGER NOT NULL DEFAULT 1 -- 0: the code is FF1 of the id
        ) STRICT;
        INSERT INTO links_v5 (id, code, target, created_at, expires_at, owner, deleted_at,
                              visits, max_visits, named)
            SELECT id, code, target, created_at, expires_at, owner, deleted_at,
                   visits, max_visits, 1
            FROM links ORDER BY id;
        DROP TABLE links;
        ALTER TABLE links_v5 RENAME TO links;
        CREATE UNIQUE INDEX links_named ON links (code) WHERE named = 1;
        CREATE INDEX links_owner ON links (owner, id) WHERE owner IS NOT NULL;
        CREATE INDEX links_deleted ON links (deleted_at) WHERE deleted_at IS NOT NULL;
        CREATE TABLE meta (
            name  TEXT PRIMARY KEY,
            value ANY
        ) STRICT;
        INSERT INTO meta (name, value)
            SELECT 'live_links', count(*) FROM links WHERE deleted_at IS NULL;",
    );
    tx.pragma_update(None, "cache_size", cache)?;
    rebuilt?;
    let key: [u8; 16] = rand::random();
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('code_key', ?1)",
        [&key[..]],
    )?;
    if rows > 0 {
        tracing::info!(
            rows,
            ms = started.elapsed().as_millis() as u64,
            "rebuilt the links table: generated codes are found by row id from now on"
        );
    }
    Ok(())
}

/// The codebook's key, made by migration 5.
pub(crate) fn code_key(conn: &Connection) -> rusqlite::Result<crate::domain::CodeKey> {
    let key: Vec<u8> =
        conn.query_row("SELECT value FROM meta WHERE name = 'code_key'", [], |r| {
            r.get(0)
        })?;
    key.try_into().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Blob,
            "the code key is 16 bytes".into(),
        )
    })
}

fn target_hashes(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch("ALTER TABLE links ADD COLUMN target_hash INTEGER;")?;
    let mut hashed = Vec::new();
    {
        let mut rows = tx.prepare("SELECT id, target FROM links WHERE deleted_at IS NULL")?;
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            let target = row.get_ref(1)?.as_str()?;
            hashed.push((row.get::<_, i64>(0)?, super::rows::target_key(target)));
        }
    }
    let mut update = tx.prepare("UPDATE links SET target_hash = ?2 WHERE id = ?1")?;
    for (id, hash) in &hashed {
        update.execute((id, hash))?;
    }
    tx.execute_batch(
        "CREATE INDEX links_target_hash ON links (domain, target_hash) \
         WHERE deleted_at IS NULL;",
    )
}

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

/// Points `links.owner`'s foreign key at `users` instead of `keys`. SQLite
/// cannot alter a constraint, and the table (millions of rows) need not be
/// copied for it: a change of a foreign key's target leaves the stored
/// rows as they are, so the schema's text is edited in place, as SQLite's
/// documentation of ALTER TABLE describes for such changes.
fn owners_are_users(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let version: i64 = tx.pragma_query_value(None, "schema_version", |r| r.get(0))?;
    tx.pragma_update(None, "writable_schema", true)?;
    let edited = tx.execute(
        "UPDATE sqlite_schema SET sql = replace(sql, 'REFERENCES keys(id)', 'REFERENCES users(id)') \
         WHERE type = 'table' AND name = 'links' AND sql LIKE '%REFERENCES keys(id)%'",
        [],
    );
    tx.pragma_update(None, "writable_schema", false)?;
    if edited? != 1 {
        return Err(failed(
            "the links table's owner does not refer to keys(id)".into(),
        ));
    }
    tx.pragma_update(None, "schema_version", version + 1)?;
    let check: String = tx.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(failed(format!(
            "the schema after pointing owners at users: {check}"
        )));
    }
    Ok(())
}

fn failed(why: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        Some(why),
    )
}

pub const LATEST: u32 = MIGRATIONS.len() as u32;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("database schema version {found} is newer than this litelink knows ({LATEST})")]
    TooNew { found: u32 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

pub(crate) fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// Brings the schema up to [`LATEST`]; returns the version it found.
pub(crate) fn migrate(conn: &mut Connection) -> Result<u32, MigrationError> {
    migrate_to(conn, LATEST)
}

/// Brings the schema up to `target` (tests make older databases with it).
pub fn migrate_to(conn: &mut Connection, target: u32) -> Result<u32, MigrationError> {
    let found = version(conn)?;
    if found > LATEST {
        return Err(MigrationError::TooNew { found });
    }
    let steps = target.saturating_sub(found) as usize;
    if found > 0 && steps > 0 {
        tracing::info!(from = found, to = target, "migrating the database schema");
    }
    for (i, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(found as usize)
        .take(steps)
    {
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
    fn live_links_get_their_targets_hash_and_are_found_by_it_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("m.db")).unwrap();
        migrate_to(&mut conn, 13).unwrap();
        conn.execute_batch(
            "INSERT INTO links (code, target, created_at) VALUES ('aaa', 'https://example.com/a', 0);
             INSERT INTO links (code, target, created_at, deleted_at) VALUES ('bbb', '', 0, 1);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let hashes: Vec<Option<i64>> = conn
            .prepare("SELECT target_hash FROM links ORDER BY code")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let want = super::super::rows::target_key("https://example.com/a");
        assert_eq!(hashes, [Some(want), None]);
        let plan: Vec<String> = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                super::super::readers::links_to_sql()
            ))
            .unwrap()
            .query_map(rusqlite::params![0, 0i64, "x", 1], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|p| p.contains("USING INDEX links_target_hash")),
            "{plan:?}"
        );
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
