//! How records are taken in: begun at once while their side has room (main p
//! below `limit` held events, the in-flight byte budget not used up), or
//! waiting in the backlog, behind those of their side, until it has; DLQ
//! records beyond the DLQ half of the budget handed back (`rewind`), and
//! those polled before DLQ p was sought back to them dropped.

use super::PartitionMachine;
use crate::core::partition::budget::Take;
use crate::core::partition::side::Begin;
use crate::core::partition::{Begun, Effect, Intake, Kind, Now, Src};

/// Why a record was not begun.
enum Refused {
    /// Its side has no room yet: it waits in the backlog.
    Wait,
    /// A DLQ record beyond the DLQ half of the budget: handed back.
    HandBack,
}

impl<X: Intake> PartitionMachine<X> {
    pub(super) fn on_records(&mut self, records: Vec<X::Raw>, now: Now) {
        if self.draining() {
            // Not begun, not stored: the next owner reads them again.
            let bytes = records.iter().map(X::size).sum();
            self.taken_in(records.len(), bytes);
            return;
        }
        let (mut taken, mut bytes) = (0, 0);
        for r in records {
            let (src, offset) = X::position(&r);
            if src == Src::Dlq && !self.rewind.admits(offset) {
                // Polled before DLQ p was sought back: read again.
                taken += 1;
                bytes += X::size(&r);
                continue;
            }
            // A record waits in its side's backlog while the side has no room
            // (and behind those already waiting, to keep offset order).
            let r = if self.backlog.is_waiting(src) {
                r
            } else {
                match self.try_begin(r) {
                    Ok(size) => {
                        taken += 1;
                        bytes += size;
                        continue;
                    }
                    Err((r, Refused::Wait)) => r,
                    Err((r, Refused::HandBack)) => {
                        self.hand_back_dlq(r);
                        continue;
                    }
                }
            };
            let size = X::size(&r);
            self.backlog.push(src, r, size);
        }
        self.taken_in(taken, bytes);
        self.evaluate(now);
        self.store_all(false);
    }

    /// Records leave the fetch budget once begun or handed back.
    pub(super) fn taken_in(&mut self, records: usize, bytes: usize) {
        if records > 0 {
            self.turn.fx.push(Effect::TakenIn { records, bytes });
        }
    }

    /// Begins backlog records, in order per side, while there is room.
    pub(super) fn fill(&mut self) {
        let (mut n, mut bytes) = (0, 0);
        for src in Src::BOTH {
            while !self.draining() {
                let Some((r, size)) = self.backlog.pop(src) else {
                    break;
                };
                match self.try_begin(r) {
                    Ok(_) => {
                        n += 1;
                        bytes += size;
                    }
                    Err((r, Refused::Wait)) => {
                        self.backlog.unpop(src, r, size);
                        break;
                    }
                    Err((r, Refused::HandBack)) => {
                        self.hand_back_dlq(r);
                        break;
                    }
                }
            }
        }
        self.taken_in(n, bytes);
    }

    /// DLQ record `r` and every DLQ record waiting behind it are handed back,
    /// not begun: they leave the fetch budget, and DLQ p is sought back to
    /// `r` (`rewind`).
    fn hand_back_dlq(&mut self, r: X::Raw) {
        let (_, first) = X::position(&r);
        let (mut last, mut n, mut bytes) = (first, 1, X::size(&r));
        while let Some((r, size)) = self.backlog.pop(Src::Dlq) {
            last = X::position(&r).1;
            n += 1;
            bytes += size;
        }
        self.taken_in(n, bytes);
        self.rewind.hand_back(first, last, &mut self.turn.fx);
    }

    /// Begins `r` if its side has room: main p below `limit` held events, and
    /// the in-flight byte budget not used up (otherwise a waker is asked for),
    /// nor, for a DLQ record, its half (otherwise it is handed back).
    /// `Ok`: taken in (begun, or completed at once), with its size.
    fn try_begin(&mut self, r: X::Raw) -> Result<usize, (X::Raw, Refused)> {
        let (src, _) = X::position(&r);
        if !self.backlog.has_room(src, self.sides[src].held()) {
            return Err((r, Refused::Wait));
        }
        if src == Src::Main && self.main_waits() {
            self.main_waited = true;
            return Err((r, Refused::Wait));
        }
        let size = X::size(&r);
        match self.share.try_take(src, size as u64) {
            Take::Taken => {}
            Take::Full { ask } => {
                if ask {
                    self.turn.fx.push(Effect::AwaitBudget);
                }
                return Err((r, Refused::Wait));
            }
            Take::DlqFull => return Err((r, Refused::HandBack)),
        }
        self.begin(r, size as u64);
        Ok(size)
    }

    /// Takes one record in (its `bytes` taken from the budget): its side,
    /// held, and dispatch if its turn came.
    fn begin(&mut self, r: X::Raw, bytes: u64) {
        let (src, offset) = X::position(&r);
        let fx = &mut self.turn.fx;
        let slot = match self.sides[src].begin(src, offset, self.generation, fx) {
            Begin::Held(slot) => slot,
            Begin::Refused => return self.share.give_back(bytes),
            Begin::Skipped => {
                self.share.give_back(bytes);
                self.turn.skipped += 1;
                return;
            }
        };
        self.share.hold(src, bytes);
        self.turn.begun[src] += 1;
        let Begun { item, kind, run } = X::begin(r);
        let run = run.filter(|_| kind == Kind::Ordered);
        if src == Src::Dlq && slot - offset != self.dlq_shift {
            // A new incarnation of DLQ p (slots shifted): its offsets are
            // not those the envelopes followed were acknowledged at.
            self.dlq_shift = slot - offset;
            self.lanes.dlq_log_replaced();
        }
        let turn = self.lanes.hold(src, (slot, offset), item, kind, run, bytes);
        if let Kind::Queued { not_before_ms } = kind {
            self.dlq.push(slot, not_before_ms);
        } else if turn {
            let paused = self.degraded.paused();
            self.lanes.dispatch(src, slot, paused, &mut self.turn.fx);
        }
    }
}
