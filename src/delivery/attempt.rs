//! Stage 4, the attempt loop: an event's tries on the main path. Each try
//! builds the request and makes the call; a failed one is reported, and
//! `core::attempt` decides what comes next — this loop only carries it out
//! (sleep and retry, go back to the gate, or write the durable outcome).

use super::durable::DlqWrite;
use super::http::Api;
use super::report::Failure;
use super::request::{Body, Source};
use super::token::{CompletionToken, Finished};
use super::{Deliverer, Item};
use crate::core::attempt::{self, Breaker, Failed, Next, ParkCause, Progress};
use crate::core::classify::{ErrorClass, FailureClass, StatusVerdict};
use crate::core::envelope::ErrorInfo;
use crate::core::event::Event;
use crate::core::systemic::EventHypothesis;
use crate::runtime::now_ms;
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// `None`: the partition was handed over between two tries (`token`
    /// cancelled): no further request, no outcome.
    pub(super) async fn deliver(
        &self,
        item: &Item,
        ev: &Event,
        permit: OwnedSemaphorePermit,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let in_flight = InFlight::new(&self.hot.in_flight);
        let start = Instant::now();
        // Tries that counted (a systemic wait at the gate does not).
        let mut tries = 0u32;
        let mut hypothesis = EventHypothesis::default();
        let src = Source {
            headers: item.headers.as_deref(),
            key: item.entity_key(),
            body_type: item.body_type,
            payload: item.payload.as_ref(),
        };
        let (failure, next) = loop {
            tries += 1;
            self.hot.attempts.increment(1);
            let mut called: Option<u64> = None;
            let failure = match self.request(&src, ev).await {
                Ok(Body::Send { body, out }) => {
                    // `None`: handed over while waiting at the gate.
                    let (answer, seq) = self
                        .call(&ev.id, &out, body, token, hypothesis.suspect())
                        .await?;
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
                // Cannot be sent: parked, never retried.
                Ok(Body::Park { reason, message }) => {
                    drop(in_flight);
                    drop(permit);
                    let info = ErrorInfo::new(ErrorClass::Permanent, reason, None, &message);
                    return Some(Box::pin(self.park(item, info)).await);
                }
                Err(e) => Failure::enrichment(e),
            };
            self.report(&failure);
            // A systemic answer is a hypothesis about the API (core::systemic),
            // kept across the event's tries; the breaker hears of it here —
            // also after a handover: it admitted the call (maybe as a half-open
            // probe, whose slot stays taken until its answer is heard).
            let systemic = (failure.class == FailureClass::Systemic)
                .then(|| {
                    called
                        .filter(|_| failure.reason.reached_the_api())
                        .map(|seq| self.systemic_answer(&mut hypothesis, seq, &failure))
                })
                .flatten();
            if token.cancelled() {
                return None;
            }
            let failed = Failed {
                class: failure.class,
                systemic,
                retry_after: failure.retry_after,
            };
            let breaker = Breaker {
                systemic_outage: failure.class == FailureClass::Transient
                    && self.pipeline.health.systemic_outage(),
            };
            let at = Progress {
                tries,
                elapsed: start.elapsed(),
                jitter: rand::random(),
            };
            let next = attempt::decide(&self.policy, failed, breaker, at);
            if !next.spends_a_try() {
                tries = tries.saturating_sub(1);
            }
            let delay = match next {
                Next::RetryIn(d) => {
                    tracing::debug!(attempts = tries, reason = %failure.reason, delay_ms = d.as_millis() as u64, "transient failure, retrying in place");
                    d
                }
                Next::SystemicRetryIn(d) => d,
                // The next call waits at the breaker's gate.
                Next::WaitAtGate => continue,
                Next::DeadLetter | Next::Park(_) => break (failure, next),
            };
            // A handover ends the wait at once (no backoff is waited out for a
            // request that will not be made).
            tokio::select! {
                biased;
                _ = token.until_cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
        };
        drop(in_flight);
        drop(permit);
        let what = match next {
            Next::Park(ParkCause::SystemicBudgetSpent { answers }) => format!(
                "{answers} times after calls sent later were delivered (api.systemic_budget): parked"
            ),
            _ => format!("after {tries} tries"),
        };
        let info = failure.error(&failure.message(&what));
        // Boxed: the failure path (DLQ writer RPC, retries) is rare and its future
        // would otherwise size every delivery's state machine.
        Some(match next {
            Next::Park(_) => {
                let done = Box::pin(self.park(item, info)).await;
                self.parked_after(failure.reason);
                done
            }
            _ => Box::pin(self.dead_letter(item, info)).await,
        })
    }
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
