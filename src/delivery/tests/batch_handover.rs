//! Handovers in batch delivery: an event whose partition is handed over
//! while its batch forms, waits for a rate slot or waits for a request slot
//! is left out of the batch (no request carries it) and reports errored — as
//! a task's first try would, and as the first try made without a task
//! (`delivery::inline`) does.

use super::batched::BatchApi;
use super::*;
use crate::delivery::http::Outgoing;

/// A deliverer over `api` (and a DLQ none of these tests reaches) whose
/// batches hold up to 10 events and leave after `linger`.
fn batching<A: http::Api>(linger: &str, api: &A) -> Arc<Deliverer<A, FakeDlq>> {
    let extra = format!("\n[api.batch]\nmax_events = 10\nlinger = \"{linger}\"\n");
    deliverer_with(QUICK, &extra, api, &FakeDlq::default()).0
}

/// The inboxes of two partitions' events: one stays, one is handed over.
fn two_partitions() -> (Arc<Inbox>, Arc<Inbox>) {
    (Arc::new(Inbox::new(Nobody)), Arc::new(Inbox::new(Nobody)))
}

#[tokio::test]
async fn an_event_handed_over_before_its_batch_leaves_is_not_sent() {
    let api = BatchApi::new(&[], &[], None);
    let d = batching("500ms", &api);
    // Two partitions: e-0 stays, e-1's partition is handed over.
    let (stays, leaves) = two_partitions();
    let a = tokio::spawn(d.clone().run(job_in("e-0", 0, &stays), None));
    let b = tokio::spawn(d.clone().run(job_in("e-1", 1, &leaves), None));
    until("both wait in the batch", || {
        d.caller.batcher.submitted() == 2
    })
    .await;
    leaves.cancel();
    for t in [a, b] {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("ends")
            .expect("no panic");
    }
    assert_eq!(
        api.requests(),
        vec![vec!["e-0".to_string()]],
        "only e-0 was sent"
    );
    assert_eq!(stays.take()[0].finished, Some(Finished::Delivered));
    assert!(
        leaves.take().iter().all(|c| c.finished.is_none()),
        "handed over: no outcome"
    );
}

/// A batcher over `api` with its own `limits`, in `d`'s pipeline, and
/// `d`'s batch settings: a test's handle on one batch's waits.
fn own_batcher<A: http::Api + Clone>(
    d: &Deliverer<A, FakeDlq>,
    api: &A,
    limits: &Arc<limits::Limits>,
) -> (Arc<batch::Batcher<A>>, Arc<crate::core::batch::BatchSpec>) {
    let calls = crate::delivery::send::Calls::new(
        api.clone(),
        d.caller.calls.ears.clone(),
        limits.clone(),
        d.pipeline
            .health(crate::core::destination::DestinationId::DEFAULT)
            .clone(),
    );
    let batcher = batch::Batcher::new(Arc::new(calls), d.pipeline.clone());
    let spec = d.build.batch.clone().expect("[api.batch] is on");
    (Arc::new(batcher), spec)
}

/// A batchable body holding only the event's id.
fn id_body(id: &str) -> Bytes {
    Bytes::from(format!(r#"{{"id":"{id}"}}"#))
}

/// A batch that waits for its rate slot (`api.rate_limit_per_sec`) while its
/// event's partition is handed over leaves without it: no request for a
/// partition whose revoke completed during the wait (issue 25's revoke
/// mid-batch; before, the batch was checked only when it was formed).
#[tokio::test]
async fn an_event_handed_over_while_its_batch_waits_for_a_rate_slot_is_not_sent() {
    let api = BatchApi::new(&[], &[], None);
    let d = batching("1ms", &api);
    // One request a second, no Redis: the second batch waits about a second.
    let rate = super::ratelimit::RateLimiter::new(1, 1, None, "test", "member");
    let limits = Arc::new(limits::Limits::new(
        8,
        8,
        false,
        Some(Arc::new(rate)),
        Arc::new(tokio::sync::Semaphore::new(8)),
        limits::LimitOn::Requests,
        "test",
    ));
    let (batcher, spec) = own_batcher(&d, &api, &limits);
    let out = Outgoing::default();
    let (stays, leaves) = two_partitions();
    let submit = |id: &str, inbox: &Arc<Inbox>| {
        let token = CompletionToken::new(inbox.clone(), 1, Src::Main, 0);
        let (waiter, rx) = batch::Waiter::channel(token.cancellation());
        let one = batch::Submission::one(id, id_body(id), None, false, waiter);
        batcher.submit(&out, &spec, batch::Entry::One(one));
        rx
    };
    let first = submit("e-0", &stays);
    let (answer, _) = tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .expect("answered")
        .expect("a reply");
    assert_eq!(answer.answer().as_ref().map(|a| a.status).ok(), Some(200));
    let _second = submit("e-1", &leaves);
    until("the second batch waits for its rate slot", || {
        limits.waits.rate.load(Ordering::SeqCst) == 2
    })
    .await;
    // Its partition is handed over: the event stops waiting.
    leaves.cancel();
    until("the second batch ended", || batcher.ended() == 2).await;
    assert_eq!(
        api.requests(),
        vec![vec!["e-0".to_string()]],
        "no request for the handed-over event"
    );
}

/// The one completion `inbox` receives next (deadline 30 s).
async fn next_completion(inbox: &Inbox) -> super::Report {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut got = inbox.take();
        if let Some(c) = got.pop() {
            assert!(got.is_empty(), "one completion: {got:?}");
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for a completion"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// First tries made without a task (`delivery::inline`) wait in a batch that
/// lingers 10 s. A handover leaves its partition's event out at once: its
/// token reports errored while the batch still forms (the partition's drain
/// waits only for requests on the wire), and no request carries it.
#[tokio::test]
async fn an_inline_first_try_handed_over_while_its_batch_forms_reports_errored_at_once() {
    let api = BatchApi::new(&[], &[], None);
    let d = batching("10s", &api);
    let (stays, leaves) = two_partitions();
    for (id, offset, inbox) in [("e-0", 0, &stays), ("e-1", 1, &leaves)] {
        let permit = d.permit().await.expect("a permit");
        d.start(job_in(id, offset, inbox), permit);
    }
    assert_eq!(d.inline_tries.load(Ordering::SeqCst), 2);
    until("both wait in the batch", || {
        d.caller.batcher.submitted() == 2
    })
    .await;
    leaves.cancel();
    assert_eq!(next_completion(&leaves).await.finished, None, "errored");
    assert!(stays.take().is_empty(), "e-0 still waits in its batch");
    // e-1 was taken after e-0: e-0 is in the forming batch now.
    stays.cancel();
    assert_eq!(next_completion(&stays).await.finished, None, "errored");
    assert_eq!(
        d.caller.batcher.ended(),
        0,
        "errored while its batch still formed"
    );
    assert!(api.requests().is_empty(), "{:?}", api.requests());
}

/// An inline first try whose batch waits for its request slot (one request
/// at a time, and the first still on the wire) is left out when its partition
/// is handed over during the wait: errored at once, before the slot frees,
/// and no request for it.
#[tokio::test]
async fn an_inline_first_try_handed_over_while_its_batch_waits_for_a_slot_is_not_sent() {
    use super::fakes::{FakeApi, Reply};
    let api = FakeApi::answering(&[Reply::Held(200), Reply::Status(200)]);
    let d = batching("1ms", &api);
    // The adaptive limit on requests, at most 1: one request slot.
    let limits = Arc::new(limits::Limits::new(
        1,
        8,
        true,
        None,
        Arc::new(tokio::sync::Semaphore::new(8)),
        limits::LimitOn::Requests,
        "test",
    ));
    let (batcher, spec) = own_batcher(&d, &api, &limits);
    let out = Outgoing::default();
    let submit = |id: &str, inbox: &Arc<Inbox>| {
        let token = CompletionToken::new(inbox.clone(), 1, Src::Main, 0);
        let cancel = token.cancellation();
        let waiter = batch::Waiter::new(cancel, move |(r, _): batch::Reply| {
            assert_eq!(r.answer().as_ref().map(|a| a.status).ok(), Some(200));
            token.finish(Finished::Delivered);
        });
        let one = batch::Submission::one(id, id_body(id), None, false, waiter);
        batcher.submit(&out, &spec, batch::Entry::One(one));
    };
    let (first, second) = two_partitions();
    submit("e-0", &first);
    until("e-0's request is on the wire", || api.calls() == 1).await;
    submit("e-1", &second);
    until("e-1's batch waits for its request slot", || {
        limits.waits.slot.load(Ordering::SeqCst) == 2
    })
    .await;
    second.cancel();
    assert_eq!(next_completion(&second).await.finished, None, "errored");
    assert!(first.take().is_empty(), "e-0's request still on the wire");
    api.release();
    assert_eq!(
        next_completion(&first).await.finished,
        Some(Finished::Delivered)
    );
    until("both batches ended", || batcher.ended() == 2).await;
    assert_eq!(
        api.called(),
        vec![crate::core::batch::idempotency_key(["e-0"])],
        "nothing sent for e-1 (e-0 alone, as a batch of one)"
    );
}
