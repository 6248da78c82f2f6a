//! Signing in through OpenID Connect: the authorization code flow with
//! PKCE, a `state` and a `nonce`, against a provider found by discovery.
//!
//! A flow begins at `GET /login/oidc`: its state (hashed), nonce and PKCE
//! verifier go to the store, where any instance's callback finds them,
//! once, for ten minutes; the browser that began it gets a cookie whose
//! hash the flow keeps, so that a callback from another browser (an
//! attacker's code planted on a victim) is refused. The callback trades
//! the code for tokens and checks the ID token: its signature against the
//! provider's keys (asymmetric algorithms only; the provider discovered
//! again, keys and all, when an unknown key id or an algorithm it did not
//! list appears, at most once a minute), `iss`, `aud`, `azp`, `exp`, `iat`
//! (at most 5 minutes ahead) and the nonce. The person's role comes from a claim (or the default role);
//! they are found by (issuer, `sub`), never by name or email.

mod claims;

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreClientAuthMethod,
    CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AccessToken, AuthType, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields,
    IdTokenVerifier, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, Scope, StandardErrorResponse, StandardTokenResponse, SubjectIdentifier,
    TokenResponse, UserInfoClaims,
};
use rand::distr::{Alphanumeric, SampleString};
use subtle::ConstantTimeEq;

pub use self::claims::RoleMapping;
use self::claims::{Claims, Extra};
use crate::domain::Timestamp;
use crate::outbound::{HttpClient, HttpError};
pub use crate::outbound::{MAX_BODY, TIMEOUT};
use crate::store::{FederatedUser, LinkStore, LoginFlow, LoginFlowWrite, StoreError};

/// How long a sign-in may take at the provider.
pub const FLOW_TTL: Duration = Duration::from_secs(600);

/// The cookie that binds a flow to the browser that began it, under a
/// plain-http public URL.
pub const FLOW_COOKIE: &str = "litelink_oidc";
/// The same under an https public URL (see [`crate::sessions::HOST_COOKIE`]).
pub const HOST_FLOW_COOKIE: &str = "__Host-litelink_oidc";

/// How far ahead of this server's clock a provider's may run: an ID token
/// issued later than that is refused.
const SKEW: Duration = Duration::from_secs(300);

/// Least time between two fetches of the provider's keys.
const KEYS_EVERY: Duration = Duration::from_secs(60);

/// Least time between two attempts at discovery while it fails.
const DISCOVERY_EVERY: Duration = Duration::from_secs(10);

/// Sign-ins one client address may begin (and callbacks it may send) at
/// once, and then one every [`BEGIN_EVERY`]: each writes to the store. A
/// busy office behind one address signs in sixty people, then twelve a
/// minute.
pub const BEGIN_BURST: u32 = 60;
const BEGIN_EVERY: Duration = Duration::from_secs(5);

/// The settings of `--oidc-*`; no issuer: no OpenID Connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    pub issuer: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    /// A file that holds the client secret (its first line).
    pub client_secret_file: Option<PathBuf>,
    /// Scopes asked for; `openid` is always asked.
    pub scopes: Vec<String>,
    pub roles: RoleMapping,
    /// CA certificates that the provider's certificate must chain to, in
    /// place of the system's.
    pub ca_file: Option<PathBuf>,
}

impl Default for OidcSettings {
    fn default() -> Self {
        Self {
            issuer: None,
            client_id: None,
            client_secret: None,
            client_secret_file: None,
            scopes: vec!["openid".into(), "profile".into(), "email".into()],
            roles: RoleMapping::default(),
            ca_file: None,
        }
    }
}

/// A secret that no `Debug` output shows.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Why a sign-in through the provider did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OidcError {
    #[error("signing in with an identity provider is not set up on this server")]
    Off,
    /// The callback names no flow under way: unknown, used or expired.
    #[error(
        "this sign-in is unknown, was used already, has expired or was begun in another \
         browser: sign in again"
    )]
    UnknownFlow,
    /// The callback came to a browser other than the one that began it.
    #[error("this sign-in was begun in another browser: sign in again from this one")]
    OtherBrowser,
    /// The provider cannot be reached, or answered what it should not.
    #[error("the identity provider: {0}")]
    Provider(String),
    /// The provider said no (the person cancelled, say).
    #[error("the identity provider did not sign you in: {0}")]
    Declined(String),
    /// The ID token failed a check.
    #[error("the identity provider's ID token was refused: {0}")]
    Token(String),
    /// The person is known, but may not sign in here.
    #[error("{0}")]
    Refused(String),
    /// Too many sign-ins begun from this client address.
    #[error("too many sign-ins begun from this address; retry in {retry_after}s")]
    TooMany { retry_after: u32 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Tokens = StandardTokenResponse<
    IdTokenFields<
        Extra,
        EmptyExtraTokenFields,
        CoreGenderClaim,
        CoreJweContentEncryptionAlgorithm,
        CoreJwsSigningAlgorithm,
    >,
    CoreTokenType,
>;

type OidcClient = Client<
    Extra,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What discovery found, with the keys as last fetched, and when an
/// unknown key id last made them fetched again.
struct Discovered {
    metadata: CoreProviderMetadata,
    refetched_at: Option<Instant>,
}

/// A flow begun: where to send the browser, and its flow cookie's value.
pub(crate) struct Begun {
    pub url: url::Url,
    pub browser: String,
}

pub(crate) struct Oidc {
    issuer: IssuerUrl,
    client_id: ClientId,
    secret: Option<ClientSecret>,
    scopes: Vec<String>,
    roles: RoleMapping,
    redirect: RedirectUrl,
    http: HttpClient,
    discovered: ArcSwapOption<Discovered>,
    /// Held while discovery or a key fetch runs, with when discovery was
    /// last tried.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    begins: Admission,
    callbacks: Admission,
}

/// A bucket per client address (IPv6: per /64).
struct Admission(governor::DefaultKeyedRateLimiter<std::net::IpAddr>);

impl Admission {
    fn new() -> Self {
        let quota = governor::Quota::with_period(BEGIN_EVERY)
            .unwrap_or_else(|| governor::Quota::per_minute(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::new(BEGIN_BURST).unwrap_or(NonZeroU32::MIN));
        Self(governor::RateLimiter::keyed(quota))
    }

    /// Takes a token for `client`, or says when to come back.
    fn admit(&self, client: Option<std::net::IpAddr>) -> Result<(), OidcError> {
        use governor::clock::{Clock, DefaultClock};
        let Some(ip) = client else {
            return Ok(());
        };
        let ip = crate::domain::client_block(ip);
        // Forgotten buckets would grow without bound.
        if self.0.len() > 100_000 {
            self.0.retain_recent();
        }
        self.0
            .check_key(&ip)
            .map_err(|not_until| OidcError::TooMany {
                retry_after: not_until
                    .wait_time_from(DefaultClock::default().now())
                    .as_secs()
                    .max(1) as u32,
            })
    }
}

impl Oidc {
    /// The client `settings` describe, returning to `public_url`; `None`
    /// when no issuer is set. Nothing is fetched yet ([`Oidc::discover`]).
    pub(crate) fn new(
        settings: &OidcSettings,
        public_url: Option<&str>,
    ) -> anyhow::Result<Option<Self>> {
        use anyhow::Context;
        let Some(issuer) = &settings.issuer else {
            return Ok(None);
        };
        let issuer = IssuerUrl::new(issuer.clone())
            .with_context(|| format!("--oidc-issuer {issuer}: not a URL"))?;
        let url = issuer.url();
        anyhow::ensure!(
            matches!(url.scheme(), "https" | "http") && url.has_host(),
            "--oidc-issuer {}: an https URL with a host",
            issuer.as_str()
        );
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        if url.scheme() == "http" && !loopback {
            tracing::warn!(
                issuer = issuer.as_str(),
                "--oidc-issuer is plain http: the client secret and the tokens cross the \
                 network unencrypted; use https"
            );
        }
        let public_url = public_url.context(
            "--oidc-issuer needs --public-url: it is where the provider sends people back to",
        )?;
        let redirect = RedirectUrl::new(format!(
            "{}/auth/callback",
            public_url.trim_end_matches('/')
        ))
        .context("--public-url: not a URL")?;
        let client_id = settings
            .client_id
            .clone()
            .context("--oidc-issuer needs --oidc-client-id")?;
        let secret = match (&settings.client_secret, &settings.client_secret_file) {
            (Some(_), Some(_)) => {
                anyhow::bail!("give --oidc-client-secret or --oidc-client-secret-file, not both")
            }
            (Some(secret), None) => Some(secret.0.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!(
                        "--oidc-client-secret-file {}: cannot read it",
                        path.display()
                    )
                })?;
                let secret = text.lines().next().unwrap_or("").trim().to_owned();
                anyhow::ensure!(
                    !secret.is_empty(),
                    "--oidc-client-secret-file {}: it is empty",
                    path.display()
                );
                Some(secret)
            }
            (None, None) => None,
        };
        settings.roles.check()?;
        // A plain-http provider (on loopback, say) needs no CA at all.
        let roots = match &settings.ca_file {
            Some(path) => Some(crate::tls::read_roots(path)?),
            None if url.scheme() == "https" => Some(crate::tls::system_roots()?),
            None => crate::tls::system_roots().ok(),
        };
        let tls = roots
            .map(|roots| {
                let verify = crate::tls::Verify::Full(roots);
                crate::tls::client_config("the identity provider", verify, None)
            })
            .transpose()?;
        Ok(Some(Self {
            issuer,
            client_id: ClientId::new(client_id),
            secret: secret.map(ClientSecret::new),
            scopes: settings.scopes.clone(),
            roles: settings.roles.clone(),
            redirect,
            http: HttpClient::new(tls),
            discovered: ArcSwapOption::empty(),
            fetching: tokio::sync::Mutex::new(None),
            begins: Admission::new(),
            callbacks: Admission::new(),
        }))
    }

    /// Fetches the provider's metadata and keys now (at start); a failure
    /// is logged, and the first sign-in tries again.
    pub(crate) async fn discover(&self) {
        match self.discovered().await {
            Ok(_) => tracing::info!(issuer = %self.issuer.as_str(), "identity provider found"),
            Err(e) => tracing::warn!(
                issuer = %self.issuer.as_str(),
                error = %e,
                "the identity provider cannot be reached now; the first sign-in tries again"
            ),
        }
    }

    fn fetch(&self) -> impl Fn(openidconnect::HttpRequest) -> HttpFuture + use<> {
        let http = self.http.clone();
        move |request| {
            let http = http.clone();
            Box::pin(async move { http.send(request).await })
        }
    }

    /// The provider's metadata and keys, discovered once.
    async fn discovered(&self) -> Result<Arc<Discovered>, OidcError> {
        if let Some(found) = self.discovered.load_full() {
            return Ok(found);
        }
        let mut last = self.fetching.lock().await;
        if let Some(found) = self.discovered.load_full() {
            return Ok(found);
        }
        if last.is_some_and(|at| at.elapsed() < DISCOVERY_EVERY) {
            return Err(OidcError::Provider(
                "discovery failed a moment ago; retry shortly".into(),
            ));
        }
        *last = Some(Instant::now());
        let metadata = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.fetch())
            .await
            .map_err(|e| OidcError::Provider(format!("discovery failed: {}", chain(&e))))?;
        let found = Arc::new(Discovered {
            metadata,
            refetched_at: None,
        });
        self.discovered.store(Some(Arc::clone(&found)));
        Ok(found)
    }

    /// Discovers the provider again, its keys with it, for an unknown key
    /// id or an algorithm its metadata did not list (a provider that moved
    /// from RS256 to ES256, say), unless one did so less than a minute ago
    /// (a stream of forged tokens costs the provider one fetch a minute);
    /// the metadata as it then is.
    async fn refresh(&self, seen: &Arc<Discovered>) -> Result<Arc<Discovered>, OidcError> {
        let _fetching = self.fetching.lock().await;
        let current = self
            .discovered
            .load_full()
            .unwrap_or_else(|| Arc::clone(seen));
        if current
            .refetched_at
            .is_some_and(|at| at.elapsed() < KEYS_EVERY)
        {
            return Ok(current);
        }
        let metadata = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.fetch())
            .await
            .map_err(|e| {
                OidcError::Provider(format!("discovering it again failed: {}", chain(&e)))
            })?;
        let fresh = Arc::new(Discovered {
            metadata,
            refetched_at: Some(Instant::now()),
        });
        self.discovered.store(Some(Arc::clone(&fresh)));
        tracing::info!(issuer = %self.issuer.as_str(), "identity provider discovered again");
        Ok(fresh)
    }

    fn client(&self, found: &Discovered) -> OidcClient {
        let client = OidcClient::from_provider_metadata(
            found.metadata.clone(),
            self.client_id.clone(),
            self.secret.clone(),
        )
        .set_redirect_uri(self.redirect.clone());
        // Basic authentication unless the provider takes only the form's.
        let methods = found.metadata.token_endpoint_auth_methods_supported();
        let post_only = methods.is_some_and(|m| {
            m.contains(&CoreClientAuthMethod::ClientSecretPost)
                && !m.contains(&CoreClientAuthMethod::ClientSecretBasic)
        });
        if post_only {
            client.set_auth_type(AuthType::RequestBody)
        } else {
            client
        }
    }

    /// Begins a sign-in from `client`: a flow stored, and where the
    /// browser goes.
    pub(crate) async fn begin(
        &self,
        store: &dyn LinkStore,
        client: Option<std::net::IpAddr>,
    ) -> Result<Begun, OidcError> {
        self.begins.admit(client)?;
        let found = self.discovered().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let client = self.client(&found);
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in self.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        let browser = Alphanumeric.sample_string(&mut rand::rng(), 43);
        let now = Timestamp::now();
        store
            .write_login_flow(LoginFlowWrite::Begin {
                flow: LoginFlow {
                    state: crate::keys::hash(state.secret()),
                    browser: crate::keys::hash(&browser),
                    nonce: nonce.secret().clone(),
                    verifier: verifier.secret().clone(),
                    created_at: now,
                },
                expired_before: before(now, FLOW_TTL),
            })
            .await?;
        Ok(Begun { url, browser })
    }

    /// Ends a sign-in at the callback: the flow `state` names, taken once
    /// and only by the browser whose flow cookie is `browser`; the code
    /// traded for tokens; the ID token checked; the person and their role.
    pub(crate) async fn finish(
        &self,
        store: &dyn LinkStore,
        code: &str,
        state: &str,
        browser: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> Result<FederatedUser, OidcError> {
        let flow = self.take(store, state, browser, client).await?;
        let found = self.discovered().await?;
        let client = self.client(&found);
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| OidcError::Provider(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier))
            .request_async(&self.fetch())
            .await
            .map_err(|e| OidcError::Provider(format!("the code was not taken: {}", chain(&e))))?;
        let id_token = tokens
            .id_token()
            .ok_or_else(|| OidcError::Token("the token answer has no ID token".into()))?;
        let nonce = Nonce::new(flow.nonce);
        let claims = match id_token.claims(&self.verifier(&found), &nonce) {
            Ok(claims) => claims.clone(),
            Err(e) if unknown_key(&e) || newly_allowed(&e, id_token.signing_alg()) => {
                let found = self.refresh(&found).await?;
                id_token
                    .claims(&self.verifier(&found), &nonce)
                    .map_err(|e| OidcError::Token(chain(&e)))?
                    .clone()
            }
            Err(e) => return Err(OidcError::Token(chain(&e))),
        };
        // An ID token obtained by another client of the provider is not
        // for this one, whatever its audience lists.
        if let Some(party) = claims.authorized_party()
            && party.as_str() != self.client_id.as_str()
        {
            return Err(OidcError::Token(format!(
                "it was issued to another client ({})",
                party.as_str()
            )));
        }
        let mut person = Claims::of_id_token(&claims);
        if self.roles.wants_more(&person) {
            let more = self
                .user_info(&client, tokens.access_token(), claims.subject())
                .await?;
            if let Some(more) = more {
                person.add(more);
            }
        }
        // No role here: the user, if known, is suspended by the sign-in.
        let role = self.roles.role(&person);
        Ok(FederatedUser {
            issuer: self.issuer.as_str().to_owned(),
            subject: claims.subject().as_str().to_owned(),
            name: person.name(),
            email: person.email(),
            role,
        })
    }

    /// The flow `state` names, taken once and only by the browser whose
    /// flow cookie is `browser`: another browser's callback leaves it
    /// for its own.
    async fn take(
        &self,
        store: &dyn LinkStore,
        state: &str,
        browser: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> Result<LoginFlow, OidcError> {
        let browser = browser.ok_or(OidcError::OtherBrowser)?;
        self.callbacks.admit(client)?;
        let browser = crate::keys::hash(browser);
        let flow = store
            .write_login_flow(LoginFlowWrite::Take {
                state: crate::keys::hash(state),
                browser,
            })
            .await?
            .ok_or(OidcError::UnknownFlow)?;
        if flow.created_at < before(Timestamp::now(), FLOW_TTL) {
            return Err(OidcError::UnknownFlow);
        }
        if !bool::from(flow.browser.ct_eq(&browser)) {
            return Err(OidcError::OtherBrowser);
        }
        Ok(flow)
    }

    /// A callback where the provider says why it did not sign the person
    /// in: its words are shown only for a flow under way in this browser
    /// (which ends here); else it is any other stray callback.
    pub(crate) async fn declined(
        &self,
        store: &dyn LinkStore,
        why: String,
        state: Option<&str>,
        browser: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> OidcError {
        let Some(state) = state else {
            return OidcError::UnknownFlow;
        };
        match self.take(store, state, browser, client).await {
            Ok(_) => OidcError::Declined(why),
            Err(e) => e,
        }
    }

    /// The userinfo endpoint's claims for the person the ID token named;
    /// `None` when the provider has no such endpoint.
    async fn user_info(
        &self,
        client: &OidcClient,
        token: &AccessToken,
        subject: &SubjectIdentifier,
    ) -> Result<Option<UserInfoClaims<Extra, CoreGenderClaim>>, OidcError> {
        let Ok(request) = client.user_info(token.clone(), Some(subject.clone())) else {
            return Ok(None);
        };
        let claims = request
            .request_async(&self.fetch())
            .await
            .map_err(|e| OidcError::Provider(format!("its userinfo: {}", chain(&e))))?;
        Ok(Some(claims))
    }

    /// The ID token checks, with the keys as last fetched: asymmetric
    /// signatures only, whatever the token's header says.
    fn verifier<'a>(&self, found: &'a Discovered) -> IdTokenVerifier<'a, CoreJsonWebKey> {
        let offered = found.metadata.id_token_signing_alg_values_supported();
        let mut algs: Vec<CoreJwsSigningAlgorithm> = offered
            .iter()
            .filter(|alg| ASYMMETRIC.contains(alg))
            .cloned()
            .collect();
        if algs.is_empty() {
            algs.push(CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256);
        }
        IdTokenVerifier::new_public_client(
            self.client_id.clone(),
            self.issuer.clone(),
            found.metadata.jwks().clone(),
        )
        .set_allowed_algs(algs)
        .set_issue_time_verifier_fn(|issued| {
            let latest = Timestamp::now().millis() / 1000 + SKEW.as_secs() as i64;
            if issued.timestamp() > latest {
                Err(format!("it says it was issued at {issued}, in the future"))
            } else {
                Ok(())
            }
        })
    }
}

type HttpFuture = std::pin::Pin<
    Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send + Sync>,
>;

/// The signature algorithms an ID token may use: never `none`, never a
/// MAC (whose key a confused verifier could take from the public key).
const ASYMMETRIC: [CoreJwsSigningAlgorithm; 9] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::RsaSsaPssSha512,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EdDsa,
];

fn unknown_key(e: &openidconnect::ClaimsVerificationError) -> bool {
    matches!(
        e,
        openidconnect::ClaimsVerificationError::SignatureVerification(
            openidconnect::SignatureVerificationError::NoMatchingKey
        )
    )
}

/// Whether a token was refused for an asymmetric algorithm that the
/// provider's metadata, as last read, did not list: it may list it now.
/// `none` and MACs stay refused whatever the metadata says.
fn newly_allowed(
    e: &openidconnect::ClaimsVerificationError,
    alg: Result<&CoreJwsSigningAlgorithm, openidconnect::SignatureVerificationError>,
) -> bool {
    matches!(
        e,
        openidconnect::ClaimsVerificationError::SignatureVerification(
            openidconnect::SignatureVerificationError::DisallowedAlg(_)
        )
    ) && alg.is_ok_and(|alg| ASYMMETRIC.contains(alg))
}

fn before(now: Timestamp, ttl: Duration) -> Timestamp {
    Timestamp::from_millis(now.millis().saturating_sub(ttl.as_millis() as i64))
}

/// An error with its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
