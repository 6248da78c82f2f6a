//! Request ids: `x-request-id` taken from the request when it is a sane
//! token (a proxy in front may have set it), else made here; returned on
//! the response, and known to every log line written while the request is
//! handled (`telemetry::request_id`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::http::{HeaderName, HeaderValue, Request, Response};
use tower::{Layer, Service};

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id taken from a client; a longer one is replaced.
const MAX_ID_LEN: usize = 64;

use crate::telemetry::REQUEST_ID;

/// Ids made here: a random per-process prefix and a counter, unique
/// without a random draw per request.
fn make() -> HeaderValue {
    static PREFIX: std::sync::LazyLock<u32> = std::sync::LazyLock::new(rand::random);
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let id = format!("{:08x}-{n:x}", *PREFIX);
    HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

fn accept(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':' | b'/'))
}

#[derive(Clone, Copy, Default)]
pub struct RequestIdLayer;

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestIdService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestIdService { inner }
    }
}

#[derive(Clone)]
pub struct RequestIdService<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for RequestIdService<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = RequestIdFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let id = match req.headers().get(&X_REQUEST_ID) {
            Some(v) if accept(v) => v.clone(),
            _ => {
                let id = make();
                req.headers_mut().insert(X_REQUEST_ID.clone(), id.clone());
                id
            }
        };
        RequestIdFuture {
            inner: REQUEST_ID.scope(id.clone(), self.inner.call(req)),
            id: Some(id),
        }
    }
}

pin_project_lite::pin_project! {
    pub struct RequestIdFuture<F> {
        #[pin]
        inner: tokio::task::futures::TaskLocalFuture<HeaderValue, F>,
        id: Option<HeaderValue>,
    }
}

impl<F, R, E> Future for RequestIdFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = std::task::ready!(this.inner.poll(cx))?;
        if let Some(id) = this.id.take() {
            res.headers_mut().insert(X_REQUEST_ID.clone(), id);
        }
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_client_ids_are_checked() {
        let a = make();
        let b = make();
        assert_ne!(a, b);
        assert!(accept(&a));
        assert!(accept(&HeaderValue::from_static("req-123_abc.def")));
        assert!(!accept(&HeaderValue::from_static("has space")));
        assert!(!accept(&HeaderValue::from_static("")));
        let long = "a".repeat(MAX_ID_LEN + 1);
        assert!(!accept(&HeaderValue::from_str(&long).unwrap()));
    }
}
