//! TLS for the connections litelink makes (PostgreSQL, Valkey): rustls on
//! ring, never OpenSSL. Certificate and key files are read once, when a
//! connection's settings are built, so a missing or malformed file stops
//! the start with its path instead of failing the first request.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {path}: no PEM certificate in it")]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("{what} {path}: {message}")]
    BadCertificate {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("private key {0}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)")]
    BadKey(PathBuf),
    #[error("private key {0}: readable by group or others; chmod 600 it")]
    KeyReadable(PathBuf),
    #[error("the system's CA certificates: {0}")]
    System(String),
    #[error("client certificate and key: {0}")]
    Identity(String),
}

/// The process's one crypto provider. redis-rs builds its own rustls
/// configurations from the process default, so it is installed here too;
/// a second install (another caller first) is harmless.
// ring, not aws-lc-rs: no C toolchain beyond cc, and a binary that stays
// within the image's size budget. The cost is no post-quantum key
// exchange, which is why rustls marks it deprecated.
#[allow(deprecated)]
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Every certificate in the PEM file at `path`.
pub(crate) fn read_certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            what,
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The trust anchors of a PEM file of CA certificates.
pub(crate) fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path, "CA file")? {
        roots.add(cert).map_err(|e| TlsError::BadCertificate {
            what: "CA file",
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The private key in the PEM file at `path`.
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_key_pem(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::BadKey(path.to_owned()))
}

/// The PEM text of the private key at `path`, checked to hold a key. As
/// libpq does, a key that group or others may read is refused: it is a
/// secret.
pub(crate) fn read_key_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|source| TlsError::Read {
        what: "private key",
        path: path.to_owned(),
        source,
    })?;
    // libpq's rule: 0600 or less, or 0640 or less when root owns it (a
    // key shared with a group through a root-owned file).
    let loose = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.mode() & loose != 0 {
        return Err(TlsError::KeyReadable(path.to_owned()));
    }
    let pem = read(path, "private key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::BadKey(path.to_owned()))?;
    Ok(pem)
}

/// The PEM text of the certificates at `path`, checked to hold some.
pub(crate) fn read_certificates_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    read_certificates(path, what)?;
    read(path, what)
}

/// The CA certificates of the system (`/etc/ssl/certs` and the like).
pub(crate) fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(TlsError::System(why));
    }
    Ok(roots)
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// How much of the server's certificate is checked.
pub(crate) enum Verify {
    /// Nothing: the connection is encrypted, but anyone on the path could
    /// be the server. Only where the user asked for it (`sslmode=require`).
    Nothing,
    /// The chain up to these roots, not the name (`sslmode=verify-ca`).
    Chain(RootCertStore),
    /// The chain and the host name (`verify-full`, `rediss://`).
    Full(RootCertStore),
}

/// A client configuration for connections to `peer` (named in the log
/// line that says why a certificate was refused), with a client
/// certificate when one is given.
pub(crate) fn client_config(
    peer: &'static str,
    verify: Verify,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(Unchecked(provider.signature_verification_algorithms)),
        Verify::Chain(roots) => Arc::new(Checked::new(peer, roots, false, &provider)?),
        Verify::Full(roots) => Arc::new(Checked::new(peer, roots, true, &provider)?),
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Identity(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| TlsError::Identity(e.to_string())),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// webpki's verifier, which logs why it refused a certificate (the
/// connection's own error may reach no log: a pool retries it), and which
/// under `verify-ca` accepts a certificate for another name.
struct Checked {
    peer: &'static str,
    inner: Arc<WebPkiServerVerifier>,
    check_name: bool,
}

impl Checked {
    fn new(
        peer: &'static str,
        roots: RootCertStore,
        check_name: bool,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let inner =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
                .build()
                .map_err(|e| TlsError::System(e.to_string()))?;
        Ok(Self {
            peer,
            inner,
            check_name,
        })
    }
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("peer", &self.peer)
            .field("check_name", &self.check_name)
            .finish()
    }
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match verdict {
            // webpki checks the name only once the chain is good, so a
            // name error means the chain verified.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            Err(e) => {
                tracing::error!(
                    peer = self.peer,
                    server = %server_name.to_str(),
                    "refused the server's TLS certificate: {e}"
                );
                Err(e)
            }
            ok => ok,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Takes any certificate, but still checks that the server holds its key
/// (the handshake's signatures): encryption against a passive listener.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
