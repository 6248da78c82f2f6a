//! Hardening (issue 16), the items done so far: what every answer carries,
//! and a Host header that cannot reach into `short_url`.

use clap::Parser;
use litelink::cli::Cli;
use serde_json::{Value, json};

use crate::helpers::spawn_app;

#[tokio::test]
async fn every_answer_says_nosniff_and_redirects_are_revalidated() {
    let app = spawn_app(&[]).await;
    let code = app.create_ok("https://example.com/h").await;
    for path in [
        "/heart-beat".to_owned(),
        format!("/{code}"),
        format!("/link/{code}"),
        "/NoSuchCode1".into(),
        "/".into(),
        "/assets/app.css".into(),
        "/api/v1/links".into(),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.headers()["x-content-type-options"], "nosniff", "{path}");
    }
    let r = app.client.put(app.url("/heart-beat")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");

    let r = app.get(&format!("/{code}")).await;
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["cache-control"], "private, max-age=0");
    assert!(r.headers().get("referrer-policy").is_none());

    let strict = spawn_app(&[
        "--referrer-policy",
        "no-referrer",
        "--redirect-status",
        "301",
    ])
    .await;
    let code = strict.create_ok("https://example.com/p").await;
    let r = strict.get(&format!("/{code}")).await;
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    assert_eq!(r.headers()["cache-control"], "private, max-age=0");

    let refused = Cli::try_parse_from(["litelink", "serve", "--referrer-policy", "sometimes"]);
    assert!(refused.is_err());
}

#[tokio::test]
async fn only_a_plain_host_makes_the_short_url() {
    let app = spawn_app(&[]).await;
    let create = |host: &'static str| {
        app.client
            .post(app.url("/link"))
            .header("host", host)
            .json(&json!({ "url": "https://example.com/host" }))
            .send()
    };
    let body = |r: reqwest::Response| async move { r.json::<Value>().await.expect("json") };

    let r = body(create("s.example.com:8080").await.unwrap()).await;
    let code = r["short_link"].as_str().unwrap();
    assert_eq!(r["short_url"], format!("http://s.example.com:8080/{code}"));

    for evil in [
        "evil.com/phish?x=",
        "evil.com?x=",
        "user@evil.com",
        "evil.com#",
    ] {
        let r = body(create(evil).await.unwrap()).await;
        let code = r["short_link"].as_str().unwrap();
        assert_eq!(
            r["short_url"],
            format!("http://{}/{code}", app.addr),
            "Host: {evil}"
        );
    }

    // --public-url wins over any Host.
    let public = spawn_app(&["--public-url", "https://s.example.org/"]).await;
    let r = public
        .client
        .post(public.url("/link"))
        .header("host", "evil.com/x?")
        .json(&json!({ "url": "https://example.com/p" }))
        .send()
        .await
        .unwrap();
    let r = body(r).await;
    let code = r["short_link"].as_str().unwrap();
    assert_eq!(r["short_url"], format!("https://s.example.org/{code}"));
}
