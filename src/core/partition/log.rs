//! [`LogWatch`]: which log a side reads — the topic's id its stores'
//! metadata names (`core::completed`), whether the lag checks confirm it, and
//! a replaced log read again from its start.
//!
//! A changed id is a topic deleted and recreated under its name: if a reset
//! since the last comparison began the new log (librdkafka found the old
//! position out of range), that is its start; otherwise the position still
//! points into the old log's offsets, and the new log is read from its start
//! ([`Effect::ReadFromStart`]). Nothing is stored for the side while that
//! seek is out or due, nor while a position bound to a log by the committed
//! metadata waits for a lag check to confirm it ([`SideStart::verify`]).
//!
//! # Invariant I18: positions moving back
//!
//!
//! *Enforced in* `src/core/partition/` (a position that moves back),
//! `src/actors/partition.rs`. Courier seeks a partition only by replacing its machine (crash
//! recovery, rebalance), so a record of one machine's side at or below an offset already
//! begun means the log under it changed (offset reset, topic deleted and recreated,
//! truncation): a new incarnation, never a duplicate. The side numbers records with slots
//! (offset + a shift a reset raises), so its tracker, lanes and jobs go on; the old
//! incarnation's events finish; nothing is stored until they have, then only the new log's
//! positions (the first committed explicitly: librdkafka still holds the old committed
//! offset), with no metadata and no skip set. WARN with partition, old and new position and
//! the reason (`topic_recreated` when the topic id changed, else `offset_reset`),
//! `courier_position_resets_total{topic,reason}`; a recreated topic's old records past the
//! position (as the last lag check saw the old end: a lower bound) are logged ERROR `events
//! deleted unread` and counted in `courier_events_deleted_unread_total{topic,partition}`
//! (only an end read with the old log's id: the new log's end is not the old one's).
//!
//! *A replaced log the position does not notice.* librdkafka 2.12 does not reset a position
//! when a recreated topic's new log is already past it (its own FIXME in `rdkafka_topic.c`):
//! the fetch at the old position succeeds on the new log. So the lag check also reads the
//! topics' ids (DescribeTopics; at most once a second, and only when the brokers answered its
//! ListOffsets: a DescribeTopics with no broker up makes librdkafka reconnect without its
//! backoff, ~30,000 refused connections per instance in the drill's broker restart) and hands
//! them to the machine (`Input::Logs`). A side whose
//! topic id changed with no reset since the last check (a reset since then *was* the new
//! log's start) asks to be read from its log's start (`Effect::ReadFromStart`: the actor
//! seeks to the log start and answers `Input::ReadingFrom`; a failed seek is asked again at
//! the next check) and stores nothing until the new log's first record begins the new
//! incarnation (or the start lies at or above the old position: then what was begun is the
//! new log's). WARN "the topic was deleted and recreated under its name". The same wait
//! serves a committed position made for another log (`SideStart::read_from_start`, I20).
//!
//! *Tested by:* Partition unit tests (new incarnation delivered, old finishes first, first
//! store committed, skip set dropped); the model-based proptest (resets to an offset already
//! read at any point: every record of every incarnation done, nothing stored while an older
//! one is unfinished, then only positions of the current log and no metadata; each reset
//! noted with its position);
//! `tests/positions.rs::a_topic_recreated_while_courier_runs_loses_nothing` (delete +
//! recreate while running: 200 of 200 new events delivered, WARN + counter, nothing counted
//! deleted; seen failing on 87cb04e: all 200 dropped as out of order);
//! `a_topic_recreated_past_the_old_position_loses_nothing` (Courier stopped with SIGSTOP
//! while the topic is recreated and refilled past its position: 500 of 500 delivered; seen
//! failing before `Input::Logs`: 300 never delivered, nothing logged; and once, before the
//! end was tied to its log, 200 counted deleted unread that were not; the WARN's old
//! position may be past 300: what the fetch at the old position returns from the new log is
//! read before the id lookup, and stored with the old log's id, which binds it to that
//! log); partition unit tests
//! `a_log_replaced_past_the_position_is_read_from_its_start`,
//! `a_reset_before_the_new_id_is_the_new_logs_start`,
//! `an_older_reset_does_not_stand_for_a_later_recreation`,
//! `a_new_log_starting_above_the_position_resumes_at_once`.

use super::{Effect, Note, Src, LOGS_AFTER_RESET};
#[cfg(doc)]
use super::{Input, SideStart};
use std::sync::Arc;

/// What one side knows of its log.
pub(super) struct LogWatch {
    /// The log's identity for the metadata (`None`: not known, e.g. after
    /// a reset until [`LOGS_AFTER_RESET`] lag checks read it).
    log: Option<Arc<str>>,
    /// [`Input::Logs`] still to come before the side takes the id read as
    /// its log's.
    log_wait: u8,
    /// The position is bound to `identity` by the committed metadata, which
    /// no [`Input::Logs`] has checked yet: nothing is stored.
    unverified: bool,
    /// The id of the topic the side reads, as last confirmed by
    /// [`Input::Logs`] (from the assignment until then).
    identity: Option<Arc<str>>,
    /// A reset began an incarnation that no [`Input::Logs`] has confirmed
    /// since: if the topic's id turns out changed, that reset was the new
    /// log's start.
    reset_unconfirmed: bool,
    /// An [`Effect::ReadFromStart`] is out or due: nothing is stored for
    /// the side (its position would be the old log's, committed onto the new
    /// one) until a reset begins the new log. `Some(true)`: the seek is out.
    reading_again: Option<bool>,
    /// The position (an offset) when the replaced log was found: records of
    /// the new log at or above it are the same whether fetched before the
    /// seek or after.
    read_again_from: Option<i64>,
    /// The old log's end as last seen, when a replaced log is read again from
    /// its start (what the old log still had unread lay in `[position, it)`).
    left_end: Option<i64>,
    /// The log's end at the last lag check.
    end: Option<i64>,
    /// The topic's id read with `end` (`None`: not read): `end` is the
    /// position's log's only if this is `identity`.
    end_log: Option<Arc<str>>,
    /// The id the last [`Input::Logs`] read, for the next lag check's `end`.
    checked: Option<Arc<str>>,
}

impl LogWatch {
    /// From the assignment: the log's id (`log`), or the id the committed
    /// metadata names when it could not be read (`verify`); `read_from_start`:
    /// the committed position was made for another log.
    pub(super) fn new(
        log: Option<Arc<str>>,
        verify: Option<Arc<str>>,
        read_from_start: bool,
    ) -> Self {
        LogWatch {
            unverified: log.is_none() && verify.is_some(),
            identity: log.clone().or(verify),
            log,
            log_wait: 0,
            reset_unconfirmed: false,
            reading_again: read_from_start.then_some(false),
            read_again_from: None,
            left_end: None,
            end: None,
            end_log: None,
            checked: None,
        }
    }

    /// The log the metadata names (`None`: no metadata).
    pub(super) fn log(&self) -> Option<&Arc<str>> {
        self.log.as_ref()
    }

    /// The log's end at the last lag check.
    pub(super) fn end(&self) -> Option<i64> {
        self.end
    }

    /// Nothing may be stored: a replaced log is to be read again from its
    /// start, or the position waits to be checked.
    pub(super) fn blocks_stores(&self) -> bool {
        self.reading_again.is_some() || self.unverified
    }

    /// What the last lag check saw of the end of the log being read, if it
    /// was that log's (for a reset's note: what was unread lay below it).
    pub(super) fn seen_end(&self) -> Option<i64> {
        if self.reading_again.is_some() {
            self.left_end
        } else {
            self.end
                .filter(|_| self.end_log.is_some() && self.end_log == self.identity)
        }
    }

    /// A reset began a new incarnation: its log is learnt again (see
    /// [`LOGS_AFTER_RESET`]), and it is the log being read.
    pub(super) fn reset(&mut self) {
        self.log = None;
        self.log_wait = LOGS_AFTER_RESET;
        // The new incarnation's positions are of the log being read,
        // whichever the old position's was.
        self.unverified = false;
        self.reset_unconfirmed = true;
        self.reading_again = None;
        self.end = None;
    }

    /// A lag check saw the log end at `end`, with the id read before it.
    pub(super) fn on_positions(&mut self, end: Option<i64>) {
        self.end = end;
        self.end_log = self.checked.take();
    }

    /// A lag check read the topic's id (`None`: not read); `position`: the
    /// side's next offset. Returns whether the side learnt its log's id
    /// (stored again with the log named: an idle side stores nothing
    /// otherwise).
    pub(super) fn on_logs<I>(
        &mut self,
        src: Src,
        id: Option<Arc<str>>,
        position: Option<i64>,
        fx: &mut Vec<Effect<I>>,
    ) -> bool {
        self.checked = id.clone();
        let Some(id) = id else {
            return false;
        };
        let confirmed = std::mem::take(&mut self.reset_unconfirmed);
        self.log_wait = self.log_wait.saturating_sub(1);
        // Checked now: the same log, or another one read again below.
        self.unverified = false;
        match self.identity.replace(id.clone()) {
            Some(old) if old != id => {
                let read_again = !confirmed;
                if read_again {
                    self.left_end = self.end.filter(|_| self.end_log.as_ref() == Some(&old));
                    self.read_again_from = position;
                    self.log = None;
                    self.reading_again = Some(true);
                    fx.push(Effect::ReadFromStart { src });
                }
                fx.push(Effect::Note(Note::LogReplaced {
                    src,
                    old,
                    new: id.clone(),
                    read_again,
                }));
            }
            _ => {}
        }
        // A side that does not know its log's id (a reset began a new
        // incarnation, or the id was not read at the assignment) takes
        // the one read, once a lookup that began after the reset read
        // it; one that reads a replaced log again takes it when its
        // stores resume (`on_reading_from`).
        if self.log.is_none() && self.log_wait == 0 && self.reading_again.is_none() {
            self.log = Some(id);
            return true;
        }
        false
    }

    /// A seek that failed (or is due from the assignment) is asked again.
    pub(super) fn ask_seek<I>(&mut self, src: Src, fx: &mut Vec<Effect<I>>) {
        if self.reading_again == Some(false) {
            self.reading_again = Some(true);
            fx.push(Effect::ReadFromStart { src });
        }
    }

    /// The side was sought to its new log's `start` (`None`: the seek
    /// failed). If that start is at or above the position the replaced log
    /// was found at, no record of the new log can come below what was begun
    /// (no reset will mark the incarnation): what was begun from there on is
    /// the new log's, and stores resume (returns true); otherwise the new
    /// log's first record begins the reset.
    pub(super) fn on_reading_from(&mut self, start: Option<i64>) -> bool {
        if self.reading_again.is_none() {
            return false; // A reset came first.
        }
        match start {
            None => self.reading_again = Some(false),
            Some(start) if self.read_again_from.is_none_or(|from| start >= from) => {
                self.reading_again = None;
                // Sought after the lag check read the new id: what is read
                // now is that log.
                self.log = self.identity.clone();
                return true;
            }
            Some(_) => {}
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "old-log";
    const NEW: &str = "new-log";

    type Fx = Vec<Effect<()>>;

    fn id(s: &str) -> Option<Arc<str>> {
        Some(s.into())
    }

    fn watching(log: &str) -> LogWatch {
        LogWatch::new(id(log), None, false)
    }

    #[test]
    fn a_reset_learns_the_log_at_the_second_lag_check() {
        let mut w = watching(OLD);
        let mut fx = Fx::new();
        w.reset();
        assert_eq!(w.log(), None);
        assert!(!w.on_logs(Src::Main, id(OLD), Some(3), &mut fx));
        assert_eq!(w.log(), None, "the first lookup may predate the reset");
        assert!(w.on_logs(Src::Main, id(OLD), Some(3), &mut fx));
        assert_eq!(w.log().map(|l| &**l), Some(OLD));
        assert!(fx.is_empty());
    }

    #[test]
    fn a_replaced_log_without_a_reset_is_read_again_from_its_start() {
        let mut w = watching(OLD);
        let mut fx = Fx::new();
        w.on_logs(Src::Main, id(OLD), Some(5), &mut fx);
        w.on_positions(Some(8));
        assert_eq!(w.seen_end(), Some(8));
        w.on_logs(Src::Main, id(NEW), Some(6), &mut fx);
        assert_eq!(fx.len(), 2);
        assert_eq!(fx[0], Effect::ReadFromStart { src: Src::Main });
        assert!(matches!(
            fx[1],
            Effect::Note(Note::LogReplaced {
                read_again: true,
                ..
            })
        ));
        assert!(w.blocks_stores());
        assert_eq!(
            (w.log(), w.seen_end()),
            (None, Some(8)),
            "the old log's end"
        );
        assert!(
            !w.on_reading_from(Some(2)),
            "below the position: a reset will come"
        );
        assert!(w.blocks_stores());
        assert!(w.on_reading_from(Some(6)));
        assert!(!w.blocks_stores());
        assert_eq!(w.log().map(|l| &**l), Some(NEW));
    }

    #[test]
    fn a_replaced_log_after_a_reset_was_its_start() {
        let mut w = watching(OLD);
        let mut fx = Fx::new();
        w.reset();
        w.on_logs(Src::Main, id(NEW), Some(1), &mut fx);
        assert!(matches!(
            fx[..],
            [Effect::Note(Note::LogReplaced {
                read_again: false,
                ..
            })]
        ));
        assert!(!w.blocks_stores());
    }

    #[test]
    fn a_failed_seek_is_asked_again() {
        let mut w = LogWatch::new(id(NEW), None, true);
        let mut fx = Fx::new();
        assert!(w.blocks_stores());
        w.ask_seek(Src::Dlq, &mut fx);
        w.ask_seek(Src::Dlq, &mut fx);
        assert_eq!(
            fx,
            vec![Effect::ReadFromStart { src: Src::Dlq }],
            "once out"
        );
        assert!(!w.on_reading_from(None));
        w.ask_seek(Src::Dlq, &mut fx);
        assert_eq!(fx.len(), 2, "asked again after the failure");
    }

    #[test]
    fn an_unverified_position_stores_nothing_until_a_lag_check_reads_the_id() {
        let mut w = LogWatch::new(None, id(OLD), false);
        let mut fx = Fx::new();
        assert!(w.blocks_stores());
        assert!(!w.on_logs(Src::Main, None, None, &mut fx), "not read");
        assert!(w.blocks_stores());
        assert!(w.on_logs(Src::Main, id(OLD), None, &mut fx));
        assert!(!w.blocks_stores());
        assert!(fx.is_empty());
    }
}
