//! Stage 1, the job: a delivery task's entry. Runs the work an [`Item`] needs
//! (deliver, park bad input, or a DLQ record's turn) inside the task's
//! [`durable::WriteScope`], and reports the outcome through the token unless the
//! partition was handed over first.

use super::attempt::Tries;
use super::durable::{self, DlqWrite};
use super::http::Api;
use super::report::Failure;
use super::token::{CompletionToken, Finished};
use super::{Deliverer, Item, Job, Work};
use crate::core::classify::{ErrorClass, FailureReason};
use crate::core::destination::Diverted;
use crate::core::envelope::ErrorInfo;
use crate::core::trace;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// Does the job's work and reports its outcome through the token. A delivery
    /// runs with `permit` (the pool's dispatcher takes one before it spawns the
    /// task) or waits for one here.
    pub(crate) async fn run(self: Arc<Self>, job: Job, permit: Option<OwnedSemaphorePermit>) {
        let Job { item, token } = job;
        let work = self.work(&item, &token, permit);
        if let Some(outcome) = durable::in_scope(token.cancellation(), work)
            .await
            .flatten()
        {
            token.finish(outcome);
        }
    }

    /// Writes the job's event to the DLQ without a try, for `why`
    /// (`core::partition::outage`): its destination has been down longer
    /// than `degraded.destination_hold` (or holds its share of the
    /// partition), reason `destination_unavailable`; or an earlier event of
    /// its key to this destination is in the DLQ, reason `key_in_dlq` (a
    /// DLQ record's envelope is written again, behind it). The
    /// flood guard does not count it (no API answered).
    pub(crate) async fn divert(self: Arc<Self>, job: Job, why: Diverted) {
        let Job { item, token } = job;
        if token.cancelled() {
            return;
        }
        let dest = self.caller.calls.ears.destination();
        let (reason, message) = match why {
            Diverted::Unavailable => (
                FailureReason::DestinationUnavailable,
                format!("destination {dest} unavailable longer than degraded.destination_hold (or holding its share of the partition)"),
            ),
            Diverted::BehindDlq => (
                FailureReason::KeyInDlq,
                format!("an earlier event of its key to destination {dest} is in the DLQ"),
            ),
        };
        let info = ErrorInfo::new(ErrorClass::Transient, reason, None, &message);
        metrics::counter!(crate::metrics::DIVERTED, "destination" => dest.to_string(), "reason" => reason.as_str()).increment(1);
        let work = async {
            match &item.work {
                // A DLQ record behind an earlier envelope of its key that was
                // written again: its envelope goes to the back of the DLQ
                // too, behind that one, rounds and schedule unchanged.
                Work::FromDlq(env) => {
                    let mut again = (**env).clone();
                    again.last_error = info;
                    match self.writes.rewrite_dlq(&item, again).await {
                        Ok(at) => Finished::DeadLettered {
                            reason: reason.as_str().into(),
                            at,
                        },
                        Err(parked) => parked,
                    }
                }
                _ => self.writes.dead_letter(&item, info, true).await,
            }
        };
        let work = Box::pin(work).instrument(event_span(&item));
        if let Some(outcome) = durable::in_scope(token.cancellation(), work).await {
            token.finish(outcome);
        }
    }

    /// Writes an event of an ordered run to the DLQ without a try, behind
    /// an earlier event of its run that went there (`ordered`): reason
    /// `key_in_dlq`, as a divert behind the DLQ. The caller is in the
    /// run's handover scope.
    pub(super) async fn follow_into_dlq(&self, item: &Item) -> Finished {
        let dest = self.caller.calls.ears.destination();
        let reason = FailureReason::KeyInDlq;
        let message = format!(
            "an earlier event of its key to destination {dest} is in the DLQ (ordered run)"
        );
        let info = ErrorInfo::new(ErrorClass::Transient, reason, None, &message);
        metrics::counter!(crate::metrics::DIVERTED, "destination" => dest.to_string(), "reason" => reason.as_str()).increment(1);
        Box::pin(self.writes.dead_letter(item, info, true))
            .instrument(event_span(item))
            .await
    }

    /// The rest of a delivery whose first try was made without a task
    /// (`inline`) and failed: its tries go on from that failure (with the
    /// call's number), as in [`Deliverer::run`].
    pub(super) async fn run_after(
        self: Arc<Self>,
        job: Job,
        permit: OwnedSemaphorePermit,
        t: Tries,
        failed: (Failure, Option<super::send::Made>),
    ) {
        let Job { item, token } = job;
        // Only deliveries are tried inline (a dropped token reports errored).
        let Work::Deliver(ev) = &item.work else {
            return;
        };
        let tries = self.tries(&item, ev, permit, &token, t, Some(failed));
        let work = tries.instrument(event_span(&item));
        if let Some(outcome) = durable::in_scope(token.cancellation(), work)
            .await
            .flatten()
        {
            token.finish(outcome);
        }
    }

    /// The job's work; `None`: handed over first (no outcome).
    pub(super) async fn work(
        &self,
        item: &Arc<Item>,
        token: &CompletionToken,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Option<Finished> {
        let span = || event_span(item);
        if token.cancelled() {
            return None; // Handed over before it started: errored, never begun.
        }
        let outcome = match &item.work {
            Work::Deliver(ev) => {
                let permit = match permit {
                    Some(p) => p,
                    // Waits for a permit unless the partition is handed over first.
                    // Handed over first: no permit, no outcome.
                    None => self.permits.event_for(token).await?,
                };
                let delivered = if crate::otel::enabled() {
                    let parent = trace::extract(&ev.raw, item.headers.as_deref());
                    let span = crate::otel::delivery_span(&ev.id, parent.as_ref());
                    Box::pin(self.deliver(item, ev, permit, token))
                        .instrument(span)
                        .await
                } else {
                    Box::pin(self.deliver(item, ev, permit, token))
                        .instrument(span())
                        .await
                };
                match delivered {
                    Some(outcome) => outcome,
                    None => return None, // Cancelled between tries.
                }
            }
            Work::Park { reason, message } => {
                let info = ErrorInfo::new(ErrorClass::Poison, *reason, None, message);
                Box::pin(self.writes.park(item, info))
                    .instrument(span())
                    .await
            }
            // Decided when it was decoded: nothing to send, nothing to write.
            Work::Filtered { filter } => {
                tracing::trace!(%filter, offset = item.offset, "filtered: done without a request");
                super::token::Finished::Delivered
            }
            Work::FromDlq(env) => {
                match Box::pin(self.retry_from_dlq(item, env, token))
                    .instrument(span())
                    .await
                {
                    Some(outcome) => outcome,
                    None => return None, // Handed over before its request.
                }
            }
        };
        Some(outcome)
    }
}

/// An event's span. A root span: the message may have been sent from inside
/// another event's span, and chaining events would keep them all alive. At
/// DEBUG: an enabled span per event cost ~10 % of the CPU per event at the
/// default `info` (docs/BENCHMARKS.md); the few per-event warnings name the
/// event themselves.
pub(super) fn event_span(item: &Item) -> tracing::Span {
    tracing::debug_span!(
        parent: None,
        "event",
        id = item.event_id().unwrap_or("-"),
        topic = %item.topic,
        partition = item.partition,
        offset = item.offset,
    )
}
