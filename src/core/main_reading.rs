//! Whether main p is read: two wishes combined — the partition machine's
//! (`Effect::SetReading`: its backlog, budget, FSM and handover) and the
//! schema gate's (`actors::partition::schemas`: a record whose schema is
//! not at hand waits, and every record after it, while the schema is
//! fetched). Main p is read only when both want it. Pure: each input gives
//! the pause or resume to apply now, if any; the actor applies it.

/// The two wishes about main p's reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MainReading {
    /// What the machine last asked (it starts reading).
    machine: bool,
    /// A record waits for its schema.
    schema_wait: bool,
}

impl Default for MainReading {
    fn default() -> MainReading {
        MainReading {
            machine: true,
            schema_wait: false,
        }
    }
}

impl MainReading {
    /// The machine asks to read main p (`on`) or not: `Some(on)` to apply
    /// now; `None` while a schema wait holds the partition paused (it is
    /// resumed when the wait ends). A pause is always applied.
    pub(crate) fn machine(&mut self, on: bool) -> Option<bool> {
        self.machine = on;
        if on && self.schema_wait {
            return None;
        }
        Some(on)
    }

    /// A schema wait begins (`waiting`) or ends: `Some(false)` to pause when
    /// one begins; `Some(true)` to resume when it ends and the machine wants
    /// to read; `None` when nothing changes.
    pub(crate) fn schema_wait(&mut self, waiting: bool) -> Option<bool> {
        let was = std::mem::replace(&mut self.schema_wait, waiting);
        match (was, waiting) {
            (false, true) => Some(false),
            (true, false) if self.machine => Some(true),
            _ => None,
        }
    }

    /// Whether main p is read now, as the pauses and resumes applied left it.
    #[cfg(test)]
    fn reading(&self) -> bool {
        self.machine && !self.schema_wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_wait_pauses_and_its_end_resumes() {
        let mut r = MainReading::default();
        assert_eq!(r.schema_wait(true), Some(false));
        assert_eq!(r.schema_wait(true), None, "another id: still paused");
        assert_eq!(r.schema_wait(false), Some(true));
        assert!(r.reading());
    }

    #[test]
    fn the_machine_resuming_during_a_wait_waits_for_its_end() {
        let mut r = MainReading::default();
        assert_eq!(r.machine(false), Some(false));
        assert_eq!(r.schema_wait(true), Some(false));
        assert_eq!(r.machine(true), None, "the wait holds it paused");
        assert!(!r.reading());
        assert_eq!(r.schema_wait(false), Some(true));
        assert!(r.reading());
    }

    #[test]
    fn a_wait_ending_while_the_machine_pauses_leaves_it_paused() {
        let mut r = MainReading::default();
        assert_eq!(r.schema_wait(true), Some(false));
        assert_eq!(r.machine(false), Some(false));
        assert_eq!(r.schema_wait(false), None);
        assert!(!r.reading());
        assert_eq!(r.machine(true), Some(true));
    }

    /// Any sequence of wishes: after each step, the pauses and resumes
    /// applied so far leave main p read exactly when both want it.
    #[test]
    fn what_is_applied_always_matches_both_wishes() {
        for steps in 0u32..(1 << 10) {
            let mut r = MainReading::default();
            let mut applied = true;
            for i in 0..5 {
                let (machine, on) = ((steps >> (2 * i)) & 1 == 1, (steps >> (2 * i + 1)) & 1 == 1);
                let effect = if machine {
                    r.machine(on)
                } else {
                    r.schema_wait(on)
                };
                if let Some(on) = effect {
                    applied = on;
                }
                assert_eq!(applied, r.reading(), "steps {steps:#b} at {i}");
            }
        }
    }
}
