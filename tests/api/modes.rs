//! Every storage and cache configuration serves the same API.

use crate::api::exercise_api;
use crate::helpers::spawn_app;

#[tokio::test]
async fn per_request_connections_serve_the_api() {
    let app = spawn_app(&["--sqlite-connections", "per-request", "--cache", "none"]).await;
    exercise_api(&app).await;
    assert_eq!(app.stats().await["connections"], "per-request");
}

#[tokio::test]
async fn page_cache_off_serves_the_api() {
    let app = spawn_app(&["--sqlite-page-cache", "off", "--cache", "none"]).await;
    exercise_api(&app).await;
    assert_eq!(app.stats().await["page_cache"], "off");
}

#[tokio::test]
async fn reads_on_the_blocking_pool_serve_the_api() {
    let app = spawn_app(&["--sqlite-read-on", "blocking", "--cache", "none"]).await;
    exercise_api(&app).await;
    assert_eq!(app.stats().await["read_on"], "blocking");
}

#[tokio::test]
async fn no_cache_serves_the_api() {
    let app = spawn_app(&["--cache", "none"]).await;
    exercise_api(&app).await;
}

#[tokio::test]
async fn each_durability_level_serves_the_api() {
    for level in ["full", "normal", "off"] {
        let app = spawn_app(&["--durability", level]).await;
        exercise_api(&app).await;
        assert_eq!(app.stats().await["durability"], level);
    }
}

#[tokio::test]
async fn one_commit_per_create_serves_the_api() {
    let app = spawn_app(&["--group-commit", "off"]).await;
    exercise_api(&app).await;
    assert_eq!(app.stats().await["writer"]["group_commit"], false);
}
