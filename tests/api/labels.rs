//! Titles and tags: on create and PATCH, in the link object and the
//! listing, as filters, counted by `GET /api/v1/tags`, and through export
//! and import.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

async fn made(app: &TestApp, key: &str, body: Value) -> Value {
    let r = app
        .api(Method::POST, "/api/v1/links", Some(key), Some(body))
        .await;
    assert_eq!(r.status(), 201);
    r.json().await.expect("json")
}

/// The codes a listing with `query` answers, newest first.
async fn codes(app: &TestApp, key: &str, query: &str) -> Vec<String> {
    let r = app
        .api(
            Method::GET,
            &format!("/api/v1/links?{query}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status(), 200, "{query}");
    let page: Value = r.json().await.expect("json");
    page["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["code"].as_str().expect("code").to_owned())
        .collect()
}

async fn tag_counts(app: &TestApp, key: &str) -> Vec<(String, u64)> {
    let r = app.api(Method::GET, "/api/v1/tags", Some(key), None).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    body["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| {
            (
                t["tag"].as_str().expect("tag").to_owned(),
                t["links"].as_u64().expect("count"),
            )
        })
        .collect()
}

crate::on_both_stores! {
    async fn links_carry_titles_and_tags_that_filter_and_count(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let admin = app.new_key("root", true).await;
        let ann = app.new_key("ann", false).await;
        let bob = app.new_key("bob", false).await;

        let spring = made(&app, &ann, json!({"url": "https://example.com/spring", "code": "spring",
            "title": "Spring sale: 20% off", "tags": ["Sales", "q3 launch", "SALES"]})).await;
        assert_eq!(spring["title"], "Spring sale: 20% off");
        assert_eq!(spring["tags"], json!(["Sales", "q3 launch"]), "a repeat counts once");
        // A tag is shown as it was first written on this server.
        let news = made(&app, &ann, json!({"url": "https://example.com/news", "code": "news",
            "tags": ["sales", "Ünïcode"]})).await;
        assert_eq!(news["tags"], json!(["Sales", "Ünïcode"]));
        assert_eq!(news["title"], Value::Null);
        made(&app, &bob, json!({"url": "https://example.com/bob", "code": "bobs", "tags": ["sales"],
            "title": "Bob's sale"})).await;
        made(&app, &ann, json!({"url": "https://example.com/plain", "code": "plain"})).await;

        // The link object and the listing carry them.
        let one: Value = app.api(Method::GET, "/api/v1/links/spring", Some(&ann), None).await
            .json().await.expect("json");
        assert_eq!((one["title"].clone(), one["tags"].clone()),
            (json!("Spring sale: 20% off"), json!(["Sales", "q3 launch"])));

        // Filters: every tag named, regardless of case; `q` reads titles too.
        assert_eq!(codes(&app, &ann, "tag=SALES").await, ["news", "spring"]);
        assert_eq!(codes(&app, &ann, "tag=sales&tag=Q3%20Launch").await, ["spring"]);
        assert_eq!(codes(&app, &ann, "tag=nothing").await, Vec::<String>::new());
        assert_eq!(codes(&app, &ann, "q=20%25%20OFF").await, ["spring"]);
        assert_eq!(codes(&app, &admin, "tag=sales").await, ["bobs", "news", "spring"]);
        assert_eq!(codes(&app, &admin, "q=sale").await, ["bobs", "spring"]);
        assert_error(app.api(Method::GET, "/api/v1/links?tag=a%7Cb", Some(&ann), None).await,
            400, "tag").await;

        // Counts of the tags of the links each may manage.
        assert_eq!(tag_counts(&app, &ann).await,
            [("Sales".to_owned(), 2), ("q3 launch".to_owned(), 1), ("Ünïcode".to_owned(), 1)]);
        assert_eq!(tag_counts(&app, &bob).await, [("Sales".to_owned(), 1)]);
        assert_eq!(tag_counts(&app, &admin).await[0], ("Sales".to_owned(), 3));
        assert_eq!(app.api(Method::GET, "/api/v1/tags", None, None).await.status(), 401);

        // PATCH: a new title and tags; null clears a title, [] the tags.
        let patched = app.api(Method::PATCH, "/api/v1/links/spring", Some(&ann),
            Some(json!({"title": "Summer", "tags": ["Summer", "sales"]}))).await;
        assert_eq!(patched.status(), 200);
        let patched: Value = patched.json().await.expect("json");
        assert_eq!((patched["title"].clone(), patched["tags"].clone()),
            (json!("Summer"), json!(["Summer", "Sales"])));
        assert_eq!(codes(&app, &ann, "tag=q3%20launch").await, Vec::<String>::new());
        let cleared: Value = app.api(Method::PATCH, "/api/v1/links/spring", Some(&ann),
            Some(json!({"title": null, "tags": []}))).await.json().await.expect("json");
        assert_eq!((cleared["title"].clone(), cleared["tags"].clone()), (Value::Null, json!([])));
        let kept: Value = app.api(Method::PATCH, "/api/v1/links/news", Some(&ann),
            Some(json!({"max_visits": 9}))).await.json().await.expect("json");
        assert_eq!(kept["tags"], json!(["Sales", "Ünïcode"]), "a PATCH without them keeps them");

        // A deleted link's tags count no more.
        assert_eq!(app.api(Method::DELETE, "/api/v1/links/news", Some(&ann), None).await.status(), 204);
        assert_eq!(tag_counts(&app, &ann).await, Vec::<(String, u64)>::new());

        // What cannot be shown is refused, with the field named.
        for (body, want) in [
            (json!({"url": "https://example.com/", "title": "x".repeat(513)}), "title"),
            (json!({"url": "https://example.com/", "title": ""}), "title"),
            (json!({"url": "https://example.com/", "title": "a\u{202E}b"}), "title"),
            (json!({"url": "https://example.com/", "tags": ["a|b"]}), "tags"),
            (json!({"url": "https://example.com/", "tags": ["t".repeat(65)]}), "tags"),
            (json!({"url": "https://example.com/", "tags": "one"}), "tags"),
            (json!({"url": "https://example.com/",
                "tags": (0..33).map(|i| format!("t{i}")).collect::<Vec<_>>()}), "at most 32"),
        ] {
            assert_error(app.api(Method::POST, "/api/v1/links", Some(&ann), Some(body)).await,
                400, want).await;
        }
        assert_error(app.api(Method::PATCH, "/api/v1/links/plain", Some(&ann),
            Some(json!({"tags": [""]}))).await, 400, "tags").await;

        // Export and import carry them, in both formats.
        made(&app, &ann, json!({"url": "https://example.com/carried", "code": "carried",
            "title": "Carried, \"quoted\"", "tags": ["Sales", "x-y_z"]})).await;
        let (db, source) = (app.db.clone(), app.store.clone());
        let dir = app.stop().await;
        for format in ["jsonl", "csv"] {
            let file = db.with_extension(format);
            run_on(&source, &db, &["export", "--format", format, "--out", file.to_str().expect("path")], true);
            let target = match &store {
                Store::Sqlite => None,
                Store::Postgres => Some(fresh_postgres_db().await),
            };
            let tdb = db.with_extension(format!("{format}.db"));
            run_on(&target, &tdb, &["import", "--format", format, file.to_str().expect("path")], true);
            let mut args = vec!["--cache", "none"];
            if let Some(url) = &target {
                args.extend(["--store", url.as_str()]);
            }
            let back = spawn_app_on(&tdb, &args).await;
            let key = back.new_key("admin", true).await;
            let link: Value = back.api(Method::GET, "/api/v1/links/carried", Some(&key), None).await
                .json().await.expect("json");
            assert_eq!((link["title"].clone(), link["tags"].clone()),
                (json!("Carried, \"quoted\""), json!(["Sales", "x-y_z"])), "{format}");
            assert_eq!(codes(&back, &key, "tag=sales").await, ["carried", "bobs"], "{format}");
            back.stop().await;
        }
        drop(dir);
    }
}
