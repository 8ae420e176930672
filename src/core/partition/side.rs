//! [`Side`]: one topic of the pair — its watermark (`core::offsets`), the
//! incarnations of its log, the records an earlier owner's metadata named
//! done, its reading, and its parts: [`Stores`], [`LogWatch`], [`Gaps`],
//! [`Probe`].
//!
//! Each side numbers its records with *slots*: a slot is the offset plus the
//! side's shift, which a reset raises so that slots keep increasing across
//! incarnations of the log (see the module `core::partition`).

use super::gaps::Gaps;
use super::log::LogWatch;
use super::probe::Probe;
use super::stores::Stores;
use super::{Effect, Note, Pace, Settings, Src};
use crate::core::completed::{self, Completed};
use crate::core::offsets::{NextOffset, OffsetTracker};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`Side::begin`] made of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// Taken in at this slot: to be held and scheduled.
    Held(i64),
    /// Completed without dispatch: an earlier owner's metadata named it done.
    Skipped,
    /// The tracker refused it (noted; cannot happen).
    Refused,
}

/// One topic of the pair.
pub(super) struct Side {
    tracker: OffsetTracker,
    /// Slot = offset + `shift` (raised by each reset).
    shift: i64,
    /// The first slot of the current incarnation (`i64::MIN` before any
    /// reset): nothing is stored while the watermark is below it.
    base: i64,
    /// Begun, not finished.
    held: usize,
    /// What was last applied to the consumer (None: unknown).
    reading: Option<bool>,
    /// Done offsets above the committed position, from an earlier owner.
    skip: Option<Completed>,
    stores: Stores,
    log: LogWatch,
    gaps: Gaps,
    probe: Probe,
}

impl Side {
    pub(super) fn new(settings: &Settings, src: Src) -> Self {
        let s = &settings.sides[src.index()];
        Side {
            tracker: match s.start {
                Some(at) => OffsetTracker::starting_at(settings.generation, at),
                None => OffsetTracker::new(settings.generation),
            },
            shift: 0,
            base: i64::MIN,
            held: 0,
            reading: None,
            skip: s.skip.clone().filter(|c| !c.is_empty()),
            stores: Stores::new(s.stored),
            log: LogWatch::new(s.log.clone(), s.verify.clone(), s.read_from_start),
            gaps: Gaps::default(),
            probe: Probe::default(),
        }
    }

    /// The offset of a slot of the current incarnation.
    pub(super) fn offset(&self, slot: i64) -> i64 {
        slot - self.shift
    }

    /// The offset of a slot, if it is of the current incarnation.
    pub(super) fn offset_now(&self, slot: i64) -> Option<i64> {
        (slot >= self.base).then(|| self.offset(slot))
    }

    /// How far the side is read: after the last offset begun, or further
    /// where a probe proved only markers lie (the watermark passed them).
    pub(super) fn read_to(&self) -> Option<i64> {
        let wm = self.watermark().map(NextOffset::get);
        match (self.next_offset(), wm) {
            (Some(n), Some(w)) => Some(n.max(w)),
            (n, w) => n.or(w),
        }
    }

    /// The offset after the last one begun.
    pub(super) fn next_offset(&self) -> Option<i64> {
        self.tracker.highest_begun().map(|h| self.offset(h + 1))
    }

    /// The watermark as an offset of the current log: `None` while nothing
    /// was seen, or while events of an earlier incarnation are unfinished.
    pub(super) fn watermark(&self) -> Option<NextOffset> {
        let wm = self.tracker.watermark()?;
        (wm.get() >= self.base).then(|| NextOffset::at(self.offset(wm.get())))
    }

    /// Events begun and not finished.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// The last position stored.
    pub(super) fn stored(&self) -> Option<NextOffset> {
        self.stores.stored()
    }

    pub(super) fn stores_mut(&mut self) -> &mut Stores {
        &mut self.stores
    }

    pub(super) fn log_mut(&mut self) -> &mut LogWatch {
        &mut self.log
    }

    /// The side's log is not the one it was reading: a new incarnation starts
    /// at `offset`. Returns the position it expected (an offset of the old
    /// incarnation).
    fn reset(&mut self, offset: i64) -> Option<i64> {
        let next = self.tracker.highest_begun()? + 1;
        let expected = self.offset(next);
        self.shift = next - offset;
        self.base = next;
        self.stores.reset();
        self.skip = None;
        self.log.reset();
        self.gaps.clear();
        self.probe.clear();
        Some(expected)
    }

    /// Takes the record at `offset` in: a new incarnation if it is at or
    /// below an offset already begun, a gap noted if it skips offsets, and
    /// completed at once if an earlier owner's metadata names it done.
    pub(super) fn begin<I>(
        &mut self,
        src: Src,
        offset: i64,
        generation: u64,
        fx: &mut Vec<Effect<I>>,
    ) -> Begin {
        let next = self.tracker.highest_begun().map(|h| h + 1);
        if next.is_some_and(|next| offset + self.shift < next) {
            // At or below an offset already begun, and Courier did not seek (or
            // sought a replaced log to its start, `Effect::ReadFromStart`):
            // the log changed under the side. A new incarnation, never a
            // duplicate to drop.
            let seen_end = self.log.seen_end();
            if let Some(from) = self.reset(offset) {
                let note = Note::PositionReset {
                    src,
                    from,
                    to: offset,
                    seen_end,
                };
                fx.push(Effect::Note(note));
            }
        } else if let Some(next) = next.filter(|next| offset + self.shift > *next) {
            let from = self.offset(next);
            if let Some(note) = self.gaps.gap(src, from, offset, self.skip.clone()) {
                fx.push(Effect::Note(note));
            }
        }
        let slot = offset + self.shift;
        if let Err(error) = self.tracker.begin(slot) {
            // Cannot happen (the slot is above every one begun); refused, not
            // absorbed: the watermark cannot pass a record never begun.
            fx.push(Effect::Note(Note::RefusedReport { src, error }));
            return Begin::Refused;
        }
        if let Some(skip) = &self.skip {
            let done = skip.contains(offset);
            if skip.end().is_none_or(|end| offset + 1 >= end) {
                self.skip = None; // Nothing it names lies ahead.
            }
            if done {
                // Done by an earlier owner (its commit's metadata says so):
                // completed here, never dispatched.
                if let Err(error) = self.tracker.complete(generation, slot) {
                    fx.push(Effect::Note(Note::RefusedReport { src, error }));
                }
                return Begin::Skipped;
            }
        }
        self.held += 1;
        Begin::Held(slot)
    }

    /// The job at `slot` is done; false when the tracker refused it (noted).
    pub(super) fn complete<I>(
        &mut self,
        src: Src,
        generation: u64,
        slot: i64,
        fx: &mut Vec<Effect<I>>,
    ) -> bool {
        match self.tracker.complete(generation, slot) {
            Ok(()) => true,
            Err(error) => {
                fx.push(Effect::Note(Note::RefusedReport { src, error }));
                false
            }
        }
    }

    /// A held event finished.
    pub(super) fn finished(&mut self) {
        self.held -= 1;
        self.stores.finished();
    }

    /// librdkafka's fetch at `at` was out of range (see [`Gaps`]).
    pub(super) fn offset_reset(&mut self, src: Src, at: i64) -> Option<Note> {
        self.gaps.offset_reset(src, at)
    }

    /// Applies the reading `on` unless it is applied already.
    pub(super) fn read<I>(&mut self, src: Src, on: bool) -> Option<Effect<I>> {
        (self.reading != Some(on)).then(|| {
            self.reading = Some(on);
            Effect::SetReading { src, on }
        })
    }

    /// Whether any reading was applied (or it failed since).
    pub(super) fn reading_known(&self) -> bool {
        self.reading.is_some()
    }

    /// The last reading failed: applied again at the next evaluation.
    pub(super) fn reading_failed(&mut self) {
        self.reading = None;
    }

    /// At a lag check: asks for an [`Effect::Probe`] when the side is idle
    /// below the end of its log (see [`Probe::check`]); `waiting`: records
    /// of the side wait in the backlog.
    pub(super) fn probe<I>(
        &mut self,
        src: Src,
        waiting: bool,
        draining: bool,
    ) -> Option<Effect<I>> {
        let idle = self.held == 0
            && self.tracker.in_flight() == 0
            && !waiting
            && self.reading == Some(true)
            && !draining;
        let (wm, stored) = (self.watermark(), self.stores.stored());
        let (from, to) = self.probe.check(self.log.end(), wm, idle, stored)?;
        Some(Effect::Probe { src, from, to })
    }

    /// A probe found nothing to deliver in `[from, to)`: when the side is
    /// still idle at `from`, its position moves to `to`. Returns whether it
    /// moved.
    pub(super) fn probed(&mut self, from: NextOffset, to: NextOffset) -> bool {
        if self.watermark() != Some(from) {
            return false; // Records came meanwhile.
        }
        let slot = NextOffset::at(to.get() + self.shift);
        self.tracker.pass_to(slot)
    }

    /// Enough finished since the side's last commit to commit now.
    pub(super) fn commit_ready(&self, pace: &Pace, clock: Option<Instant>) -> bool {
        self.stores.commit_ready(pace, clock)
    }

    /// The store of the watermark, if it is due (see `stores`), with the
    /// offsets done above it as metadata; and the wait after which a commit
    /// is due. Nothing while an earlier incarnation's events are unfinished,
    /// nor while the side waits to read a replaced log from its start, nor
    /// while its position waits to be checked.
    pub(super) fn store<I>(
        &mut self,
        src: Src,
        pace: &Pace,
        clock: Option<Instant>,
        now: bool,
        draining: bool,
    ) -> (Option<Effect<I>>, Option<Duration>) {
        let Some(wm) = self.watermark().filter(|_| !self.log.blocks_stores()) else {
            return (None, None);
        };
        if self.stores.stored().is_some_and(|s| s > wm) {
            return (None, None);
        }
        let metadata = match self.log.log() {
            Some(log) => completed::encode(
                log,
                wm.get(),
                self.next_offset().unwrap_or(wm.get()),
                self.tracker.in_flight_offsets().map(|o| o - self.shift),
                pace.metadata_max_bytes,
            ),
            None => String::new(),
        };
        let step = self.stores.store(wm, metadata, pace, clock, now, draining);
        let store = step.store.map(|(commit, metadata)| Effect::Store {
            src,
            offset: wm,
            metadata,
            commit,
        });
        (store, step.later)
    }

    /// Learns what a lag check read of the log: its id, for the next check's
    /// end (see [`LogWatch::on_logs`]).
    pub(super) fn on_logs<I>(
        &mut self,
        src: Src,
        id: Option<Arc<str>>,
        fx: &mut Vec<Effect<I>>,
    ) -> bool {
        let position = self.next_offset();
        self.log.on_logs(src, id, position, fx)
    }

    /// Gives back the tracker's room beyond `keep`.
    pub(super) fn trim(&mut self, keep: usize) {
        self.tracker.trim(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::byte_budget::ByteBudget;
    use crate::core::ordering::OrderingMode;
    use crate::core::partition::{Commit, SideStart};

    const GEN: u64 = 3;
    const LOG: &str = "q6AUPnmAS0yMtYhZ7I9-Ag";
    const PACE: Pace = Pace {
        interval: Duration::from_millis(250),
        after: usize::MAX,
        floor: Duration::from_millis(10),
        metadata_max_bytes: 4096,
    };

    type Fx = Vec<Effect<()>>;

    fn settings() -> Settings {
        Settings {
            generation: GEN,
            ordering: OrderingMode::Unordered,
            limit: 10,
            backlog_cap: 10,
            backlog_bytes_cap: usize::MAX,
            budget: Arc::new(ByteBudget::new(u64::MAX)),
            min_pause: Duration::ZERO,
            destinations: crate::core::destination::DestSet::first(1),
            destination_hold: Duration::from_secs(30),
            drain_timeout: Duration::ZERO,
            sides: [SideStart::on_log(LOG), SideStart::on_log(LOG)],
            pace: PACE,
        }
    }

    fn main_side(s: Settings) -> Side {
        Side::new(&s, Src::Main)
    }

    fn at(n: i64) -> Option<NextOffset> {
        Some(NextOffset::at(n))
    }

    fn begin(side: &mut Side, offset: i64, fx: &mut Fx) -> Begin {
        side.begin(Src::Main, offset, GEN, fx)
    }

    fn done(side: &mut Side, slot: i64) {
        let mut fx = Fx::new();
        assert!(side.complete(Src::Main, GEN, slot, &mut fx), "{fx:?}");
        side.finished();
    }

    #[test]
    fn a_record_below_those_begun_starts_a_new_incarnation_in_higher_slots() {
        let mut side = main_side(settings());
        let mut fx = Fx::new();
        for o in 5..8 {
            assert_eq!(begin(&mut side, o, &mut fx), Begin::Held(o));
        }
        done(&mut side, 5);
        assert_eq!(side.watermark(), at(6));
        assert_eq!(
            begin(&mut side, 0, &mut fx),
            Begin::Held(8),
            "slot 8 is offset 0"
        );
        let reset = Note::PositionReset {
            src: Src::Main,
            from: 8,
            to: 0,
            seen_end: None,
        };
        assert_eq!(fx, vec![Effect::Note(reset)]);
        assert_eq!(side.next_offset(), Some(1));
        assert_eq!(side.watermark(), None, "the old incarnation is unfinished");
        done(&mut side, 6);
        done(&mut side, 7);
        assert_eq!(side.watermark(), at(0), "an offset of the new log");
        done(&mut side, 8);
        assert_eq!((side.watermark(), side.held()), (at(1), 0));
    }

    #[test]
    fn offsets_an_earlier_owner_named_done_are_skipped_until_its_end() {
        let meta = completed::encode(LOG, 10, 15, [10, 12], 4096);
        let mut s = settings();
        s.sides[0].start = at(10);
        s.sides[0].skip = completed::decode(LOG, 10, &meta);
        let mut side = main_side(s);
        let mut fx = Fx::new();
        let got: Vec<Begin> = (10..16).map(|o| begin(&mut side, o, &mut fx)).collect();
        use Begin::{Held, Skipped};
        assert_eq!(
            got,
            vec![Held(10), Skipped, Held(12), Skipped, Skipped, Held(15)]
        );
        assert_eq!(side.held(), 3);
        done(&mut side, 10);
        done(&mut side, 12);
        assert_eq!(side.watermark(), at(15), "the skipped ones completed");
        assert!(fx.is_empty(), "{fx:?}");
    }

    #[test]
    fn a_gap_an_offset_reset_matches_is_noted_deleted() {
        let mut side = main_side(settings());
        let mut fx = Fx::new();
        begin(&mut side, 0, &mut fx);
        begin(&mut side, 5, &mut fx);
        assert!(fx.is_empty());
        let note = side.offset_reset(Src::Main, 1);
        let deleted = Note::DeletedUnread {
            src: Src::Main,
            from: 1,
            to: 5,
            done: None,
        };
        assert_eq!(note, Some(deleted));
    }

    #[test]
    fn the_watermark_is_stored_with_the_offsets_done_above_it() {
        let mut side = main_side(settings());
        let mut fx = Fx::new();
        for o in 0..3 {
            begin(&mut side, o, &mut fx);
        }
        done(&mut side, 0);
        done(&mut side, 2);
        let (store, later) = side.store::<()>(Src::Main, &PACE, None, false, false);
        let expected = completed::encode(LOG, 1, 3, [1], 4096);
        assert_eq!(
            store,
            Some(Effect::Store {
                src: Src::Main,
                offset: NextOffset::at(1),
                metadata: expected,
                commit: Commit::No,
            })
        );
        assert_eq!((later, side.stored()), (None, at(1)));
        let (again, _) = side.store::<()>(Src::Main, &PACE, None, false, false);
        assert_eq!(again, None, "nothing new");
    }

    #[test]
    fn nothing_is_stored_while_a_replaced_log_waits_to_be_read_again() {
        let mut s = settings();
        s.sides[0].read_from_start = true;
        let mut side = main_side(s);
        let mut fx = Fx::new();
        begin(&mut side, 0, &mut fx);
        done(&mut side, 0);
        let (store, _) = side.store::<()>(Src::Main, &PACE, None, false, false);
        assert_eq!(store, None);
    }

    #[test]
    fn an_idle_side_below_the_end_probes_and_a_proof_moves_it() {
        let mut side = main_side(settings());
        let mut fx = Fx::new();
        assert_eq!(
            side.read::<()>(Src::Main, true),
            Some(Effect::SetReading {
                src: Src::Main,
                on: true
            })
        );
        assert_eq!(side.read::<()>(Src::Main, true), None, "applied already");
        begin(&mut side, 0, &mut fx);
        done(&mut side, 0);
        side.store::<()>(Src::Main, &PACE, None, false, false);
        side.log_mut().on_positions(Some(3));
        assert_eq!(
            side.probe::<()>(Src::Main, false, false),
            None,
            "first sight"
        );
        side.log_mut().on_positions(Some(3));
        let probe = Effect::Probe {
            src: Src::Main,
            from: NextOffset::at(1),
            to: NextOffset::at(3),
        };
        assert_eq!(side.probe::<()>(Src::Main, false, false), Some(probe));
        assert!(
            !side.probed(NextOffset::at(0), NextOffset::at(3)),
            "a stale proof"
        );
        assert!(side.probed(NextOffset::at(1), NextOffset::at(3)));
        assert_eq!(side.watermark(), at(3));
    }
}
