//! Moving from another shortener: each importer on a fixture of what that
//! project really writes (tests/fixtures/import, made by its make.py):
//! the counts, the fields kept, the visit totals, idempotence, conflicts
//! both ways, refused targets and broken lines; the API readers against a
//! small server on loopback that pages as each API pages; YOURLS's
//! database on a real MariaDB.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
        .to_str()
        .expect("path")
        .to_owned()
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).expect("expected"))
        .expect("json")
}

/// The counts of an import's summary line.
#[derive(Debug, PartialEq, Eq, Default)]
struct Summary {
    links: u64,
    unchanged: u64,
    skipped: u64,
    conflicts: u64,
    overwritten: u64,
    invalid: u64,
}

fn summary(said: &str) -> Summary {
    let line = said
        .lines()
        .find(|l| l.starts_with("imported "))
        .unwrap_or_else(|| panic!("no summary in: {said}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .filter_map(|w| w.parse().ok())
        .collect();
    Summary {
        links: numbers[0],
        unchanged: numbers[2],
        skipped: numbers[3],
        conflicts: numbers[4],
        overwritten: numbers[5],
        invalid: numbers[6],
    }
}

/// An empty store of `kind`: a SQLite file in `dir`, or a fresh
/// PostgreSQL database.
async fn empty_store(kind: &Store, dir: &Path) -> (Option<String>, PathBuf) {
    let db = dir.join("litelink.db");
    match kind {
        Store::Sqlite => (None, db),
        Store::Postgres => (Some(fresh_postgres_db().await), db),
    }
}

/// Each file source: its arguments, and its key in expected.json.
fn file_sources() -> Vec<(&'static str, Vec<String>)> {
    vec![
        (
            "bitly",
            vec![
                "--from".into(),
                "bitly".into(),
                "--create-domains".into(),
                fixture("bitly.jsonl"),
            ],
        ),
        (
            "kutt",
            vec![
                "--from".into(),
                "kutt".into(),
                "--create-domains".into(),
                fixture("kutt.json"),
            ],
        ),
        (
            "shlink-csv",
            vec![
                "--from".into(),
                "shlink".into(),
                "--create-domains".into(),
                "--source-default-domain".into(),
                "s.test".into(),
                fixture("shlink.csv"),
            ],
        ),
        (
            "yourls",
            vec!["--from".into(), "yourls".into(), fixture("yourls.sql")],
        ),
        (
            "yourls",
            vec![
                "--from".into(),
                "yourls".into(),
                fixture("yourls_url.csv"),
                fixture("yourls_log.csv"),
            ],
        ),
    ]
}

fn import(store: &Option<String>, db: &Path, args: &[String]) -> (bool, String) {
    let mut all = vec!["import"];
    all.extend(args.iter().map(String::as_str));
    run_on(store, db, &all, false)
}

/// Checks a store that `source`'s fixture went into: a sample link's
/// fields, the domains made, and the visit total of every link.
async fn check_imported(store: &Option<String>, db: &Path, source: &str, want: &Value) {
    let app = spawn_app_like(db, store, &["--cache", "none"]).await;
    let key = app.new_key("checker", true).await;
    let e = expected();
    let sample = &e["sample"];
    let code = e["codes"]["titled"].as_str().expect("code");
    let link: Value = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            None,
        )
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(link["url"], sample["url"], "{source}: {link}");
    assert_eq!(link["title"], sample["title"], "{source}: {link}");
    assert_eq!(link["created_at"], sample["created_at"], "{source}: {link}");
    // YOURLS and Kutt have no tags.
    if !source.starts_with("yourls") && source != "kutt" {
        assert_eq!(link["tags"], sample["tags"], "{source}: {link}");
    }
    // Codes with `-` and `_`, a long URL, and a percent-encoded Unicode path.
    for name in ["hyphen", "underscore", "long", "unicode"] {
        let code = e["codes"][name].as_str().expect("code");
        let r = app
            .api(
                Method::GET,
                &format!("/api/v1/links/{code}"),
                Some(&key),
                None,
            )
            .await;
        // Kutt's fixture skips a few links; only the kept ones must be here.
        if source != "kutt" {
            assert_eq!(r.status(), 200, "{source}: {name} {code}");
        }
    }
    let domains: Value = app
        .api(Method::GET, "/api/v1/domains", Some(&key), None)
        .await
        .json()
        .await
        .expect("json");
    for host in want["domains"].as_array().expect("domains") {
        assert!(
            domains.to_string().contains(host.as_str().expect("host")),
            "{source}: {host} in {domains}"
        );
    }
    let report: Value = app
        .api(Method::GET, "/api/v1/visits", Some(&key), None)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(report["total"], want["visit_total"], "{source}: {report}");
    let logged = want["logged"].as_u64().expect("logged");
    let series: u64 = report["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|p| p["humans"].as_u64().unwrap_or(0) + p["bots"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        series, logged,
        "{source}: logged visits are dated: {report}"
    );
    assert_eq!(
        report["imported_visits"].as_u64(),
        Some(want["visit_total"].as_u64().unwrap_or(0) - logged),
        "{source}: {report}"
    );
    if logged > 0 {
        assert!(
            report["referrers"].to_string().contains("www.google.com")
                && report["countries"].to_string().contains("DE")
                && report["browsers"].to_string().contains("Firefox"),
            "{source}: logs are classified as live visits: {report}"
        );
    }
    app.stop().await;
}

crate::on_both_stores! {
    async fn each_source_imports_its_fixture_once_and_again_adds_nothing(store: Store) {
        let e = expected();
        let sources = match store {
            Store::Sqlite => file_sources(),
            // One pass on PostgreSQL: a page source and a table source.
            Store::Postgres => file_sources()
                .into_iter()
                .filter(|(n, a)| *n == "bitly" || (*n == "yourls" && a.len() == 3))
                .collect(),
        };
        for (source, args) in sources {
            let dir = tempfile::tempdir().expect("dir");
            let (url, db) = empty_store(&store, dir.path()).await;
            let want = &e[source];
            let (ok, said) = import(&url, &db, &args);
            assert!(ok, "{source}: {said}");
            let first = summary(&said);
            assert_eq!(
                (first.links, first.skipped, first.unchanged, first.invalid, first.conflicts),
                (
                    want["links"].as_u64().expect("links"),
                    want["skipped"].as_u64().expect("skipped"),
                    want["unchanged"].as_u64().expect("unchanged"),
                    0,
                    0
                ),
                "{source}: {said}"
            );
            // Again: nothing added, every link unchanged, exit 0.
            let (ok, said) = import(&url, &db, &args);
            assert!(ok, "{source} again: {said}");
            let again = summary(&said);
            assert_eq!(again.links, 0, "{source} again: {said}");
            assert_eq!(again.unchanged, first.links + first.unchanged, "{source} again: {said}");
            check_imported(&url, &db, source, want).await;
        }
    }
}

#[tokio::test]
async fn a_code_taken_with_another_target_is_a_conflict_or_overwritten() {
    let e = expected();
    let code = e["codes"]["first"].as_str().expect("code");
    for (source, args) in file_sources() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("litelink.db");
        let mine = dir.path().join("mine.jsonl");
        std::fs::write(
            &mine,
            json!({"code": code, "url": "https://mine.example/", "created_at": "2021-01-01T00:00:00Z",
                   "expires_at": null, "owner": null, "deleted_at": null})
            .to_string(),
        )
        .expect("write");
        run_on(&None, &db, &["import", mine.to_str().expect("path")], true);
        let (ok, said) = import(&None, &db, &args);
        assert!(!ok, "{source}: a conflict exits 2: {said}");
        let s = summary(&said);
        // The fixture's duplicates of that code conflict too.
        let duplicated = e[source]["unchanged"].as_u64().unwrap_or(0) > 0;
        assert_eq!(s.conflicts, 1 + u64::from(duplicated), "{source}: {said}");
        // The fixture's first link is its first line after a header, or
        // its first link or row.
        let first = if source == "shlink-csv" || args.iter().any(|a| a.ends_with("_url.csv")) {
            2
        } else {
            1
        };
        assert!(
            said.contains(&format!(
                "skipped): {} {first}",
                if first == 2 {
                    "lines"
                } else if source == "yourls" {
                    "rows"
                } else {
                    "links"
                }
            )),
            "{source}: the conflict is named: {said}"
        );
        let mut overwrite = args.clone();
        overwrite.extend(["--on-conflict".into(), "overwrite".into()]);
        let (ok, said) = import(&None, &db, &overwrite);
        assert!(ok, "{source}: {said}");
        let s = summary(&said);
        assert_eq!((s.overwritten, s.conflicts), (1, 0), "{source}: {said}");
    }
}

#[tokio::test]
async fn refused_targets_and_broken_entries_are_named_and_the_rest_imported() {
    for (args, invalid, skipped) in [
        (
            vec!["--from", "bitly", "--create-domains"],
            "bitly-broken.json",
            (3, 0),
        ),
        (vec!["--from", "kutt"], "kutt-broken.jsonl", (3, 0)),
        (
            vec!["--from", "shlink", "--source-default-domain", "s.test"],
            "shlink-broken.csv",
            (3, 0),
        ),
        (vec!["--from", "yourls"], "yourls-broken.sql", (3, 0)),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("litelink.db");
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.push(fixture(invalid));
        let (ok, said) = import(&None, &db, &all);
        assert!(!ok, "{invalid}: exit 2: {said}");
        let s = summary(&said);
        assert_eq!(
            (s.links, s.invalid, s.skipped),
            (1, skipped.0, skipped.1),
            "{invalid}: {said}"
        );
        assert!(
            said.contains("url scheme must be http or https"),
            "{invalid}: {said}"
        );
        assert!(said.contains("is not a time"), "{invalid}: {said}");
    }
}

#[tokio::test]
async fn a_csv_row_that_cannot_be_read_is_named_by_its_line() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("litelink.db");
    let file = dir.path().join("uneven.csv");
    std::fs::write(
        &file,
        "createdAt,domain,shortCode,shortUrl,longUrl,title,tags,visits\n\
         2024-01-01T00:00:00Z,,ab,https://s.test/ab,https://e.com/,,,0\n\
         2024-01-01T00:00:00Z,,cd\n",
    )
    .expect("write");
    let (ok, said) = run_on(
        &None,
        &db,
        &["import", "--from", "shlink", file.to_str().expect("path")],
        false,
    );
    assert!(!ok, "{said}");
    assert!(said.contains("invalid: lines 3"), "{said}");
}

#[tokio::test]
async fn kutt_links_behind_a_password_or_banned_are_skipped_never_opened() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("litelink.db");
    let pages: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("kutt.json")).expect("kutt"))
            .expect("json");
    let all: Vec<&Value> = pages
        .as_array()
        .expect("pages")
        .iter()
        .flat_map(|p| p["data"].as_array().expect("data"))
        .collect();
    let (ok, said) = import(
        &None,
        &db,
        &[
            "--from".into(),
            "kutt".into(),
            "--create-domains".into(),
            fixture("kutt.json"),
        ],
    );
    assert!(ok, "{said}");
    assert!(
        said.contains("has a password") && said.contains("is banned on Kutt"),
        "{said}"
    );
    let app = spawn_app_on(&db, &["--cache", "none"]).await;
    let key = app.new_key("checker", true).await;
    for link in all
        .iter()
        .filter(|l| l["password"] == true || l["banned"] == true)
    {
        let mut path = format!(
            "/api/v1/links/{}",
            link["address"].as_str().expect("address")
        );
        if let Some(d) = link["domain"].as_str() {
            path.push_str(&format!("?domain={d}"));
        }
        assert_eq!(
            app.api(Method::GET, &path, Some(&key), None).await.status(),
            404,
            "{link}"
        );
    }
    // Expiry and the visit count are kept; the title is the description.
    let kept = all
        .iter()
        .find(|l| {
            l["expire_in"].is_string()
                && l["password"] == false
                && l["banned"] == false
                && l["domain"].is_null()
        })
        .expect("one");
    let code = kept["address"].as_str().expect("address");
    let link: Value = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            None,
        )
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(link["expires_at"], "2030-01-01T00:00:00Z", "{link}");
    assert_eq!(link["imported_visits"], kept["visit_count"], "{link}");
    assert_eq!(
        link["visits"], 0,
        "imported visits never count toward max_visits: {link}"
    );
    assert_eq!(link["title"], kept["description"], "{link}");
    app.stop().await;
}

#[tokio::test]
async fn owner_and_format_options_are_checked_and_owners_given() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("litelink.db");
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "bitly",
            "--format",
            "csv",
            &fixture("bitly.jsonl"),
        ],
        false,
    );
    assert!(
        !ok && said.contains("--format is for --from litelink"),
        "{said}"
    );
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "kutt",
            "--owner",
            "nobody",
            &fixture("kutt.json"),
        ],
        false,
    );
    assert!(!ok && said.contains("no user 'nobody'"), "{said}");
    run_on(
        &None,
        &db,
        &["users", "create", "--name", "alice", "--role", "member"],
        true,
    );
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "yourls",
            "--owner",
            "alice",
            &fixture("yourls.sql"),
        ],
        false,
    );
    assert!(ok, "{said}");
    let out = dir.path().join("out.jsonl");
    run_on(
        &None,
        &db,
        &["export", "--out", out.to_str().expect("path")],
        true,
    );
    let text = std::fs::read_to_string(&out).expect("export");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    assert_eq!(records.len(), 300);
    assert!(
        records.iter().all(|r| r["owner"] == "alice"),
        "every link is alice's"
    );
    // The export carries what was imported: a re-import elsewhere keeps
    // the visit total.
    let imported: u64 = records
        .iter()
        .filter_map(|r| r["imported_visits"].as_u64())
        .sum();
    let logged: u64 = records
        .iter()
        .filter_map(|r| r["history"]["hours"].as_array())
        .flatten()
        .map(|h| h[1].as_u64().unwrap_or(0) + h[2].as_u64().unwrap_or(0))
        .sum();
    let e = expected();
    assert_eq!(
        imported + logged,
        e["yourls"]["visit_total"].as_u64().expect("total")
    );
    let other = dir.path().join("again.db");
    let (ok, said) = run_on(
        &None,
        &other,
        &["import", out.to_str().expect("path")],
        false,
    );
    assert!(ok, "{said}");
}

/// A loopback server that answers as Bitly, Kutt and Shlink do, from the
/// fixtures, with each API's paging and token header.
struct FakeApis {
    url: String,
    /// The paths asked, in order.
    asked: Arc<Mutex<Vec<String>>>,
}

const TOKEN: &str = "s3cret-token-never-shown";

async fn fake_apis() -> FakeApis {
    use axum::extract::{Path as UrlPath, Query, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;
    use std::collections::HashMap;

    #[derive(Clone)]
    struct S {
        base: String,
        asked: Arc<Mutex<Vec<String>>>,
        bitly: Arc<Vec<Value>>,
        kutt: Arc<Vec<Value>>,
        shlink: Arc<Value>,
    }
    type Q = Query<HashMap<String, String>>;
    fn note(s: &S, what: String) {
        s.asked.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }
    fn refused() -> (StatusCode, axum::Json<Value>) {
        (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "no"})))
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(fixture(name)).expect("fixture"))
            .expect("json")
    };
    let bitly: Vec<Value> = std::fs::read_to_string(fixture("bitly.jsonl"))
        .expect("bitly")
        .lines()
        .map(|l| serde_json::from_str(l).expect("page"))
        .collect();
    let kutt: Vec<Value> = read("kutt.json")
        .as_array()
        .expect("pages")
        .iter()
        .flat_map(|p| p["data"].as_array().expect("data").clone())
        .collect();
    let s = S {
        base: base.clone(),
        asked: Arc::default(),
        bitly: Arc::new(bitly),
        kutt: Arc::new(kutt),
        shlink: Arc::new(read("shlink-api.json")),
    };
    let asked = Arc::clone(&s.asked);
    let app = axum::Router::new()
        .route("/v4/groups/{guid}/bitlinks", get(|State(s): State<S>, UrlPath(guid): UrlPath<String>, q: Q, h: HeaderMap| async move {
            if h.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {TOKEN}")) {
                return refused();
            }
            let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
            note(&s, format!("bitly {guid} {page}"));
            let mut body = s.bitly.get(page - 1).cloned().unwrap_or(json!({"links": []}));
            // Bitly's next links, pointed at this server.
            let next = match guid.as_str() {
                "elsewhere" => json!("http://203.0.113.9/v4/groups/elsewhere/bitlinks?page=2"),
                "loop" => json!(format!("{}/v4/groups/loop/bitlinks?page=1", s.base)),
                _ if page < s.bitly.len() => json!(format!("{}/v4/groups/{guid}/bitlinks?size=50&page={}", s.base, page + 1)),
                _ => json!(""),
            };
            body["pagination"]["next"] = next;
            (StatusCode::OK, axum::Json(body))
        }))
        .route("/api/v2/links", get(|State(s): State<S>, q: Q, h: HeaderMap| async move {
            if h.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
                return refused();
            }
            let limit: usize = q.get("limit").and_then(|p| p.parse().ok()).unwrap_or(10).min(50);
            let skip: usize = q.get("skip").and_then(|p| p.parse().ok()).unwrap_or(0);
            note(&s, format!("kutt {skip} {limit}"));
            let data: Vec<Value> = s.kutt.iter().skip(skip).take(limit).cloned().collect();
            (StatusCode::OK, axum::Json(json!({"total": s.kutt.len(), "limit": limit, "skip": skip, "data": data})))
        }))
        .route("/rest/v3/short-urls", get(|State(s): State<S>, q: Q, h: HeaderMap| async move {
            if h.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
                return refused();
            }
            let per: usize = q.get("itemsPerPage").and_then(|p| p.parse().ok()).unwrap_or(10);
            let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
            note(&s, format!("shlink {page}"));
            let all = s.shlink["shortUrls"].as_array().expect("short urls");
            let data: Vec<Value> = all.iter().skip((page - 1) * per).take(per).cloned().collect();
            let pages = all.len().div_ceil(per);
            (StatusCode::OK, axum::Json(json!({"shortUrls": {"data": data, "pagination": {
                "currentPage": page, "pagesCount": pages, "itemsPerPage": per,
                "itemsInCurrentPage": data.len(), "totalItems": all.len()}}})))
        }))
        .route("/rest/v3/short-urls/{code}/visits", get(|State(s): State<S>, UrlPath(code): UrlPath<String>, q: Q, h: HeaderMap| async move {
            if h.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
                return refused();
            }
            // Two visits a page, to make the reader page.
            let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
            let all = s.shlink["visits"][&code].as_array().cloned().unwrap_or_default();
            let data: Vec<Value> = all.iter().skip((page - 1) * 2).take(2).cloned().collect();
            (StatusCode::OK, axum::Json(json!({"visits": {"data": data, "pagination": {
                "currentPage": page, "pagesCount": all.len().div_ceil(2).max(1)}}})))
        }))
        .route("/rest/v3/short-urls/{code}/redirect-rules", get(|State(s): State<S>, UrlPath(code): UrlPath<String>, h: HeaderMap| async move {
            if h.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
                return refused();
            }
            (StatusCode::OK, axum::Json(s.shlink["rules"][&code].clone()))
        }))
        .route("/huge/api/v2/links", get(|| async {
            // Over 32 MiB: refused, never read whole.
            let filler = "x".repeat(33 << 20);
            (StatusCode::OK, axum::Json(json!({"total": 1, "data": [], "filler": filler})))
        }))
        .with_state(s);
    tokio::spawn(async move { axum::serve(listener, app).await });
    FakeApis { url: base, asked }
}

// Several threads: the import runs as a blocking child process while
// this runtime serves the fake APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_readers_page_as_each_api_pages_and_keep_the_token_secret() {
    let apis = fake_apis().await;
    let e = expected();
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let token = token_file.to_str().expect("path").to_owned();
    let bitly_url = format!("{}/v4/groups/Ba1bc23dE4F/bitlinks", apis.url);
    for (source, url, key, extra) in [
        (
            "bitly",
            bitly_url.as_str(),
            "bitly",
            vec!["--create-domains"],
        ),
        ("kutt", apis.url.as_str(), "kutt", vec!["--create-domains"]),
        (
            "shlink",
            apis.url.as_str(),
            "shlink-api",
            vec!["--create-domains"],
        ),
    ] {
        let db = dir.path().join(format!("{source}.db"));
        let mut args = vec![
            "import",
            "--from",
            source,
            "--api-url",
            url,
            "--api-token-file",
            &token,
        ];
        args.extend(extra.iter());
        let (ok, said) = run_on(&None, &db, &args, false);
        assert!(ok, "{source}: {said}");
        assert!(
            !said.contains(TOKEN),
            "{source}: the token is never shown: {said}"
        );
        let s = summary(&said);
        let want = &e[key];
        assert_eq!(
            s.links,
            want["links"].as_u64().expect("links"),
            "{source}: {said}"
        );
        assert_eq!(
            s.skipped,
            want["skipped"].as_u64().expect("skipped"),
            "{source}: {said}"
        );
        // Again, through the API: nothing added.
        let (ok, said) = run_on(&None, &db, &args, false);
        assert!(ok && summary(&said).links == 0, "{source} again: {said}");
        if source == "shlink" {
            check_imported(&None, &db, "shlink-api", want).await;
            // Rules came over in priority order, and limits.
            let app = spawn_app_on(&db, &["--cache", "none"]).await;
            let key = app.new_key("rules-checker", true).await;
            let shlink: Value = serde_json::from_str(
                &std::fs::read_to_string(fixture("shlink-api.json")).expect("f"),
            )
            .expect("json");
            let ruled = shlink["shortUrls"]
                .as_array()
                .expect("urls")
                .iter()
                .find(|u| {
                    u["hasRedirectRules"] == true
                        && u["domain"].is_null()
                        && !shlink["rules"][u["shortCode"].as_str().expect("code")]
                            .to_string()
                            .contains("ip-address")
                })
                .expect("a link with rules");
            let code = ruled["shortCode"].as_str().expect("code");
            let link: Value = app
                .api(
                    Method::GET,
                    &format!("/api/v1/links/{code}"),
                    Some(&key),
                    None,
                )
                .await
                .json()
                .await
                .expect("json");
            assert_eq!(link["rules"][0]["if"]["device"], "android", "{link}");
            assert_eq!(link["rules"][0]["if"]["query"]["foo"], "bar", "{link}");
            assert_eq!(link["rules"][1]["if"]["language"], "fr", "{link}");
            let limited = shlink["shortUrls"]
                .as_array()
                .expect("urls")
                .iter()
                .find(|u| {
                    u["meta"]["maxVisits"].is_number()
                        && u["domain"].is_null()
                        && u["hasRedirectRules"] == false
                })
                .expect("a limited link");
            let code = limited["shortCode"].as_str().expect("code");
            let link: Value = app
                .api(
                    Method::GET,
                    &format!("/api/v1/links/{code}"),
                    Some(&key),
                    None,
                )
                .await
                .json()
                .await
                .expect("json");
            assert_eq!(link["max_visits"], limited["meta"]["maxVisits"], "{link}");
            app.stop().await;
            // Without the rules litelink cannot express, when asked.
            let db = dir.path().join("dropped.db");
            let mut dropped = args.clone();
            dropped.push("--drop-unsupported-rules");
            let (ok, said) = run_on(&None, &db, &dropped, false);
            assert!(ok, "{said}");
            assert_eq!(
                summary(&said).links,
                e["shlink-api-dropped"]["links"].as_u64().expect("links"),
                "{said}"
            );
        }
    }
    let asked = apis.asked.lock().expect("asked").clone();
    assert!(
        asked.contains(&"kutt 50 50".to_owned()),
        "Kutt is paged 50 at a time: {asked:?}"
    );
    assert!(
        asked.iter().any(|a| a == "bitly Ba1bc23dE4F 7"),
        "Bitly's next links are followed: {asked:?}"
    );

    // A wrong token: refused, said, not shown.
    std::fs::write(&token_file, "wrong").expect("token");
    let db = dir.path().join("refused.db");
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "kutt",
            "--api-url",
            &apis.url,
            "--api-token-file",
            &token,
        ],
        false,
    );
    assert!(
        !ok && said.contains("401") && said.contains("check the API token"),
        "{said}"
    );
    std::fs::write(&token_file, TOKEN).expect("token");
    // A next link to another host is not followed; a page seen before
    // stops the import; an answer over 32 MiB is refused.
    for (url, why) in [
        (
            format!("{}/v4/groups/elsewhere/bitlinks", apis.url),
            "another host",
        ),
        (
            format!("{}/v4/groups/loop/bitlinks", apis.url),
            "the same page as before",
        ),
    ] {
        let (ok, said) = run_on(
            &None,
            &db,
            &[
                "import",
                "--from",
                "bitly",
                "--api-url",
                &url,
                "--api-token-file",
                &token,
            ],
            false,
        );
        assert!(!ok && said.contains(why), "{url}: {said}");
    }
    let huge = format!("{}/huge", apis.url);
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "kutt",
            "--api-url",
            &huge,
            "--api-token-file",
            &token,
        ],
        false,
    );
    assert!(!ok && said.contains("at most 33554432 bytes"), "{said}");
    // Neither a file beside --api-url, nor a token missing.
    let (ok, said) = run_on(
        &None,
        &db,
        &[
            "import",
            "--from",
            "kutt",
            "--api-url",
            &apis.url,
            &fixture("kutt.json"),
            "--api-token-file",
            &token,
        ],
        false,
    );
    assert!(!ok && said.contains("give no file"), "{said}");
}

/// YOURLS's own tables on the MariaDB the machines run (or
/// `LITELINK_TEST_MYSQL`), loaded from the fixture's dump into a scratch
/// database, read with `--from yourls mysql://...`.
#[tokio::test]
async fn yourls_is_read_from_its_mariadb_database() {
    let server = std::env::var("LITELINK_TEST_MYSQL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into());
    let client = |args: &[&str], input: Option<&str>| {
        let url = url::Url::parse(&server).expect("LITELINK_TEST_MYSQL");
        let mut cmd = std::process::Command::new("mysql");
        cmd.arg("-h")
            .arg(url.host_str().unwrap_or("127.0.0.1"))
            .arg("-P")
            .arg(url.port().unwrap_or(3306).to_string())
            .arg("-u")
            .arg(if url.username().is_empty() {
                "root"
            } else {
                url.username()
            });
        if let Some(p) = url.password() {
            cmd.arg(format!("-p{p}"));
        }
        cmd.args(args);
        if let Some(path) = input {
            cmd.stdin(std::fs::File::open(path).expect("dump"));
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("the mysql client (scripts/test installs it): {e}"));
        assert!(
            out.status.success(),
            "mysql {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let name = format!("litelink_test_yourls_{}", std::process::id());
    client(
        &[
            "-e",
            &format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"),
        ],
        None,
    );
    client(&[&name], Some(&fixture("yourls.sql")));
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("litelink.db");
    let url = format!("{}/{name}", server.trim_end_matches('/'));
    let (ok, said) = run_on(&None, &db, &["import", "--from", "yourls", &url], false);
    let (ok2, said2) = run_on(&None, &db, &["import", "--from", "yourls", &url], false);
    client(&["-e", &format!("DROP DATABASE {name}")], None);
    assert!(ok, "{said}");
    let e = expected();
    assert_eq!(
        summary(&said).links,
        e["yourls"]["links"].as_u64().expect("links"),
        "{said}"
    );
    assert!(ok2 && summary(&said2).links == 0, "{said2}");
    check_imported(&None, &db, "yourls", &e["yourls"]).await;
}
