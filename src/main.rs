use std::process::ExitCode;

use clap::Parser;
use litelink::cli::{Cli, Command};
use litelink::store::sqlite::memstatus;
use litelink::{doctor, http, server, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    // MEMSTATUS can only be set before SQLite initialises, which the first
    // connection does: so before anything else.
    let memstatus_on = match &command {
        Command::Serve(a) => a.sqlite.sqlite_memstatus.is_on(),
        Command::Doctor(a) => a.sqlite.sqlite_memstatus.is_on(),
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
