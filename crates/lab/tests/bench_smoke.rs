//! `litelink-lab bench --quick` produces a complete report. No timing is
//! asserted: only that every experiment and configuration was measured.
//! A test binary of its own: cargo runs test binaries one after another, so
//! the bench's load never runs beside the timing-sensitive API tests.

use std::process::Command;

use serde_json::Value;

#[test]
fn quick_bench_reports_every_experiment_and_configuration() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_litelink-lab"))
        .args(["bench", "--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    let experiments = results["experiments"].as_array().unwrap();
    let ids: Vec<&str> = experiments
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, litelink_lab::experiment_ids());
    // scripts/test provides a Valkey binary, so nothing may be skipped.
    let valkey_expected = std::env::var("LITELINK_TEST_VALKEY_SERVER").is_ok();
    for e in experiments {
        let skipped = e["skipped"].as_array().unwrap();
        if valkey_expected {
            assert!(skipped.is_empty(), "{}: {skipped:?}", e["id"]);
        }
        for c in e["configs"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            if skipped.iter().any(|s| s["config"] == name) {
                continue;
            }
            for w in e["workloads"].as_array().unwrap() {
                let wname = w["name"].as_str().unwrap();
                let runs = c["workloads"]
                    .as_array()
                    .is_none_or(|only| only.iter().any(|n| n == wname));
                if !runs {
                    continue;
                }
                let s = e["summary"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["config"] == name && s["workload"] == wname)
                    .unwrap_or_else(|| panic!("{} / {name} / {wname} missing", e["id"]));
                assert!(s["requests_per_second"]["median"].as_f64().unwrap() > 0.0);
                assert_eq!(s["failed"], 0, "{} / {name} / {wname}", e["id"]);
            }
        }
    }
    // The ceiling: every figure against the bare server of the same
    // round, in throughput and in CPU time per request, with the load
    // generator's own CPU use beside it.
    let ceiling = experiments
        .iter()
        .find(|e| e["id"] == "ceiling")
        .expect("ceiling");
    let rows = ceiling["summary"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "{rows:?}");
    for row in rows {
        assert_eq!(row["ratio_to"], "bare hyper, fixed answer", "{row}");
        assert!(row["ratio"]["median"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["cpu_ratio"]["median"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["load_cpu_share"]["median"].as_f64().unwrap() > 0.0,
            "{row}"
        );
    }
    // Ratios exist where a baseline is defined: heart-beat for caches,
    // memstatus on for memstatus off, `off` for the write configurations.
    let caches = &experiments[2]["summary"];
    let zipf_none = caches
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["config"] == "none" && s["workload"] == "read-zipf")
        .unwrap();
    assert_eq!(zipf_none["ratio_to"], "heart-beat");
    assert!(zipf_none["ratio"]["median"].as_f64().unwrap() > 0.0);
    let reads = experiments[0]["summary"].as_array().unwrap();
    for config in [
        "pooled",
        "per-request, memstatus off",
        "per-request, memstatus on",
    ] {
        let read = reads
            .iter()
            .find(|s| s["config"] == config && s["workload"] == "read")
            .unwrap();
        assert_eq!(read["ratio_to"], "heart-beat", "{config}");
        assert!(read["ratio"]["median"].as_f64().unwrap() > 0.0, "{config}");
    }
    // Reads beside creates: their ratio is to the reads alone, and the
    // creates that ran beside them are counted.
    let beside = experiments[4]["summary"].as_array().unwrap();
    for config in ["full", "off"] {
        let mixed = beside
            .iter()
            .find(|s| s["config"] == config && s["workload"] != "read")
            .unwrap();
        assert_eq!(mixed["ratio_to"], "read", "{config}");
        assert!(mixed["ratio"]["median"].as_f64().unwrap() > 0.0);
        assert!(
            mixed["background_creates_per_second"]["median"]
                .as_f64()
                .unwrap()
                > 0.0,
            "{config}"
        );
        let alone = beside
            .iter()
            .find(|s| s["config"] == config && s["workload"] == "read")
            .unwrap();
        assert!(alone["background_creates_per_second"].is_null());
    }
    // Scale: uncached reads from the link slots and from SQLite's table,
    // each against the smallest database of its own kind.
    let scale = experiments
        .iter()
        .find(|e| e["id"] == "scale")
        .expect("scale");
    let rows = scale["summary"].as_array().unwrap();
    for (config, base) in [
        ("100k links, no cache", "10k links, no cache"),
        (
            "100k links, no cache, no slots",
            "10k links, no cache, no slots",
        ),
        ("100k named links, no cache", "10k named links, no cache"),
        (
            "100k named links, no cache, no slots",
            "10k named links, no cache, no slots",
        ),
    ] {
        let read = rows
            .iter()
            .find(|s| s["config"] == config && s["workload"] == "read, uncached")
            .unwrap_or_else(|| panic!("{config} missing"));
        assert_eq!(read["ratio_to"], base, "{read}");
        assert!(
            read["cpu_ratio"]["median"].as_f64().unwrap() > 0.0,
            "{read}"
        );
    }
    // Alias creates on the named databases, against the smallest one.
    let aliases = rows
        .iter()
        .find(|s| {
            s["config"] == "100k named links, no cache"
                && s["workload"] == "durable creates of aliases"
        })
        .expect("alias creates");
    assert_eq!(
        aliases["ratio_to"], "10k named links, no cache",
        "{aliases}"
    );
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    for title in [
        "Point reads against /heart-beat",
        "MEMSTATUS on and off",
        "Caches against SQLite",
        "Durable creates",
        "Reads while creates run",
        "creates/s stored beside",
        "against concurrency",
        "## Machine",
    ] {
        assert!(report.contains(title), "report.md lacks {title}");
    }
    for svg in [
        "reads-throughput.svg",
        "memstatus-throughput.svg",
        "caches-latency.svg",
        "writes-throughput.svg",
        "reads-while-creating-latency.svg",
        "concurrency.svg",
    ] {
        let text = std::fs::read_to_string(out.path().join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("</svg>"), "{svg}");
        assert!(report.contains(svg), "report.md does not show {svg}");
    }
}
