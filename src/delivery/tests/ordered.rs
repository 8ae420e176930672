//! Ordered runs (`ordered = true`, `delivery::ordered`) over the fake batch
//! API: one key's events sent together in offset order, and from the first
//! one tried again, the rest sent again behind it.

use super::batched::{BatchApi, BATCH};
use super::*;

/// `n` events `e-0..` of one key, delivered as one run; their outcomes by
/// offset.
async fn run(api: &BatchApi, dlq: &FakeDlq, n: usize) -> Vec<Option<Finished>> {
    let extra = format!("{BATCH}ordered = true\n");
    let (d, _) = deliverer_with(QUICK, &extra, api, dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    let jobs: Vec<Job> = (0..n)
        .map(|i| job_in(&format!("e-{i}"), i as i64, &inbox))
        .collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(n));
    let permits = (0..n)
        .map(|_| sem.clone().try_acquire_owned().expect("a permit"))
        .collect();
    tokio::time::timeout(Duration::from_secs(30), d.run_ordered(jobs, permits))
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
            reason: "http_503".into()
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
