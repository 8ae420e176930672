//! The work one event needs between "dispatched" and "durable outcome", in
//! stages (run by tasks the delivery pool actor spawns, `actors::delivery_pool`,
//! or — a batched first try — by its dispatcher: [`inline`]). Each stage is a
//! type with its own fields in a file named for its job, and the
//! [`Deliverer`] (this file, with the shared types [`Work`], [`Item`],
//! [`Job`]) is composed of them, in the order an event meets them:
//!
//! 1. [`run`] — the job: the task's entry, which work the [`Item`] needs, the
//!    write scope a partition handover ends; or, batched, the first try made
//!    without a task ([`inline`]).
//! 2. [`request`] — building ([`request::Builder`]): route, body (enriched, or
//!    the event's data), forwarded headers, trace context; or why it cannot
//!    be sent (parked, never retried).
//! 3. [`call`] — an event's call ([`call::Caller`]), made with the permit it
//!    holds ([`permits`]: the one gate every permit is taken through — an
//!    event's from the pool, a DLQ round's share — given back on drop): a
//!    request of its own or a place in its route's batch ([`batch`]:
//!    forming in `batch/form.rs`, going out in `batch/bisect.rs`). Either request
//!    goes out the one way [`send`] has ([`send::Calls`]): admitted at the
//!    breaker's gate while anyone waits for it, its request and rate slots
//!    taken, sent through the [`http::Api`] seam, heard once by the breaker
//!    and the adaptive limit.
//! 4. [`hear`] — answering: `core::answer::read` reads each answer once
//!    ([`hear::Ears::read`] → [`hear::Answered`]), for the breaker (one
//!    observation per call, on every path), the adaptive limit and the
//!    event; a batch's events each read their own result once.
//! 5. [`attempt`] — the attempt loop: an interpreter of
//!    `core::attempt::decide` (retry in place, wait at the gate, dead-letter
//!    or park; the systemic answers through [`systemic`]).
//! 6. [`report`] — failure reports ([`report::Reports`]): counted
//!    (`courier_delivery_errors_total`), logged (first per reason, then one
//!    per 10 s), told to the breaker.
//! 7. [`write`] — durable writes ([`write::Writes`]): envelope, DLQ and
//!    parking-lot writes, retried until acknowledged by [`durable`] (a DLQ
//!    that refuses for good parks; a parking lot that refuses stops the
//!    process).
//! 8. [`drain`] — the DLQ drain ([`drain::Redelivery`]: the source of
//!    truth; its round's share of the permits and pace from [`permits`]): a
//!    DLQ record's turn, its policy and round.
//! 9. [`ordered`] — an ordered run: a key's events sent together in offset
//!    order, and again from the first that failed transiently; it shares the
//!    attempt loop's pieces (`Tries`, `after_failure`, `give_up`).
//!
//! Beside them: the HTTP client ([`http`]; credentials from `auth::Auth` per
//! request, a 401 answered by one more send with a new credential, I33),
//! enrichment ([`enrich`]), the concurrency and rate limits ([`limits`],
//! [`ratelimit`], the drain's [`pacer`]), the peers ([`peers`]) and the
//! completion token ([`token`]).
//!
//! # Seams
//!
//! The stages are generic over two small traits: [`http::Api`] (send one
//! request; `ApiClient` in production) and `durable::DlqWrite` (one write try
//! to the DLQ or the parking lot; the DLQ writer actor's `Handle` in
//! production). `Deliverer<A = ApiClient, W = Handle<ActorRef<DlqWriterMsg>>>`:
//! production code names plain `Deliverer` and is monomorphic (no `Box<dyn>`,
//! no allocation added per event). `delivery/tests.rs` runs the shell over a
//! scripted fake API and a fake DLQ writer that keep every request and record
//! (retries, DLQ after the tries, parking, a systemic outage at the gate,
//! handovers during the gate wait / the back-off / a DLQ write, DLQ refusals,
//! unacknowledged writes) — no broker, under a second. Its files: `tests.rs`
//! (the attempt loop), `tests/durable_writes.rs`, `tests/batched.rs` (a fake
//! batch API answering per item), `tests/batch_answers.rs` (events left out
//! of answers, bodies no batch holds, repeated ids), `tests/batch_handover.rs`
//! (handovers while a batch forms or waits), `tests/ordered.rs`, `tests/fakes.rs`.

mod attempt;
mod batch;
mod call;
mod drain;
mod durable;
pub(crate) mod enrich;
mod hear;
pub mod http;
mod inline;
pub(crate) mod limits;
mod ordered;
pub(crate) mod pacer;
pub(crate) mod peers;
pub(crate) mod permits;
pub mod ratelimit;
mod report;
mod request;
mod run;
mod send;
mod systemic;
#[cfg(test)]
mod tests;
pub(crate) mod token;
mod write;

use crate::config::Config;
use crate::core::backoff::InPlaceRetry;
use crate::core::classify::FailureReason;
use crate::core::destination::DestinationId;
use crate::core::envelope::Envelope;
use crate::core::event::Event;
use crate::core::input::{BodyType, Header};
use crate::handle::Handle;
use crate::metrics as m;
use crate::runtime::Pipeline;
use bytes::Bytes;
use durable::DlqWrite;
use enrich::{Enricher, SourceOfTruth};
use http::{Api, ApiClient};
use peers::{BreakerAlarm, DlqWriterMsg, Peers};
use std::sync::Arc;
use token::CompletionToken;
use tokio::sync::Semaphore;

/// What to do with a consumed message, decided before any work is scheduled.
#[derive(Debug)]
pub(crate) enum Work {
    Deliver(Event),
    /// Bad input: straight to the parking lot with this reason.
    Park {
        reason: FailureReason,
        message: String,
    },
    /// A DLQ record whose turn has come (drain).
    FromDlq(Box<Envelope>),
    /// Dropped by this filter (`[[filters]]`, `core::expr`): nothing is
    /// sent; done as a delivered event is, its offset committed.
    Filtered {
        filter: Arc<str>,
    },
}

/// A consumed message and the work it needs. Shared (`Arc`) between the partition
/// actor, which keeps it until the outcome is durable, and the task doing the work.
#[derive(Debug)]
pub(crate) struct Item {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    /// The record's key and the entity key read from its body.
    pub keys: Keys,
    pub payload: Option<Bytes>,
    /// The record's headers, in order (`None` without any): what the API side
    /// may forward, and what a binary-mode CloudEvent is read from.
    pub headers: Option<Box<[Header]>>,
    /// What the body posted to the API is (`Content-Type`).
    pub body_type: BodyType,
    /// Where it is delivered: its route (`core::mapping::Routes::choose`)
    /// and that route's destination (`core::destination`), chosen when it
    /// was decoded. The parking lot's work ignores it.
    pub target: crate::core::mapping::Target,
    pub work: Work,
}

/// An item's keys.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    /// The record's key (the DLQ and parking-lot records carry it on).
    pub record: Option<Vec<u8>>,
    /// The entity key read from the body (`input.format = "json"` with
    /// `input.key`) when it differs from the record's key; see [`Item::entity_key`].
    pub entity: Option<Vec<u8>>,
}

impl Item {
    /// The key events are ordered and enriched by: the one read from the body,
    /// or else the record's.
    pub(crate) fn entity_key(&self) -> Option<&[u8]> {
        self.keys.entity.as_deref().or(self.keys.record.as_deref())
    }

    pub(crate) fn event_id(&self) -> Option<&str> {
        match &self.work {
            Work::Deliver(e) => Some(&e.id),
            Work::FromDlq(env) => env.event_id.as_deref(),
            Work::Park { .. } | Work::Filtered { .. } => None,
        }
    }
}

pub(crate) struct Job {
    pub item: Arc<Item>,
    pub token: CompletionToken,
}

/// What the delivery pool's queue carries: one delivery, or a lane's run
/// (`core::ordering`, `ordered = true`) delivered in this order ([`ordered`]).
pub(crate) enum Queued {
    One(Job),
    Run(Vec<Job>),
}

/// One destination's delivery (`core::destination`: each has its own
/// breaker, limits and permits; `Deliverer::all` builds one per destination),
/// composed of its stages' parts: building
/// ([`request::Builder`]), its permits ([`permits::Permits`]), sending
/// ([`call::Caller`]), failure reports ([`report::Reports`]), durable writes
/// ([`write::Writes`]) and the DLQ drain's source of truth
/// ([`drain::Redelivery`]); the attempt loop, the job and the
/// ordered run drive them. `A` sends the requests and `W` makes the DLQ and
/// parking-lot writes: the real client and the DLQ writer actor in
/// production, fakes in the shell's unit tests (generic, so the hot path
/// stays monomorphic).
pub(crate) struct Deliverer<A = ApiClient, W = Handle<ractor::ActorRef<DlqWriterMsg>>> {
    build: request::Builder,
    caller: call::Caller<A>,
    /// Every permit of this destination's delivery (`permits`).
    permits: permits::Permits,
    reports: report::Reports,
    writes: write::Writes<W>,
    drain: drain::Redelivery,
    policy: InPlaceRetry,
    /// First tries may be made without a task ([`inline`]): batching is
    /// configured, and no enrichment lookup waits.
    inline: bool,
    /// First tries made inline so far (a test's handle on "no task").
    #[cfg(test)]
    inline_tries: std::sync::atomic::AtomicU64,
    pipeline: Arc<Pipeline>,
    hot: HotMetrics,
}

/// The pool's permits: one per event in delivery. Without batching an event
/// is a request and `concurrency` bounds both; with batching (`batch_events`
/// per request at most) `concurrency` bounds requests, and the permits are
/// enough to fill each of them.
fn events_in_delivery(concurrency: usize, batch_events: usize) -> usize {
    concurrency.saturating_mul(batch_events.max(1))
}

/// Handles of the metrics every delivery touches, registered once (looking a
/// metric up by name per event showed in the profile).
struct HotMetrics {
    in_flight: metrics::Gauge,
    attempts: metrics::Counter,
    delivered: metrics::Counter,
    latency: metrics::Histogram,
    age: metrics::Histogram,
}

impl HotMetrics {
    /// `destination`: the deliverer's (`courier_delivered_total`'s label).
    fn new(destination: &str) -> HotMetrics {
        HotMetrics {
            in_flight: metrics::gauge!(m::IN_FLIGHT),
            attempts: metrics::counter!(m::DELIVERY_ATTEMPTS),
            delivered: metrics::counter!(m::DELIVERED, "destination" => destination.to_string()),
            latency: metrics::histogram!(m::DELIVERY_LATENCY),
            age: metrics::histogram!(m::EVENT_AGE),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DelivererError {
    #[error(transparent)]
    Client(#[from] http::ClientError),
    #[error(transparent)]
    Enrich(#[from] enrich::EnrichSetupError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

impl Deliverer {
    /// One deliverer per destination (`core::destination`), indexed by its
    /// id: each with its own breaker (the pipeline's), limits, rate limit
    /// and queue; the HTTP client, the credentials (one token fetch per
    /// process, I33), the enrichment and the source of truth are shared.
    pub(crate) fn all(
        pipeline: Arc<Pipeline>,
        peers: Peers,
    ) -> Result<Vec<Deliverer>, DelivererError> {
        let cfg: &Config = &pipeline.config;
        let auth = crate::auth::Auth::from_config(&cfg.api, Some(pipeline.board.clone()))?;
        let api = ApiClient::new(&cfg.api, Arc::new(auth), cfg.pipeline.concurrency)?;
        let password = || {
            cfg.enrichment
                .password_env
                .as_ref()
                .and_then(|n| std::env::var(n).ok())
        };
        let enricher = if cfg.enrichment.enabled {
            Some(Arc::new(Enricher::new(&cfg.enrichment, password())?))
        } else {
            None
        };
        let source = if cfg.retry.source_query.is_empty() {
            None
        } else {
            Some(Arc::new(SourceOfTruth::new(
                enrich::pg_pool(&cfg.enrichment, password())?,
                cfg.retry.source_query.clone(),
                cfg.enrichment.query_timeout,
            )))
        };
        (0..pipeline.destinations.len())
            .map(|i| {
                Deliverer::with_parts(
                    pipeline.clone(),
                    api.clone(),
                    peers.dlq_writer.clone(),
                    peers.breaker_alarm.clone(),
                    enricher.clone(),
                    source.clone(),
                    DestinationId(i as u8),
                )
            })
            .collect()
    }
}

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// A deliverer sending through `api` and writing through `writer` (the
    /// shell's unit tests give fakes; [`Deliverer::new`] the real ones).
    pub(crate) fn with_parts(
        pipeline: Arc<Pipeline>,
        api: A,
        writer: W,
        alarm: BreakerAlarm,
        enricher: Option<Arc<Enricher>>,
        source: Option<Arc<SourceOfTruth>>,
        dest: DestinationId,
    ) -> Result<Deliverer<A, W>, DelivererError> {
        let cfg: &Config = &pipeline.config;
        let health = pipeline.health(dest).clone();
        let name: Arc<str> = Arc::from(pipeline.destination(dest).name.as_str());
        let d = &cfg.degraded;
        let routes = pipeline.routes.clone();
        let batch = cfg.api.batch_spec()?;
        let batching = cfg.batching()?;
        // With batching a request carries many events: `pipeline.concurrency`
        // bounds the requests in flight (the adaptive limit, which learns
        // from requests, holds request slots up to it), and the events in
        // delivery are bounded by the byte budget
        // (`pipeline.max_in_flight_bytes`), each partition's share
        // (`max_in_flight_per_partition`) and, as a backstop, by enough
        // permits to fill every request: latency is hidden by requests in
        // flight, as it is for single events.
        let events = events_in_delivery(
            cfg.pipeline.concurrency,
            routes.max_batch_events(batch.as_deref()),
        );
        let permits = Arc::new(Semaphore::new(events));
        let limits = Arc::new(limits::Limits::new(
            cfg.pipeline.concurrency,
            events,
            cfg.api.adaptive_concurrency,
            ratelimit::RateLimiter::from_config(&pipeline, dest),
            permits.clone(),
            if batching {
                limits::LimitOn::Requests
            } else {
                limits::LimitOn::EventPermits
            },
            &name,
        ));
        let gate = limits.gate(permits.clone(), events);
        let status = cfg.api.status_policy()?;
        let ears = Arc::new(hear::Ears::new(
            status,
            limits.clone(),
            health.clone(),
            alarm,
            name.clone(),
        ));
        let calls = Arc::new(send::Calls::new(api, ears.clone(), limits, health));
        let batcher = Arc::new(batch::Batcher::new(calls.clone(), pipeline.clone()));
        Ok(Deliverer {
            inline: batching && enricher.is_none(),
            #[cfg(test)]
            inline_tries: std::sync::atomic::AtomicU64::new(0),
            build: request::Builder::new(routes, batch, enricher, pipeline.clone()),
            caller: call::Caller::new(calls, batcher),
            permits: permits::Permits::new(gate, d),
            reports: report::Reports::new(pipeline.clone(), ears.clone()),
            writes: write::Writes::new(writer, pipeline.clone(), ears),
            drain: drain::Redelivery::new(source),
            policy: cfg.api.retry_policy(),
            pipeline,
            hot: HotMetrics::new(&name),
        })
    }

    /// One of the pool's permits (see [`permits::Permits::event`]).
    pub(crate) async fn permit(&self) -> Option<permits::Permit> {
        self.permits.event().await
    }
}
