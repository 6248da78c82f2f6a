//! Several short domains on one server: the domains API and CLI, codes
//! that are unique per domain and found by the request's Host, each
//! domain's redirects, keys limited to a domain, and links from before
//! domains.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    Store, TestApp, assert_error, fresh_postgres_db, run_on, spawn_app, spawn_app_in,
    spawn_app_like, spawn_app_on,
};
use crate::valkey_server::ValkeyServer;

/// A GET of `path` with `Host: host` (raw bytes: an internationalised
/// name may come in its Unicode form).
async fn on(app: &TestApp, host: &[u8], path: &str) -> reqwest::Response {
    app.client
        .get(app.url(path))
        .header(
            reqwest::header::HOST,
            reqwest::header::HeaderValue::from_bytes(host).expect("host"),
        )
        .send()
        .await
        .expect("request")
}

/// Where `path` on `host` redirects to, or its status when it does not.
async fn location(app: &TestApp, host: &str, path: &str) -> Result<String, u16> {
    let r = on(app, host.as_bytes(), path).await;
    match r.headers().get("location") {
        Some(l) if r.status().is_redirection() => Ok(l.to_str().expect("ascii").to_owned()),
        _ => Err(r.status().as_u16()),
    }
}

async fn body(r: reqwest::Response) -> Value {
    r.json().await.expect("json")
}

/// Adds `host` through the API (with `redirects`), expecting 201.
async fn add(app: &TestApp, admin: &str, host: &str, redirects: Value) -> Value {
    let mut b = redirects;
    b["host"] = json!(host);
    let r = app
        .api(Method::POST, "/api/v1/domains", Some(admin), Some(b))
        .await;
    assert_eq!(r.status(), 201, "adding {host}");
    body(r).await
}

/// Creates a link through the API, expecting 201.
async fn link(app: &TestApp, key: &str, fields: Value) -> Value {
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(key),
            Some(fields.clone()),
        )
        .await;
    assert_eq!(r.status(), 201, "{fields}");
    body(r).await
}

crate::on_both_stores! {
    async fn domains_are_added_listed_changed_and_removed(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("admin", true).await;
        let user = app.new_key("user", false).await;
        let list = async || body(app.api(Method::GET, "/api/v1/domains", None, None).await).await;
        let this = &app;
        assert_eq!(
            list().await,
            json!({"domains": [{"host": null, "root_redirect": null,
                "not_found_redirect": null, "expired_redirect": null, "default": true}]})
        );
        let added = add(&app, &admin, "Go.Example.COM", json!({
            "not_found_redirect": "https://example.com/missing"
        }))
        .await;
        assert_eq!(added, json!({"host": "go.example.com", "root_redirect": null,
            "not_found_redirect": "https://example.com/missing", "expired_redirect": null,
            "default": false}));
        assert_eq!(list().await["domains"].as_array().expect("list").len(), 2);
        let post = |key: Option<&'static str>, b: Value| {
            let key = key.map(|k| if k == "admin" { admin.clone() } else { user.clone() });
            async move { this.api(Method::POST, "/api/v1/domains", key.as_deref(), Some(b)).await }
        };
        assert_error(post(Some("admin"), json!({"host": "go.example.com"})).await, 409, "exists").await;
        assert_error(post(Some("admin"), json!({"host": "GO.example.com."})).await, 409, "exists").await;
        for bad in ["https://x.com", "x.com:80", "a b", "", "default", "x.com/path"] {
            assert_error(post(Some("admin"), json!({"host": bad})).await, 400, "host").await;
        }
        assert_error(post(Some("admin"), json!({})).await, 400, "host").await;
        assert_error(post(Some("admin"), json!({"host": "y.com", "root_redirect": "ftp://x"})).await,
            400, "root_redirect").await;
        assert_error(post(Some("admin"), json!({"host": "y.com", "other": 1})).await, 400, "other").await;
        assert_error(post(None, json!({"host": "y.com"})).await, 401, "key").await;
        assert_error(post(Some("user"), json!({"host": "y.com"})).await, 403, "admin").await;
        let r = app.client.post(app.url("/api/v1/domains")).bearer_auth(&admin)
            .body("{\"host\": \"y.com\"}").send().await.expect("post");
        assert_eq!(r.status(), 415);

        // One domain, by its host in any case, or `default`.
        let got = body(app.api(Method::GET, "/api/v1/domains/GO.example.com", None, None).await).await;
        assert_eq!(got, added);
        let default = body(app.api(Method::GET, "/api/v1/domains/default", None, None).await).await;
        assert_eq!(default["default"], true);
        assert_error(app.api(Method::GET, "/api/v1/domains/nope.example", None, None).await, 404, "nope").await;
        assert_error(app.api(Method::GET, "/api/v1/domains/%FF", None, None).await, 400, "path").await;
        assert_error(app.api(Method::DELETE, "/api/v1/domains/%FF", Some(&admin), None).await,
            400, "path").await;

        // Changed: a field set, one cleared; others kept.
        let path = "/api/v1/domains/go.example.com";
        let r = app.api(Method::PATCH, path, Some(&admin), Some(json!({
            "root_redirect": "https://example.com/home", "not_found_redirect": null
        }))).await;
        assert_eq!(r.status(), 200);
        let changed = body(r).await;
        assert_eq!(changed["root_redirect"], "https://example.com/home");
        assert_eq!(changed["not_found_redirect"], Value::Null);
        assert_error(app.api(Method::PATCH, path, Some(&user), Some(json!({}))).await, 403, "admin").await;
        assert_error(app.api(Method::PATCH, path, Some(&admin),
            Some(json!({"expired_redirect": 5}))).await, 400, "expired_redirect").await;
        assert_error(app.api(Method::PATCH, "/api/v1/domains/nope.example", Some(&admin),
            Some(json!({}))).await, 404, "nope").await;

        // A domain with links is removed only by force, which deletes them.
        let made = link(&app, &user, json!({"url": "https://e.com/1", "domain": "go.example.com"})).await;
        let code = made["code"].as_str().expect("code").to_owned();
        assert_eq!(location(&app, "go.example.com", &format!("/{code}")).await,
            Ok("https://e.com/1".into()));
        assert_error(app.api(Method::DELETE, path, Some(&admin), None).await, 409, "links").await;
        assert_error(app.api(Method::DELETE, &format!("{path}?force=maybe"), Some(&admin), None).await,
            400, "force").await;
        assert_error(app.api(Method::DELETE, &format!("{path}?force=true"), Some(&user), None).await,
            403, "admin").await;
        assert_error(app.api(Method::DELETE, "/api/v1/domains/default", Some(&admin), None).await,
            409, "default").await;
        let r = app.api(Method::DELETE, &format!("{path}?force=true"), Some(&admin), None).await;
        assert_eq!(r.status(), 204);
        assert_error(app.api(Method::DELETE, path, Some(&admin), None).await, 404, "no domain").await;
        assert_eq!(list().await["domains"].as_array().expect("list").len(), 1);
        // Its links are gone, on any host; the host is unknown now.
        assert_eq!(location(&app, "go.example.com", &format!("/{code}")).await, Err(404));
        assert_error(app.api(Method::POST, "/api/v1/links", Some(&user),
            Some(json!({"url": "https://e.com/2", "domain": "go.example.com"}))).await, 400, "domain").await;
        // A domain without links goes without force; added again, it is
        // a new domain whose codes are free.
        add(&app, &admin, "go.example.com", json!({})).await;
        let again = link(&app, &admin, json!({"url": "https://e.com/3", "domain": "go.example.com",
            "code": "again"})).await;
        assert_eq!(again["domain"], "go.example.com");
        assert_eq!(app.api(Method::DELETE, "/api/v1/domains/go.example.com?force=true",
            Some(&admin), None).await.status(), 204);
        add(&app, &admin, "go.example.com", json!({})).await;
        assert_eq!(app.api(Method::DELETE, path, Some(&admin), None).await.status(), 204);
    }
}

crate::on_both_stores! {
    async fn the_same_code_on_two_domains_leads_where_its_host_says_in_every_cache_mode(store: Store) {
        let valkey = ValkeyServer::start();
        for mode in ["none", "memory", "valkey", "tiered"] {
            let url = valkey.url();
            let prefix = format!("{mode}:");
            let app = spawn_app_in(&store, &["--cache", mode, "--valkey-url", &url,
                "--valkey-prefix", &prefix, "--valkey-timeout-ms", "2000",
                "--default-domain", "go.example.com"]).await;
            let admin = app.new_key("admin", true).await;
            add(&app, &admin, "ex.co", json!({})).await;
            let go = link(&app, &admin, json!({"url": "https://go.example/spring", "code": "spring"})).await;
            assert_eq!(go["domain"], "go.example.com", "{mode}");
            assert_eq!(go["short_url"], "https://go.example.com/spring", "{mode}");
            let ex = link(&app, &admin, json!({"url": "https://ex.example/spring", "code": "spring",
                "domain": "ex.co"})).await;
            assert_eq!(ex["short_url"], "https://ex.co/spring", "{mode}");
            // The same alias again on one of them is taken.
            assert_error(app.api(Method::POST, "/api/v1/links", Some(&admin),
                Some(json!({"url": "https://e.com/", "code": "spring", "domain": "EX.CO"}))).await,
                409, "taken").await;
            // A generated code of one domain is free as an alias on another.
            let generated = link(&app, &admin, json!({"url": "https://go.example/gen"})).await;
            let gcode = generated["code"].as_str().expect("code").to_owned();
            link(&app, &admin, json!({"url": "https://ex.example/gen", "code": gcode,
                "domain": "ex.co"})).await;
            for _ in 0..3 {
                for (host, path, want) in [
                    ("go.example.com", "/spring", "https://go.example/spring"),
                    ("ex.co", "/spring", "https://ex.example/spring"),
                    ("Ex.Co:8080", "/spring", "https://ex.example/spring"),
                    ("go.example.com", &format!("/{gcode}"), "https://go.example/gen"),
                    ("ex.co", &format!("/{gcode}"), "https://ex.example/gen"),
                ] {
                    assert_eq!(location(&app, host, path).await, Ok(want.to_owned()), "{mode} {host}{path}");
                }
            }
            // An edit on one domain leaves the same code on the other.
            let r = app.api(Method::PATCH, "/api/v1/links/spring?domain=ex.co", Some(&admin),
                Some(json!({"url": "https://ex.example/edited"}))).await;
            assert_eq!(r.status(), 200, "{mode}");
            assert_eq!(body(r).await["domain"], "ex.co");
            assert_eq!(location(&app, "ex.co", "/spring").await, Ok("https://ex.example/edited".into()), "{mode}");
            assert_eq!(location(&app, "go.example.com", "/spring").await, Ok("https://go.example/spring".into()), "{mode}");
            // Management routes mean the default domain without ?domain=.
            let r = app.api(Method::GET, "/api/v1/links/spring", Some(&admin), None).await;
            assert_eq!(body(r).await["url"], "https://go.example/spring", "{mode}");
            assert_error(app.api(Method::GET, "/api/v1/links/spring?domain=nope.example",
                Some(&admin), None).await, 400, "nope").await;
            // So does the seed API.
            let r = on(&app, b"ex.co", "/link/spring").await;
            assert_eq!(body(r).await["link"], "https://go.example/spring", "{mode}");
            // A delete on one domain leaves the other.
            assert_eq!(app.api(Method::DELETE, &format!("/api/v1/links/{gcode}?domain=ex.co"),
                Some(&admin), None).await.status(), 204, "{mode}");
            assert_eq!(location(&app, "ex.co", &format!("/{gcode}")).await, Err(404), "{mode}");
            assert_eq!(location(&app, "go.example.com", &format!("/{gcode}")).await,
                Ok("https://go.example/gen".into()), "{mode}");
            assert_eq!(app.api(Method::DELETE, "/api/v1/links/spring", Some(&admin), None)
                .await.status(), 204, "{mode}");
            assert_eq!(location(&app, "go.example.com", "/spring").await, Err(404), "{mode}");
            assert_eq!(location(&app, "ex.co", "/spring").await,
                Ok("https://ex.example/edited".into()), "{mode}");
            // Listing filters by domain.
            let r = app.api(Method::GET, "/api/v1/links?domain=ex.co", Some(&admin), None).await;
            let listed = body(r).await;
            let links = listed["links"].as_array().expect("links");
            assert_eq!(links.len(), 1, "{mode}: {listed}");
            assert!(links.iter().all(|l| l["domain"] == "ex.co"), "{mode}");
            let all = body(app.api(Method::GET, "/api/v1/links", Some(&admin), None).await).await;
            assert_eq!(all["links"].as_array().expect("links").len(), 2, "{mode}");
            app.stop().await;
        }
    }
}

crate::on_both_stores! {
    async fn an_unknown_host_is_the_default_domain_or_refused(store: Store) {
    let app = spawn_app_in(&store, &["--default-domain", "go.example.com"]).await;
    let admin = app.new_key("admin", true).await;
    add(&app, &admin, "ex.co", json!({})).await;
    let code = link(&app, &admin, json!({"url": "https://e.com/d"})).await["code"]
        .as_str()
        .expect("code")
        .to_owned();
    let path = format!("/{code}");
    for host in ["go.example.com", "other.example", "127.0.0.1"] {
        assert_eq!(
            location(&app, host, &path).await,
            Ok("https://e.com/d".into()),
            "{host}"
        );
    }
    assert_eq!(location(&app, "ex.co", &path).await, Err(404));
    let (db, source) = (app.db.clone(), app.store.clone());
    let dir = app.stop().await;

    let app = spawn_app_like(
        &db,
        &source,
        &[
            "--default-domain",
            "go.example.com",
            "--unknown-host",
            "reject",
        ],
    )
    .await;
    assert_eq!(
        location(&app, "go.example.com", &path).await,
        Ok("https://e.com/d".into())
    );
    for p in [
        path.as_str(),
        "/",
        &format!("{path}/qr.svg"),
        &format!("{path}/qr.png"),
        &format!("{path}/qr.svg?domain=default"),
    ] {
        let r = on(&app, b"other.example", p).await;
        assert_error(r, 404, "domain").await;
    }
    let head = app
        .client
        .head(app.url(&path))
        .header("host", "other.example")
        .send()
        .await
        .expect("head");
    assert_eq!(head.status(), 404);
    // The API and the seed API answer on any host.
    let r = on(&app, b"other.example", &format!("/link/{code}")).await;
    assert_eq!(r.status(), 200);
    let seed = body(r).await;
    assert!(seed["link"].as_str().is_some_and(|l| l.starts_with("https://")), "{seed}");
    let r = app
        .client
        .get(app.url("/api/v1/links"))
        .header("host", "other.example")
        .bearer_auth(&admin)
        .send()
        .await
        .expect("list");
    assert_eq!(r.status(), 200);
    app.stop().await;
    drop(dir);

    // Refusing unknown hosts needs to know the default domain's.
    let dir = tempfile::tempdir().expect("tempdir");
    let settings =
        crate::helpers::settings(&dir.path().join("l.db"), &["--unknown-host", "reject"]);
    let built = litelink_service::Application::build(settings).await;
    let Err(e) = built else {
        panic!("started without a default domain")
    };
    assert!(e.to_string().contains("--default-domain"), "{e}");
    }
}

crate::on_both_stores! {
    async fn an_internationalised_host_is_found_in_either_form(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let admin = app.new_key("admin", true).await;
    let added = add(&app, &admin, "Bücher.example", json!({})).await;
    assert_eq!(added["host"], "xn--bcher-kva.example");
    let made = link(
        &app,
        &admin,
        json!({"url": "https://e.com/buch", "code": "buch", "domain": "bücher.example"}),
    )
    .await;
    assert_eq!(made["domain"], "xn--bcher-kva.example");
    assert_eq!(made["short_url"], "https://xn--bcher-kva.example/buch");
    for host in [
        "xn--bcher-kva.example",
        "XN--BCHER-KVA.example:8080",
        "bücher.example",
        "BÜCHER.example",
    ] {
        let r = on(&app, host.as_bytes(), "/buch").await;
        assert_eq!(r.status(), 302, "{host}");
        assert_eq!(r.headers()["location"], "https://e.com/buch", "{host}");
    }
    // The default domain does not have it.
    assert_eq!(location(&app, "localhost", "/buch").await, Err(404));
    let r = app
        .api(
            Method::GET,
            "/api/v1/domains/b%C3%BCcher.example",
            None,
            None,
        )
        .await;
    assert_eq!(body(r).await["host"], "xn--bcher-kva.example");
    }
}

crate::on_both_stores! {
    async fn each_domain_has_its_root_not_found_and_expired_redirects(store: Store) {
        let app = spawn_app_in(&store, &["--cache", "memory"]).await;
        let admin = app.new_key("admin", true).await;
        add(&app, &admin, "ex.co", json!({
            "root_redirect": "https://ex.example/",
            "not_found_redirect": "https://ex.example/missing",
            "expired_redirect": "https://ex.example/expired",
        })).await;
        let once = link(&app, &admin, json!({"url": "https://e.com/once", "code": "once",
            "domain": "ex.co", "max_visits": 1})).await;
        assert_eq!(once["domain"], "ex.co");
        link(&app, &admin, json!({"url": "https://e.com/once", "code": "once", "max_visits": 1})).await;

        assert_eq!(location(&app, "ex.co", "/").await, Ok("https://ex.example/".into()));
        assert_eq!(location(&app, "ex.co", "/nothing-here").await, Ok("https://ex.example/missing".into()));
        assert_eq!(location(&app, "ex.co", "/once").await, Ok("https://e.com/once".into()));
        assert_eq!(location(&app, "ex.co", "/once").await, Ok("https://ex.example/expired".into()));
        let head = app.client.head(app.url("/nothing-here")).header("host", "ex.co")
            .send().await.expect("head");
        assert_eq!(head.headers()["location"], "https://ex.example/missing");
        // Deleted: not found.
        assert_eq!(app.api(Method::DELETE, "/api/v1/links/once?domain=ex.co", Some(&admin), None)
            .await.status(), 204);
        assert_eq!(location(&app, "ex.co", "/once").await, Ok("https://ex.example/missing".into()));
        // The seed API's look is not a redirect: its 404 stays.
        assert_eq!(on(&app, b"ex.co", "/link/nothing-here").await.status(), 404);

        // The default domain keeps the built-in answers until it is given
        // its own.
        let page = on(&app, b"localhost", "/").await;
        assert_eq!(page.status(), 200);
        assert_eq!(location(&app, "localhost", "/nothing-here").await, Err(404));
        assert_eq!(location(&app, "localhost", "/once").await, Ok("https://e.com/once".into()));
        assert_eq!(location(&app, "localhost", "/once").await, Err(410));
        let r = app.api(Method::PATCH, "/api/v1/domains/default", Some(&admin), Some(json!({
            "root_redirect": "https://home.example/",
            "not_found_redirect": "https://home.example/404",
            "expired_redirect": "https://home.example/410",
        }))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(body(r).await["default"], true);
        assert_eq!(location(&app, "localhost", "/").await, Ok("https://home.example/".into()));
        assert_eq!(location(&app, "localhost", "/nothing-here").await, Ok("https://home.example/404".into()));
        assert_eq!(location(&app, "localhost", "/once").await, Ok("https://home.example/410".into()));
        // And the page is still there to be had.
        assert_eq!(on(&app, b"localhost", "/manage").await.status(), 200);
    }
}

crate::on_both_stores! {
    async fn a_key_limited_to_a_domain_works_on_that_domain_only(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("admin", true).await;
        add(&app, &admin, "ex.co", json!({})).await;
        add(&app, &admin, "go.example", json!({})).await;
        let key = app.run_keys(&["create", "--name", "ex-team", "--domain", "EX.CO"], false);
        app.wait_for_key(&key).await;
        let listed = app.run_keys(&["list"], false);
        assert!(listed.lines().any(|l| l.starts_with("ex-team") && l.contains("ex.co")), "{listed}");

        // Creates: on its domain only.
        let mine = link(&app, &key, json!({"url": "https://e.com/mine", "code": "shared",
            "domain": "ex.co"})).await;
        assert_eq!(mine["domain"], "ex.co");
        for other in [json!({"url": "https://e.com/x", "domain": "go.example"}),
                      json!({"url": "https://e.com/x", "domain": "default"})] {
            assert_error(app.api(Method::POST, "/api/v1/links", Some(&key), Some(other)).await,
                403, "domain").await;
        }
        assert_error(app.api(Method::POST, "/link", Some(&key),
            Some(json!({"url": "https://e.com/seed"}))).await, 403, "domain").await;
        // A create that names no domain is on its own, as are the routes
        // below without `?domain=`.
        let unnamed = link(&app, &key, json!({"url": "https://e.com/own", "code": "unnamed"})).await;
        assert_eq!(unnamed["domain"], "ex.co", "{unnamed}");
        let got = body(app.api(Method::GET, "/api/v1/links/unnamed", Some(&key), None).await).await;
        assert_eq!((&got["code"], &got["domain"], &got["url"]),
            (&json!("unnamed"), &json!("ex.co"), &json!("https://e.com/own")), "{got}");
        assert_eq!(location(&app, "ex.co", "/unnamed").await, Ok("https://e.com/own".into()));
        assert_eq!(app.api(Method::DELETE, "/api/v1/links/unnamed", Some(&key), None).await.status(), 204);
        assert_error(app.api(Method::GET, "/api/v1/links/unnamed?domain=ex.co", Some(&key), None)
            .await, 404, "unnamed").await;
        // The same code on other domains, made by the admin.
        let theirs = link(&app, &admin, json!({"url": "https://e.com/theirs", "code": "shared",
            "domain": "go.example"})).await;
        assert_eq!(theirs["domain"], "go.example");
        link(&app, &admin, json!({"url": "https://e.com/default", "code": "shared"})).await;

        // Listing: its own domain's links, whatever else it asks for.
        let r = app.api(Method::GET, "/api/v1/links", Some(&key), None).await;
        let listed = body(r).await;
        assert_eq!(listed["links"].as_array().expect("links").len(), 1, "{listed}");
        assert_eq!(listed["links"][0]["domain"], "ex.co");
        assert_eq!(app.api(Method::GET, "/api/v1/links?domain=ex.co", Some(&key), None)
            .await.status(), 200);
        assert_error(app.api(Method::GET, "/api/v1/links?domain=go.example", Some(&key), None)
            .await, 403, "domain").await;
        assert_error(app.api(Method::GET, "/api/v1/links?domain=default", Some(&key), None)
            .await, 403, "domain").await;

        // Get, edit, visits and delete: a link on another domain is 404.
        for path in ["/api/v1/links/shared?domain=go.example", "/api/v1/links/shared?domain=default",
                     "/api/v1/links/shared/visits?domain=go.example"] {
            assert_error(app.api(Method::GET, path, Some(&key), None).await, 404, "shared").await;
        }
        assert_error(app.api(Method::PATCH, "/api/v1/links/shared?domain=go.example", Some(&key),
            Some(json!({"url": "https://e.com/hijack"}))).await, 404, "shared").await;
        assert_error(app.api(Method::DELETE, "/api/v1/links/shared?domain=go.example", Some(&key),
            None).await, 404, "shared").await;
        assert_error(app.api(Method::DELETE, "/api/v1/links/shared?domain=default", Some(&key),
            None).await, 404, "shared").await;
        assert_eq!(location(&app, "go.example", "/shared").await, Ok("https://e.com/theirs".into()));
        assert_eq!(location(&app, "localhost", "/shared").await, Ok("https://e.com/default".into()));
        // On its own domain: all of it.
        let own = "/api/v1/links/shared?domain=ex.co";
        let got = body(app.api(Method::GET, own, Some(&key), None).await).await;
        assert_eq!((&got["domain"], &got["url"]), (&json!("ex.co"), &json!("https://e.com/mine")),
            "{got}");
        let r = app.api(Method::GET, "/api/v1/links/shared/visits?domain=ex.co", Some(&key), None)
            .await;
        assert_eq!(r.status(), 200);
        let visits = body(r).await;
        assert!(visits["total"].is_u64(), "{visits}");
        let r = app.api(Method::PATCH, own, Some(&key), Some(json!({"url": "https://e.com/mine2"}))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(location(&app, "ex.co", "/shared").await, Ok("https://e.com/mine2".into()));
        assert_eq!(app.api(Method::DELETE, own, Some(&key), None).await.status(), 204);
        assert_eq!(location(&app, "ex.co", "/shared").await, Err(404));
        // The admin sees every domain.
        let all = body(app.api(Method::GET, "/api/v1/links", Some(&admin), None).await).await;
        assert_eq!(all["links"].as_array().expect("links").len(), 2, "{all}");
        // A limited key cannot manage domains, and reads only its own.
        assert_error(app.api(Method::POST, "/api/v1/domains", Some(&key),
            Some(json!({"host": "mine.example"}))).await, 403, "admin").await;
        let seen = body(app.api(Method::GET, "/api/v1/domains", Some(&key), None).await).await;
        assert_eq!(seen["domains"].as_array().expect("domains").len(), 1, "{seen}");
        assert_eq!(seen["domains"][0]["host"], "ex.co");
        let got = body(app.api(Method::GET, "/api/v1/domains/ex.co", Some(&key), None).await).await;
        assert_eq!(got["host"], "ex.co", "{got}");
        assert_error(app.api(Method::GET, "/api/v1/domains/go.example", Some(&key), None).await,
            404, "go.example").await;
        let all = body(app.api(Method::GET, "/api/v1/domains", Some(&admin), None).await).await;
        assert_eq!(all["domains"].as_array().expect("domains").len(), 3, "{all}");
    }
}

crate::on_both_stores! {
    /// Without a key the domains are readable only where anyone may
    /// create links (the page's picker needs them there).
    async fn reading_domains_needs_a_key_where_creating_does(store: Store) {
        let app = spawn_app_in(&store, &["--create-auth", "key"]).await;
        let admin = app.new_key("admin", true).await;
        add(&app, &admin, "ex.co", json!({"root_redirect": "https://e.com/home"})).await;
        for path in ["/api/v1/domains", "/api/v1/domains/ex.co", "/api/v1/domains/default"] {
            assert_error(app.api(Method::GET, path, None, None).await, 401, "key").await;
            let r = app.api(Method::GET, path, Some(&admin), None).await;
            assert_eq!(r.status(), 200, "{path}");
            let got = body(r).await;
            let host = if path.ends_with("default") { json!(null) } else { json!("ex.co") };
            if path.ends_with("domains") {
                assert_eq!(got["domains"].as_array().map(Vec::len), Some(2), "{got}");
            } else {
                assert_eq!(got["host"], host, "{path}: {got}");
            }
        }
        let user = app.new_key("user", false).await;
        let seen = body(app.api(Method::GET, "/api/v1/domains", Some(&user), None).await).await;
        assert_eq!(seen["domains"].as_array().expect("domains").len(), 2, "{seen}");
    }
}

crate::on_both_stores! {
    /// `litelink domains` beside a running server: what it adds, changes
    /// and removes is honoured within a second (5 s here, for a loaded
    /// machine).
    async fn domains_changed_beside_the_server_are_honoured(store: Store) {
    let app = spawn_app_in(&store, &[]).await;
    let admin = app.new_key("admin", true).await;
    let domains = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"));
        cmd.arg("domains").args(args);
        match &app.store {
            Some(url) => cmd.args(["--store", url]),
            None => cmd.arg("--db").arg(&app.db),
        };
        let out = cmd.output().expect("litelink domains");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, said) = domains(&[
        "add",
        "ex.co",
        "--not-found-redirect",
        "https://ex.example/404",
    ]);
    assert!(ok, "{said}");
    let (ok, said) = domains(&["add", "EX.co"]);
    assert!(!ok && said.contains("exists"), "{said}");
    let (ok, said) = domains(&["add", "https://bad"]);
    assert!(!ok, "{said}");
    until(
        &app,
        "ex.co",
        "/missing",
        Ok("https://ex.example/404".into()),
    )
    .await;
    let (ok, said) = domains(&["set", "ex.co", "--not-found-redirect", ""]);
    assert!(ok, "{said}");
    until(&app, "ex.co", "/missing", Err(404)).await;
    let (ok, said) = domains(&["list"]);
    assert!(
        ok && said.contains("ex.co") && said.contains("default"),
        "{said}"
    );

    link(
        &app,
        &admin,
        json!({"url": "https://e.com/x", "code": "kept", "domain": "ex.co"}),
    )
    .await;
    let (ok, said) = domains(&["remove", "ex.co"]);
    assert!(!ok && said.contains("links"), "{said}");
    let (ok, said) = domains(&["remove", "default"]);
    assert!(!ok, "{said}");
    let (ok, said) = domains(&["remove", "ex.co", "--force"]);
    assert!(ok, "{said}");
    // The host is unknown now (the default domain, which lacks the code).
    until(&app, "ex.co", "/kept", Err(404)).await;
    }
}

/// Polls `path` on `host` until it answers `want`.
async fn until(app: &TestApp, host: &str, path: &str, want: Result<String, u16>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = location(app, host, path).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{host}{path}: {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

crate::on_both_stores! {
    async fn export_and_import_carry_each_links_domain(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("admin", true).await;
        add(&app, &admin, "ex.co", json!({})).await;
        link(&app, &admin, json!({"url": "https://e.com/d", "code": "same"})).await;
        link(&app, &admin, json!({"url": "https://e.com/x", "code": "same", "domain": "ex.co"})).await;
        let gone = link(&app, &admin, json!({"url": "https://e.com/g", "domain": "ex.co"})).await;
        let gone = gone["code"].as_str().expect("code").to_owned();
        assert_eq!(app.api(Method::DELETE, &format!("/api/v1/links/{gone}?domain=ex.co"),
            Some(&admin), None).await.status(), 204);
        let (db, source) = (app.db.clone(), app.store.clone());
        let dir = app.stop().await;
        for format in ["jsonl", "csv"] {
            let file = db.with_extension(format);
            run_on(&source, &db, &["export", "--format", format, "--out", file.to_str().expect("path")], true);
            let text = std::fs::read_to_string(&file).expect("export");
            assert!(text.contains("ex.co"), "{text}");

            // Into a database without the domain: skipped, with its line.
            let target = fresh(&store).await;
            let tdb = db.with_extension(format!("{format}.db"));
            let (ok, said) = run_on(&target, &tdb, &["import", "--format", format,
                file.to_str().expect("path")], false);
            assert!(ok && said.contains("skipped: lines") && said.contains("no domain 'ex.co'"), "{said}");
            // With --create-domains: every link on its domain.
            let target = fresh(&store).await;
            let tdb = db.with_extension(format!("{format}.2.db"));
            let (ok, said) = run_on(&target, &tdb, &["import", "--create-domains", "--format", format,
                file.to_str().expect("path")], false);
            assert!(ok, "{said}");
            let mut args = vec!["--cache", "none"];
            if let Some(url) = &target {
                args.extend(["--store", url.as_str()]);
            }
            let back = spawn_app_on(&tdb, &args).await;
            assert_eq!(location(&back, "ex.co", "/same").await, Ok("https://e.com/x".into()), "{format}");
            assert_eq!(location(&back, "localhost", "/same").await, Ok("https://e.com/d".into()), "{format}");
            assert_eq!(location(&back, "ex.co", &format!("/{gone}")).await, Err(404), "{format}");
            // The tombstone came too: its code stays taken there.
            let admin2 = back.new_key("admin", true).await;
            assert_error(back.api(Method::POST, "/api/v1/links", Some(&admin2),
                Some(json!({"url": "https://e.com/n", "code": gone, "domain": "ex.co"}))).await,
                409, "taken").await;
            back.stop().await;
        }
        drop(dir);
    }
}

/// A fresh PostgreSQL database for `store`, or `None` (SQLite: a file).
async fn fresh(store: &Store) -> Option<String> {
    match store {
        Store::Sqlite => None,
        Store::Postgres => Some(fresh_postgres_db().await),
    }
}

/// A SQLite database from before domains: after the upgrade every link is
/// on the default domain, under the code it had.
#[tokio::test]
async fn links_from_before_domains_are_on_the_default_domain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("old.db");
    {
        let mut conn = rusqlite::Connection::open(&db).expect("open");
        litelink_service::store::sqlite::migrations::migrate_to(&mut conn, 5).expect("schema 5");
        conn.execute_batch(
            "INSERT INTO links (code, target, created_at, named) VALUES
                ('OldCode001', 'https://example.com/1', 1, 1),
                ('old-alias', 'https://example.com/2', 2, 1);
             UPDATE meta SET value = 2 WHERE name = 'live_links';",
        )
        .expect("rows");
    }
    let app = spawn_app_on(&db, &["--default-domain", "go.example.com"]).await;
    let admin = app.new_key("admin", true).await;
    add(&app, &admin, "ex.co", json!({})).await;
    for (code, target) in [
        ("OldCode001", "https://example.com/1"),
        ("old-alias", "https://example.com/2"),
    ] {
        let path = format!("/{code}");
        assert_eq!(
            location(&app, "go.example.com", &path).await,
            Ok(target.into())
        );
        assert_eq!(location(&app, "ex.co", &path).await, Err(404));
        let r = app
            .api(
                Method::GET,
                &format!("/api/v1/links/{code}"),
                Some(&admin),
                None,
            )
            .await;
        let l = body(r).await;
        assert_eq!(
            (l["code"].as_str(), l["domain"].as_str()),
            (Some(code), Some("go.example.com"))
        );
    }
    // The old codes stay taken on the default domain, and are free on
    // the new one.
    assert_error(
        app.api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://e.com/", "code": "old-alias"})),
        )
        .await,
        409,
        "taken",
    )
    .await;
    link(
        &app,
        &admin,
        json!({"url": "https://e.com/new", "code": "old-alias", "domain": "ex.co"}),
    )
    .await;
}

/// The same on PostgreSQL: a database at its schema from before domains.
#[tokio::test]
async fn postgres_links_from_before_domains_are_on_the_default_domain() {
    let url = fresh_postgres_db().await;
    {
        let (mut client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        litelink_service::store::postgres::migrations::migrate_to(&mut client, 1)
            .await
            .expect("schema 1");
        client
            .batch_execute(
                "INSERT INTO links (code, target, created_at) VALUES
                    ('OldCode001', 'https://example.com/1', 1),
                    ('old-alias', 'https://example.com/2', 2);
                 UPDATE litelink_counts SET live_links = 2 WHERE shard = 0;",
            )
            .await
            .expect("rows");
    }
    let app = spawn_app(&["--store", &url]).await;
    let admin = app.new_key("admin", true).await;
    add(&app, &admin, "ex.co", json!({})).await;
    assert_eq!(
        location(&app, "localhost", "/OldCode001").await,
        Ok("https://example.com/1".into())
    );
    assert_eq!(location(&app, "ex.co", "/old-alias").await, Err(404));
    let listed = body(
        app.api(Method::GET, "/api/v1/links", Some(&admin), None)
            .await,
    )
    .await;
    let links = listed["links"].as_array().expect("links");
    assert_eq!(links.len(), 2);
    assert!(links.iter().all(|l| l["domain"].is_null()), "{listed}");
    link(
        &app,
        &admin,
        json!({"url": "https://e.com/new", "code": "old-alias", "domain": "ex.co"}),
    )
    .await;
    assert_eq!(
        location(&app, "ex.co", "/old-alias").await,
        Ok("https://e.com/new".into())
    );
}

/// Two instances on one database, each with its in-process cache: an
/// edit and a delete on one domain through one instance reach the other,
/// and the same code on another domain stays as it was on both.
#[tokio::test]
async fn instances_follow_changes_on_one_domain_and_leave_the_other() {
    let bus = ValkeyServer::start();
    let url = fresh_postgres_db().await;
    let bus_url = bus.url();
    let args = [
        "--store",
        url.as_str(),
        "--invalidations-url",
        bus_url.as_str(),
        "--cache-negative-ttl-ms",
        "60000",
    ];
    let (a, b) = tokio::join!(spawn_app(&args), spawn_app(&args));
    let admin = a.new_key("admin", true).await;
    b.wait_for_key(&admin).await;
    add(&a, &admin, "ex.co", json!({})).await;
    until_domain(&b, "ex.co").await;
    link(
        &a,
        &admin,
        json!({"url": "https://e.com/d", "code": "both"}),
    )
    .await;
    link(
        &a,
        &admin,
        json!({"url": "https://e.com/x", "code": "both", "domain": "ex.co"}),
    )
    .await;
    // B caches both.
    for _ in 0..2 {
        assert_eq!(
            location(&b, "ex.co", "/both").await,
            Ok("https://e.com/x".into())
        );
        assert_eq!(
            location(&b, "localhost", "/both").await,
            Ok("https://e.com/d".into())
        );
    }
    let r = a
        .api(
            Method::PATCH,
            "/api/v1/links/both?domain=ex.co",
            Some(&admin),
            Some(json!({"url": "https://e.com/x2"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    until(&b, "ex.co", "/both", Ok("https://e.com/x2".into())).await;
    assert_eq!(
        location(&b, "localhost", "/both").await,
        Ok("https://e.com/d".into())
    );
    assert_eq!(
        a.api(
            Method::DELETE,
            "/api/v1/links/both?domain=ex.co",
            Some(&admin),
            None
        )
        .await
        .status(),
        204
    );
    until(&b, "ex.co", "/both", Err(404)).await;
    assert_eq!(
        location(&b, "localhost", "/both").await,
        Ok("https://e.com/d".into())
    );
}

/// Waits until `app` knows the domain `host` (servers reload domains every
/// second).
async fn until_domain(app: &TestApp, host: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while app
        .api(Method::GET, &format!("/api/v1/domains/{host}"), None, None)
        .await
        .status()
        != 200
    {
        assert!(Instant::now() < deadline, "{host} never known");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the one QR code in a PNG.
fn decode_qr(png: &[u8]) -> String {
    let image = image::load_from_memory(png).expect("a PNG").to_luma8();
    let mut prepared = rqrr::PreparedImage::prepare_from_greyscale(
        image.width() as usize,
        image.height() as usize,
        |x, y| image.get_pixel(x as u32, y as u32).0[0],
    );
    let grids = prepared.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code in the image");
    grids[0].decode().expect("a readable QR code").1
}

/// The QR codes encode the link's own short URL: a code of another domain
/// is found with `?domain=`, or by the Host.
#[tokio::test]
async fn qr_codes_are_of_the_links_own_short_url() {
    let app = spawn_app(&["--public-url", "https://go.example.com"]).await;
    let admin = app.new_key("admin", true).await;
    add(&app, &admin, "ex.co", json!({})).await;
    link(
        &app,
        &admin,
        json!({"url": "https://e.com/x", "code": "qr-one", "domain": "ex.co"}),
    )
    .await;
    link(
        &app,
        &admin,
        json!({"url": "https://e.com/d", "code": "qr-one"}),
    )
    .await;
    let svg = async |path: &str, host: &str| {
        let r = on(&app, host.as_bytes(), path).await;
        (r.status().as_u16(), r.text().await.expect("text"))
    };
    let (s1, by_param) = svg("/qr-one/qr.svg?domain=ex.co", "go.example.com").await;
    let (s2, by_host) = svg("/qr-one/qr.svg", "ex.co").await;
    let (s3, default) = svg("/qr-one/qr.svg", "go.example.com").await;
    assert_eq!((s1, s2, s3), (200, 200, 200));
    assert_eq!(by_param, by_host, "one link, one URL");
    assert_ne!(by_param, default, "two links, two URLs");
    // What each PNG says, decoded.
    let decoded = async |path: &str, host: &str| {
        let r = on(&app, host.as_bytes(), path).await;
        assert_eq!(r.status(), 200, "{path}");
        decode_qr(&r.bytes().await.expect("png"))
    };
    assert_eq!(
        decoded("/qr-one/qr.png?domain=ex.co", "go.example.com").await,
        "https://ex.co/qr-one"
    );
    assert_eq!(
        decoded("/qr-one/qr.png", "ex.co").await,
        "https://ex.co/qr-one"
    );
    assert_eq!(
        decoded("/qr-one/qr.png", "go.example.com").await,
        "https://go.example.com/qr-one"
    );
    // Its link object says which URL that is.
    let r = app
        .api(
            Method::GET,
            "/api/v1/links/qr-one?domain=ex.co",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(body(r).await["short_url"], "https://ex.co/qr-one");
    let (status, _) = svg("/qr-one/qr.svg?domain=nope.example", "ex.co").await;
    assert_eq!(status, 400);
}

/// A domain's redirects are checked as link targets are, when they are
/// set through the API: private addresses, the server itself, a denied
/// host and user info are each a 400 naming the field.
#[tokio::test]
async fn domain_redirects_are_checked_as_link_targets() {
    let dir = tempfile::tempdir().expect("dir");
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "denied.example\n").expect("deny list");
    let app = spawn_app(&[
        "--refuse-private-targets",
        "--deny-hosts",
        deny.to_str().expect("utf-8"),
    ])
    .await;
    let admin = app.new_key("admin", true).await;
    let own = format!("http://{}/loop", app.addr);
    for (field, url, why) in [
        ("root_redirect", "http://169.254.169.254/latest", "private"),
        ("not_found_redirect", "http://[::1]/", "private"),
        ("expired_redirect", own.as_str(), "points to"),
        ("root_redirect", "https://www.denied.example/", "deny list"),
        (
            "not_found_redirect",
            "https://u:p@example.com/",
            "user name",
        ),
    ] {
        let r = app
            .api(
                Method::POST,
                "/api/v1/domains",
                Some(&admin),
                Some(json!({"host": "go.example.com", field: url})),
            )
            .await;
        assert_error(r, 400, &format!("{field}: ")).await;
        let r = app
            .api(
                Method::PATCH,
                "/api/v1/domains/default",
                Some(&admin),
                Some(json!({ field: url })),
            )
            .await;
        assert_eq!(r.status(), 400, "{field} {url}");
        let message = body(r).await["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.starts_with(&format!("{field}: ")) && message.contains(why),
            "{message}"
        );
    }
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/domains/default",
            Some(&admin),
            Some(json!({"not_found_redirect": "https://example.com/nf"})),
        )
        .await;
    assert_eq!(
        body(r).await["not_found_redirect"],
        "https://example.com/nf"
    );
}

/// A target on one of the server's own domains could lead back to a link
/// here (`ex.co/a -> other.io/b -> ex.co/a`): refused for links, rules and
/// domain redirects, whichever domain the link is on.
#[tokio::test]
async fn targets_on_the_servers_own_domains_are_refused() {
    let app = spawn_app(&[]).await;
    let admin = app.new_key("admin", true).await;
    for host in ["ex.co", "other.io"] {
        let r = app
            .api(
                Method::POST,
                "/api/v1/domains",
                Some(&admin),
                Some(json!({"host": host})),
            )
            .await;
        assert_eq!(r.status(), 201, "{host}");
    }
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://example.com/", "code": "ours", "domain": "ex.co"})),
        )
        .await;
    assert_eq!(r.status(), 201);
    for body in [
        json!({"url": "https://other.io/b", "code": "theirs", "domain": "other.io"}),
        json!({"url": "https://OTHER.IO./b", "code": "theirs"}),
        json!({"url": "https://example.com/", "code": "ruled",
               "rules": [{"if": {"device": "ios"}, "url": "https://ex.co/ours"}]}),
    ] {
        let r = app
            .api(
                Method::POST,
                "/api/v1/links",
                Some(&admin),
                Some(body.clone()),
            )
            .await;
        assert_error(r, 400, "points to this service itself").await;
    }
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/links/ours?domain=ex.co",
            Some(&admin),
            Some(json!({"url": "https://other.io/b"})),
        )
        .await;
    assert_error(r, 400, "points to this service itself").await;
    let r = app
        .api(
            Method::PATCH,
            "/api/v1/domains/other.io",
            Some(&admin),
            Some(json!({"not_found_redirect": "https://ex.co/ours"})),
        )
        .await;
    assert_error(
        r,
        400,
        "not_found_redirect: url points to this service itself",
    )
    .await;
    // Other hosts are targets as ever.
    let r = app
        .api(
            Method::POST,
            "/api/v1/links",
            Some(&admin),
            Some(json!({"url": "https://www.other.io/b", "code": "theirs"})),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", body(r).await);
}

/// `litelink domains add` and `set` check the redirects as the API does,
/// with the policy flags `serve` takes.
#[test]
fn the_domains_command_checks_redirects_as_link_targets() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("d.db");
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "denied.example\n").expect("deny list");
    let deny = deny.to_str().expect("utf-8");
    for (args, why) in [
        (
            vec![
                "--refuse-private-targets",
                "--root-redirect",
                "http://169.254.169.254/",
            ],
            "--root-redirect: url points to a private",
        ),
        (
            vec![
                "--deny-hosts",
                deny,
                "--not-found-redirect",
                "https://a.denied.example/",
            ],
            "--not-found-redirect: url's host is on the deny list",
        ),
        (
            vec![
                "--public-url",
                "https://s.example",
                "--expired-redirect",
                "https://s.example/x",
            ],
            "--expired-redirect: url points to this service itself",
        ),
    ] {
        let mut add = vec!["domains", "add", "go.example.com"];
        add.extend(&args);
        let (ok, said) = run_on(&None, &db, &add, false);
        assert!(!ok && said.contains(why), "{add:?}: {said}");
        let mut set = vec!["domains", "set", "default"];
        set.extend(&args);
        let (ok, said) = run_on(&None, &db, &set, false);
        assert!(!ok && said.contains(why), "{set:?}: {said}");
    }
    let (_, listed) = run_on(&None, &db, &["domains", "add", "go.example.com"], true);
    assert!(listed.contains("added"), "{listed}");
}

/// Removing a domain revokes the keys limited to it; `GET /api/v1/visits`
/// with `?domain=` counts that domain's links only.
#[tokio::test]
async fn a_domains_keys_go_with_it_and_its_visits_are_its_own() {
    let app = spawn_app(&["--visits-flush-ms", "100"]).await;
    let admin = app.new_key("admin", true).await;
    add(&app, &admin, "ex.co", json!({})).await;
    let team = app.run_keys(&["create", "--name", "team", "--domain", "ex.co"], false);
    let team = team.trim().to_owned();
    app.wait_for_key(&team).await;
    link(
        &app,
        &team,
        json!({"url": "https://e.com/on-ex", "code": "on-ex"}),
    )
    .await;
    link(
        &app,
        &admin,
        json!({"url": "https://e.com/on-default", "code": "on-default"}),
    )
    .await;
    for (host, path, times) in [("ex.co", "/on-ex", 2), ("localhost", "/on-default", 3)] {
        for _ in 0..times {
            assert!(location(&app, host, path).await.is_ok(), "{host}{path}");
        }
    }
    let total = async |query: &str| {
        let r = app
            .api(
                Method::GET,
                &format!("/api/v1/visits{query}"),
                Some(&admin),
                None,
            )
            .await;
        assert_eq!(r.status(), 200, "{query}");
        body(r).await["total"].as_u64().expect("total")
    };
    assert_eq!(total("?domain=ex.co").await, 2);
    assert_eq!(total("?domain=default").await, 3);
    assert_eq!(total("").await, 5);
    assert_eq!(
        app.api(Method::GET, "/api/v1/links", Some(&team), None)
            .await
            .status(),
        200
    );
    let r = app
        .api(
            Method::DELETE,
            "/api/v1/domains/ex.co?force=true",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    assert_error(
        app.api(Method::GET, "/api/v1/links", Some(&team), None)
            .await,
        401,
        "key",
    )
    .await;
    let listed = app.run_keys(&["list"], false);
    let row = listed
        .lines()
        .find(|l| l.starts_with("team "))
        .expect("team is listed");
    assert!(!row.trim_end().ends_with('-'), "team is revoked: {row}");
}
