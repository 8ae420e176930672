//! Sending a batch: one request, then each event's answer — the batch's,
//! its per-item result, or (refused as a whole with a split status) the
//! answers of its two halves, sent the same way (`core::batch`).

use super::{leave_out_stopped, Batcher, GroupKey, Reply, Submission};
use crate::config::RateLimitUnit;
use crate::core::batch::{self, BatchSpec, WholeAnswer};
use crate::delivery::http::{Answer, Api, Outgoing};
use crate::delivery::token;
use crate::metrics as m;
use std::future::Future;
use std::pin::Pin;

impl<A: Api + Clone> Batcher<A> {
    /// Sends `items` as one request (or, refused as a whole, as halves) and
    /// answers each. Events that stopped waiting are left out first.
    pub(super) fn bisect<'a>(
        &'a self,
        key: &'a GroupKey,
        out: &'a Outgoing,
        spec: &'a BatchSpec,
        mut items: Vec<Submission>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            leave_out_stopped(&mut items);
            if items.is_empty() {
                return;
            }
            // The wait for its slots can outlast a handover: who stopped
            // waiting meanwhile is left out too (at the handover if it is
            // inline, else after the wait), so no request carries an event of
            // a partition whose revoke completed during the wait.
            let call = {
                let slot = self.call_slot(items.len());
                tokio::pin!(slot);
                loop {
                    let handover = token::next_handover();
                    tokio::pin!(handover);
                    handover.as_mut().enable();
                    tokio::select! {
                        biased;
                        call = &mut slot => break call,
                        () = handover => {
                            leave_out_stopped(&mut items);
                            if items.is_empty() {
                                return; // The wait dropped takes no slot.
                            }
                        }
                    }
                }
            };
            leave_out_stopped(&mut items);
            if items.is_empty() {
                self.limits.call_not_made(call);
                return;
            }
            let n = items.len();
            let (answer, seq) = self.request(out, spec, &items, call).await;
            let a = match answer {
                Err(t) => {
                    for s in items {
                        s.reply.send((Err(t.clone()), seq));
                    }
                    return;
                }
                Ok(a) => a,
            };
            if n > 1 && batch::whole_answer(a.status, n, &spec.split) == WholeAnswer::Split {
                if a.status == 413 {
                    self.shrink(key, n);
                }
                metrics::counter!(m::BATCH_SPLIT_REQUESTS).increment(2);
                let (_, second) = batch::halves(n);
                let tail = items.split_off(second.start);
                if items.iter().chain(&tail).any(|s| s.in_run) {
                    // An ordered run's events reach the API in offset order.
                    self.bisect(key, out, spec, items).await;
                    self.bisect(key, out, spec, tail).await;
                } else {
                    let (x, y) = tokio::join!(
                        self.bisect(key, out, spec, items),
                        self.bisect(key, out, spec, tail)
                    );
                    let ((), ()) = (x, y);
                }
                return;
            }
            let ids: Vec<&str> = items.iter().map(|s| s.id.as_str()).collect();
            let replies = answers(spec, &a, &ids, seq);
            for (s, reply) in items.into_iter().zip(replies) {
                s.reply.send(reply);
            }
        })
    }

    /// Waits for the request slot (`LimitOn::Requests`) and the rate slot of
    /// a request of `n` events (one rate slot, or `n` with
    /// `api.rate_limit_unit = "events"`), then counts the call.
    async fn call_slot(&self, n: usize) -> crate::delivery::limits::Call {
        let weight = match self.pipeline.config.api.rate_limit_unit {
            RateLimitUnit::Requests => 1,
            RateLimitUnit::Events => n,
        };
        self.limits.before_call_weighted(weight).await
    }

    /// One request for `items`, counted as `call`: a single event as itself
    /// (its own Content-Type and id as `Idempotency-Key`), several as the
    /// format's body with a key derived from their ids. With the call's number.
    async fn request(
        &self,
        out: &Outgoing,
        spec: &BatchSpec,
        items: &[Submission],
        call: crate::delivery::limits::Call,
    ) -> (Result<Answer, crate::delivery::http::TransportError>, u64) {
        let n = items.len();
        let redelivery = items.iter().filter_map(|s| s.redelivery).max();
        let seq = self.pipeline.health.call_number();
        let r = if n == 1 {
            let s = &items[0];
            self.api.send(out, &s.id, s.body.clone(), redelivery).await
        } else {
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
            self.api.send(&batched, &key, body.into(), redelivery).await
        };
        self.limits.after_call(call, &r);
        metrics::counter!(m::BATCH_REQUESTS).increment(1);
        metrics::histogram!(m::BATCH_EVENTS).record(n as f64);
        (r, seq)
    }
}

/// Each event's answer (`ids` in the batch's order) to a batch answered `a`:
/// its per-item result when the answer has them (a 2xx or 207 with
/// `api.batch.results`), else the batch's own (a 207 without results: each
/// event's result is missing, and it is sent again).
fn answers(spec: &BatchSpec, a: &Answer, ids: &[&str], seq: u64) -> Vec<Reply> {
    let n = ids.len();
    if n == 1 {
        return vec![(Ok(a.clone()), seq)];
    }
    if (200..300).contains(&a.status) {
        if let (Some(r), Some(body)) = (&spec.results, &a.full) {
            if let Some(results) = batch::item_results(r, body, ids) {
                return results
                    .iter()
                    .map(|res| {
                        let it = item_answer(a, res.status, res.position, n, res.detail.as_deref());
                        (Ok(it), seq)
                    })
                    .collect();
            }
        }
    }
    let each = if a.status == 207 {
        item_answer(a, batch::MISSING_RESULT_STATUS, None, n, None)
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

/// An event's answer from its batch's: `status`, the batch's `Retry-After`, and
/// for `last_error` where it came from.
pub(super) fn item_answer(
    a: &Answer,
    status: u16,
    position: Option<usize>,
    n: usize,
    detail: Option<&str>,
) -> Answer {
    let at = position.map_or_else(|| "not listed".to_string(), |p| format!("position {p}"));
    let mut text = format!("from a batch answer {} ({at} of {n} events)", a.status);
    if let Some(d) = detail {
        text.push_str(": ");
        text.push_str(d);
    }
    Answer {
        status,
        retry_after: a.retry_after,
        body: Some(text),
        full: None,
    }
}
