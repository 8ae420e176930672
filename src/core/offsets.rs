//! Per-partition offset tracking: the commit watermark.
//!
//! # Invariant
//!
//! The watermark this module reports is never greater than an offset that was
//! begun and not yet completed. Everything Courier stores or commits for a
//! partition comes from [`OffsetTracker::watermark`], so no offset is ever
//! committed past an unfinished event.
//!
//! # Preconditions
//!
//! - Offsets are begun in strictly increasing order (Kafka hands a partition's
//!   messages out in order; gaps are allowed: compaction and transaction markers
//!   leave holes).
//! - An offset is completed at most once, and only after it was begun, and only by
//!   the generation (assignment) that began it.
//!
//! Violations are refused with a typed error instead of being absorbed, because each
//! of them means a bug upstream that could otherwise move the watermark wrongly.
//!
//! # Invariant I1: watermark
//!
//! *Enforced in* `src/core/offsets.rs` (`OffsetTracker`). The watermark is the lowest
//! begun-but-unfinished offset, or highest begun + 1. Out-of-order begins, unknown/duplicate
//! completions and completions from another generation are refused with typed errors.
//!
//! *Tested by:* Unit tests + a model-based proptest (random begin/complete sequences against
//! a reference model: the watermark never passes an unfinished offset and never goes back).
//!
//! The unfinished offsets are an ascending `VecDeque` (begun in order: a push at the back; a
//! completion: a binary search and a removal).

use std::collections::VecDeque;
use std::fmt;

/// The offset of the *next* message to consume: last done + 1.
///
/// This is what Kafka stores and commits. rdkafka's `store_offset_from_message`
/// adds the +1 itself, the partition-list APIs (`store_offsets`, `commit`) do not;
/// Courier only uses the partition-list APIs, always with a `NextOffset`, and the
/// conversion from a finished offset happens here and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct NextOffset(i64);

impl NextOffset {
    /// The position just after the finished offset `done`.
    #[cfg(test)]
    pub(crate) fn after(done: i64) -> Self {
        NextOffset(done + 1)
    }
    /// The position *at* `offset` (that offset is the next one to read).
    pub(crate) fn at(offset: i64) -> Self {
        NextOffset(offset)
    }
    pub(crate) fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for NextOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TrackerError {
    #[error("offset {offset} begun out of order (expected at least {expected})")]
    OutOfOrder { offset: i64, expected: i64 },
    #[error("completion for offset {0} that is not in flight (never begun, or completed twice)")]
    NotInFlight(i64),
    #[error("completion from generation {got} reached generation {current}")]
    StaleGeneration { got: u64, current: u64 },
}

/// Tracks begun-but-unfinished offsets of one partition for one generation.
///
/// The unfinished offsets are kept ascending in a `VecDeque` (offsets are begun
/// in increasing order, so a begin is a push at the back; a completion is a
/// binary search and a removal that shifts the shorter side — completions come
/// roughly oldest first, so that is mostly a few entries). The metadata encoder
/// walks them at every store (`core::completed`): a contiguous walk instead of a
/// `BTreeSet`'s, whose insert, remove and iteration showed as ~1.6 % of the CPU
/// per event at L = 0, C = 512 (docs/BENCHMARKS.md, run 12).
#[derive(Debug, Clone)]
pub(crate) struct OffsetTracker {
    generation: u64,
    in_flight: VecDeque<i64>,
    /// Highest begun offset + 1, or the known start position.
    next_expected: Option<i64>,
}

impl OffsetTracker {
    /// A tracker that learns its start from the first begun offset.
    pub(crate) fn new(generation: u64) -> Self {
        OffsetTracker {
            generation,
            in_flight: VecDeque::new(),
            next_expected: None,
        }
    }

    /// A tracker whose position is known (e.g. after a seek to a stored offset).
    pub(crate) fn starting_at(generation: u64, start: NextOffset) -> Self {
        OffsetTracker {
            generation,
            in_flight: VecDeque::new(),
            next_expected: Some(start.get()),
        }
    }

    /// Records that work for `offset` has started.
    pub(crate) fn begin(&mut self, offset: i64) -> Result<(), TrackerError> {
        if let Some(expected) = self.next_expected {
            if offset < expected {
                return Err(TrackerError::OutOfOrder { offset, expected });
            }
        }
        // Ascending: every offset here is below `next_expected`, hence below
        // `offset` (a tracker without a known start begins with nothing here).
        debug_assert!(self.in_flight.back().is_none_or(|&b| b < offset));
        self.in_flight.push_back(offset);
        self.next_expected = Some(offset + 1);
        Ok(())
    }

    /// Records that `offset` is done (its outcome is durable).
    pub(crate) fn complete(&mut self, generation: u64, offset: i64) -> Result<(), TrackerError> {
        if generation != self.generation {
            return Err(TrackerError::StaleGeneration {
                got: generation,
                current: self.generation,
            });
        }
        match self.in_flight.binary_search(&offset) {
            Ok(i) => {
                self.in_flight.remove(i);
                Ok(())
            }
            Err(_) => Err(TrackerError::NotInFlight(offset)),
        }
    }

    /// The position that may be stored/committed: the lowest unfinished offset, or
    /// just past the highest begun offset when nothing is unfinished. `None` before
    /// anything was seen.
    pub(crate) fn watermark(&self) -> Option<NextOffset> {
        match self.in_flight.front() {
            Some(&lowest) => Some(NextOffset::at(lowest)),
            None => self.next_expected.map(NextOffset::at),
        }
    }

    /// Nothing is in flight and nothing at or above `next` was begun: the
    /// offsets below `next` hold nothing to deliver (e.g. only transaction
    /// markers), so the watermark moves up to `next`. Returns whether it moved.
    pub(crate) fn pass_to(&mut self, next: NextOffset) -> bool {
        let moves = self.in_flight.is_empty() && self.next_expected.is_some_and(|n| n < next.get());
        if moves {
            self.next_expected = Some(next.get());
        }
        moves
    }

    /// Highest begun offset, if any.
    pub(crate) fn highest_begun(&self) -> Option<i64> {
        self.next_expected.map(|n| n - 1)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The begun, unfinished offsets, ascending.
    pub(crate) fn in_flight_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.in_flight.iter().copied()
    }

    /// Gives back the room a burst grew the unfinished offsets to, once none
    /// is left (see `PartitionMachine::trim`).
    pub(crate) fn trim(&mut self, keep: usize) {
        if self.in_flight.is_empty() && self.in_flight.capacity() > keep {
            self.in_flight = VecDeque::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn next_offset_conversions() {
        assert_eq!(NextOffset::after(41).get(), 42);
        assert_eq!(NextOffset::at(42).get(), 42);
    }

    #[test]
    fn empty_tracker_has_no_watermark() {
        let t = OffsetTracker::new(1);
        assert_eq!(t.watermark(), None);
        let t = OffsetTracker::starting_at(1, NextOffset::at(10));
        assert_eq!(t.watermark(), Some(NextOffset::at(10)));
    }

    #[test]
    fn watermark_stops_at_lowest_unfinished() {
        let mut t = OffsetTracker::new(1);
        for o in [5, 6, 7] {
            t.begin(o).unwrap();
        }
        assert_eq!(t.watermark(), Some(NextOffset::at(5)));
        t.complete(1, 6).unwrap();
        assert_eq!(t.watermark(), Some(NextOffset::at(5)));
        t.complete(1, 5).unwrap();
        assert_eq!(t.watermark(), Some(NextOffset::at(7)));
        t.complete(1, 7).unwrap();
        assert_eq!(t.watermark(), Some(NextOffset::after(7)));
    }

    #[test]
    fn gaps_are_allowed() {
        let mut t = OffsetTracker::new(1);
        t.begin(3).unwrap();
        t.begin(9).unwrap();
        t.complete(1, 3).unwrap();
        assert_eq!(t.watermark(), Some(NextOffset::at(9)));
        t.complete(1, 9).unwrap();
        assert_eq!(t.watermark(), Some(NextOffset::at(10)));
    }

    #[test]
    fn impossible_sequences_are_refused() {
        let mut t = OffsetTracker::new(2);
        t.begin(10).unwrap();
        assert_eq!(
            t.begin(10),
            Err(TrackerError::OutOfOrder {
                offset: 10,
                expected: 11
            })
        );
        assert_eq!(t.complete(2, 11), Err(TrackerError::NotInFlight(11)));
        assert_eq!(
            t.complete(1, 10),
            Err(TrackerError::StaleGeneration { got: 1, current: 2 })
        );
        t.complete(2, 10).unwrap();
        assert_eq!(t.complete(2, 10), Err(TrackerError::NotInFlight(10)));
        let mut s = OffsetTracker::starting_at(1, NextOffset::at(50));
        assert!(s.begin(49).is_err());
    }

    #[test]
    fn an_idle_tracker_passes_offsets_with_nothing_to_deliver() {
        let mut t = OffsetTracker::new(1);
        assert!(
            !t.pass_to(NextOffset::at(5)),
            "nothing seen: no position to move"
        );
        t.begin(3).unwrap();
        assert!(!t.pass_to(NextOffset::at(6)), "3 is in flight");
        t.complete(1, 3).unwrap();
        assert!(!t.pass_to(NextOffset::at(4)), "not past the position");
        assert!(t.pass_to(NextOffset::at(6)));
        assert_eq!(t.watermark(), Some(NextOffset::at(6)));
        assert!(t.begin(5).is_err());
        t.begin(6).unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Begin(u8),
        Complete(usize),
        CompleteBogus(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u8..4).prop_map(Op::Begin),
            any::<usize>().prop_map(Op::Complete),
            (0i64..500).prop_map(Op::CompleteBogus),
        ]
    }

    proptest! {
        /// Model-based: random begin/complete sequences against a plain reference
        /// model. The watermark never passes an unfinished offset, never goes back,
        /// and impossible completions are refused without changing anything.
        #[test]
        fn watermark_never_passes_unfinished(ops in proptest::collection::vec(op(), 1..300)) {
            let mut t = OffsetTracker::new(7);
            let mut model_in_flight: Vec<i64> = Vec::new();
            let mut next = 0i64;
            let mut last_wm: Option<NextOffset> = None;
            for op in ops {
                match op {
                    Op::Begin(gap) => {
                        let off = next + gap as i64 - 1;
                        t.begin(off).unwrap();
                        model_in_flight.push(off);
                        next = off + 1;
                    }
                    Op::Complete(i) => {
                        if model_in_flight.is_empty() { continue; }
                        let off = model_in_flight.remove(i % model_in_flight.len());
                        t.complete(7, off).unwrap();
                    }
                    Op::CompleteBogus(off) => {
                        if model_in_flight.contains(&off) { continue; }
                        prop_assert_eq!(t.complete(7, off), Err(TrackerError::NotInFlight(off)));
                    }
                }
                let wm = t.watermark();
                if let Some(wm) = wm {
                    for &f in &model_in_flight {
                        prop_assert!(wm.get() <= f, "watermark {} passed unfinished {}", wm, f);
                    }
                    if model_in_flight.is_empty() {
                        prop_assert_eq!(wm.get(), next);
                    }
                }
                prop_assert!(wm >= last_wm, "watermark went back");
                last_wm = wm;
                prop_assert_eq!(t.in_flight(), model_in_flight.len());
            }
        }
    }
}
