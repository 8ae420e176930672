//! What the delivery tasks need from their peers, given to the [`super::Deliverer`]
//! at construction: the DLQ writer's protocol (a record for the DLQ or the parking
//! lot, and how a write can fail) and handles to the current DLQ writer and health
//! actor. The actors themselves (`actors::dlq_writer`, `actors::health`) sit above
//! this module and implement the protocol.

use crate::core::envelope::Envelope;
use crate::handle::Handle;
use crate::health::HealthMsg;
use ractor::{ActorRef, RpcReplyPort};

/// The peers a [`super::Deliverer`] sends to, following their re-spawns.
#[derive(Clone)]
pub struct Peers {
    pub dlq_writer: Handle<ActorRef<DlqWriterMsg>>,
    pub health: Handle<ActorRef<HealthMsg>>,
}

/// One record for the DLQ or the parking lot.
#[derive(Debug, Clone)]
pub struct DlqRecord {
    pub topic: String,
    /// Explicit for the DLQ: a failed event from main partition p goes to DLQ
    /// partition p. `None` (parking lot): the producer's partitioner decides.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub envelope: Envelope,
}

/// A write the broker or the producer will never accept as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `MSG_SIZE_TOO_LARGE`, `RECORD_LIST_TOO_LARGE`, `INVALID_MSG_SIZE`.
    TooLarge,
    /// `TOPIC_AUTHORIZATION_FAILED`.
    NotAuthorized,
    /// `UNKNOWN_TOPIC_OR_PART` (the caller retries it for a grace period first:
    /// a topic being created, a partition being moved).
    UnknownTopic,
    /// `INVALID_RECORD`, `INVALID_MSG`, `POLICY_VIOLATION`.
    InvalidRecord,
}

impl Refusal {
    pub const ALL: [Refusal; 4] = [
        Refusal::TooLarge,
        Refusal::NotAuthorized,
        Refusal::UnknownTopic,
        Refusal::InvalidRecord,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::NotAuthorized => "not_authorized",
            Refusal::UnknownTopic => "unknown_topic",
            Refusal::InvalidRecord => "invalid_record",
        }
    }
}

/// Why a write was not acknowledged.
#[derive(Debug, Clone)]
pub enum WriteError {
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

pub enum DlqWriterMsg {
    /// Reply: `Ok(offset)` once acknowledged by the broker.
    Write(Box<DlqRecord>, RpcReplyPort<Result<i64, WriteError>>),
}
