//! Completion tokens: every dispatched event carries one, and it reports exactly
//! one outcome back to the partition actor that owns the event's offset.
//!
//! A token dropped without an explicit outcome (a panicking task, a task lost with
//! a crashed actor, a shutdown) reports *errored*, never *done*: the partition
//! actor then re-dispatches the event. A lost task can therefore cause a duplicate,
//! never leave an offset silently done. (Vector's finalizers count a dropped event
//! as delivered; Courier deliberately does not.)

use crate::core::partition::{Outcome, Report, Src};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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

/// One outcome on its way to the partition actor. `outcome: None`: the work
/// vanished (errored).
#[derive(Debug)]
pub struct Completion {
    pub generation: u64,
    pub src: Src,
    pub offset: i64,
    pub outcome: Option<Finished>,
}

impl Completion {
    /// What the partition machine needs to know of it.
    pub fn report(self) -> Report {
        Report {
            generation: self.generation,
            src: self.src,
            offset: self.offset,
            outcome: match self.outcome {
                Some(_) => Outcome::Done,
                None => Outcome::Errored,
            },
        }
    }
}

/// Wakes the owner of an [`Inbox`] (the partition actor: `PartitionMsg::Completed`).
pub trait Wake: Send + Sync {
    fn wake(&self);
}

/// Where a partition actor's tokens leave their outcomes. The actor takes them in
/// batches: a token that finds the inbox empty sends one `PartitionMsg::Completed`
/// to wake it, the others only push. At 30,000+ events/s this replaces an actor
/// message (and an FSM evaluation) per event with one per batch.
///
/// No wake-up is lost: whenever the inbox is not empty, the push that made it
/// non-empty sent a message that has not yet been handled (handling takes the
/// whole inbox, and the next push into the empty inbox sends again).
pub struct Inbox {
    owner: Box<dyn Wake>,
    queue: Mutex<Vec<Completion>>,
    /// The partition is being handed over (a drain began) or its actor ended:
    /// work not yet on the wire is abandoned (see [`CompletionToken::cancelled`]).
    cancelled: AtomicBool,
    /// The handover is over (the drain answered, or the actor ended): any
    /// outcome still arriving is work done for a partition no longer ours.
    closed: AtomicBool,
    /// Wakes the work waiting for a permit, a drain slot or the breaker's gate
    /// when the partition is cancelled (see [`CompletionToken::until_cancelled`]).
    cancel_wake: tokio::sync::Notify,
}

impl Inbox {
    pub fn new(owner: impl Wake + 'static) -> Inbox {
        Inbox {
            owner: Box::new(owner),
            queue: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            cancel_wake: tokio::sync::Notify::new(),
        }
    }

    /// Abandons the work not yet on the wire: queued jobs, in-place retries and
    /// DLQ drain slots end without an outcome (errored) before they take a
    /// permit or make another request.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel_wake.notify_waiters();
        HANDOVERS.notify_waiters();
    }

    /// The handover is over: later outcomes are counted as revoked work.
    pub fn close(&self) {
        self.cancel();
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Adds a completion and wakes the owner if the inbox was empty. If the owner
    /// is gone (revoked, crashed), nobody takes it: the offset was not stored, so
    /// the event is redelivered.
    fn put(&self, c: Completion) {
        if c.outcome.is_some() && self.closed.load(Ordering::SeqCst) {
            // A request made (or answered) after the partition was handed
            // over: zombie work, which cancellation exists to prevent.
            metrics::counter!(crate::metrics::REVOKED_WORK).increment(1);
        }
        if Self::push(&self.queue, c) {
            self.owner.wake();
        }
    }

    /// Adds a completion; true when the queue was empty.
    fn push(queue: &Mutex<Vec<Completion>>, c: Completion) -> bool {
        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push(c);
        q.len() == 1
    }

    /// Everything that arrived since the last take, in arrival order.
    pub fn take(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Rung whenever any partition's work is cancelled ([`Inbox::cancel`]): what
/// waits for the events of many partitions at once (a forming batch,
/// `delivery::batch`) registers here once instead of with each partition.
static HANDOVERS: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Resolves at the next cancellation of any partition after it was enabled
/// (`Notified::enable`), or polled first.
pub fn next_handover() -> tokio::sync::futures::Notified<'static> {
    HANDOVERS.notified()
}

/// The cancellation of one partition's work, for waits deep in the failure
/// path that have no token at hand (a DLQ or parking-lot write between its
/// tries: `delivery::write_durably`).
#[derive(Clone)]
pub struct Cancellation {
    inbox: Arc<Inbox>,
}

impl Cancellation {
    pub fn cancelled(&self) -> bool {
        self.inbox.is_cancelled()
    }

    /// Resolves once the partition is cancelled (at once if it already is).
    pub async fn until_cancelled(&self) {
        self.inbox.until_cancelled().await
    }
}

impl Inbox {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    async fn until_cancelled(&self) {
        let wake = self.cancel_wake.notified();
        tokio::pin!(wake);
        // Registered before the flag is read: a cancel between the two still wakes.
        wake.as_mut().enable();
        if self.is_cancelled() {
            return;
        }
        wake.await;
    }
}

pub struct CompletionToken {
    inbox: Arc<Inbox>,
    generation: u64,
    src: Src,
    offset: i64,
    reported: bool,
}

impl CompletionToken {
    pub fn new(inbox: Arc<Inbox>, generation: u64, src: Src, offset: i64) -> Self {
        CompletionToken {
            inbox,
            generation,
            src,
            offset,
            reported: false,
        }
    }

    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The partition's cancellation, apart from the token.
    pub fn cancellation(&self) -> Cancellation {
        Cancellation {
            inbox: self.inbox.clone(),
        }
    }

    /// The partition is being handed over or its actor ended: the work must not
    /// take a permit or make another request (dropping the token reports it
    /// errored; the next owner delivers the event).
    pub fn cancelled(&self) -> bool {
        self.inbox.is_cancelled()
    }

    /// Resolves once the partition is cancelled (at once if it already is): what
    /// a wait for a permit, a drain slot or the breaker's gate races against.
    pub async fn until_cancelled(&self) {
        self.inbox.until_cancelled().await
    }

    /// Reports the durable outcome.
    pub fn finish(mut self, outcome: Finished) {
        self.reported = true;
        self.report(Some(outcome));
    }

    fn report(&self, outcome: Option<Finished>) {
        let c = Completion {
            generation: self.generation,
            src: self.src,
            offset: self.offset,
            outcome,
        };
        self.inbox.put(c);
    }
}

impl Drop for CompletionToken {
    fn drop(&mut self) {
        if !self.reported {
            self.report(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(offset: i64) -> Completion {
        Completion {
            generation: 1,
            src: Src::Main,
            offset,
            outcome: Some(Finished::Delivered),
        }
    }

    #[test]
    fn only_the_push_into_an_empty_inbox_wakes() {
        let queue = Mutex::new(Vec::new());
        assert!(Inbox::push(&queue, c(1)));
        assert!(!Inbox::push(&queue, c(2)));
        assert!(!Inbox::push(&queue, c(3)));
        let taken = std::mem::take(&mut *queue.lock().unwrap());
        let got: Vec<i64> = taken.iter().map(|c| c.offset).collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert!(
            Inbox::push(&queue, c(4)),
            "empty again: the next push wakes"
        );
    }

    struct Nobody;
    impl Wake for Nobody {
        fn wake(&self) {}
    }

    /// A wait racing `until_cancelled` ends when the partition is cancelled,
    /// whether the cancel comes before or during the wait.
    #[tokio::test(start_paused = true)]
    async fn until_cancelled_resolves_on_cancel() {
        let inbox = Arc::new(Inbox::new(Nobody));
        let t = CompletionToken::new(inbox.clone(), 1, Src::Main, 7);
        let waiting = tokio::spawn(async move {
            t.until_cancelled().await;
            t.cancelled()
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "nothing cancelled yet");
        inbox.cancel();
        assert!(waiting.await.unwrap());
        let late = CompletionToken::new(inbox, 1, Src::Main, 8);
        late.until_cancelled().await; // Already cancelled: at once.
    }
}
