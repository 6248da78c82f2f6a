//! Short domains: the host names links answer on, and the (domain, code)
//! pair every link is found by.

use std::fmt;

use serde::{Serialize, Serializer};

use super::{ShortCode, TargetUrl};

/// Longest host name (DNS: 253 characters, without the final dot).
pub const MAX_HOST_LEN: usize = 253;

/// The word that names the default domain where a host is expected
/// (`domains set default ...`, `/api/v1/domains/default`): the default
/// domain may have no host at all.
pub const DEFAULT_NAME: &str = "default";

/// A short domain's host name, as stored and compared: lowercase ASCII,
/// an internationalised name in its punycode (`xn--`) form, no port and no
/// final dot. Holding a `Host` means it was checked.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostError {
    #[error("a domain is a host name such as go.example.com, without scheme, port or path")]
    Invalid,
    #[error("a host name is at most {MAX_HOST_LEN} characters")]
    TooLong,
    #[error("'default' names the default domain; it cannot be added")]
    Reserved,
}

impl Host {
    /// A host name as a user types it (`Go.Example.com`, `bücher.example`).
    pub fn parse(raw: &str) -> Result<Self, HostError> {
        let raw = raw.trim();
        let raw = raw.strip_suffix('.').unwrap_or(raw);
        if raw.is_empty()
            || raw.contains(['/', ':', '@', '?', '#', '\\', '%'])
            || raw.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(HostError::Invalid);
        }
        let ascii = idna::domain_to_ascii_strict(raw).map_err(|_| HostError::Invalid)?;
        if ascii.len() > MAX_HOST_LEN {
            return Err(HostError::TooLong);
        }
        let labels_ok = ascii.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        if !labels_ok {
            return Err(HostError::Invalid);
        }
        if ascii == DEFAULT_NAME {
            return Err(HostError::Reserved);
        }
        Ok(Self(ascii))
    }

    /// What a request's `Host` header names, in the stored form: the port
    /// stripped, case folded, an internationalised name in either form.
    /// `None`: not a host name at all.
    pub(crate) fn of_request(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let name = match text.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => text,
        };
        Self::parse(name).ok()
    }

    /// A host read back from the store, which was checked on the way in.
    pub(crate) fn from_trusted(stored: &str) -> Self {
        Self(stored.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl super::wire::FromText for Host {
    const EXPECTING: &'static str = "a host name string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text).map_err(|e| e.to_string())
    }
}

super::wire::deserialize_from_text!(Host);

super::wire::string_schema!(
    Host,
    "Host",
    super::wire::StringSchema {
        format: None,
        min_length: Some(1),
        max_length: Some(MAX_HOST_LEN),
        pattern: None,
        description: "A host name (an internationalised one in either form); stored \
                      lowercase, in ASCII",
    }
);

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Host({})", self.0)
    }
}

impl Serialize for Host {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// A domain's row id. The default domain is 0; added domains never reuse
/// an id, so nothing cached under a removed domain can be found again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DomainId(pub i64);

impl DomainId {
    pub(crate) const DEFAULT: DomainId = DomainId(0);

    pub fn is_default(self) -> bool {
        self == Self::DEFAULT
    }
}

/// What a link is found by: a code on a domain.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LinkKey {
    pub domain: DomainId,
    pub code: ShortCode,
}

impl LinkKey {
    pub(crate) fn new(domain: DomainId, code: ShortCode) -> Self {
        Self { domain, code }
    }

    /// A code on the default domain (the seed API's, and every link's
    /// before domains).
    pub fn default_domain(code: ShortCode) -> Self {
        Self::new(DomainId::DEFAULT, code)
    }

    /// The key as an outside cache and the invalidation channel write it:
    /// the code alone on the default domain (as before domains), else
    /// `ID/code` (`/` is never in a code).
    pub(crate) fn wire(&self) -> String {
        if self.domain.is_default() {
            self.code.as_str().to_owned()
        } else {
            format!("{}/{}", self.domain.0, self.code)
        }
    }

    /// The inverse of [`LinkKey::wire`].
    pub(crate) fn parse_wire(raw: &str) -> Option<Self> {
        match raw.split_once('/') {
            None => Some(Self::default_domain(ShortCode::parse(raw).ok()?)),
            Some((id, code)) => {
                let id: i64 = id.parse().ok()?;
                (id > 0).then_some(())?;
                Some(Self::new(DomainId(id), ShortCode::parse(code).ok()?))
            }
        }
    }
}

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.wire())
    }
}

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LinkKey({}/{})", self.domain.0, self.code)
    }
}

/// Where a domain sends what it has no link for. `None`: the built-in
/// answer (the page, 404, 410).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainRedirects {
    /// `GET /` on the domain.
    pub root: Option<TargetUrl>,
    /// An unknown or deleted code.
    pub not_found: Option<TargetUrl>,
    /// An expired link, or one that has served its visits.
    pub expired: Option<TargetUrl>,
}

/// A short domain as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub id: DomainId,
    /// `None` for the default domain, whose host is configured
    /// (`--default-domain`), not stored.
    pub host: Option<Host>,
    pub redirects: DomainRedirects,
}

/// The block a client's address stands for in per-client limits: an IPv4
/// address itself, an IPv6 one's /64 (the block one subscriber gets, so
/// that one machine cannot draw a new allowance for every address), an
/// IPv4-mapped one as its IPv4 address.
pub(crate) fn client_block(ip: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv6Addr};
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_stored_lowercase_and_in_ascii() {
        assert_eq!(
            Host::parse("Go.Example.COM").unwrap().as_str(),
            "go.example.com"
        );
        assert_eq!(
            Host::parse("go.example.com.").unwrap().as_str(),
            "go.example.com"
        );
        assert_eq!(
            Host::parse("Bücher.example").unwrap().as_str(),
            "xn--bcher-kva.example"
        );
        assert_eq!(
            Host::parse("xn--bcher-kva.example").unwrap().as_str(),
            "xn--bcher-kva.example"
        );
        for bad in [
            "",
            "https://x.com",
            "x.com:8080",
            "x.com/a",
            "a b.com",
            "-a.com",
            "a..com",
            "user@x.com",
            "x_y.com",
            &"a".repeat(64),
        ] {
            assert!(Host::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Host::parse("default"), Err(HostError::Reserved));
    }

    #[test]
    fn a_request_host_loses_its_port_and_case() {
        let of = |raw: &str| Host::of_request(raw.as_bytes()).map(|h| h.0);
        assert_eq!(of("Ex.Co:8080").as_deref(), Some("ex.co"));
        assert_eq!(of("ex.co").as_deref(), Some("ex.co"));
        assert_eq!(
            of("bücher.example:80").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(of("[::1]:80"), None);
        assert_eq!(Host::of_request(b"\xff\xfe"), None);
    }

    #[test]
    fn keys_round_trip_through_their_wire_form() {
        let code = ShortCode::parse("abc").unwrap();
        for key in [
            LinkKey::default_domain(code.clone()),
            LinkKey::new(DomainId(7), code),
        ] {
            assert_eq!(LinkKey::parse_wire(&key.wire()), Some(key));
        }
        assert_eq!(LinkKey::parse_wire("abc").unwrap().domain, DomainId(0));
        for bad in ["0/abc", "-1/abc", "x/abc", "1/", "1/a b"] {
            assert_eq!(LinkKey::parse_wire(bad), None, "{bad}");
        }
    }
}
