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
//!
//! # Invariant I30: deleted unread
//!
//! *Enforced in* `src/actors/consumer/recovery.rs` (`committed_metadata`), `src/core/deleted.rs`,
//! `Pipeline::deleted_unread` (deleted-unread accounting). At every assignment the consumer
//! reads, with the committed positions, each partition's log start (main and DLQ); a
//! committed position `C` below the log start `L` lost `[C, L)` to retention,
//! `delete-records` or truncation. The count is the offsets of the range the commit metadata
//! does not name done (a transactional producer's deleted control markers cannot be told
//! apart: counted). `Pipeline::deleted_unread` is the one place that logs the ERROR "events
//! deleted unread" (topic, partition, from, to, count) and adds to
//! `courier_events_deleted_unread_total{topic,partition}`; its ledger
//! (`core::deleted::Ledger`) counts each lost offset once per process, whoever sees it (an
//! assignment, an offset reset, a reassignment). While running, the log start passing the
//! read position shows only as librdkafka's offset reset after an out-of-range fetch, which
//! librdkafka reports only in its log (WARN, facility `OFFSET`, "offset reset (at offset
//! N…"): `kafka::client_log` reads that line and hands the position to the partition
//! machine (`Input::OffsetReset`), which matches it with the gap the next record leaves
//! (`Note::DeletedUnread`, in either order) and reports `[N, next record)` less what the
//! earlier owner's commit metadata names done there; a gap no reset explains (compaction,
//! transaction markers) is no loss. The parking lot has no consumer: `courier
//! dlq inspect`/`replay` report its records deleted before the replay log lists them (and the
//! DLQ's below the group's committed position) with the same line. Alert
//! CourierEventsDeletedUnread; the DLQ's `retention.ms` below the DLQ policy's horizon
//! (`core::dlq_policy::horizon_ms`) is warned about at start.
//!
//! *Tested by:* `core::deleted` unit tests and proptests (each offset counted once; exactly
//! the undone offsets);
//! `tests/dlq.rs::events_deleted_unread_are_counted_exactly_at_assignment` (real broker: 40
//! committed, 60 more, `delete-records` to 70 while stopped: ERROR and counter 30 on the main
//! topic, 3 on the purged DLQ, the audit loses exactly those 30; the tools report the DLQ's
//! and the parking lot's; seen failing before: no line, no counter);
//! `events_deleted_unread_while_running_are_counted_exactly` (main p paused by an API outage
//! at 60, 60 more events, `delete-records` to 90: ERROR from=60 to=90 count=30, counter 30,
//! the audit loses exactly those 30; seen failing before: nothing said);
//! `core::partition` unit test `an_offset_reset_while_running_names_the_records_deleted_unread`,
//! `kafka::client_log` unit tests (the line as librdkafka 2.12 writes it); promtool test of
//! the alert.

use crate::core::completed::Completed;
use std::collections::BTreeMap;

/// A range of offsets deleted before they were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
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
pub(crate) fn gap(committed: i64, log_start: i64, done: Option<&Completed>) -> Option<Gap> {
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
pub(crate) struct Ledger {
    reported_to: BTreeMap<(String, i32), i64>,
}

impl Ledger {
    /// The part of `[committed, log_start)` not reported yet, less what `done`
    /// names, and notes it as reported. `None` when nothing new was lost.
    pub(crate) fn claim(
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
    pub(crate) fn forget(&mut self, topic: &str, partition: i32) {
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
