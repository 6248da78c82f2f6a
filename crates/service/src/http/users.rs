//! `/api/v1/users`: the people of this server and their roles. Only an
//! admin reads or changes them; the links service decides
//! (`Links::create_user` and its kin).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, ErrorMessage};
use super::extract::{Json as Body, Key, Segment};
use crate::users::{CreatedUser, NewUserBody, UserPatchBody, UserView};

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct UserList {
    users: Vec<UserView>,
}

fn no_such(name: &str) -> ApiError {
    ApiError::NotFound(format!("no user '{name}'"))
}

const NAME_PARAM: &str = "A user's name, in any case";

#[utoipa::path(get, path = "/api/v1/users", operation_id = "list_users", tag = "users",
    responses(
        (status = 200, description = "Every user, disabled ones included, in the order they were made", body = UserList),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Key(caller): Key,
) -> Result<Json<UserList>, ApiError> {
    let users = state.links.users(&caller).await?;
    Ok(Json(UserList { users }))
}

#[utoipa::path(post, path = "/api/v1/users", operation_id = "create_user", tag = "users",
    request_body(content = NewUserBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Made, with a one-time password shown this once", body = CreatedUser),
        (status = 400, description = "Malformed body, bad name or email, unknown role, domain or field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin", body = ErrorMessage),
        (status = 409, description = "The name is taken, regardless of case", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store or hash now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Key(caller): Key,
    Body(body): Body<NewUserBody>,
) -> Result<(StatusCode, Json<CreatedUser>), ApiError> {
    let created = state.links.create_user(&caller, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/v1/users/{name}", operation_id = "get_user", tag = "users",
    params(("name" = String, Path, description = NAME_PARAM, max_length = 64)),
    responses(
        (status = 200, description = "The user", body = UserView),
        (status = 400, description = "A malformed name", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin", body = ErrorMessage),
        (status = 404, description = "No such user", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Key(caller): Key,
    Segment(name): Segment,
) -> Result<Json<UserView>, ApiError> {
    let user = state
        .links
        .user(&caller, &name)
        .await?
        .ok_or_else(|| no_such(&name))?;
    Ok(Json(state.links.user_view(user)))
}

#[utoipa::path(patch, path = "/api/v1/users/{name}", operation_id = "update_user", tag = "users",
    params(("name" = String, Path, description = NAME_PARAM, max_length = 64)),
    request_body(content = UserPatchBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The user as changed; a role or disabled state counts at once", body = UserView),
        (status = 400, description = "Malformed name or body, unknown role, domain or field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin", body = ErrorMessage),
        (status = 404, description = "No such user", body = ErrorMessage),
        (status = 409, description = "An admin's own role or enabled state", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn update(
    State(state): State<AppState>,
    Key(caller): Key,
    Segment(name): Segment,
    Body(body): Body<UserPatchBody>,
) -> Result<Json<UserView>, ApiError> {
    let changed = state
        .links
        .change_user(&caller, &name, body)
        .await?
        .ok_or_else(|| no_such(&name))?;
    Ok(Json(changed))
}

/// Query of `DELETE /api/v1/users/{name}`.
#[derive(Deserialize)]
pub(crate) struct RemoveParams {
    reassign: Option<String>,
}

#[utoipa::path(delete, path = "/api/v1/users/{name}", operation_id = "remove_user", tag = "users",
    params(
        ("name" = String, Path, description = NAME_PARAM, max_length = 64),
        ("reassign" = Option<String>, Query, description = "Another enabled user, who gets the user's links (without it, the links stay the disabled user's)", max_length = 64),
    ),
    responses(
        (status = 204, description = "Disabled, with every key revoked at once"),
        (status = 400, description = "Malformed name, or no such user to reassign to", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin", body = ErrorMessage),
        (status = 404, description = "No such user", body = ErrorMessage),
        (status = 409, description = "An admin's own user", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn remove(
    State(state): State<AppState>,
    Key(caller): Key,
    Segment(name): Segment,
    params: Result<axum::extract::Query<RemoveParams>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let axum::extract::Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    if state
        .links
        .remove_user(&caller, &name, params.reassign.as_deref())
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_such(&name))
    }
}
