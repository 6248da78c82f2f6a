//! Prometheus metrics: the recorder (`metrics` with its Prometheus
//! exporter), the per-request layer, and the gauges read from the typed
//! stats at each scrape.
//!
//! Per request the layer adds a route match, two clock reads and three
//! relaxed increments on its thread's shard ([`Requests`]); the exporter
//! hears of them at each scrape, as it does of everything else (`/stats`'s
//! counters: cache hits, visits, links, queue depth), which costs nothing
//! until a scrape reads it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Latency buckets, in seconds: 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
/// The per-request cells, process-wide like the recorder (every router of
/// a process has the same routes).
static REQUESTS: OnceLock<Requests> = OnceLock::new();

/// The per-request cells for a router with these paths (made once).
pub(crate) fn requests(paths: impl FnOnce() -> Vec<&'static str>) -> &'static Requests {
    REQUESTS.get_or_init(|| Requests::new(paths()))
}

/// Installs the process-wide recorder (once; later calls reuse it) and
/// starts its upkeep. `None` if another recorder was installed first.
pub(crate) fn install() -> Option<&'static PrometheusHandle> {
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

/// The Prometheus text for a scrape: what was recorded, and the gauges
/// and totals set just before (`LinkStats::export`).
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    if let Some(r) = REQUESTS.get() {
        r.export();
    }
    handle.render()
}

/// Latency buckets in nanoseconds, the same bounds as [`LATENCY_BUCKETS`].
const BUCKET_NS: [u64; 16] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];
/// The bounds' buckets and one for slower requests.
const BUCKETS: usize = BUCKET_NS.len() + 1;
/// Shards of the per-request cells; a thread keeps to one, so that
/// requests on different cores never share a cache line.
const SHARDS: usize = 16;

/// One route's cells in one shard: plain relaxed counters.
#[derive(Default)]
struct RouteCells {
    by_class: [AtomicU64; 5],
    created: AtomicU64,
    count: [AtomicU64; BUCKETS],
    sum_ns: [AtomicU64; BUCKETS],
}

#[repr(align(128))]
struct Shard {
    routes: Box<[RouteCells]>,
}

/// What the exporter has been given so far, per route and bucket.
struct Exported {
    count: Vec<[u64; BUCKETS]>,
    sum_ns: Vec<[u64; BUCKETS]>,
}

/// Per-request recording: a request costs a route match, two clock reads
/// and three relaxed increments on its thread's shard. The exporter's
/// handles are brought up to date at each scrape ([`Requests::export`]):
/// counters as totals, and each bucket's new samples as one
/// `record_many` of their mean, which lands in the same bucket, so that
/// bucket counts and the sum are exact.
pub(crate) struct Requests {
    matcher: matchit::Router<usize>,
    /// Routes of one static segment (`/stats`), and the route of one
    /// parameter (`/{code}`), if any: most requests are one segment, and
    /// matching them here costs a few comparisons instead of a tree walk,
    /// with the same answer as the matcher.
    one_segment: Vec<(&'static str, usize)>,
    one_param: Option<usize>,
    /// The router's paths, as matched; `unmatched` last.
    paths: Vec<&'static str>,
    redirect_route: Option<usize>,
    shards: Box<[Shard]>,
    exported: Mutex<Exported>,
}

impl Requests {
    /// `paths`: the router's routes.
    pub(crate) fn new(mut paths: Vec<&'static str>) -> Self {
        let mut matcher = matchit::Router::new();
        for (i, p) in paths.iter().enumerate() {
            // The router accepted the same paths; a refusal here would
            // only lose that route's label (counted as `unmatched`).
            let _ = matcher.insert(*p, i);
        }
        let single = |p: &str| p.len() > 1 && !p[1..].contains('/');
        let one_segment = paths
            .iter()
            .enumerate()
            .filter(|(_, p)| single(p) && !p.contains('{'))
            .map(|(i, p)| (*p, i))
            .collect();
        let one_param = paths
            .iter()
            .position(|p| single(p) && p.starts_with("/{") && p.ends_with('}'));
        paths.push("unmatched");
        let n = paths.len();
        let shards = (0..SHARDS)
            .map(|_| Shard {
                routes: (0..n).map(|_| RouteCells::default()).collect(),
            })
            .collect();
        Self {
            matcher,
            one_segment,
            one_param,
            redirect_route: paths.iter().position(|p| *p == "/{code}"),
            exported: Mutex::new(Exported {
                count: vec![[0; BUCKETS]; n],
                sum_ns: vec![[0; BUCKETS]; n],
            }),
            paths,
            shards,
        }
    }

    pub(crate) fn route(&self, path: &str) -> usize {
        if path.len() > 1 && !path[1..].contains('/') {
            if let Some((_, i)) = self.one_segment.iter().find(|(p, _)| *p == path) {
                return *i;
            }
            if let Some(i) = self.one_param {
                return i;
            }
        }
        self.matcher
            .at(path)
            .map(|m| *m.value)
            .unwrap_or(self.paths.len() - 1)
    }

    /// The index of one of the router's paths, as [`Requests::record`]
    /// takes it.
    pub(crate) fn index_of(&self, path: &str) -> Option<usize> {
        self.paths.iter().position(|p| *p == path)
    }

    pub(crate) fn record(&self, route: usize, status: u16, post: bool, took: Duration) {
        thread_local! {
            static SHARD: usize = {
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                NEXT.fetch_add(1, Relaxed) % SHARDS
            };
        }
        let shard = SHARD.with(|s| *s);
        let cells = &self.shards[shard].routes[route];
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        cells.by_class[class].fetch_add(1, Relaxed);
        if status == 201 && post {
            cells.created.fetch_add(1, Relaxed);
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BUCKET_NS.partition_point(|&b| b < ns);
        cells.count[bucket].fetch_add(1, Relaxed);
        cells.sum_ns[bucket].fetch_add(ns, Relaxed);
    }

    /// Brings the exporter's handles up to date (at a scrape).
    fn export(&self) {
        let mut exported = self.exported.lock().unwrap_or_else(|e| e.into_inner());
        let (mut client, mut server, mut created, mut redirects) = (0, 0, 0, 0);
        for (r, route) in self.paths.iter().enumerate() {
            let total = |f: &dyn Fn(&RouteCells) -> u64| -> u64 {
                self.shards.iter().map(|s| f(&s.routes[r])).sum()
            };
            for (c, class) in CLASSES.iter().enumerate() {
                let n = total(&|cells| cells.by_class[c].load(Relaxed));
                metrics::counter!("litelink_http_requests_total",
                    "route" => *route, "status" => *class)
                .absolute(n);
                match c {
                    2 if Some(r) == self.redirect_route => redirects += n,
                    3 => client += n,
                    4 => server += n,
                    _ => {}
                }
            }
            created += total(&|cells| cells.created.load(Relaxed));
            let histogram =
                metrics::histogram!("litelink_http_request_duration_seconds", "route" => *route);
            for b in 0..BUCKETS {
                let count = total(&|cells| cells.count[b].load(Relaxed));
                let sum = total(&|cells| cells.sum_ns[b].load(Relaxed));
                let new = count - exported.count[r][b];
                let new_sum = sum - exported.sum_ns[r][b];
                if new > 0 {
                    let mean_s = new_sum as f64 / new as f64 / 1e9;
                    histogram.record_many(mean_s, new as usize);
                }
                exported.count[r][b] = count;
                exported.sum_ns[r][b] = sum;
            }
        }
        metrics::counter!("litelink_redirects_total").absolute(redirects);
        metrics::counter!("litelink_creates_total").absolute(created);
        metrics::counter!("litelink_http_client_errors_total").absolute(client);
        metrics::counter!("litelink_http_server_errors_total").absolute(server);
    }
}

/// One request being counted, from its start until its status is known
/// (`http::finish` ends it).
pub(crate) struct Recording {
    requests: &'static Requests,
    route: usize,
    post: bool,
    started: quanta::Instant,
}

impl Recording {
    /// Starts counting a request on `route` (an index of [`Requests`]).
    pub(crate) fn start(requests: &'static Requests, route: usize, post: bool) -> Self {
        Self {
            requests,
            route,
            post,
            started: quanta::Instant::now(),
        }
    }

    /// Counts the request as answered with `status`.
    pub(crate) fn done(self, status: u16) {
        self.requests
            .record(self.route, status, self.post, self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_the_exporters_bounds() {
        for (ns, s) in BUCKET_NS.iter().zip(LATENCY_BUCKETS) {
            assert_eq!(*ns as f64 / 1e9, *s);
        }
        assert_eq!(BUCKET_NS.len(), LATENCY_BUCKETS.len());
    }

    #[test]
    fn requests_are_counted_by_route_class_and_bucket() {
        let r = Requests::new(vec!["/heart-beat", "/{code}", "/link", "/{code}/qr.svg"]);
        assert_eq!(r.route("/abc"), 1);
        assert_eq!(r.route("/heart-beat"), 0);
        assert_eq!(r.route("/link"), 2);
        assert_eq!(r.route("/abc/qr.svg"), 3);
        assert_eq!(r.route("/a/b/c"), 4);
        assert_eq!(r.route("/"), 4);
        r.record(1, 302, false, Duration::from_micros(40));
        r.record(1, 302, false, Duration::from_micros(60));
        r.record(2, 201, true, Duration::from_millis(3));
        r.record(4, 404, false, Duration::from_secs(20));
        let cells = |route: usize| -> (u64, u64) {
            let c = r
                .shards
                .iter()
                .map(|s| {
                    s.routes[route]
                        .count
                        .iter()
                        .map(|a| a.load(Relaxed))
                        .sum::<u64>()
                })
                .sum();
            let k = r
                .shards
                .iter()
                .map(|s| s.routes[route].created.load(Relaxed))
                .sum();
            (c, k)
        };
        assert_eq!(cells(1), (2, 0));
        assert_eq!(cells(2), (1, 1));
        let slow: u64 = r
            .shards
            .iter()
            .map(|s| s.routes[4].count[BUCKETS - 1].load(Relaxed))
            .sum();
        assert_eq!(slow, 1);
        let first: u64 = r
            .shards
            .iter()
            .map(|s| s.routes[1].count[0].load(Relaxed))
            .sum();
        assert_eq!(first, 1, "40 µs is in the 50 µs bucket, 60 µs in the next");
    }
}
