//! The stress report: the seed article's summary for comparison, then
//! per-request percentiles per phase, status codes and failures. Serialises
//! to the JSON documented in docs/stress.md.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::client::FailureKind;
use super::stats::{Phase, Recorder};

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Self {
                min: 0.0,
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
                mean: 0.0,
            };
        }
        Self {
            min: ms(h.min()),
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub total_requests: u64,
    pub successful: u64,
    pub failed: u64,
    pub requests_per_second: f64,
    pub latency_ms: Latency,
}

impl PhaseReport {
    fn of(p: &Phase, elapsed: Duration) -> Self {
        let total = p.successful + p.failed;
        Self {
            total_requests: total,
            successful: p.successful,
            failed: p.failed,
            requests_per_second: rate(total, elapsed),
            latency_ms: Latency::of(&p.latency),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Tasks {
    pub total: u64,
    pub successful: u64,
    pub failed: u64,
    pub tasks_per_second: f64,
}

/// A rate asked for and the rate achieved.
#[derive(Debug, Clone, Serialize)]
pub struct RateTarget {
    pub target_rate: f64,
    pub achieved_rate: f64,
    /// Achieved at least 95% of the target.
    pub target_reached: bool,
}

impl RateTarget {
    fn new(target_rate: f64, achieved_rate: f64) -> Self {
        Self {
            target_rate,
            achieved_rate,
            target_reached: achieved_rate >= 0.95 * target_rate,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OpenModel {
    #[serde(flatten)]
    pub rate: RateTarget,
    /// Requests sent more than `LATE_AFTER` after their scheduled time:
    /// those a closed-loop tool would have quietly not measured.
    pub late_starts: u64,
    pub max_start_lag_ms: f64,
    /// Time from the actual send, without the correction, for comparison.
    pub service_time_ms: Latency,
}

/// Creates sent at a fixed rate beside a read scenario.
pub type BackgroundCreates = RateTarget;

#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    pub kind: FailureKind,
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    pub scenario: String,
    pub model: String,
    pub workers: usize,
    pub total_requests: u64,
    pub successful: u64,
    pub failed: u64,
    pub requests_per_second: f64,
    pub duration_s: f64,
    pub latency_ms: Latency,
    pub create: PhaseReport,
    pub read: PhaseReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Tasks>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_model: Option<OpenModel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_creates: Option<BackgroundCreates>,
    pub status_counts: BTreeMap<String, u64>,
    pub errors: Vec<FailureReport>,
    /// Stopped early by Ctrl-C: the figures cover what ran.
    pub interrupted: bool,
}

/// The open model's threshold for a late start: tokio's timer has 1 ms
/// granularity, so anything under a few milliseconds is timer noise.
pub const LATE_AFTER: Duration = Duration::from_millis(5);

pub struct ReportInput<'a> {
    pub target: &'a str,
    pub scenario: &'a str,
    pub workers: usize,
    pub elapsed: Duration,
    pub recorder: &'a Recorder,
    pub seed_tasks: Option<u64>,
    pub target_rate: Option<f64>,
    pub background_rate: Option<f64>,
    pub interrupted: bool,
}

/// Flags a rate that fell short of its target, so it cannot be missed.
fn missed_mark(reached: bool) -> &'static str {
    if reached {
        ""
    } else {
        "  << TARGET RATE NOT REACHED"
    }
}

fn rate(n: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { n as f64 / s } else { 0.0 }
}

impl Report {
    pub fn build(input: ReportInput<'_>) -> Self {
        let r = input.recorder;
        let mut all = r.create.latency.clone();
        let _ = all.add(&r.read.latency);
        let mut service = r.create.service.clone();
        let _ = service.add(&r.read.service);
        let successful = r.create.successful + r.read.successful;
        let failed = r.create.failed + r.read.failed;
        let total = successful + failed;
        let elapsed = input.elapsed;
        let tasks = input.seed_tasks.map(|_| Tasks {
            total: r.tasks_ok + r.tasks_failed,
            successful: r.tasks_ok,
            failed: r.tasks_failed,
            tasks_per_second: rate(r.tasks_ok + r.tasks_failed, elapsed),
        });
        let open_model = input.target_rate.map(|target| OpenModel {
            rate: RateTarget::new(target, rate(total, elapsed)),
            late_starts: r.late_starts,
            max_start_lag_ms: r.max_start_lag.as_secs_f64() * 1000.0,
            service_time_ms: Latency::of(&service),
        });
        let background_creates = input
            .background_rate
            .map(|target| RateTarget::new(target, rate(r.create.successful, elapsed)));
        Self {
            target: input.target.to_owned(),
            scenario: input.scenario.to_owned(),
            model: if input.target_rate.is_some() {
                "open"
            } else {
                "closed"
            }
            .to_owned(),
            workers: input.workers,
            total_requests: total,
            successful,
            failed,
            requests_per_second: rate(total, elapsed),
            duration_s: elapsed.as_secs_f64(),
            latency_ms: Latency::of(&all),
            create: PhaseReport::of(&r.create, elapsed),
            read: PhaseReport::of(&r.read, elapsed),
            tasks,
            open_model,
            background_creates,
            status_counts: r
                .statuses
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            errors: r
                .failures
                .iter()
                .map(|(k, (n, ex))| FailureReport {
                    kind: *k,
                    count: *n,
                    examples: ex.clone(),
                })
                .collect(),
            interrupted: input.interrupted,
        }
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let line = "=".repeat(64);
        let _ = writeln!(
            s,
            "{line}\nSTRESS TEST RESULTS  ({} scenario, {} model, {} workers)\n{line}",
            self.scenario, self.model, self.workers
        );
        let _ = writeln!(s, "Target:              {}", self.target);
        if self.interrupted {
            let _ = writeln!(
                s,
                "INTERRUPTED: the figures cover only what ran before Ctrl-C"
            );
        }
        if let Some(t) = &self.tasks {
            let _ = writeln!(s, "Total tasks:         {}", t.total);
            let _ = writeln!(s, "Successful tasks:    {}", t.successful);
            let _ = writeln!(s, "Failed tasks:        {}", t.failed);
            let _ = writeln!(s, "Tasks/second:        {:.2}", t.tasks_per_second);
        }
        let _ = writeln!(s, "Total requests:      {}", self.total_requests);
        let _ = writeln!(s, "Successful:          {}", self.successful);
        let _ = writeln!(s, "Failed:              {}", self.failed);
        let _ = writeln!(s, "Total time:          {:.2}s", self.duration_s);
        let _ = writeln!(s, "Requests/second:     {:.0}", self.requests_per_second);
        if let Some(o) = &self.open_model {
            let _ = writeln!(
                s,
                "Target rate:         {:.0}/s, achieved {:.0}/s{}",
                o.rate.target_rate,
                o.rate.achieved_rate,
                missed_mark(o.rate.target_reached)
            );
            let _ = writeln!(
                s,
                "Late starts:         {} requests sent over {:?} behind schedule (worst {:.1} ms)",
                o.late_starts, LATE_AFTER, o.max_start_lag_ms
            );
        }
        if let Some(b) = &self.background_creates {
            let _ = writeln!(
                s,
                "Background creates:  {:.0}/s asked, {:.0}/s stored (their latency runs from the scheduled send time){}",
                b.target_rate,
                b.achieved_rate,
                missed_mark(b.target_reached)
            );
        }
        let _ = writeln!(
            s,
            "\nPer-request latency (ms){}:",
            if self.open_model.is_some() {
                ", from the scheduled send time"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "  {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "phase", "min", "p50", "p90", "p99", "p99.9", "max", "mean", "req/s"
        );
        let mut row = |name: &str, n: u64, rps: f64, l: &Latency| {
            if n > 0 {
                let _ = writeln!(
                    s,
                    "  {:<8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.0}",
                    name, l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.mean, rps
                );
            }
        };
        row(
            "create",
            self.create.total_requests,
            self.create.requests_per_second,
            &self.create.latency_ms,
        );
        row(
            "read",
            self.read.total_requests,
            self.read.requests_per_second,
            &self.read.latency_ms,
        );
        row(
            "all",
            self.total_requests,
            self.requests_per_second,
            &self.latency_ms,
        );
        if let Some(o) = &self.open_model {
            row(
                "service",
                self.total_requests,
                self.requests_per_second,
                &o.service_time_ms,
            );
        }
        let statuses: Vec<String> = self
            .status_counts
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = writeln!(
            s,
            "\nStatus codes:        {}",
            if statuses.is_empty() {
                "none".into()
            } else {
                statuses.join(", ")
            }
        );
        if !self.errors.is_empty() {
            let _ = writeln!(s, "\nErrors:");
            for e in &self.errors {
                let _ = writeln!(s, "  {:?}: {}", e.kind, e.count);
                for ex in &e.examples {
                    let _ = writeln!(s, "    - {ex}");
                }
            }
        }
        let _ = write!(s, "{line}");
        s
    }
}
