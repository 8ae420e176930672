//! [`Backlog`]: records taken from the consumer but not begun, per side, and
//! the pauses they cause (the intake's hysteresis).
//!
//! Main records wait while the partition holds `limit` events, any record
//! while the in-flight byte budget is used up. They are still part of the
//! fetch budget. Backpressure works through that budget rather than the
//! consumer's pause, which throws the partition's prefetched records away (see
//! `runtime`'s module doc, "Per partition"); only a main backlog of `cap` records or `bytes_cap`
//! bytes pauses main p there, and DLQ p is paused while DLQ records wait.

use super::per_side::PerSide;
use super::Src;
use std::collections::VecDeque;

/// The records waiting per side, with their sizes, and the pause decisions.
pub(super) struct Backlog<R> {
    /// Records in offset order per side, each with its size.
    waiting: PerSide<VecDeque<(R, usize)>>,
    /// Bytes of the records waiting per side.
    bytes: PerSide<usize>,
    /// Events held (begun, not finished) per side: main records beyond it
    /// wait; DLQ p is paused at it (resumed at half).
    limit: usize,
    /// A main backlog this long pauses main p (resumed at half).
    cap: usize,
    /// A main backlog of this many bytes does the same.
    bytes_cap: usize,
    /// The side is paused for what it holds or what waits: main p for its
    /// backlog; DLQ p when the partition holds `limit` DLQ records, or DLQ
    /// records wait for the budget (resumed at half, with nothing waiting).
    full: PerSide<bool>,
}

impl<R> Backlog<R> {
    /// Each bound at least 1.
    pub(super) fn new(limit: usize, cap: usize, bytes_cap: usize) -> Self {
        Backlog {
            waiting: PerSide::default(),
            bytes: PerSide::default(),
            limit: limit.max(1),
            cap: cap.max(1),
            bytes_cap: bytes_cap.max(1),
            full: PerSide::default(),
        }
    }

    /// Whether the side may begin a record while it holds `held` events: main
    /// p only below `limit` (DLQ p is bounded by its pause instead).
    pub(super) fn has_room(&self, src: Src, held: usize) -> bool {
        src == Src::Dlq || held < self.limit
    }

    /// Records of the side are waiting.
    pub(super) fn is_waiting(&self, src: Src) -> bool {
        !self.waiting[src].is_empty()
    }

    /// Records waiting on one side.
    #[cfg(test)]
    pub(super) fn len(&self, src: Src) -> usize {
        self.waiting[src].len()
    }

    /// Records waiting on both sides.
    #[cfg(test)]
    pub(super) fn total(&self) -> usize {
        self.waiting.iter().map(VecDeque::len).sum()
    }

    /// Bytes waiting on both sides.
    #[cfg(test)]
    pub(super) fn total_bytes(&self) -> usize {
        self.bytes.iter().sum()
    }

    /// A record waits behind those of its side.
    pub(super) fn push(&mut self, src: Src, r: R, size: usize) {
        self.bytes[src] += size;
        self.waiting[src].push_back((r, size));
    }

    /// The side's first record, with its size, taken out.
    pub(super) fn pop(&mut self, src: Src) -> Option<(R, usize)> {
        let (r, size) = self.waiting[src].pop_front()?;
        self.bytes[src] -= size;
        Some((r, size))
    }

    /// A popped record that still has no room goes back to the head.
    pub(super) fn unpop(&mut self, src: Src, r: R, size: usize) {
        self.bytes[src] += size;
        self.waiting[src].push_front((r, size));
    }

    /// Empties both sides (a drain hands them back): the records and bytes
    /// that were waiting.
    pub(super) fn hand_back(&mut self) -> (usize, usize) {
        let records = self.waiting.iter_mut().map(|w| std::mem::take(w).len());
        let records = records.sum();
        let bytes = self.bytes.iter_mut().map(std::mem::take).sum();
        (records, bytes)
    }

    /// Updates both pauses, with hysteresis (see the fields), for `dlq_held`
    /// DLQ events held. Returns which sides are held back.
    pub(super) fn pauses(&mut self, dlq_held: usize) -> PerSide<bool> {
        // A backlog hogging the fetch budget (in records or in bytes) pauses
        // main p in the consumer, with hysteresis: resume at half.
        let (len, bytes) = (self.waiting[Src::Main].len(), self.bytes[Src::Main]);
        if len >= self.cap || bytes >= self.bytes_cap {
            self.full[Src::Main] = true;
        } else if len <= self.cap / 2 && bytes <= self.bytes_cap / 2 {
            self.full[Src::Main] = false;
        }
        // DLQ records are begun as they arrive (the drain needs their
        // `not_before`) but go out paced: a partition holding `limit` of them
        // stops fetching DLQ p until it is down to half (what was already
        // polled still arrives, bounded by the fetch budget). DLQ records
        // waiting for the in-flight byte budget stop it too, until none waits.
        if dlq_held >= self.limit || self.is_waiting(Src::Dlq) {
            self.full[Src::Dlq] = true;
        } else if dlq_held <= self.limit / 2 {
            self.full[Src::Dlq] = false;
        }
        self.full.clone()
    }

    /// An empty side gives back the room its queue grew to beyond `keep`.
    pub(super) fn trim(&mut self, keep: usize) {
        for w in self.waiting.iter_mut() {
            if w.is_empty() && w.capacity() > keep {
                *w = VecDeque::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether main p and DLQ p are held back.
    fn paused(main: bool, dlq: bool) -> PerSide<bool> {
        PerSide::from([main, dlq])
    }

    #[test]
    fn records_wait_in_order_per_side_and_count_their_bytes() {
        let mut b = Backlog::new(10, 100, 1_000);
        b.push(Src::Main, 1, 10);
        b.push(Src::Dlq, 7, 5);
        b.push(Src::Main, 2, 20);
        assert_eq!((b.total(), b.total_bytes()), (3, 35));
        assert_eq!((b.len(Src::Main), b.len(Src::Dlq)), (2, 1));
        let (r, size) = b.pop(Src::Main).expect("waiting");
        assert_eq!((r, size, b.total_bytes()), (1, 10, 25));
        b.unpop(Src::Main, r, size);
        assert_eq!(b.pop(Src::Main), Some((1, 10)));
        assert_eq!(b.pop(Src::Main), Some((2, 20)));
        assert_eq!(b.pop(Src::Main), None);
        assert!(b.is_waiting(Src::Dlq));
        assert_eq!(b.hand_back(), (1, 5));
        assert_eq!((b.total(), b.total_bytes()), (0, 0));
    }

    #[test]
    fn main_has_room_below_the_limit_and_dlq_always() {
        let b: Backlog<u8> = Backlog::new(2, 100, 1_000);
        assert!(b.has_room(Src::Main, 1));
        assert!(!b.has_room(Src::Main, 2));
        assert!(b.has_room(Src::Dlq, 50));
    }

    #[test]
    fn a_main_backlog_pauses_at_its_cap_and_resumes_at_half() {
        let mut b = Backlog::new(10, 4, usize::MAX);
        for r in 0..3 {
            b.push(Src::Main, r, 1);
        }
        assert_eq!(b.pauses(0), paused(false, false));
        b.push(Src::Main, 3, 1);
        assert_eq!(b.pauses(0), paused(true, false), "four records: the cap");
        b.pop(Src::Main);
        assert_eq!(b.pauses(0), paused(true, false), "three: above half");
        b.pop(Src::Main);
        assert_eq!(b.pauses(0), paused(false, false), "two: half");
    }

    #[test]
    fn a_main_backlog_of_bytes_pauses_too() {
        let mut b = Backlog::new(10, 100, 100);
        b.push(Src::Main, 0, 100);
        assert_eq!(b.pauses(0), paused(true, false));
        b.pop(Src::Main);
        b.push(Src::Main, 1, 50);
        assert_eq!(b.pauses(0), paused(false, false));
    }

    #[test]
    fn dlq_pauses_at_the_limit_or_while_records_wait_and_resumes_at_half() {
        let mut b = Backlog::new(4, 100, usize::MAX);
        assert_eq!(b.pauses(4), paused(false, true));
        assert_eq!(b.pauses(3), paused(false, true), "above half");
        assert_eq!(b.pauses(2), paused(false, false), "half");
        b.push(Src::Dlq, 0, 1);
        assert_eq!(b.pauses(0), paused(false, true), "a DLQ record waits");
        b.pop(Src::Dlq);
        assert_eq!(b.pauses(0), paused(false, false));
    }
}
