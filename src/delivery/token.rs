//! Completion tokens: every dispatched event carries one, and it reports exactly
//! one outcome back to the partition actor that owns the event's offset.
//!
//! A token dropped without an explicit outcome (a panicking task, a task lost with
//! a crashed actor, a shutdown) reports *errored*, never *done*: the partition
//! actor then re-dispatches the event. A lost task can therefore cause a duplicate,
//! never leave an offset silently done. (Vector's finalizers count a dropped event
//! as delivered; Courier deliberately does not.)

use crate::actors::partition::{PartitionMsg, Src};
use ractor::ActorRef;

/// How an event finished. Every variant means "its outcome is durable".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The API answered 2xx or 409.
    Delivered,
    /// The envelope is acknowledged in the DLQ.
    DeadLettered { reason: String },
    /// The envelope is acknowledged in the parking lot.
    Parked { reason: String },
}

pub struct CompletionToken {
    owner: ActorRef<PartitionMsg>,
    generation: u64,
    src: Src,
    offset: i64,
    reported: bool,
}

impl CompletionToken {
    pub fn new(owner: ActorRef<PartitionMsg>, generation: u64, src: Src, offset: i64) -> Self {
        CompletionToken {
            owner,
            generation,
            src,
            offset,
            reported: false,
        }
    }

    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// Reports the durable outcome. If the owner is gone (revoked, crashed), the
    /// report is dropped: the offset was not stored, so the event is redelivered.
    pub fn finish(mut self, outcome: Finished) {
        self.reported = true;
        let _ = self.owner.send_message(PartitionMsg::Finished {
            generation: self.generation,
            src: self.src,
            offset: self.offset,
            outcome: Some(outcome),
        });
    }
}

impl Drop for CompletionToken {
    fn drop(&mut self) {
        if !self.reported {
            let _ = self.owner.send_message(PartitionMsg::Finished {
                generation: self.generation,
                src: self.src,
                offset: self.offset,
                outcome: None,
            });
        }
    }
}
