//! Ordered runs (`ordered = true`, `delivery::ordered`) over the fake batch
//! API: one key's events sent together in offset order, and from the first
//! one tried again, the rest sent again behind it.

use super::batched::{BatchApi, BATCH};
use super::*;

/// `n` events `e-0..` of one key, delivered as one run; their outcomes by
/// offset.
async fn run(api: &BatchApi, dlq: &FakeDlq, n: usize) -> Vec<Option<Finished>> {
    run_on(&ordered(api, dlq), n).await
}

/// A deliverer over the fakes whose route's batches are ordered.
fn ordered(api: &BatchApi, dlq: &FakeDlq) -> Arc<Deliverer<BatchApi, FakeDlq>> {
    let extra = format!("{BATCH}ordered = true\n");
    deliverer_with(QUICK, &extra, api, dlq).0
}

/// `n` events `e-0..` of one key, delivered through `d` as one run; their
/// outcomes by offset.
async fn run_on(d: &Arc<Deliverer<BatchApi, FakeDlq>>, n: usize) -> Vec<Option<Finished>> {
    let inbox = Arc::new(Inbox::new(Nobody));
    let jobs: Vec<Job> = (0..n)
        .map(|i| job_in(&format!("e-{i}"), i as i64, &inbox))
        .collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(n));
    let permits = (0..n)
        .map(|_| sem.clone().try_acquire_owned().expect("a permit"))
        .collect();
    tokio::time::timeout(
        Duration::from_secs(30),
        d.clone().run_ordered(jobs, permits),
    )
    .await
    .expect("the run ends");
    let mut done = inbox.take();
    assert_eq!(done.len(), n, "one completion per event");
    done.sort_by_key(|c| c.offset);
    done.into_iter().map(|c| c.finished).collect()
}

/// The ids in the order of their last acceptance: what an API that applies
/// each accepted item (last write wins) ends with.
fn last_writes(accepted: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in accepted {
        out.retain(|x| x != id);
        out.push(id.clone());
    }
    out
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("e-{i}")).collect()
}

#[tokio::test]
async fn a_run_goes_out_in_one_batch_in_offset_order() {
    let api = BatchApi::new(&[], &[], None);
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 6).await;
    assert!(
        done.iter().all(|o| o == &Some(Finished::Delivered)),
        "{done:?}"
    );
    assert_eq!(api.requests(), vec![ids(0..6)]);
}

#[tokio::test]
async fn from_the_first_event_tried_again_the_rest_of_the_run_is_sent_again() {
    // e-2 is answered 503 once; e-3.. were accepted in the same answer.
    let api = BatchApi::new(&[("e-2", 503, 1)], &[], None);
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 6).await;
    assert!(
        done.iter().all(|o| o == &Some(Finished::Delivered)),
        "{done:?}"
    );
    assert_eq!(api.requests(), vec![ids(0..6), ids(2..6)]);
    assert_eq!(last_writes(&api.accepted()), ids(0..6));
    assert!(dlq.asked().is_empty());
}

#[tokio::test]
async fn an_event_refused_for_good_is_parked_alone_and_the_run_goes_on() {
    let api = BatchApi::new(&[("e-2", 400, u32::MAX)], &[], None);
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 6).await;
    for (i, o) in done.iter().enumerate() {
        let want = if i == 2 {
            Finished::Parked {
                reason: "http_400".into(),
            }
        } else {
            Finished::Delivered
        };
        assert_eq!(o.as_ref(), Some(&want), "e-{i}");
    }
    // Nothing behind it is sent again: it is not tried again.
    assert_eq!(api.requests(), vec![ids(0..6)]);
    assert_eq!(dlq.written("events.parking").len(), 1);
}

#[tokio::test]
async fn an_event_out_of_tries_is_dead_lettered_and_the_rest_finished_by_the_same_answer() {
    // e-1 fails every try (3): dead-lettered; e-2.. go again behind it each
    // time.
    let api = BatchApi::new(&[("e-1", 503, u32::MAX)], &[], None);
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 4).await;
    assert_eq!(
        done[1],
        Some(Finished::DeadLettered {
            reason: "http_503".into(),
            at: 1
        })
    );
    for i in [0, 2, 3] {
        assert_eq!(done[i], Some(Finished::Delivered), "e-{i}");
    }
    // Its last answer finishes the rest too: no request after it.
    assert_eq!(api.requests(), vec![ids(0..4), ids(1..4), ids(1..4)]);
    assert_eq!(last_writes(&api.accepted()), ["e-0", "e-2", "e-3"]);
    assert_eq!(dlq.written("events.dlq").len(), 1);
}

#[tokio::test]
async fn a_run_refused_as_a_whole_is_bisected_half_after_half() {
    // e-4 poisons any batch holding it: the halves go one after the other,
    // so what the API accepted stays in offset order.
    let api = BatchApi::new(&[("e-4", 400, u32::MAX)], &["e-4"], None);
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 8).await;
    for (i, o) in done.iter().enumerate() {
        assert_eq!(
            matches!(o, Some(Finished::Parked { .. })),
            i == 4,
            "e-{i}: {o:?}"
        );
    }
    let mut want = ids(0..8);
    want.retain(|id| id != "e-4");
    assert_eq!(api.accepted(), want, "accepted once each, in order");
    let extra = api.requests().len() - 1;
    assert!(extra <= crate::core::batch::split_bound(8), "{extra}");
    // The fake takes requests in the order they are sent, not answered: only
    // one at a time says the second half waited for the first's answer.
    assert_eq!(api.max_in_flight(), 1, "halves one after the other");
}

#[tokio::test]
async fn the_rest_of_a_run_follows_an_event_dead_lettered_into_the_dlq() {
    // An API that keeps order fails a key's later items with an earlier
    // one: e-1 fails every try (3), e-2 and e-3 fail with it. Once e-1 is in
    // the DLQ they follow it there (seen failing: they were sent again and
    // delivered while e-1 sat in the DLQ, a stale write once it came back).
    let api = BatchApi::new(
        &[("e-1", 503, 3), ("e-2", 503, 3), ("e-3", 503, 3)],
        &[],
        None,
    );
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 4).await;
    assert_eq!(done[0], Some(Finished::Delivered));
    assert_eq!(
        done[1],
        Some(Finished::DeadLettered {
            reason: "http_503".into(),
            at: 1
        })
    );
    for i in [2, 3] {
        assert_eq!(
            done[i],
            Some(Finished::DeadLettered {
                reason: "key_in_dlq".into(),
                at: i as i64,
            }),
            "e-{i}: written after e-1, in order"
        );
    }
    assert_eq!(api.requests(), vec![ids(0..4), ids(1..4), ids(1..4)]);
    let written = dlq.written("events.dlq");
    assert_eq!(
        written.len(),
        3,
        "in order: e-1, then e-2 and e-3 behind it"
    );
}

/// A run of 4 through `api` whose batch is admitted half-open: every
/// event delivered in the end, the first request the run's first event
/// alone (the probe).
async fn run_through_a_probe(api: &BatchApi) {
    let dlq = FakeDlq::default();
    let d = ordered(api, &dlq);
    let health = d
        .pipeline
        .health(crate::core::destination::DestinationId::DEFAULT);
    // Two failures in a row open the breaker for 100 ms (`QUICK`): the
    // run's batch (200 ms linger) is admitted half-open.
    health.record(crate::api_health::CallOutcome::Failed);
    health.record(crate::api_health::CallOutcome::Failed);
    assert!(health.breaker_is_open(Instant::now()), "the breaker opened");
    let done = run_on(&d, 4).await;
    assert!(
        done.iter().all(|o| o == &Some(Finished::Delivered)),
        "{done:?}"
    );
    assert_eq!(
        api.requests().first(),
        Some(&ids(0..1)),
        "the probe is the run's first event"
    );
}

/// A run whose batch is admitted into a half-open probe slot sends one
/// event as the probe (`breaker_half_open_probes` = 3, the default, leaves
/// more slots free); the rest of the run waits for its answer and goes after
/// it, never beside it (issue 54 item 1: the rest was batched again at once,
/// took a second probe slot, and e-1 went out while e-0 was on the wire).
#[tokio::test]
async fn a_run_admitted_as_a_probe_never_has_two_members_on_the_wire() {
    let api = BatchApi::new(&[], &[], None);
    // Each answer takes longer than the batch's linger (200 ms).
    api.slow(Duration::from_millis(300));
    run_through_a_probe(&api).await;
    assert_eq!(
        api.max_in_flight(),
        1,
        "one request of the run at a time: {:?}",
        api.requests()
    );
    assert_eq!(api.accepted(), ids(0..4), "accepted once each, in order");
}

/// A run's half-open probe that fails: the rest of the run is not sent
/// after it (seen failing: e-1.. were sent after e-0's 503 and accepted
/// before e-0 was, a stale write at an API that applies writes as they
/// come); the run goes again from e-0, in order.
#[tokio::test]
async fn a_run_behind_a_probe_that_failed_is_not_sent_before_it() {
    let api = BatchApi::new(&[("e-0", 503, 1)], &[], None);
    run_through_a_probe(&api).await;
    assert_eq!(
        api.accepted(),
        ids(0..4),
        "accepted once each, in order: {:?}",
        api.requests()
    );
}

/// An ordered run refused as a whole with a split status (413) is sent in
/// halves, one after the other; a first half whose event failed (503)
/// keeps the second from going (sent, its events would be accepted before
/// the failed one: a stale write at an API that applies writes as they
/// come). Answered "not sent", the second half goes again behind it.
#[tokio::test]
async fn a_split_runs_second_half_waits_for_its_first_halfs_failures() {
    let api = BatchApi::new(&[("e-0", 503, 1)], &[], Some(2));
    let dlq = FakeDlq::default();
    let done = run(&api, &dlq, 4).await;
    assert!(
        done.iter().all(|o| o == &Some(Finished::Delivered)),
        "{done:?}"
    );
    let accepted = api.accepted();
    let first_e0 = accepted.iter().position(|id| id == "e-0");
    let first_later = accepted.iter().position(|id| id == "e-2" || id == "e-3");
    assert!(
        first_e0 < first_later,
        "e-2 or e-3 accepted before e-0: {:?}",
        api.requests()
    );
    assert_eq!(last_writes(&accepted), ids(0..4));
}

/// An event's result read as the policy reads it decides whether the next
/// part of its run goes: with 409 made transient (`[api.status]`), e-1's
/// first answer does not accept it, so the run's second half (the batch of
/// 8 refused 413, split in halves) is not sent before e-1 is accepted.
/// Seen failing before "accepted" took the answer's reading: a 409 counted
/// as accepted whatever the policy, and e-4..e-7 reached the API before e-1.
#[tokio::test]
async fn the_next_half_waits_for_an_event_the_policy_did_not_accept() {
    let api = BatchApi::new(&[("e-1", 409, 1)], &[], Some(4));
    let dlq = FakeDlq::default();
    let extra = format!("{BATCH}ordered = true\n[api.status]\n\"409\" = \"transient\"\n");
    let d = deliverer_with(QUICK, &extra, &api, &dlq).0;
    let done = run_on(&d, 8).await;
    assert!(
        done.iter().all(|o| *o == Some(Finished::Delivered)),
        "{done:?}"
    );
    let accepted = api.accepted();
    let first = |id: &str| accepted.iter().position(|a| a == id);
    assert!(
        first("e-1") < first("e-4"),
        "e-4 reached the API before e-1 was accepted: {accepted:?}"
    );
    assert_eq!(last_writes(&accepted), ids(0..8));
}
