//! One way out for every request (`delivery::send`): on every path — an
//! event alone, its retries, a batch formed by tasks or by the dispatcher
//! (inline first tries), a batch split in halves, an ordered run, a DLQ
//! round — each request the API received was heard exactly once
//! (`hear::Ears` counts what it heard; the fakes count what they received).
//! A path that sent a request its own way would be heard never, or twice.

use super::batched::{run_all, BatchApi, Start, BATCH};
use super::*;
use crate::core::classify::ErrorClass;
use crate::core::envelope::ErrorInfo;

fn heard<A: http::Api>(d: &Deliverer<A, FakeDlq>) -> u64 {
    d.caller.calls.ears.heard.load(Ordering::SeqCst)
}

/// Answers read (`core::answer::read`, through `hear::Ears`).
fn reads<A: http::Api>(d: &Deliverer<A, FakeDlq>) -> u64 {
    d.caller.calls.ears.reads.load(Ordering::SeqCst)
}

/// A DLQ record of event `id` whose turn has come, its outcome to `inbox`.
fn from_dlq<A: http::Api>(d: &Deliverer<A, FakeDlq>, id: &str, inbox: &Arc<Inbox>) -> Job {
    let error = ErrorInfo::new(
        ErrorClass::Transient,
        FailureReason::Transport(TransportFailure::Timeout),
        None,
        "a test's first failure",
    );
    let mut env = d.writes.envelope(&item_in(id, 40), error);
    env.not_before_ms = 0;
    let item = Item {
        work: Work::FromDlq(Box::new(env)),
        ..item_in(id, 40)
    };
    Job {
        item: Arc::new(item),
        token: CompletionToken::new(inbox.clone(), 1, Src::Dlq, 40),
    }
}

/// Events alone: delivered, retried after 503 and timeouts, parked after a
/// 422, waiting at the gate through 401s (systemic: the event keeps its
/// admission for its hypothesis), and a DLQ round.
#[tokio::test]
async fn every_request_of_an_event_alone_is_heard_once() {
    let api = FakeApi::answering(&[
        Reply::Status(503),
        Reply::Transport(TransportFailure::Timeout),
        Reply::Status(200),
        Reply::Status(422),
        Reply::Status(401),
        Reply::Status(401),
        Reply::Status(401),
        Reply::Status(200),
        Reply::Status(500),
        Reply::Status(200),
    ]);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer(QUICK, &api, &dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    for (i, id) in ["a-1", "a-2", "a-3", "a-4"].iter().enumerate() {
        let run = d.clone().run(job_in(id, i as i64, &inbox), None);
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("the delivery ends");
    }
    let before = api.calls();
    let round = d.clone().run(from_dlq(&d, "a-5", &inbox), None);
    tokio::time::timeout(Duration::from_secs(30), round)
        .await
        .expect("the DLQ round ends");
    assert_eq!(api.calls(), before + 1, "the DLQ round made its request");
    assert_eq!(inbox.take().len(), 5, "one completion per event");
    assert!(api.calls() >= 9, "{} requests", api.calls());
    assert_eq!(heard(&d), api.calls() as u64);
    // Each answer read once: the breaker, the adaptive limit and the
    // event's outcome all take it from that one reading.
    assert_eq!(reads(&d), api.calls() as u64, "answers read");
}

/// Batches: formed by tasks and by the dispatcher (first tries inline),
/// answered per item (a 400 parks one, a 503 retries one), refused as a
/// whole (a poison id: split in halves until it is alone), too large (413:
/// halves), then an ordered run.
#[tokio::test]
async fn every_request_of_a_batch_is_heard_once() {
    for how in [Start::Task, Start::Dispatcher] {
        let api = BatchApi::new(
            &[("e-3", 400, u32::MAX), ("e-5", 503, 1)],
            &["e-7"],
            Some(6),
        );
        let dlq = FakeDlq::default();
        let (d, _) = deliverer_with(QUICK, BATCH, &api, &dlq);
        let done = run_all(&d, 10, how).await;
        assert_eq!(done.len(), 10);
        let requests = api.requests();
        assert!(
            requests.iter().any(|r| r.len() > 1),
            "{how:?}: some requests were batches: {requests:?}"
        );
        assert_eq!(heard(&d), requests.len() as u64, "{how:?}: {requests:?}");
    }
    let api = BatchApi::new(&[("e-2", 503, 1)], &[], None);
    let dlq = FakeDlq::default();
    let extra = format!("{BATCH}ordered = true\n");
    let (d, _) = deliverer_with(QUICK, &extra, &api, &dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    let jobs: Vec<Job> = (0..5)
        .map(|i| job_in(&format!("e-{i}"), i, &inbox))
        .collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(5));
    let permits = (0..5)
        .map(|_| sem.clone().try_acquire_owned().expect("a permit"))
        .collect();
    tokio::time::timeout(
        Duration::from_secs(30),
        d.clone().run_ordered(jobs, permits),
    )
    .await
    .expect("the run ends");
    assert_eq!(inbox.take().len(), 5);
    let requests = api.requests();
    assert!(requests.len() >= 2, "the run went again: {requests:?}");
    assert_eq!(heard(&d), requests.len() as u64, "{requests:?}");
}
