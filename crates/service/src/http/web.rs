//! The web page: `/` to shorten a link, `/manage` for key holders, and
//! their assets, all embedded in the binary at compile time (no CDN, no
//! external font), served with a Content-Security-Policy that allows no
//! inline script or style. The QR codes the page shows are in `qr.rs`.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::extract::{HostDomain, Segment};
use super::{ApiError, AppState};

/// Only this origin's scripts, styles, images and API; no inline code, no
/// framing, no form posts elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; form-action 'self'; \
                   base-uri 'none'; frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("web/app.css"),
    },
    Asset {
        name: "shorten.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("web/shorten.js"),
    },
    Asset {
        name: "manage.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("web/manage.js"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("web/icon.svg"),
    },
];

fn page(body: &'static str) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("same-origin"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: shorten a link, or the domain's root redirect when it has one.
#[utoipa::path(get, path = "/", tag = "web",
    responses(
        (status = 200, description = "The page to shorten a link", content_type = "text/html; charset=utf-8", body = String),
        (status = 302, description = "The domain's root redirect, when it has one", headers(("location" = String, description = "The root redirect"))),
        (status = 404, description = "An unknown host refused (--unknown-host reject)", body = super::error::ErrorMessage),
    ))]
pub(crate) async fn index(
    State(state): State<AppState>,
    HostDomain(domain): HostDomain,
) -> Result<Response, ApiError> {
    match state.links.domains().redirects(domain).root {
        Some(target) => {
            let location = target.into_location().ok_or_else(|| {
                ApiError::Internal("stored URL is not a valid header value".into())
            })?;
            Ok((
                StatusCode::FOUND,
                [
                    (header::LOCATION, location),
                    (
                        header::CACHE_CONTROL,
                        HeaderValue::from_static("private, max-age=0"),
                    ),
                ],
            )
                .into_response())
        }
        None => Ok(page(include_str!("web/index.html"))),
    }
}

/// `GET /manage`: a key holder's links.
#[utoipa::path(get, path = "/manage", tag = "web",
    responses((status = 200, description = "The page for key holders", content_type = "text/html; charset=utf-8", body = String)))]
pub(crate) async fn manage() -> Response {
    page(include_str!("web/manage.html"))
}

/// `GET /assets/{file}`.
#[utoipa::path(get, path = "/assets/{file}", tag = "web",
    params(("file" = String, Path, description = "One of the page's files",
        example = "app.css", pattern = "^(app\\.css|shorten\\.js|manage\\.js|icon\\.svg)$")),
    responses(
        (status = 200, description = "The page's stylesheet, script or icon",
         content(("text/css; charset=utf-8"), ("text/javascript; charset=utf-8"), ("image/svg+xml"))),
        (status = 400, description = "A name that is not text", body = super::error::ErrorMessage),
        (status = 404, description = "No such asset", body = super::error::ErrorMessage),
    ))]
pub(crate) async fn asset(Segment(name): Segment) -> Result<Response, ApiError> {
    let asset = ASSETS
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no asset '{name}'")))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            // Revalidated on every load: a new binary's page never runs an
            // old script.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        asset.body,
    )
        .into_response())
}
