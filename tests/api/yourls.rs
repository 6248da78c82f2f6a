//! The YOURLS API (`/yourls-api.php`): every action in every format
//! against YOURLS 1.10.4's own shapes (tests/fixtures/yourls), its
//! signatures in both forms and every digest, credentials refused and
//! bounded, anonymous calls, protected links, whose links each caller
//! counts, query strings kept out of the logs, and a YOURLS client
//! library from PyPI against the real server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use reqwest::Method;
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

        // A link found by its target follows a change of it, and a deleted
        // one is found no more.
        let r = app.api(Method::PATCH, &format!("/api/v1/links/{code}"), Some(&key),
            Some(json!({"url": "https://example.com/moved"}))).await;
        assert_eq!(r.status(), 200);
        let (status, moved) = json_of(&app, &with(&[("action", "shorturl"), ("url", "https://example.com/moved")])).await;
        assert_eq!((status, moved["code"].as_str(), moved["url"]["keyword"].as_str()),
            (400, Some("error:url"), Some(code.as_str())), "{moved}");
        let (status, fresh) = json_of(&app, &with(&[("action", "shorturl"), ("url", url)])).await;
        assert_eq!((status, fresh["status"].as_str()), (200, Some("success")), "{fresh}");
        let fresh_code = fresh["url"]["keyword"].as_str().expect("keyword").to_owned();
        let r = app.api(Method::DELETE, &format!("/api/v1/links/{fresh_code}"), Some(&key), None).await;
        assert_eq!(r.status(), 204);
        let (status, again) = json_of(&app, &with(&[("action", "shorturl"), ("url", url)])).await;
        assert_eq!((status, again["status"].as_str()), (200, Some("success")), "{again}");
        assert_ne!(again["url"]["keyword"], fresh_code.as_str());
        app.stop().await;
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// PHP's `hash($algo, $data)`: lower-case hex.
fn digest(algo: &str, data: &str) -> String {
    fn hex<D: sha2::Digest>(data: &str) -> String {
        D::digest(data.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
    match algo {
        "md5" => hex::<md5::Md5>(data),
        "sha1" => hex::<sha1::Sha1>(data),
        "sha256" => hex::<sha2::Sha256>(data),
        "sha384" => hex::<sha2::Sha384>(data),
        "sha512" => hex::<sha2::Sha512>(data),
        other => panic!("{other}"),
    }
}

/// `db-stats` with these credentials (and `X-Forwarded-For: client`):
/// the status and the JSON.
async fn db_stats(app: &TestApp, client: &str, auth: &[(&str, &str)]) -> (u16, Value) {
    let mut params = vec![("action", "db-stats")];
    params.extend_from_slice(auth);
    call_from(app, client, false, &params).await
}

#[tokio::test(flavor = "multi_thread")]
async fn signatures_work_in_both_forms_with_every_digest_and_nothing_else() {
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let secret_arg = secret.display().to_string();
    let app = spawn_app(&[
        "--yourls-secret-file",
        &secret_arg,
        "--trust-proxy",
        "127.0.0.1",
        "--yourls-signature-window",
        "600",
    ])
    .await;
    let (key, token) = key_and_token(&app, "root", &secret, true);
    app.wait_for_key(&key).await;
    let ok = |(status, body): (u16, Value)| {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["message"], "success", "{body}");
    };
    let refused = |(status, body): (u16, Value), message: &str| {
        assert_eq!(status, 403, "{body}");
        assert_eq!(body, json!({"message": message, "errorCode": "403"}));
    };

    // The token itself, and the timed form: every digest, both orders.
    ok(db_stats(&app, "198.51.100.1", &[("signature", &token)]).await);
    let t = now().to_string();
    for algo in ["md5", "sha1", "sha256", "sha384", "sha512"] {
        for signed in [format!("{t}{token}"), format!("{token}{t}")] {
            let signature = digest(algo, &signed);
            let mut auth = vec![("timestamp", t.as_str()), ("signature", signature.as_str())];
            if algo != "md5" {
                auth.push(("hash", algo));
            } else {
                // md5 is the default, and may be named too.
                ok(db_stats(&app, "198.51.100.1", &auth).await);
                auth.push(("hash", "md5"));
            }
            ok(db_stats(&app, "198.51.100.1", &auth).await);
        }
    }
    // Within the window either way; not past it, nor a digest not offered,
    // nor the right digest under another name.
    let soon = (now() + 300).to_string();
    ok(db_stats(
        &app,
        "198.51.100.2",
        &[
            ("timestamp", &soon),
            ("signature", &digest("md5", &format!("{soon}{token}"))),
        ],
    )
    .await);
    for (at, algo, name) in [
        (now() - 700, "md5", "md5"),
        (now() + 700, "md5", "md5"),
        (now(), "sha256", "sha1"),
        (now(), "md5", "whirlpool"),
    ] {
        let at = at.to_string();
        let signature = digest(algo, &format!("{at}{token}"));
        refused(
            db_stats(
                &app,
                "198.51.100.2",
                &[
                    ("timestamp", &at),
                    ("signature", &signature),
                    ("hash", name),
                ],
            )
            .await,
            "Please log in",
        );
    }
    // A wrong token, the key's secret in its place, a token cut short:
    // refused.
    for wrong in [
        "0123456789abcdef0123456789abcdef",
        key.as_str(),
        &token[..31],
    ] {
        refused(
            db_stats(&app, "198.51.100.3", &[("signature", wrong)]).await,
            "Please log in",
        );
    }

    // The API answers the token when it makes a key, once; it works.
    let made = app
        .api(
            Method::POST,
            "/api/v1/keys",
            Some(&key),
            Some(json!({"name": "tool"})),
        )
        .await;
    assert_eq!(made.status(), 201);
    let made: Value = made.json().await.expect("json");
    let tool_token = made["signature_token"]
        .as_str()
        .expect("signature_token")
        .to_owned();
    assert_eq!(tool_token.len(), 32);
    ok(db_stats(&app, "198.51.100.4", &[("signature", &tool_token)]).await);
    let listed: Value = app
        .api(Method::GET, "/api/v1/keys", Some(&key), None)
        .await
        .json()
        .await
        .expect("json");
    assert!(
        !listed.to_string().contains(&tool_token),
        "shown once: {listed}"
    );

    // Revoking the key revokes its token.
    let r = app
        .api(Method::DELETE, "/api/v1/keys/tool", Some(&key), None)
        .await;
    assert_eq!(r.status(), 204);
    refused(
        db_stats(&app, "198.51.100.4", &[("signature", &tool_token)]).await,
        "Please log in",
    );

    // Wrong signatures count toward the client's sign-in bound: then even
    // the right one waits, from that client only.
    let mut limited = false;
    for _ in 0..20 {
        let (status, _) = db_stats(
            &app,
            "203.0.113.9",
            &[("signature", "ffffffffffffffffffffffffffffffff")],
        )
        .await;
        if status == 429 {
            limited = true;
            break;
        }
        assert_eq!(status, 403);
    }
    assert!(limited, "wrong signatures are bounded");
    let (status, _) = db_stats(&app, "203.0.113.9", &[("signature", &token)]).await;
    assert_eq!(status, 429);
    ok(db_stats(&app, "203.0.113.10", &[("signature", &token)]).await);

    // The database holds neither the secret nor a token.
    let stored = std::fs::read(&app.db).expect("db");
    let stored = String::from_utf8_lossy(&stored);
    assert!(!stored.contains(&token) && !stored.contains("a secret of more"));
    app.stop().await;

    // Without --yourls-secret-file, signatures are off and no token is made.
    let plain = spawn_app(&[]).await;
    let key = plain.new_key("root", true).await;
    refused(
        db_stats(&plain, "198.51.100.1", &[("signature", &token)]).await,
        "Please log in",
    );
    let made: Value = plain
        .api(
            Method::POST,
            "/api/v1/keys",
            Some(&key),
            Some(json!({"name": "tool"})),
        )
        .await
        .json()
        .await
        .expect("json");
    assert!(made.get("signature_token").is_none(), "{made}");
    plain.stop().await;
}

/// A call with `X-Forwarded-For: client`, by GET or as a POSTed form.
async fn call_from(
    app: &TestApp,
    client: &str,
    post: bool,
    params: &[(&str, &str)],
) -> (u16, Value) {
    let mut all = params.to_vec();
    all.push(("format", "json"));
    let r = if post {
        let body = reqwest::Url::parse_with_params("http://x/", &all).expect("form");
        app.client
            .post(app.url("/yourls-api.php"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.query().unwrap_or_default().to_owned())
    } else {
        let url = reqwest::Url::parse_with_params(&app.url("/yourls-api.php"), &all).expect("url");
        app.client.get(url)
    };
    let r = r
        .header("x-forwarded-for", client)
        .send()
        .await
        .expect("call");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}")),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn anonymous_callers_members_and_protected_links_get_what_they_may() {
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let secret_arg = secret.display().to_string();
    let app = spawn_app(&[
        "--yourls-secret-file",
        &secret_arg,
        "--trust-proxy",
        "127.0.0.1",
        "--create-rate",
        "3",
        "--create-burst",
        "3",
        "--visits-flush-ms",
        "60000",
    ])
    .await;
    let (admin, admin_token) = key_and_token(&app, "root", &secret, true);
    let (member, member_token) = key_and_token(&app, "ann", &secret, false);
    app.wait_for_key(&admin).await;
    app.wait_for_key(&member).await;

    // Anonymous: shorten without a keyword, by GET or a POSTed form;
    // expand; version. Nothing else.
    let (status, made) = call_from(
        &app,
        "192.0.2.1",
        true,
        &[("action", "shorturl"), ("url", "https://example.com/anon")],
    )
    .await;
    assert_eq!(
        (status, made["status"].as_str()),
        (200, Some("success")),
        "{made}"
    );
    let anon_code = made["url"]["keyword"].as_str().expect("keyword").to_owned();
    let (status, again) = call_from(
        &app,
        "192.0.2.1",
        false,
        &[("action", "shorturl"), ("url", "https://example.com/anon")],
    )
    .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (400, Some("error:url")),
        "{again}"
    );
    assert_eq!(again["url"]["keyword"], anon_code.as_str());
    let (status, kw) = call_from(
        &app,
        "192.0.2.1",
        false,
        &[
            ("action", "shorturl"),
            ("url", "https://example.com/kw"),
            ("keyword", "mine"),
        ],
    )
    .await;
    assert_eq!(
        (status, kw),
        (403, json!({"message": "Please log in", "errorCode": "403"}))
    );
    for action in ["stats", "db-stats", "url-stats"] {
        let (status, body) = call_from(
            &app,
            "192.0.2.1",
            false,
            &[("action", action), ("shorturl", &anon_code)],
        )
        .await;
        assert_eq!(
            (status, body),
            (403, json!({"message": "Please log in", "errorCode": "403"})),
            "{action}"
        );
    }
    let (status, body) = call_from(
        &app,
        "192.0.2.1",
        false,
        &[("action", "db-stats"), ("password", "x")],
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (403, Some("Invalid username or password"))
    );
    let (status, body) = call_from(
        &app,
        "192.0.2.1",
        false,
        &[("action", "expand"), ("shorturl", &anon_code)],
    )
    .await;
    assert_eq!(
        (status, body["longurl"].as_str()),
        (200, Some("https://example.com/anon"))
    );

    // Anonymous shorturl counts against --create-rate, from each client.
    let mut limited = None;
    for i in 0..6 {
        let url = format!("https://example.com/flood/{i}");
        let (status, body) = call_from(
            &app,
            "192.0.2.2",
            false,
            &[("action", "shorturl"), ("url", &url)],
        )
        .await;
        if status == 429 {
            limited = Some(body);
            break;
        }
        assert_eq!(status, 200, "{body}");
    }
    let limited = limited.expect("the create rate holds");
    assert_eq!(limited["errorCode"], "429", "{limited}");

    // A body that is not a form is refused, in JSON.
    let r = app
        .client
        .post(app.url("/yourls-api.php"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 415);

    // A member counts and reads their own links only; an admin all.
    let (_, ann) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[
            ("signature", &member_token),
            ("action", "shorturl"),
            ("url", "https://example.com/anon"),
            ("title", "Ann's"),
        ],
    )
    .await;
    assert_eq!(
        ann["status"], "success",
        "another caller's link to the URL is not theirs: {ann}"
    );
    let ann_code = ann["url"]["keyword"].as_str().expect("keyword").to_owned();
    let (_, mine) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[("signature", &member_token), ("action", "db-stats")],
    )
    .await;
    assert_eq!(
        mine["db-stats"],
        json!({"total_links": 1, "total_clicks": 0})
    );
    let (status, _) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[
            ("signature", &member_token),
            ("action", "url-stats"),
            ("shorturl", &anon_code),
        ],
    )
    .await;
    assert_eq!(status, 404, "not hers to read");
    let (_, all) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[("signature", &admin_token), ("action", "db-stats")],
    )
    .await;
    assert!(
        all["db-stats"]["total_links"].as_u64().expect("links") >= 5,
        "{all}"
    );

    // Visits are clicks at once, flushed or not.
    for _ in 0..2 {
        let r = app
            .client
            .get(app.url(&format!("/{ann_code}")))
            .send()
            .await
            .expect("visit");
        assert_eq!(r.status(), 302);
    }
    let (_, stats) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[
            ("signature", &member_token),
            ("action", "url-stats"),
            ("shorturl", &ann_code),
        ],
    )
    .await;
    assert_eq!(stats["link"]["clicks"], 2, "{stats}");
    let (_, top) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[
            ("signature", &admin_token),
            ("action", "stats"),
            ("filter", "top"),
            ("limit", "1"),
        ],
    )
    .await;
    assert_eq!(
        top["links"]["link_1"]["url"], "https://example.com/anon",
        "{top}"
    );
    assert_eq!(top["links"]["link_1"]["clicks"], 2, "{top}");
    let (_, bottom) = call_from(
        &app,
        "192.0.2.3",
        false,
        &[
            ("signature", &admin_token),
            ("action", "stats"),
            ("filter", "bottom"),
            ("limit", "5000"),
        ],
    )
    .await;
    let listed = bottom["links"].as_object().expect("links").len() as u64;
    assert_eq!(
        listed,
        bottom["stats"]["total_links"].as_u64().expect("total"),
        "{bottom}"
    );
    assert_eq!(bottom["stats"]["total_clicks"], 2);

    // A link behind a password expands as no link at all.
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/secret", "password": "open sesame"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let locked: Value = r.json().await.expect("json");
    let locked = locked["code"].as_str().expect("code").to_owned();
    for auth in [vec![], vec![("signature", member_token.as_str())]] {
        let mut params = auth.clone();
        params.extend_from_slice(&[("action", "expand"), ("shorturl", locked.as_str())]);
        let (status, body) = call_from(&app, "192.0.2.4", false, &params).await;
        assert_eq!(
            (status, body),
            (
                404,
                json!({"keyword": locked, "message": "Error: short URL not found", "errorCode": "404"})
            )
        );
    }
    app.stop().await;

    // Where creating needs a key, anonymous shorturl is refused.
    let closed = spawn_app(&["--create-auth", "key"]).await;
    let (status, body) = call_from(
        &closed,
        "192.0.2.1",
        false,
        &[("action", "shorturl"), ("url", "https://example.com/x")],
    )
    .await;
    assert_eq!(
        (status, body),
        (403, json!({"message": "Please log in", "errorCode": "403"}))
    );
    closed.stop().await;
}

/// Shortens, expands and reads stats with the `yourls` client from PyPI:
/// its own requests, its own reading of every answer.
const CLIENT: &str = r#"
import json, sys
from yourls import YOURLSClient, YOURLSHTTPError
api, signature = sys.argv[1], sys.argv[2]
c = YOURLSClient(api, signature=signature)
made = c.shorten("https://example.com/from-python?q=1", title="From Python")
titled = c.shorten("https://example.com/python/kw", keyword="py-kw")
# YOURLS 1.10.4 answers these with a 400, which this client raises as
# an HTTP error carrying the answer.
try:
    c.shorten("https://example.com/from-python?q=1")
    exists = None
except YOURLSHTTPError as e:
    said = e.response.json()
    exists = [said["code"], said["shorturl"]]
try:
    c.shorten("https://example.com/python/other", keyword="py-kw")
    taken = None
except YOURLSHTTPError as e:
    taken = e.response.json()["code"]
links, stats = c.stats(filter="last", limit=2)
db = c.db_stats()
anon = YOURLSClient(api)
print(json.dumps({
    "shorturl": made.shorturl, "keyword": made.keyword, "title": made.title, "url": made.url,
    "kw": titled.keyword, "exists": exists, "taken": taken,
    "expand": c.expand(made.shorturl), "expand_anon": anon.expand(made.keyword),
    "clicks": c.url_stats(made.keyword).clicks,
    "listed": [l.url for l in links], "total_links": stats.total_links,
    "db_links": db.total_links, "db_clicks": db.total_clicks,
}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_yourls_client_library_shortens_expands_and_reads_stats() {
    let Some(python) = std::env::var_os("LITELINK_TEST_YOURLS_PYTHON").filter(|p| !p.is_empty())
    else {
        missing("no Python with the yourls client (LITELINK_TEST_YOURLS_PYTHON)");
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let secret_arg = secret.display().to_string();
    let app = spawn_app(&["--yourls-secret-file", &secret_arg]).await;
    let (key, token) = key_and_token(&app, "root", &secret, true);
    app.wait_for_key(&key).await;
    let api = app.url("/yourls-api.php");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg("-c")
            .arg(CLIENT)
            .arg(api)
            .arg(token)
            .output()
            .expect("python")
    })
    .await
    .expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).expect("json");
    let base = format!("http://{}", app.addr);
    let keyword = said["keyword"].as_str().expect("keyword");
    assert_eq!(said["shorturl"], format!("{base}/{keyword}"));
    assert_eq!(said["title"], "From Python");
    assert_eq!(said["url"], "https://example.com/from-python?q=1");
    assert_eq!(said["kw"], "py-kw");
    assert_eq!(said["exists"], json!(["error:url", said["shorturl"]]));
    assert_eq!(said["taken"], "error:keyword");
    assert_eq!(said["expand"], "https://example.com/from-python?q=1");
    assert_eq!(said["expand_anon"], said["expand"]);
    assert_eq!(said["clicks"], 0);
    assert_eq!(
        said["listed"],
        json!([
            "https://example.com/python/kw",
            "https://example.com/from-python?q=1"
        ])
    );
    assert_eq!(
        (said["total_links"].clone(), said["db_links"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(said["db_clicks"], 0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn query_strings_stay_out_of_the_logs() {
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let db = dir.path().join("l.db");
    let args: Vec<String> = ["--yourls-secret-file", secret.to_str().expect("path")]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let server = litelink_lab::process::ServerProcess::start_with_env(
        Path::new(env!("CARGO_BIN_EXE_litelink")),
        &db,
        &args,
        &[("RUST_LOG", "debug")],
        None,
    )
    .expect("server");
    let client = client();
    for query in [
        "action=db-stats&format=json&signature=SIGNATUREMARK0000000000000000000",
        "action=db-stats&username=someone&password=PASSWORDMARK",
        "action=shorturl&url=https%3A%2F%2Fexample.com%2FURLMARK",
    ] {
        let r = client
            .get(format!("http://{}/yourls-api.php?{query}", server.addr))
            .send()
            .await
            .expect("call");
        assert!(r.status().as_u16() < 500);
    }
    let r = client
        .get(format!("http://{}/nosuchcode?token=QUERYMARK", server.addr))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
    // The log is read once the requests' lines are written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let log = loop {
        let (_, lines) = server.log();
        let log = lines.join("\n");
        if log.contains("/yourls-api.php") || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(
        log.contains("/yourls-api.php"),
        "requests are logged at debug:\n{log}"
    );
    for mark in ["SIGNATUREMARK", "PASSWORDMARK", "URLMARK", "QUERYMARK"] {
        assert!(!log.contains(mark), "{mark} in the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_account_signs_in_with_its_name_and_password() {
    const PUBLIC: &str = "https://s.example.com";
    let app = spawn_app(&["--public-url", PUBLIC, "--trust-proxy", "127.0.0.1"]).await;
    let admin = app.new_key("root", true).await;
    let made = app
        .api(
            Method::POST,
            "/api/v1/users",
            Some(&admin),
            Some(json!({"name": "Ann", "role": "member"})),
        )
        .await;
    assert_eq!(made.status(), 201);
    let made: Value = made.json().await.expect("json");
    let once = made["password"].as_str().expect("password").to_owned();
    let form = |path: &'static str, fields: Vec<(&'static str, String)>, cookie: Option<String>| {
        let mut r = app
            .client
            .post(app.url(path))
            .form(&fields)
            .header("origin", PUBLIC)
            .header("x-forwarded-for", "192.0.2.50");
        if let Some(cookie) = cookie {
            r = r.header("cookie", format!("__Host-litelink_session={cookie}"));
        }
        r.send()
    };

    // A one-time password must be changed first.
    let (status, body) = call_from(
        &app,
        "192.0.2.51",
        false,
        &[
            ("action", "db-stats"),
            ("username", "ann"),
            ("password", &once),
        ],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("one-time password"),
        "{body}"
    );

    let r = form(
        "/login",
        vec![("name", "ann".into()), ("password", once.clone())],
        None,
    )
    .await
    .expect("login");
    assert_eq!(r.status(), 303);
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("cookie")
        .split(';')
        .next()
        .and_then(|p| p.strip_prefix("__Host-litelink_session="))
        .expect("session")
        .to_owned();
    let r = form(
        "/account/password",
        vec![
            ("current_password", once.clone()),
            ("new_password", "a long new password".into()),
        ],
        Some(cookie.clone()),
    )
    .await
    .expect("change");
    assert_eq!(r.status(), 303);

    let ann = [("username", "ann"), ("password", "a long new password")];
    let mut shorten = ann.to_vec();
    shorten.extend_from_slice(&[
        ("action", "shorturl"),
        ("url", "https://example.com/ann"),
        ("keyword", "ann-link"),
    ]);
    let (status, made) = call_from(&app, "192.0.2.51", true, &shorten).await;
    assert_eq!(
        (status, made["url"]["keyword"].as_str()),
        (200, Some("ann-link")),
        "{made}"
    );
    let listed: Value = app
        .api(Method::GET, "/api/v1/links/ann-link", Some(&admin), None)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(listed["owner"], "Ann", "{listed}");
    let mut stats = ann.to_vec();
    stats.push(("action", "db-stats"));
    let (status, body) = call_from(&app, "192.0.2.51", false, &stats).await;
    assert_eq!(
        (status, body["db-stats"].clone()),
        (200, json!({"total_links": 1, "total_clicks": 0}))
    );

    // A wrong password, or an unknown name: YOURLS's one refusal; then
    // the sign-in bound holds, the right password included.
    for (name, password) in [
        ("ann", "wrong password!"),
        ("nobody", "a long new password"),
    ] {
        let (status, body) = call_from(
            &app,
            "192.0.2.52",
            false,
            &[
                ("action", "db-stats"),
                ("username", name),
                ("password", password),
            ],
        )
        .await;
        assert_eq!(
            (status, body),
            (
                403,
                json!({"message": "Invalid username or password", "errorCode": "403"})
            )
        );
    }
    let mut bounded = false;
    for _ in 0..15 {
        let (status, _) = call_from(
            &app,
            "192.0.2.53",
            false,
            &[
                ("action", "db-stats"),
                ("username", "ann"),
                ("password", "still wrong!"),
            ],
        )
        .await;
        if status == 429 {
            bounded = true;
            break;
        }
    }
    assert!(bounded, "wrong passwords are bounded");
    let mut right = ann.to_vec();
    right.push(("action", "db-stats"));
    let (status, _) = call_from(&app, "192.0.2.53", false, &right).await;
    assert_eq!(status, 429);

    // The session cookie is not a credential here: its GETs write.
    let r = app
        .client
        .get(app.url("/yourls-api.php?action=db-stats&format=json"))
        .header("cookie", format!("__Host-litelink_session={cookie}"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 403);
    app.stop().await;
}
