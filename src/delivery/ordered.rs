//! Stage 9, an ordered run (`ordered = true`; `core::ordering`'s runs): the
//! events of one lane dispatched together go out in offset order — in one
//! batch of their route when they fit ([`Batcher::submit`]), else
//! in consecutive requests, each sent after the answer to the one before.
//!
//! After an answer the events are walked in order. Delivered: finished. Failed:
//! `core::attempt` decides for that event as if it had been sent alone —
//! parked on its own (then the walk goes on), dead-lettered (then every later
//! event of the run not delivered follows it into the DLQ, reason
//! `key_in_dlq`, and the DLQ redelivers them in order), or to be tried
//! again: from that event on, the rest of the run is sent again as a run after
//! its wait, including later events the API had accepted (their answers are
//! set aside, `courier_ordered_resent_total`; each item carries its event id,
//! by which the API drops the duplicate). So every event the API accepted is
//! followed, at the API, by every later event of its run: applied in order,
//! the last writes are in offset order.
//!
//! A handover ends the run at once: the events not finished report errored
//! (their tokens are dropped) and the next owner delivers them.
//!
//! # How (I34 is `core::batch`'s; this is how ordered runs keep it)
//!
//! A run (I3) joins one batch
//! whole and in order (`Batcher::submit`; the forming loop never splits an entry), or
//! goes as consecutive requests, each after the answer to the one before, when it does not
//! fit; a batch holding a run that is bisected sends its halves one after the other, and one
//! admitted into a half-open probe slot sends its first event as the probe and the rest
//! only after the probe's answer (`batch::bisect`): no two events of a run are on the wire at
//! once. The answers are walked in order: delivered → done; failed → `core::attempt` for that event
//! alone — parked on its own, the walk goes on; dead-lettered, the later events not
//! delivered follow it into the DLQ — or tried again: from that
//! event on the rest of the run goes again after its wait, later events the API accepted
//! included (`courier_ordered_resent_total`; their set-aside tries do not count against
//! their policy). So each event the API accepted is followed there by every later event of
//! its key: the last writes are in offset order.

use super::attempt::{Tries, Wait};
use super::batch::{Batcher, Entry, Submission, Waiter};
use super::durable::{self, DlqWrite};
use super::hear::Answered;
use super::http::{Api, Outgoing};
use super::report::Failure;
use super::request::{Body, Source};
use super::send::{Made, Sent};
use super::token::CompletionToken;
use super::token::Finished;
use super::{Deliverer, Item, Job, Work};
use crate::metrics as m;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// An event of a run, until its outcome.
struct Member {
    item: Arc<Item>,
    token: CompletionToken,
    _permit: OwnedSemaphorePermit,
    tries: Tries,
}

/// What one round sends: the bodies and requests of the run's first events.
type Round = Vec<(Bytes, Outgoing)>;

/// Each event's answer to a round, in order, with its call.
type Answers = Vec<(Answered, Made)>;

impl<A: Api, W: DlqWrite> Deliverer<A, W> {
    /// Delivers a run (`jobs` in offset order, a permit each) and reports each
    /// event's outcome through its token, unless the partition is handed over
    /// first.
    pub(crate) async fn run_ordered(
        self: Arc<Self>,
        jobs: Vec<Job>,
        permits: Vec<OwnedSemaphorePermit>,
    ) {
        let Some(first) = jobs.first() else {
            return;
        };
        // As for one event (`run`): a handover between a DLQ write's tries
        // abandons the work.
        let cancel = first.token.cancellation();
        durable::in_scope(cancel, self.deliver_run(jobs, permits)).await;
    }

    async fn deliver_run(&self, jobs: Vec<Job>, permits: Vec<OwnedSemaphorePermit>) {
        let mut pending: VecDeque<Member> = jobs
            .into_iter()
            .zip(permits)
            .map(|(job, permit)| Member {
                item: job.item,
                token: job.token,
                _permit: permit,
                tries: Tries::new(&self.hot.in_flight),
            })
            .collect();
        while let Some(front) = pending.front() {
            if front.token.cancelled() {
                return;
            }
            let (round, mut wait) = self.form_round(&mut pending).await;
            if !round.is_empty() {
                let Some(answers) = self.send_round(&pending, round).await else {
                    return; // Handed over: no answer for it.
                };
                match self.walk(&mut pending, answers).await {
                    Walked::Cancelled => return,
                    Walked::Again(w) => wait = Some(w),
                    Walked::Through => {}
                }
            }
            if let Some(Wait::Sleep(delay)) = wait {
                let Some(front) = pending.front() else {
                    return;
                };
                tokio::select! {
                    biased;
                    _ = front.token.until_cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    /// The requests of the run's first events, in order, as long as they
    /// share one batch: same group, within `max_events` and `max_bytes` (an
    /// event that cannot be batched goes alone). An event that cannot be sent
    /// is parked on the way; one whose request failed (enrichment) and is to be
    /// tried again ends the round, with its wait.
    async fn form_round(&self, pending: &mut VecDeque<Member>) -> (Round, Option<Wait>) {
        let mut round: Round = Vec::new();
        let mut len = 0usize;
        while let Some(m) = pending.get_mut(round.len()) {
            let Work::Deliver(ev) = &m.item.work else {
                // An event parked for its vanished jobs (`MAX_ERRORED`): its
                // own work, as alone.
                if let Some(m) = pending.remove(round.len()) {
                    if let Some(done) = Box::pin(self.work(&m.item, &m.token, None)).await {
                        m.token.finish(done);
                    }
                }
                continue;
            };
            let request = self.build.request(&Source::of(&m.item), ev).await;
            match request {
                Ok(Body::Send { body, out }) => {
                    let spec = out.batch.clone();
                    // `request` left `batch` only on a body a batch can hold.
                    let alone = spec.is_none();
                    if let (Some((_, first)), Some(spec)) = (round.first(), &spec) {
                        let n = round.len() + 1;
                        let fits = !alone
                            && Batcher::<A>::same_group(first, &out, spec)
                            && n <= spec.max_events
                            && spec.format.overhead(n) + len + body.len() <= spec.max_bytes;
                        if !fits {
                            break; // The next round starts with it.
                        }
                    }
                    m.tries.count += 1;
                    self.hot.attempts.increment(1);
                    len += body.len();
                    round.push((body, out));
                    if alone {
                        break;
                    }
                }
                Ok(Body::Park { reason, message }) => {
                    if let Some(m) = pending.remove(round.len()) {
                        self.hot.attempts.increment(1);
                        let done = Box::pin(self.park_unsendable(&m.item, reason, &message)).await;
                        m.token.finish(done);
                    }
                }
                Err(e) => {
                    m.tries.count += 1;
                    self.hot.attempts.increment(1);
                    let failure = Failure::enrichment(e);
                    let next = self.after_failure(&mut m.tries, &failure, None);
                    match m.tries.wait(next, &failure) {
                        Wait::GiveUp => {
                            if let Some(m) = pending.remove(round.len()) {
                                let done = self.give_up(&m.item, m.tries, failure, next).await;
                                m.token.finish(done);
                            }
                        }
                        wait => return (round, Some(wait)),
                    }
                }
            }
        }
        (round, None)
    }

    /// Sends a round: one event as itself (or into its batch: [`Deliverer::call`]),
    /// several as one run of their batch (the batch waits at the breaker's
    /// gate and is heard). Each event's answer, in order; `None`: handed over
    /// first.
    async fn send_round(&self, pending: &VecDeque<Member>, mut round: Round) -> Option<Answers> {
        let front = pending.front()?;
        let token = &front.token;
        let suspect = pending
            .iter()
            .take(round.len())
            .all(|m| m.tries.hypothesis.suspect());
        let id = |m: &Member| m.item.event_id().unwrap_or_default().to_string();
        let spec = round.first().and_then(|(_, out)| out.batch.clone());
        match spec {
            Some(spec) if round.len() > 1 => {
                let out = round[0].1.clone();
                let (run, replies): (Vec<Submission>, Vec<_>) = round
                    .drain(..)
                    .zip(pending)
                    .map(|((body, _), m)| {
                        let (waiter, rx) = Waiter::channel(m.token.cancellation());
                        (Submission::of_run(id(m), body, suspect, waiter), rx)
                    })
                    .unzip();
                self.caller.batcher.submit(&out, &spec, Entry::Run(run));
                let all = async {
                    let mut answers = Vec::with_capacity(replies.len());
                    for rx in replies {
                        let (r, sent) = rx.await.unwrap_or_else(|_| {
                            (self.caller.calls.ears.no_answer(), Sent::default())
                        });
                        answers.push((r, Made::heard(sent)));
                    }
                    answers
                };
                tokio::select! {
                    biased;
                    _ = token.until_cancelled() => None,
                    answers = all => Some(answers),
                }
            }
            _ => {
                let (body, out) = round.pop()?;
                let one = self
                    .caller
                    .call(&id(front), &out, body, None, token, suspect)
                    .await?;
                Some(vec![one])
            }
        }
    }

    /// Finishes the events of a round's answers in order, up to the first to
    /// be tried again (see the module's text).
    async fn walk(&self, pending: &mut VecDeque<Member>, answers: Answers) -> Walked {
        let mut answers = answers.into_iter();
        let mut again = None;
        // An event of the run went to the DLQ: every later one not
        // delivered follows it there (its key's order: redelivered behind it).
        let mut behind = false;
        for (r, made) in answers.by_ref() {
            let Some(m) = pending.front_mut() else {
                break;
            };
            let Some(failure) = Failure::in_answer(r) else {
                if let Some(m) = pending.pop_front() {
                    let done = self.delivered(&m.item, m.tries, made.sent.at);
                    m.token.finish(done);
                }
                continue;
            };
            if behind {
                if let Some(m) = pending.pop_front() {
                    let done = self.follow_into_dlq(&m.item).await;
                    m.token.finish(done);
                }
                continue;
            }
            let next = self.after_failure(&mut m.tries, &failure, Some(made));
            if m.token.cancelled() {
                return Walked::Cancelled;
            }
            match m.tries.wait(next, &failure) {
                Wait::GiveUp => {
                    if let Some(m) = pending.pop_front() {
                        let done = self.give_up(&m.item, m.tries, failure, next).await;
                        behind = matches!(done, Finished::DeadLettered { .. });
                        m.token.finish(done);
                    }
                }
                wait => {
                    again = Some(wait);
                    break;
                }
            }
        }
        if behind {
            // The rest of the run, not sent in this round, follows too.
            while let Some(m) = pending.pop_front() {
                if m.token.cancelled() {
                    return Walked::Cancelled;
                }
                let done = self.follow_into_dlq(&m.item).await;
                m.token.finish(done);
            }
            return Walked::Through;
        }
        let Some(wait) = again else {
            return Walked::Through;
        };
        // The rest of the round goes again behind the event tried again: a
        // try whose answer is set aside does not count against its policy.
        let resent = answers.count();
        for m in pending.iter_mut().skip(1).take(resent) {
            m.tries.count = m.tries.count.saturating_sub(1);
        }
        if resent > 0 {
            metrics::counter!(m::ORDERED_RESENT).increment(resent as u64);
        }
        Walked::Again(wait)
    }
}

/// How a walk over a round's answers ended.
enum Walked {
    /// Every answered event finished.
    Through,
    /// An event is to be tried again after this wait, with the rest behind it.
    Again(Wait),
    Cancelled,
}
