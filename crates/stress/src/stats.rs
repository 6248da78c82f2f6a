//! What each worker records, and how workers' records are merged. Each
//! worker owns its histograms and counters, so recording costs no lock and
//! no channel send; they are merged once, at the end.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::client::{Failure, FailureKind};

/// Latencies are recorded in microseconds, up to an hour, 3 significant
/// figures.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Kept per failure kind: how many, and the first few messages.
const EXAMPLES: usize = 3;

pub struct Phase {
    /// Latency as the user sees it: from the intended send time in the open
    /// model, from the actual send in the closed one.
    pub latency: Histogram<u64>,
    /// From the actual send (equal to `latency` in the closed model).
    pub service: Histogram<u64>,
    pub successful: u64,
    pub failed: u64,
}

impl Phase {
    fn new() -> Self {
        Self {
            latency: histogram(),
            service: histogram(),
            successful: 0,
            failed: 0,
        }
    }

    fn merge(&mut self, other: &Self) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        self.successful += other.successful;
        self.failed += other.failed;
    }
}

pub struct Recorder {
    pub create: Phase,
    pub read: Phase,
    pub statuses: BTreeMap<u16, u64>,
    pub failures: BTreeMap<FailureKind, (u64, Vec<String>)>,
    /// Open model: requests sent later than their schedule, and the worst lag.
    pub late_starts: u64,
    pub max_start_lag: Duration,
    pub tasks_ok: u64,
    pub tasks_failed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Read,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            create: Phase::new(),
            read: Phase::new(),
            statuses: BTreeMap::new(),
            failures: BTreeMap::new(),
            late_starts: 0,
            max_start_lag: Duration::ZERO,
            tasks_ok: 0,
            tasks_failed: 0,
        }
    }

    fn phase(&mut self, op: Op) -> &mut Phase {
        match op {
            Op::Create => &mut self.create,
            Op::Read => &mut self.read,
        }
    }

    pub fn status(&mut self, status: u16) {
        *self.statuses.entry(status).or_default() += 1;
    }

    /// One finished request: its latency, its time in service, and whether
    /// it succeeded.
    pub fn record(
        &mut self,
        op: Op,
        latency: Duration,
        service: Duration,
        outcome: Result<(), Failure>,
    ) {
        let phase = self.phase(op);
        let _ = phase.latency.record(micros(latency));
        let _ = phase.service.record(micros(service));
        match outcome {
            Ok(()) => phase.successful += 1,
            Err(f) => {
                phase.failed += 1;
                self.failure(f);
            }
        }
    }

    pub fn failure(&mut self, f: Failure) {
        let entry = self.failures.entry(f.kind).or_default();
        entry.0 += 1;
        if entry.1.len() < EXAMPLES {
            entry.1.push(f.message);
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        self.create.merge(&other.create);
        self.read.merge(&other.read);
        for (s, n) in other.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        for (k, (n, examples)) in other.failures {
            let entry = self.failures.entry(k).or_default();
            entry.0 += n;
            for e in examples {
                if entry.1.len() < EXAMPLES {
                    entry.1.push(e);
                }
            }
        }
        self.late_starts += other.late_starts;
        self.max_start_lag = self.max_start_lag.max(other.max_start_lag);
        self.tasks_ok += other.tasks_ok;
        self.tasks_failed += other.tasks_failed;
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}
