//! The ceiling: a bare hyper 1.x HTTP/1.1 server on a current-thread
//! runtime that answers every request with a fixed `{"OK":true}`. It does
//! nothing litelink must do (no routing, no limits, no timeouts, no
//! metrics), so what it serves on one core is the most any HTTP/1.1
//! server built on hyper and tokio serves there; the `ceiling` experiment
//! measures litelink against it.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;

use crate::process::LISTENING;

const BODY: &[u8] = br#"{"OK":true}"#;

/// Serves on `listen` until the process is killed, after printing the line
/// `litelink serve` prints once it listens (so that the bench starts both
/// the same way).
pub fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{LISTENING}{}", listener.local_addr()?)?;
            out.flush()?;
        }
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    let mut response = hyper::Response::new(Full::new(Bytes::from_static(BODY)));
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    Ok::<_, Infallible>(response)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}
