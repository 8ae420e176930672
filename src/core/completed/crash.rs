//! Crash recovery of a partition actor from the metadata it stored: the
//! decision, for one side (main or DLQ), of where the next incarnation
//! starts, what it skips and whether the consumer must seek back.
//!
//! A crashed actor's in-flight set is gone. What it stored is its watermark
//! and, in the metadata stored with it, the offsets it had finished above
//! the watermark ([`super::encode`]). The next incarnation starts at the
//! watermark and skips those; records above the watermark that were already
//! handed to the crashed actor must be read again, so the consumer seeks
//! back to the watermark and fences off (drops) records of the old read
//! position until the first one of the new read position arrives.

use super::{decode, Completed};

/// What the consumer knows of one side of a crashed partition actor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Crashed<'a> {
    /// The last position the actor stored and the metadata stored with it.
    pub stored: Option<(i64, &'a str)>,
    /// The topic's id (read at the assignment): metadata is trusted only
    /// for the log it was made for.
    pub log: Option<&'a str>,
    /// The first and last offsets the consumer handed to the actor.
    pub first_forwarded: Option<i64>,
    pub last_forwarded: Option<i64>,
}

/// Read the side again from `from`: seek there, and drop records above
/// `fence` (polled before the seek) until one at or below it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reread {
    pub from: i64,
    pub fence: i64,
}

/// The decision for one side ([`after_crash`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recovery {
    /// The offsets the crashed actor finished above its stored position:
    /// the re-read skips them.
    pub skip: Option<Completed>,
    /// Where the next incarnation starts: the stored position, else the
    /// first offset handed over (nothing was stored), else unknown (learnt
    /// from the first record).
    pub start: Option<i64>,
    /// Records at or past `start` were handed over and died with the actor.
    pub reread: Option<Reread>,
}

/// Decides how one side of a crashed partition actor is recovered. Not the
/// metadata read at the assignment (stale: the crashed incarnation finished
/// and stored more since) but the crashed incarnation's last.
pub(crate) fn after_crash(side: Crashed<'_>) -> Recovery {
    let skip = match (side.stored, side.log) {
        (Some((at, metadata)), Some(log)) => decode(log, at, metadata),
        _ => None,
    };
    let start = side.stored.map(|(at, _)| at).or(side.first_forwarded);
    let reread = match (start, side.last_forwarded) {
        (Some(from), Some(last)) if from <= last => Some(Reread { from, fence: last }),
        _ => None,
    };
    Recovery {
        skip,
        start,
        reread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::completed::encode;

    const LOG: &str = "q6AUPnmAS0yMtYhZ7I9-Ag";

    fn crashed<'a>(stored: Option<(i64, &'a str)>, first: i64, last: i64) -> Crashed<'a> {
        Crashed {
            stored,
            log: Some(LOG),
            first_forwarded: Some(first),
            last_forwarded: Some(last),
        }
    }

    /// Handed 0..=9, stored 3 with 4 and 6 done above it: the next
    /// incarnation starts at 3, skips 4 and 6, and the side is read again
    /// from 3 with records above 9 fenced off.
    #[test]
    fn the_reread_starts_at_the_watermark_and_skips_what_was_done() {
        let meta = encode(LOG, 3, 7, [3, 5], 4096);
        let r = after_crash(crashed(Some((3, &meta)), 0, 9));
        assert_eq!(r.start, Some(3));
        assert_eq!(r.reread, Some(Reread { from: 3, fence: 9 }));
        let skip = r.skip.expect("the metadata names offsets done");
        let done: Vec<i64> = (0..12).filter(|o| skip.contains(*o)).collect();
        assert_eq!(done, vec![4, 6]);
    }

    /// Nothing stored yet: from the first offset handed over, skipping nothing.
    #[test]
    fn nothing_stored_rereads_from_the_first_record() {
        let r = after_crash(crashed(None, 5, 8));
        assert_eq!(r.start, Some(5));
        assert_eq!(r.reread, Some(Reread { from: 5, fence: 8 }));
        assert_eq!(r.skip, None);
    }

    /// Everything handed over was stored past: no seek.
    #[test]
    fn nothing_lost_needs_no_seek() {
        let meta = encode(LOG, 10, 10, [], 4096);
        let r = after_crash(crashed(Some((10, &meta)), 0, 9));
        assert_eq!(r.start, Some(10));
        assert_eq!(r.reread, None);
        assert_eq!(r.skip.map(|c| c.len()), Some(0));
        // Nothing ever handed over.
        assert_eq!(after_crash(Crashed::default()), Recovery::default());
    }

    /// Metadata is trusted only for the log and the watermark it was made
    /// for: with the topic's id unknown, made for another log, or for
    /// another position, nothing is skipped (delivered again, never lost).
    #[test]
    fn metadata_not_tied_to_the_position_skips_nothing() {
        let meta = encode(LOG, 3, 7, [3, 5], 4096);
        let unknown = Crashed {
            log: None,
            ..crashed(Some((3, &meta)), 0, 9)
        };
        assert_eq!(after_crash(unknown).skip, None);
        let other = Crashed {
            log: Some("v4g9i7bSQhKgX0PRVSvhWg"),
            ..crashed(Some((3, &meta)), 0, 9)
        };
        assert_eq!(after_crash(other).skip, None);
        assert_eq!(after_crash(crashed(Some((4, &meta)), 0, 9)).skip, None);
        assert_eq!(after_crash(crashed(Some((3, "garbage")), 0, 9)).skip, None);
    }
}
