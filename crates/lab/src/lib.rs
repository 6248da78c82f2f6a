//! The litelink lab: both articles' experiments, reproduced with one
//! command (`litelink-lab bench`), the bare reference server, and the
//! command line that reaches the switches the product does not offer.
//!
//! Each configuration runs as its own `litelink-lab serve` child process (MEMSTATUS
//! is process-wide), pinned to CPU 0; the stress engine runs in this process
//! on CPU 1, on one thread. Every configuration is measured in several
//! rounds in alternating order (A B A B ...), ratios are taken within a
//! round, and medians are reported with their spread.

mod charts;
pub mod cli;
mod dataset;
mod experiments;
pub mod import_sources;
pub mod process;
pub mod reference;
mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

pub use experiments::{Config, Experiment, Workload, ids as experiment_ids};
use litelink_stress::{self as stress, Scenario, StressConfig};
use process::{ServerProcess, ValkeyProcess};

/// Where the report goes unless told otherwise.
pub const DEFAULT_OUT: &str = "target/bench-report";

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `litelink` binary whose `serve` is measured.
    pub server_exe: PathBuf,
    /// Another build measured beside it, configuration by configuration in
    /// every round, for before/after comparisons.
    pub compare_exe: Option<PathBuf>,
    pub quick: bool,
    pub out: PathBuf,
    pub rounds: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub pin: bool,
    pub valkey: Option<PathBuf>,
    /// A database URL on the PostgreSQL server of the `postgres` experiment.
    pub postgres: String,
    /// Experiment ids to run ([`experiment_ids`]); empty runs all.
    pub only: Vec<String>,
    /// Run only the configurations whose name contains one of these;
    /// empty runs all.
    pub configs: Vec<String>,
}

impl BenchOptions {
    /// The options of a full run (`quick`: of a smoke run) of `server_exe`.
    pub fn new(server_exe: PathBuf, quick: bool) -> Self {
        let (rounds, duration, warmup) = if quick { (1, 0.3, 0.0) } else { (3, 5.0, 1.0) };
        Self {
            server_exe,
            compare_exe: None,
            quick,
            out: PathBuf::from(DEFAULT_OUT),
            rounds,
            duration: Duration::from_secs_f64(duration),
            warmup: Duration::from_secs_f64(warmup),
            pin: true,
            valkey: None,
            postgres: DEFAULT_POSTGRES.into(),
            only: Vec::new(),
            configs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub config: String,
    pub workload: String,
    pub round: usize,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub total_requests: u64,
    pub failed: u64,
    /// Seed workload: tasks per second, the article's headline figure.
    pub tasks_per_second: Option<f64>,
    /// Creates stored per second beside a read workload.
    pub background_creates_per_second: Option<f64>,
    /// Against the baseline workload or configuration, same round.
    pub ratio: Option<f64>,
    /// The server's CPU time (user + system) per measured request, in
    /// microseconds, from its /proc entry over the measured window.
    pub server_cpu_us: Option<f64>,
    /// `server_cpu_us` against the baseline's in the same round.
    pub cpu_ratio: Option<f64>,
    /// The load generator's CPU time over the measured window, as a share
    /// of one CPU: near 1, it and not the server may be the limit.
    pub load_cpu_share: Option<f64>,
    /// p99 of the creates sent beside a read workload, from their
    /// scheduled send time.
    pub background_creates_p99_ms: Option<f64>,
    /// The memory cache's hits over its hits and misses during the run
    /// (warm-up included), when the server has one.
    pub hit_rate: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The median, minimum and maximum of `values` (`None` when empty).
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub config: String,
    pub workload: String,
    pub connections: usize,
    pub rounds: usize,
    pub requests_per_second: Spread,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub tasks_per_second: Option<Spread>,
    pub background_creates_per_second: Option<Spread>,
    pub ratio: Option<Spread>,
    /// What the ratio is taken against.
    pub ratio_to: Option<String>,
    pub failed: u64,
    pub server_cpu_us: Option<Spread>,
    pub cpu_ratio: Option<Spread>,
    pub load_cpu_share: Option<Spread>,
    pub background_creates_p99_ms: Option<Spread>,
    pub hit_rate: Option<Spread>,
}

/// A preloaded configuration's database and server, after its rounds.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetFacts {
    pub config: String,
    pub links: u64,
    /// `litelink import` of the whole file, start to exit.
    pub import_seconds: f64,
    /// From the server's spawn to its line saying it listens.
    pub startup_seconds: f64,
    pub file_bytes: u64,
    pub bytes_per_link: f64,
    /// Each table's and index's bytes (`dbstat`), largest first.
    pub objects: Vec<(String, u64)>,
    /// The server's anonymous resident memory after its rounds, and what
    /// it maps from files.
    pub rss_anon_bytes: Option<u64>,
    pub rss_file_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub config: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentResult {
    #[serde(flatten)]
    pub experiment: Experiment,
    /// What each preloaded database cost (the `scale` experiment).
    pub facts: Vec<DatasetFacts>,
    pub skipped: Vec<Skipped>,
    pub samples: Vec<Sample>,
    pub summary: Vec<Summary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub memory: String,
    pub os: String,
    pub kernel: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub quick: bool,
    pub rounds: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub links: u64,
    pub pinned: String,
    pub load_generator: String,
    pub valkey: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub litelink_version: &'static str,
    pub started_unix: u64,
    pub machine: Machine,
    pub sqlite_version: String,
    pub sqlite_compile_options: Vec<String>,
    pub settings: Settings,
    pub experiments: Vec<ExperimentResult>,
}

/// Runs the experiments and writes report.md, results.json and the charts
/// into `opts.out`. Returns the path of report.md.
pub fn run(opts: &BenchOptions) -> anyhow::Result<PathBuf> {
    if let Some(bad) = opts
        .only
        .iter()
        .find(|o| !experiment_ids().contains(&o.as_str()))
    {
        anyhow::bail!(
            "unknown experiment '{bad}' (known: {})",
            experiment_ids().join(", ")
        );
    }
    let machine = report::machine();
    let (server_cpu, load_cpu) = if opts.pin && process::cpus() >= 2 {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    if let Some(cpu) = load_cpu {
        process::pin_current_thread(cpu).context("pinning the load generator")?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let work = std::env::temp_dir().join(format!("litelink-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;

    let valkey_bin = process::find_valkey(opts.valkey.as_deref());
    let valkey = match &valkey_bin {
        Some(b) => match ValkeyProcess::start(b, server_cpu) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("bench: Valkey could not start ({e:#}); its configurations are skipped");
                None
            }
        },
        None => None,
    };
    let valkey_note = match (&valkey_bin, &valkey) {
        (Some(b), Some(_)) => format!("private server {}", b.display()),
        (Some(b), None) => format!(
            "{} failed to start: Valkey configurations skipped",
            b.display()
        ),
        (None, _) => "no valkey-server or redis-server found: Valkey configurations skipped".into(),
    };

    let experiments: Vec<Experiment> = experiments::all(opts.quick)
        .into_iter()
        .filter(|e| opts.only.is_empty() || opts.only.iter().any(|o| o == e.id))
        .map(|mut e| {
            if !opts.configs.is_empty() {
                e.configs.retain(|c| {
                    opts.configs
                        .iter()
                        .any(|part| c.name.contains(part.as_str()))
                });
            }
            if let Some(other) = &opts.compare_exe {
                e.configs = experiments::with_compared_build(e.configs, other);
            }
            e
        })
        .collect();
    let total: usize = experiments
        .iter()
        .map(|e| {
            let runs: usize = e
                .configs
                .iter()
                .map(|c| e.workloads.iter().filter(|w| c.runs(w)).count())
                .sum();
            runs * opts.rounds
        })
        .sum();
    let progress = Progress::new(total as u64);
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    let mut sqlite_facts = None;
    let mut results = Vec::new();
    for exp in experiments {
        let r = run_experiment(
            &runtime,
            opts,
            &exp,
            &work,
            server_cpu,
            valkey.as_ref(),
            &progress,
            &mut sqlite_facts,
        )?;
        results.push(r);
    }
    progress.finish();
    drop(valkey);
    let _ = std::fs::remove_dir_all(&work);

    let (sqlite_version, sqlite_compile_options) = sqlite_facts.unwrap_or_default();
    let results = Results {
        litelink_version: env!("CARGO_PKG_VERSION"),
        started_unix,
        machine,
        sqlite_version,
        sqlite_compile_options,
        settings: Settings {
            quick: opts.quick,
            rounds: opts.rounds,
            duration_s: opts.duration.as_secs_f64(),
            warmup_s: opts.warmup.as_secs_f64(),
            links: links(opts),
            pinned: match (server_cpu, load_cpu) {
                (Some(s), Some(l)) => {
                    format!("servers and Valkey on CPU {s}, load generator on CPU {l}")
                }
                _ => "not pinned".into(),
            },
            load_generator:
                "litelink stress engine, one thread, one keep-alive HTTP/1.1 connection per worker"
                    .into(),
            valkey: valkey_note,
        },
        experiments: results,
    };
    std::fs::write(
        opts.out.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    let charts = charts::write_all(&results, &opts.out)?;
    let report_path = opts.out.join("report.md");
    std::fs::write(&report_path, report::markdown(&results, &charts))?;
    Ok(report_path)
}

/// The PostgreSQL of this machine kind (trust authentication on loopback).
pub const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Makes an empty database `name` on the server of `base` (dropping one of
/// that name first) and returns its URL.
async fn fresh_postgres(base: &str, name: &str) -> anyhow::Result<String> {
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    drop(client);
    let _ = task.await;
    let (server, _) = base
        .rsplit_once('/')
        .ok_or_else(|| anyhow::anyhow!("{base} names no database"))?;
    Ok(format!("{server}/{name}"))
}

fn links(opts: &BenchOptions) -> u64 {
    if opts.quick { 200 } else { experiments::LINKS }
}

/// Longest a server may take to build its link slots before it is
/// measured (ten million links take a few seconds).
const SLOTS_BUILD_LIMIT: Duration = Duration::from_secs(300);

/// Waits until the server's link slots are built, so that no round
/// measures reads that go to SQLite meanwhile. A server without them
/// (`--sqlite-slots off`, PostgreSQL, an older build) is not waited for.
fn wait_for_slots(server: &ServerProcess) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    loop {
        let stats = server.stats()?;
        match stats["slots"]["state"].as_str() {
            Some("building") => {}
            _ => return Ok(()),
        }
        anyhow::ensure!(
            started.elapsed() < SLOTS_BUILD_LIMIT,
            "the server's link slots were not built within {} s",
            SLOTS_BUILD_LIMIT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(clippy::too_many_arguments)]
fn run_experiment(
    runtime: &tokio::runtime::Runtime,
    opts: &BenchOptions,
    exp: &Experiment,
    work: &Path,
    server_cpu: Option<usize>,
    valkey: Option<&ValkeyProcess>,
    progress: &Progress,
    sqlite_facts: &mut Option<(String, Vec<String>)>,
) -> anyhow::Result<ExperimentResult> {
    let mut skipped = Vec::new();
    let mut servers = Vec::new();
    // The `scale` experiment's databases, loaded once per size.
    let mut datasets: std::collections::BTreeMap<experiments::Preload, dataset::Dataset> =
        Default::default();
    for (i, config) in exp.configs.iter().enumerate() {
        let mut args = config.args.clone();
        if config.needs_valkey {
            match valkey {
                Some(v) => args.extend([
                    "--valkey-url".into(),
                    v.url(),
                    "--valkey-prefix".into(),
                    format!("bench{i}:"),
                ]),
                None => {
                    skipped.push(Skipped {
                        config: config.name.clone(),
                        reason: "no Valkey server available".into(),
                    });
                    let runs = exp.workloads.iter().filter(|w| config.runs(w)).count();
                    progress.skip((runs * opts.rounds) as u64);
                    continue;
                }
            }
        }
        if config.postgres {
            let name = format!("litelink_lab_{}_{i}", exp.id);
            match runtime.block_on(fresh_postgres(&opts.postgres, &name)) {
                Ok(url) => args.extend(["--store".into(), url]),
                Err(e) => {
                    skipped.push(Skipped {
                        config: config.name.clone(),
                        reason: format!("no PostgreSQL database could be made: {e}"),
                    });
                    let runs = exp.workloads.iter().filter(|w| config.runs(w)).count();
                    progress.skip((runs * opts.rounds) as u64);
                    continue;
                }
            }
        }
        let db = work.join(format!("{}-{i}.db", exp.id));
        let cpu = if config.pinned { server_cpu } else { None };
        let exe = config.exe.as_deref().unwrap_or(&opts.server_exe);
        if let Some(preload) = config.preload {
            let d = match datasets.entry(preload) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    eprintln!(
                        "bench: loading {} links{} with `litelink import`",
                        preload.links,
                        if preload.named {
                            " with named codes"
                        } else {
                            ""
                        }
                    );
                    e.insert(dataset::load(exe, work, preload)?)
                }
            };
            d.copy_to(&db)?;
        }
        // Creates that choose their codes need a key.
        let key = if exp.workloads.iter().any(|w| w.aliases && config.runs(w)) {
            Some(process::admin_key(exe, &db)?)
        } else {
            None
        };
        let mut server = if config.reference {
            ServerProcess::start_reference(exe, &config.args, cpu)?
        } else {
            ServerProcess::start(exe, &db, &args, cpu)?
        };
        server.key = key;
        if sqlite_facts.is_none()
            && !config.reference
            && let Ok(s) = server.stats()
        {
            let options = s["compile_options"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            *sqlite_facts = Some((
                s["sqlite_version"].as_str().unwrap_or("").to_owned(),
                options,
            ));
        }
        if !config.reference {
            wait_for_slots(&server)?;
        }
        let reads = exp
            .workloads
            .iter()
            .any(|w| w.scenario == Scenario::Read && config.runs(w));
        let needs_links = !config.reference && reads;
        let preloaded = config.preload.and_then(|p| datasets.get(&p));
        let codes = if let Some(d) = preloaded {
            d.sample.clone()
        } else if config.reference && reads {
            // The reference answers any path: codes shaped like litelink's
            // (ten characters) make the same requests.
            (0..links(opts)).map(|i| format!("r{i:09}")).collect()
        } else if needs_links {
            let n = if opts.quick {
                links(opts)
            } else {
                exp.links.unwrap_or_else(|| links(opts))
            };
            runtime.block_on(stress::create_links(&server.url(), n, 32))?
        } else {
            Vec::new()
        };
        servers.push((config, server, codes));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut samples = Vec::new();
    for round in 0..opts.rounds {
        for (config, server, codes) in &servers {
            for w in exp.workloads.iter().filter(|w| config.runs(w)) {
                let seed = w.scenario == Scenario::Seed;
                let sc = StressConfig {
                    url: server.url(),
                    scenario: w.scenario,
                    workers: w.connections,
                    tasks: w.tasks,
                    gets_per_task: w.gets_per_task,
                    links: codes.len() as u64,
                    codes: codes.clone(),
                    keys: w.keys,
                    zipf_s: 1.0,
                    read_path: w.read_path,
                    rate: w.rate,
                    background_creates: w.background_creates,
                    background_workers: 16,
                    duration: if seed {
                        Duration::from_secs(120)
                    } else {
                        opts.duration
                    },
                    requests: w.requests,
                    // A bounded run has no warm-up: the bound would go to
                    // it (creates are faster than the bound's budget).
                    warmup: if seed || w.requests.is_some() {
                        Duration::ZERO
                    } else {
                        opts.warmup
                    },
                    timeout: Duration::from_secs(10),
                    progress: false,
                    headers: w
                        .headers
                        .iter()
                        .cloned()
                        .chain(
                            server
                                .key
                                .iter()
                                .filter(|_| w.aliases)
                                .map(|k| ("authorization".into(), format!("Bearer {k}"))),
                        )
                        .collect(),
                    aliases: w.aliases,
                    link_fields: None,
                };
                settle();
                let cache_before = memory_cache_counts(server);
                // The server's CPU time over the measured window: read once
                // the warm-up is over, and again when the load stops.
                let warmup = sc.warmup;
                let pid = server.pid();
                // ... and the load generator's own (this process), to tell
                // whether it, not the server, was the limit.
                let cpu_from = std::thread::spawn(move || {
                    std::thread::sleep(warmup);
                    let me = process::cpu_time_of(std::process::id());
                    (process::cpu_time_of(pid), me, std::time::Instant::now())
                });
                let r = runtime.block_on(stress::run(sc, Arc::clone(&stop)))?;
                let cpu_to = server.cpu_time();
                let load_to = process::cpu_time_of(std::process::id());
                let (cpu_from, load_from, measured_from) = match cpu_from.join() {
                    Ok((server, load, at)) => (server, load, Some(at)),
                    Err(_) => (None, None, None),
                };
                let hit_rate = match (cache_before, memory_cache_counts(server)) {
                    (Some((h0, m0)), Some((h1, m1))) if h1 + m1 > h0 + m0 => {
                        Some((h1 - h0) as f64 / ((h1 + m1) - (h0 + m0)) as f64)
                    }
                    _ => None,
                };
                let load_cpu_share = match (load_from, load_to, measured_from) {
                    (Some(a), Some(b), Some(at)) if at.elapsed() > Duration::ZERO => {
                        Some(b.saturating_sub(a).as_secs_f64() / at.elapsed().as_secs_f64())
                    }
                    _ => None,
                };
                // With creates beside them, the workload is its reads.
                let (rps, latency, total) = match &r.background_creates {
                    Some(_) => (
                        r.read.requests_per_second,
                        &r.read.latency_ms,
                        r.read.total_requests,
                    ),
                    None => (r.requests_per_second, &r.latency_ms, r.total_requests),
                };
                let sample = Sample {
                    config: config.name.clone(),
                    workload: w.name.clone(),
                    round,
                    requests_per_second: rps,
                    p50_ms: latency.p50,
                    p90_ms: latency.p90,
                    p99_ms: latency.p99,
                    p999_ms: latency.p999,
                    max_ms: latency.max,
                    total_requests: total,
                    failed: r.failed,
                    tasks_per_second: r.tasks.as_ref().map(|t| t.tasks_per_second),
                    background_creates_per_second: r
                        .background_creates
                        .as_ref()
                        .map(|b| b.achieved_rate),
                    ratio: None,
                    server_cpu_us: match (cpu_from, cpu_to) {
                        (Some(a), Some(b)) if total > 0 && r.background_creates.is_none() => {
                            Some(b.saturating_sub(a).as_secs_f64() * 1e6 / total as f64)
                        }
                        _ => None,
                    },
                    cpu_ratio: None,
                    load_cpu_share,
                    hit_rate,
                    background_creates_p99_ms: r
                        .background_creates
                        .as_ref()
                        .map(|_| r.create.latency_ms.p99),
                };
                progress.step(&format!(
                    "{} | {} | {} | round {}: {:.0} req/s, p99 {:.2} ms{}",
                    exp.id,
                    config.name,
                    w.name,
                    round + 1,
                    sample.requests_per_second,
                    sample.p99_ms,
                    if sample.failed > 0 {
                        format!(", {} FAILED", sample.failed)
                    } else {
                        String::new()
                    }
                ));
                samples.push(sample);
            }
        }
    }
    let facts = servers
        .iter()
        .filter_map(|(config, server, _)| {
            let d = datasets.get(&config.preload?)?;
            Some(DatasetFacts {
                config: config.name.clone(),
                links: d.links,
                import_seconds: d.import_seconds,
                startup_seconds: server.started_in.as_secs_f64(),
                file_bytes: d.file_bytes,
                bytes_per_link: d.file_bytes as f64 / d.links.max(1) as f64,
                objects: d.objects.clone(),
                rss_anon_bytes: server.rss_anon_bytes(),
                rss_file_bytes: server.rss_file_bytes(),
            })
        })
        .collect();
    drop(servers);
    add_ratios(exp, &mut samples);
    let summary = summarise(exp, &samples, &skipped);
    Ok(ExperimentResult {
        experiment: exp.clone(),
        facts,
        skipped,
        samples,
        summary,
    })
}

/// The memory cache's hits and misses so far, from `/stats`.
fn memory_cache_counts(server: &ServerProcess) -> Option<(u64, u64)> {
    let s = server.stats().ok()?;
    let m = &s["cache"]["memory"];
    Some((m["hits"].as_u64()?, m["misses"].as_u64()?))
}

/// Lets the previous run's disk work finish before the next run starts:
/// writes that were never synced (durability `off`) and a server's trailing
/// checkpoint would otherwise be written back by the kernel during whatever
/// runs next, charging one configuration's I/O to another.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(300));
}

/// Ratios within one round: against the baseline workload on the same
/// server, or against the baseline configuration with the same workload.
fn add_ratios(exp: &Experiment, samples: &mut [Sample]) {
    let snapshot = samples.to_vec();
    let find = |config: &str, workload: &str, round: usize| {
        snapshot
            .iter()
            .find(|s| s.config == config && s.workload == workload && s.round == round)
    };
    for s in samples.iter_mut() {
        let w = exp.workloads.iter().find(|w| w.name == s.workload);
        let c = exp.configs.iter().find(|c| c.name == s.config);
        let base = match (
            &exp.reference,
            w.and_then(|w| w.baseline_workload.as_deref()),
            c.and_then(|c| c.baseline.as_deref()),
        ) {
            (Some((rc, rw)), _, _) => find(rc, rw, s.round),
            (None, Some(bw), _) => find(&s.config, bw, s.round),
            (None, None, Some(bc)) => find(bc, &s.workload, s.round),
            (None, None, None) => None,
        };
        s.ratio = base
            .map(|b| b.requests_per_second)
            .filter(|b| *b > 0.0)
            .map(|b| s.requests_per_second / b);
        s.cpu_ratio = match (s.server_cpu_us, base.and_then(|b| b.server_cpu_us)) {
            (Some(mine), Some(theirs)) if theirs > 0.0 => Some(mine / theirs),
            _ => None,
        };
    }
}

fn summarise(exp: &Experiment, samples: &[Sample], skipped: &[Skipped]) -> Vec<Summary> {
    let mut out = Vec::new();
    for c in &exp.configs {
        if skipped.iter().any(|s| s.config == c.name) {
            continue;
        }
        for w in exp.workloads.iter().filter(|w| c.runs(w)) {
            let mine: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.config == c.name && s.workload == w.name)
                .collect();
            let med = |f: fn(&Sample) -> f64| {
                Spread::of(&mine.iter().map(|s| f(s)).collect::<Vec<_>>())
                    .map(|s| s.median)
                    .unwrap_or(0.0)
            };
            let Some(rps) = Spread::of(
                &mine
                    .iter()
                    .map(|s| s.requests_per_second)
                    .collect::<Vec<_>>(),
            ) else {
                continue;
            };
            // The spread of a figure over the rounds that have it.
            let spread = |f: fn(&Sample) -> Option<f64>| {
                Spread::of(&mine.iter().filter_map(|s| f(s)).collect::<Vec<_>>())
            };
            let ratio = spread(|s| s.ratio);
            out.push(Summary {
                config: c.name.clone(),
                workload: w.name.clone(),
                connections: w.connections,
                rounds: mine.len(),
                requests_per_second: rps,
                p50_ms: med(|s| s.p50_ms),
                p99_ms: med(|s| s.p99_ms),
                p999_ms: med(|s| s.p999_ms),
                tasks_per_second: spread(|s| s.tasks_per_second),
                background_creates_per_second: spread(|s| s.background_creates_per_second),
                ratio_to: exp
                    .reference
                    .as_ref()
                    .map(|(rc, rw)| format!("{rc}, {rw}"))
                    .or_else(|| w.baseline_workload.clone())
                    .or_else(|| c.baseline.clone())
                    .filter(|_| ratio.is_some()),
                failed: mine.iter().map(|s| s.failed).sum(),
                server_cpu_us: spread(|s| s.server_cpu_us),
                cpu_ratio: spread(|s| s.cpu_ratio),
                load_cpu_share: spread(|s| s.load_cpu_share),
                hit_rate: spread(|s| s.hit_rate),
                background_creates_p99_ms: spread(|s| s.background_creates_p99_ms),
                ratio,
            });
        }
    }
    out
}

/// A progress bar on a terminal, one line per measurement otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    done: std::cell::Cell<u64>,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "[{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        });
        Self {
            bar,
            total,
            done: std::cell::Cell::new(0),
        }
    }

    fn step(&self, line: &str) {
        self.done.set(self.done.get() + 1);
        match &self.bar {
            Some(b) => {
                b.inc(1);
                b.println(line);
            }
            None => eprintln!("[{}/{}] {line}", self.done.get(), self.total),
        }
    }

    fn skip(&self, n: u64) {
        self.done.set(self.done.get() + n);
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
