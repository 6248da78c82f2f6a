//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Default filter of the server: its own events at info, per-request spans
/// of tower-http only when asked for (they cost on the hot path); the
/// Valkey client's own reconnect warnings off (the cache logs its failures
/// at a limited rate).
pub const SERVER_FILTER: &str = "info,tower_http=warn,redis=error";

/// Default filter of the other commands, whose output is their own.
pub const TOOL_FILTER: &str = "warn";

tokio::task_local! {
    /// The id of the request this task is handling (`x-request-id`), set
    /// by the HTTP layer for the request's lifetime.
    pub(crate) static REQUEST_ID: axum::http::HeaderValue;
}

/// The id of the request being handled on this task, as log lines name
/// it: `-` outside a request (a background thread, a flush).
pub(crate) fn request_id() -> String {
    REQUEST_ID
        .try_with(|v| v.to_str().map(str::to_owned).ok())
        .ok()
        .flatten()
        .unwrap_or_else(|| "-".to_owned())
}

/// How log lines are written.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    strum::EnumString,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Logs to stderr, filtered by `RUST_LOG` or else by `default_filter`.
pub fn init(default_filter: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Lets a repeated event through at most once per `every`, counting the
/// ones held back, so that a failing disk or a flood of refused
/// connections logs a line every few seconds, not one per request.
#[derive(Debug)]
pub(crate) struct Throttle {
    every_ms: u64,
    /// Milliseconds since `epoch` of the last event let through, plus 1
    /// (0: none yet).
    last: std::sync::atomic::AtomicU64,
    held_back: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
}

impl Throttle {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Self {
            every_ms: every.as_millis() as u64,
            last: Default::default(),
            held_back: Default::default(),
            epoch: std::time::Instant::now(),
        }
    }

    /// `Some(n)` when this event should be logged, `n` being how many were
    /// held back since the last one logged; `None` to stay quiet.
    pub(crate) fn allow(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= self.every_ms;
        if due
            && self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            Some(self.held_back.swap(0, Relaxed))
        } else {
            self.held_back.fetch_add(1, Relaxed);
            None
        }
    }
}

/// Logs `$($arg)+` at `$level` through `$throttle`, with the number of
/// events held back since the last line as `suppressed`.
#[macro_export]
macro_rules! throttled {
    ($throttle:expr, $level:ident, $($arg:tt)+) => {
        if let Some(suppressed) = $throttle.allow() {
            tracing::$level!(suppressed, $($arg)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_counts_what_it_holds_back() {
        let t = Throttle::new(std::time::Duration::from_millis(200));
        assert_eq!(t.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(t.allow(), None);
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        assert_eq!(t.allow(), Some(1000));
        assert_eq!(t.allow(), None);
    }
}
