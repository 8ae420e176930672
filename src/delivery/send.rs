//! Stage 3's core, sending: the one way a request goes out, whatever it
//! carries — an event alone, a batch, an ordered run's batch, a DLQ round.
//! [`Calls::admit`] waits at the breaker's gate and for the request and
//! rate slots while anyone still waits for the request; [`Calls::send`]
//! makes the request and has it heard once, by the breaker and by the
//! adaptive limit. Nothing else on the delivery path admits, counts or hears
//! a call (a test counts the requests a fake API received against the
//! observations the breaker heard, on every path: `tests/one_path.rs`).
//!
//! What differs between a request of one event alone and a batch is what
//! the breaker hears of a systemic answer: the event alone keeps its
//! admission for its own hypothesis (`core::systemic`, judged by
//! `Deliverer::systemic_answer`), a batch is judged at once — each of its
//! events weighs the answer against its own hypothesis without telling the
//! breaker again.

use super::hear::{Answered, Ears};
use super::http::{Answer, Api, Outgoing};
use super::limits::{Call, Limits};
use crate::api_health::{Admission, ApiHealth};
use crate::core::batch::{self, BatchSpec};
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;

/// What an event learns of the request that carried it (alone or in a
/// batch): its number (`ApiHealth::call_number`), which `core::systemic`
/// judges systemic answers by, and when its answer came (`None`: no request
/// was made; read once per request, not per event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(in crate::delivery) struct Sent {
    pub(in crate::delivery) seq: u64,
    pub(in crate::delivery) at: Option<crate::clock::Stamp>,
}

/// A request made for an event, and — a systemic answer to an event alone —
/// the admission the event's hypothesis reports to
/// ([`super::Deliverer::systemic_answer`]). Anything else was heard already.
pub(super) struct Made {
    pub(super) sent: Sent,
    pub(super) pending: Option<Admission>,
}

impl Made {
    /// A request whose answer was heard (a batch's).
    pub(super) fn heard(sent: Sent) -> Made {
        Made {
            sent,
            pending: None,
        }
    }
}

/// Who a request is for while it waits at the gate and for its slots: an
/// event alone (its partition's token) or a batch's events (each its own).
pub(super) trait Waiting {
    /// Leaves out whoever stopped waiting (a handed-over partition's
    /// events); `true`: nobody is left, and the request is not made.
    fn nobody(&mut self) -> bool;
    /// Resolves when someone may have stopped waiting (registered before
    /// [`Waiting::nobody`] is asked again).
    fn stopping(&self) -> impl Future<Output = ()> + Send;
}

/// One request, as it goes on the wire.
pub(super) struct Request<'a> {
    pub(super) out: &'a Outgoing,
    /// The event's id alone, the batch's idempotency key in a batch.
    pub(super) key: &'a str,
    pub(super) body: Bytes,
    /// The DLQ round it is sent in, if it is a redelivery.
    pub(super) redelivery: Option<u32>,
    /// `None`: an event alone; a batch's spec (its per-item results are
    /// read for back-pressure).
    pub(super) batch: Option<&'a BatchSpec>,
}

/// What sending needs: the HTTP client, the breaker, the adaptive and rate
/// limits, and what hears each answer.
pub(super) struct Calls<A> {
    pub(super) api: A,
    pub(super) ears: Arc<Ears>,
    pub(super) limits: Arc<Limits>,
    health: Arc<ApiHealth>,
}

impl<A: Api> Calls<A> {
    pub(super) fn new(
        api: A,
        ears: Arc<Ears>,
        limits: Arc<Limits>,
        health: Arc<ApiHealth>,
    ) -> Calls<A> {
        Calls {
            api,
            ears,
            limits,
            health,
        }
    }

    /// Waits until the breaker admits a request, then for its request slot
    /// (with batching the adaptive limit holds requests:
    /// `limits::LimitOn::Requests`) and its `weight` rate slots
    /// (`api.rate_limit_per_sec`), and counts it in flight. `None`: nobody
    /// waits for it any more — the wait ends when someone stops waiting,
    /// before the breaker counts an admission (a half-open probe) for a
    /// request that will not be made; an admission taken is freed, a slot
    /// wait dropped takes no slot (a batch taken from Redis but not yet
    /// counted is lost to the group, which errs on the side of fewer calls).
    /// `suspect`: every event it carries was refused systemic before (it
    /// waits behind the others and takes at most a share of the probes).
    pub(super) async fn admit(
        &self,
        waiting: &mut impl Waiting,
        suspect: bool,
        weight: usize,
    ) -> Option<(Admission, Call)> {
        if waiting.nobody() {
            return None;
        }
        // The usual case — a closed breaker, no slot to wait for — without
        // registering for a handover (a lock on a notifier per request).
        let now = self.health.admit_now(suspect);
        if now.is_some() && !self.limits.calls_wait() {
            let call = self.limits.before_call(weight).await;
            return now.map(|a| (a, call));
        }
        let waits = async {
            let admission = match now {
                Some(a) => a,
                None => self.health.gate(suspect).await,
            };
            (admission, self.limits.before_call(weight).await)
        };
        tokio::pin!(waits);
        let (admission, call) = loop {
            let stopping = waiting.stopping();
            tokio::select! {
                biased;
                done = &mut waits => break done,
                () = stopping => {
                    if waiting.nobody() {
                        return None;
                    }
                }
            }
        };
        if waiting.nobody() {
            self.limits.call_not_made(call);
            return None; // The admission dropped: its slot is free.
        }
        Some((admission, call))
    }

    /// Makes request `r` (admitted and counted as `call`), reads its answer
    /// once and has it heard: by the adaptive limit (with a batch's items
    /// refused with 429 or 503 as one back-pressure sample) and by the
    /// breaker. With the answer read, the request made.
    pub(super) async fn send(
        &self,
        admission: Admission,
        call: Call,
        r: Request<'_>,
    ) -> (Answered, Made) {
        let seq = self.health.call_number();
        let answer = self.api.send(r.out, r.key, r.body, r.redelivery).await;
        let items_refused = match (r.batch, &answer) {
            (Some(spec), Ok(a)) => items_back_pressure(spec, a),
            _ => false,
        };
        let answered = self.ears.read(answer, items_refused);
        let reading = answered.reading();
        self.limits
            .after_call(call, reading.load, answered.retry_after());
        let sent = Sent {
            seq,
            at: Some(crate::clock::Stamp::now()),
        };
        let pending = match r.batch {
            None => self.ears.hear(admission, reading.call, seq),
            Some(_) => {
                self.ears.hear_batch(admission, reading.call, seq);
                None
            }
        };
        (answered, Made { sent, pending })
    }
}

/// Whether a 2xx batch answer's results refuse items with 429 or 503: then
/// one back-pressure signal for the adaptive limit (the API is up, and wants
/// fewer items at once), never the breaker's business.
fn items_back_pressure(spec: &BatchSpec, a: &Answer) -> bool {
    let (Some(r), Some(Ok(body))) = (&spec.results, &a.full) else {
        return false;
    };
    (200..300).contains(&a.status) && batch::any_item_status(r, body, &[429, 503])
}
