//! `litelink doctor`: SQLite's build facts and a check of one database.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::store::sqlite::{memstatus, migrations};

/// Prints a report and returns whether everything is in order.
pub fn run(db: &Path) -> anyhow::Result<bool> {
    let mut ok = true;
    println!("SQLite version:     {}", memstatus::sqlite_version());
    if !db.exists() {
        println!("database:           {} does not exist", db.display());
        return Ok(false);
    }
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let options = memstatus::compile_options(&conn)?;
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
    if version >= 1 {
        let links: i64 = conn.query_row("SELECT count(*) FROM links", [], |r| r.get(0))?;
        println!("links:              {links}");
    }
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let problems: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if problems == ["ok"] {
        println!("integrity check:    ok");
    } else {
        ok = false;
        println!("integrity check:    FAILED");
        for p in problems.iter().take(20) {
            println!("  {p}");
        }
    }
    println!(
        "result:             {}",
        if ok { "ok" } else { "PROBLEMS FOUND" }
    );
    Ok(ok)
}
