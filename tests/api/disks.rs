//! Hardening against the disk: a database file deleted or
//! replaced under the server, a read-only or full file system, a corrupt
//! file. Read-only and full file systems are real: a small tmpfs mounted
//! by the test (root only; as another user these tests say so and skip,
//! except under scripts/test as root, where a missing mount fails them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{client, spawn_process};

fn litelink(args: &[&str], db: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("litelink");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `litelink serve` on `db` that is expected to refuse to start.
fn serve_refused(db: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("litelink serve");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "serve started: {text}");
    assert!(!text.contains("listening on"), "{text}");
    text
}

async fn create(base: &str, url: &str) -> reqwest::Response {
    client()
        .post(format!("{base}/link"))
        .json(&json!({ "url": url }))
        .send()
        .await
        .expect("POST /link")
}

async fn stats(base: &str) -> Value {
    client()
        .get(format!("{base}/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json")
}

/// A tmpfs of `size` mounted on a fresh directory; unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("fs");
        std::fs::create_dir(&dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            crate::helpers::missing("cannot mount a tmpfs here (not root?)");
            return None;
        }
        Some(Self {
            dir,
            _parent: parent,
        })
    }

    fn remount(&self, options: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount {options}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// The database file deleted, then replaced, under a running
/// server: no 201 after it, 503 instead, said once in the log and in
/// `/stats`.
#[tokio::test]
async fn a_deleted_or_replaced_database_stops_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gone.db");
    let server = spawn_process(&db, &[]);
    let base = server.url();
    assert_eq!(
        create(&base, "https://example.com/before").await.status(),
        201
    );
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        std::fs::remove_file(&p).unwrap();
    }
    // At once: the writer checks before it acknowledges.
    for i in 0..20 {
        let r = create(&base, &format!("https://example.com/after/{i}")).await;
        assert_eq!(r.status(), 503, "create {i} after the deletion");
        assert!(r.headers().contains_key("retry-after"));
    }
    let s = stats(&base).await;
    assert_eq!(
        s["writer"]["writes_stopped"], "the database file was deleted",
        "{s}"
    );
    let (_, log) = server.log();
    let said = log.iter().filter(|l| l.contains("writes stopped")).count();
    assert_eq!(said, 1, "{log:#?}");

    // Replaced, with nothing written: the once-a-second check sees it.
    let db = dir.path().join("replaced.db");
    let server = spawn_process(&db, &[]);
    let base = server.url();
    assert_eq!(
        create(&base, "https://example.com/before").await.status(),
        201
    );
    std::fs::copy(&db, dir.path().join("copy.db")).unwrap();
    std::fs::rename(dir.path().join("copy.db"), &db).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = stats(&base).await;
        if s["writer"]["writes_stopped"] == "the database file was replaced by another file" {
            break;
        }
        assert!(Instant::now() < deadline, "not noticed: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(create(&base, "https://example.com/x").await.status(), 503);
}

/// A database on a read-only file system is refused at start,
/// and `doctor` says why.
#[tokio::test]
async fn a_read_only_database_is_refused_at_start() {
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let db = fs.dir.join("ro.db");
    let mut server = spawn_process(&db, &["--wal-preallocate-mib", "0"]);
    assert_eq!(
        create(&server.url(), "https://example.com/ro")
            .await
            .status(),
        201
    );
    assert!(server.terminate().unwrap().success());
    let (ok, doctor) = litelink(&["doctor"], &db);
    assert!(ok, "{doctor}");
    assert!(doctor.contains("writable:           yes"), "{doctor}");

    fs.remount("ro");
    let refused = serve_refused(&db);
    assert!(refused.contains("cannot be written"), "{refused}");
    let (ok, doctor) = litelink(&["doctor"], &db);
    assert!(!ok, "{doctor}");
    assert!(doctor.contains("writable:           NO"), "{doctor}");
    assert!(doctor.contains("PROBLEMS FOUND"), "{doctor}");
}

/// A full disk answers 503 with Retry-After, never 500, logs a
/// few lines rather than one per create, and creates work again once
/// there is room.
#[tokio::test]
async fn a_full_disk_answers_503_and_logs_little() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let db = fs.dir.join("full.db");
    let server = spawn_process(&db, &["--wal-preallocate-mib", "0", "--cache", "none"]);
    let base = server.url();
    assert_eq!(
        create(&base, "https://example.com/first").await.status(),
        201
    );
    // Fill what is left.
    let filler = fs.dir.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let long = "a".repeat(3000);
    let (lines_before, _) = server.log();
    let mut unavailable = 0;
    for i in 0..400 {
        let r = create(&base, &format!("https://example.com/{long}/{i}")).await;
        match r.status().as_u16() {
            201 => {}
            503 => {
                unavailable += 1;
                assert_eq!(r.headers()["retry-after"], "30");
                let body: Value = r.json().await.unwrap();
                assert!(body["error"].as_str().unwrap().contains("disk"), "{body}");
            }
            other => panic!("create {i}: {other} {}", r.text().await.unwrap_or_default()),
        }
    }
    assert!(unavailable > 300, "only {unavailable} of 400 refused");
    let (lines_after, log) = server.log();
    assert!(
        lines_after - lines_before < 20,
        "{} log lines for {unavailable} failed creates: {log:#?}",
        lines_after - lines_before
    );
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while create(&base, "https://example.com/room-again")
        .await
        .status()
        != 201
    {
        assert!(Instant::now() < deadline, "creates never recovered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(server);
}

/// A corrupt database is refused at start with "corrupt" in the
/// message; `doctor` and `doctor --full` find it.
#[tokio::test]
async fn a_corrupt_database_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bad.db");
    let mut server = spawn_process(&db, &["--wal-preallocate-mib", "0"]);
    for i in 0..400 {
        assert_eq!(
            create(&server.url(), &format!("https://example.com/c/{i}"))
                .await
                .status(),
            201
        );
    }
    assert!(server.terminate().unwrap().success());
    let len = std::fs::metadata(&db).unwrap().len();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        f.write_all_at(&[0xA5; 4096], len - 4096).unwrap();
    }
    let refused = serve_refused(&db);
    assert!(refused.contains("corrupt"), "{refused}");
    assert!(refused.contains("doctor --full"), "{refused}");
    for args in [&["doctor"][..], &["doctor", "--full"]] {
        let (ok, text) = litelink(args, &db);
        assert!(!ok, "{text}");
        assert!(
            text.contains("corrupt") || text.contains("malformed"),
            "{text}"
        );
    }
}

/// One server per database. A second `serve` exits at once naming
/// the first one's PID; `doctor`, `export` and `keys` work beside it.
#[tokio::test]
async fn a_second_server_on_one_database_exits_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("one.db");
    let server = spawn_process(&db, &[]);
    assert_eq!(
        create(&server.url(), "https://example.com/one")
            .await
            .status(),
        201
    );
    let t = Instant::now();
    let refused = serve_refused(&db);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        refused.contains(&format!("pid {}", server.pid())),
        "{refused}"
    );
    for args in [&["doctor"][..], &["export"], &["keys", "list"]] {
        let (ok, text) = litelink(args, &db);
        assert!(ok, "{args:?}: {text}");
    }
    let (_, exported) = litelink(&["export"], &db);
    assert!(exported.contains("https://example.com/one"), "{exported}");
}

/// Corruption found while serving: the reads that meet it answer 500 with
/// the usual JSON body, and the log says `database corrupt` once, however
/// many reads meet it, pointing at `doctor --full`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_found_while_serving_is_a_500_and_one_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let server = spawn_process(&db, &["--cache", "none", "--sqlite-slots", "off"]);
    let base = server.url();
    let mut codes = Vec::new();
    for i in 0..1500 {
        let r = create(
            &base,
            &format!("https://example.com/{i}/{}", "p".repeat(200)),
        )
        .await;
        assert_eq!(r.status(), 201);
        let body: Value = r.json().await.unwrap();
        codes.push(body["short_link"].as_str().unwrap().to_owned());
    }
    // Everything in the database file itself, not only in the WAL.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    // Garbage over every page past the first two.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        let len = f.metadata().unwrap().len();
        f.seek(SeekFrom::Start(8192)).unwrap();
        f.write_all(&vec![0xA5; (len - 8192) as usize]).unwrap();
        f.sync_all().unwrap();
    }
    let client = crate::helpers::client();
    let mut failed = 0;
    for code in codes.iter().rev().take(40) {
        let r = client
            .get(format!("{base}/link/{code}"))
            .send()
            .await
            .unwrap();
        if r.status() == 500 {
            failed += 1;
            let body: Value = r.json().await.unwrap();
            assert_eq!(body, serde_json::json!({"error": "internal server error"}));
        }
    }
    assert!(failed >= 20, "only {failed} of 40 reads met the damage");
    let (_, log) = server.log();
    let corrupt: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("database corrupt"))
        .collect();
    assert_eq!(corrupt.len(), 1, "{log:#?}");
    assert!(corrupt[0].contains("doctor --full"), "{}", corrupt[0]);
}

/// On a large database the start-up `quick_check` stops at its time
/// budget and says so, instead of reading every page before serving;
/// `doctor` checks all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_check_stops_at_its_budget_on_a_large_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("big.db");
    crate::helpers::run_keys(&db, &["list"], false);
    let started = Instant::now();
    let conn = rusqlite::Connection::open(&db).unwrap();
    // Three million small rows: a check of every page takes seconds in
    // this build (0.6 s even in an optimised SQLite), past the 300 ms
    // budget. `named = 0` keeps them out of the alias index, for speed.
    conn.execute_batch(
        "BEGIN;
         WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 3000000)
         INSERT INTO links (code, target, created_at, named)
         SELECT 'big' || x, 'https://example.com/' || x, 0, 0 FROM n;
         COMMIT;
         PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .unwrap();
    drop(conn);
    eprintln!("3,000,000 rows written in {:?}", started.elapsed());
    let server = spawn_process(&db, &[]);
    let (_, log) = server.log();
    assert!(
        log.iter()
            .any(|l| l.contains("quick check stopped at its time budget")),
        "{log:#?}"
    );
    let r = client()
        .get(format!("{}/heart-beat", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
