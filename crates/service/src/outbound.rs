//! The HTTP client for the few requests litelink makes itself: to an
//! identity provider (discovery, its keys, the token and userinfo
//! endpoints) and to another shortener's API for an import. Each request
//! opens its own connection (TLS by rustls on ring, as every other
//! connection litelink makes), follows no redirect, and is bounded in
//! time and size: by default [`TIMEOUT`] in all and [`MAX_BODY`] read.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use openidconnect::{HttpRequest, HttpResponse};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// The longest one request to an identity provider may take, connection
/// included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read from an identity provider.
pub const MAX_BODY: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0}: not an http or https URL with a host")]
    Url(String),
    #[error("no answer within {0}s")]
    Timeout(u64),
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}")]
    Http(String),
    /// A destination this client may not reach.
    #[error("{0}")]
    Refused(String),
}

#[derive(Clone)]
pub struct HttpClient {
    /// `None`: no CA certificates, so plain http only.
    tls: Option<tokio_rustls::TlsConnector>,
    timeout: Duration,
    max_body: usize,
    /// Refuse a host any of whose addresses is private or loopback.
    public_only: bool,
    /// Read at most `max_body` of an answer and keep that, instead of
    /// failing on a larger one.
    cut_off: bool,
}

impl HttpClient {
    /// A client with the identity provider's bounds.
    pub fn new(tls: Option<ClientConfig>) -> Self {
        Self {
            tls: tls.map(|tls| tokio_rustls::TlsConnector::from(Arc::new(tls))),
            timeout: TIMEOUT,
            max_body: MAX_BODY,
            public_only: false,
            cut_off: false,
        }
    }

    /// The same client for a destination an untrusted party chose (a
    /// webhook's URL): the host is resolved at each request, every address
    /// it has is checked, and the connection goes to a checked address, so
    /// that a name cannot be made to point inside after it was checked.
    pub fn public_only(self) -> Self {
        Self {
            public_only: true,
            ..self
        }
    }

    /// The same client, keeping the first `max_body` bytes of a larger
    /// answer instead of failing.
    pub fn cutting_off(self) -> Self {
        Self {
            cut_off: true,
            ..self
        }
    }

    /// The same client with other bounds for one request's time and its
    /// answer's size (a larger answer is an error).
    pub fn with_limits(self, timeout: Duration, max_body: usize) -> Self {
        Self {
            timeout,
            max_body,
            ..self
        }
    }

    /// Sends `request` and reads the whole answer, within the timeout.
    pub async fn send(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .map_err(|_| HttpError::Timeout(self.timeout.as_secs()))?
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let uri = request.uri().clone();
        let bad_url = || HttpError::Url(uri.to_string());
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad_url()),
        };
        let host = uri.host().ok_or_else(bad_url)?.to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        // A bracketed IPv6 literal connects without its brackets.
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tcp = self.connect(&bare, port).await?;
        let _ = tcp.set_nodelay(true);

        let (parts, body) = request.into_parts();
        let mut outgoing = hyper::Request::from_parts(parts, Full::new(Bytes::from(body)));
        // The connection is the host's own: the request names only the path.
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|_| bad_url())?;
        *outgoing.uri_mut() = path;
        let authority = uri.authority().map_or(host.as_str(), |a| a.as_str());
        let headers = outgoing.headers_mut();
        headers.insert(
            hyper::header::HOST,
            authority.parse().map_err(|_| bad_url())?,
        );
        headers.insert(
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(concat!(
                "litelink/",
                env!("CARGO_PKG_VERSION")
            )),
        );

        let response = if https {
            let name = ServerName::try_from(bare).map_err(|_| bad_url())?;
            let connector = self.tls.as_ref().ok_or_else(|| {
                HttpError::Http("no CA certificates to check an https peer with".into())
            })?;
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| HttpError::Connect(format!("{host}:{port}"), e))?;
            round_trip(TokioIo::new(tls), outgoing, self.limits()).await?
        } else {
            round_trip(TokioIo::new(tcp), outgoing, self.limits()).await?
        };
        Ok(response)
    }

    fn limits(&self) -> Limits {
        Limits {
            timeout: self.timeout,
            max_body: self.max_body,
            cut_off: self.cut_off,
        }
    }

    /// A connection to `host`, to an address checked first when only
    /// public ones may be reached.
    async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, HttpError> {
        let failed = |e| HttpError::Connect(format!("{host}:{port}"), e);
        if !self.public_only {
            return TcpStream::connect((host, port)).await.map_err(failed);
        }
        let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(failed)?
            .collect();
        if let Some(private) = addresses
            .iter()
            .find(|a| crate::domain::is_private_ip(a.ip()))
        {
            return Err(HttpError::Refused(format!(
                "{host} has a private or loopback address ({})",
                private.ip()
            )));
        }
        let mut last = None;
        for address in &addresses {
            match TcpStream::connect(address).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last = Some(e),
            }
        }
        Err(failed(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
        })))
    }
}

#[derive(Clone, Copy)]
struct Limits {
    timeout: Duration,
    max_body: usize,
    cut_off: bool,
}

async fn round_trip<T>(
    io: T,
    request: hyper::Request<Full<Bytes>>,
    limits: Limits,
) -> Result<HttpResponse, HttpError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let http = |e: hyper::Error| HttpError::Http(e.to_string());
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(http)?;
    // The connection ends with this request; a peer that holds it open
    // is let go of after the timeout.
    let Limits {
        timeout,
        max_body,
        cut_off,
    } = limits;
    // A second longer than the request's own timeout, so that a request
    // that runs out is told so, not that its connection went.
    tokio::spawn(tokio::time::timeout(
        timeout + Duration::from_secs(1),
        connection,
    ));
    let response = sender.send_request(request).await.map_err(http)?;
    let (parts, mut body) = response.into_parts();
    if cut_off {
        let mut kept = Vec::new();
        while kept.len() < max_body {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = max_body - kept.len();
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(e)) => return Err(http(e)),
                None => break,
            }
        }
        return Ok(HttpResponse::from_parts(parts, kept));
    }
    let body = Limited::new(body, max_body)
        .collect()
        .await
        .map_err(|e| {
            HttpError::Http(format!(
                "reading the answer (at most {max_body} bytes are read): {e}"
            ))
        })?
        .to_bytes();
    Ok(HttpResponse::from_parts(parts, body.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_public_only_client_never_connects_to_a_private_address() {
        let client = HttpClient::new(None).public_only();
        for url in [
            "http://localhost:9/",
            "http://127.0.0.1:9/",
            "http://[::ffff:127.0.0.1]:9/",
            "http://[::1]:9/",
        ] {
            let request = hyper::Request::post(url).body(Vec::new()).expect("request");
            match client.send(request).await {
                Err(HttpError::Refused(why)) => assert!(why.contains("private"), "{why}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
