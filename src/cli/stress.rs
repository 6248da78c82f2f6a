//! `litelink stress`: options turned into a [`StressConfig`].

use std::time::Duration;

use clap::Args;
use litelink_stress::{Keys, ReadPath, Scenario, StressConfig};

use super::{keyword, seconds};

/// Every default shown below comes from here.
fn d() -> StressConfig {
    StressConfig::default()
}

#[derive(Debug, Clone, Args)]
pub struct StressArgs {
    /// Base URL of the server under test.
    #[arg(long, default_value_t = d().url)]
    pub url: String,

    /// `seed`: each task creates a link and reads it --gets-per-task times
    /// (the article's test); `read`: read --links links; `create`: only
    /// create; `heart-beat`: only GET /heart-beat (the baseline).
    #[arg(long, value_parser = keyword::<Scenario>(), default_value_t = d().scenario)]
    pub scenario: Scenario,

    /// Seed scenario: number of tasks.
    #[arg(long, default_value_t = d().tasks)]
    pub tasks: u64,

    /// Concurrent workers, each with its own keep-alive connection.
    #[arg(long, visible_alias = "connections", default_value_t = d().workers)]
    pub workers: usize,

    /// Seed scenario: reads per task.
    #[arg(long, default_value_t = d().gets_per_task)]
    pub gets_per_task: u64,

    /// Read scenario: links created (untimed) before the reads.
    #[arg(long, default_value_t = d().links)]
    pub links: u64,

    /// Read scenario: which link each read asks for.
    #[arg(long, value_parser = keyword::<Keys>(), default_value_t = d().keys)]
    pub keys: Keys,

    /// Skew of `--keys zipf` (larger: fewer, hotter keys).
    #[arg(long, default_value_t = d().zipf_s)]
    pub zipf_s: f64,

    /// Read with `GET /link/{code}` (json) or `GET /{code}` (redirect, not followed).
    #[arg(long, value_parser = keyword::<ReadPath>(), default_value_t = d().read_path)]
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
    #[arg(long, default_value_t = d().background_workers)]
    pub background_workers: usize,

    /// Stop after this many seconds (default: 10 for read and create; a
    /// 300-second limit for seed, which ends when its tasks are done).
    #[arg(long)]
    pub duration: Option<f64>,

    /// Stop after this many requests, the warm-up's included (read and create).
    #[arg(long)]
    pub requests: Option<u64>,

    /// Seconds of load before measuring starts (read and create).
    #[arg(long, default_value_t = d().warmup.as_secs_f64())]
    pub warmup: f64,

    /// Milliseconds before a request counts as timed out.
    #[arg(long, default_value_t = d().timeout.as_millis() as u64)]
    pub timeout_ms: u64,

    /// An extra header on every request, `"Name: value"` (repeatable), e.g.
    /// a browser's User-Agent and Referer for redirects that are counted.
    #[arg(long = "header", short = 'H', value_parser = header)]
    pub headers: Vec<(String, String)>,

    /// Create scenario: each create names its own code (an alias of 12
    /// random characters) instead of taking a generated one.
    #[arg(long)]
    pub aliases: bool,

    /// Read scenario: more fields of the links it creates first, as a
    /// JSON object (`'{"rules": [...]}'`).
    #[arg(long, value_parser = link_fields)]
    pub link_fields: Option<String>,

    /// Threads of the load generator (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl StressArgs {
    pub fn config(&self) -> Result<StressConfig, String> {
        let duration = match self.duration {
            Some(s) => seconds("duration", s)?,
            None => StressConfig::default_duration(self.scenario),
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
            duration,
            requests: self.requests,
            warmup: seconds("warmup", self.warmup)?,
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            progress: !self.json && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            headers: self.headers.clone(),
            aliases: self.aliases,
            link_fields: self.link_fields.clone(),
        })
    }
}

/// `Name: value`, as curl and wrk take it.
/// A JSON object's members, without its braces, to add to a create.
fn link_fields(raw: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(m)) if !m.is_empty() => {
            let whole = serde_json::Value::Object(m).to_string();
            Ok(whole[1..whole.len() - 1].to_owned())
        }
        _ => Err(format!("'{raw}' is not a JSON object with fields")),
    }
}

fn header(raw: &str) -> Result<(String, String), String> {
    match raw.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("'{raw}' is not 'Name: value'")),
    }
}
