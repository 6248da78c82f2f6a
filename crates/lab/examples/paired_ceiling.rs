//! The `ceiling` experiment's cached redirect, paired more tightly: every
//! server is up at once and the load moves between them in short runs, so
//! that a slow spell of the machine falls on every server alike. Used to
//! tell changes of about 1% apart on a VM whose speed drifts from second
//! to second (docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p litelink-lab --example paired_ceiling -- \
//!     [--rounds 20] [--duration 2] [--rate N] NAME=EXE [NAME=EXE...]
//! ```
//!
//! The bare reference is `reference-server` of the first EXE, loaded with
//! `GET /heart-beat`; with `--floor`, also `reference-server --redirect`
//! (the head of a litelink redirect, nothing else), loaded with the same
//! redirects as the EXEs; every EXE runs `litelink serve` as deployed (memory
//! cache, visits, metrics) and is loaded with cached `GET /{code}` over
//! 1,000 links. Servers run on CPU 0, the load on CPU 1, 50 connections.
//! Per round and server: CPU time per request (all threads, from
//! /proc/PID/task/*/schedstat, in ns), and its ratio to the bare server's
//! in that round; printed as medians with min–max (and, for the ratios,
//! a 95% confidence interval of the median). With `--rate`, every
//! server gets that many requests per second on a fixed schedule (the
//! stress tool's open model) instead of as many as it can answer, so that
//! each does the same work per second and batches alike.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, bail};
use litelink_lab::Spread;
use litelink_lab::process::{ServerProcess, pin_current_thread};
use litelink_stress::{Keys, ReadPath, Scenario, StressConfig};

/// Nanoseconds every thread of `pid` has run.
fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let s = std::fs::read_to_string(task?.path().join("schedstat")).unwrap_or_default();
        total += s
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

/// User and system clock ticks of `pid` (all threads), from /proc/PID/stat.
fn user_sys(pid: u32) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("stat")?.1;
    // Fields 14 and 15 of stat(5), the 12th and 13th after the command's ')'.
    let mut f = rest.split_whitespace().skip(11);
    let mut next = || f.next().context("a short /proc/PID/stat");
    Ok((next()?.parse()?, next()?.parse()?))
}

/// A distribution-free 95% confidence interval of the median: the order
/// statistics n/2 ± 0.98·√n (the binomial's normal approximation).
fn median_interval(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let half = 0.98 * n.sqrt();
    let lo = ((n / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n / 2.0 + half).ceil() as usize).min(v.len() - 1);
    (v[lo], v[hi])
}

fn median_min_max(v: Vec<f64>) -> (f64, f64, f64) {
    let s = Spread::of(&v).unwrap_or(Spread {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    });
    (s.median, s.min, s.max)
}

fn main() -> anyhow::Result<()> {
    let mut rounds = 20usize;
    let mut duration = 2.0f64;
    let mut rate: Option<f64> = None;
    let mut floor = false;
    let mut exes: Vec<(String, PathBuf)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().context("--rounds N")?.parse()?,
            "--duration" => duration = args.next().context("--duration S")?.parse()?,
            "--rate" => rate = Some(args.next().context("--rate N")?.parse()?),
            "--floor" => floor = true,
            _ => match a.split_once('=') {
                Some((name, exe)) => exes.push((name.into(), exe.into())),
                None => bail!("expected NAME=EXE, got {a}"),
            },
        }
    }
    if exes.is_empty() || rounds == 0 || !(0.2..=60.0).contains(&duration) {
        bail!(
            "usage: paired_ceiling [--rounds N] [--duration S] [--rate N] [--floor] NAME=EXE [NAME=EXE...]"
        );
    }
    let work = tempdir()?;
    let mut servers = vec![(
        "bare".to_string(),
        ServerProcess::start_reference(&exes[0].1, &[], Some(0))?,
        Vec::new(),
    )];
    if floor {
        // Codes of the same shape as litelink's: the requests are alike.
        let codes = (0..1000).map(|i| format!("f{i:09}")).collect();
        servers.push((
            "floor".to_string(),
            ServerProcess::start_reference(&exes[0].1, &["--redirect".into()], Some(0))?,
            codes,
        ));
    }
    pin_current_thread(1).context("pinning the load generator")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for (i, (name, exe)) in exes.iter().enumerate() {
        let db = work.join(format!("{i}.db"));
        let server = ServerProcess::start(exe, &db, &[], Some(0))?;
        let codes = runtime.block_on(litelink_stress::create_links(&server.url(), 1000, 32))?;
        servers.push((name.clone(), server, codes));
    }
    let stop = Arc::new(AtomicBool::new(false));
    // [server][round] = CPU µs per request.
    let mut cpu = vec![Vec::new(); servers.len()];
    let mut rps = vec![Vec::new(); servers.len()];
    let mut user_share = vec![Vec::new(); servers.len()];
    for round in 0..rounds {
        // The order turns every round, so that no server always follows
        // the same one.
        let n = servers.len();
        for k in 0..n {
            let s = (k + round) % n;
            let (_, server, codes) = &servers[s];
            let redirect = !codes.is_empty();
            let sc = StressConfig {
                url: server.url(),
                scenario: if redirect {
                    Scenario::Read
                } else {
                    Scenario::HeartBeat
                },
                workers: 50,
                tasks: 0,
                gets_per_task: 0,
                links: codes.len() as u64,
                codes: codes.clone(),
                keys: Keys::Uniform,
                zipf_s: 1.0,
                read_path: ReadPath::Redirect,
                rate,
                background_creates: None,
                background_workers: 1,
                duration: Duration::from_secs_f64(duration),
                requests: None,
                warmup: Duration::from_millis(300),
                timeout: Duration::from_secs(10),
                progress: false,
                headers: Vec::new(),
                aliases: false,
                link_fields: None,
            };
            let pid = server.pid();
            let from = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                Ok::<_, anyhow::Error>((cpu_ns(pid)?, user_sys(pid)?))
            });
            let r = runtime.block_on(litelink_stress::run(sc, Arc::clone(&stop)))?;
            let (to, us_to) = (cpu_ns(pid)?, user_sys(pid)?);
            let (from, us_from) = from.join().map_err(|_| anyhow::anyhow!("timer thread"))??;
            // Saturating: a thread that exits takes its time out of the sum.
            let user = us_to.0.saturating_sub(us_from.0) as f64;
            let sys = us_to.1.saturating_sub(us_from.1) as f64;
            user_share[s].push(user / (user + sys).max(1.0));
            if r.failed > 0 || r.total_requests == 0 {
                bail!(
                    "{} failed {} of {}",
                    servers[s].0,
                    r.failed,
                    r.total_requests
                );
            }
            cpu[s].push(to.saturating_sub(from) as f64 / 1e3 / r.total_requests as f64);
            rps[s].push(r.requests_per_second);
        }
        eprint!("round {}/{rounds}\r", round + 1);
    }
    eprintln!();
    println!(
        "server: CPU µs/req median (min–max) | ratio to bare median (min–max) | req/s median \
         | user time share"
    );
    for (s, (name, _, _)) in servers.iter().enumerate() {
        let (m, lo, hi) = median_min_max(cpu[s].clone());
        let ratios: Vec<f64> = cpu[s].iter().zip(&cpu[0]).map(|(a, b)| a / b).collect();
        let (clo, chi) = median_interval(ratios.clone());
        let (rm, rlo, rhi) = median_min_max(ratios);
        let (r, _, _) = median_min_max(rps[s].clone());
        let (u, _, _) = median_min_max(user_share[s].clone());
        println!(
            "{name}: {m:.2} ({lo:.2}–{hi:.2}) | {rm:.3} ({rlo:.3}–{rhi:.3}; median's 95% interval \
             {clo:.3}–{chi:.3}) | {r:.0} | user share {u:.3}"
        );
    }
    // Ratios between the litelink builds, round by round.
    for a in 1..servers.len() {
        for b in a + 1..servers.len() {
            let ratios = cpu[b].iter().zip(&cpu[a]).map(|(x, y)| x / y).collect();
            let (rm, rlo, rhi) = median_min_max(ratios);
            println!(
                "{} / {}: {rm:.3} ({rlo:.3}–{rhi:.3})",
                servers[b].0, servers[a].0
            );
        }
    }
    drop(servers);
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("litelink-paired-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
