//! The decision after each try of an event on the main path: deliver, retry in
//! place after a back-off, wait at the breaker's gate, dead-letter or park.
//! Pure: the shell (`delivery::attempt`) passes what the try said, how many
//! tries counted so far, the time spent, the breaker's view and a jitter
//! number, and carries the [`Next`] out.
//!
//! - A systemic failure (401, 403, TLS, a status made systemic) is a hypothesis
//!   about the API (`core::systemic`): while nothing refutes it the event waits
//!   at the gate; once refuted, each answer uses up `api.systemic_budget` and
//!   is retried after a back-off that never gives up, then parked. It never
//!   spends one of the event's tries and never goes to the DLQ.
//! - A transient failure while the breaker is away from closed for a systemic
//!   reason ([`Breaker::systemic_outage`]) is taken as the same outage: it waits
//!   at the gate without spending a try.
//! - Any other transient failure is retried in place while the policy
//!   ([`InPlaceRetry`]: tries, total budget, `Retry-After`) allows, then goes
//!   to the DLQ.
//! - A permanent one is parked at once.
//!
//! A DLQ round (one try of a DLQ record whose turn came) has its own decision,
//! [`decide_round`]: permanent → parked; systemic and not refuted → back to the
//! DLQ without using up a retry; otherwise one more retry, or a drop to the
//! parking lot once the `[retry]` policy ([`DlqRetry`]) is exhausted.
//!
//! # Invariant I32: attempt decisions
//!
//! *Enforced in* `src/core/attempt.rs` (`decide`, `decide_round`), carried out by `src/delivery/attempt.rs` and `src/delivery/drain.rs`. A systemic failure never spends a try and never goes to the
//! DLQ — it waits at the gate while nothing refutes it, and once refuted retries after
//! `persistent_delay(n, api.retry_base, api.retry_max_delay)` until `api.systemic_budget`
//! is spent, then parks (`SystemicBudgetSpent`). A transient failure during a systemic
//! outage of the breaker waits at the gate without spending a try. Any other transient
//! failure retries in place while `InPlaceRetry::next_delay` gives a delay (tries, total
//! budget, `Retry-After` as a floor), then goes to the DLQ. A permanent one parks. A
//! delivered try and an unsendable request end the loop without a decision (recorded /
//! parked at once).
//!
//! A failed DLQ round has its own pure decision, `core::attempt::decide_round(policy,
//! class, refuted, Round{dlq_retries, first_dlq_at_ms, now_ms, backoff}) → Park | Again |
//! Retry | Drop{why}`: permanent → parked; systemic and not refuted by a later delivered
//! call → back to the DLQ with the same `dlq_retries` (never dropped for it); otherwise
//! dropped to the parking lot exactly when the `[retry]` policy (`DlqRetry`) is exhausted
//! with this round, else back with `dlq_retries + 1` and the next `not_before`.
//! `drain.rs::redelivered` carries it out.
//!
//! *Tested by* `core::attempt` unit and property tests (a systemic failure never spends a try nor dead-letters while the budget lasts; a permanent one always parks; a transient one dead-letters only when the policy is exhausted; delays within the caps); `delivery::tests` (the shell over a fake API and a fake DLQ writer).

use crate::core::backoff::{persistent_delay, InPlaceRetry};
use crate::core::classify::FailureClass;
use crate::core::dlq_policy::{self, DlqRetry};
use crate::core::systemic::SystemicStep;
use std::time::Duration;

/// What a failed try said. A try that delivered, or whose request cannot be
/// built (a route's URL, the body, a missing enrichment row with
/// `on_missing = "park"`), ends without a choice to make: the shell records
/// it, or parks the event, at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Failed {
    pub class: FailureClass,
    /// For a systemic failure of a call that reached the API: what the
    /// event's hypothesis says (`EventHypothesis::answered`); `None`
    /// otherwise (nothing reached the API: the breaker decides alone).
    pub systemic: Option<SystemicStep>,
    /// The API's `Retry-After`, if it sent one.
    pub retry_after: Option<Duration>,
    /// A request was made (else the try failed before: an enrichment lookup).
    pub called: bool,
}

/// What the breaker says, read by the shell just after the try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Breaker {
    /// Open or half-open because of a systemic failure (`ApiHealth::systemic_outage`).
    pub systemic_outage: bool,
}

/// Where the event is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Progress {
    /// Tries that counted so far, this one included (≥ 1).
    pub tries: u32,
    /// Since the first try began.
    pub elapsed: Duration,
    /// A number in `[0, 1)` for the back-off's jitter (the shell draws it).
    pub jitter: f64,
}

/// Why an event is parked after a try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParkCause {
    /// The API's answer (or the failure) is permanent.
    Permanent,
    /// Its systemic answers were refuted by calls sent later and used up
    /// `api.systemic_budget` (`answers` of them).
    SystemicBudgetSpent { answers: u32 },
}

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Next {
    /// Transient: try again after this delay; the try counted.
    RetryIn(Duration),
    /// A refuted systemic answer with budget left: try again after this
    /// back-off (`api.retry_base` doubling up to `api.retry_max_delay`); the
    /// try did not count.
    SystemicRetryIn(Duration),
    /// Try again at once: the next call waits at the breaker's gate; the try
    /// did not count.
    WaitAtGate,
    /// To the DLQ (the policy is exhausted).
    DeadLetter,
    /// To the parking lot.
    Park(ParkCause),
}

impl Next {
    /// Whether the try that led here counts against `api.max_attempts`.
    pub(crate) fn spends_a_try(&self) -> bool {
        !matches!(
            self,
            Next::SystemicRetryIn(_)
                | Next::WaitAtGate
                | Next::Park(ParkCause::SystemicBudgetSpent { .. })
        )
    }
}

/// The decision after a failed try.
pub(crate) fn decide(
    policy: &InPlaceRetry,
    failed: Failed,
    breaker: Breaker,
    at: Progress,
) -> Next {
    let Failed {
        class,
        systemic,
        retry_after,
        called,
    } = failed;
    match class {
        FailureClass::Systemic => match systemic {
            None | Some(SystemicStep::Wait) => Next::WaitAtGate,
            Some(SystemicStep::Retry { n }) => {
                Next::SystemicRetryIn(persistent_delay(n, policy.base_delay, policy.max_delay))
            }
            Some(SystemicStep::Demote { answers }) => {
                Next::Park(ParkCause::SystemicBudgetSpent { answers })
            }
        },
        // A try that failed before its call (an enrichment lookup) would
        // not wait at the gate before its next try's lookup: it waits out
        // the longest back-off instead (the database is not asked again and
        // again for as long as the outage lasts); the try does not count.
        FailureClass::Transient if breaker.systemic_outage && !called => {
            Next::SystemicRetryIn(policy.max_delay)
        }
        FailureClass::Transient if breaker.systemic_outage => Next::WaitAtGate,
        FailureClass::Transient => {
            match policy.next_delay(at.tries, at.elapsed, retry_after, at.jitter) {
                Some(d) => Next::RetryIn(d),
                None => Next::DeadLetter,
            }
        }
        FailureClass::Permanent => Next::Park(ParkCause::Permanent),
    }
}

/// Where a DLQ record is when its round failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    /// The envelope's `dlq_retries` before this round.
    pub dlq_retries: u32,
    pub first_dlq_at_ms: i64,
    pub now_ms: i64,
    /// `degraded.dlq_backoff_base` / `dlq_backoff_cap`, in ms.
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
}

/// What a failed DLQ round leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundNext {
    /// Permanent: to the parking lot.
    Park,
    /// Systemic, not refuted (not the event's fault): back to the DLQ with
    /// the same `dlq_retries`, not before this.
    Again { not_before_ms: i64 },
    /// Back to the DLQ with `dlq_retries + 1`, not before this.
    Retry { not_before_ms: i64 },
    /// The policy is exhausted with this round: dropped to the parking lot.
    Drop { why: &'static str },
}

/// The decision after a failed DLQ round. `refuted`: a systemic answer a call
/// sent later refuted (the event's failure: the round is used up like a
/// transient one's).
pub(crate) fn decide_round(
    policy: DlqRetry,
    class: FailureClass,
    refuted: bool,
    r: Round,
) -> RoundNext {
    match class {
        FailureClass::Permanent => RoundNext::Park,
        FailureClass::Systemic if !refuted => RoundNext::Again {
            not_before_ms: dlq_policy::next_not_before(
                r.now_ms,
                r.dlq_retries.max(1),
                r.backoff_base_ms,
                r.backoff_cap_ms,
            ),
        },
        _ => {
            let retries = r.dlq_retries.saturating_add(1);
            match dlq_policy::exhausted(policy, retries, r.first_dlq_at_ms, r.now_ms) {
                Some(why) => RoundNext::Drop { why },
                None => RoundNext::Retry {
                    not_before_ms: dlq_policy::next_not_before(
                        r.now_ms,
                        retries,
                        r.backoff_base_ms,
                        r.backoff_cap_ms,
                    ),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::systemic::EventHypothesis;
    use proptest::prelude::*;

    fn policy() -> InPlaceRetry {
        InPlaceRetry {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(800),
            total_budget: Duration::from_secs(3),
        }
    }

    fn class() -> impl Strategy<Value = FailureClass> {
        prop_oneof![
            Just(FailureClass::Transient),
            Just(FailureClass::Permanent),
            Just(FailureClass::Systemic),
        ]
    }

    fn step() -> impl Strategy<Value = Option<SystemicStep>> {
        prop_oneof![
            Just(None),
            Just(Some(SystemicStep::Wait)),
            (1u32..10).prop_map(|n| Some(SystemicStep::Retry { n })),
            (1u32..10).prop_map(|answers| Some(SystemicStep::Demote { answers })),
        ]
    }

    fn progress() -> impl Strategy<Value = Progress> {
        (1u32..8, 0u64..4_000, 0.0f64..1.0).prop_map(|(tries, ms, jitter)| Progress {
            tries,
            elapsed: Duration::from_millis(ms),
            jitter,
        })
    }

    #[test]
    fn each_decision_in_one_case() {
        let p = policy();
        let at = Progress {
            tries: 1,
            elapsed: Duration::ZERO,
            jitter: 0.0,
        };
        let ok = Breaker::default();
        let failed = |class, systemic| Failed {
            class,
            systemic,
            retry_after: None,
            called: true,
        };
        assert_eq!(
            decide(&p, failed(FailureClass::Transient, None), ok, at),
            Next::RetryIn(Duration::from_millis(50))
        );
        let out = Breaker {
            systemic_outage: true,
        };
        assert_eq!(
            decide(&p, failed(FailureClass::Transient, None), out, at),
            Next::WaitAtGate
        );
        // An enrichment lookup failed during the outage (no call made): it
        // waits out a back-off, it does not ask again at once.
        let lookup = Failed {
            called: false,
            ..failed(FailureClass::Transient, None)
        };
        assert_eq!(
            decide(&p, lookup, out, at),
            Next::SystemicRetryIn(p.max_delay)
        );

        assert_eq!(
            decide(&p, failed(FailureClass::Permanent, None), ok, at),
            Next::Park(ParkCause::Permanent)
        );
        assert_eq!(
            decide(&p, failed(FailureClass::Systemic, None), ok, at),
            Next::WaitAtGate
        );
        assert_eq!(
            decide(
                &p,
                failed(FailureClass::Systemic, Some(SystemicStep::Retry { n: 3 })),
                ok,
                at
            ),
            Next::SystemicRetryIn(Duration::from_millis(400))
        );
        let last = Progress { tries: 4, ..at };
        assert_eq!(
            decide(&p, failed(FailureClass::Transient, None), ok, last),
            Next::DeadLetter
        );
        // Retry-After beyond the budget: to the DLQ now, not a wait in place.
        let late = Failed {
            class: FailureClass::Transient,
            systemic: None,
            retry_after: Some(Duration::from_secs(5)),
            called: true,
        };
        assert_eq!(decide(&p, late, ok, at), Next::DeadLetter);
    }

    proptest! {
        /// A systemic failure never spends a try and never goes to the DLQ; it
        /// is parked only once its hypothesis says the budget is spent.
        #[test]
        fn systemic_never_spends_a_try_nor_dead_letters(
            systemic in step(), outage in any::<bool>(), at in progress(),
            ra in proptest::option::of(0u64..10),
        ) {
            let tried = Failed {
                class: FailureClass::Systemic,
                systemic,
                retry_after: ra.map(Duration::from_secs),
                called: true,
            };
            let next = decide(&policy(), tried, Breaker { systemic_outage: outage }, at);
            prop_assert!(!next.spends_a_try());
            prop_assert_ne!(next, Next::DeadLetter);
            let demoted = matches!(systemic, Some(SystemicStep::Demote { .. }));
            prop_assert_eq!(matches!(next, Next::Park(_)), demoted);
            if let Next::SystemicRetryIn(d) = next {
                prop_assert!(d >= policy().base_delay && d <= policy().max_delay);
            }
        }

        /// A permanent failure is parked, whatever else holds.
        #[test]
        fn permanent_always_parks(
            systemic in step(), outage in any::<bool>(), at in progress(),
            ra in proptest::option::of(0u64..10),
        ) {
            let tried = Failed {
                class: FailureClass::Permanent,
                systemic,
                retry_after: ra.map(Duration::from_secs),
                called: true,
            };
            prop_assert_eq!(
                decide(&policy(), tried, Breaker { systemic_outage: outage }, at),
                Next::Park(ParkCause::Permanent)
            );
        }

        /// A transient failure goes to the DLQ only when the policy is
        /// exhausted (tries, or the budget with its `Retry-After`), waits at the
        /// gate during a systemic outage, and otherwise retries in place within
        /// the budget and never sooner than `Retry-After`.
        #[test]
        fn transient_dead_letters_only_when_exhausted(
            outage in any::<bool>(), at in progress(),
            ra in proptest::option::of(0u64..4_000),
        ) {
            let p = policy();
            let retry_after = ra.map(Duration::from_millis);
            let tried = Failed { class: FailureClass::Transient, systemic: None, retry_after, called: true };
            let next = decide(&p, tried, Breaker { systemic_outage: outage }, at);
            let exhausted = p.next_delay(at.tries, at.elapsed, retry_after, at.jitter).is_none();
            match next {
                Next::WaitAtGate => prop_assert!(outage),
                Next::DeadLetter => prop_assert!(!outage && exhausted),
                Next::RetryIn(d) => {
                    prop_assert!(!outage && !exhausted);
                    prop_assert!(at.tries < p.max_attempts);
                    prop_assert!(at.elapsed + d <= p.total_budget);
                    prop_assert!(d <= p.max_delay.max(retry_after.unwrap_or_default()));
                    if let Some(ra) = retry_after { prop_assert!(d >= ra); }
                    prop_assert!(next.spends_a_try());
                }
                other => prop_assert!(false, "transient led to {:?}", other),
            }
        }

        /// Whatever the class: only a transient failure is retried in place
        /// or dead-lettered; every delay is within the caps.
        #[test]
        fn only_transient_retries_in_place_or_dead_letters(
            class in class(), systemic in step(), outage in any::<bool>(), at in progress(),
        ) {
            let p = policy();
            let next = decide(&p, Failed { class, systemic, retry_after: None, called: true }, Breaker { systemic_outage: outage }, at);
            if matches!(next, Next::RetryIn(_) | Next::DeadLetter) {
                prop_assert_eq!(class, FailureClass::Transient);
            }
            if let Next::RetryIn(d) | Next::SystemicRetryIn(d) = next {
                prop_assert!(d <= p.max_delay);
            }
        }

        /// One event's life against an API that refuses everything systemic
        /// (no call of this event is ever refuted): driven through the real
        /// hypothesis, it only ever waits at the gate — no try spent, nothing
        /// parked, nothing dead-lettered, however many answers.
        #[test]
        fn an_unrefuted_systemic_outage_only_waits(
            answers in 1usize..200, budget in 1u32..5, at in progress(),
        ) {
            let mut h = EventHypothesis::default();
            let last_success = 10;
            for i in 0..answers {
                let step = h.answered(11 + i as u64, last_success, budget);
                let tried = Failed {
                    class: FailureClass::Systemic,
                    systemic: Some(step),
                    retry_after: None,
                    called: true,
                };
                prop_assert_eq!(decide(&policy(), tried, Breaker { systemic_outage: true }, at), Next::WaitAtGate);
            }
        }

        /// A DLQ round: permanent parks; an unrefuted systemic answer goes
        /// back without using up a retry and is never dropped; any other
        /// failure is dropped exactly when the policy is exhausted with this
        /// round, and otherwise retried no sooner than now.
        #[test]
        fn a_dlq_round_drops_only_when_the_policy_is_exhausted(
            class in class(), refuted in any::<bool>(), retries in 0u32..12,
            max_retries in 1u32..10, deadline in proptest::option::of(1u64..100_000),
            age in 0i64..200_000,
        ) {
            let policy = match deadline {
                Some(deadline_ms) => DlqRetry::Deadline { deadline_ms },
                None => DlqRetry::Counter { max_retries },
            };
            let now = 1_000_000;
            let r = Round {
                dlq_retries: retries,
                first_dlq_at_ms: now - age,
                now_ms: now,
                backoff_base_ms: 100,
                backoff_cap_ms: 60_000,
            };
            let next = decide_round(policy, class, refuted, r);
            let exhausted = dlq_policy::exhausted(policy, retries + 1, now - age, now);
            match next {
                RoundNext::Park => prop_assert_eq!(class, FailureClass::Permanent),
                RoundNext::Again { not_before_ms } => {
                    prop_assert!(class == FailureClass::Systemic && !refuted);
                    prop_assert!(not_before_ms >= now);
                }
                RoundNext::Drop { why } => {
                    prop_assert_ne!(class, FailureClass::Permanent);
                    prop_assert!(class != FailureClass::Systemic || refuted);
                    prop_assert_eq!(Some(why), exhausted);
                }
                RoundNext::Retry { not_before_ms } => {
                    prop_assert_eq!(exhausted, None);
                    prop_assert!(not_before_ms >= now);
                }
            }
        }
    }
}
