//! The rules of the YOURLS API (`/yourls-api.php`): who a request is, by
//! YOURLS's own ways of saying it, and what each of its actions may read
//! or write. Its answers' shapes are the HTTP layer's; what they say is
//! decided here, under the same rules as the rest of the service.

use std::net::IpAddr;

use super::{Links, LinksError, OTHER_DOMAIN, on_domain, sees_secrets};
use crate::domain::{Alias, DomainId, Link, LinkKey, TargetUrl, Title};
use crate::keys::{AuthError, Principal, SignatureHash, Via};
use crate::store::{LinkTotals, Rank, RankQuery, StoreError, VisitScope};

use super::Asker;
use super::bodies::NewLinkBody;

/// Most links one `stats` answer lists.
pub(crate) const MAX_STATS_LIMIT: usize = 1000;

/// How a request says who it is, as YOURLS reads its parameters: a
/// parameter sent empty counts as absent, except that `username` or
/// `password` sent at all changes the refusal's words.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct YourlsAuth<'a> {
    pub signature: Option<&'a str>,
    /// `Some("")` when sent empty: the plain signature form is then not
    /// tried, as in YOURLS.
    pub timestamp: Option<&'a str>,
    pub hash: Option<&'a str>,
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
}

/// Why the YOURLS API refused who a request says it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum YourlsRefusal {
    /// YOURLS's own words: `Please log in`, or `Invalid username or
    /// password` when a name or password was sent.
    #[error("{0}")]
    Auth(&'static str),
    #[error(transparent)]
    Links(#[from] LinksError),
}

impl From<StoreError> for YourlsRefusal {
    fn from(e: StoreError) -> Self {
        Self::Links(e.into())
    }
}

impl From<crate::passwords::PasswordError> for YourlsRefusal {
    fn from(e: crate::passwords::PasswordError) -> Self {
        Self::Links(e.into())
    }
}

const PLEASE_LOG_IN: &str = "Please log in";
const INVALID_CREDENTIALS: &str = "Invalid username or password";

impl YourlsAuth<'_> {
    /// The refusal for these credentials, in YOURLS's words.
    pub(crate) fn refusal(&self) -> YourlsRefusal {
        if self.username.is_some() || self.password.is_some() {
            YourlsRefusal::Auth(INVALID_CREDENTIALS)
        } else {
            YourlsRefusal::Auth(PLEASE_LOG_IN)
        }
    }
}

fn sent(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.is_empty())
}

/// What `shorturl` did.
#[derive(Debug)]
pub(crate) enum Shortened {
    Created(Link),
    /// The caller already has a link to that URL on that domain.
    Exists(Link),
    /// The URL is a short URL of this server's.
    Loop,
    /// The keyword is taken (or was: deleted codes stay theirs).
    Taken,
}

/// What `shorturl` is asked.
#[derive(Debug)]
pub(crate) struct ShortenRequest {
    pub domain: DomainId,
    pub url: TargetUrl,
    pub keyword: Option<Alias>,
    pub title: Option<Title>,
}

impl Links {
    /// Who a YOURLS API request is: `None` without credentials. The timed
    /// signature first, then the plain one, then a name and password, as
    /// YOURLS 1.10.4 tries them; wrong signatures count toward the
    /// client's sign-in bounds, as wrong passwords do.
    pub(crate) async fn yourls_caller(
        &self,
        auth: &YourlsAuth<'_>,
        client: Option<IpAddr>,
    ) -> Result<Option<Principal>, YourlsRefusal> {
        let signature = sent(auth.signature);
        let timestamp = sent(auth.timestamp);
        if let Some(signature) = signature
            && (timestamp.is_some() || auth.timestamp.is_none())
        {
            if !self.inner.keys.signs() {
                return Err(auth.refusal());
            }
            let timed = match timestamp {
                None => None,
                Some(at) => {
                    let hash = auth.hash.unwrap_or("md5");
                    match hash.parse::<SignatureHash>() {
                        Ok(hash) => Some((at, hash)),
                        Err(_) => return Err(auth.refusal()),
                    }
                }
            };
            self.inner.passwords.admit_signature(client)?;
            return match self.inner.keys.authenticate_signature(signature, timed) {
                Ok(principal) => {
                    self.inner.passwords.right_signature(client);
                    Ok(Some(principal))
                }
                Err(AuthError::Unknown) => {
                    self.inner.passwords.failed_signature(client);
                    Err(auth.refusal())
                }
                Err(AuthError::Revoked) => Err(auth.refusal()),
            };
        }
        if let (Some(name), Some(password)) = (sent(auth.username), sent(auth.password)) {
            return match self.password_principal(name, password, client).await? {
                Some(principal) => Ok(Some(principal)),
                None => Err(auth.refusal()),
            };
        }
        if signature.is_some() || auth.username.is_some() || auth.password.is_some() {
            // Credentials of no form YOURLS takes whole.
            return Err(auth.refusal());
        }
        Ok(None)
    }

    /// The local account `name` signs in with `password` as, through the
    /// sign-in bounds; `None` for a wrong name or password.
    async fn password_principal(
        &self,
        name: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<Option<Principal>, YourlsRefusal> {
        if !self.inner.sessions.local_login() {
            return Ok(None);
        }
        let Some(user) = self.checked_user(name, password, client).await? else {
            return Ok(None);
        };
        if user.must_change {
            return Err(LinksError::Forbidden(
                "change your one-time password first (/account/password)",
            )
            .into());
        }
        Ok(Some(Principal {
            user: user.id,
            name: user.name,
            role: user.role,
            domain: user.domain,
            via: Via::Password,
        }))
    }

    /// `shorturl`: the caller's existing link to the URL on the domain,
    /// else a new one. Who may create, the rate limit and the target's
    /// checks come first, as for every create; anonymous callers find
    /// only links without an owner.
    pub(crate) async fn yourls_shorten(
        &self,
        asker: &Asker<'_>,
        ask: ShortenRequest,
    ) -> Result<Shortened, LinksError> {
        let caller = asker.caller;
        self.may_create(caller, ask.keyword.is_some())?;
        if caller.is_some_and(|c| !on_domain(c, ask.domain)) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        match self.target_problem(&ask.url, asker.host) {
            Err(crate::domain::TargetUrlError::OwnHost) => return Ok(Shortened::Loop),
            Err(e) => return Err(LinksError::Invalid(e.to_string())),
            Ok(()) => {}
        }
        self.inner.limiter.check(asker.client, caller)?;
        let owner = caller.map(|c| c.user);
        let existing = self
            .inner
            .store
            .links_to(ask.domain, &ask.url)
            .await?
            .into_iter()
            .find(|l| l.owner.as_ref().map(|o| o.id) == owner);
        if let Some(link) = existing {
            return Ok(Shortened::Exists(self.with_pending(link)));
        }
        let body = NewLinkBody {
            url: ask.url,
            code: ask.keyword,
            domain: None,
            expires_at: None,
            max_visits: None,
            password: None,
            rules: None,
            expired_url: None,
            title: ask.title,
            tags: None,
        };
        match self.store_new(asker, body, ask.domain).await {
            Ok(link) => Ok(Shortened::Created(link)),
            Err(LinksError::Store(StoreError::CodeTaken(_))) => Ok(Shortened::Taken),
            Err(e) => Err(e),
        }
    }

    /// `expand`: the link, and what a redirect of it would serve now (its
    /// target, or its expired URL), for anyone; a link behind a password,
    /// used up, expired without an expired URL or on the deny list is
    /// answered as an unknown code.
    pub(crate) async fn yourls_expand(
        &self,
        key: &LinkKey,
    ) -> Result<Option<(Link, TargetUrl)>, LinksError> {
        let Some(link) = self.inner.store.link(key).await?.filter(|l| !protected(l)) else {
            return Ok(None);
        };
        Ok(self.serves_now(key).await?.map(|target| (link, target)))
    }

    /// `url-stats`: a link `caller` may manage, with its visits; a link
    /// behind a password only for those who see its target.
    pub(crate) async fn yourls_link(
        &self,
        caller: &Principal,
        key: &LinkKey,
    ) -> Result<Option<Link>, LinksError> {
        if !on_domain(caller, key.domain) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        Ok(self
            .get(caller, key)
            .await?
            .filter(|l| !protected(l) || sees_secrets(caller, l)))
    }

    /// `stats` and `db-stats`: how many links `caller` may manage on
    /// `domain` and their visits, with a page of them in `rank`'s order
    /// when `limit` is above 0 (at most [`MAX_STATS_LIMIT`]). A link behind
    /// a password is counted, but listed only for those who see its
    /// target, as `url-stats` answers.
    pub(crate) async fn yourls_stats(
        &self,
        caller: &Principal,
        domain: DomainId,
        page: Option<(Rank, u64, usize)>,
    ) -> Result<(LinkTotals, Vec<Link>), LinksError> {
        if !on_domain(caller, domain) {
            return Err(LinksError::Forbidden(OTHER_DOMAIN));
        }
        let scope = VisitScope {
            owner: (!caller.reads_all()).then_some(caller.user),
            domain: Some(domain),
        };
        let _gate = self.inner.visits.read_gate().await;
        let mut totals = self.inner.store.totals(scope).await?;
        for (_, pending) in self.pending_in(scope).await? {
            totals.visits = totals.visits.saturating_add(pending.total());
        }
        let links = match page {
            Some((rank, offset, limit)) if limit > 0 => self
                .inner
                .store
                .ranked(RankQuery {
                    scope,
                    rank,
                    offset,
                    limit: limit.min(MAX_STATS_LIMIT),
                })
                .await?
                .into_iter()
                .filter(|l| !protected(l) || sees_secrets(caller, l))
                .map(|l| self.with_pending(l))
                .collect(),
            _ => Vec::new(),
        };
        Ok((totals, links))
    }
}

/// Whether a link is behind a password.
fn protected(link: &Link) -> bool {
    link.extra.as_ref().is_some_and(|e| e.password.is_some())
}
