//! The container image that scripts/test builds from the Containerfile's
//! runtime stage (`LITELINK_TEST_IMAGE`), run with podman and runc as a
//! user runs it: it answers, keeps its links on its volume across a
//! restart, runs as a user that is not root, on a read-only root, passes
//! its health check, stops at SIGTERM with status 0, and stays small; and
//! reaches a PostgreSQL over verified TLS with a CA file mounted into it.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::helpers::{client, missing};

/// The most the image may weigh, uncompressed, as podman reports it.
const MAX_IMAGE_BYTES: u64 = 40 * 1000 * 1000;

fn podman(args: &[&str]) -> (bool, String) {
    let out = Command::new("podman").args(args).output().expect("podman");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A container of the image, removed (with its volume) when dropped.
struct Container {
    name: String,
    volume: String,
}

impl Container {
    /// Runs `image` as a user would, read-only, on a free port of the host
    /// network with its own volume at /data, plus `extra` options of
    /// `podman run`; the container and its address.
    fn run(image: &str, extra: &[&str]) -> (Self, String) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let tag = format!("{}-{port}", std::process::id());
        let c = Container {
            name: format!("litelink-test-{tag}"),
            volume: format!("litelink-test-data-{tag}"),
        };
        let listen = format!("LITELINK_LISTEN=127.0.0.1:{port}");
        let mount = format!("{}:/data", c.volume);
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &c.name,
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=4096:4096",
            "--network",
            "host",
            "--read-only",
            "-e",
            &listen,
            "-v",
            &mount,
        ];
        args.extend_from_slice(extra);
        args.push(image);
        let (ok, said) = podman(&args);
        assert!(ok, "podman run: {said}");
        (c, format!("http://127.0.0.1:{port}"))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.name]);
        let _ = podman(&["volume", "rm", "-f", &self.volume]);
    }
}

async fn wait_until_it_answers(base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while client()
        .get(format!("{base}/health/ready"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "the container never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_image_serves_from_its_volume_as_a_user_on_a_read_only_root() {
    let Ok(image) = std::env::var("LITELINK_TEST_IMAGE") else {
        missing("no container image (LITELINK_TEST_IMAGE; scripts/test builds one as root)");
        return;
    };
    let (ok, size) = podman(&["image", "inspect", &image, "--format", "{{.Size}}"]);
    assert!(ok, "{size}");
    let size: u64 = size.trim().parse().expect("a size");
    assert!(size <= MAX_IMAGE_BYTES, "the image is {size} bytes");
    let (_, labels) = podman(&["image", "inspect", &image, "--format", "{{json .Labels}}"]);
    for label in [
        "org.opencontainers.image.version",
        "org.opencontainers.image.licenses",
        "org.opencontainers.image.source",
    ] {
        assert!(labels.contains(label), "{label} in {labels}");
    }

    let (c, base) = Container::run(&image, &[]);
    wait_until_it_answers(&base).await;

    let made: serde_json::Value = client()
        .post(format!("{base}/link"))
        .json(&serde_json::json!({"url": "https://example.com/in-a-container"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let code = made["short_link"].as_str().expect("a code").to_owned();

    let (_, user) = podman(&["top", &c.name, "huser"]);
    assert!(
        user.lines().skip(1).all(|l| l.trim() == "65532"),
        "runs as: {user}"
    );
    let (ok, health) = podman(&["healthcheck", "run", &c.name]);
    assert!(ok, "health check: {health}");

    // SIGTERM: a clean stop, within the shutdown timeout.
    let (ok, said) = podman(&["stop", "-t", "15", &c.name]);
    assert!(ok, "{said}");
    let (_, exit) = podman(&["inspect", &c.name, "--format", "{{.State.ExitCode}}"]);
    assert_eq!(exit.trim(), "0", "exit status after SIGTERM");

    // Started again on the same volume, the link is there.
    let (ok, said) = podman(&["start", &c.name]);
    assert!(ok, "{said}");
    wait_until_it_answers(&base).await;
    let r = client()
        .get(format!("{base}/{code}"))
        .send()
        .await
        .expect("redirect");
    assert_eq!(r.status(), 302);
    assert_eq!(
        r.headers()["location"],
        "https://example.com/in-a-container"
    );
}

/// The image as it meets a managed PostgreSQL: the CA's certificate
/// mounted read-only, `sslmode=verify-full` in `LITELINK_STORE`; every
/// connection it makes is TLS, and a link goes in and comes back.
#[tokio::test]
async fn the_image_reaches_postgresql_over_verified_tls() {
    let Ok(image) = std::env::var("LITELINK_TEST_IMAGE") else {
        missing("no container image (LITELINK_TEST_IMAGE; scripts/test builds one as root)");
        return;
    };
    let Some(tls) = crate::tls::tls() else { return };
    let db = tls.fresh_db("postgres", "localhost");
    let store =
        format!("LITELINK_STORE={db}?sslmode=verify-full&sslrootcert=/etc/litelink/db-ca.pem");
    let ca = format!("{}:/etc/litelink/db-ca.pem:ro", tls.file("ca.crt"));
    let (_c, base) = Container::run(&image, &["-e", &store, "-v", &ca]);
    wait_until_it_answers(&base).await;
    let made: serde_json::Value = client()
        .post(format!("{base}/link"))
        .json(&serde_json::json!({"url": "https://example.com/over-verified-tls"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let code = made["short_link"].as_str().expect("a code");
    let r = client()
        .get(format!("{base}/{code}"))
        .send()
        .await
        .expect("redirect");
    assert_eq!(r.status(), 302);
    let (all, ssl) = crate::tls::litelink_connections(&tls, &db);
    assert!(all > 0 && ssl == all, "{ssl} of {all} over TLS");
}
