//! How a batch goes out (one request, or halves: bisection): the batch is the call — it waits at the breaker's gate
//! and for its slots, goes as one request in the route's format (a batch of
//! one too), and is heard once ([`crate::delivery::hear`]); then each event's
//! answer: the batch's, its per-item result, or (refused as a whole with a
//! split status) the answers of its two halves, sent the same way
//! (`core::batch`) — an ordered run's halves one after the other, the
//! second only once the first was accepted whole (I39).

use super::answers::accepted;
use super::{answer_all, leave_out_stopped, Batcher, GroupKey, Submission};
use crate::api_health::Admission;
use crate::config::RateLimitUnit;
use crate::core::batch::{self, BatchSpec, WholeAnswer};
use crate::delivery::hear::Answered;
use crate::delivery::http::{Api, Outgoing};
use crate::delivery::limits::Call;
use crate::delivery::send::{Made, Request, Sent, Waiting};
use crate::delivery::token;
use crate::metrics as m;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

impl<A: Api + Clone> Batcher<A> {
    /// Sends `items` and answers each: as one request, or — with results
    /// matched by id and an id twice among them — as requests in which no
    /// id repeats: parts by occurrence rank sent at once
    /// (`core::batch::id_rank_parts`), or, holding an ordered run,
    /// consecutive runs sent one after the other (`unique_id_runs`). Events
    /// that stopped waiting are left out first. True when every event was
    /// answered accepted (what lets the next part of an ordered run go).
    pub(super) fn bisect<'a>(
        self: &'a Arc<Self>,
        key: &'a GroupKey,
        out: &'a Outgoing,
        spec: &'a Arc<BatchSpec>,
        mut items: Vec<Submission>,
        after_split: bool,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            leave_out_stopped(&mut items);
            if items.is_empty() {
                return true;
            }
            if spec.results.as_ref().is_some_and(|r| r.id.is_some()) {
                let ids: Vec<&str> = items.iter().map(|s| s.id.as_str()).collect();
                if !items.iter().any(|s| s.in_run) {
                    let ranks = batch::id_rank_parts(&ids);
                    if ranks.len() > 1 {
                        let mut slots: Vec<Option<Submission>> =
                            items.into_iter().map(Some).collect();
                        let mut parts = ranks.into_iter().map(|part| -> Vec<Submission> {
                            part.into_iter().filter_map(|i| slots[i].take()).collect()
                        });
                        let first = parts.next().unwrap_or_default();
                        // The other parts in tasks of their own, at once.
                        let others: Vec<_> = parts
                            .map(|part| {
                                let this = self.clone();
                                let (key, out, spec) = (key.clone(), out.clone(), spec.clone());
                                tokio::spawn(async move {
                                    this.send(&key, &out, &spec, part, after_split).await
                                })
                            })
                            .collect();
                        let mut all = self.send(key, out, spec, first, after_split).await;
                        for t in others {
                            // A part's task that panicked dropped its
                            // events' answers: they report "no answer".
                            all &= t.await.unwrap_or(false);
                        }
                        return all;
                    }
                    return self.send(key, out, spec, items, after_split).await;
                }
                let runs = batch::unique_id_runs(&ids);
                if runs.len() > 1 {
                    let mut parts = Vec::with_capacity(runs.len());
                    for r in runs.iter().rev() {
                        parts.push(items.split_off(r.start));
                    }
                    // In order: an ordered run's events reach the API in
                    // offset order, each part once the one before it was
                    // accepted.
                    return self
                        .in_order(parts.into_iter().rev(), |part| {
                            self.send(key, out, spec, part, after_split)
                        })
                        .await;
                }
            }
            self.send(key, out, spec, items, after_split).await
        })
    }

    /// Sends the parts of an ordered run one after the other, each once the
    /// one before it was accepted whole; behind one that was not, the rest
    /// are answered "not sent" (sent, they would be accepted before the
    /// event that failed: a stale write) and go again behind it, or follow
    /// it into the DLQ (`delivery::ordered`). True when all were accepted.
    async fn in_order<'a, F>(
        &self,
        parts: impl Iterator<Item = Vec<Submission>>,
        mut send: impl FnMut(Vec<Submission>) -> F,
    ) -> bool
    where
        F: Future<Output = bool> + 'a,
    {
        let mut all = true;
        for part in parts {
            if all {
                all = send(part).await;
            } else {
                let behind = self.calls.ears.not_sent(BEHIND_A_FAILURE.into());
                answer_all(part, &behind, Sent::default());
            }
        }
        all
    }

    /// One request for `items` (after the gate and the slots), then each
    /// event's answer; refused as a whole with a split status, its halves.
    /// True when every event was answered accepted.
    async fn send(
        self: &Arc<Self>,
        key: &GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        mut items: Vec<Submission>,
        after_split: bool,
    ) -> bool {
        let Some((admission, call)) = self.admitted(&mut items).await else {
            return false;
        };
        let mut all = true;
        if admission.is_probe_slot() && items.len() > 1 {
            // A half-open probe puts one event at stake, as an event alone
            // would: the others go back to be batched again (behind the
            // gate, in their order) — an ordered run's only after the
            // probe's answer, so no two of its events are on the wire at
            // once (another probe slot may be free now).
            let rest = items.split_off(1);
            if rest.iter().any(|s| s.in_run) {
                // An ordered run's others are not sent in this round, nor
                // after the probe whatever its answer (sent after a probe
                // that failed, an event would reach the API before the one
                // ahead of it): answered "not sent", they go again behind
                // it, or follow it into the DLQ (`delivery::ordered`).
                let behind = self.calls.ears.not_sent(BEHIND_A_PROBE.into());
                answer_all(rest, &behind, Sent::default());
            } else {
                self.requeue(key, out, spec, rest);
            }
            all = false;
        }
        all & self
            .answer(key, out, spec, items, (admission, call), after_split)
            .await
    }

    /// The request for `items`, admitted and counted, and each event's
    /// answer; refused as a whole with a split status, its halves. True
    /// when every event was answered accepted.
    async fn answer(
        self: &Arc<Self>,
        key: &GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        mut items: Vec<Submission>,
        (admission, call): (Admission, Call),
        after_split: bool,
    ) -> bool {
        let n = items.len();
        let (answered, sent) = self.request(out, spec, &items, admission, call).await;
        let a = match answered.answer() {
            // No answer: each event's is the request's, as it was read.
            Err(_) => {
                answer_all(items, &answered, sent);
                return false;
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
                // An ordered run's events reach the API in offset order:
                // the second half once the first was accepted.
                return self
                    .in_order([items, tail].into_iter(), |half| {
                        self.bisect(key, out, spec, half, true)
                    })
                    .await;
            }
            let (x, y) = tokio::join!(
                self.bisect(key, out, spec, items, true),
                self.bisect(key, out, spec, tail, true)
            );
            return x && y;
        }
        self.answered(spec, n, after_split);
        let (replies, again) = self.answers(spec, a, &items, sent);
        let all = replies.iter().all(accepted) && !again.contains(&true);
        let mut resend = Vec::new();
        for ((mut s, reply), again) in items.into_iter().zip(replies).zip(again) {
            if again {
                s.resent += 1;
                resend.push(s);
            } else {
                s.reply.send(reply);
            }
        }
        if !resend.is_empty() {
            metrics::counter!(m::BATCH_RESENT).increment(resend.len() as u64);
            self.requeue(key, out, spec, resend);
        }
        all
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
    ) -> (Answered, Sent) {
        let n = items.len();
        let len: usize = items.iter().map(|s| s.body.len()).sum();
        let body = spec.format.encode(
            items.iter().map(|s| s.body.as_ref()),
            len + spec.format.overhead(n),
        );
        let key = batch::idempotency_key(items.iter().map(|s| s.id.as_str()));
        let batched = Outgoing {
            content_type: Some(spec.format.content_type().into()),
            read_answer: spec.results.is_some().then(|| batch::answer_cap(spec, n)),
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

/// Why an ordered run's events held back (behind its half-open probe, or
/// behind a part of the run not accepted whole) were not sent: a failure of
/// the event's own (its run goes again from the first event not accepted),
/// never a request.
const BEHIND_A_PROBE: &str = "not sent: the ordered run waits for its half-open probe's answer";
const BEHIND_A_FAILURE: &str =
    "not sent: an earlier event of its ordered run was not accepted in the request before";
