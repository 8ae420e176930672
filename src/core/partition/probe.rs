//! [`Probe`]: whether to read a side's idle tail from the broker. A
//! transactional producer's commit marker takes the last offset of an idle
//! partition and is never handed to the application, so a position that only
//! follows delivered records would stay one short of the end forever (lag 1);
//! a probe proves nothing to deliver lies there (`Effect::Probe`).
//!
//! # Invariant I19: transaction markers
//!
//!
//! *Enforced in* `src/core/partition/` (transaction markers), `src/kafka/identity.rs`. A side
//! idle below its log's end (nothing held or waiting, everything stored) asks for a probe
//! (`Effect::Probe`): the actor reads `[position, end)` with `read_committed` on a reader of
//! its own; when nothing there is handed over (commit/abort markers, aborted records) and the
//! reader's position reaches the end, the machine moves the side's position there
//! (`OffsetTracker::pass_to`) if it is still idle at the same position (a stale proof moves
//! nothing), and stores it: lag 0 at idle. `courier_positions_passed_markers_total`.
//!
//! *Tested by:* Tracker and partition unit tests (proof, stale proof, proof across a reset);
//! the model-based proptest (trailing markers, probes answered truthfully, late or never:
//! stored to the log's end at the end, never past a record not taken in);
//! `tests/positions.rs::transaction_markers_do_not_leave_lag_at_idle` (a transactional
//! producer, committed and aborted transactions: committed = end offsets, no aborted event
//! delivered; seen failing on 87cb04e: committed one short of each end).

use crate::core::offsets::NextOffset;

/// The side's probe: out or answered since the last lag check, and where it
/// was idle at that check.
#[derive(Debug, Default)]
pub(super) struct Probe {
    /// A probe is out, or was answered since the last lag check.
    probing: bool,
    /// Idle below the end at the last lag check: the position and the end.
    idle_at: Option<(NextOffset, i64)>,
}

impl Probe {
    /// At a lag check: the range `[from, to)` to probe when the side is idle
    /// (`idle`: reading, nothing held or waiting, not draining) with its
    /// watermark `wm` stored and below the log's `end`, and was so at the
    /// last check too (records merely on their way would have moved it: a
    /// probe costs a reader). At most every other lag check (a probe
    /// answered, or lost, is asked again after that).
    pub(super) fn check(
        &mut self,
        end: Option<i64>,
        wm: Option<NextOffset>,
        idle: bool,
        stored: Option<NextOffset>,
    ) -> Option<(NextOffset, NextOffset)> {
        let was_probing = std::mem::replace(&mut self.probing, false);
        let seen = self.idle_at.take();
        let (Some(end), Some(wm)) = (end, wm) else {
            return None;
        };
        if !idle || stored != Some(wm) || end <= wm.get() {
            return None;
        }
        self.idle_at = Some((wm, end));
        if was_probing || seen != Some((wm, end)) {
            return None;
        }
        self.probing = true;
        Some((wm, NextOffset::at(end)))
    }

    /// A new incarnation: nothing seen of it yet.
    pub(super) fn clear(&mut self) {
        *self = Probe::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: i64) -> Option<NextOffset> {
        Some(NextOffset::at(n))
    }

    #[test]
    fn idle_below_the_end_at_two_checks_probes_then_skips_one_check() {
        let mut p = Probe::default();
        assert_eq!(p.check(Some(10), at(9), true, at(9)), None, "first sight");
        let range = Some((NextOffset::at(9), NextOffset::at(10)));
        assert_eq!(p.check(Some(10), at(9), true, at(9)), range);
        assert_eq!(
            p.check(Some(10), at(9), true, at(9)),
            None,
            "the probe is out"
        );
        assert_eq!(p.check(Some(10), at(9), true, at(9)), range, "asked again");
    }

    #[test]
    fn no_probe_unless_idle_stored_and_below_the_end() {
        let mut p = Probe::default();
        for _ in 0..3 {
            assert_eq!(p.check(Some(10), at(9), false, at(9)), None, "busy");
        }
        for _ in 0..3 {
            assert_eq!(p.check(Some(10), at(9), true, at(8)), None, "not stored");
        }
        for _ in 0..3 {
            assert_eq!(p.check(Some(9), at(9), true, at(9)), None, "at the end");
        }
        for _ in 0..3 {
            assert_eq!(p.check(None, at(9), true, at(9)), None, "end unknown");
        }
    }

    #[test]
    fn a_moved_position_starts_over() {
        let mut p = Probe::default();
        p.check(Some(10), at(8), true, at(8));
        assert_eq!(p.check(Some(10), at(9), true, at(9)), None, "moved");
        assert!(p.check(Some(10), at(9), true, at(9)).is_some());
        p.clear();
        assert_eq!(p.check(Some(10), at(9), true, at(9)), None, "cleared");
    }
}
