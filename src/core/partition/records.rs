//! What the machine needs to know about records and jobs ([`Intake`]), and
//! how a begun record is scheduled ([`Kind`]).

#[cfg(doc)]
use super::Effect;
use super::Src;
use crate::core::destination::DestinationId;
use crate::core::ordering::RunGroup;

/// How a begun record is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
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
pub(crate) struct Begun<I> {
    pub item: I,
    pub kind: Kind,
    /// For a [`Kind::Ordered`] item whose route sends runs (`ordered = true`,
    /// `core::ordering`): its run group — waiting events of its lane and
    /// group may be dispatched together ([`Effect::DispatchRun`]).
    pub run: Option<RunGroup>,
}

/// What the machine needs to know about records and jobs. Records come in
/// decoded: the shell decodes each (CloudEvents, DLQ envelopes, routes)
/// before it hands it to `handle`, and the machine only unwraps what it
/// begins ([`Intake::begin`]) — it calls nothing of the shell's.
pub(crate) trait Intake {
    /// A record as polled and decoded (it may wait in the backlog).
    type Raw;
    /// What a dispatch hands to the delivery side.
    type Item;
    /// The record's side and offset.
    fn position(raw: &Self::Raw) -> (Src, i64);
    /// The job a record being begun carries: called once per record taken
    /// in, in offset order per side.
    fn begin(raw: Self::Raw) -> Begun<Self::Item>;
    /// The item's ordering key.
    fn key(item: &Self::Item) -> Option<&[u8]>;
    /// Where the item is delivered (`core::destination`): each destination
    /// has its own ordering lanes.
    fn destination(_item: &Self::Item) -> DestinationId {
        DestinationId::DEFAULT
    }
    /// For a DLQ record's item: the main offset of this partition its
    /// envelope was written for, its place in its key's order
    /// (`core::partition::outage`). `None` for main records, and for an
    /// envelope of another partition.
    fn origin(_item: &Self::Item) -> Option<i64> {
        None
    }
    /// The bytes the record held as polled (value, key, headers): what it
    /// costs against the fetch budget while it waits and the in-flight
    /// budget once begun.
    fn size(raw: &Self::Raw) -> usize;
    /// The work replacing an item whose job errored `times` times: to the parking
    /// lot with reason `internal_error`.
    fn park_internal(item: &Self::Item, times: u32) -> Self::Item;
}
