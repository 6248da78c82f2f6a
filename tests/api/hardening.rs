//! Hardening: what every answer carries,
//! and a Host header that cannot reach into `short_url`.

use clap::Parser;
use litelink::cli::Cli;
use serde_json::{Value, json};

use crate::helpers::{assert_error, spawn_app, spawn_process};

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

/// What is validated is what is stored and served.
#[tokio::test]
async fn the_validated_url_is_the_served_url() {
    let app = spawn_app(&[]).await;
    for (raw, canonical) in [
        ("http:/\\evil.com", "http://evil.com/"),
        ("http:\\\\evil.com", "http://evil.com/"),
        ("https:evil.com", "https://evil.com/"),
        ("http:///evil.com", "http://evil.com/"),
        ("http://%65vil.com/", "http://evil.com/"),
        ("https://example.com", "https://example.com/"),
        (
            "https://EXAMPLE.com:443/a/./b/../c",
            "https://example.com/a/c",
        ),
    ] {
        let r = app.create(raw).await;
        assert_eq!(r.status(), 201, "{raw}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["link"], canonical, "{raw}");
        let code = body["short_link"].as_str().unwrap();
        let r = app.get(&format!("/{code}")).await;
        assert_eq!(r.headers()["location"], canonical, "{raw}");
        let r: Value = app
            .get(&format!("/link/{code}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(r["link"], canonical, "{raw}");
    }
}

/// No credentials in targets; private targets and denied hosts
/// when the operator asks.
#[tokio::test]
async fn credentials_private_targets_and_denied_hosts_are_refused() {
    let app = spawn_app(&[]).await;
    for raw in [
        "https://www.google.com@evil.com/",
        "https://user:secret@example.com/",
    ] {
        assert_error(app.create(raw).await, 400, "user name or password").await;
    }
    // Private targets are allowed unless asked.
    assert_eq!(app.create("http://127.0.0.1:9/").await.status(), 201);

    let strict = spawn_app(&["--refuse-private-targets"]).await;
    for raw in [
        "http://127.0.0.1:9/",
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/",
        "http://[::1]/",
        "http://localhost/",
        // Special-use ranges, and IPv4 inside IPv6.
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::10.0.0.1]/",
        "http://[2002:c0a8:101::1]/",
        "http://[::ffff:0:0]/",
        "http://[fec0::1]/",
        "http://[ff02::1]/",
        "http://224.0.0.1/",
        "http://198.18.0.1/",
        "http://240.0.0.1/",
        "http://192.0.0.1/",
    ] {
        assert_error(strict.create(raw).await, 400, "private").await;
    }
    // A name the machine's hosts file gives a private address (every
    // Debian machine maps its own name so) reaches this machine too.
    let hosts = std::fs::read_to_string("/etc/hosts").expect("/etc/hosts");
    let name = hosts
        .lines()
        .filter_map(|l| {
            let mut words = l.split('#').next()?.split_whitespace();
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            ip.is_loopback()
                .then_some(words.find(|w| !w.contains("localhost"))?)
        })
        .next()
        .expect("/etc/hosts names this machine on a loopback address");
    assert_error(
        strict.create(&format!("http://{name}/")).await,
        400,
        "private",
    )
    .await;
    assert_eq!(app.create(&format!("http://{name}/")).await.status(), 201);
    let code = strict.create_ok("https://example.com/public").await;
    let key = strict.new_key("admin", true).await;
    let r = strict
        .api(
            reqwest::Method::PATCH,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            Some(json!({ "url": "http://192.168.1.1/" })),
        )
        .await;
    assert_error(r, 400, "private").await;
}

#[tokio::test]
async fn the_deny_list_is_read_again_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("deny.txt");
    std::fs::write(&list, "# phishing\nevil.example\n").unwrap();
    let server = spawn_process(
        &dir.path().join("d.db"),
        &["--deny-hosts", list.to_str().unwrap()],
    );
    let client = crate::helpers::client();
    let create = |url: &str| {
        client
            .post(format!("{}/link", server.url()))
            .json(&json!({ "url": url }))
            .send()
    };
    let status = |r: Result<reqwest::Response, reqwest::Error>| r.expect("POST").status().as_u16();
    assert_eq!(status(create("https://login.evil.example/x").await), 400);
    assert_eq!(status(create("https://other.example/x").await), 201);
    std::fs::write(&list, "other.example\n").unwrap();
    server.signal(libc::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while status(create("https://other.example/y").await) != 400 {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status(create("https://login.evil.example/x").await), 201);
}

/// A host added to the deny list stops the links made before: once the
/// list is read again, each answers 410 on every way it is read, from the
/// cache too (each was read twice before), is counted as no visit, and
/// redirects again once the host leaves the list. A list that cannot be
/// read keeps the old one.
#[tokio::test]
async fn a_reloaded_deny_list_stops_existing_links() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("deny.txt");
    std::fs::write(&list, "# nothing yet\n").unwrap();
    let server = spawn_process(
        &dir.path().join("d.db"),
        &["--deny-hosts", list.to_str().unwrap()],
    );
    let client = crate::helpers::client();
    let mut codes = Vec::new();
    for url in ["https://shop.later-bad.example/a", "https://fine.example/b"] {
        let r = client
            .post(format!("{}/link", server.url()))
            .json(&json!({ "url": url }))
            .send()
            .await
            .expect("POST");
        assert_eq!(r.status(), 201);
        let body: Value = r.json().await.expect("json");
        codes.push(body["short_link"].as_str().expect("code").to_owned());
    }
    let (bad, fine) = (&codes[0], &codes[1]);
    let status = async |method: reqwest::Method, path: &str| {
        let r = client
            .request(method, format!("{}{path}", server.url()))
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.text().await.expect("body"))
    };
    for _ in 0..2 {
        assert_eq!(
            status(reqwest::Method::GET, &format!("/{bad}")).await.0,
            302
        );
    }
    std::fs::write(&list, "later-bad.example\n").unwrap();
    server.signal(libc::SIGHUP).unwrap();
    // Until the signal is handled, a read still redirects and counts.
    let mut early = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match status(reqwest::Method::GET, &format!("/{bad}")).await.0 {
            410 => break,
            302 => early += 1,
            other => panic!("GET /{bad} answered {other}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still redirected after SIGHUP"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let blocked = json!({"error": "the target of this link is blocked"});
    for (method, path) in [
        (reqwest::Method::GET, format!("/{bad}")),
        (reqwest::Method::GET, format!("/link/{bad}")),
        (reqwest::Method::HEAD, format!("/{bad}")),
    ] {
        let (code, body) = status(method.clone(), &path).await;
        assert_eq!(code, 410, "{method} {path}");
        if method == reqwest::Method::GET {
            let body: Value = serde_json::from_str(&body).expect("a JSON error");
            assert_eq!(body, blocked, "{path}");
        }
    }
    assert_eq!(
        status(reqwest::Method::GET, &format!("/{fine}")).await.0,
        302
    );

    // An unreadable list keeps the old one.
    std::fs::remove_file(&list).unwrap();
    let logged = |server: &litelink_lab::process::ServerProcess| {
        server
            .log()
            .1
            .iter()
            .filter(|l| l.contains("deny list not reloaded"))
            .count()
    };
    let before = logged(&server);
    server.signal(libc::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while logged(&server) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload never failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        status(reqwest::Method::GET, &format!("/{bad}")).await.0,
        410
    );

    // Off the list, the link redirects again; the blocked answers were
    // no visits (two redirects before, those before the signal was handled,
    // one now, and the other link's one).
    std::fs::write(&list, "elsewhere.example\n").unwrap();
    server.signal(libc::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while status(reqwest::Method::GET, &format!("/{bad}")).await.0 != 302 {
        assert!(
            std::time::Instant::now() < deadline,
            "never redirected again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, stats) = status(reqwest::Method::GET, "/stats").await;
    let stats: Value = serde_json::from_str(&stats).expect("stats");
    assert_eq!(stats["visits"]["counted"], 4 + early, "{stats}");
}

/// Once keys exist, `/stats` is the operator's; no absolute path.
#[tokio::test]
async fn stats_needs_an_admin_key_once_keys_exist() {
    let app = spawn_app(&[]).await;
    let open = app.get("/stats").await;
    assert_eq!(open.status(), 200);
    let body: Value = open.json().await.unwrap();
    assert_eq!(body["file"], "litelink.db");
    let dir = app.db.parent().unwrap().to_str().unwrap().to_owned();
    assert!(!body.to_string().contains(&dir), "{body}");

    let user = app.new_key("user", false).await;
    assert_error(app.get("/stats").await, 401, "admin key").await;
    let r = app
        .api(reqwest::Method::GET, "/stats", Some(&user), None)
        .await;
    assert_error(r, 403, "admin key").await;
    let r = app
        .api(reqwest::Method::GET, "/stats", Some("ll_not_a_key"), None)
        .await;
    assert_eq!(r.status(), 401);
    app.new_key("root", true).await;
    assert_eq!(app.stats().await["file"], "litelink.db");

    let public = spawn_app(&["--stats-public"]).await;
    public.new_key("user", false).await;
    assert_eq!(public.get("/stats").await.status(), 200);
}

/// A link to the service itself is a loop: refused on its public host at
/// any port, on its listen address, and on the Host a client reached it
/// by, for creates and edits alike.
#[tokio::test]
async fn links_to_the_service_itself_are_refused() {
    let app = spawn_app(&[]).await;
    let port = app.addr.port();
    let own = [
        format!("http://127.0.0.1:{port}/abc"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/x"),
    ];
    for raw in &own {
        assert_error(app.create(raw).await, 400, "this service itself").await;
    }
    // The short URL of a link made a moment ago, as the client was given it.
    let r = app.create("https://example.com/first").await;
    let short: serde_json::Value = r.json().await.expect("json");
    let short = short["short_url"].as_str().expect("short_url").to_owned();
    assert_error(app.create(&short).await, 400, "this service itself").await;
    // The Host a request came in by is one of its names.
    let r = app
        .client
        .post(app.url("/link"))
        .header("host", "short.test")
        .json(&json!({ "url": "http://short.test/abc" }))
        .send()
        .await
        .expect("POST");
    assert_error(r, 400, "this service itself").await;
    assert_eq!(
        app.create(&format!("http://127.0.0.1:{}/", port ^ 1))
            .await
            .status(),
        201
    );

    let public = spawn_app(&["--public-url", "https://sho.rt"]).await;
    for raw in [
        "https://sho.rt/abc",
        "http://SHO.RT:8080/",
        "https://sho.rt./",
    ] {
        assert_error(public.create(raw).await, 400, "this service itself").await;
    }
    assert_eq!(public.create("https://www.sho.rt/").await.status(), 201);
    let code = public.create_ok("https://example.com/to-edit").await;
    let key = public.new_key("admin", true).await;
    let r = public
        .api(
            reqwest::Method::PATCH,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            Some(json!({ "url": "https://sho.rt/other" })),
        )
        .await;
    assert_error(r, 400, "this service itself").await;
}

/// A forwarded address never exempts a client: with `--trust-proxy on`,
/// `X-Forwarded-For: 203.0.113.5, 127.0.0.1` is the loopback client
/// named by a proxy, limited like any other. With a list, the client is
/// the nearest address that is no listed proxy, and a peer that is not
/// listed cannot name one at all.
#[tokio::test]
async fn forwarded_addresses_name_clients_only_from_trusted_proxies() {
    let limits = ["--create-rate", "6", "--create-burst", "3"];
    let post = async |app: &crate::helpers::TestApp, header: (&str, &str)| {
        let r = app
            .client
            .post(app.url("/link"))
            .header(header.0, header.1)
            .json(&json!({ "url": "https://example.com/fwd" }))
            .send()
            .await
            .expect("POST");
        r.status().as_u16()
    };
    fn xff(v: &str) -> (&'static str, &str) {
        ("x-forwarded-for", v)
    }

    let on = spawn_app(&[&["--trust-proxy"], &limits[..]].concat()).await;
    for _ in 0..3 {
        assert_eq!(post(&on, xff("203.0.113.5, 127.0.0.1")).await, 201);
    }
    assert_eq!(post(&on, xff("203.0.113.5, 127.0.0.1")).await, 429);

    // The test's peer is 127.0.0.1, a listed proxy, as is 10.0.0.0/8.
    let listed =
        spawn_app(&[&["--trust-proxy", "127.0.0.1,10.0.0.0/8"], &limits[..]].concat()).await;
    for _ in 0..3 {
        assert_eq!(post(&listed, xff("198.51.100.7, 10.1.2.3")).await, 201);
    }
    assert_eq!(post(&listed, xff("198.51.100.7")).await, 429);
    assert_eq!(
        post(
            &listed,
            ("forwarded", "for=198.51.100.7;proto=https, for=10.9.9.9")
        )
        .await,
        429
    );
    assert_eq!(post(&listed, xff("198.51.100.8, 10.1.2.3")).await, 201);
    assert_eq!(post(&listed, xff("203.0.113.5, 127.0.0.1")).await, 201);

    // A peer that is not listed: its headers name nobody, so every
    // request is the peer's own (loopback, limited when asked).
    let elsewhere = spawn_app(
        &[
            &["--trust-proxy", "10.0.0.0/8", "--rate-limit-loopback"],
            &limits[..],
        ]
        .concat(),
    )
    .await;
    for i in 0..3 {
        assert_eq!(post(&elsewhere, xff(&format!("198.51.100.{i}"))).await, 201);
    }
    assert_eq!(post(&elsewhere, xff("198.51.100.99")).await, 429);
}

/// Creates without a key are limited per client address, with
/// a key per key when asked; loopback is free unless asked.
#[tokio::test]
async fn anonymous_creates_are_rate_limited_per_client() {
    let app = spawn_app(&[
        "--trust-proxy",
        "--create-rate",
        "6",
        "--create-burst",
        "3",
        "--key-create-rate",
        "2",
        "--key-create-burst",
        "2",
    ])
    .await;
    let from = |ip: &'static str, key: Option<&str>| {
        let mut r = app
            .client
            .post(app.url("/link"))
            .header("x-forwarded-for", format!("203.0.113.99, {ip}"))
            .json(&json!({ "url": "https://example.com/rate" }));
        if let Some(key) = key {
            r = r.bearer_auth(key);
        }
        r.send()
    };
    for _ in 0..3 {
        assert_eq!(from("198.51.100.1", None).await.unwrap().status(), 201);
    }
    let r = from("198.51.100.1", None).await.unwrap();
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&wait), "Retry-After {wait}");
    assert_error(r, 429, "too many links").await;
    // Another client has its own bucket; so does another /64, not another
    // address inside one.
    assert_eq!(from("198.51.100.2", None).await.unwrap().status(), 201);
    for _ in 0..3 {
        assert_eq!(from("2001:db8:0:1::1", None).await.unwrap().status(), 201);
    }
    assert_eq!(from("2001:db8:0:1::2", None).await.unwrap().status(), 429);
    assert_eq!(from("2001:db8:0:2::1", None).await.unwrap().status(), 201);
    // The same route under its other name shares the bucket.
    let r = app
        .client
        .post(app.url("/api/v1/links"))
        .header("x-forwarded-for", "198.51.100.1")
        .json(&json!({ "url": "https://example.com/rate" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);

    // Keys: their own limit, per key.
    let key = app.new_key("busy", false).await;
    for _ in 0..2 {
        assert_eq!(
            from("198.51.100.1", Some(&key)).await.unwrap().status(),
            201
        );
    }
    assert_eq!(
        from("198.51.100.1", Some(&key)).await.unwrap().status(),
        429
    );

    // Loopback (no proxy header here, and without --trust-proxy any
    // header is ignored) is not limited by default ...
    let local = spawn_app(&["--create-rate", "1", "--create-burst", "1"]).await;
    for _ in 0..5 {
        let r = local
            .client
            .post(local.url("/link"))
            .header("x-forwarded-for", "198.51.100.1")
            .json(&json!({ "url": "https://example.com/local" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    // ... unless asked.
    let strict = spawn_app(&[
        "--create-rate",
        "1",
        "--create-burst",
        "1",
        "--rate-limit-loopback",
    ])
    .await;
    assert_eq!(strict.create("https://example.com/a").await.status(), 201);
    assert_eq!(strict.create("https://example.com/b").await.status(), 429);
    // Reads are never limited.
    for _ in 0..20 {
        assert_eq!(strict.get("/heart-beat").await.status(), 200);
    }
}

/// As a property over the running server: for any string a client
/// sends, an accepted link's `Location` is exactly the URL the API
/// answered, and that URL parses back to itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_any_input_location_is_the_stored_url() {
    use proptest::prop_oneof;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let app = spawn_app(&[]).await;
    let handle = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    // Half wild (most of these are refused), half shaped like URLs with
    // odd paths, so that enough are accepted in every run to say anything.
    let strategy = prop_oneof![
        "(https?|HTTP|ftp)?:?[/\\\\]{0,3}([a-zA-Z0-9%@:.\\[\\]-]{0,12})([/?#][ -~é]{0,12}){0,3}",
        "(https?|HTTPS?)://[a-zA-Z0-9%-]{1,10}\\.[a-z]{2,4}(:[0-9]{1,5})?([/?#\\\\][ -~é]{0,12}){0,3}",
    ];
    let accepted = std::sync::atomic::AtomicUsize::new(0);
    tokio::task::block_in_place(|| {
        runner
            .run(&strategy, |raw| {
                handle.block_on(async {
                    let r = app.create(&raw).await;
                    if r.status() != 201 {
                        assert_eq!(r.status(), 400, "{raw:?}");
                        return Ok(());
                    }
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let body: Value = r.json().await.unwrap();
                    let stored = body["link"].as_str().unwrap().to_owned();
                    let code = body["short_link"].as_str().unwrap();
                    let again = litelink_service::domain::TargetUrl::parse(&stored)
                        .map_err(|e| TestCaseError::fail(format!("{stored}: {e}")))?;
                    if again.as_str() != stored {
                        return Err(TestCaseError::fail(format!("{stored} -> {again}")));
                    }
                    let location = app.get(&format!("/{code}")).await.headers()["location"]
                        .to_str()
                        .unwrap()
                        .to_owned();
                    if location != stored {
                        return Err(TestCaseError::fail(format!("{location} != {stored}")));
                    }
                    Ok(())
                })
            })
            .unwrap();
    });
    assert!(
        accepted.load(std::sync::atomic::Ordering::Relaxed) > 20,
        "too few generated URLs were valid to say anything"
    );
}

/// A server with an empty deny list (its file, which the test rewrites)
/// and an admin key; the directory holds both and the database.
fn with_deny_list() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    litelink_lab::process::ServerProcess,
    String,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("deny.txt");
    std::fs::write(&list, "# nothing yet\n").expect("write the list");
    let db = dir.path().join("d.db");
    let admin = crate::helpers::run_keys(&db, &["create", "--name", "root"], true);
    let server = spawn_process(&db, &["--deny-hosts", &list.display().to_string()]);
    (dir, list, server, admin.trim().to_owned())
}

/// Every target a redirect can send to is checked against the deny list
/// as it is when the redirect is served: an expired link's `expired_url`
/// and the domain's not-found redirect stop at a reloaded list too.
#[tokio::test]
async fn a_reloaded_deny_list_stops_expired_urls_and_domain_redirects() {
    let (_dir, list, server, admin) = with_deny_list();
    let client = crate::helpers::client();
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let soon = soon
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let r = client
        .post(format!("{}/api/v1/links", server.url()))
        .bearer_auth(&admin)
        .json(&json!({"url": "https://fine.example/", "code": "brief",
                      "expires_at": soon, "expired_url": "https://later-bad.example/over"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 201);
    let r = client
        .patch(format!("{}/api/v1/domains/default", server.url()))
        .bearer_auth(&admin)
        .json(&json!({"not_found_redirect": "https://later-bad.example/nf"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(r.status(), 200);
    let get = async |path: &str| {
        let r = client
            .get(format!("{}{path}", server.url()))
            .send()
            .await
            .expect("GET");
        (
            r.status().as_u16(),
            r.headers()
                .get("location")
                .map(|l| l.to_str().unwrap_or_default().to_owned()),
        )
    };
    // Within a second or two the domain's redirect is read, and the link
    // expires.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let nf = get("/nothing-here").await;
        let over = get("/brief").await;
        if nf.1.as_deref() == Some("https://later-bad.example/nf")
            && over.1.as_deref() == Some("https://later-bad.example/over")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{nf:?} {over:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    std::fs::write(&list, "later-bad.example\n").unwrap();
    server.signal(libc::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (nf, over) = (get("/nothing-here").await, get("/brief").await);
        if nf == (404, None) && over == (410, None) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after SIGHUP: {nf:?} {over:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The mode bits of `path`, without the file type.
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The database, its WAL and shared memory, its lock file and exports
/// hold key and password hashes: only their owner may read them.
#[tokio::test]
async fn the_database_and_its_exports_are_only_their_owners() {
    let app = spawn_app(&[]).await;
    let db = app.db.clone();
    let with = |suffix: &str| {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        std::path::PathBuf::from(p)
    };
    app.create_ok("https://example.com/a").await;
    for path in [
        db.clone(),
        with("-wal"),
        with("-shm"),
        with("-litelink-lock"),
    ] {
        assert_eq!(mode_of(&path), 0o600, "{}", path.display());
    }
    let dir = app.stop().await.expect("its directory");
    let out = dir.path().join("links.jsonl");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["export", "--out"])
        .arg(&out)
        .arg("--db")
        .arg(&db)
        .status()
        .expect("export");
    assert!(status.success());
    assert_eq!(mode_of(&out), 0o600);
}

/// `--db` names a database file: a device, a directory or a pipe is
/// refused with a clear error, and a failed start leaves no lock file.
#[test]
fn a_db_that_is_no_regular_file_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![b'x'; 8192]).expect("write");
    // One an earlier build left would say nothing of this one.
    let _ = std::fs::remove_file("/dev/null-litelink-lock");
    for (db, needle) in [
        (std::path::PathBuf::from("/dev/null"), "not a regular file"),
        (dir.path().to_path_buf(), "not a regular file"),
        (garbage.clone(), ""),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(&db)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("litelink");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: {err}", db.display());
        assert!(err.contains(needle), "{}: {err}", db.display());
        let mut lock = db.as_os_str().to_owned();
        lock.push("-litelink-lock");
        assert!(
            !std::path::Path::new(&lock).exists(),
            "{} is left behind",
            std::path::Path::new(&lock).display()
        );
    }
}

/// A domain's redirects are answered as a link's are, revalidated on
/// every use (`Cache-Control: private, max-age=0`), and a link on an added
/// domain whose target is put on the deny list answers 410.
#[tokio::test]
async fn domain_redirects_are_revalidated_and_a_denied_link_on_a_domain_is_gone() {
    let (_dir, list, server, admin) = with_deny_list();
    let client = crate::helpers::client();
    let r = client
        .post(format!("{}/api/v1/domains", server.url()))
        .bearer_auth(&admin)
        .json(
            &json!({"host": "ex.co", "root_redirect": "https://e.com/home",
                      "not_found_redirect": "https://e.com/nf"}),
        )
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 201);
    let r = client
        .post(format!("{}/api/v1/links", server.url()))
        .bearer_auth(&admin)
        .json(&json!({"url": "https://turns-bad.example/x", "code": "soon-bad", "domain": "ex.co"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 201);
    let on_ex = async |path: &str| {
        let r = client
            .get(format!("{}{path}", server.url()))
            .header("host", "ex.co")
            .send()
            .await
            .expect("GET");
        let header = |name: &str| {
            r.headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or_default().to_owned())
        };
        (
            r.status().as_u16(),
            header("location"),
            header("cache-control"),
        )
    };
    let private = Some("private, max-age=0".to_owned());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let root = on_ex("/").await;
        if root.1.is_some() {
            assert_eq!(
                root,
                (302, Some("https://e.com/home".into()), private.clone())
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the domain is never read: {root:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        on_ex("/no-such-code").await,
        (302, Some("https://e.com/nf".into()), private.clone())
    );
    assert_eq!(on_ex("/soon-bad").await.0, 302);
    std::fs::write(&list, "turns-bad.example\n").unwrap();
    server.signal(libc::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while on_ex("/soon-bad").await.0 != 410 {
        assert!(
            std::time::Instant::now() < deadline,
            "still served after SIGHUP"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
