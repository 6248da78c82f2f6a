//! Hardening of connections: slow, idle, oversized and
//! malformed requests, over raw TCP so that nothing tidies them up.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{spawn_app, spawn_process};

/// Reads until the server closes (or `limit` passes: then panics).
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!("still open after {limit:?}; read {out:?}"),
        }
    }
}

async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    String::from_utf8_lossy(&read_to_close(&mut s, Duration::from_secs(10)).await).into_owned()
}

/// A silent connection, a trickled header and an idle keep-alive
/// connection are each closed after their own timeout.
#[tokio::test]
async fn slow_and_idle_connections_are_closed() {
    let app = spawn_app(&["--header-read-timeout", "1", "--idle-timeout", "3"]).await;

    let t = Instant::now();
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    assert!(
        read_to_close(&mut silent, Duration::from_secs(5))
            .await
            .is_empty()
    );
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");

    let t = Instant::now();
    let mut trickle = TcpStream::connect(app.addr).await.unwrap();
    let mut closed = false;
    for b in b"GET /heart-beat HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if trickle.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut rest = [0u8; 64];
    closed |= matches!(
        tokio::time::timeout(Duration::from_secs(3), trickle.read(&mut rest)).await,
        Ok(Ok(0) | Err(_))
    );
    assert!(closed, "a trickled header kept its connection");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Keep-alive: open after the header timeout, closed after the idle one.
    let mut idle = TcpStream::connect(app.addr).await.unwrap();
    idle.write_all(b"GET /heart-beat HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(1800)).await;
    idle.write_all(b"GET /heart-beat HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "idle < 3 s is kept");
    let t2 = Instant::now();
    assert!(
        read_to_close(&mut idle, Duration::from_secs(6))
            .await
            .is_empty()
    );
    let idled = t2.elapsed();
    assert!(
        idled >= Duration::from_millis(2900) && idled < Duration::from_secs(5),
        "idle for {idled:?} ({:?} in all)",
        t.elapsed()
    );
}

/// Beyond `--max-connections` new connections wait; the file limit
/// is raised; a flood of fat headers is refused and its memory returned.
#[tokio::test]
async fn connections_are_capped_and_floods_leave_no_memory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn_process(
        &dir.path().join("c.db"),
        &["--max-connections", "8", "--header-read-timeout", "2"],
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(
        files[3], files[4],
        "soft limit raised to the hard one: {limits}"
    );

    // Eight silent connections fill the server; a ninth is answered only
    // once the header timeout has closed them.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let answer = exchange(
        server.addr,
        b"GET /heart-beat HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "answered after {:?}, beside 8 open connections",
        t.elapsed()
    );
    drop(silent);

    let big = spawn_process(&dir.path().join("m.db"), &["--max-connections", "2000"]);
    let rss_of = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap()
    };
    let baseline = rss_of(big.pid());
    let mut held = Vec::new();
    for i in 0..900 {
        let mut s = TcpStream::connect(big.addr).await.unwrap();
        // Half just under the header limit and unfinished, half far over it.
        let size = if i % 2 == 0 { 15_000 } else { 400_000 };
        let mut head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Fat: ".to_vec();
        head.resize(size, b'a');
        let _ = tokio::time::timeout(Duration::from_millis(200), s.write_all(&head)).await;
        held.push(s);
    }
    let peak = rss_of(big.pid());
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_of(big.pid());
        if now < baseline + 16 * 1024 || Instant::now() > deadline {
            break now;
        }
    };
    assert!(
        peak < baseline + 200 * 1024,
        "900 fat headers grew RSS from {baseline} KiB to {peak} KiB"
    );
    assert!(
        after < baseline + 16 * 1024,
        "RSS {after} KiB after the flood, baseline {baseline} KiB (peak {peak} KiB)"
    );
}

/// SIGTERM closes a half-read connection at once and exits.
#[tokio::test]
async fn sigterm_does_not_wait_for_a_half_sent_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = spawn_process(&dir.path().join("s.db"), &["--header-read-timeout", "60"]);
    let mut partial = TcpStream::connect(server.addr).await.unwrap();
    partial
        .write_all(b"POST /link HTTP/1.1\r\nHost: x\r\nContent-Le")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(b"GET /heart-beat HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    assert!(idle.read(&mut buf).await.unwrap() > 0);
    let t = Instant::now();
    let status = server
        .stop_with(libc::SIGTERM, Duration::from_secs(5))
        .expect("exits within 5 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop((partial, idle));
}

/// A body over the limit is refused from its Content-Length, to
/// a client that writes it all before reading; `Expect: 100-continue` gets
/// the 413 instead of `100 Continue`.
#[tokio::test]
async fn oversized_bodies_are_refused_before_they_are_read() {
    let app = spawn_app(&[]).await;
    let body = format!(
        "{{\"url\":\"https://example.com/{}\"}}",
        "a".repeat(4 * 1024 * 1024)
    );
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /link HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // Like Python's http.client: the whole body, then the answer.
    s.write_all(body.as_bytes())
        .await
        .expect("the server reads (and drops) the body instead of resetting");
    let answer =
        String::from_utf8_lossy(&read_to_close(&mut s, Duration::from_secs(10)).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("too large (over 16384 bytes)"), "{answer}");

    let mut s = TcpStream::connect(app.addr).await.unwrap();
    s.write_all(
        b"POST /api/v1/links HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 10485760\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
}

/// What hyper refuses by itself, before any service sees a request, it
/// answers with its own status and an empty body (hyper offers no hook to
/// give them another), and closes the connection.
#[tokio::test]
async fn protocol_errors_get_hypers_status_and_close() {
    let app = spawn_app(&[]).await;
    let mut fat = b"GET /heart-beat HTTP/1.1\r\nHost: x\r\nX-Fat: ".to_vec();
    fat.resize(20_000, b'a');
    fat.extend_from_slice(b"\r\n\r\n");
    for (request, status) in [
        (fat, "431"),
        (
            b"POST /link HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n".to_vec(),
            "400",
        ),
        (
            b"GET /heart-beat HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n".to_vec(),
            "400",
        ),
    ] {
        let answer = exchange(app.addr, &request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
        assert!(answer.contains("content-length: 0\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    }
}

/// Out of file descriptors, the accept loop neither spins nor
/// floods the log, and serves again once connections close.
#[tokio::test]
async fn running_out_of_descriptors_neither_spins_nor_floods_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn_process(
        &dir.path().join("f.db"),
        &["--max-connections", "1000", "--header-read-timeout", "2"],
    );
    // Lower the server's own limit below its connection cap.
    let lowered = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", server.pid()))
        .arg("--nofile=64:64")
        .status()
        .is_ok_and(|s| s.success());
    if !lowered {
        crate::helpers::missing("prlimit cannot lower the server's file limit here");
        return;
    }
    let (lines_before, _) = server.log();
    let cpu_before = server.cpu_time().unwrap();
    let mut held = Vec::new();
    for _ in 0..150 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(server.addr)).await
        {
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cpu = server.cpu_time().unwrap() - cpu_before;
    let (lines_after, log) = server.log();
    assert!(
        log.iter().any(|l| l.contains("cannot accept a connection")),
        "{log:#?}"
    );
    assert!(
        lines_after - lines_before <= 3,
        "{} log lines: {log:#?}",
        lines_after - lines_before
    );
    assert!(cpu < Duration::from_millis(700), "{cpu:?} of CPU in 1.5 s");
    drop(held);
    // The silent connections are closed by the header timeout; then the
    // backlog is served.
    let answer = exchange(
        server.addr,
        b"GET /heart-beat HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A request says its host once: two `Host` headers, none in HTTP/1.1, or
/// a port that is no port are a 400 with a JSON body, on the hot path
/// (`/{code}`) and the router's (`/api/v1/links`) alike, hot path on or off.
#[tokio::test]
async fn a_request_names_one_host_with_a_port_in_range() {
    for hot in [&[][..], &["--hot-path", "off"][..]] {
        let app = spawn_app(hot).await;
        let code = app.create_ok("https://example.com/host").await;
        for path in [
            format!("/{code}"),
            "/api/v1/links".to_owned(),
            "/heart-beat".into(),
        ] {
            for (head, why) in [
                (
                    format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n"),
                    "one Host header",
                ),
                (format!("GET {path} HTTP/1.1\r\n"), "needs a Host header"),
                (
                    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n"),
                    "port is not a port",
                ),
            ] {
                let answer = exchange(
                    app.addr,
                    format!("{head}Connection: close\r\n\r\n").as_bytes(),
                )
                .await;
                assert!(
                    answer.starts_with("HTTP/1.1 400"),
                    "{hot:?} {head}: {answer}"
                );
                assert!(answer.contains(why), "{hot:?} {head}: {answer}");
            }
        }
        // HTTP/1.0 needs none; an absolute-form target's authority is the host.
        let answer = exchange(app.addr, format!("GET /{code} HTTP/1.0\r\n\r\n").as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.0 302"), "{answer}");
        let answer = exchange(
            app.addr,
            format!(
                "POST http://{}/link HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n\
                 Content-Length: 30\r\nConnection: close\r\n\r\n{{\"url\":\"https://example.com/\"}}",
                app.addr
            )
            .as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        assert!(
            answer.contains(&format!("\"short_url\":\"http://{}/", app.addr)),
            "the authority, not the Host header: {answer}"
        );
    }
}
