//! The queue of calls waiting at a breaker that is not closed: who takes
//! the next half-open probe slot.

use std::time::Instant;

use super::{Breaker, BreakerState};

/// The order in which calls waiting at a breaker that is not closed take its
/// half-open probe slots: first come, first served, and a waiter that comes
/// back (its call was refused: it just probed and failed, or its systemic
/// answer tripped the breaker) joins behind everyone already waiting. So the
/// probes rotate over the waiting events, across partitions and keys, and one
/// event answered systemic cannot be the probe again and again while others
/// wait. *Suspects* (events refused systemic before) go after every fresh
/// waiter and take slots only through [`Breaker::allow_suspect`], so a period
/// tests the API with events that were not refused, when there are any.
/// While the breaker is closed every waiter is admitted at once.
#[derive(Debug, Default, Clone)]
pub(crate) struct GateQueue {
    next: u64,
    /// Ticket → whether its holder is a suspect.
    waiting: std::collections::BTreeMap<u64, bool>,
}

impl GateQueue {
    /// A ticket behind every waiter; `suspect`: the event was refused
    /// systemic before.
    pub(crate) fn join(&mut self, suspect: bool) -> u64 {
        self.next += 1;
        self.waiting.insert(self.next, suspect);
        self.next
    }

    /// The waiter leaves (admitted, or its wait was cancelled).
    pub(crate) fn leave(&mut self, ticket: u64) {
        self.waiting.remove(&ticket);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    fn first_of(&self, suspect: bool) -> Option<u64> {
        self.waiting
            .iter()
            .find(|(_, s)| **s == suspect)
            .map(|(t, _)| *t)
    }

    /// Whether `ticket` may take a probe slot now: it is the longest waiting
    /// fresh event, or, while no fresh event waits, the longest waiting
    /// suspect.
    pub(crate) fn is_head(&self, ticket: u64) -> bool {
        match self.waiting.get(&ticket) {
            Some(false) => self.first_of(false) == Some(ticket),
            Some(true) => self.first_of(false).is_none() && self.first_of(true) == Some(ticket),
            None => false,
        }
    }

    /// Asks to admit the waiter holding `ticket` at `now`: closed, every waiter;
    /// half-open, only the head, while probe slots are free (a suspect: while
    /// [`Breaker::allow_suspect`] says so); it then leaves the queue. `false`:
    /// keep waiting.
    pub(crate) fn admit(&mut self, ticket: u64, breaker: &mut Breaker, now: Instant) -> bool {
        breaker.advance(now);
        let suspect = self.waiting.get(&ticket).copied().unwrap_or(false);
        let ok = match breaker.raw_state() {
            BreakerState::Closed => breaker.allow(now),
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen { .. } if suspect => {
                self.is_head(ticket) && breaker.allow_suspect(now)
            }
            BreakerState::HalfOpen { .. } => self.is_head(ticket) && breaker.allow(now),
        };
        if ok {
            self.leave(ticket);
        }
        ok
    }

    /// Asks to admit a newcomer that would not wait (the fast path): closed,
    /// yes; half-open only while nobody it must queue behind waits (a fresh
    /// event: no fresh waiter; a suspect: nobody).
    pub(crate) fn admit_newcomer(
        &self,
        suspect: bool,
        breaker: &mut Breaker,
        now: Instant,
    ) -> bool {
        breaker.advance(now);
        match breaker.raw_state() {
            BreakerState::Closed => breaker.allow(now),
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen { .. } if suspect => {
                self.is_empty() && breaker.allow_suspect(now)
            }
            BreakerState::HalfOpen { .. } => self.first_of(false).is_none() && breaker.allow(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::breaker::tests::{cfg, secs};
    use crate::core::breaker::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    #[test]
    fn probes_rotate_over_the_waiters() {
        let t0 = Instant::now();
        let mut c = cfg();
        c.half_open_probes = 1;
        let mut b = Breaker::new(c);
        let mut q = GateQueue::default();
        // Event A (partition 0, key a) was refused: the breaker suspects, A waits.
        b.systemic(t0, "http_403", false);
        let a = q.join(false);
        // B (partition 1) and C (partition 0, key c) arrive and wait behind A.
        let bb = q.join(false);
        let cc = q.join(false);
        assert!(!q.admit_newcomer(false, &mut b, t0), "a newcomer queues");
        assert!(!q.admit(bb, &mut b, t0), "not B's turn");
        assert!(q.admit(a, &mut b, t0), "A probes");
        // A is refused again (a probe's systemic answer): open; A comes back
        // behind B and C.
        b.systemic(t0, "http_403", false);
        let a2 = q.join(false);
        let t1 = t0 + secs(5);
        assert!(!q.admit(a2, &mut b, t1), "A just probed and failed");
        assert!(!q.admit(cc, &mut b, t1), "C after B");
        assert!(q.admit(bb, &mut b, t1), "B's turn");
        // B's probe succeeds: closed, everyone is admitted at once.
        assert_eq!(
            b.record(t1, true).map(|t| t.to),
            Some(BreakerStateKind::Closed)
        );
        assert!(q.admit(a2, &mut b, t1));
        assert!(q.admit(cc, &mut b, t1));
        assert!(q.is_empty());
        assert!(q.admit_newcomer(false, &mut b, t1));
    }

    proptest! {
        /// However waiters come, leave and are refused, a waiter that keeps
        /// waiting is admitted before anyone who joined after it, and after at
        /// most as many half-open admissions as there were waiters ahead of it.
        #[test]
        fn no_waiter_is_passed_over(
            ops in proptest::collection::vec(0u8..4, 1..200),
        ) {
            let t0 = Instant::now();
            let mut c = cfg();
            c.half_open_probes = 1;
            c.open_for = Duration::ZERO;
            let mut b = Breaker::new(c);
            b.systemic(t0, "http_403", false);
            let mut q = GateQueue::default();
            let mut waiting: Vec<u64> = Vec::new();
            for op in ops {
                match op {
                    0 | 1 => waiting.push(q.join(false)),
                    2 if !waiting.is_empty() => {
                        // The longest waiting leaves without being admitted.
                        let t = waiting.remove(0);
                        q.leave(t);
                    }
                    _ => {
                        // Every waiter asks, youngest first; exactly the oldest gets it.
                        let mut admitted = None;
                        for &t in waiting.iter().rev() {
                            if q.admit(t, &mut b, t0) {
                                prop_assert!(admitted.is_none());
                                admitted = Some(t);
                            }
                        }
                        if let Some(t) = admitted {
                            prop_assert_eq!(Some(&t), waiting.first());
                            waiting.remove(0);
                            // Its probe is refused: back to the end.
                            b.systemic(t0, "http_403", false);
                            waiting.push(q.join(false));
                        }
                    }
                }
                prop_assert_eq!(q.len(), waiting.len());
            }
        }
    }
}
