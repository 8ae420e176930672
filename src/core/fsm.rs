//! The per-partition FSM of degraded mode: which of main p and DLQ p is read.
//!
//! | api_unavailable | dlq_has_unread | alongside | mode           | main p  | DLQ p   |
//! |-----------------|----------------|-----------|----------------|---------|---------|
//! | true            | any            | any       | Paused         | paused  | paused  |
//! | false           | true           | false     | DrainDlq       | paused  | reading |
//! | false           | true           | true      | DrainAlongside | reading | reading |
//! | false           | false          | any       | Normal         | reading | paused  |
//!
//! `alongside` (`core::partition::outage`): the partition's events go to
//! several destinations and every record of DLQ p is one this partition
//! machine wrote and follows by key, so main p is read while the DLQ drains:
//! a key's events wait only behind its own envelopes (I38). With one
//! destination it is always false: the DLQ is drained before main p reads on.
//!
//! [`decide`] is the table; [`PartitionFsm`] adds one rule on top of it, a minimum
//! dwell in `Paused` (see there). The partition actor applies the difference between
//! two [`Reading`]s with pause/resume, and re-applies the whole current reading after
//! every assignment, because librdkafka does not keep pauses across rebalances.
//!
//! # Degraded mode
//!
//! Pure parts: `src/core/breaker/` (Resilience4j-style breaker with a bucketed sliding
//! window, plus a consecutive-failure trigger), `src/core/fsm.rs` (the per-partition table
//! and the minimum pause), `src/core/dlq_policy.rs` (counter / deadline decisions,
//! source-of-truth comparison, `not_before` backoff). All take time as a parameter.
//!
//! - **Feeding the breaker**: every API call's outcome goes to `api_health::ApiHealth::record`
//!   (2xx/409/other 4xx = the API is up; 5xx, 408, 429, timeouts, connection errors =
//!   failure; 401/403 and TLS failures = trip at once, with the reason). Before each call a task waits at `ApiHealth::gate` while the breaker is open; in
//!   half-open only the probes pass. Events therefore *wait* during an outage; they do not
//!   fail into the DLQ (only the onset's in-flight events and failed probes do).
//! - **Verdict** (`HealthVerdict`): the health actor ticks every `degraded.poll_interval` (and at once when the
//!   breaker opens): it sets the Redis marker if its breaker is open, reads it, and
//!   publishes `api_unavailable = marker_alive || breaker_open` on a `tokio::sync::watch`
//!   channel (`ApiHealth::watch`), which each partition actor watches
//!   (`actors::partition::verdict`; no relay through the consumer). Redis unreachable:
//!   the verdict is the breaker alone. With several destinations (`core::destination`)
//!   each has its own breaker, marker and verdict; the FSM's `api_unavailable` is "every
//!   destination of the partition is down", and while any one is down `dlq_has_unread`
//!   is taken as false (the DLQ waits, main p is read); once all are back the DLQ drains
//!   beside main p (`DrainAlongside`) when the partition follows every envelope of it.
//! - **FSM**: each partition machine owns main p and DLQ p (range assignment + equal partition
//!   counts, checked at start). `PartitionFsm::update(api_unavailable, dlq_has_unread, alongside)`
//!   decides; the machine applies pause/resume to both topics explicitly on every
//!   assignment. While the mode is `paused` nothing is dispatched (records still in the
//!   mailbox or the backlog, a key's next event, an errored job's retry wait in the
//!   partition): the verdict may rest on another instance's marker while this instance's
//!   own breaker is closed, and `ApiHealth::gate` would then let them through.
//!   `dlq_has_unread` is: a due event at the head of the DLQ queue, or unread DLQ records
//!   (the consumer actor reads DLQ end offsets at once on every assignment and then every
//!   `degraded.lag_check_interval`), or a lag not known yet (so a new owner looks at DLQ p before
//!   reading main p). The lag check uses a client of its own and one batched `ListOffsets`
//!   per topic: on the group consumer's connection each request waited behind a long-poll
//!   `Fetch`, and a new assignment sat ~12 s in `drain_dlq` with an empty DLQ. A tick is
//!   skipped while a check runs.
//! - **Drain**: DLQ records are begun in the DLQ tracker as they arrive and queued (DLQ p
//!   pauses at `max_in_flight_per_partition` of them, see `runtime`'s "Backpressure"); while the
//!   mode is `drain_dlq` the due ones are dispatched; a head that is not due yet stops the
//!   drain and schedules a wake-up at its `not_before`. Redelivery uses its own semaphore and
//!   a pacer (one slot every 1/rate s; `core::pacer` reserves nothing ahead, so a waiter
//!   whose partition is handed over leaves no slot the others wait behind). A failed redelivery is re-produced to DLQ p with
//!   `dlq_retries + 1`; the DLQ offset is done only once that write is acknowledged.
//! - **Flood guard**: more than `flood_dlq_per_sec` DLQ writes in a second trips the breaker.
//!
//! Tested in `tests/degraded.rs`, `tests/redis_down.rs` and `tests/deadline.rs`.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    Normal,
    Paused,
    DrainDlq,
    /// The DLQ drains while main p is read (several destinations, I38).
    DrainAlongside,
}

impl Mode {
    /// Every mode, in the order of the dashboard's value mapping (0 normal,
    /// 1 paused, 2 drain_dlq, 3 drain_alongside).
    pub(crate) const ALL: [Mode; 4] = [
        Mode::Normal,
        Mode::Paused,
        Mode::DrainDlq,
        Mode::DrainAlongside,
    ];

    /// Label for metrics and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Paused => "paused",
            Mode::DrainDlq => "drain_dlq",
            Mode::DrainAlongside => "drain_alongside",
        }
    }
}

/// The table. `api_unavailable` wins over everything: nothing is sent to an API that
/// is down, not even the DLQ backlog. With the API up, the DLQ is drained before the
/// main topic resumes, so events that already waited are not overtaken by new ones
/// indefinitely — unless `alongside` (see the module): then a key's events wait
/// behind its own envelopes only, and main p is read during the drain.
pub(crate) fn decide(api_unavailable: bool, dlq_has_unread: bool, alongside: bool) -> Mode {
    if api_unavailable {
        Mode::Paused
    } else if dlq_has_unread && alongside {
        Mode::DrainAlongside
    } else if dlq_has_unread {
        Mode::DrainDlq
    } else {
        Mode::Normal
    }
}

/// Which partitions of the pair are being fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Reading {
    pub main: bool,
    pub dlq: bool,
}

/// The reading a mode implies: both at once only while draining alongside.
pub(crate) fn reading(mode: Mode) -> Reading {
    match mode {
        Mode::Normal => Reading {
            main: true,
            dlq: false,
        },
        Mode::Paused => Reading {
            main: false,
            dlq: false,
        },
        Mode::DrainDlq => Reading {
            main: false,
            dlq: true,
        },
        Mode::DrainAlongside => Reading {
            main: true,
            dlq: true,
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Change {
    pub from: Mode,
    pub to: Mode,
}

/// [`decide`] with a minimum dwell in `Paused`.
///
/// Entering `Paused` is always immediate: sending to an API judged down only fills
/// the DLQ, so safety wins. Leaving it is held back for `min_dwell` after entering,
/// because the inputs are noisy right at the edge: a Redis marker that just expired,
/// or a breaker that went half-open, often flips back within moments. Without the
/// dwell each flip costs a pause/resume round trip on both partitions and a burst of
/// calls at an API that is still recovering. Moving between `Normal` and `DrainDlq`
/// is immediate: both are "API up", and the dwell protects only that judgement.
#[derive(Debug, Clone)]
pub(crate) struct PartitionFsm {
    mode: Mode,
    /// When the current mode was entered; `None` until the first change.
    last_change: Option<Instant>,
    min_dwell: Duration,
}

impl PartitionFsm {
    /// Starts `Paused`, the state a partition pair is put in on assignment, with no
    /// dwell pending: the first [`PartitionFsm::update`] moves straight to whatever
    /// the table says.
    pub(crate) fn new(min_dwell: Duration) -> Self {
        PartitionFsm {
            mode: Mode::Paused,
            last_change: None,
            min_dwell,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// What to fetch now; apply it in full after every assignment.
    pub(crate) fn reading(&self) -> Reading {
        reading(self.mode)
    }

    /// When the current mode was entered, if it was entered by a change.
    #[cfg(test)]
    pub(crate) fn last_change(&self) -> Option<Instant> {
        self.last_change
    }

    /// Feeds the current inputs; returns the change to apply, if any.
    pub(crate) fn update(
        &mut self,
        now: Instant,
        api_unavailable: bool,
        dlq_has_unread: bool,
        alongside: bool,
    ) -> Option<Change> {
        let target = decide(api_unavailable, dlq_has_unread, alongside);
        if target == self.mode {
            return None;
        }
        if self.mode == Mode::Paused && self.dwelling(now) {
            return None;
        }
        let change = Change {
            from: self.mode,
            to: target,
        };
        self.mode = target;
        self.last_change = Some(now);
        Some(change)
    }

    /// True while `Paused` was entered less than `min_dwell` ago. A `now` earlier
    /// than the entry counts as no time passed.
    fn dwelling(&self, now: Instant) -> bool {
        match self.last_change {
            None => false,
            Some(t) => now.saturating_duration_since(t) < self.min_dwell,
        }
    }

    /// When a held-back exit from `Paused` becomes possible, so the actor can
    /// schedule its next `update` instead of polling; `None` when nothing is held.
    pub(crate) fn dwell_until(&self, now: Instant) -> Option<Instant> {
        if self.mode == Mode::Paused && self.dwelling(now) {
            self.last_change.map(|t| t + self.min_dwell)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DWELL: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_table() {
        assert_eq!(decide(true, true, false), Mode::Paused);
        assert_eq!(decide(true, false, false), Mode::Paused);
        assert_eq!(decide(false, true, false), Mode::DrainDlq);
        assert_eq!(decide(false, false, false), Mode::Normal);
        assert_eq!(decide(true, true, true), Mode::Paused);
        assert_eq!(decide(false, true, true), Mode::DrainAlongside);
        assert_eq!(decide(false, false, true), Mode::Normal);
    }

    #[test]
    fn readings() {
        assert_eq!(
            reading(Mode::Normal),
            Reading {
                main: true,
                dlq: false
            }
        );
        assert_eq!(
            reading(Mode::Paused),
            Reading {
                main: false,
                dlq: false
            }
        );
        assert_eq!(
            reading(Mode::DrainDlq),
            Reading {
                main: false,
                dlq: true
            }
        );
        assert_eq!(
            reading(Mode::DrainAlongside),
            Reading {
                main: true,
                dlq: true
            }
        );
    }

    #[test]
    fn labels() {
        assert_eq!(Mode::Normal.as_str(), "normal");
        assert_eq!(Mode::Paused.as_str(), "paused");
        assert_eq!(Mode::DrainDlq.as_str(), "drain_dlq");
        assert_eq!(Mode::DrainAlongside.as_str(), "drain_alongside");
    }

    #[test]
    fn starts_paused_and_first_update_is_immediate() {
        let t0 = Instant::now();
        let mut f = PartitionFsm::new(DWELL);
        assert_eq!(f.mode(), Mode::Paused);
        assert_eq!(f.reading(), reading(Mode::Paused));
        assert_eq!(f.last_change(), None);
        assert_eq!(f.dwell_until(t0), None);
        assert_eq!(
            f.update(t0, false, true, false),
            Some(Change {
                from: Mode::Paused,
                to: Mode::DrainDlq
            })
        );
        assert_eq!(f.last_change(), Some(t0));
        assert_eq!(
            f.update(t0, false, true, false),
            None,
            "same inputs, no change"
        );
    }

    #[test]
    fn entering_paused_is_immediate_leaving_waits_for_the_dwell() {
        let t0 = Instant::now();
        let mut f = PartitionFsm::new(DWELL);
        f.update(t0, false, false, false);
        assert_eq!(f.mode(), Mode::Normal);
        // Entering Paused: at once, even right after the last change.
        assert_eq!(
            f.update(t0, true, false, false),
            Some(Change {
                from: Mode::Normal,
                to: Mode::Paused
            })
        );
        let t1 = t0 + ms(100);
        assert_eq!(f.update(t0, true, true, false), None);
        // The API is back: held for the dwell.
        assert_eq!(f.update(t1, false, false, false), None);
        assert_eq!(f.dwell_until(t1), Some(t0 + DWELL));
        assert_eq!(f.update(t0 + ms(1_999), false, true, false), None);
        assert_eq!(f.mode(), Mode::Paused);
        assert_eq!(
            f.update(t0 + DWELL, false, true, false),
            Some(Change {
                from: Mode::Paused,
                to: Mode::DrainDlq
            })
        );
        assert_eq!(f.dwell_until(t0 + DWELL), None);
    }

    #[test]
    fn normal_and_drain_switch_without_dwell() {
        let t0 = Instant::now();
        let mut f = PartitionFsm::new(DWELL);
        f.update(t0, false, true, false);
        assert_eq!(
            f.update(t0 + ms(1), false, false, false),
            Some(Change {
                from: Mode::DrainDlq,
                to: Mode::Normal
            })
        );
        assert_eq!(
            f.update(t0 + ms(2), false, true, false),
            Some(Change {
                from: Mode::Normal,
                to: Mode::DrainDlq
            })
        );
    }

    #[test]
    fn flapping_inside_the_dwell_changes_nothing() {
        let base = Instant::now();
        let t0 = base + Duration::from_secs(10);
        let mut f = PartitionFsm::new(DWELL);
        f.update(t0, false, false, false);
        f.update(t0, true, false, false);
        for i in 1..20 {
            assert_eq!(f.update(t0 + ms(i * 50), i % 2 == 0, false, false), None);
        }
        assert_eq!(f.mode(), Mode::Paused);
        // A clock that goes backwards counts as no time passed.
        assert_eq!(f.update(base, false, false, false), None);
        assert!(f.update(t0 + DWELL, false, false, false).is_some());
    }

    #[test]
    fn zero_dwell_follows_the_table() {
        let t0 = Instant::now();
        let mut f = PartitionFsm::new(Duration::ZERO);
        for (i, (a, d)) in [(true, false), (false, false), (true, true), (false, true)]
            .into_iter()
            .enumerate()
        {
            f.update(t0 + ms(i as u64), a, d, false);
            assert_eq!(f.mode(), decide(a, d, false));
        }
    }

    proptest! {
        /// Paused is entered on the step `api_unavailable` becomes true; otherwise the
        /// mode is the table's or a dwell is holding `Paused`; and every change is paid
        /// for by a change of the inputs (no oscillation of its own).
        #[test]
        fn safe_and_no_more_changes_than_input_flips(
            steps in proptest::collection::vec((0u64..1_500, any::<bool>(), any::<bool>(), any::<bool>()), 1..200),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut f = PartitionFsm::new(DWELL);
            let mut prev_input = (true, false, false); // what the initial Paused stands for
            let mut prev_target = Mode::Paused;
            let (mut input_flips, mut target_flips, mut changes) = (0u32, 0u32, 0u32);
            for (dt, api_down, dlq, alongside) in steps {
                now += ms(dt);
                if (api_down, dlq, alongside) != prev_input {
                    input_flips += 1;
                    prev_input = (api_down, dlq, alongside);
                }
                let target = decide(api_down, dlq, alongside);
                if target != prev_target {
                    target_flips += 1;
                    prev_target = target;
                }
                let before = f.mode();
                let entered_paused_at = f.last_change();
                let change = f.update(now, api_down, dlq, alongside);
                if let Some(c) = change {
                    changes += 1;
                    prop_assert_eq!(c.from, before);
                    prop_assert_eq!(c.to, f.mode());
                    prop_assert_ne!(c.from, c.to);
                }
                if api_down {
                    prop_assert_eq!(f.mode(), Mode::Paused);
                }
                if f.mode() != target {
                    prop_assert_eq!(f.mode(), Mode::Paused);
                    let entered = entered_paused_at.expect("held only after a change");
                    prop_assert!(now.duration_since(entered) < DWELL);
                }
                prop_assert!(changes <= target_flips);
                prop_assert!(target_flips <= input_flips);
            }
        }
    }
}
