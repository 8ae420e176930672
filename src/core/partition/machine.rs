//! [`PartitionMachine`]: the one entry (`handle(input) -> effects`), composing
//! the parts: it routes each input to the parts that own what it concerns and
//! orders what they decide. How records are taken in (begun at once, or
//! waiting in the backlog) is in `take_in`.

mod take_in;

use super::backlog::Backlog;
use super::budget::Share;
use super::degraded::Degraded;
use super::dlq_drain::DlqDrain;
use super::handover::{Handover, Request};
use super::lanes::Lanes;
use super::outage::Outage;
use super::per_side::PerSide;
use super::rewind::Rewind;
use super::side::Side;
use super::stores::Storing;
use super::turn::Turn;
use super::{Effect, Finished, Input, Intake, Note, Now, Positions, Report, Settings, Src, Timer};
use crate::core::fsm::Mode;
#[cfg(test)]
use crate::core::offsets::NextOffset;
use std::sync::Arc;
use std::time::Duration;

/// The partition pair's decisions (see the module `core::partition`), made
/// by its parts. A machine that ends (its actor stopped or crashed) gives
/// back what it holds of the in-flight budget (its share drops with it).
pub(crate) struct PartitionMachine<X: Intake> {
    /// The assignment generation; reports of another one are ignored.
    generation: u64,
    sides: PerSide<Side>,
    backlog: Backlog<X::Raw>,
    share: Share,
    lanes: Lanes<X>,
    dlq: DlqDrain,
    rewind: Rewind,
    degraded: Degraded,
    handover: Handover,
    storing: Storing,
    turn: Turn<X::Item>,
    /// DLQ p's slot shift seen last (a reset raises it: `side`).
    dlq_shift: i64,
    /// A main record waited in the backlog for DLQ p to be read
    /// ([`PartitionMachine::main_waits`]).
    main_waited: bool,
    /// A main record waits for its schema ([`Input::SchemaWait`]): main p
    /// is not read.
    schema_wait: bool,
}

impl<X: Intake> PartitionMachine<X> {
    /// A machine in `Paused` that has applied nothing yet: its first input should
    /// be [`Input::Verdict`], which applies the reading the FSM chooses.
    pub(crate) fn new(settings: Settings) -> Self {
        PartitionMachine {
            generation: settings.generation,
            sides: PerSide::from_fn(|src| Side::new(&settings, src)),
            backlog: Backlog::new(
                settings.limit,
                settings.backlog_cap,
                settings.backlog_bytes_cap,
            ),
            share: Share::new(settings.budget.clone()),
            lanes: Lanes::new(
                settings.ordering,
                Outage::new(
                    settings.destinations,
                    settings.destination_hold,
                    settings.limit,
                    settings.ordering,
                    settings.budget.clone(),
                ),
            ),
            dlq: DlqDrain::new(settings.limit),
            rewind: Rewind::default(),
            degraded: Degraded::new(settings.min_pause),
            handover: Handover::new(settings.drain_timeout),
            storing: Storing::new(settings.pace),
            turn: Turn::default(),
            dlq_shift: 0,
            main_waited: false,
            schema_wait: false,
        }
    }

    /// Each destination's events held out now: their destination is down
    /// while the partition is not paused (`outage`).
    pub(crate) fn each_held_out(
        &self,
        f: impl FnMut(crate::core::destination::DestinationId, usize),
    ) {
        self.lanes.each_held_out(f);
    }

    /// What its follow state is charged to the in-flight budget (`outage`).
    #[cfg(test)]
    pub(crate) fn follow_charged(&self) -> u64 {
        self.lanes.outage().charged()
    }

    /// Main events of `d` held out now (the tests' check of holds).
    #[cfg(test)]
    pub(crate) fn held_out_main(&self, d: crate::core::destination::DestinationId) -> usize {
        self.lanes.outage().held_main(d)
    }

    /// Some destination that is up has events waiting behind the DLQ.
    #[cfg(test)]
    pub(crate) fn awaits_drain(&self) -> bool {
        self.lanes.awaits_drain()
    }

    #[cfg(test)]
    pub(crate) fn mode(&self) -> Mode {
        self.degraded.mode()
    }

    /// Jobs dispatched and not answered.
    pub(crate) fn in_flight(&self) -> usize {
        self.lanes.in_flight()
    }

    /// Events begun and not finished on one side.
    #[cfg(test)]
    pub(crate) fn held(&self, src: Src) -> usize {
        self.sides[src].held()
    }

    /// Records waiting in the backlogs (both sides).
    #[cfg(test)]
    pub(crate) fn backlog(&self) -> usize {
        self.backlog.total()
    }

    /// Records waiting in one side's backlog.
    #[cfg(test)]
    pub(crate) fn waiting(&self, src: Src) -> usize {
        self.backlog.len(src)
    }

    /// Bytes of the records waiting in the backlogs (both sides).
    #[cfg(test)]
    pub(crate) fn backlog_bytes(&self) -> usize {
        self.backlog.total_bytes()
    }

    /// Bytes this machine holds of the in-flight budget (its records', and
    /// its follow state's: `outage`).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> u64 {
        self.share.held() + self.lanes.outage().charged()
    }

    /// The last stored position of one side (as far as the machine knows).
    #[cfg(test)]
    pub(crate) fn stored(&self, src: Src) -> Option<NextOffset> {
        self.sides[src].stored()
    }

    /// Main p's records are not begun while DLQ p may hold envelopes the
    /// machine does not know (not every record of it not read is one it
    /// wrote: a new owner) and some of DLQ p is not read yet: their keys
    /// are learnt only once read (`outage`, I39, "reading order"). Records
    /// of main p that arrive meanwhile wait in the backlog, holding none of
    /// the in-flight budget; the drain goes on.
    pub(super) fn main_waits(&self) -> bool {
        !self.lanes.dlq_known()
            && (self.backlog.is_waiting(Src::Dlq)
                || self.dlq.not_begun(self.sides[Src::Dlq].read_to()))
    }

    /// A new owner's drain sends nothing before DLQ p is read to its end
    /// (I39's reading order, as [`PartitionMachine::main_waits`]): an
    /// earlier owner's envelope written again after a failed redelivery
    /// sits later in DLQ p than its key's later envelopes, and only once it
    /// is read do those go behind it. Unless DLQ p cannot be read further
    /// before some of it goes out (`full`: the partition holds its limit of
    /// DLQ records; or they wait for the byte budget).
    fn drain_waits(&self, full: bool) -> bool {
        !self.lanes.dlq_known()
            && !full
            && !self.backlog.is_waiting(Src::Dlq)
            && self.dlq.not_begun(self.sides[Src::Dlq].read_to())
    }

    /// Nothing goes out now: the partition is paused, or a drain was
    /// requested. What is released meanwhile waits (`lanes`' ready set),
    /// sent once the pause ends, never after a drain.
    fn held_back(&self) -> bool {
        self.degraded.paused() || self.draining()
    }

    /// A drain was requested (answered or not): nothing is begun or dispatched.
    pub(crate) fn draining(&self) -> bool {
        self.handover.draining()
    }

    /// Takes one input; returns what to do, in order.
    pub(crate) fn handle(&mut self, input: Input<X::Raw>, now: Now) -> Vec<Effect<X::Item>> {
        self.turn.clock = Some(now.mono);
        match input {
            Input::Records(records) => self.on_records(records, now),
            Input::Reports(reports) => self.on_reports(reports, now),
            Input::Verdict { down } => {
                let paused = self.held_back();
                let v = self.lanes.set_down(down, paused, &mut self.turn.fx);
                self.degraded.verdict(v.paused, v.drain_held);
                self.evaluate(now);
            }
            Input::Positions(p) => self.on_positions(p, now),
            Input::Logs(logs) => self.on_logs(logs),
            Input::ReadingFrom { src, start } => {
                if self.sides[src].log_mut().on_reading_from(start) {
                    self.sides[src].stores_mut().commit_next();
                    self.store_all(false);
                    self.evaluate(now);
                }
            }
            Input::DlqRewound { ok } => self.rewind.sought(ok),
            Input::SchemaWait { waiting } => {
                self.schema_wait = waiting;
                self.evaluate(now);
            }
            Input::OffsetReset { src, at } => {
                let note = self.sides[src].offset_reset(src, at);
                self.turn.push(note.map(Effect::Note));
            }
            Input::Timer(Timer::Wake) => {
                self.degraded.woken();
                self.evaluate(now);
            }
            Input::Timer(Timer::Store) => {
                self.storing.fired();
                self.store_all(false);
            }
            Input::Timer(Timer::Budget) => {
                self.share.woken();
                self.fill();
                self.evaluate(now);
            }
            Input::Timer(Timer::Redispatch { src, offset }) => {
                if !self.draining() {
                    let paused = self.degraded.paused();
                    self.lanes
                        .redispatch(src, offset, paused, &mut self.turn.fx);
                }
            }
            Input::Timer(Timer::Hold { destination, epoch }) => {
                if !self.draining() {
                    let paused = self.degraded.paused();
                    self.lanes
                        .hold_over(destination, epoch, paused, &mut self.turn.fx);
                }
            }
            Input::Timer(Timer::DrainTimeout) => {
                if self.handover.waiting() {
                    let in_flight = self.lanes.in_flight();
                    let note = Note::DrainDeadline { in_flight };
                    self.turn.fx.push(Effect::Note(note));
                    self.reply_drained();
                }
            }
            Input::Handover => self.on_drain(),
            Input::StoreFailed { src, offset } => {
                self.sides[src].stores_mut().failed(offset);
                // Try again soon; after a drain the partition is gone anyway.
                if !self.draining() {
                    self.schedule_store();
                }
            }
            Input::ReadingFailed { src } => self.sides[src].reading_failed(),
            Input::Probed { src, from, to } => {
                // Unless records came meanwhile, or the side is being handed over.
                let quiet = !self.draining() && !self.backlog.is_waiting(src);
                if quiet && self.sides[src].probed(from, to) {
                    self.store_all(false);
                }
            }
        }
        // Skipped records completed: stored like finished ones.
        if self.turn.count() && !self.draining() {
            self.schedule_store();
        }
        self.turn.close()
    }

    /// Takes a batch of answers, then re-evaluates once.
    fn on_reports(&mut self, reports: Vec<Report>, now: Now) {
        let mut advanced = false;
        for r in reports {
            advanced |= self.on_report(r);
        }
        if advanced {
            self.fill();
            let (pace, clock) = (self.storing.pace(), self.turn.clock);
            if self.sides.iter().any(|s| s.commit_ready(pace, clock)) {
                // Enough finished since the last commit and the floor is over:
                // commit now, not after the store delay. Within the floor the
                // pending store timer stores (a store per answer batch cost
                // 8-15 % of the CPU per event at C = 2,048).
                self.store_all(false);
            }
            self.schedule_store();
            self.evaluate(now);
            self.trim();
        }
        if self.handover.waiting() && self.lanes.in_flight() == 0 {
            self.reply_drained();
        }
    }

    /// A partition that has emptied gives back the room its collections grew to.
    /// Otherwise every partition keeps the capacity of its busiest moment, and
    /// with many partitions that is memory the budgets do not see (measured:
    /// ~40 KB of heap per partition at 512 partitions, docs/BENCHMARKS.md).
    fn trim(&mut self) {
        const KEEP: usize = 64;
        self.lanes.trim(KEEP);
        for side in self.sides.iter_mut() {
            side.trim(KEEP);
        }
        self.backlog.trim(KEEP);
        self.dlq.trim(KEEP);
    }

    /// One answer; true when an offset completed.
    fn on_report(&mut self, r: Report) -> bool {
        if r.generation != self.generation {
            return false; // A late report from an older incarnation: fenced off.
        }
        self.lanes.answered(r.src);
        let draining = self.draining();
        let paused = self.held_back();
        let fx = &mut self.turn.fx;
        if r.finished.is_none() {
            self.lanes.errored(r.src, r.offset, draining, fx);
            return false;
        }
        if !self.sides[r.src].complete(r.src, r.generation, r.offset, fx) {
            return false;
        }
        // Before its lane releases the next: a key's event in the DLQ holds
        // its later events to the same destination, until it is out of the
        // DLQ again (`outage`).
        let at = match r.finished {
            Some(Finished::DeadLettered { at, .. }) => Some(at),
            _ => None,
        };
        match (r.src, at) {
            (Src::Main, Some(at)) => {
                let offset = self.sides[Src::Main].offset_now(r.offset);
                self.lanes.dead_lettered(r.offset, offset, at);
            }
            (Src::Main, None) => {}
            // Written to the DLQ again: its envelope still holds them, and a
            // lag check asked before this write cannot prove DLQ p drained.
            (Src::Dlq, Some(at)) => self.lanes.written_again(r.offset, at),
            (Src::Dlq, None) => self.lanes.redelivered(r.offset, paused, fx),
        }
        if let Some(bytes) = self.lanes.finish(r.src, r.offset, draining, paused, fx) {
            self.sides[r.src].finished();
            self.turn.finished += 1;
            self.share.release(r.src, bytes);
        }
        true
    }

    fn on_positions(&mut self, p: Positions, now: Now) {
        self.dlq.on_positions(p.dlq_high, p.dlq_start);
        if !self.draining() {
            self.rewind.on_positions(p.dlq_start, &mut self.turn.fx);
        }
        self.sides[Src::Main].log_mut().on_positions(p.main_high);
        self.sides[Src::Dlq]
            .log_mut()
            .on_positions(Some(p.dlq_high));
        let draining = self.draining();
        for src in Src::BOTH {
            let waiting = self.backlog.is_waiting(src);
            let probe = self.sides[src].probe(src, waiting, draining);
            self.turn.push(probe);
        }
        let next = self.dlq.next(self.sides[Src::Dlq].next_offset());
        let next = next.unwrap_or(p.dlq_start);
        let main = match (p.main_high, self.sides[Src::Main].stored()) {
            (Some(high), Some(wm)) => Some((high - wm.get()).max(0)),
            _ => None,
        };
        let dlq = (p.dlq_high - next).max(0);
        self.turn.fx.push(Effect::Lag { dlq, main });
        let waiting = self.backlog.is_waiting(Src::Dlq);
        let after_begun = self.sides[Src::Dlq].read_to();
        let drained = !self
            .dlq
            .has_unread(now.wall_ms, (waiting, after_begun), true)
            && self.sides[Src::Dlq].held() == 0
            && !self.lanes.unread_envelope(next.max(p.dlq_start));
        let paused = self.held_back();
        self.lanes.lag_checked(drained, paused, &mut self.turn.fx);
        self.evaluate(now);
    }

    /// Compares each side's log with the topic's id now (see `log`).
    fn on_logs(&mut self, logs: [Option<Arc<str>>; 2]) {
        let mut logs = PerSide::from(logs);
        let mut learnt = false;
        for src in Src::BOTH {
            let id = logs[src].take();
            learnt |= self.sides[src].on_logs(src, id, &mut self.turn.fx);
        }
        // Stored again with the log named (an idle side stores nothing
        // otherwise).
        if learnt && !self.draining() {
            self.schedule_store();
        }
        // A seek that failed is asked again.
        for src in Src::BOTH {
            self.sides[src].log_mut().ask_seek(src, &mut self.turn.fx);
        }
    }

    /// Runs the FSM and applies its reading; dispatches due DLQ records while
    /// draining; schedules the next wake-up.
    fn evaluate(&mut self, now: Now) {
        let first = !self.sides[Src::Main].reading_known();
        let waiting = self.backlog.is_waiting(Src::Dlq);
        let after_begun = self.sides[Src::Dlq].read_to();
        // Due records waiting in a drain lane are unread too.
        let alongside = self.lanes.alongside();
        // Events waiting behind their envelopes make DLQ p worth reading
        // while main p is read too (alongside); otherwise main p waits
        // only for DLQ records due now, never for a head that is not due.
        let unknown = !self.lanes.dlq_known();
        let unread = self
            .dlq
            .has_unread(now.wall_ms, (waiting, after_begun), unknown)
            || self.lanes.drain_waiting() > 0
            || (alongside && self.lanes.awaits_drain());
        let mode = self.degraded.update(now, unread, alongside, first);
        self.turn.push(mode);
        let reading = self.degraded.reading();
        let mut full = self.backlog.pauses(self.sides[Src::Dlq].held());
        // DLQ records handed back are read again once there is room for them.
        full[Src::Dlq] |= self.rewind.holds_dlq_back(self.share.dlq_has_room());
        let main = reading.main && !full[Src::Main] && !self.schema_wait;
        let main = self.sides[Src::Main].read(Src::Main, main);
        self.turn.push(main);
        let dlq = self.sides[Src::Dlq].read(Src::Dlq, reading.dlq && !full[Src::Dlq]);
        self.turn.push(dlq);
        if self.main_waited && !self.main_waits() {
            // DLQ p is read: main p's records begin.
            self.main_waited = false;
            self.fill();
        }
        let (draining, paused) = (self.draining(), self.degraded.paused());
        let drain_waits = self.drain_waits(full[Src::Dlq]);
        let fx = &mut self.turn.fx;
        if !paused && !draining {
            self.lanes.release_ready(fx);
            self.lanes.check_shares(false, fx);
        }
        // Drain: dispatch due records in order, at most `limit` jobs at a
        // time (alongside main p: `limit` DLQ records).
        let alone = match self.degraded.mode() {
            Mode::DrainDlq if !draining => Some(true),
            Mode::DrainAlongside if !draining => Some(false),
            _ => None,
        };
        let next_due = if let Some(alone) = alone {
            // Those whose drain lane freed first (taken under the limit).
            self.lanes.dispatch_ready_drain(paused, fx);
            let in_flight = if alone {
                self.lanes.in_flight()
            } else {
                self.lanes.in_flight_dlq()
            };
            let (due, next) = if drain_waits {
                (Vec::new(), None)
            } else {
                self.dlq.take_due(now.wall_ms, in_flight)
            };
            for slot in due {
                self.lanes.dispatch_due(slot, paused, fx);
            }
            next
        } else {
            self.dlq.head_due_at(now.wall_ms)
        };
        let wake = self.degraded.wake(now, next_due);
        self.turn.push(wake);
    }

    /// Stores the advanced watermarks soon (see [`super::STORE_DELAY`]),
    /// once for many completions.
    fn schedule_store(&mut self) {
        let schedule = self.storing.schedule();
        self.turn.push(schedule);
    }

    /// Stores each side's watermark when it advanced (see `stores`); `now`:
    /// a drain's answer, which commits at once.
    fn store_all(&mut self, now: bool) {
        let mut later: Option<Duration> = None;
        let draining = self.draining();
        let (pace, clock) = (self.storing.pace(), self.turn.clock);
        for src in Src::BOTH {
            let (store, wait) = self.sides[src].store(src, pace, clock, now, draining);
            self.turn.push(store);
            if let Some(wait) = wait {
                later = Some(later.map_or(wait, |l| l.min(wait)));
            }
        }
        if let Some(after) = later.filter(|_| !draining) {
            let schedule = self.storing.schedule_after(after);
            self.turn.push(schedule);
        }
    }

    fn on_drain(&mut self) {
        match self.handover.request() {
            Request::Pending => return,
            Request::AnswerAgain => return self.reply_drained(),
            Request::Begin => {}
        }
        // Not begun, not stored: the next owner reads them again.
        let (waiting, bytes) = self.backlog.hand_back();
        self.taken_in(waiting, bytes);
        self.turn.fx.push(Effect::ForgetWaitingCommits);
        self.store_all(true);
        if self.lanes.in_flight() == 0 {
            self.reply_drained();
        } else {
            self.turn.fx.push(Effect::Schedule {
                after: self.handover.timeout(),
                timer: Timer::DrainTimeout,
            });
        }
    }

    fn reply_drained(&mut self) {
        self.store_all(true);
        self.handover.answered();
        self.turn.fx.push(Effect::HandedOver);
    }
}
