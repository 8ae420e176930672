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
//! metadata waits for a lag check to confirm it ([`Settings::verify`]).

use super::{Effect, Note, Src, LOGS_AFTER_RESET};
#[cfg(doc)]
use super::{Input, Settings};
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
