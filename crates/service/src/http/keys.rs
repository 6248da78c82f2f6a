//! `/api/v1/keys`: a signed-in user's own API keys (an admin's: every
//! key). The links service decides who may see and revoke which
//! (`Links::keys_for` and its kin).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, ErrorMessage};
use super::extract::{Json as Body, Key, Segment};
use crate::keys::Via;
use crate::users::{AccountView, CreatedKey, KeyView, NewKeyBody};

#[utoipa::path(get, path = "/api/v1/account", tag = "keys", operation_id = "account",
    responses(
        (status = 200, description = "Who the caller is: the user a key or a session acts as, and its role", body = AccountView),
        (status = 401, description = "No valid key or session", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn account(State(state): State<AppState>, Key(caller): Key) -> Json<AccountView> {
    Json(AccountView {
        domain: caller.domain.map(|d| state.links.domain_label(d)),
        name: caller.name,
        role: caller.role,
        via: match caller.via {
            Via::Key(_) => "key",
            Via::Session { .. } => "session",
            Via::Password => "password",
        },
    })
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct KeyList {
    keys: Vec<KeyView>,
}

#[utoipa::path(get, path = "/api/v1/keys", tag = "keys", operation_id = "list_keys",
    responses(
        (status = 200, description = "The caller's keys (every key, for an admin), revoked ones included, oldest first", body = KeyList),
        (status = 401, description = "No valid key", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Key(caller): Key,
) -> Result<Json<KeyList>, ApiError> {
    let keys = state.links.keys_for(&caller).await?;
    Ok(Json(KeyList { keys }))
}

#[utoipa::path(post, path = "/api/v1/keys", tag = "keys", operation_id = "create_key",
    request_body(content = NewKeyBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Made for the caller's user; the secret is shown this once", body = CreatedKey),
        (status = 400, description = "Malformed body, bad name, unknown domain or field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "A domain the caller may not work on", body = ErrorMessage),
        (status = 409, description = "The name is taken, or the user has as many keys as allowed", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Key(caller): Key,
    Body(body): Body<NewKeyBody>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let created = state.links.create_key(&caller, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(delete, path = "/api/v1/keys/{name}", tag = "keys", operation_id = "revoke_key",
    params(("name" = String, Path, description = "The key's name", max_length = 100)),
    responses(
        (status = 204, description = "Revoked: it stops working at once here, within a second elsewhere"),
        (status = 400, description = "A malformed name", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 404, description = "No such active key of the caller's (of anyone's, for an admin)", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn revoke(
    State(state): State<AppState>,
    Key(caller): Key,
    Segment(name): Segment,
) -> Result<StatusCode, ApiError> {
    if state.links.revoke_key(&caller, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no active key '{name}'")))
    }
}
