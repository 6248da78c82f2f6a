//! `/metrics`: the Prometheus text of what was recorded, with the
//! store's, the caches' and the visits' figures set as gauges and totals
//! just before each scrape.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::links::{LinkStats, Links};

/// The Prometheus text exposition of `links`'s metrics.
pub(crate) fn answer(
    handle: &metrics_exporter_prometheus::PrometheusHandle,
    links: &Links,
) -> Response {
    export(&links.stats());
    let body = crate::observability::recording::render(handle);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// Sets the gauges and totals a scrape shows from `stats`.
fn export(stats: &LinkStats) {
    let store = &stats.store.metrics;
    metrics::gauge!("litelink_links").set(store.links as f64);
    metrics::counter!("litelink_write_commits_total").absolute(store.writes.commits);
    metrics::counter!("litelink_write_failed_batches_total").absolute(store.writes.failed_batches);
    metrics::counter!("litelink_write_rejected_queue_full_total")
        .absolute(store.writes.rejected_queue_full);
    for &(name, value) in &store.gauges {
        metrics::gauge!(name).set(value);
    }
    for &(name, value) in &store.counters {
        metrics::counter!(name).absolute(value);
    }
    if let Some(m) = &stats.cache.memory {
        tier("memory", m.hits, m.negative_hits, m.misses, m.errors);
        metrics::gauge!("litelink_cache_entries", "tier" => "memory").set(m.entries as f64);
    }
    if let Some(v) = &stats.cache.valkey {
        tier(
            "valkey",
            v.hits,
            v.negative_hits,
            v.misses,
            v.errors + v.timeouts,
        );
    }
    metrics::counter!("litelink_visits_counted_total").absolute(stats.visits.counted);
    metrics::counter!("litelink_visits_flushed_total").absolute(stats.visits.flushed);
    metrics::counter!("litelink_visit_flushes_failed_total").absolute(stats.visits.failed_flushes);
}

fn tier(name: &'static str, hits: u64, negative_hits: u64, misses: u64, errors: u64) {
    metrics::counter!("litelink_cache_hits_total", "tier" => name).absolute(hits);
    metrics::counter!("litelink_cache_negative_hits_total", "tier" => name).absolute(negative_hits);
    metrics::counter!("litelink_cache_misses_total", "tier" => name).absolute(misses);
    metrics::counter!("litelink_cache_errors_total", "tier" => name).absolute(errors);
}
