//! A private Valkey server on a free port, for one test. The binary comes
//! from `LITELINK_TEST_VALKEY_SERVER` (set by scripts/test) or PATH.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ValkeyServer {
    binary: String,
    pub port: u16,
    child: Option<Child>,
}

fn binary() -> String {
    if let Ok(b) = std::env::var("LITELINK_TEST_VALKEY_SERVER")
        && !b.is_empty()
    {
        return b;
    }
    for name in ["valkey-server", "redis-server"] {
        if Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return name.to_owned();
        }
    }
    panic!(
        "no valkey-server or redis-server found: run the tests through scripts/test, \
         or set LITELINK_TEST_VALKEY_SERVER to a valkey-server binary"
    );
}

impl ValkeyServer {
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = Self {
            binary: binary(),
            port,
            child: None,
        };
        s.restart();
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port, with an empty data set.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start valkey-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(client) = redis::Client::open(self.url())
                && let Ok(mut c) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("valkey-server on port {} did not come up", self.port);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for ValkeyServer {
    fn drop(&mut self) {
        self.kill();
    }
}
