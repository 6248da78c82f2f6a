//! The experiments: what each compares, with which server settings and
//! which load.

use std::path::PathBuf;

use litelink_stress::{Keys, ReadPath, Scenario};

/// One server configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Config {
    pub name: String,
    pub args: Vec<String>,
    /// Needs a Valkey server; skipped (and said so) without one.
    pub needs_valkey: bool,
    /// Served from a fresh PostgreSQL database (`--store`) instead of a
    /// SQLite file.
    pub postgres: bool,
    /// Ratios for this configuration are taken against this one, measured in
    /// the same round with the same workload.
    pub baseline: Option<String>,
    /// Pin the server to its own CPU (the default). Unpinned, it runs on
    /// every CPU, sharing one with the load generator: the only way a
    /// 2-CPU machine has two server threads in SQLite at once.
    pub pinned: bool,
    /// Another build to run this configuration with (`--compare-exe`);
    /// `None`: the build under test.
    pub exe: Option<PathBuf>,
    /// The bare hyper server (`litelink reference-server`, given `args`),
    /// not litelink: no database, no links (its redirects ask for made-up
    /// codes), and never run with `--compare-exe`.
    pub reference: bool,
    /// Run only these of the experiment's workloads; `None`: all.
    pub workloads: Option<Vec<String>>,
    /// Serve a database loaded with `litelink import` (the `scale`
    /// experiment) instead of links created over HTTP.
    pub preload: Option<Preload>,
}

/// A database the `scale` experiment loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Preload {
    pub links: u64,
    /// Each record names its code (10 characters that look random), as an
    /// import from another shortener does; otherwise each link gets its
    /// generated code.
    pub named: bool,
}

/// One kind of load.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workload {
    pub name: String,
    pub scenario: Scenario,
    pub connections: usize,
    pub keys: Keys,
    /// Seed scenario sizes.
    pub tasks: u64,
    pub gets_per_task: u64,
    /// Ratios are taken against this workload on the same server in the
    /// same round (e.g. `/heart-beat`), instead of against a config.
    pub baseline_workload: Option<String>,
    /// Creates per second sent beside a read workload, on connections of
    /// their own; the workload's figures are then those of its reads.
    pub background_creates: Option<f64>,
    /// Reads ask `GET /link/{code}` (JSON) or `GET /{code}` (redirect).
    pub read_path: ReadPath,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    /// Open model: requests per second on a fixed schedule; `None`: as
    /// fast as the connections go.
    pub rate: Option<f64>,
    /// Stop after this many requests, with no warm-up (and at the run's duration
    /// at the latest): creates that would otherwise grow a small database
    /// many times over in the rounds of a run.
    pub requests: Option<u64>,
    /// Creates name their own codes (aliases) instead of taking generated
    /// ones.
    pub aliases: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Experiment {
    pub id: &'static str,
    pub title: &'static str,
    pub question: &'static str,
    pub configs: Vec<Config>,
    pub workloads: Vec<Workload>,
    /// Links each server gets before the reads; `None`: [`LINKS`].
    pub links: Option<u64>,
    /// Every ratio of the experiment is taken against this one (config,
    /// workload), in the same round, instead of a baseline of its own.
    pub reference: Option<(String, String)>,
}

impl Config {
    /// Whether this configuration runs workload `w`.
    pub fn runs(&self, w: &Workload) -> bool {
        self.workloads
            .as_ref()
            .is_none_or(|only| only.contains(&w.name))
    }
}

/// `c`, run with the one workload named `workload`.
fn only(mut c: Config, workload: &str) -> Config {
    c.workloads = Some(vec![workload.to_owned()]);
    c
}

fn config(name: &str, args: &[&str], baseline: Option<&str>) -> Config {
    Config {
        name: name.to_owned(),
        args: args.iter().map(|s| s.to_string()).collect(),
        needs_valkey: args.contains(&"valkey") || args.contains(&"tiered"),
        postgres: false,
        baseline: baseline.map(str::to_owned),
        pinned: true,
        exe: None,
        reference: false,
        workloads: None,
        preload: None,
    }
}

/// `config` that runs only `workloads`.
fn config_running(name: &str, args: &[&str], workloads: &[&Workload]) -> Config {
    let mut c = config(name, args, None);
    c.workloads = Some(workloads.iter().map(|w| w.name.clone()).collect());
    c
}

fn workload(name: &str, scenario: Scenario, connections: usize) -> Workload {
    Workload {
        name: name.to_owned(),
        scenario,
        connections,
        keys: Keys::Uniform,
        tasks: 100,
        gets_per_task: 80,
        baseline_workload: None,
        background_creates: None,
        read_path: ReadPath::Json,
        headers: Vec::new(),
        rate: None,
        requests: None,
        aliases: false,
    }
}

/// What a browser sends with a click on a short link: the redirects of the
/// `visits` experiment carry these, so that counting classifies a real
/// user agent and parses a real referrer on every request.
pub fn browser_headers() -> Vec<(String, String)> {
    vec![
        (
            "user-agent".into(),
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/126.0.0.0 Safari/537.36"
                .into(),
        ),
        (
            "referer".into(),
            "https://news.example.com/2026/12/01/a-story?utm_source=feed".into(),
        ),
    ]
}

/// Creates per second beside the reads of the `reads-while-creating`
/// experiment: a busy service's write load that still leaves most of the
/// server's one CPU to the reads.
pub const BACKGROUND_CREATES: f64 = 2000.0;

pub const LINKS: u64 = 1000;

/// Links of the `visits-flush` experiment, and the redirects per second
/// spread over them: at 4 a second per link, a one-second flush holds all
/// but about 2% of them (e^-4).
pub const FLUSH_LINKS: u64 = 10_000;
pub const FLUSH_REDIRECTS: f64 = 40_000.0;

/// Connection mode x MEMSTATUS, pinned and on all CPUs; every `off` is
/// compared with the `on` of the same mode and placement.
fn memstatus_configs() -> Vec<Config> {
    let mut out = Vec::new();
    for placement in ["", ", all CPUs"] {
        for (mode, mode_args) in [
            ("per-request", &["--sqlite-connections", "per-request"][..]),
            ("pooled", &[][..]),
        ] {
            for status in ["on", "off"] {
                // SQLite's own lookups: the link slots would answer them.
                let mut args = vec!["--cache", "none", "--sqlite-slots", "off"];
                args.extend_from_slice(mode_args);
                args.extend(["--sqlite-memstatus", status]);
                let baseline = format!("{mode}, memstatus on{placement}");
                let mut c = config(
                    &format!("{mode}, memstatus {status}{placement}"),
                    &args,
                    (status == "off").then_some(baseline.as_str()),
                );
                c.pinned = placement.is_empty();
                out.push(c);
            }
        }
    }
    out
}

/// Every experiment's id, in the order they run.
pub fn ids() -> Vec<&'static str> {
    all(true).iter().map(|e| e.id).collect()
}

/// Suffix of the configurations run with `--compare-exe`.
pub const BEFORE: &str = " [compared build]";

/// Each configuration twice: as given, then with `exe`, named with
/// [`BEFORE`] and compared with the other such configurations.
pub fn with_compared_build(configs: Vec<Config>, exe: &std::path::Path) -> Vec<Config> {
    let mut out = Vec::with_capacity(configs.len() * 2);
    for c in configs {
        // The reference server and switches older builds lack are not
        // compared.
        if c.reference || c.args.iter().any(|a| a == "--hot-path") {
            out.push(c);
            continue;
        }
        let mut other = c.clone();
        other.name.push_str(BEFORE);
        other.baseline = c.baseline.as_ref().map(|b| format!("{b}{BEFORE}"));
        other.exe = Some(exe.to_path_buf());
        out.push(c);
        out.push(other);
    }
    out
}

/// What the bare server answers, and each litelink read it is measured
/// against, with everything on (the memory cache, visit counting,
/// metrics); the router alone shows what the hot path saves.
fn ceiling() -> Experiment {
    let fixed = workload("fixed answer", Scenario::HeartBeat, 50);
    let heart = workload("heart-beat", Scenario::HeartBeat, 50);
    let mut redirect = workload("redirect, cached", Scenario::Read, 50);
    redirect.read_path = ReadPath::Redirect;
    let link = workload("link, cached", Scenario::Read, 50);
    let uncached = workload("link, uncached", Scenario::Read, 50);
    let mut bare = config_running("bare hyper", &[], &[&fixed]);
    bare.reference = true;
    // The floor under a redirect: the head of one, and nothing else.
    let mut floor = config_running("bare hyper, redirect head", &["--redirect"], &[&redirect]);
    floor.reference = true;
    let hot = [&heart, &redirect, &link];
    Experiment {
        id: "ceiling",
        title: "litelink against a bare hyper server",
        question: "How close do litelink's hot routes come to a bare hyper 1.x HTTP/1.1 server \
                   on a current-thread runtime answering a fixed `{\"OK\":true}` (`litelink \
                   reference-server`), on the same core? litelink runs as deployed: memory \
                   cache, visit counting and metrics on. The uncached read is a pooled SQLite \
                   lookup (`--cache none`). `--hot-path off` is the router alone. The bare \
                   server with `--redirect` answers with a litelink redirect's head \
                   (`Location`, `Cache-Control`, `nosniff`, a request id) and does nothing \
                   else: the floor under a redirect. Every ratio, in throughput and in the \
                   server's CPU time per request, is to the bare server in the same round.",
        configs: vec![
            bare,
            floor,
            config_running("litelink", &[], &hot),
            config_running(
                "litelink, no cache",
                &["--cache", "none", "--sqlite-slots", "off"],
                &[&uncached],
            ),
            config_running("litelink, router only", &["--hot-path", "off"], &hot),
        ],
        workloads: vec![fixed.clone(), heart.clone(), redirect, link, uncached],
        links: None,
        reference: Some(("bare hyper".into(), fixed.name.clone())),
    }
}

pub fn all(quick: bool) -> Vec<Experiment> {
    let read50 = workload("read", Scenario::Read, 50);
    let heart = workload("heart-beat", Scenario::HeartBeat, 50);
    let mut zipf = workload("read-zipf", Scenario::Read, 50);
    zipf.keys = Keys::Zipf;
    zipf.baseline_workload = Some("heart-beat".into());
    let mut seed = workload("seed", Scenario::Seed, 30);
    seed.baseline_workload = Some("heart-beat".into());
    if quick {
        seed.tasks = 10;
        seed.gets_per_task = 20;
    }
    let levels: Vec<usize> = (0..=8).map(|i| 1usize << i).collect();
    let mut read_vs_heart = read50.clone();
    read_vs_heart.baseline_workload = Some("heart-beat".into());
    let mut redirect_vs_heart = workload("redirect", Scenario::Read, 50);
    redirect_vs_heart.read_path = ReadPath::Redirect;
    redirect_vs_heart.baseline_workload = Some("heart-beat".into());
    let mut read_while_creating = workload(
        &format!("read + {BACKGROUND_CREATES:.0} creates/s"),
        Scenario::Read,
        50,
    );
    read_while_creating.background_creates = Some(BACKGROUND_CREATES);
    read_while_creating.baseline_workload = Some("read".into());
    let mut plain_redirect = workload("redirect", Scenario::Read, 50);
    plain_redirect.read_path = ReadPath::Redirect;
    let mut counted_redirect = workload("redirect from a browser", Scenario::Read, 50);
    counted_redirect.read_path = ReadPath::Redirect;
    counted_redirect.headers = browser_headers();
    // Behind a proxy, as most deployments are: the visitor's address comes
    // forwarded (Deutsche Telekom's resolver: a country to find).
    let mut proxied_redirect = counted_redirect.clone();
    proxied_redirect.name = "redirect from a browser, through a proxy".into();
    proxied_redirect
        .headers
        .push(("x-forwarded-for".into(), "194.25.0.60".into()));
    vec![
        Experiment {
            id: "reads",
            title: "Point reads against /heart-beat",
            question: "How close do GET /link/{code} and the redirect GET /{code} come to the \
                       trivial endpoint, with SQLite's pooled connections, with the link slots \
                       (the default without a cache), with the memory cache in front of them, \
                       and with a connection per request (MEMSTATUS on and off)? 50 \
                       connections; each ratio is to /heart-beat on the same server in the same \
                       round.",
            configs: vec![
                config(
                    "pooled",
                    &["--cache", "none", "--sqlite-slots", "off"],
                    None,
                ),
                config("link slots", &["--cache", "none"], None),
                config("memory cache", &["--cache", "memory"], None),
                config(
                    "per-request, memstatus off",
                    &[
                        "--cache",
                        "none",
                        "--sqlite-slots",
                        "off",
                        "--sqlite-connections",
                        "per-request",
                        "--sqlite-memstatus",
                        "off",
                    ],
                    None,
                ),
                config(
                    "per-request, memstatus on",
                    &[
                        "--cache",
                        "none",
                        "--sqlite-slots",
                        "off",
                        "--sqlite-connections",
                        "per-request",
                        "--sqlite-memstatus",
                        "on",
                    ],
                    None,
                ),
            ],
            workloads: vec![heart.clone(), read_vs_heart, redirect_vs_heart],
            links: None,
            reference: None,
        },
        Experiment {
            id: "memstatus",
            title: "MEMSTATUS on and off (first article)",
            question: "How much does SQLite's global allocator mutex cost, with a connection \
                       per request and with pooled connections? 50 connections on a single-row \
                       endpoint (GET /link/{code}, no cache), as in the article. Pinned to one \
                       CPU, the server has one thread in SQLite at a time, so the mutex is never \
                       contended; the `all CPUs` configurations let the server use every CPU \
                       (sharing one with the load generator) so that two threads can meet on it.",
            configs: memstatus_configs(),
            workloads: vec![read50.clone()],
            links: None,
            reference: None,
        },
        Experiment {
            id: "caches",
            title: "Caches against SQLite's own (second article)",
            question: "Does an external Valkey cache beat SQLite's page cache? Each cache mode, \
                       on the article's seed scenario and on a zipf read mix, as a ratio to \
                       /heart-beat on the same server in the same round.",
            configs: vec![
                // SQLite's own caching, as in the article: no link slots.
                config("none", &["--cache", "none", "--sqlite-slots", "off"], None),
                config(
                    "none, page cache off",
                    &[
                        "--cache",
                        "none",
                        "--sqlite-slots",
                        "off",
                        "--sqlite-page-cache",
                        "off",
                    ],
                    None,
                ),
                config("memory", &["--cache", "memory"], None),
                config("valkey", &["--cache", "valkey"], None),
                config("tiered", &["--cache", "tiered"], None),
            ],
            workloads: vec![heart, zipf, seed],
            links: None,
            reference: None,
        },
        Experiment {
            id: "writes",
            title: "Durable creates: durability levels and group commit",
            question: "Creates per second with 64 concurrent clients at each durability level \
                       with group commit, and at full durability with one commit per create; \
                       ratios to `off`.",
            configs: vec![
                config(
                    "full, group commit",
                    &["--durability", "full"],
                    Some("off, group commit"),
                ),
                config(
                    "normal, group commit",
                    &["--durability", "normal"],
                    Some("off, group commit"),
                ),
                config("off, group commit", &["--durability", "off"], None),
                config(
                    "full, one commit per create",
                    &["--durability", "full", "--group-commit", "off"],
                    Some("off, group commit"),
                ),
            ],
            workloads: vec![workload("create", Scenario::Create, 64)],
            links: None,
            reference: None,
        },
        Experiment {
            id: "reads-while-creating",
            title: "Reads while creates run",
            question: "Does GET /link/{code} (pooled, no cache) keep its speed while creates \
                       are committed and synced? 50 read connections alone, then with \
                       2,000 creates/s on 16 more connections, at full durability and at \
                       `off`; ratio to the reads alone on the same server in the same round. \
                       The creates take their share of the server's CPU; what they must not \
                       do is hold reads up behind the writer's commits and syncs, which would \
                       show as a lower ratio at `full` than at `off` and in the reads' p99.",
            configs: vec![
                config("full", &["--cache", "none"], None),
                config("off", &["--cache", "none", "--durability", "off"], None),
            ],
            workloads: vec![read50.clone(), read_while_creating],
            links: None,
            reference: None,
        },
        Experiment {
            id: "visits",
            title: "Counting visits on the redirect path",
            question: "What does counting every redirect cost? GET /{code} with a browser's \
                       User-Agent and Referer, 50 connections, default settings (memory cache), \
                       with --visits on against --visits off on the same core in the same \
                       round: the throughput ratio, and the ratio of the server's CPU time per \
                       redirect (from /proc), which is steadier on a noisy VM; with the memory cache (the default) \
                       and without a cache (every redirect reads SQLite). Counting classes the \
                       User-Agent (device, system, browser) and finds the visitor's country; \
                       the proxied configurations trust loopback as a proxy and the load \
                       forwards a German address, so that the country is found in the table \
                       built into the binary. With link.visited to NATS: an event stream \
                       on the machine's NATS (127.0.0.1:4222), which wants every visit, \
                       against visits on alone: what a link.visited subscriber costs.",
            configs: vec![
                only(
                    config("visits on", &["--visits", "on"], Some("visits off")),
                    &counted_redirect.name,
                ),
                only(
                    config("visits off", &["--visits", "off"], None),
                    &counted_redirect.name,
                ),
                only(
                    config(
                        "visits on, link.visited to NATS",
                        &[
                            "--visits",
                            "on",
                            "--events-nats-url",
                            "nats://127.0.0.1:4222",
                        ],
                        Some("visits on"),
                    ),
                    &counted_redirect.name,
                ),
                only(
                    config(
                        "proxied, visits on",
                        &["--visits", "on", "--trust-proxy", "127.0.0.1"],
                        Some("proxied, visits off"),
                    ),
                    &proxied_redirect.name,
                ),
                only(
                    config(
                        "proxied, visits off",
                        &["--visits", "off", "--trust-proxy", "127.0.0.1"],
                        None,
                    ),
                    &proxied_redirect.name,
                ),
                only(
                    config(
                        "no cache, visits on",
                        &["--cache", "none", "--visits", "on"],
                        Some("no cache, visits off"),
                    ),
                    &counted_redirect.name,
                ),
                only(
                    config(
                        "no cache, visits off",
                        &["--cache", "none", "--visits", "off"],
                        None,
                    ),
                    &counted_redirect.name,
                ),
            ],
            workloads: vec![counted_redirect, proxied_redirect],
            links: None,
            reference: None,
        },
        Experiment {
            id: "metrics",
            title: "Recording Prometheus metrics",
            question: "What does recording metrics cost? GET /{code} (a redirect) and \
                       GET /link/{code}, 50 connections, default settings (memory cache), \
                       with --metrics on against --metrics off on the same core in the same \
                       round: the throughput ratio and the ratio of the server's CPU time per \
                       request (from /proc).",
            configs: vec![
                config("metrics on", &["--metrics", "on"], Some("metrics off")),
                config("metrics off", &["--metrics", "off"], None),
            ],
            workloads: vec![plain_redirect, read50.clone()],
            links: None,
            reference: None,
        },
        Experiment {
            id: "visits-flush",
            title: "Creates while visit counts are flushed",
            question: "Do flushes of visit counts hold creates up? 2,000 creates/s on 16 \
                       connections, timed from their scheduled send, beside 40,000 redirects/s \
                       spread over 10,000 links, so that every one-second flush writes about \
                       10,000 links; --visits on against --visits off. The figure is the \
                       creates' p99.",
            configs: vec![
                config("visits on", &["--visits", "on"], None),
                config("visits off", &["--visits", "off"], None),
            ],
            workloads: vec![{
                let mut w = workload(
                    &format!("{BACKGROUND_CREATES:.0} creates/s + redirects of 10k links"),
                    Scenario::Read,
                    50,
                );
                w.read_path = ReadPath::Redirect;
                w.headers = browser_headers();
                w.background_creates = Some(BACKGROUND_CREATES);
                w.rate = Some(if quick { 2000.0 } else { FLUSH_REDIRECTS });
                w
            }],
            links: Some(FLUSH_LINKS),
            reference: None,
        },
        Experiment {
            id: "concurrency",
            title: "Throughput and p99 against concurrency",
            question: "GET /link/{code} (pooled connections, no cache) with 1 to 256 connections.",
            configs: vec![config(
                "pooled, no cache",
                &["--cache", "none", "--sqlite-slots", "off"],
                None,
            )],
            workloads: levels
                .iter()
                .map(|&c| {
                    let mut w = workload(&format!("{c} connections"), Scenario::Read, c);
                    w.keys = Keys::Uniform;
                    w
                })
                .collect(),
            links: None,
            reference: None,
        },
        ceiling(),
        scale(quick),
        postgres(quick),
    ]
}

/// The PostgreSQL store: reads against `/heart-beat` on the same server,
/// and creates with group commit against one transaction per create.
fn postgres(quick: bool) -> Experiment {
    let heart = workload("heart-beat", Scenario::HeartBeat, 50);
    let mut read = workload("read", Scenario::Read, 50);
    read.baseline_workload = Some("heart-beat".into());
    let mut creates = workload("creates, 64 connections", Scenario::Create, 64);
    creates.requests = Some(if quick { 1_000 } else { 20_000 });
    let pg = |mut c: Config| {
        c.postgres = true;
        c
    };
    let mut grouped = pg(config_running(
        "group commit",
        &["--cache", "none"],
        &[&creates],
    ));
    grouped.baseline = Some("one transaction per create".into());
    Experiment {
        id: "postgres",
        title: "The PostgreSQL store",
        question: "How close do reads on the PostgreSQL store come to /heart-beat on the same \
                   server, through the memory cache and without a cache, and what does group \
                   commit buy over one transaction per create at 64 connections? litelink \
                   pinned as always; the PostgreSQL server is the machine's own service, on \
                   every CPU.",
        configs: vec![
            pg(config_running("memory cache", &[], &[&heart, &read])),
            pg(config_running(
                "no cache",
                &["--cache", "none"],
                &[&heart, &read],
            )),
            pg(config_running(
                "one transaction per create",
                &["--cache", "none", "--write-batch-max", "1"],
                &[&creates],
            )),
            grouped,
        ],
        workloads: vec![heart, read, creates],
        links: None,
        reference: None,
    }
}

/// Link counts of the `scale` experiment; the first is the baseline.
fn scale_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![10_000, 100_000]
    } else {
        vec![10_000, 1_000_000, 10_000_000]
    }
}

fn count_label(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// The same reads and creates on databases of growing size, loaded with
/// `litelink import`; each ratio is to the smallest size, same round.
fn scale(quick: bool) -> Experiment {
    let uncached = workload("read, uncached", Scenario::Read, 50);
    let mut zipf = workload("read-zipf, memory cache", Scenario::Read, 50);
    zipf.keys = Keys::Zipf;
    let mut creates = workload("durable creates", Scenario::Create, 64);
    // Bounded, so that the smallest database stays near its size over the
    // rounds (8 rounds add 0.24M links at most to each).
    creates.requests = Some(if quick { 2_000 } else { 30_000 });
    let mut aliases = creates.clone();
    aliases.name = "durable creates of aliases".into();
    aliases.aliases = true;
    let sizes = scale_sizes(quick);
    let base = count_label(sizes[0]);
    let mut configs = Vec::new();
    for named in [false, true] {
        let kind = if named { " named" } else { "" };
        for &n in &sizes {
            let label = count_label(n);
            let is_base = label == base;
            let preload = Some(Preload { links: n, named });
            let config = |name: &str, args: &[&str], runs: &[&Workload]| {
                let mut c = config_running(&format!("{label}{kind} links, {name}"), args, runs);
                c.baseline = (!is_base).then(|| format!("{base}{kind} links, {name}"));
                c.preload = preload;
                c
            };
            let writes = if named { &aliases } else { &creates };
            configs.push(config(
                "no cache",
                &["--cache", "none"],
                &[&uncached, writes],
            ));
            // What the link slots (and the name index) buy: the same reads
            // on SQLite's B-tree.
            configs.push(config(
                "no cache, no slots",
                &["--cache", "none", "--sqlite-slots", "off"],
                &[&uncached],
            ));
            if !named {
                configs.push(config("memory cache", &[], &[&zipf]));
            }
        }
    }
    Experiment {
        id: "scale",
        title: "Ten thousand links against ten million",
        question: "Does a request cost more as the database grows? Databases of each size \
                   are loaded with `litelink import`: records without codes, so that each \
                   link gets its generated code, as a create would, and records that name \
                   their codes (10 characters that look random), as an import from another \
                   shortener does. Each is served with `--cache none` (from the link slots \
                   and the name index) and with `--sqlite-slots off` (SQLite's table): \
                   uniform point reads over codes sampled from the whole loaded set, and \
                   durable creates (64 connections, a bounded count, no warm-up) of \
                   generated codes, or of aliases on the named databases; the generated \
                   databases also serve zipf reads through the memory cache (default \
                   capacity). Each ratio is to the smallest database of its kind in the \
                   same round.",
        configs,
        workloads: vec![uncached, zipf, creates, aliases],
        links: None,
        reference: None,
    }
}
