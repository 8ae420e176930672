//! What the breaker and the health actor hear of the calls: one observation
//! per call (a request, whatever it carries), on every path — an event alone,
//! a batch, an ordered run, a DLQ round. The breaker admitted each call
//! ([`Admission`]); hearing it consumes the admission, and an admission
//! dropped unheard (no answer, a call not made, back-pressure) frees its
//! half-open slot. `core::classify::heard_status` decides what an answer
//! says; this file carries it out.

use super::http::{Answer, TransportError};
use super::limits::Limits;
use super::peers::BreakerAlarm;
use crate::api_health::{Admission, ApiHealth};
use crate::core::breaker::{BreakerStateKind, Transition};
use crate::core::classify::{heard_status, heard_transport, Heard};
use crate::core::status_policy::StatusPolicy;
use crate::metrics as m;
use std::sync::Arc;

/// What hearing a call needs: the status policy, whether the adaptive limit
/// answers back-pressure, the breaker, and the health actor's alarm.
pub(crate) struct Ears {
    status: StatusPolicy,
    limits: Arc<Limits>,
    health: Arc<ApiHealth>,
    alarm: BreakerAlarm,
}

impl Ears {
    pub(super) fn new(
        status: StatusPolicy,
        limits: Arc<Limits>,
        health: Arc<ApiHealth>,
        alarm: BreakerAlarm,
    ) -> Ears {
        Ears {
            status,
            limits,
            health,
            alarm,
        }
    }

    /// What the breaker hears of call `seq`'s answer `r`.
    pub(super) fn heard(&self, r: &Result<Answer, TransportError>) -> Heard {
        match r {
            Ok(a) => heard_status(
                a.status,
                self.status.classify(a.status),
                self.limits.absorbs(a.status),
            ),
            Err(t) => heard_transport(t.kind),
        }
    }

    /// Hears call `seq` of an event alone. A systemic answer is left to the
    /// event's hypothesis (`core::systemic`): its admission comes back, for
    /// [`super::Deliverer::systemic_answer`] to report.
    pub(super) fn hear(
        &self,
        admission: Admission,
        r: &Result<Answer, TransportError>,
        seq: u64,
    ) -> Option<Admission> {
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
    /// own without telling the breaker again).
    pub(super) fn hear_batch(
        &self,
        admission: Admission,
        r: &Result<Answer, TransportError>,
        seq: u64,
    ) {
        let heard = self.heard(r);
        self.report(admission, heard, seq);
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

    pub(super) fn on_transition(&self, t: Transition) {
        metrics::counter!(m::BREAKER_TRANSITIONS, "to" => t.to.as_str(), "reason" => t.reason.as_str()).increment(1);
        tracing::warn!(
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
