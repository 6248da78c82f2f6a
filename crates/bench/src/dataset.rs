//! The `scale` experiment's data: `n` links written as the file
//! `litelink export` writes and loaded with `litelink import`, the bulk
//! path a user takes; once per size and run, and copied for each
//! configuration that serves it.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// Read keys kept per size: an evenly spaced sample of the loaded codes
/// (which are scattered over the whole key space, so the sample is too).
const SAMPLE: u64 = 100_000;

/// Codes are `CODE_LEN` base-62 digits of `i * STRIDE mod 62^CODE_LEN`:
/// distinct for distinct `i` (the stride is prime to 62) and spread like
/// random codes, without a set to check collisions against.
const CODE_LEN: u32 = 10;
const STRIDE: u64 = 576_460_752_303_423_619; // a prime near 2^59

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

fn code(i: u64) -> String {
    let space = 62u64.pow(CODE_LEN);
    let mut x = ((i as u128 * STRIDE as u128) % space as u128) as u64;
    let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = [0u8; CODE_LEN as usize];
    for d in out.iter_mut().rev() {
        *d = digits[(x % 62) as usize];
        x /= 62;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes `n` links to a JSON-lines file in `work`, imports them with
/// `exe import` into a new database there, and measures it.
pub fn load(exe: &Path, work: &Path, n: u64) -> anyhow::Result<Dataset> {
    let file = work.join(format!("scale-{n}.jsonl"));
    let db = work.join(format!("scale-{n}.db"));
    let every = (n / SAMPLE).max(1);
    let mut sample = Vec::with_capacity((n / every) as usize + 1);
    {
        let mut out = BufWriter::new(std::fs::File::create(&file)?);
        for i in 1..=n {
            let c = code(i);
            writeln!(
                out,
                r#"{{"code":"{c}","url":"https://example.com/scale/{i}","created_at":"2026-12-01T00:00:00Z"}}"#
            )?;
            if i % every == 0 {
                sample.push(c);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_look_random() {
        let codes: std::collections::HashSet<String> = (1..=100_000).map(code).collect();
        assert_eq!(codes.len(), 100_000);
        assert!(
            codes
                .iter()
                .all(|c| c.len() == 10 && c.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
        // Neighbours do not share a prefix, as creation-order codes would.
        assert_ne!(code(1)[..4], code(2)[..4]);
    }
}
