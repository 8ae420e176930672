//! [`SinkHandle`]: starting a stand-in (HTTP or HTTPS), the router it serves,
//! and the handle's controls; [`run_standalone`] for `courier sink`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use anyhow::Context as _;
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::book::{write, Shared};
use super::control::{get_audit, get_behaviour, get_delivered, post_reset, put_behaviour};
use super::deliver::{post_event, routed_event};
use super::{batch, registry, tls, Audit, Behaviour, DeliveredCount, SinkTls, SinkTlsError};

/// A handle to a running stand-in. Cheap to clone; all clones control the same
/// server. Dropping handles does not stop the server: call [`SinkHandle::shutdown`].
#[derive(Clone)]
pub struct SinkHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stopped: watch::Receiver<bool>,
    /// The certificate of an HTTPS stand-in.
    cert: Option<Arc<tls::SwappableCert>>,
}

impl std::fmt::Debug for SinkHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl SinkHandle {
    /// Binds `listen` (port 0 picks a free port) and serves in a background task.
    /// Returns once the socket is bound, so the URL is immediately usable.
    pub async fn start(listen: SocketAddr, behaviour: Behaviour) -> std::io::Result<SinkHandle> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        // Answers are tiny; without NODELAY, Nagle plus delayed ACKs can stall a
        // keep-alive connection for tens of milliseconds.
        let listener = listener.tap_io(|tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::trace!("sink: cannot set TCP_NODELAY: {err}");
            }
        });
        let (shared, shutdown_rx) = Shared::new(behaviour);
        let stopped = serve(listener, addr, shared.clone(), shutdown_rx);
        Ok(SinkHandle {
            shared,
            addr,
            stopped,
            cert: None,
        })
    }

    /// Like [`SinkHandle::start`], serving HTTPS with `tls` (HTTP/2 or HTTP/1.1,
    /// as the client's ALPN offers; client certificates required if
    /// `tls.client_ca_pem` is set). A certificate that cannot be used is an
    /// `InvalidInput` error.
    pub async fn start_tls(
        listen: SocketAddr,
        behaviour: Behaviour,
        tls: &SinkTls,
    ) -> std::io::Result<SinkHandle> {
        let (acceptor, cert) = tls::server(tls)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let tcp = TcpListener::bind(listen).await?;
        let addr = tcp.local_addr()?;
        let (shared, shutdown_rx) = Shared::new(behaviour);
        let listener = tls::TlsListener::spawn(tcp, acceptor, shared.handshakes.clone())?;
        let stopped = serve(listener, addr, shared.clone(), shutdown_rx);
        Ok(SinkHandle {
            shared,
            addr,
            stopped,
            cert: Some(cert),
        })
    }

    /// Serves a new certificate and key (PEM) from the next handshake on. Only
    /// for a stand-in started with [`SinkHandle::start_tls`].
    pub fn set_tls_cert(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), SinkTlsError> {
        match &self.cert {
            Some(c) => c.set(cert_pem, key_pem),
            None => Err(SinkTlsError::not_tls()),
        }
    }
}

/// Runs the router on `listener` in a background task until `shutdown_rx` says
/// stop; the returned receiver turns `true` once the server has stopped.
fn serve<L>(
    listener: L,
    addr: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown_rx: watch::Receiver<bool>,
) -> watch::Receiver<bool>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let app = Router::new()
        .route("/events", post(post_event))
        .route(
            "/routes/{*rest}",
            post(routed_event).put(routed_event).patch(routed_event),
        )
        .route("/batch", post(batch::post_batch))
        .route("/batch/{*rest}", post(batch::post_batch))
        .route("/audit", get(get_audit))
        .route("/audit/delivered", get(get_delivered))
        .route("/behaviour", get(get_behaviour).put(put_behaviour))
        .route("/reset", post(post_reset))
        .route("/healthz", get(|| async { "ok" }))
        .route("/schemas/ids/{id}", get(registry::get_schema))
        .with_state(shared);
    let (stopped_tx, stopped) = watch::channel(false);
    tokio::spawn(async move {
        let signal = async move {
            // An error means the sender is gone, which cannot happen while the
            // router (holding `Shared`) is alive; treat it as a stop anyway.
            let _ = shutdown_rx.wait_for(|&stop| stop).await;
        };
        if let Err(err) = axum::serve(listener, app)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::error!("sink on {addr} failed: {err}");
        }
        let _ = stopped_tx.send(true);
    });
    stopped
}

impl SinkHandle {
    /// The bound address (with the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The delivery endpoint, `http://{addr}/events` (`https://` when serving TLS).
    pub fn url(&self) -> String {
        let scheme = if self.cert.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/events", self.addr)
    }

    /// Replaces the behaviour. Requests already sleeping their latency decide their
    /// answer with the new behaviour, so an outage starts immediately.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *write(&self.shared.behaviour) = Arc::new(behaviour);
    }

    /// Edits the behaviour in place (atomically with respect to other updates).
    pub fn update_behaviour(&self, f: impl FnOnce(&mut Behaviour)) {
        let mut current = write(&self.shared.behaviour);
        let mut next = Behaviour::clone(&current);
        f(&mut next);
        *current = Arc::new(next);
    }

    /// The current behaviour.
    pub fn behaviour(&self) -> Behaviour {
        Behaviour::clone(&self.shared.behaviour())
    }

    /// Whether to keep the last body per id in [`Audit::bodies_sample`] (default off:
    /// it costs a full JSON parse and memory per id).
    pub fn set_record_bodies(&self, on: bool) {
        self.shared.record_bodies.store(on, Relaxed);
    }

    /// Whether to keep the last request per id (method, path, headers, body) in
    /// [`Audit::requests_sample`] (default off).
    pub fn set_record_requests(&self, on: bool) {
        self.shared.record_requests.store(on, Relaxed);
    }

    /// A snapshot of the books.
    pub fn audit(&self) -> Audit {
        self.shared.audit()
    }

    /// The totals of the books (same as `GET /audit/delivered`).
    pub fn delivered(&self) -> DeliveredCount {
        self.shared.delivered()
    }

    /// Number of distinct ids answered 2xx. Lock-free, for polling in a loop.
    pub fn delivered_count(&self) -> u64 {
        self.shared.delivered_count.load(Relaxed)
    }

    /// Clears the audit (same as `POST /reset`). Requests in flight across a reset
    /// are not booked when they finish, so the new books stay self-consistent.
    pub fn reset(&self) {
        self.shared.reset(0);
    }

    /// Stops accepting connections and lets in-flight requests finish (graceful).
    /// Returns at once; await [`SinkHandle::stopped`] to wait for the end.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
    }

    /// Resolves once the server has stopped.
    pub async fn stopped(&self) {
        let mut stopped = self.stopped.clone();
        // An error means the server task is gone (it panicked): stopped as well.
        let _ = stopped.wait_for(|&done| done).await;
    }
}

/// Runs a stand-in until ctrl-c: the `courier sink` subcommand.
/// With `tls`, it serves HTTPS.
pub async fn run_standalone(
    listen: SocketAddr,
    behaviour: Behaviour,
    tls: Option<SinkTls>,
) -> anyhow::Result<()> {
    let sink = match &tls {
        None => SinkHandle::start(listen, behaviour).await,
        Some(t) => SinkHandle::start_tls(listen, behaviour, t).await,
    }
    .with_context(|| format!("starting the sink on {listen}"))?;
    tracing::info!(
        url = %sink.url(),
        "sink listening (GET /audit, GET|PUT /behaviour, POST /reset, GET /healthz)"
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    sink.shutdown();
    sink.stopped().await;
    let audit = sink.audit();
    tracing::info!(
        requests = audit.requests_total,
        delivered = audit.delivered.len(),
        duplicates = audit.duplicates(),
        failures = audit.failures_total,
        bad_requests = audit.bad_requests,
        "sink stopped"
    );
    Ok(())
}
