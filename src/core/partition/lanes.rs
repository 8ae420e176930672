//! [`Lanes`]: the events held (begun, not finished), their ordering lanes
//! (`core::ordering`), and what goes out to the delivery side: dispatches,
//! runs, the jobs whose turn came while the mode was `Paused`, and errored
//! jobs' redispatch. Every dispatch is routed by `outage` (I38, I39). What
//! admits a record (the backlog, the byte budgets) is `backlog` and
//! `budget`'s; which side is read, `degraded`'s.
//!
//! # Invariant I3: one event or one ordered run in flight per lane
//!
//! *Enforced here.* `key` mode: one event per key in flight, a key's events
//! in offset order; a lane is freed by its event's completion, whatever its
//! work became (a parked errored job included); `partition` mode: one at a
//! time. With `ordered = true` on a batched route, the lane's waiting events
//! of that route go out together as one *run* (`Scheduler::finish` →
//! `Release::Run`, `Effect::DispatchRun`): consecutive entries of the lane,
//! at most `max_events` and `pipeline.concurrency`; the lane's next release
//! waits until every event of the run finished, and a run member whose job
//! vanished goes out again only once none of its run is still out
//! (`Scheduler::again`), with the others that vanished, in order (delivery
//! keeps a run's order at the API: I34). The DLQ drain sends through lanes of
//! its own (per key and destination, as the ordering mode says): a key's
//! envelopes go one at a time, and one waiting in its drain lane counts as
//! unread. Nothing is dispatched while the mode is `paused` (those jobs wait
//! here), nor once a drain was requested.
//!
//! *Tested by:* the model (`model`: these over random interleavings, with
//! liveness; a vanished run member dispatched again alone was seen failing
//! there); `core::ordering`'s proptest (runs);
//! `tests/pipeline.rs::key_mode_keeps_per_key_order`, `tests/degraded.rs`,
//! `tests/order.rs`.

use super::outage::{Outage, Route};
use super::{Effect, Intake, Kind, Note, Src, Timer, MAX_ERRORED};
use crate::core::backoff::persistent_delay;
use crate::core::destination::{DestSet, DestinationId, PartitionVerdict};
use crate::core::ordering::{OrderingMode, Release, RunGroup, Scheduler};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Back-off before an errored job is dispatched again (doubling per error).
pub(super) const REDISPATCH_BASE: Duration = Duration::from_millis(100);
const REDISPATCH_CAP: Duration = Duration::from_secs(5);

/// The held map's hasher. Its keys are a side and a slot (an offset the broker
/// numbered, plus the side's shift): no producer chooses them, so the
/// standard library's SipHash (its DoS resistance is for keys an attacker
/// picks; ~0.5 µs per event here, docs/BENCHMARKS.md run 12) is not needed.
type SlotHash = foldhash::fast::FixedState;

/// An event held.
struct Held<I> {
    item: Arc<I>,
    /// What it took from the in-flight budget.
    bytes: u64,
    /// Admitted to an ordering lane: its completion frees the lane, whatever its
    /// work became meanwhile (a parked errored job included).
    in_lane: bool,
    /// A DLQ record admitted to its drain lane (see [`Lanes::dispatch_due`]):
    /// its completion frees it.
    in_drain_lane: bool,
    errored: u32,
    /// Its last dispatch was a divert to the DLQ (`outage`): counted in
    /// its destination's diverts until it finishes or is routed otherwise.
    diverted: bool,
    /// A DLQ record's own DLQ offset (`outage` knows its envelopes by it).
    dlq_offset: Option<i64>,
}

/// The held events, keyed by side and slot, and their dispatch.
pub(super) struct Lanes<X: Intake> {
    held: HashMap<(Src, i64), Held<X::Item>, SlotHash>,
    /// The ordering lanes of each destination (`core::destination`), by its
    /// id: a key's events to one API do not wait behind its events to
    /// another (order holds per key and destination).
    lanes: Vec<Scheduler>,
    ordering: OrderingMode,
    /// Jobs dispatched and not answered.
    dispatched: usize,
    /// Of them, DLQ records (the drain's, `DrainAlongside`).
    dispatched_dlq: usize,
    /// Jobs whose turn came while the mode was `Paused`: dispatched when it ends.
    ready: BTreeSet<(Src, i64)>,
    /// Runs whose turn came while the mode was `Paused`.
    ready_runs: Vec<(Src, Vec<i64>)>,
    /// Destinations down while the partition is not paused (`outage`).
    outage: Outage,
    /// The DLQ drain's lanes, per destination: a key's DLQ records are
    /// redelivered one at a time, in order.
    drain_lanes: Vec<Scheduler>,
    /// DLQ records due and not dispatched: waiting in a drain lane, or
    /// their turn come (`drain_ready`).
    drain_waiting: usize,
    /// DLQ records whose drain lane freed: dispatched by the drain's next
    /// pass ([`Lanes::dispatch_ready_drain`]), only while it drains.
    drain_ready: Vec<i64>,
}

impl<X: Intake> Lanes<X> {
    pub(super) fn new(ordering: OrderingMode, outage: Outage) -> Self {
        Lanes {
            outage,
            held: HashMap::default(),
            lanes: vec![Scheduler::new(ordering)],
            ordering,
            dispatched: 0,
            dispatched_dlq: 0,
            ready: BTreeSet::new(),
            ready_runs: Vec::new(),
            drain_lanes: Vec::new(),
            drain_waiting: 0,
            drain_ready: Vec::new(),
        }
    }

    /// The drain lanes of `item`'s destination.
    fn drain_lanes_of(&mut self, item: &X::Item) -> &mut Scheduler {
        of_destination::<X>(&mut self.drain_lanes, self.ordering, item)
    }

    /// A due DLQ record (the drain takes them in offset order): dispatched
    /// when its drain lane is free, else when the record before it of its
    /// key and destination finished. With `drain_concurrency` > 1 two
    /// envelopes of one key would otherwise race to the API.
    pub(super) fn dispatch_due(&mut self, slot: i64, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        let Some(held) = self.held.get_mut(&(Src::Dlq, slot)) else {
            return;
        };
        held.in_drain_lane = true;
        let item = held.item.clone();
        if self.drain_lanes_of(&item).admit(X::key(&item), slot, None) {
            self.dispatch(Src::Dlq, slot, paused, fx);
        } else {
            self.drain_waiting += 1;
        }
    }

    /// DLQ records due and not dispatched yet (see `drain_waiting`).
    pub(super) fn drain_waiting(&self) -> usize {
        self.drain_waiting
    }

    /// The drain's pass: the DLQ records whose drain lane freed go out.
    pub(super) fn dispatch_ready_drain(&mut self, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        let mut ready = std::mem::take(&mut self.drain_ready);
        // In offset order (lanes freed by one batch of answers in any).
        ready.sort_unstable();
        for slot in ready {
            self.drain_waiting = self.drain_waiting.saturating_sub(1);
            self.dispatch(Src::Dlq, slot, paused, fx);
        }
    }

    /// The lanes of `item`'s destination.
    fn lanes_of(&mut self, item: &X::Item) -> &mut Scheduler {
        of_destination::<X>(&mut self.lanes, self.ordering, item)
    }

    /// Jobs dispatched and not answered.
    pub(super) fn in_flight(&self) -> usize {
        self.dispatched
    }

    /// DLQ records dispatched and not answered.
    pub(super) fn in_flight_dlq(&self) -> usize {
        self.dispatched_dlq
    }

    /// Holds a begun event at `slot`. Returns whether its turn has come (to
    /// be dispatched now): an [`Kind::Ordered`] one when its lane is free, an
    /// [`Kind::Immediate`] one always; a [`Kind::Queued`] one waits for the
    /// DLQ drain.
    pub(super) fn hold(
        &mut self,
        src: Src,
        (slot, offset): (i64, i64),
        item: X::Item,
        kind: Kind,
        run: Option<RunGroup>,
        bytes: u64,
    ) -> bool {
        let turn = match kind {
            Kind::Ordered => self.lanes_of(&item).admit(X::key(&item), slot, run),
            Kind::Immediate => true,
            Kind::Queued { .. } => false,
        };
        if kind == Kind::Ordered {
            self.outage.begin(X::destination(&item), bytes);
        }
        if src == Src::Dlq {
            // A DLQ record read: its key's later events wait behind it,
            // whoever wrote it (`outage`).
            let (d, key, origin) = (X::destination(&item), X::key(&item), X::origin(&item));
            self.outage.read_from_dlq(d, key, (offset, origin));
        }
        let held = Held {
            item: Arc::new(item),
            bytes,
            in_lane: kind == Kind::Ordered,
            in_drain_lane: false,
            errored: 0,
            diverted: false,
            dlq_offset: (src == Src::Dlq).then_some(offset),
        };
        self.held.insert((src, slot), held);
        turn
    }

    /// A job of `src` answered (done or errored).
    pub(super) fn answered(&mut self, src: Src) {
        self.dispatched = self.dispatched.saturating_sub(1);
        if src == Src::Dlq {
            self.dispatched_dlq = self.dispatched_dlq.saturating_sub(1);
        }
    }

    /// The event at `slot` is done: no longer held; its lane goes on with
    /// the next (unless `draining`). Returns its bytes, or `None` if it was
    /// not held.
    pub(super) fn finish(
        &mut self,
        src: Src,
        slot: i64,
        draining: bool,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) -> Option<u64> {
        let held = self.held.remove(&(src, slot))?;
        if held.in_lane {
            self.outage
                .finish(X::destination(&held.item), held.diverted, held.bytes);
            match self.lanes_of(&held.item).finish(X::key(&held.item), slot) {
                _ if draining => {}
                release => self.release(Src::Main, release, paused, fx),
            }
        } else if held.in_drain_lane {
            match self
                .drain_lanes_of(&held.item)
                .finish(X::key(&held.item), slot)
            {
                Release::One(next) => self.drain_ready.push(next),
                Release::Nothing | Release::Run(_) => {}
            }
        }
        Some(held.bytes)
    }

    /// The job at `slot` vanished without an outcome: dispatched again after
    /// a back-off (unless `draining`), parked once it errored
    /// [`MAX_ERRORED`] times.
    pub(super) fn errored(
        &mut self,
        src: Src,
        slot: i64,
        draining: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        let Some(held) = self.held.get_mut(&(src, slot)) else {
            return;
        };
        held.errored += 1;
        let n = held.errored;
        if n >= MAX_ERRORED {
            fx.push(Effect::Note(Note::ParkingErrored {
                src,
                offset: slot,
                times: n,
            }));
            // Its work is now the parking; it keeps its lane, if it had one
            // (its completion frees it).
            held.item = Arc::new(X::park_internal(&held.item, n));
        }
        if !draining {
            let after = persistent_delay(n, REDISPATCH_BASE, REDISPATCH_CAP);
            let timer = Timer::Redispatch { src, offset: slot };
            fx.push(Effect::Schedule { after, timer });
        }
    }

    /// An errored job's back-off is over: dispatched again, through its lane
    /// if it has one (with the rest of its run, once none is out).
    pub(super) fn redispatch(
        &mut self,
        src: Src,
        slot: i64,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        match self.held.get(&(src, slot)) {
            None => {}
            Some(h) if h.in_lane => {
                let item = h.item.clone();
                let release = self.lanes_of(&item).again(X::key(&item), slot);
                self.release(src, release, paused, fx);
            }
            Some(_) => self.dispatch(src, slot, paused, fx),
        }
    }

    fn release(&mut self, src: Src, r: Release, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        match r {
            Release::Nothing => {}
            Release::One(slot) => self.dispatch(src, slot, paused, fx),
            Release::Run(run) => self.dispatch_run(src, run, paused, fx),
        }
    }

    /// Dispatches a job whose turn came — unless `paused`: nothing goes out
    /// while the API is judged down (the verdict may rest on another
    /// instance's marker, with this instance's breaker closed).
    pub(super) fn dispatch(
        &mut self,
        src: Src,
        slot: i64,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        let Some(held) = self.held.get_mut(&(src, slot)) else {
            return;
        };
        if paused {
            self.ready.insert((src, slot));
            return;
        }
        let d = X::destination(&held.item);
        // Bad input goes to the parking lot, no destination's.
        let route = if held.in_lane || src == Src::Dlq {
            self.outage
                .route(d, X::key(&held.item), src, held.dlq_offset)
        } else {
            Route::Send
        };
        let item = held.item.clone();
        let divert = matches!(route, Route::Divert(_));
        Self::count_divert(&mut self.outage, held, d, divert);
        match route {
            Route::HoldOut => return self.outage.hold_out(d, src, vec![slot]),
            Route::Divert(why) => {
                fx.push(Effect::Divert {
                    src,
                    run: vec![(slot, item)],
                    why,
                });
            }
            Route::Send => fx.push(Effect::Dispatch {
                src,
                offset: slot,
                item,
            }),
        }
        self.dispatched += 1;
        if src == Src::Dlq {
            self.dispatched_dlq += 1;
        }
    }

    /// Dispatches a lane's run together (or keeps it for the end of `Paused`).
    fn dispatch_run(
        &mut self,
        src: Src,
        slots: Vec<i64>,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        if paused {
            self.ready_runs.push((src, slots));
            return;
        }
        let first = slots.first().and_then(|s| self.held.get(&(src, *s)));
        let Some(route) = first.map(|h| {
            let d = X::destination(&h.item);
            (d, self.outage.route(d, X::key(&h.item), src, h.dlq_offset))
        }) else {
            return;
        };
        let (d, divert) = match route {
            (d, Route::Send) => (d, None),
            (d, Route::HoldOut) => {
                for slot in &slots {
                    if let Some(h) = self.held.get_mut(&(src, *slot)) {
                        Self::count_divert(&mut self.outage, h, d, false);
                    }
                }
                return self.outage.hold_out(d, src, slots);
            }
            // Together, in order: their envelopes keep the run's order.
            (d, Route::Divert(why)) => (d, Some(why)),
        };
        let mut run: Vec<(i64, Arc<X::Item>)> = Vec::with_capacity(slots.len());
        for slot in slots {
            if let Some(h) = self.held.get_mut(&(src, slot)) {
                Self::count_divert(&mut self.outage, h, d, divert.is_some());
                run.push((slot, h.item.clone()));
            }
        }
        self.dispatched += run.len();
        if src == Src::Dlq {
            self.dispatched_dlq += run.len();
        }
        if let Some(why) = divert {
            fx.push(Effect::Divert { src, run, why });
        } else if run.len() > 1 {
            fx.push(Effect::DispatchRun { src, run });
        } else if let Some((offset, item)) = run.pop() {
            fx.push(Effect::Dispatch { src, offset, item });
        }
    }

    /// Whether a held event's job is a divert now: counted once per event
    /// (a divert whose work vanished is dispatched again, and its finish
    /// counts it off once; routed otherwise the second time, held out or
    /// sent, it is counted off at once). A DLQ record going behind another
    /// is not its destination's divert: it has no lane, nothing is counted.
    fn count_divert(outage: &mut Outage, held: &mut Held<X::Item>, d: DestinationId, divert: bool) {
        if held.in_lane && held.diverted != divert {
            if divert {
                outage.diverted(d);
            } else {
                outage.undiverted(d);
            }
        }
        held.diverted = divert;
    }

    /// `Paused` ended: the jobs and runs whose turn came meanwhile go out.
    pub(super) fn release_ready(&mut self, fx: &mut Vec<Effect<X::Item>>) {
        for (src, slot) in std::mem::take(&mut self.ready) {
            self.dispatch(src, slot, false, fx);
        }
        for (src, run) in std::mem::take(&mut self.ready_runs) {
            self.dispatch_run(src, run, false, fx);
        }
    }

    /// The destinations now down: those that came back dispatch what they
    /// held out (or divert it, when they are diverted). Returns the
    /// partition's verdict.
    pub(super) fn set_down(
        &mut self,
        down: DestSet,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) -> PartitionVerdict {
        let changed = self.outage.set_down(down, fx);
        for d in changed.back.into_iter().chain(changed.diverted) {
            self.release_out(d, paused, fx);
        }
        changed.verdict
    }

    /// A destination's hold timer: diverted from now on if its outage goes on.
    pub(super) fn hold_over(
        &mut self,
        d: DestinationId,
        epoch: u32,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        if self.outage.hold_over(d, epoch) {
            self.release_out(d, paused, fx);
        }
    }

    /// Down destinations holding their share of the partition's events are
    /// diverted from now on; up ones holding their share, with events held
    /// behind their envelopes, send those on into the DLQ.
    pub(super) fn check_shares(&mut self, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        for d in self.outage.over_share() {
            self.release_out(d, paused, fx);
        }
        for d in self.outage.behind_over_share() {
            self.release_out(d, paused, fx);
        }
    }

    /// The main event at `slot` (`offset`: `None` if of a log replaced
    /// since) was dead-lettered, its envelope at DLQ offset `at`: its key's
    /// later events to its destination wait behind it (`outage`).
    pub(super) fn dead_lettered(&mut self, slot: i64, offset: Option<i64>, at: i64) {
        if let Some(h) = self.held.get(&(Src::Main, slot)).filter(|h| h.in_lane) {
            let origin = offset.unwrap_or(i64::MIN);
            self.outage
                .dead_lettered(X::destination(&h.item), X::key(&h.item), (origin, at));
        }
    }

    /// The DLQ record at `slot` was written to the DLQ again (its
    /// redelivery failed): its destination waits two more lag checks before
    /// the DLQ can count as drained (`outage`).
    pub(super) fn written_again(&mut self, slot: i64, at: i64) {
        if let Some(h) = self.held.get(&(Src::Dlq, slot)) {
            let (d, key) = (X::destination(&h.item), X::key(&h.item));
            self.outage.written_again(d, key, (h.dlq_offset, at));
        }
    }

    /// DLQ p's log was replaced (a reset): the DLQ offsets the envelopes
    /// were followed by mean nothing on the new one (`outage`).
    pub(super) fn dlq_log_replaced(&mut self) {
        self.outage.forget_envelopes();
    }

    /// The DLQ record at `slot` is done and out of the DLQ (redelivered,
    /// or parked): the events its envelope held back go, if nothing else
    /// holds them (`outage`).
    pub(super) fn redelivered(&mut self, slot: i64, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        let Some(h) = self.held.get(&(Src::Dlq, slot)) else {
            return;
        };
        let key = X::key(&h.item);
        if let Some(d) = h.dlq_offset.and_then(|o| self.outage.redelivered(o, key)) {
            self.release_out(d, paused, fx);
        }
    }

    /// A destination that is up has events waiting behind the DLQ: it is
    /// drained (`outage`).
    pub(super) fn awaits_drain(&self) -> bool {
        self.outage.awaits_drain()
    }

    #[cfg(test)]
    pub(super) fn outage(&self) -> &Outage {
        &self.outage
    }

    /// An envelope this machine wrote is not read back yet (`outage`).
    pub(super) fn unread_envelope(&self, from: i64) -> bool {
        self.outage.unread_envelope(from)
    }

    /// Every record of DLQ p not read is an envelope this machine wrote
    /// (`outage`): its key is followed without reading it.
    pub(super) fn dlq_known(&self) -> bool {
        self.outage.dlq_known()
    }

    /// The DLQ drains while main p is read (`outage`).
    pub(super) fn alongside(&self) -> bool {
        self.outage.alongside()
    }

    /// Each destination's events held out now (see `outage`).
    pub(super) fn each_held_out(&self, f: impl FnMut(DestinationId, usize)) {
        self.outage.each_held_out(f);
    }

    /// A lag check came (see `outage`): what waited behind a drained DLQ
    /// goes.
    pub(super) fn lag_checked(
        &mut self,
        dlq_drained: bool,
        paused: bool,
        fx: &mut Vec<Effect<X::Item>>,
    ) {
        for d in self.outage.lag_checked(dlq_drained) {
            self.release_out(d, paused, fx);
        }
    }

    /// What `d` held out goes where its route says now: sent, or diverted.
    fn release_out(&mut self, d: DestinationId, paused: bool, fx: &mut Vec<Effect<X::Item>>) {
        let (out, runs) = self.outage.take_out(d);
        for (src, slot) in out {
            self.dispatch(src, slot, paused, fx);
        }
        for (src, run) in runs {
            self.dispatch_run(src, run, paused, fx);
        }
    }

    /// Nothing held: the map and the lanes give back the room they grew to
    /// beyond `keep`.
    pub(super) fn trim(&mut self, keep: usize) {
        if self.held.is_empty() && self.held.capacity() > keep {
            self.held = HashMap::default();
            self.lanes.iter_mut().for_each(Scheduler::trim);
        }
    }
}

/// The schedulers of `item`'s destination among `lanes` (one per
/// destination, by id), made on first use.
fn of_destination<'a, X: Intake>(
    lanes: &'a mut Vec<Scheduler>,
    ordering: OrderingMode,
    item: &X::Item,
) -> &'a mut Scheduler {
    let i = X::destination(item).index();
    if i >= lanes.len() {
        lanes.resize_with(i + 1, || Scheduler::new(ordering));
    }
    &mut lanes[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items are (key, parked): parking keeps the key.
    struct Keyed;

    impl Intake for Keyed {
        type Raw = (u8, i64);
        type Item = (u8, bool);

        fn position(raw: &(u8, i64)) -> (Src, i64) {
            (Src::Main, raw.1)
        }

        fn begin(raw: (u8, i64)) -> super::super::Begun<(u8, bool)> {
            super::super::Begun {
                item: (raw.0, false),
                kind: Kind::Ordered,
                run: None,
            }
        }

        fn key(item: &(u8, bool)) -> Option<&[u8]> {
            Some(std::slice::from_ref(&item.0))
        }

        fn size(_raw: &(u8, i64)) -> usize {
            1
        }

        fn park_internal(item: &(u8, bool), _times: u32) -> (u8, bool) {
            (item.0, true)
        }
    }

    type Fx = Vec<Effect<(u8, bool)>>;

    fn test_outage() -> Outage {
        Outage::new(
            crate::core::destination::DestSet::first(1),
            Duration::from_secs(30),
            1_000,
            OrderingMode::Key,
            Arc::new(crate::core::byte_budget::ByteBudget::new(u64::MAX)),
        )
    }

    fn dispatched(fx: &Fx) -> Vec<i64> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Dispatch { offset, .. } => Some(*offset),
                _ => None,
            })
            .collect()
    }

    fn key_lanes() -> Lanes<Keyed> {
        Lanes::new(OrderingMode::Key, test_outage())
    }

    #[test]
    fn a_key_waits_for_its_earlier_event_and_other_keys_do_not() {
        let mut l = key_lanes();
        let mut fx = Fx::new();
        assert!(l.hold(Src::Main, (0, 0), (1, false), Kind::Ordered, None, 10));
        assert!(
            !l.hold(Src::Main, (1, 1), (1, false), Kind::Ordered, None, 10),
            "same key"
        );
        assert!(
            l.hold(Src::Main, (2, 2), (2, false), Kind::Ordered, None, 10),
            "another key"
        );
        l.dispatch(Src::Main, 0, false, &mut fx);
        l.dispatch(Src::Main, 2, false, &mut fx);
        assert_eq!((dispatched(&fx), l.in_flight()), (vec![0, 2], 2));
        fx.clear();
        l.answered(Src::Main);
        assert_eq!(l.finish(Src::Main, 0, false, false, &mut fx), Some(10));
        assert_eq!(dispatched(&fx), vec![1], "the key's next event goes out");
        assert_eq!(l.finish(Src::Main, 0, false, false, &mut fx), None);
    }

    /// Items are (key, destination).
    struct ByDestination;

    impl Intake for ByDestination {
        type Raw = (u8, u8);
        type Item = (u8, u8);

        fn position(_raw: &(u8, u8)) -> (Src, i64) {
            (Src::Main, 0)
        }

        fn begin(raw: (u8, u8)) -> super::super::Begun<(u8, u8)> {
            super::super::Begun {
                item: raw,
                kind: Kind::Ordered,
                run: None,
            }
        }

        fn key(item: &(u8, u8)) -> Option<&[u8]> {
            Some(std::slice::from_ref(&item.0))
        }

        fn destination(item: &(u8, u8)) -> crate::core::destination::DestinationId {
            crate::core::destination::DestinationId(item.1)
        }

        fn size(_raw: &(u8, u8)) -> usize {
            1
        }

        fn park_internal(item: &(u8, u8), _times: u32) -> (u8, u8) {
            *item
        }
    }

    #[test]
    fn a_key_waits_only_behind_its_events_to_the_same_destination() {
        for ordering in [OrderingMode::Key, OrderingMode::Partition] {
            let mut l: Lanes<ByDestination> = Lanes::new(ordering, test_outage());
            assert!(l.hold(Src::Main, (0, 0), (1, 0), Kind::Ordered, None, 1));
            assert!(
                l.hold(Src::Main, (1, 1), (1, 3), Kind::Ordered, None, 1),
                "{ordering:?}: same key, another destination"
            );
            assert!(
                !l.hold(Src::Main, (2, 2), (1, 3), Kind::Ordered, None, 1),
                "{ordering:?}: same key and destination"
            );
            let mut fx = Vec::new();
            l.finish(Src::Main, 1, false, false, &mut fx);
            assert!(
                matches!(fx[..], [Effect::Dispatch { offset: 2, .. }]),
                "{ordering:?}: its destination's lane goes on"
            );
        }
    }

    #[test]
    fn immediate_goes_at_once_and_queued_waits_for_the_drain() {
        let mut l = key_lanes();
        assert!(l.hold(Src::Main, (0, 0), (1, false), Kind::Immediate, None, 1));
        let queued = Kind::Queued { not_before_ms: 0 };
        assert!(!l.hold(Src::Dlq, (0, 0), (1, false), queued, None, 1));
    }

    #[test]
    fn paused_dispatches_wait_until_released() {
        let mut l = key_lanes();
        let mut fx = Fx::new();
        l.hold(Src::Main, (0, 0), (1, false), Kind::Ordered, None, 1);
        l.dispatch(Src::Main, 0, true, &mut fx);
        assert!(fx.is_empty());
        assert_eq!(l.in_flight(), 0);
        l.release_ready(&mut fx);
        assert_eq!(dispatched(&fx), vec![0]);
        fx.clear();
        l.release_ready(&mut fx);
        assert!(fx.is_empty(), "released once");
    }

    #[test]
    fn a_draining_finish_dispatches_nothing_next() {
        let mut l = key_lanes();
        let mut fx = Fx::new();
        l.hold(Src::Main, (0, 0), (1, false), Kind::Ordered, None, 1);
        l.hold(Src::Main, (1, 1), (1, false), Kind::Ordered, None, 1);
        l.finish(Src::Main, 0, true, false, &mut fx);
        assert!(fx.is_empty());
    }

    #[test]
    fn an_errored_job_backs_off_and_is_parked_at_the_limit() {
        let mut l = key_lanes();
        let mut fx = Fx::new();
        l.hold(Src::Main, (0, 0), (1, false), Kind::Ordered, None, 1);
        l.dispatch(Src::Main, 0, false, &mut fx);
        for _ in 1..MAX_ERRORED {
            l.errored(Src::Main, 0, false, &mut fx);
        }
        assert!(!fx.iter().any(|e| matches!(e, Effect::Note(_))));
        fx.clear();
        l.errored(Src::Main, 0, false, &mut fx);
        assert!(matches!(
            fx[0],
            Effect::Note(Note::ParkingErrored {
                times: MAX_ERRORED,
                ..
            })
        ));
        assert!(matches!(
            fx[1],
            Effect::Schedule {
                timer: Timer::Redispatch { offset: 0, .. },
                ..
            }
        ));
        fx.clear();
        l.redispatch(Src::Main, 0, false, &mut fx);
        match &fx[..] {
            [Effect::Dispatch {
                offset: 0, item, ..
            }] => assert_eq!(**item, (1, true)),
            other => panic!("expected the parked job: {other:?}"),
        }
        fx.clear();
        l.errored(Src::Main, 0, true, &mut fx);
        assert!(
            !fx.iter().any(|e| matches!(e, Effect::Schedule { .. })),
            "no redispatch once draining"
        );
    }
}
