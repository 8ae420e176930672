//! The status-code policy (`[api.status]`): what an HTTP status means for an
//! event, over the defaults of [`classify_status`].
//!
//! Keys are a code (`"404"`) or an inclusive range (`"500-599"`), values
//! `ok | transient | permanent | systemic`. Where rules overlap, the most
//! specific (the narrowest range) wins; two overlapping rules of the same width
//! are refused, since neither is more specific. Codes outside 100-599 are
//! refused. Pure: a table of 500 verdicts built once, looked up per answer.
//!
//! # Invariant I12: status policy
//!
//! *Enforced in* `src/core/status_policy.rs`, `src/api_health.rs` (`parked_by_api`). What a
//! status means is one table built at start from the defaults and `[api.status]` (the
//! narrowest rule wins; codes outside 100–599 and same-width overlaps refused by
//! `check-config`). A status made systemic trips the breaker and the event waits at the gate:
//! nothing is parked or dead-lettered for it (until a later delivered call refutes it for
//! that event: I13, `core::systemic`). Events parked because of a permanent *answer* (not bad input)
//! above `degraded.flood_parked_per_sec` trip the breaker (`park_flood`). The API's answer
//! body goes into `last_error.message` only (cut to `api.error_body_bytes`, control
//! characters replaced), never into a log line or a label.
//!
//! *Tested by:* Unit + property tests (the narrowest covering rule wins for any accepted rule
//! set; the defaults without rules); `tests/policy.rs`: 404 made systemic pauses with nothing
//! parked or in the DLQ, then all 200 delivered; 120 events answered 422 are parked with the
//! answer's start in the message and the flood guard trips. Alert CourierParkFlood (promtool
//! test).

use crate::core::classify::{classify_status, FailureClass, StatusVerdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a configured status means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusAction {
    /// Delivered (like 2xx and 409 by default).
    Ok,
    /// Retried in place, then the DLQ.
    Transient,
    /// The event's fault: parked at once.
    Permanent,
    /// The API's or the credentials' fault: the breaker trips, the event waits.
    Systemic,
}

impl StatusAction {
    pub(crate) fn verdict(self) -> StatusVerdict {
        match self {
            StatusAction::Ok => StatusVerdict::Delivered,
            StatusAction::Transient => StatusVerdict::Failed(FailureClass::Transient),
            StatusAction::Permanent => StatusVerdict::Failed(FailureClass::Permanent),
            StatusAction::Systemic => StatusVerdict::Failed(FailureClass::Systemic),
        }
    }
}

/// The lowest and highest status a rule may name.
pub(crate) const FIRST: u16 = 100;
pub(crate) const LAST: u16 = 599;

/// An inclusive range of statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusRange {
    pub lo: u16,
    pub hi: u16,
}

impl StatusRange {
    fn width(self) -> u16 {
        self.hi - self.lo
    }
    fn overlaps(self, o: StatusRange) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }
    #[cfg(test)]
    pub(crate) fn contains(self, s: u16) -> bool {
        (self.lo..=self.hi).contains(&s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StatusPolicyError {
    #[error("`{0}` is not a status code or a range like \"500-599\"")]
    Syntax(String),
    #[error("`{0}` is outside {FIRST}-{LAST}")]
    OutOfRange(String),
    #[error("`{0}` is empty: its first code is above its last")]
    Empty(String),
    #[error("`{0}` and `{1}` overlap and are as specific as each other: narrow one of them")]
    Ambiguous(String, String),
}

/// Parses `"404"` or `"500-599"`.
pub(crate) fn parse_range(key: &str) -> Result<StatusRange, StatusPolicyError> {
    let code = |s: &str| -> Result<u16, StatusPolicyError> {
        let s = s.trim();
        if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(StatusPolicyError::Syntax(key.to_string()));
        }
        let n: u16 = s
            .parse()
            .map_err(|_| StatusPolicyError::Syntax(key.to_string()))?;
        if !(FIRST..=LAST).contains(&n) {
            return Err(StatusPolicyError::OutOfRange(key.to_string()));
        }
        Ok(n)
    };
    let (lo, hi) = match key.split_once('-') {
        Some((a, b)) => (code(a)?, code(b)?),
        None => {
            let c = code(key)?;
            (c, c)
        }
    };
    if lo > hi {
        return Err(StatusPolicyError::Empty(key.to_string()));
    }
    Ok(StatusRange { lo, hi })
}

/// The verdict for every status 100-599; others take the defaults.
#[derive(Debug, Clone)]
pub(crate) struct StatusPolicy {
    table: Box<[StatusVerdict]>,
}

impl Default for StatusPolicy {
    fn default() -> StatusPolicy {
        StatusPolicy {
            table: (FIRST..=LAST).map(classify_status).collect(),
        }
    }
}

impl StatusPolicy {
    /// The defaults with `rules` over them (narrower rules over wider ones).
    pub(crate) fn new(
        rules: &BTreeMap<String, StatusAction>,
    ) -> Result<StatusPolicy, StatusPolicyError> {
        let mut parsed = rules
            .iter()
            .map(|(k, a)| parse_range(k).map(|r| (k.as_str(), r, *a)))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, (ka, a, _)) in parsed.iter().enumerate() {
            for (kb, b, _) in &parsed[i + 1..] {
                if a.width() == b.width() && a.overlaps(*b) {
                    return Err(StatusPolicyError::Ambiguous(ka.to_string(), kb.to_string()));
                }
            }
        }
        // Widest first, so that a narrower rule is applied over it.
        parsed.sort_by_key(|(_, r, _)| std::cmp::Reverse(r.width()));
        let mut p = StatusPolicy::default();
        for (_, r, a) in parsed {
            for s in r.lo..=r.hi {
                p.table[usize::from(s - FIRST)] = a.verdict();
            }
        }
        Ok(p)
    }

    pub(crate) fn classify(&self, status: u16) -> StatusVerdict {
        match status {
            FIRST..=LAST => self.table[usize::from(status - FIRST)],
            _ => classify_status(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use FailureClass::*;

    fn policy(rules: &[(&str, StatusAction)]) -> Result<StatusPolicy, StatusPolicyError> {
        StatusPolicy::new(&rules.iter().map(|(k, a)| (k.to_string(), *a)).collect())
    }

    #[test]
    fn no_rules_is_the_defaults() {
        let p = StatusPolicy::default();
        for s in 0..1_000 {
            assert_eq!(p.classify(s), classify_status(s), "{s}");
        }
    }

    #[test]
    fn the_issue_examples() {
        use StatusAction as A;
        let p = policy(&[
            ("404", A::Systemic),
            ("422", A::Permanent),
            ("409", A::Ok),
            ("500-599", A::Transient),
            ("501", A::Permanent),
        ])
        .expect("valid");
        assert_eq!(p.classify(404), StatusVerdict::Failed(Systemic));
        assert_eq!(p.classify(422), StatusVerdict::Failed(Permanent));
        assert_eq!(p.classify(409), StatusVerdict::Delivered);
        assert_eq!(p.classify(503), StatusVerdict::Failed(Transient));
        // The narrower rule wins over the range.
        assert_eq!(p.classify(501), StatusVerdict::Failed(Permanent));
        // Untouched codes keep their defaults.
        assert_eq!(p.classify(400), StatusVerdict::Failed(Permanent));
        assert_eq!(p.classify(401), StatusVerdict::Failed(Systemic));
        assert_eq!(p.classify(200), StatusVerdict::Delivered);
    }

    #[test]
    fn bad_keys_are_refused_with_what_is_wrong() {
        use StatusAction as A;
        for (key, err) in [
            ("4o4", StatusPolicyError::Syntax("4o4".into())),
            ("", StatusPolicyError::Syntax("".into())),
            ("-500", StatusPolicyError::Syntax("-500".into())),
            ("500-", StatusPolicyError::Syntax("500-".into())),
            ("1000", StatusPolicyError::Syntax("1000".into())),
            ("99", StatusPolicyError::OutOfRange("99".into())),
            ("600", StatusPolicyError::OutOfRange("600".into())),
            ("500-600", StatusPolicyError::OutOfRange("500-600".into())),
            ("599-500", StatusPolicyError::Empty("599-500".into())),
        ] {
            assert_eq!(policy(&[(key, A::Ok)]).unwrap_err(), err, "{key}");
        }
        assert!(matches!(
            policy(&[("500-549", A::Ok), ("540-589", A::Systemic)]),
            Err(StatusPolicyError::Ambiguous(..))
        ));
        assert!(matches!(
            policy(&[("404", A::Ok), ("404-404", A::Systemic)]),
            Err(StatusPolicyError::Ambiguous(..))
        ));
    }

    fn action() -> impl Strategy<Value = StatusAction> {
        prop_oneof![
            Just(StatusAction::Ok),
            Just(StatusAction::Transient),
            Just(StatusAction::Permanent),
            Just(StatusAction::Systemic),
        ]
    }

    proptest! {
        /// Any accepted rule set: each status takes the action of the narrowest
        /// rule that covers it, or its default when none does.
        #[test]
        fn the_narrowest_covering_rule_wins(
            rules in proptest::collection::vec(((100u16..600), (0u16..120), action()), 0..8)
        ) {
            let rules: Vec<(String, StatusRange, StatusAction)> = rules
                .into_iter()
                .map(|(lo, w, a)| {
                    let hi = (lo + w).min(LAST);
                    (format!("{lo}-{hi}"), StatusRange { lo, hi }, a)
                })
                .collect();
            let map: BTreeMap<String, StatusAction> =
                rules.iter().map(|(k, _, a)| (k.clone(), *a)).collect();
            // The map keeps one rule per key: the model uses the same ones.
            let kept: Vec<_> = rules
                .iter()
                .filter(|(k, _, a)| map.get(k) == Some(a))
                .collect();
            let ambiguous = kept.iter().enumerate().any(|(i, (ka, a, _))| {
                kept[i + 1..]
                    .iter()
                    .any(|(kb, b, _)| ka != kb && a.width() == b.width() && a.overlaps(*b))
            });
            match StatusPolicy::new(&map) {
                Err(e) => {
                    prop_assert!(ambiguous, "refused without ambiguity: {e}");
                }
                Ok(p) => {
                    prop_assert!(!ambiguous);
                    for s in 0u16..1_000 {
                        let expected = kept
                            .iter()
                            .filter(|(_, r, _)| r.contains(s))
                            .min_by_key(|(_, r, _)| r.width())
                            .map_or(classify_status(s), |(_, _, a)| a.verdict());
                        prop_assert_eq!(p.classify(s), expected, "status {}", s);
                    }
                }
            }
        }
    }
}
