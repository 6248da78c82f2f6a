//! The HTTP face of the service: routes, handlers, errors, and serving with
//! graceful shutdown.

mod error;
mod handlers;
pub mod shutdown;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::domain::ShortCode;
use crate::links::Links;

/// Everything a handler needs; cheap to clone (one `Arc` per field).
#[derive(Clone)]
pub struct AppState {
    pub links: Links,
    pub redirect_status: StatusCode,
    /// Base for the `short_url` field, e.g. `https://s.example.com`. Without
    /// it the request's Host header is used.
    pub public_url: Option<String>,
}

impl AppState {
    fn short_url(&self, headers: &HeaderMap, code: &ShortCode) -> Option<String> {
        match &self.public_url {
            Some(base) => Some(format!("{}/{code}", base.trim_end_matches('/'))),
            None => headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(|host| format!("http://{host}/{code}")),
        }
    }
}

/// Limits applied to every request.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
        }
    }
}

pub fn app(state: AppState, limits: HttpLimits) -> Router {
    Router::new()
        .route("/heart-beat", get(handlers::heart_beat))
        .route("/stats", get(handlers::stats))
        .route("/link", post(handlers::create_link))
        .route("/link/{code}", get(handlers::get_link))
        .route("/{code}", get(handlers::redirect))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        // Outside the timeout, so that its 503 gets a JSON body too.
        .layer(axum::middleware::map_response(
            error::json_for_bodiless_errors,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves until `shutdown` resolves, then stops accepting and waits for the
/// requests in flight to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        // Small JSON answers on keep-alive connections: without NODELAY
        // Nagle's algorithm can hold each one back waiting for an ACK.
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
