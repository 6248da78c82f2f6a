//! `litelink keys`, `export` and `import`: managing a database beside (or,
//! for `import`, instead of) a running server.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use litelink_service::domain::Role;
use litelink_service::import::Source;
use litelink_service::transfer::Format;

use super::serve::StoreArgs;
use super::{OnOff, keyword};

#[derive(Debug, Clone, Subcommand)]
pub enum KeysCommand {
    /// Make a key and print it once; only its hash is stored. The key acts
    /// as its user, with that user's role.
    Create {
        /// A unique name for the key (who or what uses it).
        #[arg(long)]
        name: String,
        /// The user the key belongs to. Without it, a user of the key's
        /// name is made as well: an admin with `--admin`, else a member.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// The new user is an admin: it manages every link, user and
        /// domain.
        #[arg(long, conflicts_with_all = ["domain", "user"])]
        admin: bool,
        /// Limit the key (and a user made with it) to one domain (a host,
        /// or `default`): it creates, lists, edits and deletes links there
        /// only.
        #[arg(long, value_name = "HOST")]
        domain: Option<String>,
        /// The secret of the YOURLS API's signature tokens, as `serve`
        /// takes it: the key's token is printed on a line of its own.
        #[arg(long, env = "LITELINK_YOURLS_SECRET_FILE", value_name = "PATH")]
        yourls_secret_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every key: name, user, role, domain, created, last used, revoked.
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

#[derive(Debug, Clone, Subcommand)]
pub enum UsersCommand {
    /// Make a user and print a one-time password, to be changed at first
    /// sign-in.
    Create {
        /// 1 to 64 characters, unique regardless of case.
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = keyword::<Role>())]
        role: Role,
        #[arg(long)]
        email: Option<String>,
        /// Limit the user to one domain (a host, or `default`).
        #[arg(long, value_name = "HOST")]
        domain: Option<String>,
        /// `off`: local passwords are off on the server (as `serve
        /// --local-login off`), so the user gets none and signs in only
        /// through the identity provider.
        #[arg(long, env = "LITELINK_LOCAL_LOGIN", value_enum, default_value = "on")]
        local_login: OnOff,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every user: name, role, domain, email, disabled, suspended (by a
    /// sign-in with no role at the identity provider), created.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Give a user another role; a running server honours it within a
    /// second.
    SetRole {
        name: String,
        #[arg(value_parser = keyword::<Role>())]
        role: Role,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Give a user a new one-time password, and print it; their sessions
    /// end.
    ResetPassword {
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Disable a user: their keys and sessions stop within a second.
    Disable {
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
    /// With `--format csv`, write links with a password, rules or an
    /// `expired_url` without them (each is named) instead of refusing: CSV
    /// has no columns for them, and a re-import would make them public.
    #[arg(long)]
    pub lossy: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// What to read: a file of `litelink export`, or of the source
    /// `--from` names (YOURLS: a mysqldump, its yourls_url CSV with its
    /// yourls_log CSV, or `mysql://user:pass@host/db`). None with
    /// `--api-url`.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The shortener the links come from.
    #[arg(long, value_parser = keyword::<Source>(), default_value_t = Source::Litelink)]
    pub from: Source,
    /// The format of a `--from litelink` file (default: jsonl).
    #[arg(long, value_parser = keyword::<Format>())]
    pub format: Option<Format>,
    /// Give every imported link this user as its owner.
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// Read a running Bitly, Shlink or Kutt through its API instead of a
    /// file: Shlink's or Kutt's base URL, or Bitly's
    /// `https://api-ssl.bitly.com/v4/groups/GUID/bitlinks`.
    #[arg(long, value_name = "URL")]
    pub api_url: Option<String>,
    /// A file holding the API token (else `LITELINK_IMPORT_API_TOKEN`).
    /// It is sent in the source's own header, never printed or logged.
    #[arg(long, value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// CA certificates (PEM) to check an https API with, instead of the
    /// system's.
    #[arg(long, value_name = "FILE")]
    pub api_ca_file: Option<PathBuf>,
    /// YOURLS's table prefix.
    #[arg(long, default_value = "yourls_")]
    pub table_prefix: String,
    /// Import a Shlink link whose redirect rules litelink cannot express
    /// without those rules (each is named), instead of skipping the link.
    #[arg(long)]
    pub drop_unsupported_rules: bool,
    /// The host that served the source's default domain: its links land on
    /// litelink's default domain (Shlink's CSV names every link's host).
    #[arg(long, value_name = "HOST")]
    pub source_default_domain: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Add the domains the file names that this database lacks (without
    /// it, a link on an unknown domain is reported and skipped).
    #[arg(long)]
    pub create_domains: bool,
    /// What a line whose code exists with another target does: `skip` it
    /// (reported; exit 2) or `overwrite` the link. A code with the same
    /// target is unchanged either way, so a file imported twice adds
    /// nothing.
    #[arg(long, value_parser = keyword::<OnConflict>(), default_value_t = OnConflict::Skip)]
    pub on_conflict: OnConflict,
}

/// `import --on-conflict`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display, strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum OnConflict {
    Skip,
    Overwrite,
}

/// The targets a tool refuses, as the server does: what an import's links
/// and a domain's redirects are checked against.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Refuse targets on private, loopback and other special-use
    /// addresses, as `serve --refuse-private-targets` does.
    #[arg(long, env = "LITELINK_REFUSE_PRIVATE_TARGETS")]
    pub refuse_private_targets: bool,
    /// Refuse targets on the domains in this file, as `serve --deny-hosts`.
    #[arg(long, env = "LITELINK_DENY_HOSTS")]
    pub deny_hosts: Option<PathBuf>,
    /// Refuse targets on this service's public host, as `serve` does.
    #[arg(long, env = "LITELINK_PUBLIC_URL", value_parser = super::public_url)]
    pub public_url: Option<String>,
}

impl TargetArgs {
    pub fn policy(&self) -> anyhow::Result<litelink_service::domain::TargetPolicy> {
        Ok(litelink_service::domain::TargetPolicy::new(
            self.refuse_private_targets,
            self.deny_hosts.clone(),
        )?
        .with_own_hosts(self.public_url.as_deref(), None))
    }
}

/// Where a domain sends what it has no link for; each is a URL, or an
/// empty string for none (`set` changes only those given).
#[derive(Debug, Clone, Args)]
pub struct RedirectArgs {
    /// Where `GET /` on the domain goes (default: the page).
    #[arg(long, value_name = "URL")]
    pub root_redirect: Option<String>,
    /// Where an unknown or deleted code goes (default: 404).
    #[arg(long, value_name = "URL")]
    pub not_found_redirect: Option<String>,
    /// Where an expired link, or one out of visits, goes (default: 410).
    #[arg(long, value_name = "URL")]
    pub expired_redirect: Option<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum DomainsCommand {
    /// Add a short domain (links answer on it within a second).
    Add {
        /// The host name, e.g. go.example.com.
        host: String,
        #[command(flatten)]
        redirects: RedirectArgs,
        #[command(flatten)]
        targets: TargetArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every domain, the default one first.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Change a domain's redirects (`default` names the default domain).
    Set {
        host: String,
        #[command(flatten)]
        redirects: RedirectArgs,
        #[command(flatten)]
        targets: TargetArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a domain; one with links only with --force, which deletes
    /// them (their codes stay taken as tombstones).
    Remove {
        host: String,
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum WebhooksCommand {
    /// Register a webhook (a running server sends to it within a second);
    /// its signing secret is printed this once.
    Add {
        /// Where events are posted: https, unless --webhooks-allow-private.
        url: String,
        /// The events wanted, comma-separated: link.created, link.updated,
        /// link.deleted.
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        /// Only this domain's links (a host, or `default`).
        #[arg(long)]
        domain: Option<String>,
        /// Allow a private or loopback address, or plain http, as `serve
        /// --webhooks-allow-private` does.
        #[arg(long, env = "LITELINK_WEBHOOKS_ALLOW_PRIVATE")]
        webhooks_allow_private: bool,
        #[command(flatten)]
        targets: TargetArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every webhook, oldest first.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a webhook, with its pending events and history.
    Remove {
        id: i64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Send a disabled webhook's events again.
    Enable {
        id: i64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Stop sending a webhook's events (they wait, and new ones are not
    /// kept).
    Disable {
        id: i64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// A new signing secret, printed this once; for 24 hours deliveries
    /// carry a signature by the old one too.
    Rotate {
        id: i64,
        #[command(flatten)]
        store: StoreArgs,
    },
}
