//! The web page as HTTP sees it: pages and assets embedded and served with
//! their types and a strict Content-Security-Policy, and the QR codes.
//! What a person sees is checked in a real browser (tests/browser).

use reqwest::Method;
use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20))
}

#[tokio::test]
async fn pages_and_assets_are_embedded_with_a_strict_policy() {
    let app = spawn_app(&[]).await;
    for path in ["/", "/manage"] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        for rule in [
            "script-src 'self'",
            "style-src 'self'",
            "default-src 'none'",
        ] {
            assert!(csp.contains(rule), "{csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        let html = r.text().await.unwrap();
        // Every script is a file of ours; no inline code, no other origin.
        for (i, _) in html.match_indices("<script") {
            let tag = &html[i..i + html[i..].find('>').unwrap()];
            assert!(tag.contains("src=\"/assets/"), "{tag}");
        }
        assert!(!html.contains("style="), "inline style in {path}");
        for other_origin in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
            assert!(!html.contains(other_origin), "{path}: {other_origin}");
        }
    }
    for (asset, kind) in [
        ("app.css", "text/css"),
        ("shorten.js", "text/javascript"),
        ("manage.js", "text/javascript"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let r = app.get(&format!("/assets/{asset}")).await;
        assert_eq!(r.status(), 200, "{asset}");
        let ct = r.headers()["content-type"].to_str().unwrap();
        assert!(ct.starts_with(kind), "{asset}: {ct}");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    }
    assert_error(app.get("/assets/nope.js").await, 404, "no asset").await;
    assert_error(app.get("/assets/..%2Fmod.rs").await, 404, "no asset").await;
    assert_error(app.get("/assets/%FF").await, 400, "path").await;
}

#[tokio::test]
async fn qr_codes_come_as_svg_and_png_and_are_not_visits() {
    let app = spawn_app(&[]).await;
    let key = app.new_key("admin", true).await;
    let code = app.create_ok("https://example.com/qr").await;

    let r = app.get(&format!("/{code}/qr.svg")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");
    // It encodes the Host it was asked with: never in a shared cache.
    let cache = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cache.starts_with("private"), "{cache}");
    assert_eq!(r.headers()["vary"], "host");
    assert!(r.text().await.unwrap().contains("<svg"));

    let r = app.get(&format!("/{code}/qr.png")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(png_size(&r.bytes().await.unwrap()), (256, 256));
    for size in [64, 300, 2048] {
        let r = app.get(&format!("/{code}/qr.png?size={size}")).await;
        assert_eq!(png_size(&r.bytes().await.unwrap()), (size, size));
    }
    for bad in ["63", "2049", "0", "-5", "big", "1e3"] {
        let r = app.get(&format!("/{code}/qr.png?size={bad}")).await;
        assert_error(r, 400, "size").await;
    }
    assert_error(app.get("/NoSuchCode1/qr.svg").await, 404, "no link").await;
    assert_error(app.get("/NoSuchCode1/qr.png").await, 404, "no link").await;
    assert_error(app.get("/bad.code/qr.svg").await, 400, "malformed").await;

    // Not a visit.
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["visits"], 0);

    // A link out of visits has no QR code either.
    let r = app
        .client
        .post(app.url("/link"))
        .json(&json!({ "url": "https://example.com/once", "max_visits": 1 }))
        .send()
        .await
        .unwrap();
    let once = r.json::<serde_json::Value>().await.unwrap()["short_link"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.get(&format!("/{once}")).await.status(), 302);
    assert_error(app.get(&format!("/{once}/qr.svg")).await, 410, "no longer").await;
}

/// A Host header longer than any host name gets a 400 on the QR routes,
/// not a 500 from a URL too long to encode; a long one that is a host
/// still gets its code.
#[tokio::test]
async fn a_host_too_long_for_a_url_is_refused_on_the_qr_routes() {
    let app = spawn_app(&[]).await;
    let code = app.create_ok("https://example.com/qr-host").await;
    let host_of = |len: usize| format!("{}.example", "a".repeat(len - 8));
    for route in ["qr.svg", "qr.png"] {
        for len in [2_600, 8_000] {
            let r = app
                .client
                .get(app.url(&format!("/{code}/{route}")))
                .header("host", host_of(len))
                .send()
                .await
                .unwrap();
            assert_error(r, 400, "Host header").await;
        }
        let r = app
            .client
            .get(app.url(&format!("/{code}/{route}")))
            .header("host", host_of(250))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{route}");
    }
}
