//! The request handlers: take typed input from the extractors, call
//! [`Links`](crate::links::Links), shape the answer.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::extract::{Caller, ClientAddr, Code, Key, NewLinkBody, Operator, PatchBody};
use super::{AppState, CreateAuth};
use crate::domain::{Link, ShortCode, TargetUrl, Timestamp};
use crate::links::{LinkStats, Readiness, Resolution, Use};
use crate::store::{LinkPatch, NewLink};
use crate::visits::{Interval, Visit, VisitReport, Window};

#[derive(Serialize)]
pub struct HeartBeat {
    #[serde(rename = "OK")]
    ok: bool,
}

pub async fn heart_beat() -> Json<HeartBeat> {
    Json(HeartBeat { ok: true })
}

#[derive(Serialize)]
struct LinkBody<'a> {
    link: &'a str,
}

/// The seed route's answer to a create.
#[derive(Serialize)]
pub struct Created {
    short_link: String,
    /// The full short URL (see `AppState::short_url`).
    short_url: String,
    link: String,
}

/// The management API's view of a link.
#[derive(Serialize)]
pub struct LinkObject {
    code: String,
    url: String,
    short_url: String,
    created_at: Timestamp,
    expires_at: Option<Timestamp>,
    expired: bool,
    owner: Option<String>,
    /// Counted redirects, those not yet flushed included.
    visits: u64,
    max_visits: Option<u64>,
}

impl AppState {
    fn link_object(&self, headers: &HeaderMap, link: Link) -> LinkObject {
        LinkObject {
            short_url: self.short_url(headers, &link.code),
            expired: link.resolved().is_expired(),
            code: link.code.to_string(),
            url: link.target.to_string(),
            created_at: link.created_at,
            expires_at: link.expires_at,
            owner: link.owner.map(|o| o.name),
            visits: link.visits,
            max_visits: link.max_visits,
        }
    }

    /// The rules both create routes follow: who may create, and who may
    /// choose a code.
    async fn create(
        &self,
        client: ClientAddr,
        headers: &HeaderMap,
        caller: Caller,
        body: NewLinkBody,
    ) -> Result<Link, ApiError> {
        let Caller(caller) = caller;
        if caller.is_none() {
            if self.create_auth == CreateAuth::Key {
                return Err(ApiError::Unauthorized(
                    "creating links needs an API key on this server".into(),
                ));
            }
            if body.code.is_some() {
                return Err(ApiError::Unauthorized(
                    "choosing a code needs an API key".into(),
                ));
            }
        }
        self.limiter.check(client.0, headers, caller.as_ref())?;
        self.targets.check(&body.url).map_err(bad_target)?;
        let new = NewLink {
            target: body.url,
            code: body.code,
            expires_at: body.expires_at,
            owner: caller.map(|p| p.owner()),
            max_visits: body.max_visits,
        };
        Ok(self.links.create(new).await?)
    }
}

/// `POST /link`, the seed API.
pub async fn create_link(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    caller: Caller,
    body: NewLinkBody,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let link = state.create(client, &headers, caller, body).await?;
    let short_url = state.short_url(&headers, &link.code);
    Ok((
        StatusCode::CREATED,
        Json(Created {
            short_link: link.code.to_string(),
            short_url,
            link: link.target.to_string(),
        }),
    ))
}

/// `POST /api/v1/links`: the same create, answered with the link object.
pub async fn api_create(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    caller: Caller,
    body: NewLinkBody,
) -> Result<(StatusCode, Json<LinkObject>), ApiError> {
    let link = state.create(client, &headers, caller, body).await?;
    Ok((StatusCode::CREATED, Json(state.link_object(&headers, link))))
}

fn bad_target(e: crate::domain::TargetUrlError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

fn not_found(code: &ShortCode) -> ApiError {
    ApiError::NotFound(format!("no link with code '{code}'"))
}

async fn resolve(state: &AppState, code: &ShortCode, how: Use<'_>) -> Result<TargetUrl, ApiError> {
    match state.links.resolve(code, how).await? {
        Resolution::Found(target) => Ok(target),
        Resolution::Expired => Err(ApiError::Gone(format!("link '{code}' has expired"))),
        Resolution::Exhausted => Err(ApiError::Gone(format!(
            "link '{code}' has reached its visit limit"
        ))),
        Resolution::Missing => Err(not_found(code)),
    }
}

/// `GET /link/{code}`: where a link leads, as JSON; not a visit.
pub async fn get_link(
    State(state): State<AppState>,
    Code(code): Code,
) -> Result<Response, ApiError> {
    let target = resolve(&state, &code, Use::Look).await?;
    Ok(Json(LinkBody {
        link: target.as_str(),
    })
    .into_response())
}

/// `GET /{code}` and `HEAD /{code}` (axum answers HEAD from the GET route
/// and drops the body). A GET that redirects is a visit, with its
/// User-Agent and Referer; a HEAD is not. The request is taken whole so
/// that those headers are read in place, not copied.
pub async fn redirect(
    State(state): State<AppState>,
    Code(code): Code,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = request.headers();
    let how = if request.method() == Method::GET {
        Use::Visit(Visit {
            user_agent: headers.get(header::USER_AGENT).map(|v| v.as_bytes()),
            referer: headers.get(header::REFERER).map(|v| v.as_bytes()),
        })
    } else {
        Use::Look
    };
    let target = resolve(&state, &code, how).await?;
    // TargetUrl is ASCII without controls by construction, so this only
    // fails if that invariant is broken: a 500, not a panic.
    let location = header::HeaderValue::from_str(target.as_str())
        .map_err(|e| ApiError::Internal(format!("stored URL is not a valid header: {e}")))?;
    // Revalidated on every use: a cached redirect (301 and 308 are cached
    // by default) must not outlive an edit or a delete.
    let mut response = (
        state.redirect_status,
        [
            (header::LOCATION, location),
            (
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("private, max-age=0"),
            ),
        ],
    )
        .into_response();
    if let Some(policy) = &state.referrer_policy {
        response
            .headers_mut()
            .insert(header::REFERRER_POLICY, policy.clone());
    }
    Ok(response)
}

pub async fn api_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    Code(code): Code,
) -> Result<Json<LinkObject>, ApiError> {
    let link = state
        .links
        .get(&caller, &code)
        .await?
        .ok_or_else(|| not_found(&code))?;
    Ok(Json(state.link_object(&headers, link)))
}

pub async fn api_update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    Code(code): Code,
    body: PatchBody,
) -> Result<Json<LinkObject>, ApiError> {
    if let Some(url) = &body.url {
        state.targets.check(url).map_err(bad_target)?;
    }
    let patch = LinkPatch {
        target: body.url,
        expires_at: body.expires_at,
        max_visits: body.max_visits,
    };
    let link = state
        .links
        .update(&caller, &code, patch)
        .await?
        .ok_or_else(|| not_found(&code))?;
    Ok(Json(state.link_object(&headers, link)))
}

pub async fn api_delete(
    State(state): State<AppState>,
    Key(caller): Key,
    Code(code): Code,
) -> Result<StatusCode, ApiError> {
    if state.links.delete(&caller, &code).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&code))
    }
}

/// Query of `GET /api/v1/links/{code}/visits`, as sent.
#[derive(Deserialize)]
pub struct VisitParams {
    from: Option<String>,
    to: Option<String>,
    interval: Option<String>,
}

/// `GET /api/v1/links/{code}/visits`: the link's visits in a window.
pub async fn api_visits(
    State(state): State<AppState>,
    Key(caller): Key,
    Code(code): Code,
    params: Result<Query<VisitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<VisitReport>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    let time = |name: &str, raw: Option<String>| {
        raw.filter(|s| !s.is_empty())
            .map(|s| Timestamp::parse(&s).map_err(|e| ApiError::BadRequest(format!("{name}: {e}"))))
            .transpose()
    };
    let from = time("from", params.from)?;
    let to = time("to", params.to)?;
    if let (Some(f), Some(t)) = (from, to)
        && f >= t
    {
        return Err(ApiError::BadRequest("'from' must be before 'to'".into()));
    }
    let interval = match params.interval.as_deref() {
        None | Some("") => Interval::Hour,
        Some(raw) => raw.parse().map_err(|_| {
            ApiError::BadRequest(format!("interval must be 'hour' or 'day', not '{raw}'"))
        })?,
    };
    let counts = state
        .links
        .visit_counts(&caller, &code)
        .await?
        .ok_or_else(|| not_found(&code))?;
    let window = Window { from, to, interval };
    Ok(Json(VisitReport::build(&counts, &window)))
}

/// Query of `GET /api/v1/links`, as sent: checked in [`api_list`] so that
/// each mistake gets its own message.
#[derive(Deserialize)]
pub struct ListParams {
    limit: Option<String>,
    cursor: Option<String>,
    q: Option<String>,
}

/// Links per page unless `limit` says otherwise; at most [`MAX_LIMIT`].
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 1000;

#[derive(Serialize)]
pub struct LinkList {
    links: Vec<LinkObject>,
    next_cursor: Option<String>,
}

pub async fn api_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<LinkList>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    let limit = match params.limit.as_deref() {
        None => DEFAULT_LIMIT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("limit must be 1 to {MAX_LIMIT}, not '{raw}'"))
            })?,
    };
    let before = match params.cursor.as_deref() {
        None | Some("") => None,
        Some(raw) => Some(
            raw.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::BadRequest(format!("invalid cursor '{raw}'")))?,
        ),
    };
    let q = params.q.filter(|q| !q.is_empty());
    let page = state.links.list(&caller, limit, before, q).await?;
    Ok(Json(LinkList {
        links: page
            .links
            .into_iter()
            .map(|l| state.link_object(&headers, l))
            .collect(),
        next_cursor: page.next.map(|id| id.to_string()),
    }))
}

/// `/stats`: the service's counters and the HTTP layer's own facts.
#[derive(Serialize)]
pub struct Stats {
    #[serde(flatten)]
    links: LinkStats,
    version: &'static str,
    redirect_status: u16,
}

pub async fn stats(State(state): State<AppState>, _: Operator) -> Json<Stats> {
    Json(Stats {
        links: state.links.stats(),
        version: env!("CARGO_PKG_VERSION"),
        redirect_status: state.redirect_status.as_u16(),
    })
}

/// `GET /metrics` on the main port: the `/stats` rule (open until keys
/// exist, then an admin key), and 404 when `--metrics-listen` serves it
/// elsewhere or metrics are off.
pub async fn metrics(State(state): State<AppState>, _: Operator) -> Result<Response, ApiError> {
    match state.metrics {
        Some(handle) => Ok(prometheus(handle, &state.links)),
        None => Err(ApiError::NotFound(
            "no metrics here (off, or served on --metrics-listen)".into(),
        )),
    }
}

/// The Prometheus text exposition of `links`'s metrics.
pub fn prometheus(
    handle: &metrics_exporter_prometheus::PrometheusHandle,
    links: &crate::links::Links,
) -> Response {
    let body = crate::observe::render(handle, &links.stats());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// `GET /health/live`: the process serves.
pub async fn live() -> Json<Health> {
    Json(Health {
        status: "ok",
        reason: None,
    })
}

/// `GET /health/ready`: 200 `ok` or `degraded`, 503 `unavailable` with
/// the reason when writes cannot succeed.
pub async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    let (status, health, reason) = match state.links.readiness().await {
        Readiness::Ready => (StatusCode::OK, "ok", None),
        Readiness::Degraded(why) => (StatusCode::OK, "degraded", Some(why)),
        Readiness::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", Some(why)),
    };
    (
        status,
        Json(Health {
            status: health,
            reason,
        }),
    )
}

#[derive(Serialize)]
pub struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

pub async fn not_found_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
