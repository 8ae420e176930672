//! What comes into the machine: records (through [`Intake`]), job reports,
//! lag checks, timers, a drain.

use super::Src;
#[cfg(doc)]
use super::{Effect, Intake, Note, STORE_DELAY};
use crate::core::destination::{DestSet, DestinationId};
use crate::core::offsets::NextOffset;
use std::sync::Arc;

/// What the consumer's lag check found for one partition pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Positions {
    /// End offset of main p (None: not known).
    pub main_high: Option<i64>,
    /// End offset of DLQ p.
    pub dlq_high: i64,
    /// Where reading DLQ p starts when nothing was read (committed or earliest).
    pub dlq_start: i64,
}

/// How an event finished: its outcome is durable — delivered, or its
/// envelope acknowledged in the DLQ or the parking lot (the reason is the
/// failure's, `courier_*_total{reason}`'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    /// The API answered 2xx or 409.
    Delivered,
    /// The envelope is acknowledged in the DLQ, at DLQ offset `at` (of
    /// this partition's DLQ p): how the machine knows it again when it is
    /// read back (`outage`).
    DeadLettered { reason: String, at: i64 },
    /// The envelope is acknowledged in the parking lot.
    Parked { reason: String },
}

/// A job's report to its partition, as its completion token gives it:
/// finished, or (`finished: None`) errored — the work vanished without an
/// outcome, and the event is dispatched again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub generation: u64,
    pub src: Src,
    pub offset: i64,
    pub finished: Option<Finished>,
}

/// A timer the machine asked for ([`Effect::Schedule`]); it comes back as
/// [`Input::Timer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Re-evaluate the FSM (a dwell ended or a DLQ record became due).
    Wake,
    /// Store the watermarks that advanced since the last store.
    Store,
    /// An errored job's back-off is over.
    Redispatch { src: Src, offset: i64 },
    /// The drain's deadline.
    DrainTimeout,
    /// The in-flight byte budget has room again (the waker of
    /// [`Effect::AwaitBudget`]).
    Budget,
    /// A down destination's `degraded.destination_hold` is over (for its
    /// outage numbered `epoch`): diverted if still down (`outage`).
    Hold {
        destination: DestinationId,
        epoch: u32,
    },
}

#[derive(Debug)]
pub(crate) enum Input<R> {
    /// Records routed to this partition, in offset order per side.
    Records(Vec<R>),
    /// Answers of dispatched jobs, in arrival order.
    Reports(Vec<Report>),
    /// The destinations now unavailable (also the first input: it applies
    /// the initial reading). The machine makes the partition's verdict of
    /// them (`core::destination::partition_verdict`: paused when every
    /// destination of its events is down) and holds out or diverts a down
    /// destination's events (`outage`).
    Verdict {
        down: DestSet,
    },
    /// The consumer's lag check.
    Positions(Positions),
    /// The topics' ids (main, DLQ) the consumer's lag check read (`None`: not
    /// known): a side whose log's id changed reads its new log from the start
    /// ([`Effect::ReadFromStart`]) unless a reset already began it.
    Logs([Option<Arc<str>>; 2]),
    /// librdkafka moved the side's position after its fetch at `at` was out
    /// of range (the log start passed it): the records from `at` to the next
    /// one handed over were deleted unread ([`Note::DeletedUnread`]). It
    /// arrives in no order with the records.
    OffsetReset {
        src: Src,
        at: i64,
    },
    /// The answer to [`Effect::ReadFromStart`]: the side was sought to
    /// `start`, its new log's start offset (`None`: the seek failed; asked
    /// again at the next [`Input::Logs`]).
    ReadingFrom {
        src: Src,
        start: Option<i64>,
    },
    /// A registry-framed main record waits for its schema, with every record
    /// after it (`actors::partition::schemas`), or none waits any more: main
    /// p is not read while one waits (the records are fetched already; the
    /// machine has not seen them).
    SchemaWait {
        waiting: bool,
    },
    /// The answer to [`Effect::RewindDlq`]: whether DLQ p was sought back
    /// (a failed seek is asked again at the next lag check).
    DlqRewound {
        ok: bool,
    },
    Timer(Timer),
    /// Revoke or shutdown: stop dispatching, hand the backlog back, answer
    /// [`Effect::HandedOver`] once nothing is in flight (or at the deadline).
    Handover,
    /// An [`Effect::Store`] failed (expected while a rebalance takes the
    /// partition away): the watermark counts as not stored, and is stored again
    /// after [`STORE_DELAY`] unless a handover was requested.
    StoreFailed {
        src: Src,
        offset: NextOffset,
    },
    /// An [`Effect::SetReading`] failed (e.g. DLQ p is not assigned): the reading
    /// counts as unknown and is applied again at the next evaluation.
    ReadingFailed {
        src: Src,
    },
    /// The answer to an [`Effect::Probe`] that found nothing to deliver in
    /// `[from, to)` (read from the broker with `read_committed`: only
    /// transaction markers and aborted records lie there). A probe that found
    /// a record, or failed, is not answered.
    Probed {
        src: Src,
        from: NextOffset,
        to: NextOffset,
    },
}
