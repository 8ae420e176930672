//! Stage 3, the call: the waits before a request (the breaker's gate; the
//! request and rate slots, `call_slot`) and one API call on the main path,
//! whose answer feeds the breaker and the adaptive concurrency limit.

use super::durable::DlqWrite;
use super::http::{self, Api, Outgoing, TransportError};
use super::limits;
use super::token::CompletionToken;
use super::Deliverer;
use crate::core::classify::{
    outcome_of, FailureClass, FailureReason, StatusVerdict, TransportFailure,
};
use bytes::Bytes;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// Waits until the breaker admits a call; `false`: the partition was
    /// handed over first (the wait ends at once, before the breaker counts an
    /// admission — a half-open probe — for a call that will not be made).
    /// `suspect`: the event was refused systemic before (it waits behind the
    /// others and takes at most a share of the half-open probes).
    pub(super) async fn gate(&self, token: &CompletionToken, suspect: bool) -> bool {
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

    /// The request for one event, after the gate: into its route's batch
    /// (`[api.batch]`, a JSON body), or alone after its call slot. With the
    /// call's number. `None`: handed over first (no answer for it).
    pub(super) async fn send_once(
        &self,
        out: &Outgoing,
        id: &str,
        body: Bytes,
        redelivery: Option<u32>,
        token: &CompletionToken,
    ) -> Option<(Result<http::Answer, TransportError>, u64)> {
        // `request` left `batch` only on a body a batch can hold.
        if let Some(spec) = out.batch.as_ref() {
            let answer = self.batcher.submit(out, spec, id, body, redelivery);
            return tokio::select! {
                biased;
                _ = token.until_cancelled() => None,
                r = answer => Some(r.unwrap_or_else(|_| {
                    (
                        Err(TransportError::new(
                            TransportFailure::Other,
                            "the batch of this event ended without an answer",
                        )),
                        0,
                    )
                })),
            };
        }
        let call = self.call_slot(token).await?;
        let seq = self.pipeline.health.call_number();
        let r = self.api.send(out, id, body, redelivery).await;
        self.limits.after_call(call, &r);
        Some((r, seq))
    }

    /// One API call on the main path: waits while the breaker is open, and feeds
    /// the breaker with what the answer says about the API (a systemic answer:
    /// the caller, with the event's hypothesis). With the answer, the call's
    /// number (`ApiHealth::call_number`).
    /// `None`: the partition was handed over while the call waited at the
    /// gate (no request made).
    pub(super) async fn call(
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
        let (r, seq) = self.send_once(out, id, body, None, token).await?;
        self.heard(&r, seq);
        Some((r, seq))
    }

    /// What the breaker and the concurrency limit hear of an answer on the
    /// main path (a systemic one: the caller, with the event's hypothesis).
    pub(super) fn heard(&self, r: &Result<http::Answer, TransportError>, seq: u64) {
        match r {
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
    }
}
