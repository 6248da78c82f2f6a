//! report.md: the machine, the settings, one table per experiment, charts.

use std::fmt::Write;

use super::charts::Chart;
use super::{Machine, Results, Spread, Summary};

fn first_line_with(text: &str, key: &str) -> Option<String> {
    text.lines().find(|l| l.starts_with(key)).and_then(|l| {
        l.split_once([':', '='])
            .map(|(_, v)| v.trim().trim_matches('"').to_owned())
    })
}

pub fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let memory = first_line_with(&read("/proc/meminfo"), "MemTotal")
        .and_then(|v| v.trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    Machine {
        cpu_model: first_line_with(&read("/proc/cpuinfo"), "model name")
            .unwrap_or_else(|| "unknown".into()),
        cpus: super::process::cpus(),
        memory,
        os: first_line_with(&read("/etc/os-release"), "PRETTY_NAME")
            .unwrap_or_else(|| std::env::consts::OS.into()),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
    }
}

fn spread(s: &Spread, digits: usize) -> String {
    format!("{:.d$} ({:.d$}–{:.d$})", s.median, s.min, s.max, d = digits)
}

/// A column shown only when some row has a figure for it: header, the
/// figure, decimals.
type OptionalColumn = (&'static str, fn(&Summary) -> Option<&Spread>, usize);

fn optional_columns() -> [OptionalColumn; 7] {
    [
        ("tasks/s", |r| r.tasks_per_second.as_ref(), 2),
        (
            "creates/s stored beside",
            |r| r.background_creates_per_second.as_ref(),
            0,
        ),
        (
            "creates beside: p99 ms",
            |r| r.background_creates_p99_ms.as_ref(),
            2,
        ),
        ("server CPU µs/req", |r| r.server_cpu_us.as_ref(), 2),
        ("CPU ratio", |r| r.cpu_ratio.as_ref(), 3),
        ("load generator CPU", |r| r.load_cpu_share.as_ref(), 2),
        ("cache hit rate", |r| r.hit_rate.as_ref(), 3),
    ]
}

fn table(rows: &[Summary]) -> String {
    let mut s = String::new();
    let optional: Vec<OptionalColumn> = optional_columns()
        .into_iter()
        .filter(|(_, figure, _)| rows.iter().any(|r| figure(r).is_some()))
        .collect();
    let _ = write!(
        s,
        "| configuration | workload | conns | req/s median (min–max) | p50 ms | p99 ms | p99.9 ms |"
    );
    for (header, _, _) in &optional {
        let _ = write!(s, " {header} |");
    }
    let _ = writeln!(s, " ratio median (min–max) | ratio to | failed |");
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|{}---:|---|---:|",
        "---:|".repeat(optional.len())
    );
    for r in rows {
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            r.config,
            r.workload,
            r.connections,
            spread(&r.requests_per_second, 0),
            r.p50_ms,
            r.p99_ms,
            r.p999_ms
        );
        for (_, figure, digits) in &optional {
            let cell = figure(r).map_or_else(|| "—".into(), |x| spread(x, *digits));
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(
            s,
            " {} | {} | {} |",
            r.ratio
                .as_ref()
                .map(|x| spread(x, 3))
                .unwrap_or_else(|| "—".into()),
            r.ratio_to.as_deref().unwrap_or("—"),
            r.failed
        );
    }
    s
}

/// The preloaded databases: their load, start-up, size and memory.
fn facts_table(facts: &[super::DatasetFacts]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| configuration | links | import s | start-up s | file MiB | bytes/link | by table and index (MiB) | RssAnon MiB | RssFile MiB |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---|---:|---:|");
    for f in facts {
        let objects: Vec<String> = f
            .objects
            .iter()
            .take(4)
            .map(|(name, bytes)| format!("{name} {:.1}", mib(*bytes)))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {:.1} | {:.0} | {} | {} | {} |",
            f.config,
            f.links,
            f.import_seconds,
            f.startup_seconds,
            mib(f.file_bytes),
            f.bytes_per_link,
            objects.join(", "),
            f.rss_anon_bytes
                .map_or_else(|| "—".into(), |b| format!("{:.1}", mib(b))),
            f.rss_file_bytes
                .map_or_else(|| "—".into(), |b| format!("{:.1}", mib(b)))
        );
    }
    s
}

pub fn markdown(r: &Results, charts: &[Chart]) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "# litelink benchmark report\n");
    let _ = writeln!(
        s,
        "litelink {}{}\n",
        r.litelink_version,
        if r.settings.quick {
            " — **quick run: too short to quote; use the full run**"
        } else {
            ""
        }
    );
    let _ = writeln!(s, "## Machine\n");
    let _ = writeln!(s, "- CPU: {} ({} CPUs available)", m.cpu_model, m.cpus);
    let _ = writeln!(s, "- Memory: {}", m.memory);
    // The kernel's series, not its build: reports are compared across
    // machines of a kind, whose builds differ.
    let series: String = m.kernel.split('.').take(2).collect::<Vec<_>>().join(".");
    let _ = writeln!(s, "- OS: {} (kernel {series})", m.os);
    let _ = writeln!(s, "- SQLite: {}", r.sqlite_version);
    let _ = writeln!(
        s,
        "- SQLite compile options: `{}`\n",
        r.sqlite_compile_options.join(" ")
    );
    let st = &r.settings;
    let _ = writeln!(s, "## Method\n");
    let _ = writeln!(
        s,
        "- {} rounds; in each round every configuration and workload runs once, in the same order (A B A B ...).",
        st.rounds
    );
    let _ = writeln!(
        s,
        "- {:.1} s measured per run after {:.1} s of warm-up (the seed workload runs its fixed task count instead).",
        st.duration_s, st.warmup_s
    );
    let _ = writeln!(
        s,
        "- Every configuration is its own `litelink serve` process with its own database; reads pick among {} links created before measuring.",
        st.links
    );
    let _ = writeln!(s, "- Pinning: {}.", st.pinned);
    let _ = writeln!(
        s,
        "- Before every run the bench calls sync(2) and waits 0.3 s, so that no run pays for another's deferred disk writes."
    );
    let _ = writeln!(s, "- Load generator: {}.", st.load_generator);
    let _ = writeln!(s, "- Valkey: {}.", st.valkey);
    let _ = writeln!(
        s,
        "- Ratios are taken within a round (both figures measured minutes apart at most), then the median over rounds is quoted with its min–max.\n"
    );
    for e in &r.experiments {
        let _ = writeln!(s, "## {}\n", e.experiment.title);
        let _ = writeln!(s, "{}\n", e.experiment.question);
        for c in &e.experiment.configs {
            let program = if c.reference {
                "reference-server"
            } else {
                "serve"
            };
            let command = format!("litelink {program} {}", c.args.join(" "));
            let _ = writeln!(s, "- `{}`: `{}`", c.name, command.trim_end());
        }
        let _ = writeln!(s);
        for sk in &e.skipped {
            let _ = writeln!(s, "**Skipped `{}`**: {}.\n", sk.config, sk.reason);
        }
        s.push_str(&table(&e.summary));
        let _ = writeln!(s);
        if !e.facts.is_empty() {
            s.push_str(&facts_table(&e.facts));
            let _ = writeln!(s);
        }
        for c in charts.iter().filter(|c| c.experiment == e.experiment.id) {
            let _ = writeln!(s, "![{}]({})\n", c.title, c.file);
        }
    }
    s
}
