//! The partition pair (main p + DLQ p) as a pure state machine.
//!
//! [`PartitionMachine`] makes every decision the partition actor used to make
//! inline: which records to begin and which wait in the backlog, what to dispatch
//! and when (ordering lanes, the DLQ drain and its `not_before` pacing, errored
//! jobs and their back-off), when to pause or resume either topic (degraded-mode
//! FSM, backlog hysteresis), which watermark to store and when, and how a drain on
//! revoke or shutdown ends. It reads no clock and does no I/O: time comes in with
//! every [`Input`] as a [`Now`], and what is to be done goes out as [`Effect`]s,
//! which `actors::partition` carries out (rdkafka, the delivery queue, timers,
//! metrics).
//!
//! What it guarantees: every [`Effect::Store`] carries
//! [`OffsetTracker::watermark`], so no stored offset passes a record that was taken
//! in and whose outcome is not durable; a stored offset never goes back. What it
//! relies on: records of each side arrive in offset order, except when the
//! side's read position moved back without Courier seeking it (see below),
//! every dispatched job is
//! answered once by a [`Report`] (done, or errored), and the effects are carried
//! out in order.
//!
//! A position that moves back is a new incarnation of the log, never a
//! duplicate. Courier seeks a partition only by replacing its machine (crash
//! recovery, rebalance), so a record of one machine's side at or below an offset
//! already begun means the log under the side changed: an offset reset, a topic
//! deleted and recreated, a truncation after an unclean leader election. The
//! side then starts afresh at that record ([`Note::PositionReset`]): its records
//! are taken in and delivered like any other; the old incarnation's unfinished
//! events still finish; nothing is stored for the side until they have (their
//! positions mean nothing on the new log), and then only positions of the new
//! log, never the old watermark or its metadata (which names offsets of the old
//! log); the earlier owner's metadata is no longer used to skip. Inside, each
//! side numbers its records with *slots*: a slot is the offset plus the side's
//! shift, which a reset raises so that slots keep increasing across
//! incarnations (the tracker, the lanes, the held map and the jobs' reports work
//! in slots; [`Effect::Dispatch`]'s `offset` is the slot, equal to the offset
//! until the first reset). Stores and notes carry offsets.
//!
//! The machine is generic over what a record is and what a dispatched job carries
//! ([`Intake`]): the actor decodes Kafka records into `delivery::Item`s, the tests
//! use plain data.
//!
//! # Parts
//!
//! [`PartitionMachine`] (`machine`) stays the one entry, `handle(input) ->
//! effects`: it routes each input to the parts that own what it concerns and
//! orders the effects they decide (`machine::take_in`: how a record is taken
//! in, begun at once or waiting in the backlog). Each part is a small machine
//! that owns its fields, in its own file, with its unit tests beside it:
//!
//! * `turn` — the input being handled: its time, the effects so far, the
//!   counts reported at its end;
//! * `backlog` — the intake: records taken from the consumer but not begun,
//!   per side, with their bytes, and the pauses they cause (main p at its
//!   backlog cap, DLQ p at `limit` held or while its records wait);
//! * `budget` — this machine's share of the process-wide in-flight byte
//!   budget, and its waker ([`Effect::AwaitBudget`]);
//! * `lanes` — the events held, their ordering lanes (`core::ordering`),
//!   dispatches and runs, the jobs that wait out `Paused`, errored jobs'
//!   back-off and parking;
//! * `outage` — the destinations down while the partition is not paused:
//!   their events held out, then diverted to the DLQ (I38);
//! * `dlq_drain` — the DLQ records waiting to be redelivered, in order and
//!   paced by their `not_before`, and whether DLQ p has something to drain;
//! * `rewind` — DLQ records beyond the DLQ half of the byte budget handed
//!   back (DLQ p sought back to them), and the fence that drops what was
//!   polled before that seek;
//! * `degraded` — degraded mode: the health verdict, the FSM (`core::fsm`)
//!   and its wake-ups;
//! * `handover` — where a drain (revoke, shutdown) stands;
//! * `side` — one topic of the pair, one per side in a `PerSide` (`per_side`,
//!   indexed by [`Src`]): the watermark and its slots across the log's
//!   incarnations, an earlier owner's skip set, the reading applied; with its
//!   own parts `stores` (stored position and metadata, commit pacing; and the
//!   machine's store timer), `log` (the log's identity, its confirmation by
//!   the lag checks, a replaced log read again from its start), `gaps`
//!   (records deleted unread) and `probe` (an idle tail of transaction
//!   markers).
//!
//! The interface: `records` ([`Intake`], [`Kind`], [`Begun`]), `inputs`
//! ([`Input`], [`Report`], [`Timer`], [`Positions`]), `effects` ([`Effect`],
//! [`Commit`], [`Note`]) and `settings` ([`Settings`], with each side's
//! [`SideStart`] and the commits' [`Pace`], and the constants that pace the
//! machine). Besides the parts' own tests, `tests`, `handover_tests`
//! and `log_tests` test the machine one behaviour at a time, and `model` is
//! its model-based property test.

#[cfg(test)]
use crate::core::completed::DEFAULT_MAX_METADATA_BYTES;
#[cfg(doc)]
use crate::core::offsets::OffsetTracker;
use std::time::Instant;

mod backlog;
mod budget;
mod degraded;
mod dlq_drain;
mod effects;
mod gaps;
mod handover;
mod inputs;
mod lanes;
mod log;
mod machine;
mod outage;
mod per_side;
mod probe;
mod records;
mod rewind;
mod settings;
mod side;
mod stores;
mod turn;

pub(crate) use effects::{Commit, Effect, Note};
pub(crate) use inputs::{Finished, Input, Positions, Report, Timer};
pub(crate) use machine::PartitionMachine;
pub(crate) use records::{Begun, Intake, Kind};
pub use settings::commit_after;
pub(crate) use settings::{
    commit_after_setting, Pace, Settings, SideStart, COMMIT_FLOOR, LOGS_AFTER_RESET, MAX_ERRORED,
    STORE_DELAY,
};

#[cfg(test)]
mod handover_tests;
#[cfg(test)]
mod log_tests;
#[cfg(test)]
mod model;
#[cfg(test)]
mod outage_tests;
#[cfg(test)]
mod tests;

/// What the machine's tests (`use super::*`) build and check with.
#[cfg(test)]
use {
    crate::core::byte_budget::ByteBudget, crate::core::completed, crate::core::fsm::Mode,
    crate::core::offsets::NextOffset, crate::core::ordering::OrderingMode, lanes::REDISPATCH_BASE,
    std::sync::Arc, std::time::Duration,
};

/// The tests' one destination down (`true`) or up: the verdict a single
/// API's breaker gives.
#[cfg(test)]
pub(crate) fn down_if(down: bool) -> crate::core::destination::DestSet {
    let mut s = crate::core::destination::DestSet::default();
    if down {
        s.insert(crate::core::destination::DestinationId::DEFAULT);
    }
    s
}

/// Which topic of the pair an offset belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Src {
    Main,
    Dlq,
}

impl Src {
    pub(crate) const BOTH: [Src; 2] = [Src::Main, Src::Dlq];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The time of an input: monotonic for the FSM's dwell and wake-ups, wall clock
/// for the DLQ's `not_before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    pub mono: Instant,
    pub wall_ms: i64,
}
