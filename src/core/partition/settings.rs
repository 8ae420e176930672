//! The machine's fixed parameters and the constants that pace it.

#[cfg(doc)]
use super::{Effect, Input, Src};
use crate::core::byte_budget::ByteBudget;
use crate::core::completed::Completed;
use crate::core::destination::DestSet;
use crate::core::offsets::NextOffset;
use crate::core::ordering::OrderingMode;
use std::sync::Arc;
use std::time::Duration;

/// A job that errored this many times (its task vanished without an outcome) is
/// parked with reason `internal_error` instead of being retried forever.
pub(crate) const MAX_ERRORED: u32 = 20;

/// How long an advanced watermark may wait before it is stored. Storing costs a
/// librdkafka call (and a lock) per store; per completion that showed in the
/// profile. Auto-commit runs every `auto_commit_interval_ms` anyway, and a later
/// store only ever means re-reading a little more after a crash.
pub(crate) const STORE_DELAY: Duration = Duration::from_millis(10);

/// The machine's fixed parameters.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
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
    /// The destinations the partition's events can go to
    /// (`core::destination`, `core::mapping::Routes::reachable`).
    pub destinations: DestSet,
    /// How long a down destination's events are held out before they are
    /// diverted to the DLQ (`degraded.destination_hold`, `outage`).
    pub destination_hold: Duration,
    /// How long a drain waits for in-flight jobs.
    pub drain_timeout: Duration,
    /// Per side, indexed by [`Src::index`]: where it starts and what an
    /// earlier owner left for it.
    pub sides: [SideStart; 2],
    /// How stores are committed and what their metadata may hold.
    pub pace: Pace,
}

/// One side's start: its position, and what an earlier owner left for it
/// (the stored position, the committed metadata and the log it names).
/// [`Default`]: nothing known (the log's identity included).
#[derive(Debug, Clone, Default)]
pub(crate) struct SideStart {
    /// Known start position (after a seek); otherwise learnt from the first record.
    pub start: Option<NextOffset>,
    /// What an earlier incarnation stored for this partition.
    pub stored: Option<NextOffset>,
    /// The offsets the committed metadata names done (decoded by
    /// `core::completed`, made by an earlier owner). Records at these offsets
    /// are completed without dispatch.
    pub skip: Option<Completed>,
    /// The identity of the log read (the topic's id), which each store's
    /// metadata carries (`core::completed`); `None` (not known): no metadata
    /// is written.
    pub log: Option<Arc<str>>,
    /// The committed position was made for another log (its metadata names
    /// another topic id: an owner that missed the topic's recreation
    /// committed it onto the new log). The side is read from its log's start
    /// ([`Effect::ReadFromStart`], asked at the first [`Input::Logs`]), and
    /// nothing is stored until it is.
    pub read_from_start: bool,
    /// The topic's id could not be read at the assignment, and the committed
    /// position's metadata names the log it was made for
    /// (`core::completed::Assessment::verify`). Nothing is stored for the
    /// side until an [`Input::Logs`] reads the id: the same, and the side
    /// stores with it; another, and the position was another log's: the side
    /// is read from its log's start ([`Effect::ReadFromStart`]).
    pub verify: Option<Arc<str>>,
}

impl SideStart {
    /// A side that reads `log` (its topic's id), nothing else known: no
    /// earlier owner's position or metadata.
    #[cfg(test)]
    pub(crate) fn on_log(log: impl Into<Arc<str>>) -> Self {
        SideStart {
            log: Some(log.into()),
            ..SideStart::default()
        }
    }
}

/// How stores are committed and what their metadata may hold (the same for
/// both sides).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// The broker's `offset.metadata.max.bytes`: the most a store's metadata
    /// may hold.
    pub metadata_max_bytes: usize,
    /// The least time between two commits of metadata alone (the position
    /// unchanged, see [`Effect::Store`]'s `commit`).
    pub interval: Duration,
    /// Events finished on a side since its last explicit commit that make the
    /// next store a commit at once (see [`commit_after`]; at least 1: 0 is
    /// taken as 1).
    pub after: usize,
    /// The least time between two such commits of a side: a fast API does not
    /// turn into a commit per handful of events (see [`COMMIT_FLOOR`]).
    pub floor: Duration,
}

/// How many lag checks' topic ids ([`Input::Logs`]) a side waits for after a
/// reset before it takes the id read as its new log's (what its commits'
/// metadata names): the first may have been read before the records that
/// moved the position back were fetched (a lookup runs while records are
/// routed); the second began after the consumer handed the first over, so
/// after those records were fetched. Until then the side's commits carry no
/// metadata (nothing to skip for a next owner, no log to check the position
/// against: about two lag checks' worth).
pub(crate) const LOGS_AFTER_RESET: u8 = 2;

/// The least time between two progress commits of one side: at most 100
/// commits a second per partition side, however fast the API answers.
pub(crate) const COMMIT_FLOOR: Duration = Duration::from_millis(10);

/// How many events finished since a partition side's last commit make it
/// commit at once, for a pool of `concurrency` permits: an eighth of them (at
/// least one). A crash redelivers what was on the wire (at most the
/// concurrency) plus what finished since the last commit that landed: this
/// keeps the second part to a fraction of the first per partition, at one
/// commit per `concurrency / 8` events (docs/DRILLS.md has the measured cost).
pub fn commit_after(concurrency: usize) -> usize {
    (concurrency / 8).max(1)
}

/// `kafka.commit_after` as the machine takes it ([`Pace::after`]): unset,
/// [`commit_after`] of the pool's `concurrency`; 0 (off), never due; else
/// as configured.
pub(crate) fn commit_after_setting(configured: Option<usize>, concurrency: usize) -> usize {
    match configured {
        None => commit_after(concurrency),
        Some(0) => usize::MAX,
        Some(n) => n,
    }
}
