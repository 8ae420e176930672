//! Stage 3, the call: one API call for one event — alone (the breaker's
//! gate, the request and rate slots, one request through the [`http::Api`]
//! seam, heard once: [`super::hear`]), or into its route's batch, where the
//! batch is the call: it waits at the gate, takes the slots and is heard
//! once for every event in it ([`super::batch`]).

use super::batch::Batcher;
use super::hear::Ears;
use super::http::{self, Api, Outgoing, TransportError};
use super::limits;
use super::token::CompletionToken;
use crate::api_health::{Admission, ApiHealth};
use crate::core::classify::TransportFailure;
use bytes::Bytes;
use std::sync::Arc;

/// What an event learns of the call that carried it (alone or in a batch):
/// its number (`ApiHealth::call_number`), which `core::systemic` judges
/// systemic answers by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(in crate::delivery) struct Sent {
    pub(in crate::delivery) seq: u64,
}

/// A call made for an event, and — a systemic answer to a call alone — the
/// admission the event's hypothesis reports to
/// ([`super::Deliverer::systemic_answer`]). Anything else was heard already.
pub(super) struct Made {
    pub(super) sent: Sent,
    pub(super) pending: Option<Admission>,
}

impl Made {
    /// A call whose answer was heard (or a batch's).
    pub(super) fn heard(sent: Sent) -> Made {
        Made {
            sent,
            pending: None,
        }
    }
}

/// Stage 3's parts: what a call passes through — the pool's permits, the
/// breaker's gate, the request and rate slots, the HTTP client (or the
/// route's batch) — and what hears its answer.
pub(super) struct Sender<A> {
    pub(super) api: A,
    /// What the breaker hears of each call, and the one reading of an answer.
    pub(super) ears: Arc<Ears>,
    /// Every permit is taken through this gate (the dispatcher's, an event's
    /// again after its back-off), so none bypasses the limit's shrinking.
    gate: tokio::sync::Mutex<limits::PermitGate>,
    /// The adaptive concurrency limit (and what feeds it) the permits follow,
    /// or with batching the request slots.
    pub(super) limits: Arc<limits::Limits>,
    /// Batches being formed (`[api.batch]`, the routes' batches).
    pub(super) batcher: Arc<Batcher<A>>,
    health: Arc<ApiHealth>,
}

impl<A: Api> Sender<A> {
    pub(super) fn new(
        api: A,
        ears: Arc<Ears>,
        gate: limits::PermitGate,
        limits: Arc<limits::Limits>,
        batcher: Arc<Batcher<A>>,
        health: Arc<ApiHealth>,
    ) -> Sender<A> {
        Sender {
            api,
            ears,
            gate: tokio::sync::Mutex::new(gate),
            limits,
            batcher,
            health,
        }
    }

    /// One of the pool's permits, within the current concurrency limit (fixed
    /// at `pipeline.concurrency` with batching, where the limit holds
    /// requests). Takers queue in turn (the dispatcher for the next queued
    /// delivery; an event for its next try after a back-off). `None`: never
    /// (the semaphore is not closed).
    pub(super) async fn permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.gate.lock().await.acquire().await
    }

    /// Waits until the breaker admits a call; `None`: the partition was
    /// handed over first (the wait ends at once, before the breaker counts
    /// an admission — a half-open probe — for a call that will not be made).
    /// `suspect`: the event was refused systemic before (it waits behind the
    /// others and takes at most a share of the half-open probes).
    pub(super) async fn gate(&self, token: &CompletionToken, suspect: bool) -> Option<Admission> {
        if token.cancelled() {
            return None;
        }
        // The usual case, a closed breaker, without registering for the
        // cancellation (a lock on the partition's notifier per event).
        if let Some(admitted) = self.health.admit_now(suspect) {
            return Some(admitted);
        }
        tokio::select! {
            biased;
            _ = token.until_cancelled() => None,
            admitted = self.health.gate(suspect) => Some(admitted),
        }
    }

    /// Waits for a request slot (with batching, the adaptive limit holds
    /// requests: `limits::LimitOn::Requests`) and the API rate limit's slot
    /// (`api.rate_limit_per_sec`), then counts the call for the concurrency
    /// limit; `None`: the partition was handed over first, and no request is
    /// made for it. A wait dropped here takes no slot (a batch taken from
    /// Redis but not yet counted is lost to the group, which errs on the side
    /// of fewer calls).
    pub(super) async fn call_slot(&self, token: &CompletionToken) -> Option<limits::Call> {
        if !self.limits.calls_wait() {
            return Some(self.limits.before_call().await);
        }
        tokio::select! {
            biased;
            _ = token.until_cancelled() => None,
            call = self.limits.before_call() => Some(call),
        }
    }

    /// One API call for one event (`redelivery`: the DLQ round): into its
    /// route's batch (`[api.batch]`: the batch waits at the gate and is
    /// heard), or alone after the gate and its call slot, heard here. With
    /// the answer, the call made. `None`: handed over first (no answer for
    /// it; an admission taken is freed).
    pub(super) async fn call(
        &self,
        id: &str,
        out: &Outgoing,
        body: Bytes,
        redelivery: Option<u32>,
        token: &CompletionToken,
        suspect: bool,
    ) -> Option<(Result<http::Answer, TransportError>, Made)> {
        // `request` left `batch` only on a body a batch can hold.
        if let Some(spec) = out.batch.as_ref() {
            let answer = self
                .batcher
                .submit(out, spec, id, body, redelivery, suspect);
            let (r, sent) = tokio::select! {
                biased;
                _ = token.until_cancelled() => return None,
                r = answer => r.unwrap_or_else(|_| (Err(no_answer()), Sent::default())),
            };
            return Some((r, Made::heard(sent)));
        }
        let admission = self.gate(token, suspect).await?;
        let call = self.call_slot(token).await?;
        let seq = self.health.call_number();
        let r = self.api.send(out, id, body, redelivery).await;
        self.limits.after_call(call, &r);
        let pending = self.ears.hear(admission, &r, seq);
        let sent = Sent { seq };
        Some((r, Made { sent, pending }))
    }
}

/// The answer of an event whose batch ended without one (its task is gone:
/// the process is ending).
pub(super) fn no_answer() -> TransportError {
    TransportError::new(
        TransportFailure::Other,
        "the batch of this event ended without an answer",
    )
}
