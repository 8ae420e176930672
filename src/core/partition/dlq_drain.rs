//! [`DlqDrain`]: the begun DLQ records waiting to be redelivered, in offset
//! order, each once the wall clock reaches its `not_before`; and whether DLQ
//! p has something to drain (what the degraded-mode FSM reads first).

use std::collections::VecDeque;

/// The DLQ drain's queue and what the lag checks saw of DLQ p.
pub(super) struct DlqDrain {
    /// Begun DLQ records (slot, `not_before` in wall-clock ms), in order.
    queue: VecDeque<(i64, i64)>,
    /// The most jobs the drain has in flight.
    limit: usize,
    /// DLQ p's end at the last lag check.
    high: Option<i64>,
    /// Where reading DLQ p starts when nothing was read.
    start: Option<i64>,
}

impl DlqDrain {
    pub(super) fn new(limit: usize) -> Self {
        DlqDrain {
            queue: VecDeque::new(),
            limit: limit.max(1),
            high: None,
            start: None,
        }
    }

    /// A begun DLQ record at `slot` waits for its turn and for `not_before_ms`.
    pub(super) fn push(&mut self, slot: i64, not_before_ms: i64) {
        self.queue.push_back((slot, not_before_ms));
    }

    /// A lag check saw DLQ p end at `high`, its reading start at `start`.
    pub(super) fn on_positions(&mut self, high: i64, start: i64) {
        self.high = Some(high);
        self.start = Some(start);
    }

    /// The next DLQ offset this partition would read: after the last one
    /// begun (`after_begun`), or where reading starts.
    pub(super) fn next(&self, after_begun: Option<i64>) -> Option<i64> {
        after_begun.or(self.start)
    }

    /// DLQ p has something to drain now: a due record at the head of the
    /// queue, or records not begun yet (`waiting` for the byte budget, or
    /// unread: their head may turn out not to be due yet), or a lag not known
    /// yet. Records not begun behind a head that is not due count too while
    /// they may be `unknown` (not all envelopes this machine wrote and
    /// follows: an earlier owner's): their keys are learnt only once they
    /// are read, and until then main p waits. `after_begun`: see
    /// [`DlqDrain::next`].
    pub(super) fn has_unread(
        &self,
        now_ms: i64,
        (waiting, after_begun): (bool, Option<i64>),
        unknown: bool,
    ) -> bool {
        let not_begun = || match (self.high, self.next(after_begun)) {
            (Some(high), Some(next)) => high > next,
            // Lag not known yet (a new assignment): assume there is a backlog,
            // so main p is not read before DLQ p was looked at.
            _ => true,
        };
        match self.queue.front() {
            Some(&(_, not_before)) => not_before <= now_ms || (unknown && not_begun()),
            None if waiting => true,
            None => not_begun(),
        }
    }

    /// DLQ p has records not begun (or its lag is not known yet).
    pub(super) fn not_begun(&self, after_begun: Option<i64>) -> bool {
        match (self.high, self.next(after_begun)) {
            (Some(high), Some(next)) => high > next,
            _ => true,
        }
    }

    /// Takes the due records at the head, in order, while fewer than the
    /// limit's jobs are in flight (`in_flight`, each taken one more). Returns
    /// them and the `not_before` of the head left waiting, if not due.
    pub(super) fn take_due(&mut self, now_ms: i64, in_flight: usize) -> (Vec<i64>, Option<i64>) {
        let mut due = Vec::new();
        while let Some(&(slot, not_before)) = self.queue.front() {
            if in_flight + due.len() >= self.limit {
                return (due, None);
            }
            if not_before > now_ms {
                return (due, Some(not_before));
            }
            self.queue.pop_front();
            due.push(slot);
        }
        (due, None)
    }

    /// The head's `not_before` if it is not due yet (a wake-up while not
    /// draining).
    pub(super) fn head_due_at(&self, now_ms: i64) -> Option<i64> {
        let &(_, not_before) = self.queue.front()?;
        (not_before > now_ms).then_some(not_before)
    }

    /// An empty queue gives back the room it grew to beyond `keep`.
    pub(super) fn trim(&mut self, keep: usize) {
        if self.queue.is_empty() && self.queue.capacity() > keep {
            self.queue = VecDeque::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_records_go_in_order_and_the_head_holds_the_rest_back() {
        let mut d = DlqDrain::new(10);
        d.push(0, 100);
        d.push(1, 50);
        d.push(2, 300);
        d.push(3, 0);
        assert_eq!(d.take_due(99, 0), (vec![], Some(100)));
        assert_eq!(
            d.take_due(100, 0),
            (vec![0, 1], Some(300)),
            "1 waited behind 0"
        );
        assert_eq!(d.head_due_at(200), Some(300));
        assert_eq!(d.take_due(300, 0), (vec![2, 3], None));
        assert_eq!(d.head_due_at(300), None);
    }

    #[test]
    fn at_most_the_limit_is_in_flight() {
        let mut d = DlqDrain::new(2);
        for slot in 0..4 {
            d.push(slot, 0);
        }
        assert_eq!(d.take_due(0, 1), (vec![0], None));
        assert_eq!(d.take_due(0, 2), (vec![], None));
        assert_eq!(d.take_due(0, 0), (vec![1, 2], None));
    }

    #[test]
    fn unread_is_a_due_head_a_waiting_record_or_a_lag() {
        let mut d = DlqDrain::new(10);
        assert!(
            d.has_unread(0, (false, None), false),
            "lag not known: assume a backlog"
        );
        d.on_positions(20, 10);
        assert!(
            d.has_unread(0, (false, None), false),
            "nothing begun: reads from 10 < 20"
        );
        assert!(
            !d.has_unread(0, (false, Some(20)), true),
            "read up to the end"
        );
        assert!(
            d.has_unread(0, (true, Some(20)), false),
            "a record waits for the budget"
        );
        d.push(20, 500);
        assert!(
            !d.has_unread(499, (false, Some(21)), true),
            "the head is not due"
        );
        assert!(d.has_unread(500, (false, Some(21)), false));
        d.on_positions(30, 10);
        assert!(
            !d.has_unread(499, (false, Some(21)), false),
            "records not begun behind a head not due, all known: main p reads"
        );
        assert!(
            d.has_unread(499, (false, Some(21)), true),
            "some may be an earlier owner's: read them first"
        );
        assert_eq!(d.next(None), Some(10));
        assert_eq!(d.next(Some(21)), Some(21));
    }
}
