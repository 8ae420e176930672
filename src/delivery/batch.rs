//! Batch delivery (`[api.batch]`, `core::batch` decides): an event's call
//! joins the batch of its group (same URL, method, Content-Type, headers and
//! batch settings) and waits for its own answer. One way in,
//! [`Batcher::submit`] — an event (its task's, or an inline first try's) or an
//! ordered run whole — and one kind of waiter ([`Waiter`]). A group's batch leaves when it
//! holds `max_events`, when one more event would pass `max_bytes`, or when its
//! oldest event has waited `linger`; an event larger than `max_bytes` goes
//! alone (a batch of one). A body no batch can hold (not JSON) goes as a
//! request of its own, or is parked on a route with per-item results
//! (`request`, `core::batch::place`). The request counts once for the rate
//! limit (`api.rate_limit_unit = "requests"`) or once per event (`"events"`).
//!
//! Groups are keyed by the rendered URL (one request, one URL: a route with
//! `{key}` has a group per key, each ended after 5 s idle); what is shown of a
//! route — its split share on `/status` and in
//! `courier_batch_split_singles_ratio{route}`, its warnings — is kept per
//! route and labelled by its name (`BatchSpec::route`), never by a value an
//! event chose.
//!
//! Each event's answer is the batch's, or its per-item result when the answer
//! has them (`api.batch.results`): each event then goes on through its own
//! attempt loop — done, retried, dead-lettered or parked on its own, its
//! `last_error` saying it came from a batch answer and at which position. A
//! batch refused as a whole with a split status is sent again in halves
//! (`send::bisect`); a 413 also holds the group's batches to half the refused
//! size for [`SHRINK_FOR`] (`courier_batch_shrunk_total`).
//!
//! An event whose partition is handed over stops waiting at once; its answer,
//! if its batch was already sent, is dropped. A batch leaves without the
//! events that stopped waiting — checked when it is formed and again after its
//! rate slot, however long that took — so no request carries an event of a
//! partition whose revoke completed before the batch was sent.

mod answers;
mod bisect;
mod form;
mod group;
mod waiter;

pub(super) use group::Entry;
use group::{Group, GroupKey};

pub(super) use waiter::{answer_all, leave_out_stopped, Reply, Submission, Waiter};

use super::http::{Api, Outgoing};
use super::send::Calls;
use crate::core::batch::{BatchSpec, SplitWindow};
use crate::core::classify::FailureLog;
use crate::runtime::Pipeline;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a group's batches stay at half the size a 413 refused.
pub(super) const SHRINK_FOR: Duration = Duration::from_secs(60);

/// The groups being formed, by key. The key is hashed once per event: with
/// foldhash's seeded hasher (its keys are a route's URL and headers, which a
/// URL template may take from an event, so seeded per process), not the
/// standard library's SipHash (0.9 % of a batched event's CPU).
type Groups = HashMap<GroupKey, Group, foldhash::fast::RandomState>;

/// The batches being formed, per group, and what sending them needs.
pub(crate) struct Batcher<A> {
    /// The one way a request goes out (a batch is one request).
    calls: Arc<Calls<A>>,
    pipeline: Arc<Pipeline>,
    /// One log line per unreadable answer's reason every 10 s.
    unreadable_log: Mutex<FailureLog>,
    groups: Mutex<Groups>,
    /// Per route (`BatchSpec::route`, a name from the config: bounded), how
    /// many of its events end alone after splits.
    splits: Mutex<HashMap<String, SplitWindow>>,
    /// Events submitted so far.
    submitted: std::sync::atomic::AtomicU64,
    /// Batches whose sending ended (answered, or left with nobody waiting).
    #[cfg(test)]
    ended: std::sync::atomic::AtomicU64,
}

impl<A: Api + Clone> Batcher<A> {
    pub(super) fn new(calls: Arc<Calls<A>>, pipeline: Arc<Pipeline>) -> Batcher<A> {
        Batcher {
            calls,
            pipeline,
            unreadable_log: Mutex::new(FailureLog::new(super::report::FAILURE_LOG_EVERY)),
            groups: Mutex::new(Groups::default()),
            splits: Mutex::new(HashMap::new()),
            submitted: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            ended: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Batches whose sending ended so far (a test's handle on "done with it").
    #[cfg(test)]
    pub(super) fn ended(&self) -> u64 {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Events submitted so far (a test's handle on "waiting in a batch").
    #[cfg(test)]
    pub(super) fn submitted(&self) -> u64 {
        self.submitted.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The one way into the batcher: an event, or an ordered run (its
    /// events in offset order, all of one group: [`Batcher::same_group`])
    /// that joins one batch of its group whole and in this order. Each
    /// event's answer goes to its [`Waiter`].
    pub(super) fn submit(self: &Arc<Self>, out: &Outgoing, spec: &Arc<BatchSpec>, entry: Entry) {
        let redelivery = match &entry {
            Entry::One(s) => s.redelivery.is_some(),
            Entry::Run(_) => false,
        };
        self.enqueue(GroupKey::of(out, spec, redelivery), out, spec, entry);
    }

    /// Whether two requests on the main path share batches.
    pub(super) fn same_group(a: &Outgoing, b: &Outgoing, spec: &Arc<BatchSpec>) -> bool {
        GroupKey::of(a, spec, false) == GroupKey::of(b, spec, false)
    }

    /// Puts events that were taken out of a batch (a half-open probe sends
    /// one; none of an ordered run, which waits for the probe's answer
    /// instead: `send::send`) back into their group, in their order.
    fn requeue(
        self: &Arc<Self>,
        key: &GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        rest: Vec<Submission>,
    ) {
        for s in rest {
            self.send_entry(key.clone(), out, spec, Entry::One(s));
        }
    }

    fn enqueue(
        self: &Arc<Self>,
        key: GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        entry: Entry,
    ) {
        let (n, _) = entry.size();
        self.submitted
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        self.send_entry(key, out, spec, entry);
    }

    /// Sends `entry` to its group's task (started if there is none).
    fn send_entry(
        self: &Arc<Self>,
        key: GroupKey,
        out: &Outgoing,
        spec: &Arc<BatchSpec>,
        entry: Entry,
    ) {
        // Sent under the lock: a group retires under it too, only when empty,
        // so no submission lands in a receiver nobody reads.
        let mut groups = self.lock();
        // Looked up before it is inserted: the key is cloned only for a new
        // group, not per event.
        let sent = match groups.get_mut(&key) {
            Some(group) => group.tx.send(entry),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                let template = Outgoing {
                    url: out.url.clone(),
                    method: out.method,
                    content_type: out.content_type.clone(),
                    headers: key.headers.clone(),
                    ..Outgoing::default()
                };
                tokio::spawn(self.clone().form(key.clone(), template, spec.clone(), rx));
                let sent = tx.send(entry);
                let group = Group { tx, shrunk: None };
                groups.insert(key.clone(), group);
                sent
            }
        };
        if let Err(e) = sent {
            // The group's task is gone (a panic in it): a new one next time.
            groups.remove(&key);
            drop(groups);
            let mut lost = Vec::new();
            e.0.into_batch(&mut lost);
            let none = self.calls.ears.no_answer();
            answer_all(lost, &none, super::send::Sent::default());
        }
    }

    /// The most events the group's next batch may hold.
    fn max_events(&self, key: &GroupKey, spec: &BatchSpec) -> usize {
        let mut groups = self.lock();
        match groups.get_mut(key).and_then(|g| g.shrunk) {
            Some((n, until)) if Instant::now() < until => n.min(spec.max_events),
            Some(_) => {
                if let Some(g) = groups.get_mut(key) {
                    g.shrunk = None;
                }
                spec.max_events
            }
            None => spec.max_events,
        }
    }

    /// After a 413 to a batch of `refused` events.
    fn shrink(&self, key: &GroupKey, refused: usize) {
        let n = crate::core::batch::shrunk(refused);
        if let Some(g) = self.lock().get_mut(key) {
            g.shrunk = Some((n, Instant::now() + SHRINK_FOR));
        }
        metrics::counter!(crate::metrics::BATCH_SHRUNK).increment(1);
        tracing::info!(
            events = n,
            for_s = SHRINK_FOR.as_secs(),
            "the API answered 413 to a batch: its route's batches are held smaller for a while"
        );
    }

    /// `n` events of the route `spec` batches were answered in one request
    /// (not split further); `after_split`: it was part of a batch refused as
    /// a whole. Each window (`core::batch::SPLIT_WINDOW`) the route's share
    /// is shown (`/status`, `courier_batch_split_singles_ratio`), labelled by
    /// the route's name — never by its rendered URL, which an event's values
    /// may choose; a route whose events mostly end alone after splits is
    /// warned about once a minute.
    fn answered(&self, spec: &BatchSpec, n: usize, after_split: bool) {
        let now = Instant::now();
        let report = self
            .splits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(spec.route.clone())
            .or_insert_with(|| SplitWindow::new(now))
            .answered(n, after_split, now);
        let Some(end) = report else { return };
        let r = end.report;
        let route = spec.route.clone();
        metrics::gauge!(crate::metrics::BATCH_SPLIT_SINGLES_RATIO, "route" => route.clone())
            .set(r.share());
        self.pipeline.board.batch_splits(r, &route);
        if end.warn {
            tracing::warn!(
                route,
                events = r.events,
                alone_after_split = r.split_singles,
                share = format!("{:.0} %", r.share() * 100.0),
                "most events of this route's batches end alone after their batches were refused as a whole (api.batch.split statuses): the endpoint may take single events only; configure the route without [api.batch], or check api.batch.format and the endpoint"
            );
        }
    }
}
