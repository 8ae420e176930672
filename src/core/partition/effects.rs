//! What goes out of the machine: [`Effect`]s, carried out in order by
//! `actors::partition`, and the [`Note`]s worth a log line.

#[cfg(doc)]
use super::{Input, Report, Settings, MAX_ERRORED};
use super::{Src, Timer};
#[cfg(doc)]
use crate::core::byte_budget::ByteBudget;
use crate::core::completed::Completed;
use crate::core::destination::Diverted;
use crate::core::fsm::{Change, Mode};
use crate::core::offsets::{NextOffset, TrackerError};
use std::sync::Arc;
use std::time::Duration;

/// Whether a store is committed before the next auto-commit, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Stored only: the next auto-commit sends it.
    No,
    /// Committed with this offset and metadata within the pace floor, in one
    /// request with the other partitions' (`core::commit_pace`,
    /// `actors::partition::commits`): `Pace::after` events finished since the
    /// side's last commit (commits follow progress: what a crash redelivers
    /// stays near that count), or a position auto-commit does not send — the
    /// one stored before with only its metadata changed, or the first of a
    /// replaced log (below the old log's committed position): librdkafka
    /// commits a partition only when its stored position passed the
    /// committed one.
    Soon,
    /// Committed at once, alone: a drain (the next owner starts from it).
    Now,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Effect<I> {
    /// Hand this job to the delivery side; its token reports back as a [`Report`].
    Dispatch { src: Src, offset: i64, item: Arc<I> },
    /// Write these events (one, or one lane's run, in offset order) to the
    /// DLQ without a try, for `why` (`outage`), one after the other: their
    /// envelopes keep their order in DLQ p. Each job's token reports back as
    /// a [`Report`] like a dispatched job's.
    Divert {
        src: Src,
        run: Vec<(i64, Arc<I>)>,
        why: Diverted,
    },
    /// Hand these jobs (two or more, one lane's run, in offset order) to the
    /// delivery side together: it sends them in this order. Each job's token
    /// reports back on its own.
    DispatchRun { src: Src, run: Vec<(i64, Arc<I>)> },
    /// Resume (`on`) or pause fetching one topic of the pair.
    SetReading { src: Src, on: bool },
    /// Store this position with `metadata`, the offsets done above it
    /// (`core::completed`); librdkafka's auto-commit commits it. `commit`:
    /// whether it is also committed before that (see [`Commit`]).
    Store {
        src: Src,
        offset: NextOffset,
        metadata: String,
        commit: Commit,
    },
    /// The partition is being handed over (a drain began): take back its
    /// sides' commits still waiting in the coalesced set ([`Commit::Soon`]).
    /// Each names an older position than the handover's commits (the
    /// drain's own, and the revoke's or the shutdown's commit of what is
    /// stored): flushed after them, it would move the committed position
    /// back. Asked once, as the drain begins; no [`Commit::Soon`] follows
    /// (a store due during the drain waits for the drain's [`Commit::Now`]).
    ForgetWaitingCommits,
    /// Send [`Input::Timer`] after `after`.
    Schedule { after: Duration, timer: Timer },
    /// The handover is over: answer it (with the stored main position).
    HandedOver,
    /// Routed records left the fetch budget (begun, or handed back).
    TakenIn { records: usize, bytes: usize },
    /// A record waits because the in-flight byte budget is used up: register a
    /// waker with [`ByteBudget::wait`] that sends [`Input::Timer`]`(`[`Timer::Budget`]`)`.
    /// Asked once until that timer comes.
    AwaitBudget,
    /// Records begun, per side: decoded jobs held (for readiness' held
    /// count, and the records consumed).
    Begun { main: usize, dlq: usize },
    /// Events finished (durable outcome).
    Finished(usize),
    /// Records completed without dispatch: the commit's metadata named them done
    /// (`SideStart::skip`).
    Skipped(usize),
    /// The FSM's mode: after a change, and once at the first evaluation.
    Mode { mode: Mode, change: Option<Change> },
    /// Lag figures after a lag check (main: `None` when not known).
    Lag { dlq: i64, main: Option<i64> },
    /// The side is idle at `from` (nothing held, nothing waiting) while the
    /// log ends at `to`: read `[from, to)` from the broker and answer
    /// [`Input::Probed`] if nothing there is to be delivered. A transactional
    /// producer's commit marker takes the last offset of an idle partition and
    /// is never handed to the application, so a position that only follows
    /// delivered records would stay one short of the end forever (lag 1).
    /// Asked at most once per side until the next lag check after its answer.
    Probe {
        src: Src,
        from: NextOffset,
        to: NextOffset,
    },
    /// The side's topic was replaced (recreated under its name) while the
    /// position still pointed into the old log: seek the side to its new
    /// log's start and answer [`Input::ReadingFrom`]. Nothing is stored for
    /// the side until the new log's first records begin a new incarnation.
    ReadFromStart { src: Src },
    /// DLQ records from `to` on were handed back, not begun (`rewind`): seek
    /// DLQ p back to `to` and answer [`Input::DlqRewound`]. Records polled
    /// before the seek are dropped by the machine's fence.
    RewindDlq { to: i64 },
    /// Something worth a log line.
    Note(Note),
}

/// Things the log should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Note {
    /// The side's read position moved back without a seek of Courier's: the
    /// record at `to` starts a new incarnation of the log (see the module's
    /// documentation). `from`: the position the side expected next.
    /// `seen_end`: the end of the log at the last lag check (of the old
    /// incarnation: what was unread there lies in `[from, seen_end)`).
    PositionReset {
        src: Src,
        from: i64,
        to: i64,
        seen_end: Option<i64>,
    },
    /// The side's topic has another id than the side's log (deleted and
    /// recreated under its name). `read_again`: no reset has begun the new
    /// log yet (its end may already pass the old position, so no fetch is out
    /// of range): it is read again from its start ([`Effect::ReadFromStart`]).
    LogReplaced {
        src: Src,
        old: Arc<str>,
        new: Arc<str>,
        read_again: bool,
    },
    /// Offsets `[from, to)` of the side's log were deleted before they were
    /// read: librdkafka's fetch at `from` was out of range, and the next
    /// record it handed over is at `to`. `done`: what an earlier owner's
    /// commit metadata named done there (read by it, so not lost).
    DeletedUnread {
        src: Src,
        from: i64,
        to: i64,
        done: Option<Completed>,
    },
    /// A completion the tracker refused (a bug upstream).
    RefusedReport { src: Src, error: TrackerError },
    /// A job errored [`MAX_ERRORED`] times or more: it is parked instead.
    ParkingErrored { src: Src, offset: i64, times: u32 },
    /// The drain's deadline passed with jobs still in flight.
    DrainDeadline { in_flight: usize },
}
