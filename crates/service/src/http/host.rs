//! What a request must say of its host (RFC 9112, section 3.2): at most
//! one `Host`, whose port (if any) is a port, and one at all in HTTP/1.1.
//! An absolute-form target's authority stands for the `Host`: the router's
//! requests get it as their `Host`, so that the domain, `short_url` and the
//! self-loop check all read the same host.

use axum::http::{HeaderValue, Request, Uri, Version, header};

/// What is wrong with a request's host, if anything: `host` is its first
/// `Host`, `twice` whether it sent another.
pub(super) fn problem(
    version: Version,
    uri: &Uri,
    host: Option<&HeaderValue>,
    twice: bool,
) -> Option<&'static str> {
    if twice {
        return Some("a request has one Host header, not two");
    }
    match (uri.authority(), host) {
        // The authority was parsed as one, port included.
        (Some(_), _) => None,
        (None, Some(host)) if !port_in_range(host.as_bytes()) => {
            Some("the Host header's port is not a port (0 to 65535)")
        }
        (None, None) if version == Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host header")
        }
        _ => None,
    }
}

/// Whether the port of `host` (`name:port`, `[v6]:port`), if it has one,
/// is 0 to 65535.
fn port_in_range(host: &[u8]) -> bool {
    let after_name = match host.first() {
        Some(b'[') => match host.iter().position(|&b| b == b']') {
            Some(end) => &host[end + 1..],
            None => return false,
        },
        _ => match host.iter().rposition(|&b| b == b':') {
            Some(colon) => &host[colon..],
            None => return true,
        },
    };
    let Some(port) = after_name.strip_prefix(b":") else {
        return after_name.is_empty();
    };
    // An empty port is allowed (`port = *DIGIT`).
    port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= u32::from(u16::MAX)
}

/// [`problem`], of a request whose headers were not scanned yet.
pub(super) fn check<B>(req: &Request<B>) -> Result<(), &'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let (first, twice) = (hosts.next(), hosts.next().is_some());
    match problem(req.version(), req.uri(), first, twice) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// Checks a request the router will answer, and gives it its
/// absolute-form target's authority as its `Host`.
pub(super) fn settle<B>(req: &mut Request<B>) -> Result<(), &'static str> {
    check(req)?;
    if let Some(authority) = req.uri().authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        req.headers_mut().insert(header::HOST, host);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_a_port() {
        for good in [
            &b"example.com"[..],
            b"example.com:8080",
            b"example.com:",
            b"127.0.0.1:65535",
            b"[::1]",
            b"[::1]:0",
        ] {
            assert!(port_in_range(good), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b"example.com:65536"[..],
            b"example.com:99999999999",
            b"example.com:80a",
            b"[::1]:70000",
            b"[::1",
            b"[::1]x",
        ] {
            assert!(!port_in_range(bad), "{}", String::from_utf8_lossy(bad));
        }
    }
}
