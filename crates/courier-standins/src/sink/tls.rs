//! HTTPS for the API stand-in: a rustls server (HTTP/2 and HTTP/1.1 by ALPN),
//! optionally requiring client certificates (mTLS), whose certificate can be
//! swapped while it runs — so a test can serve an expired certificate, then
//! one for the wrong host name, then a good one, to the same Courier.
//!
//! Handshakes run in their own tasks (a slow or failing client never holds up
//! the accept loop); completed connections reach `axum::serve` through a
//! channel. Failed handshakes are counted, with the wall-clock time of the
//! first, so a test can tell when a client first tried and was refused.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The stand-in's TLS identity, as PEM: its certificate chain (leaf first) and
/// key, and, to require client certificates, the CAs that may sign them.
#[derive(Clone)]
pub struct SinkTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for SinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkTls")
            .field("mtls", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl SinkTls {
    /// Reads the files named by `courier sink --tls-cert/--tls-key/--tls-client-ca`.
    pub fn from_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<SinkTls, SinkTlsError> {
        let read = |field: &str, p: &Path| {
            std::fs::read(p)
                .map_err(|e| SinkTlsError(format!("{field} {}: cannot be read: {e}", p.display())))
        };
        Ok(SinkTls {
            cert_pem: read("--tls-cert", cert)?,
            key_pem: read("--tls-key", key)?,
            client_ca_pem: client_ca.map(|p| read("--tls-client-ca", p)).transpose()?,
        })
    }
}

/// A certificate and key that fail to load or do not match.
#[derive(Debug, thiserror::Error)]
#[error("sink TLS: {0}")]
pub struct SinkTlsError(String);

impl SinkTlsError {
    pub(super) fn not_tls() -> SinkTlsError {
        SinkTlsError("this stand-in serves plain HTTP; start it with start_tls".into())
    }
}

// The stand-in reads its PEM files with rustls' own parser, not Courier's
// (`courier::tls`, with its operator-facing diagnoses): it must not depend on
// the service it stands in for, and a test server needs no more than this.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Every certificate of a PEM text (at least one).
fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("holds no `BEGIN CERTIFICATE` section".into());
    }
    Ok(certs)
}

fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("is not a PEM private key: {e}"))
}

fn certified(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, SinkTlsError> {
    let certs: Vec<CertificateDer<'static>> =
        certs_from_pem(cert_pem).map_err(|e| SinkTlsError(format!("certificate {e}")))?;
    let key: PrivateKeyDer<'static> =
        key_from_pem(key_pem).map_err(|e| SinkTlsError(format!("key {e}")))?;
    let ck = CertifiedKey::from_der(certs, key, &provider())
        .map_err(|e| SinkTlsError(format!("certificate and key: {e}")))?;
    Ok(Arc::new(ck))
}

/// The server certificate, replaceable while the server runs (new handshakes
/// use the new one; established connections keep theirs).
#[derive(Debug)]
pub(super) struct SwappableCert(RwLock<Arc<CertifiedKey>>);

impl SwappableCert {
    pub(super) fn set(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), SinkTlsError> {
        let ck = certified(cert_pem, key_pem)?;
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = ck;
        Ok(())
    }
}

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// Handshake failures seen by the server.
#[derive(Debug, Default)]
pub(super) struct HandshakeStats {
    pub failures: AtomicU64,
    /// Unix time in ms of the first failure; 0 = none yet.
    pub(crate) first_failure_unix_ms: AtomicI64,
}

impl HandshakeStats {
    fn failed(&self) {
        self.failures.fetch_add(1, Relaxed);
        let now = super::now_ms();
        let _ = self
            .first_failure_unix_ms
            .compare_exchange(0, now, Relaxed, Relaxed);
    }
}

/// Builds the server side: the rustls config and the swappable certificate.
pub(super) fn server(tls: &SinkTls) -> Result<(TlsAcceptor, Arc<SwappableCert>), SinkTlsError> {
    let cert = Arc::new(SwappableCert(RwLock::new(certified(
        &tls.cert_pem,
        &tls.key_pem,
    )?)));
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SinkTlsError(e.to_string()))?;
    let builder = match &tls.client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs_from_pem(pem).map_err(|e| SinkTlsError(format!("client CA {e}")))? {
                roots
                    .add(c)
                    .map_err(|e| SinkTlsError(format!("client CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider())
                .build()
                .map_err(|e| SinkTlsError(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), cert))
}

/// Connections that completed their handshake, for `axum::serve`.
pub(super) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

/// A handshake that takes longer than this is abandoned (and counted as failed).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsListener {
    /// Accepts on `tcp` in a background task that ends when the listener is dropped.
    pub(super) fn spawn(
        tcp: TcpListener,
        acceptor: TlsAcceptor,
        stats: Arc<HandshakeStats>,
    ) -> std::io::Result<TlsListener> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(1024);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    _ = tx.closed() => return,
                    r = tcp.accept() => match r {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of file descriptors and the like: wait, as axum does.
                            tracing::debug!("sink: accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::trace!("sink: cannot set TCP_NODELAY: {e}");
                }
                let (acceptor, tx, stats) = (acceptor.clone(), tx.clone(), stats.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            stats.failed();
                            tracing::debug!(%peer, "sink: TLS handshake failed: {e}");
                        }
                        Err(_) => {
                            stats.failed();
                            tracing::debug!(%peer, "sink: TLS handshake timed out");
                        }
                    }
                });
            }
        });
        Ok(TlsListener { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task ended (it never does while this listener lives):
            // nothing will ever arrive.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
