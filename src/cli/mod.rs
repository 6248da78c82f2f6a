//! The command line: clap's types live here and nowhere below. Each
//! subcommand's arguments turn into the library's own settings
//! ([`Settings`](litelink_service::Settings), `StressConfig`,
//! `BenchOptions`), whose defaults they show in `--help`.

pub mod config;
mod manage;
mod serve;
mod stress;

use std::str::FromStr;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

pub use manage::{
    DomainsCommand, ExportArgs, ImportArgs, KeysCommand, OnConflict, RedirectArgs, UsersCommand,
    WebhooksCommand,
};
pub use serve::{DoctorArgs, ServeArgs, StoreArgs};
pub use stress::StressArgs;

#[derive(Debug, Parser)]
#[command(
    name = "litelink",
    version,
    about = "A fast, durable URL shortener on SQLite"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A TOML file of settings, one flat key per option, named as its flag
    /// without the dashes (`cache-capacity = 50000`). Flags override the
    /// environment, which overrides the file.
    #[arg(long, global = true, env = "LITELINK_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Options for `serve`, which also runs when no subcommand is given.
    #[command(flatten)]
    pub serve: ServeArgs,
}

// Parsed once at start-up: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default).
    Serve(ServeArgs),
    /// Print SQLite's build facts and check a database; non-zero exit status
    /// when something is wrong.
    Doctor(DoctorArgs),
    /// Create, list and revoke API keys (works beside a running server).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Create, list, change and disable users (works beside a running
    /// server).
    #[command(subcommand)]
    Users(UsersCommand),
    /// Add, list, change and remove short domains (works beside a running
    /// server).
    #[command(subcommand)]
    Domains(DomainsCommand),
    /// Register, list, change and remove webhooks (works beside a running
    /// server).
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Write every link, and deleted codes as tombstones, as JSON lines or CSV.
    Export(ExportArgs),
    /// Load links written by `export`, keeping their codes (not while a
    /// server holds the database).
    Import(ImportArgs),
    /// Load-test a server that has the seed API (litelink or any other).
    Stress(StressArgs),
    /// Ask the server on this machine whether it is ready (`GET
    /// /health/ready` on 127.0.0.1 at the port of `--listen`, within 2 s):
    /// exit status 0 when it is, else 1. For a container's health check.
    Health(HealthArgs),
}

/// `litelink health`: where the server listens.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The server's `--listen` address: its port is asked on 127.0.0.1.
    #[arg(long, env = "LITELINK_LISTEN", default_value_t = litelink_service::Settings::default().listen)]
    pub listen: std::net::SocketAddr,
}

impl Cli {
    /// The command to run: `serve` when none was named.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Serve(self.serve))
    }
}

/// A value parser for the library's keyword enums (strum's `EnumString`
/// and `VariantNames`), listing the keywords in `--help`.
pub fn keyword<T>() -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = strum::ParseError> + strum::VariantNames + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(T::VARIANTS).try_map(|s| s.parse::<T>())
}

/// `--public-url`: an http or https URL with a host and no user info; a
/// `javascript:` or `file:` URL would be written into every `short_url`.
pub fn public_url(s: &str) -> Result<String, String> {
    let u = url::Url::parse(s).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be http or https, not '{}'",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("the URL may not hold a user name or password".into());
    }
    Ok(s.to_owned())
}

/// `on` or `off`, for boolean switches that name their default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == Self::On
    }
}

/// The word for a default that is a `bool`.
pub fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// Checks a `--NAME SECONDS` option given as a float.
pub fn seconds(name: &str, v: f64) -> Result<std::time::Duration, String> {
    if v.is_finite() && v >= 0.0 {
        Ok(std::time::Duration::from_secs_f64(v))
    } else {
        Err(format!("--{name} must be a non-negative number of seconds"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The switches that exist only for the lab are not the product's;
    /// the operator settings that sat beside them are.
    #[test]
    fn serve_offers_no_lab_switches() {
        let mut cli = Cli::command();
        let serve = cli.find_subcommand_mut("serve").expect("serve");
        let help = serve.render_long_help().to_string();
        for lab in [
            "--sqlite-memstatus",
            "--sqlite-connections",
            "--sqlite-read-on",
            "--sqlite-page-cache",
            "--group-commit",
            "--code-locality",
            "--hot-path",
        ] {
            assert!(!help.contains(lab), "serve offers {lab}");
        }
        for operator in ["--metrics", "--wal-preallocate-mib", "--durability"] {
            assert!(help.contains(operator), "serve lacks {operator}");
        }
    }
}
