//! `litelink bench`: options turned into [`BenchOptions`].

use std::path::PathBuf;

use clap::Args;
use clap::builder::PossibleValuesParser;
use litelink_bench::{BenchOptions, experiment_ids};

use super::seconds;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A run of well under a minute, for CI: one short round per
    /// configuration. Its figures are too short to quote.
    #[arg(long)]
    pub quick: bool,

    /// Where report.md, results.json and the SVG charts go.
    #[arg(long, default_value = litelink_bench::DEFAULT_OUT)]
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
    /// (`litelink_bench_*`, dropped and made again on every run).
    #[arg(long, env = "LITELINK_BENCH_POSTGRES",
          default_value = litelink_bench::DEFAULT_POSTGRES)]
    pub postgres: String,

    /// Run only these experiments.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(experiment_ids()))]
    pub only: Vec<String>,

    /// Another litelink binary to measure beside this one: every
    /// configuration runs with both, in the same rounds (before/after).
    #[arg(long)]
    pub compare_exe: Option<PathBuf>,
}

impl BenchArgs {
    pub fn options(&self) -> Result<BenchOptions, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot locate the litelink binary: {e}"))?;
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
        Ok(o)
    }
}
