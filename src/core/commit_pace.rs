//! Commits before auto-commit, coalesced: at most one commit request per
//! `floor` for the whole consumer, however many partitions are due. Pure: time
//! is an input (a [`Duration`] since the caller's epoch).
//!
//! A partition side that finished `kafka.commit_after` events (or whose
//! position auto-commit would not send) asks for a commit
//! (`core::partition`'s `Commit::Soon`). Each such ask was one OffsetCommit
//! request of its own: with 12 partitions at 30,000 events/s, about 250 a
//! second, each a round of librdkafka's threads and an append to the
//! broker's `__consumer_offsets`. The shell (`actors::partition::commits`) keeps the
//! latest offset and metadata asked for each partition and commits them all
//! in one request: now if the last one is at least `floor` old, else once it
//! is. So an ask is sent within `floor`, as it was per partition, and the
//! requests are at most `1 / floor` a second.

use super::pacer::Pacer;
use std::time::Duration;

/// What the shell does after an ask or a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PaceEffect {
    /// Commit what waits now.
    Send,
    /// Call [`CommitPace::flush`] at this time (none was pending).
    FlushAt(Duration),
    /// A flush is already pending: it sends this ask too.
    Nothing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitPace {
    pacer: Pacer,
    /// A flush is asked for and has not come yet.
    flush_pending: bool,
}

impl CommitPace {
    pub(crate) fn new(floor: Duration) -> CommitPace {
        CommitPace {
            pacer: Pacer::new(floor),
            flush_pending: false,
        }
    }

    /// A partition side is due for a commit.
    pub(crate) fn ask(&mut self, now: Duration) -> PaceEffect {
        if self.flush_pending {
            return PaceEffect::Nothing;
        }
        self.slot(now)
    }

    /// The pending flush's time came (a timer may fire early or late).
    pub(crate) fn flush(&mut self, now: Duration) -> PaceEffect {
        if !std::mem::take(&mut self.flush_pending) {
            return PaceEffect::Nothing; // Not asked for: nothing is pending.
        }
        self.slot(now)
    }

    fn slot(&mut self, now: Duration) -> PaceEffect {
        match self.pacer.take(now) {
            Ok(()) => PaceEffect::Send,
            Err(at) => {
                self.flush_pending = true;
                PaceEffect::FlushAt(at)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn asks_within_the_floor_share_one_flush() {
        let mut p = CommitPace::new(ms(10));
        assert_eq!(p.ask(ms(0)), PaceEffect::Send);
        assert_eq!(p.ask(ms(2)), PaceEffect::FlushAt(ms(10)));
        assert_eq!(
            p.ask(ms(5)),
            PaceEffect::Nothing,
            "the pending flush sends it"
        );
        assert_eq!(p.flush(ms(10)), PaceEffect::Send);
        assert_eq!(p.flush(ms(11)), PaceEffect::Nothing, "nothing pending");
        // A timer that fires early is told when to come back.
        assert_eq!(p.ask(ms(12)), PaceEffect::FlushAt(ms(20)));
        assert_eq!(p.flush(ms(19)), PaceEffect::FlushAt(ms(20)));
        assert_eq!(p.flush(ms(20)), PaceEffect::Send);
        // Idle for a while: at once.
        assert_eq!(p.ask(ms(500)), PaceEffect::Send);
    }

    proptest! {
        /// Asks at any times, the flushes fired when asked for (with a timer's
        /// lateness): sends are at least `floor` apart, and every ask is sent
        /// at most `floor` plus the lateness after it.
        #[test]
        fn sends_are_spaced_and_every_ask_is_sent_within_the_floor(
            gaps in prop::collection::vec(0u64..30, 1..60),
            late in 0u64..3,
        ) {
            let floor = ms(10);
            let mut p = CommitPace::new(floor);
            let mut sends: Vec<Duration> = Vec::new();
            let mut unsent: Option<Duration> = None; // The oldest ask not yet sent.
            let mut timer: Option<Duration> = None;
            let mut now = Duration::ZERO;
            let check = |fx: PaceEffect, at: Duration, sends: &mut Vec<Duration>,
                             unsent: &mut Option<Duration>, timer: &mut Option<Duration>|
             -> Result<(), TestCaseError> {
                match fx {
                    PaceEffect::Send => {
                        if let Some(last) = sends.last() {
                            prop_assert!(at >= *last + floor, "sends at {last:?} and {at:?}");
                        }
                        if let Some(asked) = unsent.take() {
                            prop_assert!(at <= asked + floor + ms(late), "asked {asked:?}, sent {at:?}");
                        }
                        sends.push(at);
                    }
                    PaceEffect::FlushAt(t) => {
                        prop_assert!(timer.is_none(), "a second flush asked for");
                        prop_assert!(t > at);
                        *timer = Some(t);
                    }
                    PaceEffect::Nothing => {
                        prop_assert!(timer.is_some() || unsent.is_none(), "an ask left with no flush");
                    }
                }
                Ok(())
            };
            for gap in gaps {
                let next = now + ms(gap);
                // The timer fires (late) before the next ask if it is due by then.
                if let Some(t) = timer {
                    let fire = t + ms(late);
                    if fire <= next {
                        timer = None;
                        let fx = p.flush(fire);
                        check(fx, fire, &mut sends, &mut unsent, &mut timer)?;
                    }
                }
                now = next;
                if unsent.is_none() {
                    unsent = Some(now);
                }
                let fx = p.ask(now);
                check(fx, now, &mut sends, &mut unsent, &mut timer)?;
            }
            // The last ask's flush.
            if let Some(t) = timer.take() {
                let fire = t + ms(late);
                let fx = p.flush(fire);
                check(fx, fire, &mut sends, &mut unsent, &mut timer)?;
            }
            prop_assert!(unsent.is_none(), "an ask never sent");
        }
    }
}
