//! Stage 1b, the first try without a task: with batching, the pool's
//! dispatcher makes an event's first try itself — its request built, into
//! its route's batch (which waits at the breaker's gate) — and the batch's answer
//! finishes it where it arrives when it is delivered, the usual case. A
//! failed first try goes on in a task ([`Deliverer::run_after`]), its tries
//! counted from there. An event this cannot take gets its task from the start
//! ([`Deliverer::run`]): not batched, enrichment configured (its lookup
//! waits), OTLP or the event span on.
//!
//! A task per event cost about a fifth of a batched event's CPU (its spawn,
//! its state machine and the waits around the call; docs/BENCHMARKS.md).
//! Nothing else changes: the same request, the same batch (heard once by the
//! breaker), the same answer handling (`failure_in`, `delivered`), the same permit held
//! until the outcome. A handover before the batch leaves drops the waiter
//! (its `batch::Waiter`'s closure dropped): its token reports errored, as a task's would.
//!
//! # How (I34 is `core::batch`'s; this is how first tries keep it)
//!
//! With batching the pool's
//! dispatcher makes an event's first try itself: the same request (`request`, which waits for
//! nothing without enrichment), into the batch (which waits at the breaker's gate, I36)
//! with the answer handed to a closure (`batch::Waiter::new`) instead of a waiting task.
//! Delivered — the usual case — the event is finished where the answer arrives
//! (`failure_in`, `delivered`, as the attempt loop does); failed, its tries go on in
//! a task from that failure (`Deliverer::run_after` → `attempt::tries`). An event that needs
//! a wait before its request (enrichment), OTLP or the
//! event span, or a body no batch holds, gets its task from the start. Nobody waits on a
//! closure, so a handover is seen by the batch: a forming batch, and one waiting for its
//! slots, listen to every cancellation (`token::next_handover`, one registration per batch)
//! and drop the inline events of a handed-over partition at once (their tokens report
//! errored); an event taken after its partition was cancelled is dropped as it is taken.
//! Once its batch is on the wire an inline event is waited for, as an unbatched request is
//! (I22: the drain waits only for requests on the wire); an event waiting in its task stops
//! waiting at once and its answer is dropped.

use super::attempt::Tries;
use super::batch::{Entry, Reply, Submission, Waiter};
use super::durable::DlqWrite;
use super::http::Api;
use super::report::Failure;
use super::request::{Body, Source};
use super::run::event_span;
use super::send::Made;
use super::{Deliverer, Job, Work};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::OwnedSemaphorePermit;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// Starts a delivery holding `permit`: its first try inline if it can be,
    /// else in its own task.
    pub(crate) fn start(self: &Arc<Self>, job: Job, permit: OwnedSemaphorePermit) {
        if let Err((job, permit)) = self.first_try_inline(job, permit) {
            tokio::spawn(self.clone().run(job, Some(permit)));
        }
    }

    /// The first try into a batch, answered in [`Deliverer::first_answer`];
    /// the job back when this event needs a task.
    fn first_try_inline(
        self: &Arc<Self>,
        job: Job,
        permit: OwnedSemaphorePermit,
    ) -> Result<(), (Job, OwnedSemaphorePermit)> {
        if !self.inline || crate::otel::enabled() || job.token.cancelled() {
            return Err((job, permit));
        }
        let item = job.item.clone();
        let Work::Deliver(ev) = &item.work else {
            return Err((job, permit));
        };
        if !event_span(&item).is_disabled() {
            return Err((job, permit));
        }
        // Without enrichment the request is built without waiting.
        let Some(Ok(Body::Send { body, out })) = now(self.build.request(&Source::of(&item), ev))
        else {
            return Err((job, permit));
        };
        let Some(spec) = out.batch.clone() else {
            return Err((job, permit)); // Sent alone: its task makes the call.
        };
        let mut t = Tries::new(&self.hot.in_flight);
        self.count_try(&mut t);
        #[cfg(test)]
        self.inline_tries
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let cancel = job.token.cancellation();
        let this = self.clone();
        let waiter = Waiter::new(cancel, move |reply| {
            this.first_answer(job, permit, t, reply)
        });
        let one = Submission::one(&ev.id, body, None, false, waiter);
        self.caller.batcher.submit(&out, &spec, Entry::One(one));
        Ok(())
    }

    /// The answer to an inline first try: delivered, the event is finished
    /// here; failed, its tries go on in a task.
    fn first_answer(self: Arc<Self>, job: Job, permit: OwnedSemaphorePermit, t: Tries, r: Reply) {
        // Heard by its batch (the batch is the call).
        let (answer, sent) = r;
        match Failure::in_answer(answer) {
            None => {
                let done = self.delivered(&job.item, t, sent.at);
                drop(permit);
                job.token.finish(done);
            }
            Some(failure) => {
                tokio::spawn(self.run_after(job, permit, t, (failure, Some(Made::heard(sent)))));
            }
        }
    }
}

/// A future's output if it is ready at once; `None` (and the future
/// dropped) if it would wait.
fn now<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(o) => Some(o),
        Poll::Pending => None,
    }
}
