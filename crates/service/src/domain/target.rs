use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use ipnet::{Ipv4Net, Ipv6Net};
use url::{Host, Url};

/// Longest target URL accepted, in bytes. 4,096 is twice what every browser
/// and crawler handles (2,048 is the historical floor), far above real links,
/// and low enough to keep rows small and the request body limit tight.
pub const MAX_URL_BYTES: usize = 4096;

/// A link's destination: an absolute `http` or `https` URL with a host and
/// no user name or password.
///
/// It holds exactly the WHATWG serialization of what the parser validated
/// (what the `url` crate prints), never the string as typed: `http:\\evil.com`,
/// `https:evil.com` and `http://%65vil.com` all become `http://evil.com/`,
/// so the host a browser or proxy reads in `Location` is the host that was
/// checked. `https://example.com` becomes `https://example.com/`.
///
/// Cloning is a reference-count bump, so caches can hand out copies freely,
/// and the bytes can become a `Location` header without a copy or a second
/// check ([`TargetUrl::location`]).
#[derive(Clone, PartialEq, Eq)]
pub struct TargetUrl {
    bytes: Bytes,
    /// Whether the bytes may stand in a header as they are: checked once,
    /// when the value is made, not on every redirect from the cache.
    header_safe: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetUrlError {
    #[error("url must not be empty")]
    Empty,
    #[error("url is longer than {MAX_URL_BYTES} bytes")]
    TooLong,
    #[error("url contains whitespace or control characters")]
    ControlCharacter,
    #[error("url is not a valid absolute URL: {0}")]
    Invalid(String),
    #[error("url scheme must be http or https, not '{0}'")]
    Scheme(String),
    #[error("url has no host")]
    NoHost,
    #[error("url must not contain a user name or password")]
    Credentials,
    #[error("url points to a private, loopback or link-local address")]
    PrivateTarget,
    #[error("url's host is on the deny list")]
    DeniedHost,
    #[error("url points to this service itself")]
    OwnHost,
}

impl TargetUrl {
    pub fn parse(raw: &str) -> Result<Self, TargetUrlError> {
        Self::parse_url(raw).map(|url| Self::of(url.as_str()))
    }

    /// The checks of [`parse`](Self::parse), giving the parsed URL.
    fn parse_url(raw: &str) -> Result<Url, TargetUrlError> {
        if raw.is_empty() {
            return Err(TargetUrlError::Empty);
        }
        if raw.len() > MAX_URL_BYTES {
            return Err(TargetUrlError::TooLong);
        }
        // The url crate silently strips tabs and newlines and trims spaces;
        // a link that differs from what was sent must be refused, not fixed.
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(TargetUrlError::ControlCharacter);
        }
        let url = Url::parse(raw).map_err(|e| TargetUrlError::Invalid(e.to_string()))?;
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(TargetUrlError::Scheme(other.to_owned())),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(TargetUrlError::NoHost);
        }
        // `https://www.google.com@evil.com/` reads as google.com to a person.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(TargetUrlError::Credentials);
        }
        // Percent-encoding and punycode can make the serialization longer.
        if url.as_str().len() > MAX_URL_BYTES {
            return Err(TargetUrlError::TooLong);
        }
        Ok(url)
    }

    /// The canonical form of a stored URL, if it differs from `stored`;
    /// for the migration that rewrites rows stored before canonical forms.
    pub fn canonical(stored: &str) -> Option<String> {
        let url = Url::parse(stored).ok()?;
        (url.as_str() != stored).then(|| url.as_str().to_owned())
    }

    /// Wraps a value read back from the store, which was checked on the way in.
    pub(crate) fn from_trusted(stored: &str) -> Self {
        Self::of(stored)
    }

    /// The only way in: the bytes are always a whole `str`.
    fn of(url: &str) -> Self {
        // http's own rule for header values. A parsed URL always passes
        // (its serialization escapes controls and spaces); a stored one that
        // does not is answered with an error, never written as a header.
        let header_safe = url.bytes().all(|b| (b >= 32 && b != 127) || b == b'\t');
        Self {
            bytes: counted_beside(url.as_bytes()),
            header_safe,
        }
    }

    pub fn as_str(&self) -> &str {
        // Every TargetUrl is made by `of`, from a `str`, and its bytes
        // never change: the check cannot fail.
        std::str::from_utf8(&self.bytes).unwrap_or_default()
    }

    /// The URL as a `Location` value sharing its bytes (a reference-count
    /// bump, no copy, no second check), or `None` if it may not stand in a
    /// header (a stored value that no parse made).
    #[cfg(test)]
    pub(crate) fn location(&self) -> Option<axum::http::HeaderValue> {
        self.clone().into_location()
    }

    /// [`TargetUrl::location`], taking the URL: its bytes move into the
    /// value, with no reference-count bump now and no drop later.
    pub(crate) fn into_location(self) -> Option<axum::http::HeaderValue> {
        // SAFETY: `header_safe` says every byte passed the check
        // `HeaderValue::from_maybe_shared` would make, and the bytes never
        // change after `of` checked them. Checking again cost 175
        // instructions of a cached redirect's 8,166 (2.1%, callgrind).
        self.header_safe
            .then(|| unsafe { axum::http::HeaderValue::from_maybe_shared_unchecked(self.bytes) })
    }

    /// The host as serialized, read off the bytes without a parse: every
    /// target is `http://` or `https://`, a host, then `:`, `/` or the end
    /// (no user name: refused at parse). An IPv6 host keeps its brackets.
    pub(crate) fn host_str(&self) -> &str {
        let s = self.as_str();
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .unwrap_or(s);
        let end = if rest.starts_with('[') {
            rest.bytes()
                .position(|b| b == b']')
                .map_or(rest.len(), |i| i + 1)
        } else {
            rest.bytes()
                .position(|b| matches!(b, b':' | b'/' | b'?' | b'#'))
                .unwrap_or(rest.len())
        };
        &rest[..end]
    }
}

/// `bytes` in one allocation with the reference count its clones share.
/// A redirect from the cache clones the URL and writes it out: with
/// `Bytes::copy_from_slice` the count lives in an allocation of its own,
/// one more cache line to fetch per redirect (docs/benchmarks.md). The
/// buffer has one of three sizes: 48 bytes, or under 2.3 times a longer
/// URL's length. URLs over 240 bytes, rare, keep the two allocations.
fn counted_beside(bytes: &[u8]) -> Bytes {
    fn inline<const N: usize>(bytes: &[u8]) -> Bytes {
        let mut buf = [0; N];
        buf[..bytes.len()].copy_from_slice(bytes);
        Bytes::from_owner(Inline {
            len: bytes.len(),
            buf,
        })
    }
    match bytes.len() {
        0..=48 => inline::<48>(bytes),
        49..=112 => inline::<112>(bytes),
        113..=240 => inline::<240>(bytes),
        _ => Bytes::copy_from_slice(bytes),
    }
}

/// The first `len` bytes of `buf`, for [`counted_beside`].
struct Inline<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> AsRef<[u8]> for Inline<N> {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Which targets an operator refuses on top of [`TargetUrl`]'s own checks:
/// this service's own hosts (a link to itself is a loop), known-bad
/// domains (`--deny-hosts`, reloaded on SIGHUP) and, when asked, private
/// addresses. Applied to creates, edits and imports, and the deny list to
/// every redirect as well ([`TargetPolicy::blocks`]), so a host added to
/// it stops links made before.
#[derive(Debug, Default)]
pub struct TargetPolicy {
    pub refuse_private: bool,
    deny_file: Option<PathBuf>,
    /// Hashed with foldhash: a redirect hashes its host and each parent,
    /// and SipHash cost twice as much (callgrind).
    deny: RwLock<DenySet>,
    /// Whether the list holds anything: without one a redirect takes no
    /// lock.
    denying: AtomicBool,
    /// Names the machine's hosts file gives private addresses.
    private_names: HashSet<String>,
    /// Names the machine's hosts file gives loopback addresses: more
    /// names of this machine, as `localhost` is.
    loopback_names: HashSet<String>,
    /// The public URL's host, at any port.
    public_host: Option<String>,
    /// The address the server listens on.
    listen: Option<SocketAddr>,
}

type DenySet = HashSet<String, foldhash::fast::RandomState>;

#[derive(Debug, thiserror::Error)]
#[error("cannot read the deny list {path}: {source}")]
pub struct DenyListError {
    path: String,
    source: std::io::Error,
}

/// The hosts file read for names of private addresses.
const HOSTS_FILE: &str = "/etc/hosts";

impl TargetPolicy {
    /// Reads `deny_file` (one domain a line; `#` starts a comment; a domain
    /// denies its subdomains too) and, to refuse private targets, the
    /// machine's hosts file.
    pub fn new(refuse_private: bool, deny_file: Option<PathBuf>) -> Result<Self, DenyListError> {
        let private_names = if refuse_private {
            // No hosts file: no names to add to `localhost`.
            std::fs::read_to_string(HOSTS_FILE)
                .map(|text| private_names(&text))
                .unwrap_or_default()
        } else {
            HashSet::new()
        };
        let policy = Self {
            refuse_private,
            deny_file,
            private_names,
            ..Self::default()
        };
        policy.reload()?;
        Ok(policy)
    }

    /// Also refuses targets on this service itself: the host of
    /// `public_url` at any port, and the address it listens on (with every
    /// loopback name for it when it listens on all addresses or loopback).
    pub fn with_own_hosts(mut self, public_url: Option<&str>, listen: Option<SocketAddr>) -> Self {
        self.public_host = public_url
            .and_then(|u| Url::parse(u).ok())
            .and_then(|u| u.host_str().map(|h| h.trim_end_matches('.').to_owned()));
        self.listen = listen;
        if listen.is_some() {
            self.loopback_names = std::fs::read_to_string(HOSTS_FILE)
                .map(|text| names_in_hosts(&text, |ip| ip.is_loopback()))
                .unwrap_or_default();
        }
        self
    }

    /// Reads the deny list again; on an error the old list stays.
    pub(crate) fn reload(&self) -> Result<usize, DenyListError> {
        let Some(path) = &self.deny_file else {
            return Ok(0);
        };
        let hosts = read_deny_list(path)?;
        let n = hosts.len();
        *self.deny.write().unwrap_or_else(|e| e.into_inner()) = hosts;
        self.denying.store(n > 0, Ordering::Release);
        Ok(n)
    }

    pub(crate) fn has_deny_list(&self) -> bool {
        self.deny_file.is_some()
    }

    /// Whether `url` may be a link's target; `via` is the `Host` the
    /// request came in on, one more name of this service.
    pub fn check(&self, url: &TargetUrl, via: Option<&str>) -> Result<(), TargetUrlError> {
        let nothing_to_refuse = !self.refuse_private
            && self.deny_file.is_none()
            && self.public_host.is_none()
            && self.listen.is_none()
            && via.is_none();
        if nothing_to_refuse {
            // An import without these options checks nothing more, and
            // parses nothing again.
            return Ok(());
        }
        let parsed =
            Url::parse(url.as_str()).map_err(|e| TargetUrlError::Invalid(e.to_string()))?;
        let Some(host) = parsed.host() else {
            return Err(TargetUrlError::NoHost);
        };
        let port = parsed.port_or_known_default().unwrap_or(80);
        if self.is_own(&host, port, via) {
            return Err(TargetUrlError::OwnHost);
        }
        if self.refuse_private && (is_private(&host) || self.has_private_name(&host)) {
            return Err(TargetUrlError::PrivateTarget);
        }
        if let Host::Domain(domain) = &host
            && self.deny_file.is_some()
            && self.denies(domain)
        {
            return Err(TargetUrlError::DeniedHost);
        }
        Ok(())
    }

    fn has_private_name(&self, host: &Host<&str>) -> bool {
        matches!(host, Host::Domain(d) if self.private_names.contains(d.trim_end_matches('.')))
    }

    /// Whether `host:port` is this service: its public host, the address
    /// it listens on, or the `Host` a request reached it by.
    fn is_own(&self, host: &Host<&str>, port: u16, via: Option<&str>) -> bool {
        let name = match host {
            Host::Domain(d) => d.trim_end_matches('.').to_owned(),
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => format!("[{ip}]"),
        };
        if self.public_host.as_deref() == Some(name.as_str()) {
            return true;
        }
        if let Some(via) = via.and_then(|v| Url::parse(&format!("http://{v}/")).ok())
            && via.host_str().map(|h| h.trim_end_matches('.')) == Some(name.as_str())
            && via.port().is_none_or(|p| p == port)
        {
            return true;
        }
        let Some(listen) = self.listen else {
            return false;
        };
        if port != listen.port() {
            return false;
        }
        let ip = match host {
            Host::Domain(d) => {
                let d = d.trim_end_matches('.');
                let loopback = d == "localhost"
                    || d.ends_with(".localhost")
                    || self.loopback_names.contains(&d.to_ascii_lowercase());
                return loopback && (listen.ip().is_unspecified() || listen.ip().is_loopback());
            }
            Host::Ipv4(ip) => IpAddr::V4(*ip),
            Host::Ipv6(ip) => ip.to_ipv4_mapped().map_or(IpAddr::V6(*ip), IpAddr::V4),
        };
        ip == listen.ip()
            || ip.is_unspecified()
            || (ip.is_loopback() && (listen.ip().is_unspecified() || listen.ip().is_loopback()))
    }

    /// Whether the deny list blocks `url` now: checked on every redirect,
    /// from the store or from any cache. One atomic load without a list;
    /// with one, a hashed lookup of the host and of each parent domain.
    pub(crate) fn blocks(&self, url: &TargetUrl) -> bool {
        if !self.denying.load(Ordering::Acquire) {
            return false;
        }
        let host = url.host_str();
        // An IP address is never a domain on the list (as at create time):
        // a host whose last label is a number is IPv4 (WHATWG URL rules).
        let last = &host[host.bytes().rposition(|b| b == b'.').map_or(0, |i| i + 1)..];
        let ip =
            host.starts_with('[') || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()));
        !ip && self.denies(host)
    }

    /// Whether `domain` or a parent of it is on the deny list.
    fn denies(&self, domain: &str) -> bool {
        let deny = self.deny.read().unwrap_or_else(|e| e.into_inner());
        let mut rest = domain.trim_end_matches('.');
        loop {
            if deny.contains(rest) {
                return true;
            }
            // Byte scans: `split_once` on a char cost as much as the lookup.
            match rest.bytes().position(|b| b == b'.') {
                Some(dot) => rest = &rest[dot + 1..],
                None => return false,
            }
        }
    }
}

fn read_deny_list(path: &Path) -> Result<DenySet, DenyListError> {
    let text = std::fs::read_to_string(path).map_err(|source| DenyListError {
        path: path.display().to_string(),
        source,
    })?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        // The same form the parser gives hosts: lower case, punycode.
        .map(|l| {
            Url::parse(&format!("http://{l}/"))
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| l.to_ascii_lowercase())
                .trim_end_matches('.')
                .to_owned()
        })
        .collect())
}

/// Addresses no public web server has, and `localhost`: every IANA
/// special-purpose range and multicast, and IPv4 carried inside IPv6
/// (mapped, compatible, NAT64, 6to4) judged as the IPv4 it carries.
/// Decimal and hex IPv4 forms (`http://2130706433/`, `http://0x7f.1/`)
/// arrive here already parsed as IPv4 by the WHATWG rules.
fn is_private(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(d) => {
            let d = d.trim_end_matches('.');
            d == "localhost" || d.ends_with(".localhost")
        }
        Host::Ipv4(ip) => private_v4(*ip),
        Host::Ipv6(ip) => private_v6(*ip),
    }
}

/// The IANA IPv4 special-purpose registry (RFC 6890 and its updates),
/// every range whole, with multicast and the reserved `240.0.0.0/4`
/// (which holds the broadcast address).
const SPECIAL_V4: [Ipv4Net; 18] = [
    Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8),
    Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8),
    Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10),
    Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8),
    Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16),
    Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 0, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 2, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 31, 196, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 52, 193, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 88, 99, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16),
    Ipv4Net::new_assert(Ipv4Addr::new(192, 175, 48, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15),
    Ipv4Net::new_assert(Ipv4Addr::new(198, 51, 100, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(203, 0, 113, 0), 24),
    Ipv4Net::new_assert(Ipv4Addr::new(224, 0, 0, 0), 4),
    Ipv4Net::new_assert(Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// The IANA IPv6 special-purpose registry, multicast, and the deprecated
/// site-local and IPv4-compatible ranges. The ranges that carry an IPv4
/// address are not here: [`embedded_v4`] unwraps them.
const SPECIAL_V6: [Ipv6Net; 12] = [
    Ipv6Net::new_assert(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 128),
    Ipv6Net::new_assert(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128),
    Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48),
    Ipv6Net::new_assert(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),
    Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),
    Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32),
    Ipv6Net::new_assert(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),
    Ipv6Net::new_assert(Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16),
    Ipv6Net::new_assert(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    Ipv6Net::new_assert(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    Ipv6Net::new_assert(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    Ipv6Net::new_assert(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

fn private_v4(ip: Ipv4Addr) -> bool {
    SPECIAL_V4.iter().any(|net| net.contains(&ip))
}

fn private_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return private_v4(v4);
    }
    SPECIAL_V6.iter().any(|net| net.contains(&ip))
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:0:0/96`),
/// translated (`::ffff:0:0:0/96`, RFC 2765), compatible (`::/96`, past
/// `::` and `::1`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0xffff, 0, ..] => Some(low),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, ..] | [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// Whether `ip` is one [`TargetPolicy`] refuses as private.
pub fn is_private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

/// The names a hosts file (`/etc/hosts`) gives a private address: a
/// target on one of them reaches this machine or its network.
fn private_names(hosts_file: &str) -> HashSet<String> {
    names_in_hosts(hosts_file, is_private_ip)
}

/// The names a hosts file gives addresses that `pick` picks.
fn names_in_hosts(hosts_file: &str, pick: impl Fn(IpAddr) -> bool) -> HashSet<String> {
    let mut names = HashSet::new();
    for line in hosts_file.lines() {
        let mut words = line.split('#').next().unwrap_or("").split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        if pick(ip) {
            names.extend(words.map(|n| n.trim_end_matches('.').to_ascii_lowercase()));
        }
    }
    names
}

impl super::wire::FromText for TargetUrl {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text).map_err(|e| e.to_string())
    }
}

super::wire::deserialize_from_text!(TargetUrl);

impl serde::Serialize for TargetUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

super::wire::string_schema!(
    TargetUrl,
    "Url",
    super::wire::StringSchema {
        format: Some("uri"),
        min_length: Some(1),
        max_length: Some(MAX_URL_BYTES),
        pattern: None,
        description: "An http or https URL without user info; stored and served in its \
                      canonical (WHATWG) form",
    }
);

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TargetUrl({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length, across the inline sizes and past them, keeps exactly
    /// the bytes given, in its clones and its `Location` too.
    #[test]
    fn a_url_keeps_its_bytes_at_every_length() {
        for len in (0..=300).chain([MAX_URL_BYTES]) {
            let raw: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let url = TargetUrl::of(&raw);
            let copy = url.clone();
            drop(url);
            assert_eq!(copy.as_str(), raw);
            assert_eq!(
                copy.location().map(|l| l.as_bytes().to_vec()),
                Some(raw.clone().into_bytes())
            );
        }
    }

    /// `location` skips the header check on every redirect because `of`
    /// made it once: a value that fails it must never become a header.
    #[test]
    fn only_header_safe_urls_become_a_location() {
        let parsed = TargetUrl::parse("https://example.com/a?b=c d").unwrap_err();
        assert_eq!(parsed, TargetUrlError::ControlCharacter);
        let url = TargetUrl::parse("https://example.com/ä?q=1").unwrap();
        let location = url.location().expect("a parsed URL is a header");
        assert_eq!(location.as_bytes(), url.as_str().as_bytes());
        assert_eq!(
            axum::http::HeaderValue::from_bytes(url.as_str().as_bytes()).ok(),
            Some(location)
        );
        for stored in [
            "https://a.example/\r\nSet-Cookie: x=1",
            "https://a.example/\0",
            "https://a.example/\x7f",
        ] {
            let url = TargetUrl::from_trusted(stored);
            assert!(url.location().is_none(), "{stored:?}");
            assert!(axum::http::HeaderValue::from_str(stored).is_err());
        }
        // Tabs and bytes above ASCII are what `HeaderValue` takes too.
        assert!(
            TargetUrl::from_trusted("https://a.example/\tx")
                .location()
                .is_some()
        );
    }

    #[test]
    fn keeps_canonical_urls_as_they_are() {
        for ok in [
            "https://example.com/",
            "http://example.com/a/b?c=d&e=f#frag",
            "https://example.com:8443/x",
            "http://127.0.0.1:8080/",
            "https://[::1]/path",
        ] {
            assert_eq!(TargetUrl::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn stores_what_the_parser_validated() {
        for (raw, canonical) in [
            ("https://example.com", "https://example.com/"),
            ("http:/\\evil.com", "http://evil.com/"),
            ("http:\\\\evil.com", "http://evil.com/"),
            ("https:evil.com", "https://evil.com/"),
            ("http:///evil.com", "http://evil.com/"),
            ("http://%65vil.com/", "http://evil.com/"),
            ("HTTP://EXAMPLE.COM:80/a/../b", "http://example.com/b"),
            ("https://example.com:443/x", "https://example.com/x"),
        ] {
            assert_eq!(TargetUrl::parse(raw).unwrap().as_str(), canonical, "{raw}");
            assert_eq!(TargetUrl::canonical(raw).as_deref(), Some(canonical));
        }
        assert_eq!(TargetUrl::canonical("https://example.com/"), None);
    }

    #[test]
    fn refuses_credentials() {
        for raw in [
            "https://www.google.com@evil.com/",
            "https://user:pw@example.com/",
            "https://:pw@example.com/",
        ] {
            assert_eq!(
                TargetUrl::parse(raw),
                Err(TargetUrlError::Credentials),
                "{raw}"
            );
        }
    }

    #[test]
    fn refuses_private_targets_when_asked() {
        let open = TargetPolicy::new(false, None).unwrap();
        let strict = TargetPolicy::new(true, None).unwrap();
        for raw in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.1/",
            "http://017700000001/",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://172.16.5.4/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0.0.0.0/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fe80::1]/",
            "http://[fd00::1]/",
            "http://localhost:8080/",
            "http://api.localhost/",
            // IANA special-purpose ranges and multicast.
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::10.0.0.1]/",
            "http://[64:ff9b:1::1]/",
            "http://[2002:7f00:1::1]/",
            "http://[2002:c0a8:101::]/",
            "http://[::ffff:0:0]/",
            "http://[::ffff:10.1.1.1]/",
            // IPv4-translated (RFC 2765).
            "http://[::ffff:0:127.0.0.1]/",
            "http://[::ffff:0:169.254.169.254]/",
            "http://[fec0::1]/",
            "http://[ff02::1]/",
            "http://[2001::1]/",
            "http://[2001:db8::1]/",
            "http://[100::1]/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://239.255.255.250/",
            "http://198.18.0.1/",
            "http://198.19.255.255/",
            "http://240.0.0.1/",
            "http://255.255.255.255/",
            "http://192.0.0.8/",
            "http://192.0.2.1/",
            "http://198.51.100.7/",
            "http://203.0.113.9/",
            "http://100.64.0.1/",
        ] {
            let url = TargetUrl::parse(raw).unwrap();
            assert_eq!(
                strict.check(&url, None),
                Err(TargetUrlError::PrivateTarget),
                "{raw}"
            );
            assert_eq!(open.check(&url, None), Ok(()), "{raw}");
        }
        for raw in [
            "https://example.com/",
            "http://8.8.8.8/",
            "http://198.20.0.1/",
            "http://223.255.255.255/",
            "http://[2606:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
            "http://[::ffff:0:8.8.8.8]/",
            "http://[64:ff9b::8.8.8.8]/",
            "http://[2002:808:808::1]/",
        ] {
            assert_eq!(
                strict.check(&TargetUrl::parse(raw).unwrap(), None),
                Ok(()),
                "{raw}"
            );
        }
    }

    /// Names the hosts file gives a private address are private targets.
    #[test]
    fn names_of_private_addresses_in_the_hosts_file() {
        let names = private_names(
            "127.0.0.1 localhost\n127.0.1.1 build-box.lan build-box # this machine\n\
             ::1 ip6-localhost ip6-loopback\n10.0.0.5 NAS.home.\n93.184.215.14 example.com\n\
             # 10.0.0.6 commented.example\nnot-an-address name\n",
        );
        let mut names: Vec<_> = names.into_iter().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "build-box",
                "build-box.lan",
                "ip6-localhost",
                "ip6-loopback",
                "localhost",
                "nas.home"
            ]
        );
    }

    /// A name the hosts file gives a loopback address is this machine, as
    /// `localhost` is: a target on it at the listen port loops.
    #[test]
    fn names_the_hosts_file_gives_loopback_are_the_service_too() {
        let listen: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let mut policy = TargetPolicy::new(false, None)
            .unwrap()
            .with_own_hosts(None, Some(listen));
        policy.loopback_names = names_in_hosts(
            "127.0.1.1 build-box.lan Build-Box # this machine\n10.0.0.5 nas\n::1 ip6-loopback\n",
            |ip| ip.is_loopback(),
        );
        let check = |raw: &str| policy.check(&TargetUrl::parse(raw).unwrap(), None);
        for raw in [
            "http://build-box:8080/a",
            "http://build-box.lan:8080/",
            "http://ip6-loopback:8080/",
        ] {
            assert_eq!(check(raw), Err(TargetUrlError::OwnHost), "{raw}");
        }
        for raw in ["http://build-box:8081/", "http://nas:8080/"] {
            assert_eq!(check(raw), Ok(()), "{raw}");
        }
    }

    /// A target on the service itself is a loop: refused on the public
    /// host at any port, on the listen address and its loopback names,
    /// and on the Host a request came in by.
    #[test]
    fn refuses_targets_on_the_service_itself() {
        let listen: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let policy = TargetPolicy::new(false, None)
            .unwrap()
            .with_own_hosts(Some("https://S.example/"), Some(listen));
        let check =
            |raw: &str, via: Option<&str>| policy.check(&TargetUrl::parse(raw).unwrap(), via);
        for raw in [
            "https://s.example/abc",
            "http://s.example:8443/",
            "https://S.EXAMPLE./x",
            "http://127.0.0.1:8080/abc",
            "http://127.9.9.9:8080/",
            "http://localhost:8080/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]:8080/",
            "http://0.0.0.0:8080/",
        ] {
            assert_eq!(check(raw, None), Err(TargetUrlError::OwnHost), "{raw}");
        }
        for raw in [
            "https://example.com/",
            "https://www.s.example/",
            "http://127.0.0.1:8081/",
            "http://localhost/",
        ] {
            assert_eq!(check(raw, None), Ok(()), "{raw}");
        }
        assert_eq!(
            check("http://short.lan/a", Some("short.lan")),
            Err(TargetUrlError::OwnHost)
        );
        assert_eq!(
            check("http://short.lan:81/a", Some("short.lan:81")),
            Err(TargetUrlError::OwnHost)
        );
        assert_eq!(check("http://short.lan:82/a", Some("short.lan:81")), Ok(()));
        // Listening on one address, only that address at that port is it.
        let one = TargetPolicy::new(false, None)
            .unwrap()
            .with_own_hosts(None, Some("192.0.2.7:9000".parse().unwrap()));
        let check = |raw: &str| one.check(&TargetUrl::parse(raw).unwrap(), None);
        assert_eq!(
            check("http://192.0.2.7:9000/"),
            Err(TargetUrlError::OwnHost)
        );
        assert_eq!(check("http://127.0.0.1:9000/"), Ok(()));
        assert_eq!(check("http://192.0.2.7/"), Ok(()));
    }

    #[test]
    fn deny_list_covers_subdomains_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("deny.txt");
        std::fs::write(
            &file,
            "# known bad\nevil.com\n  Phish.EXAMPLE  # trailing\n",
        )
        .unwrap();
        let policy = TargetPolicy::new(false, Some(file.clone())).unwrap();
        let check = |raw: &str| policy.check(&TargetUrl::parse(raw).unwrap(), None);
        assert_eq!(check("https://evil.com/x"), Err(TargetUrlError::DeniedHost));
        assert_eq!(
            check("https://a.b.EVIL.com./"),
            Err(TargetUrlError::DeniedHost)
        );
        assert_eq!(
            check("https://phish.example/"),
            Err(TargetUrlError::DeniedHost)
        );
        assert_eq!(check("https://notevil.com/"), Ok(()));
        assert_eq!(check("https://example.com/"), Ok(()));
        std::fs::write(&file, "example.com\n").unwrap();
        assert_eq!(policy.reload().unwrap(), 1);
        assert_eq!(check("https://evil.com/x"), Ok(()));
        assert_eq!(
            check("https://www.example.com/"),
            Err(TargetUrlError::DeniedHost)
        );
        std::fs::remove_file(&file).unwrap();
        assert!(policy.reload().is_err());
        assert_eq!(
            check("https://www.example.com/"),
            Err(TargetUrlError::DeniedHost)
        );
    }

    /// What a redirect checks is what a create checks: the same hosts
    /// blocked, read off the stored bytes instead of a parse.
    #[test]
    fn a_redirect_blocks_what_a_create_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("deny.txt");
        let policy = TargetPolicy::new(false, Some(file.clone())).unwrap_err();
        drop(policy);
        std::fs::write(&file, "").unwrap();
        let policy = TargetPolicy::new(false, Some(file.clone())).unwrap();
        let blocks = |raw: &str| policy.blocks(&TargetUrl::parse(raw).unwrap());
        assert!(!blocks("https://evil.com/"), "an empty list blocks nothing");
        std::fs::write(&file, "evil.com\n127.0.0.1\nevil.com1\n").unwrap();
        policy.reload().unwrap();
        for (raw, blocked) in [
            ("https://evil.com", true),
            ("http://a.b.evil.com:8080/x?y#z", true),
            ("https://EVIL.com.:443/", true),
            ("https://evil.com?q", true),
            ("https://evil.com#f", true),
            ("https://notevil.com/evil.com", false),
            ("https://example.com/?u=https://evil.com/", false),
            ("http://127.0.0.1/", false),
            ("http://[::1]/", false),
            ("http://a1.evil.com/", true),
            ("http://evil.com1/", true),
        ] {
            let url = TargetUrl::parse(raw).unwrap();
            assert_eq!(policy.blocks(&url), blocked, "{raw}");
            let refused = policy.check(&url, None) == Err(TargetUrlError::DeniedHost);
            assert_eq!(refused, blocked, "{raw}: create and redirect agree");
        }
    }

    #[test]
    fn percent_encodes_iris() {
        let t = TargetUrl::parse("https://de.wikipedia.org/wiki/Köln").unwrap();
        assert_eq!(t.as_str(), "https://de.wikipedia.org/wiki/K%C3%B6ln");
        let t = TargetUrl::parse("https://bücher.example/").unwrap();
        assert_eq!(t.as_str(), "https://xn--bcher-kva.example/");
    }

    #[test]
    fn rejects_bad_urls() {
        use TargetUrlError::*;
        assert_eq!(TargetUrl::parse(""), Err(Empty));
        assert!(matches!(TargetUrl::parse("example.com"), Err(Invalid(_))));
        assert!(matches!(TargetUrl::parse("/relative"), Err(Invalid(_))));
        assert_eq!(
            TargetUrl::parse("ftp://example.com"),
            Err(Scheme("ftp".into()))
        );
        assert_eq!(
            TargetUrl::parse("javascript:alert(1)"),
            Err(Scheme("javascript".into()))
        );
        assert_eq!(
            TargetUrl::parse("https://exa\nmple.com"),
            Err(ControlCharacter)
        );
        assert_eq!(
            TargetUrl::parse(" https://example.com"),
            Err(ControlCharacter)
        );
        assert_eq!(
            TargetUrl::parse("https://a.b/\u{7f}"),
            Err(ControlCharacter)
        );
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert_eq!(TargetUrl::parse(&long), Err(TooLong));
        let max = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES - 20));
        assert_eq!(max.len(), MAX_URL_BYTES);
        let over = format!("https://example.com/{}", "é".repeat(MAX_URL_BYTES / 6));
        assert!(over.len() < MAX_URL_BYTES);
        assert_eq!(TargetUrl::parse(&over), Err(TooLong));
        assert!(TargetUrl::parse(&max).is_ok());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Whatever is sent, what is stored parses back to itself and is
        /// a valid `Location` header: the validated URL is the served URL.
        #[test]
        fn stored_urls_are_fixed_points(raw in "(https?|HTTP|ftp)?:?[/\\\\]{0,3}([a-zA-Z0-9%@:.\\[\\]-]{0,12})([/?#][ -~éü]{0,12}){0,3}") {
            if let Ok(url) = TargetUrl::parse(&raw) {
                let again = TargetUrl::parse(url.as_str()).expect("stored URL parses");
                proptest::prop_assert_eq!(again.as_str(), url.as_str());
                proptest::prop_assert!(axum::http::HeaderValue::from_str(url.as_str()).is_ok());
                proptest::prop_assert_eq!(TargetUrl::canonical(url.as_str()), None);
            }
        }

        #[test]
        fn any_string_is_refused_or_stored_canonically(raw in proptest::prelude::any::<String>()) {
            if let Ok(url) = TargetUrl::parse(&raw) {
                let again = TargetUrl::parse(url.as_str()).expect("stored URL parses");
                proptest::prop_assert_eq!(again.as_str(), url.as_str());
            }
        }
    }
}
