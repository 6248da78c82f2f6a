//! Short domains in use: which domain a request's `Host` names, and what
//! each domain does with what it has no link for.
//!
//! The running server keeps every domain in memory and reloads them from
//! the store every second, as it does keys, so that a domain added,
//! changed or removed by `litelink domains` beside it is honoured within a
//! second; a change made through the API is seen at once.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use strum::{Display, EnumString, VariantNames};

use crate::domain::wire::Patch;
use crate::domain::{
    DEFAULT_NAME, Domain, DomainId, DomainRedirects, Host, MAX_HOST_LEN, ShortCode, TargetUrl,
};
use crate::store::{LinkStore, StoreError};

/// How often domains are reloaded from the store.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// What a request for a host that is no domain's gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, EnumString, Display, VariantNames)]
#[strum(serialize_all = "kebab-case")]
pub enum UnknownHost {
    /// It is served as the default domain.
    #[default]
    Default,
    /// 404 on `/`, `/{code}` and the QR routes.
    Reject,
}

#[derive(Debug, Clone, Default)]
pub struct DomainSettings {
    /// The default domain's host (`--default-domain`, else the host of
    /// `--public-url`); `None`: it answers on every host not added.
    pub default_host: Option<Host>,
    pub unknown_host: UnknownHost,
}

/// Domains as loaded: the list, and the hosts they answer on.
struct Table {
    /// By id, the default domain first.
    domains: Vec<Domain>,
    /// Lowercase ASCII host names, the default domain's among them.
    by_host: HostIndex,
    /// Whether any domain was added beside the default one.
    added: bool,
}

impl Table {
    fn new(mut domains: Vec<Domain>, default_host: Option<&Host>) -> Self {
        if !domains.iter().any(|d| d.id.is_default()) {
            domains.insert(
                0,
                Domain {
                    id: DomainId::DEFAULT,
                    host: None,
                    redirects: DomainRedirects::default(),
                },
            );
        }
        domains.sort_by_key(|d| d.id);
        let mut by_host: HashMap<Box<[u8]>, DomainId> = HashMap::new();
        for d in &domains {
            let host = if d.id.is_default() {
                default_host
            } else {
                d.host.as_ref()
            };
            if let Some(host) = host {
                // The default domain's host wins over an added domain of
                // the same name (refused when added through this server).
                by_host
                    .entry(host.as_str().as_bytes().into())
                    .and_modify(|id| {
                        if d.id.is_default() {
                            *id = d.id
                        }
                    })
                    .or_insert(d.id);
            }
        }
        let added = domains.len() > 1;
        Self {
            domains,
            by_host: HostIndex::new(by_host.into_iter().collect()),
            added,
        }
    }

    fn get(&self, id: DomainId) -> Option<&Domain> {
        self.domains
            .binary_search_by_key(&id, |d| d.id)
            .ok()
            .map(|i| &self.domains[i])
    }
}

pub struct DomainRegistry {
    store: Arc<dyn LinkStore>,
    settings: DomainSettings,
    table: ArcSwap<Table>,
    /// This registry among any others in the process, and how many times
    /// its table has changed: what a thread's copy of the table is checked
    /// against ([`DomainRegistry::with_table`]).
    id: u64,
    version: AtomicU64,
    /// Whether a request's Host must be looked at: a domain was added, or
    /// unknown hosts are refused. Read first on every redirect, so that a
    /// server with one domain does no more than this.
    by_host: AtomicBool,
}

/// A domain as the API shows it: its host is the configured one for the
/// default domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub domain: Domain,
    pub host: Option<Host>,
    pub default: bool,
}

impl DomainRegistry {
    pub async fn load(
        store: Arc<dyn LinkStore>,
        settings: DomainSettings,
    ) -> Result<Self, StoreError> {
        let domains = store.domains().await?;
        let table = Table::new(domains, settings.default_host.as_ref());
        let registry = Self {
            store,
            settings,
            by_host: AtomicBool::new(false),
            table: ArcSwap::from_pointee(table),
            id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            version: AtomicU64::new(0),
        };
        registry.note_by_host();
        Ok(registry)
    }

    /// The domain a request's `Host` names; `None`: an unknown host that
    /// `--unknown-host reject` refuses.
    pub(crate) fn of_request(&self, host: Option<&[u8]>) -> Option<DomainId> {
        if !self.by_host.load(Ordering::Acquire) {
            return Some(DomainId::DEFAULT);
        }
        let found = host.and_then(|raw| self.with_table(|table| lookup(table, raw)));
        match (found, self.settings.unknown_host) {
            (Some(id), _) => Some(id),
            (None, UnknownHost::Default) => Some(DomainId::DEFAULT),
            (None, UnknownHost::Reject) => None,
        }
    }

    /// Whether `host` (a target URL's host) is one of this server's
    /// domains: the default domain's host or an added one. A target there
    /// could lead back to a link here (`ex.co/a -> other.io/b -> ex.co/a`).
    pub(crate) fn serves(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.settings
            .default_host
            .as_ref()
            .is_some_and(|h| h.as_str().eq_ignore_ascii_case(host))
            || self
                .table
                .load()
                .by_host
                .get(host.to_ascii_lowercase().as_bytes())
                .is_some()
    }

    /// What a domain does with what it has no link for.
    pub fn redirects(&self, id: DomainId) -> DomainRedirects {
        self.table
            .load()
            .get(id)
            .map(|d| d.redirects.clone())
            .unwrap_or_default()
    }

    /// The host a domain's short URLs are on: the configured one for the
    /// default domain.
    pub fn host_of(&self, id: DomainId) -> Option<Host> {
        if id.is_default() {
            return self.settings.default_host.clone();
        }
        self.table.load().get(id).and_then(|d| d.host.clone())
    }

    /// The domain a user names: a host (in either form, any case), or
    /// `default`; `None`: no such domain.
    pub fn named(&self, name: &str) -> Option<DomainId> {
        if name.eq_ignore_ascii_case(DEFAULT_NAME) {
            return Some(DomainId::DEFAULT);
        }
        let host = Host::parse(name).ok()?;
        self.table.load().by_host.get(host.as_str().as_bytes())
    }

    /// Every domain, the default first.
    pub fn list(&self) -> Vec<Named> {
        self.table
            .load()
            .domains
            .iter()
            .map(|d| self.describe(d.clone()))
            .collect()
    }

    pub(crate) fn get(&self, id: DomainId) -> Option<Named> {
        self.table.load().get(id).cloned().map(|d| self.describe(d))
    }

    pub(crate) fn describe(&self, domain: Domain) -> Named {
        let default = domain.id.is_default();
        let host = if default {
            self.settings.default_host.clone()
        } else {
            domain.host.clone()
        };
        Named {
            domain,
            host,
            default,
        }
    }

    /// Adds a domain; the default domain's host, or one that exists, is
    /// [`StoreError::HostTaken`].
    pub async fn add(&self, host: &Host, redirects: DomainRedirects) -> Result<Named, StoreError> {
        if self.settings.default_host.as_ref() == Some(host) {
            return Err(StoreError::HostTaken(host.to_string()));
        }
        let domain = self.store.add_domain(host, redirects).await?;
        self.refresh().await?;
        Ok(self.describe(domain))
    }

    pub async fn set(
        &self,
        id: DomainId,
        redirects: DomainRedirects,
    ) -> Result<Option<Named>, StoreError> {
        let domain = self.store.set_domain(id, redirects).await?;
        self.refresh().await?;
        Ok(domain.map(|d| self.describe(d)))
    }

    /// Removes an added domain (see [`LinkStore::remove_domain`]).
    pub async fn remove(
        &self,
        id: DomainId,
        force: bool,
    ) -> Result<Option<Vec<ShortCode>>, StoreError> {
        let removed = self.store.remove_domain(id, force).await?;
        self.refresh().await?;
        Ok(removed)
    }

    /// Reloads the domains.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        let domains = self.store.domains().await?;
        // Reloaded every second, changed rarely: the threads' copies are
        // dropped only when something changed.
        if self.table.load().domains != domains {
            let table = Table::new(domains, self.settings.default_host.as_ref());
            self.table.store(Arc::new(table));
            self.version.fetch_add(1, Ordering::AcqRel);
            self.note_by_host();
        }
        Ok(())
    }

    /// Runs `f` on the table through this thread's copy of it, taken
    /// again only when the table changed: a redirect then reads one
    /// counter instead of taking a reference on the shared table (half of
    /// what a lookup of the Host costs otherwise).
    fn with_table<R>(&self, f: impl FnOnce(&Table) -> R) -> R {
        let version = self.version.load(Ordering::Acquire);
        THREAD_TABLE.with(|copy| {
            let mut copy = copy.borrow_mut();
            match &*copy {
                Some((id, v, table)) if *id == self.id && *v == version => f(table),
                _ => {
                    let table = self.table.load_full();
                    let answer = f(&table);
                    *copy = Some((self.id, version, table));
                    answer
                }
            }
        })
    }

    fn note_by_host(&self) {
        let on = self.table.load().added || self.settings.unknown_host == UnknownHost::Reject;
        self.by_host.store(on, Ordering::Release);
    }

    /// Reloads every [`REFRESH_EVERY`] until the task is aborted; failures
    /// keep the domains loaded and are logged at most once a minute.
    pub(crate) fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        crate::store::spawn_reloader(REFRESH_EVERY, "domains", move || {
            let me = Arc::clone(&me);
            async move { me.refresh().await }
        })
    }
}

static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's copy of a registry's table: (registry, version, table).
    static THREAD_TABLE: RefCell<Option<(u64, u64, Arc<Table>)>> = const { RefCell::new(None) };
}

/// The domain of a `Host` value. Hosts are sent lowercase nearly always,
/// so the name as sent (without its port) is looked up first, with no copy;
/// only a miss folds its case, or, for a name with other than ASCII bytes,
/// goes through IDNA. This runs on every redirect once domains are added.
fn lookup(table: &Table, raw: &[u8]) -> Option<DomainId> {
    // No Host longer than a name and a port is one; IDNA never sees it.
    if raw.len() > MAX_HOST_LEN * 4 {
        return None;
    }
    let name = without_port(raw);
    if let Some(id) = table.by_host.get(name) {
        return Some(id);
    }
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_ascii() {
        table.by_host.get(&name.to_ascii_lowercase())
    } else {
        table
            .by_host
            .get(Host::of_request(raw)?.as_str().as_bytes())
    }
}

/// `raw` without a final `:PORT`, found from the end (a port is a few
/// digits; the name before it can be long).
fn without_port(raw: &[u8]) -> &[u8] {
    let digits = raw.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    match raw.len().checked_sub(digits + 1) {
        Some(colon) if raw[colon] == b':' => &raw[..colon],
        _ => raw,
    }
}

/// Where hosts are looked up: a short list scanned by length first (a
/// server has a few domains; a hash of the name would cost more than the
/// scan), a hash map past [`HostIndex::SCANNED`].
enum HostIndex {
    Few(Vec<(Box<[u8]>, DomainId)>),
    Many(HashMap<Box<[u8]>, DomainId, foldhash::fast::FixedState>),
}

impl HostIndex {
    const SCANNED: usize = 8;

    fn new(hosts: Vec<(Box<[u8]>, DomainId)>) -> Self {
        if hosts.len() <= Self::SCANNED {
            Self::Few(hosts)
        } else {
            Self::Many(hosts.into_iter().collect())
        }
    }

    fn get(&self, name: &[u8]) -> Option<DomainId> {
        match self {
            Self::Few(hosts) => hosts
                .iter()
                .find(|(host, _)| host.len() == name.len() && **host == *name)
                .map(|(_, id)| *id),
            Self::Many(map) => map.get(name).copied(),
        }
    }
}

/// A link's full short URL when the server's settings decide it: on an
/// added domain, that host with the scheme of `public_url` (else https);
/// on the default domain, under `public_url`, else on the default host over
/// https. `None`: only a request's Host, or the listen address, can say.
pub(crate) fn short_url(
    domains: &DomainRegistry,
    public_url: Option<&str>,
    key: &crate::domain::LinkKey,
) -> Option<String> {
    let code = &key.code;
    if (!key.domain.is_default() || public_url.is_none())
        && let Some(host) = domains.host_of(key.domain)
    {
        return Some(short_url_on(&host.to_string(), public_url, code.as_str()));
    }
    public_url.map(|base| format!("{}/{code}", base.trim_end_matches('/')))
}

/// `code`'s short URL on `host`, with the scheme of `public_url` (else
/// https).
pub(crate) fn short_url_on(host: &str, public_url: Option<&str>, code: &str) -> String {
    let scheme = match public_url {
        Some(url) if url.starts_with("http://") => "http",
        _ => "https",
    };
    format!("{scheme}://{host}/{code}")
}

/// The body of `POST /api/v1/domains`: a host, and each redirect
/// optionally.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewDomain)]
pub(crate) struct NewDomainBody {
    #[serde(deserialize_with = "crate::domain::wire::required")]
    pub host: Host,
    /// Where `GET /` on the domain goes (the page when absent).
    #[serde(default)]
    pub root_redirect: Option<TargetUrl>,
    /// Where an unknown or deleted code goes (404 when absent).
    #[serde(default)]
    pub not_found_redirect: Option<TargetUrl>,
    /// Where an expired link, or one out of visits, goes (410 when absent).
    #[serde(default)]
    pub expired_redirect: Option<TargetUrl>,
}

impl NewDomainBody {
    pub(crate) fn redirects(&self) -> DomainRedirects {
        DomainRedirects {
            root: self.root_redirect.clone(),
            not_found: self.not_found_redirect.clone(),
            expired: self.expired_redirect.clone(),
        }
    }
}

/// The body of `PATCH /api/v1/domains/{host}`: each redirect that is
/// present is set, and `null` clears it.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DomainPatch)]
pub(crate) struct DomainPatchBody {
    #[serde(default)]
    #[schema(value_type = Option<TargetUrl>)]
    pub root_redirect: Patch<TargetUrl>,
    #[serde(default)]
    #[schema(value_type = Option<TargetUrl>)]
    pub not_found_redirect: Patch<TargetUrl>,
    #[serde(default)]
    #[schema(value_type = Option<TargetUrl>)]
    pub expired_redirect: Patch<TargetUrl>,
}

impl DomainPatchBody {
    /// `current` with this patch's redirects set.
    pub(crate) fn apply(self, mut current: DomainRedirects) -> DomainRedirects {
        for (slot, patch) in [
            (&mut current.root, self.root_redirect),
            (&mut current.not_found, self.not_found_redirect),
            (&mut current.expired, self.expired_redirect),
        ] {
            if let Some(value) = patch.into_option() {
                *slot = value;
            }
        }
        current
    }
}

/// A short domain as the API shows it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Domain)]
pub(crate) struct DomainView {
    /// The host, lowercase ASCII; null for a default domain without one.
    pub host: Option<String>,
    /// Where `GET /` goes; null: the page.
    pub root_redirect: Option<TargetUrl>,
    /// Where an unknown or deleted code goes; null: 404.
    pub not_found_redirect: Option<TargetUrl>,
    /// Where an expired link, or one out of visits, goes; null: 410.
    pub expired_redirect: Option<TargetUrl>,
    /// The default domain: links without a domain are on it; it cannot
    /// be removed.
    pub default: bool,
}

impl From<Named> for DomainView {
    fn from(d: Named) -> Self {
        let r = d.domain.redirects;
        Self {
            host: d.host.map(|h| h.to_string()),
            root_redirect: r.root,
            not_found_redirect: r.not_found,
            expired_redirect: r.expired,
            default: d.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(id: i64, host: &str) -> Domain {
        Domain {
            id: DomainId(id),
            host: Some(Host::parse(host).unwrap()),
            redirects: DomainRedirects::default(),
        }
    }

    #[test]
    fn a_host_is_found_in_any_case_with_any_port_in_either_form() {
        let long = format!("{}.ex.co", "a".repeat(63));
        let table = Table::new(
            vec![
                domain(1, "ex.co"),
                domain(2, "bücher.example"),
                domain(3, &long),
            ],
            Some(&Host::parse("go.example.com").unwrap()),
        );
        for (raw, id) in [
            ("ex.co", Some(1)),
            ("EX.CO:8080", Some(1)),
            ("ex.co.", Some(1)),
            ("xn--bcher-kva.example", Some(2)),
            ("Bücher.example:443", Some(2)),
            ("go.example.com", Some(0)),
            ("other.example", None),
            ("ex.co:80x", None),
            ("", None),
            (&format!("{}.ex.co", "b".repeat(63)), None),
            (&long.to_uppercase(), Some(3)),
            (&format!("{long}:8080"), Some(3)),
        ] {
            assert_eq!(lookup(&table, raw.as_bytes()), id.map(DomainId), "{raw}");
        }
        assert!(table.added);
        assert!(matches!(table.by_host, HostIndex::Few(_)));
        // Past a few hosts, a hash map: the same answers.
        let many: Vec<_> = (1..=20)
            .map(|i| domain(i, &format!("d{i}.example")))
            .collect();
        let big = Table::new(many, None);
        assert!(matches!(big.by_host, HostIndex::Many(_)));
        assert_eq!(lookup(&big, b"D7.example:80"), Some(DomainId(7)));
        assert_eq!(lookup(&big, b"d21.example"), None);
        assert_eq!(table.get(DomainId(2)).unwrap().id, DomainId(2));
        assert!(table.get(DomainId(9)).is_none());
    }
}
