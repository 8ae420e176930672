//! Whether the group consumer is stuck outside its group: not a settled
//! member (librdkafka's `cgrp.join_state` not `steady`) for longer than any
//! rebalance may take, while some broker answers.
//!
//! Seen once in a drill (docs/DRILLS.md, 2026-12-07): after a broker was
//! killed and came back, librdkafka 2.12.1 revoked its assignment after a
//! client-side session timeout and never joined again; its coordinator
//! handle only timed requests out, no fatal error was raised, and the
//! instances idled with no partitions until they were stopped. Such a
//! consumer is as dead as one with a fatal error (I26): the process ends
//! non-zero and its orchestrator starts it afresh. A standby member (no
//! partitions to own) is `steady`; a rebalance waits at most the rebalance
//! timeout (`max.poll.interval.ms`) for the members to join; with no broker
//! up the consumer waits for the brokers (a restart would not help).
//!
//! Pure: the statistics librdkafka reports and the time come in
//! ([`GroupWatch::observe`]); `kafka::context` reads them.

use std::time::{Duration, Instant};

/// What the client's statistics say of its group and its brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observed {
    /// A settled member (`join_state` is `steady`).
    pub settled: bool,
    /// Some broker's connection is up.
    pub broker_up: bool,
}

/// How long the consumer may stay outside a settled group with a broker up:
/// twice the rebalance timeout and a session timeout, and at least ten
/// minutes (rebalances under load, a slow drain, a broker restarting).
pub(crate) fn limit(max_poll_interval: Duration, session_timeout: Duration) -> Duration {
    (max_poll_interval * 2 + session_timeout).max(Duration::from_secs(600))
}

/// Watches the observations, in time order.
#[derive(Debug)]
pub(crate) struct GroupWatch {
    limit: Duration,
    /// Since when the consumer is unsettled with a broker up.
    since: Option<Instant>,
    /// Stuck was reported (once).
    reported: bool,
}

impl GroupWatch {
    pub(crate) fn new(limit: Duration) -> GroupWatch {
        GroupWatch {
            limit,
            since: None,
            reported: false,
        }
    }

    /// One observation at `now`: `Some(for how long)` the first time the
    /// consumer has been outside a settled group, with a broker up, for
    /// longer than the limit.
    pub(crate) fn observe(&mut self, now: Instant, o: Observed) -> Option<Duration> {
        if o.settled || !o.broker_up {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let stuck = now.saturating_duration_since(since);
        if stuck > self.limit && !self.reported {
            self.reported = true;
            return Some(stuck);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNSETTLED: Observed = Observed {
        settled: false,
        broker_up: true,
    };

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn unsettled_past_the_limit_with_a_broker_up_is_stuck_once() {
        let t0 = Instant::now();
        let mut w = GroupWatch::new(Duration::from_secs(60));
        assert_eq!(w.observe(at(t0, 0), UNSETTLED), None);
        assert_eq!(w.observe(at(t0, 60), UNSETTLED), None, "not past it");
        assert_eq!(
            w.observe(at(t0, 61), UNSETTLED),
            Some(Duration::from_secs(61))
        );
        assert_eq!(w.observe(at(t0, 90), UNSETTLED), None, "reported once");
    }

    #[test]
    fn a_settled_member_or_no_broker_starts_the_count_again() {
        let t0 = Instant::now();
        let mut w = GroupWatch::new(Duration::from_secs(60));
        w.observe(at(t0, 0), UNSETTLED);
        let settled = Observed {
            settled: true,
            ..UNSETTLED
        };
        assert_eq!(w.observe(at(t0, 50), settled), None);
        assert_eq!(w.observe(at(t0, 70), UNSETTLED), None, "counted from 70");
        let brokers_down = Observed {
            broker_up: false,
            ..UNSETTLED
        };
        assert_eq!(w.observe(at(t0, 100), brokers_down), None);
        assert_eq!(w.observe(at(t0, 120), UNSETTLED), None, "counted from 120");
        assert_eq!(
            w.observe(at(t0, 181), UNSETTLED),
            Some(Duration::from_secs(61))
        );
    }

    #[test]
    fn the_limit_outlasts_a_rebalance_and_ten_minutes() {
        let s = Duration::from_secs;
        assert_eq!(limit(s(300), s(45)), s(645));
        assert_eq!(limit(s(30), s(10)), s(600));
    }
}
