//! The README's tour, run as written: every `curl` and `litelink` command
//! of *Five minutes with curl* and of the link-rules example, in order,
//! against the built binary serving its default database in a fresh
//! directory, with the key `keys create` printed. Only the port differs
//! (the tour's `localhost:8080` is the test server's free port), and the
//! tour's example code is the one the first create answered. The answers
//! the tour shows are checked; every other answer must not be an error.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The tour's example code, which the first create replaces.
const EXAMPLE_CODE: &str = "Xq3kP9aZ1b";

/// One command of the tour (continuation lines joined), with the comment
/// lines that follow it: the answer the tour shows.
#[derive(Debug)]
struct Step {
    command: String,
    shown: Vec<String>,
}

/// The `sh` blocks from *Five minutes with curl* up to the next section.
fn tour(readme: &str) -> Vec<Step> {
    let start = readme
        .find("## Five minutes with curl")
        .expect("the README has its tour");
    let end = readme[start + 2..]
        .find("\n## ")
        .map_or(readme.len(), |i| start + 2 + i);
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in readme[start..end].lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if pending.is_empty() && trimmed.starts_with('#') {
            if let Some(last) = steps.last_mut() {
                last.shown
                    .push(trimmed.trim_start_matches('#').trim().to_owned());
            }
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                // A quoted argument may go on over lines (a JSON body).
                if open_quote(&pending) {
                    pending.push('\n');
                    continue;
                }
                steps.push(Step {
                    command: std::mem::take(&mut pending),
                    shown: Vec::new(),
                });
            }
        }
    }
    steps
}

/// Whether `command` ends inside a single-quoted argument, as the shell
/// reads it: a `#` after a space outside quotes starts a comment, whose
/// apostrophes (`the operator's view`) count for nothing.
fn open_quote(command: &str) -> bool {
    let (mut single, mut double, mut after_space) = (false, false, true);
    for c in command.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && after_space => return false,
            _ => {}
        }
        after_space = c.is_whitespace();
    }
    single
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's PID; no memory is touched.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `litelink serve` on its defaults in `dir` (so `./litelink.db`), but on
/// `port`.
fn serve(dir: &Path, port: u16) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_litelink"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("litelink serve");
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// Runs `command` in bash in `dir`, with `bin` first on the PATH and `env`
/// set: its exit status and standard output.
fn run(dir: &Path, bin: &Path, env: &[(&str, &str)], command: &str) -> (bool, String) {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-o", "pipefail", "-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // `head` closing the pipe early is how a `| head -3` ends.
    let ok = out.status.success() || command.contains("| head");
    if !ok {
        eprintln!("{command}: {}", String::from_utf8_lossy(&out.stderr));
    }
    (ok, stdout)
}

#[test]
fn the_readme_tour_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let steps = tour(&readme);
    assert!(steps.len() >= 12, "the tour has its commands: {steps:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_litelink"), bin.join("litelink"))
        .expect("symlink");
    let port = free_port();
    let _server = serve(dir.path(), port);

    let mut key = String::new();
    let mut code = EXAMPLE_CODE.to_owned();
    let mut last_output = String::new();
    for step in &steps {
        let command = step
            .command
            .replace("localhost:8080", &format!("localhost:{port}"))
            .replace(EXAMPLE_CODE, &code);
        // `KEY=ll_...  # what it printed`: the key the step before printed.
        if command.starts_with("KEY=") {
            key = last_output
                .lines()
                .next()
                .expect("keys create printed the key")
                .trim()
                .to_owned();
            assert!(key.starts_with("ll_"), "a key: {last_output}");
            assert!(command.contains("ll_..."), "{command}");
            continue;
        }
        let (ok, output) = run(dir.path(), &bin, &[("KEY", &key)], &command);
        assert!(ok, "{command} failed: {output}");
        assert!(
            !output.contains("\"error\""),
            "{command} answered an error: {output}"
        );
        check_shown(&command, &step.shown, &output, &mut code);
        last_output = output;
    }
    assert_ne!(code, EXAMPLE_CODE, "the first create gave a code");
    // What the tour leaves behind: the QR code and the backup.
    let svg = std::fs::read_to_string(dir.path().join("spring-sale.svg")).expect("the QR code");
    assert!(svg.contains("<svg"), "{svg}");
    let backup = std::fs::read_to_string(dir.path().join("links.jsonl")).expect("the backup");
    assert!(backup.contains("\"spring-sale\""), "{backup}");
}

/// Checks `output` against what the tour shows for its command: the
/// JSON a create answers (whose code the rest of the tour then uses), or
/// the `302` and `Location` of a redirect.
fn check_shown(command: &str, shown: &[String], output: &str, code: &mut String) {
    for answer in shown {
        if answer.starts_with('{') {
            let want: Value = serde_json::from_str(answer).expect("the tour shows JSON");
            let got: Value = serde_json::from_str(output.trim())
                .unwrap_or_else(|e| panic!("{command}: {e}: {output}"));
            let keys = |v: &Value| {
                let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(keys(&got), keys(&want), "{command}: {output}");
            assert_eq!(got["link"], want["link"], "{command}");
            let made = got["short_link"].as_str().expect("short_link").to_owned();
            assert!(
                got["short_url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(&format!("/{made}"))),
                "{output}"
            );
            *code = made;
        }
    }
    // `... | head -3   # 302, Location: the target` (or `# 302; ...`).
    if command.contains("| head -3") {
        let says_302 = command.contains("# 302");
        assert!(says_302, "the tour says what a redirect answers: {command}");
        let status = output.lines().next().unwrap_or_default();
        assert!(status.contains(" 302"), "{command}: {output}");
        assert!(
            output.to_ascii_lowercase().contains("\nlocation: https://"),
            "{command}: {output}"
        );
    }
}

#[test]
fn the_tour_reader_finds_commands_and_their_answers() {
    let readme = "intro\n## Five minutes with curl\n\n```sh\n# a comment first\ncurl -s a \\\n     -d '{}'\n# {\"x\":1}\n\nKEY=ll_...   # it's\n```\ntext\n```sh\necho b\necho '{\"a\": 1,\n  \"b\": 2}'\n```\n## Next\n```sh\nnot this\n```\n";
    let steps = tour(readme);
    let commands: Vec<&str> = steps.iter().map(|s| s.command.as_str()).collect();
    assert_eq!(
        commands,
        [
            "curl -s a -d '{}'",
            "KEY=ll_...   # it's",
            "echo b",
            "echo '{\"a\": 1,\n\"b\": 2}'"
        ]
    );
    assert_eq!(steps[0].shown, ["{\"x\":1}"]);
}
