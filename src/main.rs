use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use litelink::cli::{Cli, Command};
use litelink::store::sqlite::memstatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use litelink::cli::{BenchArgs, StressArgs};
use litelink::{doctor, http, server, stress as engine, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    // MEMSTATUS can only be set before SQLite initialises, which the first
    // connection does: so before anything else.
    let memstatus_on = match &command {
        Command::Serve(a) => a.sqlite.sqlite_memstatus.is_on(),
        Command::Doctor(a) => a.sqlite.sqlite_memstatus.is_on(),
        Command::Stress(_) | Command::Bench(_) => false,
    };
    if let Err(e) = memstatus::configure(memstatus_on) {
        eprintln!("litelink: {e}");
        return ExitCode::FAILURE;
    }
    telemetry::init();
    let result = match command {
        Command::Serve(args) => serve(args),
        Command::Doctor(args) => doctor::run(&args.sqlite.db).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
        Command::Stress(args) => stress(args),
        Command::Bench(args) => bench(args),
    };
    result.unwrap_or_else(|e| {
        tracing::error!("{e:#}");
        ExitCode::FAILURE
    })
}

fn serve(args: litelink::cli::ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        server::run(args, listener, http::shutdown::signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
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
        engine::run(config, stop).await
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

fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let options = args.options().map_err(anyhow::Error::msg)?;
    let report = litelink::bench::run(&options)?;
    println!("report written to {}", report.display());
    Ok(ExitCode::SUCCESS)
}
