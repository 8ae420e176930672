//! Whether a partition asks the registry for a schema id it has not seen, or
//! parks the records naming it `unknown_schema` without asking (issue 54,
//! item 11). A record naming an id nobody has asked for makes its partition
//! wait for the registry's answer (and, for a 404, for the answer asked
//! again: [`super::registry::ask_again`]): records naming random ids would
//! cost a round trip each, with the partition waiting, and leave a refusal
//! each behind. So each partition allows the registry to refuse it
//! [`BURST`] ids at once, and one more every [`INTERVAL`] after (GCRA);
//! past that, an id neither this partition nor the process's cache knows is
//! not asked for, and its records are parked `unknown_schema` ("not asked").
//!
//! Only refusals spend the allowance: a partition starting on a topic of a
//! hundred schema versions asks for all of them. An id the process's cache
//! holds (a schema or a refusal) costs no round trip and is always asked.
//! The records a partition parks unasked are replayed like any other
//! (`courier dlq replay` of the parking lot) once the registry knows the id.

use std::time::Duration;

/// Refusals the registry may give a partition at once.
pub(crate) const BURST: u32 = 4;
/// One more refusal allowed each this long.
pub(crate) const INTERVAL: Duration = Duration::from_secs(15);

/// What to do about an id the partition does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Ask the registry (or the process's cache) and wait for its answer.
    Fetch,
    /// Park its records `unknown_schema` without asking.
    Park,
}

/// A partition's allowance of refusals (GCRA: the time the allowance is
/// spent up to).
#[derive(Debug, Clone, Default)]
pub(crate) struct UnknownIds {
    /// When the refusals so far would have been paid for, one per
    /// [`INTERVAL`]; the allowance is spent while it is more than
    /// `(BURST - 1) × INTERVAL` ahead of now.
    spent_until: Duration,
}

impl UnknownIds {
    /// An id this partition does not know, at `now` (a monotonic clock's
    /// reading): ask for it, or park its records. `cached`: the process's
    /// cache holds its answer (no round trip).
    pub(crate) fn ask(&self, cached: bool, now: Duration) -> Ask {
        let tolerance = INTERVAL * (BURST - 1);
        if cached || self.spent_until <= now + tolerance {
            Ask::Fetch
        } else {
            Ask::Park
        }
    }

    /// The registry's answer for an id asked for at `now` was a refusal.
    pub(crate) fn refused(&mut self, now: Duration) {
        self.spent_until = self.spent_until.max(now) + INTERVAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_burst_of_refusals_then_one_per_interval() {
        let mut u = UnknownIds::default();
        let t0 = 100 * S;
        for _ in 0..BURST {
            assert_eq!(u.ask(false, t0), Ask::Fetch);
            u.refused(t0);
        }
        assert_eq!(u.ask(false, t0), Ask::Park);
        // The cache's answers cost no round trip: always asked.
        assert_eq!(u.ask(true, t0), Ask::Fetch);
        assert_eq!(u.ask(false, t0 + INTERVAL - S), Ask::Park);
        assert_eq!(u.ask(false, t0 + INTERVAL), Ask::Fetch);
        u.refused(t0 + INTERVAL);
        assert_eq!(u.ask(false, t0 + INTERVAL), Ask::Park);
        // Quiet for long: the whole burst again, no more.
        let later = t0 + 100 * INTERVAL;
        for _ in 0..BURST {
            assert_eq!(u.ask(false, later), Ask::Fetch);
            u.refused(later);
        }
        assert_eq!(u.ask(false, later), Ask::Park);
    }

    proptest! {
        /// Over any span, the refusals a partition waits for are at most the
        /// burst and one per interval: the round trips random ids cost.
        #[test]
        fn refusals_asked_for_are_bounded_by_the_rate(
            gaps in proptest::collection::vec(0u64..20_000, 1..400),
        ) {
            let mut u = UnknownIds::default();
            let mut now = Duration::ZERO;
            let mut asked = Vec::new();
            for g in gaps {
                now += Duration::from_millis(g);
                if u.ask(false, now) == Ask::Fetch {
                    u.refused(now);
                    asked.push(now);
                }
            }
            for (i, a) in asked.iter().enumerate() {
                let within = asked[i..].iter().take_while(|b| **b - *a < 10 * INTERVAL).count();
                prop_assert!(within as u32 <= BURST + 10, "{} refusals within 10 intervals", within);
            }
        }
    }
}
