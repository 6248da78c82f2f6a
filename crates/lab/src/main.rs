//! `litelink-lab`: parse the command line, dispatch.

use std::process::ExitCode;

use clap::Parser;
use litelink_lab::cli::{LabCli, LabCommand};
use litelink_lab::reference::{self, Answer};
use litelink_service::observability::logging;

fn main() -> ExitCode {
    let command = LabCli::parse().command;
    let (filter, format) = match &command {
        LabCommand::Serve(args) => (logging::SERVER_FILTER, args.serve.server.log_format),
        _ => (logging::TOOL_FILTER, logging::LogFormat::Text),
    };
    logging::init(filter, format);
    let result = match command {
        LabCommand::Serve(args) => litelink::serve(args.settings()).map(|()| ExitCode::SUCCESS),
        LabCommand::Bench(args) => bench(&args).map(|()| ExitCode::SUCCESS),
        LabCommand::Import(args) => litelink::manage::import(args),
        LabCommand::Keys(command) => litelink::manage::keys(command),
        LabCommand::ImportSources(args) => {
            litelink_lab::import_sources::run(&args).map(|()| ExitCode::SUCCESS)
        }
        LabCommand::ReferenceServer(args) => {
            let kind = if args.redirect {
                Answer::Redirect
            } else {
                Answer::Ok
            };
            reference::serve(args.listen, kind)
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &litelink_lab::cli::BenchArgs) -> anyhow::Result<()> {
    let options = args.options().map_err(anyhow::Error::msg)?;
    let report = litelink_lab::run(&options)?;
    println!("report written to {}", report.display());
    Ok(())
}
