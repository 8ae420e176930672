//! Who waits in a batch: each event's [`Submission`] and the [`Waiter`] that
//! takes its answer — its task, or (a first try made without a task) a
//! closure — and how an event that stopped waiting is left out.

use crate::delivery::hear::Answered;
use crate::delivery::send::Sent;
use crate::delivery::token::Cancellation;
use bytes::Bytes;
use tokio::sync::oneshot;

/// An event's answer from its batch (read once), with what it learns of
/// the call.
pub(in crate::delivery) type Reply = (Answered, Sent);

/// One event waiting in a batch.
pub(in crate::delivery) struct Submission {
    pub(in crate::delivery) id: String,
    pub(in crate::delivery) body: Bytes,
    pub(in crate::delivery) redelivery: Option<u32>,
    pub(in crate::delivery) reply: Waiter,
    /// Part of an ordered run: its batch's halves go one after the other.
    pub(in crate::delivery) in_run: bool,
    /// Refused systemic before: a batch of suspects only waits behind fresh
    /// calls at the breaker's gate.
    pub(in crate::delivery) suspect: bool,
    /// Times it was sent again at once, left out of answers that accepted
    /// others (`core::batch::resend_at_once`).
    pub(in crate::delivery) resent: u8,
}

impl Submission {
    /// An event of an ordered run (`redelivery`: none; runs are main-path).
    pub(in crate::delivery) fn of_run(
        id: String,
        body: Bytes,
        suspect: bool,
        reply: Waiter,
    ) -> Submission {
        Submission {
            id,
            body,
            redelivery: None,
            reply,
            in_run: true,
            suspect,
            resent: 0,
        }
    }

    /// One event (not of an ordered run).
    pub(in crate::delivery) fn one(
        id: &str,
        body: Bytes,
        redelivery: Option<u32>,
        suspect: bool,
        reply: Waiter,
    ) -> Submission {
        Submission {
            id: id.to_string(),
            body,
            redelivery,
            reply,
            in_run: false,
            suspect,
            resent: 0,
        }
    }
}

/// Who takes an event's answer from its batch — one kind for every way in:
/// `answer`, called once with it. An event's task waits on a channel
/// ([`Waiter::channel`]); an event's first try made without a task
/// (`delivery::inline`) hands it to a closure. Dropped unanswered (the
/// batch's task is gone), the channel closes — the task hears "no answer"
/// — or the closure's job reports errored. It stops waiting when its
/// partition is handed over (`cancel`).
pub(in crate::delivery) struct Waiter {
    cancel: Cancellation,
    answer: Box<dyn FnOnce(Reply) + Send + Sync>,
}

impl Waiter {
    pub(in crate::delivery) fn new(
        cancel: Cancellation,
        answer: impl FnOnce(Reply) + Send + Sync + 'static,
    ) -> Waiter {
        Waiter {
            cancel,
            answer: Box::new(answer),
        }
    }

    /// A waiter whose answer comes on the channel returned with it.
    pub(in crate::delivery) fn channel(cancel: Cancellation) -> (Waiter, oneshot::Receiver<Reply>) {
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter::new(cancel, move |reply| {
            let _ = tx.send(reply);
        });
        (waiter, rx)
    }

    /// The event no longer waits for this answer (its partition was handed
    /// over): left out of the request, if it was not sent yet.
    pub(in crate::delivery) fn stopped(&self) -> bool {
        self.cancel.cancelled()
    }

    pub(in crate::delivery) fn send(self, reply: Reply) {
        (self.answer)(reply)
    }
}

/// Answers each of `items` with one answer, read once (a request that
/// failed on the way, events not sent, a batch's task gone).
pub(in crate::delivery) fn answer_all(
    items: impl IntoIterator<Item = Submission>,
    answered: &Answered,
    sent: Sent,
) {
    for s in items {
        s.reply.send((answered.clone(), sent));
    }
}

/// Leaves out of `items` the events that stopped waiting (their waiters
/// dropped: an inline one's token reports errored).
pub(in crate::delivery) fn leave_out_stopped(items: &mut Vec<Submission>) {
    items.retain(|s| !s.reply.stopped());
}
