//! `litelink health`: asks the server on this machine whether it is ready
//! (`GET /health/ready`), as a container's health check does, with no
//! shell or curl in the image.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::http::{Request, StatusCode, header};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

/// The status of `GET /health/ready` from the server listening on `port`
/// of 127.0.0.1, or why there is none within `timeout` (connecting,
/// sending and the answer's head together).
pub async fn ready(port: u16, timeout: Duration) -> Result<StatusCode, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let asked = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let request = Request::get("/health/ready")
            .header(header::HOST, addr.to_string())
            .body(Empty::<bytes::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let answer = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer.status())
    };
    tokio::time::timeout(timeout, asked)
        .await
        .map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}
