//! The request handlers: take typed input from the extractors, call
//! [`Links`](crate::links::Links), shape the answer.

use axum::Json;
use axum::extract::{Query, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, ErrorMessage};
use super::extract::{
    Caller, ClientAddr, Code, CodeOn, Json as Body, Key, OnDomain, Operator, PasswordForm,
};
use super::redirect::{self, Asked, Asks, Finishing};
use crate::domain::{Link, ShortCode, Tags, Timestamp};
use crate::keys::Principal;
use crate::links::bodies::{LinkPatchBody, LinkView, NewLinkBody};
use crate::links::{Asker, CreateRoute, LinkStats, Readiness};
use crate::store::TagCount;
use crate::visits::{Interval, VisitReport, Window};

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct HeartBeat {
    #[serde(rename = "OK")]
    ok: bool,
}

#[utoipa::path(get, path = "/heart-beat", tag = "seed",
    responses((status = 200, description = "The server answers", body = HeartBeat)))]
pub(crate) async fn heart_beat() -> Json<HeartBeat> {
    Json(HeartBeat { ok: true })
}

/// The seed route's answer to a create.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Created {
    short_link: String,
    /// The full short URL (see `AppState::short_url`).
    short_url: String,
    link: String,
}

impl AppState {
    /// `link` as the management API shows it to `caller` (`None`: the
    /// anonymous client that just created it).
    fn link_object(&self, headers: &HeaderMap, caller: Option<&Principal>, link: Link) -> LinkView {
        let short_url = self.short_url(headers, &link.key());
        let secrets = caller.is_none_or(|c| crate::links::sees_secrets(c, &link));
        self.links.view(link, short_url, secrets)
    }

    /// Who a write comes from, as the links service reads it.
    pub(super) fn asker<'a>(
        &self,
        caller: Option<&'a Principal>,
        client: ClientAddr,
        headers: &'a HeaderMap,
    ) -> Asker<'a> {
        Asker {
            caller,
            client: self.trust_proxy.creator(client.0, headers),
            host: self.host(headers),
        }
    }
}

/// The errors both create routes answer, for the OpenAPI document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum CreateErrors {
    #[response(
        status = 400,
        description = "Malformed body, bad URL, bad code, past expiry, bad max_visits, an unknown domain or an unknown field"
    )]
    BadRequest(ErrorMessage),
    /// An invalid key was sent, or this action needs a key
    #[response(status = 401)]
    Unauthorized(ErrorMessage),
    /// The key is limited to another domain
    #[response(status = 403)]
    Forbidden(ErrorMessage),
    /// The chosen code is taken (or was used by a deleted link)
    #[response(status = 409)]
    Conflict(ErrorMessage),
    /// Body over the size limit
    #[response(status = 413)]
    PayloadTooLarge(ErrorMessage),
    /// Content-Type is not JSON
    #[response(status = 415)]
    UnsupportedMediaType(ErrorMessage),
    /// Rate limited
    #[response(status = 429, headers(("retry-after" = u32, description = "Seconds to wait before retrying")))]
    TooManyRequests(ErrorMessage),
    /// Cannot store now (disk full, writes stopped, queue full)
    #[response(status = 503, headers(("retry-after" = u32, description = "Seconds to wait before retrying")))]
    Unavailable(ErrorMessage),
}

/// `POST /link`, the seed API.
#[utoipa::path(post, path = "/link", tag = "seed",
    request_body(content = NewLinkBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Stored durably", body = Created),
        CreateErrors,
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn create_link(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Caller(caller): Caller,
    Body(body): Body<NewLinkBody>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let asker = state.asker(caller.as_ref(), client, &headers);
    let link = state.links.create(&asker, body, CreateRoute::Seed).await?;
    let short_url = state.short_url(&headers, &link.key());
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
#[utoipa::path(post, path = "/api/v1/links", tag = "links",
    request_body(content = NewLinkBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Stored durably", body = LinkView),
        CreateErrors,
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_create(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Caller(caller): Caller,
    Body(body): Body<NewLinkBody>,
) -> Result<(StatusCode, Json<LinkView>), ApiError> {
    let asker = state.asker(caller.as_ref(), client, &headers);
    let link = state.links.create(&asker, body, CreateRoute::Api).await?;
    Ok((
        StatusCode::CREATED,
        Json(state.link_object(&headers, caller.as_ref(), link)),
    ))
}

fn not_found(code: &ShortCode) -> ApiError {
    ApiError::NotFound(format!("no link with code '{code}'"))
}

/// `GET /link/{code}`: where a link leads, as JSON; not a visit.
#[utoipa::path(get, path = "/link/{code}", tag = "seed", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "Where the link leads (not a visit)", body = super::redirect::LinkBody),
        (status = 400, description = "Malformed code", body = ErrorMessage),
        (status = 401, description = "The link is behind a password: its target is not shown", body = ErrorMessage, headers(("www-authenticate" = String, description = "LinkPassword"))),
        (status = 404, description = "No such link, or deleted", body = ErrorMessage),
        (status = 410, description = "Expired, out of visits, or its target blocked", body = ErrorMessage),
    ))]
pub(crate) async fn get_link(
    State(state): State<AppState>,
    Code(code): Code,
    request: axum::extract::Request,
) -> Response<redirect::Body> {
    let asked = Asked {
        asks: Asks::Link,
        code,
        req: request,
        peer: None,
        counting: false,
        password: None,
        finishing: Finishing::ByLayers,
    };
    redirect::answer(&state, asked).wait().await
}

/// `GET /{code}` and `HEAD /{code}` (axum answers HEAD from the GET route
/// and drops the body). A GET that redirects is a visit, with its
/// User-Agent and Referer; a HEAD is not. The request is taken whole so
/// that those headers are read in place, not copied.
#[utoipa::path(method(get, head), path = "/{code}", tag = "redirect", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 301, description = "Redirect (when the server is set to 301)", headers(("location" = String, description = "The target URL"), ("cache-control" = String, description = "private, max-age=0"))),
        (status = 302, description = "Redirect (the default status); a GET counts one visit", headers(("location" = String, description = "The target URL"), ("cache-control" = String, description = "private, max-age=0"))),
        (status = 307, description = "Redirect (when the server is set to 307)", headers(("location" = String, description = "The target URL"), ("cache-control" = String, description = "private, max-age=0"))),
        (status = 308, description = "Redirect (when the server is set to 308)", headers(("location" = String, description = "The target URL"), ("cache-control" = String, description = "private, max-age=0"))),
        (status = 400, description = "Malformed code", body = ErrorMessage),
        (status = 401, description = "The link is behind a password, and none or a wrong one was sent (X-Link-Password): a form (text/html) or JSON", body = ErrorMessage, headers(("www-authenticate" = String, description = "LinkPassword"))),
        (status = 404, description = "No such link, or deleted", body = ErrorMessage),
        (status = 410, description = "Expired, out of visits, or its target blocked", body = ErrorMessage),
        (status = 429, description = "Too many wrong passwords for this link", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 503, description = "Too many passwords being checked, or the request took too long", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn redirect(
    State(state): State<AppState>,
    Code(code): Code,
    request: axum::extract::Request,
) -> Response<redirect::Body> {
    let peer = peer_of(&request);
    let asked = Asked {
        asks: Asks::Redirect,
        code,
        req: request,
        peer,
        counting: true,
        password: None,
        finishing: Finishing::ByLayers,
    };
    redirect::answer(&state, asked).wait().await
}

/// `POST /{code}`: the password form of a link behind one. The right
/// password gets the redirect, a wrong one the form again.
#[utoipa::path(post, path = "/{code}", tag = "seed", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    request_body(content = PasswordForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "The right password: the redirect, as a GET whatever the server's redirect status (Cache-Control: no-store)", headers(("location" = String, description = "The target URL"))),
        (status = 400, description = "Malformed code or form", body = ErrorMessage),
        (status = 401, description = "A wrong password: the form again (text/html) or JSON", body = ErrorMessage, headers(("www-authenticate" = String, description = "LinkPassword"))),
        (status = 403, description = "Sent from another site: an Origin that is null or names another host", body = ErrorMessage),
        (status = 404, description = "No such link", body = ErrorMessage),
        (status = 410, description = "Expired, out of visits, or its target blocked", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Not a form", body = ErrorMessage),
        (status = 429, description = "Too many wrong passwords", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 503, description = "Too many passwords being checked", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn unlock(
    State(state): State<AppState>,
    Code(code): Code,
    ClientAddr(peer): ClientAddr,
    parts: axum::http::request::Parts,
    PasswordForm { password }: PasswordForm,
) -> Response<redirect::Body> {
    if let Err(e) = super::locked::same_origin(&parts) {
        return axum::response::IntoResponse::into_response(e).map(http_body_util::Either::Right);
    }
    let asked = Asked {
        asks: Asks::Redirect,
        code,
        req: axum::http::Request::from_parts(parts, ()),
        peer,
        counting: true,
        password: Some(password),
        finishing: Finishing::ByLayers,
    };
    redirect::answer(&state, asked).wait().await
}

/// The connection's peer, which the server puts on every GET and POST.
fn peer_of<B>(req: &axum::http::Request<B>) -> Option<std::net::SocketAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
}

#[utoipa::path(get, path = "/api/v1/links/{code}", tag = "links", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$"), ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); when absent, the key's own domain for a key limited to one, else the default domain")),
    responses(
        (status = 200, description = "The link", body = LinkView),
        (status = 400, description = "Malformed code", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 404, description = "No such link, or not one this key may manage", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    code: CodeOn,
) -> Result<Json<LinkView>, ApiError> {
    let key = code.key(&caller);
    let link = state
        .links
        .get(&caller, &key)
        .await?
        .ok_or_else(|| not_found(&key.code))?;
    Ok(Json(state.link_object(&headers, Some(&caller), link)))
}

#[utoipa::path(patch, path = "/api/v1/links/{code}", tag = "links", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$"), ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); when absent, the key's own domain for a key limited to one, else the default domain")),
    request_body(content = LinkPatchBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The link as changed", body = LinkView),
        (status = 400, description = "Malformed code or body, bad URL, past expiry, unknown field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 404, description = "No such link, or not one this key may manage", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    code: CodeOn,
    Body(body): Body<LinkPatchBody>,
) -> Result<Json<LinkView>, ApiError> {
    let key = code.key(&caller);
    let asker = state.asker(Some(&caller), ClientAddr(None), &headers);
    let link = state
        .links
        .update(&asker, &caller, &key, body)
        .await?
        .ok_or_else(|| not_found(&key.code))?;
    Ok(Json(state.link_object(&headers, Some(&caller), link)))
}

#[utoipa::path(delete, path = "/api/v1/links/{code}", tag = "links", params(("code" = String, Path, description = "A short code: 1 to 64 of [A-Za-z0-9_-]", pattern = "^[A-Za-z0-9_-]{1,64}$"), ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); when absent, the key's own domain for a key limited to one, else the default domain")),
    responses(
        (status = 204, description = "Deleted; its code is never issued again"),
        (status = 400, description = "Malformed code", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 404, description = "No such link, or not one this key may manage", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_delete(
    State(state): State<AppState>,
    Key(caller): Key,
    code: CodeOn,
) -> Result<StatusCode, ApiError> {
    let key = code.key(&caller);
    if state.links.delete(&caller, &key).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&key.code))
    }
}

/// `interval` of a visit report, as the document describes it.
#[derive(utoipa::ToSchema)]
#[schema(as = Interval)]
#[allow(dead_code)]
pub(crate) enum IntervalParam {
    #[schema(rename = "hour")]
    Hour,
    #[schema(rename = "day")]
    Day,
}

/// Query of `GET /api/v1/links/{code}/visits`, as sent.
#[derive(Deserialize)]
pub(crate) struct VisitParams {
    from: Option<String>,
    to: Option<String>,
    interval: Option<String>,
    format: Option<String>,
}

/// `GET /api/v1/links/{code}/visits`: the link's visits in a window.
#[utoipa::path(get, path = "/api/v1/links/{code}/visits", tag = "links",
    params(
        ("code" = String, Path, description = "A short code", pattern = "^[A-Za-z0-9_-]{1,64}$"),
        ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); when absent, the key's own domain for a key limited to one, else the default domain"),
        ("from" = Option<String>, Query, format = DateTime, description = "Start of the window (RFC 3339), inclusive"),
        ("to" = Option<String>, Query, format = DateTime, description = "End of the window (RFC 3339), exclusive; after from"),
        ("interval" = Option<IntervalParam>, Query, description = "Buckets of the series (default hour)"),
        ("format" = Option<String>, Query, description = "json (the default) or csv: one table with the header dimension,value,start,humans,bots,count"),
    ),
    responses(
        (status = 200, description = "The link's visits in the window", content(
            (crate::visits::VisitReport = "application/json"),
            (String = "text/csv"),
        )),
        (status = 400, description = "Malformed code, from, to, interval or format, or from not before to", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 404, description = "No such link, or not one this key may manage", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_visits(
    State(state): State<AppState>,
    Key(caller): Key,
    code: CodeOn,
    params: Result<Query<VisitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let key = code.key(&caller);
    let asked = ReportAsked::parse(params)?;
    let counts = state
        .links
        .visit_counts(&caller, &key)
        .await?
        .ok_or_else(|| not_found(&key.code))?;
    Ok(asked.answer(&counts, "visits.csv"))
}

/// `GET /api/v1/visits`: every link the key may manage, summed.
#[utoipa::path(get, path = "/api/v1/visits", tag = "links",
    params(
        ("domain" = Option<String>, Query, description = "Only links on this domain (a host, or 'default')"),
        ("from" = Option<String>, Query, format = DateTime, description = "Start of the window (RFC 3339), inclusive"),
        ("to" = Option<String>, Query, format = DateTime, description = "End of the window (RFC 3339), exclusive; after from"),
        ("interval" = Option<IntervalParam>, Query, description = "Buckets of the series (default hour)"),
        ("format" = Option<String>, Query, description = "json (the default) or csv, as for one link"),
    ),
    responses(
        (status = 200, description = "The visits of every link the key may manage, summed, in the window", content(
            (crate::visits::VisitReport = "application/json"),
            (String = "text/csv"),
        )),
        (status = 400, description = "Malformed from, to, interval, format or domain, or from not before to", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "The key is limited to another domain", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_visit_totals(
    State(state): State<AppState>,
    Key(caller): Key,
    OnDomain(domain): OnDomain,
    params: Result<Query<VisitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let asked = ReportAsked::parse(params)?;
    let counts = state.links.visit_totals(&caller, domain).await?;
    Ok(asked.answer(&counts, "all-visits.csv"))
}

/// What a visit report's query asks for: its window, and JSON or CSV.
struct ReportAsked {
    window: Window,
    csv: bool,
}

impl ReportAsked {
    fn parse(
        params: Result<Query<VisitParams>, axum::extract::rejection::QueryRejection>,
    ) -> Result<Self, ApiError> {
        let Query(params) =
            params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
        let time = |name: &str, raw: Option<String>| {
            raw.map(|s| {
                Timestamp::parse(&s).map_err(|e| ApiError::BadRequest(format!("{name}: {e}")))
            })
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
            None => Interval::Hour,
            Some(raw) => raw.parse().map_err(|_| {
                ApiError::BadRequest(format!("interval must be 'hour' or 'day', not '{raw}'"))
            })?,
        };
        let csv = match params.format.as_deref() {
            None | Some("json") => false,
            Some("csv") => true,
            Some(raw) => {
                return Err(ApiError::BadRequest(format!(
                    "format must be 'json' or 'csv', not '{raw}'"
                )));
            }
        };
        Ok(Self {
            window: Window { from, to, interval },
            csv,
        })
    }

    fn answer(&self, counts: &crate::domain::VisitCounts, file: &str) -> Response {
        let report = VisitReport::build(counts, &self.window);
        if !self.csv {
            return Json(report).into_response();
        }
        let disposition = format!("attachment; filename=\"{file}\"");
        (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            report.to_csv(),
        )
            .into_response()
    }
}

/// Query of `GET /api/v1/links`, as sent: checked in [`api_list`] so that
/// each mistake gets its own message.
#[derive(Deserialize)]
pub(crate) struct ListParams {
    domain: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    q: Option<String>,
}

/// Links per page unless `limit` says otherwise; at most [`MAX_LIMIT`].
pub(crate) const DEFAULT_LIMIT: usize = 50;
pub(crate) const MAX_LIMIT: usize = 1000;

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct LinkList {
    links: Vec<LinkView>,
    next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/links", tag = "links",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Links per page (default 50)"),
        ("cursor" = Option<String>, Query, pattern = "^[1-9][0-9]{0,17}$", description = "next_cursor of the previous page"),
        ("q" = Option<String>, Query, description = "Only links whose URL or title contains this text, regardless of case, or whose code starts with it"),
        ("domain" = Option<String>, Query, description = "Only links on this domain (a host, or 'default')"),
        ("tag" = Option<Vec<String>>, Query, explode = true, style = Form, description = "Only links with this tag (regardless of case); repeated, links with every one"),
    ),
    responses(
        (status = 200, description = "The key's links (all, for an admin key), newest first", body = LinkList),
        (status = 400, description = "Bad limit or cursor, or an unknown domain", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "The key is limited to another domain", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    RawQuery(raw): RawQuery,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<LinkList>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    // `tag` may be repeated, which the query struct cannot say.
    let sent = url::form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes());
    let tags: Vec<String> = sent
        .filter(|(name, _)| name == "tag")
        .map(|(_, value)| value.into_owned())
        .collect();
    let tags = Tags::parse(tags.iter().map(String::as_str))
        .map_err(|why| ApiError::BadRequest(format!("tag: {why}")))?;
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
        None => None,
        Some(raw) => Some(
            raw.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::BadRequest(format!("invalid cursor '{raw}'")))?,
        ),
    };
    let q = params.q.filter(|q| !q.is_empty());
    let domain = params
        .domain
        .as_deref()
        .map(|name| state.links.domain_named(name))
        .transpose()?;
    let page = state
        .links
        .list(&caller, domain, limit, before, q, &tags)
        .await?;
    Ok(Json(LinkList {
        links: page
            .links
            .into_iter()
            .map(|l| state.link_object(&headers, Some(&caller), l))
            .collect(),
        next_cursor: page.next.map(|id| id.to_string()),
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct TagList {
    tags: Vec<TagCount>,
}

#[utoipa::path(get, path = "/api/v1/tags", tag = "links", operation_id = "list_tags",
    responses(
        (status = 200, description = "Every tag of the links the caller may manage (all, for an admin or a viewer), with how many links have it, most used first", body = TagList),
        (status = 401, description = "No valid key", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn api_tags(
    State(state): State<AppState>,
    Key(caller): Key,
) -> Result<Json<TagList>, ApiError> {
    let tags = state.links.tags(&caller).await?;
    Ok(Json(TagList { tags }))
}

/// `/stats`: the service's counters and the HTTP layer's own facts.
#[derive(Serialize)]
pub(crate) struct Stats {
    #[serde(flatten)]
    links: LinkStats,
    version: &'static str,
    redirect_status: u16,
    runtime: RuntimeFacts,
}

/// The tokio runtime serving this process: `current_thread` on one CPU.
#[derive(Serialize)]
struct RuntimeFacts {
    flavor: &'static str,
    workers: usize,
}

impl RuntimeFacts {
    fn current() -> Self {
        let handle = tokio::runtime::Handle::current();
        Self {
            flavor: match handle.runtime_flavor() {
                tokio::runtime::RuntimeFlavor::CurrentThread => "current_thread",
                _ => "multi_thread",
            },
            workers: handle.metrics().num_workers(),
        }
    }
}

#[utoipa::path(get, path = "/stats", tag = "operations",
    responses(
        (status = 200, description = "Counters and facts (see docs/api.md); open until API keys exist or with --stats-public", body = Object),
        (status = 401, description = "Keys exist and no valid key was sent", body = ErrorMessage),
        (status = 403, description = "The key is not an admin key", body = ErrorMessage),
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn stats(State(state): State<AppState>, _: Operator) -> Json<Stats> {
    Json(Stats {
        links: state.links.stats(),
        version: env!("CARGO_PKG_VERSION"),
        redirect_status: state.redirect_status.as_u16(),
        runtime: RuntimeFacts::current(),
    })
}

/// `GET /metrics` on the main port: the `/stats` rule (open until keys
/// exist, then an admin key), and 404 when `--metrics-listen` serves it
/// elsewhere or metrics are off.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format; the /stats rule applies", content_type = "text/plain; version=0.0.4; charset=utf-8", body = String),
        (status = 401, description = "Keys exist and no valid key was sent", body = ErrorMessage),
        (status = 403, description = "The key is not an admin key", body = ErrorMessage),
        (status = 404, description = "Metrics are off, or served on --metrics-listen", body = ErrorMessage),
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    _: Operator,
) -> Result<Response, ApiError> {
    match state.metrics {
        Some(handle) => Ok(super::prometheus::answer(handle, &state.links)),
        None => Err(ApiError::NotFound(
            "no metrics here (off, or served on --metrics-listen)".into(),
        )),
    }
}

/// `GET /health/live`: the process serves.
#[utoipa::path(get, path = "/health/live", tag = "operations",
    responses((status = 200, description = "The process serves", body = Health)))]
pub(crate) async fn live() -> Json<Health> {
    Json(Health {
        status: "ok",
        reason: None,
    })
}

/// `GET /health/ready`: 200 `ok` or `degraded`, 503 `unavailable` with
/// the reason when writes cannot succeed.
#[utoipa::path(get, path = "/health/ready", tag = "operations",
    responses(
        (status = 200, description = "ok, or degraded (Valkey down: reads and writes still work)", body = Health),
        (status = 503, description = "Writes cannot succeed: stopped, the disk full, the database file gone", body = Health),
    ))]
pub(crate) async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
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

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Health {
    /// `ok`, `degraded` or `unavailable`.
    #[schema(value_type = String, pattern = "^(ok|degraded|unavailable)$")]
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

pub(crate) async fn not_found_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
