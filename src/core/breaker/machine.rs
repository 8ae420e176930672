//! The breaker itself: its state, the admission of calls, their outcomes,
//! the time-driven steps and the forced trip. The suspicion of a systemic
//! answer is in `systemic`.

use std::time::{Duration, Instant};

use super::window::Window;
use super::{BreakerConfig, BreakerState, BreakerStateKind, Transition, TransitionReason};

/// The shortest a cautious half-open period's probes wait for their answers
/// before their slots are freed (`open_for` when longer).
pub(crate) const MIN_PROBE_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    pub(super) cfg: BreakerConfig,
    pub(super) state: BreakerState,
    pub(super) window: Window,
    /// Failures since the last success (Closed only).
    pub(super) streak: u32,
    /// The half-open period began with a systemic answer ([`Breaker::systemic`]):
    /// one probe's success refutes it; it is confirmed (open, with the answer's
    /// reason) once every probe slot was used and every probe failed.
    pub(super) suspected: bool,
    /// Probes of a suspected period that failed so far.
    pub(super) suspect_failed: u32,
    /// A suspected period is *optimistic* until `half_open_probes` calls of
    /// events not refused before were refused too, or it is `open_for` old:
    /// every fresh call is admitted (the others' calls are the test, and one
    /// tenant's refusal costs nobody a wait); then it is *cautious*, the
    /// probe slots of any half-open period.
    pub(super) optimistic: bool,
    /// When the current half-open period began (`None` outside one).
    pub(super) half_open_since: Option<Instant>,
    /// Probe slots of this half-open period taken by *suspects* (events that
    /// were refused systemic before: [`Breaker::allow_suspect`]).
    pub(super) suspects_admitted: u32,
    /// Suspects' probes of this period refused again
    /// ([`Breaker::systemic_repeat`]): the slot is settled, the answer is
    /// neutral (it repeats what was known).
    pub(super) repeats: u32,
    /// Counts the periods whose admissions are counted afresh (every change
    /// of state, the end of optimism, slots freed by time): an admission
    /// released after its period ended frees nothing ([`Breaker::release`]).
    pub(super) epoch: u64,
    /// When the oldest probe of a cautious half-open period still waiting
    /// for its answer was admitted, or the last outcome heard since, if
    /// later: `open_for` after it, its unanswered slots are freed.
    pub(super) probes_since: Option<Instant>,
}

impl Breaker {
    /// A closed breaker. The config is used as given (call
    /// [`BreakerConfig::validate`] at load time); degenerate values do not panic:
    /// zero probes are treated as one.
    pub(crate) fn new(cfg: BreakerConfig) -> Self {
        Breaker {
            window: Window::new(cfg.window),
            cfg,
            state: BreakerState::Closed,
            streak: 0,
            suspected: false,
            suspect_failed: 0,
            optimistic: false,
            half_open_since: None,
            suspects_admitted: 0,
            repeats: 0,
            epoch: 0,
            probes_since: None,
        }
    }

    /// The stored state (see [`BreakerState`] for the lazy Open → HalfOpen step).
    pub(crate) fn raw_state(&self) -> BreakerState {
        self.state
    }

    pub(super) fn probes(&self) -> u32 {
        self.cfg.half_open_probes.max(1)
    }

    /// The state as of `now`, for metrics: an `Open` whose interval has elapsed is
    /// reported as `HalfOpen`.
    pub(crate) fn state(&self, now: Instant) -> BreakerStateKind {
        match self.state {
            BreakerState::Closed => BreakerStateKind::Closed,
            BreakerState::Open { until } if now < until => BreakerStateKind::Open,
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => BreakerStateKind::HalfOpen,
        }
    }

    /// True while `Open` and the open interval has not elapsed: the breaker's input
    /// to `api_unavailable`. False in `HalfOpen` (see the module docs for why).
    pub(crate) fn is_open(&self, now: Instant) -> bool {
        self.state(now) == BreakerStateKind::Open
    }

    /// Whether [`Breaker::allow`] would admit a call at `now`, without taking a
    /// probe slot: the tests' check of `allow` (no dispatcher asks it).
    #[cfg(test)]
    pub(crate) fn admits_traffic(&self, now: Instant) -> bool {
        match self.state {
            BreakerState::Closed => true,
            BreakerState::Open { until } => now >= until,
            BreakerState::HalfOpen { admitted, .. } => {
                self.optimistic || admitted < self.probes() || self.probes_lapsed(now)
            }
        }
    }

    /// Applies the time-driven transition (Open → HalfOpen once `open_for` has
    /// elapsed) and reports it. [`Breaker::allow`] does this itself; call it
    /// directly to log or count the transition when it happens.
    pub(crate) fn advance(&mut self, now: Instant) -> Option<Transition> {
        match self.state {
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                };
                self.new_period(now);
                Some(Transition {
                    from: BreakerStateKind::Open,
                    to: BreakerStateKind::HalfOpen,
                    reason: TransitionReason::OpenElapsed,
                })
            }
            BreakerState::HalfOpen { .. } if self.optimistic && self.lapsed(now) => {
                // Nothing refuted it for `open_for`: the probes decide now.
                self.be_cautious();
                None
            }
            BreakerState::HalfOpen { .. } if self.probes_lapsed(now) => {
                // A cautious period ends by time too: probes unanswered for
                // `open_for` (an answer no path reported) free their slots,
                // so the next waiters probe instead of waiting for ever.
                if let BreakerState::HalfOpen {
                    admitted,
                    succeeded,
                } = &mut self.state
                {
                    *admitted = *succeeded + self.repeats;
                }
                self.suspects_admitted = 0;
                self.epoch += 1;
                self.probes_since = None;
                None
            }
            _ => None,
        }
    }

    /// Whether a cautious half-open period's probes have waited for their
    /// answers for `open_for` (at least [`MIN_PROBE_WAIT`]) since the first
    /// of them was admitted or the last answer was heard.
    fn probes_lapsed(&self, now: Instant) -> bool {
        let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = self.state
        else {
            return false;
        };
        !self.optimistic
            && admitted > succeeded + self.repeats
            && self
                .probes_since
                .is_some_and(|since| now >= since + self.cfg.open_for.max(MIN_PROBE_WAIT))
    }

    /// Whether calls are admitted one probe slot each now (half-open, and not
    /// in a suspected period's optimism, which admits every fresh call).
    pub(crate) fn probing(&self) -> bool {
        matches!(self.state, BreakerState::HalfOpen { .. }) && !self.optimistic
    }

    /// The epoch an admission made now belongs to (see [`Breaker::release`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// An admitted call that will never be answered (dropped before its
    /// request, or its answer lost on the way): its half-open slot is freed
    /// for the next waiter, if it was admitted in this `epoch` and its slot
    /// is still waiting for an answer. Says nothing about the API. `suspect`:
    /// it was admitted as a suspect ([`Breaker::allow_suspect`]).
    pub(crate) fn release(&mut self, epoch: u64, suspect: bool) {
        if epoch != self.epoch {
            return;
        }
        if let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = &mut self.state
        {
            if *admitted > *succeeded + self.repeats {
                *admitted -= 1;
                if suspect {
                    self.suspects_admitted = self.suspects_admitted.saturating_sub(1);
                }
            }
        }
    }

    /// Whether the half-open period is `open_for` old.
    pub(super) fn lapsed(&self, now: Instant) -> bool {
        self.half_open_since
            .is_none_or(|since| now >= since + self.cfg.open_for)
    }

    /// Asks to make one call at `now`. Closed: yes. Open: no, until the interval has
    /// elapsed; then HalfOpen. HalfOpen: yes for the first `half_open_probes` calls
    /// of the period, then no until the probes have settled the state.
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        self.advance(now);
        let probes = self.probes();
        match &mut self.state {
            BreakerState::Closed => true,
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if self.optimistic {
                    *admitted = admitted.saturating_add(1);
                    true
                } else if *admitted < probes {
                    if *admitted <= *succeeded + self.repeats {
                        // The first probe waiting for its answer.
                        self.probes_since = Some(now);
                    }
                    *admitted += 1;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Records the outcome of a call that finished at `now`; returns the transition
    /// if the outcome changed the state.
    pub(crate) fn record(&mut self, now: Instant, success: bool) -> Option<Transition> {
        let probes = self.probes();
        match &mut self.state {
            BreakerState::Closed => {
                self.window.record(now, success);
                self.streak = if success {
                    0
                } else {
                    self.streak.saturating_add(1)
                };
                if self.cfg.consecutive_failures > 0 && self.streak >= self.cfg.consecutive_failures
                {
                    return Some(self.open(
                        now,
                        BreakerStateKind::Closed,
                        TransitionReason::ConsecutiveFailures,
                    ));
                }
                let (calls, failures) = self.window.totals(now);
                let over = calls >= self.cfg.min_calls.max(1)
                    && failures > 0
                    && f64::from(failures) >= self.cfg.failure_rate * f64::from(calls);
                if over {
                    return Some(self.open(
                        now,
                        BreakerStateKind::Closed,
                        TransitionReason::FailureRate,
                    ));
                }
                None
            }
            // Stragglers from calls admitted before the trip: the verdict is made.
            BreakerState::Open { .. } => None,
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if *succeeded + self.repeats >= *admitted {
                    return None; // no probe is waiting for an outcome
                }
                if self.probes_since.is_some() {
                    self.probes_since = Some(now);
                }
                if self.suspected {
                    if success {
                        return Some(self.close(TransitionReason::Refuted));
                    }
                    self.suspect_evidence();
                    return self.confirmed(now).then(|| {
                        self.open(
                            now,
                            BreakerStateKind::HalfOpen,
                            TransitionReason::ProbeFailed,
                        )
                    });
                }
                if !success {
                    return Some(self.open(
                        now,
                        BreakerStateKind::HalfOpen,
                        TransitionReason::ProbeFailed,
                    ));
                }
                *succeeded += 1;
                // Every slot settled: the suspects' refusals repeat what was
                // known, the successes say the API is up.
                if *succeeded + self.repeats >= probes {
                    return Some(self.close(TransitionReason::ProbesSucceeded));
                }
                None
            }
        }
    }

    /// Forces `Open` for `open_for` from `now`, whatever the state. Tripping an
    /// already open breaker extends it (never shortens it) and reports nothing, so a
    /// systemic condition that persists keeps the breaker open without flooding the
    /// log with transitions.
    pub(crate) fn trip(&mut self, now: Instant, reason: &'static str) -> Option<Transition> {
        let from = self.state(now);
        match self.state {
            BreakerState::Open { until } if now < until => {
                self.state = BreakerState::Open {
                    until: until.max(now + self.cfg.open_for),
                };
                None
            }
            _ => Some(self.open(now, from, TransitionReason::Forced(reason))),
        }
    }

    pub(super) fn new_period(&mut self, now: Instant) {
        self.epoch += 1;
        self.probes_since = None;
        self.half_open_since = Some(now);
        self.suspects_admitted = 0;
        self.repeats = 0;
        self.suspect_failed = 0;
    }

    pub(super) fn close(&mut self, reason: TransitionReason) -> Transition {
        self.epoch += 1;
        self.probes_since = None;
        self.state = BreakerState::Closed;
        self.suspected = false;
        self.optimistic = false;
        self.half_open_since = None;
        self.window.clear();
        Transition {
            from: BreakerStateKind::HalfOpen,
            to: BreakerStateKind::Closed,
            reason,
        }
    }

    pub(super) fn open(
        &mut self,
        now: Instant,
        from: BreakerStateKind,
        reason: TransitionReason,
    ) -> Transition {
        self.epoch += 1;
        self.probes_since = None;
        self.suspected = false;
        self.optimistic = false;
        self.suspect_failed = 0;
        self.half_open_since = None;
        self.state = BreakerState::Open {
            until: now + self.cfg.open_for,
        };
        self.window.clear();
        self.streak = 0;
        Transition {
            from,
            to: BreakerStateKind::Open,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::breaker::tests::{cfg, ms, opened, secs};
    use crate::core::breaker::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_run_of_failures_opens_despite_a_window_full_of_successes() {
        let t0 = Instant::now();
        let cfg = BreakerConfig {
            consecutive_failures: 5,
            ..BreakerConfig::default()
        };
        let mut b = Breaker::new(cfg);
        for i in 0..1000 {
            assert_eq!(b.record(t0 + Duration::from_millis(i), true), None);
        }
        for i in 0..4 {
            assert_eq!(b.record(t0 + Duration::from_millis(1000 + i), false), None);
        }
        // A success in between resets the run.
        assert_eq!(b.record(t0 + Duration::from_millis(1004), true), None);
        for i in 0..4 {
            assert_eq!(b.record(t0 + Duration::from_millis(1005 + i), false), None);
        }
        let t = b.record(t0 + Duration::from_millis(1010), false).unwrap();
        assert_eq!(t.to, BreakerStateKind::Open);
        assert_eq!(t.reason, TransitionReason::ConsecutiveFailures);
        assert!(b.is_open(t0 + Duration::from_millis(1011)));
    }

    #[test]
    fn closed_admits_everything() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        for i in 0..100 {
            assert!(b.allow(t0 + ms(i)));
            assert_eq!(b.record(t0 + ms(i), true), None);
        }
        assert_eq!(b.state(t0), BreakerStateKind::Closed);
        assert!(!b.is_open(t0));
        assert!(b.admits_traffic(t0));
    }

    #[test]
    fn opens_by_rate_only_after_min_calls() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        // 3 failures: 100 % but below min_calls.
        for _ in 0..3 {
            assert_eq!(b.record(t0, false), None);
        }
        assert_eq!(b.state(t0), BreakerStateKind::Closed);
        // 4th call, 4/4 failed: open.
        let t = b.record(t0 + ms(1), false).unwrap();
        assert_eq!(
            t,
            Transition {
                from: BreakerStateKind::Closed,
                to: BreakerStateKind::Open,
                reason: TransitionReason::FailureRate,
            }
        );
        assert!(b.is_open(t0 + ms(1)));
        assert_eq!(
            b.raw_state(),
            BreakerState::Open {
                until: t0 + ms(1) + secs(5)
            }
        );
    }

    #[test]
    fn below_the_rate_stays_closed_and_the_rate_is_inclusive() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        // 1 of 4 failed (25 %), then 2 of 5 (40 %): closed.
        for ok in [true, true, true, false, false] {
            assert_eq!(b.record(t0, ok), None);
        }
        assert_eq!(b.state(t0), BreakerStateKind::Closed);
        // 3 of 6 = 50 %: the threshold itself opens.
        assert_eq!(
            b.record(t0, false).map(|t| t.to),
            Some(BreakerStateKind::Open)
        );
    }

    #[test]
    fn old_failures_expire_from_the_window() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        for _ in 0..3 {
            b.record(t0, false);
        }
        // 10 s later the three failures are out of the window: one more failure is
        // 1 call, below min_calls, so no verdict.
        assert_eq!(b.record(t0 + secs(10), false), None);
        assert_eq!(b.record(t0 + secs(10), false), None);
        assert_eq!(b.record(t0 + secs(10), false), None);
        assert_eq!(b.state(t0 + secs(10)), BreakerStateKind::Closed);
        // Within the window they still count: 4 failures → open.
        assert!(b.record(t0 + secs(11), false).is_some());
    }

    #[test]
    fn outcomes_inside_the_window_are_kept() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        for i in 0..3 {
            b.record(t0 + secs(i), false);
        }
        // 8.9 s after the first failure: all still in the window.
        assert!(b.record(t0 + ms(8_900), false).is_some());
    }

    #[test]
    fn an_outcome_stamped_before_the_window_is_ignored() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        b.record(t0 + secs(30), true);
        // Stamped 30 s earlier than what was already seen: outside the window.
        for _ in 0..10 {
            assert_eq!(b.record(t0, false), None);
        }
        assert_eq!(b.window.totals(t0 + secs(30)), (1, 0));
        // Slightly late outcomes still count (two: a third would open it).
        for _ in 0..2 {
            assert_eq!(b.record(t0 + secs(29), false), None);
        }
        assert_eq!(b.window.totals(t0 + secs(30)), (3, 2));
    }

    #[test]
    fn open_rejects_until_the_interval_elapses() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        for off in [0, 1, 1_000, 4_999] {
            assert!(b.is_open(t0 + ms(off)));
            assert!(!b.admits_traffic(t0 + ms(off)));
            assert!(!b.allow(t0 + ms(off)), "offset {off}");
        }
        // Late outcomes while open change nothing.
        assert_eq!(b.record(t0 + ms(100), true), None);
        assert_eq!(b.record(t0 + ms(100), false), None);
        assert_eq!(b.state(t0 + ms(4_999)), BreakerStateKind::Open);
        // At `until`: reported half-open before anything mutates it.
        assert_eq!(b.state(t0 + secs(5)), BreakerStateKind::HalfOpen);
        assert!(!b.is_open(t0 + secs(5)));
        assert!(b.admits_traffic(t0 + secs(5)));
    }

    #[test]
    fn advance_reports_open_to_half_open_once() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert_eq!(b.advance(t0 + ms(4_999)), None);
        assert_eq!(
            b.advance(t0 + secs(5)),
            Some(Transition {
                from: BreakerStateKind::Open,
                to: BreakerStateKind::HalfOpen,
                reason: TransitionReason::OpenElapsed,
            })
        );
        assert_eq!(b.advance(t0 + secs(6)), None);
        assert_eq!(
            b.raw_state(),
            BreakerState::HalfOpen {
                admitted: 0,
                succeeded: 0
            }
        );
    }

    #[test]
    fn half_open_admits_exactly_the_probes() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = t0 + secs(5);
        assert!(b.allow(t));
        assert!(b.admits_traffic(t));
        assert!(b.allow(t));
        assert!(!b.admits_traffic(t));
        for i in 0..5 {
            assert!(!b.allow(t + secs(i)), "third call refused");
        }
        assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
        assert!(!b.is_open(t), "half-open is not 'unavailable'");
        // No answer for `open_for`: the period ends by time as an optimistic
        // one does; the unanswered slots go to the next calls.
        let later = t + secs(5);
        assert!(b.admits_traffic(later));
        assert!(b.allow(later));
        assert!(b.allow(later));
        assert!(!b.allow(later), "two fresh probes");
        assert!(b.record(later, true).is_none());
        assert_eq!(
            b.record(later, true).map(|t| t.to),
            Some(BreakerStateKind::Closed)
        );
    }

    #[test]
    fn a_released_probe_frees_its_slot_once_and_only_in_its_epoch() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = t0 + secs(5);
        assert!(b.allow(t));
        let epoch = b.epoch();
        assert!(b.allow(t));
        assert!(!b.allow(t));
        b.release(epoch, false);
        assert!(b.allow(t), "the released slot is taken again");
        assert!(!b.allow(t));
        // Heard: a probe delivered, the other released — its slot only.
        assert!(b.record(t, true).is_none());
        b.release(epoch, false);
        b.release(epoch, false);
        assert!(b.allow(t), "one slot free again");
        assert!(!b.allow(t), "the delivered probe's slot stays settled");
        // The last probe answered: closed; a release of the old epoch
        // changes nothing.
        assert_eq!(
            b.record(t, true).map(|t| t.to),
            Some(BreakerStateKind::Closed)
        );
        b.release(epoch, false);
        assert_eq!(b.state(t), BreakerStateKind::Closed);
        // A release after the period ended by a reopening frees nothing of
        // the next period.
        let mut b = opened(t0);
        assert!(b.allow(t));
        let old = b.epoch();
        assert!(b.record(t, false).is_some(), "the probe failed: open");
        let t2 = t + secs(5);
        assert!(b.allow(t2));
        assert!(b.allow(t2));
        assert!(!b.allow(t2));
        b.release(old, false);
        assert!(!b.allow(t2), "an old epoch's release frees no new slot");
    }

    #[test]
    fn half_open_closes_when_every_probe_succeeds() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = t0 + secs(5);
        assert!(b.allow(t));
        assert!(b.allow(t));
        assert_eq!(b.record(t, true), None, "one of two probes is not enough");
        assert!(!b.allow(t), "the settled probe does not free a slot");
        assert_eq!(
            b.record(t, true),
            Some(Transition {
                from: BreakerStateKind::HalfOpen,
                to: BreakerStateKind::Closed,
                reason: TransitionReason::ProbesSucceeded,
            })
        );
        assert_eq!(b.state(t), BreakerStateKind::Closed);
        assert!(b.allow(t));
        // The window was cleared: the failures that opened it are gone.
        assert_eq!(b.window.totals(t), (0, 0));
        for _ in 0..3 {
            assert_eq!(b.record(t, false), None);
        }
    }

    #[test]
    fn half_open_reopens_on_a_failed_probe() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = t0 + secs(5);
        assert!(b.allow(t));
        assert!(b.allow(t));
        assert_eq!(b.record(t, true), None);
        assert_eq!(
            b.record(t + ms(10), false),
            Some(Transition {
                from: BreakerStateKind::HalfOpen,
                to: BreakerStateKind::Open,
                reason: TransitionReason::ProbeFailed,
            })
        );
        assert!(b.is_open(t + ms(10)));
        assert!(!b.allow(t + ms(10) + ms(4_999)));
        // A new half-open period with fresh probe slots.
        assert!(b.allow(t + ms(10) + secs(5)));
        assert!(b.allow(t + ms(10) + secs(5)));
        assert!(!b.allow(t + ms(10) + secs(5)));
    }

    #[test]
    fn half_open_ignores_outcomes_without_a_waiting_probe() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = t0 + secs(5);
        b.advance(t);
        // Stragglers from before the trip, no probe admitted yet.
        assert_eq!(b.record(t, false), None);
        assert_eq!(b.record(t, true), None);
        assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
        assert!(b.allow(t));
        assert_eq!(b.record(t, true), None);
        // One probe admitted, one reported: a further outcome is not a probe's.
        assert_eq!(b.record(t, false), None);
        assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
    }

    #[test]
    fn trip_forces_open_from_every_state() {
        let t0 = Instant::now();
        // Closed.
        let mut b = Breaker::new(cfg());
        assert_eq!(
            b.trip(t0, "systemic"),
            Some(Transition {
                from: BreakerStateKind::Closed,
                to: BreakerStateKind::Open,
                reason: TransitionReason::Forced("systemic"),
            })
        );
        assert!(b.is_open(t0));
        assert!(!b.allow(t0 + ms(4_999)));
        // HalfOpen (with probes in flight).
        let mut b = opened(t0);
        assert!(b.allow(t0 + secs(5)));
        let t = b.trip(t0 + secs(6), "dlq_flood").unwrap();
        assert_eq!(t.from, BreakerStateKind::HalfOpen);
        assert_eq!(t.reason.as_str(), "dlq_flood");
        assert!(b.is_open(t0 + secs(10)));
        assert!(!b.is_open(t0 + secs(11)));
        // Lazily half-open (Open past `until`, not yet advanced).
        let mut b = opened(t0);
        let t = b.trip(t0 + secs(7), "systemic").unwrap();
        assert_eq!(t.from, BreakerStateKind::HalfOpen);
        assert!(b.is_open(t0 + secs(11)));
        // Open: extended, not reported.
        let mut b = opened(t0);
        assert_eq!(b.trip(t0 + secs(3), "systemic"), None);
        assert!(b.is_open(t0 + secs(7)));
        assert!(!b.is_open(t0 + secs(8)));
        // ... and never shortened.
        let mut c = cfg();
        c.open_for = secs(5);
        let mut b = Breaker::new(c);
        b.trip(t0 + secs(3), "systemic");
        assert_eq!(b.trip(t0, "systemic"), None);
        assert!(b.is_open(t0 + ms(7_999)));
    }

    #[test]
    fn degenerate_configs_do_not_panic() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig {
            window: Duration::ZERO,
            min_calls: 0,
            failure_rate: 0.0,
            open_for: Duration::ZERO,
            half_open_probes: 0,
            consecutive_failures: 0,
        });
        assert_eq!(b.record(t0, true), None, "no failure, no verdict");
        assert!(b.record(t0, false).is_some());
        // open_for 0: half-open at once, one probe.
        assert!(b.allow(t0));
        assert!(!b.allow(t0));
        assert!(b.record(t0, true).is_some());
        assert_eq!(b.state(t0), BreakerStateKind::Closed);
    }
}
