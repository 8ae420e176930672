//! Readiness and liveness, decided from what the instance reports about its
//! progress (time is an input).
//!
//! - *Ready* (`/readyz`): assigned, and not *stuck* — events held with none
//!   finished for `metrics.stuck_after` while the API is judged available. A
//!   stuck instance leaves the load balancer (there is none for a consumer, but
//!   dashboards and rollouts read it).
//! - *Live* (`/healthz`): not *wedged* — the same condition held for the longer
//!   `metrics.wedged_after`. That is a consumer that will not recover by itself
//!   (a deadlocked actor, a poll thread that stopped): the orchestrator should
//!   restart it, and the next owner re-reads from the committed watermark. An
//!   instance paused because the API is down is waiting, not wedged; one without
//!   partitions or without held events has nothing to make progress on.

/// What the instance reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub assigned: bool,
    /// Events begun and not finished, all partitions.
    pub held: i64,
    /// Milliseconds since the last event finished (or since start).
    pub idle_ms: i64,
    pub api_unavailable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    NotAssigned,
    Stuck,
}

impl NotReady {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotReady::NotAssigned => "not assigned",
            NotReady::Stuck => "stuck: events held, none finished",
        }
    }
}

/// Liveness failed: events held and none finished for this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wedged {
    pub idle_ms: i64,
}

impl Progress {
    /// Held work that made no progress for longer than `after_ms` while the API
    /// is judged available.
    fn idle_with_work(&self, after_ms: i64) -> bool {
        self.assigned && self.held > 0 && self.idle_ms > after_ms && !self.api_unavailable
    }

    pub(crate) fn ready(&self, stuck_after_ms: i64) -> Result<(), NotReady> {
        if !self.assigned {
            return Err(NotReady::NotAssigned);
        }
        if self.idle_with_work(stuck_after_ms) {
            return Err(NotReady::Stuck);
        }
        Ok(())
    }

    /// `wedged_after_ms` ≤ 0 turns the check off.
    pub(crate) fn live(&self, wedged_after_ms: i64) -> Result<(), Wedged> {
        if wedged_after_ms > 0 && self.idle_with_work(wedged_after_ms) {
            return Err(Wedged {
                idle_ms: self.idle_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(assigned: bool, held: i64, idle_ms: i64, api_unavailable: bool) -> Progress {
        Progress {
            assigned,
            held,
            idle_ms,
            api_unavailable,
        }
    }

    #[test]
    fn named_cases() {
        assert_eq!(
            p(false, 0, 0, false).ready(1_000),
            Err(NotReady::NotAssigned)
        );
        assert_eq!(
            p(true, 0, 99_000, false).ready(1_000),
            Ok(()),
            "idle, nothing held"
        );
        assert_eq!(p(true, 5, 2_000, false).ready(1_000), Err(NotReady::Stuck));
        assert_eq!(
            p(true, 5, 2_000, true).ready(1_000),
            Ok(()),
            "paused: waiting"
        );
        assert_eq!(
            p(true, 5, 2_000, false).live(5_000),
            Ok(()),
            "stuck, not yet wedged"
        );
        assert_eq!(
            p(true, 5, 6_000, false).live(5_000),
            Err(Wedged { idle_ms: 6_000 })
        );
        assert_eq!(
            p(true, 5, 600_000, true).live(5_000),
            Ok(()),
            "the API is down"
        );
        assert_eq!(
            p(false, 5, 600_000, false).live(5_000),
            Ok(()),
            "no partitions"
        );
        assert_eq!(p(true, 5, 600_000, false).live(0), Ok(()), "check off");
    }

    proptest! {
        /// Wedged implies stuck (with `stuck_after` ≤ `wedged_after`): an
        /// instance is never restarted while it still counts as ready.
        #[test]
        fn wedged_implies_not_ready(assigned: bool, held in -2i64..5, idle in 0i64..20_000,
                                    down: bool, stuck in 1i64..10_000, extra in 0i64..10_000) {
            let pr = p(assigned, held, idle, down);
            if pr.live(stuck + extra).is_err() {
                prop_assert_eq!(pr.ready(stuck), Err(NotReady::Stuck));
            }
        }
    }
}
