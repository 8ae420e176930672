//! [`Share`]: this machine's share of the process-wide in-flight byte budget
//! (`core::byte_budget`), and whether it waits for room; its DLQ records'
//! part of it, bounded by the DLQ half (`rewind`).

use super::Src;
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
    /// A DLQ record, and DLQ records hold their half of the budget while
    /// this machine holds some of them: hand it back (`rewind`).
    DlqFull,
}

/// The bytes this machine took from the shared budget for the events it holds.
/// Given back as they finish, and when it is dropped: a stopped or crashed
/// actor returns its share.
pub(super) struct Share {
    budget: Arc<ByteBudget>,
    /// Bytes of the events held (begun, not finished).
    held: u64,
    /// Bytes of the DLQ records among them.
    dlq: u64,
    /// A waker is pending (`Effect::AwaitBudget` was asked).
    awaiting: bool,
}

impl Share {
    pub(super) fn new(budget: Arc<ByteBudget>) -> Self {
        Share {
            budget,
            held: 0,
            dlq: 0,
            awaiting: false,
        }
    }

    /// Takes `bytes` for a record of `src` if the budget is not used up (and,
    /// for a DLQ record, the DLQ half neither, unless this machine holds no
    /// DLQ record: each may hold one).
    pub(super) fn try_take(&mut self, src: Src, bytes: u64) -> Take {
        if src == Src::Dlq && self.dlq > 0 && self.budget.dlq_full() {
            return Take::DlqFull;
        }
        if self.budget.try_take(bytes) {
            return Take::Taken;
        }
        let ask = !std::mem::replace(&mut self.awaiting, true);
        Take::Full { ask }
    }

    /// Bytes taken for an event of `src` now held.
    pub(super) fn hold(&mut self, src: Src, bytes: u64) {
        self.held += bytes;
        if src == Src::Dlq {
            self.dlq += bytes;
            self.budget.hold_dlq(bytes);
        }
    }

    /// Bytes taken for a record not held after all (completed without
    /// dispatch, or refused).
    pub(super) fn give_back(&self, bytes: u64) {
        self.budget.give_back(bytes);
    }

    /// A held event of `src` finished: its bytes go back.
    pub(super) fn release(&mut self, src: Src, bytes: u64) {
        self.held -= bytes;
        if src == Src::Dlq {
            self.dlq -= bytes;
            self.budget.release_dlq(bytes);
        }
        self.budget.give_back(bytes);
    }

    /// DLQ records handed back may be read again: the DLQ half has room,
    /// or this machine holds none (it may hold one whatever the others do).
    pub(super) fn dlq_has_room(&self) -> bool {
        self.dlq == 0 || self.budget.dlq_has_room()
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
        self.budget.release_dlq(std::mem::take(&mut self.dlq));
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
        assert_eq!(share.try_take(Src::Main, 100), Take::Taken);
        share.hold(Src::Main, 100);
        assert_eq!(share.try_take(Src::Main, 1), Take::Full { ask: true });
        assert_eq!(share.try_take(Src::Dlq, 1), Take::Full { ask: false });
        share.woken();
        assert_eq!(share.try_take(Src::Main, 1), Take::Full { ask: true });
        share.release(Src::Main, 100);
        assert_eq!((share.held(), budget.used()), (0, 0));
        assert_eq!(share.try_take(Src::Main, 1), Take::Taken);
        share.give_back(1);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_dropped_share_gives_back_what_it_holds() {
        let budget = Arc::new(ByteBudget::new(1_000));
        let mut share = Share::new(budget.clone());
        for src in [Src::Main, Src::Dlq, Src::Dlq] {
            assert_eq!(share.try_take(src, 100), Take::Taken);
            share.hold(src, 100);
        }
        assert_eq!((share.held(), budget.used()), (300, 300));
        drop(share);
        assert_eq!(budget.used(), 0);
        assert!(
            !budget.dlq_full() && budget.dlq_has_room(),
            "its DLQ part too"
        );
    }

    #[test]
    fn dlq_records_stop_at_their_half_but_each_share_may_hold_one() {
        let budget = Arc::new(ByteBudget::new(1_000));
        let (mut a, mut b) = (Share::new(budget.clone()), Share::new(budget.clone()));
        assert_eq!(a.try_take(Src::Dlq, 500), Take::Taken);
        a.hold(Src::Dlq, 500);
        assert_eq!(
            a.try_take(Src::Dlq, 1),
            Take::DlqFull,
            "the DLQ half is held"
        );
        assert_eq!(
            a.try_take(Src::Main, 100),
            Take::Taken,
            "main p's half is not"
        );
        a.hold(Src::Main, 100);
        assert!(!a.dlq_has_room());
        assert_eq!(
            b.try_take(Src::Dlq, 100),
            Take::Taken,
            "b holds no DLQ record"
        );
        b.hold(Src::Dlq, 100);
        assert!(!b.dlq_has_room());
        a.release(Src::Dlq, 500);
        assert!(a.dlq_has_room() && b.dlq_has_room(), "100 of 1,000");
        assert_eq!(budget.used(), 200);
    }
}
