//! The command line. Every option of `serve` can also be set through a
//! `LITELINK_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::domain::code::{MAX_GENERATED_LEN, MIN_GENERATED_LEN};
use crate::store::sqlite::{ConnectionMode, Durability, ReadOn};
use crate::stress::{Keys, ReadPath, Scenario, StressConfig};

#[derive(Debug, Parser)]
#[command(
    name = "litelink",
    version,
    about = "A fast, durable URL shortener on SQLite"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options for `serve`, which also runs when no subcommand is given.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default).
    Serve(ServeArgs),
    /// Print SQLite's build facts and check a database; non-zero exit status
    /// when something is wrong.
    Doctor(DoctorArgs),
    /// Load-test a server that has the seed API (litelink or any other).
    Stress(StressArgs),
    /// Reproduce both articles' experiments and write a report with charts.
    Bench(BenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == Self::On
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedirectStatus {
    #[value(name = "301")]
    MovedPermanently,
    #[value(name = "302")]
    Found,
    #[value(name = "307")]
    TemporaryRedirect,
    #[value(name = "308")]
    PermanentRedirect,
}

impl RedirectStatus {
    pub fn status(self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Self::MovedPermanently => StatusCode::MOVED_PERMANENTLY,
            Self::Found => StatusCode::FOUND,
            Self::TemporaryRedirect => StatusCode::TEMPORARY_REDIRECT,
            Self::PermanentRedirect => StatusCode::PERMANENT_REDIRECT,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct SqliteArgs {
    /// SQLite database file; created with its schema on first start.
    #[arg(long, env = "LITELINK_DB", default_value = "litelink.db")]
    pub db: PathBuf,

    /// SQLite's process-wide memory statistics. `on` puts a global mutex
    /// around every SQLite allocation.
    #[arg(
        long,
        env = "LITELINK_SQLITE_MEMSTATUS",
        value_enum,
        default_value = "off"
    )]
    pub sqlite_memstatus: OnOff,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LITELINK_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub sqlite: SqliteArgs,

    /// `pooled` reuses connections and their prepared statements;
    /// `per-request` opens a connection for every request (the first
    /// article's set-up, for experiments).
    #[arg(
        long,
        env = "LITELINK_SQLITE_CONNECTIONS",
        value_enum,
        default_value = "pooled"
    )]
    pub sqlite_connections: ConnectionMode,

    /// Where lookups run: on the async worker thread, or on the blocking pool.
    #[arg(
        long,
        env = "LITELINK_SQLITE_READ_ON",
        value_enum,
        default_value = "worker"
    )]
    pub sqlite_read_on: ReadOn,

    /// SQLite's page cache; `off` sets cache_size=0 and temp_store=0 on every
    /// connection (the second article's experiment).
    #[arg(
        long,
        env = "LITELINK_SQLITE_PAGE_CACHE",
        value_enum,
        default_value = "on"
    )]
    pub sqlite_page_cache: OnOff,

    /// What a 201 promises: `full` survives power loss, `normal` a process
    /// crash, `off` nothing (benchmarks only).
    #[arg(long, env = "LITELINK_DURABILITY", value_enum, default_value = "full")]
    pub durability: Durability,

    /// Commit concurrent creates together, one sync per batch.
    #[arg(long, env = "LITELINK_GROUP_COMMIT", value_enum, default_value = "on")]
    pub group_commit: OnOff,

    /// Most creates in one group commit.
    #[arg(long, env = "LITELINK_WRITE_BATCH_MAX", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub write_batch_max: u32,

    /// Creates that may wait for the writer; beyond it `POST /link` answers
    /// 503 with Retry-After.
    #[arg(long, env = "LITELINK_WRITE_QUEUE", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub write_queue: u32,

    /// At full durability, extend the WAL with zeros to this many MiB at
    /// start-up, so that each sync overwrites allocated blocks instead of
    /// growing the file (0: off).
    #[arg(long, env = "LITELINK_WAL_PREALLOCATE_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(0..=65_536))]
    pub wal_preallocate_mib: u32,

    /// Milliseconds SQLite waits for a lock held by another process.
    #[arg(long, env = "LITELINK_SQLITE_BUSY_TIMEOUT_MS", default_value_t = 5000)]
    pub sqlite_busy_timeout_ms: u64,

    /// Status of `GET /{code}`.
    #[arg(
        long,
        env = "LITELINK_REDIRECT_STATUS",
        value_enum,
        default_value = "302"
    )]
    pub redirect_status: RedirectStatus,

    /// Length of generated codes (characters of [A-Za-z0-9]).
    #[arg(long, env = "LITELINK_CODE_LENGTH", default_value_t = 10,
          value_parser = clap::value_parser!(u8).range(MIN_GENERATED_LEN as i64..=MAX_GENERATED_LEN as i64))]
    pub code_length: u8,

    /// Start generated codes (8 characters or more) with a 2-character
    /// prefix that 1,024 consecutive creates share, so that their index
    /// entries share pages: fewer pages to write and sync per create, at
    /// the cost of 2 random characters against someone who knows when a
    /// link was made. `off`: every character random.
    #[arg(long, env = "LITELINK_CODE_LOCALITY", value_enum, default_value = "on")]
    pub code_locality: OnOff,

    /// Public base URL for the `short_url` field, e.g. https://s.example.com
    /// (default: http:// and the request's Host).
    #[arg(long, env = "LITELINK_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Largest request body accepted, in bytes (413 above it).
    #[arg(long, env = "LITELINK_MAX_BODY_BYTES", default_value_t = 16 * 1024)]
    pub max_body_bytes: usize,

    /// Seconds a request may take before it is answered 503.
    #[arg(long, env = "LITELINK_REQUEST_TIMEOUT", default_value_t = 10)]
    pub request_timeout: u64,

    /// Cache in front of SQLite.
    #[arg(long, env = "LITELINK_CACHE", value_enum, default_value = "memory")]
    pub cache: CacheMode,

    /// Entries the in-process cache holds.
    #[arg(long, env = "LITELINK_CACHE_CAPACITY", default_value_t = 100_000)]
    pub cache_capacity: usize,

    /// Milliseconds an unknown code is remembered as unknown (0: never).
    #[arg(long, env = "LITELINK_CACHE_NEGATIVE_TTL_MS", default_value_t = 5000)]
    pub cache_negative_ttl_ms: u64,

    /// Valkey (or Redis) server for `--cache valkey|tiered`.
    #[arg(
        long,
        env = "LITELINK_VALKEY_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub valkey_url: String,

    /// Prefix of every key litelink writes to Valkey.
    #[arg(long, env = "LITELINK_VALKEY_PREFIX", default_value = "litelink:")]
    pub valkey_prefix: String,

    /// Seconds a link stays in Valkey (0: until Valkey evicts it).
    #[arg(long, env = "LITELINK_VALKEY_TTL", default_value_t = 86_400)]
    pub valkey_ttl: u64,

    /// Milliseconds each Valkey call may take before the lookup falls
    /// through to SQLite.
    #[arg(long, env = "LITELINK_VALKEY_TIMEOUT_MS", default_value_t = 50)]
    pub valkey_timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// Every lookup reads SQLite.
    None,
    /// A bounded in-process cache.
    Memory,
    /// Valkey (or Redis), shared by every instance.
    Valkey,
    /// Memory in front of Valkey.
    Tiered,
}

impl ServeArgs {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout)
    }
}

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub sqlite: SqliteArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StressArgs {
    /// Base URL of the server under test.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,

    /// `seed`: each task creates a link and reads it --gets-per-task times
    /// (the article's test); `read`: read --links links; `create`: only
    /// create; `heart-beat`: only GET /heart-beat (the baseline).
    #[arg(long, value_enum, default_value = "seed")]
    pub scenario: Scenario,

    /// Seed scenario: number of tasks.
    #[arg(long, default_value_t = 100)]
    pub tasks: u64,

    /// Concurrent workers, each with its own keep-alive connection.
    #[arg(long, visible_alias = "connections", default_value_t = 30)]
    pub workers: usize,

    /// Seed scenario: reads per task.
    #[arg(long, default_value_t = 80)]
    pub gets_per_task: u64,

    /// Read scenario: links created (untimed) before the reads.
    #[arg(long, default_value_t = 1000)]
    pub links: u64,

    /// Read scenario: which link each read asks for.
    #[arg(long, value_enum, default_value = "uniform")]
    pub keys: Keys,

    /// Skew of `--keys zipf` (larger: fewer, hotter keys).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,

    /// Read with `GET /link/{code}` (json) or `GET /{code}` (redirect, not followed).
    #[arg(long, value_enum, default_value = "json")]
    pub read_path: ReadPath,

    /// Open model: send this many requests per second on a fixed schedule,
    /// measuring latency from the scheduled time. Default: closed model.
    #[arg(long)]
    pub rate: Option<f64>,

    /// Read and heart-beat scenarios: also create this many links per
    /// second, on a fixed schedule and on connections of their own, to
    /// measure reads while the writer commits. Reported as the create row.
    #[arg(long)]
    pub background_creates: Option<f64>,

    /// Connections for `--background-creates`: enough to keep the schedule
    /// while each create waits for its sync.
    #[arg(long, default_value_t = 16)]
    pub background_workers: usize,

    /// Stop after this many seconds (default: 10 for read and create; a
    /// 300-second limit for seed, which ends when its tasks are done).
    #[arg(long)]
    pub duration: Option<f64>,

    /// Stop after this many measured requests (read and create).
    #[arg(long)]
    pub requests: Option<u64>,

    /// Seconds of load before measuring starts (read and create).
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,

    /// Milliseconds before a request counts as timed out.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,

    /// Threads of the load generator (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl StressArgs {
    pub fn config(&self) -> Result<StressConfig, String> {
        let default_duration = match self.scenario {
            Scenario::Seed => 300.0,
            _ => 10.0,
        };
        Ok(StressConfig {
            url: self.url.clone(),
            scenario: self.scenario,
            workers: self.workers,
            tasks: self.tasks,
            gets_per_task: self.gets_per_task,
            links: self.links,
            codes: Vec::new(),
            keys: self.keys,
            zipf_s: self.zipf_s,
            read_path: self.read_path,
            rate: self.rate,
            background_creates: self.background_creates,
            background_workers: self.background_workers,
            duration: seconds("duration", self.duration.unwrap_or(default_duration))?,
            requests: self.requests,
            warmup: seconds("warmup", self.warmup)?,
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            progress: !self.json && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A run of well under a minute, for CI: one short round per
    /// configuration. Its figures are too short to quote.
    #[arg(long)]
    pub quick: bool,

    /// Where report.md, results.json and the SVG charts go.
    #[arg(long, default_value = "target/bench-report")]
    pub out: PathBuf,

    /// Rounds per configuration (default 3; 1 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,

    /// Seconds measured per run (default 5; 0.3 with --quick).
    #[arg(long)]
    pub duration: Option<f64>,

    /// Seconds of warm-up before each run (default 1; 0 with --quick).
    #[arg(long)]
    pub warmup: Option<f64>,

    /// Do not pin servers and load generator to separate CPUs.
    #[arg(long)]
    pub no_pin: bool,

    /// valkey-server (or redis-server) binary for the cache experiment
    /// (default: found under target/ or on PATH).
    #[arg(long, env = "LITELINK_BENCH_VALKEY_SERVER")]
    pub valkey_server: Option<PathBuf>,

    /// Run only these experiments: reads, memstatus, caches, writes,
    /// reads-while-creating, concurrency.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

impl BenchArgs {
    pub fn options(&self) -> Result<crate::bench::BenchOptions, String> {
        const KNOWN: [&str; 6] = [
            "reads",
            "memstatus",
            "caches",
            "writes",
            "reads-while-creating",
            "concurrency",
        ];
        if let Some(bad) = self.only.iter().find(|o| !KNOWN.contains(&o.as_str())) {
            return Err(format!(
                "--only: unknown experiment '{bad}' (known: {})",
                KNOWN.join(", ")
            ));
        }
        let (rounds, duration, warmup) = if self.quick {
            (1, 0.3, 0.0)
        } else {
            (3, 5.0, 1.0)
        };
        Ok(crate::bench::BenchOptions {
            quick: self.quick,
            out: self.out.clone(),
            rounds: self.rounds.unwrap_or(rounds).max(1),
            duration: seconds("duration", self.duration.unwrap_or(duration))?,
            warmup: seconds("warmup", self.warmup.unwrap_or(warmup))?,
            pin: !self.no_pin,
            valkey: self.valkey_server.clone(),
            only: self.only.clone(),
        })
    }
}

/// Checks a `--NAME SECONDS` option given as a float.
fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v >= 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("--{name} must be a non-negative number of seconds"))
    }
}
