//! The hot path: [`Service`], what the server serves, answers
//! `GET|HEAD /{code}`, `GET|HEAD /link/{code}` and `GET|HEAD /heart-beat`
//! in front of the router, and hands everything else to it. The answer is
//! [`super::redirect::answer`], the same function the router's handlers
//! call; here it also finishes the answer as the router's layers would. A
//! cache hit is answered inside the service call ([`Answered::Now`]), so
//! hyper keeps no future for it; only the rest of a miss is a (boxed)
//! future. These routes too go to the router when debug logging wants its
//! trace spans.
//!
//! Which requests it takes is decided from the route table itself
//! ([`super::routes`]): a one-segment path is a code unless a fixed
//! route has that name, and only a segment that is already a valid code
//! (no percent escapes) is taken, so that the router would have sent the
//! request to the same handler with the same code. A unit test checks
//! that against the router's matcher.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::http::{HeaderValue, Method, Request, Response, header};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tower::Service as _;

use super::AppState;
use super::error::ApiError;
use super::finish::finish;
use super::redirect::{self, Answered, Asked, Asks, Body, Finishing, recycled};
use super::request_id;
use crate::domain::ShortCode;
use crate::observability::recording::{Recording, Requests};

const HEART_BEAT: &[u8] = br#"{"OK":true}"#;

/// A request the hot path answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
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

pub(crate) struct Hot {
    state: AppState,
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
        // Split at a byte: '/' is ASCII, and a char pattern's searcher
        // costs more than the whole short scan.
        match rest.bytes().position(|b| b == b'/') {
            None if rest == "heart-beat" => Some(Route::HeartBeat),
            None => {
                // Checked as a code first: most paths are, and a fixed
                // route's name is looked for only then.
                let code = ShortCode::parse(rest).ok()?;
                (!self.fixed.contains(&rest)).then_some(Route::Redirect(code))
            }
            Some(4) if rest.starts_with("link") => {
                ShortCode::parse(&rest[5..]).ok().map(Route::Link)
            }
            Some(_) => None,
        }
    }
}

impl Hot {
    pub(super) fn new(
        state: AppState,
        paths: &[&'static str],
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
            table: Table::new(paths),
            metrics,
        }
    }

    /// The route of a request the hot path answers, or `None` for the
    /// router.
    pub(crate) fn route<B>(&self, req: &Request<B>) -> Option<Route> {
        if !matches!(*req.method(), Method::GET | Method::HEAD)
            || tracing::level_enabled!(tracing::Level::DEBUG)
        {
            return None;
        }
        self.table.route_of(req.uri().path())
    }

    /// The answer to `req` on `route`, with everything the router's layers
    /// add (see the module documentation). Inlined into the service's
    /// call, so that the request is moved once, into [`Asked`].
    #[inline(always)]
    pub(crate) fn answer<B: Send + 'static>(
        &self,
        route: Route,
        mut req: Request<B>,
        peer: Option<SocketAddr>,
        counting: bool,
    ) -> Answered {
        let record = |pick: fn(&Labels) -> usize| {
            self.metrics
                .map(|(requests, labels)| Recording::start(requests, pick(&labels), false))
        };
        let (asks, code, recording) = match route {
            Route::HeartBeat => {
                let recording = record(|l| l.heart_beat);
                let id = request_id::from(req.headers().get(&request_id::X_REQUEST_ID));
                if let Err(why) = super::host::check(&req) {
                    let mut r = axum::response::IntoResponse::into_response(ApiError::BadRequest(
                        why.into(),
                    ))
                    .map(Either::Right);
                    finish(&mut r, id, recording);
                    return Answered::Now(r);
                }
                let mut r = Response::new(Either::Left(Full::new(Bytes::from_static(HEART_BEAT))));
                *r.headers_mut() = recycled(&mut req);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                finish(&mut r, id, recording);
                return Answered::Now(r);
            }
            Route::Link(code) => (Asks::Link, code, record(|l| l.link)),
            Route::Redirect(code) => (Asks::Redirect, code, record(|l| l.redirect)),
        };
        redirect::answer(
            &self.state,
            Asked {
                asks,
                code,
                req,
                peer,
                counting,
                password: None,
                finishing: Finishing::Here(recording),
            },
        )
    }
}

/// What the server serves: the hot path (when on) in front of the router,
/// one per connection, knowing its peer.
#[derive(Clone)]
pub(crate) struct Service {
    router: Router,
    hot: Option<Arc<Hot>>,
    peer: Option<SocketAddr>,
    /// Whether GETs learn the peer (visits are counted): creates always do.
    peer_on_gets: bool,
}

impl Service {
    pub(crate) fn new(router: Router, hot: Option<Arc<Hot>>, peer_on_gets: bool) -> Self {
        Self {
            router,
            hot,
            peer: None,
            peer_on_gets,
        }
    }
}

impl From<Router> for Service {
    fn from(router: Router) -> Self {
        Self::new(router, None, true)
    }
}

impl super::server::Connected for Service {
    fn connected(&self, peer: SocketAddr) -> Self {
        Self {
            peer: Some(peer),
            ..self.clone()
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut req: Request<Incoming>) -> Answer {
        if let Some((hot, route)) = self.hot.as_ref().and_then(|h| Some((h, h.route(&req)?))) {
            return match hot.answer(route, req, self.peer, self.peer_on_gets) {
                Answered::Now(answer) => Answer::Now(Some(answer)),
                Answered::Later(answer) => Answer::Later(answer),
            };
        }
        if let Err(why) = super::host::settle(&mut req) {
            let id = request_id::from(req.headers().get(&request_id::X_REQUEST_ID));
            let mut response =
                axum::response::IntoResponse::into_response(ApiError::BadRequest(why.into()))
                    .map(Either::Right);
            finish(&mut response, id, None);
            return Answer::Now(Some(response));
        }
        // Creates read the client's address (rate limits), redirects their
        // visitor's (a country, a password's guesses); an extension costs
        // an allocation, which the rest need not pay.
        let wants_peer = matches!(*req.method(), Method::POST | Method::GET);
        if let Some(peer) = self.peer.filter(|_| wants_peer) {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        Answer::Routed(Box::pin(self.router.clone().call(req)))
    }
}

/// The answer to a request: one made at once (so that the future hyper
/// keeps for a request is no larger than the answer), the boxed rest of a
/// hot answer, or the router's.
pub(crate) enum Answer {
    Now(Option<Response<Body>>),
    Later(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
    Routed(Pin<Box<RouteFuture<Infallible>>>),
}

impl Future for Answer {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(match self.get_mut() {
            // hyper polls a future once it is ready no more; if it did,
            // a 500 is the answer, not a panic.
            Answer::Now(answer) => answer.take().unwrap_or_else(|| {
                axum::response::IntoResponse::into_response(ApiError::Internal(
                    "an answer was polled after it was given".into(),
                ))
                .map(Either::Right)
            }),
            Answer::Later(answer) => ready!(answer.as_mut().poll(cx)),
            Answer::Routed(answer) => match ready!(answer.as_mut().poll(cx)) {
                Ok(response) => response.map(Either::Right),
                Err(never) => match never {},
            },
        }))
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
