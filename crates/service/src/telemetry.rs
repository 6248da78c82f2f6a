//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Default filter: the service's own events at info, per-request spans of
/// tower-http only when asked for (they cost on the hot path).
const DEFAULT_FILTER: &str = "info,tower_http=warn";

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
