//! Importing is idempotent: the same file twice adds nothing and exits 0;
//! a code that exists with another target is a conflict, skipped and
//! named (exit 2), or overwritten when asked; a deleted code stays deleted.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

crate::on_both_stores! {
    async fn the_same_file_twice_adds_nothing_and_conflicts_are_named(store: Store) {
        let app = spawn_app_in(&store, &[]).await;
        let key = app.new_key("root", true).await;
        for body in [
            json!({"url": "https://example.com/a", "code": "first-a"}),
            json!({"url": "https://example.com/b", "code": "second_b", "title": "B", "tags": ["x"]}),
            json!({"url": "https://example.com/c", "code": "gone-c"}),
        ] {
            let r = app.api(Method::POST, "/api/v1/links", Some(&key), Some(body)).await;
            assert_eq!(r.status(), 201);
        }
        assert_eq!(app.api(Method::DELETE, "/api/v1/links/gone-c", Some(&key), None).await.status(), 204);
        let (db, source) = (app.db.clone(), app.store.clone());
        let dir = app.stop().await;
        let file = db.with_extension("jsonl");
        let path = file.to_str().expect("path");
        run_on(&source, &db, &["export", "--out", path], true);

        // Again into the same store: every line unchanged, exit 0.
        let (ok, said) = run_on(&source, &db, &["import", path], false);
        assert!(ok, "{said}");
        assert!(said.contains("imported 0 links and 0 tombstones; 3 unchanged, 0 skipped, 0 conflicts"), "{said}");

        // Another target under a code that exists: a conflict, named by
        // its line, skipped, exit 2.
        let text = std::fs::read_to_string(&file).expect("export");
        let changed: Vec<String> = text
            .lines()
            .map(|l| {
                let mut r: Value = serde_json::from_str(l).expect("record");
                match r["code"].as_str() {
                    Some("first-a") => {
                        r["url"] = json!("https://example.com/a-moved");
                        r["title"] = json!("Moved");
                        r["tags"] = json!(["Moved"]);
                    }
                    Some("gone-c") => {
                        r["url"] = json!("https://example.com/c-again");
                        r["deleted_at"] = Value::Null;
                    }
                    _ => {}
                }
                r.to_string()
            })
            .collect();
        let a_line = changed.iter().position(|l| l.contains("first-a")).expect("a") + 1;
        let c_line = changed.iter().position(|l| l.contains("gone-c")).expect("c") + 1;
        std::fs::write(&file, changed.join("\n")).expect("write");
        let (ok, said) = run_on(&source, &db, &["import", path], false);
        assert!(!ok, "{said}");
        let mut lines = [a_line, c_line];
        lines.sort();
        assert!(said.contains("1 unchanged, 0 skipped, 2 conflicts, 0 overwritten"), "{said}");
        assert!(said.contains(&format!("skipped): lines {}, {}", lines[0], lines[1])), "{said}");

        // Overwrite, as asked: the live link takes the file's target, title
        // and tags; the deleted code stays deleted.
        let (ok, said) = run_on(&source, &db, &["import", "--on-conflict", "overwrite", path], false);
        assert!(!ok, "{said}");
        assert!(said.contains("1 unchanged, 0 skipped, 1 conflicts, 1 overwritten"), "{said}");
        assert!(said.contains(&format!("overwritten: lines {a_line}")), "{said}");
        let mut args = vec!["--cache", "none"];
        if let Some(url) = &source {
            args.extend(["--store", url.as_str()]);
        }
        let back = spawn_app_on(&db, &args).await;
        let key = back.new_key("again", true).await;
        let a: Value = back.api(Method::GET, "/api/v1/links/first-a", Some(&key), None).await
            .json().await.expect("json");
        assert_eq!((a["url"].clone(), a["title"].clone(), a["tags"].clone()),
            (json!("https://example.com/a-moved"), json!("Moved"), json!(["Moved"])));
        let redirect = back.client.get(back.url("/first-a")).send().await.expect("redirect");
        assert_eq!(redirect.headers().get("location").and_then(|v| v.to_str().ok()),
            Some("https://example.com/a-moved"));
        assert_eq!(back.client.get(back.url("/gone-c")).send().await.expect("gone").status(), 404);
        back.stop().await;
        drop(dir);
    }
}
