//! The API stand-in ("sink"): a real HTTP server that plays the flaky external API
//! Courier delivers events to.
//!
//! Integration tests, the demo, chaos drills and the benchmarks all point Courier at
//! it, so it has two jobs:
//!
//! 1. **Misbehave on demand.** A [`Behaviour`] adds latency, takes the whole API down,
//!    fails chosen event ids a number of times, or fails a random fraction of requests.
//!    It can be swapped at any moment, from Rust ([`SinkHandle::set_behaviour`]) or
//!    over HTTP (`PUT /behaviour`), which is how a drill breaks the API under load.
//! 2. **Keep exact books.** Every delivery attempt and every answer is recorded in an
//!    [`Audit`], so a test can prove "every event delivered, none lost" and count the
//!    duplicates that at-least-once delivery allows.
//!
//! HTTP surface:
//!
//! | route             | purpose                                               |
//! |-------------------|-------------------------------------------------------|
//! | `POST /events`    | the delivery endpoint (CloudEvent JSON with a string `id`; header `Idempotency-Key` must equal it) |
//! | `POST /batch`, `POST /batch/*` | the batch endpoint (`[api.batch]`): many events per request, per-item results; see [`batch`] |
//! | `GET /audit`      | the [`Audit`] as JSON                                 |
//! | `GET /audit/delivered` | the [`DeliveredCount`] as JSON: cheap to poll in a loop (no per-id maps) |
//! | `GET /behaviour`  | the current [`Behaviour`] as JSON                     |
//! | `PUT /behaviour`  | replace the [`Behaviour`] (JSON; missing fields take their defaults) |
//! | `POST /reset`     | clear the audit; `?expect=N` reserves room for N events in the books (a bench's run size), so they do not grow, and stall every request while they do, mid-run |
//! | `POST\|PUT\|PATCH /routes/*` | a mapped delivery (`[[api.routes]]`): the id is the `Idempotency-Key`, any body |
//! | `GET /healthz`    | liveness                                              |
//! | `GET /schemas/ids/{id}` | a schema registry's read of a schema by id ([`Behaviour::schemas`]; the demo's Avro input) |
//!
//! Per `POST /events` the order is: validate (400 without latency if malformed),
//! record the attempt, sleep the simulated latency, then decide the answer
//! (`down_status` → `fail_ids` rule → `fail_rate` → 200) and book it.
//!
//! With [`SinkHandle::start_tls`] (`courier sink --tls-cert/--tls-key`) it serves
//! HTTPS instead, HTTP/2 or HTTP/1.1 by ALPN, optionally requiring client
//! certificates (`--tls-client-ca`); see [`tls`].
//!
//! It must stay fast (tens of thousands of requests/s on loopback) so that the
//! benchmarks measure Courier, not the stand-in. Hence: one short-held mutex for the
//! bookkeeping, the behaviour shared as an `Arc` snapshot (never cloned per request),
//! atomics for the concurrency gauge, HTTP/1.1 keep-alive and `TCP_NODELAY`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use axum::{Json, Router};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub mod batch;
pub mod faults;
mod introspect;
mod order;
mod probe;
mod registry;
mod tls;
pub use tls::{SinkTls, SinkTlsError};

/// Header that must carry the event id on every delivery.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How the stand-in misbehaves. Every field has a default (a healthy, instant API),
/// so a JSON document only needs the fields it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Behaviour {
    /// Added to every delivery before answering.
    pub latency_ms: u64,
    /// Uniform extra latency in `0..=latency_jitter_ms`.
    pub latency_jitter_ms: u64,
    /// When set, the API is "down": every delivery is answered with this status.
    pub down_status: Option<u16>,
    /// Scripted failures per event id. An id with a rule is governed by the rule
    /// alone: `fail_rate` never applies to it.
    pub fail_ids: HashMap<String, FailRule>,
    /// Probability (0..=1) of answering `fail_status` to a delivery not covered above.
    pub fail_rate: f64,
    /// Status used by `fail_rate`.
    pub fail_status: u16,
    /// When set, a delivery without `Authorization: Bearer <token>` gets 401
    /// (credentials revoked, or never sent).
    pub required_token: Option<String>,
    /// When set (and `required_token` is not), a delivery's bearer token must
    /// be one this OAuth2 introspection endpoint (RFC 7662) says is active,
    /// and not past its `exp`: 401 otherwise.
    pub introspect_url: Option<String>,
    /// The body of every non-2xx answer (e.g. an API's JSON error); none when unset.
    pub fail_body: Option<String>,
    /// Hidden capacity: at most this many deliveries handled at once; one
    /// above it is answered 429 at once (no latency, no `Retry-After`). A
    /// batch request takes one slot.
    pub capacity: Option<u64>,
    /// Batch endpoint: a batch body (more than one event) larger than this many
    /// bytes is answered 413 as a whole (counted in `Audit::batch_refused_413`).
    /// A single event is never refused for its size.
    pub batch_max_bytes: Option<usize>,
    /// Batch endpoint: a request holding any of these ids is answered 400 as a
    /// whole, a request of that one event alone included (counted in
    /// `Audit::batch_refused_whole`); nothing in it is delivered.
    pub batch_poison_ids: HashSet<String>,
    /// Batch endpoint: answer a batch with a plain status and no per-item
    /// results: 200 when every item succeeds, else the first failing item's
    /// status for the whole batch (and every item booked as failed with it).
    pub batch_whole_status: bool,
    /// Batch endpoint: where the items are in a templated batch (a JSON object
    /// body), as a JSON pointer; default `"/events"` (`{"events": [...]}`).
    pub batch_items_pointer: String,
    /// Batch endpoint: list the per-item results in reverse order, so that only
    /// matching by id (`api.batch.result_id = "/id"`) reads them right.
    pub batch_results_reversed: bool,
    /// Batch endpoint: answers that say less than they seem to (an HTML 200,
    /// a body cut mid-way, conflicting or missing per-item results); see
    /// [`faults`].
    pub batch_faults: faults::BatchFaults,
    /// Schemas served at `GET /schemas/ids/{id}` (the Confluent registry API's
    /// one read Courier makes): the demo's stand-in registry; see [`registry`].
    pub schemas: BTreeMap<u32, String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            latency_ms: 0,
            latency_jitter_ms: 0,
            down_status: None,
            fail_ids: HashMap::new(),
            fail_rate: 0.0,
            fail_status: 503,
            required_token: None,
            introspect_url: None,
            fail_body: None,
            capacity: None,
            batch_max_bytes: None,
            batch_poison_ids: HashSet::new(),
            batch_whole_status: false,
            batch_items_pointer: "/events".into(),
            batch_results_reversed: false,
            batch_faults: faults::BatchFaults::default(),
            schemas: BTreeMap::new(),
        }
    }
}

/// A scripted failure for one event id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailRule {
    /// Status to answer while the rule fails.
    pub status: u16,
    /// `None`: fail forever. `Some(n)`: the first `n` attempts for the id fail, later
    /// ones succeed. Attempts are counted by the audit, so every attempt counts
    /// (including ones answered by `down_status`), and `reset` starts the count over.
    pub times: Option<u32>,
    /// Sent as `Retry-After` (seconds) on the failures of this rule.
    pub retry_after_s: Option<u64>,
}

impl Default for FailRule {
    fn default() -> Self {
        FailRule {
            status: 503,
            times: None,
            retry_after_s: None,
        }
    }
}

/// A snapshot of the stand-in's books since start (or the last reset).
///
/// Every delivery request gets exactly one answer, so once the server is quiet
/// `requests_total == Σ delivered + failures_total` and
/// `requests_total == Σ attempts + bad_requests`. (A client that hangs up during
/// the simulated latency leaves an attempt without an answer.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Audit {
    /// Event id → number of 2xx answers for it (> 1 means duplicate deliveries).
    pub delivered: HashMap<String, u32>,
    /// Event id → number of well-formed delivery requests for it, whatever the answer.
    pub attempts: HashMap<String, u32>,
    /// Event ids in the order they were answered 2xx (duplicates appear again).
    pub order: Vec<String>,
    /// All delivery requests, including bad ones; each event of a batch
    /// request counts as one (`batch_requests` counts the requests).
    pub requests_total: u64,
    /// Non-2xx answers sent, including the 400s counted in `bad_requests`.
    pub failures_total: u64,
    /// Requests without a JSON object body with a string `id`, or whose
    /// `Idempotency-Key` header is missing or differs from that id; answered 400.
    pub bad_requests: u64,
    /// Peak number of delivery requests being handled at once.
    pub max_concurrent: u64,
    /// Requests received in each whole second since start (index = second);
    /// each event of a batch request counts as one.
    pub per_second: Vec<u64>,
    /// The same, for requests marked `Courier-Redelivery` (DLQ drain), so a test
    /// can measure the drain rate apart from the main path.
    #[serde(default)]
    pub per_second_redelivery: Vec<u64>,
    /// Last body received per id; only filled while
    /// [`SinkHandle::set_record_bodies`] is on.
    pub bodies_sample: HashMap<String, Value>,
    /// Requests answered 429 for being above `Behaviour::capacity`, per whole
    /// second (same index as `per_second`).
    #[serde(default)]
    pub per_second_over_capacity: Vec<u64>,
    /// Delivery requests that arrived over HTTP/2 (h2c or negotiated by ALPN).
    #[serde(default)]
    pub http2_requests: u64,
    /// TLS handshakes that failed (the client refused the certificate, or sent
    /// none when one is required, ...). Not cleared by a reset.
    #[serde(default)]
    pub tls_handshake_failures: u64,
    /// Unix time in ms of the first failed TLS handshake; 0 if none.
    #[serde(default)]
    pub tls_first_failure_unix_ms: i64,
    /// Last request per id (method, path, headers); only filled while
    /// [`SinkHandle::set_record_requests`] is on.
    #[serde(default)]
    pub requests_sample: HashMap<String, RequestSample>,
    /// Well-formed requests to the batch endpoint (a single event sent there
    /// included), whatever the answer: bisection's extra requests show here.
    pub batch_requests: u64,
    /// Events in those requests (Σ of their sizes).
    pub batch_items: u64,
    /// Those requests that carried a single event (not a batch body).
    pub batch_singles: u64,
    /// The most events one batch request carried.
    pub batch_max_items: u64,
    /// Batch requests answered 413 for `Behaviour::batch_max_bytes`.
    pub batch_refused_413: u64,
    /// Batch requests answered 400 as a whole for a `Behaviour::batch_poison_ids`
    /// id (a lone poison event included).
    pub batch_refused_whole: u64,
    /// Batch bodies whose `Idempotency-Key` is not the one Courier derives from
    /// their item ids (`core::batch::idempotency_key`); still answered.
    pub batch_key_mismatches: u64,
    /// Batch bodies sent without an `Idempotency-Key` (a generic batching
    /// client's JSON array): booked per item like the others.
    #[serde(default)]
    pub batch_keyless: u64,
    /// Batch items whose key an earlier item of the same request has (the
    /// load generator's `data.key`): runs of `ordered = true`; 0 without it in
    /// `key` mode. Redeliveries left out.
    #[serde(default)]
    pub batch_same_key_items: u64,
    /// Batch-endpoint requests received in each whole second (same index as
    /// `per_second`, which counts events).
    pub per_second_batches: Vec<u64>,
    /// First deliveries whose per-key order was checked: events carrying the
    /// load generator's `data.key` (or `subject`) and `data.seq`, DLQ
    /// redeliveries left out.
    pub order_checked: u64,
    /// Of those, how many came with a `seq` below one already delivered for
    /// their key (per-key order broken).
    pub order_violations: u64,
    /// The first few violations, described (`key: id (seq s) after seq t`).
    pub order_violation_examples: Vec<String>,
    /// Keys whose events' *last* acceptances are out of `seq` order (every
    /// 2xx counted, duplicates too; redeliveries left out): an API applying
    /// each accepted item, last write wins, would not end in produced order.
    /// The promise of `ordered = true` (`sink::order`).
    #[serde(default)]
    pub order_last_write_violations: u64,
    #[serde(default)]
    pub order_last_write_examples: Vec<String>,
}

/// How much was delivered since the last reset (`GET /audit/delivered`): the
/// totals of the [`Audit`] without its per-id maps, for polling while a
/// backlog drains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveredCount {
    /// Distinct ids answered 2xx.
    pub distinct: u64,
    /// 2xx answers, duplicates included (`distinct` + the duplicates).
    pub total: u64,
    /// Delivery requests, each event of a batch counting as one (`Audit::requests_total`).
    pub requests_total: u64,
    /// Requests to the batch endpoint (`Audit::batch_requests`).
    pub batch_requests: u64,
    /// Non-2xx answers (`Audit::failures_total`).
    pub failures_total: u64,
}

/// What a request looked like: for tests of request mapping and forwarded headers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSample {
    pub method: String,
    /// Path and query, as received (percent-encoding kept).
    pub path: String,
    /// Header names lowercased; `authorization` left out.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body, as text (lossy).
    pub body: String,
}

impl Audit {
    /// Extra 2xx answers beyond the first, summed over all ids.
    pub fn duplicates(&self) -> u64 {
        self.delivered
            .values()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum()
    }

    /// The busiest whole second, in requests.
    pub fn peak_rps(&self) -> u64 {
        self.per_second.iter().copied().max().unwrap_or(0)
    }

    /// The busiest whole second of DLQ redeliveries.
    pub fn peak_redelivery_rps(&self) -> u64 {
        self.per_second_redelivery
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

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

impl Shared {
    fn new(behaviour: Behaviour) -> (Arc<Shared>, watch::Receiver<bool>) {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            behaviour: RwLock::new(Arc::new(behaviour)),
            book: Mutex::new(Book::new(0, 0)),
            delivered_count: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            capacity_used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            record_bodies: AtomicBool::new(false),
            record_requests: AtomicBool::new(false),
            http2_requests: AtomicU64::new(0),
            handshakes: Arc::default(),
            shutdown,
            introspector: introspect::Introspector::default(),
        });
        (shared, shutdown_rx)
    }
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

/// State shared by the handle and the request handlers.
struct Shared {
    /// Swapped whole; a request takes an `Arc` snapshot, never a deep clone.
    behaviour: RwLock<Arc<Behaviour>>,
    /// All bookkeeping, behind one mutex held only for a few map operations.
    book: Mutex<Book>,
    /// Distinct ids answered 2xx; written under the `book` lock, read lock-free.
    delivered_count: AtomicU64,
    in_flight: AtomicU64,
    /// Deliveries holding a slot of `Behaviour::capacity`.
    capacity_used: AtomicU64,
    peak: AtomicU64,
    record_bodies: AtomicBool,
    record_requests: AtomicBool,
    http2_requests: AtomicU64,
    handshakes: Arc<tls::HandshakeStats>,
    shutdown: watch::Sender<bool>,
    introspector: introspect::Introspector,
}

/// The mutable part of the audit.
struct Book {
    /// Bumped by every reset; requests remember the generation they were recorded in.
    generation: u64,
    /// Start of `per_second[0]`.
    epoch: Instant,
    delivered: BookMap<u32>,
    attempts: BookMap<u32>,
    order: Vec<String>,
    requests_total: u64,
    failures_total: u64,
    bad_requests: u64,
    per_second: Vec<u64>,
    per_second_redelivery: Vec<u64>,
    per_second_over_capacity: Vec<u64>,
    bodies_sample: HashMap<String, Value>,
    requests_sample: HashMap<String, RequestSample>,
    key_order: order::KeyOrder,
    batch: batch::BatchBook,
}

/// A map of the books keyed by event id or key. The ids are the stand-in's
/// own clients' (tests and benches), so a fast hash (foldhash) is safe here;
/// every request books several entries under the one lock.
pub(super) type BookMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The most events a reset may reserve room for (`POST /reset?expect=`).
const MAX_EXPECT: usize = 50_000_000;

impl Book {
    /// Fresh books with room for `expect` events: a map that grows rehashes
    /// every entry under the books' lock, which stalls every request for as
    /// long (tens of ms at 100,000 ids: it showed as a pause in the benches
    /// at 57,344 and 114,688 deliveries, where the id maps grow).
    fn new(generation: u64, expect: usize) -> Book {
        Book {
            generation,
            epoch: Instant::now(),
            delivered: BookMap::with_capacity_and_hasher(expect, Default::default()),
            attempts: BookMap::with_capacity_and_hasher(expect, Default::default()),
            order: Vec::with_capacity(expect),
            requests_total: 0,
            failures_total: 0,
            bad_requests: 0,
            per_second: Vec::new(),
            per_second_redelivery: Vec::new(),
            per_second_over_capacity: Vec::new(),
            bodies_sample: HashMap::new(),
            requests_sample: HashMap::new(),
            key_order: order::KeyOrder::with_capacity(expect),
            batch: batch::BatchBook::default(),
        }
    }

    /// Books a well-formed delivery of `id`; returns its attempt number (1-based).
    fn attempt(&mut self, id: &str, received: Instant, body: Option<Value>) -> u32 {
        self.count_request(received);
        let attempt = match self.attempts.get_mut(id) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                self.attempts.insert(id.to_owned(), 1);
                1
            }
        };
        if let Some(body) = body {
            self.bodies_sample.insert(id.to_owned(), body);
        }
        attempt
    }

    /// Books the answer to a delivery of `id`, checking its key's order at its
    /// first delivery (`mark`: none for events without one and redeliveries).
    /// True if it is the id's first 2xx.
    fn answer(&mut self, id: String, status: StatusCode, mark: Option<&order::Mark>) -> bool {
        if !status.is_success() {
            self.failures_total += 1;
            return false;
        }
        if let Some(mark) = mark {
            self.key_order.accepted(mark);
        }
        let first = match self.delivered.get_mut(&id) {
            Some(n) => {
                *n += 1;
                false
            }
            None => {
                if let Some(mark) = mark {
                    self.key_order.first_delivery(&id, mark);
                }
                self.delivered.insert(id.clone(), 1);
                true
            }
        };
        self.order.push(id);
        first
    }

    fn count_redelivery(&mut self, received: Instant) {
        let second = received.saturating_duration_since(self.epoch).as_secs() as usize;
        if self.per_second_redelivery.len() <= second {
            self.per_second_redelivery.resize(second + 1, 0);
        }
        self.per_second_redelivery[second] += 1;
    }

    fn count_request(&mut self, received: Instant) {
        self.requests_total += 1;
        let second = received.saturating_duration_since(self.epoch).as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
    }
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, Book> {
        // Nothing panics while holding the lock; if something ever did, the books
        // are still the best information there is.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn behaviour(&self) -> Arc<Behaviour> {
        self.behaviour
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn audit(&self) -> Audit {
        let book = self.book();
        let last_writes = book.key_order.last_write_violations();
        Audit {
            delivered: book
                .delivered
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            attempts: book.attempts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            order: book.order.clone(),
            requests_total: book.requests_total,
            failures_total: book.failures_total,
            bad_requests: book.bad_requests,
            max_concurrent: self.peak.load(Relaxed),
            per_second: book.per_second.clone(),
            per_second_redelivery: book.per_second_redelivery.clone(),
            per_second_over_capacity: book.per_second_over_capacity.clone(),
            bodies_sample: book.bodies_sample.clone(),
            http2_requests: self.http2_requests.load(Relaxed),
            tls_handshake_failures: self.handshakes.failures.load(Relaxed),
            tls_first_failure_unix_ms: self.handshakes.first_failure_unix_ms.load(Relaxed),
            requests_sample: book.requests_sample.clone(),
            batch_requests: book.batch.requests,
            batch_items: book.batch.items,
            batch_singles: book.batch.singles,
            batch_max_items: book.batch.max_items,
            batch_refused_413: book.batch.refused_413,
            batch_refused_whole: book.batch.refused_whole,
            batch_key_mismatches: book.batch.key_mismatches,
            batch_keyless: book.batch.keyless,
            batch_same_key_items: book.batch.same_key_items,
            per_second_batches: book.batch.per_second.clone(),
            order_checked: book.key_order.checked,
            order_violations: book.key_order.violations,
            order_violation_examples: book.key_order.examples.clone(),
            order_last_write_violations: last_writes.0,
            order_last_write_examples: last_writes.1,
        }
    }

    fn delivered(&self) -> DeliveredCount {
        let book = self.book();
        DeliveredCount {
            distinct: book.delivered.len() as u64,
            total: book.order.len() as u64,
            requests_total: book.requests_total,
            batch_requests: book.batch.requests,
            failures_total: book.failures_total,
        }
    }

    /// Clears the books, with room for `expect` events ([`Book::new`]).
    fn reset(&self, expect: usize) {
        let mut book = self.book();
        *book = Book::new(book.generation + 1, expect);
        self.delivered_count.store(0, Relaxed);
        self.peak.store(0, Relaxed);
        self.http2_requests.store(0, Relaxed);
    }

    fn record_bad_request(&self, received: Instant) {
        let mut book = self.book();
        book.count_request(received);
        book.bad_requests += 1;
        book.failures_total += 1;
    }

    /// Books a well-formed request; returns its attempt number for the id (1-based)
    /// and the generation it belongs to.
    fn record_attempt(&self, id: &str, received: Instant, body: Option<Value>) -> (u32, u64) {
        let mut book = self.book();
        let attempt = book.attempt(id, received, body);
        (attempt, book.generation)
    }

    fn record_answer(
        &self,
        id: String,
        generation: u64,
        status: StatusCode,
        mark: Option<&order::Mark>,
    ) {
        self.record_answers(generation, [(id, status, mark)]);
    }

    /// Books the answers of one request's deliveries (a batch's items, in
    /// order) under one lock; `mark` as in [`Book::answer`].
    fn record_answers<'m>(
        &self,
        generation: u64,
        answers: impl IntoIterator<Item = (String, StatusCode, Option<&'m order::Mark>)>,
    ) {
        let mut book = self.book();
        if book.generation != generation {
            return; // recorded before a reset: not part of the current books
        }
        for (id, status, mark) in answers {
            if book.answer(id, status, mark) {
                self.delivered_count.fetch_add(1, Relaxed);
            }
        }
    }
}

fn write(lock: &RwLock<Arc<Behaviour>>) -> std::sync::RwLockWriteGuard<'_, Arc<Behaviour>> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a request as "being handled" for as long as it lives, including when the
/// handler is dropped early because the client hung up.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Relaxed) + 1;
        shared.peak.fetch_max(now, Relaxed);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A slot of the hidden capacity (`Behaviour::capacity`), held while a
/// delivery is handled.
struct CapacitySlot<'a>(Option<&'a Shared>);

impl<'a> CapacitySlot<'a> {
    /// A slot, or `None` when the capacity is full (the request is counted in
    /// `per_second_over_capacity`).
    fn take(shared: &'a Shared, received: Instant) -> Option<CapacitySlot<'a>> {
        let Some(capacity) = shared.behaviour().capacity else {
            return Some(CapacitySlot(None));
        };
        if shared.capacity_used.fetch_add(1, Relaxed) < capacity {
            return Some(CapacitySlot(Some(shared)));
        }
        shared.capacity_used.fetch_sub(1, Relaxed);
        let mut book = shared.book();
        let second = received.saturating_duration_since(book.epoch).as_secs() as usize;
        if book.per_second_over_capacity.len() <= second {
            book.per_second_over_capacity.resize(second + 1, 0);
        }
        book.per_second_over_capacity[second] += 1;
        None
    }
}

impl Drop for CapacitySlot<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.capacity_used.fetch_sub(1, Relaxed);
        }
    }
}

/// One event of a delivery, as the stand-in reads it.
struct Delivered {
    id: String,
    /// The full body, only while bodies are recorded.
    body: Option<Value>,
    /// Its key and sequence number, for the per-key order check.
    mark: Option<order::Mark>,
}

/// Reads one event's JSON text (and the full body when `keep_body`). The
/// error is the reason sent with the 400.
fn parse_event(text: &[u8], keep_body: bool) -> Result<Delivered, &'static str> {
    // serde would also accept a JSON array as a struct; only objects are events.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("body must be a JSON object with a string \"id\"\n");
    }
    if keep_body {
        let value: Value = serde_json::from_slice(text).map_err(|_| "body is not valid JSON\n")?;
        event_of_value(value)
    } else {
        let probe: probe::EventProbe = serde_json::from_slice(text)
            .map_err(|_| "body must be a JSON object with a string \"id\"\n")?;
        Ok(Delivered {
            id: probe.id.clone(),
            body: None,
            mark: probe.mark(),
        })
    }
}

/// Reads one event from its parsed JSON (kept as its body).
fn event_of_value(value: Value) -> Result<Delivered, &'static str> {
    if !value.is_object() {
        return Err("body must be a JSON object with a string \"id\"\n");
    }
    let probe =
        probe::EventProbe::deserialize(&value).map_err(|_| "body must have a string \"id\"\n")?;
    Ok(Delivered {
        id: probe.id.clone(),
        mark: probe.mark(),
        body: Some(value),
    })
}

/// Extracts the event (and the full body when `keep_body`), checking the
/// idempotency key. The error is the reason sent with the 400.
fn parse_delivery(
    headers: &HeaderMap,
    body: &[u8],
    keep_body: bool,
) -> Result<Delivered, &'static str> {
    let event = parse_event(body, keep_body)?;
    match headers.get(IDEMPOTENCY_KEY) {
        Some(key) if key.as_bytes() == event.id.as_bytes() => Ok(event),
        Some(_) => Err("Idempotency-Key differs from the event id\n"),
        None => Err("missing Idempotency-Key header\n"),
    }
}

/// The answer to one delivery.
struct Answer {
    status: StatusCode,
    retry_after_s: Option<u64>,
}

impl Answer {
    const OK: Answer = Answer {
        status: StatusCode::OK,
        retry_after_s: None,
    };

    fn fail(status: u16, retry_after_s: Option<u64>) -> Answer {
        Answer {
            status: status_code(status),
            retry_after_s,
        }
    }
}

/// `down_status → fail_ids → fail_rate → 200`, for the `attempt`-th request for `id`.
fn decide(behaviour: &Behaviour, id: &str, attempt: u32) -> Answer {
    if let Some(status) = behaviour.down_status {
        return Answer::fail(status, None);
    }
    if let Some(rule) = behaviour.fail_ids.get(id) {
        return match rule.times {
            Some(n) if attempt > n => Answer::OK,
            _ => Answer::fail(rule.status, rule.retry_after_s),
        };
    }
    if behaviour.fail_rate > 0.0 && rand::random::<f64>() < behaviour.fail_rate {
        return Answer::fail(behaviour.fail_status, None);
    }
    Answer::OK
}

/// A configured status as a final HTTP status; anything that cannot be one
/// (1xx, ≥ 600, garbage) becomes 500 rather than a protocol error.
fn status_code(code: u16) -> StatusCode {
    if valid_status(code) {
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

fn valid_status(code: u16) -> bool {
    (200..=599).contains(&code)
}

fn latency(behaviour: &Behaviour) -> Duration {
    let jitter = match behaviour.latency_jitter_ms {
        0 => 0,
        j => rand::rng().random_range(0..=j),
    };
    Duration::from_millis(behaviour.latency_ms.saturating_add(jitter))
}

async fn post_event(
    State(shared): State<Arc<Shared>>,
    version: axum::http::Version,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&shared);
    let received = Instant::now();
    if version == axum::http::Version::HTTP_2 {
        shared.http2_requests.fetch_add(1, Relaxed);
    }

    let keep_body = shared.record_bodies.load(Relaxed);
    let event = match parse_delivery(&headers, &body, keep_body) {
        Ok(parsed) => parsed,
        Err(reason) => {
            shared.record_bad_request(received);
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    shared.sample_request(&event.id, "POST", &uri, &headers, &body);
    answer_delivery(&shared, &headers, event, received).await
}

impl Shared {
    /// Keeps the request as the id's last one, while recording is on.
    fn sample_request(
        &self,
        id: &str,
        method: &str,
        uri: &axum::http::Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) {
        if self.record_requests.load(Relaxed) {
            let sample = request_sample(method, uri, headers, body);
            self.book().requests_sample.insert(id.to_owned(), sample);
        }
    }
}

/// A mapped delivery (`/routes/...` with POST, PUT or PATCH): any body; the id
/// is the `Idempotency-Key` (400 without one).
async fn routed_event(
    State(shared): State<Arc<Shared>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&shared);
    let received = Instant::now();
    let Some(id) = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        shared.record_bad_request(received);
        return (StatusCode::BAD_REQUEST, "missing Idempotency-Key header\n").into_response();
    };
    shared.sample_request(&id, method.as_str(), &uri, &headers, &body);
    let event = Delivered {
        id,
        body: None,
        mark: None,
    };
    answer_delivery(&shared, &headers, event, received).await
}

fn request_sample(
    method: &str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> RequestSample {
    RequestSample {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string()),
        headers: headers
            .iter()
            .filter(|(n, _)| *n != header::AUTHORIZATION)
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(body).into_owned(),
    }
}

/// Books a well-formed delivery, waits the simulated latency and answers it.
async fn answer_delivery(
    shared: &Shared,
    headers: &HeaderMap,
    event: Delivered,
    received: Instant,
) -> Response {
    let Delivered { id, body, mark } = event;
    let (attempt, generation) = shared.record_attempt(&id, received, body);
    let redelivery = headers.contains_key(REDELIVERY);
    if redelivery {
        shared.book().count_redelivery(received);
    }
    // A redelivery comes after its key moved on by design: not order-checked.
    let mark = mark.filter(|_| !redelivery);

    let Some(_slot) = CapacitySlot::take(shared, received) else {
        shared.record_answer(id, generation, StatusCode::TOO_MANY_REQUESTS, None);
        return StatusCode::TOO_MANY_REQUESTS.into_response();
    };
    let delay = latency(&shared.behaviour());
    if !delay.is_zero() {
        // The simulated API latency itself.
        tokio::time::sleep(delay).await;
    }

    // Decide with the behaviour as it is now, so a change made during the latency
    // (an outage starting) applies to the requests already waiting.
    let behaviour = shared.behaviour();
    let answer = if shared.authorized(&behaviour, headers).await {
        decide(&behaviour, &id, attempt)
    } else {
        Answer::fail(401, None)
    };
    shared.record_answer(id, generation, answer.status, mark.as_ref());
    respond(&behaviour, &answer)
}

/// Header marking a DLQ redelivery.
const REDELIVERY: &str = "courier-redelivery";

impl Shared {
    /// Whether the request's credentials pass `required_token` /
    /// `introspect_url` (true when neither is set).
    async fn authorized(&self, behaviour: &Behaviour, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match (&behaviour.required_token, &behaviour.introspect_url) {
            (Some(t), _) => bearer == Some(t.as_str()),
            (None, Some(url)) => match bearer {
                Some(token) => self.introspector.accepts(url, token).await,
                None => false,
            },
            (None, None) => true,
        }
    }
}

/// The response for `answer` alone: its status, `fail_body` on a failure,
/// `Retry-After` when the answer has one.
fn respond(behaviour: &Behaviour, answer: &Answer) -> Response {
    let mut response = match &behaviour.fail_body {
        Some(b) if !answer.status.is_success() => (answer.status, b.clone()).into_response(),
        _ => answer.status.into_response(),
    };
    if let Some(seconds) = answer.retry_after_s {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

async fn get_audit(State(shared): State<Arc<Shared>>) -> Json<Audit> {
    Json(shared.audit())
}

async fn get_delivered(State(shared): State<Arc<Shared>>) -> Json<DeliveredCount> {
    Json(shared.delivered())
}

async fn get_behaviour(State(shared): State<Arc<Shared>>) -> Json<Behaviour> {
    Json(Behaviour::clone(&shared.behaviour()))
}

/// Accepts any content type: drills drive this with `curl -d`.
async fn put_behaviour(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let behaviour: Behaviour = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid behaviour: {err}\n"),
            )
                .into_response()
        }
    };
    let statuses = behaviour
        .down_status
        .into_iter()
        .chain([behaviour.fail_status])
        .chain(behaviour.fail_ids.values().map(|rule| rule.status));
    for status in statuses {
        if !valid_status(status) {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("status {status} is not a final HTTP status (200..=599)\n"),
            )
                .into_response();
        }
    }
    *write(&shared.behaviour) = Arc::new(behaviour.clone());
    Json(behaviour).into_response()
}

/// `POST /reset`'s query.
#[derive(Debug, Deserialize)]
struct ResetQuery {
    /// Events to reserve room for in the books.
    #[serde(default)]
    expect: usize,
}

async fn post_reset(
    State(shared): State<Arc<Shared>>,
    query: Result<axum::extract::Query<ResetQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let expect = match query {
        Ok(q) if q.expect <= MAX_EXPECT => q.expect,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                format!("expect must be a number of events up to {MAX_EXPECT}\n"),
            )
                .into_response()
        }
    };
    shared.reset(expect);
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod book_tests {
    use super::*;

    #[test]
    fn books_reset_for_n_events_do_not_grow_while_they_book_them() {
        let mut book = Book::new(1, 10_000);
        let caps = |b: &Book| {
            (
                b.delivered.capacity(),
                b.attempts.capacity(),
                b.order.capacity(),
            )
        };
        let before = caps(&book);
        assert!(before.0 >= 10_000 && before.1 >= 10_000 && before.2 >= 10_000);
        let now = Instant::now();
        for i in 0..10_000 {
            let id = format!("ev-{i}");
            let mark = order::Mark {
                key: format!("key-{}", i % 5_000),
                seq: i,
            };
            assert_eq!(book.attempt(&id, now, None), 1);
            assert!(book.answer(id, StatusCode::OK, Some(&mark)));
        }
        assert_eq!(caps(&book), before, "a map or the order grew");
        assert_eq!(book.delivered.len(), 10_000);
    }
}
