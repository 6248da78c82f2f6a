//! The PostgreSQL schema, as an ordered list of migrations, applied at
//! start-up under an advisory lock: when several instances start at once,
//! one runs them and the others wait for it, then find nothing to do.

use tokio_postgres::Client;

/// Each entry moves the schema from version `i` to `i + 1`, in one
/// transaction with the version bump. Never edit an entry that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: the whole of SQLite's schema 5 in one step, except that every
    // code is in the unique index: with several instances writing, the
    // database, not a single writer, must decide who gets a code. Times
    // are Unix milliseconds, as in SQLite.
    "CREATE TABLE keys (
        id           BIGSERIAL PRIMARY KEY,
        name         TEXT    NOT NULL UNIQUE,
        hash         BYTEA   NOT NULL UNIQUE,
        admin        BOOLEAN NOT NULL,
        created_at   BIGINT  NOT NULL,
        last_used_at BIGINT,
        revoked_at   BIGINT
    );
    CREATE TABLE links (
        id         BIGSERIAL PRIMARY KEY,
        code       TEXT    NOT NULL UNIQUE,
        target     TEXT    NOT NULL,
        created_at BIGINT  NOT NULL,
        expires_at BIGINT,
        owner      BIGINT REFERENCES keys (id),
        deleted_at BIGINT,
        visits     BIGINT  NOT NULL DEFAULT 0,
        max_visits BIGINT
    );
    CREATE INDEX links_owner ON links (owner, id) WHERE owner IS NOT NULL;
    CREATE TABLE visits_hourly (
        link     BIGINT NOT NULL,
        hour     BIGINT NOT NULL,
        humans   BIGINT NOT NULL,
        bots     BIGINT NOT NULL,
        browsers BIGINT NOT NULL,
        PRIMARY KEY (link, hour)
    );
    CREATE TABLE visits_referrers (
        link  BIGINT NOT NULL,
        day   BIGINT NOT NULL,
        host  TEXT   NOT NULL,
        count BIGINT NOT NULL,
        PRIMARY KEY (link, day, host)
    );
    -- The number of live links, kept by every write that changes it, so
    -- that no instance counts the table; in 64 rows, each connection
    -- adding to its own (by backend pid), so that concurrent writes do not
    -- queue on one row lock. The count is their sum.
    CREATE TABLE litelink_counts (
        shard      INTEGER PRIMARY KEY,
        live_links BIGINT  NOT NULL
    );
    INSERT INTO litelink_counts (shard, live_links)
        SELECT shard, 0 FROM generate_series(0, 63) AS shard;",
];

pub const LATEST: i32 = MIGRATIONS.len() as i32;

/// Any constant: the lock's key among the database's advisory locks.
const LOCK: i64 = 0x6c69_7465_6c69_6e6b; // "litelink"

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("database schema version {found} is newer than this litelink knows ({LATEST})")]
    TooNew { found: i32 },
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
}

/// Brings the schema up to [`LATEST`]; returns the version it found.
pub async fn migrate(client: &mut Client) -> Result<i32, MigrationError> {
    let tx = client.transaction().await?;
    // Held until the transaction ends: other instances wait here.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS litelink_schema (version INTEGER NOT NULL);
         INSERT INTO litelink_schema (version)
             SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM litelink_schema);",
    )
    .await?;
    let found: i32 = tx
        .query_one("SELECT version FROM litelink_schema", &[])
        .await?
        .get(0);
    if found > LATEST {
        return Err(MigrationError::TooNew { found });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "UPDATE litelink_schema SET version = $1",
            &[&(i as i32 + 1)],
        )
        .await?;
    }
    tx.commit().await?;
    if found < LATEST {
        tracing::info!(from = found, to = LATEST, "migrated the PostgreSQL schema");
    }
    Ok(found)
}
