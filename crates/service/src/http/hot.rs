//! The hot path: `GET|HEAD /{code}`, `GET|HEAD /link/{code}` and
//! `GET|HEAD /heart-beat` answered in front of the router, with what the
//! router's layers would do for them done inline: the request id, the
//! metrics, the request timeout (armed only when the answer is not ready
//! at once, i.e. not on a cache hit), `nosniff`. Everything else, and
//! these routes too when debug logging wants the router's trace spans,
//! falls through to the router.
//!
//! Which requests it takes is decided from the route table itself
//! ([`super::routes`]): a one-segment path is a code unless a fixed
//! route has that name, and only a segment that is already a valid code
//! (no percent escapes) is taken, so that the router would have sent the
//! request to the same handler with the same code. A unit test checks
//! that against the router's matcher.

use std::time::Duration;

use axum::http::{HeaderValue, Method, Request, Response, header};
use bytes::Bytes;
use http_body_util::{Either, Full};

use super::AppState;
use super::error::ApiError;
use super::handlers::{link_answer, redirect_answer, redirect_use, target_of};
use super::request_id;
use crate::domain::{ShortCode, TargetUrl};
use crate::links::Use;
use crate::observe::Requests;
use crate::telemetry::REQUEST_ID;

/// What both paths answer with: the hot path's flat bodies, or the
/// router's.
pub type Body = Either<Full<Bytes>, axum::body::Body>;

/// How a found link is answered (a redirect, or its JSON), to a HEAD
/// request or not.
type Reply = fn(&AppState, &TargetUrl, bool) -> Result<Response<Full<Bytes>>, ApiError>;

const HEART_BEAT: &[u8] = br#"{"OK":true}"#;

/// A request the hot path answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    HeartBeat,
    Link(ShortCode),
    Redirect(ShortCode),
}

/// The routes' indices in the metrics' table.
#[derive(Clone, Copy)]
struct Labels {
    heart_beat: usize,
    link: usize,
    redirect: usize,
}

pub struct Hot {
    state: AppState,
    request_timeout: Duration,
    table: Table,
    metrics: Option<(&'static Requests, Labels)>,
}

/// Which paths are hot, from the router's paths.
struct Table {
    /// One-segment paths of fixed routes (`stats`, `manage`, ...): not codes.
    fixed: Vec<&'static str>,
}

impl Table {
    fn new(paths: &[&'static str]) -> Self {
        let fixed = paths
            .iter()
            .filter_map(|p| p.strip_prefix('/'))
            .filter(|p| !p.contains('/') && !p.contains('{'))
            .collect();
        Self { fixed }
    }

    fn route_of(&self, path: &str) -> Option<Route> {
        let rest = path.strip_prefix('/')?;
        match rest.split_once('/') {
            None if rest == "heart-beat" => Some(Route::HeartBeat),
            None if self.fixed.contains(&rest) => None,
            None => ShortCode::parse(rest).ok().map(Route::Redirect),
            Some(("link", code)) => ShortCode::parse(code).ok().map(Route::Link),
            Some(_) => None,
        }
    }
}

impl Hot {
    pub(super) fn new(
        state: AppState,
        paths: &[&'static str],
        request_timeout: Duration,
        requests: Option<&'static Requests>,
    ) -> Self {
        let metrics = requests.and_then(|r| {
            Some((
                r,
                Labels {
                    heart_beat: r.index_of("/heart-beat")?,
                    link: r.index_of("/link/{code}")?,
                    redirect: r.index_of("/{code}")?,
                },
            ))
        });
        Self {
            state,
            request_timeout,
            table: Table::new(paths),
            metrics,
        }
    }

    /// The route of a request the hot path answers, or `None` for the
    /// router.
    pub fn route<B>(&self, req: &Request<B>) -> Option<Route> {
        if !matches!(*req.method(), Method::GET | Method::HEAD)
            || tracing::level_enabled!(tracing::Level::DEBUG)
        {
            return None;
        }
        self.table.route_of(req.uri().path())
    }

    /// The answer to `req` on `route`: everything the router's layers add
    /// included (see the module documentation).
    pub async fn answer<B>(&self, route: Route, req: Request<B>) -> Response<Body> {
        let started = self.metrics.map(|_| quanta::Instant::now());
        let id = request_id::of(req.headers());
        let (label, mut response) = match route {
            Route::HeartBeat => {
                let mut r = Response::new(Either::Left(Full::new(Bytes::from_static(HEART_BEAT))));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                (self.metrics.map(|(_, l)| l.heart_beat), r)
            }
            Route::Link(code) => {
                let answer = self
                    .resolved(&id, &code, Use::Look, false, |_, target, _| {
                        Ok(link_answer(target))
                    })
                    .await;
                (self.metrics.map(|(_, l)| l.link), answer)
            }
            Route::Redirect(code) => {
                let how = redirect_use(req.method(), req.headers());
                let head = req.method() == Method::HEAD;
                let answer = self.resolved(&id, &code, how, head, redirect_answer).await;
                (self.metrics.map(|(_, l)| l.redirect), answer)
            }
        };
        let headers = response.headers_mut();
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(request_id::X_REQUEST_ID.clone(), id);
        if let (Some((requests, _)), Some(label), Some(started)) = (self.metrics, label, started) {
            requests.record(label, response.status().as_u16(), false, started.elapsed());
        }
        response
    }

    /// `reply` to where `code` leads. When the cache knows at once, no
    /// future is made; otherwise the rest runs boxed (so that every
    /// request's future stays small), with the request's id known to the
    /// log and under the request timeout.
    async fn resolved(
        &self,
        id: &HeaderValue,
        code: &ShortCode,
        how: Use<'_>,
        head: bool,
        reply: Reply,
    ) -> Response<Body> {
        let links = &self.state.links;
        let done = match links.resolve_now(code, how) {
            Ok(resolution) => target_of(code, resolution),
            Err(later) => {
                let rest = async { target_of(code, links.resolve_later(code, how, later).await?) };
                let timed = tokio::time::timeout(self.request_timeout, rest);
                match Box::pin(REQUEST_ID.scope(id.clone(), timed)).await {
                    Ok(done) => done,
                    Err(_) => return super::error::timed_out().map(Either::Right),
                }
            }
        };
        match done.and_then(|target| reply(&self.state, &target, head)) {
            Ok(response) => response.map(Either::Left),
            Err(e) => axum::response::IntoResponse::into_response(e).map(Either::Right),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot path takes a request only where the router would have
    /// called the same handler with the same code.
    #[test]
    fn takes_what_the_router_sends_to_the_same_handler() {
        let routes = super::super::routes();
        let paths = routes.paths();
        let mut matcher = matchit::Router::new();
        for p in &paths {
            matcher.insert(*p, *p).unwrap();
        }
        let hot = Table::new(&paths);
        let samples = [
            "/heart-beat",
            "/abc",
            "/a-b_C9",
            "/link/abc",
            "/link/x",
            "/stats",
            "/manage",
            "/metrics",
            "/link",
            "/openapi.json",
            "/",
            "/abc/",
            "/a%62c",
            "/link/a%62c",
            "/link/a.b",
            "/abc/qr.svg",
            "/abc/qr.png",
            "/health/live",
            "/api/v1/links",
            "/api/v1/links/abc",
            "/assets/app.js",
            "//abc",
            "/link//abc",
            "/link/abc/def",
            &format!("/{}", "a".repeat(64)),
            &format!("/{}", "a".repeat(65)),
            "/heart-beat/",
            "/Heart-beat",
        ];
        for path in samples {
            let routed = matcher.at(path).ok().map(|m| {
                let code = m.params.get("code").map(str::to_owned);
                (*m.value, code)
            });
            match hot.route_of(path) {
                Some(Route::HeartBeat) => {
                    assert_eq!(routed, Some(("/heart-beat", None)), "{path}")
                }
                Some(Route::Redirect(code)) => assert_eq!(
                    routed,
                    Some(("/{code}", Some(code.as_str().to_owned()))),
                    "{path}"
                ),
                Some(Route::Link(code)) => assert_eq!(
                    routed,
                    Some(("/link/{code}", Some(code.as_str().to_owned()))),
                    "{path}"
                ),
                // Left to the router: fine whatever it does with it.
                None => {}
            }
        }
        // And it does take the hot routes.
        assert_eq!(hot.route_of("/heart-beat"), Some(Route::HeartBeat));
        assert!(matches!(hot.route_of("/abc"), Some(Route::Redirect(_))));
        assert!(matches!(hot.route_of("/link/abc"), Some(Route::Link(_))));
        assert_eq!(hot.route_of("/stats"), None);
        assert_eq!(hot.route_of("/a%62c"), None);
    }
}
