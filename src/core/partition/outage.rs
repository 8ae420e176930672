//! [`Outage`]: what the partition does with the events of a destination
//! (`core::destination`) that is down while the partition is not paused
//! (another destination of its events is up).
//!
//! # Invariant I38: one destination's outage is that destination's alone
//!
//! *Enforced in* `core::destination` (the partition's verdict from the
//! destinations'), here, `core::partition::lanes` (lanes per key and
//! destination; the dispatch this part routes) and the delivery side (a
//! dispatcher, breaker, marker and limits per destination). While
//! destination X is down:
//!
//! - an X event whose turn comes is **held out**: kept, not dispatched (the
//!   other destinations' events keep going out); X coming back dispatches
//!   them, in the order their lanes released them;
//! - once the outage outlasts `degraded.destination_hold`, or X holds half of
//!   `max_in_flight_per_partition` events of the partition, X is
//!   **diverted**: its held-out events and every X event whose turn comes
//!   later go to the DLQ ([`Route::Divert`], reason `destination_unavailable`,
//!   no try used), so a long outage does not fill the partition's room and
//!   stall the others. A key's next X event is released only once the one
//!   before it is in the DLQ, and a diverting destination's events go on
//!   into the DLQ after X is back, until the DLQ is drained (two lag checks
//!   after the last divert finished, nothing of DLQ p unread or held; main p
//!   waits meanwhile: [`Outage::awaits_drain`]): order per key and
//!   destination holds;
//! - with one destination (or when every destination of the partition is
//!   down) the partition pauses instead, as degraded mode always did:
//!   nothing is held out, nothing diverted.
//!
//! *Tested by* the unit tests below, the machine's tests
//! (`tests::a_down_destination_is_held_out_then_diverted`) and
//! `tests/destinations.rs`.

use super::{Effect, Src, Timer};
use crate::core::destination::Diverted;
use crate::core::destination::{
    partition_verdict, DestSet, DestinationId, PartitionVerdict, MAX_DESTINATIONS,
};
use crate::core::ordering::OrderingMode;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

/// A lane's run: its side and slots, in order.
type Run = (Src, Vec<i64>);

/// Where an event whose turn came goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Dispatched to its destination.
    Send,
    /// Kept until its destination is back (or diverted).
    HoldOut,
    /// To the DLQ, for this reason.
    Divert(Diverted),
}

#[derive(Debug, Default)]
struct PerDestination {
    /// Held out: their turn came while the destination was down.
    out: BTreeSet<(Src, i64)>,
    /// Runs held out.
    runs: Vec<(Src, Vec<i64>)>,
    /// Its events begun and not finished.
    begun: usize,
    /// Diverts dispatched and not finished.
    diverts: usize,
    /// Lag checks since the last divert finished.
    checks: u8,
    /// The outage's number: a hold timer of an earlier outage is stale.
    epoch: u32,
    /// A hold timer is pending: a destination that flaps (a half-open
    /// breaker lets it look up for a moment) keeps the one it has, so its
    /// outage is timed from when it first went down.
    timing: bool,
    /// Keys with an event in the DLQ (dead-lettered, or diverted): their
    /// later events follow it there until the DLQ is drained.
    keys: HashSet<Vec<u8>>,
    /// `partition` ordering: an event in the DLQ holds every later one.
    whole: bool,
}

impl PerDestination {
    /// Per dispatch: no hashing of the key while no key follows (the usual
    /// case, and always with one destination).
    fn follows(&self, key: Option<&[u8]>) -> bool {
        self.whole || (!self.keys.is_empty() && key.is_some_and(|k| self.keys.contains(k)))
    }
}

/// The destinations that are down, those the partition's events went to,
/// and what is held out or diverted of each.
pub(super) struct Outage {
    down: DestSet,
    /// The destinations the partition's events can go to.
    all: DestSet,
    diverting: DestSet,
    hold: Duration,
    /// Events of a down destination at which it is diverted.
    share: usize,
    /// What order a key's events keep (none: nothing follows).
    ordering: OrderingMode,
    per: Vec<PerDestination>,
}

/// What a verdict changes: the partition's verdict, and the destinations
/// that came back (their held-out events go out).
pub(super) struct Changed {
    pub(super) verdict: PartitionVerdict,
    pub(super) back: Vec<DestinationId>,
}

impl Outage {
    /// `reachable`: the destinations events can go to; `hold`:
    /// `degraded.destination_hold`; `limit`: `max_in_flight_per_partition`.
    pub(super) fn new(
        reachable: DestSet,
        hold: Duration,
        limit: usize,
        ordering: OrderingMode,
    ) -> Outage {
        Outage {
            ordering,
            down: DestSet::default(),
            all: reachable,
            diverting: DestSet::default(),
            hold,
            share: (limit / 2).max(1),
            per: Vec::new(),
        }
    }

    fn of(&mut self, d: DestinationId) -> &mut PerDestination {
        let i = d.index();
        if i >= self.per.len() {
            self.per.resize_with(i + 1, PerDestination::default);
        }
        &mut self.per[i]
    }

    /// The partition's verdict now.
    pub(super) fn verdict(&self) -> PartitionVerdict {
        partition_verdict(self.down, self.all)
    }

    /// The destinations now down. A destination that went down starts its
    /// hold ([`Timer::Hold`]); those that came back are returned.
    pub(super) fn set_down(&mut self, down: DestSet, fx: &mut Vec<Effect<impl Sized>>) -> Changed {
        let before = self.down;
        self.down = down;
        let mut back = Vec::new();
        for i in 0..MAX_DESTINATIONS {
            let d = DestinationId(i as u8);
            match (before.contains(d), down.contains(d)) {
                (false, true) if !self.of(d).timing => {
                    let hold = self.hold;
                    let p = self.of(d);
                    p.timing = true;
                    p.epoch = p.epoch.wrapping_add(1);
                    let epoch = p.epoch;
                    fx.push(Effect::Schedule {
                        after: hold,
                        timer: Timer::Hold {
                            destination: d,
                            epoch,
                        },
                    });
                }
                (true, false) => back.push(d),
                _ => {}
            }
        }
        Changed {
            verdict: self.verdict(),
            back,
        }
    }

    /// An event of `d` is begun.
    pub(super) fn begin(&mut self, d: DestinationId) {
        self.of(d).begun += 1;
    }

    /// An event of `d` finished; `diverted`: its divert.
    pub(super) fn finish(&mut self, d: DestinationId, diverted: bool) {
        let p = self.of(d);
        p.begun = p.begun.saturating_sub(1);
        if diverted {
            p.diverts = p.diverts.saturating_sub(1);
            p.checks = 0;
        }
    }

    /// An event of `d` with `key` was dead-lettered (or diverted): with more
    /// than one reachable destination, its key's later events to `d` follow it into
    /// the DLQ until the DLQ is drained (with one, the partition drains the
    /// DLQ before it reads on, as degraded mode always did).
    pub(super) fn dead_lettered(&mut self, d: DestinationId, key: Option<&[u8]>) {
        if self.all.len() <= 1 {
            return;
        }
        let ordering = self.ordering;
        let p = self.of(d);
        match (ordering, key) {
            (OrderingMode::Key, Some(k)) => {
                p.keys.insert(k.to_vec());
            }
            (OrderingMode::Partition, _) => p.whole = true,
            // No order promise: nothing follows.
            (OrderingMode::Key, None) | (OrderingMode::Unordered, _) => return,
        }
        p.checks = 0;
    }

    /// Where an event of `d` with `key` from `src` whose turn came goes (with
    /// the partition not paused).
    pub(super) fn route(&self, d: DestinationId, key: Option<&[u8]>, src: Src) -> Route {
        let follows = self.per.get(d.index()).is_some_and(|p| p.follows(key));
        if src == Src::Main && self.diverting.contains(d) {
            Route::Divert(Diverted::Unavailable)
        } else if src == Src::Main && follows {
            Route::Divert(Diverted::BehindDlq)
        } else if self.down.contains(d) {
            Route::HoldOut
        } else {
            Route::Send
        }
    }

    /// A divert of `d` goes out.
    pub(super) fn diverted(&mut self, d: DestinationId) {
        self.of(d).diverts += 1;
    }

    /// Keeps a held-out event or run of `d`.
    pub(super) fn hold_out(&mut self, d: DestinationId, src: Src, slots: Vec<i64>) {
        let p = self.of(d);
        match slots[..] {
            [slot] => {
                p.out.insert((src, slot));
            }
            _ => p.runs.push((src, slots)),
        }
    }

    /// What `d` held out, taken (it came back, or it is diverted now).
    pub(super) fn take_out(&mut self, d: DestinationId) -> (Vec<(Src, i64)>, Vec<Run>) {
        let p = self.of(d);
        (
            std::mem::take(&mut p.out).into_iter().collect(),
            std::mem::take(&mut p.runs),
        )
    }

    /// `d` is diverted from now on when its hold timer of `epoch` is still
    /// current and it is still down. Returns whether it starts now.
    pub(super) fn hold_over(&mut self, d: DestinationId, epoch: u32) -> bool {
        let p = self.of(d);
        if p.epoch != epoch {
            return false;
        }
        p.timing = false;
        self.down.contains(d) && self.start_diverting(d)
    }

    /// A destination that is up is still diverted: its envelopes wait in the
    /// DLQ. The partition drains it (main p waits) until it is not: read on
    /// from main p, its next events would be diverted again, and their
    /// envelopes would keep it diverted for as long as they come.
    pub(super) fn awaits_drain(&self) -> bool {
        (0..self.per.len()).any(|i| {
            let d = DestinationId(i as u8);
            let p = &self.per[i];
            let held = self.diverting.contains(d) || p.whole || !p.keys.is_empty();
            held && !self.down.contains(d)
        })
    }

    /// The down destinations that hold their share of the partition's
    /// events and are not diverted yet: diverted from now on.
    pub(super) fn over_share(&mut self) -> Vec<DestinationId> {
        let mut over = Vec::new();
        for i in 0..self.per.len() {
            let d = DestinationId(i as u8);
            if self.down.contains(d) && self.per[i].begun >= self.share && self.start_diverting(d) {
                over.push(d);
            }
        }
        over
    }

    /// Only while the partition is not paused: a paused partition (every
    /// destination of its events down, one destination in particular)
    /// sends nothing anywhere and diverts nothing.
    fn start_diverting(&mut self, d: DestinationId) -> bool {
        if self.diverting.contains(d) || self.verdict().paused {
            return false;
        }
        self.diverting.insert(d);
        true
    }

    /// A lag check came; `dlq_drained`: DLQ p has nothing unread or held. A
    /// destination that is up, with no divert in flight, two lag checks
    /// after its last divert finished (the first may have been asked
    /// before the write), with the DLQ drained, is no longer diverted.
    pub(super) fn lag_checked(&mut self, dlq_drained: bool) {
        for i in 0..self.per.len() {
            let d = DestinationId(i as u8);
            let p = &mut self.per[i];
            p.checks = p.checks.saturating_add(1);
            let settled = p.diverts == 0 && p.checks >= 2;
            if !self.down.contains(d) && settled && dlq_drained {
                self.diverting.remove(d);
                p.keys.clear();
                p.whole = false;
            }
        }
    }

    /// Each destination's events held out now (run members each), for every
    /// destination that ever held some out.
    pub(super) fn each_held_out(&self, mut f: impl FnMut(DestinationId, usize)) {
        for (i, p) in self.per.iter().enumerate() {
            let n = p.out.len() + p.runs.iter().map(|(_, r)| r.len()).sum::<usize>();
            f(DestinationId(i as u8), n);
        }
    }

    /// Diverted destinations (the status and tests).
    #[cfg(test)]
    pub(super) fn diverting(&self) -> DestSet {
        self.diverting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: DestinationId = DestinationId(1);

    fn down(ids: &[u8]) -> DestSet {
        let mut s = DestSet::default();
        for &i in ids {
            s.insert(DestinationId(i));
        }
        s
    }

    fn outage() -> Outage {
        Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
        )
    }

    #[test]
    fn a_down_destination_is_held_out_and_released_when_back() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT);
        o.begin(X);
        let c = o.set_down(down(&[1]), &mut fx);
        assert!(!c.verdict.paused && c.verdict.drain_held);
        assert!(matches!(
            fx[..],
            [Effect::Schedule {
                timer: Timer::Hold {
                    destination: X,
                    epoch: 1
                },
                ..
            }]
        ));
        assert_eq!(o.route(X, None, Src::Main), Route::HoldOut);
        assert_eq!(
            o.route(DestinationId::DEFAULT, None, Src::Main),
            Route::Send
        );
        o.hold_out(X, Src::Main, vec![4]);
        o.hold_out(X, Src::Main, vec![6, 7]);
        let mut held = Vec::new();
        o.each_held_out(|d, n| held.push((d, n)));
        assert_eq!(held, vec![(DestinationId::DEFAULT, 0), (X, 3)]);
        let c = o.set_down(down(&[]), &mut fx);
        assert_eq!(c.back, vec![X]);
        assert_eq!(
            o.take_out(X),
            (vec![(Src::Main, 4)], vec![(Src::Main, vec![6, 7])])
        );
        assert_eq!(o.route(X, None, Src::Main), Route::Send);
        assert!(!o.hold_over(X, 1), "back before its hold was over");
        o.set_down(down(&[1]), &mut fx);
        assert!(!o.hold_over(X, 1), "an earlier outage's timer is stale");
        assert!(o.hold_over(X, 2));
    }

    #[test]
    fn a_long_outage_diverts_until_the_dlq_is_drained() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT);
        o.set_down(down(&[1]), &mut fx);
        o.set_down(down(&[]), &mut fx);
        o.set_down(down(&[1]), &mut fx);
        assert_eq!(fx.len(), 1, "a flapping destination keeps its first timer");
        assert!(o.hold_over(X, 1), "timed from when it first went down");
        assert_eq!(
            o.route(X, None, Src::Main),
            Route::Divert(Diverted::Unavailable)
        );
        assert_eq!(
            o.route(X, None, Src::Dlq),
            Route::HoldOut,
            "the DLQ's own records wait"
        );
        o.begin(X);
        o.diverted(X);
        o.set_down(down(&[]), &mut fx);
        assert_eq!(
            o.route(X, None, Src::Main),
            Route::Divert(Diverted::Unavailable),
            "back, but its envelopes wait in the DLQ"
        );
        assert!(o.awaits_drain());
        o.lag_checked(true);
        o.lag_checked(true);
        assert_eq!(
            o.route(X, None, Src::Main),
            Route::Divert(Diverted::Unavailable),
            "a divert still in flight"
        );
        o.finish(X, true);
        o.lag_checked(true);
        assert_eq!(
            o.route(X, None, Src::Main),
            Route::Divert(Diverted::Unavailable),
            "one lag check may predate the write"
        );
        o.lag_checked(false);
        assert_eq!(
            o.route(X, None, Src::Main),
            Route::Divert(Diverted::Unavailable),
            "DLQ not drained"
        );
        o.lag_checked(true);
        assert_eq!(o.route(X, None, Src::Main), Route::Send);
        assert!(!o.awaits_drain());
    }

    #[test]
    fn a_destination_holding_its_share_is_diverted() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT);
        o.set_down(down(&[1]), &mut fx);
        for _ in 0..4 {
            o.begin(X);
        }
        assert!(o.over_share().is_empty());
        o.begin(X);
        assert_eq!(o.over_share(), vec![X]);
        assert!(o.over_share().is_empty(), "once");
        assert!(o.diverting().contains(X));
    }

    #[test]
    fn a_key_with_an_event_in_the_dlq_follows_it_until_drained() {
        let mut o = outage();
        let k = Some(&b"k"[..]);
        o.dead_lettered(X, k);
        assert_eq!(o.route(X, k, Src::Main), Route::Divert(Diverted::BehindDlq));
        assert_eq!(o.route(X, Some(&b"other"[..]), Src::Main), Route::Send);
        assert_eq!(
            o.route(DestinationId::DEFAULT, k, Src::Main),
            Route::Send,
            "another destination"
        );
        assert!(o.awaits_drain());
        o.lag_checked(true);
        o.lag_checked(true);
        assert_eq!(o.route(X, k, Src::Main), Route::Send);
        let mut single = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
        );
        single.dead_lettered(DestinationId::DEFAULT, k);
        assert_eq!(
            single.route(DestinationId::DEFAULT, k, Src::Main),
            Route::Send,
            "one destination: as before"
        );
        let mut only_x = DestSet::default();
        only_x.insert(X);
        let mut single = Outage::new(only_x, Duration::from_secs(30), 10, OrderingMode::Key);
        single.dead_lettered(X, k);
        assert_eq!(
            single.route(X, k, Src::Main),
            Route::Send,
            "one reachable destination (a route takes every type): as before"
        );
        let mut p = Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Partition,
        );
        p.dead_lettered(X, None);
        assert_eq!(
            p.route(X, None, Src::Main),
            Route::Divert(Diverted::BehindDlq)
        );
        let mut u = Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Unordered,
        );
        u.dead_lettered(X, k);
        assert_eq!(u.route(X, k, Src::Main), Route::Send, "no order promise");
    }

    #[test]
    fn one_destination_pauses_instead() {
        let mut o = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
        );
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT);
        let c = o.set_down(down(&[0]), &mut fx);
        assert!(c.verdict.paused);
        for _ in 0..10 {
            o.begin(DestinationId::DEFAULT);
        }
        assert!(
            !o.hold_over(DestinationId::DEFAULT, 1),
            "paused: never diverted"
        );
        assert!(o.over_share().is_empty());
        o.set_down(down(&[]), &mut fx);
        assert_eq!(
            o.route(DestinationId::DEFAULT, None, Src::Main),
            Route::Send
        );
    }
}
