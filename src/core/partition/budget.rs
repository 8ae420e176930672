//! [`Share`]: this machine's share of the process-wide in-flight byte budget
//! (`core::byte_budget`), and whether it waits for room.

use crate::core::byte_budget::ByteBudget;
use std::sync::Arc;

/// What a take from the budget found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// The bytes are taken: [`Share::hold`] them or [`Share::give_back`].
    Taken,
    /// The budget is used up. `ask`: no waker is pending yet, so ask for one
    /// (`Effect::AwaitBudget`); asked once until [`Share::woken`].
    Full { ask: bool },
}

/// The bytes this machine took from the shared budget for the events it holds.
/// Given back as they finish, and when it is dropped: a stopped or crashed
/// actor returns its share.
pub(super) struct Share {
    budget: Arc<ByteBudget>,
    /// Bytes of the events held (begun, not finished).
    held: u64,
    /// A waker is pending (`Effect::AwaitBudget` was asked).
    awaiting: bool,
}

impl Share {
    pub(super) fn new(budget: Arc<ByteBudget>) -> Self {
        Share {
            budget,
            held: 0,
            awaiting: false,
        }
    }

    /// Takes `bytes` if the budget is not used up.
    pub(super) fn try_take(&mut self, bytes: u64) -> Take {
        if self.budget.try_take(bytes) {
            return Take::Taken;
        }
        let ask = !std::mem::replace(&mut self.awaiting, true);
        Take::Full { ask }
    }

    /// Bytes taken for an event now held.
    pub(super) fn hold(&mut self, bytes: u64) {
        self.held += bytes;
    }

    /// Bytes taken for a record not held after all (completed without
    /// dispatch, or refused).
    pub(super) fn give_back(&self, bytes: u64) {
        self.budget.give_back(bytes);
    }

    /// A held event finished: its bytes go back.
    pub(super) fn release(&mut self, bytes: u64) {
        self.held -= bytes;
        self.budget.give_back(bytes);
    }

    /// The waker came: a next full budget asks again.
    pub(super) fn woken(&mut self) {
        self.awaiting = false;
    }

    /// Bytes of the events held.
    #[cfg(test)]
    pub(super) fn held(&self) -> u64 {
        self.held
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.held));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_budget_asks_for_a_waker_once_until_woken() {
        let budget = Arc::new(ByteBudget::new(100));
        let mut share = Share::new(budget.clone());
        assert_eq!(share.try_take(100), Take::Taken);
        share.hold(100);
        assert_eq!(share.try_take(1), Take::Full { ask: true });
        assert_eq!(share.try_take(1), Take::Full { ask: false });
        share.woken();
        assert_eq!(share.try_take(1), Take::Full { ask: true });
        share.release(100);
        assert_eq!((share.held(), budget.used()), (0, 0));
        assert_eq!(share.try_take(1), Take::Taken);
        share.give_back(1);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_dropped_share_gives_back_what_it_holds() {
        let budget = Arc::new(ByteBudget::new(1_000));
        let mut share = Share::new(budget.clone());
        for _ in 0..3 {
            assert_eq!(share.try_take(100), Take::Taken);
            share.hold(100);
        }
        assert_eq!((share.held(), budget.used()), (300, 300));
        drop(share);
        assert_eq!(budget.used(), 0);
    }
}
