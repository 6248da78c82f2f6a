//! The `scale` experiment's data: `n` links written as the file
//! `litelink export` writes and loaded with `litelink import`, the bulk
//! path a user takes; once per size and run, and copied for each
//! configuration that serves it. The records carry no code, so each link
//! gets a generated one, as a create through the API would.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use rusqlite::OptionalExtension;

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

/// Writes `n` links to a JSON-lines file in `work`, imports them with
/// `exe import` into a new database there, and measures it.
pub fn load(exe: &Path, work: &Path, n: u64) -> anyhow::Result<Dataset> {
    let file = work.join(format!("scale-{n}.jsonl"));
    let db = work.join(format!("scale-{n}.db"));
    {
        let mut out = BufWriter::new(std::fs::File::create(&file)?);
        for i in 1..=n {
            writeln!(
                out,
                r#"{{"url":"https://example.com/scale/{i}","created_at":"2026-12-01T00:00:00Z"}}"#
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
