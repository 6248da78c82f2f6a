//! The `litelink` binary's own code: the command line, the `serve` entry
//! point and the management commands. It is a library so that the
//! integration tests, and the lab (`crates/lab`), parse arguments and
//! serve exactly as the binary does. The service is `litelink-service`,
//! the load generator `litelink-stress`.

pub mod cli;
pub mod manage;

use std::io::Write;

use litelink_service::{Application, Settings, http};

/// Serves until SIGTERM or SIGINT, on a runtime fitted to the machine.
/// Prints the documented readiness line once the listener is bound.
pub fn serve(settings: Settings) -> anyhow::Result<()> {
    // On one core a current-thread runtime: the work-stealing scheduler
    // has nothing to steal there, and cost about 3% more CPU per cached
    // redirect, much of it in extra epoll_wait calls (docs/benchmarks.md).
    let one_core = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let mut builder = if one_core {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async move {
        let app = Application::build(settings).await?;
        // Scripts and the test harness wait for this line rather than for
        // a log message.
        let mut out = std::io::stdout().lock();
        writeln!(out, "litelink listening on http://{}", app.addr()?)?;
        out.flush()?;
        drop(out);
        app.run_until(http::shutdown::signal()).await
    })
}
