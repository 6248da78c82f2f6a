//! Typed extractors: request input becomes domain types here, once, with
//! each way it can be wrong answered by its own [`ApiError`].

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};

use super::AppState;
use super::error::ApiError;
use crate::domain::rules::MAX_PASSWORD_BYTES;
use crate::domain::wire::{FromText, from_json};
use crate::domain::{DomainId, LinkKey, Password, ShortCode};
use crate::keys::{AuthError, Principal};

/// A JSON body read as a `T` ([`crate::domain::wire::from_json`]): 415
/// without a JSON content type, 413 over the size limit, 400 naming the
/// field and its place for anything `T` refuses.
pub(crate) struct Json<T>(pub T);

impl<T: serde::de::DeserializeOwned> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json_content_type(req.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "expected Content-Type: application/json".into(),
            ));
        }
        let body = read_body(req, state.max_body_bytes, |limit| {
            format!("request body is too large (over {limit} bytes)")
        })
        .await?;
        from_json(&body)
            .map(Self)
            .map_err(|e| ApiError::BadRequest(e.0))
    }
}

/// A body of at most `limit` bytes: refused from the declared length
/// before a byte of it is read (and so before `100 Continue` is sent to a
/// client that expects it), else as it comes.
pub(crate) async fn read_body(
    req: Request,
    limit: usize,
    too_large: fn(usize) -> String,
) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge(too_large(limit)));
    }
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if over {
                ApiError::PayloadTooLarge(too_large(limit))
            } else {
                ApiError::BadRequest(format!("could not read request body: {e}"))
            }
        })
}

/// The body of a link's password form (`POST /{code}`): `password=...`,
/// as `application/x-www-form-urlencoded`.
#[derive(utoipa::ToSchema)]
#[schema(as = UnlockForm)]
pub(crate) struct PasswordForm {
    pub password: Password,
}

/// Longest password form: the longest password, percent-encoded.
const MAX_FORM_BYTES: usize = 3 * MAX_PASSWORD_BYTES + 64;

impl<S: Send + Sync> FromRequest<S> for PasswordForm {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        let password = read_form(req, MAX_FORM_BYTES)
            .await?
            .remove("password")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ApiError::BadRequest("field 'password' is required".into()))?;
        Password::from_text(&password)
            .map(|password| Self { password })
            .map_err(|e| ApiError::BadRequest(format!("field 'password' {e}")))
    }
}

/// The fields of an `application/x-www-form-urlencoded` body of at most
/// `max` bytes (a field sent twice: its first value).
pub(crate) async fn read_form(
    req: Request,
    max: usize,
) -> Result<std::collections::HashMap<String, String>, ApiError> {
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(ApiError::UnsupportedMediaType(
            "expected Content-Type: application/x-www-form-urlencoded".into(),
        ));
    }
    let body = read_body(req, max, |limit| {
        format!("the form is too large (over {limit} bytes)")
    })
    .await?;
    let mut fields = std::collections::HashMap::new();
    for (name, value) in url::form_urlencoded::parse(&body) {
        fields
            .entry(name.into_owned())
            .or_insert_with(|| value.into_owned());
    }
    Ok(fields)
}

/// Who sends a request, if anyone: the API key it presents
/// (`Authorization: Bearer KEY` or `X-API-Key: KEY`), which must be valid
/// (401 otherwise), else the signed-in session its cookie names. A request
/// with a key is judged by the key alone. One that writes with the cookie
/// must come from this server's own pages (its `Origin` is the public
/// URL's; 403 otherwise), and a user with a one-time password may do
/// nothing but change it (403).
pub(crate) struct Caller(pub Option<Principal>);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(secret) = presented_key(&parts.headers)? {
            return match state.links.keys().authenticate_fresh(secret).await {
                Ok(p) => Ok(Self(Some(p))),
                Err(e @ (AuthError::Unknown | AuthError::Revoked)) => {
                    Err(ApiError::Unauthorized(e.to_string()))
                }
            };
        }
        let Some(id) = state.links.sessions().cookie(&parts.headers) else {
            return Ok(Self(None));
        };
        let Some((caller, _)) = state.links.session(id).await? else {
            // Over or unknown: anonymous, but a route that needs someone
            // says that the session ended.
            parts.extensions.insert(SessionEnded);
            return Ok(Self(None));
        };
        let reads = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !reads && !state.links.sessions().same_origin(&parts.headers) {
            return Err(ApiError::Forbidden(
                "a change made with the session cookie must come from this server's own pages \
                 (Origin)"
                    .into(),
            ));
        }
        if let crate::keys::Via::Session { must_change: true } = caller.via {
            return Err(ApiError::Forbidden(
                "change your one-time password first (/account/password)".into(),
            ));
        }
        Ok(Self(Some(caller)))
    }
}

/// A request that needs a key: 401 without a valid one.
pub(crate) struct Key(pub Principal);

impl FromRequestParts<AppState> for Key {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Caller::from_request_parts(parts, state).await? {
            Caller(Some(p)) => Ok(Self(p)),
            Caller(None) if parts.extensions.get::<SessionEnded>().is_some() => Err(
                ApiError::Unauthorized("the session has ended: sign in again".into()),
            ),
            Caller(None) => Err(ApiError::Unauthorized(
                "an API key is required (Authorization: Bearer KEY, or X-API-Key: KEY)".into(),
            )),
        }
    }
}

/// A request whose session cookie names no session that goes on.
#[derive(Clone, Copy)]
struct SessionEnded;

/// The address of the connection's peer (a proxy's, behind one). Set on
/// `POST` requests only (see `server::connection`): the rate limits on
/// creates are its one reader.
pub(crate) struct ClientAddr(pub Option<std::net::SocketAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0),
        ))
    }
}

/// A request for the operator's views (`/stats`): open while no API key
/// exists, or with `--stats-public`; otherwise it needs an admin key
/// (401 without a key, 403 with a key that is not an admin's).
pub(crate) struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.stats_public || !state.links.keys().any() {
            return Ok(Self);
        }
        match Caller::from_request_parts(parts, state).await? {
            Caller(Some(p)) if p.is_admin() => Ok(Self),
            Caller(Some(_)) => Err(ApiError::Forbidden("this needs an admin key".into())),
            Caller(None) => Err(ApiError::Unauthorized(
                "this server has API keys: an admin key is required \
                 (Authorization: Bearer KEY, or X-API-Key: KEY)"
                    .into(),
            )),
        }
    }
}

/// The key sent in `X-API-Key` or as `Authorization: Bearer`. Both may be
/// sent, but then with the same key: two different keys are 400, so that
/// a valid key in one header never covers a bad one in the other.
fn presented_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let malformed = || ApiError::Unauthorized("malformed API key header".into());
    let mut sent: Option<&str> = None;
    // Every value of both headers: each must name the same key, so that a
    // valid key in one never covers another in a second copy.
    let x_api_key = headers
        .get_all("x-api-key")
        .iter()
        .map(|v| v.to_str().map(str::trim).map_err(|_| malformed()));
    let bearer = headers.get_all(header::AUTHORIZATION).iter().map(|v| {
        match v.to_str().map_err(|_| malformed())?.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => Ok(key.trim()),
            _ => Err(ApiError::Unauthorized(
                "the Authorization header must be 'Bearer KEY'".into(),
            )),
        }
    });
    for key in x_api_key.chain(bearer) {
        let key = key?;
        match sent {
            Some(first) if first != key => {
                return Err(ApiError::BadRequest(
                    "two different API keys were sent (X-API-Key and Authorization, \
                     or either twice)"
                        .into(),
                ));
            }
            _ => sent = Some(key),
        }
    }
    Ok(sent)
}

fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || (essence.len() > 5
            && essence.is_char_boundary(essence.len() - 5)
            && essence[essence.len() - 5..].eq_ignore_ascii_case("+json")
            && essence.to_ascii_lowercase().starts_with("application/"))
}

/// The `{code}` of a path, checked: 400 when malformed.
pub(crate) struct Code(pub ShortCode);

impl<S: Send + Sync> FromRequestParts<S> for Code {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let malformed =
            |e: &dyn std::fmt::Display| ApiError::BadRequest(format!("malformed short code: {e}"));
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| malformed(&e))?;
        ShortCode::parse(&raw).map(Self).map_err(|e| malformed(&e))
    }
}

/// The domain a management route names: `?domain=HOST` (a host in either
/// form, or `default`), `None` when absent. 400 for a domain that is not
/// in use.
pub(crate) struct OnDomain(pub Option<DomainId>);

impl FromRequestParts<AppState> for OnDomain {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match domain_param(parts.uri.query())? {
            None => Ok(Self(None)),
            Some(name) => Ok(Self(Some(state.links.domain_named(&name)?))),
        }
    }
}

/// The domain a request means for `caller` when it names none: a key
/// limited to a domain works on its own, any other on the default domain.
pub(crate) fn domain_or_own(named: Option<DomainId>, caller: Option<&Principal>) -> DomainId {
    named
        .or_else(|| caller.and_then(|c| c.domain))
        .unwrap_or(DomainId::DEFAULT)
}

/// The `domain` parameter of a query string, decoded; other parameters
/// are the handler's.
pub(super) fn domain_param(query: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(query) = query else {
        return Ok(None);
    };
    Ok(url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "domain")
        .map(|(_, v)| v.into_owned()))
}

/// A code on the domain `?domain=` names: what `/api/v1/links/{code}`
/// and its visits route work on. Without `?domain=`, the caller's own
/// domain (`CodeOn::key`).
pub(crate) struct CodeOn {
    code: ShortCode,
    domain: Option<DomainId>,
}

impl CodeOn {
    /// The link `caller` means.
    pub(crate) fn key(self, caller: &Principal) -> LinkKey {
        LinkKey::new(domain_or_own(self.domain, Some(caller)), self.code)
    }
}

impl FromRequestParts<AppState> for CodeOn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Code(code) = Code::from_request_parts(parts, state).await?;
        let OnDomain(domain) = OnDomain::from_request_parts(parts, state).await?;
        Ok(Self { code, domain })
    }
}

/// A route's one path parameter as text (`{host}`, `{file}`): 400 as
/// JSON, like every other error, when it is not UTF-8 once decoded.
pub(crate) struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(segment)| Self(segment))
            .map_err(|e| ApiError::BadRequest(format!("malformed path: {e}")))
    }
}

/// The domain a request's `Host` names, for `/`, `/{code}` and the QR
/// routes: 404 for an unknown host under `--unknown-host reject`.
pub(crate) struct HostDomain(pub DomainId);

impl FromRequestParts<AppState> for HostDomain {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state
            .links
            .domains()
            .of_request(request_host(&parts.uri, parts.headers.get(header::HOST)))
            .map(Self)
            .ok_or_else(unknown_host)
    }
}

/// The domain `?domain=` names, else the one the `Host` names (the QR
/// routes: the page asks for a link of any domain's code on its own host).
pub(crate) struct AskedDomain(pub DomainId);

impl FromRequestParts<AppState> for AskedDomain {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // An unknown host refused stays refused, whatever the query says.
        let HostDomain(id) = HostDomain::from_request_parts(parts, state).await?;
        match domain_param(parts.uri.query())? {
            Some(name) => Ok(Self(state.links.domain_named(&name)?)),
            None => Ok(Self(id)),
        }
    }
}

/// The host a request names: the target's authority (absolute form),
/// else its `Host` header (`host`: found by the caller, which the hot path
/// does in its one pass over the headers).
pub(super) fn request_host<'a>(
    uri: &'a axum::http::Uri,
    host: Option<&'a axum::http::HeaderValue>,
) -> Option<&'a [u8]> {
    match uri.authority() {
        Some(authority) => Some(authority.as_str().as_bytes()),
        None => host.map(|h| h.as_bytes()),
    }
}

pub(super) fn unknown_host() -> ApiError {
    ApiError::NotFound("this server has no domain of that name".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_json_content_types() {
        let mut h = HeaderMap::new();
        assert!(!is_json_content_type(&h));
        for (v, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON", true),
            ("application/vnd.api+json", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("text/+json", false),
        ] {
            h.insert(header::CONTENT_TYPE, v.parse().expect("header value"));
            assert_eq!(is_json_content_type(&h), ok, "{v}");
        }
    }
}
