//! Typed extractors: request input becomes domain types here, once, with
//! each way it can be wrong answered by its own [`ApiError`].

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use super::error::ApiError;
use crate::domain::{ShortCode, TargetUrl};

/// The body of `POST /link`: a JSON object whose `url` is a valid target.
pub struct NewLink(pub TargetUrl);

impl<S: Send + Sync> FromRequest<S> for NewLink {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json_content_type(req.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "expected Content-Type: application/json".into(),
            ));
        }
        let body = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge("request body is too large".into())
            } else {
                ApiError::BadRequest(format!("could not read request body: {rejection}"))
            }
        })?;
        parse_new_link(&body).map(Self)
    }
}

/// Checks the body step by step, so that each way it can be wrong gets its
/// own message.
fn parse_new_link(body: &[u8]) -> Result<TargetUrl, ApiError> {
    let value: Value = serde_json::from_slice(body)
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
}
