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
    ///
    /// [`GateQueue`]: super::GateQueue
    pub(crate) fn systemic(
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
    pub(crate) fn systemic_repeat(
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
    pub(crate) fn allow_suspect(&mut self, now: Instant) -> bool {
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

#[cfg(test)]
mod tests {
    use crate::core::breaker::tests::{cfg, ms, secs};
    use crate::core::breaker::*;
    use proptest::prelude::*;
    use std::time::Instant;

    #[test]
    fn a_systemic_answer_is_suspected_then_confirmed_or_refuted_by_the_probes() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        // Closed: half-open at once with the reason, no `open_for` pause.
        let t = b.systemic(t0, "http_403", false).expect("suspected");
        assert_eq!(
            (t.from, t.to, t.reason),
            (
                BreakerStateKind::Closed,
                BreakerStateKind::HalfOpen,
                TransitionReason::Forced("http_403")
            )
        );
        assert!(!b.is_open(t0), "a suspicion pauses no partition");
        // A straggler's systemic answer changes nothing.
        assert_eq!(b.systemic(t0, "http_403", true), None);
        // Optimistic: every fresh call goes (the others' calls test it); one
        // refused (another refused event), one delivered: refuted, closed.
        assert!(b.admits_traffic(t0));
        assert!((0..100).all(|_| b.allow(t0)), "no fresh call waits");
        assert_eq!(b.systemic(t0, "http_403", false), None);
        assert_eq!(
            b.record(t0, true).map(|t| t.reason),
            Some(TransitionReason::Refuted)
        );
        assert_eq!(b.state(t0), BreakerStateKind::Closed);
        // Suspected again, and every fresh call is refused: the optimism ends
        // at `half_open_probes` refusals, then the probe slots count (a
        // refused slot goes to the next waiter); confirmed (open with the
        // reason) once the period is `open_for` old.
        b.systemic(t0, "http_401", false).expect("suspected");
        assert!(b.allow(t0) && b.allow(t0) && b.allow(t0));
        assert_eq!(b.systemic(t0, "http_401", false), None, "one refusal");
        assert!(b.allow(t0), "still optimistic");
        assert_eq!(b.systemic(t0, "http_401", false), None, "two: cautious");
        assert!(b.allow(t0) && b.allow(t0));
        assert!(!b.allow(t0), "two probes");
        assert_eq!(b.systemic(t0, "http_401", false), None);
        assert!(b.allow(t0), "the refused probe's slot is free again");
        assert_eq!(
            b.systemic(t0, "http_401", false),
            None,
            "refused, but the period is young: others may still refute it"
        );
        let t0 = t0 + secs(5);
        assert!(b.allow(t0));
        let t = b.systemic(t0, "http_401", false).expect("confirmed");
        assert_eq!(
            (t.from, t.to, t.reason),
            (
                BreakerStateKind::HalfOpen,
                BreakerStateKind::Open,
                TransitionReason::Forced("http_401")
            )
        );
        assert!(b.is_open(t0 + ms(4_999)));
        // Open: a systemic answer extends it.
        assert_eq!(b.systemic(t0 + secs(3), "http_401", false), None);
        assert!(b.is_open(t0 + ms(7_999)));
        // The next half-open period is not a suspicion: a refused probe is
        // `probe_failed`, as for any failed probe.
        let later = t0 + secs(9);
        assert!(b.allow(later));
        let t = b.systemic(later, "http_401", false).expect("reopened");
        assert_eq!(t.reason, TransitionReason::ProbeFailed);
    }

    #[test]
    fn an_optimistic_suspicion_lapses_into_probes() {
        let t0 = Instant::now();
        let mut b = Breaker::new(cfg());
        b.systemic(t0, "http_403", false).expect("suspected");
        assert!((0..10).all(|_| b.allow(t0 + ms(4_999))));
        // Nothing refuted it for `open_for`: the probes decide, as after any
        // open interval, but a delivered one still refutes it.
        let later = t0 + secs(5);
        assert!(b.allow(later) && b.allow(later));
        assert!(!b.allow(later), "two probes");
        assert!(!b.admits_traffic(later));
        assert_eq!(
            b.record(later, true).map(|t| t.reason),
            Some(TransitionReason::Refuted)
        );
    }

    #[test]
    fn suspects_keep_a_slot_for_a_fresh_event_and_their_refusals_are_neutral() {
        let t0 = Instant::now();
        let mut c = cfg();
        c.half_open_probes = 3;
        let mut b = Breaker::new(c);
        b.systemic(t0, "http_403", false).expect("suspected");
        // Suspects take two of the three slots; the third is kept.
        assert!(b.allow_suspect(t0) && b.allow_suspect(t0));
        assert!(!b.allow_suspect(t0), "one slot is kept for a fresh event");
        // Their refusals repeat what was known: no verdict.
        assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
        assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
        assert_eq!(b.state(t0), BreakerStateKind::HalfOpen);
        // A fresh event probes and is delivered: refuted.
        assert!(b.allow(t0));
        assert_eq!(
            b.record(t0, true).map(|t| t.reason),
            Some(TransitionReason::Refuted)
        );
        // Suspected again with only suspects waiting: once the period is
        // `open_for` old they take the last slot too, and the period ends
        // (confirmed: nothing was delivered).
        b.systemic(t0, "http_403", false).expect("suspected");
        assert!(b.allow_suspect(t0) && b.allow_suspect(t0));
        assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
        assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
        let later = t0 + secs(5);
        assert!(b.allow_suspect(later), "the kept slot lapses");
        let t = b
            .systemic_repeat(later, "http_403", false)
            .expect("confirmed");
        assert_eq!(
            (t.to, t.reason),
            (BreakerStateKind::Open, TransitionReason::Forced("http_403"))
        );
    }

    /// A model of one instance's gate: `tenant` events the API refuses
    /// (each on its own key, all at the gate at once, as a burst), and a
    /// stream of other events, `others_ok`: delivered or refused too (an API
    /// that refuses everything). Each step (10 ms) some other events arrive;
    /// every waiter asks for admission in a random order; the admitted calls
    /// are numbered and answered in a random order, through
    /// `core::systemic` as the shell does (`judge`, `EventHypothesis`).
    /// Returns (tenant events demoted, steps until the last was, others
    /// delivered, whether the breaker was ever closed after the first
    /// refusal, final state).
    fn simulate(
        tenant: usize,
        others_ok: bool,
        order: &[u8],
        steps: usize,
        budget: u32,
    ) -> (usize, usize, usize, bool, BreakerStateKind) {
        use crate::core::systemic::{judge, EventHypothesis, Judgement, SystemicStep};
        let mut c = cfg();
        c.half_open_probes = 3;
        c.open_for = ms(1_500);
        let mut b = Breaker::new(c);
        let mut q = GateQueue::default();
        // (ticket, is_tenant, hypothesis)
        let mut waiting: Vec<(u64, bool, EventHypothesis)> = (0..tenant)
            .map(|_| (q.join(false), true, EventHypothesis::default()))
            .collect();
        let (mut seq, mut last_success, mut half_open_from) = (0u64, 0u64, None::<u64>);
        let (mut demoted, mut last_demoted, mut delivered) = (0, 0, 0);
        let mut closed_after_refusal = false;
        let mut refused_once = false;
        let t0 = Instant::now();
        let mut r = order.iter().cycle();
        for step in 0..steps {
            let now = t0 + ms(10 * step as u64);
            let before = b.state(now);
            if b.advance(now).is_some() {
                half_open_from = Some(seq);
            }
            for _ in 0..(1 + *r.next().unwrap_or(&0) % 2) {
                waiting.push((q.join(false), false, EventHypothesis::default()));
            }
            // Every waiter asks, in a random rotation.
            let k = usize::from(*r.next().unwrap_or(&0)) % waiting.len().max(1);
            waiting.rotate_left(k);
            let mut calls = Vec::new();
            let mut still = Vec::new();
            for (t, tenant, h) in waiting.drain(..) {
                if q.admit(t, &mut b, now) {
                    seq += 1;
                    calls.push((seq, tenant, h));
                } else {
                    still.push((t, tenant, h));
                }
            }
            waiting = still;
            if calls.len() > 1 {
                let k = usize::from(*r.next().unwrap_or(&0)) % calls.len();
                calls.rotate_left(k);
            }
            for (s, tenant, mut h) in calls {
                let t = if !tenant && others_ok {
                    delivered += 1;
                    last_success = last_success.max(s);
                    b.record(now, true)
                } else {
                    refused_once = true;
                    let suspect = h.suspect();
                    match h.answered(s, last_success, budget) {
                        SystemicStep::Wait => {
                            let from = (b.state(now) == BreakerStateKind::HalfOpen)
                                .then_some(half_open_from)
                                .flatten();
                            let t = match judge(s, last_success, from) {
                                Judgement::Refuted => b.record(now, true),
                                Judgement::Straggler => None,
                                Judgement::Evidence if suspect => {
                                    b.systemic_repeat(now, "http_403", false)
                                }
                                Judgement::Evidence => b.systemic(now, "http_403", false),
                            };
                            let ticket = q.join(true);
                            waiting.push((ticket, tenant, h));
                            t
                        }
                        SystemicStep::Retry { .. } => {
                            let ticket = q.join(true);
                            waiting.push((ticket, tenant, h));
                            b.record(now, true)
                        }
                        SystemicStep::Demote { .. } => {
                            demoted += 1;
                            last_demoted = step;
                            b.record(now, true)
                        }
                    }
                };
                if let Some(t) = t {
                    if t.to == BreakerStateKind::HalfOpen {
                        half_open_from = Some(seq);
                    }
                }
            }
            if refused_once
                && before != BreakerStateKind::Closed
                && b.state(now) == BreakerStateKind::Closed
            {
                closed_after_refusal = true;
            }
        }
        let end = t0 + ms(10 * steps as u64);
        (
            demoted,
            last_demoted,
            delivered,
            closed_after_refusal,
            b.state(end),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// One tenant's refused burst among other events that are delivered:
        /// whatever the order of arrivals, admissions and answers, every one
        /// of its events is demoted (the others' deliveries refute it) within
        /// a bounded time, the others flow, and the breaker ends closed.
        #[test]
        fn a_refused_tenant_is_demoted_while_the_others_flow(
            tenant in 1usize..20,
            order in proptest::collection::vec(any::<u8>(), 1..64),
            budget in 1u32..4,
        ) {
            let (demoted, last, delivered, _, state) = simulate(tenant, true, &order, 1_000, budget);
            prop_assert_eq!(demoted, tenant);
            prop_assert!(last < 600, "demoted by step {last} (6 s)");
            prop_assert!(delivered > 0);
            prop_assert_eq!(state, BreakerStateKind::Closed);
        }

        /// An API that refuses every call: nothing is ever demoted, nothing
        /// delivered, and the breaker never closes (the group pauses; the
        /// events wait).
        #[test]
        fn refusing_everything_demotes_nothing_and_never_closes(
            tenant in 1usize..20,
            order in proptest::collection::vec(any::<u8>(), 1..64),
            budget in 1u32..4,
        ) {
            let (demoted, _, delivered, closed, state) = simulate(tenant, false, &order, 1_000, budget);
            prop_assert_eq!(demoted, 0);
            prop_assert_eq!(delivered, 0);
            prop_assert!(!closed);
            prop_assert_ne!(state, BreakerStateKind::Closed);
        }
    }
}
