//! The per-key order check: does the API see each key's events in the order
//! they were produced?
//!
//! Courier's load generator (`loadgen::event_json`) puts the event's
//! key and a per-run sequence number in its `data`: `"data": {"key": "key-3",
//! "seq": 17, …}` (the key is also the CloudEvent `subject`). Per key, the
//! stand-in remembers the highest `seq` delivered so far; a **first** delivery
//! of an id (a duplicate is not a new position) whose `seq` is below it is an
//! order violation. DLQ redeliveries (`Courier-Redelivery`) are left out: a
//! replay comes after its key moved on by design. Events without a string key
//! (`data.key`, else `subject`) and an integer `data.seq` are not checked.
//!
//! The **last writes** check is the promise of `ordered = true` (a key's
//! events share batches; from the first one tried again, the rest is sent
//! again): per key, the *last* acceptance of each `seq` must come in `seq`
//! order — what an API applying every accepted item (last write wins) ends
//! with. A first acceptance may come early there (a later event accepted in
//! the batch where an earlier one failed), and is not counted against it.
//!
//! The **stale writes** check is what an API that applies each write per key
//! sees (issue 54): per key, the highest `seq` applied so far; the first 2xx
//! of an id — a DLQ redelivery included, it is a write like any other — whose
//! `seq` is below it is a *stale write* (the key's value goes back in time).
//! An id written again is a duplicate (`Audit::duplicates`), never stale.
//! Courier promises none: no event is sent while an earlier event of its key
//! (and destination) is unfinished or in the DLQ.
//!
//! **Keeping order within a request** ([`fail_followers`], with
//! `Behaviour::keep_key_order`): an API that applies a batch's items in order
//! and refuses an item does not apply that key's later items of the request
//! either; it answers them [`FOLLOWS_FAILED`].

use std::collections::HashMap;

use axum::http::StatusCode;

/// At most this many violations are described in the audit.
const EXAMPLES: usize = 20;

/// An event's key and sequence number, as the load generator writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mark {
    pub key: String,
    pub seq: u64,
}

/// The per-key books: the highest sequence number delivered per key.
#[derive(Debug, Default)]
pub(super) struct KeyOrder {
    last: super::BookMap<u64>,
    /// First deliveries that carried a [`Mark`] (so "no violations" is not vacuous).
    pub checked: u64,
    pub violations: u64,
    /// The first [`EXAMPLES`] violations, described.
    pub examples: Vec<String>,
    /// Per key, every acceptance (`seq`, its number among all acceptances).
    accepted: super::BookMap<Vec<(u64, u64)>>,
    accepted_n: u64,
    /// The stale-writes check: the highest `seq` applied per key, DLQ
    /// redeliveries included.
    latest: super::BookMap<u64>,
    /// First writes that carried a [`Mark`], redeliveries included.
    pub writes_checked: u64,
    pub stale_writes: u64,
    /// The first [`EXAMPLES`] stale writes, described.
    pub stale_examples: Vec<String>,
}

impl KeyOrder {
    /// Books with room for `keys` keys.
    pub(super) fn with_capacity(keys: usize) -> KeyOrder {
        KeyOrder {
            last: super::BookMap::with_capacity_and_hasher(keys, Default::default()),
            accepted: super::BookMap::with_capacity_and_hasher(keys, Default::default()),
            latest: super::BookMap::with_capacity_and_hasher(keys, Default::default()),
            ..KeyOrder::default()
        }
    }

    /// Books an acceptance (a 2xx, first or again) of an event at `mark`.
    pub(super) fn accepted(&mut self, mark: &Mark) {
        self.accepted_n += 1;
        let n = self.accepted_n;
        match self.accepted.get_mut(&mark.key) {
            Some(v) => v.push((mark.seq, n)),
            None => {
                self.accepted.insert(mark.key.clone(), vec![(mark.seq, n)]);
            }
        }
    }

    /// Keys whose last writes are out of `seq` order, and the first few
    /// described (`key: seq s last accepted before seq t`).
    pub(super) fn last_write_violations(&self) -> (u64, Vec<String>) {
        let mut keys = 0;
        let mut examples = Vec::new();
        for (key, all) in &self.accepted {
            let mut last: HashMap<u64, u64> = HashMap::with_capacity(all.len());
            for &(seq, n) in all {
                last.insert(seq, n);
            }
            let mut by_seq: Vec<(u64, u64)> = last.into_iter().collect();
            by_seq.sort_unstable();
            if let Some(w) = by_seq.windows(2).find(|w| w[1].1 < w[0].1) {
                keys += 1;
                if examples.len() < EXAMPLES {
                    examples.push(format!(
                        "{key}: seq {} last accepted before seq {}",
                        w[1].0, w[0].0
                    ));
                }
            }
        }
        (keys, examples)
    }

    /// Books the first write (first 2xx) of `id` at `mark`, a DLQ
    /// redelivery (`redelivery`) or not: stale when its key has seen a later
    /// `seq` applied.
    pub(super) fn first_write(&mut self, id: &str, mark: &Mark, redelivery: bool) {
        self.writes_checked += 1;
        match self.latest.get_mut(&mark.key) {
            Some(latest) if mark.seq < *latest => {
                self.stale_writes += 1;
                if self.stale_examples.len() < EXAMPLES {
                    self.stale_examples.push(format!(
                        "{}: {id} (seq {}{}) written after seq {}",
                        mark.key,
                        mark.seq,
                        if redelivery { ", a DLQ redelivery" } else { "" },
                        latest
                    ));
                }
            }
            Some(latest) => *latest = mark.seq,
            None => {
                self.latest.insert(mark.key.clone(), mark.seq);
            }
        }
    }

    /// Books the first delivery of `id` at `mark`.
    pub(super) fn first_delivery(&mut self, id: &str, mark: &Mark) {
        self.checked += 1;
        match self.last.get_mut(&mark.key) {
            Some(last) if mark.seq < *last => {
                self.violations += 1;
                if self.examples.len() < EXAMPLES {
                    self.examples.push(format!(
                        "{}: {id} (seq {}) after seq {}",
                        mark.key, mark.seq, last
                    ));
                }
            }
            Some(last) => *last = mark.seq,
            None => {
                self.last.insert(mark.key.clone(), mark.seq);
            }
        }
    }
}

/// What an API keeping each key's order answers an item that follows a
/// failed item of its key in the same request: not applied, try again.
pub(super) const FOLLOWS_FAILED: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

/// An API keeping each key's order: each item after a failed item of its key
/// (`marks` and `statuses` side by side, in the request's order) is not
/// applied either and is answered [`FOLLOWS_FAILED`]. Items without a mark
/// are left as they are. Returns how many were held back.
pub(super) fn fail_followers(marks: &[Option<Mark>], statuses: &mut [StatusCode]) -> u64 {
    let mut failed: Vec<&str> = Vec::new();
    let mut held = 0;
    for (mark, status) in marks.iter().zip(statuses.iter_mut()) {
        let Some(mark) = mark else { continue };
        if failed.contains(&mark.key.as_str()) {
            if status.is_success() {
                *status = FOLLOWS_FAILED;
                held += 1;
            }
        } else if !status.is_success() {
            failed.push(&mark.key);
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(key: &str, seq: u64) -> Mark {
        Mark {
            key: key.into(),
            seq,
        }
    }

    #[test]
    fn a_first_write_below_its_keys_latest_is_stale_redeliveries_included() {
        let mut o = KeyOrder::default();
        o.first_write("a-2", &m("a", 2), false);
        o.first_write("b-1", &m("b", 1), false);
        // a-1 went round the DLQ and comes back after a-2: stale.
        o.first_write("a-1", &m("a", 1), true);
        o.first_write("a-3", &m("a", 3), false);
        o.first_write("b-0", &m("b", 0), false);
        assert_eq!((o.writes_checked, o.stale_writes), (5, 2));
        assert_eq!(
            o.stale_examples,
            [
                "a: a-1 (seq 1, a DLQ redelivery) written after seq 2",
                "b: b-0 (seq 0) written after seq 1"
            ]
        );
    }

    #[test]
    fn an_item_after_a_failed_item_of_its_key_is_held_back() {
        let ok = StatusCode::OK;
        let bad = StatusCode::BAD_REQUEST;
        let marks = [
            Some(m("a", 1)),
            Some(m("b", 2)),
            Some(m("a", 3)),
            None,
            Some(m("a", 5)),
            Some(m("b", 6)),
            Some(m("c", 7)),
        ];
        let mut statuses = [ok, ok, bad, ok, ok, ok, ok];
        assert_eq!(fail_followers(&marks, &mut statuses), 1);
        assert_eq!(statuses, [ok, ok, bad, ok, FOLLOWS_FAILED, ok, ok]);
        let mut statuses = [bad, bad, ok, ok, ok, ok, ok];
        assert_eq!(fail_followers(&marks, &mut statuses), 3);
        assert_eq!(
            statuses,
            [
                bad,
                bad,
                FOLLOWS_FAILED,
                ok,
                FOLLOWS_FAILED,
                FOLLOWS_FAILED,
                ok
            ]
        );
    }

    #[test]
    fn a_first_delivery_below_its_keys_highest_seq_is_a_violation() {
        let m = |key: &str, seq| Mark {
            key: key.into(),
            seq,
        };
        let mut o = KeyOrder::default();
        o.first_delivery("a-1", &m("a", 1));
        o.first_delivery("b-5", &m("b", 5));
        o.first_delivery("a-3", &m("a", 3));
        o.first_delivery("a-2", &m("a", 2));
        o.first_delivery("a-4", &m("a", 4));
        assert_eq!((o.checked, o.violations), (5, 1));
        assert_eq!(o.examples, ["a: a-2 (seq 2) after seq 3"]);
    }

    #[test]
    fn last_writes_out_of_seq_order_are_a_violation_an_early_first_is_not() {
        let m = |key: &str, seq| Mark {
            key: key.into(),
            seq,
        };
        let mut o = KeyOrder::default();
        // a: 3 accepted before 2, then again after it (an ordered run's
        // resend): the last writes are in order.
        for seq in [1, 3, 2, 3, 4] {
            o.accepted(&m("a", seq));
        }
        assert_eq!(o.last_write_violations().0, 0);
        // b: 2 accepted after 3, and 3 never again.
        for seq in [1, 3, 2] {
            o.accepted(&m("b", seq));
        }
        assert_eq!(
            o.last_write_violations(),
            (1, vec!["b: seq 3 last accepted before seq 2".to_string()])
        );
    }
}
