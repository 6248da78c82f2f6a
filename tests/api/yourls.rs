//! The YOURLS API (`/yourls-api.php`): every action in every format
//! against YOURLS 1.10.4's own shapes (tests/fixtures/yourls), its
//! signatures in both forms and every digest, credentials refused and
//! bounded, anonymous calls, protected links, whose links each caller
//! counts, query strings kept out of the logs, and a YOURLS client
//! library from PyPI against the real server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::helpers::*;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/yourls")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A secret for `--yourls-secret-file`, in `dir`.
fn secret_file(dir: &Path) -> PathBuf {
    let path = dir.join("yourls-secret");
    std::fs::write(&path, "a secret of more than sixteen bytes\n").expect("secret");
    path
}

/// `litelink keys create` with the YOURLS secret: the key and its token.
fn key_and_token(app: &TestApp, name: &str, secret: &Path, admin: bool) -> (String, String) {
    let secret = secret.display().to_string();
    let out = app.run_keys(
        &["create", "--name", name, "--yourls-secret-file", &secret],
        admin,
    );
    let mut lines = out.lines();
    let key = lines.next().expect("the key").to_owned();
    let token = lines
        .next()
        .and_then(|l| l.strip_prefix("signature token: "))
        .unwrap_or_else(|| panic!("no signature token line in {out:?}"))
        .to_owned();
    assert_eq!(token.len(), 32, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    (key, token)
}

/// One call of the API, by GET with these parameters.
async fn call(app: &TestApp, params: &[(&str, &str)]) -> reqwest::Response {
    let url = reqwest::Url::parse_with_params(&app.url("/yourls-api.php"), params).expect("url");
    app.client
        .get(url)
        .send()
        .await
        .expect("GET /yourls-api.php")
}

async fn json_of(app: &TestApp, params: &[(&str, &str)]) -> (u16, Value) {
    let mut all = params.to_vec();
    all.push(("format", "json"));
    let r = call(app, &all).await;
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}")),
    )
}

/// What placeholders of a fixture stand for, and what `$code` was bound
/// to.
struct Expect<'a> {
    values: &'a HashMap<&'static str, String>,
    code: Option<String>,
    /// Matching XML, where a text ends at the next tag.
    xml: bool,
}

impl Expect<'_> {
    /// `{name}` replaced by the test's values (escaped for XML when `xml`).
    fn fill(&self, golden: &str, xml: bool) -> String {
        let mut out = golden.to_owned();
        for (name, value) in self.values {
            let value = if xml {
                value
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
            } else {
                value.clone()
            };
            out = out.replace(&format!("{{{name}}}"), &value);
        }
        out
    }

    /// Whether `actual` is `golden` with its `$` tokens matched.
    fn text_matches(&mut self, golden: &str, actual: &str) -> bool {
        let mut rest = actual;
        let mut golden = golden;
        while !golden.is_empty() {
            let Some(at) = golden.find('$') else {
                return rest == golden;
            };
            let Some(after) = rest.strip_prefix(&golden[..at]) else {
                return false;
            };
            rest = after;
            golden = &golden[at..];
            let token_len = golden[1..]
                .find(|c: char| !c.is_ascii_alphabetic())
                .map_or(golden.len(), |n| n + 1);
            let (token, after_token) = golden.split_at(token_len);
            golden = after_token;
            let taken = match token {
                "$code" | "$link" => rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                    .unwrap_or(rest.len()),
                "$date" => {
                    let ok = rest.len() >= 19
                        && rest.as_bytes()[..19]
                            .iter()
                            .enumerate()
                            .all(|(i, b)| match i {
                                4 | 7 => *b == b'-',
                                10 => *b == b' ',
                                13 | 16 => *b == b':',
                                _ => b.is_ascii_digit(),
                            });
                    if !ok {
                        return false;
                    }
                    19
                }
                "$int" => rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len()),
                "$text" if self.xml => rest.find('<').unwrap_or(rest.len()),
                "$text" => rest.len(),
                other => panic!("unknown placeholder {other}"),
            };
            if taken == 0 && token != "$text" {
                return false;
            }
            let value = &rest[..taken];
            if token == "$code" {
                match &self.code {
                    Some(bound) if bound != value => return false,
                    Some(_) => {}
                    None => self.code = Some(value.to_owned()),
                }
            }
            rest = &rest[taken..];
        }
        rest.is_empty()
    }

    /// Whether a JSON answer is the golden one: the same keys in the same
    /// order, the same types, and the same values.
    fn json_matches(&mut self, golden: &Value, actual: &Value) -> Result<(), String> {
        match (golden, actual) {
            (Value::Object(g), Value::Object(a)) => {
                let gk: Vec<&String> = g.keys().collect();
                let ak: Vec<&String> = a.keys().collect();
                if gk != ak {
                    return Err(format!("keys {ak:?}, not {gk:?}"));
                }
                for (k, gv) in g {
                    self.json_matches(gv, &a[k])
                        .map_err(|e| format!("{k}: {e}"))?;
                }
                Ok(())
            }
            (Value::String(g), Value::Number(n)) if g == "$int" && n.is_u64() => Ok(()),
            (Value::String(g), Value::String(a)) if g != "$int" => {
                let g = self.fill(g, false);
                if self.text_matches(&g, a) {
                    Ok(())
                } else {
                    Err(format!("{a:?} is not {g:?}"))
                }
            }
            (g, a) => Err(format!("{a} is not {g}")),
        }
    }
}

/// Calls the API in each format and checks each answer against the
/// fixture `name`: its JSON, its XML, its plain text, its status and
/// content type. `fresh` calls are made for each format (a create).
async fn check(
    app: &TestApp,
    name: &str,
    values: &HashMap<&'static str, String>,
    params: &[(&str, &str)],
) -> Value {
    let golden: Value = serde_json::from_str(&fixture(&format!("{name}.json"))).expect("fixture");
    let status = ["statusCode", "errorCode"]
        .iter()
        .find_map(|k| golden[k].as_str().and_then(|s| s.parse::<u16>().ok()))
        .unwrap_or(200);
    let simple: Value = serde_json::from_str(&fixture("simple.json")).expect("simple");
    let mut json_answer = Value::Null;
    for format in ["json", "xml", "simple", ""] {
        let mut all = params.to_vec();
        if !format.is_empty() {
            all.push(("format", format));
        }
        let r = call(app, &all).await;
        assert_eq!(r.status().as_u16(), status, "{name} as {format:?}");
        let media = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = r.text().await.expect("body");
        let mut expect = Expect {
            values,
            code: None,
            xml: matches!(format, "xml" | ""),
        };
        match format {
            "json" => {
                assert!(media.starts_with("application/json"), "{media}");
                let actual: Value =
                    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
                if let Err(e) = expect.json_matches(&golden, &actual) {
                    panic!("{name} as JSON: {e}\n{body}");
                }
                json_answer = actual;
            }
            "xml" | "" => {
                // XML is also the answer when no format is named.
                assert!(media.starts_with("application/xml"), "{media}");
                let golden = expect.fill(&fixture(&format!("{name}.xml")), true);
                assert!(
                    expect.text_matches(&golden, &body),
                    "{name} as XML:\n{body}\nnot\n{golden}"
                );
            }
            _ => {
                assert!(media.starts_with("text/plain"), "{media}");
                let golden = expect.fill(simple[name].as_str().expect("simple"), false);
                assert!(
                    expect.text_matches(&golden, &body),
                    "{name} as text: {body:?}, not {golden:?}"
                );
            }
        }
    }
    json_answer
}

crate::on_both_stores! {
    async fn every_action_answers_as_yourls_does_in_every_format(store: Store) {
        let dir = tempfile::tempdir().expect("dir");
        let secret = secret_file(dir.path());
        let secret_arg = secret.display().to_string();
        let app = spawn_app_in(&store, &["--yourls-secret-file", &secret_arg]).await;
        let (key, token) = key_and_token(&app, "root", &secret, true);
        app.wait_for_key(&key).await;
        let base = format!("http://{}", app.addr);
        let auth = [("signature", token.as_str())];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut all: Vec<(&str, &str)> = auth.to_vec();
            all.extend_from_slice(extra);
            all
        };
        let mut values: HashMap<&'static str, String> = HashMap::new();
        values.insert("base", base.clone());
        values.insert("bare", app.addr.to_string());

        check(&app, "version", &values, &[("action", "version")]).await;
        check(&app, "version-db", &values, &[("action", "version"), ("db", "1")]).await;
        check(&app, "unknown-action", &values, &[("action", "delete")]).await;
        check(&app, "unknown-action", &values, &[]).await;
        check(&app, "auth-please-log-in", &values, &[("action", "db-stats")]).await;
        check(&app, "auth-invalid", &values, &[("action", "db-stats"), ("username", "root")]).await;
        check(&app, "shorturl-nourl", &values, &with(&[("action", "shorturl")])).await;

        // A title and a URL that XML must escape.
        let url = "https://example.com/yourls?a=1&b=2";
        let title = "Tom & Jerry <3";
        let made = {
            let (status, made) = json_of(&app, &with(&[("action", "shorturl"), ("url", url), ("title", title)])).await;
            assert_eq!(status, 200, "{made}");
            made
        };
        let code = made["url"]["keyword"].as_str().expect("keyword").to_owned();
        values.insert("url", url.into());
        values.insert("title", title.into());
        values.insert("keyword", code.clone());
        let exists = check(&app, "shorturl-exists", &values,
            &with(&[("action", "shorturl"), ("url", url), ("title", title)])).await;
        assert_eq!(exists["url"]["keyword"], code.as_str(), "the caller's own link");
        assert_eq!(exists["url"]["clicks"], 0);

        // A fresh link in each format: one call each.
        for format in ["json", "xml", "simple"] {
            let url = format!("https://example.com/yourls/{format}");
            let r = call(&app, &[("signature", token.as_str()), ("action", "shorturl"),
                ("url", url.as_str()), ("title", title), ("format", format)]).await;
            assert_eq!(r.status(), 200);
            let body = r.text().await.expect("body");
            let mut v = values.clone();
            v.insert("url", url.clone());
            let mut expect = Expect { values: &v, code: None, xml: format == "xml" };
            let golden = match format {
                "json" => {
                    let actual: Value = serde_json::from_str(&body).expect("json");
                    expect.json_matches(
                        &serde_json::from_str(&fixture("shorturl-success.json")).expect("fixture"),
                        &actual,
                    ).unwrap_or_else(|e| panic!("{e}\n{body}"));
                    continue;
                }
                "xml" => expect.fill(&fixture("shorturl-success.xml"), true),
                _ => {
                    let simple: Value = serde_json::from_str(&fixture("simple.json")).expect("simple");
                    expect.fill(simple["shorturl-success"].as_str().expect("text"), false)
                }
            };
            assert!(expect.text_matches(&golden, &body), "{format}:\n{body}\nnot\n{golden}");
        }

        let keyword = [("action", "shorturl"), ("url", "https://example.com/other"), ("keyword", code.as_str())];
        let mut taken: Vec<(&str, &str)> = auth.to_vec();
        taken.extend_from_slice(&keyword);
        check(&app, "shorturl-keyword", &values, &taken).await;
        let own = format!("{base}/{code}");
        let mut looped: Vec<(&str, &str)> = auth.to_vec();
        looped.extend_from_slice(&[("action", "shorturl"), ("url", own.as_str())]);
        check(&app, "shorturl-noloop", &values, &looped).await;

        // expand and url-stats, by code and by full short URL.
        for named in [code.clone(), own.clone()] {
            check(&app, "expand-found", &values, &[("action", "expand"), ("shorturl", named.as_str())]).await;
            let mut stats: Vec<(&str, &str)> = auth.to_vec();
            stats.extend_from_slice(&[("action", "url-stats"), ("shorturl", named.as_str())]);
            let found = check(&app, "url-stats-found", &values, &stats).await;
            assert_eq!(found["link"]["clicks"], 0);
        }
        let mut missing = values.clone();
        missing.insert("keyword", "nosuchcode".into());
        check(&app, "expand-missing", &missing, &[("action", "expand"), ("shorturl", "nosuchcode")]).await;
        check(&app, "url-stats-missing", &missing,
            &with(&[("action", "url-stats"), ("shorturl", "nosuchcode")])).await;

        let two = check(&app, "stats-two", &values,
            &with(&[("action", "stats"), ("filter", "last"), ("limit", "2")])).await;
        assert_eq!(two["stats"]["total_links"], 4, "{two}");
        assert_eq!(two["links"]["link_1"]["url"], "https://example.com/yourls/simple", "newest first");
        check(&app, "stats-no-limit", &values, &with(&[("action", "stats")])).await;
        let db = check(&app, "db-stats", &values, &with(&[("action", "db-stats")])).await;
        assert_eq!(db["db-stats"], json!({"total_links": 4, "total_clicks": 0}));
        app.stop().await;
    }
}
