//! The breaker itself: its state, the admission of calls, their outcomes,
//! the time-driven steps and the forced trip. The suspicion of a systemic
//! answer is in `systemic`.

use std::time::{Duration, Instant};

use super::window::Window;
use super::{BreakerConfig, BreakerState, BreakerStateKind, Transition, TransitionReason};

/// The shortest a cautious half-open period's probes wait for their answers
/// before their slots are freed (`open_for` when longer).
pub const MIN_PROBE_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Breaker {
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
    pub fn new(cfg: BreakerConfig) -> Self {
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

    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// The stored state (see [`BreakerState`] for the lazy Open → HalfOpen step).
    pub fn raw_state(&self) -> BreakerState {
        self.state
    }

    pub(super) fn probes(&self) -> u32 {
        self.cfg.half_open_probes.max(1)
    }

    /// The state as of `now`, for metrics: an `Open` whose interval has elapsed is
    /// reported as `HalfOpen`.
    pub fn state(&self, now: Instant) -> BreakerStateKind {
        match self.state {
            BreakerState::Closed => BreakerStateKind::Closed,
            BreakerState::Open { until } if now < until => BreakerStateKind::Open,
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => BreakerStateKind::HalfOpen,
        }
    }

    /// True while `Open` and the open interval has not elapsed: the breaker's input
    /// to `api_unavailable`. False in `HalfOpen` (see the module docs for why).
    pub fn is_open(&self, now: Instant) -> bool {
        self.state(now) == BreakerStateKind::Open
    }

    /// Whether [`Breaker::allow`] would admit a call at `now`, without taking a
    /// probe slot.
    pub fn admits_traffic(&self, now: Instant) -> bool {
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
    pub fn advance(&mut self, now: Instant) -> Option<Transition> {
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
    pub fn probing(&self) -> bool {
        matches!(self.state, BreakerState::HalfOpen { .. }) && !self.optimistic
    }

    /// The epoch an admission made now belongs to (see [`Breaker::release`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// An admitted call that will never be answered (dropped before its
    /// request, or its answer lost on the way): its half-open slot is freed
    /// for the next waiter, if it was admitted in this `epoch` and its slot
    /// is still waiting for an answer. Says nothing about the API. `suspect`:
    /// it was admitted as a suspect ([`Breaker::allow_suspect`]).
    pub fn release(&mut self, epoch: u64, suspect: bool) {
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
    pub fn allow(&mut self, now: Instant) -> bool {
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
    pub fn record(&mut self, now: Instant, success: bool) -> Option<Transition> {
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
    pub fn trip(&mut self, now: Instant, reason: &'static str) -> Option<Transition> {
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
