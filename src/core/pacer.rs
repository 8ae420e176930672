//! A pacer: at most one slot per `interval` (the DLQ drain's rate). Pure: time
//! is an input (a [`Duration`] since the caller's epoch).
//!
//! Nothing is reserved ahead: a slot goes to a caller that is there to use it
//! now, and a caller told to come back later holds nothing. So a waiter that
//! gives up (its partition was handed over) leaves no slot behind for the
//! others to wait out. (Reserving slots ahead, as before, made every waiter
//! behind a cancelled one wait one interval longer for a slot nobody used.)

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pacer {
    interval: Duration,
    /// The earliest time the next slot can be taken.
    next: Duration,
}

impl Pacer {
    pub(crate) fn new(interval: Duration) -> Pacer {
        Pacer {
            interval,
            next: Duration::ZERO,
        }
    }

    /// Takes the slot at `now` if one is free (`Ok`); otherwise says when to
    /// ask again (`Err(at)`), having taken nothing.
    pub(crate) fn take(&mut self, now: Duration) -> Result<(), Duration> {
        if now >= self.next {
            self.next = now + self.interval;
            Ok(())
        } else {
            Err(self.next)
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
    fn one_slot_per_interval() {
        let mut p = Pacer::new(ms(100));
        assert_eq!(p.take(ms(0)), Ok(()));
        assert_eq!(p.take(ms(10)), Err(ms(100)));
        assert_eq!(p.take(ms(100)), Ok(()));
        // Idle for a while: the next slot is at once, not a burst of the missed ones.
        assert_eq!(p.take(ms(1_000)), Ok(()));
        assert_eq!(p.take(ms(1_000)), Err(ms(1_100)));
    }

    proptest! {
        /// Whatever the callers do (ask at any time, give up after a refusal):
        /// granted slots are at least an interval apart; a refusal changes
        /// nothing (a caller that gives up costs the others nothing); and a
        /// caller coming back at the time it was told gets the slot.
        #[test]
        fn refusals_take_nothing_and_slots_keep_the_interval(
            interval in 1u64..500,
            asks in proptest::collection::vec(0u64..300, 1..200),
        ) {
            let mut p = Pacer::new(ms(interval));
            let mut now = ms(0);
            let mut last: Option<Duration> = None;
            for dt in asks {
                now += ms(dt);
                let before = p.clone();
                match p.take(now) {
                    Ok(()) => {
                        if let Some(l) = last {
                            prop_assert!(now - l >= ms(interval));
                        }
                        last = Some(now);
                    }
                    Err(at) => {
                        prop_assert_eq!(&p, &before, "a refusal took something");
                        prop_assert!(at > now);
                        let mut again = p.clone();
                        prop_assert_eq!(again.take(at), Ok(()));
                    }
                }
            }
        }
    }
}
