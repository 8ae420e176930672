//! What the delivery tasks need from their peers, given to the [`super::Deliverer`]
//! at construction: the DLQ writer's protocol (a record for the DLQ or the parking
//! lot, and how a write can fail), a handle to the current DLQ writer, and the
//! alarm that wakes the health actor when the breaker opens. The actors
//! themselves (`actors::dlq_writer`, `actors::health`) sit above this module and
//! implement the protocol.

use crate::core::envelope::Envelope;
use crate::handle::Handle;
use ractor::{ActorRef, RpcReplyPort};
use std::sync::Arc;

/// The peers a [`super::Deliverer`] sends to, following their re-spawns.
#[derive(Clone)]
pub(crate) struct Peers {
    pub dlq_writer: Handle<ActorRef<DlqWriterMsg>>,
    /// Rung when the local breaker opens (the health actor acts at once).
    pub breaker_alarm: BreakerAlarm,
}

/// Tells the health actor that the local breaker just opened (it acts now, not
/// at its next tick). Built by the supervisor on the actor's handle; a call on
/// the rare transition to open, so a boxed closure costs nothing that matters.
#[derive(Clone)]
pub(crate) struct BreakerAlarm(Arc<dyn Fn() + Send + Sync>);

impl BreakerAlarm {
    pub(crate) fn new(ring: impl Fn() + Send + Sync + 'static) -> BreakerAlarm {
        BreakerAlarm(Arc::new(ring))
    }

    pub(crate) fn ring(&self) {
        (self.0)()
    }
}

/// One record for the DLQ or the parking lot.
#[derive(Debug, Clone)]
pub(crate) struct DlqRecord {
    pub topic: String,
    /// Explicit for the DLQ: a failed event from main partition p goes to DLQ
    /// partition p. `None` (parking lot): the producer's partitioner decides.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub envelope: Envelope,
}

/// How the broker or the producer refuses a write for good: the one type,
/// defined with the other reasons in `core::classify`.
pub(crate) use crate::core::classify::Refusal;

/// Why a write was not acknowledged.
#[derive(Debug, Clone)]
pub(crate) enum WriteError {
    /// May succeed if tried again (broker down, timeout, leader moving).
    Retry(String),
    /// Will not succeed as it is.
    Refused(Refusal, String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Retry(e) => f.write_str(e),
            WriteError::Refused(r, e) => write!(f, "refused ({}): {e}", r.as_str()),
        }
    }
}

pub(crate) enum DlqWriterMsg {
    /// Reply: `Ok(offset)` once acknowledged by the broker.
    Write(Box<DlqRecord>, RpcReplyPort<Result<i64, WriteError>>),
}
