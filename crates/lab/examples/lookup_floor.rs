//! What a lookup by row id costs SQLite itself, without HTTP: the floor
//! under the `scale` experiment's uncached reads (docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p litelink-lab --example lookup_floor -- DB [DB...] [--page-size N]
//! ```
//!
//! For each database (a litelink database of schema 5 or later, which the
//! example only reads; with `--page-size`, a `VACUUM INTO` copy beside it
//! with that page size): the server's own lookup statement, run 1,000,000
//! times over 100,000 evenly spaced rows in random order after 300,000 of
//! warm-up, in one read transaction on one thread pinned to CPU 0, with
//! memory mapping off and at 2 GiB.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use rusqlite::{Connection, OpenFlags};

const SAMPLE: i64 = 100_000;
const WARMUP: usize = 300_000;
const LOOKUPS: usize = 1_000_000;
/// SQLite's cap (`SQLITE_MAX_MMAP_SIZE` of the bundled build).
const MMAP_MAX: i64 = 0x7fff_0000;
/// What `store/sqlite/readers.rs` runs for a redirect.
const LOOKUP: &str = "SELECT target, expires_at, max_visits FROM links l \
                      WHERE l.id = ?1 AND l.code = ?2 AND l.deleted_at IS NULL";

fn main() -> anyhow::Result<()> {
    let mut dbs = Vec::new();
    let mut page_size = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--page-size" {
            page_size = Some(args.next().context("--page-size N")?.parse::<u32>()?);
        } else {
            dbs.push(PathBuf::from(a));
        }
    }
    anyhow::ensure!(
        !dbs.is_empty(),
        "usage: lookup_floor DB [DB...] [--page-size N]"
    );
    litelink_lab::process::pin_current_thread(0)?;
    for db in dbs {
        let db = match page_size {
            Some(n) => copy_with_page_size(&db, n)?,
            None => db,
        };
        for mmap in [0, MMAP_MAX] {
            let ns = measure(&db, mmap)?;
            println!("{}: mmap_size {mmap}: {ns:.0} ns a lookup", db.display());
        }
    }
    Ok(())
}

fn copy_with_page_size(db: &Path, page_size: u32) -> anyhow::Result<PathBuf> {
    let to = db.with_extension(format!("p{page_size}.db"));
    let _ = std::fs::remove_file(&to);
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.pragma_update(None, "page_size", page_size)?;
    conn.execute("VACUUM INTO ?1", [to.to_string_lossy()])?;
    Ok(to)
}

fn measure(db: &Path, mmap: i64) -> anyhow::Result<f64> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.pragma_update(None, "mmap_size", mmap)?;
    let rows: i64 = conn.query_row("SELECT coalesce(max(id), 0) FROM links", [], |r| r.get(0))?;
    let every = (rows / SAMPLE).max(1);
    let mut sample = Vec::new();
    {
        let mut code = conn.prepare("SELECT code FROM links WHERE id = ?1")?;
        for id in (every..=rows).step_by(every as usize) {
            sample.push((id, code.query_row([id], |r| r.get::<_, String>(0))?));
        }
    }
    anyhow::ensure!(!sample.is_empty(), "{} has no links", db.display());
    conn.execute_batch("BEGIN")?;
    let mut stmt = conn.prepare(LOOKUP)?;
    // xorshift: the order is random but the same for every database.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut run = |n: usize| -> anyhow::Result<usize> {
        let mut bytes = 0;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (id, code) = &sample[(x % sample.len() as u64) as usize];
            bytes += stmt.query_row((id, code), |r| Ok(r.get_ref(0)?.as_str()?.len()))?;
        }
        Ok(bytes)
    };
    run(WARMUP)?;
    let started = Instant::now();
    let bytes = run(LOOKUPS)?;
    let ns = started.elapsed().as_nanos() as f64 / LOOKUPS as f64;
    // Every lookup found its row: a target is at least `https://x`.
    anyhow::ensure!(bytes >= LOOKUPS * 9, "lookups missed rows");
    Ok(ns)
}
