//! Batch delivery over a fake batch API: it reads each request's JSON array
//! (a batch of one too) and answers per item (207 with `{"items":[{"id","status"}]}`), refuses a
//! whole batch that holds a poison id (400) or is too big (413), and keeps
//! every request's ids.

use super::*;
use crate::delivery::http::{Answer, Outgoing, TransportError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

#[derive(Clone, Default)]
pub(super) struct BatchApi(Arc<BatchApiState>);

#[derive(Default)]
struct BatchApiState {
    /// Per-item status by id (default 200); a `(status, times)` fails that
    /// many times, then 200.
    items: Mutex<HashMap<String, (u16, u32)>>,
    /// A batch holding one of these is refused as a whole with 400.
    poison: Vec<String>,
    /// A batch of more items than this is answered 413.
    max_items: Option<usize>,
    /// Each request's ids (one for a single event).
    requests: Mutex<Vec<Vec<String>>>,
    /// The ids answered 200, in the order the API took them.
    accepted: Mutex<Vec<String>>,
    /// Requests being answered now, and the most at once.
    in_flight: std::sync::atomic::AtomicUsize,
    max_in_flight: std::sync::atomic::AtomicUsize,
    /// How long each answer takes (the API's latency; none by default).
    latency: Mutex<Duration>,
    /// Ids left out of the results (neither listed nor taken): `true`
    /// always, `false` when their request holds another event.
    omit: Mutex<HashMap<String, bool>>,
}

impl BatchApi {
    pub(super) fn new(
        items: &[(&str, u16, u32)],
        poison: &[&str],
        max_items: Option<usize>,
    ) -> BatchApi {
        BatchApi(Arc::new(BatchApiState {
            items: Mutex::new(
                items
                    .iter()
                    .map(|(id, s, n)| (id.to_string(), (*s, *n)))
                    .collect(),
            ),
            poison: poison.iter().map(|s| s.to_string()).collect(),
            max_items,
            requests: Mutex::default(),
            accepted: Mutex::default(),
            in_flight: Default::default(),
            max_in_flight: Default::default(),
            latency: Mutex::default(),
            omit: Mutex::default(),
        }))
    }

    /// Leaves `id` out of the results (neither listed nor taken) of every
    /// request that holds another event too (`always`: of every request).
    pub(super) fn omitting(&self, id: &str, always: bool) {
        self.0.omit.lock().unwrap().insert(id.to_string(), always);
    }

    /// Whether `id` is left out of the results of a request of `n` events.
    fn omitted(&self, id: &str, n: usize) -> bool {
        self.0
            .omit
            .lock()
            .unwrap()
            .get(id)
            .is_some_and(|always| *always || n > 1)
    }

    /// Each answer takes `latency` from now on.
    pub(super) fn slow(&self, latency: Duration) {
        *self.0.latency.lock().unwrap() = latency;
    }

    pub(super) fn requests(&self) -> Vec<Vec<String>> {
        self.0.requests.lock().unwrap().clone()
    }

    pub(super) fn accepted(&self) -> Vec<String> {
        self.0.accepted.lock().unwrap().clone()
    }

    /// The most requests it was answering at once (each answer yields to the
    /// runtime a few times before it is given, so requests sent concurrently
    /// overlap).
    pub(super) fn max_in_flight(&self) -> usize {
        self.0.max_in_flight.load(Ordering::SeqCst)
    }

    fn status_of(&self, id: &str) -> u16 {
        let mut items = self.0.items.lock().unwrap();
        let status = match items.get_mut(id) {
            Some((s, n)) if *n > 0 => {
                *n -= 1;
                *s
            }
            _ => 200,
        };
        if status == 200 {
            self.0.accepted.lock().unwrap().push(id.to_string());
        }
        status
    }
}

fn answer(status: u16, full: Option<String>) -> Result<Answer, TransportError> {
    Ok(Answer {
        status,
        retry_after: None,
        body: None,
        full: full.map(|f| Ok(Bytes::from(f))),
        no_result: None,
        per_item: false,
    })
}

impl http::Api for BatchApi {
    fn send(
        &self,
        out: &Outgoing,
        event_id: &str,
        body: Bytes,
        _redelivery: Option<u32>,
    ) -> impl Future<Output = Result<Answer, TransportError>> + Send {
        // A route with batching sends even one event in the batch format.
        let batched = event_id.starts_with("batch-");
        let ids: Vec<String> = if batched {
            let items: Vec<serde_json::Value> =
                serde_json::from_slice(&body).expect("a JSON array");
            items
                .iter()
                .map(|v| v["id"].as_str().expect("an id").to_string())
                .collect()
        } else {
            vec![event_id.to_string()]
        };
        if batched {
            assert_eq!(out.content_type.as_deref(), Some("application/json"));
            assert_eq!(
                event_id,
                crate::core::batch::idempotency_key(ids.iter().map(String::as_str))
            );
        }
        self.0.requests.lock().unwrap().push(ids.clone());
        let poisoned = ids.iter().any(|id| self.0.poison.contains(id));
        let r = if self.0.max_items.is_some_and(|m| ids.len() > m) {
            answer(413, None)
        } else if poisoned {
            answer(400, None)
        } else if !batched {
            answer(self.status_of(&ids[0]), None)
        } else {
            // Taken in the batch's order; listed out of order (matched by id).
            let listed: Vec<&String> = ids
                .iter()
                .filter(|id| !self.omitted(id, ids.len()))
                .collect();
            let statuses: Vec<u16> = listed.iter().map(|id| self.status_of(id)).collect();
            let results: Vec<serde_json::Value> = listed
                .iter()
                .zip(statuses)
                .rev()
                .map(|(id, status)| serde_json::json!({"id": id, "status": status}))
                .collect();
            let all_ok = results.iter().all(|r| r["status"] == 200);
            let body = serde_json::json!({ "items": results }).to_string();
            answer(if all_ok { 200 } else { 207 }, Some(body))
        };
        let state = self.0.clone();
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let latency = *state.latency.lock().unwrap();
        async move {
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
            r
        }
    }
}

pub(super) const BATCH: &str = "\n[api.batch]\nmax_events = 10\nlinger = \"200ms\"\nresults = \"/items\"\nresult_id = \"/id\"\n";

/// How a test's events start: each in its own task (`Deliverer::run`, as
/// retries and the slow path do), or as the pool's dispatcher starts them
/// (`Deliverer::start`: with batching, the first try without a task).
#[derive(Debug, Clone, Copy)]
pub(super) enum Start {
    Task,
    Dispatcher,
}

pub(super) const STARTS: [Start; 2] = [Start::Task, Start::Dispatcher];

/// `n` events `e-0..`, run at once through `d`; their outcomes by id.
pub(super) async fn run_all(
    d: &Arc<Deliverer<BatchApi, FakeDlq>>,
    n: usize,
    how: Start,
) -> HashMap<String, Option<Finished>> {
    let inbox = Arc::new(Inbox::new(Nobody));
    let mut tasks = Vec::new();
    for i in 0..n {
        let job = job_in(&format!("e-{i}"), i as i64, &inbox);
        match how {
            Start::Task => tasks.push(tokio::spawn(d.clone().run(job, None))),
            Start::Dispatcher => {
                let permit = d.permit().await.expect("a permit");
                d.start(job, permit);
            }
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("each delivery ends")
            .expect("no panic");
    }
    let mut done = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for c in inbox.take() {
            let dup = done.insert(format!("e-{}", c.offset), c.finished);
            assert!(dup.is_none(), "one outcome per event");
        }
        if done.len() == n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{how:?}: {} of {n} ended",
            done.len()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let inline = d.inline_tries.load(Ordering::SeqCst);
    match how {
        Start::Task => assert_eq!(inline, 0),
        Start::Dispatcher => assert_eq!(inline, n as u64, "every first try inline"),
    }
    done
}

#[tokio::test]
async fn per_item_results_give_each_event_its_own_outcome() {
    for how in STARTS {
        per_item_results(how).await;
    }
}

async fn per_item_results(how: Start) {
    let api = BatchApi::new(&[("e-3", 400, u32::MAX), ("e-5", 503, 1)], &[], None);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer_with(QUICK, BATCH, &api, &dlq);
    let done = run_all(&d, 10, how).await;
    assert_eq!(done.len(), 10);
    for (id, outcome) in &done {
        let want = match id.as_str() {
            "e-3" => Finished::Parked {
                reason: "http_400".into(),
            },
            _ => Finished::Delivered,
        };
        assert_eq!(outcome.as_ref(), Some(&want), "{id}");
    }
    let reqs = api.requests();
    assert_eq!(reqs[0].len(), 10, "the ten events in one request: {reqs:?}");
    // e-5 was answered 503 in the batch and retried (alone or batched again).
    assert!(
        reqs[1..].iter().any(|r| r.contains(&"e-5".to_string())),
        "{reqs:?}"
    );
    let parked = dlq.written("events.parking");
    assert_eq!(parked.len(), 1);
    let msg = &parked[0].envelope.last_error.message;
    assert!(
        msg.contains("from a batch answer 207") && msg.contains("of 10 events"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_poison_event_is_isolated_by_bisection_within_the_bound() {
    for how in STARTS {
        a_poison_event_isolated(how).await;
    }
}

async fn a_poison_event_isolated(how: Start) {
    let api = BatchApi::new(&[("e-6", 400, u32::MAX)], &["e-6"], None);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer_with(QUICK, BATCH, &api, &dlq);
    let done = run_all(&d, 10, how).await;
    for (id, outcome) in &done {
        let parked = id == "e-6";
        assert_eq!(
            matches!(outcome, Some(Finished::Parked { .. })),
            parked,
            "{id}: {outcome:?}"
        );
        assert_eq!(
            matches!(outcome, Some(Finished::Delivered)),
            !parked,
            "{id}"
        );
    }
    let reqs = api.requests();
    let extra = reqs.len() - 1;
    assert!(
        extra <= crate::core::batch::split_bound(10),
        "{extra} extra requests: {reqs:?}"
    );
    // No event answered done was sent again.
    for id in (0..10).filter(|i| *i != 6).map(|i| format!("e-{i}")) {
        let answered = reqs
            .iter()
            .filter(|r| r.contains(&id) && !r.contains(&"e-6".to_string()))
            .count();
        assert_eq!(
            answered, 1,
            "{id} delivered by exactly one request: {reqs:?}"
        );
    }
    // Unordered, a batch's halves go out at once.
    assert!(api.max_in_flight() >= 2, "{}", api.max_in_flight());
}

#[tokio::test]
async fn a_413_splits_the_batch_and_every_event_is_delivered() {
    for how in STARTS {
        a_413_splits(how).await;
    }
}

async fn a_413_splits(how: Start) {
    let api = BatchApi::new(&[], &[], Some(3));
    let dlq = FakeDlq::default();
    let (d, _) = deliverer_with(QUICK, BATCH, &api, &dlq);
    let done = run_all(&d, 10, how).await;
    assert!(
        done.values().all(|o| o == &Some(Finished::Delivered)),
        "{done:?}"
    );
    let reqs = api.requests();
    assert!(
        reqs.iter().any(|r| r.len() > 3),
        "the first batch was too big: {reqs:?}"
    );
    let sizes: Vec<usize> = reqs.iter().map(Vec::len).collect();
    assert!(sizes.iter().filter(|s| **s <= 3).count() >= 4, "{sizes:?}");
    assert!(dlq.asked().is_empty());
}

/// With batching `pipeline.concurrency` bounds requests, not events: the
/// pool's permits fill every request (`concurrency × max_events`), so a
/// batched route is not held to a few batches in flight by a count made
/// for single events (issue 43 item 4; before, 4 permits held 4 events).
#[tokio::test(start_paused = true)]
async fn with_batching_the_permits_fill_every_request() {
    let api = BatchApi::new(&[], &[], None);
    let extra = "\n[pipeline]\nconcurrency = 4\n[api.batch]\nmax_events = 10\n";
    let (d, _) = deliverer_with(QUICK, extra, &api, &FakeDlq::default());
    let mut held = Vec::new();
    for i in 0..40 {
        let p = tokio::time::timeout(Duration::from_secs(1), d.permit())
            .await
            .unwrap_or_else(|_| panic!("permit {i} waited: the permits count events"));
        held.push(p.expect("the semaphore is open"));
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(1), d.permit())
            .await
            .is_err(),
        "the 41st waits"
    );
    assert_eq!(
        d.caller.calls.limits.current(),
        4,
        "requests in flight: pipeline.concurrency"
    );
}
