//! The durable writes of the delivery shell: a DLQ that refuses an envelope
//! for good, one that does not acknowledge it yet, and a handover while a
//! write is being retried.

use super::*;

/// A DLQ that refuses the envelope for good: the event is parked with the
/// refusal as its reason, never left waiting.
#[tokio::test]
async fn a_dlq_that_refuses_for_good_parks_the_event() {
    let api = FakeApi::answering(&[Reply::Status(503)]);
    let dlq = FakeDlq::answering("events.dlq", &[WriteReply::Refuse(Refusal::TooLarge)]);
    let done = one_event(&api, &dlq).await;
    let reason = FailureReason::DlqRefused(Refusal::TooLarge)
        .as_str()
        .to_string();
    assert_eq!(done.finished, Some(Finished::Parked { reason }));
    assert!(dlq.written("events.dlq").is_empty());
    let parked = dlq.written("events.parking");
    assert_eq!(parked.len(), 1);
    assert!(parked[0]
        .envelope
        .last_error
        .message
        .contains("DLQ write refused"));
}

/// A write the broker does not acknowledge is tried again until it is; the
/// outcome waits for it.
#[tokio::test]
async fn an_unacknowledged_dlq_write_is_retried_until_acknowledged() {
    let api = FakeApi::answering(&[Reply::Status(503)]);
    let script = [WriteReply::NotNow, WriteReply::NotNow, WriteReply::Ack];
    let dlq = FakeDlq::answering("events.dlq", &script);
    let done = one_event(&api, &dlq).await;
    assert_eq!(
        done.finished,
        Some(Finished::DeadLettered {
            reason: "http_503".into(),
            at: 3
        })
    );
    let asked = dlq.asked();
    assert_eq!(asked.len(), 3, "two refusals to ack, then the ack");
    assert_eq!(dlq.written("events.dlq").len(), 1);
}

/// Handed over while its DLQ write is being retried: the write is abandoned
/// (the next owner makes it) and the job ends without an outcome.
#[tokio::test]
async fn a_handover_abandons_a_dlq_write_being_retried() {
    let api = FakeApi::answering(&[Reply::Status(503)]);
    let dlq = FakeDlq::answering("events.dlq", &[WriteReply::NotNow]);
    let (d, _) = deliverer(QUICK, &api, &dlq);
    let (job, inbox) = job();
    let run = tokio::spawn(d.run(job, None));
    until("a refused write", || !dlq.asked().is_empty()).await;
    inbox.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the write is abandoned")
        .expect("no panic");
    assert_eq!(inbox.take()[0].finished, None);
    assert!(dlq.written("events.dlq").is_empty());
    assert!(dlq.written("events.parking").is_empty());
    assert!(dlq
        .asked()
        .iter()
        .all(|(r, ok)| r.topic == "events.dlq" && !ok));
}
