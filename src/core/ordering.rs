//! Ordering within a partition: which events may be in flight together.
//!
//! - `partition`: one event of the partition at a time (strict order).
//! - `key` (default): one event per Kafka key at a time, keys in parallel. Events
//!   without a key carry no ordering promise and go out at once.
//! - `unordered`: everything at once (bounded only by the in-flight limits).

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OrderingMode {
    Partition,
    #[default]
    Key,
    Unordered,
}

/// Per-partition lanes of waiting offsets. The front of a lane is the offset in
/// flight; the rest wait behind it in offset order.
#[derive(Debug, Default)]
pub struct Scheduler {
    mode: OrderingMode,
    lanes: HashMap<Vec<u8>, VecDeque<i64>>,
}

impl Scheduler {
    pub fn new(mode: OrderingMode) -> Self {
        Scheduler {
            mode,
            lanes: HashMap::new(),
        }
    }

    fn lane(&self, key: Option<&[u8]>) -> Option<Vec<u8>> {
        match self.mode {
            OrderingMode::Unordered => None,
            OrderingMode::Partition => Some(Vec::new()),
            OrderingMode::Key => key.map(<[u8]>::to_vec),
        }
    }

    /// Admits `offset` (offsets arrive in increasing order). Returns `true` when it
    /// may be dispatched now, `false` when it waits behind its lane.
    pub fn admit(&mut self, key: Option<&[u8]>, offset: i64) -> bool {
        let Some(lane) = self.lane(key) else {
            return true;
        };
        let q = self.lanes.entry(lane).or_default();
        q.push_back(offset);
        q.len() == 1
    }

    /// Marks `offset` finished; returns the next offset of its lane that may now be
    /// dispatched.
    pub fn finish(&mut self, key: Option<&[u8]>, offset: i64) -> Option<i64> {
        let lane = self.lane(key)?;
        let q = self.lanes.get_mut(&lane)?;
        if q.front() == Some(&offset) {
            q.pop_front();
        } else if let Some(pos) = q.iter().position(|&o| o == offset) {
            // Not expected (only fronts are dispatched), but never leave a stale entry.
            q.remove(pos);
            return None;
        }
        let next = q.front().copied();
        if q.is_empty() {
            self.lanes.remove(&lane);
        }
        next
    }

    /// Gives back the map's room once no lane is left (see
    /// `PartitionMachine::trim`).
    pub fn trim(&mut self) {
        if self.lanes.is_empty() {
            self.lanes = HashMap::new();
        }
    }

    /// Number of offsets waiting behind a lane front.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.lanes.values().map(|q| q.len().saturating_sub(1)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_mode_serialises_per_key() {
        let mut s = Scheduler::new(OrderingMode::Key);
        assert!(s.admit(Some(b"a"), 1));
        assert!(s.admit(Some(b"b"), 2));
        assert!(!s.admit(Some(b"a"), 3));
        assert!(!s.admit(Some(b"a"), 4));
        assert!(s.admit(None, 5));
        assert_eq!(s.waiting(), 2);
        assert_eq!(s.finish(Some(b"a"), 1), Some(3));
        assert_eq!(s.finish(Some(b"b"), 2), None);
        assert_eq!(s.finish(Some(b"a"), 3), Some(4));
        assert_eq!(s.finish(Some(b"a"), 4), None);
        assert_eq!(s.finish(None, 5), None);
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn partition_mode_is_one_lane() {
        let mut s = Scheduler::new(OrderingMode::Partition);
        assert!(s.admit(Some(b"a"), 1));
        assert!(!s.admit(Some(b"b"), 2));
        assert!(!s.admit(None, 3));
        assert_eq!(s.finish(Some(b"a"), 1), Some(2));
        assert_eq!(s.finish(Some(b"b"), 2), Some(3));
        assert_eq!(s.finish(None, 3), None);
    }

    #[test]
    fn unordered_admits_everything() {
        let mut s = Scheduler::new(OrderingMode::Unordered);
        assert!(s.admit(Some(b"a"), 1));
        assert!(s.admit(Some(b"a"), 2));
        assert_eq!(s.finish(Some(b"a"), 1), None);
    }

    proptest! {
        /// In key mode, the dispatch order of each key equals its offset order, and
        /// at most one event per key is in flight.
        #[test]
        fn per_key_order(keys in proptest::collection::vec(0u8..4, 1..100), picks in proptest::collection::vec(any::<usize>(), 100)) {
            let mut s = Scheduler::new(OrderingMode::Key);
            let mut in_flight: Vec<(u8, i64)> = vec![];
            let mut dispatched: Vec<(u8, i64)> = vec![];
            for (off, k) in keys.iter().enumerate() {
                if s.admit(Some(&[*k]), off as i64) {
                    prop_assert!(!in_flight.iter().any(|(kk, _)| kk == k));
                    in_flight.push((*k, off as i64));
                    dispatched.push((*k, off as i64));
                }
            }
            let mut i = 0;
            while !in_flight.is_empty() {
                let idx = picks[i % picks.len()] % in_flight.len();
                i += 1;
                let (k, off) = in_flight.remove(idx);
                if let Some(next) = s.finish(Some(&[k]), off) {
                    prop_assert!(!in_flight.iter().any(|(kk, _)| *kk == k));
                    in_flight.push((k, next));
                    dispatched.push((k, next));
                }
            }
            prop_assert_eq!(dispatched.len(), keys.len());
            for k in 0u8..4 {
                let offs: Vec<i64> = dispatched.iter().filter(|(kk, _)| *kk == k).map(|(_, o)| *o).collect();
                let mut sorted = offs.clone();
                sorted.sort();
                prop_assert_eq!(offs, sorted);
            }
        }
    }
}
