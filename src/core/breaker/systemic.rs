//! The breaker's side of a systemic answer (401/403, TLS: `core::systemic`):
//! the hypothesis "the API refuses every call" suspected, tested by the
//! calls (optimistic, then probes), refuted or confirmed; suspects' probe
//! slots and their neutral repeats.

use std::time::Instant;

use super::{Breaker, BreakerState, BreakerStateKind, Transition, TransitionReason};

impl Breaker {
    /// The suspected period's optimism ends: from here its probe slots are
    /// counted afresh (the calls admitted optimistically are not probes; one
    /// of them delivered still refutes it, through a probe's slot).
    pub(super) fn be_cautious(&mut self) {
        self.optimistic = false;
        self.epoch += 1;
        self.probes_since = None;
        self.state = BreakerState::HalfOpen {
            admitted: 0,
            succeeded: 0,
        };
        self.suspects_admitted = 0;
        self.repeats = 0;
    }

    /// A fresh call of a suspected period was refused (or failed): evidence.
    /// Optimistic, it counts, and `half_open_probes` of them end the optimism;
    /// cautious, its slot goes to the next waiter, so calls of other events
    /// keep testing the hypothesis.
    pub(super) fn suspect_evidence(&mut self) {
        self.suspect_failed += 1;
        if self.optimistic {
            if self.suspect_failed >= self.probes() {
                self.be_cautious();
            }
        } else if let BreakerState::HalfOpen { admitted, .. } = &mut self.state {
            *admitted = admitted.saturating_sub(1);
        }
    }

    /// A systemic answer (401, 403, TLS, …) that nothing refuted
    /// (`core::systemic::judge`). Closed: the hypothesis "the API refuses every
    /// call" is *suspected* — half-open at once, with the reason, instead of
    /// every partition pausing for `open_for` on one event's word. The period
    /// is optimistic first: every fresh call goes and tests it, until
    /// `half_open_probes` of them were refused too or it is `open_for` old;
    /// then the next `half_open_probes` calls do (other events', if any wait:
    /// see [`GateQueue`]). One delivered call refutes it (closed, `refuted`),
    /// and it is confirmed (open, with the answer's reason) only once
    /// `half_open_probes` fresh calls were refused and it is `open_for` old —
    /// so one more refused event among the calls does not pause everyone.
    /// Half-open after an open interval: a probe's systemic answer reopens it
    /// (`probe_failed`). A `straggler` (a call sent before the period) is
    /// ignored. Open: extended, as [`Breaker::trip`].
    pub fn systemic(
        &mut self,
        now: Instant,
        reason: &'static str,
        straggler: bool,
    ) -> Option<Transition> {
        match self.state(now) {
            BreakerStateKind::Closed => {
                self.state = BreakerState::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                };
                self.new_period(now);
                self.suspected = true;
                self.optimistic = true;
                self.streak = 0;
                Some(Transition {
                    from: BreakerStateKind::Closed,
                    to: BreakerStateKind::HalfOpen,
                    reason: TransitionReason::Forced(reason),
                })
            }
            BreakerStateKind::Open => self.trip(now, reason),
            BreakerStateKind::HalfOpen if straggler => None,
            BreakerStateKind::HalfOpen if self.suspected => {
                let (admitted, succeeded) = match self.state {
                    BreakerState::HalfOpen {
                        admitted,
                        succeeded,
                    } => (admitted, succeeded),
                    _ => (0, 0),
                };
                if succeeded + self.repeats >= admitted {
                    return None; // not a probe's answer
                }
                self.suspect_evidence();
                self.confirmed(now).then(|| {
                    self.open(
                        now,
                        BreakerStateKind::HalfOpen,
                        TransitionReason::Forced(reason),
                    )
                })
            }
            BreakerStateKind::HalfOpen => Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::ProbeFailed,
            )),
        }
    }

    /// A suspect's systemic answer (its event was refused systemic before, and
    /// nothing refuted that yet): in a half-open period it repeats what was
    /// known, so it settles the suspect's probe slot without a verdict — one
    /// refused event, or a burst of them from one tenant, cannot hold the
    /// breaker open, and whether the API refuses every call is left to the
    /// other probes ([`Breaker::allow_suspect`] keeps a slot for a fresh event
    /// until the period is `open_for` old). The period is settled once every
    /// slot was used: closed if a probe was delivered, else open (`reason` in
    /// a suspected period, `probe_failed` after an open interval). Closed or
    /// open: as [`Breaker::systemic`].
    pub fn systemic_repeat(
        &mut self,
        now: Instant,
        reason: &'static str,
        straggler: bool,
    ) -> Option<Transition> {
        if self.state(now) != BreakerStateKind::HalfOpen || straggler {
            return self.systemic(now, reason, straggler);
        }
        self.advance(now);
        let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = self.state
        else {
            return None;
        };
        if succeeded + self.repeats >= admitted {
            return None; // not a probe's answer
        }
        self.repeats += 1;
        if self.confirmed(now) || (self.suspected && self.lapsed(now)) {
            // Suspected for `open_for`, nothing delivered since (it would be
            // closed), and refused again, whoever probed: confirmed.
            return Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::Forced(reason),
            ));
        }
        if admitted < self.probes() || succeeded + self.repeats < admitted {
            return None;
        }
        if succeeded > 0 {
            return Some(self.close(TransitionReason::ProbesSucceeded));
        }
        if !self.suspected {
            // After an open interval: nothing was delivered, as before.
            return Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::ProbeFailed,
            ));
        }
        // Only suspects probed a young suspected period, and they said what
        // was known: no verdict — the breaker stays half-open (no partition
        // pauses, no marker is written on the suspects' word) and a new
        // period begins.
        self.state = BreakerState::HalfOpen {
            admitted: 0,
            succeeded: 0,
        };
        let (failed, suspected) = (self.suspect_failed, self.suspected);
        self.new_period(now);
        if suspected {
            self.suspect_failed = failed;
        }
        None
    }

    /// A suspected period is confirmed once `half_open_probes` calls of
    /// events not refused before were refused too, and it is `open_for` old:
    /// a burst of one tenant's refused events, however many, cannot confirm
    /// it while the calls of other events keep being delivered.
    pub(super) fn confirmed(&self, now: Instant) -> bool {
        self.suspected
            && self.suspect_failed >= self.probes()
            && self
                .half_open_since
                .is_none_or(|since| now >= since + self.cfg.open_for)
    }

    /// Asks for a probe slot for a *suspect* (an event refused systemic
    /// before). Closed: yes; open: no. Half-open: while slots are free, and
    /// suspects hold fewer than `half_open_probes - 1` of them — at least one
    /// is kept for an event that was not refused, so the period tests the API
    /// rather than the suspects — unless the period is `open_for` old (no such
    /// event came: the suspects alone may end it).
    pub fn allow_suspect(&mut self, now: Instant) -> bool {
        self.advance(now);
        if let BreakerState::HalfOpen { .. } = self.state {
            let lapsed = self
                .half_open_since
                .is_none_or(|since| now >= since + self.cfg.open_for);
            if self.suspects_admitted + 1 >= self.probes() && !lapsed {
                return false;
            }
            let ok = self.allow(now);
            if ok {
                self.suspects_admitted += 1;
            }
            return ok;
        }
        self.allow(now)
    }
}
