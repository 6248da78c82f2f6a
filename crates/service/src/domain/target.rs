use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
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
    #[error("url is empty")]
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
    pub fn location(&self) -> Option<axum::http::HeaderValue> {
        self.clone().into_location()
    }

    /// [`TargetUrl::location`], taking the URL: its bytes move into the
    /// value, with no reference-count bump now and no drop later.
    pub fn into_location(self) -> Option<axum::http::HeaderValue> {
        // SAFETY: `header_safe` says every byte passed the check
        // `HeaderValue::from_maybe_shared` would make, and the bytes never
        // change after `of` checked them. Checking again cost 175
        // instructions of a cached redirect's 8,166 (2.1%, callgrind).
        self.header_safe
            .then(|| unsafe { axum::http::HeaderValue::from_maybe_shared_unchecked(self.bytes) })
    }

    fn host(&self) -> Option<Host<String>> {
        Url::parse(self.as_str()).ok()?.host().map(|h| h.to_owned())
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
/// known-bad domains (`--deny-hosts`, reloaded on SIGHUP) and, when asked,
/// private addresses. Applied to creates and edits.
#[derive(Debug, Default)]
pub struct TargetPolicy {
    pub refuse_private: bool,
    deny_file: Option<PathBuf>,
    deny: RwLock<Arc<HashSet<String>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read the deny list {path}: {source}")]
pub struct DenyListError {
    path: String,
    source: std::io::Error,
}

impl TargetPolicy {
    /// Reads `deny_file` (one domain a line; `#` starts a comment; a domain
    /// denies its subdomains too).
    pub fn new(refuse_private: bool, deny_file: Option<PathBuf>) -> Result<Self, DenyListError> {
        let policy = Self {
            refuse_private,
            deny_file,
            deny: RwLock::default(),
        };
        policy.reload()?;
        Ok(policy)
    }

    /// Reads the deny list again; on an error the old list stays.
    pub fn reload(&self) -> Result<usize, DenyListError> {
        let Some(path) = &self.deny_file else {
            return Ok(0);
        };
        let hosts = read_deny_list(path)?;
        let n = hosts.len();
        *self.deny.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(hosts);
        Ok(n)
    }

    pub fn has_deny_list(&self) -> bool {
        self.deny_file.is_some()
    }

    pub fn check(&self, url: &TargetUrl) -> Result<(), TargetUrlError> {
        if !self.refuse_private && self.deny_file.is_none() {
            return Ok(());
        }
        let Some(host) = url.host() else {
            return Err(TargetUrlError::NoHost);
        };
        if self.refuse_private && is_private(&host) {
            return Err(TargetUrlError::PrivateTarget);
        }
        if let Host::Domain(domain) = &host {
            let deny = Arc::clone(&self.deny.read().unwrap_or_else(|e| e.into_inner()));
            let domain = domain.trim_end_matches('.');
            let mut rest = domain;
            loop {
                if deny.contains(rest) {
                    return Err(TargetUrlError::DeniedHost);
                }
                match rest.split_once('.') {
                    Some((_, parent)) => rest = parent,
                    None => break,
                }
            }
        }
        Ok(())
    }
}

fn read_deny_list(path: &Path) -> Result<HashSet<String>, DenyListError> {
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

/// Loopback, private, link-local, unspecified, broadcast, shared and
/// unique-local addresses, and `localhost`. Decimal and hex IPv4 forms
/// (`http://2130706433/`, `http://0x7f.1/`) arrive here already parsed as
/// IPv4 by the WHATWG rules.
fn is_private(host: &Host<String>) -> bool {
    match host {
        Host::Domain(d) => {
            let d = d.trim_end_matches('.');
            d == "localhost" || d.ends_with(".localhost")
        }
        Host::Ipv4(ip) => private_v4(*ip),
        Host::Ipv6(ip) => private_v6(*ip),
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
}

fn private_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return private_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
}

/// Whether `ip` is one [`TargetPolicy`] refuses as private.
pub fn is_private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

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
        ] {
            let url = TargetUrl::parse(raw).unwrap();
            assert_eq!(
                strict.check(&url),
                Err(TargetUrlError::PrivateTarget),
                "{raw}"
            );
            assert_eq!(open.check(&url), Ok(()), "{raw}");
        }
        for raw in [
            "https://example.com/",
            "http://8.8.8.8/",
            "http://[2001:db8::1]/",
        ] {
            assert_eq!(
                strict.check(&TargetUrl::parse(raw).unwrap()),
                Ok(()),
                "{raw}"
            );
        }
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
        let check = |raw: &str| policy.check(&TargetUrl::parse(raw).unwrap());
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
