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
//! - once the outage outlasts `degraded.destination_hold` (a hold that ends
//!   while the partition is paused counts once it is not), or X holds its
//!   share (half of `max_in_flight_per_partition` events of the partition,
//!   or half of the in-flight byte budget with its events in every
//!   partition: `ByteBudget::held_for`), X is
//!   **diverted**: its held-out events and every X event whose turn comes
//!   later go to the DLQ ([`Route::Divert`], reason `destination_unavailable`,
//!   no try used), so a long outage does not fill the partition's room and
//!   stall the others. A key's next X event is released only once the one
//!   before it is in the DLQ;
//! - back, X's envelopes are drained *alongside* main p (`core::fsm`'s
//!   `DrainAlongside`, [`Outage::alongside`]): the other destinations, and
//!   X's keys with nothing in the DLQ, keep flowing;
//! - with one destination (or when every destination of the partition is
//!   down) the partition pauses instead, as degraded mode always did:
//!   nothing is held out, nothing diverted for the outage.
//!
//! # Invariant I39: a key's order holds through the DLQ
//!
//! No event is sent while an earlier event of its key and destination is
//! unfinished (the lanes, I3) or in the DLQ: it waits, or follows it there.
//! The same for one destination as for several, unbatched, in ordered runs
//! and in the drain. *Enforced* here; in `lanes` (which routes every
//! dispatch through [`Outage::route`]); in `delivery::ordered` (a run member
//! dead-lettered takes the rest of its run into the DLQ behind it); in
//! `actors::partition::decode` (a DLQ record is keyed as its event was on
//! main p: the entity key the envelope records); and in the delivery pool
//! (a run diverted is written in order). How:
//!
//! - **Followed envelopes.** Each envelope in the DLQ that the machine knows
//!   of counts against its key (`Follow`; in `partition` ordering against
//!   the whole destination): those it wrote (dead-lettered or diverted),
//!   known by the DLQ offset the broker acknowledged each at
//!   ([`Outage::dead_lettered`], `Finished::DeadLettered { at }`), and
//!   every record it reads from DLQ p ([`Outage::read_from_dlq`]: an
//!   earlier owner's, or its own read back before the report of its write
//!   came). While a key counts, its events whose turn comes are held out
//!   ([`Route::HoldOut`]), or follow into the DLQ ([`Diverted::BehindDlq`])
//!   once the destination holds its share or is down; an envelope
//!   redelivered or parked ([`Outage::redelivered`]) counts off.
//! - **DLQ order.** The envelopes followed are also kept in their key's
//!   order (the main offset each was written for, `Intake::origin`). A DLQ
//!   record that comes up while an envelope of its key written for an
//!   earlier event sits later in DLQ p (written again after a failed
//!   redelivery) goes to the back too, untried ([`Outage::route`]'s `dlq`).
//! - **Reading order.** Until every record of DLQ p not read is one the
//!   machine wrote and follows ([`Outage::dlq_known`]), a new owner reads DLQ
//!   p to its end before main p (`dlq_drain`'s `unknown`) and before its
//!   drain sends (the machine's `drain_waits`, unless DLQ p cannot be read
//!   further first: at its limit, or waiting for the byte budget), so that
//!   an earlier owner's envelopes are followed, and in their key's order,
//!   before their keys' later events go.
//! - **Release.** What was held out goes once its key counts nothing, or
//!   once the DLQ is drained as a whole (two lag checks after the last
//!   write, nothing of DLQ p unread or held, no envelope the machine wrote
//!   left unread whatever the check says of DLQ p's end:
//!   [`Outage::lag_checked`], [`Outage::unread_envelope`]) —
//!   the only way after more than `MAX_TRACKED` envelopes or a replaced
//!   DLQ log, when envelopes are no longer followed one by one.
//!
//! *Tested by* the unit tests below; the machine's tests (`outage_tests`,
//! with the interleavings proptest: one or two destinations, answers
//! dead-lettered, errored or reported late, envelopes due later, stale lag
//! checks, hold timers while paused; no event sent while an earlier one of
//! its key and destination is in the DLQ, every destination settles);
//! `model` (one destination); `delivery::tests::ordered`;
//! `actors::partition::decode`'s tests; `tests/order.rs` (stale writes 0
//! through an outage, ordered batches, unbatched keys, entity keys through
//! the drain, and DLQ records slow to reach the partition);
//! `tests/destinations.rs`; the drill's `order` scenario (in the CI
//! sequence). The follow state's memory in a running process has no
//! test in the tree (docs/ARCHITECTURE.md, "What is not there yet").

use super::{Effect, Src, Timer};
use crate::core::byte_budget::ByteBudget;
use crate::core::destination::Diverted;
use crate::core::destination::{
    partition_verdict, DestSet, DestinationId, PartitionVerdict, MAX_DESTINATIONS,
};
use crate::core::ordering::OrderingMode;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// A lane's run: its side and slots, in order.
type Run = (Src, Vec<i64>);

/// The most envelopes a machine follows one by one (`Outage::envelopes`);
/// past it, its followers wait for the DLQ to be drained as a whole.
const MAX_TRACKED: usize = 100_000;

/// The most keys a destination's events wait behind, per partition.
const MAX_FOLLOWED_KEYS: usize = 50_000;

/// What following one envelope costs in memory (its entries in the maps of
/// this part), charged to the in-flight byte budget while it is followed
/// one by one.
const FOLLOW_BYTES: u64 = 160;

/// The most envelopes remembered as gone before the report of their write
/// (`Outage::gone`).
const MAX_GONE: usize = 4_096;

/// What an envelope in the DLQ holds back of its destination's events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Follow {
    /// Its key's later events (`key` ordering), the key known by its
    /// 64-bit hash, seeded per machine (`Outage::seed`): whatever the
    /// key's length, an entry costs the same; a collision only holds the
    /// other key's events longer.
    Key(u64),
    /// Every later event (`partition` ordering).
    Whole,
}

/// Where an event whose turn came goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Dispatched to its destination.
    Send,
    /// Kept until its destination is back (or diverted), or, its
    /// destination up, until its key's envelopes are redelivered.
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
    /// Their bytes (counted in the budget's, with several destinations).
    bytes: u64,
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
    /// Its hold ran out while it was down with the partition paused (a
    /// paused partition diverts nothing): diverted as soon as the
    /// partition is not paused and it is still down.
    expired: bool,
    /// Keys (hashed) with events in the DLQ (dead-lettered, or diverted),
    /// and how many: their later events wait behind them (or follow them
    /// there) until they are redelivered, or the DLQ is drained. At most
    /// [`MAX_FOLLOWED_KEYS`]: past it, an envelope holds every later event
    /// of its destination (`whole`).
    keys: HashMap<u64, u32>,
    /// `partition` ordering: its events in the DLQ, each holding every
    /// later one.
    whole: u32,
}

/// An envelope followed: whose, what it holds back, and the main offset it
/// was written for (its place in its key's order).
#[derive(Debug)]
struct Tracked {
    d: DestinationId,
    follow: Follow,
    origin: i64,
    /// Followed as read from DLQ p, no report of its write seen (an
    /// earlier owner's, or its own read back before the report came).
    read: bool,
}

impl PerDestination {
    /// Some event of it waits behind the DLQ.
    fn followed(&self) -> bool {
        self.whole > 0 || !self.keys.is_empty()
    }

    /// Its events held out now (run members each).
    fn held(&self) -> usize {
        self.out.len() + self.runs.iter().map(|(_, r)| r.len()).sum::<usize>()
    }

    /// One of its envelopes was redelivered: true when what it held back
    /// is free now.
    fn redelivered(&mut self, f: Follow) -> bool {
        match f {
            Follow::Whole => {
                self.whole = self.whole.saturating_sub(1);
                self.whole == 0
            }
            Follow::Key(k) => match self.keys.get_mut(&k) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    self.keys.remove(&k);
                    true
                }
                None => false,
            },
        }
    }

    fn settle(&mut self) {
        self.keys.clear();
        self.whole = 0;
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
    /// The process-wide in-flight budget: a destination holding half of it
    /// (its events in every partition) is diverted too.
    budget: Arc<ByteBudget>,
    /// What the envelopes followed one by one are charged to `budget`.
    charged: u64,
    /// The keys' hasher (`Follow::Key`), seeded per machine.
    seed: foldhash::fast::RandomState,
    /// What order a key's events keep (none: nothing follows).
    ordering: OrderingMode,
    per: Vec<PerDestination>,
    /// The envelopes this machine wrote and follows, not redelivered yet,
    /// by the DLQ offset the broker acknowledged each at (an earlier
    /// owner's envelope for the same event is another record).
    envelopes: HashMap<i64, Tracked>,
    /// The same, per destination and key, in their key's order: (main
    /// slot, DLQ offset). A DLQ record before (in DLQ p) an envelope of
    /// its key written for an earlier event goes to the back, untried.
    order: HashMap<(DestinationId, Follow), BTreeSet<(i64, i64)>>,
    /// Envelopes redelivered before the report of their write came (read
    /// back and due at once): out of the DLQ already when it comes.
    gone: BTreeSet<i64>,
    /// DLQ p was seen drained since the assignment: every record of it is
    /// one this machine wrote.
    dlq_known: bool,
    /// `envelopes` names every envelope followed (no overflow, DLQ p's log
    /// not replaced since the last settle).
    precise: bool,
}

/// What a verdict changes: the partition's verdict, and the destinations
/// that came back (their held-out events go out).
pub(super) struct Changed {
    pub(super) verdict: PartitionVerdict,
    pub(super) back: Vec<DestinationId>,
    /// Down destinations diverted from now on: their hold ran out while
    /// the partition was paused, and it is not any more.
    pub(super) diverted: Vec<DestinationId>,
}

impl Outage {
    /// `reachable`: the destinations events can go to; `hold`:
    /// `degraded.destination_hold`; `limit`: `max_in_flight_per_partition`;
    /// `budget`: the in-flight byte budget.
    pub(super) fn new(
        reachable: DestSet,
        hold: Duration,
        limit: usize,
        ordering: OrderingMode,
        budget: Arc<ByteBudget>,
    ) -> Outage {
        Outage {
            budget,
            ordering,
            down: DestSet::default(),
            all: reachable,
            diverting: DestSet::default(),
            hold,
            share: (limit / 2).max(1),
            per: Vec::new(),
            envelopes: HashMap::new(),
            order: HashMap::new(),
            gone: BTreeSet::new(),
            dlq_known: false,
            precise: true,
            charged: 0,
            seed: foldhash::fast::RandomState::default(),
        }
    }

    /// Every record of DLQ p this machine has not read is an envelope it
    /// wrote, its key followed: DLQ p was seen drained since the assignment
    /// (what an earlier owner wrote is gone). Once true, true for the
    /// machine's life.
    pub(super) fn dlq_known(&self) -> bool {
        self.dlq_known
    }

    /// The DLQ drains while main p is read (`core::fsm`'s
    /// `DrainAlongside`): several destinations, every record of DLQ p one
    /// this machine wrote, each followed by its offset, so a key's events
    /// wait only behind its own envelopes.
    pub(super) fn alongside(&self) -> bool {
        self.all.len() > 1 && self.dlq_known && self.precise
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
                (true, false) => {
                    self.of(d).expired = false;
                    back.push(d);
                }
                _ => {}
            }
        }
        let mut diverted = Vec::new();
        for i in 0..self.per.len() {
            let d = DestinationId(i as u8);
            if self.per[i].expired && self.down.contains(d) && self.divert_now(d) {
                diverted.push(d);
            }
        }
        Changed {
            verdict: self.verdict(),
            back,
            diverted,
        }
    }

    /// An event of `d` holding `bytes` is begun.
    pub(super) fn begin(&mut self, d: DestinationId, bytes: u64) {
        let several = self.all.len() > 1;
        self.of(d);
        let p = &mut self.per[d.index()];
        p.begun += 1;
        if several {
            p.bytes += bytes;
            self.budget.hold_for(d, bytes);
        }
    }

    /// An event of `d` holding `bytes` finished; `diverted`: its divert.
    pub(super) fn finish(&mut self, d: DestinationId, diverted: bool, bytes: u64) {
        let several = self.all.len() > 1;
        self.of(d);
        let p = &mut self.per[d.index()];
        p.begun = p.begun.saturating_sub(1);
        if several {
            let bytes = bytes.min(p.bytes);
            p.bytes -= bytes;
            self.budget.release_for(d, bytes);
        }
        if diverted {
            p.diverts = p.diverts.saturating_sub(1);
            p.checks = 0;
        }
    }

    /// What an envelope of an event of `d` with `key` holds back in the DLQ
    /// (`None`: nothing, the ordering makes no promise for it).
    fn follow_of(&self, key: Option<&[u8]>) -> Option<Follow> {
        match (self.ordering, key) {
            (OrderingMode::Key, Some(k)) => {
                Some(Follow::Key(std::hash::BuildHasher::hash_one(&self.seed, k)))
            }
            (OrderingMode::Partition, _) => Some(Follow::Whole),
            (OrderingMode::Key, None) | (OrderingMode::Unordered, _) => None,
        }
    }

    /// Follows a new envelope of `d` acknowledged at DLQ offset `at`,
    /// written for main offset `origin`.
    fn follow(&mut self, d: DestinationId, follow: Follow, at: i64, (origin, read): (i64, bool)) {
        let p = self.of(d);
        let follow = match follow {
            // Past the cap: it holds every later event of its destination.
            Follow::Key(h) if p.keys.len() >= MAX_FOLLOWED_KEYS && !p.keys.contains_key(&h) => {
                Follow::Whole
            }
            f => f,
        };
        match &follow {
            Follow::Key(h) => *p.keys.entry(*h).or_default() += 1,
            Follow::Whole => p.whole += 1,
        }
        let t = Tracked {
            d,
            follow,
            origin,
            read,
        };
        self.track(at, t);
    }

    fn track(&mut self, at: i64, t: Tracked) {
        if !self.precise {
            return;
        }
        let place = (t.origin, at);
        let key = (t.d, t.follow.clone());
        let again = self.envelopes.insert(at, t).is_some();
        self.order.entry(key).or_default().insert(place);
        self.budget.charge(FOLLOW_BYTES);
        self.charged += FOLLOW_BYTES;
        if again || self.envelopes.len() > MAX_TRACKED {
            // Its followers wait for the DLQ to be drained as a whole.
            self.forget_envelopes();
        }
    }

    fn untrack(&mut self, at: i64) -> Option<Tracked> {
        let t = self.envelopes.remove(&at)?;
        let bytes = FOLLOW_BYTES.min(self.charged);
        self.budget.give_back(bytes);
        self.charged -= bytes;
        let key = (t.d, t.follow.clone());
        if let Some(places) = self.order.get_mut(&key) {
            places.remove(&(t.origin, at));
            if places.is_empty() {
                self.order.remove(&key);
            }
        }
        Some(t)
    }

    /// An envelope this machine wrote lies at or after DLQ offset `from`
    /// (where it reads DLQ p next, or the log's start if that is further):
    /// not read back yet, so DLQ p is not drained, whatever a lag check
    /// says of its end (one asked before the write, or an end taken from
    /// what the group consumer had handed over while it was on its way).
    pub(super) fn unread_envelope(&self, from: i64) -> bool {
        self.precise && self.envelopes.iter().any(|(&at, t)| !t.read && at >= from)
    }

    /// The envelopes are no longer followed one by one: what they hold back
    /// waits until the DLQ is drained as a whole ([`Outage::lag_checked`]).
    pub(super) fn forget_envelopes(&mut self) {
        self.budget.give_back(self.charged);
        self.charged = 0;
        self.precise = false;
        self.envelopes = HashMap::new();
        self.order = HashMap::new();
        self.gone = BTreeSet::new();
    }

    /// The event of `d` with `key` at main offset `origin` was dead-lettered
    /// (or diverted), its envelope acknowledged at DLQ offset `at`: its
    /// key's later events to `d` wait behind it until it is redelivered
    /// ([`Outage::redelivered`]) or the DLQ is drained.
    pub(super) fn dead_lettered(
        &mut self,
        d: DestinationId,
        key: Option<&[u8]>,
        (origin, at): (i64, i64),
    ) {
        self.written(d);
        let Some(follow) = self.follow_of(key) else {
            return;
        };
        if self.gone.remove(&at) {
            return;
        }
        match self.read_first(at) {
            // Read back before its report came: counted already.
            Some(t) => self.track(at, Tracked { read: false, ..t }),
            None => self.follow(d, follow, at, (origin, false)),
        }
    }

    /// The envelope at DLQ offset `at`, if DLQ p was read past it before
    /// the report of its write came (`read_from_dlq` followed it then, as
    /// one it did not write): untracked, still counted.
    fn read_first(&mut self, at: i64) -> Option<Tracked> {
        let read = self.envelopes.get(&at).is_some_and(|t| t.read);
        if self.precise && read {
            self.untrack(at)
        } else {
            None
        }
    }

    /// An envelope of `d` was written to the DLQ (again): the next lag
    /// check may have been asked before it, so two more are needed before
    /// DLQ p counts as drained for `d` ([`Outage::lag_checked`]).
    fn written(&mut self, d: DestinationId) {
        self.of(d).checks = 0;
    }

    /// The DLQ record of `d` with `key` at DLQ offset `old` (`None`: of a
    /// log replaced since) was written to the DLQ again, at `at` (its
    /// redelivery failed, or it went behind another): it keeps its place in
    /// its key's order, and what it held back waits behind it. An earlier
    /// owner's envelope is followed from now on, as the oldest of its key.
    pub(super) fn written_again(
        &mut self,
        d: DestinationId,
        key: Option<&[u8]>,
        (old, at): (Option<i64>, i64),
    ) {
        self.written(d);
        let Some(follow) = self.follow_of(key) else {
            return;
        };
        let read = self.read_first(at);
        let moved = old.and_then(|o| self.untrack(o).map(|t| (o, t)));
        if let Some((o, t)) = &moved {
            self.left_unreported(*o, t);
        }
        match (moved.map(|(_, t)| t), read) {
            (Some(t), None) => self.track(at, Tracked { read: false, ..t }),
            // Counted twice (as it was, and as read back): once is enough.
            (Some(t), Some(r)) => {
                self.of(r.d).redelivered(r.follow);
                self.track(at, Tracked { read: false, ..t });
            }
            (None, Some(r)) => self.track(at, Tracked { read: false, ..r }),
            (None, None) => self.follow(d, follow, at, (i64::MIN, false)),
        }
    }

    /// A record of DLQ p at `offset`, of `d` with `key`, written for main
    /// offset `origin`, was read: one this machine wrote is followed
    /// already; another (an earlier owner's, or its own read back before
    /// the report of its write came) is followed from now on, in its key's
    /// order by `origin` (the oldest without one), so that its key's later
    /// events wait behind it too.
    pub(super) fn read_from_dlq(
        &mut self,
        d: DestinationId,
        key: Option<&[u8]>,
        (offset, origin): (i64, Option<i64>),
    ) {
        if self.precise && self.envelopes.contains_key(&offset) {
            return;
        }
        if let Some(follow) = self.follow_of(key) {
            self.follow(d, follow, offset, (origin.unwrap_or(i64::MIN), true));
        }
    }

    /// The DLQ record at DLQ offset `offset` was redelivered (or parked):
    /// returns its destination when events it held back may go now.
    pub(super) fn redelivered(&mut self, offset: i64, key: Option<&[u8]>) -> Option<DestinationId> {
        let Some(Tracked {
            d, follow, read, ..
        }) = self.untrack(offset)
        else {
            if self.precise && self.follow_of(key).is_some() {
                self.gone_before_report(offset);
            }
            return None;
        };
        if read {
            self.gone_before_report(offset);
        }
        let p = self.of(d);
        (p.redelivered(follow) && p.held() > 0).then_some(d)
    }

    /// A followed envelope read from DLQ p left DLQ offset `offset`
    /// (redelivered, or written again): the report of its write, if it was
    /// this machine's and is still to come, finds it gone.
    fn left_unreported(&mut self, offset: i64, t: &Tracked) {
        if t.read {
            self.gone_before_report(offset);
        }
    }

    fn gone_before_report(&mut self, offset: i64) {
        // The oldest go first: a report comes within moments of its write
        // (an earlier owner's envelope never has one).
        if self.gone.len() >= MAX_GONE {
            self.gone.pop_first();
        }
        self.gone.insert(offset);
    }

    /// The DLQ record at DLQ offset `offset` is one this machine follows,
    /// and an envelope of its key written for an earlier event is after it
    /// in DLQ p (written again): it must go behind that one.
    fn out_of_order(&self, offset: i64) -> bool {
        let Some(t) = self.envelopes.get(&offset) else {
            return false;
        };
        self.order
            .get(&(t.d, t.follow.clone()))
            .is_some_and(|places| {
                places
                    .range(..(t.origin, i64::MIN))
                    .any(|&(_, at)| at > offset)
            })
    }

    /// Where an event of `d` with `key` from `src` whose turn came goes (with
    /// the partition not paused). `d` down: held out, or to the DLQ once
    /// diverted or behind its key's envelope. `d` up: an event behind its
    /// key's envelopes waits for them (held out), or follows them into the
    /// DLQ once `d` holds its share of the partition.
    ///
    /// A DLQ record (`dlq`: its DLQ offset) before an envelope of its key
    /// written again follows it to the back of the DLQ, untried.
    pub(super) fn route(
        &self,
        d: DestinationId,
        key: Option<&[u8]>,
        src: Src,
        dlq: Option<i64>,
    ) -> Route {
        let down = self.down.contains(d);
        let p = self.per.get(d.index());
        let follows = src == Src::Main && p.is_some_and(|p| self.follows(p, key));
        let behind = dlq.is_some_and(|o| self.out_of_order(o));
        if behind {
            Route::Divert(Diverted::BehindDlq)
        } else if src == Src::Main && down && self.diverting.contains(d) {
            Route::Divert(Diverted::Unavailable)
        } else if follows && (down || self.full(d)) {
            Route::Divert(Diverted::BehindDlq)
        } else if down || follows {
            Route::HoldOut
        } else {
            Route::Send
        }
    }

    /// Events of `p` with `key` wait behind an envelope in the DLQ. Per
    /// dispatch: no hashing of the key while no key follows (the usual
    /// case).
    fn follows(&self, p: &PerDestination, key: Option<&[u8]>) -> bool {
        p.whole > 0
            || (!p.keys.is_empty()
                && key.is_some_and(|k| {
                    let h = std::hash::BuildHasher::hash_one(&self.seed, k);
                    p.keys.contains_key(&h)
                }))
    }

    /// A divert of `d` goes out.
    pub(super) fn diverted(&mut self, d: DestinationId) {
        self.of(d).diverts += 1;
    }

    /// An event of `d` counted as diverted was routed otherwise when it
    /// was dispatched again (its divert's work vanished): no longer one.
    pub(super) fn undiverted(&mut self, d: DestinationId) {
        let p = self.of(d);
        p.diverts = p.diverts.saturating_sub(1);
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
    /// current and it is still down (once the partition is not paused, if
    /// it is now). Returns whether what `d` holds out goes to the DLQ now:
    /// it starts diverting, or was still diverted from an earlier outage
    /// (events held out behind their envelopes while it was up are
    /// diverted with the rest).
    pub(super) fn hold_over(&mut self, d: DestinationId, epoch: u32) -> bool {
        let p = self.of(d);
        if p.epoch != epoch {
            return false;
        }
        p.timing = false;
        self.down.contains(d) && self.divert_now(d)
    }

    /// `d`, down, is diverted from now on — unless the partition is paused
    /// (it diverts nothing): then once it is not (`set_down`), if `d` is
    /// still down. Returns whether what `d` holds out goes now.
    fn divert_now(&mut self, d: DestinationId) -> bool {
        let paused = self.verdict().paused;
        let p = self.of(d);
        p.expired = paused;
        if paused {
            return false;
        }
        self.diverting.insert(d);
        true
    }

    /// A destination that is up has envelopes in the DLQ that its events
    /// wait behind: the DLQ is drained (alongside main p, or, not
    /// [`Outage::alongside`], with main p waiting, as degraded mode always
    /// did).
    pub(super) fn awaits_drain(&self) -> bool {
        (0..self.per.len()).any(|i| {
            let d = DestinationId(i as u8);
            let waits = self.diverting.contains(d) || self.per[i].followed();
            waits && !self.down.contains(d)
        })
    }

    /// `d` holds its share: half of `max_in_flight_per_partition` events
    /// of the partition, or half of the in-flight byte budget with its
    /// events in every partition.
    fn full(&self, d: DestinationId) -> bool {
        self.per
            .get(d.index())
            .is_some_and(|p| p.begun >= self.share)
            || self.budget.held_for(d) >= (self.budget.limit() / 2).max(1)
    }

    /// Destinations that are up, hold events out behind their envelopes
    /// and hold their share: those go on into the DLQ.
    pub(super) fn behind_over_share(&self) -> Vec<DestinationId> {
        (0..self.per.len())
            .map(|i| DestinationId(i as u8))
            .filter(|&d| {
                let p = &self.per[d.index()];
                !self.down.contains(d) && p.followed() && p.held() > 0 && self.full(d)
            })
            .collect()
    }

    /// The down destinations that hold their share of the partition's
    /// events and are not diverted yet: diverted from now on.
    pub(super) fn over_share(&mut self) -> Vec<DestinationId> {
        let mut over = Vec::new();
        for i in 0..self.per.len() {
            let d = DestinationId(i as u8);
            if self.down.contains(d) && self.full(d) && self.start_diverting(d) {
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
    /// after its last event reached the DLQ (the first may have been asked
    /// before the write), with the DLQ drained, is no longer diverted and
    /// nothing of it waits behind the DLQ any more (what the envelopes
    /// followed one by one did not free: after an overflow, or envelopes
    /// written by an earlier owner). Returns those that hold events out.
    pub(super) fn lag_checked(&mut self, dlq_drained: bool) -> Vec<DestinationId> {
        self.dlq_known |= dlq_drained;
        let mut freed = Vec::new();
        for i in 0..self.per.len() {
            let d = DestinationId(i as u8);
            let p = &mut self.per[i];
            p.checks = p.checks.saturating_add(1);
            let settled = p.diverts == 0 && p.checks >= 2;
            let waits = self.diverting.contains(d) || p.followed();
            if waits && !self.down.contains(d) && settled && dlq_drained {
                self.diverting.remove(d);
                p.settle();
                if p.held() > 0 {
                    freed.push(d);
                }
                if !self.envelopes.is_empty() {
                    self.envelopes.retain(|_, t| t.d != d);
                    self.order.retain(|(e, _), _| *e != d);
                }
            }
        }
        if !self.precise && self.per.iter().all(|p| !p.followed()) {
            self.precise = true;
        }
        freed
    }

    /// Each destination's events held out now (run members each), for every
    /// destination that ever held some out.
    pub(super) fn each_held_out(&self, mut f: impl FnMut(DestinationId, usize)) {
        for (i, p) in self.per.iter().enumerate() {
            f(DestinationId(i as u8), p.held());
        }
    }

    /// What the envelopes followed are charged to the in-flight budget.
    #[cfg(test)]
    pub(super) fn charged(&self) -> u64 {
        self.charged
    }

    /// Main events of `d` held out now (run members each).
    #[cfg(test)]
    pub(super) fn held_main(&self, d: DestinationId) -> usize {
        self.per.get(d.index()).map_or(0, |p| {
            p.out.iter().filter(|(s, _)| *s == Src::Main).count()
                + p.runs
                    .iter()
                    .filter(|(s, _)| *s == Src::Main)
                    .map(|(_, r)| r.len())
                    .sum::<usize>()
        })
    }

    /// Diverted destinations (the status and tests).
    #[cfg(test)]
    pub(super) fn diverting(&self) -> DestSet {
        self.diverting
    }
}

/// A machine that ends (its actor stopped or crashed) no longer holds its
/// destinations' bytes (as its `budget::Share` gives back the budget's).
impl Drop for Outage {
    fn drop(&mut self) {
        self.budget.give_back(self.charged);
        for (i, p) in self.per.iter().enumerate() {
            self.budget.release_for(DestinationId(i as u8), p.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: DestinationId = DestinationId(1);

    fn unlimited() -> Arc<ByteBudget> {
        Arc::new(ByteBudget::new(u64::MAX))
    }

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
            unlimited(),
        )
    }

    #[test]
    fn a_down_destination_is_held_out_and_released_when_back() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT, 10);
        o.begin(X, 10);
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
        assert_eq!(o.route(X, None, Src::Main, None), Route::HoldOut);
        assert_eq!(
            o.route(DestinationId::DEFAULT, None, Src::Main, None),
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
        assert_eq!(o.route(X, None, Src::Main, None), Route::Send);
        assert!(!o.hold_over(X, 1), "back before its hold was over");
        o.set_down(down(&[1]), &mut fx);
        assert!(!o.hold_over(X, 1), "an earlier outage's timer is stale");
        assert!(o.hold_over(X, 2));
    }

    #[test]
    fn a_long_outage_diverts_and_a_flap_does_not_restart_the_hold() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT, 10);
        o.set_down(down(&[1]), &mut fx);
        o.set_down(down(&[]), &mut fx);
        o.set_down(down(&[1]), &mut fx);
        assert_eq!(fx.len(), 1, "a flapping destination keeps its first timer");
        assert!(o.hold_over(X, 1), "timed from when it first went down");
        assert_eq!(
            o.route(X, None, Src::Main, None),
            Route::Divert(Diverted::Unavailable)
        );
        assert_eq!(
            o.route(X, None, Src::Dlq, None),
            Route::HoldOut,
            "the DLQ's own records wait"
        );
        o.begin(X, 10);
        o.diverted(X);
        o.set_down(down(&[]), &mut fx);
        assert_eq!(
            o.route(X, Some(&b"fresh"[..]), Src::Main, None),
            Route::Send,
            "back: a key with nothing in the DLQ goes"
        );
        assert_eq!(
            o.route(X, None, Src::Dlq, None),
            Route::Send,
            "the drain goes"
        );
        assert!(o.awaits_drain(), "still diverted until the DLQ is drained");
        o.set_down(down(&[1]), &mut fx);
        assert_eq!(
            o.route(X, None, Src::Main, None),
            Route::Divert(Diverted::Unavailable),
            "down again within the outage: diverted at once"
        );
        o.set_down(down(&[]), &mut fx);
        o.lag_checked(true);
        o.lag_checked(true);
        assert!(o.awaits_drain(), "a divert still in flight");
        o.finish(X, true, 10);
        o.lag_checked(true);
        assert!(o.awaits_drain(), "one lag check may predate the write");
        o.lag_checked(false);
        assert!(o.awaits_drain(), "DLQ not drained");
        o.lag_checked(true);
        assert!(!o.awaits_drain());
        o.set_down(down(&[1]), &mut fx);
        assert_eq!(
            o.route(X, None, Src::Main, None),
            Route::HoldOut,
            "a new outage is held out first"
        );
    }

    #[test]
    fn a_destination_holding_its_share_is_diverted() {
        let mut o = outage();
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT, 10);
        o.set_down(down(&[1]), &mut fx);
        for _ in 0..4 {
            o.begin(X, 10);
        }
        assert!(o.over_share().is_empty());
        o.begin(X, 10);
        assert_eq!(o.over_share(), vec![X]);
        assert!(o.over_share().is_empty(), "once");
        assert!(o.diverting().contains(X));
    }

    #[test]
    fn a_key_with_an_event_in_the_dlq_waits_until_it_is_redelivered() {
        let mut o = outage();
        let k = Some(&b"k"[..]);
        o.dead_lettered(X, k, (7, 7));
        o.dead_lettered(X, k, (9, 9));
        assert_eq!(
            o.route(X, k, Src::Main, None),
            Route::HoldOut,
            "behind 7 and 9"
        );
        assert_eq!(
            o.route(X, Some(&b"other"[..]), Src::Main, None),
            Route::Send
        );
        assert_eq!(
            o.route(DestinationId::DEFAULT, k, Src::Main, None),
            Route::Send,
            "another destination"
        );
        assert!(o.awaits_drain());
        o.hold_out(X, Src::Main, vec![10]);
        assert_eq!(o.redelivered(7, None), None, "9 still holds it");
        assert_eq!(o.redelivered(3, None), None, "not an envelope it follows");
        assert_eq!(o.redelivered(9, None), Some(X), "free: what it held goes");
        assert_eq!(o.route(X, k, Src::Main, None), Route::Send);
        assert!(!o.awaits_drain());
        // Holding its share of the partition, the key follows into the DLQ.
        o.dead_lettered(X, k, (11, 11));
        for _ in 0..5 {
            o.begin(X, 10);
        }
        assert_eq!(
            o.route(X, k, Src::Main, None),
            Route::Divert(Diverted::BehindDlq)
        );
        assert_eq!(o.behind_over_share(), vec![X], "what it held goes on too");
        let mut single = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
            unlimited(),
        );
        single.dead_lettered(DestinationId::DEFAULT, k, (1, 1));
        assert_eq!(
            single.route(DestinationId::DEFAULT, k, Src::Main, None),
            Route::HoldOut,
            "one destination: the key waits behind its envelope too"
        );
        assert_eq!(single.redelivered(1, None), None, "nothing was held out");
        assert_eq!(
            single.route(DestinationId::DEFAULT, k, Src::Main, None),
            Route::Send,
            "redelivered: the key goes on"
        );
        let mut p = Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Partition,
            unlimited(),
        );
        p.dead_lettered(X, None, (1, 1));
        assert_eq!(p.route(X, None, Src::Main, None), Route::HoldOut);
        p.redelivered(1, None);
        assert_eq!(p.route(X, None, Src::Main, None), Route::Send);
        let mut u = Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Unordered,
            unlimited(),
        );
        u.dead_lettered(X, k, (1, 1));
        assert_eq!(
            u.route(X, k, Src::Main, None),
            Route::Send,
            "no order promise"
        );
    }

    /// Issue 54 item 13: a key followed costs the same whatever its length
    /// (a seeded hash, not a copy), is charged to the in-flight budget while
    /// followed and given back after; past `MAX_FOLLOWED_KEYS` keys an
    /// envelope holds every later event of its destination.
    #[test]
    fn follow_state_is_hashed_charged_and_capped() {
        let budget = Arc::new(ByteBudget::new(1 << 30));
        let mut o = Outage::new(
            DestSet::first(2),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
            budget.clone(),
        );
        let huge = vec![7u8; 1 << 20];
        o.dead_lettered(X, Some(&huge), (1, 1));
        assert_eq!(budget.used(), FOLLOW_BYTES, "a megabyte key costs an entry");
        assert_eq!(o.route(X, Some(&huge), Src::Main, None), Route::HoldOut);
        assert_eq!(
            o.route(X, Some(&b"other"[..]), Src::Main, None),
            Route::Send
        );
        o.redelivered(1, None);
        assert_eq!(budget.used(), 0, "given back once redelivered");
        for i in 0..MAX_FOLLOWED_KEYS as i64 {
            o.dead_lettered(X, Some(&i.to_be_bytes()), (i, i));
        }
        assert_eq!(
            o.route(X, Some(&b"other"[..]), Src::Main, None),
            Route::Send
        );
        o.dead_lettered(X, Some(&b"one too many"[..]), (-1, -1));
        assert_eq!(
            o.route(X, Some(&b"other"[..]), Src::Main, None),
            Route::HoldOut,
            "past the cap: every later event waits"
        );
        drop(o);
        assert_eq!(budget.used(), 0, "a dropped machine gives its charge back");
    }

    #[test]
    fn the_dlq_drains_alongside_once_it_holds_only_envelopes_followed() {
        let mut o = outage();
        let k = Some(&b"k"[..]);
        assert!(!o.alongside(), "DLQ p may hold an earlier owner's records");
        assert!(o.lag_checked(false).is_empty());
        assert!(!o.alongside());
        o.lag_checked(true);
        assert!(o.alongside());
        // One offset written for twice (a log reset): no longer followed
        // one by one; the DLQ is drained as a whole, main p waiting.
        o.dead_lettered(X, k, (4, 4));
        o.dead_lettered(X, Some(&b"j"[..]), (4, 4));
        assert!(!o.alongside());
        assert_eq!(
            o.redelivered(4, None),
            None,
            "not followed one by one any more"
        );
        o.hold_out(X, Src::Main, vec![5]);
        o.lag_checked(true);
        assert_eq!(o.lag_checked(true), vec![X], "drained: what it held goes");
        assert_eq!(o.route(X, k, Src::Main, None), Route::Send);
        assert!(o.alongside());
        let single = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
            unlimited(),
        );
        let mut single = single;
        single.lag_checked(true);
        assert!(!single.alongside(), "one destination: main p waits");
    }

    #[test]
    fn a_destination_holding_half_the_byte_budget_is_diverted_everywhere() {
        // Two partitions' machines share a budget of 1,000 bytes; X holds
        // 200 bytes in each, under half of the events of either.
        let budget = Arc::new(ByteBudget::new(1_000));
        let new = || {
            Outage::new(
                DestSet::first(2),
                Duration::from_secs(30),
                100,
                OrderingMode::Key,
                budget.clone(),
            )
        };
        let (mut a, mut b) = (new(), new());
        let mut fx: Vec<Effect<()>> = Vec::new();
        for o in [&mut a, &mut b] {
            o.begin(DestinationId::DEFAULT, 10);
            o.set_down(down(&[1]), &mut fx);
            o.begin(X, 200);
        }
        assert!(a.over_share().is_empty() && b.over_share().is_empty());
        assert_eq!(budget.held_for(X), 400);
        a.begin(X, 100);
        assert_eq!(a.over_share(), vec![X], "half of the budget: 500 bytes");
        assert_eq!(b.over_share(), vec![X], "counted in every partition");
        a.finish(X, false, 100);
        assert_eq!(budget.held_for(X), 400);
        drop(b);
        assert_eq!(
            budget.held_for(X),
            200,
            "a dropped machine gives its count back"
        );
        let single = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            100,
            OrderingMode::Key,
            budget.clone(),
        );
        let mut single = single;
        single.begin(DestinationId::DEFAULT, 400);
        assert_eq!(
            budget.held_for(DestinationId::DEFAULT),
            10,
            "one destination: not counted"
        );
    }

    #[test]
    fn one_destination_pauses_instead() {
        let mut o = Outage::new(
            DestSet::first(1),
            Duration::from_secs(30),
            10,
            OrderingMode::Key,
            unlimited(),
        );
        let mut fx: Vec<Effect<()>> = Vec::new();
        o.begin(DestinationId::DEFAULT, 10);
        let c = o.set_down(down(&[0]), &mut fx);
        assert!(c.verdict.paused);
        for _ in 0..10 {
            o.begin(DestinationId::DEFAULT, 10);
        }
        assert!(
            !o.hold_over(DestinationId::DEFAULT, 1),
            "paused: never diverted"
        );
        assert!(o.over_share().is_empty());
        o.set_down(down(&[]), &mut fx);
        assert_eq!(
            o.route(DestinationId::DEFAULT, None, Src::Main, None),
            Route::Send
        );
    }
}
