//! `litelink-lab import-sources`: how fast `litelink import` takes each
//! file format, into a SQLite database that already holds a base of links.
//! Every link has a title and 3 tags of 1,000, and a code of 12
//! characters that look random, as an import from another shortener has.
//! The formats take turns within each round, each into a fresh copy of
//! the same base, the import pinned to one CPU when asked.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// `import-sources`: what to measure.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportSourcesArgs {
    /// Links in the database each import goes into.
    #[arg(long, default_value_t = 1_000_000)]
    pub base: u64,
    /// Links each import brings.
    #[arg(long, default_value_t = 200_000)]
    pub links: u64,
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// The CPU the import runs on (`taskset`); none: unpinned.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Where the files and databases go (removed after).
    #[arg(long, default_value = "target/import-sources")]
    pub work: PathBuf,
}

/// A code of 12 characters that looks random, distinct for each `i`.
fn code(i: u64) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // splitmix64: a bijection, so codes never repeat.
    let z = mix(i);
    (0..12)
        .map(|k| DIGITS[((z >> (k * 5)) % 62) as usize] as char)
        .collect()
}

fn tags(i: u64) -> [String; 3] {
    [0, 1, 2].map(|k| format!("tag-{}", (i * 7 + k * 331) % 1000))
}

fn title(i: u64) -> String {
    format!("Spring sale, part {i}: «new» arrivals")
}

fn url(i: u64) -> String {
    format!("https://shop.example.com/products/{i}?utm_source=import")
}

/// The formats measured: name, file name, `import` arguments.
const FORMATS: [(&str, &str, &[&str]); 7] = [
    ("litelink jsonl", "links.jsonl", &[]),
    ("litelink csv", "links.csv", &["--format", "csv"]),
    ("bitly pages", "bitly.jsonl", &["--from", "bitly"]),
    ("kutt pages", "kutt.json", &["--from", "kutt"]),
    (
        "shlink csv",
        "shlink.csv",
        &["--from", "shlink", "--source-default-domain", "s.test"],
    ),
    ("yourls dump", "yourls.sql", &["--from", "yourls"]),
    ("yourls csv", "yourls_url.csv", &["--from", "yourls"]),
];

fn write_files(work: &Path, from: u64, n: u64) -> anyhow::Result<()> {
    let create = |name: &str| -> anyhow::Result<BufWriter<std::fs::File>> {
        Ok(BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(work.join(name))?,
        ))
    };
    let ids = from..from + n;
    let at = "2024-05-06T07:08:09Z";
    let mut f = create("links.jsonl")?;
    for i in ids.clone() {
        let r = serde_json::json!({"code": code(i), "url": url(i), "created_at": at, "expires_at": null,
            "owner": null, "deleted_at": null, "title": title(i), "tags": tags(i)});
        writeln!(f, "{r}")?;
    }
    f.flush()?;
    let mut f = csv::Writer::from_writer(create("links.csv")?);
    f.write_record(litelink_service::transfer::CSV_COLUMNS)?;
    for i in ids.clone() {
        f.write_record([
            code(i),
            url(i),
            at.into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            title(i),
            tags(i).join("|"),
            String::new(),
        ])?;
    }
    f.flush()?;
    let pages = |name: &str,
                 page: &dyn Fn(Vec<serde_json::Value>) -> serde_json::Value,
                 link: &dyn Fn(u64) -> serde_json::Value|
     -> anyhow::Result<()> {
        let mut f = create(name)?;
        let all: Vec<u64> = ids.clone().collect();
        for chunk in all.chunks(50) {
            writeln!(f, "{}", page(chunk.iter().map(|i| link(*i)).collect()))?;
        }
        Ok(f.flush()?)
    };
    pages(
        "bitly.jsonl",
        &|links| serde_json::json!({"links": links, "pagination": {"next": ""}}),
        &|i| {
            serde_json::json!({"created_at": "2024-05-06T07:08:09+0000", "link": format!("https://bit.ly/{}", code(i)),
            "custom_bitlinks": [], "long_url": url(i), "title": title(i), "archived": false, "tags": tags(i)})
        },
    )?;
    pages(
        "kutt.json",
        &|data| serde_json::json!({"total": n, "limit": 50, "skip": 0, "data": data}),
        &|i| {
            serde_json::json!({"address": code(i), "target": url(i), "description": title(i),
            "created_at": "2024-05-06 07:08:09", "expire_in": null, "domain": null, "visit_count": 0,
            "password": false, "banned": false})
        },
    )?;
    let mut f = csv::Writer::from_writer(create("shlink.csv")?);
    f.write_record([
        "createdAt",
        "domain",
        "shortCode",
        "shortUrl",
        "longUrl",
        "title",
        "tags",
        "visits",
    ])?;
    for i in ids.clone() {
        f.write_record([
            "2024-05-06T07:08:09+00:00".into(),
            "s.test".into(),
            code(i),
            format!("https://s.test/{}", code(i)),
            url(i),
            title(i),
            tags(i).join("|"),
            "0".into(),
        ])?;
    }
    f.flush()?;
    // YOURLS has no tags: its rows carry a title only.
    let mut f = csv::Writer::from_writer(create("yourls_url.csv")?);
    f.write_record(["keyword", "url", "title", "timestamp", "ip", "clicks"])?;
    for i in ids.clone() {
        f.write_record([
            code(i),
            url(i),
            title(i),
            "2024-05-06 07:08:09".into(),
            "127.0.0.1".into(),
            "0".into(),
        ])?;
    }
    f.flush()?;
    let mut f = create("yourls.sql")?;
    let all: Vec<u64> = ids.collect();
    for chunk in all.chunks(1000) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!(
                    "('{}','{}','{}','2024-05-06 07:08:09','127.0.0.1',0)",
                    code(*i),
                    url(*i),
                    title(*i).replace('\'', "\\'")
                )
            })
            .collect();
        writeln!(f, "INSERT INTO `yourls_url` VALUES {};", rows.join(","))?;
    }
    Ok(f.flush()?)
}

/// Imports `file` into `db`: the wall time and the summary's rate.
fn import(
    exe: &Path,
    cpu: Option<usize>,
    db: &Path,
    args: &[&str],
    file: &Path,
) -> anyhow::Result<(f64, f64)> {
    let mut cmd = Command::new(exe);
    crate::process::pin_child(&mut cmd, cpu);
    cmd.arg("import").arg("--db").arg(db).args(args).arg(file);
    let started = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("running {} import", exe.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("import of {} failed: {said}", file.display());
    }
    // The summary's rate: from the store opened to the last commit.
    let rate = said
        .lines()
        .find(|l| l.starts_with("imported "))
        .and_then(|l| l.rsplit(", ").next())
        .and_then(|r| r.trim_end_matches(" records/s").parse::<f64>().ok())
        .with_context(|| format!("no rate in: {said}"))?;
    Ok((seconds, rate))
}

/// SQLite alone: the rows an import of `n` links from `from` on stores,
/// with the same 3 tags each when `tagged` (as Kutt and YOURLS have none,
/// without), put into `db` by `INSERT … SELECT` from
/// temporary tables in transactions of 100,000, as the import commits
/// them. No file is read, nothing is checked, and there is no statement a
/// row: the most an import of these files could reach here. The target
/// hash is a 64-bit mix of the row's number (not the one its code comes
/// from), spread over its index as SHA-256's first 8 bytes are. Links a second, counted from the first
/// transaction to the last commit; the checkpoint after is not counted, as
/// the import's own runs beside it on the other CPU.
fn sqlite_alone(db: &Path, from: u64, n: u64, tagged: bool) -> anyhow::Result<f64> {
    const BATCH: u64 = 100_000;
    let conn = rusqlite::Connection::open(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -512 * 1024)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    let first: i64 = conn.query_row("SELECT coalesce(max(id), 0) + 1 FROM links", [], |r| {
        r.get(0)
    })?;
    let tag_ids: std::collections::HashMap<String, i64> = conn
        .prepare("SELECT folded, id FROM tags")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    conn.execute_batch(
        "CREATE TEMP TABLE new_links (id INTEGER PRIMARY KEY, code TEXT, target TEXT, \
         title TEXT, tags TEXT, target_hash INTEGER);
         CREATE TEMP TABLE new_pairs (tag INTEGER, link INTEGER);",
    )?;
    {
        let tx = conn.unchecked_transaction()?;
        let mut link = tx.prepare("INSERT INTO new_links VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
        let mut pair = tx.prepare("INSERT INTO new_pairs VALUES (?1, ?2)")?;
        for (k, i) in (from..from + n).enumerate() {
            let id = first + k as i64;
            let tags = if tagged { tags(i).to_vec() } else { Vec::new() };
            link.execute(rusqlite::params![
                id,
                code(i),
                url(i),
                title(i),
                (!tags.is_empty()).then(|| tags.join("|")),
                mix(!i) as i64
            ])?;
            for tag in &tags {
                let tag = tag_ids
                    .get(tag)
                    .with_context(|| format!("no tag {tag} in the base"))?;
                pair.execute((tag, id))?;
            }
        }
        drop((link, pair));
        tx.commit()?;
    }
    let started = Instant::now();
    let mut at = first;
    while at < first + n as i64 {
        let last = (at + BATCH as i64 - 1).min(first + n as i64 - 1);
        let tx = conn.unchecked_transaction()?;
        tx.execute(
            "INSERT INTO links (id, code, target, created_at, named, domain, title, tags, \
             target_hash) SELECT id, code, target, 1714979289000, 1, 0, title, tags, target_hash \
             FROM new_links WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
            (at, last),
        )?;
        tx.execute(
            "INSERT INTO link_tags (tag, link) SELECT tag, link FROM new_pairs \
             WHERE link BETWEEN ?1 AND ?2 ORDER BY tag, link",
            (at, last),
        )?;
        tx.commit()?;
        at = last + 1;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// splitmix64's finish: 64 bits that look random, distinct for each `i`.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The two runs of [`sqlite_alone`] in each round.
const ALONE: [&str; 2] = ["a title and 3 tags", "a title, no tags"];

fn copy_db(from: &Path, to: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let (a, b) = (
            PathBuf::from(format!("{}{suffix}", from.display())),
            PathBuf::from(format!("{}{suffix}", to.display())),
        );
        let _ = std::fs::remove_file(&b);
        if a.exists() {
            std::fs::copy(&a, &b)?;
        }
    }
    Ok(())
}

pub fn run(args: &ImportSourcesArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    std::fs::create_dir_all(&args.work)?;
    let work = &args.work;
    let base = work.join("base.db");
    eprintln!(
        "writing {} base links and {} links in each format",
        args.base, args.links
    );
    // The base: links numbered from 1, the imports' after them.
    {
        let mut f = BufWriter::new(std::fs::File::create(work.join("base.jsonl"))?);
        for i in 1..=args.base {
            let r = serde_json::json!({"code": code(i), "url": url(i), "created_at": "2024-01-01T00:00:00Z",
                "expires_at": null, "owner": null, "deleted_at": null, "title": title(i), "tags": tags(i)});
            writeln!(f, "{r}")?;
        }
        f.flush()?;
    }
    copy_db(&work.join("none"), &base)?;
    import(&exe, None, &base, &[], &work.join("base.jsonl"))?;
    write_files(work, args.base + 1, args.links)?;
    let mut alone = [Vec::new(), Vec::new()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); FORMATS.len()];
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); FORMATS.len()];
    for round in 0..args.rounds {
        for (k, (name, file, extra)) in FORMATS.iter().enumerate() {
            let db = work.join("run.db");
            copy_db(&base, &db)?;
            let (seconds, rate) = import(&exe, args.cpu, &db, extra, &work.join(file))?;
            let whole = args.links as f64 / seconds;
            eprintln!(
                "round {}: {name}: {rate:.0} links/s from the store's opening; {seconds:.2} s, {whole:.0}/s with start-up",
                round + 1
            );
            rates[k].push(rate);
            walls[k].push(whole);
        }
        for (k, tagged) in [true, false].into_iter().enumerate() {
            let db = work.join("run.db");
            copy_db(&base, &db)?;
            let rate = sqlite_alone(&db, args.base + 1, args.links, tagged)?;
            eprintln!(
                "round {}: SQLite alone ({}): {rate:.0} links/s",
                round + 1,
                ALONE[k]
            );
            alone[k].push(rate);
        }
    }
    let spread = |v: &[f64]| {
        let mut r = v.to_vec();
        r.sort_by(f64::total_cmp);
        format!("{:.0} ({:.0}–{:.0})", r[r.len() / 2], r[0], r[r.len() - 1])
    };
    let ratios = |v: &[f64]| {
        let mut r = v.to_vec();
        r.sort_by(f64::total_cmp);
        format!("{:.2} ({:.2}–{:.2})", r[r.len() / 2], r[0], r[r.len() - 1])
    };
    println!(
        "| format | links/s from the store's opening | with the process's start-up | of SQLite alone, each round |"
    );
    println!("|---|---:|---:|---:|");
    for (k, (name, ..)) in FORMATS.iter().enumerate() {
        // Kutt and YOURLS links carry no tags: compared with rows without.
        let floor = &alone[usize::from(name.starts_with("kutt") || name.starts_with("yourls"))];
        let of: Vec<f64> = rates[k].iter().zip(floor).map(|(r, f)| r / f).collect();
        println!(
            "| {name} | {} | {} | {} |",
            spread(&rates[k]),
            spread(&walls[k]),
            ratios(&of)
        );
    }
    for (k, rates) in alone.iter().enumerate() {
        println!("| SQLite alone, {} | {} | | |", ALONE[k], spread(rates));
    }
    if std::env::var_os("LITELINK_LAB_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(work);
    }
    Ok(())
}
