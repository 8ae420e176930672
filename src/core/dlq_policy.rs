//! What to do with a DLQ event when it reaches the head of the drain.
//!
//! Two policies, chosen per event type:
//! - **counter** (webhook-like events): at most `max_retries` deliveries from the
//!   DLQ, then the parking lot with reason `max_retries`.
//! - **deadline** (business events): retried until `first_dlq_at + deadline`, and
//!   before each retry the source of truth is asked whether the event is still
//!   current. The deadline bounds API failures and source-of-truth failures alike,
//!   so a source that is down cannot keep an event in the DLQ forever.
//!
//! `dlq_retries` is how many times the event went *back* into the DLQ after its first
//! entry (0 on the first DLQ round, see `Envelope::retried`), so with the counter
//! policy an event is delivered from the DLQ at rounds `0..max_retries`, i.e. exactly
//! `max_retries` times, and dropped at round `max_retries`.
//!
//! Nothing is dropped silently: every `Drop` carries a reason for the parking lot and
//! for `dlq_dropped{reason}`. Pure: the caller passes `now_ms` and the source answer.

use serde::{Deserialize, Serialize};

/// Reasons, also the `reason` label values of `dlq_dropped` / the parking lot.
pub(crate) mod reason {
    pub(crate) const MAX_RETRIES: &str = "max_retries";
    pub(crate) const EXPIRED: &str = "expired";
    pub(crate) const STALE: &str = "stale";
    pub(crate) const QUERY_FAILED: &str = "query_failed";
}

/// Config: `{ kind = "counter", max_retries = 5 }` or
/// `{ kind = "deadline", deadline = "24h" }` (a humantime duration; the core keeps
/// it in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DlqRetry {
    Counter {
        max_retries: u32,
    },
    Deadline {
        #[serde(rename = "deadline", with = "millis_as_humantime")]
        deadline_ms: u64,
    },
}

/// (De)serializes a millisecond count as a humantime string (`"90s"`, `"24h"`).
mod millis_as_humantime {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(&Duration::from_millis(*ms), s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let d: Duration = humantime_serde::Serde::<Duration>::deserialize(d)?.into_inner();
        u64::try_from(d.as_millis()).map_err(|_| serde::de::Error::custom("duration too large"))
    }
}

impl DlqRetry {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DlqRetry::Counter { .. } => "counter",
            DlqRetry::Deadline { .. } => "deadline",
        }
    }
}

/// The source of truth's answer about a DLQ event (deadline policy only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SourceCheck {
    /// Still current: deliver.
    Match,
    /// Superseded or gone: delivering it would overwrite newer state.
    Mismatch,
    /// The source itself says the event is past its validity. The policy
    /// decides on it (parked `expired`), but the drain's query answers with
    /// versions only (`compare_versions`), so nothing constructs it yet.
    #[allow(dead_code)]
    Expired,
    /// The source could not be asked (timeout, connection, error).
    QueryFailed,
}

impl SourceCheck {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SourceCheck::Match => "match",
            SourceCheck::Mismatch => "mismatch",
            SourceCheck::Expired => "expired",
            SourceCheck::QueryFailed => "query_failed",
        }
    }
}

/// Compares the version an event carries with the row's current version.
///
/// - Row missing (`current == None`) → `Mismatch`: the entity is gone, there is
///   nothing left to update.
/// - Equal → `Match`.
/// - Event older than the row → `Mismatch`: a newer change already happened, and
///   delivering this one late would roll the API back.
/// - Event *newer* than the row → `Match`: the source of truth lags behind the
///   stream (replica lag, an outbox written before its read model). The event is
///   not stale, and refusing it would drop the newest state, which is the one loss
///   this check exists to prevent.
/// - Event without a version, row present → `Match`: nothing proves it stale, and
///   at-least-once prefers a delivery (absorbed by the idempotency key) to a drop.
pub(crate) fn compare_versions(event_version: Option<i64>, current: Option<i64>) -> SourceCheck {
    match (event_version, current) {
        (_, None) => SourceCheck::Mismatch,
        (None, Some(_)) => SourceCheck::Match,
        (Some(e), Some(c)) if e < c => SourceCheck::Mismatch,
        (Some(_), Some(_)) => SourceCheck::Match,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DlqDecision {
    /// Its `not_before` has not come: the drain waits `wait_ms` (> 0).
    NotYet { wait_ms: i64 },
    /// Deliver it to the API now.
    Deliver,
    /// To the parking lot with `reason`; count `dlq_dropped{reason}`.
    Drop { reason: &'static str },
    /// Not decidable now (the source could not be asked): re-produce it to the DLQ
    /// with a later `not_before`. The deadline still bounds how long this can go on.
    KeepInDlq { reason: &'static str },
}

fn deadline_at(first_dlq_at_ms: i64, deadline_ms: u64) -> i64 {
    first_dlq_at_ms.saturating_add(i64::try_from(deadline_ms).unwrap_or(i64::MAX))
}

/// The drop reason if the policy alone already rules the event out at `now_ms`,
/// whatever the source would say: `max_retries` or `expired`.
///
/// [`decide`] uses it; a writer about to re-produce an event into the DLQ may also
/// call it with the *incremented* `dlq_retries` (and the next `not_before` as
/// `now_ms`) to park the event at once instead of writing it back only to drop it
/// one backoff later.
pub(crate) fn exhausted(
    policy: DlqRetry,
    dlq_retries: u32,
    first_dlq_at_ms: i64,
    now_ms: i64,
) -> Option<&'static str> {
    match policy {
        DlqRetry::Counter { max_retries } => {
            (dlq_retries >= max_retries).then_some(reason::MAX_RETRIES)
        }
        DlqRetry::Deadline { deadline_ms } => {
            (now_ms >= deadline_at(first_dlq_at_ms, deadline_ms)).then_some(reason::EXPIRED)
        }
    }
}

/// Whether [`decide`] needs a [`SourceCheck`]: only the deadline policy asks the
/// source, and only while the deadline has not passed (an expired event is dropped
/// without a query, so a source outage costs no extra load on expired backlog).
pub(crate) fn needs_source_check(policy: DlqRetry, first_dlq_at_ms: i64, now_ms: i64) -> bool {
    match policy {
        DlqRetry::Counter { .. } => false,
        DlqRetry::Deadline { deadline_ms } => now_ms < deadline_at(first_dlq_at_ms, deadline_ms),
    }
}

/// The decision for a DLQ event at `now_ms`.
///
/// Order: `not_before` first (nothing happens to an event before its time, so the
/// backoff is honoured even for the final verdict), then the policy's own limit,
/// then — deadline policy only — the source's answer. `check` is ignored by the
/// counter policy and once the deadline has passed; a missing check where one is
/// needed is treated as a failed query (kept, not dropped: absence of an answer is
/// not evidence that the event is stale).
pub(crate) fn decide(
    policy: DlqRetry,
    dlq_retries: u32,
    first_dlq_at_ms: i64,
    not_before_ms: i64,
    now_ms: i64,
    check: Option<SourceCheck>,
) -> DlqDecision {
    if now_ms < not_before_ms {
        return DlqDecision::NotYet {
            wait_ms: not_before_ms.saturating_sub(now_ms),
        };
    }
    if let Some(reason) = exhausted(policy, dlq_retries, first_dlq_at_ms, now_ms) {
        return DlqDecision::Drop { reason };
    }
    match policy {
        DlqRetry::Counter { .. } => DlqDecision::Deliver,
        DlqRetry::Deadline { .. } => match check {
            Some(SourceCheck::Match) => DlqDecision::Deliver,
            Some(SourceCheck::Mismatch) => DlqDecision::Drop {
                reason: reason::STALE,
            },
            Some(SourceCheck::Expired) => DlqDecision::Drop {
                reason: reason::EXPIRED,
            },
            Some(SourceCheck::QueryFailed) | None => DlqDecision::KeepInDlq {
                reason: reason::QUERY_FAILED,
            },
        },
    }
}

/// `not_before` for the DLQ round that `dlq_retries_after_increment` starts:
/// `now + min(base * 2^(retries - 1), cap)`. Round 1 waits `base`, each further
/// round doubles, up to `cap`; 0 is treated as 1. Saturating throughout, so absurd
/// configs give a far-future time, never an overflow.
pub(crate) fn next_not_before(
    now_ms: i64,
    dlq_retries_after_increment: u32,
    base_ms: u64,
    cap_ms: u64,
) -> i64 {
    let exp = dlq_retries_after_increment.saturating_sub(1).min(63);
    let delay = base_ms.saturating_mul(1u64 << exp).min(cap_ms);
    now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX))
}

/// The DLQ policy's horizon: the longest time one envelope waits in the DLQ
/// before it is due (its `not_before`), so the shortest `retention.ms` that
/// never deletes an envelope before it was due (the time a drain waits
/// behind a backlog or an outage comes on top). An envelope enters with
/// `now + base`, each later round is written anew with the next back-off
/// ([`next_not_before`]), so the longest wait is the longest back-off the
/// policy lets an event reach: the counter policy writes rounds
/// `0..max_retries` (round `max_retries` is dropped when due); the deadline
/// policy writes rounds while the deadline has not passed, each waiting one
/// back-off (the last one written just before the deadline).
pub(crate) fn horizon_ms(policy: DlqRetry, base_ms: u64, cap_ms: u64) -> u64 {
    let wait = |round: u32| {
        let now = 0i64;
        u64::try_from(next_not_before(now, round, base_ms, cap_ms)).unwrap_or(u64::MAX)
    };
    match policy {
        // Round 0 (the first entry) waits as long as round 1.
        DlqRetry::Counter { max_retries } => wait(max_retries.saturating_sub(1)),
        DlqRetry::Deadline { deadline_ms } => {
            // Rounds follow each other by their waits (at the soonest) until
            // the deadline: the wait of the last round written is the longest.
            let (mut round, mut elapsed, mut longest) = (0u32, 0u64, 0u64);
            while elapsed < deadline_ms {
                let w = wait(round);
                longest = longest.max(w);
                if w == 0 || longest >= cap_ms || round == u32::MAX {
                    break;
                }
                elapsed = elapsed.saturating_add(w);
                round += 1;
            }
            longest.max(wait(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use DlqDecision::*;

    #[test]
    fn horizon_is_the_longest_back_off_a_policy_reaches() {
        let (base, cap) = (1_000, 60_000);
        // Rounds 0..5: 1, 1, 2, 4, 8 s.
        let five = DlqRetry::Counter { max_retries: 5 };
        assert_eq!(horizon_ms(five, base, cap), 8_000);
        let one = DlqRetry::Counter { max_retries: 1 };
        assert_eq!(horizon_ms(one, base, cap), 1_000);
        let zero = DlqRetry::Counter { max_retries: 0 };
        assert_eq!(horizon_ms(zero, base, cap), 1_000, "the first entry waits");
        let many = DlqRetry::Counter { max_retries: 40 };
        assert_eq!(horizon_ms(many, base, cap), cap);
        // Deadline 10 s: rounds at 0 (1 s), 1 (1 s), 2 (2 s), 4 (4 s), then
        // 8 s (written at 8 s < 10 s).
        let ten = DlqRetry::Deadline {
            deadline_ms: 10_000,
        };
        assert_eq!(horizon_ms(ten, base, cap), 8_000);
        let day = DlqRetry::Deadline {
            deadline_ms: 86_400_000,
        };
        assert_eq!(horizon_ms(day, base, cap), cap);
        let none = DlqRetry::Deadline { deadline_ms: 0 };
        assert_eq!(horizon_ms(none, base, cap), base);
    }

    proptest! {
        /// The horizon is one of the waits the policy can write, never above the
        /// cap (nor below the first wait).
        #[test]
        fn horizon_is_bounded(base in 0u64..100_000, cap in 0u64..1_000_000, n in 0u32..100, d in 0u64..10_000_000) {
            for p in [DlqRetry::Counter { max_retries: n }, DlqRetry::Deadline { deadline_ms: d }] {
                let h = horizon_ms(p, base, cap);
                prop_assert!(h <= cap.max(base.min(cap)));
                prop_assert!(h >= base.min(cap));
            }
        }
    }

    const COUNTER: DlqRetry = DlqRetry::Counter { max_retries: 3 };
    const DEADLINE: DlqRetry = DlqRetry::Deadline {
        deadline_ms: 10_000,
    };

    fn dropped(reason: &'static str) -> DlqDecision {
        Drop { reason }
    }

    #[test]
    fn serde_shape() {
        let c: DlqRetry = serde_json::from_str(r#"{"kind":"counter","max_retries":5}"#).unwrap();
        assert_eq!(c, DlqRetry::Counter { max_retries: 5 });
        let d: DlqRetry = serde_json::from_str(r#"{"kind":"deadline","deadline":"60s"}"#).unwrap();
        assert_eq!(
            d,
            DlqRetry::Deadline {
                deadline_ms: 60_000
            }
        );
        assert_eq!(
            serde_json::to_value(c).unwrap(),
            serde_json::json!({"kind": "counter", "max_retries": 5})
        );
        assert_eq!(
            serde_json::to_value(d).unwrap(),
            serde_json::json!({"kind": "deadline", "deadline": "1m"})
        );
        assert!(
            serde_json::from_str::<DlqRetry>(r#"{"kind":"deadline","deadline_ms":60000}"#).is_err()
        );
        assert!(serde_json::from_str::<DlqRetry>(r#"{"kind":"Counter","max_retries":5}"#).is_err());
        assert!(serde_json::from_str::<DlqRetry>(r#"{"kind":"counter"}"#).is_err());
        assert!(serde_json::from_str::<DlqRetry>(r#"{"max_retries":5}"#).is_err());
        assert_eq!(c.as_str(), "counter");
        assert_eq!(d.as_str(), "deadline");
    }

    #[test]
    fn versions() {
        use SourceCheck::*;
        assert_eq!(compare_versions(Some(3), None), Mismatch);
        assert_eq!(compare_versions(None, None), Mismatch);
        assert_eq!(compare_versions(Some(3), Some(3)), Match);
        assert_eq!(compare_versions(Some(2), Some(3)), Mismatch);
        assert_eq!(compare_versions(Some(4), Some(3)), Match, "source lags");
        assert_eq!(compare_versions(None, Some(3)), Match);
        assert_eq!(Match.as_str(), "match");
        assert_eq!(Mismatch.as_str(), "mismatch");
        assert_eq!(Expired.as_str(), "expired");
        assert_eq!(QueryFailed.as_str(), "query_failed");
    }

    #[test]
    fn not_yet_comes_first() {
        for policy in [COUNTER, DEADLINE] {
            assert_eq!(
                decide(policy, 0, 0, 1_000, 400, None),
                NotYet { wait_ms: 600 }
            );
            // Even when the policy would drop it.
            assert_eq!(
                decide(policy, 99, 0, 50_000, 49_999, Some(SourceCheck::Match)),
                NotYet { wait_ms: 1 }
            );
        }
        assert_ne!(
            decide(COUNTER, 0, 0, 1_000, 1_000, None),
            NotYet { wait_ms: 0 },
            "due at not_before exactly"
        );
    }

    #[test]
    fn counter_branches() {
        assert_eq!(decide(COUNTER, 0, 0, 0, 5, None), Deliver);
        assert_eq!(decide(COUNTER, 2, 0, 0, 5, None), Deliver);
        assert_eq!(decide(COUNTER, 3, 0, 0, 5, None), dropped("max_retries"));
        assert_eq!(decide(COUNTER, 4, 0, 0, 5, None), dropped("max_retries"));
        // The source answer plays no part in the counter policy.
        for c in [
            SourceCheck::Mismatch,
            SourceCheck::Expired,
            SourceCheck::QueryFailed,
        ] {
            assert_eq!(decide(COUNTER, 0, 0, 0, 5, Some(c)), Deliver);
        }
        let zero = DlqRetry::Counter { max_retries: 0 };
        assert_eq!(decide(zero, 0, 0, 0, 0, None), dropped("max_retries"));
        assert!(!needs_source_check(COUNTER, 0, 0));
    }

    #[test]
    fn deadline_branches() {
        let at = |now, check| decide(DEADLINE, 7, 1_000, 0, now, check);
        assert_eq!(at(5_000, Some(SourceCheck::Match)), Deliver);
        assert_eq!(at(5_000, Some(SourceCheck::Mismatch)), dropped("stale"));
        assert_eq!(at(5_000, Some(SourceCheck::Expired)), dropped("expired"));
        assert_eq!(
            at(5_000, Some(SourceCheck::QueryFailed)),
            KeepInDlq {
                reason: "query_failed"
            }
        );
        assert_eq!(
            at(5_000, None),
            KeepInDlq {
                reason: "query_failed"
            }
        );
        // Last moment before the deadline: still asks.
        assert!(needs_source_check(DEADLINE, 1_000, 10_999));
        assert_eq!(at(10_999, Some(SourceCheck::Match)), Deliver);
        // At and after first_dlq_at + deadline: expired, whatever the source says.
        assert!(!needs_source_check(DEADLINE, 1_000, 11_000));
        for check in [
            None,
            Some(SourceCheck::Match),
            Some(SourceCheck::QueryFailed),
        ] {
            assert_eq!(at(11_000, check), dropped("expired"));
            assert_eq!(at(99_000, check), dropped("expired"));
        }
        // dlq_retries plays no part in the deadline policy.
        assert_eq!(
            decide(
                DEADLINE,
                u32::MAX,
                1_000,
                0,
                5_000,
                Some(SourceCheck::Match)
            ),
            Deliver
        );
        // A deadline too large for i64 does not overflow.
        let forever = DlqRetry::Deadline {
            deadline_ms: u64::MAX,
        };
        assert!(needs_source_check(forever, i64::MAX - 1, i64::MAX - 1));
    }

    #[test]
    fn exhausted_for_the_writer() {
        assert_eq!(exhausted(COUNTER, 2, 0, 0), None);
        assert_eq!(exhausted(COUNTER, 3, 0, 0), Some(reason::MAX_RETRIES));
        assert_eq!(exhausted(DEADLINE, 0, 1_000, 10_999), None);
        assert_eq!(exhausted(DEADLINE, 0, 1_000, 11_000), Some(reason::EXPIRED));
    }

    #[test]
    fn backoff_doubles_then_caps() {
        let n = |r| next_not_before(1_000, r, 500, 8_000) - 1_000;
        assert_eq!(n(0), 500);
        assert_eq!(n(1), 500);
        assert_eq!(n(2), 1_000);
        assert_eq!(n(3), 2_000);
        assert_eq!(n(4), 4_000);
        assert_eq!(n(5), 8_000);
        assert_eq!(n(6), 8_000);
        assert_eq!(n(u32::MAX), 8_000);
        assert_eq!(next_not_before(1_000, 3, 500, 0), 1_000, "cap 0: no wait");
        assert_eq!(
            next_not_before(i64::MAX - 10, 70, u64::MAX, u64::MAX),
            i64::MAX
        );
    }

    proptest! {
        /// Counter: with the event due, Drop iff `dlq_retries >= max_retries`; and
        /// walking the rounds from 0, it is delivered exactly `max_retries` times.
        #[test]
        fn counter_delivers_at_most_max_retries_times(
            max in 0u32..50, k in 0u32..100, first in -1_000i64..1_000, nb in -1_000i64..1_000, late in 0i64..10_000,
        ) {
            let policy = DlqRetry::Counter { max_retries: max };
            let now = nb + late;
            let d = decide(policy, k, first, nb, now, None);
            prop_assert_eq!(matches!(d, Drop { .. }), k >= max);
            let ok = matches!(d, Deliver | Drop { reason: "max_retries" });
            prop_assert!(ok, "unexpected {:?}", d);

            let mut retries = 0u32;
            let mut delivered = 0u32;
            loop {
                match decide(policy, retries, first, nb, now, None) {
                    Deliver => { delivered += 1; retries += 1; }
                    Drop { reason } => { prop_assert_eq!(reason, "max_retries"); break; }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            prop_assert_eq!(delivered, max);
        }

        /// Before `not_before` every policy waits, with a positive wait that ends
        /// exactly at `not_before`.
        #[test]
        fn waits_until_not_before(
            max in 0u32..10, deadline in 0u64..100_000, k in 0u32..20, nb in -10_000i64..10_000, early in 1i64..10_000,
        ) {
            for policy in [DlqRetry::Counter { max_retries: max }, DlqRetry::Deadline { deadline_ms: deadline }] {
                let d = decide(policy, k, 0, nb, nb - early, Some(SourceCheck::Match));
                prop_assert_eq!(d, NotYet { wait_ms: early });
            }
        }

        /// Deadline: never delivered at or after the deadline; `check` matters
        /// exactly when `needs_source_check` says so.
        #[test]
        fn deadline_is_a_hard_bound(
            deadline in 0u64..100_000, first in -50_000i64..50_000, now in -50_000i64..200_000,
        ) {
            let policy = DlqRetry::Deadline { deadline_ms: deadline };
            let checks = [None, Some(SourceCheck::Match), Some(SourceCheck::Mismatch),
                Some(SourceCheck::Expired), Some(SourceCheck::QueryFailed)];
            let results: Vec<_> = checks.iter().map(|&c| decide(policy, 0, first, i64::MIN, now, c)).collect();
            let expired = now >= first + deadline as i64;
            prop_assert_eq!(needs_source_check(policy, first, now), !expired);
            if expired {
                let all_expired = results.iter().all(|&d| d == dropped("expired"));
                prop_assert!(all_expired, "{:?}", results);
            } else {
                prop_assert_eq!(results[1], Deliver);
                prop_assert!(results.iter().filter(|&&d| d == Deliver).count() == 1);
            }
        }

        /// Backoff is non-decreasing in the round and never beyond `now + cap`.
        #[test]
        fn backoff_is_monotonic_and_capped(
            now in -1_000_000_000i64..1_000_000_000, r in 0u32..80, base in 0u64..1_000_000, cap in 0u64..100_000_000,
        ) {
            let a = next_not_before(now, r, base, cap);
            let b = next_not_before(now, r + 1, base, cap);
            prop_assert!(a <= b);
            prop_assert!(a >= now);
            prop_assert!(i128::from(b) <= i128::from(now) + i128::from(cap));
        }
    }
}
