//! Deleted-unread accounting: events a partition lost to retention,
//! `delete-records` or truncation before this group read them.
//!
//! When the group's committed position `C` of a partition is below the log's
//! start offset `L`, the offsets `[C, L)` are gone. Of those, the ones the
//! committed metadata names done (`core::completed`: finished above `C` by the
//! previous owner) were not lost; every other offset in the range is an event
//! nobody delivered, dead-lettered or parked. That is the count: exact for a
//! non-transactional topic; a transactional producer's control markers (and
//! aborted records) deleted in the range take offsets too, and what was
//! deleted cannot be read back to tell them apart (counted, and said in the
//! docs).
//!
//! The same range can be seen twice: at an assignment (the committed position
//! below the log start) and by the reset that follows when the consumer fetches
//! from it, or by another assignment of the same partition in this process.
//! The [`Ledger`] remembers, per topic and partition, up to which offset a loss
//! was reported, so each lost offset is counted once whoever sees it.

use crate::core::completed::Completed;
use std::collections::BTreeMap;

/// A range of offsets deleted before they were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The first offset lost (the committed position, or where an earlier
    /// report ended).
    pub from: i64,
    /// The log's start offset now: the range is `[from, to)`.
    pub to: i64,
    /// Offsets of the range that were not done: the events lost.
    pub count: u64,
}

/// The gap between the committed position `committed` and the log start
/// `log_start`, less the offsets `done` names; `None` when nothing unread was
/// deleted (no committed position, the log starts at or below it, or every
/// offset of the range was done).
pub fn gap(committed: i64, log_start: i64, done: Option<&Completed>) -> Option<Gap> {
    if committed < 0 || log_start <= committed {
        return None;
    }
    let span = (log_start - committed) as u64;
    let done = done.map_or(0, |d| d.count_within(committed, log_start));
    let count = span.saturating_sub(done);
    (count > 0).then_some(Gap {
        from: committed,
        to: log_start,
        count,
    })
}

/// What was reported so far, per topic and partition: the end of the last gap
/// counted. An earlier end is never reported again.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    reported_to: BTreeMap<(String, i32), i64>,
}

impl Ledger {
    /// The part of `[committed, log_start)` not reported yet, less what `done`
    /// names, and notes it as reported. `None` when nothing new was lost.
    pub fn claim(
        &mut self,
        topic: &str,
        partition: i32,
        committed: i64,
        log_start: i64,
        done: Option<&Completed>,
    ) -> Option<Gap> {
        let key = (topic.to_string(), partition);
        let from = match self.reported_to.get(&key) {
            Some(&to) => committed.max(to),
            None => committed,
        };
        let g = gap(from, log_start, done)?;
        self.reported_to.insert(key, g.to);
        Some(g)
    }

    /// Forgets what was reported for `topic`/`partition`: for a new incarnation
    /// of its log (a recreated topic starts again at offset 0).
    pub fn forget(&mut self, topic: &str, partition: i32) {
        self.reported_to.remove(&(topic.to_string(), partition));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The metadata a watermark `committed` with `offsets` (all above it) done
    /// would carry, decoded.
    fn done(committed: i64, offsets: &[i64]) -> Completed {
        let end = offsets.iter().max().map_or(committed + 1, |m| m + 1);
        let unfinished = (committed..end).filter(|o| !offsets.contains(o));
        let md = crate::core::completed::encode("log", committed, end, unfinished, 4_096);
        crate::core::completed::decode("log", committed, &md).unwrap_or_default()
    }

    #[test]
    fn nothing_lost_without_a_committed_position_or_below_it() {
        assert_eq!(gap(-1, 100, None), None, "no commit: nothing to compare");
        assert_eq!(gap(100, 100, None), None);
        assert_eq!(gap(100, 40, None), None, "the log starts below the commit");
    }

    #[test]
    fn the_range_between_commit_and_log_start_is_lost() {
        assert_eq!(
            gap(40, 70, None),
            Some(Gap {
                from: 40,
                to: 70,
                count: 30
            })
        );
    }

    #[test]
    fn offsets_the_metadata_names_done_are_not_lost() {
        let d = done(40, &[41, 42, 50, 90]);
        let g = gap(40, 70, Some(&d)).unwrap();
        assert_eq!(
            g.count, 27,
            "41, 42 and 50 were done; 90 is above the range"
        );
        let all = done(10, &[11, 12]);
        assert_eq!(gap(10, 13, Some(&all)).map(|g| g.count), Some(1));
    }

    #[test]
    fn the_ledger_counts_each_offset_once() {
        let mut l = Ledger::default();
        assert_eq!(l.claim("t", 0, 40, 70, None).map(|g| g.count), Some(30));
        assert_eq!(l.claim("t", 0, 40, 70, None), None, "the same range again");
        let more = l.claim("t", 0, 40, 75, None).unwrap();
        assert_eq!((more.from, more.to, more.count), (70, 75, 5));
        assert_eq!(l.claim("t", 1, 40, 70, None).map(|g| g.count), Some(30));
        assert_eq!(l.claim("u", 0, 40, 70, None).map(|g| g.count), Some(30));
        l.forget("t", 0);
        assert_eq!(l.claim("t", 0, 0, 5, None).map(|g| g.count), Some(5));
    }

    proptest! {
        /// However the same partition's losses are seen (in any order, with any
        /// commits), the counts add up to the offsets below the highest log start
        /// that were neither done nor below the lowest commit.
        #[test]
        fn reports_add_up_to_the_lost_offsets(
            sightings in proptest::collection::vec((0i64..200, 0i64..200), 1..20),
        ) {
            let mut l = Ledger::default();
            let mut total = 0u64;
            let mut lost = std::collections::BTreeSet::new();
            for (c, s) in &sightings {
                if let Some(g) = l.claim("t", 0, *c, *s, None) {
                    prop_assert!(g.from < g.to);
                    prop_assert_eq!(g.count, (g.to - g.from) as u64);
                    for o in g.from..g.to {
                        prop_assert!(lost.insert(o), "offset {} counted twice", o);
                    }
                    total += g.count;
                }
            }
            prop_assert_eq!(total, lost.len() as u64);
            for o in &lost {
                prop_assert!(sightings.iter().any(|(c, s)| c <= o && o < s), "{} was never in a gap", o);
            }
        }

        /// A gap never counts an offset the metadata names done, nor one outside it.
        #[test]
        fn gap_counts_exactly_the_undone_offsets(
            committed in 0i64..50,
            span in 0i64..80,
            offsets in proptest::collection::btree_set(0i64..100, 0..30),
        ) {
            let above: Vec<i64> = offsets.into_iter().map(|o| committed + 1 + o).collect();
            let d = done(committed, &above);
            let start = committed + span;
            let expected = (committed..start).filter(|o| !d.contains(*o)).count() as u64;
            let got = gap(committed, start, Some(&d)).map_or(0, |g| g.count);
            prop_assert_eq!(got, expected);
        }
    }
}
