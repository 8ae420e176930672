//! Stage 5, the attempt loop: an event's tries on the main path. Each try
//! builds the request and makes the call; a failed one is reported, and
//! `core::attempt` decides what comes next — this loop only carries it out
//! (sleep and retry, go back to the gate, or write the durable outcome).

use super::durable::DlqWrite;
use super::http::Api;
use super::report::Failure;
use super::request::{Body, Source};
use super::send::Made;
use super::token::{CompletionToken, Finished};
use super::{Deliverer, Item};
use crate::clock::Stamp;
use crate::core::attempt::{self, Breaker, Failed, Next, ParkCause, Progress};
use crate::core::classify::{ErrorClass, FailureClass, FailureReason};
use crate::core::envelope::ErrorInfo;
use crate::core::event::Event;
use crate::core::systemic::EventHypothesis;
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// `None`: the partition was handed over between two tries (`token`
    /// cancelled): no further request, no outcome. The permit is given back
    /// while the event waits out a back-off, and taken again through the
    /// pool's gate for its next try: an event the API keeps refusing must not
    /// hold capacity it does not use (with the adaptive limit cut to a few
    /// permits by its own 503s, it held them all, and the other events waited
    /// out its retry budget).
    pub(super) async fn deliver(
        &self,
        item: &Item,
        ev: &Event,
        permit: OwnedSemaphorePermit,
        token: &CompletionToken,
    ) -> Option<Finished> {
        let t = Tries::new(&self.hot.in_flight);
        self.tries(item, ev, permit, token, t, None).await
    }

    /// An event's tries from `t` on. `made`: a try already made and failed
    /// (the first, without a task: `inline`), with its call, which the loop
    /// goes on from.
    pub(super) async fn tries(
        &self,
        item: &Item,
        ev: &Event,
        permit: OwnedSemaphorePermit,
        token: &CompletionToken,
        mut t: Tries,
        mut made: Option<(Failure, Option<Made>)>,
    ) -> Option<Finished> {
        let mut permit = Some(permit);
        let src = Source::of(item);
        let (failure, next) = loop {
            let (failure, called) = match made.take() {
                Some(made) => made,
                None => match self.try_once(&src, ev, token, &mut t).await? {
                    Tried::Delivered(at) => return Some(self.delivered(item, t, at)),
                    // Cannot be sent: parked, never retried.
                    Tried::Unsendable { reason, message } => {
                        drop(t);
                        drop(permit);
                        return Some(Box::pin(self.park_unsendable(item, reason, &message)).await);
                    }
                    Tried::Failed(failure, called) => (failure, called),
                },
            };
            let next = self.after_failure(&mut t, &failure, called);
            if token.cancelled() {
                return None;
            }
            match t.wait(next, &failure) {
                Wait::Sleep(delay) => {
                    // After back-pressure it keeps its permit for about
                    // a round trip first (`Limits::back_pressure_hold`).
                    let hold = self
                        .caller
                        .calls
                        .limits
                        .back_pressure_hold(failure.load)
                        .min(delay);
                    if !sleep_unless_cancelled(token, hold).await {
                        return None;
                    }
                    drop(permit.take());
                    if !sleep_unless_cancelled(token, delay - hold).await {
                        return None;
                    }
                    permit = Some(self.permits.event_for(token).await?);
                }
                // The next call waits at the breaker's gate.
                Wait::Gate => {}
                Wait::GiveUp => break (failure, next),
            }
        };
        drop(permit);
        Some(self.give_up(item, t, failure, next).await)
    }

    /// One try: the request built and the call made (`None`: handed over
    /// while it waited at the gate, no request made).
    async fn try_once(
        &self,
        src: &Source<'_>,
        ev: &Event,
        token: &CompletionToken,
        t: &mut Tries,
    ) -> Option<Tried> {
        self.count_try(t);
        Some(match self.build.request(src, ev).await {
            Ok(Body::Send { body, out }) => {
                let (answer, made) = self
                    .caller
                    .call(&ev.id, &out, body, None, token, t.hypothesis.suspect())
                    .await?;
                match Failure::in_answer(answer) {
                    None => Tried::Delivered(made.sent.at),
                    Some(failure) => Tried::Failed(failure, Some(made)),
                }
            }
            Ok(Body::Park { reason, message }) => Tried::Unsendable { reason, message },
            Err(e) => Tried::Failed(Failure::enrichment(e), None),
        })
    }

    /// A try begins: counted for `core::attempt` and in
    /// `courier_delivery_attempts_total`.
    pub(super) fn count_try(&self, t: &mut Tries) {
        t.count += 1;
        self.hot.attempts.increment(1);
    }

    /// A delivered event: its latency, age and count, measured to `at`,
    /// when its answer came (the clocks read here without it).
    pub(super) fn delivered(&self, item: &Item, t: Tries, at: Option<Stamp>) -> Finished {
        let start = t.start;
        drop(t);
        let at = at.unwrap_or_else(Stamp::now);
        let latency = at.instant.saturating_duration_since(start);
        self.hot.latency.record(latency.as_secs_f64());
        if let Some(ts) = item.timestamp_ms {
            let age = (at.ms - ts).max(0) as f64 / 1000.0;
            self.hot.age.record(age);
        }
        self.hot.delivered.increment(1);
        Finished::Delivered
    }

    /// After a failed try: reports it, weighs a systemic answer against the
    /// event's hypothesis, and asks `core::attempt` what comes next. `called`:
    /// the call, if a request was made.
    pub(super) fn after_failure(
        &self,
        t: &mut Tries,
        failure: &Failure,
        called: Option<Made>,
    ) -> Next {
        self.reports.report(failure);
        let made_a_call = called.is_some();
        // A systemic answer is a hypothesis about the API (core::systemic),
        // kept across the event's tries; a call alone is heard here — also
        // after a handover: it admitted the call (maybe as a half-open probe;
        // an admission dropped unheard frees its slot).
        let systemic = (failure.class == FailureClass::Systemic)
            .then(|| {
                called
                    .filter(|_| failure.reason.reached_the_api())
                    .map(|made| self.systemic_answer(&mut t.hypothesis, made, failure))
            })
            .flatten();
        let failed = Failed {
            class: failure.class,
            systemic,
            retry_after: failure.retry_after,
            called: made_a_call,
        };
        let breaker = Breaker {
            systemic_outage: failure.class == FailureClass::Transient
                && self.caller.calls.ears.health().systemic_outage(),
        };
        let at = Progress {
            tries: t.count,
            elapsed: t.start.elapsed(),
            jitter: rand::random(),
        };
        let next = attempt::decide(&self.policy, failed, breaker, at);
        if !next.spends_a_try() {
            t.count = t.count.saturating_sub(1);
        }
        next
    }

    /// The end of an event's tries: parked or dead-lettered with its last
    /// failure.
    pub(super) async fn give_up(
        &self,
        item: &Item,
        t: Tries,
        failure: Failure,
        next: Next,
    ) -> Finished {
        let tries = t.count;
        drop(t);
        let what = match next {
            Next::Park(ParkCause::SystemicBudgetSpent { answers }) => format!(
                "{answers} times after calls sent later were delivered (api.systemic_budget): parked"
            ),
            _ => format!("after {tries} tries"),
        };
        let info = failure.error(&failure.message(&what));
        // Boxed: the failure path (DLQ writer RPC, retries) is rare and its future
        // would otherwise size every delivery's state machine.
        match next {
            Next::Park(_) => {
                let done = Box::pin(self.writes.park(item, info)).await;
                self.reports.parked_after(&failure);
                done
            }
            _ => Box::pin(self.writes.dead_letter(item, info, failure.per_item)).await,
        }
    }

    /// An event whose request cannot be built: parked, never retried.
    pub(super) async fn park_unsendable(
        &self,
        item: &Item,
        reason: crate::core::classify::FailureReason,
        message: &str,
    ) -> Finished {
        let info = ErrorInfo::new(ErrorClass::Permanent, reason, None, message);
        self.writes.park(item, info).await
    }
}

/// One event's tries on the main path so far: what `core::attempt` decides
/// from, and its unit of `courier_in_flight`.
pub(super) struct Tries {
    _in_flight: InFlight,
    pub(super) start: Instant,
    /// Tries that counted (a systemic wait at the gate does not).
    pub(super) count: u32,
    pub(super) hypothesis: EventHypothesis,
}

/// What one try came to.
pub(super) enum Tried {
    /// When its answer came.
    Delivered(Option<Stamp>),
    /// Its request cannot be built (`request::Body::Park`).
    Unsendable {
        reason: FailureReason,
        message: String,
    },
    /// Failed, with the call if a request was made.
    Failed(Failure, Option<Made>),
}

/// What comes after a failed try, for the loop that waits.
pub(super) enum Wait {
    /// Try again after this long.
    Sleep(std::time::Duration),
    /// Try again at the breaker's gate.
    Gate,
    /// Dead-letter or park ([`Deliverer::give_up`]).
    GiveUp,
}

impl Tries {
    pub(super) fn new(gauge: &metrics::Gauge) -> Tries {
        Tries {
            _in_flight: InFlight::new(gauge),
            start: Instant::now(),
            count: 0,
            hypothesis: EventHypothesis::default(),
        }
    }

    /// What `next` asks of the loop.
    pub(super) fn wait(&self, next: Next, failure: &Failure) -> Wait {
        match next {
            Next::RetryIn(d) => {
                tracing::debug!(attempts = self.count, reason = %failure.reason, delay_ms = d.as_millis() as u64, "transient failure, retrying in place");
                Wait::Sleep(d)
            }
            Next::SystemicRetryIn(d) => Wait::Sleep(d),
            Next::WaitAtGate => Wait::Gate,
            Next::DeadLetter | Next::Park(_) => Wait::GiveUp,
        }
    }
}

/// Holds one unit of `courier_in_flight` from its creation until it is
/// dropped, whichever way a delivery ends.
struct InFlight(metrics::Gauge);

impl InFlight {
    fn new(gauge: &metrics::Gauge) -> InFlight {
        gauge.increment(1.0);
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Waits `d` unless the partition is handed over first (`false`): no back-off
/// is waited out for a request that will not be made.
async fn sleep_unless_cancelled(token: &CompletionToken, d: std::time::Duration) -> bool {
    if d.is_zero() {
        return !token.cancelled();
    }
    tokio::select! {
        biased;
        _ = token.until_cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}
