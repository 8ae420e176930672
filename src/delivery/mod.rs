//! The work one event needs between "dispatched" and "durable outcome": enrich,
//! POST with in-place retries, and on failure the DLQ or the parking lot.
//! Runs in tasks spawned by the delivery pool actor.

mod durable;
pub mod enrich;
pub mod http;
pub mod limits;
pub mod pacer;
pub mod peers;
pub mod ratelimit;
mod systemic;
pub mod token;

use crate::api_health::CallOutcome;
use crate::config::{Config, OnMissing};
use crate::core::backoff::InPlaceRetry;
use crate::core::classify::{
    outcome_of, ErrorClass, FailureClass, FailureLog, FailureReason, StatusVerdict,
    TransportFailure,
};
use crate::core::dlq_policy::{self, DlqDecision, SourceCheck};
use crate::core::envelope::OriginHeader;
use crate::core::envelope::{Envelope, ErrorInfo, Origin, ENVELOPE_VERSION_PAYLOAD};
use crate::core::event::DecodeError;
use crate::core::event::Event;
use crate::core::input::{decode_record, BodyType, Decoded, Header, RecordIn};
use crate::core::mapping::{Attributes, BodyMode, Routes};
use crate::core::status_policy::StatusPolicy;
use crate::core::systemic::SystemicStep;
use crate::core::trace;
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use bytes::Bytes;
use enrich::{EnrichError, Enricher, SourceOfTruth};
use http::{ApiClient, Outgoing, TransportError};
use peers::{DlqRecord, Peers};
use reqwest::header::HeaderValue;
use std::sync::Arc;
use std::time::{Duration, Instant};
use token::{CompletionToken, Finished};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

/// What to do with a consumed message, decided before any work is scheduled.
#[derive(Debug)]
pub enum Work {
    Deliver(Event),
    /// Bad input: straight to the parking lot with this reason.
    Park {
        reason: FailureReason,
        message: String,
    },
    /// A DLQ record whose turn has come (drain).
    FromDlq(Box<Envelope>),
}

/// A consumed message and the work it needs. Shared (`Arc`) between the partition
/// actor, which keeps it until the outcome is durable, and the task doing the work.
#[derive(Debug)]
pub struct Item {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    /// The record's key (the DLQ and parking-lot records carry it on).
    pub key: Option<Vec<u8>>,
    /// The entity key read from the body (`input.format = "json"` with
    /// `input.key`) when it differs from the record's key; see [`Item::entity_key`].
    pub entity_key: Option<Vec<u8>>,
    pub payload: Option<Bytes>,
    /// The record's headers, in order (`None` without any): what the API side
    /// may forward, and what a binary-mode CloudEvent is read from.
    pub headers: Option<Box<[Header]>>,
    /// What the body posted to the API is (`Content-Type`).
    pub body_type: BodyType,
    pub work: Work,
}

impl Item {
    /// The key events are ordered and enriched by: the one read from the body,
    /// or else the record's.
    pub fn entity_key(&self) -> Option<&[u8]> {
        self.entity_key.as_deref().or(self.key.as_deref())
    }

    pub fn event_id(&self) -> Option<&str> {
        match &self.work {
            Work::Deliver(e) => Some(&e.id),
            Work::FromDlq(env) => env.event_id.as_deref(),
            Work::Park { .. } => None,
        }
    }
}

/// What an event's request turned out to be.
enum Body {
    Send {
        body: Bytes,
        out: Outgoing,
    },
    /// The event cannot be sent (no enrichment row and the config says park, or
    /// the body cannot be built): parked with this reason, never retried.
    Park {
        reason: FailureReason,
        message: String,
    },
}

pub struct Job {
    pub item: Arc<Item>,
    pub token: CompletionToken,
}

pub struct Deliverer {
    api: ApiClient,
    /// `[[api.routes]]`, parsed.
    routes: Routes,
    /// `api.forward_headers`.
    forward_headers: Vec<String>,
    /// What each HTTP status means (`[api.status]` over the defaults).
    status: StatusPolicy,
    policy: InPlaceRetry,
    permits: Arc<Semaphore>,
    /// The adaptive concurrency limit (and what feeds it) the permits follow.
    limits: limits::Limits,
    /// The DLQ drain has its own, smaller limit and a rate: a recovering API must
    /// not receive the whole backlog at once.
    drain_permits: Semaphore,
    drain_pacer: pacer::DrainPacer,
    enricher: Option<Enricher>,
    source: Option<SourceOfTruth>,
    pipeline: Arc<Pipeline>,
    peers: Peers,
    hot: HotMetrics,
    /// Which failed calls get a log line (the first of each reason, then one per
    /// reason every [`FAILURE_LOG_EVERY`]).
    failure_log: std::sync::Mutex<FailureLog>,
}

/// At most one log line per failure reason per this interval (after the first).
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

/// What one failed try said: for `courier_delivery_errors_total`, the log line
/// and the envelope's `last_error`.
struct Failure {
    class: FailureClass,
    reason: FailureReason,
    status: Option<u16>,
    retry_after: Option<Duration>,
    /// The innermost error's text for a failure without an answer (no URL, no
    /// secret, nothing the API sent).
    detail: Option<String>,
    hint: Option<&'static str>,
    /// The start of the API's answer (non-2xx): the envelope's message only.
    body: Option<String>,
}

impl Failure {
    fn status(class: FailureClass, a: &http::Answer) -> Failure {
        Failure {
            class,
            reason: FailureReason::Http(a.status),
            status: Some(a.status),
            retry_after: a.retry_after,
            detail: None,
            hint: crate::core::classify::status_hint(a.status),
            body: a.body.clone(),
        }
    }

    fn transport(t: TransportError) -> Failure {
        Failure {
            class: t.kind.class(),
            reason: FailureReason::Transport(t.kind),
            status: None,
            retry_after: None,
            detail: Some(t.detail),
            hint: Some(t.kind.hint()),
            body: None,
        }
    }

    /// The envelope's `last_error` for this failure, with `message`.
    fn error(&self, message: &str) -> ErrorInfo {
        ErrorInfo::new(self.class.into(), self.reason, self.status, message)
    }

    /// `last_error.message`: what the API answered, or what failed and why.
    fn message(&self, what: &str) -> String {
        match (self.status, &self.detail) {
            (Some(s), _) => {
                let m = format!("API answered {s} {what}");
                match &self.body {
                    Some(b) => format!("{}: {b}", m.trim_end()),
                    None => m,
                }
            }
            (None, Some(d)) if !d.is_empty() => format!("{} {what}: {d}", self.reason),
            (None, _) => format!("{} {what}", self.reason),
        }
    }
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
    fn new() -> HotMetrics {
        HotMetrics {
            in_flight: metrics::gauge!(m::IN_FLIGHT),
            attempts: metrics::counter!(m::DELIVERY_ATTEMPTS),
            delivered: metrics::counter!(m::DELIVERED),
            latency: metrics::histogram!(m::DELIVERY_LATENCY),
            age: metrics::histogram!(m::EVENT_AGE),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DelivererError {
    #[error(transparent)]
    Client(#[from] http::ClientError),
    #[error(transparent)]
    Enrich(#[from] enrich::EnrichSetupError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

impl Deliverer {
    pub fn new(pipeline: Arc<Pipeline>, peers: Peers) -> Result<Deliverer, DelivererError> {
        let cfg: &Config = &pipeline.config;
        let token = cfg.api_token()?;
        let api = ApiClient::new(&cfg.api, token.as_deref(), cfg.pipeline.concurrency)?;
        let password = || {
            cfg.enrichment
                .password_env
                .as_ref()
                .and_then(|n| std::env::var(n).ok())
        };
        let enricher = if cfg.enrichment.enabled {
            Some(Enricher::new(&cfg.enrichment, password())?)
        } else {
            None
        };
        let source = if cfg.retry.source_query.is_empty() {
            None
        } else {
            Some(SourceOfTruth::new(
                enrich::pg_pool(&cfg.enrichment, password())?,
                cfg.retry.source_query.clone(),
                cfg.enrichment.query_timeout,
            ))
        };
        let d = &cfg.degraded;
        Ok(Deliverer {
            api,
            routes: cfg.api.routes()?,
            forward_headers: cfg.api.forward_headers.clone(),
            status: cfg.api.status_policy()?,
            policy: cfg.api.retry_policy(),
            permits: Arc::new(Semaphore::new(cfg.pipeline.concurrency)),
            limits: limits::Limits::new(
                cfg.pipeline.concurrency,
                cfg.api.adaptive_concurrency,
                ratelimit::RateLimiter::from_config(&pipeline),
            ),
            drain_permits: Semaphore::new(d.drain_concurrency),
            drain_pacer: pacer::DrainPacer::new(Duration::from_secs_f64(
                1.0 / d.drain_rate_per_sec,
            )),
            enricher,
            source,
            pipeline,
            peers,
            hot: HotMetrics::new(),
            failure_log: std::sync::Mutex::new(FailureLog::new(FAILURE_LOG_EVERY)),
        })
    }

    /// Counts a failed try in `courier_delivery_errors_total{class, reason}` and
    /// logs it on the first occurrence of its reason (then once per
    /// [`FAILURE_LOG_EVERY`], with the count left out): systemic failures at WARN,
    /// since someone must act, the others at INFO.
    fn report(&self, f: &Failure) {
        let reason = f.reason.as_str();
        metrics::counter!(m::DELIVERY_ERRORS, "class" => f.class.as_str(), "reason" => reason)
            .increment(1);
        self.pipeline.status.errors.record(f.class.as_str(), reason);
        let log = self
            .failure_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(reason, Instant::now());
        let Some(l) = log else { return };
        let (detail, hint, status) = (f.detail.as_deref(), f.hint, f.status);
        // tracing fixes an event's level where it is written: one line, two levels.
        macro_rules! failure_line {
            ($level:ident, $message:literal) => {
                tracing::$level!(
                    // Display, as before: `reason=tls_expired` (operators grep for it).
                    reason = %reason,
                    class = f.class.as_str(),
                    status,
                    detail,
                    hint,
                    first = l.first,
                    left_out = l.left_out,
                    $message
                )
            };
        }
        if f.class == FailureClass::Systemic {
            failure_line!(
                warn,
                "API call failed: the pipeline pauses until it works again"
            );
        } else {
            failure_line!(info, "API call failed");
        }
    }

    /// The global limit on API calls in flight (`pipeline.concurrency`): a
    /// delivery holds one of these from its first try to its last.
    pub fn permits(&self) -> Arc<Semaphore> {
        self.permits.clone()
    }

    /// The pool's permits, kept at the current concurrency limit.
    pub fn permit_gate(&self) -> limits::PermitGate {
        self.limits.gate(
            self.permits.clone(),
            self.pipeline.config.pipeline.concurrency,
        )
    }

    /// Does the job's work and reports its outcome through the token. A delivery
    /// runs with `permit` (the pool's dispatcher takes one before it spawns the
    /// task) or waits for one here.
    pub async fn run(self: Arc<Self>, job: Job, permit: Option<OwnedSemaphorePermit>) {
        let Job { item, token } = job;
        // A DLQ or parking-lot write deep in the work abandons the event when
        // the partition is handed over between its tries (`durable`): the work
        // ends then without an outcome (errored; the next owner writes it).
        let scope = durable::WriteScope::new(token.cancellation());
        let abandoned = scope.abandoned();
        let work = durable::SCOPE.scope(scope, self.work(&item, &token, permit));
        let outcome = tokio::select! {
            biased;
            o = work => o,
            _ = abandoned.notified() => None,
        };
        if let Some(outcome) = outcome {
            token.finish(outcome);
        }
    }

    /// The job's work; `None`: handed over first (no outcome).
    async fn work(
        &self,
        item: &Arc<Item>,
        token: &CompletionToken,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Option<Finished> {
        // A root span: the message may have been sent from inside another event's
        // span, and chaining events would keep them all alive. At DEBUG: an enabled
        // span per event cost ~10 % of the CPU per event at the default `info`
        // (docs/BENCHMARKS.md); the few per-event warnings name the event themselves.
        let span = || {
            tracing::debug_span!(
                parent: None,
                "event",
                id = item.event_id().unwrap_or("-"),
                topic = %item.topic,
                partition = item.partition,
                offset = item.offset,
            )
        };
        if token.cancelled() {
            return None; // Handed over before it started: errored, never begun.
        }
        let outcome = match &item.work {
            Work::Deliver(ev) => {
                let permit = match permit {
                    Some(p) => p,
                    // Waits for a permit unless the partition is handed over first.
                    None => match tokio::select! {
                        biased;
                        _ = token.until_cancelled() => return None,
                        p = self.permits.clone().acquire_owned() => p,
                    } {
                        Ok(p) => p,
                        // The semaphore is never closed; if it were, the dropped
                        // token reports errored and the event is re-dispatched.
                        Err(_) => return None,
                    },
                };
                let delivered = if crate::otel::enabled() {
                    let parent = trace::extract(&ev.raw, item.headers.as_deref());
                    let span = crate::otel::delivery_span(&ev.id, parent.as_ref());
                    Box::pin(self.deliver(item, ev, permit, token).instrument(span)).await
                } else {
                    Box::pin(self.deliver(item, ev, permit, token).instrument(span())).await
                };
                match delivered {
                    Some(outcome) => outcome,
                    None => return None, // Cancelled between tries.
                }
            }
            Work::Park { reason, message } => {
                let info = ErrorInfo::new(ErrorClass::Poison, *reason, None, message);
                Box::pin(self.park(item, info).instrument(span())).await
            }
            Work::FromDlq(env) => {
                match Box::pin(self.retry_from_dlq(item, env, token).instrument(span())).await {
                    Some(outcome) => outcome,
                    None => return None, // Handed over before its request.
                }
            }
        };
        Some(outcome)
    }

    /// Tells the health side what a call said about the API; wakes the health
    /// actor at once when the breaker opens.
    fn observe(&self, outcome: CallOutcome) {
        if let Some(t) = self.pipeline.health.record(outcome) {
            self.on_transition(t);
        }
    }

    /// Call `seq` was delivered (it refutes the systemic answers to earlier calls).
    fn observe_delivered(&self, seq: u64) {
        if let Some(t) = self.pipeline.health.delivered(seq) {
            self.on_transition(t);
        }
    }

    fn on_transition(&self, t: crate::core::breaker::Transition) {
        metrics::counter!(m::BREAKER_TRANSITIONS, "to" => t.to.as_str(), "reason" => t.reason.as_str()).increment(1);
        tracing::warn!(
            from = t.from.as_str(),
            to = t.to.as_str(),
            reason = t.reason.as_str(),
            "circuit breaker"
        );
        if t.to == crate::core::breaker::BreakerStateKind::Open {
            self.peers.breaker_alarm.ring();
        }
    }

    /// The parking flood guard: an event parked because of the API's answer (a
    /// permanent status, not bad input nor a request unbuildable here) counts;
    /// too many per second trip the breaker (`park_flood`).
    fn parked_after(&self, reason: FailureReason) {
        if matches!(reason, FailureReason::Http(_)) {
            if let Some(t) = self.pipeline.health.parked_by_api() {
                self.on_transition(t);
            }
        }
    }

    /// Waits until the breaker admits a call; `false`: the partition was
    /// handed over first (the wait ends at once, before the breaker counts an
    /// admission — a half-open probe — for a call that will not be made).
    /// `suspect`: the event was refused systemic before (it waits behind the
    /// others and takes at most a share of the half-open probes).
    async fn gate(&self, token: &CompletionToken, suspect: bool) -> bool {
        if token.cancelled() {
            return false;
        }
        // The usual case, a closed breaker, without registering for the
        // cancellation (a lock on the partition's notifier per event).
        if self.pipeline.health.admit_now(suspect) {
            return true;
        }
        tokio::select! {
            biased;
            _ = token.until_cancelled() => false,
            _ = self.pipeline.health.gate(suspect) => true,
        }
    }

    /// Waits for the API rate limit's slot (`api.rate_limit_per_sec`), then
    /// counts the call for the concurrency limit; `None`: the partition was
    /// handed over first, and no request is made for it. A wait dropped here
    /// takes no slot (a batch taken from Redis but not yet counted is lost to
    /// the group, which errs on the side of fewer calls).
    async fn rate_slot(&self, token: &CompletionToken) -> Option<limits::Call> {
        if !self.limits.rate_limited() {
            return Some(self.limits.before_call().await);
        }
        tokio::select! {
            biased;
            _ = token.until_cancelled() => None,
            call = self.limits.before_call() => Some(call),
        }
    }

    /// A DLQ event's turn: check the policy (and the source of truth for deadline
    /// policies), then one delivery try at the drain's pace. On failure it goes
    /// back to the DLQ with `dlq_retries + 1`, or to the parking lot once the
    /// policy says so. Every drop is parked with its reason and counted.
    /// `None`: the partition was handed over before the request (no outcome).
    async fn retry_from_dlq(
        &self,
        item: &Item,
        env: &Envelope,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let cfg = &self.pipeline.config;
        let policy = cfg.retry.policy_for(env.event_type.as_deref());
        let now = now_ms();
        let check = if dlq_policy::needs_source_check(policy, env.first_dlq_at_ms, now) {
            Some(self.source_check(env).await)
        } else {
            None
        };
        if let Some(c) = check {
            metrics::counter!(m::RECONCILIATION, "result" => c.as_str()).increment(1);
        }
        match dlq_policy::decide(
            policy,
            env.dlq_retries,
            env.first_dlq_at_ms,
            env.not_before_ms,
            now,
            check,
        ) {
            DlqDecision::Drop { reason } => Some(
                self.drop_from_dlq(
                    item,
                    env,
                    FailureReason::DlqPolicy(reason),
                    format!("{} policy: {reason}", policy.as_str()),
                )
                .await,
            ),
            DlqDecision::KeepInDlq { reason } => {
                let not_before = dlq_policy::next_not_before(
                    now,
                    env.dlq_retries.max(1),
                    cfg.degraded.dlq_backoff_base_ms(),
                    cfg.degraded.dlq_backoff_cap_ms(),
                );
                let mut again = env.clone();
                again.not_before_ms = not_before;
                again.last_error.message = format!("kept in the DLQ: {reason}");
                if let Err(parked) = self.rewrite_dlq(item, again).await {
                    return Some(parked);
                }
                Some(Finished::DeadLettered {
                    reason: reason.to_string(),
                })
            }
            DlqDecision::NotYet { .. } => {
                if let Err(parked) = self.rewrite_dlq(item, env.clone()).await {
                    return Some(parked);
                }
                Some(Finished::DeadLettered {
                    reason: "not_yet".into(),
                })
            }
            DlqDecision::Deliver => self.redeliver(item, env, policy, token).await,
        }
    }

    /// The event an envelope carries, decoded in the configured input format
    /// from its payload and the origin record's headers and coordinates (as
    /// the main path decoded it). An envelope with a payload reference has
    /// nothing to decode here (`courier dlq replay` reads it back).
    fn decode_envelope(&self, env: &Envelope) -> Result<Decoded, DecodeError> {
        if env.omitted.is_some() {
            return Err(DecodeError::Empty);
        }
        let cfg = &self.pipeline.config;
        let payload = Bytes::from(env.payload.clone());
        let headers = OriginHeader::to_record(&env.origin_headers);
        let rec = RecordIn {
            value: (!payload.is_empty()).then_some(&payload),
            headers: &headers,
            topic: &env.origin.topic,
            partition: env.origin.partition,
            offset: env.origin.offset,
        };
        decode_record(
            &rec,
            cfg.input.format,
            &cfg.input.json(),
            &cfg.pipeline.decode_options(),
        )
    }

    async fn source_check(&self, env: &Envelope) -> SourceCheck {
        let decoded = self.decode_envelope(env).ok();
        let key = decoded
            .as_ref()
            .and_then(|d| d.key.as_ref())
            .or(env.key.as_ref());
        let (Some(src), Some(key)) = (&self.source, key) else {
            return SourceCheck::QueryFailed;
        };
        let version = decoded.as_ref().and_then(|d| d.event.entity_version);
        match src.current_version(&String::from_utf8_lossy(key)).await {
            Ok(current) => dlq_policy::compare_versions(version, current),
            Err(e) => {
                tracing::warn!(id = env.event_id.as_deref().unwrap_or("-"), error = %e, "source-of-truth check failed; the event stays in the DLQ");
                SourceCheck::QueryFailed
            }
        }
    }

    async fn redeliver(
        &self,
        item: &Item,
        env: &Envelope,
        policy: dlq_policy::DlqRetry,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let Some(id) = env.event_id.clone() else {
            return Some(
                self.drop_from_dlq(
                    item,
                    env,
                    FailureReason::UnreadableEnvelope,
                    "DLQ envelope without an event id".into(),
                )
                .await,
            );
        };
        let Decoded {
            event,
            key,
            body_type,
        } = match self.decode_envelope(env) {
            Ok(d) => d,
            Err(e) => {
                return Some(
                    self.drop_from_dlq(item, env, FailureReason::UnreadableEnvelope, e.to_string())
                        .await,
                )
            }
        };
        let headers = OriginHeader::to_record(&env.origin_headers);
        let payload = Bytes::from(env.payload.clone());
        let src = Source {
            headers: Some(&headers),
            key: key.as_deref().or(env.key.as_deref()),
            body_type,
            payload: Some(&payload),
        };
        // Whether the API was called: an enrichment database error is not the API's,
        // and the breaker must not hear of it.
        let mut called = true;
        let mut seq = 0;
        let answer = match self.request(&src, &event).await {
            Ok(Body::Send { body, out }) => {
                // Each wait ends at once when the partition is handed over,
                // before it takes a drain permit, a rate slot or a breaker
                // admission; no request is made for it.
                if token.cancelled() {
                    return None;
                }
                let permit = tokio::select! {
                    biased;
                    _ = token.until_cancelled() => return None,
                    p = self.drain_permits.acquire() => p,
                };
                let Ok(_permit) = permit else {
                    return std::future::pending::<Option<Finished>>().await;
                };
                if !self.drain_pacer.slot(token).await || !self.gate(token, false).await {
                    return None;
                }
                let call = self.rate_slot(token).await?;
                seq = self.pipeline.health.call_number();
                let r = self
                    .api
                    .send(&out, &id, body, Some(env.dlq_retries + 1))
                    .await;
                self.limits.after_call(call, &r);
                r
            }
            Ok(Body::Park { reason, message }) => {
                return Some(self.drop_from_dlq(item, env, reason, message).await)
            }
            // The database, not the API: back to the DLQ.
            Err(e) => {
                called = false;
                Err(TransportError::new(
                    TransportFailure::Other,
                    format!("enrichment: {e}"),
                ))
            }
        };
        let called = called.then_some(seq);
        Some(Box::pin(self.redelivered(item, env, policy, answer, called)).await)
    }

    /// What a DLQ round's answer means for the event (`called`: the API was
    /// asked, with the call's number, so the breaker hears of it).
    async fn redelivered(
        &self,
        item: &Item,
        env: &Envelope,
        policy: dlq_policy::DlqRetry,
        answer: Result<http::Answer, TransportError>,
        called: Option<u64>,
    ) -> Finished {
        let cfg = &self.pipeline.config;
        let failure = match answer {
            Ok(a) => match self.status.classify(a.status) {
                StatusVerdict::Delivered => {
                    if let Some(seq) = called {
                        self.observe_delivered(seq);
                    }
                    metrics::counter!(m::DLQ_REDELIVERED).increment(1);
                    self.hot.delivered.increment(1);
                    return Finished::Delivered;
                }
                StatusVerdict::Failed(c) => Failure::status(c, &a),
            },
            Err(t) => Failure::transport(t),
        };
        let mut class = failure.class;
        if let Some(seq) = called.filter(|_| {
            failure.reason.reached_the_api()
                && !failure.status.is_some_and(|s| self.limits.absorbs(s))
        }) {
            if class == FailureClass::Systemic {
                // Refuted by a later delivered call: this event's failure, a
                // round used up like a transient one.
                if self.systemic_refuted_in_round(seq, &failure) {
                    class = FailureClass::Transient;
                }
            } else {
                self.observe(outcome_of(failure.class, failure.reason));
            }
        }
        self.report(&failure);
        let reason = failure.reason.as_str().to_string();
        let message = format!("DLQ round {}: {}", env.dlq_retries + 1, failure.message(""));
        let error = failure.error(message.trim_end());
        if class == FailureClass::Permanent {
            let mut parked = env.clone();
            parked.last_error = error;
            let done = self.park_envelope(item, parked).await;
            self.parked_after(failure.reason);
            return done;
        }
        let now = now_ms();
        if class == FailureClass::Systemic {
            // Not the event's fault: back to the DLQ without using up a retry.
            let mut again = env.clone();
            again.not_before_ms = dlq_policy::next_not_before(
                now,
                env.dlq_retries.max(1),
                cfg.degraded.dlq_backoff_base_ms(),
                cfg.degraded.dlq_backoff_cap_ms(),
            );
            again.last_error = error;
            if let Err(parked) = self.rewrite_dlq(item, again).await {
                return parked;
            }
            return Finished::DeadLettered { reason };
        }
        let retries = env.dlq_retries.saturating_add(1);
        if let Some(why) = dlq_policy::exhausted(policy, retries, env.first_dlq_at_ms, now) {
            let why_error = ErrorInfo::new(
                class.into(),
                FailureReason::DlqPolicy(why),
                failure.status,
                message.trim_end(),
            );
            let last = env.retried(why_error, now);
            return self.drop_enveloped(last, why).await;
        }
        let not_before = dlq_policy::next_not_before(
            now,
            retries,
            cfg.degraded.dlq_backoff_base_ms(),
            cfg.degraded.dlq_backoff_cap_ms(),
        );
        let again = env.retried(error, not_before);
        if let Err(parked) = self.rewrite_dlq(item, again).await {
            return parked;
        }
        metrics::counter!(m::DLQ_RETRIED, "reason" => reason.clone()).increment(1);
        Finished::DeadLettered { reason }
    }

    /// Back into DLQ partition p (the envelope only ever gains retries). A DLQ
    /// that refuses the record for good parks the event instead (`Err`, with
    /// what the caller returns).
    async fn rewrite_dlq(&self, item: &Item, env: Envelope) -> Result<(), Finished> {
        self.to_dlq(item.partition, env).await
    }

    async fn drop_from_dlq(
        &self,
        _item: &Item,
        env: &Envelope,
        reason: FailureReason,
        message: String,
    ) -> Finished {
        let mut last = env.clone();
        last.last_error = ErrorInfo::new(ErrorClass::Dropped, reason, None, &message);
        self.drop_enveloped(last, reason.as_str()).await
    }

    /// A drop is never silent: the envelope goes to the parking lot with its
    /// reason, and `dlq_dropped{reason}` counts it.
    async fn drop_enveloped(&self, env: Envelope, reason: &str) -> Finished {
        let done = self.to_parking(env).await;
        metrics::counter!(m::DLQ_DROPPED, "reason" => reason.to_string()).increment(1);
        done
    }

    async fn park_envelope(&self, _item: &Item, env: Envelope) -> Finished {
        self.to_parking(env).await
    }

    /// Writes `env` to DLQ partition `partition`. When the DLQ refuses it for
    /// good (too large even as a reference, not authorized, no such topic after
    /// the grace period), the event is parked with the refusal as its reason
    /// (`dlq_too_large`, …): it never waits forever.
    async fn to_dlq(&self, partition: i32, env: Envelope) -> Result<(), Finished> {
        let rec = DlqRecord {
            topic: self.pipeline.dlq_topic.clone(),
            partition: Some(partition),
            key: env.key.clone(),
            envelope: env,
        };
        let Err((refusal, detail)) = durable::write_durably(&self.peers.dlq_writer, &rec).await
        else {
            return Ok(());
        };
        let mut env = rec.envelope;
        tracing::error!(
            topic = %rec.topic,
            id = env.event_id.as_deref().unwrap_or("-"),
            origin_partition = env.origin.partition,
            origin_offset = env.origin.offset,
            refusal = refusal.as_str(),
            error = %detail,
            "the DLQ refuses this event for good; parking it"
        );
        env.last_error = ErrorInfo::new(
            ErrorClass::Systemic,
            FailureReason::DlqRefused(refusal),
            None,
            &format!("DLQ write refused: {detail}"),
        );
        Err(self.to_parking(env).await)
    }

    /// Parks `env` (its `last_error.reason` says why); the offset waits for the
    /// broker's acknowledgement. A parking lot that refuses the record for good
    /// leaves nowhere durable to put the event: Courier names it and exits
    /// non-zero (the orchestrator restarts it, the offset stays before the event)
    /// rather than stall silently or lose it.
    async fn to_parking(&self, env: Envelope) -> Finished {
        let reason = env.last_error.reason.clone();
        let rec = DlqRecord {
            topic: self.pipeline.parking_topic.clone(),
            partition: None,
            key: env.key.clone(),
            envelope: env,
        };
        if let Err((refusal, detail)) = durable::write_durably(&self.peers.dlq_writer, &rec).await {
            let e = &rec.envelope;
            let why = format!(
                "the parking lot {} refuses event {} ({}/{}@{}) for good ({}: {detail}); fix the topic (size limit, ACLs, existence) and restart",
                rec.topic,
                e.event_id.as_deref().unwrap_or("-"),
                e.origin.topic,
                e.origin.partition,
                e.origin.offset,
                refusal.as_str()
            );
            self.pipeline.fatal(why);
            // The event is neither delivered nor durable: its token must not
            // report an outcome (the offset stays before it) while the process
            // shuts down.
            return std::future::pending().await;
        }
        metrics::counter!(m::PARKED, "reason" => reason.clone()).increment(1);
        Finished::Parked { reason }
    }

    /// `None`: the partition was handed over between two tries (`token`
    /// cancelled): no further request, no outcome.
    async fn deliver(
        &self,
        item: &Item,
        ev: &Event,
        permit: OwnedSemaphorePermit,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let in_flight = InFlight::new(&self.hot.in_flight);
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut hypothesis = crate::core::systemic::EventHypothesis::default();
        let mut demoted: Option<u32> = None;
        let failure = loop {
            attempts += 1;
            self.hot.attempts.increment(1);
            let mut called: Option<u64> = None;
            let src = Source {
                headers: item.headers.as_deref(),
                key: item.entity_key(),
                body_type: item.body_type,
                payload: item.payload.as_ref(),
            };
            let failure = match self.request(&src, ev).await {
                Ok(Body::Send { body, out }) => match self
                    .call(&ev.id, &out, body, token, hypothesis.suspect())
                    .await
                {
                    None => return None, // Handed over while waiting at the gate.
                    Some((answer, seq)) => {
                        called = Some(seq);
                        match answer {
                            Ok(answer) => match self.status.classify(answer.status) {
                                StatusVerdict::Delivered => {
                                    drop(in_flight);
                                    self.hot.latency.record(start.elapsed().as_secs_f64());
                                    if let Some(ts) = item.timestamp_ms {
                                        let age = (now_ms() - ts).max(0) as f64 / 1000.0;
                                        self.hot.age.record(age);
                                    }
                                    self.hot.delivered.increment(1);
                                    return Some(Finished::Delivered);
                                }
                                StatusVerdict::Failed(class) => Failure::status(class, &answer),
                            },
                            Err(t) => Failure::transport(t),
                        }
                    }
                },
                Ok(Body::Park { reason, message }) => {
                    drop(in_flight);
                    drop(permit);
                    let info = ErrorInfo::new(ErrorClass::Permanent, reason, None, &message);
                    return Some(Box::pin(self.park(item, info)).await);
                }
                Err(e) => {
                    let reason = match e {
                        EnrichError::Timeout => FailureReason::EnrichmentTimeout,
                        _ => FailureReason::EnrichmentUnavailable,
                    };
                    Failure {
                        class: FailureClass::Transient,
                        reason,
                        status: None,
                        retry_after: None,
                        detail: Some(e.to_string()),
                        hint: None,
                        body: None,
                    }
                }
            };
            self.report(&failure);
            if token.cancelled() {
                return None;
            }
            let class = failure.class;
            if class == FailureClass::Systemic {
                // A hypothesis about the API (core::systemic): while nothing
                // refutes it, the event waits at the gate without using up a
                // try; once refuted, its own systemic answers use up
                // `api.systemic_budget`, then it is parked.
                let step = called
                    .filter(|_| failure.reason.reached_the_api())
                    .map(|seq| self.systemic_answer(&mut hypothesis, seq, &failure));
                attempts = attempts.saturating_sub(1);
                match step {
                    None | Some(SystemicStep::Wait) => continue,
                    Some(SystemicStep::Retry { n }) => {
                        tokio::select! {
                            biased;
                            _ = token.until_cancelled() => return None,
                            _ = tokio::time::sleep(self.systemic_delay(n)) => {}
                        }
                        continue;
                    }
                    Some(SystemicStep::Demote { answers }) => {
                        demoted = Some(answers);
                        break failure;
                    }
                }
            }
            if class == FailureClass::Transient && self.pipeline.health.systemic_outage() {
                // Credentials or the API itself, not this event: the breaker has
                // tripped, so the next try waits at the gate. It does not use up the
                // event's tries, and the event never goes to the DLQ for it.
                attempts = attempts.saturating_sub(1);
                continue;
            }
            if class.is_retryable() {
                let jitter: f64 = rand::random();
                if let Some(d) =
                    self.policy
                        .next_delay(attempts, start.elapsed(), failure.retry_after, jitter)
                {
                    tracing::debug!(attempts, reason = %failure.reason, delay_ms = d.as_millis() as u64, "transient failure, retrying in place");
                    // A handover ends the wait at once (the drain does not
                    // wait out a backoff for a request that will not be made).
                    tokio::select! {
                        biased;
                        _ = token.until_cancelled() => return None,
                        _ = tokio::time::sleep(d) => {}
                    }
                    continue;
                }
            }
            break failure;
        };
        drop(in_flight);
        drop(permit);
        let class = failure.class;
        let what = match demoted {
            Some(n) => format!(
                "{n} times after calls sent later were delivered (api.systemic_budget): parked"
            ),
            None => format!("after {attempts} tries"),
        };
        let info = failure.error(&failure.message(&what));
        // Boxed: the failure path (DLQ writer RPC, retries) is rare and its future
        // would otherwise size every delivery's state machine.
        Some(if class == FailureClass::Permanent || demoted.is_some() {
            let done = Box::pin(self.park(item, info)).await;
            self.parked_after(failure.reason);
            done
        } else {
            Box::pin(self.dead_letter(item, info)).await
        })
    }

    /// One API call on the main path: waits while the breaker is open, and feeds
    /// the breaker with what the answer says about the API (a systemic answer:
    /// the caller, with the event's hypothesis). With the answer, the call's
    /// number (`Health::call_number`).
    /// `None`: the partition was handed over while the call waited at the
    /// gate (no request made).
    async fn call(
        &self,
        id: &str,
        out: &Outgoing,
        body: Bytes,
        token: &CompletionToken,
        suspect: bool,
    ) -> Option<(Result<http::Answer, TransportError>, u64)> {
        if !self.gate(token, suspect).await {
            return None;
        }
        let call = self.rate_slot(token).await?;
        let seq = self.pipeline.health.call_number();
        let r = self.api.send(out, id, body, None).await;
        self.limits.after_call(call, &r);
        match &r {
            // Back-pressure the concurrency limit answers, not an outage.
            Ok(a) if self.limits.absorbs(a.status) => {}
            Ok(a) => match self.status.classify(a.status) {
                StatusVerdict::Delivered => self.observe_delivered(seq),
                // The caller weighs it against the event's hypothesis.
                StatusVerdict::Failed(FailureClass::Systemic) => {}
                StatusVerdict::Failed(c) => {
                    self.observe(outcome_of(c, FailureReason::Http(a.status)))
                }
            },
            Err(t) if t.kind.reached_the_api() && t.kind.class() == FailureClass::Systemic => {}
            Err(t) if t.kind.reached_the_api() => {
                self.observe(outcome_of(t.kind.class(), FailureReason::Transport(t.kind)))
            }
            // A request that could not be built says nothing about the API.
            Err(_) => {}
        }
        Some((r, seq))
    }

    /// The request for an event: the route its type matches (URL, method,
    /// headers, body = event or data), the Content-Type of its input format,
    /// the Kafka headers `api.forward_headers` names and its trace context.
    async fn request(&self, src: &Source<'_>, ev: &Event) -> Result<Body, EnrichError> {
        let route = self.routes.find(&ev.event_type);
        let mut out = Outgoing {
            content_type: Some(src.body_type.content_type().into()),
            ..Outgoing::default()
        };
        let body = match route {
            Some(r) if r.body == BodyMode::Data => match data_of(src, ev) {
                Some((data, ct)) => {
                    out.content_type = Some(ct);
                    data
                }
                None => {
                    return Ok(Body::Park {
                        reason: FailureReason::BodyUnbuildable,
                        message: "the event's data_base64 is not base64".into(),
                    })
                }
            },
            _ => match self.body(src.key, ev).await? {
                Body::Send { body, .. } => body,
                park => return Ok(park),
            },
        };
        if let Some(r) = route {
            let key = src.key.map(String::from_utf8_lossy).unwrap_or_default();
            let attrs = Attributes {
                event_type: &ev.event_type,
                subject: ev.subject.as_deref().unwrap_or(""),
                id: &ev.id,
                key: &key,
            };
            // A value that would change the route's path (`..`, `.`, empty
            // segment) parks the event: the request is never sent.
            match r.url.render_url(&attrs) {
                Ok(url) => out.url = Some(url),
                Err(e) => {
                    return Ok(Body::Park {
                        reason: FailureReason::Transport(TransportFailure::Request),
                        message: e.to_string(),
                    })
                }
            }
            out.method = r.method;
            for (name, t) in &r.headers {
                out.headers
                    .push((name.clone(), Bytes::from(t.render(&attrs, false))));
            }
        }
        let headers = src.headers.unwrap_or_default();
        for name in &self.forward_headers {
            let value = headers
                .iter()
                .rev()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.clone());
            // A value HTTP cannot carry is left out, not the event's failure.
            if let Some(v) = value.filter(|v| HeaderValue::from_bytes(v).is_ok()) {
                out.headers.push((name.clone(), v));
            }
        }
        // With OTLP on, the API's parent is Courier's delivery span (itself a
        // child of the event's context); otherwise the event's context as it is.
        let exported = crate::otel::enabled()
            .then(|| crate::otel::headers_of(&tracing::Span::current()))
            .flatten();
        if let Some(tc) = exported.or_else(|| trace::extract(&ev.raw, src.headers)) {
            out.headers
                .push(("traceparent".into(), Bytes::from(tc.traceparent)));
            if let Some(ts) = tc.tracestate {
                out.headers.push(("tracestate".into(), Bytes::from(ts)));
            }
        }
        Ok(Body::Send { body, out })
    }

    /// The body to POST: the original bytes, or the event with its enrichment
    /// (looked up by the entity `key`).
    async fn body(&self, key: Option<&[u8]>, ev: &Event) -> Result<Body, EnrichError> {
        let send = |body: Bytes| Body::Send {
            body,
            out: Outgoing::default(),
        };
        let (Some(enricher), Some(key)) = (&self.enricher, key) else {
            return Ok(send(ev.raw.clone()));
        };
        let cfg = &self.pipeline.config.enrichment;
        let key = String::from_utf8_lossy(key);
        // Boxed: the lookup (moka + deadpool + tokio-postgres) is a large future,
        // and unboxed it would size every delivery's state machine, enrichment or not.
        match Box::pin(enricher.lookup(&key)).await? {
            Some(doc) => Ok(
                match crate::core::event::with_attribute(&ev.raw, &cfg.field, &doc) {
                    Ok(body) => send(body),
                    Err(e) => Body::Park {
                        reason: FailureReason::BodyUnbuildable,
                        message: e.to_string(),
                    },
                },
            ),
            None => Ok(match cfg.on_missing {
                OnMissing::Deliver => send(ev.raw.clone()),
                OnMissing::Park => Body::Park {
                    reason: FailureReason::EnrichmentMissing,
                    message: "no enrichment row for the event's key".into(),
                },
            }),
        }
    }

    fn envelope(&self, item: &Item, error: ErrorInfo) -> Envelope {
        let now = now_ms();
        let (event_id, event_type) = match &item.work {
            Work::Deliver(e) => (Some(e.id.clone()), Some(e.event_type.clone())),
            Work::FromDlq(env) => (env.event_id.clone(), env.event_type.clone()),
            Work::Park { .. } => (None, None),
        };
        Envelope {
            version: ENVELOPE_VERSION_PAYLOAD,
            event_id,
            event_type,
            key: item.key.clone(),
            payload: item
                .payload
                .as_ref()
                .map(|b| b.to_vec())
                .unwrap_or_default(),
            omitted: None,
            origin_headers: crate::core::envelope::OriginHeader::from_record(
                item.headers.as_deref(),
            ),
            dlq_retries: 0,
            first_dlq_at_ms: now,
            not_before_ms: now + self.pipeline.config.degraded.dlq_backoff_base_ms() as i64,
            last_error: error,
            origin: Origin {
                topic: item.topic.to_string(),
                partition: item.partition,
                offset: item.offset,
                timestamp_ms: item.timestamp_ms,
                consumer_group: self.pipeline.config.kafka.group_id.clone(),
            },
        }
    }

    async fn park(&self, item: &Item, error: ErrorInfo) -> Finished {
        self.to_parking(self.envelope(item, error)).await
    }

    async fn dead_letter(&self, item: &Item, error: ErrorInfo) -> Finished {
        let reason = error.reason.clone();
        if let Err(parked) = self
            .to_dlq(item.partition, self.envelope(item, error))
            .await
        {
            return parked;
        }
        metrics::counter!(m::DLQ_WRITTEN, "reason" => reason.clone()).increment(1);
        // Flood guard: many events going to the DLQ at once is systemic.
        if let Some(t) = self.pipeline.health.dlq_written() {
            self.on_transition(t);
        }
        Finished::DeadLettered { reason }
    }
}

/// Where an event's request is built from: its record (or, on a DLQ round,
/// the origin record the envelope carries).
struct Source<'a> {
    headers: Option<&'a [Header]>,
    /// The entity key (enrichment, `{key}`).
    key: Option<&'a [u8]>,
    body_type: BodyType,
    payload: Option<&'a Bytes>,
}

/// An event's data, for `body = "data"`, with its Content-Type: a binary-mode
/// event's record value (its `content-type` header), or a structured event's
/// `data` member (JSON) or `data_base64` bytes. `None`: not base64.
fn data_of(src: &Source<'_>, ev: &Event) -> Option<(Bytes, std::borrow::Cow<'static, str>)> {
    let headers = src.headers.unwrap_or_default();
    let header = |name: &str| {
        headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if header("ce_specversion").is_some() {
        let ct = header("content-type")
            .flatten()
            .and_then(|v| String::from_utf8(v.to_vec()).ok())
            .filter(|v| HeaderValue::from_str(v).is_ok())
            .map_or("application/octet-stream".into(), Into::into);
        return Some((src.payload.cloned().unwrap_or_default(), ct));
    }
    let (data, json) = crate::core::mapping::structured_data(&ev.raw)?;
    let ct = if json {
        "application/json"
    } else {
        "application/octet-stream"
    };
    Some((Bytes::from(data), ct.into()))
}

/// Holds one unit of `courier_in_flight` from its creation until it is
/// dropped, whichever way a delivery ends.
struct InFlight<'a>(&'a metrics::Gauge);

impl<'a> InFlight<'a> {
    fn new(gauge: &'a metrics::Gauge) -> InFlight<'a> {
        gauge.increment(1.0);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
