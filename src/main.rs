//! `litelink`: parse the command line, dispatch.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use litelink::cli::config;
use litelink::cli::{Command, StressArgs};
use litelink_service::observability::logging;
use litelink_service::store;

fn main() -> ExitCode {
    let (cli, matches) = match config::parse_from(std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(config::Error::Args(e)) => e.exit(),
        Err(config::Error::File(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let command = cli.into_command();
    if let Command::Serve(args) = &command
        && args.print_config
    {
        print!("{}", config::print(&matches));
        return ExitCode::SUCCESS;
    }
    let (filter, format) = match &command {
        Command::Serve(args) => (logging::SERVER_FILTER, args.server.log_format),
        _ => (logging::TOOL_FILTER, logging::LogFormat::Text),
    };
    logging::init(filter, format);
    let result = match command {
        Command::Serve(args) => litelink::serve(args.settings()).map(|()| ExitCode::SUCCESS),
        Command::Doctor(args) => store::backend(&args.store.settings())
            .doctor(args.full)
            .map(|ok| {
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }),
        Command::Keys(command) => litelink::manage::keys(command),
        Command::Users(command) => litelink::manage::users(command),
        Command::Domains(command) => litelink::manage::domains(command),
        Command::Webhooks(command) => litelink::manage::webhooks(command),
        Command::Export(args) => litelink::manage::export(args),
        Command::Import(args) => litelink::manage::import(args),
        Command::Stress(args) => stress(args),
        Command::Health(args) => litelink::manage::health(args),
    };
    result.unwrap_or_else(|e| {
        tracing::error!("{e:#}");
        ExitCode::FAILURE
    })
}

/// Runs a stress test; Ctrl-C stops it and still prints what was measured.
/// Exit status 1 when not one request succeeded.
fn stress(args: StressArgs) -> anyhow::Result<ExitCode> {
    let config = args.config().map_err(anyhow::Error::msg)?;
    // One thread needs no work-stealing scheduler: a current-thread
    // runtime spends less per request on it.
    let mut builder = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n.max(1));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder.enable_all().build()?;
    let report = runtime.block_on(async move {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::Relaxed);
            }
        });
        litelink_stress::run(config, stop).await
    })?;
    let text = if args.json {
        serde_json::to_string_pretty(&report)?
    } else {
        report.text()
    };
    // A reader that stops early (`| head`) is not an error of the run.
    if let Err(e) = writeln!(std::io::stdout().lock(), "{text}")
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    Ok(if report.successful > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
