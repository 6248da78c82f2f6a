//! A link behind a password: the 401 a visitor gets without it (or with a
//! wrong one), as a small form for a browser and as JSON for anyone else,
//! and what every answer about such a link carries.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, mark};

const PAGE: &str = include_str!("web/locked.html");

/// The page's policy, except that the form may lead on to the link's
/// target: browsers apply `form-action` to the redirect that answers the
/// post too, and a target is any http or https URL.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; \
                   form-action 'self' http: https:; base-uri 'none'; frame-ancestors 'none'";

/// The form's message, hidden until a wrong password was sent.
const HIDDEN: &str = "{{hidden}}";

/// A redirect after the right password: kept by no cache, so every visit
/// asks again.
pub(super) fn unlocked(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Whether the client is a browser: its `Accept` names `text/html`.
pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',').any(|item| {
                let item = item.trim();
                let media = item.split(';').next().unwrap_or("").trim();
                let refused = item
                    .split(';')
                    .skip(1)
                    .any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
                media.eq_ignore_ascii_case("text/html") && !refused
            })
        })
}

/// The 401 for a locked link: the form for a browser, else JSON.
pub(super) fn answer(wrong: bool, html: bool) -> Response {
    if !html {
        return ApiError::Locked { wrong }.into_response();
    }
    let body = PAGE.replace(HIDDEN, if wrong { "" } else { " hidden" });
    form_page(StatusCode::UNAUTHORIZED, body, CSP)
}

/// A page with a form that posts back to this site: HTML under `csp`, not
/// to be framed, with a referrer policy that lets the form carry its
/// `Origin`.
pub(super) fn form_page(status: StatusCode, body: String, csp: &'static str) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // `same-origin`, not `no-referrer`: the form's post must carry its
    // real `Origin` (browsers send `null` under `no-referrer`, which the
    // form refuses), while the target still learns nothing of the page.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    mark(headers);
    response
}

/// Whether the password form was sent from this site: a `POST` whose
/// `Origin` is `null` or names another host than the request's is
/// refused, so that other sites cannot spread guessing over their
/// visitors' browsers. One without `Origin` (curl, old browsers) passes.
pub(super) fn same_origin(parts: &axum::http::request::Parts) -> Result<(), ApiError> {
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = super::extract::request_host(&parts.uri, parts.headers.get(header::HOST));
    let same = origin.to_str().ok().and_then(|o| {
        let (scheme, authority) = o.split_once("://")?;
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" => ":80",
            "https" => ":443",
            _ => return None,
        };
        let host = std::str::from_utf8(host?).ok()?;
        let bare = |a: &str| a.strip_suffix(default).unwrap_or(a).to_ascii_lowercase();
        Some(bare(authority) == bare(host))
    });
    if same == Some(true) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "the password form was sent from another site".into(),
        ))
    }
}

/// `error` as answered to a request with `headers`: a locked link's 401
/// as [`answer`] makes it, anything else as itself.
pub(super) fn or_error(error: ApiError, headers: &HeaderMap) -> Response {
    match error {
        ApiError::Locked { wrong } => answer(wrong, wants_html(headers)),
        other => other.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_is_told_by_its_accept_header() {
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            wants_html(&h)
        };
        assert!(with("text/html,application/xhtml+xml,*/*;q=0.8"));
        assert!(with("TEXT/HTML"));
        assert!(!with("application/json"));
        assert!(!with("*/*"));
        assert!(!with("text/html;q=0, application/json"));
        assert!(!wants_html(&HeaderMap::new()));
    }
}
