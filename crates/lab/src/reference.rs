//! The ceiling: a bare hyper 1.x HTTP/1.1 server on a current-thread
//! runtime that answers every request with a fixed `{"OK":true}`. It does
//! nothing litelink must do (no routing, no limits, no timeouts, no
//! metrics), so what it serves on one core is the most any HTTP/1.1
//! server built on hyper and tokio serves there; the `ceiling` experiment
//! measures litelink against it.
//!
//! With [`Answer::Redirect`] it answers every request with the response
//! head of a litelink redirect instead (`Location`, `Cache-Control`,
//! `nosniff`, a fresh request id): the floor under a redirect that
//! carries what every answer must, with no lookup, counting or metrics
//! (docs/benchmarks.md).

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::StatusCode;
use hyper::header::{
    CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue, LOCATION, X_CONTENT_TYPE_OPTIONS,
};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;

use crate::process::LISTENING;

const BODY: &[u8] = br#"{"OK":true}"#;
/// As long as the URLs `litelink stress` creates.
pub const TARGET: &str = "https://example.com/litelink-stress/read/123456";

/// What the reference server answers to every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `200 {"OK":true}`: the ceiling.
    Ok,
    /// A `302` with the headers of a litelink redirect.
    Redirect,
}

fn answer(kind: Answer) -> hyper::Response<Full<Bytes>> {
    match kind {
        Answer::Ok => {
            let mut response = hyper::Response::new(Full::new(Bytes::from_static(BODY)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Answer::Redirect => {
            let mut response = hyper::Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::FOUND;
            let h = response.headers_mut();
            h.insert(LOCATION, HeaderValue::from_static(TARGET));
            h.insert(
                CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=0"),
            );
            h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
            h.insert(HeaderName::from_static("x-request-id"), request_id());
            response
        }
    }
}

/// A fresh id as litelink makes one (a prefix and a hex counter, cut from
/// a per-thread buffer), so that the floor pays for it alike.
fn request_id() -> HeaderValue {
    use std::cell::{Cell, RefCell};
    thread_local! {
        static NEXT: Cell<u64> = const { Cell::new(1) };
        static BUF: RefCell<bytes::BytesMut> = RefCell::new(bytes::BytesMut::new());
    }
    let n = NEXT.replace(NEXT.get() + 1);
    // Written on the stack, digit by digit: no allocation but the
    // buffer's, and no formatting machinery, as litelink.
    let mut id = *b"0badcafe-0000000000000000";
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    let len = 9 + digits;
    let mut m = n;
    for b in id[9..len].iter_mut().rev() {
        *b = b"0123456789abcdef"[(m & 0xf) as usize];
        m >>= 4;
    }
    BUF.with_borrow_mut(|buf| {
        if buf.capacity() < len {
            *buf = bytes::BytesMut::with_capacity(4096);
        }
        buf.extend_from_slice(&id[..len]);
        HeaderValue::from_maybe_shared(buf.split().freeze())
            .unwrap_or(HeaderValue::from_static("0"))
    })
}

/// Serves on `listen` until the process is killed, after printing the line
/// `litelink serve` prints once it listens (so that the bench starts both
/// the same way).
pub fn serve(listen: SocketAddr, kind: Answer) -> std::io::Result<()> {
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
                let service = hyper::service::service_fn(move |_req| async move {
                    Ok::<_, Infallible>(answer(kind))
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}
