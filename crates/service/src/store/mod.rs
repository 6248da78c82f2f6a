//! Where links live. The [`LinkStore`] trait is what the rest of the service
//! sees; `sqlite/` is the embedded default, `postgres/` the shared one.
//! [`backend`] is the only code that names the backends: a new one is a
//! folder here (a [`Backend`] and a [`LinkStore`]) and one arm there.

/// `a + b` in SQL, stopping at the largest `BIGINT` instead of failing
/// (PostgreSQL) or turning to a float (SQLite): a count imported near the
/// limit must not stop every visit flush.
macro_rules! saturating_add {
    ($a:literal, $b:literal) => {
        concat!(
            "CASE WHEN ",
            $a,
            " > 9223372036854775807 - ",
            $b,
            " THEN 9223372036854775807 ELSE ",
            $a,
            " + ",
            $b,
            " END"
        )
    };
}

pub mod outbox;
pub mod postgres;
pub(crate) mod queue;
pub mod sqlite;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use crate::domain::rules::Rule;
use crate::domain::{
    CodeGenerator, Domain, DomainId, DomainRedirects, Host, KeyId, Labels, Link, LinkKey,
    LinkRules, Owner, PasswordHash, Resolved, Role, ShortCode, TargetUrl, Timestamp, UserId,
    VisitCounts, extra_of,
};

/// What a store is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `litelink serve`: the one server of its database (a SQLite file is
    /// locked for as long as the store lives).
    Serve,
    /// A tool beside a running server (`keys`, `export`): no lock, nothing
    /// built for lookups.
    Tool,
    /// `import`: like a tool, but alone on a SQLite file (it takes the
    /// lock).
    Import,
}

/// A kind of store, configured: what opens it and what checks it.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Opens (making or migrating its schema) the store.
    async fn open(
        &self,
        codes: CodeGenerator,
        purpose: Purpose,
    ) -> anyhow::Result<Arc<dyn LinkStore>>;

    /// `litelink doctor`: prints a report, and says whether all is well.
    fn doctor(&self, full: bool) -> anyhow::Result<bool>;
}

/// The backend `settings` name: the only code that knows which there are.
pub fn backend(settings: &StoreSettings) -> Box<dyn Backend> {
    match &settings.backend {
        BackendChoice::Sqlite => Box::new(sqlite::Backend::new(
            settings.db.clone(),
            settings.sqlite.clone(),
        )),
        BackendChoice::Postgres(pg) => Box::new(postgres::Backend::new(pg.clone())),
    }
}

/// Which backend holds the links; a new backend is a folder beside
/// `sqlite/` and `postgres/`, an arm here and one in [`backend`].
#[derive(Debug, Clone, Default)]
pub enum BackendChoice {
    /// The SQLite file `StoreSettings::db` (the default).
    #[default]
    Sqlite,
    /// A PostgreSQL database (`--store postgres://...`).
    Postgres(postgres::PostgresSettings),
}

/// Opens the store `settings` name, for `purpose`.
pub(crate) async fn open(
    settings: &StoreSettings,
    codes: CodeGenerator,
    purpose: Purpose,
) -> anyhow::Result<Arc<dyn LinkStore>> {
    backend(&settings.for_purpose(purpose))
        .open(codes, purpose)
        .await
}

/// The writer's page cache during an import: enough for the index of ten
/// million named codes (212 MiB), so that inserts at random places of it
/// read no page from the file, and a transaction's dirty pages stay in
/// memory until its commit.
const IMPORT_CACHE_MIB: u32 = 512;

impl StoreSettings {
    /// These settings as `purpose` runs them: an import gives SQLite's
    /// writer a large page cache.
    pub(crate) fn for_purpose(&self, purpose: Purpose) -> StoreSettings {
        let mut settings = self.clone();
        if purpose == Purpose::Import {
            settings.sqlite.writer_cache_mib = IMPORT_CACHE_MIB;
        }
        settings
    }
}

/// Where and how links are stored.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// The SQLite database file; created with its schema on first start.
    pub db: PathBuf,
    pub sqlite: sqlite::SqliteSettings,
    /// Which backend holds the links.
    pub backend: BackendChoice,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            db: PathBuf::from("litelink.db"),
            sqlite: sqlite::SqliteSettings::default(),
            backend: BackendChoice::Sqlite,
        }
    }
}

/// What a store reports: its own facts for `/stats` (at the top level,
/// beside the backend's name), and what every store counts, for the
/// metrics.
#[derive(Debug, Clone, Serialize)]
pub struct StoreStats {
    /// `sqlite`, `postgres`.
    pub backend: &'static str,
    #[serde(flatten)]
    pub facts: serde_json::Value,
    #[serde(skip)]
    pub metrics: StoreMetrics,
}

/// What the metrics show of a store (`litelink_*`).
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    /// Live links.
    pub links: u64,
    pub writes: queue::WriteCounts,
    /// The backend's own gauges, by metric name.
    pub gauges: Vec<(&'static str, f64)>,
    /// The backend's own counters (totals), by metric name.
    pub counters: Vec<(&'static str, u64)>,
}

impl StoreStats {
    /// `facts` as `/stats` shows them.
    pub(crate) fn new(
        backend: &'static str,
        facts: &impl Serialize,
        metrics: StoreMetrics,
    ) -> Self {
        Self {
            backend,
            facts: serde_json::to_value(facts).unwrap_or_default(),
            metrics,
        }
    }
}

/// A link to store: a generated code unless `code` names an alias.
#[derive(Debug, Clone)]
pub struct NewLink {
    pub domain: DomainId,
    pub target: TargetUrl,
    pub code: Option<ShortCode>,
    pub expires_at: Option<Timestamp>,
    pub owner: Option<Owner>,
    pub max_visits: Option<u64>,
    /// Its password, rules and expired target, when it has any.
    pub extra: Option<Arc<LinkRules>>,
    pub labels: Labels,
}

impl NewLink {
    /// The seed API's create: a generated code, no expiry, no owner.
    #[cfg(test)]
    pub(crate) fn to(target: TargetUrl) -> Self {
        Self {
            domain: DomainId::DEFAULT,
            target,
            code: None,
            expires_at: None,
            owner: None,
            max_visits: None,
            extra: None,
            labels: Labels::default(),
        }
    }
}

/// A change to a link: each field that is `Some` is set
/// (`expires_at: Some(None)` clears the expiry, `max_visits` likewise).
#[derive(Debug, Clone, Default)]
pub struct LinkPatch {
    pub target: Option<TargetUrl>,
    pub expires_at: Option<Option<Timestamp>>,
    pub max_visits: Option<Option<u64>>,
    pub password: Option<Option<PasswordHash>>,
    /// An empty list clears the rules.
    pub rules: Option<Vec<Rule>>,
    pub expired_url: Option<Option<TargetUrl>>,
    pub title: Option<Option<String>>,
    /// An empty list clears the tags.
    pub tags: Option<Vec<String>>,
}

/// A link's password, rules and expired target as a store keeps them: three
/// nullable text columns (the hash's PHC string, the rules' JSON, a URL).
pub(crate) struct ExtraColumns {
    pub password: Option<String>,
    pub rules: Option<String>,
    pub expired_url: Option<String>,
}

impl ExtraColumns {
    pub(crate) fn of(extra: Option<&LinkRules>) -> Self {
        Self {
            password: extra
                .and_then(|e| e.password.as_ref())
                .map(|p| p.as_str().to_owned()),
            rules: extra.and_then(|e| rules_column(&e.rules)),
            expired_url: extra
                .and_then(|e| e.expired_url.as_ref())
                .map(|u| u.as_str().to_owned()),
        }
    }

    /// What the columns hold, checked as the API checks it; a stored value
    /// that does not parse is an error, never a link served without it.
    pub(crate) fn read(
        password: Option<&str>,
        rules: Option<&str>,
        expired_url: Option<&str>,
    ) -> Result<Option<Arc<LinkRules>>, String> {
        if password.is_none() && rules.is_none() && expired_url.is_none() {
            return Ok(None);
        }
        let password = match password {
            None => None,
            Some(p) => Some(
                PasswordHash::from_stored(p).ok_or("a stored password is not an Argon2id hash")?,
            ),
        };
        let rules = match rules {
            None => Vec::new(),
            Some(r) => {
                crate::domain::Rules::from_column(r).map_err(|e| format!("stored rules: {e}"))?
            }
        };
        let expired_url = match expired_url {
            None => None,
            Some(u) => Some(TargetUrl::parse(u).map_err(|e| format!("stored expired_url: {e}"))?),
        };
        Ok(extra_of(LinkRules {
            password,
            rules,
            expired_url,
        }))
    }
}

/// The rules' column: their JSON, or NULL for none.
pub(crate) fn rules_column(rules: &[Rule]) -> Option<String> {
    crate::domain::Rules::column(rules)
}

/// One page of links, newest first.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// Only this user's links; `None`: every link (an admin's or a
    /// viewer's view).
    pub owner: Option<UserId>,
    /// Only this domain's links; `None`: every domain's.
    pub domain: Option<DomainId>,
    pub limit: usize,
    /// Links older than this position (from a previous page's `next`).
    pub before: Option<i64>,
    /// A case-insensitive substring of the URL or the title, or a prefix
    /// of the code.
    pub q: Option<String>,
    /// Who searches with `q`: a link behind a password has its URL matched
    /// only for its owner (`Some`), or for everyone's links (`None`: an
    /// admin), so that a search cannot spell out a target that is hidden.
    pub searcher: Option<UserId>,
    /// Only links with every one of these tags (folded).
    pub tags: Vec<String>,
}

/// A tag and how many links (in a scope) have it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TagCount {
    /// As first written.
    pub tag: String,
    pub links: u64,
}

/// Whose links' visits are summed: a user's (`owner`), on one domain, or
/// all of them (`None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct VisitScope {
    pub owner: Option<UserId>,
    pub domain: Option<DomainId>,
}

/// A page of the live links in a scope, in an order of their own (the
/// YOURLS API's `stats`): by offset, since its orders are not keysets.
#[derive(Debug, Clone, Copy)]
pub struct RankQuery {
    pub scope: VisitScope,
    pub rank: Rank,
    pub offset: u64,
    pub limit: usize,
}

/// How [`RankQuery`] orders links; ties go to the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    /// Most visits (counted and imported) first.
    MostVisited,
    LeastVisited,
    Newest,
    Random,
}

impl Rank {
    /// Its `ORDER BY`, over `links l`, in SQL both stores speak.
    pub(crate) fn order_by(self) -> &'static str {
        match self {
            Self::MostVisited => "l.visits + l.imported_visits DESC, l.id DESC",
            Self::LeastVisited => "l.visits + l.imported_visits ASC, l.id DESC",
            Self::Newest => "l.id DESC",
            Self::Random => "random()",
        }
    }
}

/// How many live links a scope has, and their visits, counted and
/// imported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkTotals {
    pub links: u64,
    pub visits: u64,
}

/// The SHA-256 of a target, by which links are found by their target: a
/// target can outgrow an index entry, its hash cannot.
pub(crate) fn target_hash(target: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(target.as_bytes()).into()
}

/// Most links [`LinkStore::links_to`] answers.
pub(crate) const MAX_LINKS_TO: usize = 100;

#[derive(Debug, Clone)]
pub struct ListPage {
    pub links: Vec<Link>,
    /// Where the next page starts, when there may be one.
    pub next: Option<i64>,
}

/// An API key as stored (only the SHA-256 of its secret), with what it
/// acts as: its user's name and role, and whether that user is disabled.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: KeyId,
    pub name: String,
    pub hash: [u8; 32],
    pub user: UserId,
    pub user_name: String,
    pub role: Role,
    pub user_disabled: bool,
    /// The one domain the key works on (its own limit, else its user's);
    /// `None`: every domain.
    pub domain: Option<DomainId>,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

/// A person (or a script's identity): keys and links belong to one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    /// The one domain the user works on; `None`: every domain.
    pub domain: Option<DomainId>,
    /// The Argon2id hash of the local password, in PHC form; `None`: no
    /// local sign-in.
    pub password: Option<String>,
    /// The password was given by an admin and must be changed at sign-in.
    pub must_change: bool,
    pub disabled: bool,
    /// Signed in through the identity provider with no role here: until a
    /// sign-in with a role, or an admin, lifts it, the user's sessions are
    /// over, keys act for no one and no sign-in passes. Apart from
    /// `disabled`, which it never lifts.
    pub suspended: bool,
    pub created_at: Timestamp,
}

/// A user to store.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    pub domain: Option<DomainId>,
    pub password: Option<String>,
    pub must_change: bool,
}

/// A change to a user; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    pub email: Option<Option<String>>,
    pub role: Option<Role>,
    pub domain: Option<Option<DomainId>>,
    /// A new password hash, and whether it must be changed at sign-in.
    pub password: Option<(Option<String>, bool)>,
    pub disabled: Option<bool>,
    /// `Some(false)` lifts a suspension.
    pub suspended: Option<bool>,
}

/// A signed-in session as stored (only a hash of its id is kept), with
/// its user as they are now.
#[derive(Debug, Clone)]
pub struct Session {
    pub user: User,
    /// The user's role when the session began: a session whose user's
    /// role has changed since is over.
    pub role: Role,
    pub created_at: Timestamp,
    pub seen_at: Timestamp,
}

/// Most sessions one user keeps: a new one beyond it ends their oldest.
pub const MAX_SESSIONS_PER_USER: i64 = 20;

/// A write to the sessions.
#[derive(Debug, Clone)]
pub enum SessionWrite {
    /// A new session; sessions begun before `started_before` or last seen
    /// before `seen_before` (expired ones) go in the same write, and so do
    /// the user's oldest beyond [`MAX_SESSIONS_PER_USER`].
    Start {
        hash: [u8; 32],
        user: UserId,
        role: Role,
        started_before: Timestamp,
        seen_before: Timestamp,
    },
    /// When a session was last seen.
    Touch {
        hash: [u8; 32],
        at: Timestamp,
    },
    End {
        hash: [u8; 32],
    },
    /// Ends every session of `user` but `keep`.
    EndOthers {
        user: UserId,
        keep: Option<[u8; 32]>,
    },
}

/// A sign-in through OpenID Connect under way, between the redirect to the
/// identity provider and its callback. Only hashes of the `state` and of
/// the browser's flow cookie are kept; the nonce and the PKCE verifier are
/// kept as they are, since the callback needs them, and live ten minutes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginFlow {
    pub state: [u8; 32],
    pub browser: [u8; 32],
    pub nonce: String,
    pub verifier: String,
    pub created_at: Timestamp,
}

/// Most sign-ins under way at once: past it, a new one is refused until
/// some end or expire ([`StoreError::TooMany`]).
pub const MAX_LOGIN_FLOWS: i64 = 10_000;

/// A write to the sign-ins under way.
#[derive(Debug, Clone)]
pub enum LoginFlowWrite {
    /// Stores a flow; those begun before `expired_before` go in the same
    /// write.
    Begin {
        flow: LoginFlow,
        expired_before: Timestamp,
    },
    /// Reads and removes the flow whose state hashes to `state`, begun by
    /// the browser whose flow cookie hashes to `browser`: a flow is used
    /// once, and only by its own browser (another's callback leaves it).
    Take { state: [u8; 32], browser: [u8; 32] },
}

/// A person signed in through OpenID Connect, as the provider names them.
#[derive(Debug, Clone)]
pub struct FederatedUser {
    pub issuer: String,
    pub subject: String,
    /// The name a new user gets, if free (else with a `-2`, `-3`...).
    pub name: String,
    pub email: Option<String>,
    /// `None`: the provider gives them no role here.
    pub role: Option<Role>,
}

/// A write to the users.
#[derive(Debug, Clone)]
pub enum UserWrite {
    /// A name taken regardless of case is [`StoreError::UserTaken`].
    Create(NewUser),
    Update {
        name: String,
        change: UserChange,
    },
    /// Disables the user and revokes their keys; their links stay, or go
    /// to `reassign`.
    Remove {
        name: String,
        reassign: Option<UserId>,
    },
    /// The user that (issuer, subject) names, made at their first sign-in
    /// and given the role (and email) of this one, which lifts a
    /// suspension; never another user found by name or email. A sign-in
    /// with no role makes no user, and suspends a known one (ending their
    /// sessions).
    SignIn(FederatedUser),
}

/// One link as `export` writes it and `import` reads it; a deleted code
/// (a tombstone) has no URL and a `deleted_at`. `max_visits` and `visits`
/// came with schema 3: files written before read as no limit and no visits.
/// In JSON lines, `history` carries the link's visit counts (hours,
/// referrers, countries and the rest; CSV leaves it out). Export always writes
/// the code; import generates one for a live link without it. `domain` is
/// the link's host, absent on the default domain (and in files from before
/// domains).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    pub url: Option<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub owner: Option<String>,
    pub deleted_at: Option<String>,
    #[serde(default)]
    pub max_visits: Option<u64>,
    #[serde(default)]
    pub visits: Option<u64>,
    /// Visits another shortener counted that no log dates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_visits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// The password's Argon2id hash (never a password in clear).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// As shown; in CSV, joined by `|`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// A link's visit counts as export writes them: `hours` as `[start,
/// humans, bots, browsers]`, `referrers` as `[day, host, count]` and
/// `facets` as `[day, dimension, value, count]`, each start or day an RFC
/// 3339 time (UTC, the hour's or the day's first instant).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hours: Vec<(String, u64, u64, u64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub referrers: Vec<(String, String, u64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facets: Vec<(String, String, String, u64)>,
}

impl History {
    /// A link's stored visit counts as export writes them; `None` when there
    /// are none.
    pub(crate) fn of(counts: &VisitCounts) -> Option<History> {
        let start = |units: i64, len: i64| Timestamp::from_millis(units * len).to_string();
        let h = History {
            hours: counts
                .hours
                .iter()
                .map(|h| {
                    (
                        start(h.hour, crate::domain::visit::HOUR_MS),
                        h.humans,
                        h.bots,
                        h.browsers,
                    )
                })
                .collect(),
            referrers: counts
                .referrers
                .iter()
                .map(|(day, host, n)| {
                    (
                        start(*day, crate::domain::visit::DAY_MS),
                        host.to_string(),
                        *n,
                    )
                })
                .collect(),
            facets: counts
                .dimensions()
                .into_iter()
                .map(|(day, dim, value, n)| {
                    (
                        start(day, crate::domain::visit::DAY_MS),
                        <&str>::from(dim).to_owned(),
                        value,
                        n,
                    )
                })
                .collect(),
        };
        (h != History::default()).then_some(h)
    }
}

/// A record checked for import, with the line it came from.
#[derive(Debug, Clone)]
pub struct ImportRow {
    pub line: u64,
    pub domain: DomainId,
    /// `None`: a generated code, as a create without an alias gets.
    pub code: Option<ShortCode>,
    /// `None` for a tombstone.
    pub target: Option<TargetUrl>,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub owner: Option<UserId>,
    pub deleted_at: Option<Timestamp>,
    pub max_visits: Option<u64>,
    pub visits: u64,
    pub imported_visits: u64,
    /// Its visit counts (`dims` for every dimension but referrers).
    pub history: Option<VisitCounts>,
    pub extra: Option<Arc<LinkRules>>,
    pub labels: Labels,
}

/// What an imported row whose code exists already became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// The stored link has the same target (or both are deleted): nothing
    /// to do, so a file imported twice adds nothing.
    Unchanged,
    /// Another target, or no free code: skipped.
    Conflict,
    /// Another target, replaced by the row's as asked.
    Overwritten,
}

/// Durable storage of links and API keys.
///
/// A write returning `Ok` is a promise: it is committed with the configured
/// durability before the caller hears about it.
#[async_trait]
pub trait LinkStore: Send + Sync + 'static {
    /// Looks a live code up for a redirect. `Ok(None)` is an unknown or
    /// deleted code, not an error.
    async fn get(&self, key: &LinkKey) -> Result<Option<Resolved>, StoreError>;

    /// Stores a new link: under its alias (taken: [`StoreError::CodeTaken`]),
    /// or under a freshly generated code.
    async fn create(&self, new: NewLink) -> Result<Link, StoreError>;

    /// The live link with this code, for management.
    async fn link(&self, key: &LinkKey) -> Result<Option<Link>, StoreError>;

    /// Changes a live link; `Ok(None)` when there is none.
    async fn update(&self, key: &LinkKey, patch: LinkPatch) -> Result<Option<Link>, StoreError>;

    /// Deletes a live link, keeping its code as a tombstone so that it is
    /// never issued again; `Ok(false)` when there was none.
    async fn delete(&self, key: &LinkKey) -> Result<bool, StoreError>;

    async fn list(&self, query: ListQuery) -> Result<ListPage, StoreError>;

    /// Where `code`'s row lies among the others, for a visit flush to write
    /// its chunks in that order: each chunk's transaction then rewrites a
    /// few neighbouring pages, not a page for nearly every link in it. The
    /// same number for every code when the store keeps no such order.
    fn visit_order(&self, _key: &LinkKey) -> u64 {
        0
    }

    /// Adds counted visits to live links in one transaction, with the
    /// `link.visited` events of `visited`; a code that is no longer live
    /// is skipped (its visits and their events went with it).
    async fn record_visits(
        &self,
        visits: Arc<[(LinkKey, VisitCounts)]>,
        visited: Arc<[outbox::Visited]>,
    ) -> Result<(), StoreError>;

    /// Every stored visit count of a live link; `None` without one.
    async fn visit_counts(&self, key: &LinkKey) -> Result<Option<VisitCounts>, StoreError>;

    /// The stored visit counts of every live link in `scope`, summed per
    /// hour, and per day and value.
    async fn visit_totals(&self, scope: VisitScope) -> Result<VisitCounts, StoreError>;

    /// Every tag that a live link in `scope` has, with how many do, most
    /// used first.
    async fn tags(&self, scope: VisitScope) -> Result<Vec<TagCount>, StoreError>;

    /// The live links on `domain` whose target is exactly `target` (the
    /// first [`MAX_LINKS_TO`], oldest first), found through an index on
    /// its [`target_hash`], not a scan.
    async fn links_to(&self, domain: DomainId, target: &TargetUrl)
    -> Result<Vec<Link>, StoreError>;

    /// How many live links `scope` has, and their stored visits.
    async fn totals(&self, scope: VisitScope) -> Result<LinkTotals, StoreError>;

    /// A page of live links in a scope, ranked.
    async fn ranked(&self, query: RankQuery) -> Result<Vec<Link>, StoreError>;

    /// Every API key, revoked ones included, with its user.
    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError>;

    /// Stores a key of `user` (limited to `domain`, when given); a name in
    /// use is [`StoreError::NameTaken`].
    async fn create_key(
        &self,
        name: &str,
        user: UserId,
        hash: [u8; 32],
        domain: Option<DomainId>,
    ) -> Result<ApiKey, StoreError>;

    /// Every user, disabled ones included, in the order they were made.
    async fn users(&self) -> Result<Vec<User>, StoreError>;

    /// Makes, changes or removes a user; the user as it is afterwards, or
    /// `None` when there is no such user.
    async fn write_user(&self, write: UserWrite) -> Result<Option<User>, StoreError>;

    /// The session whose id hashes to `hash`, read fresh (one just begun
    /// through any instance is found).
    async fn session(&self, hash: [u8; 32]) -> Result<Option<Session>, StoreError>;

    async fn write_session(&self, write: SessionWrite) -> Result<(), StoreError>;

    /// A write to the sign-ins under way: `Take` answers the flow taken.
    async fn write_login_flow(
        &self,
        write: LoginFlowWrite,
    ) -> Result<Option<LoginFlow>, StoreError>;

    /// Every domain, the default one (id 0, no host) first.
    async fn domains(&self) -> Result<Vec<Domain>, StoreError>;

    /// Adds a domain; a host that exists is [`StoreError::HostTaken`].
    async fn add_domain(
        &self,
        host: &Host,
        redirects: DomainRedirects,
    ) -> Result<Domain, StoreError>;

    /// Sets a domain's redirects; `Ok(None)` when there is no such domain.
    async fn set_domain(
        &self,
        id: DomainId,
        redirects: DomainRedirects,
    ) -> Result<Option<Domain>, StoreError>;

    /// Removes an added domain. With live links it is refused
    /// ([`StoreError::DomainHasLinks`]) unless `force`, which deletes them,
    /// keeping tombstones. `None` when there was no such domain, else the
    /// codes of the links deleted.
    async fn remove_domain(
        &self,
        id: DomainId,
        force: bool,
    ) -> Result<Option<Vec<ShortCode>>, StoreError>;

    /// Revokes a key by name; `Ok(false)` when there is no such key.
    async fn revoke_key(&self, name: &str) -> Result<bool, StoreError>;

    /// Records when keys were last used.
    async fn touch_keys(&self, used: Vec<(KeyId, Timestamp)>) -> Result<(), StoreError>;

    /// Writes every link and tombstone, oldest first, to `each`.
    async fn export(
        &self,
        each: Box<dyn FnMut(Record) -> std::io::Result<()> + Send>,
    ) -> Result<u64, StoreError>;

    /// Stores `rows` in one transaction, keeping their codes (and making
    /// one for a row without). A row whose code exists is returned with
    /// its line and what became of it: unchanged (the same target, or both
    /// deleted), a conflict, or overwritten (with `overwrite`, a live link
    /// over a live link).
    async fn import(
        &self,
        rows: Vec<ImportRow>,
        overwrite: bool,
    ) -> Result<Vec<(u64, Existing)>, StoreError>;

    /// Every webhook, secrets included, read fresh (one added beside the
    /// server is seen).
    async fn webhooks(&self) -> Result<Vec<outbox::Webhook>, StoreError>;

    /// Adds, changes or rotates a webhook: the webhook as it is afterwards;
    /// `None` when there is no such webhook (a removal always answers
    /// `None`: [`Self::remove_webhook`] says whether there was one).
    async fn write_webhook(
        &self,
        write: outbox::WebhookWrite,
    ) -> Result<Option<outbox::Webhook>, StoreError>;

    /// Removes a webhook with its events and history; `false` when there
    /// was none.
    async fn remove_webhook(&self, id: i64) -> Result<bool, StoreError>;

    /// Leases up to `limit` events due now for `lease`: each the oldest
    /// undelivered event of its webhook and link, of an enabled webhook,
    /// and claimed by no other instance.
    async fn claim_events(
        &self,
        limit: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<outbox::OutboxEvent>, StoreError>;

    /// Records delivery attempts and moves their events on.
    async fn settle_events(&self, outcomes: Vec<outbox::Outcome>) -> Result<(), StoreError>;

    /// A webhook's last attempts, newest first.
    async fn attempts(&self, webhook: i64) -> Result<Vec<outbox::AttemptRow>, StoreError>;

    /// Makes one of a webhook's events due now; `false` when it has none
    /// with that id.
    async fn retry_event(&self, webhook: i64, event: i64) -> Result<bool, StoreError>;

    /// Writes an event that is about no one link (`links.imported`), with
    /// its JSON `data`, for each webhook that wants it.
    async fn record_event(&self, kind: outbox::EventKind, data: String) -> Result<(), StoreError>;

    /// Writes `link.expired` for each live link whose time ran out since
    /// the last scan (by any instance); the first scan starts from now.
    async fn scan_expiries(&self) -> Result<(), StoreError>;

    /// Deletes the `n` oldest pending `link.visited` events (a receiver
    /// away for long); how many went.
    async fn drop_visited(&self, n: u64) -> Result<u64, StoreError>;

    /// How many events wait for delivery, and when the oldest was made.
    async fn pending_events(&self) -> Result<(u64, Option<Timestamp>), StoreError>;

    /// Facts and counters for `/stats`. Cheap: no query runs for it.
    fn stats(&self) -> StoreStats;

    /// Why writes cannot succeed now (writes stopped, the database file
    /// gone, the disk full), or `None`: the readiness check.
    fn unwritable(&self) -> Option<String>;

    /// Whether other instances may serve the same links (a shared
    /// database): then an in-process cache must hear of their changes.
    fn shared(&self) -> bool {
        false
    }

    /// Serving, but a part is missing (a read replica that does not
    /// answer): the readiness check's "degraded".
    fn degraded(&self) -> Option<String> {
        None
    }

    /// Where the newest change this instance knows of is in the database's
    /// history (PostgreSQL: a WAL position), sent with invalidations so
    /// that other instances do not read the change's code from a replica
    /// that has not replayed it; `None`: no positions are kept.
    fn position(&self) -> Option<u64> {
        None
    }

    /// Another instance changed `key` (`None`: any code) at `position`
    /// (`None`: unknown).
    fn changed_elsewhere(&self, _key: Option<&LinkKey>, _position: Option<u64>) {}

    /// Whether other instances' changes can be heard (the invalidation
    /// channel is up); while they cannot, nothing is read from a replica.
    fn hearing_others(&self, _on: bool) {}

    /// Finishes queued writes and closes the database. Later calls fail with
    /// [`StoreError::Closed`].
    async fn close(&self);
}

/// Runs `reload` every `period` until the task is aborted: what servers
/// read again from the store (keys, domains) so that a change made beside
/// them counts within that time. A failure keeps what was loaded and is
/// logged at most once a minute, naming `what`.
pub(crate) fn spawn_reloader<F, Fut>(
    period: std::time::Duration,
    what: &'static str,
    mut reload: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), StoreError>> + Send,
{
    tokio::spawn(async move {
        let mut logged: Option<std::time::Instant> = None;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = reload().await
                && logged.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60))
            {
                tracing::warn!(error = %e, "cannot reload {what}; using the ones loaded");
                logged = Some(std::time::Instant::now());
            }
        }
    })
}

/// What kind of failure a database error is: it decides between "retry
/// later" (503) and "internal error" (500). Each backend says which its
/// errors are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageFailure {
    /// The disk (or the file system) is full.
    DiskFull,
    /// The disk or file system failed.
    Io,
    /// The database can no longer be written.
    ReadOnly,
    /// Another process holds a lock.
    Busy,
    /// The database is damaged.
    Corrupt,
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write queue is full: the client should retry shortly.
    #[error("the write queue is full")]
    Busy,
    #[error("the store is closed")]
    Closed,
    #[error("no free short code found after {0} attempts")]
    CodeSpaceExhausted(u32),
    /// An alias that a link, live or deleted, already has.
    #[error("code '{0}' is taken")]
    CodeTaken(String),
    /// A key name in use.
    #[error("a key named '{0}' exists")]
    NameTaken(String),
    /// A user name in use, regardless of case.
    #[error("a user named '{0}' exists")]
    UserTaken(String),
    /// A bounded table is full (what it holds is said).
    #[error("too many {0}")]
    TooMany(&'static str),
    /// A domain that exists.
    #[error("the domain '{0}' exists")]
    HostTaken(String),
    /// A domain with live links, removed without force.
    #[error("the domain has {0} links; remove them first, or force the removal")]
    DomainHasLinks(u64),
    /// A write that failed on the way to disk, with what kind of failure
    /// it was (the error itself is gone: one failed batch fails many
    /// requests).
    #[error("{1}")]
    Storage(StorageFailure, String),
    #[error("background task failed: {0}")]
    Task(String),
    /// Creates are refused for the rest of this process's life because a
    /// sync of the write-ahead log failed (see `sqlite::walsync`); reads go
    /// on. The string is the failure, for the log.
    #[error("writes are stopped: {0}")]
    WritesStopped(String),
}
