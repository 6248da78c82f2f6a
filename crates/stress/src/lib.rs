//! The load generator behind `litelink stress`: the seed article's scenario
//! measured correctly, plus read-only and create-only scenarios, in a closed
//! or an open (constant-rate) model. It speaks only the seed API, so it can
//! drive any server that has it, not just litelink.
//!
//! Measurement rules: latency is per request (never from the start of a
//! task); 200 and 201 both count as a successful create; in the open model,
//! latency runs from the scheduled send time, so a stalled server shows up
//! in the percentiles instead of silently slowing the load down.
//!
//! Reads can run against a steady stream of creates on connections of
//! their own (`--background-creates`), so that the read path is measured
//! while the writer commits and syncs.

mod client;
mod report;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, Uri, header};
use rand::RngExt;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use strum::{Display, EnumString, VariantNames};
use tokio::time::Instant;

pub use client::FailureKind;
pub use report::{
    BackgroundCreates, FailureReport, LATE_AFTER, Latency, OpenModel, PhaseReport, RateTarget,
    Report, Tasks,
};

use client::{Connection, Failure};
use report::ReportInput;
use stats::{Op, Recorder};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Scenario {
    /// The article's: each task creates a link, then reads it N times.
    Seed,
    /// Create links first (not timed), then only read them.
    Read,
    /// Only create.
    Create,
    /// Only `GET /heart-beat`: the baseline that every ratio is taken
    /// against, and the way to compare this tool with wrk.
    HeartBeat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Keys {
    Uniform,
    /// Zipf-distributed popularity (`--zipf-s` sets the skew).
    Zipf,
    /// Every read asks for the same code.
    Hot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, EnumString, Display, VariantNames)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ReadPath {
    /// `GET /link/{code}`, answered with JSON.
    Json,
    /// `GET /{code}`, answered with a redirect that is not followed.
    Redirect,
}

#[derive(Debug, Clone)]
pub struct StressConfig {
    /// Base URL of the server, `http://host:port`.
    pub url: String,
    pub scenario: Scenario,
    /// Concurrent workers, each with one keep-alive connection.
    pub workers: usize,
    pub tasks: u64,
    pub gets_per_task: u64,
    pub links: u64,
    /// Read scenario: read these codes instead of creating `links` new ones
    /// (the benchmark creates them once and measures many rounds).
    pub codes: Vec<String>,
    pub keys: Keys,
    pub zipf_s: f64,
    pub read_path: ReadPath,
    /// Open model when set: requests per second on a fixed schedule.
    pub rate: Option<f64>,
    /// Read and heart-beat scenarios: creates per second sent meanwhile on
    /// a fixed schedule, on `background_workers` connections of their own.
    pub background_creates: Option<f64>,
    pub background_workers: usize,
    /// Stop after this long (always set: every run is bounded in time).
    pub duration: Duration,
    /// Stop after this many requests, the warm-up's included.
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub timeout: Duration,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
    /// Extra headers on every request, as `(name, value)`: a browser's
    /// `User-Agent` and `Referer`, say.
    pub headers: Vec<(String, String)>,
    /// Create scenario: each create names its own code (an alias of 12
    /// random characters) instead of taking a generated one.
    pub aliases: bool,
    /// Read scenario: more fields of the links it creates first (a JSON
    /// object's members, without its braces), such as rules.
    pub link_fields: Option<String>,
}

impl StressConfig {
    /// How long a run may last when no duration is given: the seed
    /// scenario ends when its tasks are done, so it only gets a safety
    /// limit; the others run for this long.
    pub fn default_duration(scenario: Scenario) -> Duration {
        match scenario {
            Scenario::Seed => Duration::from_secs(300),
            _ => Duration::from_secs(10),
        }
    }
}

impl Default for StressConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8080".into(),
            scenario: Scenario::Seed,
            workers: 30,
            tasks: 100,
            gets_per_task: 80,
            links: 1000,
            codes: Vec::new(),
            keys: Keys::Uniform,
            zipf_s: 1.0,
            read_path: ReadPath::Json,
            rate: None,
            background_creates: None,
            background_workers: 16,
            duration: Self::default_duration(Scenario::Seed),
            requests: None,
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(10),
            progress: false,
            headers: Vec::new(),
            aliases: false,
            link_fields: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StressError {
    #[error("invalid target URL '{0}': only http://host[:port] is supported")]
    Url(String),
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, std::io::Error),
    #[error("{0}")]
    Config(String),
    #[error("could not create the links to read: {0}")]
    Setup(String),
}

/// Where to send requests and how to build them.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    host: header::HeaderValue,
    headers: Arc<[(header::HeaderName, header::HeaderValue)]>,
    create_uri: Uri,
    heart_beat_uri: Uri,
    timeout: Duration,
    read_path: ReadPath,
}

impl Target {
    async fn resolve(config: &StressConfig) -> Result<Self, StressError> {
        let url = url::Url::parse(&config.url).map_err(|_| StressError::Url(config.url.clone()))?;
        if url.scheme() != "http" || url.host_str().is_none() {
            return Err(StressError::Url(config.url.clone()));
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().unwrap_or(80);
        let authority = format!("{host}:{port}");
        let addr = tokio::net::lookup_host(authority.clone())
            .await
            .map_err(|e| StressError::Resolve(authority.clone(), e))?
            .next()
            .ok_or_else(|| {
                StressError::Resolve(authority.clone(), std::io::ErrorKind::NotFound.into())
            })?;
        let headers = config
            .headers
            .iter()
            .map(|(name, value)| {
                let bad = || StressError::Config(format!("invalid header '{name}: {value}'"));
                Ok((
                    header::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?,
                    header::HeaderValue::from_str(value.trim()).map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<_>, StressError>>()?;
        Ok(Self {
            addr,
            headers: headers.into(),
            host: header::HeaderValue::from_str(&authority)
                .map_err(|_| StressError::Url(config.url.clone()))?,
            create_uri: Uri::from_static("/link"),
            heart_beat_uri: Uri::from_static("/heart-beat"),
            timeout: config.timeout,
            read_path: config.read_path,
        })
    }

    fn connection(&self) -> Connection {
        Connection::new(
            self.addr,
            self.host.clone(),
            Arc::clone(&self.headers),
            self.timeout,
        )
    }

    fn read_uri(&self, code: &str) -> Uri {
        let path = match self.read_path {
            ReadPath::Json => format!("/link/{code}"),
            ReadPath::Redirect => format!("/{code}"),
        };
        // Codes come from the server's own answers; refuse odd ones upstream.
        path.parse()
            .unwrap_or_else(|_| Uri::from_static("/link/_invalid_"))
    }

    /// POST /link; 200 and 201 both count as success (the article's Flask
    /// service answered 201 while its test only accepted 200).
    async fn create(&self, conn: &mut Connection, body: Bytes) -> (u16, Result<String, Failure>) {
        match conn.send(Method::POST, &self.create_uri, Some(body)).await {
            Err(f) => (0, Err(f)),
            Ok(a) => (a.status.as_u16(), parse_created(&a)),
        }
    }

    async fn read(&self, conn: &mut Connection, uri: &Uri) -> (u16, Result<(), Failure>) {
        let expect = match self.read_path {
            ReadPath::Json => 200,
            ReadPath::Redirect => 300,
        };
        self.read_status(conn, uri, expect).await
    }

    /// GET `uri`; success is status `expect`, or any 3xx when `expect` is 300.
    async fn read_status(
        &self,
        conn: &mut Connection,
        uri: &Uri,
        expect: u16,
    ) -> (u16, Result<(), Failure>) {
        match conn.send(Method::GET, uri, None).await {
            Err(f) => (0, Err(f)),
            Ok(a) => {
                let ok = if expect == 300 {
                    a.status.is_redirection()
                } else {
                    a.status == expect
                };
                let status = a.status.as_u16();
                if ok {
                    (status, Ok(()))
                } else {
                    (
                        status,
                        Err(Failure::new(
                            client::FailureKind::Status,
                            format!("GET {uri}: {}", a.status),
                        )),
                    )
                }
            }
        }
    }
}

/// 200 and 201 both count as success (the article's Flask service answered
/// 201 while its test only accepted 200); the body must carry a usable code.
fn parse_created(a: &client::Answer) -> Result<String, Failure> {
    if a.status != 200 && a.status != 201 {
        return Err(Failure::new(
            FailureKind::Status,
            format!(
                "POST /link: {} {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            ),
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&a.body)
        .map_err(|e| Failure::new(FailureKind::BadBody, format!("POST /link: {e}")))?;
    v.get("short_link")
        .and_then(|c| c.as_str())
        .filter(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
        .ok_or_else(|| Failure::new(FailureKind::BadBody, "POST /link: no usable short_link"))
}

fn create_body(label: &str, n: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"url":"https://example.com/litelink-stress/{label}/{n}"}}"#
    ))
}

/// A setup create with more fields (`fields`: a JSON object's members).
fn setup_body(n: u64, fields: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"url":"https://example.com/litelink-stress/setup/{n}",{fields}}}"#
    ))
}

/// A create that names its code: 12 random characters of `[A-Za-z0-9]`
/// (a clash, one in 62^12 per pair, would be a 409 and count as an error).
fn alias_body(n: u64) -> Bytes {
    use rand::distr::{Alphanumeric, SampleString};
    let code = Alphanumeric.sample_string(&mut rand::rng(), 12);
    Bytes::from(format!(
        r#"{{"url":"https://example.com/litelink-stress/alias/{n}","code":"{code}"}}"#
    ))
}

/// What all workers share: counters to claim work from, and the stop flag.
struct Shared {
    target: Target,
    config: StressConfig,
    next: AtomicU64,
    /// Background creates claimed so far: create `n` is due at
    /// `start + n / rate`.
    background_next: AtomicU64,
    /// Turns true once the foreground workers are done, waking background
    /// creators that wait for their next scheduled send.
    background_stop: tokio::sync::watch::Sender<bool>,
    stop: Arc<AtomicBool>,
    progress: Option<Arc<AtomicU64>>,
    start: Instant,
    measure_from: Instant,
    deadline: Instant,
    codes: Vec<Uri>,
    zipf: Option<Zipf<f64>>,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    fn tick(&self) {
        if let Some(p) = &self.progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn pick(&self, rng: &mut impl rand::Rng) -> &Uri {
        let n = self.codes.len();
        let i = match self.config.keys {
            Keys::Hot => 0,
            Keys::Uniform => rng.random_range(0..n),
            Keys::Zipf => self
                .zipf
                .as_ref()
                .map(|z| (z.sample(rng) as usize).clamp(1, n) - 1)
                .unwrap_or(0),
        };
        &self.codes[i]
    }
}

/// Runs a stress test. Setting `stop` ends it early with what was measured.
pub async fn run(config: StressConfig, stop: Arc<AtomicBool>) -> Result<Report, StressError> {
    if config.workers == 0 {
        return Err(StressError::Config("at least one worker is needed".into()));
    }
    if config.scenario == Scenario::Seed && config.rate.is_some() {
        return Err(StressError::Config(
            "the seed scenario runs in the closed model; drop --rate".into(),
        ));
    }
    if let Some(r) = config.rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(StressError::Config(
            "--rate must be a positive number".into(),
        ));
    }
    if let Some(r) = config.background_creates {
        if !matches!(config.scenario, Scenario::Read | Scenario::HeartBeat) {
            return Err(StressError::Config(
                "--background-creates goes with the read and heart-beat scenarios".into(),
            ));
        }
        if !(r.is_finite() && r > 0.0) || config.background_workers == 0 {
            return Err(StressError::Config(
                "--background-creates must be a positive rate, with at least one \
                 --background-workers"
                    .into(),
            ));
        }
    }
    let target = Target::resolve(&config).await?;
    let codes = if config.scenario == Scenario::Read && !config.codes.is_empty() {
        config.codes.iter().map(|c| target.read_uri(c)).collect()
    } else if config.scenario == Scenario::Read {
        setup_links(&target, &config).await?
    } else {
        Vec::new()
    };
    let zipf = (config.keys == Keys::Zipf && !codes.is_empty())
        .then(|| Zipf::new(codes.len() as f64, config.zipf_s))
        .transpose()
        .map_err(|e| StressError::Config(format!("--zipf-s: {e}")))?;

    let progress_counter = config.progress.then(|| Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let shared = Arc::new(Shared {
        target,
        next: AtomicU64::new(0),
        background_next: AtomicU64::new(0),
        background_stop: tokio::sync::watch::Sender::new(false),
        stop,
        progress: progress_counter.clone(),
        start,
        measure_from: start + config.warmup,
        deadline: start + config.warmup + config.duration,
        codes,
        zipf,
        config,
    });
    let bar = progress_counter.map(|c| spawn_progress(c, &shared.config));

    let mut handles = Vec::with_capacity(shared.config.workers);
    for _ in 0..shared.config.workers {
        let shared = Arc::clone(&shared);
        handles.push(tokio::spawn(async move {
            let mut rec = Recorder::new();
            match (shared.config.scenario, shared.config.rate) {
                (Scenario::Seed, _) => seed_worker(&shared, &mut rec).await,
                (_, None) => closed_worker(&shared, &mut rec).await,
                (_, Some(rate)) => open_worker(&shared, &mut rec, rate).await,
            }
            rec
        }));
    }
    let mut background = Vec::new();
    if let Some(rate) = shared.config.background_creates {
        for _ in 0..shared.config.background_workers {
            let shared = Arc::clone(&shared);
            background.push(tokio::spawn(async move {
                let mut rec = Recorder::new();
                background_creator(&shared, &mut rec, rate).await;
                rec
            }));
        }
    }
    let mut recorder = Recorder::new();
    for h in handles {
        if let Ok(r) = h.await {
            recorder.merge(r);
        }
    }
    let measured_from = if shared.config.warmup.is_zero() {
        shared.start
    } else {
        shared.measure_from
    };
    let elapsed = Instant::now().saturating_duration_since(measured_from);
    // The creates run only as long as the reads they accompany.
    shared.background_stop.send_replace(true);
    for h in background {
        if let Ok(r) = h.await {
            recorder.merge(r);
        }
    }
    if let Some((bar, task)) = bar {
        task.abort();
        bar.finish_and_clear();
    }
    let c = &shared.config;
    Ok(Report::build(ReportInput {
        target: &c.url,
        scenario: match c.scenario {
            Scenario::Seed => "seed",
            Scenario::Read => "read",
            Scenario::Create => "create",
            Scenario::HeartBeat => "heart-beat",
        },
        workers: c.workers,
        elapsed,
        recorder: &recorder,
        seed_tasks: (c.scenario == Scenario::Seed).then_some(c.tasks),
        target_rate: c.rate,
        background_rate: c.background_creates,
        interrupted: shared.stop.load(Ordering::Relaxed),
    }))
}

/// The article's task: one create, then `gets_per_task` reads of that code,
/// each timed on its own.
async fn seed_worker(s: &Shared, rec: &mut Recorder) {
    let mut conn = s.target.connection();
    loop {
        if s.stopped() {
            return;
        }
        let task = s.next.fetch_add(1, Ordering::Relaxed);
        if task >= s.config.tasks {
            return;
        }
        let t0 = Instant::now();
        let (status, created) = s.target.create(&mut conn, create_body("seed", task)).await;
        let elapsed = t0.elapsed();
        s.tick();
        if status != 0 {
            rec.status(status);
        }
        let code = match created {
            Ok(code) => {
                rec.record(Op::Create, elapsed, elapsed, Ok(()));
                code
            }
            Err(f) => {
                rec.record(Op::Create, elapsed, elapsed, Err(f));
                rec.tasks_failed += 1;
                continue;
            }
        };
        let uri = s.target.read_uri(&code);
        let mut task_ok = true;
        for _ in 0..s.config.gets_per_task {
            if s.stopped() {
                task_ok = false;
                break;
            }
            let t0 = Instant::now();
            let (status, outcome) = s.target.read(&mut conn, &uri).await;
            let elapsed = t0.elapsed();
            s.tick();
            if status != 0 {
                rec.status(status);
            }
            task_ok &= outcome.is_ok();
            rec.record(Op::Read, elapsed, elapsed, outcome);
        }
        if task_ok {
            rec.tasks_ok += 1;
        } else {
            rec.tasks_failed += 1;
        }
    }
}

/// Claims the next request number, or `None` when the run is over.
fn claim(s: &Shared) -> Option<u64> {
    if s.stopped() {
        return None;
    }
    let n = s.next.fetch_add(1, Ordering::Relaxed);
    match s.config.requests {
        Some(max) if n >= max => None,
        _ => Some(n),
    }
}

async fn one_request(s: &Shared, conn: &mut Connection, n: u64) -> (Op, u16, Result<(), Failure>) {
    match s.config.scenario {
        Scenario::Create => {
            let body = if s.config.aliases {
                alias_body(n)
            } else {
                create_body("create", n)
            };
            let (status, r) = s.target.create(conn, body).await;
            (Op::Create, status, r.map(|_| ()))
        }
        Scenario::HeartBeat => {
            let (status, r) = s
                .target
                .read_status(conn, &s.target.heart_beat_uri, 200)
                .await;
            (Op::Read, status, r)
        }
        Scenario::Read | Scenario::Seed => {
            let uri = s.pick(&mut rand::rng()).clone();
            let (status, r) = s.target.read(conn, &uri).await;
            (Op::Read, status, r)
        }
    }
}

async fn closed_worker(s: &Shared, rec: &mut Recorder) {
    let mut conn = s.target.connection();
    while let Some(n) = claim(s) {
        let t0 = Instant::now();
        let (op, status, outcome) = one_request(s, &mut conn, n).await;
        let elapsed = t0.elapsed();
        s.tick();
        if t0 >= s.measure_from {
            if status != 0 {
                rec.status(status);
            }
            rec.record(op, elapsed, elapsed, outcome);
        }
    }
}

/// Open model: request `n` is due at `start + n / rate`, whoever sends it.
/// A worker that is free early waits for the schedule; one that is late
/// sends at once, and the lateness counts in the latency.
async fn open_worker(s: &Shared, rec: &mut Recorder, rate: f64) {
    let mut conn = s.target.connection();
    while let Some(n) = claim(s) {
        let due = s.start + Duration::from_secs_f64(n as f64 / rate);
        if due >= s.deadline {
            return;
        }
        tokio::time::sleep_until(due).await;
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let sent = Instant::now();
        let (op, status, outcome) = one_request(s, &mut conn, n).await;
        let done = Instant::now();
        s.tick();
        if due >= s.measure_from {
            let lag = sent.saturating_duration_since(due);
            if lag > LATE_AFTER {
                rec.late_starts += 1;
            }
            rec.max_start_lag = rec.max_start_lag.max(lag);
            if status != 0 {
                rec.status(status);
            }
            rec.record(op, done - due, done - sent, outcome);
        }
    }
}

/// Creates at a fixed rate beside the reads, timed like the open model
/// (from the scheduled send time), so that a writer that stalls shows in
/// their percentiles and in the achieved rate.
async fn background_creator(s: &Shared, rec: &mut Recorder, rate: f64) {
    let mut conn = s.target.connection();
    let mut done = s.background_stop.subscribe();
    loop {
        if s.stopped() || *done.borrow() {
            return;
        }
        let n = s.background_next.fetch_add(1, Ordering::Relaxed);
        let due = s.start + Duration::from_secs_f64(n as f64 / rate);
        if due >= s.deadline {
            return;
        }
        // At a low rate the next send may be seconds away: end as soon as
        // the reads do rather than sleep it out.
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = done.wait_for(|stopped| *stopped) => return,
        }
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let sent = Instant::now();
        let (status, created) = s
            .target
            .create(&mut conn, create_body("background", n))
            .await;
        let done = Instant::now();
        if due >= s.measure_from {
            if status != 0 {
                rec.status(status);
            }
            rec.record(Op::Create, done - due, done - sent, created.map(|_| ()));
        }
    }
}

/// Creates `n` links with up to `workers` connections and returns their
/// codes; used to prepare a read benchmark.
pub async fn create_links(url: &str, n: u64, workers: usize) -> Result<Vec<String>, StressError> {
    let config = StressConfig {
        url: url.to_owned(),
        links: n,
        workers,
        ..StressConfig::default()
    };
    let mut target = Target::resolve(&config).await?;
    target.read_path = ReadPath::Json;
    let uris = setup_links(&target, &config).await?;
    Ok(uris
        .iter()
        .map(|u| u.path().trim_start_matches("/link/").to_owned())
        .collect())
}

/// Creates the links the read scenario reads, with all workers, untimed.
async fn setup_links(target: &Target, config: &StressConfig) -> Result<Vec<Uri>, StressError> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    let target = Arc::new(target.clone());
    for _ in 0..config.workers.min(64) {
        let (next, target, total) = (Arc::clone(&next), Arc::clone(&target), config.links);
        let fields = config.link_fields.clone();
        set.spawn(async move {
            let mut conn = target.connection();
            let mut codes = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok(codes);
                }
                let body = match &fields {
                    Some(f) => setup_body(n, f),
                    None => create_body("setup", n),
                };
                let code = target
                    .create(&mut conn, body)
                    .await
                    .1
                    .map_err(|f| f.message)?;
                codes.push(target.read_uri(&code));
            }
        });
    }
    let mut codes = Vec::with_capacity(config.links as usize);
    while let Some(r) = set.join_next().await {
        codes.extend(
            r.map_err(|e| StressError::Setup(e.to_string()))?
                .map_err(StressError::Setup)?,
        );
    }
    if codes.is_empty() {
        return Err(StressError::Setup("--links must be at least 1".into()));
    }
    Ok(codes)
}

fn spawn_progress(
    counter: Arc<AtomicU64>,
    config: &StressConfig,
) -> (indicatif::ProgressBar, tokio::task::JoinHandle<()>) {
    let total = match config.scenario {
        Scenario::Seed => Some(config.tasks * (1 + config.gets_per_task)),
        _ => config.requests,
    };
    let bar = match total {
        Some(t) => indicatif::ProgressBar::new(t),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} requests {per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    let task = tokio::spawn(async move {
        loop {
            b.set_position(counter.load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (bar, task)
}
