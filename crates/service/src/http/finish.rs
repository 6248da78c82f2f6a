//! What every answer carries, whoever made it. The hot path calls
//! [`finish`] on the answers it makes; every answer of the router passes
//! [`FinishLayer`], which calls it too. So the policy is written once:
//! - `x-request-id`: the client's when sane, else a new one; known to
//!   every log line written while the request is handled;
//! - `x-content-type-options: nosniff`: no browser may guess another
//!   type than the one sent;
//! - the request counted in the metrics, by route, status and latency.
//!
//! A redirect's own headers (`Location`, `Cache-Control`,
//! `Referrer-Policy`) are made by the one function both paths answer a
//! redirect with (`handlers::redirect_answer`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, Method, Request, Response, header};
use tower::{Layer, Service};

use super::request_id::{self, X_REQUEST_ID};
use crate::observability::logging::REQUEST_ID;
use crate::observability::recording::{Recording, Requests};

/// Adds what every answer carries to `response` (see the module
/// documentation), and counts it.
pub(crate) fn finish<B>(response: &mut Response<B>, id: HeaderValue, recording: Option<Recording>) {
    let status = response.status();
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(X_REQUEST_ID.clone(), id);
    if let Some(recording) = recording {
        recording.done(status.as_u16());
    }
}

/// [`finish`] for every answer of the service it wraps: outermost, so that
/// every log line of the request can name its id.
#[derive(Clone, Copy)]
pub(crate) struct FinishLayer {
    requests: Option<&'static Requests>,
}

impl FinishLayer {
    /// `requests`: where requests are counted; `None` when metrics are off.
    pub(crate) fn new(requests: Option<&'static Requests>) -> Self {
        Self { requests }
    }
}

impl<S> Layer<S> for FinishLayer {
    type Service = Finishing<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Finishing {
            inner,
            requests: self.requests,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Finishing<S> {
    inner: S,
    requests: Option<&'static Requests>,
}

impl<S, B, R> Service<Request<B>> for Finishing<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Finished<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = req.headers().get(&X_REQUEST_ID);
        let id = request_id::from(sent);
        if sent != Some(&id) {
            // Handlers read the id the answer will carry.
            req.headers_mut().insert(X_REQUEST_ID.clone(), id.clone());
        }
        let recording = self.requests.map(|requests| {
            let route = requests.route(req.uri().path());
            Recording::start(requests, route, req.method() == Method::POST)
        });
        Finished {
            inner: REQUEST_ID.scope(id.clone(), self.inner.call(req)),
            finish: Some((id, recording)),
        }
    }
}

pin_project_lite::pin_project! {
    pub(crate) struct Finished<F> {
        #[pin]
        inner: tokio::task::futures::TaskLocalFuture<HeaderValue, F>,
        finish: Option<(HeaderValue, Option<Recording>)>,
    }
}

impl<F, R, E> Future for Finished<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = std::task::ready!(this.inner.poll(cx))?;
        if let Some((id, recording)) = this.finish.take() {
            finish(&mut res, id, recording);
        }
        Poll::Ready(Ok(res))
    }
}
