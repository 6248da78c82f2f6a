//! The `LITELINK_*` variables: every one the product's command line defines
//! is in docs/configuration.md and every lab one in docs/lab.md, and those
//! whose effect a client can see are set on a running server and seen.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use clap::CommandFactory;
use litelink_lab::process::ServerProcess;
use serde_json::{Value, json};

use crate::helpers::{client, stats_at};

/// Every environment variable `cmd` and its subcommands read.
fn variables(cmd: &clap::Command, out: &mut BTreeSet<String>) {
    for arg in cmd.get_arguments() {
        if let Some(env) = arg.get_env() {
            out.insert(env.to_string_lossy().into_owned());
        }
    }
    for sub in cmd.get_subcommands() {
        variables(sub, out);
    }
}

#[test]
fn every_variable_is_documented_and_lab_ones_stay_out_of_the_product() {
    let doc = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (configuration, lab_doc) = (doc("configuration.md"), doc("lab.md"));
    let mut product = BTreeSet::new();
    variables(&litelink::cli::Cli::command(), &mut product);
    let mut lab = BTreeSet::new();
    variables(&litelink_lab::cli::LabCli::command(), &mut lab);
    // A walk that found nothing would pass: the product has dozens.
    assert!(product.len() >= 45, "{product:?}");
    let missing: Vec<&String> = product
        .iter()
        .filter(|v| !configuration.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
    let lab_only: Vec<&String> = lab.difference(&product).collect();
    assert!(!lab_only.is_empty());
    let missing: Vec<&&String> = lab_only
        .iter()
        .filter(|v| !lab_doc.contains(&format!("`{v}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/lab.md: {missing:?}");
    let mut help = Vec::new();
    litelink::cli::Cli::command()
        .find_subcommand_mut("serve")
        .expect("serve")
        .write_long_help(&mut help)
        .expect("help");
    let help = String::from_utf8(help).expect("utf-8");
    for v in lab_only {
        assert!(!help.contains(v.as_str()), "{v} in serve --help");
    }
}

/// One server started with variables only (no flags past its listen
/// address and file): each variable's effect, as a client or the operator
/// sees it.
#[tokio::test]
async fn variables_set_what_their_flags_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let deny = dir.path().join("deny.txt");
    std::fs::write(&deny, "denied.example\n").expect("deny list");
    let deny = deny.to_str().expect("path").to_owned();
    let env = [
        ("LITELINK_DURABILITY", "normal"),
        ("LITELINK_WRITE_BATCH_MAX", "64"),
        ("LITELINK_WRITE_QUEUE", "100"),
        ("LITELINK_WAL_PREALLOCATE_MIB", "0"),
        ("LITELINK_SQLITE_MMAP_MIB", "1"),
        ("LITELINK_SQLITE_SLOTS", "off"),
        ("LITELINK_CACHE_CAPACITY", "123"),
        ("LITELINK_REDIRECT_STATUS", "301"),
        ("LITELINK_CODE_LENGTH", "12"),
        ("LITELINK_PUBLIC_URL", "https://sho.rt"),
        ("LITELINK_REFERRER_POLICY", "no-referrer"),
        ("LITELINK_MAX_BODY_BYTES", "200"),
        ("LITELINK_REFUSE_PRIVATE_TARGETS", "true"),
        ("LITELINK_DENY_HOSTS", deny.as_str()),
        ("LITELINK_METRICS", "off"),
        ("LITELINK_VISITS", "off"),
        ("LITELINK_LOG_FORMAT", "json"),
        ("LITELINK_CREATE_RATE", "1"),
        ("LITELINK_CREATE_BURST", "3"),
        ("LITELINK_RATE_LIMIT_LOOPBACK", "true"),
    ];
    let mut server = ServerProcess::start_with_env(
        Path::new(env!("CARGO_BIN_EXE_litelink")),
        &dir.path().join("env.db"),
        &[],
        &env,
        None,
    )
    .expect("litelink");
    let base = server.url();
    let http = client();
    let stats = stats_at(&base).await;
    assert_eq!(stats["durability"], "normal", "{stats}");
    assert_eq!(stats["writer"]["batch_max"], 64, "{stats}");
    assert_eq!(stats["writer"]["queue_capacity"], 100, "{stats}");
    assert_eq!(stats["writer"]["wal_preallocate_bytes"], 0, "{stats}");
    assert_eq!(stats["applied"]["writer"]["mmap_size"], 1 << 20, "{stats}");
    assert_eq!(stats["slots"], Value::Null, "{stats}");
    assert_eq!(stats["cache"]["memory"]["capacity"], 123, "{stats}");
    assert_eq!(stats["redirect_status"], 301, "{stats}");

    let create = |body: Value| http.post(format!("{base}/link")).json(&body).send();
    let r = create(json!({"url": "https://example.com/env"}))
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.expect("json");
    let code = made["short_link"].as_str().expect("code").to_owned();
    assert_eq!(code.len(), 12, "{made}");
    assert_eq!(
        made["short_url"],
        format!("https://sho.rt/{code}"),
        "{made}"
    );
    let r = http
        .get(format!("{base}/{code}"))
        .send()
        .await
        .expect("redirect");
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    let long = format!("https://example.com/{}", "a".repeat(300));
    assert_eq!(
        create(json!({ "url": long }))
            .await
            .expect("create")
            .status(),
        413
    );
    for (url, why) in [
        ("http://10.0.0.1/", "private"),
        ("https://denied.example/", "deny list"),
    ] {
        let r = create(json!({ "url": url })).await.expect("create");
        assert_eq!(r.status(), 400, "{url}");
        let body: Value = r.json().await.expect("json");
        assert!(
            body["error"].as_str().expect("error").contains(why),
            "{body}"
        );
    }
    // The burst of 3 was taken by the create and the two refused ones
    // above (a create is counted before its body is judged).
    let r = create(json!({"url": "https://example.com/one-more"}))
        .await
        .expect("create");
    assert_eq!(r.status(), 429);
    assert_eq!(
        http.get(format!("{base}/metrics"))
            .send()
            .await
            .expect("metrics")
            .status(),
        404
    );
    // Visits off: the redirect above was not counted.
    let stats = stats_at(&base).await;
    assert_eq!(stats["visits"]["counted"], 0, "{stats}");
    assert_eq!(stats["visits"]["counting"], false, "{stats}");
    server
        .stop_with(libc::SIGTERM, Duration::from_secs(5))
        .expect("stops");
    let (_, lines) = server.log();
    assert!(
        lines
            .iter()
            .any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object())),
        "no JSON log line: {lines:?}"
    );
}

fn litelink(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("litelink")
}

/// A flag overrides the environment, which overrides the file, which
/// overrides the built-in default: each layer seen on a running server.
#[tokio::test]
async fn flags_beat_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("litelink.toml");
    std::fs::write(
        &file,
        "# every layer sets some of these\n\
         redirect-status = 301\n\
         code-length = 12\n\
         cache-capacity = 111\n\
         visits = \"off\"\n",
    )
    .expect("config");
    let file = file.to_str().expect("path").to_owned();
    let mut server = ServerProcess::start_with_env(
        Path::new(env!("CARGO_BIN_EXE_litelink")),
        &dir.path().join("layers.db"),
        &[
            "--config".into(),
            file,
            "--cache-capacity".into(),
            "333".into(),
        ],
        &[
            ("LITELINK_CODE_LENGTH", "14"),
            ("LITELINK_CACHE_CAPACITY", "222"),
        ],
        None,
    )
    .expect("litelink");
    let base = server.url();
    let http = client();
    let stats = stats_at(&base).await;
    assert_eq!(stats["redirect_status"], 301, "the file: {stats}");
    assert_eq!(stats["visits"]["counting"], false, "the file: {stats}");
    assert_eq!(
        stats["cache"]["memory"]["capacity"], 333,
        "the flag: {stats}"
    );
    let made: Value = http
        .post(format!("{base}/link"))
        .json(&json!({"url": "https://example.com/layers"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    assert_eq!(
        made["short_link"].as_str().expect("code").len(),
        14,
        "the environment: {made}"
    );
    server
        .stop_with(libc::SIGTERM, Duration::from_secs(5))
        .expect("stops");
}

/// An unknown key, or a table, is an error that names the key and its line.
#[test]
fn an_unknown_key_is_named_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    for (text, key, line) in [
        (
            "listen = \"127.0.0.1:0\"\n\ncache-capacty = 5\n",
            "cache-capacty",
            3,
        ),
        ("[cache]\ncapacity = 5\n", "cache", 1),
    ] {
        std::fs::write(&file, text).expect("config");
        let out = litelink(&["serve", "--config", file.to_str().expect("path")], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("line {line}")) && err.contains(&format!("'{key}'")),
            "{err}"
        );
    }
}

/// A file's values are what their flags take: no list for one value, no
/// string for a number or a switch, an http(s) public URL; and a file that
/// is not TOML is refused without a word of what it holds.
#[test]
fn a_file_value_of_the_wrong_kind_is_refused_and_nothing_of_it_is_quoted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    for (text, needle) in [
        (
            "deny-hosts = [\"a\", \"b\"]\n",
            "line 1: 'deny-hosts' takes one value, not a list",
        ),
        (
            "\ncache-capacity = \"50000\"\n",
            "line 2: 'cache-capacity' takes a number",
        ),
        (
            "refuse-private-targets = \"yes\"\n",
            "'refuse-private-targets' takes true or false",
        ),
        ("public-url = \"javascript:alert(1)\"\n", "http or https"),
        ("public-url = \"file:///etc/passwd\"\n", "http or https"),
        (
            "public-url = \"https://u:p@s.example\"\n",
            "user name or password",
        ),
        (
            "root:$6$Zm9vYmFy$c2VjcmV0aGFzaA:19000:0:99999:7:::\n",
            "line 1: not valid TOML",
        ),
    ] {
        std::fs::write(&file, text).expect("config");
        let out = litelink(
            &[
                "serve",
                "--config",
                file.to_str().expect("path"),
                "--print-config",
            ],
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: {err}");
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(
            !err.contains("c2VjcmV0aGFzaA") && !err.contains("Zm9v"),
            "{err}"
        );
    }
    // Lists stay lists where a flag takes several values.
    std::fs::write(&file, "trust-proxy = [\"127.0.0.1\", \"10.0.0.0/8\"]\n").expect("config");
    let out = litelink(
        &[
            "serve",
            "--config",
            file.to_str().expect("path"),
            "--print-config",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every form a password takes in a store or Valkey URL is hidden by
/// `--print-config`; a file that others may read and that holds one draws
/// a warning, and one only its owner reads does not.
#[test]
fn passwords_in_every_form_are_hidden_and_a_readable_file_with_one_is_warned_of() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "store = \"postgres://u@db.internal/links?password=pg-s3cret&sslmode=prefer\"\n\
         valkey-url = \"redis://cache.internal:6379?password=vk-s3cret\"\n",
    )
    .expect("config");
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let out = litelink(
            &[
                "serve",
                "--config",
                file.to_str().expect("path"),
                "--print-config",
            ],
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            !printed.contains("s3cret") && !err.contains("s3cret"),
            "{printed}{err}"
        );
        assert!(printed.contains("password=***"), "{printed}");
        assert_eq!(
            err.contains("readable by every user"),
            warned,
            "{mode:o}: {err}"
        );
    }
}

/// `--print-config` prints every setting with its effective value and
/// hides passwords; read back, it prints the same again. Other
/// subcommands take from the same file the keys they have.
#[test]
fn the_printed_configuration_reads_back_and_hides_passwords() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.toml");
    let db = dir.path().join("keys.db");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:9999\"\ncache-capacity = 4242\ndb = {:?}\n",
            db.to_str().expect("path")
        ),
    )
    .expect("config");
    let file = file.to_str().expect("path");
    let store = "postgres://litelink:s3cret-pw@db.internal/links";
    let out = litelink(
        &[
            "serve",
            "--config",
            file,
            "--store",
            store,
            "--print-config",
        ],
        &[("LITELINK_VALKEY_PREFIX", "env:")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    assert!(!printed.contains("s3cret-pw"), "{printed}");
    for line in [
        "listen = \"127.0.0.1:9999\"",
        "cache-capacity = 4242",
        "valkey-prefix = \"env:\"",
        "store = \"postgres://litelink:***@db.internal/links\"",
        "durability = \"full\"",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line} in:\n{printed}");
    }
    let again = dir.path().join("printed.toml");
    std::fs::write(&again, &printed).expect("write");
    let out = litelink(
        &[
            "serve",
            "--config",
            again.to_str().expect("path"),
            "--print-config",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).expect("utf-8"), printed);

    // `keys` takes `db` from the file and leaves `listen` and the rest.
    let out = litelink(
        &["keys", "create", "--name", "from-file", "--config", file],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = litelink(&["keys", "list", "--db", db.to_str().expect("path")], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from-file"),
        "the key went to the file's database"
    );
}

/// docs/configuration.md cannot drift from the command line: each setting
/// `serve --print-config` prints has a row there with its flag, its
/// variable and its default (`off` for a switch that is off).
#[test]
fn the_configuration_page_names_every_flag_and_its_default() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["serve", "--print-config"])
        .env_clear()
        .output()
        .expect("litelink");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .expect("docs/configuration.md");
    let mut checked = 0;
    for line in printed.lines() {
        let (key, value) = line.split_once(" = ").expect("key = value");
        let value = value.trim_matches('"');
        let variable = format!("`LITELINK_{}`", key.to_uppercase().replace('-', "_"));
        let row = page
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&variable))
            .unwrap_or_else(|| panic!("no row for {variable}"));
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells[0], format!("`--{key}`"), "{row}");
        let default = cells[2];
        let shown =
            default.contains(&format!("`{value}`")) || (value == "false" && default == "off");
        assert!(shown, "{key}: default {value}, the page says {default}");
        checked += 1;
    }
    assert!(checked >= 40, "{checked} settings printed");
}

/// `LITELINK_CONFIG` names the file when `--config` does not; and
/// `--print-config` hides the passwords of every URL it prints: the store,
/// its replica and Valkey.
#[test]
fn litelink_config_names_the_file_and_every_urls_password_is_hidden() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("env.toml");
    std::fs::write(&file, "cache-capacity = 4343\n").expect("config");
    let out = litelink(
        &[
            "serve",
            "--store",
            "postgres://u:pg-s3cret@db.internal/links",
            "--postgres-read-url",
            "postgres://u:replica-s3cret@replica.internal/links",
            "--valkey-url",
            "redis://:vk-s3cret@cache.internal:6379",
            "--print-config",
        ],
        &[("LITELINK_CONFIG", file.to_str().expect("path"))],
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.lines().any(|l| l == "cache-capacity = 4343"),
        "{printed}"
    );
    assert!(!printed.contains("s3cret"), "{printed}");
    for line in [
        "store = \"postgres://u:***@db.internal/links\"",
        "postgres-read-url = \"postgres://u:***@replica.internal/links\"",
        "valkey-url = \"redis://:***@cache.internal:6379\"",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line} in:\n{printed}");
    }
}
