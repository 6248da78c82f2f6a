//! One keep-alive HTTP/1.1 connection that writes its requests and parses
//! the answers itself (`httparse`), as wrk does: a load generator's core
//! work, kept lean so that the client is not what limits the measurement.
//! No pool, no locks, nothing shared between workers; it reconnects on the
//! next request after any failure.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::{Method, StatusCode, Uri, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// Most header lines an answer may have.
const MAX_HEADERS: usize = 64;
/// Largest answer head (status line and headers), and largest body.
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

pub struct Connection {
    addr: SocketAddr,
    host: header::HeaderValue,
    headers: std::sync::Arc<[(header::HeaderName, header::HeaderValue)]>,
    stream: Option<TcpStream>,
    timeout: Duration,
    /// The request being written; kept between requests for its room.
    out: Vec<u8>,
    /// What was read and not yet taken.
    input: BytesMut,
}

pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

/// How an answer's body ends.
enum Framing {
    None,
    Length(usize),
    Chunked,
    /// Until the server closes the connection.
    Close,
}

fn reset(message: impl Into<String>) -> Failure {
    Failure::new(FailureKind::Reset, message)
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
            stream: None,
            timeout,
            out: Vec::with_capacity(512),
            input: BytesMut::with_capacity(8 * 1024),
        }
    }

    /// Sends one request and reads the whole answer, within the timeout.
    pub async fn send(
        &mut self,
        method: Method,
        uri: &Uri,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        let timeout = self.timeout;
        let result = match tokio::time::timeout(timeout, self.exchange(&method, uri, body)).await {
            Ok(result) => result,
            Err(_) => Err(Failure::new(
                FailureKind::Timeout,
                format!("no answer within {timeout:?}"),
            )),
        };
        if result.is_err() {
            // The answer may still arrive on this connection; never read
            // it as the answer to the next request.
            self.stream = None;
            self.input.clear();
        }
        result
    }

    async fn exchange(
        &mut self,
        method: &Method,
        uri: &Uri,
        body: Option<Bytes>,
    ) -> Result<Answer, Failure> {
        self.write_request(method, uri, body.as_deref());
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|e| Failure::new(FailureKind::Connect, format!("{}: {e}", self.addr)))?;
            let _ = stream.set_nodelay(true);
            self.input.clear();
            self.stream = Some(stream);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(Failure::new(FailureKind::Connect, "no connection"));
        };
        stream
            .write_all(&self.out)
            .await
            .map_err(|e| reset(e.to_string()))?;
        let (status, framing, close) = loop {
            if let Some(head) = parse_head(&mut self.input, method)? {
                break head;
            }
            if self.input.len() > MAX_HEAD_BYTES {
                return Err(reset("answer head too long"));
            }
            read_more(stream, &mut self.input).await?;
        };
        let until_close = matches!(framing, Framing::Close);
        let body = match framing {
            Framing::None => Bytes::new(),
            Framing::Length(n) => {
                if n > MAX_BODY_BYTES {
                    return Err(reset("answer body too long"));
                }
                while self.input.len() < n {
                    read_more(stream, &mut self.input).await?;
                }
                self.input.split_to(n).freeze()
            }
            Framing::Chunked => read_chunked(stream, &mut self.input).await?,
            Framing::Close => {
                loop {
                    match stream.read_buf(&mut self.input).await {
                        Ok(0) => break,
                        Ok(_) if self.input.len() > MAX_BODY_BYTES => {
                            return Err(reset("answer body too long"));
                        }
                        Ok(_) => {}
                        Err(e) => return Err(reset(e.to_string())),
                    }
                }
                self.input.split().freeze()
            }
        };
        if close || until_close {
            self.stream = None;
        }
        Ok(Answer { status, body })
    }

    /// The request's bytes in `out`: request line, Host, the configured
    /// headers, and the body with its type and length.
    fn write_request(&mut self, method: &Method, uri: &Uri, body: Option<&[u8]>) {
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(method.as_str().as_bytes());
        out.push(b' ');
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in self.headers.iter() {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some(body) = body {
            out.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
            out.extend_from_slice(body.len().to_string().as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
            out.extend_from_slice(body);
        } else {
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Reads what the socket has into `input`; a closed connection is a reset
/// (an answer was still due).
async fn read_more(stream: &mut TcpStream, input: &mut BytesMut) -> Result<(), Failure> {
    if input.capacity() - input.len() < 4096 {
        input.reserve(8 * 1024);
    }
    match stream.read_buf(input).await {
        Ok(0) => Err(reset("connection closed before the whole answer")),
        Ok(_) => Ok(()),
        Err(e) => Err(reset(e.to_string())),
    }
}

/// The answer's head, taken off `input` once it is all there: its status,
/// how its body ends, and whether the server closes the connection after
/// it. Interim (1xx) answers are skipped.
fn parse_head(
    input: &mut BytesMut,
    method: &Method,
) -> Result<Option<(StatusCode, Framing, bool)>, Failure> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let used = match response.parse(input) {
            Ok(httparse::Status::Complete(used)) => used,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(reset(format!("malformed answer: {e}"))),
        };
        let code = response.code.unwrap_or(0);
        let status =
            StatusCode::from_u16(code).map_err(|_| reset(format!("status {code} is not one")))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = response.version == Some(0);
        for h in response.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| reset("malformed Content-Length"))?;
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h.value.eq_ignore_ascii_case(b"chunked")
                    || h.value.to_ascii_lowercase().ends_with(b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                let value = h.value.to_ascii_lowercase();
                if value.windows(5).any(|w| w == b"close") {
                    close = true;
                } else if value.windows(10).any(|w| w == b"keep-alive") {
                    close = false;
                }
            }
        }
        input.advance(used);
        if status.is_informational() {
            continue;
        }
        let framing = if *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Framing::None
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length {
            if n == 0 {
                Framing::None
            } else {
                Framing::Length(n)
            }
        } else {
            Framing::Close
        };
        return Ok(Some((status, framing, close)));
    }
}

/// A chunked body, whole, and its trailers skipped.
async fn read_chunked(stream: &mut TcpStream, input: &mut BytesMut) -> Result<Bytes, Failure> {
    let mut body = BytesMut::new();
    loop {
        let (used, size) = loop {
            match httparse::parse_chunk_size(input) {
                Ok(httparse::Status::Complete((used, size))) => break (used, size),
                Ok(httparse::Status::Partial) => read_more(stream, input).await?,
                Err(_) => return Err(reset("malformed chunk size")),
            }
        };
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| body.len() + s <= MAX_BODY_BYTES)
            .ok_or_else(|| reset("answer body too long"))?;
        if size == 0 {
            input.advance(used);
            // Trailers, if any, then the empty line.
            loop {
                if let Some(end) = find(input, b"\r\n") {
                    input.advance(end + 2);
                    if end == 0 {
                        return Ok(body.freeze());
                    }
                    continue;
                }
                read_more(stream, input).await?;
            }
        }
        while input.len() < used + size + 2 {
            read_more(stream, input).await?;
        }
        input.advance(used);
        body.extend_from_slice(&input[..size]);
        if &input[size..size + 2] != b"\r\n" {
            return Err(reset("malformed chunk"));
        }
        input.advance(size + 2);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str, method: &Method) -> Option<(u16, String, bool, usize)> {
        let mut input = BytesMut::from(raw.as_bytes());
        let (status, framing, close) = parse_head(&mut input, method).ok()??;
        let framing = match framing {
            Framing::None => "none".to_owned(),
            Framing::Length(n) => format!("length {n}"),
            Framing::Chunked => "chunked".to_owned(),
            Framing::Close => "close".to_owned(),
        };
        Some((status.as_u16(), framing, close, input.len()))
    }

    #[test]
    fn answer_heads_say_how_their_bodies_end() {
        let get = Method::GET;
        assert_eq!(
            head(
                "HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{\"link\":1}",
                &get
            ),
            Some((200, "length 12".into(), false, 10))
        );
        assert_eq!(
            head(
                "HTTP/1.1 302 Found\r\nlocation: /x\r\ncontent-length: 0\r\n\r\n",
                &get
            ),
            Some((302, "none".into(), false, 0))
        );
        assert_eq!(
            head(
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                &Method::HEAD
            ),
            Some((200, "none".into(), false, 0))
        );
        assert_eq!(
            head(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                &get
            ),
            Some((200, "chunked".into(), true, 0))
        );
        assert_eq!(
            head("HTTP/1.0 200 OK\r\n\r\nbody", &get),
            Some((200, "close".into(), true, 4))
        );
        assert_eq!(
            head(
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}",
                &get
            ),
            Some((201, "length 2".into(), false, 2))
        );
        assert_eq!(head("HTTP/1.1 200 OK\r\ncontent-le", &get), None);
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"[..]);
        assert!(parse_head(&mut bad, &get).is_err());
    }
}
