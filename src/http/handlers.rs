//! The request handlers: parse the input into domain types, call
//! [`Links`](crate::links::Links), shape the answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use crate::domain::{ShortCode, TargetUrl};

pub async fn heart_beat() -> Json<Value> {
    Json(json!({ "OK": true }))
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
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let target = parse_create_body(&headers, body)?;
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

/// Checks the body of `POST /link` step by step, so that each way it can be
/// wrong gets its own message.
fn parse_create_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<TargetUrl, ApiError> {
    if !is_json_content_type(headers) {
        return Err(ApiError::UnsupportedMediaType(
            "expected Content-Type: application/json".into(),
        ));
    }
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge("request body is too large".into())
        } else {
            ApiError::BadRequest(format!("could not read request body: {rejection}"))
        }
    })?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(ApiError::BadRequest("body must be a JSON object".into()));
    };
    match fields.remove("url") {
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

fn parse_code(path: Result<Path<String>, PathRejection>) -> Result<ShortCode, ApiError> {
    let Path(raw) = path.map_err(|e| ApiError::BadRequest(format!("malformed short code: {e}")))?;
    ShortCode::parse(&raw).map_err(|e| ApiError::BadRequest(format!("malformed short code: {e}")))
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
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = parse_code(path)?;
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
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = parse_code(path)?;
    let target = resolve(&state, &code).await?;
    // TargetUrl is ASCII without controls by construction, so this only
    // fails if that invariant is broken: a 500, not a panic.
    let location = header::HeaderValue::from_str(target.as_str())
        .map_err(|e| ApiError::Internal(format!("stored URL is not a valid header: {e}")))?;
    Ok((state.redirect_status, [(header::LOCATION, location)]).into_response())
}

pub async fn stats(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut store = state.links.store().stats().await?;
    if let Value::Object(map) = &mut store {
        map.insert("cache".into(), state.links.cache().stats());
        map.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        map.insert(
            "redirect_status".into(),
            state.redirect_status.as_u16().into(),
        );
    }
    Ok(Json(store))
}

pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
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
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            assert_eq!(is_json_content_type(&h), ok, "{v}");
        }
    }
}
