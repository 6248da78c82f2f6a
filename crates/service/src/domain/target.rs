use std::fmt;
use std::sync::Arc;

use url::Url;

/// Longest target URL accepted, in bytes. 4,096 is twice what every browser
/// and crawler handles (2,048 is the historical floor), far above real links,
/// and low enough to keep rows small and the request body limit tight.
pub const MAX_URL_BYTES: usize = 4096;

/// Cloning is a reference-count bump, so caches can hand out copies freely.
///
/// A link's destination: an absolute `http` or `https` URL with a host.
///
/// The string is stored and returned exactly as the client sent it when it
/// is ASCII, so `GET /link/{code}` gives back what `POST /link` got. A URL
/// with non-ASCII characters (an IRI such as `https://de.wikipedia.org/wiki/Köln`)
/// is stored in its normalised, percent-encoded form, because that is the only
/// form that is valid in a `Location` header.
#[derive(Clone, PartialEq, Eq)]
pub struct TargetUrl(Arc<str>);

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
}

impl TargetUrl {
    pub fn parse(raw: &str) -> Result<Self, TargetUrlError> {
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
        if raw.is_ascii() {
            Ok(Self(raw.into()))
        } else {
            let normalised = url.as_str();
            if normalised.len() > MAX_URL_BYTES {
                return Err(TargetUrlError::TooLong);
            }
            Ok(Self(normalised.into()))
        }
    }

    /// Wraps a value read back from the store, which was checked on the way in.
    pub(crate) fn from_trusted(stored: &str) -> Self {
        Self(stored.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TargetUrl({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_ascii_urls_verbatim() {
        for ok in [
            "https://example.com",
            "http://example.com/a/b?c=d&e=f#frag",
            "https://user@example.com:8443/x",
            "http://127.0.0.1:8080/",
            "https://[::1]/path",
        ] {
            assert_eq!(TargetUrl::parse(ok).unwrap().as_str(), ok);
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
        assert!(TargetUrl::parse(&max).is_ok());
    }
}
