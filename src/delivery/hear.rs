//! What the breaker and the health actor hear of the calls: one observation
//! per call (a request, whatever it carries), on every path — an event alone,
//! a batch, an ordered run, a DLQ round. The breaker admitted each call
//! ([`Admission`]); hearing it consumes the admission, and an admission
//! dropped unheard (no answer, a call not made, back-pressure) frees its
//! half-open slot. `core::answer::read` decides what an answer says — to
//! the breaker and to the event, in one reading; this file carries it out.

use super::http::{Answer, TransportError};
use super::limits::Limits;
use super::peers::BreakerAlarm;
use crate::api_health::{Admission, ApiHealth};
use crate::core::answer::{self, Reading, Said};
use crate::core::breaker::{BreakerStateKind, Transition};
use crate::core::classify::Heard;
use crate::core::status_policy::StatusPolicy;
use crate::metrics as m;
use std::sync::Arc;

/// An answer and what it means, read once ([`Ears::read`]): the event's
/// outcome, the breaker and the adaptive limit all take it from `reading`;
/// `answer` is kept for what the event's failure reports (status, excerpt,
/// `Retry-After`).
/// Only [`Ears::read`] makes one (its fields are private).
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    answer: Result<Answer, TransportError>,
    reading: Reading,
}

impl Answered {
    pub(super) fn answer(&self) -> &Result<Answer, TransportError> {
        &self.answer
    }

    pub(super) fn reading(&self) -> Reading {
        self.reading
    }

    pub(super) fn into_parts(self) -> (Result<Answer, TransportError>, Reading) {
        (self.answer, self.reading)
    }

    /// The answer's `Retry-After`, if it had one.
    pub(super) fn retry_after(&self) -> Option<std::time::Duration> {
        self.answer.as_ref().ok().and_then(|a| a.retry_after)
    }
}

/// What hearing a call needs: the status policy, whether the adaptive limit
/// answers back-pressure, the breaker, and the health actor's alarm.
pub(crate) struct Ears {
    policy: StatusPolicy,
    limits: Arc<Limits>,
    health: Arc<ApiHealth>,
    alarm: BreakerAlarm,
    /// The destination's name (`core::destination`).
    destination: Arc<str>,
    /// Requests heard so far (`tests/one_path.rs` counts them against the
    /// requests a fake API received).
    #[cfg(test)]
    pub(super) heard: std::sync::atomic::AtomicU64,
    /// Answers read so far (`tests/one_path.rs`: each once).
    #[cfg(test)]
    pub(super) reads: std::sync::atomic::AtomicU64,
}

impl Ears {
    pub(super) fn new(
        policy: StatusPolicy,
        limits: Arc<Limits>,
        health: Arc<ApiHealth>,
        alarm: BreakerAlarm,
        destination: Arc<str>,
    ) -> Ears {
        Ears {
            policy,
            limits,
            health,
            alarm,
            destination,
            #[cfg(test)]
            heard: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            reads: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The answer `r` and its meanings — what the breaker hears of the
    /// call, what the adaptive limit learns, what it means for the event it
    /// answers — read once, by `core::answer::read`, on every path: every
    /// answer an event or a call is judged by is read here, once.
    /// `items_refused`: a batch answer whose per-item results refuse items
    /// with 429 or 503 (`send`).
    pub(super) fn read(&self, r: Result<Answer, TransportError>, items_refused: bool) -> Answered {
        #[cfg(test)]
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let said = match &r {
            Ok(a) => Said::Status {
                status: a.status,
                no_result: a.no_result,
                items_refused,
            },
            Err(t) => Said::Nothing(t.kind),
        };
        let back_pressure = r.as_ref().is_ok_and(|a| self.limits.absorbs(a.status));
        Answered {
            reading: answer::read(&self.policy, back_pressure, said),
            answer: r,
        }
    }

    /// The answer of an event whose request ended without one (its batch's
    /// task is gone: the process is ending).
    pub(super) fn no_answer(&self) -> Answered {
        self.not_sent("the batch of this event ended without an answer".into())
    }

    /// The answer of an event whose request was not made, and why (behind
    /// an ordered run's failure or probe, an enrichment that failed), read
    /// as any answer: a failure of the event's own, never the API's.
    pub(super) fn not_sent(&self, why: String) -> Answered {
        let why = TransportError::new(crate::core::classify::TransportFailure::Other, why);
        self.read(Err(why), false)
    }

    /// Hears call `seq` of an event alone, as `heard` says. A systemic
    /// answer is left to the event's hypothesis (`core::systemic`): its
    /// admission comes back, for [`super::Deliverer::systemic_answer`] to
    /// report. Called by `send::Calls::send` alone.
    pub(super) fn hear(&self, admission: Admission, heard: Heard, seq: u64) -> Option<Admission> {
        self.count();
        match heard {
            Heard::Systemic(_) => Some(admission),
            heard => {
                self.report(admission, heard, seq);
                None
            }
        }
    }

    /// Hears call `seq` of a batch: a systemic answer is judged at once (the
    /// batch keeps no hypothesis; each event weighs the answer against its
    /// own without telling the breaker again). Called by
    /// `send::Calls::send` alone.
    pub(super) fn hear_batch(&self, admission: Admission, heard: Heard, seq: u64) {
        self.count();
        self.report(admission, heard, seq);
    }

    fn count(&self) {
        #[cfg(test)]
        self.heard.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn report(&self, admission: Admission, heard: Heard, seq: u64) {
        let t = match heard {
            Heard::Delivered => admission.delivered(seq),
            Heard::Outcome(o) => admission.record(o),
            Heard::Systemic(reason) => admission.systemic(seq, reason).1,
            // Dropped: its half-open slot, if any, goes to the next waiter.
            Heard::Nothing => None,
        };
        if let Some(t) = t {
            self.on_transition(t);
        }
    }

    pub(super) fn health(&self) -> &ApiHealth {
        &self.health
    }

    /// The destination's name.
    pub(super) fn destination(&self) -> &str {
        &self.destination
    }

    pub(super) fn on_transition(&self, t: Transition) {
        metrics::counter!(m::BREAKER_TRANSITIONS, "to" => t.to.as_str(), "reason" => t.reason.as_str(), "destination" => self.destination.to_string()).increment(1);
        tracing::warn!(
            destination = %self.destination,
            from = t.from.as_str(),
            to = t.to.as_str(),
            reason = t.reason.as_str(),
            "circuit breaker"
        );
        if t.to == BreakerStateKind::Open {
            self.alarm.ring();
        }
    }
}
