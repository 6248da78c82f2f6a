//! A private Valkey server for one test: the bench lab's `ValkeyProcess`,
//! with the binary that scripts/test provides and a client connection.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use litelink_bench::process::{ValkeyProcess, find_valkey};

pub struct ValkeyServer(ValkeyProcess);

fn binary() -> PathBuf {
    let explicit = std::env::var_os("LITELINK_TEST_VALKEY_SERVER")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from);
    find_valkey(explicit.as_deref()).unwrap_or_else(|| {
        panic!(
            "no valkey-server or redis-server found: run the tests through scripts/test, \
             or set LITELINK_TEST_VALKEY_SERVER to a valkey-server binary"
        )
    })
}

impl ValkeyServer {
    pub fn start() -> Self {
        Self(ValkeyProcess::start(&binary(), None).expect("start valkey-server"))
    }

    /// A server that keeps its data in `dir` when it is killed and restarted.
    pub fn start_persistent(dir: &std::path::Path) -> Self {
        Self(ValkeyProcess::start_persistent(&binary(), dir).expect("start valkey-server"))
    }

    /// Starts (again) on the same port, with an empty data set.
    pub fn restart(&mut self) {
        self.0.restart().expect("restart valkey-server");
    }

    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("valkey url")
            .get_connection()
            .expect("valkey connection")
    }
}

impl Deref for ValkeyServer {
    type Target = ValkeyProcess;
    fn deref(&self) -> &ValkeyProcess {
        &self.0
    }
}

impl DerefMut for ValkeyServer {
    fn deref_mut(&mut self) -> &mut ValkeyProcess {
        &mut self.0
    }
}
