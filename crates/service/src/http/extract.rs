//! Typed extractors: request input becomes domain types here, once, with
//! each way it can be wrong answered by its own [`ApiError`].

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Map, Value};

use super::AppState;
use super::error::ApiError;
use crate::domain::rules::MAX_PASSWORD_BYTES;
use crate::domain::{DomainId, DomainRedirects, Host, LinkKey, ShortCode, TargetUrl, Timestamp};
use crate::keys::{AuthError, Principal};

/// The body of a create (`POST /link`, `POST /api/v1/links`): `url`, and
/// optionally `code` (an alias), `expires_at` (RFC 3339, in the future) and
/// `max_visits` (a positive integer).
pub struct NewLinkBody {
    pub url: TargetUrl,
    pub code: Option<ShortCode>,
    /// The domain's name as sent (a host, or `default`); resolved against
    /// the domains in use by the handler.
    pub domain: Option<String>,
    pub expires_at: Option<Timestamp>,
    pub max_visits: Option<u64>,
    /// A password in clear, hashed by the handler.
    pub password: Option<String>,
    /// Rules as sent, checked by the handler against the target policy.
    pub rules: Option<Value>,
    pub expired_url: Option<TargetUrl>,
}

impl FromRequest<AppState> for NewLinkBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        Self::from_fields(json_object(req, state).await?)
    }
}

impl NewLinkBody {
    /// Parses a create's body as read from the wire (the fuzz target's
    /// way in; requests go through [`FromRequest`], which checks the
    /// content type and size first).
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        Self::from_fields(parse_object(body)?)
    }

    fn from_fields(mut fields: Map<String, Value>) -> Result<Self, ApiError> {
        let url = url_field(fields.remove("url"))?;
        let code = match fields.remove("code") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                Some(ShortCode::parse_alias(&s).map_err(|e| ApiError::BadRequest(e.to_string()))?)
            }
            Some(_) => return Err(ApiError::BadRequest("field 'code' must be a string".into())),
        };
        let domain = match fields.remove("domain") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                return Err(ApiError::BadRequest(
                    "field 'domain' must be a string".into(),
                ));
            }
        };
        let expires_at = expiry_field(fields.remove("expires_at"))?;
        let max_visits = max_visits_field(fields.remove("max_visits"))?;
        let password = password_field(fields.remove("password"))?;
        let rules = fields.remove("rules").filter(|v| !v.is_null());
        let expired_url = expired_url_field(fields.remove("expired_url"))?;
        refuse_unknown(
            &fields,
            "url, code, domain, expires_at, max_visits, password, rules, expired_url",
        )?;
        Ok(Self {
            url,
            code,
            domain,
            expires_at,
            max_visits,
            password,
            rules,
            expired_url,
        })
    }
}

/// The body of `PATCH /api/v1/links/{code}`: `url`, `expires_at` and
/// `max_visits`, each optional (`null` clears an expiry or a limit).
pub struct PatchBody {
    pub url: Option<TargetUrl>,
    pub expires_at: Option<Option<Timestamp>>,
    pub max_visits: Option<Option<u64>>,
    /// `Some(None)`: remove the password.
    pub password: Option<Option<String>>,
    /// `Some(Value::Null)` or an empty array: remove the rules.
    pub rules: Option<Value>,
    pub expired_url: Option<Option<TargetUrl>>,
}

impl FromRequest<AppState> for PatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let mut fields = json_object(req, state).await?;
        let url = match fields.remove("url") {
            None => None,
            Some(v) => Some(url_field(Some(v))?),
        };
        let expires_at = match fields.remove("expires_at") {
            None => None,
            Some(v) => Some(expiry_field(Some(v))?),
        };
        let max_visits = match fields.remove("max_visits") {
            None => None,
            Some(v) => Some(max_visits_field(Some(v))?),
        };
        let password = match fields.remove("password") {
            None => None,
            Some(v) => Some(password_field(Some(v))?),
        };
        let rules = fields.remove("rules");
        let expired_url = match fields.remove("expired_url") {
            None => None,
            Some(v) => Some(expired_url_field(Some(v))?),
        };
        refuse_unknown(
            &fields,
            "url, expires_at, max_visits, password, rules, expired_url",
        )?;
        Ok(Self {
            url,
            expires_at,
            max_visits,
            password,
            rules,
            expired_url,
        })
    }
}

/// The body of `POST /api/v1/domains`: `host`, and each redirect
/// optionally.
pub struct NewDomainBody {
    pub host: Host,
    pub redirects: DomainRedirects,
}

impl FromRequest<AppState> for NewDomainBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let mut fields = json_object(req, state).await?;
        let host = match fields.remove("host") {
            Some(Value::String(s)) => {
                Host::parse(&s).map_err(|e| ApiError::BadRequest(format!("host: {e}")))?
            }
            None | Some(Value::Null) => {
                return Err(ApiError::BadRequest("field 'host' is required".into()));
            }
            Some(_) => return Err(ApiError::BadRequest("field 'host' must be a string".into())),
        };
        let mut redirects = DomainRedirects::default();
        for (name, slot) in redirect_slots(&mut redirects) {
            if let Some(value) = fields.remove(name) {
                *slot = redirect_field(name, value)?;
            }
        }
        refuse_unknown(
            &fields,
            "host, root_redirect, not_found_redirect, expired_redirect",
        )?;
        Ok(Self { host, redirects })
    }
}

/// The body of `PATCH /api/v1/domains/{host}`: each redirect that is
/// present is set (`null` clears it).
pub struct DomainPatchBody(pub Vec<(&'static str, Option<TargetUrl>)>);

impl DomainPatchBody {
    /// `current` with this patch's redirects set.
    pub fn apply(self, mut current: DomainRedirects) -> DomainRedirects {
        for (name, value) in self.0 {
            for (slot_name, slot) in redirect_slots(&mut current) {
                if slot_name == name {
                    *slot = value.clone();
                }
            }
        }
        current
    }
}

impl FromRequest<AppState> for DomainPatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let mut fields = json_object(req, state).await?;
        let mut set = Vec::new();
        for name in REDIRECT_FIELDS {
            if let Some(value) = fields.remove(name) {
                set.push((name, redirect_field(name, value)?));
            }
        }
        refuse_unknown(
            &fields,
            "root_redirect, not_found_redirect, expired_redirect",
        )?;
        Ok(Self(set))
    }
}

const REDIRECT_FIELDS: [&str; 3] = ["root_redirect", "not_found_redirect", "expired_redirect"];

fn redirect_slots(r: &mut DomainRedirects) -> [(&'static str, &mut Option<TargetUrl>); 3] {
    [
        (REDIRECT_FIELDS[0], &mut r.root),
        (REDIRECT_FIELDS[1], &mut r.not_found),
        (REDIRECT_FIELDS[2], &mut r.expired),
    ]
}

/// A redirect field: a URL with the rules of a link's, or `null`.
fn redirect_field(name: &str, value: Value) -> Result<Option<TargetUrl>, ApiError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => TargetUrl::parse(&s)
            .map(Some)
            .map_err(|e| ApiError::BadRequest(format!("{name}: {e}"))),
        _ => Err(ApiError::BadRequest(format!(
            "field '{name}' must be a URL or null"
        ))),
    }
}

/// Reads a JSON object body: 415 without a JSON content type, 413 over
/// the size limit, 400 when it is not an object.
async fn json_object(req: Request, state: &AppState) -> Result<Map<String, Value>, ApiError> {
    if !is_json_content_type(req.headers()) {
        return Err(ApiError::UnsupportedMediaType(
            "expected Content-Type: application/json".into(),
        ));
    }
    // Refused from the declared length, before a byte of the body is read
    // (and so before `100 Continue` is sent to a client that expects it).
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > state.max_body_bytes as u64) {
        return Err(ApiError::PayloadTooLarge(format!(
            "request body is too large (over {} bytes)",
            state.max_body_bytes
        )));
    }
    let body = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!(
                "request body is too large (over {} bytes)",
                state.max_body_bytes
            ))
        } else {
            ApiError::BadRequest(format!("could not read request body: {rejection}"))
        }
    })?;
    parse_object(&body)
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::BadRequest("body must be a JSON object".into()));
    }
    // Read again, as an object that refuses a field given twice: a filter
    // in front that reads the first `url` must not see another URL than
    // the one stored.
    let UniqueFields(fields) = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))?;
    Ok(fields)
}

/// A JSON object whose fields each appear once.
struct UniqueFields(Map<String, Value>);

impl<'de> serde::Deserialize<'de> for UniqueFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = UniqueFields;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<UniqueFields, A::Error> {
                let mut fields = Map::new();
                while let Some((name, value)) = access.next_entry::<String, Value>()? {
                    if fields.contains_key(&name) {
                        return Err(serde::de::Error::custom(format!(
                            "field '{name}' is given twice"
                        )));
                    }
                    fields.insert(name, value);
                }
                Ok(UniqueFields(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Checks `url` step by step, so that each way it can be wrong gets its
/// own message.
fn url_field(value: Option<Value>) -> Result<TargetUrl, ApiError> {
    match value {
        None | Some(Value::Null) => Err(ApiError::BadRequest("field 'url' is required".into())),
        Some(Value::String(s)) if s.is_empty() => {
            Err(ApiError::BadRequest("field 'url' must not be empty".into()))
        }
        Some(Value::String(s)) => {
            TargetUrl::parse(&s).map_err(|e| ApiError::BadRequest(e.to_string()))
        }
        Some(_) => Err(ApiError::BadRequest("field 'url' must be a string".into())),
    }
}

/// `expires_at`: absent or null is none; otherwise RFC 3339 in the future.
fn expiry_field(value: Option<Value>) -> Result<Option<Timestamp>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let at = Timestamp::parse(&s).map_err(|e| ApiError::BadRequest(e.to_string()))?;
            if at <= Timestamp::now() {
                return Err(ApiError::BadRequest(
                    "field 'expires_at' must be in the future".into(),
                ));
            }
            Ok(Some(at))
        }
        Some(_) => Err(ApiError::BadRequest(
            "field 'expires_at' must be an RFC 3339 string or null".into(),
        )),
    }
}

/// `max_visits`: absent or null is no limit; otherwise 1 or more.
fn max_visits_field(value: Option<Value>) -> Result<Option<u64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(m) if (1..=i64::MAX as u64).contains(&m) => Ok(Some(m)),
            _ => Err(ApiError::BadRequest(format!(
                "field 'max_visits' must be a whole number from 1 to {}, not {n}",
                i64::MAX
            ))),
        },
        Some(_) => Err(ApiError::BadRequest(
            "field 'max_visits' must be a whole number or null".into(),
        )),
    }
}

/// The body of a link's password form (`POST /{code}`): `password=...`,
/// as `application/x-www-form-urlencoded`.
pub struct PasswordForm(pub String);

/// Longest password form: the longest password, percent-encoded.
const MAX_FORM_BYTES: usize = 3 * MAX_PASSWORD_BYTES + 64;

impl<S: Send + Sync> FromRequest<S> for PasswordForm {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
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
        let too_large = || {
            ApiError::PayloadTooLarge(format!(
                "the form is too large (over {MAX_FORM_BYTES} bytes)"
            ))
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_FORM_BYTES as u64) {
            return Err(too_large());
        }
        let body = axum::body::to_bytes(req.into_body(), MAX_FORM_BYTES)
            .await
            .map_err(|_| too_large())?;
        let password = url::form_urlencoded::parse(&body)
            .find(|(name, _)| name == "password")
            .map(|(_, value)| value.into_owned())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ApiError::BadRequest("field 'password' is required".into()))?;
        if password.len() > MAX_PASSWORD_BYTES {
            return Err(ApiError::BadRequest(format!(
                "field 'password' must be 1 to {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        Ok(Self(password))
    }
}

/// `password`: absent or null is none; otherwise 1 to 1,024 bytes.
fn password_field(value: Option<Value>) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_PASSWORD_BYTES => Ok(Some(s)),
        Some(Value::String(_)) => Err(ApiError::BadRequest(format!(
            "field 'password' must be 1 to {MAX_PASSWORD_BYTES} bytes"
        ))),
        Some(_) => Err(ApiError::BadRequest(
            "field 'password' must be a string or null".into(),
        )),
    }
}

/// `expired_url`: absent or null is none; otherwise a URL as `url` is.
fn expired_url_field(value: Option<Value>) -> Result<Option<TargetUrl>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => TargetUrl::parse(&s)
            .map(Some)
            .map_err(|e| ApiError::BadRequest(format!("field 'expired_url': {e}"))),
        Some(_) => Err(ApiError::BadRequest(
            "field 'expired_url' must be a string or null".into(),
        )),
    }
}

/// A misspelt field must not pass silently.
fn refuse_unknown(fields: &Map<String, Value>, known: &str) -> Result<(), ApiError> {
    match fields.keys().next() {
        None => Ok(()),
        Some(name) => Err(ApiError::BadRequest(format!(
            "unknown field '{name}' (known: {known})"
        ))),
    }
}

/// The API key a request presents, if any: `Authorization: Bearer KEY` or
/// `X-API-Key: KEY`. A key that is sent must be valid (401 otherwise).
pub struct Caller(pub Option<Principal>);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(secret) = presented_key(&parts.headers)? else {
            return Ok(Self(None));
        };
        match state.links.keys().authenticate_fresh(secret).await {
            Ok(p) => Ok(Self(Some(p))),
            Err(e @ (AuthError::Unknown | AuthError::Revoked)) => {
                Err(ApiError::Unauthorized(e.to_string()))
            }
        }
    }
}

/// A request that needs a key: 401 without a valid one.
pub struct Key(pub Principal);

impl FromRequestParts<AppState> for Key {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Caller::from_request_parts(parts, state).await? {
            Caller(Some(p)) => Ok(Self(p)),
            Caller(None) => Err(ApiError::Unauthorized(
                "an API key is required (Authorization: Bearer KEY, or X-API-Key: KEY)".into(),
            )),
        }
    }
}

/// The address of the connection's peer (a proxy's, behind one). Set on
/// `POST` requests only (see `server::connection`): the rate limits on
/// creates are its one reader.
pub struct ClientAddr(pub Option<std::net::SocketAddr>);

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
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.stats_public || !state.links.keys().any() {
            return Ok(Self);
        }
        match Caller::from_request_parts(parts, state).await? {
            Caller(Some(p)) if p.admin => Ok(Self),
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
    let x_api_key = match headers.get("x-api-key") {
        Some(v) => Some(v.to_str().map(str::trim).map_err(|_| malformed())?),
        None => None,
    };
    let bearer = match headers.get(header::AUTHORIZATION) {
        Some(v) => match v.to_str().map_err(|_| malformed())?.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => Some(key.trim()),
            _ => {
                return Err(ApiError::Unauthorized(
                    "the Authorization header must be 'Bearer KEY'".into(),
                ));
            }
        },
        None => None,
    };
    match (x_api_key, bearer) {
        (Some(a), Some(b)) if a != b => Err(ApiError::BadRequest(
            "two different API keys were sent (X-API-Key and Authorization)".into(),
        )),
        (a, b) => Ok(a.or(b)),
    }
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
pub struct Code(pub ShortCode);

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
pub struct OnDomain(pub Option<DomainId>);

impl FromRequestParts<AppState> for OnDomain {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match domain_param(parts.uri.query())? {
            None => Ok(Self(None)),
            Some(name) => state.domain_named(&name).map(|d| Self(Some(d))),
        }
    }
}

/// The domain a request means for `caller` when it names none: a key
/// limited to a domain works on its own, any other on the default domain.
pub fn domain_or_own(named: Option<DomainId>, caller: Option<&Principal>) -> DomainId {
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
pub struct CodeOn {
    code: ShortCode,
    domain: Option<DomainId>,
}

impl CodeOn {
    /// The link `caller` means.
    pub fn key(self, caller: &Principal) -> LinkKey {
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
pub struct Segment(pub String);

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
pub struct HostDomain(pub DomainId);

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
pub struct AskedDomain(pub DomainId);

impl FromRequestParts<AppState> for AskedDomain {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // An unknown host refused stays refused, whatever the query says.
        let HostDomain(id) = HostDomain::from_request_parts(parts, state).await?;
        match domain_param(parts.uri.query())? {
            Some(name) => state.domain_named(&name).map(Self),
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

    fn parse_new_link(body: &[u8]) -> Result<TargetUrl, ApiError> {
        url_field(parse_object(body)?.remove("url"))
    }

    #[test]
    fn each_bad_body_has_its_own_message() {
        for (body, needle) in [
            (&b"{"[..], "not valid JSON"),
            (b"[1]", "JSON object"),
            (b"{}", "required"),
            (b"{\"url\":null}", "required"),
            (b"{\"url\":\"\"}", "must not be empty"),
            (b"{\"url\":5}", "must be a string"),
            (b"{\"url\":\"ftp://x.y\"}", "scheme"),
        ] {
            let e = parse_new_link(body).expect_err("refused");
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert!(e.to_string().contains(needle), "{e} / {needle}");
        }
        assert!(parse_new_link(b"{\"url\":\"https://a.b/c\"}").is_ok());
    }

    #[test]
    fn expiries_must_be_future_rfc_3339() {
        assert!(matches!(expiry_field(None), Ok(None)));
        assert!(matches!(expiry_field(Some(Value::Null)), Ok(None)));
        assert!(expiry_field(Some("2999-01-01T00:00:00Z".into())).is_ok_and(|t| t.is_some()));
        for bad in ["2001-01-01T00:00:00Z", "next week"] {
            assert!(expiry_field(Some(bad.into())).is_err(), "{bad}");
        }
        assert!(expiry_field(Some(Value::from(5))).is_err());
    }
}
