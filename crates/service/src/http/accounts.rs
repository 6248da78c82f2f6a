//! Signing in and out: `/login`, `/logout` and `/account/password`, as
//! pages and forms for a browser. The links service decides who gets in
//! (`Links::login` and its kin); here a form that writes must come from
//! this server's own pages (its `Origin` is the public URL's).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::{ApiError, ErrorMessage, mark};
use super::extract::{ClientAddr, read_form};
use crate::keys::Via;
use crate::links::LinksError;
use crate::oidc::OidcError;

const LOGIN: &str = include_str!("web/login.html");
const PASSWORD: &str = include_str!("web/password.html");

/// Longest form: two passwords of 1,024 bytes, percent-encoded, and a name.
const MAX_FORM_BYTES: usize = 8 * 1024;

const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The fields of the sign-in form (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct LoginForm {
    name: String,
    password: String,
}

/// The fields of the password form (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct PasswordChangeForm {
    current_password: String,
    /// At least 12 characters.
    new_password: String,
}

/// `text` for an HTML text node.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A page of the sign-in forms, kept by no cache.
fn page(status: StatusCode, body: String) -> Response {
    let mut response = super::locked::form_page(status, body, CSP);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn login_page(state: &AppState, status: StatusCode, message: Option<&str>) -> Response {
    let sessions = state.links.sessions();
    let hidden = |shown: bool| if shown { "" } else { " hidden" };
    let body = LOGIN
        .replace("{{hidden}}", hidden(message.is_some()))
        .replace("{{message}}", &escape(message.unwrap_or("")))
        .replace("{{local}}", hidden(sessions.local_login()))
        .replace("{{oidc}}", hidden(state.links.oidc().is_some()));
    page(status, body)
}

fn password_page(status: StatusCode, message: Option<&str>) -> Response {
    let body = PASSWORD
        .replace("{{hidden}}", if message.is_some() { "" } else { " hidden" })
        .replace("{{message}}", &escape(message.unwrap_or("")));
    page(status, body)
}

/// The form's fields `names`, each required (400 otherwise).
async fn fields<const N: usize>(req: Request, names: [&str; N]) -> Result<[String; N], ApiError> {
    let mut sent = read_form(req, MAX_FORM_BYTES).await?;
    let mut out: [String; N] = std::array::from_fn(|_| String::new());
    for (slot, name) in out.iter_mut().zip(names) {
        *slot = sent
            .remove(name)
            .ok_or_else(|| ApiError::BadRequest(format!("field '{name}' is required")))?;
    }
    Ok(out)
}

/// A 303 to `to`, with `cookie` set when given.
fn see_other(to: HeaderValue, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, to);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    mark(headers);
    response
}

/// Ends the session this browser had, if any: a sign-in replaces it.
async fn end_old_session(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(old) = state.links.sessions().cookie(headers)
        && let Some((_, hash)) = state.links.session(old).await?
    {
        state.links.logout(hash).await?;
    }
    Ok(())
}

/// Signing in needs the public URL; a form that writes needs this
/// server's own origin.
fn check(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let sessions = state.links.sessions();
    if !sessions.enabled() {
        return Err(ApiError::NotFound(
            "signing in needs --public-url on this server".into(),
        ));
    }
    if !sessions.same_origin(headers) {
        return Err(ApiError::Forbidden(
            "this form must be sent from this server's own pages (Origin)".into(),
        ));
    }
    Ok(())
}

#[utoipa::path(get, path = "/login", tag = "accounts", operation_id = "login_page",
    responses(
        (status = 200, description = "The sign-in page (text/html): the ways to sign in that are set up", content_type = "text/html", body = String),
        (status = 404, description = "Signing in is not set up (no --public-url)", body = ErrorMessage),
    ))]
pub(crate) async fn show_login(State(state): State<AppState>) -> Response {
    if !state.links.sessions().enabled() {
        return ApiError::NotFound("signing in needs --public-url on this server".into())
            .into_response();
    }
    login_page(&state, StatusCode::OK, None)
}

#[utoipa::path(post, path = "/login", tag = "accounts", operation_id = "login",
    request_body(content = LoginForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Signed in: a new session cookie, and on to the manage view (or to the password form after a one-time password)", headers(("location" = String, description = "/manage or /account/password"), ("set-cookie" = String, description = "litelink_session; __Host-litelink_session under an https public URL"))),
        (status = 400, description = "A field missing", body = ErrorMessage),
        (status = 401, description = "Wrong name or password (one answer for both): the page again (text/html)", content_type = "text/html", body = String),
        (status = 403, description = "Not sent from this server's own pages", body = ErrorMessage),
        (status = 404, description = "Signing in, or local passwords, not set up here", body = ErrorMessage),
        (status = 413, description = "Form over the size limit", body = ErrorMessage),
        (status = 415, description = "Not a form", body = ErrorMessage),
        (status = 429, description = "Too many failed sign-ins for this account", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 503, description = "Too many passwords being checked", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn login(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    req: Request,
) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    check(&state, &headers)?;
    let [name, password] = fields(req, ["name", "password"]).await?;
    let client = state.trust_proxy.creator(peer, &headers).map(|c| c.ip);
    match state.links.login(&name, &password, client).await {
        Ok((user, session)) => {
            end_old_session(&state, &headers).await?;
            let to = if user.must_change {
                "/account/password"
            } else {
                "/manage"
            };
            let cookie = state.links.sessions().set_cookie(&session.id);
            Ok(see_other(HeaderValue::from_static(to), Some(cookie)))
        }
        Err(LinksError::WrongCredentials) => Ok(login_page(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("Wrong name or password."),
        )),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(get, path = "/login/oidc", tag = "accounts", operation_id = "oidc_login",
    responses(
        (status = 303, description = "On to the identity provider; a 10-minute cookie binds the sign-in to this browser", headers(("location" = String, description = "The provider's authorization endpoint"), ("set-cookie" = String, description = "litelink_oidc; __Host-litelink_oidc under an https public URL"))),
        (status = 404, description = "No identity provider is set up here", body = ErrorMessage),
        (status = 429, description = "Too many sign-ins begun from this address", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 502, description = "The identity provider cannot be reached", body = ErrorMessage),
        (status = 503, description = "Too many sign-ins under way, or cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn oidc_login(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let client = state.trust_proxy.creator(peer, &headers).map(|c| c.ip);
    let begun = state.links.oidc_begin(client).await?;
    let to = HeaderValue::from_str(begun.url.as_str())
        .map_err(|_| ApiError::BadGateway("the provider's sign-in address is not usable".into()))?;
    let cookie = state.links.sessions().flow_cookie(Some(&begun.browser));
    Ok(see_other(to, Some(cookie)))
}

/// Longest `code` or `state` the callback reads.
const MAX_CALLBACK_PARAM: usize = 4096;

#[utoipa::path(get, path = "/auth/callback", tag = "accounts", operation_id = "oidc_callback",
    params(
        ("code" = Option<String>, Query, description = "The authorization code"),
        ("state" = Option<String>, Query, description = "The state the sign-in began with"),
        ("error" = Option<String>, Query, description = "Why the provider did not sign the person in"),
        ("error_description" = Option<String>, Query, description = "The provider's words for it"),
    ),
    responses(
        (status = 303, description = "Signed in: a new session cookie, and on to the manage view", headers(("location" = String, description = "/manage"), ("set-cookie" = String, description = "litelink_session; __Host-litelink_session under an https public URL"))),
        (status = 400, description = "No code or state; a state unknown, used or expired; or not the browser that began the sign-in (no flow cookie): the sign-in page (text/html)", content_type = "text/html", body = String),
        (status = 401, description = "The provider did not sign the person in, or its ID token was refused: the sign-in page (text/html)", content_type = "text/html", body = String),
        (status = 403, description = "The person has no role here, or their user is disabled: a page that says so (text/html)", content_type = "text/html", body = String),
        (status = 404, description = "No identity provider is set up here", body = ErrorMessage),
        (status = 429, description = "Too many callbacks from this address", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 502, description = "The identity provider failed: the sign-in page (text/html)", content_type = "text/html", body = String),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn oidc_callback(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    req: Request,
) -> Response {
    if state.links.oidc().is_none() {
        return ApiError::from(OidcError::Off).into_response();
    }
    let headers = req.headers();
    let mut code = None;
    let mut sent_state = None;
    let mut declined = None;
    for (name, value) in url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match &*name {
            "code" if code.is_none() => code = Some(value.into_owned()),
            "state" if sent_state.is_none() => sent_state = Some(value.into_owned()),
            "error" if declined.is_none() => declined = Some(value.into_owned()),
            "error_description" => {
                if let Some(why) = &mut declined {
                    why.push_str(": ");
                    why.push_str(&value);
                }
            }
            _ => {}
        }
    }
    let browser = state.links.sessions().flow(headers);
    let browser = browser.as_deref();
    let client = state.trust_proxy.creator(peer, headers).map(|c| c.ip);
    let outcome = match (code, sent_state, declined) {
        (_, sent, Some(why)) if sent.as_ref().is_none_or(|s| s.len() <= MAX_CALLBACK_PARAM) => {
            let why = why.chars().take(200).collect();
            Err(state
                .links
                .oidc_declined(why, sent.as_deref(), browser, client)
                .await)
        }
        (Some(code), Some(sent), None)
            if code.len() <= MAX_CALLBACK_PARAM && sent.len() <= MAX_CALLBACK_PARAM =>
        {
            state.links.oidc_finish(&code, &sent, browser, client).await
        }
        _ => Err(LinksError::Invalid(
            "the callback needs a code and a state".into(),
        )),
    };
    let sessions = state.links.sessions();
    let mut response = match outcome {
        Ok((_, session)) => {
            // The new session stands even if the old one could not be ended.
            let _ = end_old_session(&state, headers).await;
            let to = HeaderValue::from_static("/manage");
            see_other(to, Some(sessions.set_cookie(&session.id)))
        }
        Err(e) => {
            let e = ApiError::from(e);
            match e {
                ApiError::NotFound(_)
                | ApiError::Unavailable { .. }
                | ApiError::TooManyRequests { .. }
                | ApiError::Internal(_) => e.into_response(),
                other => login_page(&state, other.status(), Some(&other.to_string())),
            }
        }
    };
    if let Ok(clear) = HeaderValue::from_str(&sessions.flow_cookie(None)) {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    response
}

#[utoipa::path(post, path = "/logout", tag = "accounts", operation_id = "logout",
    responses(
        (status = 303, description = "Signed out: the session is over and its cookie removed", headers(("location" = String, description = "/login"), ("set-cookie" = String, description = "litelink_session (__Host-litelink_session under an https public URL), expired"))),
        (status = 403, description = "Not sent from this server's own pages", body = ErrorMessage),
        (status = 404, description = "Signing in is not set up (no --public-url)", body = ErrorMessage),
        (status = 503, description = "Cannot store now", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check(&state, &headers)?;
    if let Some(id) = state.links.sessions().cookie(&headers)
        && let Some((_, hash)) = state.links.session(id).await?
    {
        state.links.logout(hash).await?;
    }
    let cookie = state.links.sessions().clear_cookie();
    Ok(see_other(HeaderValue::from_static("/login"), Some(cookie)))
}

#[utoipa::path(get, path = "/account/password", tag = "accounts", operation_id = "password_page",
    responses(
        (status = 200, description = "The password form (text/html)", content_type = "text/html", body = String),
        (status = 303, description = "Not signed in: on to the sign-in page", headers(("location" = String, description = "/login"))),
        (status = 404, description = "Signing in, or local passwords, not set up here", body = ErrorMessage),
    ))]
pub(crate) async fn show_password(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let sessions = state.links.sessions();
    if !sessions.enabled() || !sessions.local_login() {
        return Err(ApiError::NotFound(
            "local passwords are not set up on this server".into(),
        ));
    }
    let signed_in = match state.links.sessions().cookie(&headers) {
        Some(id) => state.links.session(id).await?.is_some(),
        None => false,
    };
    if !signed_in {
        return Ok(see_other(HeaderValue::from_static("/login"), None));
    }
    Ok(password_page(StatusCode::OK, None))
}

#[utoipa::path(post, path = "/account/password", tag = "accounts", operation_id = "change_password",
    request_body(content = PasswordChangeForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Changed: the user's other sessions are over; on to the manage view", headers(("location" = String, description = "/manage"))),
        (status = 400, description = "A field missing, or a new password too short or the same (the page again, text/html)", content_type = "text/html", body = String),
        (status = 401, description = "Not signed in (JSON), or a wrong current password (the page again, text/html)", body = ErrorMessage),
        (status = 403, description = "Not sent from this server's own pages", body = ErrorMessage),
        (status = 404, description = "Signing in, or local passwords, not set up here", body = ErrorMessage),
        (status = 413, description = "Form over the size limit", body = ErrorMessage),
        (status = 415, description = "Not a form", body = ErrorMessage),
        (status = 429, description = "Too many wrong passwords for this account", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
        (status = 503, description = "Too many passwords being checked", body = ErrorMessage, headers(("retry-after" = u32, description = "Seconds to wait before retrying"))),
    ))]
pub(crate) async fn change_password(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    req: Request,
) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    check(&state, &headers)?;
    let session = match state.links.sessions().cookie(&headers) {
        Some(id) => state.links.session(id).await?,
        None => None,
    };
    let Some((caller, hash)) = session.filter(|(p, _)| matches!(p.via, Via::Session { .. })) else {
        return Err(ApiError::Unauthorized("sign in first".into()));
    };
    let [current, new] = fields(req, ["current_password", "new_password"]).await?;
    let client = state.trust_proxy.creator(peer, &headers).map(|c| c.ip);
    match state
        .links
        .change_password(&caller, hash, &current, &new, client)
        .await
    {
        Ok(()) => Ok(see_other(HeaderValue::from_static("/manage"), None)),
        Err(LinksError::WrongCredentials) => Ok(password_page(
            StatusCode::UNAUTHORIZED,
            Some("The current password is wrong."),
        )),
        Err(LinksError::Invalid(why)) => Ok(password_page(StatusCode::BAD_REQUEST, Some(&why))),
        Err(e) => Err(e.into()),
    }
}
