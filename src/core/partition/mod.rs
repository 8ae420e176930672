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

use crate::core::backoff::persistent_delay;
use crate::core::byte_budget::ByteBudget;
pub use crate::core::completed::DEFAULT_MAX_METADATA_BYTES;
use crate::core::completed::{self, Completed};
use crate::core::fsm::{Change, Mode, PartitionFsm};
use crate::core::offsets::{NextOffset, OffsetTracker, TrackerError};
use crate::core::ordering::{OrderingMode, Release, RunGroup, Scheduler};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(test)]
mod handover_tests;
#[cfg(test)]
mod log_tests;
#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

/// A job that errored this many times (its task vanished without an outcome) is
/// parked with reason `internal_error` instead of being retried forever.
pub const MAX_ERRORED: u32 = 20;

/// How long an advanced watermark may wait before it is stored. Storing costs a
/// librdkafka call (and a lock) per store; per completion that showed in the
/// profile. Auto-commit runs every `auto_commit_interval_ms` anyway, and a later
/// store only ever means re-reading a little more after a crash.
pub const STORE_DELAY: Duration = Duration::from_millis(10);

/// Back-off before an errored job is dispatched again (doubling per error).
const REDISPATCH_BASE: Duration = Duration::from_millis(100);
const REDISPATCH_CAP: Duration = Duration::from_secs(5);

/// The held map's hasher. Its keys are a side and a slot (an offset the broker
/// numbered, plus the side's shift): no producer chooses them, so the
/// standard library's SipHash (its DoS resistance is for keys an attacker
/// picks; ~0.5 µs per event here, docs/BENCHMARKS.md run 12) is not needed.
type SlotHash = foldhash::fast::FixedState;

/// Which topic of the pair an offset belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Src {
    Main,
    Dlq,
}

impl Src {
    pub const BOTH: [Src; 2] = [Src::Main, Src::Dlq];

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The time of an input: monotonic for the FSM's dwell and wake-ups, wall clock
/// for the DLQ's `not_before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono: Instant,
    pub wall_ms: i64,
}

/// What the consumer's lag check found for one partition pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Positions {
    /// End offset of main p (None: not known).
    pub main_high: Option<i64>,
    /// End offset of DLQ p.
    pub dlq_high: i64,
    /// Where reading DLQ p starts when nothing was read (committed or earliest).
    pub dlq_start: i64,
}

/// How a begun record is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An event to deliver: waits behind its ordering lane (`core::ordering`).
    Ordered,
    /// No ordering promise (bad input on its way to the parking lot): dispatched
    /// at once.
    Immediate,
    /// A DLQ record to redeliver: queued in offset order, dispatched by the drain
    /// once the wall clock reaches `not_before_ms`. Only DLQ records are queued.
    Queued { not_before_ms: i64 },
}

/// A record once begun: the job's payload and how it is scheduled.
#[derive(Debug)]
pub struct Begun<I> {
    pub item: I,
    pub kind: Kind,
}

/// What the machine needs to know about records and jobs. The actor's
/// implementation decodes (CloudEvents, DLQ envelopes) in [`Intake::begin`].
pub trait Intake {
    /// A record as polled (it may wait in the backlog, undecoded).
    type Raw;
    /// What a dispatch hands to the delivery side.
    type Item;
    /// The record's side and offset.
    fn position(raw: &Self::Raw) -> (Src, i64);
    /// Decodes a record being begun: called once per record taken in, in offset
    /// order per side.
    fn begin(&mut self, src: Src, raw: Self::Raw) -> Begun<Self::Item>;
    /// The item's ordering key.
    fn key(item: &Self::Item) -> Option<&[u8]>;
    /// The run group of an [`Kind::Ordered`] item whose route sends runs
    /// (`ordered = true`, `core::ordering`): waiting events of its lane and
    /// group may be dispatched together ([`Effect::DispatchRun`]).
    fn run_group(&self, _item: &Self::Item) -> Option<RunGroup> {
        None
    }
    /// The bytes a record holds in memory (value, key, headers): what it costs
    /// against the fetch budget while it waits and the in-flight budget once begun.
    fn size(raw: &Self::Raw) -> usize;
    /// The work replacing an item whose job errored `times` times: to the parking
    /// lot with reason `internal_error`.
    fn park_internal(item: &Self::Item, times: u32) -> Self::Item;
}

/// How a dispatched job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its outcome is durable (delivered, or acknowledged in the DLQ or parking lot).
    Done,
    /// The work vanished without an outcome: dispatch it again.
    Errored,
}

/// One job's answer, as its completion token reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub generation: u64,
    pub src: Src,
    pub offset: i64,
    pub outcome: Outcome,
}

/// A timer the machine asked for ([`Effect::Schedule`]); it comes back as
/// [`Input::Timer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
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
}

#[derive(Debug)]
pub enum Input<R> {
    /// Records routed to this partition, in offset order per side.
    Records(Vec<R>),
    /// Answers of dispatched jobs, in arrival order.
    Reports(Vec<Report>),
    /// The health verdict (also the first input: it applies the initial reading).
    Verdict {
        api_unavailable: bool,
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
    Timer(Timer),
    /// Revoke or shutdown: stop dispatching, hand the backlog back, answer
    /// [`Effect::Drained`] once nothing is in flight (or at the deadline).
    Drain,
    /// An [`Effect::Store`] failed (expected while a rebalance takes the
    /// partition away): the watermark counts as not stored, and is stored again
    /// after [`STORE_DELAY`] unless a drain was requested.
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

/// Whether a store is committed before the next auto-commit, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Stored only: the next auto-commit sends it.
    No,
    /// Committed with this offset and metadata within the pace floor, in one
    /// request with the other partitions' (`core::commit_pace`,
    /// `actors::partition::commits`): `Settings::commit_after` events finished since the
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
pub enum Effect<I> {
    /// Hand this job to the delivery side; its token reports back as a [`Report`].
    Dispatch { src: Src, offset: i64, item: Arc<I> },
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
    /// The drain is over: answer it (with the stored main position).
    Drained,
    /// Routed records left the fetch budget (begun, or handed back).
    TakenIn { records: usize, bytes: usize },
    /// A record waits because the in-flight byte budget is used up: register a
    /// waker with [`ByteBudget::wait`] that sends [`Input::Timer`]`(`[`Timer::Budget`]`)`.
    /// Asked once until that timer comes.
    AwaitBudget,
    /// Events begun (for readiness' held count).
    Begun(usize),
    /// Events finished (durable outcome).
    Finished(usize),
    /// Records completed without dispatch: the commit's metadata named them done
    /// (`Settings::skip`).
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
    /// Something worth a log line.
    Note(Note),
}

/// Things the log should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
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
    RefusedCompletion { src: Src, error: TrackerError },
    /// A job errored [`MAX_ERRORED`] times or more: it is parked instead.
    ParkingErrored { src: Src, offset: i64, times: u32 },
    /// The drain's deadline passed with jobs still in flight.
    DrainDeadline { in_flight: usize },
}

/// The machine's fixed parameters.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The assignment generation; reports of another one are ignored.
    pub generation: u64,
    pub ordering: OrderingMode,
    /// Events held (begun, not finished) per side: main records beyond it wait in
    /// the backlog; DLQ p is paused at it (resumed at half). Also the most jobs
    /// the DLQ drain has in flight.
    pub limit: usize,
    /// A backlog this long pauses main p in the consumer (resumed at half).
    pub backlog_cap: usize,
    /// A backlog of this many bytes does the same.
    pub backlog_bytes_cap: usize,
    /// The process-wide in-flight byte budget, shared by every partition's
    /// machine: a record (main or DLQ) is begun only while it is not used up;
    /// otherwise it waits in its side's backlog.
    pub budget: Arc<ByteBudget>,
    /// Minimum dwell in `Paused` (see `core::fsm`).
    pub min_pause: Duration,
    /// How long a drain waits for in-flight jobs.
    pub drain_timeout: Duration,
    /// Known start positions (after a seek); otherwise learnt from the first record.
    pub start: [Option<NextOffset>; 2],
    /// What an earlier incarnation stored for this partition.
    pub stored: [Option<NextOffset>; 2],
    /// Per side: the offsets the committed metadata names done (decoded by
    /// `core::completed`, made by an earlier owner). Records at these offsets
    /// are completed without dispatch.
    pub skip: [Option<Completed>; 2],
    /// Per side: the identity of the log read (the topic's id), which each
    /// store's metadata carries (`core::completed`); `None` (not known): no
    /// metadata is written.
    pub logs: [Option<Arc<str>>; 2],
    /// Per side: the committed position was made for another log (its
    /// metadata names another topic id: an owner that missed the topic's
    /// recreation committed it onto the new log). The side is read from its
    /// log's start ([`Effect::ReadFromStart`], asked at the first
    /// [`Input::Logs`]), and nothing is stored until it is.
    pub read_from_start: [bool; 2],
    /// Per side: the topic's id could not be read at the assignment, and
    /// the committed position's metadata names the log it was made for
    /// (`core::completed::Assessment::verify`). Nothing is stored for the
    /// side until an [`Input::Logs`] reads the id: the same, and the side
    /// stores with it; another, and the position was another log's: the
    /// side is read from its log's start ([`Effect::ReadFromStart`]).
    pub verify: [Option<Arc<str>>; 2],
    /// The broker's `offset.metadata.max.bytes`: the most a store's metadata
    /// may hold.
    pub metadata_max_bytes: usize,
    /// The least time between two commits of metadata alone (the position
    /// unchanged, see [`Effect::Store`]'s `commit`).
    pub commit_interval: Duration,
    /// Events finished on a side since its last explicit commit that make the
    /// next store a commit at once (see [`commit_after`]).
    pub commit_after: usize,
    /// The least time between two such commits of a side: a fast API does not
    /// turn into a commit per handful of events (see [`COMMIT_FLOOR`]).
    pub commit_floor: Duration,
}

/// How many lag checks' topic ids ([`Input::Logs`]) a side waits for after a
/// reset before it takes the id read as its new log's (what its commits'
/// metadata names): the first may have been read before the records that
/// moved the position back were fetched (a lookup runs while records are
/// routed); the second began after the consumer handed the first over, so
/// after those records were fetched. Until then the side's commits carry no
/// metadata (nothing to skip for a next owner, no log to check the position
/// against: about two lag checks' worth).
pub const LOGS_AFTER_RESET: u8 = 2;

/// The least time between two progress commits of one side: at most 100
/// commits a second per partition side, however fast the API answers.
pub const COMMIT_FLOOR: Duration = Duration::from_millis(10);

/// How many events finished since a partition side's last commit make it
/// commit at once, for a pool of `concurrency` permits: an eighth of them (at
/// least one). A crash redelivers what was on the wire (at most the
/// concurrency) plus what finished since the last commit that landed: this
/// keeps the second part to a fraction of the first per partition, at one
/// commit per `concurrency / 8` events (docs/DRILLS.md has the measured cost).
pub fn commit_after(concurrency: usize) -> usize {
    (concurrency / 8).max(1)
}

/// Where a drain (revoke, shutdown) stands. Once requested it never ends: the
/// partition is being handed over, and whatever arrives after the answer (records
/// still in the mailbox, completions) must not start new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    Off,
    /// Requested: waiting for the jobs in flight (or the deadline).
    Waiting,
    Answered,
}

struct Held<I> {
    item: Arc<I>,
    kind: Kind,
    /// What it took from the in-flight budget.
    bytes: u64,
    /// Admitted to an ordering lane: its completion frees the lane, whatever its
    /// work became meanwhile (a parked errored job included).
    in_lane: bool,
    errored: u32,
}

/// One topic of the pair.
struct Side {
    tracker: OffsetTracker,
    stored: Option<NextOffset>,
    /// `stored` before the last [`Effect::Store`] (restored if it fails).
    stored_before: Option<NextOffset>,
    /// The metadata stored with `stored`, and before the last store.
    meta: String,
    meta_before: String,
    /// When this side was last committed explicitly.
    committed_at: Option<Instant>,
    /// Events finished since then (see [`Settings::commit_after`]).
    done_since_commit: usize,
    /// Done offsets above the committed position, from an earlier owner.
    skip: Option<Completed>,
    /// What was last applied to the consumer (None: unknown).
    reading: Option<bool>,
    /// Begun, not finished.
    held: usize,
    /// Slot = offset + `shift` (raised by each reset, see the module's
    /// documentation).
    shift: i64,
    /// The first slot of the current incarnation (`i64::MIN` before any
    /// reset): nothing is stored while the watermark is below it.
    base: i64,
    /// The log's identity for the metadata (`None`: not known, e.g. after
    /// a reset until [`LOGS_AFTER_RESET`] lag checks read it).
    log: Option<Arc<str>>,
    /// [`Input::Logs`] still to come before the side takes the id read as
    /// its log's (see [`Side::reset`]).
    log_wait: u8,
    /// The position is bound to `identity` by the committed metadata, which
    /// no [`Input::Logs`] has checked yet ([`Settings::verify`]): nothing
    /// is stored.
    unverified: bool,
    /// The id of the topic the side reads, as last confirmed by
    /// [`Input::Logs`] (from the assignment until then).
    identity: Option<Arc<str>>,
    /// A reset began an incarnation that no [`Input::Logs`] has confirmed
    /// since: if the topic's id turns out changed, that reset was the new
    /// log's start.
    reset_unconfirmed: bool,
    /// An [`Effect::ReadFromStart`] is out or due: nothing is stored for
    /// the side (its position would be the old log's, committed onto the new
    /// one) until a reset begins the new log. `Some(true)`: the seek is out.
    reading_again: Option<bool>,
    /// The position (an offset) when the replaced log was found: records of
    /// the new log at or above it are the same whether fetched before the
    /// seek or after.
    read_again_from: Option<i64>,
    /// The last forward gap between records of the current incarnation
    /// (offsets `[from, to)`): deleted unread if librdkafka reports an offset
    /// reset at `from` (compaction and transaction markers leave gaps too).
    last_gap: Option<(i64, i64, Option<Completed>)>,
    /// An offset reset at this offset that no gap has matched yet.
    reset_at: Option<i64>,
    /// An [`Effect::Probe`] is out, or was answered since the last lag check.
    probing: bool,
    /// The log's end at the last lag check.
    end: Option<i64>,
    /// The topic's id read with `end` (`None`: not read): `end` is the
    /// position's log's only if this is the side's `identity`.
    end_log: Option<Arc<str>>,
    /// The id the last [`Input::Logs`] read, for the next lag check's `end`.
    checked: Option<Arc<str>>,
    /// The old log's end as last seen, when a replaced log is read again from
    /// its start (what the old log still had unread lay in `[position, it)`).
    left_end: Option<i64>,
    /// Idle below the end at the last lag check: the position and the end.
    idle_at: Option<(NextOffset, i64)>,
    /// The next store is committed explicitly: after a reset, librdkafka
    /// still holds the old log's committed position, and its auto-commit
    /// sends a partition only when the stored position passes that one.
    commit_next: bool,
}

impl Side {
    /// The offset of a slot of the current incarnation.
    fn offset(&self, slot: i64) -> i64 {
        slot - self.shift
    }

    /// The watermark as an offset of the current log: `None` while nothing
    /// was seen, or while events of an earlier incarnation are unfinished.
    fn watermark(&self) -> Option<NextOffset> {
        let wm = self.tracker.watermark()?;
        (wm.get() >= self.base).then(|| NextOffset::at(self.offset(wm.get())))
    }

    /// The side's log is not the one it was reading: a new incarnation starts
    /// at `offset`. Returns the position it expected (an offset of the old
    /// incarnation).
    fn reset(&mut self, offset: i64) -> Option<i64> {
        let next = self.tracker.highest_begun()? + 1;
        let expected = self.offset(next);
        self.shift = next - offset;
        self.base = next;
        self.stored = None;
        self.stored_before = None;
        self.meta.clear();
        self.meta_before.clear();
        self.done_since_commit = 0;
        self.skip = None;
        self.log = None;
        self.log_wait = LOGS_AFTER_RESET;
        // The new incarnation's positions are of the log being read,
        // whichever the old position's was.
        self.unverified = false;
        self.reset_unconfirmed = true;
        self.reading_again = None;
        self.last_gap = None;
        self.reset_at = None;
        self.probing = false;
        self.end = None;
        self.idle_at = None;
        self.commit_next = true;
        Some(expected)
    }
}

pub struct PartitionMachine<X: Intake> {
    intake: X,
    generation: u64,
    limit: usize,
    backlog_cap: usize,
    drain_timeout: Duration,
    backlog_bytes_cap: usize,
    sides: [Side; 2],
    lanes: Scheduler,
    held: HashMap<(Src, i64), Held<X::Item>, SlotHash>,
    budget: Arc<ByteBudget>,
    /// Bytes this machine took from `budget` (given back as events finish, and
    /// when the machine is dropped: a stopped or crashed actor returns its share).
    held_bytes: u64,
    /// An [`Effect::AwaitBudget`] is pending.
    awaiting_budget: bool,
    /// Records taken from the consumer but not begun, per side: main records
    /// while the partition holds `limit` events, any record while the in-flight
    /// budget is used up. Still part of the fetch budget. Backpressure works
    /// through that budget rather than the consumer's pause, which throws the
    /// partition's prefetched records away (see docs/ARCHITECTURE.md); only a
    /// main backlog of `backlog_cap` records or `backlog_bytes_cap` bytes pauses
    /// main p there, and DLQ p is paused while DLQ records wait.
    backlog: [VecDeque<X::Raw>; 2],
    backlog_bytes: [usize; 2],
    main_full: bool,
    /// The partition holds `limit` DLQ records, or DLQ records wait for the
    /// budget: DLQ p is paused (resumed at half, with nothing waiting).
    dlq_full: bool,
    /// Begun DLQ offsets waiting for the drain, in order.
    dlq_queue: VecDeque<i64>,
    /// Jobs dispatched and not answered.
    dispatched: usize,
    /// Jobs whose turn came while the mode was `Paused`: dispatched when it ends.
    ready: BTreeSet<(Src, i64)>,
    /// Runs whose turn came while the mode was `Paused`.
    ready_runs: Vec<(Src, Vec<i64>)>,
    fsm: PartitionFsm,
    api_unavailable: bool,
    dlq_high: Option<i64>,
    dlq_start: Option<i64>,
    /// The earliest [`Timer::Wake`] pending.
    wake_at: Option<Instant>,
    drain: Drain,
    /// A [`Timer::Store`] is pending.
    store_scheduled: bool,
    fx: Vec<Effect<X::Item>>,
    begun: usize,
    finished: usize,
    skipped: usize,
    commit_interval: Duration,
    commit_after: usize,
    commit_floor: Duration,
    metadata_max_bytes: usize,
    /// The time of the input being handled.
    clock: Option<Instant>,
}

impl<X: Intake> PartitionMachine<X> {
    /// A machine in `Paused` that has applied nothing yet: its first input should
    /// be [`Input::Verdict`], which applies the reading the FSM chooses.
    pub fn new(settings: Settings, intake: X) -> Self {
        let side = |src: Src| Side {
            tracker: match settings.start[src.index()] {
                Some(s) => OffsetTracker::starting_at(settings.generation, s),
                None => OffsetTracker::new(settings.generation),
            },
            stored: settings.stored[src.index()],
            stored_before: settings.stored[src.index()],
            meta: String::new(),
            meta_before: String::new(),
            committed_at: None,
            done_since_commit: 0,
            skip: settings.skip[src.index()].clone().filter(|c| !c.is_empty()),
            reading: None,
            held: 0,
            shift: 0,
            base: i64::MIN,
            log: settings.logs[src.index()].clone(),
            log_wait: 0,
            unverified: settings.logs[src.index()].is_none()
                && settings.verify[src.index()].is_some(),
            identity: settings.logs[src.index()]
                .clone()
                .or_else(|| settings.verify[src.index()].clone()),
            reset_unconfirmed: false,
            reading_again: settings.read_from_start[src.index()].then_some(false),
            read_again_from: None,
            last_gap: None,
            reset_at: None,
            probing: false,
            end: None,
            end_log: None,
            checked: None,
            left_end: None,
            idle_at: None,
            commit_next: false,
        };
        PartitionMachine {
            intake,
            generation: settings.generation,
            limit: settings.limit.max(1),
            backlog_cap: settings.backlog_cap.max(1),
            backlog_bytes_cap: settings.backlog_bytes_cap.max(1),
            drain_timeout: settings.drain_timeout,
            sides: [side(Src::Main), side(Src::Dlq)],
            lanes: Scheduler::new(settings.ordering),
            held: HashMap::default(),
            budget: settings.budget,
            held_bytes: 0,
            awaiting_budget: false,
            backlog: [VecDeque::new(), VecDeque::new()],
            backlog_bytes: [0, 0],
            main_full: false,
            dlq_full: false,
            dlq_queue: VecDeque::new(),
            dispatched: 0,
            ready: BTreeSet::new(),
            ready_runs: Vec::new(),
            fsm: PartitionFsm::new(settings.min_pause),
            api_unavailable: false,
            dlq_high: None,
            dlq_start: None,
            wake_at: None,
            drain: Drain::Off,
            store_scheduled: false,
            fx: Vec::new(),
            begun: 0,
            finished: 0,
            skipped: 0,
            commit_interval: settings.commit_interval,
            commit_after: settings.commit_after.max(1),
            commit_floor: settings.commit_floor,
            metadata_max_bytes: settings.metadata_max_bytes,
            clock: None,
        }
    }

    pub fn intake(&self) -> &X {
        &self.intake
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn mode(&self) -> Mode {
        self.fsm.mode()
    }

    /// Jobs dispatched and not answered.
    pub fn in_flight(&self) -> usize {
        self.dispatched
    }

    /// Events begun and not finished on one side.
    pub fn held(&self, src: Src) -> usize {
        self.sides[src.index()].held
    }

    /// Records waiting in the backlogs (both sides).
    pub fn backlog(&self) -> usize {
        self.backlog.iter().map(VecDeque::len).sum()
    }

    /// Records waiting in one side's backlog.
    pub fn waiting(&self, src: Src) -> usize {
        self.backlog[src.index()].len()
    }

    /// Bytes of the records waiting in the backlogs (both sides).
    pub fn backlog_bytes(&self) -> usize {
        self.backlog_bytes.iter().sum()
    }

    /// Bytes this machine holds of the in-flight budget.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// The last stored position of one side (as far as the machine knows).
    pub fn stored(&self, src: Src) -> Option<NextOffset> {
        self.sides[src.index()].stored
    }

    /// A drain was requested (answered or not): nothing is begun or dispatched.
    pub fn draining(&self) -> bool {
        self.drain != Drain::Off
    }

    /// Takes one input; returns what to do, in order.
    pub fn handle(&mut self, input: Input<X::Raw>, now: Now) -> Vec<Effect<X::Item>> {
        self.clock = Some(now.mono);
        match input {
            Input::Records(records) => self.on_records(records, now),
            Input::Reports(reports) => self.on_reports(reports, now),
            Input::Verdict { api_unavailable } => {
                self.api_unavailable = api_unavailable;
                self.evaluate(now);
            }
            Input::Positions(p) => self.on_positions(p, now),
            Input::Logs(logs) => self.on_logs(logs),
            Input::ReadingFrom { src, start } => self.on_reading_from(src, start, now),
            Input::OffsetReset { src, at } => {
                let side = &mut self.sides[src.index()];
                match side.last_gap.take() {
                    Some((from, to, done)) if from == at => {
                        self.fx.push(Effect::Note(Note::DeletedUnread {
                            src,
                            from,
                            to,
                            done,
                        }));
                    }
                    gap => {
                        side.last_gap = gap;
                        side.reset_at = Some(at);
                    }
                }
            }
            Input::Timer(Timer::Wake) => {
                self.wake_at = None;
                self.evaluate(now);
            }
            Input::Timer(Timer::Store) => {
                self.store_scheduled = false;
                self.store_all(false);
            }
            Input::Timer(Timer::Budget) => {
                self.awaiting_budget = false;
                self.fill();
                self.evaluate(now);
            }
            Input::Timer(Timer::Redispatch { src, offset }) => {
                match self.held.get(&(src, offset)) {
                    _ if self.draining() => {}
                    None => {}
                    // Through its lane: with the rest of its run, once none is out.
                    Some(h) if h.in_lane => match self.lanes.again(X::key(&h.item), offset) {
                        Release::Nothing => {}
                        Release::One(slot) => self.dispatch(src, slot),
                        Release::Run(run) => self.dispatch_run(src, run),
                    },
                    Some(_) => self.dispatch(src, offset),
                }
            }
            Input::Timer(Timer::DrainTimeout) => {
                if self.drain == Drain::Waiting {
                    let in_flight = self.dispatched;
                    self.fx
                        .push(Effect::Note(Note::DrainDeadline { in_flight }));
                    self.reply_drained();
                }
            }
            Input::Drain => self.on_drain(),
            Input::StoreFailed { src, offset } => {
                let side = &mut self.sides[src.index()];
                if side.stored == Some(offset) {
                    side.stored = side.stored_before;
                    side.meta = std::mem::take(&mut side.meta_before);
                }
                // Try again soon; after a drain the partition is gone anyway.
                if !self.draining() {
                    self.schedule_store();
                }
            }
            Input::ReadingFailed { src } => self.sides[src.index()].reading = None,
            Input::Probed { src, from, to } => self.on_probed(src, from, to),
        }
        if self.begun > 0 {
            self.fx.push(Effect::Begun(std::mem::take(&mut self.begun)));
        }
        if self.finished > 0 {
            self.fx
                .push(Effect::Finished(std::mem::take(&mut self.finished)));
        }
        if self.skipped > 0 {
            self.fx
                .push(Effect::Skipped(std::mem::take(&mut self.skipped)));
            if !self.draining() {
                self.schedule_store();
            }
        }
        std::mem::take(&mut self.fx)
    }

    fn on_records(&mut self, records: Vec<X::Raw>, now: Now) {
        if self.draining() {
            // Not begun, not stored: the next owner reads them again.
            let bytes = records.iter().map(X::size).sum();
            self.taken_in(records.len(), bytes);
            return;
        }
        let (mut taken, mut bytes) = (0, 0);
        for r in records {
            // A record waits in its side's backlog while the side has no room
            // (and behind those already waiting, to keep offset order).
            let (src, _) = X::position(&r);
            let r = if self.backlog[src.index()].is_empty() {
                match self.try_begin(r) {
                    Ok(size) => {
                        taken += 1;
                        bytes += size;
                        continue;
                    }
                    Err(r) => r,
                }
            } else {
                r
            };
            self.backlog_bytes[src.index()] += X::size(&r);
            self.backlog[src.index()].push_back(r);
        }
        self.taken_in(taken, bytes);
        self.evaluate(now);
        self.store_all(false);
    }

    /// Records leave the fetch budget once begun or handed back.
    fn taken_in(&mut self, records: usize, bytes: usize) {
        if records > 0 {
            self.fx.push(Effect::TakenIn { records, bytes });
        }
    }

    /// Begins backlog records, in order per side, while there is room.
    fn fill(&mut self) {
        let (mut n, mut bytes) = (0, 0);
        for src in Src::BOTH {
            let i = src.index();
            while !self.draining() {
                let Some(r) = self.backlog[i].pop_front() else {
                    break;
                };
                let size = X::size(&r);
                match self.try_begin(r) {
                    Ok(_) => {
                        self.backlog_bytes[i] -= size;
                        n += 1;
                        bytes += size;
                    }
                    Err(r) => {
                        self.backlog[i].push_front(r);
                        break;
                    }
                }
            }
        }
        self.taken_in(n, bytes);
    }

    /// Begins `r` if its side has room: main p below `limit` held events, and
    /// the in-flight byte budget not used up (otherwise a waker is asked for).
    /// `Ok`: taken in (begun, or dropped as a duplicate), with its size.
    fn try_begin(&mut self, r: X::Raw) -> Result<usize, X::Raw> {
        let (src, _) = X::position(&r);
        if src == Src::Main && self.sides[src.index()].held >= self.limit {
            return Err(r);
        }
        let size = X::size(&r);
        if !self.budget.try_take(size as u64) {
            if !self.awaiting_budget {
                self.awaiting_budget = true;
                self.fx.push(Effect::AwaitBudget);
            }
            return Err(r);
        }
        self.begin(r, size as u64);
        Ok(size)
    }

    /// Takes one record in (its `bytes` taken from the budget): tracker, decode,
    /// held, and dispatch if its lane is free.
    fn begin(&mut self, r: X::Raw, bytes: u64) {
        let (src, offset) = X::position(&r);
        let side = &mut self.sides[src.index()];
        let next = side.tracker.highest_begun().map(|h| h + 1);
        if next.is_some_and(|next| offset + side.shift < next) {
            // At or below an offset already begun, and Courier did not seek (or
            // sought a replaced log to its start, `Effect::ReadFromStart`):
            // the log changed under the side. A new incarnation, never a
            // duplicate to drop. What the last lag check saw of the old log's
            // end, if it was the old log's.
            let seen_end = if side.reading_again.is_some() {
                side.left_end
            } else {
                side.end
                    .filter(|_| side.end_log.is_some() && side.end_log == side.identity)
            };
            if let Some(from) = side.reset(offset) {
                let note = Note::PositionReset {
                    src,
                    from,
                    to: offset,
                    seen_end,
                };
                self.fx.push(Effect::Note(note));
            }
        } else if let Some(next) = next.filter(|next| offset + side.shift > *next) {
            let from = side.offset(next);
            if side.reset_at.take() == Some(from) {
                self.fx.push(Effect::Note(Note::DeletedUnread {
                    src,
                    from,
                    to: offset,
                    done: side.skip.clone(),
                }));
            } else {
                side.last_gap = Some((from, offset, side.skip.clone()));
            }
        }
        let slot = offset + side.shift;
        if let Err(error) = side.tracker.begin(slot) {
            // Cannot happen (the slot is above every one begun); refused, not
            // absorbed: the watermark cannot pass a record never begun.
            self.budget.give_back(bytes);
            self.fx
                .push(Effect::Note(Note::RefusedCompletion { src, error }));
            return;
        }
        if let Some(skip) = &side.skip {
            let done = skip.contains(offset);
            if skip.end().is_none_or(|end| offset + 1 >= end) {
                side.skip = None; // Nothing it names lies ahead.
            }
            if done {
                // Done by an earlier owner (its commit's metadata says so):
                // completed here, never dispatched.
                if let Err(error) = side.tracker.complete(self.generation, slot) {
                    self.fx
                        .push(Effect::Note(Note::RefusedCompletion { src, error }));
                }
                self.budget.give_back(bytes);
                self.skipped += 1;
                return;
            }
        }
        self.held_bytes += bytes;
        let Begun { item, kind } = self.intake.begin(src, r);
        let lane_free = match kind {
            Kind::Ordered => {
                let run = self.intake.run_group(&item);
                self.lanes.admit(X::key(&item), slot, run)
            }
            _ => true,
        };
        let held = Held {
            item: Arc::new(item),
            kind,
            bytes,
            in_lane: kind == Kind::Ordered,
            errored: 0,
        };
        self.held.insert((src, slot), held);
        self.sides[src.index()].held += 1;
        self.begun += 1;
        if matches!(kind, Kind::Queued { .. }) {
            self.dlq_queue.push_back(slot);
        } else if lane_free {
            self.dispatch(src, slot);
        }
    }

    /// Takes a batch of answers, then re-evaluates once.
    fn on_reports(&mut self, reports: Vec<Report>, now: Now) {
        let mut advanced = false;
        for r in reports {
            advanced |= self.on_report(r);
        }
        if advanced {
            self.fill();
            if self.commit_ready() {
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
        if self.drain == Drain::Waiting && self.dispatched == 0 {
            self.reply_drained();
        }
    }

    /// A partition that has emptied gives back the room its collections grew to.
    /// Otherwise every partition keeps the capacity of its busiest moment, and
    /// with many partitions that is memory the budgets do not see (measured:
    /// ~40 KB of heap per partition at 512 partitions, docs/BENCHMARKS.md).
    fn trim(&mut self) {
        const KEEP: usize = 64;
        if self.held.is_empty() && self.held.capacity() > KEEP {
            self.held = HashMap::default();
            self.lanes.trim();
        }
        for side in &mut self.sides {
            side.tracker.trim(KEEP);
        }
        for b in &mut self.backlog {
            if b.is_empty() && b.capacity() > KEEP {
                *b = VecDeque::new();
            }
        }
        if self.dlq_queue.is_empty() && self.dlq_queue.capacity() > KEEP {
            self.dlq_queue = VecDeque::new();
        }
    }

    /// One answer; true when an offset completed.
    fn on_report(&mut self, r: Report) -> bool {
        if r.generation != self.generation {
            return false; // A late report from an older incarnation: fenced off.
        }
        self.dispatched = self.dispatched.saturating_sub(1);
        if r.outcome == Outcome::Errored {
            self.on_errored(r.src, r.offset);
            return false;
        }
        let side = &mut self.sides[r.src.index()];
        if let Err(error) = side.tracker.complete(r.generation, r.offset) {
            self.fx
                .push(Effect::Note(Note::RefusedCompletion { src: r.src, error }));
            return false;
        }
        if let Some(held) = self.held.remove(&(r.src, r.offset)) {
            side.held -= 1;
            side.done_since_commit += 1;
            self.finished += 1;
            self.held_bytes -= held.bytes;
            self.budget.give_back(held.bytes);
            if held.in_lane {
                match self.lanes.finish(X::key(&held.item), r.offset) {
                    _ if self.draining() => {}
                    Release::Nothing => {}
                    Release::One(next) => self.dispatch(Src::Main, next),
                    Release::Run(run) => self.dispatch_run(Src::Main, run),
                }
            }
        }
        true
    }

    fn on_errored(&mut self, src: Src, offset: i64) {
        let Some(held) = self.held.get_mut(&(src, offset)) else {
            return;
        };
        held.errored += 1;
        let n = held.errored;
        if n >= MAX_ERRORED {
            self.fx.push(Effect::Note(Note::ParkingErrored {
                src,
                offset,
                times: n,
            }));
            held.item = Arc::new(X::park_internal(&held.item, n));
            held.kind = Kind::Immediate;
        }
        if !self.draining() {
            let after = persistent_delay(n, REDISPATCH_BASE, REDISPATCH_CAP);
            let timer = Timer::Redispatch { src, offset };
            self.fx.push(Effect::Schedule { after, timer });
        }
    }

    /// Dispatches a job whose turn came — unless the mode is `Paused`: nothing
    /// goes out while the API is judged down (the verdict may rest on another
    /// instance's marker, with this instance's breaker closed).
    fn dispatch(&mut self, src: Src, offset: i64) {
        let Some(held) = self.held.get(&(src, offset)) else {
            return;
        };
        if self.fsm.mode() == Mode::Paused {
            self.ready.insert((src, offset));
            return;
        }
        self.dispatched += 1;
        let item = held.item.clone();
        self.fx.push(Effect::Dispatch { src, offset, item });
    }

    /// Dispatches a lane's run together (or keeps it for the end of `Paused`).
    fn dispatch_run(&mut self, src: Src, slots: Vec<i64>) {
        if self.fsm.mode() == Mode::Paused {
            self.ready_runs.push((src, slots));
            return;
        }
        let mut run: Vec<(i64, Arc<X::Item>)> = slots
            .into_iter()
            .filter_map(|slot| self.held.get(&(src, slot)).map(|h| (slot, h.item.clone())))
            .collect();
        self.dispatched += run.len();
        if run.len() > 1 {
            self.fx.push(Effect::DispatchRun { src, run });
        } else if let Some((offset, item)) = run.pop() {
            self.fx.push(Effect::Dispatch { src, offset, item });
        }
    }

    fn on_positions(&mut self, p: Positions, now: Now) {
        self.dlq_high = Some(p.dlq_high);
        self.dlq_start = Some(p.dlq_start);
        self.sides[Src::Main.index()].end = p.main_high;
        self.sides[Src::Dlq.index()].end = Some(p.dlq_high);
        for side in &mut self.sides {
            side.end_log = side.checked.take();
        }
        for src in Src::BOTH {
            self.probe(src);
        }
        let next = self.dlq_next().unwrap_or(p.dlq_start);
        let main = match (p.main_high, self.sides[Src::Main.index()].stored) {
            (Some(high), Some(wm)) => Some((high - wm.get()).max(0)),
            _ => None,
        };
        let dlq = (p.dlq_high - next).max(0);
        self.fx.push(Effect::Lag { dlq, main });
        self.evaluate(now);
    }

    /// Compares each side's log with the topic's id now. A changed id is a
    /// topic deleted and recreated under its name: if a reset since the last
    /// comparison began the new log (librdkafka found the old position out of
    /// range), that is its start; otherwise the position still points into
    /// the old log's offsets, and the new log is read from its start.
    fn on_logs(&mut self, logs: [Option<Arc<str>>; 2]) {
        let mut learnt = false;
        for src in Src::BOTH {
            let side = &mut self.sides[src.index()];
            side.checked = logs[src.index()].clone();
            let Some(id) = logs[src.index()].clone() else {
                continue;
            };
            let confirmed = std::mem::take(&mut side.reset_unconfirmed);
            side.log_wait = side.log_wait.saturating_sub(1);
            // Checked now: the same log, or another one read again below.
            side.unverified = false;
            match side.identity.replace(id.clone()) {
                Some(old) if old != id => {
                    let read_again = !confirmed;
                    if read_again {
                        side.left_end = side.end.filter(|_| side.end_log.as_ref() == Some(&old));
                        side.read_again_from =
                            side.tracker.highest_begun().map(|h| side.offset(h + 1));
                        side.log = None;
                        side.reading_again = Some(true);
                        self.fx.push(Effect::ReadFromStart { src });
                    }
                    self.fx.push(Effect::Note(Note::LogReplaced {
                        src,
                        old,
                        new: id.clone(),
                        read_again,
                    }));
                }
                _ => {}
            }
            // A side that does not know its log's id (a reset began a new
            // incarnation, or the id was not read at the assignment) takes
            // the one read, once a lookup that began after the reset read
            // it; one that reads a replaced log again takes it when its
            // stores resume (`on_reading_from`).
            if side.log.is_none() && side.log_wait == 0 && side.reading_again.is_none() {
                side.log = Some(id);
                learnt = true;
            }
        }
        // Stored again with the log named (an idle side stores nothing
        // otherwise).
        if learnt && !self.draining() {
            self.schedule_store();
        }
        // A seek that failed is asked again.
        for src in Src::BOTH {
            let side = &mut self.sides[src.index()];
            if side.reading_again == Some(false) {
                side.reading_again = Some(true);
                self.fx.push(Effect::ReadFromStart { src });
            }
        }
    }

    /// The side was sought to its new log's start. If that start is at or
    /// above the position the replaced log was found at, no record of the new
    /// log can come below what was begun (no reset will mark the
    /// incarnation): what was begun from there on is the new log's, and
    /// stores resume; otherwise the new log's first record begins the reset.
    fn on_reading_from(&mut self, src: Src, start: Option<i64>, now: Now) {
        let side = &mut self.sides[src.index()];
        if side.reading_again.is_none() {
            return; // A reset came first.
        }
        match start {
            None => side.reading_again = Some(false),
            Some(start) => {
                if side.read_again_from.is_none_or(|from| start >= from) {
                    side.reading_again = None;
                    // Sought after the lag check read the new id: what is
                    // read now is that log.
                    side.log = side.identity.clone();
                    side.commit_next = true;
                    self.store_all(false);
                    self.evaluate(now);
                }
            }
        }
    }

    /// Asks for an [`Effect::Probe`] when the side is idle below the end of
    /// its log: reading, nothing held or waiting, everything begun done and
    /// stored, and so at two lag checks in a row (records merely on their way
    /// would have moved it: a probe costs a reader). At most every other lag
    /// check (a probe answered, or lost, is asked again after that).
    fn probe(&mut self, src: Src) {
        let waiting = !self.backlog[src.index()].is_empty();
        let draining = self.draining();
        let side = &mut self.sides[src.index()];
        let was_probing = std::mem::replace(&mut side.probing, false);
        let seen = side.idle_at.take();
        let (Some(end), Some(wm)) = (side.end, side.watermark()) else {
            return;
        };
        let idle = side.held == 0
            && side.tracker.in_flight() == 0
            && !waiting
            && side.reading == Some(true);
        if draining || !idle || side.stored != Some(wm) || end <= wm.get() {
            return;
        }
        side.idle_at = Some((wm, end));
        if was_probing || seen != Some((wm, end)) {
            return;
        }
        side.probing = true;
        let to = NextOffset::at(end);
        self.fx.push(Effect::Probe { src, from: wm, to });
    }

    /// A probe found nothing to deliver in `[from, to)`: when the side is still
    /// idle at `from`, its position moves to `to` and is stored.
    fn on_probed(&mut self, src: Src, from: NextOffset, to: NextOffset) {
        let waiting = !self.backlog[src.index()].is_empty();
        let side = &mut self.sides[src.index()];
        if self.drain != Drain::Off || waiting || side.watermark() != Some(from) {
            return; // Records came meanwhile, or the side is being handed over.
        }
        let slot = NextOffset::at(to.get() + side.shift);
        if side.tracker.pass_to(slot) {
            self.store_all(false);
        }
    }

    /// The next DLQ offset this partition would read.
    fn dlq_next(&self) -> Option<i64> {
        let side = &self.sides[Src::Dlq.index()];
        side.tracker
            .highest_begun()
            .map(|h| side.offset(h + 1))
            .or(self.dlq_start)
    }

    fn not_before(&self, offset: i64) -> Option<i64> {
        match self.held.get(&(Src::Dlq, offset))?.kind {
            Kind::Queued { not_before_ms } => Some(not_before_ms),
            _ => None,
        }
    }

    /// DLQ partition p has something to drain now: a due record at the head of the
    /// queue, or records not begun yet (waiting for the byte budget, or unread:
    /// their head may turn out not to be due yet), or a lag not known yet.
    fn dlq_has_unread(&self, now_ms: i64) -> bool {
        match self.dlq_queue.front() {
            Some(&off) => self.not_before(off).is_none_or(|t| t <= now_ms),
            None if !self.backlog[Src::Dlq.index()].is_empty() => true,
            None => match (self.dlq_high, self.dlq_next()) {
                (Some(high), Some(next)) => high > next,
                // Lag not known yet (a new assignment): assume there is a backlog,
                // so main p is not read before DLQ p was looked at.
                _ => true,
            },
        }
    }

    /// Runs the FSM and applies its reading; dispatches due DLQ records while
    /// draining; schedules the next wake-up.
    fn evaluate(&mut self, now: Now) {
        let first = self.sides[Src::Main.index()].reading.is_none();
        let unread = self.dlq_has_unread(now.wall_ms);
        let change = self.fsm.update(now.mono, self.api_unavailable, unread);
        if change.is_some() || first {
            // Also at the first evaluation, so a partition that starts paused shows.
            let mode = self.fsm.mode();
            self.fx.push(Effect::Mode { mode, change });
        }
        let reading = self.fsm.reading();
        // A backlog hogging the fetch budget (in records or in bytes) pauses
        // main p in the consumer, with hysteresis: resume at half.
        let (main, bytes) = (Src::Main.index(), self.backlog_bytes[Src::Main.index()]);
        if self.backlog[main].len() >= self.backlog_cap || bytes >= self.backlog_bytes_cap {
            self.main_full = true;
        } else if self.backlog[main].len() <= self.backlog_cap / 2
            && bytes <= self.backlog_bytes_cap / 2
        {
            self.main_full = false;
        }
        // DLQ records are begun as they arrive (the drain needs their
        // `not_before`) but go out paced: a partition holding `limit` of them
        // stops fetching DLQ p until it is down to half (what was already polled
        // still arrives, bounded by the fetch budget). DLQ records waiting for
        // the in-flight byte budget stop it too, until none waits.
        let dlq_held = self.sides[Src::Dlq.index()].held;
        let dlq_waiting = !self.backlog[Src::Dlq.index()].is_empty();
        if dlq_held >= self.limit || dlq_waiting {
            self.dlq_full = true;
        } else if dlq_held <= self.limit / 2 {
            self.dlq_full = false;
        }
        self.apply(Src::Main, reading.main && !self.main_full);
        self.apply(Src::Dlq, reading.dlq && !self.dlq_full);
        if self.fsm.mode() != Mode::Paused && !self.draining() {
            for (src, offset) in std::mem::take(&mut self.ready) {
                self.dispatch(src, offset);
            }
            for (src, run) in std::mem::take(&mut self.ready_runs) {
                self.dispatch_run(src, run);
            }
        }
        // Drain: dispatch due records in order, at most `limit` jobs at a time.
        let mut next_due: Option<i64> = None;
        if self.fsm.mode() == Mode::DrainDlq && !self.draining() {
            while let Some(&off) = self.dlq_queue.front() {
                if self.dispatched >= self.limit {
                    break;
                }
                match self.not_before(off) {
                    Some(t) if t > now.wall_ms => {
                        next_due = Some(t);
                        break;
                    }
                    _ => {
                        self.dlq_queue.pop_front();
                        self.dispatch(Src::Dlq, off);
                    }
                }
            }
        } else if let Some(&off) = self.dlq_queue.front() {
            next_due = self.not_before(off).filter(|t| *t > now.wall_ms);
        }
        let mut wake = self.fsm.dwell_until(now.mono);
        if let Some(t) = next_due {
            let at = now.mono + Duration::from_millis((t - now.wall_ms).max(0) as u64);
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if let Some(at) = wake {
            if self.wake_at.is_none_or(|w| at < w) {
                self.wake_at = Some(at);
                // One millisecond late rather than early: the dwell is over at `at`.
                let after = at.saturating_duration_since(now.mono) + Duration::from_millis(1);
                self.fx.push(Effect::Schedule {
                    after,
                    timer: Timer::Wake,
                });
            }
        }
    }

    fn apply(&mut self, src: Src, on: bool) {
        let side = &mut self.sides[src.index()];
        if side.reading != Some(on) {
            side.reading = Some(on);
            self.fx.push(Effect::SetReading { src, on });
        }
    }

    /// Stores the advanced watermarks soon (see [`STORE_DELAY`]), once for many
    /// completions.
    fn schedule_store(&mut self) {
        if !self.store_scheduled {
            self.store_scheduled = true;
            self.fx.push(Effect::Schedule {
                after: STORE_DELAY,
                timer: Timer::Store,
            });
        }
    }

    /// A side finished [`Settings::commit_after`] events since its last
    /// commit, and its last commit is at least `commit_floor` old.
    fn commit_ready(&self) -> bool {
        self.sides.iter().any(|side| {
            side.done_since_commit >= self.commit_after
                && match (side.committed_at, self.clock) {
                    (Some(at), Some(clock)) => at + self.commit_floor <= clock,
                    _ => true,
                }
        })
    }

    /// Stores each side's watermark when it advanced, with the offsets done
    /// above it as metadata. It is committed explicitly when
    /// [`Settings::commit_after`] events finished since the side's last commit
    /// (at most once per `commit_floor`), or when only the metadata changed (at
    /// most once per `commit_interval`); unless `now` (a drain's answer),
    /// which commits either at once. While a drain waits for its jobs,
    /// nothing is committed (a [`Commit::Soon`] could be flushed after the
    /// handover's commit): what is due then waits for the answer.
    fn store_all(&mut self, now: bool) {
        let mut later: Option<Duration> = None;
        let draining = self.draining();
        for src in Src::BOTH {
            let side = &mut self.sides[src.index()];
            // Nothing while an earlier incarnation's events are unfinished,
            // nor while the side waits to read a replaced log from its
            // start, nor while its position waits to be checked.
            let Some(wm) = side
                .watermark()
                .filter(|_| side.reading_again.is_none() && !side.unverified)
            else {
                continue;
            };
            if side.stored.is_some_and(|s| s > wm) {
                continue;
            }
            let end = side
                .tracker
                .highest_begun()
                .map_or(wm.get(), |h| side.offset(h + 1));
            let metadata = match &side.log {
                Some(log) => completed::encode(
                    log,
                    wm.get(),
                    end,
                    side.tracker.in_flight_offsets().map(|o| o - side.shift),
                    self.metadata_max_bytes,
                ),
                None => String::new(),
            };
            let moved = side.stored != Some(wm);
            let due = side.done_since_commit >= self.commit_after || side.commit_next;
            if !moved && metadata == side.meta && !due {
                continue;
            }
            let mut commit = Commit::No;
            if due || !moved {
                let spacing = if due {
                    self.commit_floor
                } else {
                    self.commit_interval
                };
                let wait = match (side.committed_at, self.clock) {
                    (Some(at), Some(clock)) if !now => {
                        (at + spacing).saturating_duration_since(clock)
                    }
                    _ => Duration::ZERO,
                };
                if wait.is_zero() && (now || !draining) {
                    commit = if now { Commit::Now } else { Commit::Soon };
                } else if draining {
                    // Nothing waits for a flush once a drain began (see
                    // `Effect::ForgetWaitingCommits`): the drain's answer
                    // commits it, at once.
                    if !moved {
                        continue;
                    }
                } else {
                    later = Some(later.map_or(wait, |l| l.min(wait)));
                    if !moved {
                        continue; // Metadata alone: nothing auto-commit would send.
                    }
                }
            }
            if commit != Commit::No {
                side.committed_at = self.clock;
                side.done_since_commit = 0;
                side.commit_next = false;
            }
            side.stored_before = side.stored;
            side.stored = Some(wm);
            side.meta_before = std::mem::replace(&mut side.meta, metadata.clone());
            self.fx.push(Effect::Store {
                src,
                offset: wm,
                metadata,
                commit,
            });
        }
        if let Some(after) = later {
            if !self.store_scheduled && !self.draining() {
                self.store_scheduled = true;
                self.fx.push(Effect::Schedule {
                    after,
                    timer: Timer::Store,
                });
            }
        }
    }

    fn on_drain(&mut self) {
        match self.drain {
            // Already waiting: the answer is still to come.
            Drain::Waiting => return,
            // Asked again: answer again.
            Drain::Answered => return self.reply_drained(),
            Drain::Off => self.drain = Drain::Waiting,
        }
        // Not begun, not stored: the next owner reads them again.
        let waiting: usize = self
            .backlog
            .iter_mut()
            .map(|b| std::mem::take(b).len())
            .sum();
        let bytes = std::mem::take(&mut self.backlog_bytes).iter().sum();
        self.taken_in(waiting, bytes);
        self.fx.push(Effect::ForgetWaitingCommits);
        self.store_all(true);
        if self.dispatched == 0 {
            self.reply_drained();
        } else {
            self.fx.push(Effect::Schedule {
                after: self.drain_timeout,
                timer: Timer::DrainTimeout,
            });
        }
    }

    fn reply_drained(&mut self) {
        self.store_all(true);
        self.drain = Drain::Answered;
        self.fx.push(Effect::Drained);
    }
}

impl<X: Intake> Drop for PartitionMachine<X> {
    /// A machine that ends (its actor stopped or crashed) gives back what it
    /// holds of the in-flight budget: its events are not held any more.
    fn drop(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.held_bytes));
    }
}
