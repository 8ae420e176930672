//! Stage 3, the call: one API call for one event — a request of its own, or
//! into its route's batch, where the batch is the request. Either way the
//! request goes out the one way [`super::send`] has (admitted at the
//! breaker's gate, its slots taken, sent, heard once).

use super::batch::{Batcher, Entry, Submission, Waiter};
use super::hear::Answered;
use super::http::{Api, Outgoing};
use super::send::{Calls, Made, Request, Sent, Waiting};
use super::token::CompletionToken;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;

/// Stage 3's parts: what a call passes through — the breaker's gate, the
/// request and rate slots, the HTTP client (or the route's batch) — and
/// what hears its answer. (An event's permit it holds already:
/// [`super::permits`].)
pub(super) struct Caller<A> {
    /// The one way a request goes out: admitted, sent, heard.
    pub(super) calls: Arc<Calls<A>>,
    /// Batches being formed (`[api.batch]`, the routes' batches).
    pub(super) batcher: Arc<Batcher<A>>,
}

impl<A: Api> Caller<A> {
    pub(super) fn new(calls: Arc<Calls<A>>, batcher: Arc<Batcher<A>>) -> Caller<A> {
        Caller { calls, batcher }
    }

    /// One API call for one event (`redelivery`: the DLQ round): into its
    /// route's batch (`[api.batch]`), or a request of its own. With the
    /// answer, the call made. `None`: handed over first (no answer for
    /// it; an admission taken is freed).
    pub(super) async fn call(
        &self,
        id: &str,
        out: &Outgoing,
        body: Bytes,
        redelivery: Option<u32>,
        token: &CompletionToken,
        suspect: bool,
    ) -> Option<(Answered, Made)> {
        // `request` left `batch` only on a body a batch can hold.
        if let Some(spec) = out.batch.as_ref() {
            let (waiter, answer) = Waiter::channel(token.cancellation());
            let one = Submission::one(id, body, redelivery, suspect, waiter);
            self.batcher.submit(out, spec, Entry::One(one));
            let (r, sent) = tokio::select! {
                biased;
                _ = token.until_cancelled() => return None,
                r = answer => r.unwrap_or_else(|_| (self.calls.ears.no_answer(), Sent::default())),
            };
            return Some((r, Made::heard(sent)));
        }
        // A request of one event alone: the same way out as a batch's.
        let (admission, call) = self.calls.admit(&mut Alone(token), suspect, 1).await?;
        let request = Request {
            out,
            key: id,
            body,
            redelivery,
            batch: None,
        };
        Some(self.calls.send(admission, call, request).await)
    }
}

/// An event alone waits for its request until its partition is handed over.
struct Alone<'a>(&'a CompletionToken);

impl Waiting for Alone<'_> {
    fn nobody(&mut self) -> bool {
        self.0.cancelled()
    }

    fn stopping(&self) -> impl Future<Output = ()> + Send {
        self.0.until_cancelled()
    }
}
