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
    dispatched(fx).into_iter().map(|(_, o)| o).collect()
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

    // X is back, but its envelopes wait in the DLQ: the partition drains it
    // (main p waits), and X's events begun meanwhile follow them.
    t.feed(down(false));
    assert_eq!(t.m.mode(), Mode::DrainDlq);
    let fx = t.feed(Input::Records(vec![rec(6, 3, 1)]));
    assert_eq!(diverted(&fx), vec![6]);
    dead_lettered(&mut t, &[6]);
    // Two lag checks after the last divert, the DLQ drained: X is sent to again.
    t.dlq_high(0);
    assert_eq!(
        t.m.mode(),
        Mode::DrainDlq,
        "one lag check may predate the last write"
    );
    t.dlq_high(0);
    assert_eq!(t.m.mode(), Mode::Normal);
    let fx = t.feed(Input::Records(vec![rec(7, 3, 1)]));
    assert_eq!((main_of(&fx), diverted(&fx)), (vec![7], vec![]));
    t.done(Src::Main, &[7]);
    assert_eq!(
        t.store_timer(),
        vec![(Src::Main, 8)],
        "every offset finished"
    );
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
    // event to X, follows it there; other keys and destinations go on.
    let fx = dead_lettered(&mut t, &[0]);
    assert_eq!((main_of(&fx), diverted(&fx)), (vec![], vec![1]));
    let divert_why = fx.iter().find_map(|e| match e {
        Effect::Divert { why, .. } => Some(*why),
        _ => None,
    });
    assert_eq!(
        divert_why,
        Some(crate::core::destination::Diverted::BehindDlq)
    );
    let fx = t.feed(Input::Records(vec![rec(4, 3, 1), rec(5, 4, 0)]));
    assert_eq!(main_of(&fx), vec![4, 5]);
}
