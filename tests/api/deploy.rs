//! End to end: nginx (Debian's package) round-robin in front of three
//! litelink processes on one PostgreSQL database and its streaming replica,
//! with Valkey carrying their cache invalidations; the configuration files
//! are docs/deploy/'s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use litelink_lab::process::ServerProcess;
use serde_json::Value;

use crate::helpers::fresh_replicated_db;
use crate::valkey_server::ValkeyServer;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/deploy");

fn nginx_binary() -> PathBuf {
    std::env::var_os("LITELINK_TEST_NGINX")
        .map(PathBuf::from)
        .or_else(|| {
            ["/usr/sbin/nginx", "/usr/bin/nginx"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })
        .expect("no nginx: run the tests through scripts/test, which installs Debian's nginx")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// nginx with docs/deploy/nginx.conf, its ports swapped for ours.
struct Nginx {
    child: Child,
    url: String,
}

impl Nginx {
    /// Retries on another port when nginx cannot bind the one picked (a
    /// port released here may be taken by another test's server first).
    fn start(dir: &Path, upstreams: &[String]) -> Self {
        for _ in 0..5 {
            if let Some(nginx) = Self::try_start(dir, upstreams, free_port()) {
                return nginx;
            }
        }
        panic!("nginx did not start on any of five ports");
    }

    fn try_start(dir: &Path, upstreams: &[String], port: u16) -> Option<Self> {
        let mut conf = std::fs::read_to_string(format!("{DEPLOY}/nginx.conf")).expect("nginx.conf");
        conf = conf.replace(
            "listen 127.0.0.1:8080;",
            &format!("listen 127.0.0.1:{port};"),
        );
        for (i, up) in upstreams.iter().enumerate() {
            let from = format!("server 127.0.0.1:{} ", 8081 + i);
            assert!(conf.contains(&from), "nginx.conf names {from}");
            conf = conf.replace(
                &from,
                &format!("server {} ", up.trim_start_matches("http://")),
            );
        }
        std::fs::write(dir.join("nginx.conf"), conf).expect("write");
        let mut globals = format!(
            "daemon off; pid {0}/nginx.pid; error_log {0}/error.log;",
            dir.display()
        );
        // As root, nginx's workers would become `nobody`, who cannot use
        // this directory.
        // SAFETY: geteuid(2) takes nothing and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            globals.push_str(" user root;");
        }
        let mut child = Command::new(nginx_binary())
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", &globals])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        // Asked by its Server header, so that another process on the port
        // is not taken for nginx.
        while !answers_as_nginx(port) {
            if child.try_wait().expect("nginx status").is_some() {
                return None;
            }
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self { child, url })
    }
}

fn answers_as_nginx(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = String::new();
    tcp.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").is_ok()
        && tcp.take(4096).read_to_string(&mut head).is_ok()
        && head.to_ascii_lowercase().contains("\r\nserver: nginx")
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One litelink instance with docs/deploy/litelink-node.env, its store,
/// replica and bus swapped for the test's.
fn instance(dir: &Path, i: usize, (store, replica): &(String, String), bus: &str) -> ServerProcess {
    let env_file = std::fs::read_to_string(format!("{DEPLOY}/litelink-node.env")).expect("env");
    let mut env: Vec<(String, String)> = env_file
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    for (k, v) in &mut env {
        match k.as_str() {
            "LITELINK_STORE" => *v = store.to_owned(),
            "LITELINK_POSTGRES_READ_URL" => *v = replica.to_owned(),
            "LITELINK_INVALIDATIONS_URL" => *v = bus.to_owned(),
            "LITELINK_PUBLIC_URL" => *v = "http://127.0.0.1".into(),
            _ => {}
        }
    }
    // Every client here is this test on loopback, one address that nginx
    // forwards and that a forwarded header never exempts from the limits.
    env.push(("LITELINK_CREATE_RATE".into(), "0".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ServerProcess::start_with_env(
        Path::new(env!("CARGO_BIN_EXE_litelink")),
        &dir.join(format!("unused-{i}.db")),
        &[],
        &env,
        None,
    )
    .expect("litelink instance")
}

/// `litelink stress ARGS --json` against `url`, as a child process.
fn stress(url: &str, args: &[&str]) -> std::thread::JoinHandle<Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_litelink"));
    cmd.args(["stress", "--url", url, "--json", "--threads", "1"])
        .args(args);
    std::thread::spawn(move || {
        let out = cmd.output().expect("stress");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("stress json")
    })
}

#[test]
fn three_instances_behind_nginx_lose_no_read_when_one_is_killed() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let _replay = runtime.block_on(crate::replica::REPLAY.read());
    let store = runtime.block_on(fresh_replicated_db());
    let bus = ValkeyServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes: Vec<ServerProcess> = (0..3)
        .map(|i| instance(dir.path(), i, &store, &bus.url()))
        .collect();
    let nginx = Nginx::start(
        dir.path(),
        &nodes.iter().map(ServerProcess::url).collect::<Vec<_>>(),
    );

    // The seed scenario through nginx: every create and read succeeds.
    let seed = stress(
        &nginx.url,
        &[
            "--scenario",
            "seed",
            "--tasks",
            "60",
            "--gets-per-task",
            "20",
        ],
    )
    .join()
    .expect("seed");
    assert_eq!(seed["failed"], 0, "{seed}");
    assert_eq!(seed["successful"], 60 * 21, "{seed}");

    // Reads while one instance is killed: nginx sends the GETs it had in
    // flight there to the next instance, so none fails.
    let reads = stress(
        &nginx.url,
        &[
            "--scenario",
            "read",
            "--links",
            "300",
            "--workers",
            "16",
            "--duration",
            "3",
        ],
    );
    std::thread::sleep(Duration::from_millis(1500));
    nodes[1].kill9();
    let reads = reads.join().expect("reads");
    assert_eq!(reads["failed"], 0, "{reads}");
    assert!(reads["successful"].as_u64() > Some(1000), "{reads}");

    // Creates while another is killed: only those in flight there at the
    // kill may fail (a POST that reached it is not retried), at most one
    // per connection; every other is stored.
    let creates = stress(
        &nginx.url,
        &["--scenario", "create", "--workers", "16", "--duration", "3"],
    );
    std::thread::sleep(Duration::from_millis(1500));
    nodes[2].kill9();
    let creates = creates.join().expect("creates");
    let failed = creates["failed"].as_u64().expect("failed");
    eprintln!(
        "through nginx: seed {} requests, 0 failed; reads {} with a kill, 0 failed; creates {} with a kill, {failed} failed",
        seed["successful"], reads["successful"], creates["successful"]
    );
    assert!(
        failed <= 16,
        "only creates in flight at the kill fail: {creates}"
    );
    assert!(creates["successful"].as_u64() > Some(500), "{creates}");
    // The survivor read its links from the replica.
    let stats = nodes[0].stats().expect("stats");
    assert!(
        stats["replica"]["reads"].as_u64() > Some(0),
        "{}",
        stats["replica"]
    );
    drop(nginx);
}

/// compose.yaml, read as compose reads it (YAML with its anchors): two or
/// more litelink services built from the Containerfile, whose environment
/// `litelink serve` takes as it is, behind nginx with
/// docs/deploy/compose-nginx.conf naming exactly those services, next to
/// PostgreSQL and Valkey.
#[test]
fn the_compose_file_is_the_deploy_layout() {
    let Some(python) = std::env::var_os("LITELINK_TEST_MMDB_PYTHON").filter(|p| !p.is_empty())
    else {
        crate::helpers::missing(
            "a Python with PyYAML (LITELINK_TEST_MMDB_PYTHON; scripts/provision-mmdb)",
        );
        return;
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(format!("{root}/compose.yaml"))
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compose: Value = serde_json::from_slice(&out.stdout).expect("json");
    let services = compose["services"].as_object().expect("services");
    for needed in ["postgres", "valkey", "nginx"] {
        assert!(services.contains_key(needed), "no {needed} service");
    }
    let litelinks: Vec<&String> = services
        .iter()
        .filter(|(_, s)| s["build"] == ".")
        .map(|(name, _)| name)
        .collect();
    assert!(litelinks.len() >= 2, "{litelinks:?}");

    // Each instance's environment, with compose's ${...} filled in.
    let fill = |v: &str| {
        let mut v = v.to_owned();
        while let Some(start) = v.find("${") {
            let end = start + v[start..].find('}').expect("closing brace");
            let inner = &v[start + 2..end];
            let value = match inner.split_once(":-") {
                Some((_, default)) => default.to_owned(),
                None => "a-password".to_owned(),
            };
            v.replace_range(start..=end, &value);
        }
        v
    };
    for name in &litelinks {
        let service = &services[name.as_str()];
        assert_eq!(service["read_only"], true, "{name}");
        let env = service["environment"].as_object().expect("environment");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_litelink"));
        cmd.env_clear().args(["serve", "--print-config"]);
        for (k, v) in env {
            assert!(k.starts_with("LITELINK_"), "{name}: {k}");
            cmd.env(k, fill(v.as_str().expect("a string")));
        }
        let out = cmd.output().expect("litelink serve --print-config");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Every variable became a setting, none was left at its default.
        for (k, _) in env {
            let key = k["LITELINK_".len()..].to_lowercase().replace('_', "-");
            assert!(
                printed.lines().any(|l| l.starts_with(&format!("{key} = "))),
                "{name}: {k} is not a setting:\n{printed}"
            );
        }
        assert!(printed.contains("@postgres/"), "{printed}");
        assert!(printed.contains("redis://valkey:6379"), "{printed}");
    }

    // nginx: its upstreams are the litelink services on the image's port,
    // and it listens where compose publishes it; `nginx -t` takes the file
    // once the service names resolve.
    let conf = std::fs::read_to_string(format!("{DEPLOY}/compose-nginx.conf")).expect("conf");
    let upstreams: Vec<&str> = conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("server "))
        .filter(|l| l.ends_with(';'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let expected: Vec<String> = litelinks.iter().map(|n| format!("{n}:8080")).collect();
    assert_eq!(upstreams, expected);
    assert!(conf.contains("listen 8080;"));
    assert_eq!(services["nginx"]["ports"][0], "8080:8080");
    let mounted = services["nginx"]["volumes"][0].as_str().expect("volume");
    assert!(mounted.starts_with("./docs/deploy/compose-nginx.conf:"));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut local = conf.clone();
    for n in &litelinks {
        local = local.replace(&format!("{n}:8080"), "127.0.0.1:8080");
    }
    std::fs::write(dir.path().join("nginx.conf"), local).expect("write");
    let out = Command::new(nginx_binary())
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .args([
            "-g",
            &format!(
                "pid {0}/nginx.pid; error_log {0}/error.log;",
                dir.path().display()
            ),
        ])
        .output()
        .expect("nginx -t");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
