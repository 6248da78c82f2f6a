//! `--config FILE` (or `LITELINK_CONFIG`): a TOML file of flat keys named
//! as the long flags are (`cache-capacity = 50000`). Its values become the
//! defaults clap falls back on, so a flag beats the environment, which
//! beats the file, which beats the built-in default. One file serves every
//! subcommand: each takes the keys it has, and a key that no subcommand
//! has is an error naming it and its line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

use super::Cli;

/// The environment variable that names the file when `--config` does not.
pub const CONFIG_ENV: &str = "LITELINK_CONFIG";

/// Arguments that are not settings: never read from nor printed to a file.
const NOT_SETTINGS: [&str; 4] = ["config", "print-config", "help", "version"];

/// Parses `args` as the binary does, with the configuration file's values
/// under the flags and the environment. The matches are for
/// [`print`].
pub fn parse_from(args: Vec<OsString>) -> Result<(Cli, ArgMatches), Error> {
    let mut command = Cli::command();
    if let Some(path) = config_path(&args) {
        let values = read(&path).map_err(Error::File)?;
        let known = long_names(&command);
        if let Some((key, line)) = values
            .iter()
            .find(|(key, ..)| !known.contains(key))
            .map(|(key, _, line, _)| (key, line))
        {
            return Err(Error::File(anyhow::anyhow!(
                "{}: line {line}: unknown key '{key}' (keys are the long flags without their dashes)",
                path.display()
            )));
        }
        for (key, _, line, given) in &values {
            if let Some(why) = arg_named(&command, key).and_then(|a| mismatch(a, *given)) {
                return Err(Error::File(anyhow::anyhow!(
                    "{}: line {line}: '{key}' {why}",
                    path.display()
                )));
            }
        }
        warn_if_others_read(&path, &values);
        command = with_defaults(command, &values);
    }
    let matches = command.try_get_matches_from(args).map_err(Error::Args)?;
    let cli = Cli::from_arg_matches(&matches).map_err(Error::Args)?;
    Ok((cli, matches))
}

/// Why the command line could not be parsed.
#[derive(Debug)]
pub enum Error {
    /// clap's own error, which prints help and exits as clap does.
    Args(clap::Error),
    /// The configuration file is missing, malformed or names an unknown key.
    File(anyhow::Error),
}

/// The file `--config` or [`CONFIG_ENV`] names, read before clap parses.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return rest.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// What a file gave a key: checked against what the flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Given {
    Text,
    Number,
    Bool,
    List,
    Other,
}

/// The file's keys, each value as a command-line string, with its line
/// and what TOML type it was.
fn read(path: &Path) -> anyhow::Result<Vec<(String, String, usize, Given)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    // Only where, never what: the file may be one that is not TOML at all
    // (`--config /etc/shadow`), and its lines must not reach a log.
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |s| {
            text[..s.start.min(text.len())].lines().count().max(1)
        });
        anyhow::anyhow!("{}: line {line}: not valid TOML", path.display())
    })?;
    let mut values = Vec::new();
    for (key, value) in table {
        let line = line_of(&text, &key);
        let given = match &value {
            toml::Value::String(_) => Given::Text,
            toml::Value::Integer(_) | toml::Value::Float(_) => Given::Number,
            toml::Value::Boolean(_) => Given::Bool,
            toml::Value::Array(_) => Given::List,
            _ => Given::Other,
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            toml::Value::Datetime(d) => d.to_string(),
            toml::Value::Table(_) => bail!(
                "{}: line {line}: '{key}' is a table; keys are flat (`cache-capacity = 50000`)",
                path.display()
            ),
        };
        if NOT_SETTINGS.contains(&key.as_str()) {
            bail!(
                "{}: line {line}: '{key}' cannot be set in the file",
                path.display()
            );
        }
        values.push((key, value, line, given));
    }
    Ok(values)
}

/// Why `given` cannot be the value of `arg`, if it cannot: a list for a
/// path, a number or a switch (`deny-hosts = ["a", "b"]` would be the
/// path `a,b`), or text for a number or a switch (`cache-capacity =
/// "5000"`). A list for any other flag is its comma-separated value.
fn mismatch(arg: &clap::Arg, given: Given) -> Option<&'static str> {
    use std::any::TypeId;
    let parser = arg.get_value_parser().type_id();
    let takes_list = parser != TypeId::of::<std::path::PathBuf>();
    let is_switch = matches!(
        arg.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    let is_number = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .iter()
    .any(|t| parser == *t);
    match given {
        Given::List if !takes_list || is_number || is_switch => Some("takes one value, not a list"),
        Given::Text if is_number => Some("takes a number, not a string"),
        Given::Text if is_switch => Some("takes true or false, not a string"),
        _ => None,
    }
}

/// The argument whose long flag is `key`, in `command` or a subcommand.
fn arg_named<'c>(command: &'c Command, key: &str) -> Option<&'c clap::Arg> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(key))
        .or_else(|| command.get_subcommands().find_map(|s| arg_named(s, key)))
}

/// The line (from 1) on which `key` is set, or opens a table.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            if let Some(header) = l.strip_prefix('[') {
                let name = header.trim_start_matches('[').split([']', '.']).next();
                return name.is_some_and(|n| n.trim().trim_matches('"') == key);
            }
            let l = l
                .strip_prefix('"')
                .and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix('"'))
                .or_else(|| l.strip_prefix(key));
            l.is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}

/// Every long flag of `command` and its subcommands.
fn long_names(command: &Command) -> Vec<String> {
    let mut names: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect();
    for sub in command.get_subcommands() {
        names.extend(long_names(sub));
    }
    names
}

/// `command` with each value as the default of the flag of its name, in
/// every subcommand that has one.
fn with_defaults(mut command: Command, values: &[(String, String, usize, Given)]) -> Command {
    for (key, value, ..) in values {
        let id = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()))
            .map(|a| a.get_id().clone());
        if let Some(id) = id {
            let value = value.clone();
            command = command.mut_arg(id, move |a| a.default_value(value));
        }
    }
    let subcommands: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in subcommands {
        command = command.mut_subcommand(name, |s| with_defaults(s, values));
    }
    command
}

/// The effective settings of the command that runs (`serve`, or the top
/// level when no subcommand is named) as TOML, one flat key per line,
/// passwords in URLs replaced with `***`. Read back with `--config`, it
/// gives the same configuration, but for those passwords.
pub fn print(matches: &ArgMatches) -> String {
    let command = Cli::command();
    let (command, matches) = match matches.subcommand() {
        Some((name, sub)) => (
            command
                .find_subcommand(name)
                .cloned()
                .unwrap_or_else(|| Command::new(name.to_owned())),
            sub,
        ),
        None => (command, matches),
    };
    let mut out = String::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&long) {
            continue;
        }
        let Ok(Some(raw)) = matches.try_get_raw(arg.get_id().as_str()) else {
            continue;
        };
        // A secret given whole (`oidc-client-secret`), not a file naming it.
        let secret = is_secret_key(long) && !long.ends_with("-file");
        let values: Vec<String> = raw
            .map(|v| {
                if secret {
                    "***".to_owned()
                } else {
                    redact(&v.to_string_lossy())
                }
            })
            .collect();
        if values.is_empty() {
            continue;
        }
        out.push_str(&format!("{long} = {}\n", toml_value(&values.join(","))));
    }
    out
}

/// A value as TOML: booleans and numbers bare, everything else a string.
fn toml_value(v: &str) -> String {
    if v == "true" || v == "false" || v.parse::<i64>().is_ok() {
        return v.to_owned();
    }
    if v.parse::<f64>().is_ok_and(f64::is_finite) && v.contains('.') {
        return v.to_owned();
    }
    toml::Value::String(v.to_owned()).to_string()
}

/// Whether a query parameter or connection-string key names a secret
/// (`password`, `sslpassword`, `pass`, ...).
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("pass") || key.contains("secret") || key.contains("token")
}

/// `v` with every password in it as `***`: a URL's user password and its
/// query parameters that name one (`?password=`), and the `password=`
/// pairs of a key=value connection string, in each comma-separated part.
fn redact(v: &str) -> String {
    v.split(',')
        .map(|part| match url::Url::parse(part) {
            Ok(mut u) if u.has_host() || u.password().is_some() || u.query().is_some() => {
                if u.password().is_some() {
                    let _ = u.set_password(Some("***"));
                }
                if u.query_pairs().any(|(k, _)| is_secret_key(&k)) {
                    let pairs: Vec<(String, String)> = u
                        .query_pairs()
                        .map(|(k, v)| {
                            let v = if is_secret_key(&k) {
                                "***".into()
                            } else {
                                v.into_owned()
                            };
                            (k.into_owned(), v)
                        })
                        .collect();
                    u.query_pairs_mut().clear().extend_pairs(pairs);
                }
                u.to_string()
            }
            _ => part
                .split(' ')
                .map(|word| match word.split_once('=') {
                    Some((k, _)) if is_secret_key(k) => format!("{k}=***"),
                    _ => word.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Warns when a file that others may read holds a secret (a password in a
/// URL): the file's mode should be 0600 or 0640.
fn warn_if_others_read(path: &Path, values: &[(String, String, usize, Given)]) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode();
    if mode & 0o004 == 0 {
        return;
    }
    let secret =
        |key: &str, v: &str| (is_secret_key(key) && !key.ends_with("-file")) || redact(v) != *v;
    if let Some((key, _, line, _)) = values.iter().find(|(key, v, ..)| secret(key, v)) {
        // Said on stderr: logging starts only once the file is read.
        eprintln!(
            "warning: {} (mode {:o}) is readable by every user and holds a secret in '{key}' \
             (line {line}); make it readable by its owner only: chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_on_their_line() {
        let text = "# a comment\nlisten = \"127.0.0.1:9000\"\n\n  \"cache-capacity\"= 5\n";
        assert_eq!(line_of(text, "listen"), 2);
        assert_eq!(line_of(text, "cache-capacity"), 4);
        assert_eq!(line_of("a = 1\n[cache]\nx = 1\n", "cache"), 2);
    }

    #[test]
    fn printed_values_are_toml() {
        assert_eq!(toml_value("301"), "301");
        assert_eq!(toml_value("true"), "true");
        assert_eq!(toml_value("0.5"), "0.5");
        assert_eq!(toml_value("127.0.0.1:8080"), "\"127.0.0.1:8080\"");
        assert_eq!(toml_value("a \"b\""), "'a \"b\"'");
        assert_eq!(
            redact("postgres://u:secret@db/x,redis://h:6379"),
            "postgres://u:***@db/x,redis://h:6379"
        );
        assert_eq!(
            redact("postgres://u@h/db?password=s3cret&sslmode=require"),
            "postgres://u@h/db?password=***&sslmode=require"
        );
        assert_eq!(
            redact("redis://h?password=s3cret"),
            "redis://h?password=***"
        );
        assert_eq!(
            redact("host=h user=u password=s3cret dbname=x"),
            "host=h user=u password=*** dbname=x"
        );
        assert_eq!(redact("/var/lib/litelink.db"), "/var/lib/litelink.db");
    }
}
