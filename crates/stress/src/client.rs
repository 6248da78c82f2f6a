//! One keep-alive HTTP/1.1 connection on hyper's low-level client API: no
//! pool, no locks, nothing shared between workers. It reconnects on the next
//! request after any failure.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a request did not produce a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The TCP connection could not be made (refused, unreachable).
    Connect,
    /// No full answer within the request timeout.
    Timeout,
    /// The connection broke mid-request (reset, closed, incomplete answer).
    Reset,
    /// An answer whose status says failure.
    Status,
    /// An answer with the right status and a body that is not what the API promises.
    BadBody,
}

#[derive(Debug)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

pub struct Connection {
    addr: SocketAddr,
    host: header::HeaderValue,
    headers: std::sync::Arc<[(header::HeaderName, header::HeaderValue)]>,
    sender: Option<SendRequest<Full<Bytes>>>,
    timeout: Duration,
}

pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Connection {
    pub fn new(
        addr: SocketAddr,
        host: header::HeaderValue,
        headers: std::sync::Arc<[(header::HeaderName, header::HeaderValue)]>,
        timeout: Duration,
    ) -> Self {
        Self {
            addr,
            host,
            headers,
            sender: None,
            timeout,
        }
    }

    async fn connect(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, Failure> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|e| Failure::new(FailureKind::Connect, format!("{}: {e}", self.addr)))?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| Failure::new(FailureKind::Connect, e.to_string()))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.sender = Some(sender);
        }
        // Just set above when absent.
        self.sender
            .as_mut()
            .ok_or_else(|| Failure::new(FailureKind::Connect, "no connection"))
    }

    /// Sends one request and reads the whole answer, within the timeout.
    pub async fn send(
        &mut self,
        method: Method,
        uri: &Uri,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.send_inner(method, uri, body)).await {
            Ok(result) => {
                if result.is_err() {
                    self.sender = None;
                }
                result
            }
            Err(_) => {
                // The answer may still arrive on this connection; never
                // read it as the answer to the next request.
                self.sender = None;
                Err(Failure::new(
                    FailureKind::Timeout,
                    format!("no answer within {timeout:?}"),
                ))
            }
        }
    }

    async fn send_inner(
        &mut self,
        method: Method,
        uri: &Uri,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        let host = self.host.clone();
        let headers = std::sync::Arc::clone(&self.headers);
        let sender = self.connect().await?;
        sender
            .ready()
            .await
            .map_err(|e| Failure::new(FailureKind::Reset, e.to_string()))?;
        let mut req = Request::builder()
            .method(method)
            .uri(uri.clone())
            .header(header::HOST, host);
        for (name, value) in headers.iter() {
            req = req.header(name, value);
        }
        let body = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Full::new(b)
            }
            None => Full::new(Bytes::new()),
        };
        let req = req
            .body(body)
            .map_err(|e| Failure::new(FailureKind::BadBody, e.to_string()))?;
        let response = sender
            .send_request(req)
            .await
            .map_err(|e| Failure::new(FailureKind::Reset, e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Failure::new(FailureKind::Reset, e.to_string()))?
            .to_bytes();
        Ok(Answer { status, body })
    }
}
