//! The one error type handlers return. Clients get a JSON `{"error": ...}`
//! with a status that names the problem; internal details go to the log
//! only.

use std::sync::LazyLock;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::links::LinksError;
use crate::observability::logging::Throttle;
use crate::oidc::OidcError;
use crate::passwords::PasswordError;
use crate::store::{StorageFailure, StoreError};
use crate::throttled;

/// Errors that come in floods (a full disk fails every create) are logged
/// once every 10 s with the number held back.
static INTERNAL: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(Duration::from_secs(10)));
static UNAVAILABLE: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(Duration::from_secs(10)));
/// A damaged database is said once, in words an operator searches for.
static CORRUPT: std::sync::Once = std::sync::Once::new();

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The link existed but has expired.
    #[error("{0}")]
    Gone(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Temporary: the client should retry after the given seconds.
    #[error("{message}")]
    Unavailable { message: String, retry_after: u32 },
    /// A rate limit: the client should retry after the given seconds.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u32 },
    /// A link's password is needed (`wrong`: the one sent is not it).
    #[error("{}", if *wrong { "wrong password" } else { "password required" })]
    Locked { wrong: bool },
    /// A server this one depends on (the identity provider) failed.
    #[error("{0}")]
    BadGateway(String),
    /// Anything the client cannot fix. The detail is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Every error answer's body.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorMessage {
    /// What was wrong, in words; never an internal detail.
    pub error: String,
}

/// What a 401 of a locked link says, and what no cache may keep.
pub(super) fn mark(headers: &mut axum::http::HeaderMap) {
    headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("LinkPassword"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) | Self::Locked { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Self::Internal(detail) => {
                throttled!(INTERNAL, error, %detail, request_id = %crate::observability::logging::request_id(), "internal error");
                "internal server error".to_owned()
            }
            Self::Unavailable { message, .. } => {
                throttled!(UNAVAILABLE, warn, reason = %message, request_id = %crate::observability::logging::request_id(), "answered 503");
                message.clone()
            }
            other => other.to_string(),
        };
        let mut response = (status, Json(ErrorMessage { error: message })).into_response();
        match self {
            Self::Unavailable { retry_after, .. } | Self::TooManyRequests { retry_after, .. } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            }
            Self::Unauthorized(_) => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::Locked { .. } => mark(response.headers_mut()),
            _ => {}
        }
        response
    }
}

const TIMED_OUT: &str = "the request took too long; retry later";

/// The answer to a request that ran past the request timeout: what the
/// router's timeout layer and [`json_for_bodiless_errors`] make of it.
pub(crate) fn timed_out() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(ErrorMessage {
            error: TIMED_OUT.to_owned(),
        }),
    )
        .into_response()
}

/// Errors made by layers rather than handlers (the request timeout, for
/// one) come without a body; give them the same JSON shape as every other
/// error. Responses that already have a content type are left alone.
pub(crate) async fn json_for_bodiless_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let message = match status {
        StatusCode::SERVICE_UNAVAILABLE => TIMED_OUT,
        other => other.canonical_reason().unwrap_or("error"),
    };
    let (mut parts, _) = response.into_parts();
    let body = Json(ErrorMessage {
        error: message.to_owned(),
    })
    .into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, body.into_body())
}

impl From<LinksError> for ApiError {
    fn from(e: LinksError) -> Self {
        match e {
            LinksError::NeedsKey(why) => Self::Unauthorized(why.into()),
            LinksError::Forbidden(why) => Self::Forbidden(why.into()),
            LinksError::Store(e) => e.into(),
            LinksError::Invalid(why) => Self::BadRequest(why),
            e @ LinksError::WrongCredentials => Self::Unauthorized(e.to_string()),
            LinksError::AccountsOff(why) => Self::NotFound(why.into()),
            LinksError::Conflict(why) => Self::Conflict(why),
            LinksError::RateLimited {
                message,
                retry_after,
            } => Self::TooManyRequests {
                message,
                retry_after,
            },
            LinksError::Password(e) => match e {
                PasswordError::TooManyGuesses { retry_after } => Self::TooManyRequests {
                    message: e.to_string(),
                    retry_after,
                },
                PasswordError::Busy { retry_after } => Self::Unavailable {
                    message: e.to_string(),
                    retry_after,
                },
                PasswordError::Failed(detail) => Self::Internal(detail),
            },
            LinksError::SignIn(e) => e.into(),
        }
    }
}

impl From<OidcError> for ApiError {
    fn from(e: OidcError) -> Self {
        match e {
            OidcError::Off => Self::NotFound(e.to_string()),
            OidcError::UnknownFlow | OidcError::OtherBrowser => Self::BadRequest(e.to_string()),
            OidcError::Provider(_) => {
                tracing::warn!(error = %e, "a sign-in through the identity provider failed");
                Self::BadGateway(e.to_string())
            }
            OidcError::Declined(_) | OidcError::Token(_) => {
                tracing::warn!(error = %e, "a sign-in through the identity provider was refused");
                Self::Unauthorized(e.to_string())
            }
            OidcError::Refused(_) => Self::Forbidden(e.to_string()),
            OidcError::TooMany { retry_after } => Self::TooManyRequests {
                message: e.to_string(),
                retry_after,
            },
            OidcError::Store(e) => e.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Busy => Self::Unavailable {
                message: "too many links are waiting to be stored; retry shortly".into(),
                retry_after: 1,
            },
            StoreError::Closed => Self::Unavailable {
                message: "the service is shutting down".into(),
                retry_after: 5,
            },
            StoreError::CodeTaken(code) => Self::Conflict(format!("code '{code}' is taken")),
            StoreError::NameTaken(name) => Self::Conflict(format!("a key named '{name}' exists")),
            StoreError::UserTaken(name) => Self::Conflict(format!(
                "a user named '{name}' exists (names are unique regardless of case)"
            )),
            StoreError::HostTaken(host) => Self::Conflict(format!("the domain '{host}' exists")),
            e @ StoreError::DomainHasLinks(_) => Self::Conflict(e.to_string()),
            StoreError::TooMany(what) => Self::Unavailable {
                message: format!("too many {what}; retry in a minute"),
                retry_after: 60,
            },
            StoreError::CodeSpaceExhausted(_) => Self::Unavailable {
                message: "no free short code was found for this link; retry".into(),
                retry_after: 1,
            },
            // Logged once by the writer when it happened; clients learn
            // only that links cannot be stored by this server for now.
            StoreError::WritesStopped(_) => Self::Unavailable {
                message: "new links cannot be stored: this server's database failed; \
                          existing links still resolve"
                    .into(),
                retry_after: 60,
            },
            StoreError::Storage(kind, detail) => storage_error(kind, detail),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// A database failure as the client sees it: a failing or full disk is a
/// 503 to retry later, never a 500; a damaged file is a 500.
fn storage_error(kind: StorageFailure, detail: String) -> ApiError {
    let unavailable = |message: &str, retry_after| ApiError::Unavailable {
        message: message.into(),
        retry_after,
    };
    match kind {
        StorageFailure::DiskFull => {
            throttled!(INTERNAL, error, %detail, request_id = %crate::observability::logging::request_id(), "the disk is full");
            unavailable("the server's disk is full; retry later", 30)
        }
        StorageFailure::Io | StorageFailure::ReadOnly => {
            throttled!(INTERNAL, error, %detail, request_id = %crate::observability::logging::request_id(),
                "the database cannot be written");
            unavailable("the server cannot write to its disk; retry later", 30)
        }
        StorageFailure::Busy => unavailable("the database is busy; retry shortly", 1),
        StorageFailure::Corrupt => {
            CORRUPT.call_once(|| {
                tracing::error!(
                    %detail,
                    request_id = %crate::observability::logging::request_id(),
                    "database corrupt: run `litelink doctor --full`, and restore from a backup \
                     or `litelink export` what can still be read"
                );
            });
            ApiError::Internal(detail)
        }
        StorageFailure::Other => ApiError::Internal(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_writes_are_a_json_503_that_hides_the_disk_error() {
        let e = StoreError::WritesStopped("fdatasync of /srv/secret/l.db-wal failed: EIO".into());
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "60");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        let message = body["error"].as_str().expect("error message");
        assert!(message.contains("cannot be stored"), "{message}");
        assert!(!message.contains("/srv/secret"), "{message}");
    }

    #[tokio::test]
    async fn an_exhausted_code_space_is_a_json_503_to_retry() {
        let response = ApiError::from(StoreError::CodeSpaceExhausted(16)).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|m| m.contains("no free short code")),
            "{body}"
        );
    }
}
