//! `/api/v1/domains`: the short domains of this server. Who may read and
//! change them, the links service decides (`Links::domains_for` and its
//! kin).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use super::error::ErrorMessage;

use super::AppState;
use super::error::ApiError;
use super::extract::{Caller, ClientAddr, Json as Body, Key, Segment};
use crate::domains::{DomainPatchBody, DomainView, NewDomainBody};

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct DomainList {
    domains: Vec<DomainView>,
}

fn no_such(host: &str) -> ApiError {
    ApiError::NotFound(format!("no domain '{host}'"))
}

const HOST_PARAM: &str = "A host (in either form), or 'default' for the default domain";

#[utoipa::path(get, path = "/api/v1/domains", tag = "domains",
    responses(
        (status = 200, description = "Every domain the caller may use, the default one first: all of them for an admin or a key not limited to a domain, its own for a domain-limited key, all of them without a key while anyone may create links", body = DomainList),
        (status = 401, description = "No valid key, where creating links needs one", body = ErrorMessage),
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<DomainList>, ApiError> {
    let domains = state.links.domains_for(caller.as_ref())?;
    Ok(Json(DomainList {
        domains: domains.into_iter().map(DomainView::from).collect(),
    }))
}

#[utoipa::path(post, path = "/api/v1/domains", tag = "domains",
    request_body(content = NewDomainBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Added; links answer on it at once", body = DomainView),
        (status = 400, description = "Malformed body, bad host or URL, unknown field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 409, description = "The domain exists", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    Body(body): Body<NewDomainBody>,
) -> Result<(StatusCode, Json<DomainView>), ApiError> {
    let asker = state.asker(Some(&caller), ClientAddr(None), &headers);
    let added = state.links.add_domain(&asker, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(added.into())))
}

#[utoipa::path(get, path = "/api/v1/domains/{host}", tag = "domains",
    params(("host" = String, Path, description = HOST_PARAM, max_length = 253)),
    responses(
        (status = 200, description = "The domain", body = DomainView),
        (status = 400, description = "A malformed host", body = ErrorMessage),
        (status = 401, description = "No valid key, where creating links needs one", body = ErrorMessage),
        (status = 404, description = "No such domain, or not the one a domain-limited key has", body = ErrorMessage),
    ),
    security((), ("bearer" = []), ("api_key" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(host): Segment,
) -> Result<Json<DomainView>, ApiError> {
    let domain = state
        .links
        .domain_for(caller.as_ref(), &host)?
        .ok_or_else(|| no_such(&host))?;
    Ok(Json(domain.into()))
}

#[utoipa::path(patch, path = "/api/v1/domains/{host}", tag = "domains",
    params(("host" = String, Path, description = HOST_PARAM, max_length = 253)),
    request_body(content = DomainPatchBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The domain as changed", body = DomainView),
        (status = 400, description = "Malformed host or body, bad URL, unknown field", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such domain", body = ErrorMessage),
        (status = 413, description = "Body over the size limit", body = ErrorMessage),
        (status = 415, description = "Content-Type is not JSON", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Key(caller): Key,
    Segment(host): Segment,
    Body(body): Body<DomainPatchBody>,
) -> Result<Json<DomainView>, ApiError> {
    let asker = state.asker(Some(&caller), ClientAddr(None), &headers);
    let changed = state
        .links
        .change_domain(&asker, &caller, &host, body)
        .await?
        .ok_or_else(|| no_such(&host))?;
    Ok(Json(changed.into()))
}

/// Query of `DELETE /api/v1/domains/{host}`.
#[derive(Deserialize)]
pub(crate) struct RemoveParams {
    force: Option<String>,
}

#[utoipa::path(delete, path = "/api/v1/domains/{host}", tag = "domains",
    params(
        ("host" = String, Path, description = HOST_PARAM, max_length = 253),
        ("force" = Option<bool>, Query, description = "Delete the domain's links too (their codes stay taken as tombstones)"),
    ),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Malformed host or force", body = ErrorMessage),
        (status = 401, description = "No valid key", body = ErrorMessage),
        (status = 403, description = "Not an admin key", body = ErrorMessage),
        (status = 404, description = "No such domain", body = ErrorMessage),
        (status = 409, description = "The default domain, or a domain with links without force", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ),
    security(("bearer" = []), ("api_key" = [])))]
pub(crate) async fn remove(
    State(state): State<AppState>,
    Key(caller): Key,
    Segment(host): Segment,
    params: Result<axum::extract::Query<RemoveParams>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let axum::extract::Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    let force = match params.force.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "force must be 'true' or 'false', not '{other}'"
            )));
        }
    };
    match state.links.remove_domain(&caller, &host, force).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(no_such(&host)),
    }
}
