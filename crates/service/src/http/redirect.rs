//! The one way a request for a code is answered: `GET|HEAD /{code}`, the
//! password form's `POST /{code}` and the seed API's `GET /link/{code}`.
//! The hot path ([`super::hot`]) calls [`answer`] in front of the router,
//! and the router's handlers call it too (when the lab turns the hot path
//! off, or debug logging wants the router's spans): the domain its `Host`
//! names, the visit read from the headers in one pass, the links service's
//! resolution (deny list, expiry, password, rules, visit counting), the
//! domain's fallbacks, and the answer's headers are written here once.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header,
};
use bytes::Bytes;
use http_body_util::{Either, Full};

use super::AppState;
use super::error::ApiError;
use super::extract::{request_host, unknown_host};
use super::finish::finish;
use super::request_id;
use crate::domain::{DomainId, LinkKey, ShortCode, TargetUrl};
use crate::links::{Later, Resolution, Use};
use crate::observability::logging::REQUEST_ID;
use crate::observability::recording::Recording;
use crate::visits::{Visit, X_LINK_PASSWORD};

/// What both paths answer with: flat bodies made here, or the router's.
pub(crate) type Body = Either<Full<Bytes>, axum::body::Body>;

/// An answer: made at once, or the boxed rest of one.
pub(crate) enum Answered {
    Now(Response<Body>),
    Later(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
}

impl Answered {
    /// The answer, waited for.
    pub(crate) async fn wait(self) -> Response<Body> {
        match self {
            Answered::Now(r) => r,
            Answered::Later(f) => f.await,
        }
    }
}

/// What a request for a code asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asks {
    /// `GET|HEAD /{code}` on the domain its `Host` names, or the form's
    /// `POST /{code}`: a redirect (a GET or POST is a visit).
    Redirect,
    /// `GET /link/{code}`: where a link on the default domain leads, as
    /// JSON; not a visit.
    Link,
}

/// Who finishes an answer ([`finish`]: the request's id, `nosniff`, its
/// count in the metrics): the router's layers, or this module, for the hot
/// path, which has none.
pub(crate) enum Finishing {
    ByLayers,
    Here(Option<Recording>),
}

/// Everything a request for a code carries in.
pub(crate) struct Asked<B> {
    pub asks: Asks,
    pub code: ShortCode,
    pub req: Request<B>,
    /// The connection's peer: what a password's guesses and a country
    /// rule are counted by, and a counted visit's address.
    pub peer: Option<SocketAddr>,
    /// Whether a visit on the cache's fast path may learn the peer (every
    /// visit is counted); a later answer always may.
    pub counting: bool,
    /// The password of the form's `POST`.
    pub password: Option<crate::domain::Password>,
    pub finishing: Finishing,
}

/// The answer to `asked`: made at once when the cache knows the code, so
/// that a hit builds no future at all; otherwise the rest runs boxed,
/// under the request timeout.
pub(crate) fn answer<B: Send + 'static>(state: &AppState, mut asked: Asked<B>) -> Answered {
    // The request stays in `asked`, used in place: moving it out would
    // copy it (a few hundred bytes) once more on every redirect.
    let sent = Sent::of(asked.req.headers());
    let id = match &asked.finishing {
        Finishing::Here(_) => Some(request_id::from(sent.id)),
        Finishing::ByLayers => None,
    };
    let req = &asked.req;
    if let Some(why) = super::host::problem(req.version(), req.uri(), sent.host, sent.host_twice) {
        let response =
            axum::response::IntoResponse::into_response(ApiError::BadRequest(why.into()));
        return Answered::Now(finished(response.map(Either::Right), id, asked.finishing));
    }
    let redirect = asked.asks == Asks::Redirect;
    // A redirect is on the domain its Host names; the seed API's look
    // is on the default domain.
    let domain = if redirect {
        let host = request_host(req.uri(), sent.host);
        state.links.domains().of_request(host)
    } else {
        Some(DomainId::DEFAULT)
    };
    let Some(domain) = domain else {
        let response = axum::response::IntoResponse::into_response(unknown_host());
        return Answered::Now(finished(response.map(Either::Right), id, asked.finishing));
    };
    let key = LinkKey::new(domain, asked.code);
    let verb = Verb::of(req.method());
    let how = if redirect {
        // The visitor's address is worked out here only while visits are
        // counted; a link whose rules or password need it goes on later,
        // which always works it out.
        let peer = asked.peer.filter(|_| asked.counting);
        use_of(state, verb, req, &sent, peer, asked.password.as_ref())
    } else {
        Use::Look
    };
    let found = match state.links.resolve_now(&key, how) {
        Ok(found) => found,
        Err(later) => {
            let rest = Rest {
                asks: asked.asks,
                req: asked.req,
                peer: asked.peer,
                password: asked.password,
                finishing: asked.finishing,
            };
            return self::later(state.clone(), rest, key, id, later);
        }
    };
    let html = locks(&found) && super::locked::wants_html(asked.req.headers());
    let headers = recycled(&mut asked.req);
    let response = reply(state, verb, asked.asks, &key, found, headers, html);
    Answered::Now(finished(response, id, asked.finishing))
}

/// Which method asked: all a redirect's answer depends on, copied so that
/// the request's headers can be taken for the answer's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Head,
    /// The password form's `POST`.
    Post,
}

impl Verb {
    fn of(method: &Method) -> Self {
        if method == Method::HEAD {
            Self::Head
        } else if method == Method::POST {
            Self::Post
        } else {
            Self::Get
        }
    }
}

/// Whether a resolution is answered with a locked link's 401.
fn locks(found: &Resolution) -> bool {
    matches!(found, Resolution::Locked | Resolution::WrongPassword)
}

/// What the boxed rest of an answer takes on from [`Asked`].
struct Rest<B> {
    asks: Asks,
    req: Request<B>,
    peer: Option<SocketAddr>,
    password: Option<crate::domain::Password>,
    finishing: Finishing,
}

/// The boxed rest of an answer the cache could not give at once: under
/// the request timeout, with the request's id known to the log.
fn later<B: Send + 'static>(
    state: AppState,
    rest: Rest<B>,
    key: LinkKey,
    id: Option<HeaderValue>,
    later: Later,
) -> Answered {
    Answered::Later(Box::pin(async move {
        let Rest {
            asks,
            req,
            peer,
            password,
            finishing,
        } = rest;
        let verb = Verb::of(req.method());
        let sent = Sent::of(req.headers());
        let how = match asks {
            Asks::Redirect => use_of(&state, verb, &req, &sent, peer, password.as_ref()),
            Asks::Link => Use::Look,
        };
        let found = state.links.resolve_later(&key, how, later);
        let scope = id.clone().unwrap_or_else(|| request_id::from(sent.id));
        let timed = tokio::time::timeout(state.request_timeout, found);
        let response = match REQUEST_ID.scope(scope, timed).await {
            Ok(Ok(found)) => {
                let html = locks(&found) && super::locked::wants_html(req.headers());
                reply(&state, verb, asks, &key, found, HeaderMap::new(), html)
            }
            Ok(Err(e)) => {
                super::locked::or_error(ApiError::from(e), req.headers()).map(Either::Right)
            }
            Err(_) => super::error::timed_out().map(Either::Right),
        };
        finished(response, id, finishing)
    }))
}

/// What the request is to the links service: a GET (or a password form's
/// POST) is a visit, with its headers read in place; a HEAD reads the same
/// headers, for the same rule, and counts nothing.
fn use_of<'a, B>(
    state: &AppState,
    verb: Verb,
    req: &'a Request<B>,
    sent: &Sent<'a>,
    peer: Option<SocketAddr>,
    password: Option<&'a crate::domain::Password>,
) -> Use<'a> {
    let (client, country) =
        state
            .trust_proxy
            .visitor(peer, req.headers(), state.country_header.as_ref());
    let visit = Visit {
        user_agent: sent.user_agent.map(HeaderValue::as_bytes),
        referer: sent.referer.map(HeaderValue::as_bytes),
        client,
        country,
        accept_language: sent.accept_language.map(HeaderValue::as_bytes),
        query: req.uri().query(),
        password: password
            .map(crate::domain::Password::as_bytes)
            .or(sent.link_password.map(HeaderValue::as_bytes)),
        rule: 0,
        agent: None,
    };
    if verb == Verb::Head {
        Use::Head(visit)
    } else {
        Use::Visit(visit)
    }
}

/// The answer to a resolution: a redirect (or the link's JSON) with its
/// headers in `headers`, the domain's redirect for what a redirect has no
/// link for, or the error; a locked link's 401 as its client wants it.
fn reply(
    state: &AppState,
    verb: Verb,
    asks: Asks,
    key: &LinkKey,
    found: Resolution,
    mut headers: HeaderMap,
    html: bool,
) -> Response<Body> {
    let unlocked = matches!(found, Resolution::Unlocked(_));
    let found = match asks {
        Asks::Redirect => state.links.fallback(key.domain, found),
        Asks::Link => found,
    };
    let made = target_of(&key.code, found).and_then(|target| match asks {
        Asks::Link => Ok((StatusCode::OK, link_answer(&target, &mut headers))),
        Asks::Redirect => {
            let status = redirect_answer(state, target, verb, &mut headers)?;
            Ok((status, Bytes::new()))
        }
    });
    match made {
        Ok((status, body)) => {
            if unlocked {
                super::locked::unlocked(&mut headers);
            }
            let mut response = Response::new(Either::Left(Full::new(body)));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        Err(ApiError::Locked { wrong }) => super::locked::answer(wrong, html).map(Either::Right),
        Err(e) => axum::response::IntoResponse::into_response(e).map(Either::Right),
    }
}

fn finished(
    mut response: Response<Body>,
    id: Option<HeaderValue>,
    finishing: Finishing,
) -> Response<Body> {
    if let (Some(id), Finishing::Here(recording)) = (id, finishing) {
        finish(&mut response, id, recording);
    }
    response
}

/// The target a resolution serves, or the error it is answered with.
pub(super) fn target_of(code: &ShortCode, resolution: Resolution) -> Result<TargetUrl, ApiError> {
    match resolution {
        Resolution::Found(target) | Resolution::Unlocked(target) => Ok(target),
        Resolution::Locked => Err(ApiError::Locked { wrong: false }),
        Resolution::WrongPassword => Err(ApiError::Locked { wrong: true }),
        Resolution::Expired => Err(ApiError::Gone(format!("link '{code}' has expired"))),
        Resolution::Exhausted => Err(ApiError::Gone(format!(
            "link '{code}' has reached its visit limit"
        ))),
        Resolution::Blocked => Err(ApiError::Gone(
            "the target of this link is blocked".to_owned(),
        )),
        Resolution::Missing => Err(ApiError::NotFound(format!("no link with code '{code}'"))),
    }
}

#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = LinkTarget)]
pub(super) struct LinkBody<'a> {
    /// The target URL.
    link: &'a str,
}

/// The body of `GET /link/{code}`, its headers added to `headers`.
fn link_answer(target: &TargetUrl, headers: &mut HeaderMap) -> Bytes {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Serialising a struct of one `&str` cannot fail.
    serde_json::to_vec(&LinkBody {
        link: target.as_str(),
    })
    .unwrap_or_default()
    .into()
}

/// The status of a redirect to `target` (it has no body), its headers
/// added to `headers`. The form's `POST` is answered `303 See Other`
/// whatever the server's status: a 307 or 308 would make the browser post
/// the password on to the target.
fn redirect_answer(
    state: &AppState,
    target: TargetUrl,
    verb: Verb,
    headers: &mut HeaderMap,
) -> Result<StatusCode, ApiError> {
    // A parsed URL is always a valid header; a stored value that is not
    // (written by hand into the database) is a 500, never a header.
    let location = target
        .into_location()
        .ok_or_else(|| ApiError::Internal("stored URL is not a valid header value".into()))?;
    headers.insert(header::LOCATION, location);
    // Revalidated on every use: a cached redirect (301 and 308 are cached
    // by default) must not outlive an edit or a delete.
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("private, max-age=0"),
    );
    if let Some(policy) = &state.referrer_policy {
        headers.insert(header::REFERRER_POLICY, policy.clone());
    }
    // Said to a HEAD too, which gets no body for hyper to measure (hyper
    // writes it for a GET's empty body itself).
    match verb {
        Verb::Head => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            Ok(state.redirect_status)
        }
        Verb::Post => Ok(StatusCode::SEE_OTHER),
        Verb::Get => Ok(state.redirect_status),
    }
}

/// `X-Link-Password` as a name: compared as one, not through `as_str`,
/// which costs a table's lookup (about 100 instructions a redirect).
static X_LINK_PASSWORD_NAME: HeaderName = HeaderName::from_static(X_LINK_PASSWORD);

/// The request headers a redirect reads, found in one pass over the
/// request's headers instead of a hashed lookup each. Each is the first
/// value sent, as `HeaderMap::get` would give.
#[derive(Default)]
pub(super) struct Sent<'a> {
    id: Option<&'a HeaderValue>,
    host: Option<&'a HeaderValue>,
    user_agent: Option<&'a HeaderValue>,
    referer: Option<&'a HeaderValue>,
    accept_language: Option<&'a HeaderValue>,
    link_password: Option<&'a HeaderValue>,
    /// A second `Host` was sent.
    host_twice: bool,
}

impl<'a> Sent<'a> {
    pub(super) fn of(headers: &'a HeaderMap) -> Self {
        let mut sent = Self::default();
        for (name, value) in headers {
            let slot = if name == header::USER_AGENT {
                &mut sent.user_agent
            } else if name == header::REFERER {
                &mut sent.referer
            } else if name == header::HOST {
                sent.host_twice |= sent.host.is_some();
                &mut sent.host
            } else if name == request_id::X_REQUEST_ID {
                &mut sent.id
            } else if name == header::ACCEPT_LANGUAGE {
                &mut sent.accept_language
            } else if name == X_LINK_PASSWORD_NAME {
                &mut sent.link_password
            } else {
                continue;
            };
            slot.get_or_insert(value);
        }
        sent
    }
}

/// The request's header map, emptied, to carry the answer's headers.
/// hyper parses each request's headers into the map of the answer before
/// it on the connection, so a map passed on this way keeps its room and
/// answers made at once allocate none.
pub(super) fn recycled<B>(req: &mut Request<B>) -> HeaderMap {
    let mut headers = std::mem::take(req.headers_mut());
    headers.clear();
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

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
        headers.append(X_LINK_PASSWORD, HeaderValue::from_static("pw1"));
        headers.append(X_LINK_PASSWORD, HeaderValue::from_static("pw2"));
        let sent = Sent::of(&headers);
        assert_eq!(sent.user_agent, headers.get(header::USER_AGENT));
        assert_eq!(sent.referer, headers.get(header::REFERER));
        assert_eq!(sent.id, headers.get("x-request-id"));
        assert_eq!(sent.id.unwrap(), "id1");
        assert_eq!(sent.host, headers.get(header::HOST));
        assert_eq!(sent.accept_language.unwrap(), "de");
        assert_eq!(sent.link_password.unwrap(), "pw1");
        let empty = HeaderMap::new();
        let none = Sent::of(&empty);
        assert!(none.id.is_none() && none.user_agent.is_none() && none.referer.is_none());
    }
}
