//! `/api/v1/webhooks`: an admin's registry of webhooks, their secrets and
//! their delivery history. The rules are `Links::add_webhook` and its kin.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, ErrorMessage};
use super::extract::{Json as Body, Key};
use crate::webhooks::{
    CreatedWebhook, DeliveryView, NewWebhookBody, WebhookPatchBody, WebhookView,
};

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct WebhookList {
    webhooks: Vec<WebhookView>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct DeliveryList {
    /// The last 100 attempts, newest first.
    deliveries: Vec<DeliveryView>,
}

fn no_such(id: i64) -> ApiError {
    ApiError::NotFound(format!("no webhook {id}"))
}

/// A path's id: a whole number, else 400.
fn id_of(segment: &str, what: &str) -> Result<i64, ApiError> {
    segment
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::BadRequest(format!("{what} must be a positive whole number")))
}

type IdPath = Result<Path<String>, axum::extract::rejection::PathRejection>;
type EventPath = Result<Path<(String, String)>, axum::extract::rejection::PathRejection>;

fn webhook_id(path: IdPath) -> Result<i64, ApiError> {
    let Path(segment) = path.map_err(|e| ApiError::BadRequest(format!("malformed path: {e}")))?;
    id_of(&segment, "id")
}

#[utoipa::path(get, path = "/api/v1/webhooks", operation_id = "list_webhooks", tag = "webhooks",
    responses(
        (status = 200, description = "Every webhook, oldest first", body = WebhookList),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Key(caller): Key,
) -> Result<Json<WebhookList>, ApiError> {
    Ok(Json(WebhookList {
        webhooks: state.links.webhooks(&caller).await?,
    }))
}

#[utoipa::path(post, path = "/api/v1/webhooks", operation_id = "create_webhook", tag = "webhooks",
    request_body(content = NewWebhookBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Registered; its secret is shown this once", body = CreatedWebhook),
        (status = 400, description = "Malformed body, a URL the server refuses (not https, a private address, the deny list), no or unknown events, unknown domain", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Key(caller): Key,
    Body(body): Body<NewWebhookBody>,
) -> Result<(StatusCode, Json<CreatedWebhook>), ApiError> {
    let created = state.links.add_webhook(&caller, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/v1/webhooks/{id}", operation_id = "get_webhook", tag = "webhooks",
    params(("id" = i64, Path, description = "The webhook's id", minimum = 1)),
    responses(
        (status = 200, description = "The webhook", body = WebhookView),
        (status = 400, description = "A malformed id", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Key(caller): Key,
    path: IdPath,
) -> Result<Json<WebhookView>, ApiError> {
    let id = webhook_id(path)?;
    let found = state.links.webhook(&caller, id).await?;
    found.map(Json).ok_or_else(|| no_such(id))
}

#[utoipa::path(patch, path = "/api/v1/webhooks/{id}", operation_id = "update_webhook", tag = "webhooks",
    params(("id" = i64, Path, description = "The webhook's id", minimum = 1)),
    request_body(content = WebhookPatchBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The webhook as changed", body = WebhookView),
        (status = 400, description = "A malformed id or body, a URL the server refuses, no or unknown events, unknown domain", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn update(
    State(state): State<AppState>,
    Key(caller): Key,
    path: IdPath,
    Body(body): Body<WebhookPatchBody>,
) -> Result<Json<WebhookView>, ApiError> {
    let id = webhook_id(path)?;
    let changed = state.links.change_webhook(&caller, id, body).await?;
    changed.map(Json).ok_or_else(|| no_such(id))
}

#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", operation_id = "delete_webhook", tag = "webhooks",
    params(("id" = i64, Path, description = "The webhook's id", minimum = 1)),
    responses(
        (status = 204, description = "Removed, with its pending events and history"),
        (status = 400, description = "A malformed id", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn remove(
    State(state): State<AppState>,
    Key(caller): Key,
    path: IdPath,
) -> Result<StatusCode, ApiError> {
    let id = webhook_id(path)?;
    if state.links.remove_webhook(&caller, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_such(id))
    }
}

#[utoipa::path(post, path = "/api/v1/webhooks/{id}/rotate-secret", operation_id = "rotate_webhook_secret", tag = "webhooks",
    params(("id" = i64, Path, description = "The webhook's id", minimum = 1)),
    responses(
        (status = 200, description = "A new secret, shown this once; for 24 hours deliveries carry a signature by the old one too", body = CreatedWebhook),
        (status = 400, description = "A malformed id", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn rotate(
    State(state): State<AppState>,
    Key(caller): Key,
    path: IdPath,
) -> Result<Json<CreatedWebhook>, ApiError> {
    let id = webhook_id(path)?;
    let rotated = state.links.rotate_webhook(&caller, id).await?;
    rotated.map(Json).ok_or_else(|| no_such(id))
}

#[utoipa::path(get, path = "/api/v1/webhooks/{id}/deliveries", operation_id = "list_webhook_deliveries", tag = "webhooks",
    params(("id" = i64, Path, description = "The webhook's id", minimum = 1)),
    responses(
        (status = 200, description = "The webhook's last 100 attempts, newest first", body = DeliveryList),
        (status = 400, description = "A malformed id", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook", body = ErrorMessage),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn deliveries(
    State(state): State<AppState>,
    Key(caller): Key,
    path: IdPath,
) -> Result<Json<DeliveryList>, ApiError> {
    let id = webhook_id(path)?;
    let found = state.links.deliveries(&caller, id).await?;
    found
        .map(|deliveries| Json(DeliveryList { deliveries }))
        .ok_or_else(|| no_such(id))
}

#[utoipa::path(post, path = "/api/v1/webhooks/{id}/deliveries/{event}/retry", operation_id = "retry_webhook_delivery", tag = "webhooks",
    params(
        ("id" = i64, Path, description = "The webhook's id", minimum = 1),
        ("event" = i64, Path, description = "The event's id, from its deliveries", minimum = 1),
    ),
    responses(
        (status = 202, description = "The event is due again now (after the earlier events of its link)"),
        (status = 400, description = "A malformed id", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such webhook or event", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn retry(
    State(state): State<AppState>,
    Key(caller): Key,
    path: EventPath,
) -> Result<StatusCode, ApiError> {
    let Path((id, event)) =
        path.map_err(|e| ApiError::BadRequest(format!("malformed path: {e}")))?;
    let (id, event) = (id_of(&id, "id")?, id_of(&event, "event")?);
    if state.links.retry_delivery(&caller, id, event).await? {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(ApiError::NotFound(format!(
            "webhook {id} has no event {event}"
        )))
    }
}
