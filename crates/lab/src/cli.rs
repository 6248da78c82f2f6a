//! The lab's command line: `bench` (options turned into [`BenchOptions`]),
//! `serve` (the product's options plus the switches that exist only to
//! reproduce the articles or to measure the hot path) and
//! `reference-server`.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
use litelink::cli::{ImportArgs, KeysCommand, OnOff, ServeArgs, keyword, on_off, seconds};
use litelink_service::Settings;
use litelink_service::store::sqlite::{ConnectionMode, ReadOn};

use crate::{BenchOptions, experiment_ids};

#[derive(Debug, Parser)]
#[command(
    name = "litelink-lab",
    version,
    about = "litelink's benchmark lab: both articles' experiments, the hot path's ceiling, reports and charts"
)]
pub struct LabCli {
    #[command(subcommand)]
    pub command: LabCommand,
}

// Parsed once at start-up: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Reproduce both articles' experiments and write a report with charts.
    Bench(BenchArgs),
    /// `litelink serve` with the lab's switches: what every experiment runs.
    Serve(LabServeArgs),
    /// The bench's ceiling: a bare hyper server answering `{"OK":true}` to
    /// everything (see [`crate::reference`]).
    ReferenceServer(ReferenceArgs),
    /// `litelink import`, as the product runs it: how the scale experiment
    /// loads its links.
    Import(ImportArgs),
    /// How fast `litelink import` takes each file format, into a database
    /// that holds a base of links (docs/benchmarks.md, Import).
    ImportSources(crate::import_sources::ImportSourcesArgs),
    /// `litelink keys`, as the product runs it: the key that creates of
    /// aliases send.
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Debug, Clone, Args)]
pub struct ReferenceArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// Answer with a litelink redirect's head instead of `{"OK":true}`:
    /// the floor under a redirect.
    #[arg(long)]
    pub redirect: bool,
}

/// `litelink-lab serve`: every option of `litelink serve`, and the lab's.
#[derive(Debug, Clone, Args)]
pub struct LabServeArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub lab: LabArgs,
}

impl LabServeArgs {
    pub fn settings(&self) -> Settings {
        let mut settings = self.serve.settings();
        self.lab.apply(&mut settings);
        settings
    }
}

/// Every default shown below comes from here.
fn d() -> Settings {
    Settings::default()
}

/// Switches for experiments: the defaults are what production runs.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lab switches")]
pub struct LabArgs {
    /// SQLite's process-wide memory statistics. `on` puts a global mutex
    /// around every SQLite allocation (the first article).
    #[arg(long, env = "LITELINK_SQLITE_MEMSTATUS", value_enum,
          default_value = on_off(d().store.sqlite.memstatus))]
    pub sqlite_memstatus: OnOff,

    /// Answer `GET /{code}`, `GET /link/{code}` and `/heart-beat` in
    /// front of the router (`off`: the router answers every request; for
    /// measuring what the hot path saves).
    #[arg(long, env = "LITELINK_HOT_PATH", value_enum,
          default_value = on_off(d().http.hot_path))]
    pub hot_path: OnOff,

    /// `pooled` reuses connections and their prepared statements;
    /// `per-request` opens a connection for every read (the first
    /// article's set-up).
    #[arg(long, env = "LITELINK_SQLITE_CONNECTIONS", value_parser = keyword::<ConnectionMode>(),
          default_value_t = d().store.sqlite.connections)]
    pub sqlite_connections: ConnectionMode,

    /// Where lookups run: on the async worker thread, or on the blocking pool.
    #[arg(long, env = "LITELINK_SQLITE_READ_ON", value_parser = keyword::<ReadOn>(),
          default_value_t = d().store.sqlite.read_on)]
    pub sqlite_read_on: ReadOn,

    /// SQLite's page cache; `off` sets cache_size=0 and temp_store=FILE on every
    /// connection (the second article's experiment).
    #[arg(long, env = "LITELINK_SQLITE_PAGE_CACHE", value_enum,
          default_value = on_off(d().store.sqlite.page_cache))]
    pub sqlite_page_cache: OnOff,

    /// Commit concurrent creates together; `off` is `--write-batch-max 1`.
    #[arg(long, env = "LITELINK_GROUP_COMMIT", value_enum,
          default_value = on_off(d().store.sqlite.batch_max > 1))]
    pub group_commit: OnOff,

    /// Draw codes at random and start them (8 characters or more) with a
    /// 2-character prefix that 1,024 consecutive creates share; `off`:
    /// codes are the keyed permutation of row ids.
    #[arg(long, env = "LITELINK_CODE_LOCALITY", value_enum,
          default_value = on_off(d().codes.locality))]
    pub code_locality: OnOff,

    /// Milliseconds between looks for links whose time ran out (the
    /// `link.expired` webhook event); tests shorten it.
    #[arg(long, env = "LITELINK_WEBHOOKS_EXPIRY_SCAN_MS", value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = d().webhooks.expiry_scan.as_millis() as u64)]
    pub webhooks_expiry_scan_ms: u64,
}

impl LabArgs {
    /// Sets the lab's switches on settings the product's options made.
    pub fn apply(&self, s: &mut Settings) {
        s.http.hot_path = self.hot_path.is_on();
        s.codes.locality = self.code_locality.is_on();
        s.webhooks.expiry_scan = std::time::Duration::from_millis(self.webhooks_expiry_scan_ms);
        let sqlite = &mut s.store.sqlite;
        sqlite.memstatus = self.sqlite_memstatus.is_on();
        sqlite.connections = self.sqlite_connections;
        sqlite.read_on = self.sqlite_read_on;
        sqlite.page_cache = self.sqlite_page_cache.is_on();
        if !self.group_commit.is_on() {
            sqlite.batch_max = 1;
        }
        s.derive();
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A run of well under a minute, for CI: one short round per
    /// configuration. Its figures are too short to quote.
    #[arg(long)]
    pub quick: bool,

    /// Where report.md, results.json and the SVG charts go.
    #[arg(long, default_value = crate::DEFAULT_OUT)]
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

    /// PostgreSQL server for the `postgres` experiment: a URL of a database
    /// on it, from which one database per configuration is made
    /// (`litelink_lab_*`, dropped and made again on every run).
    #[arg(long, env = "LITELINK_BENCH_POSTGRES",
          default_value = crate::DEFAULT_POSTGRES)]
    pub postgres: String,

    /// Run only these experiments.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(experiment_ids()))]
    pub only: Vec<String>,

    /// Run only the configurations whose name contains this (repeatable;
    /// names hold commas, so one value is one part): `--configs named` for
    /// the scale experiment's named databases. A ratio needs its baseline
    /// configuration kept too.
    #[arg(long)]
    pub configs: Vec<String>,

    /// Another litelink binary to measure beside this one: every
    /// configuration runs with both, in the same rounds (before/after).
    #[arg(long)]
    pub compare_exe: Option<PathBuf>,
}

impl BenchArgs {
    pub fn options(&self) -> Result<BenchOptions, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot locate the litelink-lab binary: {e}"))?;
        let mut o = BenchOptions::new(exe, self.quick);
        o.compare_exe = self.compare_exe.clone();
        o.out = self.out.clone();
        o.rounds = self.rounds.unwrap_or(o.rounds).max(1);
        if let Some(d) = self.duration {
            o.duration = seconds("duration", d)?;
        }
        if let Some(w) = self.warmup {
            o.warmup = seconds("warmup", w)?;
        }
        o.pin = !self.no_pin;
        o.valkey = self.valkey_server.clone();
        o.postgres = self.postgres.clone();
        o.only = self.only.clone();
        o.configs = self.configs.clone();
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        LabCli::command().debug_assert();
    }
}
