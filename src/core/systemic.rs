//! A systemic answer (401, 403, a TLS failure, a status made systemic) is a
//! hypothesis — "the API, or our credentials, refuse every call" — that the API
//! can refute: a call sent *after* the refused one succeeded.
//!
//! Calls are numbered when they are sent (1, 2, …; the shell keeps the counter
//! and the highest number of a call that was delivered, `last_success`).
//!
//! - For the breaker ([`judge`]): a systemic answer to call `seq` is
//!   [`Judgement::Refuted`] when `last_success > seq` (the API is up: the answer
//!   is the event's, and the breaker hears "up"); otherwise it is evidence, and
//!   in a half-open period an answer to a call sent before the period began is a
//!   [`Judgement::Straggler`] (it says nothing the probes will not say).
//! - For the event ([`EventHypothesis`]): its first systemic answer is the
//!   hypothesis. Once a call sent after that first refused call has succeeded,
//!   the hypothesis is refuted for good, and every systemic answer the event
//!   gets from then on (the first included, if refuted already) uses up its
//!   budget (`api.systemic_budget`); at the budget it is demoted to the parking
//!   lot with its reason. While nothing refutes it, the event waits at the
//!   breaker's gate without using anything up: an API that answers 401 to
//!   everything pauses the group with nothing parked, however long it lasts.
//!
//! The refuting call must be *sent* after the refused one, so an answer that
//! merely arrives late (sent before the credentials were revoked) refutes
//! nothing. The one case this cannot tell apart: calls sent within the same
//! instant as a revocation may reach the API in another order than they were
//! sent; the few events whose calls straddle that instant can be demoted (at
//! most the calls in flight at that instant).
//!
//! # Invariant I13: systemic hypothesis
//!
//! *Enforced in* `src/core/systemic.rs`, `src/core/breaker/` (`Breaker::systemic`,
//! `GateQueue`), `src/api_health.rs`, `src/delivery/systemic.rs` (a systemic answer is a
//! hypothesis). Calls are numbered as they are sent (`ApiHealth::call_number`) and the highest
//! delivered number is kept. A systemic answer to call `s` is refuted when a call numbered
//! above `s` was delivered. Unrefuted, it makes the breaker *half-open at once* (with its
//! reason; no partition pauses, no Redis marker), and the period is first **optimistic**:
//! every fresh call is admitted — the others' calls are the test, and one tenant's refusal
//! makes nobody wait — until `half_open_probes` fresh calls were refused too, or the period
//! is `breaker_open` old; then it is *cautious*: `half_open_probes` slots, as after an open
//! interval. One delivered call refutes it (closed, `refuted`); answers to calls sent before
//! the period are stragglers and change nothing. Before the optimism (2026-12-02, release
//! build) every suspicion held every new call at the gate for at least one round trip. A
//! suspected period is confirmed (open, with the reason; the Redis marker then pauses the
//! group) only once `half_open_probes` calls of events *not refused before* were refused
//! (in the cautious part each refused slot goes to the next waiter, so other events keep
//! testing it) and the period is `breaker_open` old — or, that old, when a suspect is refused
//! again — so a burst of one tenant's refused events cannot confirm it while the others'
//! calls are delivered. *Suspects* (events refused systemic before) wait
//! behind every fresh waiter at the gate, take at most `half_open_probes − 1` slots of a
//! period until it is `breaker_open` old (so a period whose only waiters are suspects still
//! ends), and their refusals are neutral (`Breaker::systemic_repeat`: they repeat what was
//! known; a delivered probe among them closes the breaker). The probes rotate: waiters at the
//! gate are admitted in arrival order, and one that comes back after a refusal waits behind
//! the others, so one event cannot be the probe again and again. A suspected breaker is not
//! open: no partition pauses and no group marker is written until it is confirmed. Per event
//! (`EventHypothesis`): while its first refused call is unrefuted it waits at the gate using
//! nothing up (an API refusing everything pauses the group, nothing parked); once refuted,
//! each systemic answer counts (the breaker hears "up"), with a back-off, and at
//! `api.systemic_budget` (default 3) the event is parked with its reason
//! (`courier_systemic_demoted_total{reason}`). A DLQ round's refuted systemic answer uses up
//! the round. Limit: an event whose refusal no later call contradicts (the very last call
//! sent) waits like an outage until another event's call is delivered; events whose calls
//! straddle a revocation's instant (sent in one order, reaching the API in another) may be
//! parked.
//!
//! *Tested by:* `core::systemic` unit + property tests (demoted iff a later-numbered call was
//! delivered, exactly at the budget; an API refusing everything demotes nothing);
//! `core::breaker` tests (suspect → refuted by one probe, confirmed by fresh refusals once
//! `open_for` old; probes rotate; proptest: a waiter is never passed over; model proptests of
//! a gate with a refused tenant burst among other events: every tenant event demoted within 6
//! s of model time and the breaker ends closed — and with every call refused: nothing
//! demoted, never closed); the three-instance drill `courier-drill --short --scenario
//! hostile-403` (before: others-flow 0.05–0.11 and the 403 events not out of the way in 60 s,
//! the group marker re-set every few seconds; after: 1.00, parked in 1.9 s, the breaker never
//! opened); `api_health` tests (refutation; a paused-time test of three waiters at the gate: the
//! refused one probes again only after the others);
//! `tests/policy.rs::a_tenant_answered_403_is_parked_and_the_others_flow` (20 events answered
//! 403 among 2,000 at default settings: 2,000 delivered, the 20 parked `http_403`, 20
//! demotions; before: 517 of the 2,000 in 120 s); the 401/404-to-everything tests
//! (`tests/security.rs`, `tests/policy.rs`, `tests/tls_api.rs`, `tests/crash_cost.rs`)
//! unchanged.

/// What a systemic answer to call `seq` means for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// A call sent after this one succeeded: the API is up, this refusal is
    /// the event's (the breaker records a success).
    Refuted,
    /// Sent before the current half-open period began: not a probe's answer.
    Straggler,
    /// Evidence that the API refuses every call (the breaker suspects, or a
    /// probe confirms).
    Evidence,
}

/// `seq`: the refused call's number; `last_success`: the highest number of a
/// delivered call; `half_open_from`: while the breaker is half-open, the last
/// number sent before the period began.
pub(crate) fn judge(seq: u64, last_success: u64, half_open_from: Option<u64>) -> Judgement {
    if last_success > seq {
        Judgement::Refuted
    } else if half_open_from.is_some_and(|from| seq <= from) {
        Judgement::Straggler
    } else {
        Judgement::Evidence
    }
}

/// What to do with an event after a systemic answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SystemicStep {
    /// Nothing refutes the hypothesis yet: wait at the breaker's gate; nothing
    /// is used up.
    Wait,
    /// Refuted: this was refused answer `n` (1-based) of the budget; try again
    /// after a back-off.
    Retry { n: u32 },
    /// Refuted and the budget is used up: to the parking lot with its reason.
    Demote { answers: u32 },
}

/// One event's systemic answers (kept by its delivery, across its tries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EventHypothesis {
    /// The number of the first call of this event that got a systemic answer.
    first: Option<u64>,
    /// Systemic answers since the hypothesis was refuted.
    refuted_answers: u32,
}

impl EventHypothesis {
    /// A systemic answer to this event's call `seq` arrived; `last_success` is
    /// the highest number of a delivered call; `budget` (at least 1) how many
    /// refuted answers the event may get.
    pub(crate) fn answered(&mut self, seq: u64, last_success: u64, budget: u32) -> SystemicStep {
        let first = *self.first.get_or_insert(seq);
        if last_success <= first {
            return SystemicStep::Wait;
        }
        self.refuted_answers = self.refuted_answers.saturating_add(1);
        if self.refuted_answers >= budget.max(1) {
            SystemicStep::Demote {
                answers: self.refuted_answers,
            }
        } else {
            SystemicStep::Retry {
                n: self.refuted_answers,
            }
        }
    }

    /// Whether the event was refused systemic before (a *suspect* at the
    /// breaker's gate: `core::breaker::GateQueue`).
    pub(crate) fn suspect(&self) -> bool {
        self.first.is_some()
    }

    /// Whether the event's refusal has been refuted (its answers count).
    #[cfg(test)]
    pub(crate) fn refuted(&self, last_success: u64) -> bool {
        self.first.is_some_and(|f| last_success > f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn judge_refutes_only_with_a_later_call() {
        assert_eq!(judge(10, 11, None), Judgement::Refuted);
        assert_eq!(judge(10, 10, None), Judgement::Evidence);
        assert_eq!(judge(10, 3, None), Judgement::Evidence);
        // Half-open since call 12: call 10 is a straggler, 13 a probe.
        assert_eq!(judge(10, 3, Some(12)), Judgement::Straggler);
        assert_eq!(judge(12, 3, Some(12)), Judgement::Straggler);
        assert_eq!(judge(13, 3, Some(12)), Judgement::Evidence);
        // A refutation wins over the period.
        assert_eq!(judge(10, 20, Some(12)), Judgement::Refuted);
    }

    #[test]
    fn an_unrefuted_event_waits_forever() {
        let mut h = EventHypothesis::default();
        // Every success happened before the first refusal (call 100).
        for seq in [100, 150, 400, 10_000] {
            assert_eq!(h.answered(seq, 99, 1), SystemicStep::Wait);
        }
        assert!(!h.refuted(99));
        assert!(!h.refuted(100));
    }

    #[test]
    fn a_refuted_event_uses_up_its_budget_then_is_demoted() {
        let mut h = EventHypothesis::default();
        assert_eq!(h.answered(100, 50, 3), SystemicStep::Wait);
        // Call 120 (sent after 100) succeeded: refuted.
        assert!(h.refuted(120));
        assert_eq!(h.answered(130, 120, 3), SystemicStep::Retry { n: 1 });
        // Refuted for good: later answers count whether or not more succeeded.
        assert_eq!(h.answered(140, 120, 3), SystemicStep::Retry { n: 2 });
        assert_eq!(h.answered(150, 120, 3), SystemicStep::Demote { answers: 3 });
    }

    #[test]
    fn refuted_at_its_first_answer_counts_that_answer() {
        let mut h = EventHypothesis::default();
        assert_eq!(h.answered(5, 9, 2), SystemicStep::Retry { n: 1 });
        assert_eq!(h.answered(12, 9, 2), SystemicStep::Demote { answers: 2 });
        // A budget of 0 is taken as 1.
        let mut h = EventHypothesis::default();
        assert_eq!(h.answered(5, 9, 0), SystemicStep::Demote { answers: 1 });
    }

    proptest! {
        /// Random interleavings of calls (each delivered or refused) and one
        /// event's refused tries: the event is demoted iff some call sent after
        /// its first refused call was delivered before its answer, and then
        /// exactly at the `budget`-th answer counted from that point; it never
        /// waits once refuted and never retries after a demotion.
        #[test]
        fn demotion_follows_a_later_success_and_the_budget(
            ops in proptest::collection::vec(any::<bool>(), 1..200),
            budget in 1u32..6,
        ) {
            // ops[i]: call i+1 is the event's (true) or another event's, delivered.
            let mut h = EventHypothesis::default();
            let mut last_success = 0u64;
            let mut first: Option<u64> = None;
            let mut counted = 0u32;
            for (i, mine) in ops.iter().enumerate() {
                let seq = i as u64 + 1;
                if !mine {
                    last_success = seq;
                    continue;
                }
                let f = *first.get_or_insert(seq);
                let step = h.answered(seq, last_success, budget);
                if last_success > f {
                    counted += 1;
                    if counted >= budget {
                        prop_assert_eq!(step, SystemicStep::Demote { answers: counted });
                        break;
                    }
                    prop_assert_eq!(step, SystemicStep::Retry { n: counted });
                } else {
                    prop_assert_eq!(counted, 0);
                    prop_assert_eq!(step, SystemicStep::Wait);
                }
            }
        }

        /// An API that refuses every call from some point on: no refused call
        /// is ever refuted by a success (successes are all numbered before the
        /// refusals), so nothing is demoted, whatever the order of answers.
        #[test]
        fn refusing_everything_demotes_nothing(
            successes in 0u64..100,
            refused in proptest::collection::vec(0u64..1_000, 1..100),
            budget in 1u32..4,
        ) {
            let mut h = EventHypothesis::default();
            for r in refused {
                let seq = successes + 1 + r;
                prop_assert_eq!(h.answered(seq, successes, budget), SystemicStep::Wait);
                prop_assert_ne!(judge(seq, successes, None), Judgement::Refuted);
            }
        }
    }
}
