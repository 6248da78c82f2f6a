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
//!   that writes its whole body before reading still reads the status.
//!
//! What is served is any hyper service ([`super::app`] gives the hot path
//! in front of the router); this module knows nothing of routes. The
//! errors hyper answers by itself, before any service sees a request
//! (400 for a malformed request, 414, 431), keep hyper's empty body:
//! hyper offers no hook to give them another.
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

use futures_util::task::AtomicWaker;
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::HttpSettings;
use crate::observability::logging::Throttle;
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
pub(crate) fn raise_file_limit() -> u64 {
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
pub(crate) fn connection_limit(settings: &HttpSettings) -> usize {
    let files = raise_file_limit();
    settings.max_connections.unwrap_or_else(|| {
        files
            .saturating_sub(RESERVED_FILES)
            .clamp(16, MAX_DERIVED_CONNECTIONS) as usize
    })
}

/// Serves `service` on `listener` until `shutdown` resolves, and returns
/// once the connections are drained; see the module documentation for
/// the limits.
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    settings: &HttpSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Connected
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
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
    drain(connections, settings.shutdown_timeout).await;
    Ok(())
}

/// Lets the connections told to shut down finish their requests, for at
/// most `timeout`; closes those still running then.
async fn drain(mut connections: JoinSet<()>, timeout: Duration) {
    let open = connections.len();
    let drained = tokio::time::timeout(timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            of = open,
            timeout_s = timeout.as_secs_f64(),
            "requests still running after the shutdown timeout; closing them"
        );
        connections.shutdown().await;
    }
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

/// The served service as one connection sees it: each request is marked
/// in flight until its answer is given, so that the watchdog never times
/// out a connection that is being answered.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

/// A service as one connection gets it, told the connection's peer (the
/// hot path reads a visitor's address from it; the router gets it as
/// axum's `ConnectInfo`).
pub(crate) trait Connected {
    fn connected(&self, peer: SocketAddr) -> Self;
}

impl<S> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        Answer {
            inner: self.inner.call(req),
            _busy: Busy::new(&self.activity),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, in flight until it is given.
    struct Answer<F> {
        #[pin]
        inner: F,
        _busy: Busy,
    }
}

impl<F: Future> Future for Answer<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

/// Serves one connection until it closes, the watchdog closes it, or the
/// server shuts down (see the module documentation).
fn connection<S, B>(
    tcp: TcpStream,
    peer: SocketAddr,
    service: S,
    limits: &ConnLimits,
    activity: Arc<Activity>,
) -> impl Future<Output = ()> + Send + use<S, B>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Connected
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = Tracked {
        inner: service.connected(peer),
        activity: Arc::clone(&activity),
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

/// The TCP stream as hyper sees it: what it reads counted for the
/// watchdog, and a bounded drain before closing.
struct Guarded {
    tcp: TcpStream,
    activity: Arc<Activity>,
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
            drain: None,
            shut: false,
        }
    }

    /// Reads and discards what the client still sends, up to the bounds.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(drain) = &mut self.drain else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.tcp).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    drain.left = drain.left.saturating_sub(buf.filled().len());
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

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.tcp).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
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
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
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

    /// A guarded connection moves every byte, in order, through reads
    /// that fill the buffer and reads that do not, and through writes that
    /// fill the socket's buffer (a slow reader), and counts what was read
    /// exactly once.
    #[tokio::test]
    async fn a_guarded_connection_moves_every_byte_and_counts_reads() {
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
}
