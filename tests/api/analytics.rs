//! Countries from a MaxMind-format database: one that a writer this
//! project did not write (`mmdb-writer` from PyPI) builds with known
//! ranges, replaced while the server runs.

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, missing, run_on, spawn_app};

/// Builds a GeoLite2-City-shaped database at `out`: each range with its
/// country and, where given, its city. Written beside it and renamed over
/// it, as an operator's update would be.
const WRITER: &str = r#"
import json, os, sys
from netaddr import IPSet
from mmdb_writer import MMDBWriter
out, ranges = sys.argv[1], json.loads(sys.argv[2])
w = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="GeoLite2-City",
               languages=["en"], description={"en": "litelink test"})
for net, country, city in ranges:
    record = {"country": {"iso_code": country, "names": {"en": country}}}
    if city:
        record["city"] = {"names": {"en": city}}
    w.insert_network(IPSet([net]), record)
w.to_db_file(out + ".new")
os.replace(out + ".new", out)
"#;

pub(crate) fn writer() -> Option<String> {
    match std::env::var("LITELINK_TEST_MMDB_PYTHON") {
        Ok(p) if Path::new(&p).exists() => Some(p),
        _ => {
            missing("no Python with mmdb-writer (LITELINK_TEST_MMDB_PYTHON)");
            None
        }
    }
}

pub(crate) fn build(python: &str, out: &Path, ranges: Value) {
    let run = std::process::Command::new(python)
        .arg("-c")
        .arg(WRITER)
        .arg(out)
        .arg(ranges.to_string())
        .output()
        .expect("run mmdb-writer");
    assert!(
        run.status.success(),
        "mmdb-writer: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

async fn visit_from(app: &TestApp, code: &str, address: &str) -> u16 {
    app.client
        .get(app.url(&format!("/{code}")))
        .header("x-forwarded-for", address)
        .send()
        .await
        .expect("redirect")
        .status()
        .as_u16()
}

/// Creates a link with an admin key; returns its code.
async fn create(app: &TestApp, key: &str, body: Value) -> String {
    let r = app
        .api(Method::POST, "/api/v1/links", Some(key), Some(body))
        .await;
    assert_eq!(r.status(), 201);
    let link: Value = r.json().await.expect("link");
    link["code"].as_str().expect("code").to_owned()
}

async fn report(app: &TestApp, key: &str, code: &str) -> Value {
    let path = format!("/api/v1/links/{code}/visits");
    let r = app.api(Method::GET, &path, Some(key), None).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("report")
}

fn count(list: &Value, pick: impl Fn(&Value) -> bool) -> u64 {
    list.as_array()
        .expect("array")
        .iter()
        .filter(|v| pick(v))
        .map(|v| v["count"].as_u64().expect("count"))
        .sum()
}

#[tokio::test]
async fn countries_and_cities_come_from_the_geoip_database_and_follow_its_file() {
    let Some(python) = writer() else { return };
    let dir = tempfile::tempdir().expect("dir");
    let mmdb = dir.path().join("geo.mmdb");
    build(
        &python,
        &mmdb,
        json!([
            ["203.0.113.0/24", "DE", "Berlin"],
            ["198.51.100.0/24", "JP", "Tokyo"],
            ["2001:db8::/32", "FR", null],
        ]),
    );
    let path = mmdb.display().to_string();
    let app = spawn_app(&["--trust-proxy", "127.0.0.1", "--geoip-db", &path]).await;
    let admin = app.new_key("admin", true).await;
    let code = create(&app, &admin, json!({"url": "https://example.com/geo"})).await;
    for address in [
        "203.0.113.9",
        "203.0.113.200",
        "198.51.100.1",
        "2001:db8::1",
        "8.8.8.8",
    ] {
        assert_eq!(visit_from(&app, &code, address).await, 302);
    }
    let r = report(&app, &admin, &code).await;
    let country = |c: &'static str| move |v: &Value| v["country"] == c;
    assert_eq!(count(&r["countries"], country("DE")), 2, "{r}");
    assert_eq!(count(&r["countries"], country("JP")), 1, "{r}");
    assert_eq!(count(&r["countries"], country("FR")), 1, "{r}");
    // Not in the file: the table built into the binary answers.
    assert_eq!(count(&r["countries"], country("US")), 1, "{r}");
    assert_eq!(
        count(&r["cities"], |v| v["country"] == "DE"
            && v["city"] == "Berlin"),
        2,
        "{r}"
    );
    assert_eq!(
        count(&r["cities"], |v| v["country"] == "JP"
            && v["city"] == "Tokyo"),
        1,
        "{r}"
    );
    assert_eq!(r["cities"].as_array().expect("cities").len(), 2, "{r}");
    // The CSV has a row per city, named after its country.
    let csv = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}/visits?format=csv"),
            Some(&admin),
            None,
        )
        .await
        .text()
        .await
        .expect("csv");
    assert!(csv.lines().any(|l| l == "city,DE/Berlin,,,,2"), "{csv}");
    assert!(csv.lines().any(|l| l == "city,JP/Tokyo,,,,1"), "{csv}");

    // A new file: the range moves to the Netherlands. Requests keep being
    // answered meanwhile, every one of them.
    build(
        &python,
        &mmdb,
        json!([["203.0.113.0/24", "NL", "Amsterdam"]]),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert_eq!(visit_from(&app, &code, "203.0.113.9").await, 302);
        let r = report(&app, &admin, &code).await;
        if count(&r["countries"], country("NL")) > 0 {
            assert_eq!(
                count(&r["cities"], |v| v["city"] == "Amsterdam"),
                count(&r["countries"], country("NL")),
                "{r}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new file was never read: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A file that is no database keeps the one in use.
    std::fs::write(dir.path().join("broken"), b"not a database").expect("write");
    std::fs::rename(dir.path().join("broken"), &mmdb).expect("rename");
    let deadline = Instant::now() + Duration::from_secs(15);
    while app.stats().await["visits"]["geoip_failed_reads"].as_u64() < Some(1) {
        assert!(Instant::now() < deadline, "the broken file was never read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = count(
        &report(&app, &admin, &code).await["countries"],
        country("NL"),
    );
    assert_eq!(visit_from(&app, &code, "203.0.113.9").await, 302);
    let after = count(
        &report(&app, &admin, &code).await["countries"],
        country("NL"),
    );
    assert_eq!(after, before + 1);
}

/// The whole visit history of a link (hours, referrers, countries,
/// devices, systems, browsers) moves with `export` and `import`: from
/// SQLite to PostgreSQL, and back.
#[tokio::test]
async fn export_and_import_carry_the_visit_history_between_stores() {
    const IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 \
                        (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
    const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0";
    let app = spawn_app(&["--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("admin", true).await;
    create(
        &app,
        &admin,
        json!({"url": "https://example.com/moving", "code": "moving"}),
    )
    .await;
    for (ua, address, referer) in [
        (IPAD, "194.25.0.60", "https://news.example/a"),
        (IPAD, "8.8.8.8", "https://news.example/b"),
        (FIREFOX, "8.8.8.8", "https://blog.example/"),
        (FIREFOX, "10.1.1.1", ""),
    ] {
        let mut req = app
            .client
            .get(app.url("/moving"))
            .header("user-agent", ua)
            .header("x-forwarded-for", address);
        if !referer.is_empty() {
            req = req.header("referer", referer);
        }
        assert_eq!(req.send().await.expect("visit").status(), 302);
    }
    let before = report(&app, &admin, "moving").await;
    assert_eq!(before["total"], 4, "{before}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.stats().await["visits"]["flushed"].as_u64() < Some(4) {
        assert!(Instant::now() < deadline, "never flushed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let db = app.db.clone();
    let dir = app.stop().await.expect("its directory");

    let file = dir.path().join("links.jsonl");
    let path = file.to_str().expect("path");
    run_on(&None, &db, &["export", "--out", path], true);
    let text = std::fs::read_to_string(&file).expect("export");
    assert!(
        text.contains("\"history\"") && text.contains("\"tablet\""),
        "{text}"
    );

    // Into PostgreSQL: the same report.
    let pg = crate::helpers::fresh_postgres_db().await;
    run_on(&Some(pg.clone()), &db, &["import", path], true);
    let moved = crate::helpers::spawn_app_on(&db, &["--store", &pg]).await;
    let admin2 = moved.new_key("admin2", true).await;
    assert_eq!(report(&moved, &admin2, "moving").await, before);

    // And back into a new SQLite file, through PostgreSQL's export.
    let again = dir.path().join("again.jsonl");
    let again_path = again.to_str().expect("path");
    run_on(
        &Some(pg.clone()),
        &db,
        &["export", "--out", again_path],
        true,
    );
    moved.stop().await;
    let db2 = dir.path().join("back.db");
    run_on(&None, &db2, &["import", again_path], true);
    let back = crate::helpers::spawn_app_on(&db2, &[]).await;
    let admin3 = back.new_key("admin3", true).await;
    assert_eq!(report(&back, &admin3, "moving").await, before);
    drop(dir);
}

/// SIGHUP reads the GeoIP file again even when its time has not changed
/// (a file copied over with its old time), which the 2-second watch would
/// not notice.
#[tokio::test]
async fn sighup_reads_the_geoip_file_again() {
    let Some(python) = writer() else { return };
    let dir = tempfile::tempdir().expect("dir");
    let mmdb = dir.path().join("geo.mmdb");
    build(&python, &mmdb, json!([["203.0.113.0/24", "DE", "Berlin"]]));
    let stamp = std::fs::metadata(&mmdb)
        .and_then(|m| m.modified())
        .expect("mtime");
    let db = dir.path().join("g.db");
    let admin = crate::helpers::run_keys(&db, &["create", "--name", "root"], true);
    let admin = admin.trim().to_owned();
    let server = crate::helpers::spawn_process(
        &db,
        &[
            "--trust-proxy",
            "127.0.0.1",
            "--geoip-db",
            mmdb.to_str().expect("utf-8"),
        ],
    );
    let client = crate::helpers::client();
    let r = client
        .post(format!("{}/api/v1/links", server.url()))
        .bearer_auth(&admin)
        .json(&json!({"url": "https://example.com/geo", "code": "geo-hup"}))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let countries = async || {
        let r = client
            .get(format!("{}/geo-hup", server.url()))
            .header("x-forwarded-for", "203.0.113.9")
            .send()
            .await
            .expect("visit");
        assert_eq!(r.status(), 302);
        let r: Value = client
            .get(format!("{}/api/v1/links/geo-hup/visits", server.url()))
            .bearer_auth(&admin)
            .send()
            .await
            .expect("report")
            .json()
            .await
            .expect("json");
        r["countries"].clone()
    };
    assert!(countries().await.to_string().contains("\"DE\""));
    // A new file with the old one's time: only a SIGHUP reads it.
    let next = dir.path().join("next.mmdb");
    build(
        &python,
        &next,
        json!([["203.0.113.0/24", "NL", "Amsterdam"]]),
    );
    std::fs::File::options()
        .write(true)
        .open(&next)
        .and_then(|f| f.set_modified(stamp))
        .expect("set the time");
    std::fs::rename(&next, &mmdb).expect("rename");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        !countries().await.to_string().contains("\"NL\""),
        "the watch saw no change of time"
    );
    server.signal(libc::SIGHUP).expect("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !countries().await.to_string().contains("\"NL\"") {
        assert!(Instant::now() < deadline, "SIGHUP did not read the file");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
