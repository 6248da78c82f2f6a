//! The request handlers: take typed input from the extractors, call
//! [`Links`](crate::links::Links), shape the answer.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use super::extract::{Code, NewLink};
use crate::domain::{ShortCode, TargetUrl};
use crate::links::LinkStats;

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

#[derive(Serialize)]
pub struct Created {
    short_link: String,
    /// The full short URL, when the public base URL or the Host is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    short_url: Option<String>,
    link: String,
}

pub async fn create_link(
    State(state): State<AppState>,
    headers: HeaderMap,
    NewLink(target): NewLink,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let code = state.links.create(target.clone()).await?;
    let short_url = state.short_url(&headers, &code);
    Ok((
        StatusCode::CREATED,
        Json(Created {
            short_link: code.to_string(),
            short_url,
            link: target.to_string(),
        }),
    ))
}

async fn resolve(state: &AppState, code: &ShortCode) -> Result<TargetUrl, ApiError> {
    state
        .links
        .resolve(code)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no link with code '{code}'")))
}

pub async fn get_link(
    State(state): State<AppState>,
    Code(code): Code,
) -> Result<Response, ApiError> {
    let target = resolve(&state, &code).await?;
    Ok(Json(LinkBody {
        link: target.as_str(),
    })
    .into_response())
}

/// `GET /{code}` and `HEAD /{code}` (axum answers HEAD from the GET route
/// and drops the body).
pub async fn redirect(
    State(state): State<AppState>,
    Code(code): Code,
) -> Result<Response, ApiError> {
    let target = resolve(&state, &code).await?;
    // TargetUrl is ASCII without controls by construction, so this only
    // fails if that invariant is broken: a 500, not a panic.
    let location = header::HeaderValue::from_str(target.as_str())
        .map_err(|e| ApiError::Internal(format!("stored URL is not a valid header: {e}")))?;
    Ok((state.redirect_status, [(header::LOCATION, location)]).into_response())
}

/// `/stats`: the service's counters and the HTTP layer's own facts.
#[derive(Serialize)]
pub struct Stats {
    #[serde(flatten)]
    links: LinkStats,
    version: &'static str,
    redirect_status: u16,
}

pub async fn stats(State(state): State<AppState>) -> Json<Stats> {
    Json(Stats {
        links: state.links.stats(),
        version: env!("CARGO_PKG_VERSION"),
        redirect_status: state.redirect_status.as_u16(),
    })
}

pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
