//! `litelink keys`, `export` and `import`: managing a database beside (or,
//! for `import`, instead of) a running server.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use litelink_service::transfer::Format;

use super::keyword;
use super::serve::StoreArgs;

#[derive(Debug, Clone, Subcommand)]
pub enum KeysCommand {
    /// Make a key and print it once; only its hash is stored.
    Create {
        /// A unique name for the key (who or what uses it).
        #[arg(long)]
        name: String,
        /// The key manages every link, not only its own.
        #[arg(long)]
        admin: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every key: name, admin, created, last used, revoked.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a key by name: it stops working within a second.
    Revoke {
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[arg(long, value_parser = keyword::<Format>(), default_value_t = Format::Jsonl)]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// A file written by `litelink export`.
    pub file: PathBuf,
    #[arg(long, value_parser = keyword::<Format>(), default_value_t = Format::Jsonl)]
    pub format: Format,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Refuse links to private, loopback and other special-use addresses,
    /// as `serve --refuse-private-targets` does.
    #[arg(long, env = "LITELINK_REFUSE_PRIVATE_TARGETS")]
    pub refuse_private_targets: bool,
    /// Refuse links to the domains in this file, as `serve --deny-hosts`.
    #[arg(long, env = "LITELINK_DENY_HOSTS")]
    pub deny_hosts: Option<PathBuf>,
    /// Refuse links to this service's public host, as `serve` does.
    #[arg(long, env = "LITELINK_PUBLIC_URL")]
    pub public_url: Option<String>,
}
