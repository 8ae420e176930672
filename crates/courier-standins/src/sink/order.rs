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

use std::collections::HashMap;

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
}

impl KeyOrder {
    /// Books with room for `keys` keys.
    pub(super) fn with_capacity(keys: usize) -> KeyOrder {
        KeyOrder {
            last: super::BookMap::with_capacity_and_hasher(keys, Default::default()),
            accepted: super::BookMap::with_capacity_and_hasher(keys, Default::default()),
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

#[cfg(test)]
mod tests {
    use super::*;

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
