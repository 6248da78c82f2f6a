//! The lab's own switches and servers, run as the lab runs them: as
//! `litelink-lab` child processes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use litelink_lab::process::ServerProcess;
use serde_json::{Value, json};

fn lab() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_litelink-lab"))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn serve(db: &Path, args: &[&str]) -> ServerProcess {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    ServerProcess::start(lab(), db, &args, None).expect("litelink-lab serve")
}

async fn stats(url: String) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn memstatus_is_off_by_default_and_on_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let off = serve(&dir.path().join("off.db"), &[]);
    let s = stats(off.url() + "/stats").await;
    assert_eq!(s["memstatus"], false, "{s}");
    let on = serve(&dir.path().join("on.db"), &["--sqlite-memstatus", "on"]);
    let s = stats(on.url() + "/stats").await;
    assert_eq!(s["memstatus"], true, "{s}");
    // The build default stays visible either way.
    assert!(
        s["compile_options"]
            .as_array()
            .unwrap()
            .contains(&json!("DEFAULT_MEMSTATUS=0"))
    );
    // In per-request mode few connections stay open; the state must still
    // be reported as SQLite had it (a bug once reported it off).
    let per_request = serve(
        &dir.path().join("pr.db"),
        &[
            "--sqlite-memstatus",
            "on",
            "--sqlite-connections",
            "per-request",
        ],
    );
    let s = stats(per_request.url() + "/stats").await;
    assert_eq!(s["memstatus"], true, "{s}");
    assert_eq!(s["connections"], "per-request");
}

/// Status, every header but `date` (the request id only as present), body.
async fn head_of(url: &str) -> (u16, BTreeMap<String, String>, String) {
    let r = client().get(url).send().await.expect("request");
    let status = r.status().as_u16();
    let mut headers = BTreeMap::new();
    for (name, value) in r.headers() {
        let value = value.to_str().expect("ascii header").to_owned();
        match name.as_str() {
            "date" => {}
            "x-request-id" => {
                assert!(!value.is_empty() && !value.contains(' '), "{value}");
                headers.insert(name.to_string(), "present".into());
            }
            _ => {
                headers.insert(name.to_string(), value);
            }
        }
    }
    (status, headers, r.text().await.expect("body"))
}

/// The bench's redirect floor (`reference-server --redirect`) answers
/// with exactly the head of a litelink redirect (but the request id's
/// value), so that what it costs is what that head costs.
#[tokio::test]
async fn the_redirect_floor_has_a_litelink_redirects_head() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("f.db"), &[]);
    let created: Value = client()
        .post(server.url() + "/link")
        .json(&json!({ "url": litelink_lab::reference::TARGET }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let code = created["short_link"].as_str().expect("short_link");
    let litelink = head_of(&format!("{}/{code}", server.url())).await;
    assert_eq!(litelink.0, 302);
    let floor = ServerProcess::start_reference(lab(), &["--redirect".into()], None)
        .expect("the reference server");
    let bare = head_of(&format!("{}/{code}", floor.url())).await;
    assert_eq!(bare, litelink);
}

/// The product's `serve --help` does not offer the lab's switches; the
/// lab's does.
#[test]
fn the_lab_switches_stay_out_of_the_product() {
    let lab_help = std::process::Command::new(lab())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let lab_help = String::from_utf8(lab_help.stdout).unwrap();
    for switch in [
        "--sqlite-memstatus",
        "--sqlite-connections",
        "--sqlite-read-on",
        "--sqlite-page-cache",
        "--group-commit",
        "--code-locality",
        "--hot-path",
    ] {
        assert!(lab_help.contains(switch), "lab serve lacks {switch}");
    }
}
