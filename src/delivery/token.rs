//! Completion tokens: every dispatched event carries one, and it reports exactly
//! one outcome back (a [`Report`]) to the partition actor that owns the event's offset.
//!
//! A token dropped without an explicit outcome (a panicking task, a task lost with
//! a crashed actor, a shutdown) reports *errored*, never *done*: the partition
//! actor then re-dispatches the event. A lost task can therefore cause a duplicate,
//! never leave an offset silently done. (Vector's finalizers count a dropped event
//! as delivered; Courier deliberately does not.)
//!
//! # Invariant I5: a dropped token reports errored
//!
//!
//! *Enforced in* `src/delivery/token.rs` (`CompletionToken`). Every dispatched event carries
//! a token; a token dropped without an outcome reports *errored* (re-dispatch), never *done*.
//!
//! *Tested by:* Indirectly by every e2e test; a crashed task can only cause a re-dispatch.
//!
//! # Invariant I22: no zombie work
//!
//!
//! *Enforced in* `src/delivery/token.rs`, `src/actors/delivery_pool.rs`, `src/delivery/{call,attempt,durable}.rs` (no
//! zombie work). When a drain begins (revoke, shutdown) or a partition actor ends, its inbox
//! is cancelled: queued jobs are dropped by the pool's dispatcher before they take a permit,
//! and in-place retries stop before another request (their tokens report errored; a draining
//! machine does not redispatch). A delivery's waits race the cancellation
//! (`CompletionToken::until_cancelled`) and ends at once: an in-place retry's back-off, the
//! breaker's gate (before the breaker admits it, so no half-open probe is spent on a call
//! never made), on the DLQ drain the drain permit and the rate slot (`core::pacer` reserves
//! nothing ahead: a cancelled waiter leaves no slot the others wait behind), and the group
//! rate limit's slot (`api.rate_limit_per_sec`, `send::Calls::admit`; a wait dropped during
//! its Redis fetch loses that batch to the group: fewer calls, never more). A closed breaker
//! admits without registering for the cancellation (`ApiHealth::admit_now`), so the common path
//! takes no lock on the partition's notifier. The drain waits only for requests on the wire.
//! Outcomes arriving after the handover completed are counted (`courier_revoked_work_total`).
//! The answer to a call the breaker admitted always reaches the breaker, also when the
//! partition was handed over while the call was on the wire (`delivery/attempt.rs` tells it
//! before it checks the cancellation): a half-open probe whose answer the breaker never hears
//! keeps its slot, and every later call of the instance would wait at the gate. A call
//! admitted by the gate and then cancelled while it waits for its slots frees its
//! admission when it is dropped (`api_health::Admission`, I36).
//!
//! *Tested by:* `delivery::tests::a_systemic_answer_after_the_handover_still_reaches_the_breaker`
//! (a 401 released after the handover: the breaker left closed before the fix);
//! `tests/crash_cost.rs::a_third_instance_joins_without_zombie_work`: 0 (1,348
//! with the cancellation disabled); `a_revoke_cancels_the_deliveries_waiting_at_the_breaker`
//! (API answering 401, breaker open, a third instance joins): 0 (16 requests for revoked
//! partitions and 16 duplicates with the gate wait not cancellable);
//! `a_revoke_cancels_the_dlq_drain_waiting_for_its_rate_slot` (a second instance joins during
//! a 1/s drain): 0 (2 and 4 requests for revoked partitions with the drain waits not
//! cancellable); `a_revoke_cancels_the_deliveries_waiting_for_a_rate_slot` (10/s for the
//! group, a third instance joins): 0 (6 requests for revoked partitions and 6 duplicates with
//! the rate-limit wait not cancellable); `delivery::pacer` unit test (paused time: a
//! cancelled waiter's slot goes to the next one at 100 ms, 200 ms with the old reserving
//! pacer); `core::pacer` proptest (a refusal takes nothing; slots an interval apart).

pub(crate) use crate::core::partition::Finished;
use crate::core::partition::{Report, Src};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Wakes the owner of an [`Inbox`] (the partition actor: `PartitionMsg::Completed`).
pub(crate) trait Wake: Send + Sync {
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
pub(crate) struct Inbox {
    owner: Box<dyn Wake>,
    queue: Mutex<Vec<Report>>,
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
    pub(crate) fn new(owner: impl Wake + 'static) -> Inbox {
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
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel_wake.notify_waiters();
        HANDOVERS.notify_waiters();
    }

    /// The handover is over: later outcomes are counted as revoked work.
    pub(crate) fn close(&self) {
        self.cancel();
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Adds a completion and wakes the owner if the inbox was empty. If the owner
    /// is gone (revoked, crashed), nobody takes it: the offset was not stored, so
    /// the event is redelivered.
    fn put(&self, c: Report) {
        if c.finished.is_some() && self.closed.load(Ordering::SeqCst) {
            // A request made (or answered) after the partition was handed
            // over: zombie work, which cancellation exists to prevent.
            metrics::counter!(crate::metrics::REVOKED_WORK).increment(1);
        }
        if Self::push(&self.queue, c) {
            self.owner.wake();
        }
    }

    /// Adds a completion; true when the queue was empty.
    fn push(queue: &Mutex<Vec<Report>>, c: Report) -> bool {
        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push(c);
        q.len() == 1
    }

    /// Everything that arrived since the last take, in arrival order.
    pub(crate) fn take(&self) -> Vec<Report> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Rung whenever any partition's work is cancelled ([`Inbox::cancel`]): what
/// waits for the events of many partitions at once (a forming batch,
/// `delivery::batch`) registers here once instead of with each partition.
static HANDOVERS: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Resolves at the next cancellation of any partition after it was enabled
/// (`Notified::enable`), or polled first.
pub(crate) fn next_handover() -> tokio::sync::futures::Notified<'static> {
    HANDOVERS.notified()
}

/// The cancellation of one partition's work, for waits deep in the failure
/// path that have no token at hand (a DLQ or parking-lot write between its
/// tries: `delivery::write_durably`).
#[derive(Clone)]
pub(crate) struct Cancellation {
    inbox: Arc<Inbox>,
}

impl Cancellation {
    pub(crate) fn cancelled(&self) -> bool {
        self.inbox.is_cancelled()
    }

    /// Resolves once the partition is cancelled (at once if it already is).
    pub(crate) async fn until_cancelled(&self) {
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

pub(crate) struct CompletionToken {
    inbox: Arc<Inbox>,
    generation: u64,
    src: Src,
    offset: i64,
    reported: bool,
}

impl CompletionToken {
    pub(crate) fn new(inbox: Arc<Inbox>, generation: u64, src: Src, offset: i64) -> Self {
        CompletionToken {
            inbox,
            generation,
            src,
            offset,
            reported: false,
        }
    }

    /// The offset it reports for (the consumer actor's tests).
    #[cfg(test)]
    pub(crate) fn offset(&self) -> i64 {
        self.offset
    }

    /// The partition's cancellation, apart from the token.
    pub(crate) fn cancellation(&self) -> Cancellation {
        Cancellation {
            inbox: self.inbox.clone(),
        }
    }

    /// The partition is being handed over or its actor ended: the work must not
    /// take a permit or make another request (dropping the token reports it
    /// errored; the next owner delivers the event).
    pub(crate) fn cancelled(&self) -> bool {
        self.inbox.is_cancelled()
    }

    /// Resolves once the partition is cancelled (at once if it already is): what
    /// a wait for a permit, a drain slot or the breaker's gate races against.
    pub(crate) async fn until_cancelled(&self) {
        self.inbox.until_cancelled().await
    }

    /// Reports the durable outcome.
    pub(crate) fn finish(mut self, outcome: Finished) {
        self.reported = true;
        self.report(Some(outcome));
    }

    fn report(&self, finished: Option<Finished>) {
        let c = Report {
            generation: self.generation,
            src: self.src,
            offset: self.offset,
            finished,
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

    fn c(offset: i64) -> Report {
        Report {
            generation: 1,
            src: Src::Main,
            offset,
            finished: Some(Finished::Delivered),
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
