//! `litelink doctor` on a SQLite file: SQLite's build facts, a check of
//! the database, and how long a durable sync takes on the disk that holds
//! it.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::{SqliteSettings, build_info, memstatus, migrations};

/// Prints a report and returns whether everything is in order.
pub(crate) fn run(db: &Path, settings: &SqliteSettings, full: bool) -> anyhow::Result<bool> {
    memstatus::configure(settings.memstatus)?;
    let mut ok = true;
    println!("SQLite version:     {}", build_info::sqlite_version());
    if !db.exists() {
        println!("database:           {} does not exist", db.display());
        return Ok(false);
    }
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let options = build_info::compile_options(&conn)?;
    println!("compile options:    {}", options.join(" "));
    let built_off = options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0");
    println!(
        "MEMSTATUS:          {} in this process (build default: {})",
        if memstatus::active() { "on" } else { "off" },
        if built_off {
            "off, DEFAULT_MEMSTATUS=0"
        } else {
            "on, SQLite's default"
        },
    );
    if !built_off {
        println!(
            "  warning: built without SQLITE_DEFAULT_MEMSTATUS=0; is .cargo/config.toml in place?"
        );
    }
    let version = migrations::version(&conn)?;
    let schema_note = match version.cmp(&migrations::LATEST) {
        std::cmp::Ordering::Equal => "current".to_owned(),
        std::cmp::Ordering::Less => "older; `litelink serve` migrates it".to_owned(),
        std::cmp::Ordering::Greater => {
            ok = false;
            "NEWER than this litelink: upgrade litelink".to_owned()
        }
    };
    println!(
        "schema version:     {version} of {} ({schema_note})",
        migrations::LATEST
    );
    let journal: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
    println!("journal mode:       {journal}");
    if version >= 2 {
        let (live, deleted): (i64, i64) = conn.query_row(
            "SELECT count(*) FILTER (WHERE deleted_at IS NULL), count(deleted_at) FROM links",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let keys: i64 = conn.query_row("SELECT count(*) FROM keys", [], |r| r.get(0))?;
        println!("links:              {live} (and {deleted} deleted codes kept as tombstones)");
        println!("API keys:           {keys}");
    } else if version >= 1 {
        let links: i64 = conn.query_row("SELECT count(*) FROM links", [], |r| r.get(0))?;
        println!("links:              {links}");
    }
    let check = if full {
        "integrity_check"
    } else {
        "quick_check"
    };
    let mut stmt = conn.prepare(&format!("PRAGMA {check}"))?;
    let problems: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let label = if full {
        "integrity check:    "
    } else {
        "quick check:        "
    };
    if problems == ["ok"] {
        println!(
            "{label}ok{}",
            if full {
                ""
            } else {
                " (--full: integrity_check)"
            }
        );
    } else {
        ok = false;
        println!("{label}FAILED: the database is corrupt");
        for p in problems.iter().take(20) {
            println!("  {p}");
        }
    }
    match writable(db) {
        Ok(()) => println!("writable:           yes"),
        Err(why) => {
            ok = false;
            println!("writable:           NO: {why}; `litelink serve` refuses to start on it");
        }
    }
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match probe_sync(dir) {
        Ok(p) => {
            println!(
                "disk sync:          {} KiB written + fdatasync in {}: median {:.2} ms, p90 {:.2} ms ({} runs)",
                PROBE_BYTES / 1024,
                dir.display(),
                ms(p.median),
                ms(p.p90),
                p.runs
            );
            println!(
                "                    at --durability full, one commit per create cannot exceed about {:.0}/s; group commit shares each sync",
                1.0 / p.median.as_secs_f64().max(1e-6)
            );
        }
        // Not a fault of the database: the directory may be read-only.
        Err(e) => println!("disk sync:          not measured in {}: {e}", dir.display()),
    }
    println!(
        "result:             {}",
        if ok { "ok" } else { "PROBLEMS FOUND" }
    );
    Ok(ok)
}

/// Whether the server could write the database: the file opens for
/// writing, and its directory takes the WAL and shared-memory files.
fn writable(db: &Path) -> Result<(), String> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .map_err(|e| e.to_string())?;
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| e.to_string())?
    {
        return Err("the file or its file system is read-only".into());
    }
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let c =
        std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: access(2) with a NUL-terminated path that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "its directory cannot be written: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Bytes written before each sync: about what one small group commit adds
/// to the WAL.
const PROBE_BYTES: usize = 16 * 1024;
const PROBE_RUNS: usize = 100;
const PROBE_BUDGET: Duration = Duration::from_secs(2);

struct SyncProbe {
    runs: usize,
    median: Duration,
    p90: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Times `fdatasync` after rewriting already allocated blocks of a scratch
/// file next to the database, as the server's preallocated WAL does. The
/// sync time bounds durable creates: one commit per create cannot go faster
/// than one sync each, and grouped commits wait for one sync per group.
/// Bounded by count and time; the scratch file is always removed.
fn probe_sync(dir: &Path) -> std::io::Result<SyncProbe> {
    let path = dir.join(format!(".litelink-doctor-{}.tmp", std::process::id()));
    let measured = (|| -> std::io::Result<Vec<Duration>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let block = vec![0xA5u8; PROBE_BYTES];
        let at = |i: usize| (i * PROBE_BYTES) as u64;
        for i in 0..PROBE_RUNS {
            file.write_all_at(&block, at(i))?;
        }
        file.sync_all()?;
        let mut times = Vec::with_capacity(PROBE_RUNS);
        let started = Instant::now();
        for i in 0..PROBE_RUNS {
            if started.elapsed() > PROBE_BUDGET {
                break;
            }
            file.write_all_at(&block, at(i))?;
            let t = Instant::now();
            file.sync_data()?;
            times.push(t.elapsed());
        }
        Ok(times)
    })();
    let _ = std::fs::remove_file(&path);
    let mut times = measured?;
    times.sort_unstable();
    let n = times.len();
    if n == 0 {
        return Err(std::io::Error::other("no sync completed"));
    }
    Ok(SyncProbe {
        runs: n,
        median: times[n / 2],
        p90: times[(n * 9 / 10).min(n - 1)],
    })
}
