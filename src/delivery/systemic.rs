//! What a systemic answer does to the event and to the breaker: the shell of
//! `core::systemic` (a systemic answer is a hypothesis a later delivered call
//! refutes).

use super::durable::DlqWrite;
use super::http::Api;
use super::report::Failure;
use super::send::Made;
use super::Deliverer;
use crate::api_health::CallOutcome;
use crate::core::systemic::{judge, EventHypothesis, Judgement, SystemicStep};
use crate::metrics as m;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// A systemic answer `f` to the event's call `made`: what the event does
    /// next (wait at the gate, retry after a back-off, or be parked), and —
    /// for a call alone, whose admission waits for it — what the breaker
    /// hears (the hypothesis while nothing refutes it; "up" once a call sent
    /// after the event's first refused one was delivered). A batch's call
    /// was heard by its batch: the event only weighs the answer.
    pub(super) fn systemic_answer(
        &self,
        hypothesis: &mut EventHypothesis,
        made: Made,
        f: &Failure,
    ) -> SystemicStep {
        let health = self.caller.calls.ears.health();
        let Made { sent, pending } = made;
        let seq = sent.seq;
        let reason = f.reason.breaker_reason();
        // No credential to send is never the event's fault: no hypothesis is
        // kept (nothing to refute, never parked); the breaker hears of it.
        if let crate::core::classify::FailureReason::Transport(t) = f.reason {
            if t.is_auth() {
                if let Some(t) = pending.and_then(|a| a.systemic(seq, reason).1) {
                    self.caller.calls.ears.on_transition(t);
                }
                return SystemicStep::Wait;
            }
        }
        let step = hypothesis.answered(
            seq,
            health.last_success(),
            self.pipeline.config.api.systemic_budget,
        );
        let t = pending.and_then(|admission| match step {
            SystemicStep::Wait => admission.systemic(seq, reason).1,
            // Refuted: the API is up, the refusal is this event's.
            SystemicStep::Retry { .. } | SystemicStep::Demote { .. } => {
                admission.record(CallOutcome::Up)
            }
        });
        if let Some(t) = t {
            self.caller.calls.ears.on_transition(t);
        }
        if let SystemicStep::Demote { answers } = step {
            metrics::counter!(m::SYSTEMIC_DEMOTED, "reason" => f.reason.as_str()).increment(1);
            tracing::warn!(
                reason = %f.reason,
                answers,
                budget = self.pipeline.config.api.systemic_budget,
                "systemic answers refuted by calls sent later: the event is parked (api.systemic_budget)"
            );
        }
        step
    }

    /// A systemic answer on a DLQ round (one try per round, no hypothesis kept
    /// across rounds): `true` when a later delivered call refutes it — the
    /// round then counts as a failed one (a retry used up) instead of waiting
    /// for the API without end. A call alone reports to its admission; a
    /// batch's was heard by its batch.
    pub(super) fn systemic_refuted_in_round(&self, made: Made, f: &Failure) -> bool {
        let Made { sent, pending } = made;
        let seq = sent.seq;
        match pending {
            Some(admission) => {
                let (j, t) = admission.systemic(seq, f.reason.breaker_reason());
                if let Some(t) = t {
                    self.caller.calls.ears.on_transition(t);
                }
                j == Judgement::Refuted
            }
            None => {
                judge(seq, self.caller.calls.ears.health().last_success(), None)
                    == Judgement::Refuted
            }
        }
    }
}
