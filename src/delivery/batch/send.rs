//! Sending a batch: the batch is the call — it waits at the breaker's gate
//! and for its slots, goes as one request in the route's format (a batch of
//! one too), and is heard once ([`crate::delivery::hear`]); then each event's
//! answer: the batch's, its per-item result, or (refused as a whole with a
//! split status) the answers of its two halves, sent the same way
//! (`core::batch`).

use super::{leave_out_stopped, Batcher, GroupKey, Reply, Submission};
use crate::api_health::Admission;
use crate::config::RateLimitUnit;
use crate::core::batch::{self, BatchSpec, ItemResult, NoResult, WholeAnswer};
use crate::delivery::http::{Answer, Api, Outgoing, TransportError};
use crate::delivery::limits::Call;
use crate::delivery::send::{Made, Request, Sent, Waiting};
use crate::delivery::token;
use crate::metrics as m;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

impl<A: Api + Clone> Batcher<A> {
    /// Sends `items` and answers each: as one request, or — with results
    /// matched by id and an id twice among them — as consecutive requests in
    /// which no id repeats (`core::batch::unique_id_runs`). Events that
    /// stopped waiting are left out first.
    pub(super) fn bisect<'a>(
        self: &'a Arc<Self>,
        key: &'a GroupKey,
        out: &'a Outgoing,
        spec: &'a Arc<BatchSpec>,
        mut items: Vec<Submission>,
        after_split: bool,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            leave_out_stopped(&mut items);
            if items.is_empty() {
                return;
            }
            if spec.results.as_ref().is_some_and(|r| r.id.is_some()) {
                let ids: Vec<&str> = items.iter().map(|s| s.id.as_str()).collect();
                let runs = batch::unique_id_runs(&ids);
                if runs.len() > 1 {
                    let mut parts = Vec::with_capacity(runs.len());
                    for r in runs.iter().rev() {
                        parts.push(items.split_off(r.start));
                    }
                    // In order: an ordered run's events reach the API in
                    // offset order.
                    for part in parts.into_iter().rev() {
                        self.send(key, out, spec, part, after_split).await;
                    }
                    return;
                }
            }
            self.send(key, out, spec, items, after_split).await;
        })
    }

    /// One request for `items` (after the gate and the slots), then each
    /// event's answer; refused as a whole with a split status, its halves.
    async fn send(
        self: &Arc<Self>,
        key: &GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        mut items: Vec<Submission>,
        after_split: bool,
    ) {
        let Some((admission, call)) = self.admitted(&mut items).await else {
            return;
        };
        if admission.is_probe_slot() && items.len() > 1 {
            // A half-open probe puts one event at stake, as an event alone
            // would: the others go back to be batched again (behind the
            // gate, in their order).
            let rest = items.split_off(1);
            self.requeue(key, out, spec, rest);
        }
        let n = items.len();
        let (answer, sent) = self.request(out, spec, &items, admission, call).await;
        let a = match answer {
            Err(t) => {
                for s in items {
                    s.reply.send((Err(t.clone()), sent));
                }
                return;
            }
            Ok(a) => a,
        };
        if batch::whole_answer(a.status, n, &spec.split) == WholeAnswer::Split {
            if a.status == 413 {
                self.shrink(key, n);
            }
            metrics::counter!(m::BATCH_SPLIT_REQUESTS).increment(2);
            let (_, second) = batch::halves(n);
            let tail = items.split_off(second.start);
            if items.iter().chain(&tail).any(|s| s.in_run) {
                // An ordered run's events reach the API in offset order.
                self.bisect(key, out, spec, items, true).await;
                self.bisect(key, out, spec, tail, true).await;
            } else {
                let (x, y) = tokio::join!(
                    self.bisect(key, out, spec, items, true),
                    self.bisect(key, out, spec, tail, true)
                );
                let ((), ()) = (x, y);
            }
            return;
        }
        self.answered(key, n, after_split);
        let ids: Vec<&str> = items.iter().map(|s| s.id.as_str()).collect();
        let replies = self.answers(spec, &a, &ids, sent);
        for (s, reply) in items.into_iter().zip(replies) {
            s.reply.send(reply);
        }
    }

    /// Waits for the breaker's admission, then the request slot
    /// (`LimitOn::Requests`) and the rate slot of a request of the events
    /// (one rate slot, or one per event with `api.rate_limit_unit =
    /// "events"`), and counts the call. The waits can outlast a handover:
    /// who stopped waiting meanwhile is left out (at the handover if it is
    /// inline, else after the wait), so no request carries an event of a
    /// partition whose revoke completed during the wait. `None`: nobody
    /// waits any more (an admission taken is freed, a slot wait dropped
    /// takes no slot).
    async fn admitted(&self, items: &mut Vec<Submission>) -> Option<(Admission, Call)> {
        let suspect = items.iter().all(|s| s.suspect);
        let weight = match self.pipeline.config.api.rate_limit_unit {
            RateLimitUnit::Requests => 1,
            RateLimitUnit::Events => items.len(),
        };
        self.calls.admit(&mut Events(items), suspect, weight).await
    }

    /// One request for `items`, admitted and counted as `call`, in the
    /// batch's format (a batch of one too) with a key derived from their
    /// ids, sent and heard the one way ([`crate::delivery::send`]).
    async fn request(
        &self,
        out: &Outgoing,
        spec: &BatchSpec,
        items: &[Submission],
        admission: Admission,
        call: Call,
    ) -> (Result<Answer, TransportError>, Sent) {
        let n = items.len();
        let len: usize = items.iter().map(|s| s.body.len()).sum();
        let body = spec.format.encode(
            items.iter().map(|s| s.body.as_ref()),
            len + spec.format.overhead(n),
        );
        let key = batch::idempotency_key(items.iter().map(|s| s.id.as_str()));
        let batched = Outgoing {
            content_type: Some(spec.format.content_type().into()),
            read_answer: spec.results.is_some(),
            ..out.clone()
        };
        let request = Request {
            out: &batched,
            key: &key,
            body: body.into(),
            redelivery: items.iter().filter_map(|s| s.redelivery).max(),
            batch: Some(spec),
        };
        let (r, Made { sent, .. }) = self.calls.send(admission, call, request).await;
        metrics::counter!(m::BATCH_REQUESTS).increment(1);
        metrics::histogram!(m::BATCH_EVENTS).record(n as f64);
        (r, sent)
    }

    /// Each event's answer (`ids` in the batch's order) to a batch answered
    /// `a`: its per-item result when the route has them (`api.batch.results`)
    /// and the answer is a 2xx — which, failing closed, may be "no result"
    /// for every event (an answer that cannot be read) or for some — else the
    /// batch's own (a 207 without results configured: each event's result is
    /// missing, and it is sent again).
    fn answers(&self, spec: &BatchSpec, a: &Answer, ids: &[&str], seq: Sent) -> Vec<Reply> {
        let n = ids.len();
        if let (Some(r), true) = (&spec.results, (200..300).contains(&a.status)) {
            let results = match a.full.as_ref() {
                Some(Ok(body)) => batch::item_results(r, body, ids),
                Some(Err(unread)) => Err(*unread),
                // Not read (a client that does not read answers): nothing
                // proves any item done.
                None => Err(batch::Unreadable::ReadFailed),
            };
            return match results {
                Ok(results) => results
                    .iter()
                    .map(|res| (Ok(self.item_answer(a, *res, n)), seq))
                    .collect(),
                Err(unread) => {
                    self.unreadable(unread, a.status);
                    let each =
                        self.item_answer(a, ItemResult::Missing(NoResult::Unreadable(unread)), n);
                    (0..n).map(|_| (Ok(each.clone()), seq)).collect()
                }
            };
        }
        let each = if a.status == 207 {
            self.item_answer(a, ItemResult::Missing(NoResult::NotListed), n)
        } else {
            let mut whole = a.clone();
            whole.full = None;
            if let Some(b) = &a.body {
                whole.body = Some(format!("the batch's answer ({n} events): {b}"));
            }
            whole
        };
        (0..n).map(|_| (Ok(each.clone()), seq)).collect()
    }

    /// An event's answer from its batch's: its result's status (or "no
    /// result", sent again), the batch's `Retry-After`, and for `last_error`
    /// where it came from and — cut and redacted, as any answer's body — its
    /// result's text.
    fn item_answer(&self, a: &Answer, res: ItemResult<'_>, n: usize) -> Answer {
        let (status, no_result, text) = match res {
            ItemResult::Listed {
                status,
                position,
                element,
            } => {
                let mut text = format!(
                    "from a batch answer {} (position {position} of {n} events)",
                    a.status
                );
                if !(200..300).contains(&status) {
                    if let Some(d) = self.calls.api.excerpt(element.as_bytes()) {
                        text.push_str(": ");
                        text.push_str(&d);
                    }
                }
                (status, None, text)
            }
            ItemResult::Missing(why) => (
                batch::MISSING_RESULT_STATUS,
                Some(why),
                format!(
                    "from a batch answer {} ({n} events): no result: {}",
                    a.status,
                    why.describe()
                ),
            ),
        };
        Answer {
            status,
            retry_after: a.retry_after,
            body: Some(text),
            full: None,
            no_result,
            per_item: (200..300).contains(&a.status),
        }
    }

    /// A 2xx batch answer whose per-item results cannot be read: counted
    /// (`courier_batch_results_unreadable_total{reason}`) and logged once per
    /// reason every 10 s.
    fn unreadable(&self, why: batch::Unreadable, status: u16) {
        metrics::counter!(m::BATCH_RESULTS_UNREADABLE, "reason" => why.as_str()).increment(1);
        let log = self
            .unreadable_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(why.as_str(), std::time::Instant::now());
        if let Some(l) = log {
            tracing::warn!(
                reason = why.as_str(),
                status,
                left_out = l.left_out,
                "a batch answer's per-item results cannot be read: every event of the batch is sent again (api.batch.results)"
            );
        }
    }
}

/// A batch's events wait for its request until each one's partition is
/// handed over (one registration per batch for every handover, `token::next_handover`).
struct Events<'a>(&'a mut Vec<Submission>);

impl Waiting for Events<'_> {
    fn nobody(&mut self) -> bool {
        leave_out_stopped(self.0);
        self.0.is_empty()
    }

    async fn stopping(&self) {
        let handover = token::next_handover();
        tokio::pin!(handover);
        // Registered before the look: no handover falls between them.
        handover.as_mut().enable();
        if !self.0.iter().any(|s| s.reply.stopped()) {
            handover.await;
        }
    }
}
