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
        }
    }

    /// Both meanings of the answer `r` — what the breaker hears of the call
    /// and what it means for the event it answers — read once, by
    /// `core::answer::read`, on every path.
    pub(super) fn read(&self, r: &Result<Answer, TransportError>) -> Reading {
        let said = match r {
            Ok(a) => Said::Status {
                status: a.status,
                no_result: a.no_result,
            },
            Err(t) => Said::Nothing(t.kind),
        };
        let back_pressure = r.as_ref().is_ok_and(|a| self.limits.absorbs(a.status));
        answer::read(&self.policy, back_pressure, said)
    }

    /// What the breaker hears of a call answered `r`.
    pub(super) fn heard(&self, r: &Result<Answer, TransportError>) -> Heard {
        self.read(r).call
    }

    /// Hears call `seq` of an event alone. A systemic answer is left to the
    /// event's hypothesis (`core::systemic`): its admission comes back, for
    /// [`super::Deliverer::systemic_answer`] to report. Called by
    /// `send::Calls::send` alone.
    pub(super) fn hear(
        &self,
        admission: Admission,
        r: &Result<Answer, TransportError>,
        seq: u64,
    ) -> Option<Admission> {
        self.count();
        match self.heard(r) {
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
    pub(super) fn hear_batch(
        &self,
        admission: Admission,
        r: &Result<Answer, TransportError>,
        seq: u64,
    ) {
        self.count();
        let heard = self.heard(r);
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
