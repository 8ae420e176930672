//! TLS to the stores: Redis (`rediss://`) and PostgreSQL (`sslmode` in
//! `enrichment.url`), with rustls and its aws-lc-rs provider (chosen explicitly,
//! so the build never depends on a process-wide default provider).
//!
//! Trust: a CA file (`redis.tls_ca_file`, `enrichment.tls_ca_file`, a PEM
//! bundle) *replaces* the platform's roots — a managed store's CA, or a private
//! one, is then the only one trusted; without it the platform's roots are used.
//! Kafka's TLS is librdkafka's own (OpenSSL), configured in `[kafka.properties]`.
//!
//! # Redis and PostgreSQL in detail
//!
//! rustls with the aws-lc-rs provider, chosen
//! explicitly. A CA file (`*.tls_ca_file`) replaces the platform's roots. `rediss://`
//! verifies chain and host name; fred parses the URL as plain and gets Courier's TLS
//! settings, so a TLS URL cannot connect without TLS; plain `redis://` with a password to a
//! host other than loopback is refused unless `redis.allow_plaintext`. PostgreSQL follows
//! libpq's `sslmode`, except its default: without one, `verify-full` (only it stops a man in
//! the middle), `prefer` kept for loopback and Unix sockets (nothing crosses a network)
//! (tokio-postgres knows only disable/prefer/require: Courier strips the mode from the URL
//! and applies it, with a certificate verifier per level). `app::start` opens one
//! connection first: a TLS failure (the server has no TLS under `require`, an untrusted
//! certificate, a wrong host name) stops the start with the reason; an unreachable
//! database does not (its lookups are transient failures). A Redis that cannot be reached
//! (TLS included) leaves the verdict to the local breaker and logs why.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreTlsError {
    #[error("cannot read CA file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("CA file {} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("CA file {}: {reason}", path.display())]
    BadCertificate { path: PathBuf, reason: String },
    #[error("no trusted root certificates: the platform has none usable, give a CA file")]
    NoRoots,
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("TLS setup: {0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Chain to a trusted root and the host name (`rediss://`, `verify-full`).
    Full,
    /// Chain to a trusted root, any host name (`verify-ca`; `require` or
    /// `prefer` with a CA file, as libpq does).
    Chain,
    /// Encrypted, certificate not checked (`require` and `prefer` without a CA
    /// file, as libpq does): protects against eavesdropping only.
    Nothing,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The certificates of a PEM bundle; at least one, each usable as a root.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreTlsError> {
    let bytes = std::fs::read(path).map_err(|source| StoreTlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreTlsError::BadCertificate {
            path: path.to_path_buf(),
            reason: format!("not PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(StoreTlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    let mut roots = RootCertStore::empty();
    for c in &certs {
        roots
            .add(c.clone())
            .map_err(|e| StoreTlsError::BadCertificate {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
    }
    Ok(certs)
}

/// The CA file's certificates, or the platform's roots.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, StoreTlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for c in read_ca_file(path)? {
                roots.add(c)?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    if roots.is_empty() {
        return Err(StoreTlsError::NoRoots);
    }
    Ok(roots)
}

/// A rustls client configuration for a store connection.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    verify: Verify,
) -> Result<rustls::ClientConfig, StoreTlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let config = match verify {
        Verify::Full => builder
            .with_root_certificates(roots(ca_file)?)
            .with_no_client_auth(),
        Verify::Chain => {
            let inner =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca_file)?), provider)
                    .build()?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
                .with_no_client_auth()
        }
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// Verifies the chain, accepts any host name (`sslmode=verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (libpq's `sslmode=require` without a root file);
/// the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// tokio-postgres's TLS hook over rustls (what `NoTls` stands in for): one
/// connector for the pool, a handshake per connection with the host name of
/// the URL as the server name.
#[derive(Clone)]
pub(crate) struct PgTls(tokio_rustls::TlsConnector);

impl PgTls {
    pub(crate) fn new(config: rustls::ClientConfig) -> PgTls {
        PgTls(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

impl<S> tokio_postgres::tls::MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<PgTlsConnect, Self::Error> {
        Ok(PgTlsConnect {
            connector: self.0.clone(),
            name: ServerName::try_from(host.to_string())?,
        })
    }
}

pub(crate) struct PgTlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl<S> tokio_postgres::tls::TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            self.connector
                .connect(self.name, stream)
                .await
                .map(PgTlsStream)
        })
    }
}

pub(crate) struct PgTlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for PgTlsStream<S> {
    /// No `tls-server-end-point` binding: SCRAM then runs without channel
    /// binding (`channel_binding=prefer`, tokio-postgres's default).
    fn channel_binding(&self) -> tokio_postgres::tls::ChannelBinding {
        tokio_postgres::tls::ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, content: &[u8]) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("courier-store-tls-{}-{name}", std::process::id()));
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn ca_file_must_hold_a_pem_certificate() {
        let missing = Path::new("/nonexistent/ca.pem");
        assert!(matches!(
            read_ca_file(missing),
            Err(StoreTlsError::Read { .. })
        ));
        let empty = temp("empty.pem", b"no certificate here\n");
        assert!(matches!(
            read_ca_file(&empty),
            Err(StoreTlsError::NoCertificate { .. })
        ));
        let garbage = temp(
            "garbage.pem",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        assert!(matches!(
            read_ca_file(&garbage),
            Err(StoreTlsError::BadCertificate { .. })
        ));
        for p in [empty, garbage] {
            let _ = std::fs::remove_file(p);
        }
    }
}
