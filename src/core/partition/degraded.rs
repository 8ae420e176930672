//! [`Degraded`]: degraded mode — the health verdict and the FSM
//! (`core::fsm`) that chooses which of main p and DLQ p is read, and the
//! wake-ups that re-evaluate it (a dwell that ends, a DLQ record that
//! becomes due).

use super::{Effect, Now, Timer};
use crate::core::fsm::{Mode, PartitionFsm, Reading};
use std::time::{Duration, Instant};

/// The mode and what it rests on.
pub(super) struct Degraded {
    fsm: PartitionFsm,
    /// The last health verdict: every destination down.
    api_unavailable: bool,
    /// Some destination down: the DLQ is not drained (`core::destination`).
    drain_held: bool,
    /// The earliest [`Timer::Wake`] pending.
    wake_at: Option<Instant>,
}

impl Degraded {
    /// `Paused`, with `min_pause` as its least dwell.
    pub(super) fn new(min_pause: Duration) -> Self {
        Degraded {
            fsm: PartitionFsm::new(min_pause),
            api_unavailable: false,
            drain_held: false,
            wake_at: None,
        }
    }

    pub(super) fn mode(&self) -> Mode {
        self.fsm.mode()
    }

    /// Nothing goes out: the API is judged down.
    pub(super) fn paused(&self) -> bool {
        self.fsm.mode() == Mode::Paused
    }

    /// What the mode reads.
    pub(super) fn reading(&self) -> Reading {
        self.fsm.reading()
    }

    /// A new health verdict (applied at the next [`Degraded::update`]).
    pub(super) fn verdict(&mut self, api_unavailable: bool, drain_held: bool) {
        self.api_unavailable = api_unavailable;
        self.drain_held = drain_held || api_unavailable;
    }

    /// The [`Timer::Wake`] came.
    pub(super) fn woken(&mut self) {
        self.wake_at = None;
    }

    /// Runs the FSM on whether DLQ p has `unread` records and may drain
    /// `alongside` main p. Returns the [`Effect::Mode`] to report: after a
    /// change, or at the `first` evaluation (so a partition that starts
    /// paused shows).
    pub(super) fn update<I>(
        &mut self,
        now: Now,
        unread: bool,
        alongside: bool,
        first: bool,
    ) -> Option<Effect<I>> {
        // While some destination is down the DLQ waits (its head may be that
        // destination's, and main p would wait behind it): main p is read.
        let unread = unread && !self.drain_held;
        let change = self
            .fsm
            .update(now.mono, self.api_unavailable, unread, alongside);
        (change.is_some() || first).then(|| Effect::Mode {
            mode: self.fsm.mode(),
            change,
        })
    }

    /// The wake-up to schedule: when the dwell in `Paused` ends, or when the
    /// DLQ head is due (`due_ms`, wall clock), whichever is first; `None`
    /// when neither or when an earlier one is pending.
    pub(super) fn wake<I>(&mut self, now: Now, due_ms: Option<i64>) -> Option<Effect<I>> {
        let mut wake = self.fsm.dwell_until(now.mono);
        if let Some(t) = due_ms {
            let at = now.mono + Duration::from_millis((t - now.wall_ms).max(0) as u64);
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        let at = wake?;
        if self.wake_at.is_some_and(|w| at >= w) {
            return None;
        }
        self.wake_at = Some(at);
        // One millisecond late rather than early: the dwell is over at `at`.
        let after = at.saturating_duration_since(now.mono) + Duration::from_millis(1);
        Some(Effect::Schedule {
            after,
            timer: Timer::Wake,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fsm::Change;

    type Fx = Option<Effect<()>>;

    fn at(base: Instant, ms: u64) -> Now {
        Now {
            mono: base + Duration::from_millis(ms),
            wall_ms: ms as i64,
        }
    }

    fn wake_after(fx: Fx) -> Option<Duration> {
        match fx {
            Some(Effect::Schedule {
                after,
                timer: Timer::Wake,
            }) => Some(after),
            _ => None,
        }
    }

    #[test]
    fn the_first_evaluation_shows_the_mode_and_later_only_changes() {
        let base = Instant::now();
        let mut d = Degraded::new(Duration::from_secs(1));
        let fx: Fx = d.update(at(base, 0), false, false, true);
        let change = Some(Change {
            from: Mode::Paused,
            to: Mode::Normal,
        });
        assert_eq!(
            fx,
            Some(Effect::Mode {
                mode: Mode::Normal,
                change
            })
        );
        assert!(d.update::<()>(at(base, 1), false, false, false).is_none());
        d.verdict(true, true);
        assert!(d.update::<()>(at(base, 2), false, false, false).is_some());
        assert!(d.paused());
        assert!(!d.reading().main && !d.reading().dlq);
    }

    #[test]
    fn a_held_drain_reads_main_p_and_drains_once_released() {
        let base = Instant::now();
        let mut d = Degraded::new(Duration::ZERO);
        d.update::<()>(at(base, 0), false, false, true);
        d.verdict(false, true);
        d.update::<()>(at(base, 1), true, false, false);
        assert_eq!(d.mode(), Mode::Normal, "another destination is down");
        assert!(d.reading().main && !d.reading().dlq);
        d.verdict(false, false);
        d.update::<()>(at(base, 2), true, false, false);
        assert_eq!(d.mode(), Mode::DrainDlq);
    }

    #[test]
    fn a_dwell_in_paused_wakes_once_when_it_ends() {
        let base = Instant::now();
        let mut d = Degraded::new(Duration::from_millis(1_000));
        d.update::<()>(at(base, 0), false, false, true);
        d.verdict(true, true);
        d.update::<()>(at(base, 0), false, false, false);
        d.verdict(false, false);
        assert!(
            d.update::<()>(at(base, 10), false, false, false).is_none(),
            "dwelling"
        );
        assert_eq!(
            wake_after(d.wake(at(base, 10), None)),
            Some(Duration::from_millis(991))
        );
        assert_eq!(
            wake_after(d.wake(at(base, 20), None)),
            None,
            "already pending"
        );
        d.woken();
        assert!(wake_after(d.wake(at(base, 20), None)).is_some());
    }

    #[test]
    fn a_dlq_head_not_due_wakes_at_its_time_and_an_earlier_one_replaces_it() {
        let base = Instant::now();
        let mut d = Degraded::new(Duration::ZERO);
        d.update::<()>(at(base, 0), false, false, true);
        assert_eq!(wake_after(d.wake(at(base, 0), None)), None);
        let after = wake_after(d.wake(at(base, 0), Some(500)));
        assert_eq!(after, Some(Duration::from_millis(501)));
        assert_eq!(wake_after(d.wake(at(base, 0), Some(600))), None);
        let after = wake_after(d.wake(at(base, 0), Some(100)));
        assert_eq!(
            after,
            Some(Duration::from_millis(101)),
            "earlier than pending"
        );
    }
}
