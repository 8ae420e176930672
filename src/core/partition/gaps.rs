//! [`Gaps`]: records deleted before they were read. librdkafka reports an
//! offset reset (its fetch was out of range: the log start passed it) in no
//! order with the records; a forward gap between records at the reset's
//! offset is what was deleted unread (compaction and transaction markers
//! leave gaps too, which no reset matches).

use super::{Note, Src};
use crate::core::completed::Completed;

/// The last gap and the last reset not matched yet, of one side.
#[derive(Debug, Default)]
pub(super) struct Gaps {
    /// The last forward gap between records of the current incarnation
    /// (offsets `[from, to)`), with what an earlier owner's metadata named
    /// done there.
    last_gap: Option<(i64, i64, Option<Completed>)>,
    /// An offset reset at this offset that no gap has matched yet.
    reset_at: Option<i64>,
}

impl Gaps {
    /// librdkafka's fetch at `at` was out of range: the last gap, if it
    /// starts there, was deleted unread; otherwise the next one will be.
    pub(super) fn offset_reset(&mut self, src: Src, at: i64) -> Option<Note> {
        match self.last_gap.take() {
            Some((from, to, done)) if from == at => Some(Note::DeletedUnread {
                src,
                from,
                to,
                done,
            }),
            gap => {
                self.last_gap = gap;
                self.reset_at = Some(at);
                None
            }
        }
    }

    /// Records of the side skipped `[from, to)`: deleted unread if a reset
    /// at `from` came first; otherwise kept for one to come.
    pub(super) fn gap(
        &mut self,
        src: Src,
        from: i64,
        to: i64,
        done: Option<Completed>,
    ) -> Option<Note> {
        if self.reset_at.take() == Some(from) {
            return Some(Note::DeletedUnread {
                src,
                from,
                to,
                done,
            });
        }
        self.last_gap = Some((from, to, done));
        None
    }

    /// A new incarnation: the old one's gaps and resets mean nothing.
    pub(super) fn clear(&mut self) {
        *self = Gaps::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deleted(from: i64, to: i64) -> Option<Note> {
        Some(Note::DeletedUnread {
            src: Src::Main,
            from,
            to,
            done: None,
        })
    }

    #[test]
    fn a_reset_after_its_gap_names_it_deleted() {
        let mut g = Gaps::default();
        assert_eq!(g.gap(Src::Main, 5, 9, None), None);
        assert_eq!(
            g.offset_reset(Src::Main, 4),
            None,
            "not where the gap starts"
        );
        assert_eq!(g.offset_reset(Src::Main, 5), deleted(5, 9));
        assert_eq!(g.offset_reset(Src::Main, 5), None, "named once");
    }

    #[test]
    fn a_reset_before_its_gap_names_it_deleted_when_it_comes() {
        let mut g = Gaps::default();
        assert_eq!(g.offset_reset(Src::Main, 5), None);
        assert_eq!(g.gap(Src::Main, 5, 7, None), deleted(5, 7));
        assert_eq!(g.gap(Src::Main, 5, 7, None), None, "the reset is used up");
    }

    #[test]
    fn a_gap_no_reset_matches_is_not_deleted() {
        let mut g = Gaps::default();
        assert_eq!(g.offset_reset(Src::Main, 3), None);
        assert_eq!(g.gap(Src::Main, 5, 7, None), None, "a marker's gap");
        g.clear();
        assert_eq!(g.offset_reset(Src::Main, 5), None, "cleared");
    }
}
