//! The `scale` experiment's data: `n` links written as the file
//! `litelink export` writes and loaded with `litelink import`, the bulk
//! path a user takes; once per size, kind and run, and copied for each
//! configuration that serves it. Records without a code get generated
//! ones, as creates through the API would; named records carry codes of
//! 10 characters that look random, as an import from another shortener
//! does.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use rusqlite::OptionalExtension;

use crate::experiments::Preload;

/// Read keys kept per size: the codes of evenly spaced rows, from the
/// first link loaded to the last.
const SAMPLE: u64 = 100_000;

/// A loaded database and what it cost.
pub struct Dataset {
    pub links: u64,
    pub db: PathBuf,
    pub import_seconds: f64,
    /// Codes to read, sampled over the whole set.
    pub sample: Vec<String>,
    pub file_bytes: u64,
    /// Bytes of each table and index (SQLite's `dbstat`), largest first.
    pub objects: Vec<(String, u64)>,
}

/// Writes the links of `preload` to a JSON-lines file in `work`, imports
/// them with `exe import` into a new database there, and measures it.
pub fn load(exe: &Path, work: &Path, preload: Preload) -> anyhow::Result<Dataset> {
    let n = preload.links;
    let kind = if preload.named { "-named" } else { "" };
    let file = work.join(format!("scale-{n}{kind}.jsonl"));
    let db = work.join(format!("scale-{n}{kind}.db"));
    {
        let mut out = BufWriter::new(std::fs::File::create(&file)?);
        for i in 1..=n {
            let code = if preload.named {
                format!(r#""code":"{}","#, named_code(i))
            } else {
                String::new()
            };
            writeln!(
                out,
                r#"{{{code}"url":"https://example.com/scale/{i}","created_at":"2026-12-01T00:00:00Z"}}"#
            )?;
        }
        out.flush()?;
    }
    let started = Instant::now();
    let run = Command::new(exe)
        .arg("import")
        .arg("--db")
        .arg(&db)
        .arg(&file)
        .output()
        .with_context(|| format!("running {} import", exe.display()))?;
    let import_seconds = started.elapsed().as_secs_f64();
    if !run.status.success() {
        bail!(
            "import of {n} links failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    std::fs::remove_file(&file)?;
    let sample = sample(&db, n)?;
    let (file_bytes, objects) = space(&db)?;
    Ok(Dataset {
        links: n,
        db,
        import_seconds,
        sample,
        file_bytes,
        objects,
    })
}

/// The named code of record `i`: 10 characters of `[0-9A-Za-z]`, from `i`
/// times an odd number not divisible by 31, modulo 62^10: different for
/// every `i` (the multiplication is a bijection), and with no order or
/// common prefix that SQLite's B-tree could take advantage of.
fn named_code(i: u64) -> String {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    const SPACE: u128 = 839_299_365_868_340_224; // 62^10
    let mut x = (u128::from(i) * 0x9E37_79B9_7F4A_7C15) % SPACE;
    let mut code = [0u8; 10];
    for c in code.iter_mut().rev() {
        *c = ALPHABET[(x % 62) as usize];
        x /= 62;
    }
    String::from_utf8_lossy(&code).into_owned()
}

/// The codes of every `n / SAMPLE`-th row.
fn sample(db: &Path, n: u64) -> anyhow::Result<Vec<String>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare("SELECT code FROM links WHERE id = ?1")?;
    let every = (n / SAMPLE).max(1);
    let mut codes = Vec::with_capacity((n / every) as usize);
    for id in (every..=n).step_by(every as usize) {
        if let Some(code) = stmt
            .query_row([id as i64], |r| r.get::<_, String>(0))
            .optional()?
        {
            codes.push(code);
        }
    }
    if codes.len() as u64 != n / every {
        bail!(
            "{} of {} sampled rows are missing",
            n / every - codes.len() as u64,
            n / every
        );
    }
    Ok(codes)
}

/// The database file's size and what each table and index takes of it.
fn space(db: &Path) -> anyhow::Result<(u64, Vec<(String, u64)>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt =
        conn.prepare("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")?;
    let objects = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok((std::fs::metadata(db)?.len(), objects))
}

impl Dataset {
    /// A copy of the loaded database at `to`, for one server.
    pub fn copy_to(&self, to: &Path) -> anyhow::Result<()> {
        std::fs::copy(&self.db, to)
            .with_context(|| format!("copying {} to {}", self.db.display(), to.display()))?;
        Ok(())
    }
}
