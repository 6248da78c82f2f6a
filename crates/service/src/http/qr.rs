//! `GET /{code}/qr.svg` and `/{code}/qr.png?size=N`: the short URL as a QR
//! code (the `qrcode` crate). Not a visit.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use qrcode::QrCode;
use qrcode::render::svg;
use serde::Deserialize;

use super::extract::{AskedDomain, Code};
use super::{ApiError, AppState};
use crate::domain::LinkKey;
use crate::links::{Resolution, Use};

pub(crate) const DEFAULT_PNG_SIZE: u32 = 256;
pub(crate) const MIN_PNG_SIZE: u32 = 64;
pub(crate) const MAX_PNG_SIZE: u32 = 2048;
/// Longest Host header a QR code is made for: a DNS name (253) or an IPv6
/// literal, and a port.
const MAX_HOST_BYTES: usize = 300;

/// The short URL of a live link, encoded; 404 and 410 as for the link.
async fn encode(state: &AppState, headers: &HeaderMap, key: &LinkKey) -> Result<QrCode, ApiError> {
    let code = &key.code;
    match state.links.resolve(key, Use::Look).await? {
        Resolution::Found(_)
        | Resolution::Unlocked(_)
        | Resolution::Locked
        | Resolution::WrongPassword => {}
        Resolution::Missing => {
            return Err(ApiError::NotFound(format!("no link with code '{code}'")));
        }
        Resolution::Expired | Resolution::Exhausted | Resolution::Blocked => {
            return Err(ApiError::Gone(format!("link '{code}' no longer redirects")));
        }
    }
    // Without `--public-url` the short URL is built from the Host header:
    // one longer than any host name is refused before anything is built
    // (a long enough one would not fit in a QR code).
    if state.public_url.is_none()
        && headers
            .get(header::HOST)
            .is_some_and(|h| h.len() > MAX_HOST_BYTES)
    {
        return Err(ApiError::BadRequest(format!(
            "the Host header is longer than {MAX_HOST_BYTES} bytes"
        )));
    }
    let url = state.short_url(headers, key);
    QrCode::new(url.as_bytes()).map_err(|e| ApiError::Internal(format!("QR encoding: {e}")))
}

/// The image depends on the Host it was asked with (when `--public-url`
/// is not set): a shared cache must never hand one Host's code to another,
/// so it is private to the browser, and varies by Host.
fn image(content_type: &'static str, body: impl IntoResponse) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=3600"),
            ),
            (header::VARY, HeaderValue::from_static("host")),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/{code}/qr.svg", tag = "redirect", params(("code" = String, Path, description = "A short code", pattern = "^[A-Za-z0-9_-]{1,64}$"), ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); else the one the Host names")),
    responses(
        (status = 200, description = "The short URL as a QR code (not a visit)", content_type = "image/svg+xml", body = String, headers(("cache-control" = String), ("vary" = String))),
        (status = 400, description = "Malformed code, an unknown domain, or a Host header too long for a URL", body = super::error::ErrorMessage),
        (status = 404, description = "No such link, or an unknown host refused", body = super::error::ErrorMessage),
        (status = 410, description = "Expired, out of visits, or its target blocked", body = super::error::ErrorMessage),
    ))]
pub(crate) async fn svg(
    State(state): State<AppState>,
    headers: HeaderMap,
    AskedDomain(domain): AskedDomain,
    Code(code): Code,
) -> Result<Response, ApiError> {
    let qr = encode(&state, &headers, &LinkKey::new(domain, code)).await?;
    let body = qr
        .render::<svg::Color<'_>>()
        .min_dimensions(DEFAULT_PNG_SIZE, DEFAULT_PNG_SIZE)
        .dark_color(svg::Color("#000000"))
        .light_color(svg::Color("#ffffff"))
        .build();
    Ok(image("image/svg+xml", body))
}

#[derive(Deserialize)]
pub(crate) struct PngParams {
    size: Option<String>,
}

#[utoipa::path(get, path = "/{code}/qr.png", tag = "redirect",
    params(
        ("code" = String, Path, description = "A short code", pattern = "^[A-Za-z0-9_-]{1,64}$"),
        ("size" = Option<u32>, Query, minimum = 64, maximum = 2048, description = "Width and height in pixels (default 256)"),
        ("domain" = Option<String>, Query, description = "The link's domain (a host, or 'default'); else the one the Host names"),
    ),
    responses(
        (status = 200, description = "The short URL as a QR code, exactly size by size pixels", content_type = "image/png", body = Vec<u8>, headers(("cache-control" = String), ("vary" = String))),
        (status = 400, description = "Malformed code or size, an unknown domain, or a Host header too long for a URL", body = super::error::ErrorMessage),
        (status = 404, description = "No such link, or an unknown host refused", body = super::error::ErrorMessage),
        (status = 410, description = "Expired, out of visits, or its target blocked", body = super::error::ErrorMessage),
    ))]
pub(crate) async fn png(
    State(state): State<AppState>,
    headers: HeaderMap,
    AskedDomain(domain): AskedDomain,
    Code(code): Code,
    params: Result<Query<PngParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))?;
    let size = match params.size.as_deref() {
        None => DEFAULT_PNG_SIZE,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (MIN_PNG_SIZE..=MAX_PNG_SIZE).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "size must be {MIN_PNG_SIZE} to {MAX_PNG_SIZE} pixels, not '{raw}'"
                ))
            })?,
    };
    let qr = encode(&state, &headers, &LinkKey::new(domain, code)).await?;
    let bytes = tokio::task::spawn_blocking(move || png_bytes(&qr, size))
        .await
        .map_err(|e| ApiError::Internal(format!("QR task: {e}")))??;
    Ok(image("image/png", bytes))
}

/// Modules of light margin on each side, as the QR specification asks.
const QUIET_ZONE: u32 = 4;

/// The code drawn as large as fits `size` in whole pixels per module (at
/// least one), centred on a white square of exactly `size` pixels.
fn png_bytes(qr: &QrCode, size: u32) -> Result<Vec<u8>, ApiError> {
    let modules = u32::try_from(qr.width()).unwrap_or(u32::MAX);
    let across = modules.saturating_add(2 * QUIET_ZONE);
    let unit = (size / across).max(1);
    let offset = size.saturating_sub(across.saturating_mul(unit)) / 2 + QUIET_ZONE * unit;
    let side = size as usize;
    let mut canvas = vec![255u8; side * side];
    for (i, color) in qr.to_colors().into_iter().enumerate() {
        if color == qrcode::Color::Light {
            continue;
        }
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (left, top) = (offset + (i % modules) * unit, offset + (i / modules) * unit);
        // A code too large for `size` is clipped on the right and bottom.
        for y in top..(top + unit).min(size) {
            let row = y as usize * side;
            canvas[row + left.min(size) as usize..row + (left + unit).min(size) as usize].fill(0);
        }
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, size, size);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&canvas))
        .map_err(|e| ApiError::Internal(format!("PNG encoding: {e}")))?;
    Ok(out)
}
