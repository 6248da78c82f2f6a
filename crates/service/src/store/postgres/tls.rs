//! TLS to PostgreSQL, with libpq's parameters in the URL: `sslmode`
//! (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`),
//! `sslrootcert` (a file, or `system` for the system's CAs), `sslcert` and
//! `sslkey`. tokio-postgres's own parser refuses all but the first three
//! modes, so they are taken out of the URL before it sees it.

use std::path::PathBuf;

use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::tls::{self, TlsError, Verify};

/// The parameters this module takes; any other goes to tokio-postgres.
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Root {
    File(PathBuf),
    /// `sslrootcert=system`, as libpq 16 reads it.
    System,
}

/// The TLS parameters of a PostgreSQL URL, checked for sense but with no
/// file read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PgTls {
    pub(super) mode: Mode,
    root: Option<Root>,
    identity: Option<(PathBuf, PathBuf)>,
}

/// Splits `url` into the URL tokio-postgres may parse and its TLS
/// parameters. The error says what is wrong in the user's terms.
pub(super) fn split(url: &str) -> Result<(String, PgTls), String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut kept = Vec::new();
    let (mut mode, mut root, mut cert, mut key) = (None, None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let Some((name, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        if !TAKEN.contains(&name.as_ref()) {
            kept.push(pair);
            continue;
        }
        let value = value.into_owned();
        match name.as_ref() {
            "sslmode" => {
                mode = Some(match value.as_str() {
                    "disable" => Mode::Disable,
                    "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    "allow" => {
                        return Err("sslmode=allow is not supported: use disable or prefer".into());
                    }
                    other => {
                        return Err(format!(
                            "unknown sslmode '{other}' (disable, prefer, require, verify-ca or verify-full)"
                        ));
                    }
                })
            }
            "sslrootcert" if value == "system" => root = Some(Root::System),
            "sslrootcert" => root = Some(Root::File(non_empty("sslrootcert", value)?)),
            "sslcert" => cert = Some(non_empty("sslcert", value)?),
            "sslkey" => key = Some(non_empty("sslkey", value)?),
            _ => {
                return Err(
                    "sslpassword is not supported: give sslkey an unencrypted key (mode 0600)"
                        .into(),
                );
            }
        }
    }
    let mode = mode.unwrap_or(Mode::Prefer);
    if root == Some(Root::System) && mode != Mode::VerifyFull {
        // libpq's rule: the public CAs vouch for names, so only a check of
        // the name makes them mean anything.
        return Err(format!(
            "sslrootcert=system needs sslmode=verify-full (not {})",
            mode.name()
        ));
    }
    if matches!(mode, Mode::VerifyCa | Mode::VerifyFull) && root.is_none() {
        return Err(format!(
            "sslmode={} needs sslrootcert: the CA file to verify the server with (or sslrootcert=system)",
            mode.name()
        ));
    }
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err("sslcert and sslkey go together".into()),
    };
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((
        rest,
        PgTls {
            mode,
            root,
            identity,
        },
    ))
}

fn non_empty(name: &str, value: String) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err(format!("{name} is empty"));
    }
    Ok(PathBuf::from(value))
}

impl PgTls {
    /// tokio-postgres's mode and the connector, with every file read.
    /// `host` names the server in the log line that says a connection is
    /// encrypted without being verified.
    pub(super) fn connector(&self, host: &str) -> Result<(SslMode, MakeRustlsConnect), TlsError> {
        // libpq verifies the chain whenever a root certificate is given,
        // whatever the mode; without one, prefer and require only encrypt.
        let roots = match &self.root {
            Some(Root::File(path)) => Some(tls::read_roots(path)?),
            Some(Root::System) => Some(tls::system_roots()?),
            None => None,
        };
        let verify = match (self.mode, roots) {
            (Mode::VerifyFull, Some(roots)) => Verify::Full(roots),
            (_, Some(roots)) => Verify::Chain(roots),
            (_, None) => {
                if self.mode != Mode::Disable {
                    tracing::warn!(
                        "PostgreSQL at {host}: sslmode={} encrypts{} but does not verify the \
                         server's certificate; sslmode=verify-full with sslrootcert verifies it",
                        self.mode.name(),
                        if self.mode == Mode::Prefer {
                            " when the server offers TLS (and falls back to none)"
                        } else {
                            ""
                        }
                    );
                }
                Verify::Nothing
            }
        };
        let identity = match &self.identity {
            Some((cert, key)) => Some((
                tls::read_certificates(cert, "client certificate")?,
                tls::read_key(key)?,
            )),
            None => None,
        };
        let config = tls::client_config("postgresql", verify, identity)?;
        let mode = match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        };
        Ok((mode, MakeRustlsConnect::new(config)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_tls_parameters_out_and_leaves_the_rest() {
        let (rest, tls) = split(
            "postgres://u:p@db/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fca%20dir%2Fca.pem&connect_timeout=3",
        )
        .expect("split");
        assert_eq!(
            rest,
            "postgres://u:p@db/app?application_name=x&connect_timeout=3"
        );
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root, Some(Root::File("/ca dir/ca.pem".into())));
        let (rest, tls) = split("postgres://db/app").expect("split");
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgres://db/app", Mode::Prefer)
        );
        let (rest, _) = split("postgres://db/app?sslmode=disable").expect("split");
        assert_eq!(rest, "postgres://db/app");
    }

    #[test]
    fn refuses_what_libpq_would_not_do_or_litelink_cannot() {
        for (url, says) in [
            ("postgres://db/a?sslmode=verify-ca", "needs sslrootcert"),
            ("postgres://db/a?sslmode=verify-full", "needs sslrootcert"),
            (
                "postgres://db/a?sslmode=require&sslrootcert=system",
                "verify-full",
            ),
            ("postgres://db/a?sslmode=allow", "allow"),
            ("postgres://db/a?sslmode=on", "unknown sslmode"),
            ("postgres://db/a?sslcert=/c.pem", "go together"),
            ("postgres://db/a?sslkey=/k.pem", "go together"),
            ("postgres://db/a?sslpassword=x", "sslpassword"),
            ("postgres://db/a?sslmode=verify-ca&sslrootcert=", "empty"),
        ] {
            let e = split(url).expect_err(url);
            assert!(e.contains(says), "{url}: {e}");
        }
        let (_, tls) =
            split("postgres://db/a?sslmode=verify-full&sslrootcert=system").expect("system");
        assert_eq!(tls.root, Some(Root::System));
    }
}
