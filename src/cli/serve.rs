//! `litelink serve` and `litelink doctor`: options grouped as the help
//! shows them, turned into [`Settings`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use litelink_service::Settings;
use litelink_service::cache::CacheMode;
use litelink_service::domain::code::{MAX_GENERATED_LEN, MIN_GENERATED_LEN};
use litelink_service::domain::{Host, Role};
use litelink_service::domains::UnknownHost;
use litelink_service::http::limit::TrustProxy;
use litelink_service::http::{CreateAuth, RedirectStatus, ReferrerPolicy};
use litelink_service::observability::logging::LogFormat;
use litelink_service::oidc::{RoleMapping, Secret};
use litelink_service::store::postgres::PostgresSettings;
use litelink_service::store::sqlite::Durability;
use litelink_service::store::{BackendChoice, StoreSettings};

use super::{OnOff, keyword, on_off};

/// Every default shown below comes from here.
fn d() -> Settings {
    Settings::default()
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub visits: VisitArgs,
    #[command(flatten)]
    pub domains: DomainArgs,
    #[command(flatten)]
    pub abuse: AbuseArgs,
    #[command(flatten)]
    pub accounts: AccountArgs,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    /// Print the effective configuration as TOML (passwords in URLs as
    /// `***`) and exit; `--config` reads it back.
    #[arg(long)]
    pub print_config: bool,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Accounts")]
pub struct AccountArgs {
    /// Seconds a signed-in session may go unused before it ends.
    #[arg(long, env = "LITELINK_SESSION_IDLE", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = d().accounts.session_idle.as_secs())]
    pub session_idle: u64,

    /// Seconds after which a session ends, used or not.
    #[arg(long, env = "LITELINK_SESSION_MAX", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = d().accounts.session_max.as_secs())]
    pub session_max: u64,

    /// Whether people may sign in with a local password (`off` where an
    /// identity provider must be the only way in). Signing in needs
    /// --public-url.
    #[arg(long, env = "LITELINK_LOCAL_LOGIN", value_enum,
          default_value = on_off(d().accounts.local_login))]
    pub local_login: OnOff,

    /// A file holding the secret of the YOURLS API's signature tokens (at
    /// least 16 bytes; `keys create` takes it too, to print a key's
    /// token). Never stored in the database. Without it, `signature=` is
    /// off and /yourls-api.php takes a username and password only.
    #[arg(long, env = "LITELINK_YOURLS_SECRET_FILE", value_name = "PATH")]
    pub yourls_secret_file: Option<PathBuf>,

    /// Seconds a timed YOURLS signature's timestamp may be from now
    /// (YOURLS's own is 43200, for clients that sign once).
    #[arg(long, env = "LITELINK_YOURLS_SIGNATURE_WINDOW", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = d().accounts.yourls_signature_window.as_secs())]
    pub yourls_signature_window: u64,

    /// The OpenID Connect provider people sign in through (its issuer
    /// URL; discovery finds the rest). The redirect URI to register there
    /// is <public url>/auth/callback.
    #[arg(long, env = "LITELINK_OIDC_ISSUER", value_name = "URL")]
    pub oidc_issuer: Option<String>,

    /// This server's client id at the provider.
    #[arg(long, env = "LITELINK_OIDC_CLIENT_ID", value_name = "ID")]
    pub oidc_client_id: Option<String>,

    /// The client secret (none: a public client, PKCE only). Prefer
    /// --oidc-client-secret-file or the environment to the command line.
    #[arg(
        long,
        env = "LITELINK_OIDC_CLIENT_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub oidc_client_secret: Option<String>,

    /// A file whose first line is the client secret.
    #[arg(long, env = "LITELINK_OIDC_CLIENT_SECRET_FILE", value_name = "PATH")]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Scopes to ask for, comma-separated (`openid` is always asked).
    #[arg(long, env = "LITELINK_OIDC_SCOPES", value_name = "LIST", value_delimiter = ',',
          default_value = d().accounts.oidc.scopes.join(","))]
    pub oidc_scopes: Vec<String>,

    /// The claim that gives a person's role (`groups`, `roles`, or a
    /// dotted path such as `realm_access.roles`; `email` counts only when
    /// verified). Read from the ID token, else from userinfo.
    #[arg(long, env = "LITELINK_OIDC_ROLE_CLAIM", value_name = "CLAIM")]
    pub oidc_role_claim: Option<String>,

    /// Values of the role claim that make an admin, comma-separated.
    #[arg(
        long,
        env = "LITELINK_OIDC_ADMIN_VALUES",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub oidc_admin_values: Vec<String>,

    /// Values of the role claim that make a member, comma-separated.
    #[arg(
        long,
        env = "LITELINK_OIDC_MEMBER_VALUES",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub oidc_member_values: Vec<String>,

    /// Values of the role claim that make a viewer, comma-separated.
    #[arg(
        long,
        env = "LITELINK_OIDC_VIEWER_VALUES",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub oidc_viewer_values: Vec<String>,

    /// The role of a person whose claims name no role (none: refused).
    #[arg(long, env = "LITELINK_OIDC_DEFAULT_ROLE", value_parser = keyword::<Role>())]
    pub oidc_default_role: Option<Role>,

    /// CA certificates (PEM) the provider's certificate must chain to, in
    /// place of the system's.
    #[arg(long, env = "LITELINK_OIDC_CA_FILE", value_name = "PATH")]
    pub oidc_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Domains")]
pub struct DomainArgs {
    /// The default domain's host: links created without a domain, and
    /// those from before domains, are on it (default: the host of
    /// --public-url; without either it answers on every host not added).
    #[arg(long, env = "LITELINK_DEFAULT_DOMAIN", value_name = "HOST",
          value_parser = |s: &str| Host::parse(s).map_err(|e| e.to_string()))]
    pub default_domain: Option<Host>,

    /// What `/`, `/{code}` and the QR routes answer on a host that is no
    /// domain's: `default` (served as the default domain) or `reject`
    /// (404; needs the default domain's host).
    #[arg(long, env = "LITELINK_UNKNOWN_HOST", value_parser = keyword::<UnknownHost>(),
          default_value_t = d().domains.unknown_host)]
    pub unknown_host: UnknownHost,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Webhooks and event streams")]
pub struct WebhookArgs {
    /// Let webhooks post to private, loopback and link-local addresses, and
    /// over plain http. Off: an admin key could otherwise reach the
    /// internal network through a webhook.
    #[arg(long, env = "LITELINK_WEBHOOKS_ALLOW_PRIVATE")]
    pub webhooks_allow_private: bool,

    /// Seconds between a webhook's attempts at one event, comma-separated;
    /// once they are used up the event is failed and the webhook disabled.
    #[arg(long, env = "LITELINK_WEBHOOKS_RETRY_DELAYS", value_name = "SECONDS,...",
          value_delimiter = ',', value_parser = retry_delay,
          default_value = d().webhooks.retry_delays.iter()
              .map(|d| d.as_secs().to_string()).collect::<Vec<_>>().join(","))]
    pub webhooks_retry_delays: Vec<Duration>,

    /// The most events the outbox keeps while receivers are away; past
    /// it, the oldest link.visited events are dropped (and counted in
    /// /metrics), never a change event.
    #[arg(long, env = "LITELINK_WEBHOOKS_MAX_PENDING", value_name = "EVENTS",
          value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = d().webhooks.max_pending)]
    pub webhooks_max_pending: u64,

    /// RabbitMQ to publish every event to as well (amqp://user:pass@host/vhost),
    /// with publisher confirms: an event leaves the outbox once confirmed.
    #[arg(long, env = "LITELINK_EVENTS_AMQP_URL", value_name = "URL")]
    pub events_amqp_url: Option<String>,

    /// The durable topic exchange events go to, with their type as the
    /// routing key (made if missing).
    #[arg(long, env = "LITELINK_EVENTS_AMQP_EXCHANGE", value_name = "NAME",
          default_value_t = d().webhooks.streams.amqp_exchange)]
    pub events_amqp_exchange: String,

    /// NATS with JetStream to publish every event to as well
    /// (nats://host:4222), on subjects litelink.<type>, acknowledged.
    #[arg(long, env = "LITELINK_EVENTS_NATS_URL", value_name = "URL")]
    pub events_nats_url: Option<String>,

    /// The JetStream stream events go into (made if missing, taking the
    /// subjects litelink.>).
    #[arg(long, env = "LITELINK_EVENTS_NATS_STREAM", value_name = "NAME",
          default_value_t = d().webhooks.streams.nats_stream)]
    pub events_nats_stream: String,
}

/// One wait of `--webhooks-retry-delays`: whole seconds, up to a day.
fn retry_delay(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        Ok(s) if (1..=86_400).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(format!(
            "'{v}': each delay is whole seconds from 1 to 86400"
        )),
    }
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HTTP")]
pub struct AbuseArgs {
    /// Refuse targets on loopback, private, link-local and unspecified
    /// addresses (any IPv4 form) and `localhost`, answered 400.
    #[arg(long, env = "LITELINK_REFUSE_PRIVATE_TARGETS")]
    pub refuse_private_targets: bool,

    /// File of refused target domains, one a line (`#` comments;
    /// subdomains included); read again on SIGHUP. Checked on every
    /// redirect too: a link to a host added later answers 410.
    #[arg(long, env = "LITELINK_DENY_HOSTS")]
    pub deny_hosts: Option<PathBuf>,

    /// Creates without a key per minute from one client address (IPv6:
    /// per /64); 0: no limit. Beyond it: 429 with Retry-After.
    #[arg(long, env = "LITELINK_CREATE_RATE",
          default_value_t = d().http.rate_limits.anonymous_per_minute)]
    pub create_rate: u32,

    /// How many creates without a key one address may make at once.
    #[arg(long, env = "LITELINK_CREATE_BURST",
          default_value_t = d().http.rate_limits.anonymous_burst)]
    pub create_burst: u32,

    /// Creates per minute and API key; 0: no limit.
    #[arg(long, env = "LITELINK_KEY_CREATE_RATE",
          default_value_t = d().http.rate_limits.key_per_minute)]
    pub key_create_rate: u32,

    /// How many creates one key may make at once.
    #[arg(long, env = "LITELINK_KEY_CREATE_BURST",
          default_value_t = d().http.rate_limits.key_burst)]
    pub key_create_burst: u32,

    /// Limit clients on loopback too (by default they are not, so that
    /// local tools and benchmarks run unlimited).
    #[arg(long, env = "LITELINK_RATE_LIMIT_LOOPBACK")]
    pub rate_limit_loopback: bool,

    /// Which proxies may name the client in X-Forwarded-For or Forwarded:
    /// `on` (the direct peer, one proxy in front), or a comma-separated list
    /// of addresses and CIDR ranges (the client is the nearest forwarded
    /// address not on it; headers from other peers are ignored). A
    /// forwarded address is never exempt from the limits.
    #[arg(long, env = "LITELINK_TRUST_PROXY", value_name = "on|off|LIST",
          num_args = 0..=1, default_missing_value = "on",
          default_value_t = TrustProxy::Off)]
    pub trust_proxy: TrustProxy,

    /// Serve `/stats` to anyone even once API keys exist (without it, it
    /// then needs an admin key).
    #[arg(long, env = "LITELINK_STATS_PUBLIC")]
    pub stats_public: bool,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HTTP")]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "LITELINK_LISTEN", default_value_t = d().listen)]
    pub listen: SocketAddr,

    /// Public base URL for the `short_url` field, e.g. https://s.example.com
    /// (default: http:// and the request's Host).
    #[arg(long, env = "LITELINK_PUBLIC_URL", value_parser = super::public_url)]
    pub public_url: Option<String>,

    /// Status of `GET /{code}`.
    #[arg(long, env = "LITELINK_REDIRECT_STATUS", value_parser = keyword::<RedirectStatus>(),
          default_value_t = d().http.redirect_status)]
    pub redirect_status: RedirectStatus,

    /// Who may create links: `open` (anyone; a key sent must be valid) or
    /// `key` (only with a valid API key).
    #[arg(long, env = "LITELINK_CREATE_AUTH", value_parser = keyword::<CreateAuth>(),
          default_value_t = d().http.create_auth)]
    pub create_auth: CreateAuth,

    /// Largest request body accepted, in bytes (413 above it).
    #[arg(long, env = "LITELINK_MAX_BODY_BYTES", default_value_t = d().http.max_body_bytes)]
    pub max_body_bytes: usize,

    /// Seconds a request may take before it is answered 503.
    #[arg(long, env = "LITELINK_REQUEST_TIMEOUT",
          default_value_t = d().http.request_timeout.as_secs())]
    pub request_timeout: u64,

    /// Serve `/metrics` on this address only (without a key; keep it off
    /// the public network). Without it, `/metrics` is on the main port
    /// under the `/stats` rule.
    #[arg(long, env = "LITELINK_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Record Prometheus metrics (`off`: `/metrics` answers 404).
    #[arg(long, env = "LITELINK_METRICS", value_enum,
          default_value = on_off(d().http.metrics))]
    pub metrics: OnOff,

    /// Log lines on stderr: `text`, or `json` (one object per line, for
    /// log shippers).
    #[arg(long, env = "LITELINK_LOG_FORMAT", value_parser = keyword::<LogFormat>(),
          default_value_t = LogFormat::default(), help_heading = "Logging")]
    pub log_format: LogFormat,

    /// Seconds a client may take to send a request's headers; the
    /// connection is closed after it.
    #[arg(long, env = "LITELINK_HEADER_READ_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=3600),
          default_value_t = d().http.header_read_timeout.as_secs())]
    pub header_read_timeout: u64,

    /// Seconds a keep-alive connection may stay without a request.
    #[arg(long, env = "LITELINK_IDLE_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(1..=86_400),
          default_value_t = d().http.idle_timeout.as_secs())]
    pub idle_timeout: u64,

    /// Most connections open at once; more wait in the kernel's backlog
    /// (default: the open-file limit, raised to its hard maximum at
    /// start, less 256, at most 100,000).
    #[arg(long, env = "LITELINK_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_connections: Option<u64>,

    /// Largest request line plus headers, in bytes (431 above it).
    #[arg(long, env = "LITELINK_MAX_HEADER_BYTES",
          value_parser = clap::value_parser!(u64).range(1024..=1_048_576),
          default_value_t = d().http.max_header_bytes as u64)]
    pub max_header_bytes: u64,

    /// On SIGTERM or SIGINT, seconds requests in flight get to finish
    /// (idle and half-read connections are closed at once).
    #[arg(long, env = "LITELINK_SHUTDOWN_TIMEOUT",
          value_parser = clap::value_parser!(u64).range(0..=3600),
          default_value_t = d().http.shutdown_timeout.as_secs())]
    pub shutdown_timeout: u64,

    /// `Referrer-Policy` sent with redirects, e.g. `no-referrer` to keep
    /// where a click came from away from the target (default: none sent).
    #[arg(long, env = "LITELINK_REFERRER_POLICY", value_parser = keyword::<ReferrerPolicy>())]
    pub referrer_policy: Option<ReferrerPolicy>,
}

/// The database file, shared by `serve` and `doctor`.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// SQLite database file; created with its schema on first start.
    #[arg(long, env = "LITELINK_DB", default_value_os_t = d().store.db)]
    pub db: PathBuf,

    /// Keep links in this PostgreSQL database instead of the SQLite file:
    /// `postgres://user[:password]@host[:port]/database`; the schema is
    /// made (or migrated) at start-up.
    #[arg(long, env = "LITELINK_STORE", value_parser = postgres_url)]
    pub store: Option<String>,

    /// Connections to PostgreSQL kept by this process.
    #[arg(long, env = "LITELINK_POSTGRES_POOL_SIZE",
          default_value_t = PostgresSettings::default().pool_size as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub postgres_pool_size: u32,
}

/// A `--store` value: only PostgreSQL URLs (SQLite is `--db`).
fn postgres_url(s: &str) -> Result<String, String> {
    PostgresSettings::check_url(s).map(|()| s.to_owned())
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Store")]
pub struct StorageArgs {
    #[command(flatten)]
    pub db: DbArgs,

    /// What a 201 promises: `full` survives power loss, `normal` a process
    /// crash, `off` nothing (benchmarks only).
    #[arg(long, env = "LITELINK_DURABILITY", value_parser = keyword::<Durability>(),
          default_value_t = d().store.sqlite.durability)]
    pub durability: Durability,

    /// Most creates in one group commit (1: one commit per create).
    #[arg(long, env = "LITELINK_WRITE_BATCH_MAX",
          default_value_t = d().store.sqlite.batch_max as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub write_batch_max: u32,

    /// Creates that may wait for the writer; beyond it `POST /link` answers
    /// 503 with Retry-After.
    #[arg(long, env = "LITELINK_WRITE_QUEUE",
          default_value_t = d().store.sqlite.write_queue as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub write_queue: u32,

    /// Milliseconds SQLite waits for a lock held by another process.
    #[arg(long, env = "LITELINK_SQLITE_BUSY_TIMEOUT_MS",
          default_value_t = d().store.sqlite.busy_timeout.as_millis() as u64)]
    pub sqlite_busy_timeout_ms: u64,

    /// MiB of the database file mapped into memory, so that reads are
    /// memory reads rather than `pread` calls (0: off; SQLite caps it just
    /// under 2048).
    #[arg(long, env = "LITELINK_SQLITE_MMAP_MIB",
          default_value_t = d().store.sqlite.mmap_mib,
          value_parser = clap::value_parser!(u64).range(0..=2048))]
    pub sqlite_mmap_mib: u64,

    /// Link slots: every generated link's lookup fields (a target of up to
    /// 72 bytes) in a slot by row id, in an unnamed file beside the
    /// database, built from the table at start (lookups read SQLite until
    /// it is built). A lookup then reads one slot instead of searching the
    /// table: what keeps it as fast at ten million links as at ten
    /// thousand. 128 bytes a link on disk.
    #[arg(long, env = "LITELINK_SQLITE_SLOTS", value_enum,
          default_value = on_off(d().store.sqlite.slots))]
    pub sqlite_slots: OnOff,

    /// A streaming replica of the `--store` database: lookups and listings
    /// read it, except a code changed (here, or by an instance that said
    /// so over `--invalidations-url`) that it has not replayed yet, which
    /// is read from the primary.
    #[arg(long, env = "LITELINK_POSTGRES_READ_URL", value_parser = postgres_url,
          requires = "store")]
    pub postgres_read_url: Option<String>,

    /// At full durability, extend the WAL with zeros to this many MiB at
    /// start-up, so that each sync overwrites allocated blocks (0: off).
    #[arg(long, env = "LITELINK_WAL_PREALLOCATE_MIB",
          default_value_t = (d().store.sqlite.wal_preallocate >> 20) as u32,
          value_parser = clap::value_parser!(u32).range(0..=65_536))]
    pub wal_preallocate_mib: u32,

    /// Length of generated codes (characters of [A-Za-z0-9]).
    #[arg(long, env = "LITELINK_CODE_LENGTH", default_value_t = d().codes.length as u8,
          help_heading = "Codes",
          value_parser = clap::value_parser!(u8).range(MIN_GENERATED_LEN as i64..=MAX_GENERATED_LEN as i64))]
    pub code_length: u8,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Cache")]
pub struct CacheArgs {
    /// Cache in front of SQLite.
    #[arg(long, env = "LITELINK_CACHE", value_parser = keyword::<CacheMode>(),
          default_value_t = d().cache.mode)]
    pub cache: CacheMode,

    /// Entries the in-process cache holds.
    #[arg(long, env = "LITELINK_CACHE_CAPACITY", default_value_t = d().cache.capacity)]
    pub cache_capacity: usize,

    /// Milliseconds an unknown code is remembered as unknown (0: never).
    #[arg(long, env = "LITELINK_CACHE_NEGATIVE_TTL_MS",
          default_value_t = d().cache.negative_ttl.as_millis() as u64)]
    pub cache_negative_ttl_ms: u64,

    /// Valkey (or Redis) server for `--cache valkey|tiered`; several
    /// `redis://` URLs separated by commas are the nodes of a Valkey
    /// Cluster.
    #[arg(long, env = "LITELINK_VALKEY_URL", default_value_t = d().cache.valkey.url)]
    pub valkey_url: String,

    /// `--valkey-url` names a node of a Valkey Cluster (the others are
    /// found from it); implied when it names several.
    #[arg(long, env = "LITELINK_VALKEY_CLUSTER")]
    pub valkey_cluster: bool,

    /// Prefix of every key litelink writes to Valkey (and of the
    /// invalidation channel's name).
    #[arg(long, env = "LITELINK_VALKEY_PREFIX", default_value_t = d().cache.valkey.prefix)]
    pub valkey_prefix: String,

    /// Valkey (or Redis) server on which instances that share a store tell
    /// each other what changed, so that in-process caches forget it
    /// (docs/deploy.md, "Two stores"); unset: this instance is alone on its store.
    #[arg(
        long,
        env = "LITELINK_INVALIDATIONS_URL",
        help_heading = "Invalidations"
    )]
    pub invalidations_url: Option<String>,

    /// Milliseconds an in-process cache entry is served after it was
    /// cached while the invalidation channel is down, so that another
    /// instance's change is seen within this (0: the in-process cache is
    /// off meanwhile). Back up, the cache starts empty. On a shared store
    /// without --invalidations-url, entries always live at most this long.
    #[arg(long, env = "LITELINK_INVALIDATIONS_DOWN_TTL_MS",
          default_value_t = d().cache.unheard_ttl.as_millis() as u64)]
    pub invalidations_down_ttl_ms: u64,

    /// Seconds a link stays in Valkey (0: until Valkey evicts it).
    #[arg(long, env = "LITELINK_VALKEY_TTL",
          default_value_t = d().cache.valkey.ttl.map_or(0, |t| t.as_secs()))]
    pub valkey_ttl: u64,

    /// Milliseconds each Valkey call may take before the lookup falls
    /// through to SQLite.
    #[arg(long, env = "LITELINK_VALKEY_TIMEOUT_MS",
          default_value_t = d().cache.valkey.timeout.as_millis() as u64)]
    pub valkey_timeout_ms: u64,

    /// CA certificates (PEM) that verify a `rediss://` server, the cache's
    /// and the invalidation channel's, instead of the system's CAs.
    #[arg(long, env = "LITELINK_VALKEY_CA_FILE", value_name = "PATH")]
    pub valkey_ca_file: Option<std::path::PathBuf>,

    /// A client certificate (PEM) for a `rediss://` server that asks for
    /// one; with --valkey-key-file.
    #[arg(
        long,
        env = "LITELINK_VALKEY_CERT_FILE",
        value_name = "PATH",
        requires = "valkey_key_file"
    )]
    pub valkey_cert_file: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM, mode 0600).
    #[arg(
        long,
        env = "LITELINK_VALKEY_KEY_FILE",
        value_name = "PATH",
        requires = "valkey_cert_file"
    )]
    pub valkey_key_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Visits")]
pub struct VisitArgs {
    /// Count every redirect (`GET /{code}`) per link, hour, referrer and
    /// user-agent class. `off`: only links with max_visits are counted.
    #[arg(long, env = "LITELINK_VISITS", value_enum,
          default_value = on_off(d().visits.counting))]
    pub visits: OnOff,

    /// Milliseconds between writes of the counts kept in memory: at most
    /// this much counting is lost to a crash (none to a graceful stop).
    #[arg(long, env = "LITELINK_VISITS_FLUSH_MS",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000),
          default_value_t = d().visits.flush_interval.as_millis() as u64)]
    pub visits_flush_ms: u64,

    /// A header in which a proxy or CDN names the visitor's country
    /// (ISO code), such as `CF-IPCountry`. Read only from the proxies
    /// `--trust-proxy` trusts; ahead of the GeoIP database.
    #[arg(long, env = "LITELINK_COUNTRY_HEADER", value_name = "NAME")]
    pub country_header: Option<String>,

    /// A MaxMind-format database (GeoLite2, DB-IP Lite and the like) to
    /// find a visitor's country and city in; read again when the file
    /// changes and on SIGHUP. Without it, the country table built into
    /// the binary (the registries' allocations) is used.
    #[arg(long, env = "LITELINK_GEOIP_DB", value_name = "PATH")]
    pub geoip_db: Option<std::path::PathBuf>,
}

impl ServeArgs {
    pub fn settings(&self) -> Settings {
        let Self {
            server,
            storage,
            cache,
            visits,
            abuse,
            domains,
            accounts,
            webhooks,
            print_config: _,
        } = self;
        let mut s = Settings {
            listen: server.listen,
            ..Settings::default()
        };
        s.http.redirect_status = server.redirect_status;
        s.http.create_auth = server.create_auth;
        s.http.public_url = server.public_url.clone();
        s.http.max_body_bytes = server.max_body_bytes;
        s.http.request_timeout = Duration::from_secs(server.request_timeout);
        s.http.referrer_policy = server.referrer_policy;
        s.http.header_read_timeout = Duration::from_secs(server.header_read_timeout);
        s.http.idle_timeout = Duration::from_secs(server.idle_timeout);
        s.http.max_connections = server.max_connections.map(|n| n as usize);
        s.http.max_header_bytes = server.max_header_bytes as usize;
        s.http.shutdown_timeout = Duration::from_secs(server.shutdown_timeout);
        s.http.metrics_listen = server.metrics_listen;
        s.http.metrics = server.metrics.is_on();
        s.http.refuse_private_targets = abuse.refuse_private_targets;
        s.http.deny_hosts = abuse.deny_hosts.clone();
        s.http.stats_public = abuse.stats_public;
        let limits = &mut s.http.rate_limits;
        limits.anonymous_per_minute = abuse.create_rate;
        limits.anonymous_burst = abuse.create_burst;
        limits.key_per_minute = abuse.key_create_rate;
        limits.key_burst = abuse.key_create_burst;
        limits.loopback = abuse.rate_limit_loopback;
        limits.trust_proxy = abuse.trust_proxy.clone();

        s.codes.length = usize::from(storage.code_length);
        s.store = store_settings(&storage.db);
        if let BackendChoice::Postgres(pg) = &mut s.store.backend {
            pg.read_url = storage.postgres_read_url.clone();
        }
        let sqlite = &mut s.store.sqlite;
        sqlite.durability = storage.durability;
        sqlite.batch_max = storage.write_batch_max as usize;
        sqlite.write_queue = storage.write_queue as usize;
        sqlite.busy_timeout = Duration::from_millis(storage.sqlite_busy_timeout_ms);
        sqlite.mmap_mib = storage.sqlite_mmap_mib;
        sqlite.slots = storage.sqlite_slots.is_on();
        sqlite.wal_preallocate = u64::from(storage.wal_preallocate_mib) << 20;

        s.cache.mode = cache.cache;
        s.cache.capacity = cache.cache_capacity;
        s.cache.negative_ttl = Duration::from_millis(cache.cache_negative_ttl_ms);
        s.cache.valkey.url = cache.valkey_url.clone();
        s.cache.valkey.cluster = cache.valkey_cluster;
        s.cache.valkey.prefix = cache.valkey_prefix.clone();
        s.invalidations.url = cache.invalidations_url.clone();
        s.cache.unheard_ttl = Duration::from_millis(cache.invalidations_down_ttl_ms);
        s.cache.valkey.ttl = (cache.valkey_ttl > 0).then(|| Duration::from_secs(cache.valkey_ttl));
        s.cache.valkey.timeout = Duration::from_millis(cache.valkey_timeout_ms.max(1));
        s.cache.valkey.tls.ca_file = cache.valkey_ca_file.clone();
        s.cache.valkey.tls.cert_file = cache.valkey_cert_file.clone();
        s.cache.valkey.tls.key_file = cache.valkey_key_file.clone();

        s.domains.default_host = domains.default_domain.clone();
        s.domains.unknown_host = domains.unknown_host;
        s.webhooks.allow_private = webhooks.webhooks_allow_private;
        s.webhooks.retry_delays = webhooks.webhooks_retry_delays.clone();
        s.webhooks.max_pending = webhooks.webhooks_max_pending;
        let streams = &mut s.webhooks.streams;
        streams.amqp_url = webhooks.events_amqp_url.clone();
        streams.amqp_exchange = webhooks.events_amqp_exchange.clone();
        streams.nats_url = webhooks.events_nats_url.clone();
        streams.nats_stream = webhooks.events_nats_stream.clone();
        s.accounts.session_idle = Duration::from_secs(accounts.session_idle);
        s.accounts.session_max = Duration::from_secs(accounts.session_max);
        s.accounts.local_login = accounts.local_login.is_on();
        s.accounts.yourls_secret_file = accounts.yourls_secret_file.clone();
        s.accounts.yourls_signature_window = Duration::from_secs(accounts.yourls_signature_window);
        let oidc = &mut s.accounts.oidc;
        let list = |values: &[String]| -> Vec<String> {
            values
                .iter()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect()
        };
        oidc.issuer = accounts.oidc_issuer.clone();
        oidc.client_id = accounts.oidc_client_id.clone();
        oidc.client_secret = accounts.oidc_client_secret.clone().map(Secret);
        oidc.client_secret_file = accounts.oidc_client_secret_file.clone();
        oidc.scopes = list(&accounts.oidc_scopes);
        oidc.roles = RoleMapping {
            claim: accounts.oidc_role_claim.clone(),
            admin: list(&accounts.oidc_admin_values),
            member: list(&accounts.oidc_member_values),
            viewer: list(&accounts.oidc_viewer_values),
            default: accounts.oidc_default_role,
        };
        oidc.ca_file = accounts.oidc_ca_file.clone();

        s.visits.counting = visits.visits.is_on();
        s.visits.flush_interval = Duration::from_millis(visits.visits_flush_ms);
        s.visits.geo.country_header = visits.country_header.clone();
        s.visits.geo.db = visits.geoip_db.clone();
        s.derive();
        s
    }
}

fn store_settings(db: &DbArgs) -> StoreSettings {
    let mut store = StoreSettings {
        db: db.db.clone(),
        ..StoreSettings::default()
    };
    if let Some(url) = &db.store {
        store.backend = BackendChoice::Postgres(PostgresSettings {
            url: url.clone(),
            pool_size: db.postgres_pool_size as usize,
            ..PostgresSettings::default()
        });
    }
    store
}

/// The store options of the commands that work on a database without
/// serving it: `doctor`, `keys`, `export`, `import`.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    #[command(flatten)]
    pub db: DbArgs,
}

/// `litelink doctor`: the store options and how thorough to be.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub store: StoreArgs,

    /// Run SQLite's full `integrity_check` (reads every page and index
    /// entry) instead of the faster `quick_check`.
    #[arg(long)]
    pub full: bool,
}

impl StoreArgs {
    pub fn settings(&self) -> StoreSettings {
        store_settings(&self.db)
    }
}
