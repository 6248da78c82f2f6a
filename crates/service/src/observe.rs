//! Prometheus metrics: the recorder (`metrics` with its Prometheus
//! exporter), the per-request layer, and the gauges read from the typed
//! stats at each scrape.
//!
//! Per request the layer adds two clock reads, a route lookup among a
//! dozen strings, two counter increments and one histogram sample, all on
//! handles registered once; everything else (`/stats`'s counters: cache
//! hits, visits, links, queue depth) costs nothing until a scrape reads it.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::MatchedPath;
use axum::http::{Method, Request, Response};
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tower::{Layer, Service};

use crate::links::LinkStats;
use crate::store::StoreStats;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Latency buckets, in seconds: 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder (once; later calls reuse it) and
/// starts its upkeep. `None` if another recorder was installed first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("litelink_write_batch_size".into()),
                        BATCH_BUCKETS,
                    )
                })
                .and_then(|b| b.install_recorder());
            match handle {
                Ok(h) => {
                    let upkeep = h.clone();
                    // Histograms keep their samples until upkeep folds
                    // them in: bounded memory between scrapes.
                    std::thread::Builder::new()
                        .name("litelink-metrics".into())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                upkeep.run_upkeep();
                            }
                        })
                        .ok()?;
                    Some(h)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    None
                }
            }
        })
        .as_ref()
}

/// The Prometheus text for a scrape: what was recorded, plus the gauges
/// and totals read from `stats` now.
pub fn render(handle: &PrometheusHandle, stats: &LinkStats) -> String {
    let StoreStats::Sqlite(s) = &stats.store;
    metrics::gauge!("litelink_links").set(s.links as f64);
    metrics::gauge!("litelink_write_queue_depth").set(s.writer.queue_len as f64);
    metrics::gauge!("litelink_writes_stopped")
        .set(f64::from(u8::from(s.writer.syncs.writes_stopped.is_some())));
    metrics::counter!("litelink_write_commits_total").absolute(s.writer.writes.commits);
    metrics::counter!("litelink_write_failed_batches_total")
        .absolute(s.writer.writes.failed_batches);
    metrics::counter!("litelink_write_rejected_queue_full_total")
        .absolute(s.writer.writes.rejected_queue_full);
    metrics::counter!("litelink_wal_syncs_total").absolute(s.writer.syncs.syncs);
    metrics::counter!("litelink_reader_lookups_total").absolute(s.readers.lookups);
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
    handle.render()
}

fn tier(name: &'static str, hits: u64, negative_hits: u64, misses: u64, errors: u64) {
    metrics::counter!("litelink_cache_hits_total", "tier" => name).absolute(hits);
    metrics::counter!("litelink_cache_negative_hits_total", "tier" => name).absolute(negative_hits);
    metrics::counter!("litelink_cache_misses_total", "tier" => name).absolute(misses);
    metrics::counter!("litelink_cache_errors_total", "tier" => name).absolute(errors);
}

/// The handles one request touches, registered once.
struct RouteHandles {
    by_class: [Counter; 5],
    latency: Histogram,
}

struct Handles {
    /// The router's paths, as matched (`MatchedPath`); a request that
    /// matches none is counted as `unmatched`, the last entry.
    paths: Vec<&'static str>,
    routes: Vec<RouteHandles>,
    redirects: Counter,
    creates: Counter,
    client_errors: Counter,
    server_errors: Counter,
}

impl Handles {
    fn new(mut paths: Vec<&'static str>) -> Self {
        paths.push("unmatched");
        Self {
            routes: paths
                .iter()
                .map(|&route| RouteHandles {
                    by_class: CLASSES.map(|class| {
                        metrics::counter!("litelink_http_requests_total",
                            "route" => route, "status" => class)
                    }),
                    latency: metrics::histogram!(
                        "litelink_http_request_duration_seconds", "route" => route),
                })
                .collect(),
            redirects: metrics::counter!("litelink_redirects_total"),
            creates: metrics::counter!("litelink_creates_total"),
            client_errors: metrics::counter!("litelink_http_client_errors_total"),
            server_errors: metrics::counter!("litelink_http_server_errors_total"),
            paths,
        }
    }

    fn route(&self, matched: Option<&str>) -> usize {
        let last = self.paths.len() - 1;
        matched
            .and_then(|m| self.paths[..last].iter().position(|r| *r == m))
            .unwrap_or(last)
    }
}

/// Records every request: count by route and status class, latency by
/// route, and the totals the dashboards want (redirects, creates, 4xx,
/// 5xx).
#[derive(Clone)]
pub struct MetricsLayer {
    handles: std::sync::Arc<Handles>,
}

impl MetricsLayer {
    /// `paths`: the router's routes, as they are matched.
    pub fn new(paths: Vec<&'static str>) -> Self {
        Self {
            handles: std::sync::Arc::new(Handles::new(paths)),
        }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MetricsService {
            inner,
            handles: std::sync::Arc::clone(&self.handles),
        }
    }
}

#[derive(Clone)]
pub struct MetricsService<S> {
    inner: S,
    handles: std::sync::Arc<Handles>,
}

impl<S, B, R> Service<Request<B>> for MetricsService<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = MetricsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let route = self.handles.route(
            req.extensions()
                .get::<MatchedPath>()
                .map(MatchedPath::as_str),
        );
        let post = req.method() == Method::POST;
        MetricsFuture {
            inner: self.inner.call(req),
            handles: std::sync::Arc::clone(&self.handles),
            route,
            post,
            started: Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    pub struct MetricsFuture<F> {
        #[pin]
        inner: F,
        handles: std::sync::Arc<Handles>,
        route: usize,
        post: bool,
        started: Instant,
    }
}

impl<F, R, E> Future for MetricsFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx))?;
        let h = &this.handles;
        let r = &h.routes[*this.route];
        let status = res.status().as_u16();
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        r.by_class[class].increment(1);
        r.latency.record(this.started.elapsed().as_secs_f64());
        match status {
            300..=399 if h.paths[*this.route] == "/{code}" => h.redirects.increment(1),
            201 if *this.post => h.creates.increment(1),
            400..=499 => h.client_errors.increment(1),
            500..=599 => h.server_errors.increment(1),
            _ => {}
        }
        Poll::Ready(Ok(res))
    }
}
