//! Signed-in sessions: their cookie, and the session each one names.
//!
//! A session id is 43 random base62 characters (about 256 bits); the store
//! keeps only its SHA-256, so that a copy of the database signs no one in.
//! A session ends at sign-out, after [`AccountSettings::session_idle`]
//! without a request, [`AccountSettings::session_max`] after it began, and
//! at once when its user is disabled or given another role. When it was
//! last seen is written at most once a minute. Accounts need the public
//! URL: it decides the cookie's `Secure` flag and the one origin whose
//! forms and scripts may write with the cookie.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use rand::distr::{Alphanumeric, SampleString};

use crate::domain::Timestamp;
use crate::keys::{Principal, Via};
use crate::store::{LinkStore, SessionWrite, StoreError, User};

/// The session cookie's name under a plain-http public URL.
pub const COOKIE: &str = "litelink_session";
/// The session cookie's name under an https public URL: the `__Host-`
/// prefix makes browsers take it only from this host, `Secure`, with
/// `Path=/` and no `Domain`, so that a sibling subdomain cannot plant one.
pub const HOST_COOKIE: &str = "__Host-litelink_session";

/// Least time between two writes of one session's last sight.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// Sessions whose last write is remembered here; past it, the oldest
/// memories go (they only save writes).
const REMEMBERED: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSettings {
    /// A session unused this long is over (`--session-idle`).
    pub session_idle: Duration,
    /// A session is over this long after it began (`--session-max`).
    pub session_max: Duration,
    /// Whether people may sign in with a local password (`--local-login`).
    pub local_login: bool,
    /// Signing in through an identity provider (`--oidc-*`).
    pub oidc: crate::oidc::OidcSettings,
    /// The secret of the YOURLS API's signature tokens
    /// (`--yourls-secret-file`); without it, `signature=` is off.
    pub yourls_secret_file: Option<std::path::PathBuf>,
    /// How far from now a timed YOURLS signature may be
    /// (`--yourls-signature-window`).
    pub yourls_signature_window: Duration,
}

impl Default for AccountSettings {
    fn default() -> Self {
        Self {
            session_idle: Duration::from_secs(8 * 3600),
            session_max: Duration::from_secs(7 * 24 * 3600),
            local_login: true,
            oidc: crate::oidc::OidcSettings::default(),
            yourls_secret_file: None,
            yourls_signature_window: Duration::from_secs(900),
        }
    }
}

/// A session id as the cookie carries it, and the hash the store keeps.
pub(crate) struct SessionId {
    pub id: String,
    pub hash: [u8; 32],
}

impl SessionId {
    fn new() -> Self {
        let id = Alphanumeric.sample_string(&mut rand::rng(), 43);
        let hash = crate::keys::hash(&id);
        Self { id, hash }
    }
}

pub(crate) struct Sessions {
    store: Arc<dyn LinkStore>,
    settings: AccountSettings,
    /// The public URL's origin (`https://s.example.com`); `None`: no
    /// public URL, so no accounts.
    origin: Option<String>,
    secure: bool,
    /// The session cookie's name and the flow cookie's (`__Host-` under
    /// https).
    names: (&'static str, &'static str),
    touched: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Sessions {
    pub(crate) fn new(
        store: Arc<dyn LinkStore>,
        settings: AccountSettings,
        public_url: Option<&str>,
    ) -> Self {
        let url = public_url.and_then(|u| url::Url::parse(u).ok());
        let secure = url.as_ref().is_some_and(|u| u.scheme() == "https");
        Self {
            store,
            settings,
            origin: url.as_ref().map(|u| u.origin().ascii_serialization()),
            secure,
            names: if secure {
                (HOST_COOKIE, crate::oidc::HOST_FLOW_COOKIE)
            } else {
                (COOKIE, crate::oidc::FLOW_COOKIE)
            },
            touched: Mutex::default(),
        }
    }

    /// Whether people can sign in here at all (a public URL is set).
    pub(crate) fn enabled(&self) -> bool {
        self.origin.is_some()
    }

    pub(crate) fn local_login(&self) -> bool {
        self.settings.local_login
    }

    /// Whether a request that writes with the cookie comes from this
    /// server's own pages: its `Origin` is the public URL's.
    pub(crate) fn same_origin(&self, headers: &HeaderMap) -> bool {
        let Some(own) = &self.origin else {
            return false;
        };
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (Some(sent), None) => sent.as_bytes() == own.as_bytes(),
            _ => false,
        }
    }

    /// The session id the request's cookie carries, if any: only under
    /// this server's name for it (a cookie of the other name is no one's).
    pub(crate) fn cookie<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        cookie_named(headers, self.names.0)
    }

    /// The flow cookie's value that the request carries, if any.
    pub(crate) fn flow(&self, headers: &HeaderMap) -> Option<String> {
        cookie_named(headers, self.names.1).map(str::to_owned)
    }

    /// The `Set-Cookie` value that carries `id`.
    pub(crate) fn set_cookie(&self, id: &str) -> String {
        format!(
            "{}={id}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
            self.names.0,
            self.settings.session_max.as_secs(),
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` value that removes the cookie.
    pub(crate) fn clear_cookie(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
            self.names.0,
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` value of the cookie that binds a sign-in through
    /// the identity provider to this browser (`None`: removes it). Only
    /// the callback reads it; `Lax` still sends it there, on the
    /// provider's redirect back. Under https it is a `__Host-` cookie,
    /// which must have `Path=/`.
    pub(crate) fn flow_cookie(&self, value: Option<&str>) -> String {
        format!(
            "{}={}; Path={}; HttpOnly; SameSite=Lax; Max-Age={}{}",
            self.names.1,
            value.unwrap_or(""),
            if self.secure { "/" } else { "/auth/callback" },
            value.map_or(0, |_| crate::oidc::FLOW_TTL.as_secs()),
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// Begins a session for `user` (a new id, whatever the request
    /// carried), dropping expired ones on the way.
    pub(crate) async fn start(&self, user: &User) -> Result<SessionId, StoreError> {
        let session = SessionId::new();
        let now = Timestamp::now();
        let before =
            |d: Duration| Timestamp::from_millis(now.millis().saturating_sub(d.as_millis() as i64));
        self.store
            .write_session(SessionWrite::Start {
                hash: session.hash,
                user: user.id,
                role: user.role,
                started_before: before(self.settings.session_max),
                seen_before: before(self.settings.session_idle),
            })
            .await?;
        Ok(session)
    }

    /// Who the session `id` signs in, and its hash; `None` when there is
    /// no such session or it is over (and then it is removed).
    pub(crate) async fn principal(
        &self,
        id: &str,
    ) -> Result<Option<(Principal, [u8; 32])>, StoreError> {
        if !self.enabled() || id.len() > 64 {
            return Ok(None);
        }
        let hash = crate::keys::hash(id);
        let Some(session) = self.store.session(hash).await? else {
            return Ok(None);
        };
        let now = Timestamp::now();
        let age =
            |t: Timestamp| Duration::from_millis(now.millis().saturating_sub(t.millis()) as u64);
        let over = session.user.disabled
            || session.user.suspended
            || session.role != session.user.role
            || age(session.created_at) >= self.settings.session_max
            || age(session.seen_at) >= self.settings.session_idle;
        if over {
            self.store.write_session(SessionWrite::End { hash }).await?;
            return Ok(None);
        }
        // At most once a minute, and often enough for a shorter idle limit.
        let every = TOUCH_EVERY.min(self.settings.session_idle / 2);
        if age(session.seen_at) >= every && self.due(hash, every) {
            self.store
                .write_session(SessionWrite::Touch { hash, at: now })
                .await?;
        }
        let user = session.user;
        Ok(Some((
            Principal {
                user: user.id,
                name: user.name,
                role: user.role,
                domain: user.domain,
                via: Via::Session {
                    must_change: user.must_change,
                },
            },
            hash,
        )))
    }

    /// Whether this session's last sight is due to be written, noting that
    /// it is.
    fn due(&self, hash: [u8; 32], every: Duration) -> bool {
        let mut touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        if touched.len() >= REMEMBERED {
            touched.retain(|_, at| at.elapsed() < every);
            if touched.len() >= REMEMBERED {
                touched.clear();
            }
        }
        match touched.get(&hash) {
            Some(at) if at.elapsed() < every => false,
            _ => {
                touched.insert(hash, Instant::now());
                true
            }
        }
    }

    /// Ends the session `hash` names.
    pub(crate) async fn end(&self, hash: [u8; 32]) -> Result<(), StoreError> {
        self.store.write_session(SessionWrite::End { hash }).await
    }
}

/// The value of the cookie `name` that the request carries, if any.
pub(crate) fn cookie_named<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others_and_ids_are_long() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; litelink_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_named(&headers, COOKIE), Some("abc"));
        headers.insert(header::COOKIE, "xlitelink_session=abc".parse().unwrap());
        assert_eq!(cookie_named(&headers, COOKIE), None);
        let (a, b) = (SessionId::new(), SessionId::new());
        assert_eq!(a.id.len(), 43);
        assert_ne!(a.id, b.id);
        assert_eq!(a.hash, crate::keys::hash(&a.id));
    }
}
