//! The delivery shell without a broker: a [`Deliverer`] over a fake API (its
//! answers scripted, every request recorded) and a fake DLQ writer (its
//! answers scripted per topic, every record kept), like Quickwit's test
//! mailboxes: the test reads what each fake received. Real time, short
//! delays (the breaker reads `std::time::Instant`).

mod batch_answers;
mod batch_handover;
mod batched;
mod durable_writes;
mod fakes;
mod one_path;
mod ordered;

use super::peers::{BreakerAlarm, Refusal};
use super::token::{CompletionToken, Finished, Inbox, Wake};
use super::*;
use crate::core::classify::{FailureReason, TransportFailure};
use crate::core::partition::Report;
use crate::core::partition::Src;
use fakes::{FakeApi, FakeDlq, Reply, WriteReply};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use std::time::Instant;

struct Nobody;
impl Wake for Nobody {
    fn wake(&self) {}
}

/// What a test may change of the defaults below.
struct Knobs {
    retry_base: &'static str,
    retry_budget: &'static str,
    breaker_open: &'static str,
}

/// Short in-place retries (3 tries, 5–10 ms apart) and a breaker that opens
/// after 2 failures in a row for 100 ms.
const QUICK: Knobs = Knobs {
    retry_base: "5ms",
    retry_budget: "5s",
    breaker_open: "100ms",
};

/// A deliverer over the fakes, and how often its breaker alarm rang.
fn deliverer(
    k: Knobs,
    api: &FakeApi,
    dlq: &FakeDlq,
) -> (Arc<Deliverer<FakeApi, FakeDlq>>, Arc<AtomicUsize>) {
    deliverer_with(k, "", api, dlq)
}

/// Like [`deliverer`], with `extra` TOML (sections after `[degraded]`) over
/// any fake API.
fn deliverer_with<A: http::Api>(
    k: Knobs,
    extra: &str,
    api: &A,
    dlq: &FakeDlq,
) -> (Arc<Deliverer<A, FakeDlq>>, Arc<AtomicUsize>) {
    let toml = format!(
        "[api]\nmax_attempts = 3\nretry_base = \"{}\"\nretry_max_delay = \"{}\"\n\
         retry_budget = \"{}\"\n[degraded]\nbreaker_open = \"{}\"\n\
         breaker_consecutive_failures = 2\nflood_dlq_per_sec = 0\nflood_parked_per_sec = 0\n{extra}",
        k.retry_base, k.retry_base, k.retry_budget, k.breaker_open
    );
    let config = Config::from_toml(&toml).expect("the test's config parses");
    let status = Arc::new(crate::status_page::StatusBoard::new(
        crate::status_page::BoardInfo::new(&config, "test".into()),
        crate::runtime::now_ms(),
    ));
    let pipeline = Arc::new(Pipeline::new(config, status).expect("valid"));
    let rang = Arc::new(AtomicUsize::new(0));
    let r = rang.clone();
    let alarm = BreakerAlarm::new(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let d = Deliverer::with_parts(
        pipeline,
        api.clone(),
        dlq.clone(),
        alarm,
        None,
        None,
        crate::core::destination::DestinationId::DEFAULT,
    )
    .expect("a deliverer over fakes");
    (Arc::new(d), rang)
}

/// One event to deliver, its token and the inbox its outcome arrives in.
fn job() -> (Job, Arc<Inbox>) {
    let inbox = Arc::new(Inbox::new(Nobody));
    (job_in("e-1", 7, &inbox), inbox)
}

/// Event `id` at `offset` of partition 2, its outcome to `inbox`.
fn job_in(id: &str, offset: i64, inbox: &Arc<Inbox>) -> Job {
    Job {
        item: Arc::new(item_in(id, offset)),
        token: CompletionToken::new(inbox.clone(), 1, Src::Main, offset),
    }
}

/// The consumed record of event `id` at `offset` of partition 2, to deliver.
fn item_in(id: &str, offset: i64) -> Item {
    let raw = Bytes::from(format!(
        r#"{{"specversion":"1.0","id":"{id}","source":"s","type":"t"}}"#
    ));
    let ev = Event {
        id: id.into(),
        source: "s".into(),
        event_type: "t".into(),
        subject: None,
        time: None,
        entity_version: None,
        raw: raw.clone(),
    };
    Item {
        topic: "events".into(),
        partition: 2,
        offset,
        timestamp_ms: None,
        keys: super::Keys {
            record: Some(b"k".to_vec()),
            entity: None,
        },
        payload: Some(raw),
        headers: None,
        target: crate::core::mapping::Target::DEFAULT,
        body_type: BodyType::CloudEventsJson,
        work: Work::Deliver(ev),
    }
}

/// Runs `job` to its end (a generous deadline: a hang fails the test) and
/// returns the one completion it left.
async fn finish(d: Arc<Deliverer<FakeApi, FakeDlq>>, job: Job, inbox: &Inbox) -> Report {
    finish_on(d, job, inbox).await
}

/// [`finish`] over any fake API.
async fn finish_on<A: http::Api>(d: Arc<Deliverer<A, FakeDlq>>, job: Job, inbox: &Inbox) -> Report {
    tokio::time::timeout(Duration::from_secs(30), d.run(job, None))
        .await
        .expect("the delivery ends");
    let mut done = inbox.take();
    assert_eq!(done.len(), 1, "one completion per job");
    done.remove(0)
}

/// Polls `cond` until it holds (deadline 30 s).
/// One event through a deliverer with the quick policy, to its completion.
async fn one_event(api: &FakeApi, dlq: &FakeDlq) -> Report {
    let (d, _) = deliverer(QUICK, api, dlq);
    let (job, inbox) = job();
    finish(d, job, &inbox).await
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn transient_answers_are_retried_in_place_then_delivered() {
    let api = FakeApi::answering(&[
        Reply::Status(503),
        Reply::Transport(TransportFailure::Timeout),
        Reply::Status(200),
    ]);
    let dlq = FakeDlq::default();
    let done = one_event(&api, &dlq).await;
    assert_eq!(done.finished, Some(Finished::Delivered));
    assert_eq!(api.calls(), 3);
    assert!(dlq.asked().is_empty(), "nothing written: {:?}", dlq.asked());
}

/// One permit (`pipeline.concurrency = 1`): while e-1 waits out its back-off
/// after a 503, e-2 takes the permit and is delivered; e-1 then takes it
/// again for its next tries. (Before: e-1 held the permit through its
/// back-offs, e-2 waited for all of them — calls e-1, e-1, e-2, e-2 — and an
/// event the API kept refusing held its permits for its whole retry budget.)
#[tokio::test]
async fn a_back_off_gives_the_permit_back_for_the_next_event() {
    let api = FakeApi::answering(&[
        Reply::Status(503),
        Reply::Status(200),
        Reply::Status(503),
        Reply::Status(200),
    ]);
    let dlq = FakeDlq::default();
    let slow = Knobs {
        retry_base: "200ms",
        ..QUICK
    };
    let (d, _) = deliverer_with(slow, "[pipeline]\nconcurrency = 1\n", &api, &dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    let first = tokio::spawn(d.clone().run(job_in("e-1", 1, &inbox), None));
    until("e-1 made its first call", || api.calls() == 1).await;
    let second = tokio::spawn(d.clone().run(job_in("e-2", 2, &inbox), None));
    for t in [first, second] {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("ends")
            .expect("no panic");
    }
    assert_eq!(api.called(), ["e-1", "e-2", "e-1", "e-1"]);
    let done = inbox.take();
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|c| c.finished == Some(Finished::Delivered)));
}

#[tokio::test]
async fn transient_until_the_tries_are_used_up_goes_to_the_dlq() {
    let api = FakeApi::answering(&[Reply::Status(503)]);
    let dlq = FakeDlq::default();
    let done = one_event(&api, &dlq).await;
    assert_eq!(
        done.finished,
        Some(Finished::DeadLettered {
            reason: "http_503".into(),
            at: 1
        })
    );
    assert_eq!(api.calls(), 3, "api.max_attempts = 3");
    let written = dlq.written("events.dlq");
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].partition, Some(2), "DLQ partition = origin's");
    let e = &written[0].envelope;
    assert_eq!(e.event_id.as_deref(), Some("e-1"));
    assert!(e.last_error.message.contains("after 3 tries"), "{e:?}");
}

#[tokio::test]
async fn a_permanent_answer_parks_at_once() {
    let api = FakeApi::answering(&[Reply::Status(422)]);
    let dlq = FakeDlq::default();
    let done = one_event(&api, &dlq).await;
    assert_eq!(
        done.finished,
        Some(Finished::Parked {
            reason: "http_422".into()
        })
    );
    assert_eq!(api.calls(), 1);
    assert_eq!(dlq.written("events.parking").len(), 1);
    assert!(dlq.written("events.dlq").is_empty());
}

/// 401 four times, then 200: the breaker opens (the alarm rings) and the
/// event waits at its gate through the outage; none of the five calls uses
/// up one of its 3 tries, and nothing is written anywhere.
#[tokio::test]
async fn a_systemic_outage_waits_at_the_gate_without_spending_tries() {
    let api = FakeApi::answering(&[
        Reply::Status(401),
        Reply::Status(401),
        Reply::Status(401),
        Reply::Status(401),
        Reply::Status(200),
    ]);
    let dlq = FakeDlq::default();
    let (d, rang) = deliverer(QUICK, &api, &dlq);
    let (job, inbox) = job();
    let done = finish(d, job, &inbox).await;
    assert_eq!(done.finished, Some(Finished::Delivered));
    assert_eq!(api.calls(), 5, "more calls than api.max_attempts");
    assert!(rang.load(Ordering::SeqCst) >= 1, "the breaker opened");
    assert!(dlq.asked().is_empty(), "nothing written: {:?}", dlq.asked());
}

/// Handed over while it waits at the breaker's gate (its 401s made the
/// breaker suspect the API; the suspect event waits for the probes): the wait
/// ends, no further call is made and the job ends without an outcome.
#[tokio::test]
async fn a_handover_ends_the_wait_at_the_gate() {
    let api = FakeApi::answering(&[Reply::Status(401)]);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer(
        Knobs {
            breaker_open: "60s",
            ..QUICK
        },
        &api,
        &dlq,
    );
    let (job, inbox) = job();
    let run = tokio::spawn(d.clone().run(job, None));
    until("the event at the gate", || {
        d.pipeline
            .health(crate::core::destination::DestinationId::DEFAULT)
            .waiting_at_gate()
            == 1
    })
    .await;
    let calls = api.calls();
    inbox.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the delivery ends")
        .expect("no panic");
    assert_eq!(api.calls(), calls, "no call after the handover");
    let done = inbox.take();
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0].finished, None,
        "errored: the next owner delivers it"
    );
    assert!(dlq.asked().is_empty());
}

/// Handed over while its call is on the wire, and the API answers 401: the
/// breaker still hears the answer (it admitted the call; a half-open probe
/// whose answer it never hears keeps the probe slot forever, and every later
/// call of the instance waits at the gate — seen as a stalled
/// `crash_cost::a_revoke_cancels_the_deliveries_waiting_at_the_breaker`).
/// No outcome: the next owner delivers the event.
#[tokio::test]
async fn a_systemic_answer_after_the_handover_still_reaches_the_breaker() {
    let api = FakeApi::answering(&[Reply::Held(401)]);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer(QUICK, &api, &dlq);
    let (job, inbox) = job();
    let run = tokio::spawn(d.clone().run(job, None));
    until("the call on the wire", || api.calls() == 1).await;
    inbox.cancel();
    api.release();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the delivery ends")
        .expect("no panic");
    assert_eq!(api.calls(), 1, "no call after the handover");
    let done = inbox.take();
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0].finished, None,
        "errored: the next owner delivers it"
    );
    assert_ne!(
        d.pipeline
            .health(crate::core::destination::DestinationId::DEFAULT)
            .breaker_state(Instant::now()),
        crate::core::breaker::BreakerStateKind::Closed,
        "the 401 made the breaker suspect the API"
    );
}

/// Handed over during an in-place back-off: no further try, no outcome.
#[tokio::test]
async fn a_handover_ends_the_back_off_between_tries() {
    let api = FakeApi::answering(&[Reply::Status(503)]);
    let dlq = FakeDlq::default();
    let slow = Knobs {
        retry_base: "60s",
        retry_budget: "600s",
        ..QUICK
    };
    let (d, _) = deliverer(slow, &api, &dlq);
    let (job, inbox) = job();
    let run = tokio::spawn(d.run(job, None));
    until("the first call", || api.calls() == 1).await;
    inbox.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the back-off is cut short")
        .expect("no panic");
    assert_eq!(api.calls(), 1);
    assert_eq!(inbox.take()[0].finished, None);
    assert!(dlq.asked().is_empty());
}

/// An event's delivery future is allocated and moved once per event: the
/// waits only some configurations have (the Redis rate limiter's above all,
/// ~7 KB) are boxed where they happen instead of sizing every delivery (8.4 KB
/// before, 1.2 KB after, in a debug build).
#[tokio::test]
async fn an_events_delivery_future_stays_small() {
    let api = FakeApi::default();
    let dlq = FakeDlq::default();
    let (d, _) = deliverer(QUICK, &api, &dlq);
    let (job, _inbox) = job();
    let item = job.item.clone();
    let Work::Deliver(ev) = &item.work else {
        panic!("job() makes a delivery")
    };
    let permit = d.permit().await.expect("a permit");
    let deliver = d.deliver(&item, ev, permit, &job.token);
    let size = std::mem::size_of_val(&deliver);
    assert!(
        size <= 3 * 1024,
        "an event's delivery future is {size} bytes"
    );
}
