//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Default filter of the server: its own events at info, per-request spans
/// of tower-http only when asked for (they cost on the hot path).
pub const SERVER_FILTER: &str = "info,tower_http=warn";

/// Default filter of the other commands, whose output is their own.
pub const TOOL_FILTER: &str = "warn";

/// Logs to stderr, filtered by `RUST_LOG` or else by `default_filter`.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
