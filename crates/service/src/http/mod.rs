//! The HTTP face of the service: routes, handlers, extractors, errors, and
//! serving with graceful shutdown. A handler turns HTTP into one call of
//! the links service and its result into HTTP; the bodies it reads are the
//! service's own types, which are also the document's schemas. A new route
//! is a handler in `handlers.rs`, its `#[utoipa::path]`, and one line in
//! [`routes`].

mod accounts;
mod domains;
mod error;
mod extract;
pub(crate) mod finish;
mod handlers;
mod host;
pub(crate) mod hot;
mod keys;
pub mod limit;
mod locked;
mod openapi;
pub mod probe;
mod prometheus;
mod qr;
mod redirect;
pub(crate) mod request_id;
pub(crate) mod server;
pub mod shutdown;
mod users;
mod web;
mod webhooks;
mod yourls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::routing::get;
use strum::{Display, EnumString, VariantNames};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub use crate::links::CreateAuth;
pub(crate) use error::ApiError;

/// Status of `GET /{code}`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display, strum::VariantNames,
)]
pub enum RedirectStatus {
    #[strum(serialize = "301")]
    MovedPermanently,
    #[strum(serialize = "302")]
    Found,
    #[strum(serialize = "307")]
    TemporaryRedirect,
    #[strum(serialize = "308")]
    PermanentRedirect,
}

impl RedirectStatus {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Self::MovedPermanently => StatusCode::MOVED_PERMANENTLY,
            Self::Found => StatusCode::FOUND,
            Self::TemporaryRedirect => StatusCode::TEMPORARY_REDIRECT,
            Self::PermanentRedirect => StatusCode::PERMANENT_REDIRECT,
        }
    }
}

/// What the HTTP layer answers and how much it accepts.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub redirect_status: RedirectStatus,
    pub create_auth: CreateAuth,
    /// Base of the `short_url` field, e.g. `https://s.example.com`. Without
    /// it a plain `host[:port]` Host is used, else the listen address.
    pub public_url: Option<String>,
    /// Largest request body; 413 above it.
    pub max_body_bytes: usize,
    /// How long a request may take before it is answered 503.
    pub request_timeout: Duration,
    /// `Referrer-Policy` of redirects; `None`: not sent (the browser's
    /// default applies).
    pub referrer_policy: Option<ReferrerPolicy>,
    /// Refuse targets on loopback, private and link-local addresses.
    pub refuse_private_targets: bool,
    /// A file of refused domains (subdomains included), reloaded on SIGHUP.
    pub deny_hosts: Option<std::path::PathBuf>,
    /// `/stats` without a key even when keys exist.
    pub stats_public: bool,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may stay without a request.
    pub idle_timeout: Duration,
    /// Most connections open at once; `None`: derived from the file limit
    /// (see [`server::connection_limit`]).
    pub max_connections: Option<usize>,
    /// Largest request head (request line and headers); 431 above it.
    pub max_header_bytes: usize,
    /// On SIGTERM, how long requests in flight may take to finish.
    pub shutdown_timeout: Duration,
    /// Token buckets on creates.
    pub rate_limits: limit::RateLimitSettings,
    /// Record Prometheus metrics (a benchmark switch: on in production).
    pub metrics: bool,
    /// Serve `/metrics` here, without a key, and not on the main port.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Answer the hot routes in front of the router ([`hot`]); off, the
    /// router answers everything (a benchmark switch: on in production).
    pub hot_path: bool,
    /// Hand each GET the connection's peer, for a visitor's country (an
    /// allocation a request); derived: on while every visit is counted.
    pub peer_on_gets: bool,
}

/// What a redirect tells the target about where the click came from
/// (the `Referrer-Policy` header's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, Display, VariantNames)]
#[strum(serialize_all = "kebab-case")]
pub enum ReferrerPolicy {
    NoReferrer,
    NoReferrerWhenDowngrade,
    Origin,
    OriginWhenCrossOrigin,
    SameOrigin,
    StrictOrigin,
    StrictOriginWhenCrossOrigin,
    UnsafeUrl,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            redirect_status: RedirectStatus::Found,
            create_auth: CreateAuth::Open,
            public_url: None,
            max_body_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            referrer_policy: None,
            refuse_private_targets: false,
            deny_hosts: None,
            stats_public: false,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: None,
            max_header_bytes: 16 * 1024,
            shutdown_timeout: Duration::from_secs(10),
            rate_limits: limit::RateLimitSettings::default(),
            metrics: true,
            metrics_listen: None,
            hot_path: true,
            peer_on_gets: true,
        }
    }
}

use crate::domain::LinkKey;
use crate::links::Links;

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
struct AppState {
    links: Links,
    redirect_status: StatusCode,
    public_url: Option<String>,
    /// The address the server listens on: the host of `short_url` when
    /// neither `--public-url` nor a well-formed Host says otherwise.
    listen: std::net::SocketAddr,
    referrer_policy: Option<HeaderValue>,
    stats_public: bool,
    max_body_bytes: usize,
    /// How long a request may take before it is answered 503.
    request_timeout: Duration,
    /// Whose forwarded headers say who a visitor is (`--trust-proxy`).
    trust_proxy: limit::TrustProxy,
    /// The header a trusted proxy names a visitor's country in.
    country_header: Option<axum::http::HeaderName>,
    /// The recorder, when metrics are on and served on this router.
    metrics: Option<&'static metrics_exporter_prometheus::PrometheusHandle>,
}

/// Whether a Host header is `host[:port]` and nothing else: no path,
/// query, user info or spaces that would end up inside `short_url`.
fn is_host_and_port(host: &str) -> bool {
    let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
        return false;
    };
    let name = authority.host();
    authority.as_str() == host
        && (host.len() == name.len() || authority.port_u16().is_some())
        && !host.contains('@')
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'[' | b']' | b':'))
}

impl AppState {
    /// The link's full short URL. On an added domain: that host, with the
    /// scheme of `--public-url` (else https). On the default domain: under
    /// `--public-url` when set; else on `--default-domain` over https; else
    /// under the request's Host when that is a plain `host[:port]`; else
    /// under the listen address.
    fn short_url(&self, headers: &HeaderMap, key: &LinkKey) -> String {
        if let Some(url) =
            crate::domains::short_url(self.links.domains(), self.public_url.as_deref(), key)
        {
            return url;
        }
        let code = &key.code;
        match self.host(headers) {
            Some(host) => format!("http://{host}/{code}"),
            None => format!("http://{}/{code}", self.listen),
        }
    }

    /// The request's `Host`, when it is `host[:port]` and nothing else.
    fn host<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| is_host_and_port(h))
    }
}

/// The recorder, installed on first use, when metrics are on.
fn metrics_handle(
    settings: &HttpSettings,
) -> Option<&'static metrics_exporter_prometheus::PrometheusHandle> {
    settings
        .metrics
        .then(crate::observability::recording::install)
        .flatten()
}

pub(crate) use hot::Service;

/// `/metrics` alone, without a key, for `--metrics-listen`.
pub(crate) fn metrics_app(links: Links) -> Router {
    let handle = crate::observability::recording::install();
    Router::new()
        .route(
            "/metrics",
            get(move || async move {
                match handle {
                    Some(h) => Ok(prometheus::answer(h, &links)),
                    None => Err(ApiError::NotFound("metrics are off".into())),
                }
            }),
        )
        .fallback(handlers::not_found_route)
        .layer(axum::middleware::map_response(
            error::json_for_bodiless_errors,
        ))
}

/// Every route: a handler and one line here. Each is in the OpenAPI
/// document too (`openapi::Routes::undocumented` checks it).
fn routes() -> openapi::Routes {
    openapi::Routes::new()
        .get("/", web::index)
        .get("/manage", web::manage)
        .get("/assets/{file}", web::asset)
        .get("/heart-beat", handlers::heart_beat)
        .get("/health/live", handlers::live)
        .get("/health/ready", handlers::ready)
        .get("/metrics", handlers::metrics)
        .get("/openapi.json", openapi::openapi_json)
        .get("/stats", handlers::stats)
        .post("/link", handlers::create_link)
        .get("/link/{code}", handlers::get_link)
        .post("/api/v1/links", handlers::api_create)
        .get("/api/v1/links", handlers::api_list)
        .get("/api/v1/tags", handlers::api_tags)
        .get("/api/v1/links/{code}", handlers::api_get)
        .patch("/api/v1/links/{code}", handlers::api_update)
        .delete("/api/v1/links/{code}", handlers::api_delete)
        .get("/api/v1/links/{code}/visits", handlers::api_visits)
        .get("/api/v1/visits", handlers::api_visit_totals)
        .get("/api/v1/domains", domains::list)
        .post("/api/v1/domains", domains::create)
        .get("/api/v1/domains/{host}", domains::get)
        .patch("/api/v1/domains/{host}", domains::update)
        .delete("/api/v1/domains/{host}", domains::remove)
        .get("/api/v1/webhooks", webhooks::list)
        .post("/api/v1/webhooks", webhooks::create)
        .get("/api/v1/webhooks/{id}", webhooks::get)
        .patch("/api/v1/webhooks/{id}", webhooks::update)
        .delete("/api/v1/webhooks/{id}", webhooks::remove)
        .post("/api/v1/webhooks/{id}/rotate-secret", webhooks::rotate)
        .get("/api/v1/webhooks/{id}/deliveries", webhooks::deliveries)
        .post(
            "/api/v1/webhooks/{id}/deliveries/{event}/retry",
            webhooks::retry,
        )
        .get("/login", accounts::show_login)
        .post("/login", accounts::login)
        .get("/login/oidc", accounts::oidc_login)
        .get("/auth/callback", accounts::oidc_callback)
        .post("/logout", accounts::logout)
        .get("/account/password", accounts::show_password)
        .post("/account/password", accounts::change_password)
        .get("/api/v1/account", keys::account)
        .get("/api/v1/keys", keys::list)
        .post("/api/v1/keys", keys::create)
        .delete("/api/v1/keys/{name}", keys::revoke)
        .get("/api/v1/users", users::list)
        .post("/api/v1/users", users::create)
        .get("/api/v1/users/{name}", users::get)
        .patch("/api/v1/users/{name}", users::update)
        .delete("/api/v1/users/{name}", users::remove)
        .get("/yourls-api.php", yourls::api)
        .post("/yourls-api.php", yourls::api_form)
        .get("/{code}", handlers::redirect)
        .post("/{code}", handlers::unlock)
        .get("/{code}/qr.svg", qr::svg)
        .get("/{code}/qr.png", qr::png)
}

/// The router with every route and the layers every request passes, and
/// the hot path in front of it (when on); `listen` is the bound address
/// (see [`AppState::short_url`]).
pub(crate) fn app(links: Links, settings: &HttpSettings, listen: std::net::SocketAddr) -> Service {
    let state = AppState {
        stats_public: settings.stats_public,
        max_body_bytes: settings.max_body_bytes,
        request_timeout: settings.request_timeout,
        trust_proxy: settings.rate_limits.trust_proxy.clone(),
        country_header: links.visits().country_header().cloned(),
        metrics: metrics_handle(settings).filter(|_| settings.metrics_listen.is_none()),
        links,
        redirect_status: settings.redirect_status.status(),
        public_url: settings.public_url.clone(),
        listen,
        referrer_policy: settings
            .referrer_policy
            .and_then(|p| HeaderValue::from_str(&p.to_string()).ok()),
    };
    let recording = metrics_handle(settings).is_some();
    let routes = routes();
    debug_assert!(
        routes.undocumented().is_empty(),
        "the router and the OpenAPI document differ: {:?}",
        routes.undocumented()
    );
    let requests = recording.then(|| crate::observability::recording::requests(|| routes.paths()));
    let hot = settings
        .hot_path
        .then(|| Arc::new(hot::Hot::new(state.clone(), &routes.paths(), requests)));
    let router = routes
        .into_router()
        .fallback(handlers::not_found_route)
        .method_not_allowed_fallback(handlers::method_not_allowed);
    let router = router.with_state(state);
    // The layers every request passes wrap the router once, as one
    // service: `Router::layer` would wrap every route in a box of its own,
    // each cloned on every request.
    let service = tower::ServiceBuilder::new()
        // Outermost: every answer carries the id, `nosniff` and its count
        // in the metrics, and every log line written while handling it
        // can name the id.
        .layer(finish::FinishLayer::new(requests))
        // No log line per failed request (the default logs every 5xx):
        // handlers log their errors, throttled.
        // Spans name the path only: query strings carry signatures and
        // passwords (the YOURLS API's), which no log may keep.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &axum::http::Request<_>| {
                    tracing::debug_span!(
                        "request",
                        method = %req.method(),
                        path = %req.uri().path(),
                        version = ?req.version(),
                    )
                })
                .on_failure(()),
        )
        // Outside the timeout, so that its 503 gets a JSON body too.
        .layer(axum::middleware::map_response(
            error::json_for_bodiless_errors,
        ))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            settings.request_timeout,
        ))
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .service(router);
    Service::new(
        Router::new().fallback_service(service),
        hot,
        settings.peer_on_gets,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_host_and_port_is_a_host() {
        for good in [
            "example.com",
            "s.example.com:8080",
            "127.0.0.1:3000",
            "[::1]:8080",
            "localhost",
        ] {
            assert!(is_host_and_port(good), "{good}");
        }
        for bad in [
            "evil.com/phish?x=",
            "evil.com?x",
            "evil.com#x",
            "user@evil.com",
            "evil com",
            "",
            "evil.com:80:90",
            "evil.com:port",
            "evil.com/",
        ] {
            assert!(!is_host_and_port(bad), "{bad}");
        }
    }
}
