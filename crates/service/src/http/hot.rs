//! The hot path: [`Service`], what the server serves, answers
//! `GET|HEAD /{code}`, `GET|HEAD /link/{code}` and `GET|HEAD /heart-beat`
//! in front of the router, and hands everything else to it. What the
//! router's layers do for every answer it does too: the request timeout
//! (armed only when the answer is not ready at once, i.e. not on a cache
//! hit) and [`super::finish::finish`], which both call. A cache hit is
//! answered inside the service call ([`Answer::Now`]), so hyper keeps no
//! future for it; only the rest of a miss is a (boxed) future. These
//! routes too go to the router when debug logging wants its trace spans.
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
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tower::Service as _;

use super::AppState;
use super::error::ApiError;
use super::extract::{request_host, unknown_host};
use super::finish::finish;
use super::handlers::{link_answer, redirect_answer, redirect_use, target_of};
use super::request_id;
use crate::domain::{DomainId, LinkKey, ShortCode, TargetUrl};
use crate::links::{Later, Resolution, Use};
use crate::observability::logging::REQUEST_ID;
use crate::observability::recording::{Recording, Requests};
use crate::visits::Visit;

/// What both paths answer with: the hot path's flat bodies, or the
/// router's.
pub type Body = Either<Full<Bytes>, axum::body::Body>;

/// How a found link is answered (a redirect, or its JSON), to a HEAD
/// request or not.
/// Its headers go into the map given; the status and body are returned.
type Reply =
    fn(&AppState, TargetUrl, bool, &mut HeaderMap) -> Result<(StatusCode, Bytes), ApiError>;

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

    /// The answer to `req` on `route`, with everything the router's layers
    /// add (see the module documentation): made at once when the cache
    /// knows the code, so that a hit builds no future at all; otherwise
    /// the rest runs boxed.
    pub fn answer<B: Send + 'static>(
        self: &Arc<Self>,
        route: Route,
        mut req: Request<B>,
        peer: Option<SocketAddr>,
        counting: bool,
    ) -> Answered {
        let record = |pick: fn(&Labels) -> usize| {
            self.metrics
                .map(|(requests, labels)| Recording::start(requests, pick(&labels), false))
        };
        let sent = Sent::of(req.headers());
        let id = request_id::from(sent.id);
        let (code, recording, how, visit, head, reply): (_, _, _, _, _, Reply) = match route {
            Route::HeartBeat => {
                let recording = record(|l| l.heart_beat);
                let mut r = Response::new(Either::Left(Full::new(Bytes::from_static(HEART_BEAT))));
                *r.headers_mut() = recycled(&mut req);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                finish(&mut r, id, recording);
                return Answered::Now(r);
            }
            Route::Link(code) => {
                let recording = record(|l| l.link);
                (code, recording, Use::Look, false, false, link_reply)
            }
            Route::Redirect(code) => {
                let recording = record(|l| l.redirect);
                let head = req.method() == Method::HEAD;
                let how = if head {
                    Use::Look
                } else {
                    // The visitor's address is worked out here only while
                    // visits are counted; a link whose rules or password
                    // need it goes on later, which always works it out.
                    let (client, country) = self.state.trust_proxy.visitor(
                        peer.filter(|_| counting),
                        req.headers(),
                        self.state.country_header.as_ref(),
                    );
                    Use::Visit(Visit {
                        user_agent: sent.user_agent.map(HeaderValue::as_bytes),
                        referer: sent.referer.map(HeaderValue::as_bytes),
                        client,
                        country,
                        accept_language: sent.accept_language.map(HeaderValue::as_bytes),
                        headers: Some(req.headers()),
                        query: req.uri().query(),
                        password: None,
                        rule: 0,
                        agent: None,
                    })
                };
                (code, recording, how, true, head, redirect_reply)
            }
        };
        // A redirect is on the domain its Host names; the seed API's look
        // is on the default domain.
        let domain = if visit {
            let host = request_host(req.uri(), sent.host);
            self.state.links.domains().of_request(host)
        } else {
            Some(DomainId::DEFAULT)
        };
        let Some(domain) = domain else {
            let mut response =
                axum::response::IntoResponse::into_response(unknown_host()).map(Either::Right);
            finish(&mut response, id, recording);
            return Answered::Now(response);
        };
        let key = LinkKey::new(domain, code);
        let response = match self.state.links.resolve_now(&key, how) {
            Ok(found) => Self::reply(
                &self.state,
                target_of(&key.code, self.fallback(visit, domain, found)),
                head,
                reply,
                recycled(&mut req),
            ),
            Err(later) => {
                let rest = Rest {
                    recording,
                    peer,
                    id,
                    key,
                    visit,
                    head,
                    reply,
                };
                return self.later(rest, req, later);
            }
        };
        let mut response = response;
        finish(&mut response, id, recording);
        Answered::Now(response)
    }

    /// The boxed rest of an answer the cache could not give at once: under
    /// the request timeout, with the request's id known to the log.
    fn later<B: Send + 'static>(
        self: &Arc<Self>,
        rest: Rest,
        req: Request<B>,
        later: Later,
    ) -> Answered {
        let this = Arc::clone(self);
        Answered::Later(Box::pin(async move {
            let how = if rest.visit {
                redirect_use(
                    &this.state,
                    req.method(),
                    req.uri(),
                    req.headers(),
                    None,
                    rest.peer,
                )
            } else {
                Use::Look
            };
            let links = &this.state.links;
            let key = &rest.key;
            let found = async {
                let found = links.resolve_later(key, how, later).await?;
                let unlocked = matches!(found, Resolution::Unlocked(_));
                let target = target_of(&key.code, this.fallback(rest.visit, key.domain, found))?;
                Ok::<_, ApiError>((target, unlocked))
            };
            let timed = tokio::time::timeout(this.request_timeout, found);
            let mut response = match REQUEST_ID.scope(rest.id.clone(), timed).await {
                Ok(Ok((target, unlocked))) => {
                    let mut response = Self::reply(
                        &this.state,
                        Ok(target),
                        rest.head,
                        rest.reply,
                        HeaderMap::new(),
                    );
                    if unlocked {
                        super::locked::unlocked(response.headers_mut());
                    }
                    response
                }
                Ok(Err(e)) => super::locked::or_error(e, req.headers()).map(Either::Right),
                Err(_) => super::error::timed_out().map(Either::Right),
            };
            finish(&mut response, rest.id, rest.recording);
            response
        }))
    }

    /// A redirect's resolution with the domain's redirect for what it has
    /// no link for; a look's as it is.
    fn fallback(&self, visit: bool, domain: DomainId, found: Resolution) -> Resolution {
        if visit {
            self.state.fallback(domain, found)
        } else {
            found
        }
    }

    fn reply(
        state: &AppState,
        target: Result<TargetUrl, ApiError>,
        head: bool,
        reply: Reply,
        mut headers: HeaderMap,
    ) -> Response<Body> {
        match target.and_then(|target| reply(state, target, head, &mut headers)) {
            Ok((status, body)) => {
                let mut response = Response::new(Either::Left(Full::new(body)));
                *response.status_mut() = status;
                *response.headers_mut() = headers;
                response
            }
            Err(e) => axum::response::IntoResponse::into_response(e).map(Either::Right),
        }
    }
}

/// The request headers the hot path reads, found in one pass over the
/// request's headers instead of a hashed lookup each. Each is the first
/// value sent, as `HeaderMap::get` would give.
#[derive(Default)]
struct Sent<'a> {
    id: Option<&'a HeaderValue>,
    host: Option<&'a HeaderValue>,
    user_agent: Option<&'a HeaderValue>,
    referer: Option<&'a HeaderValue>,
    accept_language: Option<&'a HeaderValue>,
}

impl<'a> Sent<'a> {
    fn of(headers: &'a HeaderMap) -> Self {
        let mut sent = Self::default();
        for (name, value) in headers {
            let slot = if name == header::USER_AGENT {
                &mut sent.user_agent
            } else if name == header::REFERER {
                &mut sent.referer
            } else if name == header::HOST {
                &mut sent.host
            } else if name == request_id::X_REQUEST_ID {
                &mut sent.id
            } else if name == header::ACCEPT_LANGUAGE {
                &mut sent.accept_language
            } else {
                continue;
            };
            slot.get_or_insert(value);
        }
        sent
    }
}

/// What the boxed rest of an answer needs to finish it.
struct Rest {
    recording: Option<Recording>,
    /// The connection's peer: what a password's guesses and a country
    /// rule are counted by, and a counted visit's address.
    peer: Option<SocketAddr>,
    id: HeaderValue,
    key: LinkKey,
    /// A redirect (counted as a visit when it is a GET), not a look.
    visit: bool,
    head: bool,
    reply: Reply,
}

fn link_reply(
    _: &AppState,
    target: TargetUrl,
    _: bool,
    headers: &mut HeaderMap,
) -> Result<(StatusCode, Bytes), ApiError> {
    Ok((StatusCode::OK, link_answer(&target, headers)))
}

fn redirect_reply(
    state: &AppState,
    target: TargetUrl,
    head: bool,
    headers: &mut HeaderMap,
) -> Result<(StatusCode, Bytes), ApiError> {
    Ok((redirect_answer(state, target, head, headers)?, Bytes::new()))
}

/// The request's header map, emptied, to carry the answer's headers.
/// hyper parses each request's headers into the map of the answer before
/// it on the connection, so a map passed on this way keeps its room and
/// answers made at once allocate none.
fn recycled<B>(req: &mut Request<B>) -> HeaderMap {
    let mut headers = std::mem::take(req.headers_mut());
    headers.clear();
    headers
}

/// A hot answer: made at once, or the boxed rest of one.
pub enum Answered {
    Now(Response<Body>),
    Later(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
}

/// What the server serves: the hot path (when on) in front of the router,
/// one per connection, knowing its peer.
#[derive(Clone)]
pub struct Service {
    router: Router,
    hot: Option<Arc<Hot>>,
    peer: Option<SocketAddr>,
    /// Whether GETs learn the peer (visits are counted): creates always do.
    peer_on_gets: bool,
}

impl Service {
    pub fn new(router: Router, hot: Option<Arc<Hot>>, peer_on_gets: bool) -> Self {
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
pub enum Answer {
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

    /// One pass finds what `HeaderMap::get` would: the first value sent.
    #[test]
    fn the_header_scan_finds_the_first_value_of_each() {
        let mut headers = HeaderMap::new();
        headers.append(header::HOST, HeaderValue::from_static("x"));
        headers.append("x-other", HeaderValue::from_static("o"));
        headers.append(header::REFERER, HeaderValue::from_static("https://r1/"));
        headers.append(header::USER_AGENT, HeaderValue::from_static("ua1"));
        headers.append(header::REFERER, HeaderValue::from_static("https://r2/"));
        headers.append("x-request-id", HeaderValue::from_static("id1"));
        headers.append(header::USER_AGENT, HeaderValue::from_static("ua2"));
        headers.append("x-request-id", HeaderValue::from_static("id2"));
        headers.append(header::ACCEPT_LANGUAGE, HeaderValue::from_static("de"));
        headers.append(header::ACCEPT_LANGUAGE, HeaderValue::from_static("fr"));
        let sent = Sent::of(&headers);
        assert_eq!(sent.user_agent, headers.get(header::USER_AGENT));
        assert_eq!(sent.referer, headers.get(header::REFERER));
        assert_eq!(sent.id, headers.get("x-request-id"));
        assert_eq!(sent.id.unwrap(), "id1");
        assert_eq!(sent.host, headers.get(header::HOST));
        assert_eq!(sent.accept_language.unwrap(), "de");
        let empty = HeaderMap::new();
        let none = Sent::of(&empty);
        assert!(none.id.is_none() && none.user_agent.is_none() && none.referer.is_none());
    }
}
