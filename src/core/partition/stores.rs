//! A side's stores and their commit pacing ([`Stores`]), and the machine's
//! store timer with the rules both sides follow ([`Storing`]).
//!
//! A store is committed explicitly ([`Commit::Soon`]) when
//! [`Pace::after`] events finished since the side's last commit
//! (at most once per [`Pace::floor`]), when only its metadata changed (at most
//! once per [`Pace::interval`]), or when the next one must be (after a reset:
//! librdkafka still holds the old log's committed position, and auto-commit
//! sends a partition only when the stored position passes that one). A
//! drain's answer commits at once ([`Commit::Now`]); while a drain waits for
//! its jobs nothing is committed (a [`Commit::Soon`] could be flushed after
//! the handover's commit): what is due then waits for the answer.
//!
//! # Invariant I2: stores
//!
//!
//! *Enforced in* `src/core/partition/` (`PartitionMachine`). The partition pair's machine
//! emits `Effect::Store` only with `tracker.watermark()`, only when it advanced; records
//! waiting in the backlog are not begun, so the watermark stays below them; a drain hands the
//! backlog back unstored. The actor (`src/actors/partition.rs`) stores exactly what the
//! effect carries.
//!
//! *Tested by:* Unit tests; a model-based proptest (`src/core/partition/model.rs`, below);
//! `tests/dlq.rs`: with the DLQ write failing, the committed offset of each affected
//! partition stops exactly at the failing event while later events are delivered.
//!
//! The held map (`(side, slot)` → event) uses foldhash's fixed-seed fast hasher (`core::partition::SlotHash`;
//! foldhash is already built for hashbrown) instead of SipHash: its keys are broker-numbered offsets plus the side's shift, which no
//! producer chooses. The ordering lanes, keyed by the event's Kafka key (which a producer does
//! choose), keep the standard library's SipHash.
//!
//! # Invariant I17: commit metadata
//!
//!
//! *Enforced in* `src/core/partition/` (commit metadata, skip). Each `Effect::Store` carries,
//! with the watermark `W`, the offsets done above it (`core::completed`: run lengths, ≤ 4 KB,
//! a prefix when it does not fit — fewer skipped, never a wrong one); metadata that changed
//! with `W` unchanged is committed explicitly (librdkafka's auto-commit only sends a
//! partition whose stored position passed the committed one), paced by
//! `kafka.auto_commit_interval`, at once on a drain. Commits follow progress: the
//! `kafka.commit_after`-th event finished on a side since its last commit makes the store a
//! commit (`Commit::Soon`), at most once per `COMMIT_FLOOR` (10 ms) per side. Such commits of
//! all partitions are coalesced (`core::commit_pace`, `actors::partition::commits`): the latest offset and
//! metadata of each waits, and one OffsetCommit request sends them all, at once if the last
//! was at least 10 ms ago, else when it is — so each is sent within 10 ms and an instance
//! sends at most 100 such requests a second, however many partitions it has. A drain's commit
//! (`Commit::Now`) goes at once, alone, and takes its partition's waiting entry away
//! (`courier_offset_commits_total{kind}` counts auto, coalesced and explicit (drain)
//! requests). On assignment the
//! consumer actor reads the committed offsets and their metadata (`decode` refuses a string
//! made for another `W`); the machine completes a record whose offset it names without
//! dispatch (`courier_offsets_skipped_total`). A skipped offset was done; an offset it does
//! not name is never completed without an answer.
//!
//! *Tested by:* `core::completed` proptests (decoding names only done offsets, within the
//! budget); `core::commit_pace` proptest (requests ≥ 10 ms apart, every ask sent within 10 ms
//! plus the timer's lateness); partition unit tests (stuck watermark → metadata commits, pacing, drain; skip
//! exactly the named offsets; the `commit_after`-th finished event commits at once, the
//! floor; proptest: with report batches a floor apart, finished-but-uncommitted stays below
//! `commit_after` and every commit carries the watermark); the model-based proptest with an
//! earlier owner's metadata (random done set, budgets down to 4 bytes): a named offset is
//! never dispatched, an unnamed one is never skipped (the stored offset would pass it), every
//! stored metadata names only done offsets;
//! `tests/crash_cost.rs::sigkill_and_restart_of_a_static_member` (real broker: read from the
//! broker right after a SIGKILL, no event its committed offsets or metadata covered is
//! delivered again — seen failing with the skip disabled — and duplicates ≤ what had finished
//! uncommitted + the concurrency).

use super::{Commit, Effect, Pace, Timer, STORE_DELAY};
use crate::core::offsets::NextOffset;
use std::time::{Duration, Instant};

/// What one side stored, and when it last committed.
pub(super) struct Stores {
    stored: Option<NextOffset>,
    /// `stored` before the last [`Effect::Store`] (restored if it fails).
    stored_before: Option<NextOffset>,
    /// The metadata stored with `stored`, and before the last store.
    meta: String,
    meta_before: String,
    /// When this side was last committed explicitly.
    committed_at: Option<Instant>,
    /// Events finished since then.
    done_since_commit: usize,
    /// The next store is committed explicitly.
    commit_next: bool,
}

/// What [`Stores::store`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Step {
    /// Store the watermark with this metadata, committed so.
    pub(super) store: Option<(Commit, String)>,
    /// A commit is due after this wait: store again then.
    pub(super) later: Option<Duration>,
}

impl Stores {
    /// What an earlier incarnation stored.
    pub(super) fn new(stored: Option<NextOffset>) -> Self {
        Stores {
            stored,
            stored_before: stored,
            meta: String::new(),
            meta_before: String::new(),
            committed_at: None,
            done_since_commit: 0,
            commit_next: false,
        }
    }

    /// The last position stored (as far as the machine knows).
    pub(super) fn stored(&self) -> Option<NextOffset> {
        self.stored
    }

    /// An event of the side finished.
    pub(super) fn finished(&mut self) {
        self.done_since_commit += 1;
    }

    /// The next store is committed explicitly.
    pub(super) fn commit_next(&mut self) {
        self.commit_next = true;
    }

    /// A new incarnation of the log: nothing of the old one is stored, and
    /// its first store is committed.
    pub(super) fn reset(&mut self) {
        self.stored = None;
        self.stored_before = None;
        self.meta.clear();
        self.meta_before.clear();
        self.done_since_commit = 0;
        self.commit_next = true;
    }

    /// The store of `offset` failed: it counts as not stored.
    pub(super) fn failed(&mut self, offset: NextOffset) {
        if self.stored == Some(offset) {
            self.stored = self.stored_before;
            self.meta = std::mem::take(&mut self.meta_before);
        }
    }

    /// Enough finished since the last commit, and the floor is over: commit
    /// now, not after the store delay.
    pub(super) fn commit_ready(&self, pace: &Pace, clock: Option<Instant>) -> bool {
        self.done_since_commit >= pace.after
            && match (self.committed_at, clock) {
                (Some(at), Some(clock)) => at + pace.floor <= clock,
                _ => true,
            }
    }

    /// Decides the store of `wm` with `metadata` at `clock` (see the module's
    /// documentation); `now`: a drain's answer. Records what it stores.
    pub(super) fn store(
        &mut self,
        wm: NextOffset,
        metadata: String,
        pace: &Pace,
        clock: Option<Instant>,
        now: bool,
        draining: bool,
    ) -> Step {
        let moved = self.stored != Some(wm);
        let due = self.done_since_commit >= pace.after || self.commit_next;
        if !moved && metadata == self.meta && !due {
            return Step::default();
        }
        let mut commit = Commit::No;
        let mut later = None;
        if due || !moved {
            let spacing = if due { pace.floor } else { pace.interval };
            let wait = match (self.committed_at, clock) {
                (Some(at), Some(clock)) if !now => (at + spacing).saturating_duration_since(clock),
                _ => Duration::ZERO,
            };
            if wait.is_zero() && (now || !draining) {
                commit = if now { Commit::Now } else { Commit::Soon };
            } else if draining {
                // Nothing waits for a flush once a drain began (see
                // `Effect::ForgetWaitingCommits`): the drain's answer
                // commits it, at once.
                if !moved {
                    return Step::default();
                }
            } else {
                later = Some(wait);
                if !moved {
                    // Metadata alone: nothing auto-commit would send.
                    return Step { store: None, later };
                }
            }
        }
        if commit != Commit::No {
            self.committed_at = clock;
            self.done_since_commit = 0;
            self.commit_next = false;
        }
        self.stored_before = self.stored;
        self.stored = Some(wm);
        self.meta_before = std::mem::replace(&mut self.meta, metadata.clone());
        Step {
            store: Some((commit, metadata)),
            later,
        }
    }
}

/// The machine's store timer ([`Timer::Store`]) and the rules of its sides'
/// stores.
pub(super) struct Storing {
    pace: Pace,
    /// A [`Timer::Store`] is pending.
    scheduled: bool,
}

impl Storing {
    pub(super) fn new(pace: Pace) -> Self {
        Storing {
            pace: Pace {
                after: pace.after.max(1),
                ..pace
            },
            scheduled: false,
        }
    }

    pub(super) fn pace(&self) -> &Pace {
        &self.pace
    }

    /// The [`Timer::Store`] came.
    pub(super) fn fired(&mut self) {
        self.scheduled = false;
    }

    /// Stores the advanced watermarks after [`STORE_DELAY`] (once for many
    /// completions) unless a store is pending already.
    pub(super) fn schedule<I>(&mut self) -> Option<Effect<I>> {
        self.schedule_after(STORE_DELAY)
    }

    /// The same after `after` (a commit due then).
    pub(super) fn schedule_after<I>(&mut self, after: Duration) -> Option<Effect<I>> {
        if std::mem::replace(&mut self.scheduled, true) {
            return None;
        }
        Some(Effect::Schedule {
            after,
            timer: Timer::Store,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACE: Pace = Pace {
        interval: Duration::from_millis(250),
        after: 3,
        floor: Duration::from_millis(10),
        metadata_max_bytes: 4096,
    };

    fn at(n: u64) -> NextOffset {
        NextOffset::at(n as i64)
    }

    fn ms(base: Instant, n: u64) -> Option<Instant> {
        Some(base + Duration::from_millis(n))
    }

    fn stored(commit: Commit, meta: &str) -> Step {
        Step {
            store: Some((commit, meta.to_string())),
            later: None,
        }
    }

    #[test]
    fn a_moved_watermark_is_stored_and_the_same_one_is_not() {
        let mut s = Stores::new(None);
        let t = Instant::now();
        assert_eq!(
            s.store(at(5), "m".into(), &PACE, ms(t, 0), false, false),
            stored(Commit::No, "m")
        );
        assert_eq!(s.stored(), Some(at(5)));
        assert_eq!(
            s.store(at(5), "m".into(), &PACE, ms(t, 1), false, false),
            Step::default()
        );
    }

    #[test]
    fn commit_after_finished_events_commits_then_waits_for_the_floor() {
        let mut s = Stores::new(None);
        let t = Instant::now();
        for _ in 0..3 {
            s.finished();
        }
        assert!(s.commit_ready(&PACE, ms(t, 0)));
        assert_eq!(
            s.store(at(3), String::new(), &PACE, ms(t, 0), false, false),
            stored(Commit::Soon, "")
        );
        assert!(!s.commit_ready(&PACE, ms(t, 0)), "counted from the commit");
        for _ in 0..3 {
            s.finished();
        }
        assert!(!s.commit_ready(&PACE, ms(t, 5)), "within the floor");
        let step = s.store(at(6), String::new(), &PACE, ms(t, 5), false, false);
        assert_eq!(
            step,
            Step {
                store: Some((Commit::No, String::new())),
                later: Some(Duration::from_millis(5)),
            },
            "stored now, committed when the floor is over"
        );
        assert!(s.commit_ready(&PACE, ms(t, 10)));
    }

    #[test]
    fn metadata_alone_commits_at_most_once_per_interval() {
        let mut s = Stores::new(None);
        let t = Instant::now();
        s.store(at(1), "a".into(), &PACE, ms(t, 0), false, false);
        assert_eq!(
            s.store(at(1), "b".into(), &PACE, ms(t, 1), false, false),
            stored(Commit::Soon, "b")
        );
        let step = s.store(at(1), "c".into(), &PACE, ms(t, 2), false, false);
        assert_eq!(step.store, None, "nothing auto-commit would send");
        assert_eq!(step.later, Some(Duration::from_millis(249)));
    }

    #[test]
    fn a_drain_commits_at_once_and_nothing_while_it_waits() {
        let mut s = Stores::new(None);
        let t = Instant::now();
        s.store(at(1), "a".into(), &PACE, ms(t, 0), false, false);
        assert_eq!(
            s.store(at(1), "b".into(), &PACE, ms(t, 1), false, false),
            stored(Commit::Soon, "b")
        );
        // Within the interval while a drain waits: neither stored nor due later.
        assert_eq!(
            s.store(at(1), "c".into(), &PACE, ms(t, 2), false, true),
            Step::default()
        );
        // A moved watermark is stored, not committed, and nothing is due later.
        assert_eq!(
            s.store(at(2), "c".into(), &PACE, ms(t, 2), false, true),
            stored(Commit::No, "c")
        );
        assert_eq!(
            s.store(at(2), "d".into(), &PACE, ms(t, 2), true, true),
            stored(Commit::Now, "d")
        );
    }

    #[test]
    fn a_failed_store_counts_as_not_stored() {
        let mut s = Stores::new(Some(at(1)));
        let t = Instant::now();
        s.store(at(4), "x".into(), &PACE, ms(t, 0), false, false);
        s.failed(at(3));
        assert_eq!(s.stored(), Some(at(4)), "another store's failure");
        s.failed(at(4));
        assert_eq!(s.stored(), Some(at(1)));
        assert_eq!(
            s.store(at(4), "x".into(), &PACE, ms(t, 1), false, false),
            stored(Commit::No, "x")
        );
    }

    #[test]
    fn a_reset_forgets_the_stores_and_commits_the_next() {
        let mut s = Stores::new(Some(at(10)));
        s.reset();
        assert_eq!(s.stored(), None);
        let t = Instant::now();
        assert_eq!(
            s.store(at(2), String::new(), &PACE, ms(t, 0), false, false),
            stored(Commit::Soon, "")
        );
        s.store(at(3), String::new(), &PACE, ms(t, 1), false, false);
        s.commit_next();
        let step = s.store(at(4), String::new(), &PACE, ms(t, 2), false, false);
        assert_eq!(
            step.later,
            Some(Duration::from_millis(8)),
            "due, within the floor"
        );
    }

    #[test]
    fn the_store_timer_is_asked_once_until_it_fires() {
        let mut s = Storing::new(PACE);
        let fx: Option<Effect<()>> = s.schedule();
        assert_eq!(
            fx,
            Some(Effect::Schedule {
                after: STORE_DELAY,
                timer: Timer::Store
            })
        );
        assert!(s.schedule::<()>().is_none());
        assert!(s.schedule_after::<()>(Duration::ZERO).is_none());
        s.fired();
        assert!(s.schedule_after::<()>(Duration::ZERO).is_some());
    }
}
