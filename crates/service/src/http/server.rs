//! Serving connections: the accept loop and what bounds each connection.
//!
//! axum's own `serve` has no header-read or idle timeout and no cap on
//! connections, so a client that sends nothing, trickles its headers or
//! idles on keep-alive holds a descriptor forever. Here every connection
//! is HTTP/1.1 (hyper) with:
//! - a header-read timeout: from the connection's start for its first
//!   request, from the first byte of each later one,
//! - an idle timeout between requests (hyper's own header timeout would
//!   also run while a keep-alive connection waits, so both are ours),
//! - a small header limit (431 above it),
//! - a slot among `max_connections` (beyond it, connections wait in the
//!   kernel's backlog rather than exhaust file descriptors),
//! - a bounded drain after an early answer such as a 413, so that a client
//!   that writes its whole body before reading still reads the status,
//! - JSON bodies on the errors hyper answers by itself (400, 414, 431).
//!
//! On shutdown the listener closes, idle and half-read connections close
//! at once, and requests in flight get `shutdown_timeout` to finish.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use std::convert::Infallible;

use axum::extract::ConnectInfo;
use axum::routing::future::RouteFuture;
use futures_util::task::AtomicWaker;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustix::net::{RecvFlags, SendFlags};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::Service;

use super::HttpSettings;
use super::hot;
use crate::telemetry::Throttle;
use crate::throttled;

/// Descriptors kept back from connections for the database, its WAL, the
/// log, Valkey and the listener.
const RESERVED_FILES: u64 = 256;
/// Most connections a derived default allows, whatever the file limit.
const MAX_DERIVED_CONNECTIONS: u64 = 100_000;
/// After an early answer, at most this much of the request is read and
/// thrown away before closing ...
const DRAIN_BYTES: usize = 16 << 20;
/// ... and for at most this long.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Raises this process's open-file limit to its hard maximum and returns
/// the limit now in force.
pub fn raise_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a
    // live, properly aligned rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// The connection cap: `--max-connections` when set, else what the
/// (raised) file limit leaves after [`RESERVED_FILES`].
pub fn connection_limit(settings: &HttpSettings) -> usize {
    let files = raise_file_limit();
    settings.max_connections.unwrap_or_else(|| {
        files
            .saturating_sub(RESERVED_FILES)
            .clamp(16, MAX_DERIVED_CONNECTIONS) as usize
    })
}

/// Serves `router` on `listener` until `shutdown` resolves; see the module
/// documentation for the limits.
pub async fn serve(
    listener: TcpListener,
    service: super::Service,
    settings: &HttpSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limit = connection_limit(settings);
    tracing::info!(max_connections = limit, "accepting connections");
    let slots = Arc::new(Semaphore::new(limit));
    let limits = Arc::new(ConnLimits::from(settings));
    let watchdog = Arc::new(Watchdog::default());
    let watching = tokio::spawn(Arc::clone(&watchdog).run(Arc::clone(&limits)));
    let accept_errors = Throttle::new(Duration::from_secs(10));
    let open = metrics::gauge!("litelink_open_connections");
    let mut connections = JoinSet::new();
    let ended = Arc::new(AtomicU64::new(0));
    let trimmer = tokio::spawn(trim_after_floods(Arc::clone(&ended)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                // Small JSON answers on keep-alive connections: without
                // NODELAY Nagle's algorithm can hold each one back.
                let _ = tcp.set_nodelay(true);
                let activity = watchdog.watch(&limits);
                let conn = connection(tcp, peer, service.clone(), &limits, activity);
                let ended = Arc::clone(&ended);
                let open = open.clone();
                open.increment(1.0);
                connections.spawn(async move {
                    conn.await;
                    open.decrement(1.0);
                    drop(slot);
                    ended.fetch_add(1, Ordering::Relaxed);
                });
            }
            Err(e) => {
                throttled!(accept_errors, warn, error = %e, "cannot accept a connection");
                if !is_per_connection(&e) {
                    // Out of descriptors or memory: retrying at once would
                    // spin; connections that finish free what is missing.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    trimmer.abort();
    watchdog.shut_down();
    watching.abort();
    let open = connections.len();
    let drained = tokio::time::timeout(settings.shutdown_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            of = open,
            timeout_s = settings.shutdown_timeout.as_secs_f64(),
            "requests still running after the shutdown timeout; closing them"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// After many connections have closed, hands the memory their buffers
/// held back to the system: glibc keeps freed memory in per-thread arenas,
/// so without this a flood of connections leaves the process hundreds of
/// megabytes larger for good. Checked every five seconds; a trim takes
/// about a millisecond, and only follows 256 closed connections.
async fn trim_after_floods(ended: Arc<AtomicU64>) {
    const CLOSED_ENOUGH: u64 = 256;
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut trimmed_at = 0;
    loop {
        tick.tick().await;
        let now = ended.load(Ordering::Relaxed);
        if now - trimmed_at >= CLOSED_ENOUGH {
            trimmed_at = now;
            #[cfg(target_env = "gnu")]
            // SAFETY: malloc_trim only releases free memory; it is safe to
            // call at any time from any thread.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// Errors that concern one connection that is already gone, not the
/// listener: accepting again at once is right.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// What every connection is held to.
struct ConnLimits {
    builder: hyper::server::conn::http1::Builder,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl ConnLimits {
    /// How often a connection's watchdog looks: a timeout fires at most
    /// this late.
    fn tick(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

impl From<&HttpSettings> for ConnLimits {
    fn from(s: &HttpSettings) -> Self {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_header_size(s.max_header_bytes)
            // The read buffer never needs to be much larger than a header.
            .max_buf_size(s.max_header_bytes.max(8192) * 2)
            // Writes are small; one flat buffer is one write(2).
            .writev(false);
        Self {
            builder,
            header_timeout: s.header_read_timeout,
            idle_timeout: s.idle_timeout,
        }
    }
}

/// What a connection's requests tell the watchdog, and what the watchdog
/// tells the connection.
#[derive(Default)]
struct Activity {
    in_flight: AtomicU32,
    /// Requests started; written by the connection's task only ([`add`]).
    started: AtomicU64,
    /// Bytes read from the client, all told; written as `started` is.
    read: AtomicU64,
    /// 0 while open, then [`TIMED_OUT`] or [`SHUTTING_DOWN`], set by the
    /// watchdog.
    verdict: AtomicU8,
    /// The connection's task, woken when the verdict changes.
    waker: AtomicWaker,
}

const TIMED_OUT: u8 = 1;
const SHUTTING_DOWN: u8 = 2;

impl Activity {
    fn tell(&self, verdict: u8) {
        self.verdict.store(verdict, Ordering::Release);
        self.waker.wake();
    }
}

/// What a connection waits for, and until when.
#[derive(Clone, Copy)]
enum Wait {
    /// The rest of a request's head.
    Header(tokio::time::Instant),
    /// The next request on a keep-alive connection.
    Idle(tokio::time::Instant),
    /// A request being answered (bounded by the request timeout).
    Busy,
}

/// One task that looks at every connection every tick and tells those past
/// their header-read or idle timeout to close, so that a connection's own
/// task polls nothing but the connection (a timer and a shutdown channel
/// beside it in every connection would be polled on every request).
#[derive(Default)]
struct Watchdog {
    watched: Mutex<Vec<Watched>>,
}

struct Watched {
    activity: std::sync::Weak<Activity>,
    wait: Wait,
    seen_started: u64,
    seen_read: u64,
}

impl Watchdog {
    /// A new connection's activity, watched from now on.
    fn watch(&self, limits: &ConnLimits) -> Arc<Activity> {
        let activity = Arc::new(Activity::default());
        let watched = Watched {
            activity: Arc::downgrade(&activity),
            wait: Wait::Header(tokio::time::Instant::now() + limits.header_timeout),
            seen_started: 0,
            seen_read: 0,
        };
        self.lock().push(watched);
        activity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(self: Arc<Self>, limits: Arc<ConnLimits>) {
        let mut tick = tokio::time::interval(limits.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = tick.tick().await;
            let mut expired = Vec::new();
            self.lock().retain_mut(|w| {
                let Some(activity) = w.activity.upgrade() else {
                    return false;
                };
                let started = activity.started.load(Ordering::Relaxed);
                let read = activity.read.load(Ordering::Relaxed);
                w.wait = if activity.in_flight.load(Ordering::Relaxed) > 0 {
                    Wait::Busy
                } else if started != w.seen_started || matches!(w.wait, Wait::Busy) {
                    Wait::Idle(now + limits.idle_timeout)
                } else if read != w.seen_read && matches!(w.wait, Wait::Idle(_)) {
                    Wait::Header(now + limits.header_timeout)
                } else {
                    w.wait
                };
                (w.seen_started, w.seen_read) = (started, read);
                match w.wait {
                    Wait::Header(until) | Wait::Idle(until) if now >= until => {
                        expired.push(activity);
                        false
                    }
                    _ => true,
                }
            });
            // Woken outside the lock: a wake may run the task at once.
            for activity in expired {
                activity.tell(TIMED_OUT);
            }
        }
    }

    /// Tells every connection that the server is shutting down.
    fn shut_down(&self) {
        let open: Vec<_> = self
            .lock()
            .iter()
            .filter_map(|w| w.activity.upgrade())
            .collect();
        for activity in open {
            activity.tell(SHUTTING_DOWN);
        }
    }
}

/// Adds to a counter of [`Activity`] that only the connection's own task
/// writes (the watchdog only reads it): a load and a store, not the locked
/// read-modify-write of `fetch_add`, which only several writers need.
fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Marks a request in flight for as long as it lives.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        add(&activity.started, 1);
        Self(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a request on a connection is answered by: a hot answer made at
/// once (so that the future hyper keeps for a request is no larger than
/// the answer), or a boxed future that marks the connection busy until it
/// is done.
enum Answer {
    Now(Option<hyper::Response<hot::Body>>),
    Later {
        answer: Pin<Box<dyn Future<Output = hyper::Response<hot::Body>> + Send>>,
        _busy: Busy,
    },
    Routed {
        answer: Pin<Box<RouteFuture<Infallible>>>,
        _busy: Busy,
    },
}

impl Future for Answer {
    type Output = Result<hyper::Response<hot::Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(match self.get_mut() {
            // hyper polls a future once it is ready no more; if it did,
            // a 500 is the answer, not a panic.
            Answer::Now(answer) => answer.take().unwrap_or_else(|| {
                axum::response::IntoResponse::into_response(super::error::ApiError::Internal(
                    "an answer was polled after it was given".into(),
                ))
                .map(Either::Right)
            }),
            Answer::Later { answer, .. } => ready!(answer.as_mut().poll(cx)),
            Answer::Routed { answer, .. } => match ready!(answer.as_mut().poll(cx)) {
                Ok(response) => response.map(Either::Right),
                Err(never) => match never {},
            },
        }))
    }
}

/// Serves one connection until it closes, the watchdog closes it, or the
/// server shuts down (see the module documentation).
fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    service: super::Service,
    limits: &ConnLimits,
    activity: Arc<Activity>,
) -> impl Future<Output = ()> + Send + use<> {
    let super::Service { router, hot } = service;
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            if let Some((h, route)) = hot.as_ref().and_then(|h| Some((h, h.route(&req)?))) {
                return match h.answer(route, req) {
                    hot::Answered::Now(answer) => {
                        // Answered before the watchdog could look: it only
                        // needs to know that a request came.
                        add(&activity.started, 1);
                        Answer::Now(Some(answer))
                    }
                    hot::Answered::Later(answer) => Answer::Later {
                        answer,
                        _busy: Busy::new(&activity),
                    },
                };
            }
            let busy = Busy::new(&activity);
            // Only creates read the client's address (rate limits); an
            // extension costs an allocation, which reads need not pay.
            if req.method() == hyper::Method::POST {
                req.extensions_mut().insert(ConnectInfo(peer));
            }
            Answer::Routed {
                answer: Box::pin(router.clone().call(req)),
                _busy: busy,
            }
        })
    };
    let io = TokioIo::new(Guarded::new(tcp, Arc::clone(&activity)));
    let mut conn = Box::pin(limits.builder.serve_connection(io, service));
    let mut closing = false;
    // The waker last registered: while it is this task's and no verdict
    // has been seen, the registration still holds (only a verdict's wake
    // takes it), so that a poll need not register again (two locked
    // instructions per poll).
    let mut registered: Option<std::task::Waker> = None;
    std::future::poll_fn(move |cx| {
        let mut verdict = activity.verdict.load(Ordering::Acquire);
        if verdict != 0 || !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            // Registered before the verdict is read again: a verdict told
            // after this read wakes the task.
            activity.waker.register(cx.waker());
            registered = Some(cx.waker().clone());
            verdict = activity.verdict.load(Ordering::Acquire);
        }
        match verdict {
            TIMED_OUT => return Poll::Ready(()),
            SHUTTING_DOWN if !closing => {
                closing = true;
                if activity.in_flight.load(Ordering::Relaxed) == 0 {
                    // Idle or half-read: nothing to finish.
                    return Poll::Ready(());
                }
                // Finish the request in flight, then close.
                conn.as_mut().graceful_shutdown();
            }
            _ => {}
        }
        conn.as_mut().poll(cx).map(|done| {
            if let Err(e) = done {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        })
    })
}

/// The TCP stream as hyper sees it: JSON bodies for hyper's own error
/// answers, and a bounded drain before closing.
struct Guarded {
    tcp: TcpStream,
    activity: Arc<Activity>,
    /// A rewritten answer still to be written, and how much of it is.
    replacement: Option<(Vec<u8>, usize)>,
    drain: Option<Drain>,
    shut: bool,
}

struct Drain {
    left: usize,
    until: Pin<Box<tokio::time::Sleep>>,
}

impl Guarded {
    fn new(tcp: TcpStream, activity: Arc<Activity>) -> Self {
        Self {
            tcp,
            activity,
            replacement: None,
            drain: None,
            shut: false,
        }
    }

    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.replacement {
            if *done == bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(poll_send(&self.tcp, cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Reads and discards what the client still sends, up to the bounds.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(drain) = &mut self.drain else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match poll_recv(&self.tcp, cx, &mut buf) {
                Poll::Ready(Ok(n)) if n > 0 => {
                    drain.left = drain.left.saturating_sub(n);
                    if drain.left == 0 {
                        break;
                    }
                }
                Poll::Ready(_) => break,
                Poll::Pending => {
                    if drain.until.as_mut().poll(cx).is_ready() {
                        break;
                    }
                    return Poll::Pending;
                }
            }
        }
        self.drain = None;
        Poll::Ready(())
    }
}

/// hyper's answer to a request it could not parse: a 4xx head with
/// `content-length: 0` and no content type, which no answer of the router
/// has (every error of the router carries a JSON body). Returns the same
/// answer with a JSON body, to be written instead.
fn json_for_canned_error(buf: &[u8]) -> Option<Vec<u8>> {
    let head = buf.strip_prefix(b"HTTP/1.1 4")?;
    if !buf.ends_with(b"\r\n\r\n") || head.len() < 2 {
        return None;
    }
    let text = std::str::from_utf8(buf).ok()?.to_ascii_lowercase();
    if text.contains("\r\ncontent-type:") || !text.contains("\r\ncontent-length: 0\r\n") {
        return None;
    }
    let status_line = text.lines().next()?;
    let code: u16 = status_line.get(9..12)?.parse().ok()?;
    let message = match code {
        431 => "request headers are too large",
        414 => "request URI is too long",
        _ => "malformed HTTP request",
    };
    let reason = buf.get(13..buf.iter().position(|&b| b == b'\r')?)?;
    let body = format!("{{\"error\":\"{message}\"}}");
    let mut out = Vec::with_capacity(200);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(code.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(
        format!(
            "\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    Some(out)
}

/// `recv(2)` into `buf` once `tcp` is readable: what tokio's own
/// `poll_read` does, but as a plain system call. The C library's `recv`
/// (and `send`) is a thread-cancellation point, and in a process with more
/// than one thread it brackets every call with two atomic
/// compare-and-swaps; the bare server, with one thread, skips them
/// (docs/benchmarks.md). Returns how many bytes were read (0: end of
/// stream).
fn poll_recv(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(tcp.poll_read_ready(cx))?;
        // SAFETY: `recv` only writes the bytes it reports, and only those
        // are marked initialised below; nothing is de-initialised.
        let unfilled = unsafe { buf.unfilled_mut() };
        let len = unfilled.len();
        let mut got = None;
        let tried = tcp.try_io(Interest::READABLE, || {
            let ((read, _), _) = rustix::net::recv(tcp, &mut *unfilled, RecvFlags::empty())?;
            let n = read.len();
            got = Some(n);
            // Less than there was room for: the socket is drained, and
            // with edge-triggered epoll tokio must forget that it was
            // readable, as its own `poll_read` does, or the next read
            // would be a `recv` that finds nothing. Saying it would block
            // is how `try_io` is told; the bytes read are kept.
            if 0 < n && n < len {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            }
        });
        let n = match (tried, got) {
            (_, Some(n)) => n,
            (Ok(n), None) => n,
            (Err(e), None) if is_retry(&e) => continue,
            (Err(e), None) => return Poll::Ready(Err(e)),
        };
        // SAFETY: `recv` initialised the first `n` bytes.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        return Poll::Ready(Ok(n));
    }
}

/// A `try_io` that found the socket not ready after all, or a call
/// interrupted by a signal: poll again.
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// `send(2)` of `buf` once `tcp` is writable, as [`poll_recv`] reads (and
/// with `MSG_NOSIGNAL`, as the standard library sends).
fn poll_send(tcp: &TcpStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        let mut sent = None;
        let tried = tcp.try_io(Interest::WRITABLE, || {
            let n = rustix::net::send(tcp, buf, SendFlags::NOSIGNAL)?;
            sent = Some(n);
            // Less than all of it: the socket's buffer is full (see
            // `poll_recv`).
            if 0 < n && n < buf.len() {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            }
        });
        return Poll::Ready(match (tried, sent) {
            (_, Some(n)) | (Ok(n), None) => Ok(n),
            (Err(e), None) if is_retry(&e) => continue,
            (Err(e), None) => Err(e),
        });
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = ready!(poll_recv(&self.tcp, cx, buf))?;
        if n > 0 {
            add(&self.activity.read, n as u64);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_replacement(cx))?;
        if let Some(json) = json_for_canned_error(buf) {
            this.replacement = Some((json, 0));
            // Written in poll_flush/poll_shutdown if not all at once here.
            if let Poll::Ready(Err(e)) = this.poll_replacement(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        poll_send(&this.tcp, cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_replacement(cx))?;
        if !this.shut {
            ready!(Pin::new(&mut this.tcp).poll_shutdown(cx))?;
            this.shut = true;
            // Closing with unread bytes makes the kernel send a reset,
            // which can destroy the answer before the client reads it.
            this.drain = Some(Drain {
                left: DRAIN_BYTES,
                until: Box::pin(tokio::time::sleep(DRAIN_TIME)),
            });
        }
        ready!(this.poll_drain(cx));
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection's own `recv` and `send` move every byte, in order,
    /// through reads that fill the buffer and reads that do not, and
    /// through writes that fill the socket's buffer (a slow reader), and
    /// count what was read. A readiness forgotten at the wrong moment
    /// hangs (the timeout fails it); bytes not marked read, or marked
    /// twice, fail the comparisons.
    #[tokio::test]
    async fn own_system_calls_move_every_byte_in_order() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let data: Vec<u8> = (0..(6u32 << 20)).map(|i| (i * 7 + i / 251) as u8).collect();
        let client = {
            let data = data.clone();
            tokio::spawn(async move {
                let mut c = TcpStream::connect(addr).await.unwrap();
                // Odd-sized pieces, some with a pause, so that the server
                // reads both full and partial buffers.
                for (i, piece) in data.chunks(70_001).enumerate() {
                    c.write_all(piece).await.unwrap();
                    if i % 9 == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                // Then read the echo slowly at first, so that the server's
                // writes find the socket's buffer full.
                let mut back = vec![0u8; data.len()];
                let mut got = 0;
                while got < back.len() {
                    let end = (got + 4096).min(back.len());
                    let n = c.read(&mut back[got..end]).await.unwrap();
                    assert!(n > 0, "the echo ended early at {got}");
                    got += n;
                    if got < (1 << 20) {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                }
                back
            })
        };
        let (tcp, _) = listener.accept().await.unwrap();
        let activity = Arc::new(Activity::default());
        let mut conn = Guarded::new(tcp, Arc::clone(&activity));
        let work = async {
            // Small pieces, so that many reads fill their buffer and many
            // writes are taken whole.
            let mut received = Vec::with_capacity(data.len());
            let mut piece = [0u8; 4096];
            while received.len() < data.len() {
                let n = conn.read(&mut piece).await.unwrap();
                assert!(n > 0, "the stream ended early at {}", received.len());
                received.extend_from_slice(&piece[..n]);
            }
            assert!(received == data, "the bytes read differ from those sent");
            for piece in received.chunks(4096) {
                let mut done = 0;
                while done < piece.len() {
                    done += conn.write(&piece[done..]).await.unwrap();
                }
            }
            conn.flush().await.unwrap();
            client.await.unwrap()
        };
        let echoed = tokio::time::timeout(Duration::from_secs(30), work)
            .await
            .expect("a read or a write never finished");
        assert!(echoed == data, "the bytes written differ from those read");
        assert_eq!(activity.read.load(Ordering::Relaxed), data.len() as u64);
    }

    #[test]
    fn hypers_own_errors_get_a_json_body() {
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 18:00:00 GMT\r\n\r\n";
        let json = String::from_utf8(json_for_canned_error(canned).unwrap()).unwrap();
        assert!(
            json.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{json}"
        );
        assert!(json.contains("content-type: application/json\r\n"));
        assert!(json.ends_with("\r\n\r\n{\"error\":\"request headers are too large\"}"));
        // The router's own answers are left alone.
        for own in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
        ] {
            assert!(json_for_canned_error(own).is_none());
        }
    }
}
