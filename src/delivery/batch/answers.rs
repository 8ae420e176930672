//! Each event's answer from its batch's answer: its per-item result (read
//! failing closed: an answer that cannot be read, or an item it does not
//! list, is "no result"), or the batch's own; and whether it was accepted
//! (what lets the next part of an ordered run go, `send`).

use super::{Batcher, Reply, Submission};
use crate::core::batch::{self, BatchSpec, ItemResult, NoResult};
use crate::delivery::http::{Answer, Api};
use crate::delivery::send::Sent;
use crate::metrics as m;

impl<A: Api + Clone> Batcher<A> {
    /// Each event's answer (`items` in the batch's order) to a batch answered
    /// `a`: its per-item result when the route has them (`api.batch.results`)
    /// and the answer is a 2xx — which, failing closed, may be "no result"
    /// for every event (an answer that cannot be read) or for some — else the
    /// batch's own (a 207 without results configured: each event's result is
    /// missing, and it is sent again). With each, whether the event is sent
    /// again at once instead (left out of an answer that accepted others:
    /// `core::batch::resend_at_once`).
    pub(super) fn answers(
        &self,
        spec: &BatchSpec,
        a: &Answer,
        items: &[Submission],
        seq: Sent,
    ) -> (Vec<Reply>, Vec<bool>) {
        let n = items.len();
        if let (Some(r), true) = (&spec.results, (200..300).contains(&a.status)) {
            let ids: Vec<&str> = items.iter().map(|s| s.id.as_str()).collect();
            let results = match a.full.as_ref() {
                Some(Ok(body)) => batch::item_results(r, body, &ids),
                Some(Err(unread)) => Err(*unread),
                // Not read (a client that does not read answers): nothing
                // proves any item done.
                None => Err(batch::Unreadable::ReadFailed),
            };
            return match results {
                Ok(results) => {
                    let progress = batch::accepted_any(&results);
                    let again = results
                        .iter()
                        .zip(items)
                        .map(|(res, s)| batch::resend_at_once(res, progress, s.resent, s.in_run))
                        .collect();
                    let replies = results
                        .iter()
                        .map(|res| {
                            (
                                self.calls
                                    .ears
                                    .read(Ok(self.item_answer(a, *res, n)), false),
                                seq,
                            )
                        })
                        .collect();
                    (replies, again)
                }
                Err(unread) => {
                    self.unreadable(unread, a.status);
                    let each =
                        self.item_answer(a, ItemResult::Missing(NoResult::Unreadable(unread)), n);
                    let each = self.calls.ears.read(Ok(each), false);
                    let replies = (0..n).map(|_| (each.clone(), seq)).collect();
                    (replies, vec![false; n])
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
        // One answer for every event: read once.
        let each = self.calls.ears.read(Ok(each), false);
        let replies = (0..n).map(|_| (each.clone(), seq)).collect();
        (replies, vec![false; n])
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

/// Whether an event's answer accepted it: delivered, as its answer was read
/// (`core::answer`: a 2xx or 409 by default, `[api.status]` over them; an
/// answer without a result for it never is).
pub(super) fn accepted(reply: &Reply) -> bool {
    reply.0.reading().event == crate::core::answer::Verdict::Delivered
}
