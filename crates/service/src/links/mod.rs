//! The application service: resolving, creating and managing links, with
//! the cache in front of the store. Handlers call this and nothing below
//! it, so a request's path reads handler -> links -> cache -> store. Every
//! rule of the game is here: who may create, read, change or delete what,
//! how often, and which targets a link may have.

mod accounts;
pub mod bodies;
mod keys;
pub(crate) mod limit;
mod users;
pub(crate) mod webhooks;
pub(crate) mod yourls;

use std::sync::Arc;

use serde::Serialize;

use crate::cache::invalidations::{InvalidationStats, Invalidations};
use crate::cache::{CacheStats, LinkCache, Lookup};
use crate::domain::label::fold_tag;
use crate::domain::rules::{self, Facts, Rule};
use crate::domain::wire::Patch;
use crate::domain::{Country, Facets, Role, Tags, Timestamp};
use crate::domain::{DomainId, Link, LinkKey, Resolved, TargetPolicy, TargetUrl, VisitCounts};
use crate::domains::{DomainPatchBody, DomainRegistry, Named, NewDomainBody};
use crate::keys::{KeyRegistry, Principal};
use crate::passwords::{PasswordError, Passwords};
use crate::store::{
    LinkPatch, LinkStore, ListPage, ListQuery, NewLink, StoreError, StoreStats, TagCount,
    VisitScope,
};
use crate::visits::{Visit, VisitStats, Visits};
use bodies::{LinkPatchBody, LinkView, NewLinkBody};
use limit::{Client, CreateLimiter};
use strum::{Display, EnumString, VariantNames};

/// What `/stats` shows of the store and the cache: the store's fields at
/// the top level (as they always were), the cache under `cache`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LinkStats {
    #[serde(flatten)]
    pub store: StoreStats,
    pub cache: CacheStats,
    pub visits: VisitStats,
    /// Present with `--invalidations-url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalidations: Option<InvalidationStats>,
}

/// What the readiness check reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Readiness {
    Ready,
    /// Serving, but an outside cache is down: reads and writes still work
    /// (from SQLite), so a load balancer should keep sending traffic.
    Degraded(String),
    /// Writes fail (stopped, the database file gone, the disk full).
    Unavailable(String),
}

/// Who may create links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "kebab-case")]
pub enum CreateAuth {
    /// Anyone; a key that is sent must be valid, and owns the link.
    Open,
    /// Only callers with a valid API key.
    Key,
}

/// What the links service refuses, or what failed below it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinksError {
    /// This needs an API key, and none was sent.
    #[error("{0}")]
    NeedsKey(&'static str),
    /// The key may not do this (a key limited to another domain).
    #[error("{0}")]
    Forbidden(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Guessing is limited, or hashing is busy.
    #[error(transparent)]
    Password(#[from] PasswordError),
    /// What was sent cannot be taken: a target the server refuses, an
    /// unknown domain, a time in the past.
    #[error("{0}")]
    Invalid(String),
    /// It would undo what must stay (the default domain).
    #[error("{0}")]
    Conflict(String),
    /// Too many creates from this client or key.
    #[error("{message}")]
    RateLimited { message: String, retry_after: u32 },
    /// A sign-in with a wrong name or password: one answer for both.
    #[error("wrong name or password")]
    WrongCredentials,
    /// Signing in, or this way of it, is not set up here.
    #[error("{0}")]
    AccountsOff(&'static str),
    /// A sign-in through the identity provider that did not happen.
    #[error(transparent)]
    SignIn(#[from] crate::oidc::OidcError),
}

/// What a redirect finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolution {
    Found(TargetUrl),
    /// The link has a password, and none was sent: 401.
    Locked,
    /// The link has a password, and a wrong one was sent: 401.
    WrongPassword,
    /// The link has a password, and it was sent: the target, which no
    /// cache may keep (every visit asks again).
    Unlocked(TargetUrl),
    /// The link exists but its expiry has passed: 410.
    Expired,
    /// The link has served its `max_visits`: 410.
    Exhausted,
    /// The target's host is on the deny list now: 410.
    Blocked,
    Missing,
}

/// What is left of a lookup that [`Links::resolve_now`] could not finish:
/// what the cache said, if it was asked.
pub(crate) struct Later(Option<Lookup>);

/// How a lookup uses the link.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Use<'a> {
    /// A redirect that is served: counted as a visit.
    Visit(Visit<'a>),
    /// A `HEAD` of a redirect: the target a GET would get, rules and all,
    /// but no visit counted.
    Head(Visit<'a>),
    /// A look at the link's own URL, not a visit (`GET /link/{code}`).
    Look,
}

/// What a link's rules ask of a visit, each worked out once and only when
/// a rule asks.
struct VisitFacts<'v, 'a> {
    visit: &'v Visit<'a>,
    visits: &'v Visits,
    /// The agent, once a rule asked: the tally then need not look again.
    agent: Option<crate::domain::classify::Agent>,
    language: Option<Option<&'a str>>,
    now: Option<Timestamp>,
}

impl Facts for VisitFacts<'_, '_> {
    fn agent(&mut self) -> crate::domain::classify::Agent {
        let (visits, ua) = (self.visits, self.visit.user_agent);
        *self.agent.get_or_insert_with(|| visits.agent(ua))
    }

    fn language(&mut self) -> Option<&str> {
        let sent = self.visit.accept_language;
        *self
            .language
            .get_or_insert_with(|| sent.and_then(rules::preferred_language))
    }

    fn country(&mut self) -> Country {
        self.visits.country(self.visit)
    }

    fn query(&self) -> Option<&str> {
        self.visit.query
    }

    fn now(&mut self) -> Timestamp {
        *self.now.get_or_insert_with(Timestamp::now)
    }
}

/// Cheap to clone: one reference count, which every request's copy of
/// the router state takes and drops.
#[derive(Clone)]
pub(crate) struct Links {
    inner: Arc<Parts>,
}

/// What the links service is made of.
pub(crate) struct Parts {
    pub cache: Arc<dyn LinkCache>,
    pub store: Arc<dyn LinkStore>,
    pub keys: Arc<KeyRegistry>,
    pub domains: Arc<DomainRegistry>,
    pub visits: Arc<Visits>,
    /// Tells the other instances on the same store what changed.
    pub invalidations: Option<Arc<Invalidations>>,
    pub create_auth: CreateAuth,
    /// The deny list, checked on every redirect.
    pub targets: Arc<TargetPolicy>,
    /// Hashing link passwords and checking guesses.
    pub passwords: Arc<Passwords>,
    /// The rate limits on creates.
    pub limiter: Arc<CreateLimiter>,
    /// Signed-in sessions.
    pub sessions: Arc<crate::sessions::Sessions>,
    /// Signing in through an identity provider, when one is set up.
    pub oidc: Option<Arc<crate::oidc::Oidc>>,
    /// Which destinations webhooks may have.
    pub webhooks: crate::webhooks::WebhookSettings,
}

/// Who asks, and from where: what the rules of the game read of a request
/// that writes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Asker<'a> {
    /// The key sent, if any.
    pub caller: Option<&'a Principal>,
    /// The client as the rate limits count it; `None` is not limited.
    pub client: Option<Client>,
    /// The request's own `host[:port]`, which no target may point at.
    pub host: Option<&'a str>,
}

/// Which create a body came to: one that names no domain means the
/// default domain on the seed API, and a domain-limited key's own on the
/// management API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateRoute {
    Seed,
    Api,
}

/// Whether `caller` may see `link`: its owner, an admin or a viewer.
/// A caller limited to a domain sees no link on another.
fn may_read(caller: &Principal, link: &Link) -> bool {
    on_domain(caller, link.domain) && (caller.reads_all() || owns(caller, link))
}

fn owns(caller: &Principal, link: &Link) -> bool {
    link.owner.as_ref().is_some_and(|o| o.id == caller.user)
}

/// Whether `caller` may change `link`: its owner (unless a viewer), or an
/// admin. Links without an owner are managed by admins only.
fn may_manage(caller: &Principal, link: &Link) -> bool {
    on_domain(caller, link.domain)
        && match caller.role {
            Role::Admin => true,
            Role::Member => owns(caller, link),
            Role::Viewer => false,
        }
}

/// Whether `caller` may see a protected link's target, rules and expired
/// target: its owner, or an admin.
pub(crate) fn sees_secrets(caller: &Principal, link: &Link) -> bool {
    caller.is_admin() || owns(caller, link)
}

/// Writing anything is for members and admins.
fn writer(caller: &Principal) -> Result<(), LinksError> {
    if caller.role == Role::Viewer {
        Err(LinksError::Forbidden("a viewer changes nothing"))
    } else {
        Ok(())
    }
}

/// Whether `caller` may work on `domain`.
fn on_domain(caller: &Principal, domain: DomainId) -> bool {
    caller.domain.is_none_or(|own| own == domain)
}

const OTHER_DOMAIN: &str = "this key is limited to another domain";

/// Changing the domains is an admin's to do.
fn admin(caller: &Principal) -> Result<(), LinksError> {
    if caller.is_admin() {
        Ok(())
    } else {
        Err(LinksError::Forbidden("this needs an admin key"))
    }
}

/// An expiry must be in the future when it is set.
fn future(at: Option<Timestamp>) -> Result<(), LinksError> {
    match at {
        Some(at) if at <= Timestamp::now() => Err(LinksError::Invalid(
            "field 'expires_at' must be in the future".into(),
        )),
        _ => Ok(()),
    }
}

/// Most links of a removed domain forgotten one by one, as deletes are.
const FORGET_ONE_BY_ONE: usize = 10_000;

impl Links {
    pub(crate) fn new(parts: Parts) -> Self {
        Self {
            inner: Arc::new(parts),
        }
    }

    /// Whether this instance can take traffic: see [`Readiness`].
    pub(crate) async fn readiness(&self) -> Readiness {
        if let Some(reason) = self.inner.store.unwritable() {
            return Readiness::Unavailable(reason);
        }
        match (self.inner.cache.check().await, self.inner.store.degraded()) {
            (Ok(()), None) => Readiness::Ready,
            (Err(reason), None) | (Ok(()), Some(reason)) => Readiness::Degraded(reason),
            (Err(cache), Some(store)) => Readiness::Degraded(format!("{cache}; {store}")),
        }
    }

    pub(crate) fn keys(&self) -> &Arc<KeyRegistry> {
        &self.inner.keys
    }

    pub(crate) fn domains(&self) -> &Arc<DomainRegistry> {
        &self.inner.domains
    }

    pub(crate) fn visits(&self) -> &Arc<Visits> {
        &self.inner.visits
    }

    /// Where `code` leads; a served redirect ([`Use::Visit`]) is counted,
    /// and a link that has served its `max_visits` is [`Resolution::Exhausted`].
    pub(crate) async fn resolve(
        &self,
        code: &LinkKey,
        how: Use<'_>,
    ) -> Result<Resolution, LinksError> {
        match self.resolve_now(code, how) {
            Ok(resolution) => Ok(resolution),
            Err(later) => self.resolve_later(code, how, later).await,
        }
    }

    /// What a redirect of `code` would serve now, counting nothing: its
    /// target (its default one, whatever rules would choose), or its expired
    /// URL; `None` for a code that is unknown, used up, expired without an
    /// expired URL, behind a password, or whose target the deny list now
    /// refuses. Every answer that shows a link's target to someone who
    /// may not manage it asks this.
    pub(crate) async fn serves_now(&self, code: &LinkKey) -> Result<Option<TargetUrl>, LinksError> {
        Ok(match self.resolve(code, Use::Look).await? {
            Resolution::Found(target) => Some(target),
            Resolution::Unlocked(_)
            | Resolution::Locked
            | Resolution::WrongPassword
            | Resolution::Expired
            | Resolution::Exhausted
            | Resolution::Blocked
            | Resolution::Missing => None,
        })
    }

    /// [`Links::resolve`] as far as it goes without waiting: on a hit of an
    /// in-process cache of a link without a visit limit, the answer;
    /// otherwise what is left for [`Links::resolve_later`].
    pub(crate) fn resolve_now(&self, code: &LinkKey, how: Use<'_>) -> Result<Resolution, Later> {
        let Some(known) = self.inner.cache.get_now(code) else {
            return Err(Later(None));
        };
        match known {
            Lookup::Found(link) if self.inner.targets.blocks(&link.target) => {
                Ok(Resolution::Blocked)
            }
            Lookup::Found(link) if link.is_expired() => {
                Ok(self.expired(&link, Resolution::Expired))
            }
            Lookup::Found(link) if link.extra.is_some() => match self.ruled_now(code, &link, how) {
                Some(resolution) => Ok(resolution),
                None => Err(Later(Some(Lookup::Found(link)))),
            },
            Lookup::Found(link) if link.max_visits.is_none() => {
                if let Use::Visit(visit) = how {
                    self.inner.visits.record(code, visit, &link.target);
                }
                Ok(Resolution::Found(link.target))
            }
            Lookup::Missing => Ok(Resolution::Missing),
            // A limit's counter may have to be read from the store; a code
            // the cache does not know, from the store itself.
            other => Err(Later(Some(other))),
        }
    }

    /// The rest of a [`Links::resolve_now`] that could not finish.
    pub(crate) async fn resolve_later(
        &self,
        code: &LinkKey,
        how: Use<'_>,
        later: Later,
    ) -> Result<Resolution, LinksError> {
        let known = match later.0 {
            Some(known) => known,
            None => self.inner.cache.get_rest(code).await,
        };
        let Some(link) = self.fill(code, known).await? else {
            return Ok(Resolution::Missing);
        };
        if self.inner.targets.blocks(&link.target) {
            return Ok(Resolution::Blocked);
        }
        if link.is_expired() {
            return Ok(self.expired(&link, Resolution::Expired));
        }
        let mut how = how;
        let mut target = &link.target;
        let mut unlocked = false;
        if let Some(extra) = &link.extra {
            if let Some(hash) = &extra.password {
                // A HEAD is answered 401 with no guess checked: guessing
                // goes through a GET or the form.
                let Use::Visit(visit) = how else {
                    return Ok(Resolution::Locked);
                };
                let Some(guess) = visit.password else {
                    return Ok(Resolution::Locked);
                };
                let right = self
                    .inner
                    .passwords
                    .check(code, visit.client, hash, guess)
                    .await?;
                if !right {
                    return Ok(Resolution::WrongPassword);
                }
                unlocked = true;
            }
            if let Use::Visit(visit) | Use::Head(visit) = &mut how {
                target = self.choose(&extra.rules, visit).unwrap_or(&link.target);
                if self.inner.targets.blocks(target) {
                    return Ok(Resolution::Blocked);
                }
            }
        }
        let served = match (link.max_visits, how) {
            (None, Use::Visit(visit)) => {
                self.inner.visits.record(code, visit, target);
                true
            }
            (None, Use::Look | Use::Head(_)) => true,
            (Some(max), Use::Visit(visit)) => {
                self.inner.visits.take(code, max, visit, target).await?
            }
            (Some(max), Use::Look | Use::Head(_)) => self.inner.visits.left(code, max).await?,
        };
        Ok(if served && unlocked {
            Resolution::Unlocked(target.clone())
        } else if served {
            Resolution::Found(target.clone())
        } else {
            self.expired(&link, Resolution::Exhausted)
        })
    }

    /// [`Self::resolve_now`] of a link with a password, rules or an expired
    /// target (live, and not blocked): `None` when it must go on later (a
    /// password to check, a limit to take, a country rule without the
    /// visitor's address).
    fn ruled_now(&self, code: &LinkKey, link: &Resolved, how: Use<'_>) -> Option<Resolution> {
        let extra = link.extra.as_deref()?;
        if extra.password.is_some() || link.max_visits.is_some() {
            return None;
        }
        let (mut visit, counted) = match how {
            Use::Visit(visit) => (visit, true),
            Use::Head(visit) => (visit, false),
            Use::Look => return Some(Resolution::Found(link.target.clone())),
        };
        let wants_place = extra.rules.iter().any(|r| !r.when.country.is_empty());
        if wants_place && visit.client.is_none() && visit.country.is_none() {
            return None;
        }
        let target = self
            .choose(&extra.rules, &mut visit)
            .unwrap_or(&link.target);
        if self.inner.targets.blocks(target) {
            return Some(Resolution::Blocked);
        }
        if counted {
            self.inner.visits.record(code, visit, target);
        }
        Some(Resolution::Found(target.clone()))
    }

    /// An expired or exhausted link's own `expired_url`, or else
    /// `otherwise` (which the domain's expired redirect may stand in for).
    /// Counts no visit. A target on the deny list as it is now is blocked,
    /// as a link's own URL is.
    fn expired(&self, link: &Resolved, otherwise: Resolution) -> Resolution {
        match link.extra.as_deref().and_then(|e| e.expired_url.as_ref()) {
            Some(url) if self.inner.targets.blocks(url) => Resolution::Blocked,
            Some(url) => Resolution::Found(url.clone()),
            None => otherwise,
        }
    }

    /// What a redirect on `domain` serves when there is no link to serve:
    /// the domain's not-found or expired redirect, when it has one and its
    /// target is not on the deny list as it is now.
    pub(crate) fn fallback(&self, domain: DomainId, resolution: Resolution) -> Resolution {
        let redirects = || self.inner.domains.redirects(domain);
        let elsewhere = match resolution {
            Resolution::Missing => redirects().not_found,
            Resolution::Expired | Resolution::Exhausted => redirects().expired,
            _ => None,
        };
        match elsewhere {
            Some(url) if !self.inner.targets.blocks(&url) => Resolution::Found(url),
            _ => resolution,
        }
    }

    /// The target of the first of `rules` that holds for `visit`, with the
    /// rule's value for counting (`None`: no rule held).
    /// Sets the visit's rule, and its agent when a rule read it.
    fn choose<'r>(&self, rules: &'r [Rule], visit: &mut Visit<'_>) -> Option<&'r TargetUrl> {
        if rules.is_empty() {
            visit.rule = Facets::NO_RULES;
            return None;
        }
        let mut facts = VisitFacts {
            visit,
            visits: &self.inner.visits,
            agent: None,
            language: None,
            now: None,
        };
        let chosen = rules::choose(rules, &mut facts);
        let agent = facts.agent;
        visit.agent = agent;
        match chosen {
            Some((index, target)) => {
                visit.rule = Facets::rule_of(Some(index));
                Some(target)
            }
            None => {
                visit.rule = Facets::FELL_THROUGH;
                None
            }
        }
    }

    /// The link, from what the cache said or else from the store (which
    /// then fills the cache).
    async fn fill(&self, code: &LinkKey, known: Lookup) -> Result<Option<Resolved>, StoreError> {
        Ok(match known {
            Lookup::Found(link) => Some(link),
            Lookup::Missing => None,
            Lookup::Unknown => {
                let generation = self.inner.cache.generation();
                let found = self.inner.store.get(code).await?;
                if self.inner.cache.generation() == generation {
                    match &found {
                        Some(link) => self.inner.cache.put(code, link).await,
                        None => self.inner.cache.put_missing(code).await,
                    }
                }
                found
            }
        })
    }

    /// Whether `caller` (`None`: no key) may create a link, choosing its
    /// code or not.
    fn may_create(
        &self,
        caller: Option<&Principal>,
        choosing_code: bool,
    ) -> Result<(), LinksError> {
        if let Some(caller) = caller {
            writer(caller)?;
        } else {
            if self.inner.create_auth == CreateAuth::Key {
                return Err(LinksError::NeedsKey(
                    "creating links needs an API key on this server",
                ));
            }
            if choosing_code {
                return Err(LinksError::NeedsKey("choosing a code needs an API key"));
            }
        }
        Ok(())
    }

    /// Which domains `caller` may read: `None` for all of them (an admin,
    /// a key not limited to a domain, or no key while anyone may create
    /// links and so needs the page's picker), the one it is limited to, or
    /// a refusal without a key where creating needs one.
    pub(crate) fn visible_domains(
        &self,
        caller: Option<&Principal>,
    ) -> Result<Option<DomainId>, LinksError> {
        match caller {
            Some(c) => Ok(c.domain),
            None if self.inner.create_auth == CreateAuth::Key => Err(LinksError::NeedsKey(
                "reading the domains needs an API key on this server",
            )),
            None => Ok(None),
        }
    }

    /// Creates a link from `body` for `asker`, who owns it: who may
    /// create (and choose a code) first, then the rate limit, then each
    /// target against the server's policy, the domain, the expiry, and the
    /// password's hash last, when everything cheap to refuse has been.
    /// Stored durably, then written through to the cache, so the cache
    /// never holds a code the store could lose.
    pub(crate) async fn create(
        &self,
        asker: &Asker<'_>,
        body: NewLinkBody,
        route: CreateRoute,
    ) -> Result<Link, LinksError> {
        let caller = asker.caller;
        self.may_create(caller, body.code.is_some())?;
        self.inner.limiter.check(asker.client, caller)?;
        let domain = match &body.domain {
            Some(name) => self.domain_named(name)?,
            None if route == CreateRoute::Api => {
                caller.and_then(|c| c.domain).unwrap_or(DomainId::DEFAULT)
            }
            None => DomainId::DEFAULT,
        };
        self.store_new(asker, body, domain).await
    }

    /// The rest of a create, once who may create and the rate limit have
    /// let it through: the checks on what it holds, then the store.
    async fn store_new(
        &self,
        asker: &Asker<'_>,
        body: NewLinkBody,
        domain: DomainId,
    ) -> Result<Link, LinksError> {
        let caller = asker.caller;
        self.check_target(None, &body.url, asker.host)?;
        if caller.is_some_and(|c| !on_domain(c, domain)) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        future(body.expires_at)?;
        let rules = body.rules.map(|r| r.0).unwrap_or_default();
        self.check_rules(&rules, asker.host)?;
        if let Some(url) = &body.expired_url {
            self.check_target(Some("expired_url"), url, asker.host)?;
        }
        let password = match body.password {
            Some(p) => Some(self.inner.passwords.hash(p.into_string()).await?),
            None => None,
        };
        let labels = crate::domain::Labels {
            title: body.title.map(|t| t.0),
            tags: body.tags.map(|t| t.0).unwrap_or_default(),
        };
        let new = NewLink {
            domain,
            target: body.url,
            code: body.code.map(|a| a.0),
            expires_at: body.expires_at,
            owner: caller.map(Principal::owner),
            max_visits: body.max_visits,
            extra: crate::domain::extra_of(crate::domain::LinkRules {
                password,
                rules,
                expired_url: body.expired_url,
            }),
            labels,
        };
        let link = self.inner.store.create(new).await?;
        let key = link.key();
        self.inner.cache.put(&key, &link.resolved()).await;
        // Others may remember the code as unknown.
        self.announce(&key).await;
        Ok(link)
    }

    /// A target checked against the server's policy (the deny list, its
    /// own hosts, private addresses); `field` names it in the error.
    fn check_target(
        &self,
        field: Option<&str>,
        url: &TargetUrl,
        host: Option<&str>,
    ) -> Result<(), LinksError> {
        let named = |e: &dyn std::fmt::Display| {
            LinksError::Invalid(match field {
                Some(field) => format!("{field}: {e}"),
                None => e.to_string(),
            })
        };
        self.target_problem(url, host).map_err(|e| named(&e))
    }

    /// What the server's policy refuses of a target, if anything; a
    /// target on one of this server's domains is its own host.
    fn target_problem(
        &self,
        url: &TargetUrl,
        host: Option<&str>,
    ) -> Result<(), crate::domain::TargetUrlError> {
        self.inner.targets.check(url, host)?;
        if self.inner.domains.serves(url.host_str()) {
            return Err(crate::domain::TargetUrlError::OwnHost);
        }
        Ok(())
    }

    /// Every target of `rules`, checked as a link's URL is; an error names
    /// the rule's index and field (`rules[1].split[0].url`).
    fn check_rules(&self, rules: &[Rule], host: Option<&str>) -> Result<(), LinksError> {
        for (at, url) in crate::domain::Rules::targets(rules) {
            self.check_target(Some(&at), url, host)?;
        }
        Ok(())
    }

    /// A domain's redirects, each checked as a link's URL is.
    fn check_redirects(
        &self,
        redirects: &crate::domain::DomainRedirects,
        host: Option<&str>,
    ) -> Result<(), LinksError> {
        for (field, url) in [
            ("root_redirect", &redirects.root),
            ("not_found_redirect", &redirects.not_found),
            ("expired_redirect", &redirects.expired),
        ] {
            if let Some(url) = url {
                self.check_target(Some(field), url, host)?;
            }
        }
        Ok(())
    }

    /// The domain a user names (a host in either form, or `default`): 400
    /// when no such domain is in use.
    pub(crate) fn domain_named(&self, name: &str) -> Result<DomainId, LinksError> {
        self.inner
            .domains
            .named(name)
            .ok_or_else(|| LinksError::Invalid(format!("no domain '{name}' on this server")))
    }

    /// `link` as the management API shows it, at `short_url`; without
    /// `secrets`, a protected link's targets are left out.
    pub(crate) fn view(&self, link: Link, short_url: String, secrets: bool) -> LinkView {
        let domain = self
            .inner
            .domains
            .host_of(link.domain)
            .map(|h| h.to_string());
        LinkView::new(link, domain, short_url, secrets)
    }

    /// The link `caller` may manage; `None` also when it may not see it.
    /// Its `visits` include those not yet flushed.
    pub(crate) async fn get(
        &self,
        caller: &Principal,
        code: &LinkKey,
    ) -> Result<Option<Link>, LinksError> {
        let _gate = self.inner.visits.read_gate().await;
        let link = self.inner.store.link(code).await?;
        Ok(link
            .filter(|link| may_read(caller, link))
            .map(|link| self.with_pending(link)))
    }

    /// [`Self::get`], for a change: a link `caller` sees but may not
    /// change (a viewer's) is refused.
    async fn get_to_change(
        &self,
        caller: &Principal,
        code: &LinkKey,
    ) -> Result<Option<Link>, LinksError> {
        match self.get(caller, code).await? {
            Some(link) if !may_manage(caller, &link) => {
                writer(caller)?;
                Err(LinksError::Forbidden("this link is another user's"))
            }
            found => Ok(found),
        }
    }

    fn with_pending(&self, mut link: Link) -> Link {
        link.visits = link
            .visits
            .saturating_add(self.inner.visits.pending(&link.key()).total());
        link
    }

    /// Every visit count of a link `caller` may manage, flushed or not.
    pub(crate) async fn visit_counts(
        &self,
        caller: &Principal,
        code: &LinkKey,
    ) -> Result<Option<VisitCounts>, LinksError> {
        if self.get(caller, code).await?.is_none() {
            return Ok(None);
        }
        let _gate = self.inner.visits.read_gate().await;
        let Some(mut counts) = self.inner.store.visit_counts(code).await? else {
            return Ok(None);
        };
        counts.merge(self.inner.visits.pending(code));
        Ok(Some(counts))
    }

    /// The visits of every link `caller` may manage (on `domain`, when
    /// named), summed: what is stored and what waits in memory.
    pub(crate) async fn visit_totals(
        &self,
        caller: &Principal,
        domain: Option<DomainId>,
    ) -> Result<VisitCounts, LinksError> {
        if domain.is_some_and(|d| !on_domain(caller, d)) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        let scope = VisitScope {
            owner: (!caller.reads_all()).then_some(caller.user),
            domain: domain.or(caller.domain),
        };
        let _gate = self.inner.visits.read_gate().await;
        let mut counts = self.inner.store.visit_totals(scope).await?;
        for (_, pending) in self.pending_in(scope).await? {
            counts.merge(pending);
        }
        Ok(counts)
    }

    /// The visits counted since the last flush, of the links in `scope`;
    /// only links visited within one flush interval wait here. Read under
    /// the visits' read gate, with what is stored.
    async fn pending_in(
        &self,
        scope: VisitScope,
    ) -> Result<Vec<(LinkKey, VisitCounts)>, LinksError> {
        let mut found = Vec::new();
        for (key, pending) in self.inner.visits.pending_all() {
            if scope.domain.is_some_and(|d| d != key.domain) {
                continue;
            }
            if let Some(owner) = scope.owner {
                let link = self.inner.store.link(&key).await?;
                let owned = link.and_then(|l| l.owner).is_some_and(|o| o.id == owner);
                if !owned {
                    continue;
                }
            }
            found.push((key, pending));
        }
        Ok(found)
    }

    /// Changes a link; every cache tier forgets the old version before this
    /// returns, so the next redirect goes to the new target. Its `visits`
    /// include those not yet flushed, as every link object's do.
    /// Each new target is checked as a create's, and a new password is
    /// hashed, only once `caller` is known to manage the link.
    pub(crate) async fn update(
        &self,
        asker: &Asker<'_>,
        caller: &Principal,
        code: &LinkKey,
        body: LinkPatchBody,
    ) -> Result<Option<Link>, LinksError> {
        if self.get_to_change(caller, code).await?.is_none() {
            return Ok(None);
        }
        if let Some(url) = &body.url {
            self.check_target(None, url, asker.host)?;
        }
        if let Patch::Set(at) = body.expires_at {
            future(Some(at))?;
        }
        let rules = body
            .rules
            .into_option()
            .map(|r| r.map(|r| r.0).unwrap_or_default());
        if let Some(rules) = &rules {
            self.check_rules(rules, asker.host)?;
        }
        if let Patch::Set(url) = &body.expired_url {
            self.check_target(Some("expired_url"), url, asker.host)?;
        }
        let password = match body.password {
            Patch::Keep => None,
            Patch::Clear => Some(None),
            Patch::Set(p) => Some(Some(self.inner.passwords.hash(p.into_string()).await?)),
        };
        let patch = LinkPatch {
            target: body.url,
            expires_at: body.expires_at.into_option(),
            max_visits: body.max_visits.into_option(),
            password,
            rules,
            expired_url: body.expired_url.into_option(),
            title: body.title.into_option().map(|t| t.map(|t| t.0)),
            tags: match body.tags {
                Patch::Keep => None,
                Patch::Clear => Some(Vec::new()),
                Patch::Set(tags) => Some(tags.0),
            },
        };
        let updated = {
            // Read with the visits still in memory, as `get` reads them.
            let _gate = self.inner.visits.read_gate().await;
            self.inner
                .store
                .update(code, patch)
                .await?
                .map(|link| self.with_pending(link))
        };
        self.inner.cache.invalidate(code).await;
        self.announce(code).await;
        Ok(updated)
    }

    /// Deletes a link; gone from every cache tier before this returns.
    pub(crate) async fn delete(
        &self,
        caller: &Principal,
        code: &LinkKey,
    ) -> Result<bool, LinksError> {
        if self.get_to_change(caller, code).await?.is_none() {
            return Ok(false);
        }
        let deleted = self.inner.store.delete(code).await?;
        self.inner.cache.invalidate(code).await;
        self.announce(code).await;
        self.inner.visits.forget(code);
        Ok(deleted)
    }

    /// Publishes a change to the other instances, before the caller hears
    /// of it.
    async fn announce(&self, code: &LinkKey) {
        if let Some(bus) = &self.inner.invalidations {
            bus.publish(code, self.inner.store.position()).await;
        }
    }

    /// A page of the links `caller` may manage, newest first (on `domain`
    /// only, when given; with every one of `tags`, when given).
    pub(crate) async fn list(
        &self,
        caller: &Principal,
        domain: Option<DomainId>,
        limit: usize,
        before: Option<i64>,
        q: Option<String>,
        tags: &Tags,
    ) -> Result<ListPage, LinksError> {
        if domain.is_some_and(|d| !on_domain(caller, d)) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        let query = ListQuery {
            owner: (!caller.reads_all()).then_some(caller.user),
            domain: domain.or(caller.domain),
            limit,
            before,
            q,
            searcher: (!caller.is_admin()).then_some(caller.user),
            tags: tags.0.iter().map(|t| fold_tag(t)).collect(),
        };
        let _gate = self.inner.visits.read_gate().await;
        let mut page = self.inner.store.list(query).await?;
        page.links = page
            .links
            .into_iter()
            .map(|l| self.with_pending(l))
            .collect();
        Ok(page)
    }

    /// The tags of the links `caller` may manage, with how many have each.
    pub(crate) async fn tags(&self, caller: &Principal) -> Result<Vec<TagCount>, LinksError> {
        let scope = VisitScope {
            owner: (!caller.reads_all()).then_some(caller.user),
            domain: caller.domain,
        };
        Ok(self.inner.store.tags(scope).await?)
    }

    pub(crate) fn stats(&self) -> LinkStats {
        LinkStats {
            store: self.inner.store.stats(),
            cache: self.inner.cache.stats(),
            invalidations: self.inner.invalidations.as_ref().map(|i| i.stats()),
            visits: self.inner.visits.stats(),
        }
    }

    /// Every domain `caller` may read, the default one first.
    pub(crate) fn domains_for(&self, caller: Option<&Principal>) -> Result<Vec<Named>, LinksError> {
        let only = self.visible_domains(caller)?;
        Ok(self
            .inner
            .domains
            .list()
            .into_iter()
            .filter(|d| only.is_none_or(|id| id == d.domain.id))
            .collect())
    }

    /// The domain `name` names, if `caller` may read it (`None` also when
    /// it may not: a domain-limited key sees only its own).
    pub(crate) fn domain_for(
        &self,
        caller: Option<&Principal>,
        name: &str,
    ) -> Result<Option<Named>, LinksError> {
        let only = self.visible_domains(caller)?;
        Ok(self
            .inner
            .domains
            .named(name)
            .filter(|id| only.is_none_or(|own| own == *id))
            .and_then(|id| self.inner.domains.get(id)))
    }

    /// Adds a domain: an admin's to do.
    pub(crate) async fn add_domain(
        &self,
        asker: &Asker<'_>,
        caller: &Principal,
        body: NewDomainBody,
    ) -> Result<Named, LinksError> {
        admin(caller)?;
        self.check_redirects(&body.redirects(), asker.host)?;
        Ok(self.inner.domains.add(&body.host, body.redirects()).await?)
    }

    /// Changes the redirects of the domain `name` names: an admin's to do;
    /// `None` when there is no such domain.
    pub(crate) async fn change_domain(
        &self,
        asker: &Asker<'_>,
        caller: &Principal,
        name: &str,
        body: DomainPatchBody,
    ) -> Result<Option<Named>, LinksError> {
        admin(caller)?;
        let Some(id) = self.inner.domains.named(name) else {
            return Ok(None);
        };
        let redirects = body.apply(self.inner.domains.redirects(id));
        self.check_redirects(&redirects, asker.host)?;
        Ok(self.inner.domains.set(id, redirects).await?)
    }

    /// Removes the added domain `name` names (an admin's to do; never the
    /// default one); with `force`, its links go too, from every cache tier
    /// and every instance, as deletes do. Past [`FORGET_ONE_BY_ONE`] links
    /// the in-process tier is emptied instead, and other instances stop
    /// answering on the domain when they next read the domains (within a
    /// second); its id is never reused, so nothing cached under it is
    /// found after that. `None` when there is no such domain.
    pub(crate) async fn remove_domain(
        &self,
        caller: &Principal,
        name: &str,
        force: bool,
    ) -> Result<Option<u64>, LinksError> {
        admin(caller)?;
        let Some(id) = self.inner.domains.named(name) else {
            return Ok(None);
        };
        if id.is_default() {
            return Err(LinksError::Conflict(format!(
                "the default domain ('{}') cannot be removed",
                crate::domain::DEFAULT_NAME
            )));
        }
        let Some(gone) = self.inner.domains.remove(id, force).await? else {
            return Ok(None);
        };
        // The keys limited to it were revoked with it: at once here, not
        // at the next reload.
        if let Err(e) = self.inner.keys.refresh().await {
            tracing::warn!(error = %e, "cannot reload API keys after removing a domain");
        }
        if gone.len() > FORGET_ONE_BY_ONE {
            self.inner.cache.set_local(false);
            self.inner.cache.set_local(true);
        } else {
            for code in &gone {
                let key = LinkKey::new(id, code.clone());
                self.inner.cache.invalidate(&key).await;
                self.announce(&key).await;
                self.inner.visits.forget(&key);
            }
        }
        Ok(Some(gone.len() as u64))
    }

    /// Writes pending visits and key uses, commits what is queued and
    /// closes the store.
    pub(crate) async fn close(&self) {
        if let Err(e) = self.inner.visits.flush().await {
            tracing::error!(error = %e, "could not write the last visit counts");
        }
        if let Err(e) = self.inner.keys.flush(true).await {
            tracing::warn!(error = %e, "could not record the last use of API keys");
        }
        self.inner.store.close().await;
    }
}
