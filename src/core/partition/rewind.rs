//! [`Rewind`]: DLQ records handed back rather than held, and the fence that
//! drops what was polled before DLQ p was sought back to them.
//!
//! DLQ records are begun as they arrive (the drain needs their `not_before`),
//! and most of those read back during an outage are not due for a while. Held,
//! they would fill the in-flight byte budget, and the DLQ records behind them
//! the fetch budget, until main p is no longer read at all. So DLQ records
//! hold at most half of the in-flight budget, process-wide (each machine may
//! hold one whatever the others hold: its drain's head is then known); a DLQ
//! record refused for that is *handed back*, with every DLQ record behind it:
//! none of them was begun, so none is known to the side's tracker, and they
//! leave the fetch budget at once. The machine asks for DLQ p to be sought
//! back to the first of them ([`Effect::RewindDlq`]) and keeps DLQ p paused
//! until the DLQ half has room again (a quarter of the budget, or this
//! machine holds no DLQ record).
//!
//! **The fence.** Records of DLQ p already polled before the seek still come
//! (in the actor's mailbox, in the poll thread's batch). They lie above every
//! DLQ offset this machine received; the re-read starts at the first record
//! handed back, at or below it. So while the fence stands, a DLQ record
//! above the highest offset received is dropped (taken in, not begun: read
//! again after the seek) and raises it; the first at or below it is the
//! re-read, and the fence falls. A seek that failed, or whose offset the log
//! start passed meanwhile (retention: the re-read would start above every
//! offset received, and be dropped), is asked again at the next lag check,
//! from the log start then.
//!
//! Invariant I18 (offsets begun in order per side) is untouched: nothing
//! handed back was begun, and the re-read continues after the last begun.

use super::Effect;
#[cfg(doc)]
use super::Src;

/// A fence: DLQ p was (or is to be) sought back to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence {
    /// Where DLQ p is sought back to: the first record handed back.
    to: i64,
    /// The highest DLQ offset received: records above it were polled
    /// before the seek.
    highest: i64,
    /// The seek is asked (and did not fail).
    asked: bool,
}

/// DLQ records handed back: the fence, and the pause until there is room.
#[derive(Debug, Default)]
pub(super) struct Rewind {
    fence: Option<Fence>,
    /// DLQ p stays paused until the DLQ half of the budget has room.
    wants_room: bool,
}

impl Rewind {
    /// DLQ records from offset `first` to `last` were handed back, not begun:
    /// seek DLQ p back to `first`. (With a fence standing nothing is begun or
    /// handed back, as every record is dropped or ends the fence; should one
    /// stand, its seek, to an earlier offset, covers these too.)
    pub(super) fn hand_back<I>(&mut self, first: i64, last: i64, fx: &mut Vec<Effect<I>>) {
        self.wants_room = true;
        match &mut self.fence {
            Some(f) => f.highest = f.highest.max(last),
            None => {
                self.fence = Some(Fence {
                    to: first,
                    highest: last,
                    asked: true,
                });
                fx.push(Effect::RewindDlq { to: first });
            }
        }
    }

    /// Whether a DLQ record at `offset` is taken in: `false` while the fence
    /// stands and it lies above every offset received (polled before the
    /// seek: dropped, read again).
    pub(super) fn admits(&mut self, offset: i64) -> bool {
        let Some(f) = &mut self.fence else {
            return true;
        };
        if offset > f.highest {
            f.highest = offset;
            return false;
        }
        self.fence = None;
        true
    }

    /// The answer to [`Effect::RewindDlq`]: a failed seek is asked again at
    /// the next lag check.
    pub(super) fn sought(&mut self, ok: bool) {
        if let Some(f) = &mut self.fence {
            f.asked &= ok;
        }
    }

    /// A lag check saw DLQ p's reading start at `start` (its log start, or
    /// the committed position, which is never past a record handed back).
    /// The seek is asked again if it failed, or from `start` if the log
    /// start passed where it sought (the records there were deleted).
    pub(super) fn on_positions<I>(&mut self, start: i64, fx: &mut Vec<Effect<I>>) {
        let Some(f) = &mut self.fence else {
            return;
        };
        if start > f.to {
            f.to = start;
            f.asked = false;
        }
        if !f.asked {
            f.asked = true;
            fx.push(Effect::RewindDlq { to: f.to });
        }
    }

    /// Whether DLQ p stays paused for records handed back: until the DLQ
    /// half has room (`room`).
    pub(super) fn holds_dlq_back(&mut self, room: bool) -> bool {
        if room {
            self.wants_room = false;
        }
        self.wants_room
    }

    /// A fence stands (the re-read has not come).
    #[cfg(test)]
    pub(super) fn fenced(&self) -> bool {
        self.fence.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fx = Vec<Effect<()>>;

    #[test]
    fn records_polled_before_the_seek_are_dropped_until_the_re_read() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        assert!(r.admits(7), "no fence: every record");
        r.hand_back(10, 14, &mut fx);
        assert_eq!(fx, vec![Effect::RewindDlq { to: 10 }]);
        assert!(!r.admits(15) && !r.admits(16), "polled before the seek");
        assert!(r.fenced());
        assert!(r.admits(10), "the re-read");
        assert!(!r.fenced());
        assert!(r.admits(11) && r.admits(17), "then everything, in order");
    }

    #[test]
    fn a_re_read_that_starts_past_a_deleted_head_is_taken() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        r.hand_back(10, 14, &mut fx);
        assert!(
            r.admits(12),
            "10 and 11 deleted: 12 is still at or below 16"
        );
    }

    #[test]
    fn a_failed_seek_is_asked_again_at_the_next_lag_check() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        r.hand_back(10, 14, &mut fx);
        r.on_positions(0, &mut fx);
        assert_eq!(fx.len(), 1, "asked, not failed: not asked again");
        r.sought(false);
        r.on_positions(0, &mut fx);
        assert_eq!(fx[1], Effect::RewindDlq { to: 10 });
        r.on_positions(0, &mut fx);
        assert_eq!(fx.len(), 2, "once per failure");
    }

    #[test]
    fn a_log_start_past_the_seek_seeks_again_from_it() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        r.hand_back(10, 14, &mut fx);
        // Retention deleted up to 30: librdkafka resets to 30, above every
        // offset received; those records are dropped as polled before the seek.
        assert!(!r.admits(30) && !r.admits(31));
        r.on_positions(30, &mut fx);
        assert_eq!(fx[1], Effect::RewindDlq { to: 30 });
        assert!(r.admits(30), "the second seek's re-read is at or below 31");
    }

    #[test]
    fn dlq_p_stays_paused_until_there_is_room() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        assert!(!r.holds_dlq_back(false));
        r.hand_back(10, 14, &mut fx);
        assert!(r.holds_dlq_back(false));
        assert!(!r.holds_dlq_back(true));
        assert!(!r.holds_dlq_back(false), "until the next hand-back");
    }

    #[test]
    fn nothing_is_asked_without_a_fence() {
        let (mut r, mut fx) = (Rewind::default(), Fx::new());
        r.sought(false);
        r.on_positions(50, &mut fx);
        assert!(fx.is_empty());
    }
}
