//! PEM files for TLS: certificates and private keys read from paths the config
//! names (never from the config itself), each failure naming the config field
//! and saying what is wrong with the file.
//!
//! Used by the API client (`delivery::http`), by `check-config` (through
//! `config::ApiConfig::check_tls_files`) and by the API stand-in's HTTPS server.
//! The crypto provider is passed explicitly ([`provider`]), never chosen by
//! rustls from its crate features, which panics once another dependency enables
//! a second provider.
//!
//! # TLS to the API
//!
//! `https://` URLs use rustls through reqwest (feature `rustls`, crypto provider aws-lc-rs).
//! `delivery::http::ApiClient::new` configures it from `[api.tls]`:
//!
//! - **Roots.** By default the platform's (rustls-platform-verifier, which on Linux reads the
//!   system store, e.g. `/etc/ssl/certs`; with an empty store the client cannot be built and
//!   Courier does not start). `ca_file` (a PEM bundle) *replaces* them by default
//!   (`ca_mode = "replace"`: only that CA may vouch for the API's name, the meaning of
//!   curl's `--cacert`, librdkafka's `ssl.ca.location` and libpq's `sslrootcert`), or is
//!   *added* to them (`ca_mode = "add"`).
//! - **mTLS.** `cert_file` (chain, leaf first) and `key_file` (PKCS#8, PKCS#1 or SEC1).
//!   Encrypted keys are refused with a hint: rustls cannot decrypt them, and a passphrase in
//!   the environment protects nothing a file readable only by Courier does not.
//! - **Files.** `crate::tls` reads and checks them — exists, readable, PEM with the expected
//!   sections, each certificate parses as X.509, the key's public half is the leaf's — with
//!   errors naming the field (`TlsFileError`). `Config::check_secrets` runs the same check,
//!   so `check-config` and the start of `run` fail on a bad file. The paths are in the
//!   config; the contents never are.
//! - **Plain HTTP** is refused by `ApiConfig::validate` for any host but loopback
//!   (`localhost`, `*.localhost`, 127.0.0.0/8, `::1`) unless `api.allow_plaintext = true`;
//!   TLS settings with an `http://` URL, and `http2_prior_knowledge` with `https://`, are
//!   refused too. An `https://` client is `https_only`.
//! - **HTTP/2.** Over TLS only with `api.http2 = true`, negotiated by ALPN (`h2`,
//!   `http/1.1`); otherwise ALPN offers `http/1.1` only. Off by default because hyper-util
//!   keeps one HTTP/2 connection per host, so the server's stream limit would cap the calls
//!   in flight (`docs/BENCHMARKS.md`). `http2_prior_knowledge` stays for h2c on `http://`.
//! - **The API stand-in** (courier-standins' `sink::tls`) serves HTTPS with `--tls-cert/--tls-key`
//!   (`--tls-client-ca` to require client certificates): a rustls server with ALPN, whose
//!   handshakes run in their own tasks and reach `axum::serve` through a channel, whose
//!   certificate can be swapped while it runs, and which counts failed handshakes (with the
//!   time of the first) in its audit.
//!
//! Crypto provider: the key check and the stand-in pass aws-lc-rs explicitly
//! (`crate::tls::provider`); reqwest takes rustls' process-wide default if one is installed
//! and its own aws-lc-rs otherwise. Neither relies on rustls choosing a default from its
//! crate features, which would panic if another dependency enabled a second provider
//! (`ring`).

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What is wrong with a TLS file, for the config field that names it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub(crate) struct TlsFileError {
    /// The config field (`api.tls.ca_file`) or command-line option that names the file.
    pub field: String,
    pub path: PathBuf,
    pub problem: String,
}

impl TlsFileError {
    fn new(field: &str, path: &Path, problem: impl Into<String>) -> TlsFileError {
        TlsFileError {
            field: field.to_string(),
            path: path.to_path_buf(),
            problem: problem.into(),
        }
    }
}

/// The crypto provider of every TLS configuration Courier builds (aws-lc-rs,
/// rustls' default).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read(field: &str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|e| {
        let problem = match e.kind() {
            std::io::ErrorKind::NotFound => "does not exist".to_string(),
            std::io::ErrorKind::PermissionDenied => {
                "cannot be read (permission denied)".to_string()
            }
            _ => format!("cannot be read: {e}"),
        };
        TlsFileError::new(field, path, problem)
    })
}

/// Every certificate in a PEM file (a CA bundle or a chain, leaf first).
pub(crate) fn load_certs(
    field: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let bytes = read(field, path)?;
    certs_from_pem(&bytes).map_err(|problem| TlsFileError::new(field, path, problem))
}

/// The certificates of a PEM document; an error says why there are none.
pub(crate) fn certs_from_pem(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not valid PEM: {}", pem_problem(&e)))?;
    if certs.is_empty() {
        return Err("is not a PEM certificate file (no `BEGIN CERTIFICATE` section)".into());
    }
    // A PEM section can hold anything base64: check each is an X.509 certificate.
    for (i, c) in certs.iter().enumerate() {
        if rustls::server::ParsedCertificate::try_from(c).is_err() {
            return Err(format!(
                "certificate {} is not a valid X.509 certificate",
                i + 1
            ));
        }
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1, unencrypted).
pub(crate) fn load_key(field: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    let bytes = read(field, path)?;
    key_from_pem(&bytes).map_err(|problem| TlsFileError::new(field, path, problem))
}

pub(crate) fn key_from_pem(bytes: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains("BEGIN ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(
            "is an encrypted private key, which Courier does not read: store it \
                    unencrypted (`openssl pkey -in KEY -out KEY.plain`) in a file only \
                    Courier can read, e.g. a mounted Kubernetes secret"
                .into(),
        );
    }
    match PrivateKeyDer::from_pem_slice(bytes) {
        Ok(k) => Ok(k),
        Err(pem::Error::NoItemsFound) => Err(
            "is not a PEM private key file (no `BEGIN PRIVATE KEY`, `BEGIN RSA PRIVATE KEY` \
             or `BEGIN EC PRIVATE KEY` section)"
                .into(),
        ),
        Err(e) => Err(format!("is not valid PEM: {}", pem_problem(&e))),
    }
}

fn pem_problem(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".into(),
        pem::Error::Base64Decode(_) => "a section is not valid base64".into(),
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => "no PEM section".into(),
        pem::Error::SectionTooLarge => "a section is larger than 256 MB".into(),
        _ => "unreadable".into(),
    }
}

/// A certificate chain and its private key, checked to belong together: the
/// key's public half must be the leaf certificate's.
pub(crate) fn certified_key(
    cert_field: &str,
    cert_path: &Path,
    key_field: &str,
    key_path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsFileError> {
    let certs = load_certs(cert_field, cert_path)?;
    let key = load_key(key_field, key_path)?;
    check_pair(&certs, &key).map_err(|problem| TlsFileError::new(key_field, key_path, problem))?;
    Ok((certs, key))
}

/// Whether `key` is the private key of the first certificate in `certs`.
pub(crate) fn check_pair(
    certs: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), String> {
    let signing = provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| format!("is not a usable private key: {e}"))?;
    let ck = rustls::sign::CertifiedKey::new(certs.to_vec(), signing);
    match ck.keys_match() {
        Ok(()) => Ok(()),
        // The provider cannot derive the public key: nothing to compare.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err("does not belong to the certificate (their public keys differ)".into())
        }
        Err(e) => Err(format!("cannot be checked against the certificate: {e}")),
    }
}

/// The files of a TLS client, loaded and checked: extra or replacement roots,
/// and a client identity (certificate chain and key) for mTLS.
#[derive(Debug, Default)]
pub(crate) struct ClientFiles {
    pub roots: Vec<CertificateDer<'static>>,
    pub identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

impl ClientFiles {
    /// Reads `<section>.ca_file`, `<section>.cert_file` and `<section>.key_file`
    /// (whichever are set; cert and key go together, which config validation
    /// checks). Errors name the field.
    pub(crate) fn load(
        section: &str,
        ca_file: Option<&Path>,
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
    ) -> Result<ClientFiles, TlsFileError> {
        let roots = match ca_file {
            Some(p) => load_certs(&format!("{section}.ca_file"), p)?,
            None => Vec::new(),
        };
        let identity = match (cert_file, key_file) {
            (Some(c), Some(k)) => Some(certified_key(
                &format!("{section}.cert_file"),
                c,
                &format!("{section}.key_file"),
                k,
            )?),
            _ => None,
        };
        Ok(ClientFiles { roots, identity })
    }

    /// The identity as one PEM document (chain, then key), re-encoded from
    /// what was parsed, so only the sections that were checked are in it.
    pub(crate) fn identity_pem(&self) -> Option<Vec<u8>> {
        let (certs, key) = self.identity.as_ref()?;
        let mut out = String::new();
        for c in certs {
            out.push_str(&pem_section("CERTIFICATE", c.as_ref()));
        }
        let label = match key {
            PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
            PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
            _ => "PRIVATE KEY",
        };
        out.push_str(&pem_section(label, key.secret_der()));
        Some(out.into_bytes())
    }
}

fn pem_section(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(chunk));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_pem_is_refused_with_a_reason() {
        assert!(certs_from_pem(b"hello")
            .unwrap_err()
            .contains("BEGIN CERTIFICATE"));
        assert!(key_from_pem(b"hello")
            .unwrap_err()
            .contains("BEGIN PRIVATE KEY"));
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(certs_from_pem(garbage)
            .unwrap_err()
            .contains("not a valid X.509"));
        let unterminated = b"-----BEGIN CERTIFICATE-----\nAAAA\n";
        assert!(certs_from_pem(unterminated)
            .unwrap_err()
            .contains("END line"));
        let encrypted =
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(key_from_pem(encrypted).unwrap_err().contains("encrypted"));
    }

    #[test]
    fn a_missing_file_names_its_field() {
        let e = load_certs("api.tls.ca_file", Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert_eq!(e.field, "api.tls.ca_file");
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
