//! Ordering within a partition: which events may be in flight together.
//!
//! - `partition`: one event of the partition at a time (strict order).
//! - `key` (default): one event per Kafka key at a time, keys in parallel. Events
//!   without a key carry no ordering promise and go out at once.
//! - `unordered`: everything at once (bounded only by the in-flight limits).
//!
//! **Runs** (`ordered = true` on a batched route): in `key` and `partition`
//! mode the events waiting behind a lane's front may go out together as one
//! run — consecutive entries of the lane, of one [`RunGroup`] (one route), at
//! most its `max` — which delivery sends in offset order within one batch (or
//! batches one after the other). A lane has at most one run (or one event) in
//! flight; the next is released only once every event of the run finished.
//! An event in flight whose job vanished ([`Scheduler::again`]) goes out again
//! only once none of its run is still out: with the run's other such events,
//! in order.

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

/// Events that may share a run: those of one ordered route (`id`), at most
/// `max` per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunGroup {
    pub id: u32,
    pub max: u32,
}

/// What a lane releases when its events in flight finished.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// Nothing (the lane is empty, or part of its run is still in flight).
    Nothing,
    /// One event.
    One(i64),
    /// A run of two or more, in offset order.
    Run(Vec<i64>),
}

#[derive(Debug, Default)]
struct Lane {
    /// Waiting and in-flight offsets in order.
    queue: VecDeque<Entry>,
    /// How many of the front entries are in flight (unfinished).
    in_flight: usize,
}

#[derive(Debug)]
struct Entry {
    offset: i64,
    run: Option<RunGroup>,
    /// In flight, its job vanished: to be dispatched again.
    again: bool,
}

impl Lane {
    /// The in-flight entries to dispatch again, once all that are still in
    /// flight are.
    fn release_again(&mut self) -> Release {
        let front = self.queue.iter_mut().take(self.in_flight);
        let mut offsets = Vec::new();
        for e in front {
            if !e.again {
                return Release::Nothing;
            }
            offsets.push(e.offset);
        }
        for e in self.queue.iter_mut().take(self.in_flight) {
            e.again = false;
        }
        match offsets.len() {
            0 => Release::Nothing,
            1 => Release::One(offsets[0]),
            _ => Release::Run(offsets),
        }
    }
}

/// Per-partition lanes of waiting offsets. The front of a lane is in flight
/// (one offset, or a run); the rest wait behind it in offset order.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    mode: OrderingMode,
    lanes: HashMap<Vec<u8>, Lane>,
}

impl Scheduler {
    pub(crate) fn new(mode: OrderingMode) -> Self {
        Scheduler {
            mode,
            lanes: HashMap::new(),
        }
    }

    /// The lane of an event with `key`, as the key the lanes are found by
    /// (borrowed: a lookup allocates nothing; only a new lane copies it).
    fn lane<'k>(&self, key: Option<&'k [u8]>) -> Option<&'k [u8]> {
        match self.mode {
            OrderingMode::Unordered => None,
            OrderingMode::Partition => Some(&[]),
            OrderingMode::Key => key,
        }
    }

    /// Admits `offset` (offsets arrive in increasing order), of run group
    /// `run` if its route sends runs. Returns `true` when it may be dispatched
    /// now (alone), `false` when it waits behind its lane.
    pub(crate) fn admit(&mut self, key: Option<&[u8]>, offset: i64, run: Option<RunGroup>) -> bool {
        let Some(lane) = self.lane(key) else {
            return true;
        };
        let entry = Entry {
            offset,
            run,
            again: false,
        };
        let l = match self.lanes.get_mut(lane) {
            Some(l) => l,
            // The key is copied only for a new lane (lanes go once empty).
            None => self.lanes.entry(lane.to_vec()).or_default(),
        };
        l.queue.push_back(entry);
        if l.queue.len() == 1 {
            l.in_flight = 1;
            true
        } else {
            false
        }
    }

    /// Marks `offset` finished; returns what its lane may now dispatch: the
    /// next offset, or the next run once the whole run in flight finished.
    pub(crate) fn finish(&mut self, key: Option<&[u8]>, offset: i64) -> Release {
        let Some(lane) = self.lane(key) else {
            return Release::Nothing;
        };
        let Some(l) = self.lanes.get_mut(lane) else {
            return Release::Nothing;
        };
        match l.queue.iter().position(|e| e.offset == offset) {
            Some(pos) if pos < l.in_flight => {
                l.queue.remove(pos);
                l.in_flight -= 1;
            }
            Some(pos) => {
                // Not expected (only fronts are dispatched), but never leave a
                // stale entry.
                l.queue.remove(pos);
                return Release::Nothing;
            }
            None => return Release::Nothing,
        }
        if l.in_flight > 0 {
            return l.release_again();
        }
        let release = match l.queue.front() {
            None => {
                self.lanes.remove(lane);
                return Release::Nothing;
            }
            Some(Entry {
                offset, run: None, ..
            }) => Release::One(*offset),
            Some(&Entry {
                offset: first,
                run: Some(group),
                ..
            }) => {
                let max = (group.max as usize).max(1);
                let n = l
                    .queue
                    .iter()
                    .take(max)
                    .take_while(|e| e.run == Some(group))
                    .count();
                if n == 1 {
                    Release::One(first)
                } else {
                    Release::Run(l.queue.iter().take(n).map(|e| e.offset).collect())
                }
            }
        };
        l.in_flight = match &release {
            Release::Run(run) => run.len(),
            _ => 1,
        };
        release
    }

    /// `offset`, in flight, is to be dispatched again (its job vanished);
    /// returns what its lane may dispatch now: it and the others of its run
    /// to go again, once none of its run is still out.
    pub(crate) fn again(&mut self, key: Option<&[u8]>, offset: i64) -> Release {
        let Some(lane) = self.lane(key) else {
            return Release::One(offset);
        };
        let Some(l) = self.lanes.get_mut(lane) else {
            return Release::Nothing;
        };
        match l
            .queue
            .iter()
            .take(l.in_flight)
            .position(|e| e.offset == offset)
        {
            Some(pos) => {
                l.queue[pos].again = true;
                l.release_again()
            }
            None => Release::Nothing,
        }
    }

    /// Gives back the map's room once no lane is left (see
    /// `PartitionMachine::trim`).
    pub(crate) fn trim(&mut self) {
        if self.lanes.is_empty() {
            self.lanes = HashMap::new();
        }
    }

    /// Number of offsets waiting behind a lane's events in flight.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lanes
            .values()
            .map(|l| l.queue.len().saturating_sub(l.in_flight))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_mode_serialises_per_key() {
        let mut s = Scheduler::new(OrderingMode::Key);
        assert!(s.admit(Some(b"a"), 1, None));
        assert!(s.admit(Some(b"b"), 2, None));
        assert!(!s.admit(Some(b"a"), 3, None));
        assert!(!s.admit(Some(b"a"), 4, None));
        assert!(s.admit(None, 5, None));
        assert_eq!(s.waiting(), 2);
        assert_eq!(s.finish(Some(b"a"), 1), Release::One(3));
        assert_eq!(s.finish(Some(b"b"), 2), Release::Nothing);
        assert_eq!(s.finish(Some(b"a"), 3), Release::One(4));
        assert_eq!(s.finish(Some(b"a"), 4), Release::Nothing);
        assert_eq!(s.finish(None, 5), Release::Nothing);
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn partition_mode_is_one_lane() {
        let mut s = Scheduler::new(OrderingMode::Partition);
        assert!(s.admit(Some(b"a"), 1, None));
        assert!(!s.admit(Some(b"b"), 2, None));
        assert!(!s.admit(None, 3, None));
        assert_eq!(s.finish(Some(b"a"), 1), Release::One(2));
        assert_eq!(s.finish(Some(b"b"), 2), Release::One(3));
        assert_eq!(s.finish(None, 3), Release::Nothing);
    }

    #[test]
    fn unordered_admits_everything() {
        let mut s = Scheduler::new(OrderingMode::Unordered);
        assert!(s.admit(Some(b"a"), 1, None));
        assert!(s.admit(Some(b"a"), 2, None));
        assert_eq!(s.finish(Some(b"a"), 1), Release::Nothing);
    }

    const G: RunGroup = RunGroup { id: 0, max: 3 };

    #[test]
    fn a_lane_releases_a_run_of_its_group_once_the_front_finished() {
        let mut s = Scheduler::new(OrderingMode::Key);
        assert!(s.admit(Some(b"a"), 1, Some(G)));
        for o in 2..=6 {
            assert!(!s.admit(Some(b"a"), o, Some(G)));
        }
        assert!(!s.admit(Some(b"a"), 7, None));
        // At most `max` per run, in order.
        assert_eq!(s.finish(Some(b"a"), 1), Release::Run(vec![2, 3, 4]));
        // The next run waits for the whole run, finished in any order.
        assert_eq!(s.finish(Some(b"a"), 3), Release::Nothing);
        assert_eq!(s.finish(Some(b"a"), 2), Release::Nothing);
        assert_eq!(s.finish(Some(b"a"), 4), Release::Run(vec![5, 6]));
        assert_eq!(s.finish(Some(b"a"), 6), Release::Nothing);
        // An event of no run ends the run before it and goes alone.
        assert_eq!(s.finish(Some(b"a"), 5), Release::One(7));
        assert_eq!(s.finish(Some(b"a"), 7), Release::Nothing);
        assert_eq!(s.waiting(), 0);
        assert!(s.lanes.is_empty());
    }

    #[test]
    fn a_run_goes_again_once_none_of_it_is_out() {
        let mut s = Scheduler::new(OrderingMode::Key);
        assert!(s.admit(Some(b"a"), 1, Some(G)));
        for o in 2..=4 {
            assert!(!s.admit(Some(b"a"), o, Some(G)));
        }
        assert_eq!(s.finish(Some(b"a"), 1), Release::Run(vec![2, 3, 4]));
        // 2 and 4 vanished; 3 is still out.
        assert_eq!(s.again(Some(b"a"), 4), Release::Nothing);
        assert_eq!(s.again(Some(b"a"), 2), Release::Nothing);
        assert_eq!(s.finish(Some(b"a"), 3), Release::Run(vec![2, 4]));
        // All vanished: the last to be told releases them, in order.
        assert_eq!(s.again(Some(b"a"), 4), Release::Nothing);
        assert_eq!(s.again(Some(b"a"), 2), Release::Run(vec![2, 4]));
        assert_eq!(s.finish(Some(b"a"), 2), Release::Nothing);
        assert_eq!(s.again(Some(b"a"), 4), Release::One(4));
        assert_eq!(s.finish(Some(b"a"), 4), Release::Nothing);
        // Not in flight (or no lane): nothing; without a lane: itself.
        assert_eq!(s.again(Some(b"a"), 9), Release::Nothing);
        assert_eq!(s.again(None, 9), Release::One(9));
    }

    #[test]
    fn a_run_holds_one_group_only() {
        let other = RunGroup { id: 1, max: 3 };
        let mut s = Scheduler::new(OrderingMode::Partition);
        assert!(s.admit(Some(b"a"), 1, None));
        assert!(!s.admit(Some(b"b"), 2, Some(G)));
        assert!(!s.admit(Some(b"c"), 3, Some(other)));
        assert!(!s.admit(Some(b"c"), 4, Some(other)));
        assert_eq!(s.finish(Some(b"a"), 1), Release::One(2));
        assert_eq!(s.finish(Some(b"b"), 2), Release::Run(vec![3, 4]));
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
                if s.admit(Some(&[*k]), off as i64, None) {
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
                if let Release::One(next) = s.finish(Some(&[k]), off) {
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

        /// With runs: every offset is released once; a lane never has two
        /// releases in flight; each key's releases follow its offset order;
        /// a run holds consecutive entries of its lane, of one group, at most
        /// its `max`.
        #[test]
        fn runs_keep_each_lane_in_order(
            entries in proptest::collection::vec((0u8..3, proptest::option::of(0u32..2)), 1..120),
            max in 1u32..5,
            picks in proptest::collection::vec(any::<usize>(), 100),
        ) {
            let mut s = Scheduler::new(OrderingMode::Key);
            let group = |g: Option<u32>| g.map(|id| RunGroup { id, max });
            // In flight per key: the offsets of its release not yet finished.
            let mut in_flight: Vec<(u8, Vec<i64>)> = vec![];
            let mut released: Vec<(u8, Vec<i64>)> = vec![];
            for (off, (k, g)) in entries.iter().enumerate() {
                if s.admit(Some(&[*k]), off as i64, group(*g)) {
                    prop_assert!(!in_flight.iter().any(|(kk, _)| kk == k));
                    in_flight.push((*k, vec![off as i64]));
                    released.push((*k, vec![off as i64]));
                }
            }
            let mut i = 0;
            while !in_flight.is_empty() {
                let idx = picks[i % picks.len()] % in_flight.len();
                i += 1;
                let (k, offs) = &mut in_flight[idx];
                let k = *k;
                let off = offs.remove(picks[(i * 7) % picks.len()] % offs.len());
                let rest = offs.len();
                if rest == 0 {
                    in_flight.remove(idx);
                }
                let next = match s.finish(Some(&[k]), off) {
                    Release::Nothing => continue,
                    Release::One(o) => vec![o],
                    Release::Run(run) => {
                        prop_assert!(run.len() >= 2 && run.len() <= max as usize);
                        let g = entries[run[0] as usize].1;
                        prop_assert!(g.is_some());
                        prop_assert!(run.iter().all(|&o| entries[o as usize].1 == g));
                        run
                    }
                };
                prop_assert_eq!(rest, 0, "released while the run was in flight");
                prop_assert!(!in_flight.iter().any(|(kk, _)| *kk == k));
                in_flight.push((k, next.clone()));
                released.push((k, next));
            }
            let all: Vec<i64> = released.iter().flat_map(|(_, r)| r.iter().copied()).collect();
            prop_assert_eq!(all.len(), entries.len());
            for k in 0u8..3 {
                let offs: Vec<i64> = released.iter().filter(|(kk, _)| *kk == k).flat_map(|(_, r)| r.iter().copied()).collect();
                let lane: Vec<i64> = (0..entries.len() as i64).filter(|&o| entries[o as usize].0 == k).collect();
                // Released in lane order, so each run is consecutive in its lane.
                prop_assert_eq!(offs, lane);
            }
            prop_assert_eq!(s.waiting(), 0);
        }
    }
}
