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
    last: HashMap<String, u64>,
    /// First deliveries that carried a [`Mark`] (so "no violations" is not vacuous).
    pub checked: u64,
    pub violations: u64,
    /// The first [`EXAMPLES`] violations, described.
    pub examples: Vec<String>,
}

impl KeyOrder {
    /// Books the first delivery of `id` at `mark`.
    pub fn first_delivery(&mut self, id: &str, mark: &Mark) {
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
}
