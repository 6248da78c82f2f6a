//! A private Valkey server for one test: the bench lab's `ValkeyProcess`,
//! with the binary that scripts/test provides and a client connection.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use litelink_lab::process::{ValkeyProcess, find_valkey};

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

    /// A server that also takes TLS connections, on the port it returns,
    /// with the test CA's certificate for `localhost` (scripts/provision-tls);
    /// `client_certificates`: it asks clients for one of that CA's. Its
    /// plain port stays open for the test to look inside.
    pub fn start_tls(client_certificates: bool) -> Option<(Self, u16)> {
        let (binary, port, extra) = tls_options(client_certificates)?;
        let server =
            ValkeyProcess::start_with(&binary, extra).expect("start valkey-server with TLS");
        Some((Self(server), port))
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

/// The binary that speaks TLS, a free TLS port, and the options that
/// open it with the test CA's files; `None` (said) where they are missing.
fn tls_options(client_certificates: bool) -> Option<(PathBuf, u16, Vec<String>)> {
    let (Some(binary), Some(dir)) = (
        std::env::var_os("LITELINK_TEST_VALKEY_TLS_SERVER").filter(|b| !b.is_empty()),
        std::env::var_os("LITELINK_TEST_TLS_DIR").filter(|d| !d.is_empty()),
    ) else {
        crate::helpers::missing(
            "a valkey-server built with TLS and the test CA (LITELINK_TEST_VALKEY_TLS_SERVER, \
             LITELINK_TEST_TLS_DIR; scripts/provision-tls)",
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let file = |name: &str| dir.join(name).display().to_string();
    let extra = vec![
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        file("server.crt"),
        "--tls-key-file".into(),
        file("server.key"),
        "--tls-ca-cert-file".into(),
        file("ca.crt"),
        "--tls-auth-clients".into(),
        if client_certificates { "yes" } else { "no" }.into(),
    ];
    Some((PathBuf::from(binary), port, extra))
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

/// A Valkey Cluster of three primaries, each a private server with its
/// data and cluster configuration in a directory of its own; slots are
/// assigned with CLUSTER ADDSLOTSRANGE and the nodes joined with CLUSTER
/// MEET, as an operator without the cluster CLI would.
pub struct ValkeyCluster {
    pub nodes: Vec<ValkeyServer>,
    /// Each node's TLS port, for a cluster over TLS.
    pub tls_ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl ValkeyCluster {
    pub fn start() -> Self {
        Self::start_nodes(|dir| {
            ValkeyProcess::start_cluster_node(&binary(), dir).map(|node| (node, None))
        })
    }

    /// A cluster whose nodes speak TLS to clients and to each other
    /// (`tls-cluster`), and announce themselves as `localhost`, the name
    /// of the test CA's certificate.
    pub fn start_tls() -> Option<Self> {
        tls_options(false)?;
        Some(Self::start_nodes(|dir| {
            let (binary, port, mut extra) = tls_options(false).expect("tls options");
            extra.extend(
                [
                    "--tls-cluster",
                    "yes",
                    "--cluster-announce-hostname",
                    "localhost",
                    "--cluster-preferred-endpoint-type",
                    "hostname",
                ]
                .map(str::to_owned),
            );
            ValkeyProcess::start_cluster_node_with(&binary, dir, extra)
                .map(|node| (node, Some(port)))
        }))
    }

    fn start_nodes(
        start: impl Fn(&std::path::Path) -> anyhow::Result<(ValkeyProcess, Option<u16>)>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (nodes, tls_ports): (Vec<ValkeyServer>, Vec<Option<u16>>) = (0..3)
            .map(|i| {
                let node_dir = dir.path().join(format!("node{i}"));
                std::fs::create_dir_all(&node_dir).expect("node dir");
                let (node, tls) = start(&node_dir).expect("start a cluster node");
                (ValkeyServer(node), tls)
            })
            .unzip();
        let tls_ports: Vec<u16> = tls_ports.into_iter().flatten().collect();
        let slots = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (node, (from, to)) in nodes.iter().zip(slots) {
            let mut c = node.connection();
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(from)
                .arg(to)
                .query::<()>(&mut c)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = nodes[0].connection();
        for (i, node) in nodes[1..].iter().enumerate() {
            // Each node's bus is on a port of its own, not port + 10000.
            let (_, bus): (String, u16) = redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-port")
                .query(&mut node.connection())
                .expect("CONFIG GET cluster-port");
            // Over TLS, a node is known by its TLS port.
            let port = tls_ports.get(i + 1).copied().unwrap_or(node.port);
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(port)
                .arg(bus)
                .query::<()>(&mut first)
                .expect("CLUSTER MEET");
        }
        let cluster = Self {
            nodes,
            tls_ports,
            _dir: dir,
        };
        cluster.wait_ok();
        cluster
    }

    /// Waits until every node that runs says the cluster is up.
    pub fn wait_ok(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().all(|n| {
                redis::Client::open(n.url())
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                    .is_ok_and(|info| {
                        info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                    })
            });
            if ok {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster never came up"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Every node's URL, comma-separated: a `--valkey-url` for a cluster.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Keys under `prefix` on each node.
    pub fn keys_per_node(&self, prefix: &str) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| {
                redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query::<Vec<String>>(&mut n.connection())
                    .expect("KEYS")
                    .len()
            })
            .collect()
    }
}
