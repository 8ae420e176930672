//! The machine with two destinations (`outage`, I38): one down while the
//! other is up holds out, then diverts, its own events only.

use super::tests::*;
use super::*;
use crate::core::destination::{DestSet, DestinationId};

const X: DestinationId = DestinationId(1);

fn rec(offset: i64, key: u8, dest: u8) -> Rec {
    Rec {
        dest,
        ..Rec::main(offset, Some(key))
    }
}

fn two_destinations(limit: usize) -> T {
    let mut s = settings(OrderingMode::Key, limit, 100);
    s.destinations = DestSet::first(2);
    let mut t = T::new(s);
    t.normal();
    t
}

/// DLQ record `offset`: the envelope of main `origin` (key `key`, to X).
fn envelope(offset: i64, origin: i64, key: u8) -> Rec {
    Rec {
        key: Some(key),
        dest: 1,
        origin: Some(origin),
        ..Rec::dlq(offset, 0)
    }
}

fn dlq_of(fx: &[Effect<Rec>]) -> Vec<i64> {
    dispatched(fx)
        .into_iter()
        .filter(|(src, _)| *src == Src::Dlq)
        .map(|(_, o)| o)
        .collect()
}

fn down(x: bool) -> Input<Rec> {
    let mut down = DestSet::default();
    if x {
        down.insert(X);
    }
    Input::Verdict { down }
}

fn diverted<I>(fx: &[Effect<I>]) -> Vec<i64> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Divert { offset, .. } => Some(*offset),
            _ => None,
        })
        .collect()
}

fn main_of(fx: &[Effect<Rec>]) -> Vec<i64> {
    dispatched(fx)
        .into_iter()
        .filter(|(src, _)| *src == Src::Main)
        .map(|(_, o)| o)
        .collect()
}

fn dead_lettered(t: &mut T, offsets: &[i64]) -> Vec<Effect<Rec>> {
    let reports = offsets
        .iter()
        .map(|&offset| Report {
            generation: GEN,
            src: Src::Main,
            offset,
            finished: Some(Finished::DeadLettered {
                reason: "destination_unavailable".into(),
            }),
        })
        .collect();
    t.feed(Input::Reports(reports))
}

#[test]
fn a_down_destination_is_held_out_then_diverted() {
    let mut t = two_destinations(100);
    let fx = t.feed(Input::Records(vec![rec(0, 1, 0), rec(1, 1, 1)]));
    assert_eq!(
        main_of(&fx),
        vec![0, 1],
        "one key, two destinations: two lanes"
    );
    t.done(Src::Main, &[0, 1]);

    let fx = t.feed(down(true));
    assert_eq!(t.m.mode(), Mode::Normal, "the other destination is up");
    let hold = fx.iter().find_map(|e| match e {
        Effect::Schedule {
            after,
            timer: Timer::Hold { destination, epoch },
        } => Some((*after, *destination, *epoch)),
        _ => None,
    });
    assert_eq!(hold, Some((Duration::from_secs(30), X, 1)));
    // X's event is held out; the same key's event to the other goes.
    let fx = t.feed(Input::Records(vec![
        rec(2, 1, 1),
        rec(3, 1, 0),
        rec(4, 2, 1),
    ]));
    assert_eq!(main_of(&fx), vec![3]);
    assert!(diverted(&fx).is_empty());
    t.done(Src::Main, &[3]);

    // The outage outlasts the hold: X's held-out events go to the DLQ.
    let fx = t.feed_at(
        30_000,
        Input::Timer(Timer::Hold {
            destination: X,
            epoch: 1,
        }),
    );
    assert_eq!(diverted(&fx), vec![2, 4]);
    // A key's next X event follows once the one before is in the DLQ.
    let fx = t.feed(Input::Records(vec![rec(5, 1, 1)]));
    assert!(diverted(&fx).is_empty(), "behind 2 in its lane");
    let fx = dead_lettered(&mut t, &[2]);
    assert_eq!(diverted(&fx), vec![5]);
    dead_lettered(&mut t, &[4, 5]);

    // X is back: its envelopes (of 2, 4, 5) are drained while main p is
    // read. A key with nothing in the DLQ goes at once; key 1 waits for
    // its envelopes.
    t.feed(down(false));
    assert_eq!(t.m.mode(), Mode::DrainAlongside);
    let fx = t.feed(Input::Records(vec![rec(6, 3, 1), rec(7, 1, 1)]));
    assert_eq!((main_of(&fx), diverted(&fx)), (vec![6], vec![]));
    let fx = t.feed(Input::Records(vec![
        envelope(0, 2, 1),
        envelope(1, 4, 2),
        envelope(2, 5, 1),
    ]));
    assert_eq!(
        dlq_of(&fx),
        vec![0, 1],
        "the drain redelivers them, key 1's one at a time"
    );
    let fx = t.done(Src::Dlq, &[0, 1]);
    assert_eq!(dlq_of(&fx), vec![2]);
    assert!(main_of(&fx).is_empty(), "5 is still in the DLQ");
    let fx = t.done(Src::Dlq, &[2]);
    assert_eq!(
        main_of(&fx),
        vec![7],
        "key 1's envelopes are out of the DLQ"
    );
    t.done(Src::Main, &[6, 7]);
    let stored = t.store_timer();
    assert!(
        stored.contains(&(Src::Main, 8)),
        "every offset finished: {stored:?}"
    );
    assert!(stored.contains(&(Src::Dlq, 3)), "{stored:?}");
    // Two lag checks after the last divert, the DLQ drained: X is no longer
    // diverted, and nothing waits behind the DLQ.
    t.dlq_high(3);
    assert_eq!(
        t.m.mode(),
        Mode::DrainAlongside,
        "one lag check may predate a write"
    );
    t.dlq_high(3);
    assert_eq!(t.m.mode(), Mode::Normal);
}

#[test]
fn a_destination_back_before_its_hold_sends_what_it_held_out() {
    let mut t = two_destinations(100);
    t.feed(Input::Records(vec![rec(0, 1, 0)]));
    t.done(Src::Main, &[0]);
    t.feed(down(true));
    let fx = t.feed(Input::Records(vec![rec(1, 1, 1), rec(2, 2, 1)]));
    assert!(main_of(&fx).is_empty());
    let fx = t.feed_at(5_000, down(false));
    assert_eq!(main_of(&fx), vec![1, 2]);
    // The first outage's timer comes late: nothing is diverted.
    let fx = t.feed_at(
        30_000,
        Input::Timer(Timer::Hold {
            destination: X,
            epoch: 1,
        }),
    );
    assert!(diverted(&fx).is_empty() && main_of(&fx).is_empty());
}

#[test]
fn a_destination_holding_half_the_partition_is_diverted() {
    let mut t = two_destinations(10);
    t.feed(Input::Records(vec![rec(0, 1, 0)]));
    t.done(Src::Main, &[0]);
    t.feed(down(true));
    // Keys 1..=4: four held out; the fifth X event reaches half of 10.
    let fx = t.feed(Input::Records((1..5).map(|o| rec(o, o as u8, 1)).collect()));
    assert!(diverted(&fx).is_empty());
    let fx = t.feed(Input::Records(vec![rec(5, 5, 1)]));
    assert_eq!(diverted(&fx), vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_destination_holding_half_the_byte_budget_is_diverted() {
    let mut s = settings(OrderingMode::Key, 100, 100);
    s.destinations = DestSet::first(2);
    s.budget = Arc::new(ByteBudget::new(1_000));
    let mut t = T::new(s);
    t.normal();
    t.feed(down(true));
    // Records of 100 bytes: four held out (400 bytes); the fifth reaches
    // half of the budget, far below half of the partition's 100 events.
    let fx = t.feed(Input::Records((1..5).map(|o| rec(o, o as u8, 1)).collect()));
    assert!(diverted(&fx).is_empty());
    let fx = t.feed(Input::Records(vec![rec(5, 5, 1)]));
    assert_eq!(diverted(&fx), vec![1, 2, 3, 4, 5]);
}

#[test]
fn every_destination_down_pauses_and_holds_nothing_out() {
    // A route takes every type to X: api.url's destination is unreachable.
    let mut s = settings(OrderingMode::Key, 100, 100);
    let mut only_x = DestSet::default();
    only_x.insert(X);
    s.destinations = only_x;
    let mut t = T::new(s);
    t.normal();
    t.feed(Input::Records(vec![rec(0, 1, 1)]));
    t.done(Src::Main, &[0]);
    t.feed(down(true));
    assert_eq!(t.m.mode(), Mode::Paused, "its only destination is down");
    let fx = t.feed_at(
        30_000,
        Input::Timer(Timer::Hold {
            destination: X,
            epoch: 1,
        }),
    );
    assert!(diverted(&fx).is_empty());
    t.feed_at(31_000, down(false));
    let fx = t.feed(Input::Records(vec![rec(1, 1, 1)]));
    assert_eq!(main_of(&fx), vec![1], "back: sent, not diverted");
}

#[test]
fn a_key_dead_lettered_holds_its_later_events_to_that_destination() {
    let mut t = two_destinations(100);
    let fx = t.feed(Input::Records(vec![
        rec(0, 1, 1),
        rec(1, 1, 1),
        rec(2, 2, 1),
        rec(3, 1, 0),
    ]));
    assert_eq!(main_of(&fx), vec![0, 2, 3]);
    // Its tries spent, 0 goes to the DLQ (X is up): 1, the same key's next
    // event to X, waits behind it; other keys and destinations go on, and
    // the DLQ drains alongside.
    let fx = dead_lettered(&mut t, &[0]);
    assert_eq!((main_of(&fx), diverted(&fx)), (vec![], vec![]));
    assert_eq!(t.m.mode(), Mode::DrainAlongside);
    let fx = t.feed(Input::Records(vec![rec(4, 3, 1), rec(5, 4, 0)]));
    assert_eq!(main_of(&fx), vec![4, 5]);
    let fx = t.feed(Input::Records(vec![envelope(0, 0, 1)]));
    assert_eq!(dlq_of(&fx), vec![0]);
    let fx = t.done(Src::Dlq, &[0]);
    assert_eq!(main_of(&fx), vec![1], "redelivered: the key goes on");
}

#[test]
fn with_one_destination_the_dlq_drains_before_main_p_reads_on() {
    let mut t = T::new(settings(OrderingMode::Key, 100, 100));
    t.normal();
    t.feed(Input::Records(vec![rec(0, 1, 0), rec(1, 1, 0)]));
    dead_lettered(&mut t, &[0]);
    t.dlq_high(1);
    assert_eq!(t.m.mode(), Mode::DrainDlq, "as degraded mode always did");
}

mod interleavings {
    //! Random interleavings of records (two destinations, a few keys),
    //! verdicts, answers (delivered or dead-lettered, main and DLQ), reads
    //! of DLQ p, hold timers and lag checks. Checked after every input:
    //! nothing is sent to a destination while it is down, nothing goes out
    //! at all while both are; one event per key and destination out at a
    //! time; a key's event is never sent while an earlier event of its key
    //! and destination has an envelope in the DLQ (written, not yet
    //! redelivered); and, once both are up and everything is answered,
    //! every record of both sides is done (nothing held for ever).

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone)]
    enum Step {
        Feed(Vec<(u8, u8)>),
        Down(bool, bool),
        Answer { pick: usize, dead: bool },
        ReadDlq(usize),
        HoldTimers,
        LagCheck,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => prop::collection::vec((0u8..3, 0u8..2), 1..4).prop_map(Step::Feed),
            2 => (prop::bool::weighted(0.4), prop::bool::weighted(0.2)).prop_map(|(x, d)| Step::Down(x, d)),
            5 => (any::<usize>(), prop::bool::weighted(0.2)).prop_map(|(pick, dead)| Step::Answer { pick, dead }),
            2 => (1usize..4).prop_map(Step::ReadDlq),
            1 => Just(Step::HoldTimers),
            2 => Just(Step::LagCheck),
        ]
    }

    struct World {
        t: T,
        next: i64,
        /// Main offset → (key, destination).
        recs: BTreeMap<i64, (u8, u8)>,
        /// DLQ p: each envelope's main offset, in order.
        dlq: Vec<i64>,
        /// DLQ records fed to the machine so far.
        dlq_read: usize,
        /// Out (sent or diverted), not answered: (side, offset) → diverted.
        out: BTreeMap<(Src, i64), bool>,
        done: BTreeSet<(Src, i64)>,
        down: DestSet,
        /// Envelopes in the DLQ not redelivered, per (key, destination).
        in_dlq: BTreeMap<(u8, u8), usize>,
        /// Hold timers asked for: (destination, epoch).
        timers: Vec<(DestinationId, u32)>,
        /// A wake-up asked for (the end of a dwell in `Paused`).
        wake: bool,
    }

    impl World {
        fn new() -> World {
            let mut s = settings(OrderingMode::Key, 12, 100);
            s.destinations = DestSet::first(2);
            let mut t = T::new(s);
            t.normal();
            World {
                t,
                next: 0,
                recs: BTreeMap::new(),
                dlq: Vec::new(),
                dlq_read: 0,
                out: BTreeMap::new(),
                done: BTreeSet::new(),
                down: DestSet::default(),
                in_dlq: BTreeMap::new(),
                timers: Vec::new(),
                wake: false,
            }
        }

        /// (key, destination) of a record of either side.
        fn of(&self, src: Src, offset: i64) -> (u8, u8) {
            match src {
                Src::Main => self.recs[&offset],
                Src::Dlq => self.recs[&self.dlq[offset as usize]],
            }
        }

        fn feed(&mut self, input: Input<Rec>) -> Result<(), TestCaseError> {
            let fx = self.t.feed(input);
            for e in fx {
                let (src, offset, diverted) = match e {
                    Effect::Dispatch { src, offset, .. } => (src, offset, false),
                    Effect::Divert { src, offset, .. } => (src, offset, true),
                    Effect::DispatchRun { .. } => {
                        prop_assert!(false, "no runs here");
                        unreachable!()
                    }
                    Effect::Schedule {
                        timer: Timer::Hold { destination, epoch },
                        ..
                    } => {
                        self.timers.push((destination, epoch));
                        continue;
                    }
                    Effect::Schedule {
                        timer: Timer::Wake, ..
                    } => {
                        self.wake = true;
                        continue;
                    }
                    _ => continue,
                };
                let (key, dest) = self.of(src, offset);
                let d = DestinationId(dest);
                prop_assert!(
                    !self.out.contains_key(&(src, offset)),
                    "{:?} {} out twice",
                    src,
                    offset
                );
                prop_assert!(
                    !self.done.contains(&(src, offset)),
                    "{:?} {} out after done",
                    src,
                    offset
                );
                prop_assert!(
                    self.down != DestSet::first(2),
                    "{:?} {} out while every destination is down",
                    src,
                    offset
                );
                prop_assert!(
                    src == Src::Main || !diverted,
                    "DLQ record {} diverted",
                    offset
                );
                if !diverted {
                    prop_assert!(
                        !self.down.contains(d),
                        "{:?} {} sent to a destination that is down",
                        src,
                        offset
                    );
                }
                if src == Src::Main && !diverted {
                    prop_assert!(
                        self.in_dlq.get(&(key, dest)).copied().unwrap_or(0) == 0,
                        "{} sent while an earlier event of its key is in the DLQ",
                        offset
                    );
                }
                if src == Src::Main {
                    for &(s, o) in self.out.keys() {
                        prop_assert!(
                            s != Src::Main || self.recs[&o] != (key, dest),
                            "{} out beside {} of its lane",
                            offset,
                            o
                        );
                    }
                    for (&o, &kd) in &self.recs {
                        if o < offset && kd == (key, dest) {
                            prop_assert!(
                                self.done.contains(&(Src::Main, o)),
                                "{} out before {} of its lane",
                                offset,
                                o
                            );
                        }
                    }
                }
                self.out.insert((src, offset), diverted);
            }
            Ok(())
        }

        fn answer(&mut self, src: Src, offset: i64, dead: bool) -> Result<(), TestCaseError> {
            let Some(diverted) = self.out.remove(&(src, offset)) else {
                return Ok(());
            };
            let kd = self.of(src, offset);
            let origin = match src {
                Src::Main => offset,
                Src::Dlq => self.dlq[offset as usize],
            };
            let finished = if diverted || dead {
                // A new envelope (a DLQ record's again, with its origin).
                self.dlq.push(origin);
                if src == Src::Main {
                    *self.in_dlq.entry(kd).or_default() += 1;
                }
                Finished::DeadLettered { reason: "x".into() }
            } else {
                if src == Src::Dlq {
                    let n = self.in_dlq.entry(kd).or_default();
                    *n = n.saturating_sub(1);
                }
                Finished::Delivered
            };
            self.done.insert((src, offset));
            self.feed(Input::Reports(vec![Report {
                generation: GEN,
                src,
                offset,
                finished: Some(finished),
            }]))
        }

        fn read_dlq(&mut self, n: usize) -> Result<(), TestCaseError> {
            let end = (self.dlq_read + n).min(self.dlq.len());
            let recs: Vec<Rec> = (self.dlq_read..end)
                .map(|i| {
                    let origin = self.dlq[i];
                    let (key, dest) = self.recs[&origin];
                    Rec {
                        key: Some(key),
                        dest,
                        origin: Some(origin),
                        ..Rec::dlq(i as i64, 0)
                    }
                })
                .collect();
            self.dlq_read = end;
            if recs.is_empty() {
                return Ok(());
            }
            self.feed(Input::Records(recs))
        }

        fn run(&mut self, s: Step) -> Result<(), TestCaseError> {
            match s {
                Step::Feed(recs) => {
                    let mut v = Vec::new();
                    for (key, dest) in recs {
                        self.recs.insert(self.next, (key, dest));
                        v.push(rec(self.next, key, dest));
                        self.next += 1;
                    }
                    self.feed(Input::Records(v))
                }
                Step::Down(x, default) => {
                    let mut down = DestSet::default();
                    if x {
                        down.insert(X);
                    }
                    if default {
                        down.insert(DestinationId::DEFAULT);
                    }
                    self.down = down;
                    self.feed(Input::Verdict { down })
                }
                Step::Answer { pick, dead } => {
                    let Some(&(src, o)) = self.out.keys().nth(pick % self.out.len().max(1)) else {
                        return Ok(());
                    };
                    self.answer(src, o, dead)
                }
                Step::ReadDlq(n) => self.read_dlq(n),
                Step::HoldTimers => {
                    self.t.ms += 30_000;
                    if std::mem::take(&mut self.wake) {
                        self.feed(Input::Timer(Timer::Wake))?;
                    }
                    for (destination, epoch) in std::mem::take(&mut self.timers) {
                        self.feed(Input::Timer(Timer::Hold { destination, epoch }))?;
                    }
                    Ok(())
                }
                Step::LagCheck => self.feed(Input::Positions(Positions {
                    main_high: None,
                    dlq_high: self.dlq.len() as i64,
                    dlq_start: 0,
                })),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn destinations_hold_divert_and_keep_order(steps in prop::collection::vec(step(), 1..80)) {
            let mut w = World::new();
            for s in steps {
                w.run(s)?;
            }
            // Both up; everything answered (delivered), DLQ p read, timers
            // and lag checks come: every record of both sides is done.
            w.run(Step::Down(false, false))?;
            for _ in 0..400 {
                if w.out.is_empty() {
                    w.run(Step::ReadDlq(100))?;
                    w.run(Step::LagCheck)?;
                    w.run(Step::HoldTimers)?;
                    if w.out.is_empty() {
                        break;
                    }
                }
                let (src, o) = *w.out.keys().next().expect("one out");
                w.answer(src, o, false)?;
            }
            let undone: Vec<i64> = (0..w.next).filter(|o| !w.done.contains(&(Src::Main, *o))).collect();
            prop_assert!(undone.is_empty(), "never done: {:?}", undone);
            let dlq_undone: Vec<usize> =
                (0..w.dlq.len()).filter(|&o| !w.done.contains(&(Src::Dlq, o as i64))).collect();
            prop_assert!(dlq_undone.is_empty(), "DLQ records never done: {:?}", dlq_undone);
        }
    }
}
