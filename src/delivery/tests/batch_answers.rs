//! What becomes of batch answers over the fake batch API
//! ([`super::batched::BatchApi`]): an event left out of an answer that
//! accepted others is sent again at once; an answer that accepted nothing
//! spends the try; a body no batch holds is parked on a route with per-item
//! results; events sharing an id go in parts by occurrence rank.

use super::batched::{run_all, BatchApi, Start, BATCH, STARTS};
use super::*;

/// An event left out of an answer that accepted the others of its batch (an
/// API that applies part of each batch) is sent again at once, in the next
/// batch, without spending a try: with an in-place budget too short for a
/// second try, it is delivered (issue 54: before, the answer spent its try
/// and it went to the DLQ).
#[tokio::test]
async fn an_event_left_out_of_an_answer_that_accepted_others_keeps_its_try() {
    for how in STARTS {
        let api = BatchApi::new(&[], &[], None);
        api.omitting("e-3", false);
        let dlq = FakeDlq::default();
        let one_try = Knobs {
            retry_budget: "1ms",
            ..QUICK
        };
        let (d, _) = deliverer_with(one_try, BATCH, &api, &dlq);
        let done = run_all(&d, 10, how).await;
        assert!(
            done.values().all(|o| o == &Some(Finished::Delivered)),
            "{how:?}: {done:?}"
        );
        assert!(dlq.asked().is_empty(), "{how:?}: nothing dead-lettered");
        let reqs = api.requests();
        assert_eq!(reqs.len(), 2, "{how:?}: {reqs:?}");
        assert_eq!(reqs[1], vec!["e-3".to_string()], "{how:?}");
    }
}

/// An answer that accepted nothing spends the try at once: an event alone
/// that the API never lists goes to the DLQ after its 3 tries, one request
/// each.
#[tokio::test]
async fn an_event_never_listed_alone_spends_its_tries() {
    let api = BatchApi::new(&[], &[], None);
    api.omitting("e-0", true);
    let dlq = FakeDlq::default();
    let (d, _) = deliverer_with(QUICK, &BATCH.replace("200ms", "20ms"), &api, &dlq);
    let done = run_all(&d, 1, Start::Task).await;
    assert_eq!(
        done["e-0"],
        Some(Finished::DeadLettered {
            reason: "no_result_not_listed".into(),
            at: 1
        })
    );
    assert_eq!(api.requests().len(), 3, "{:?}", api.requests());
}

/// On a route with per-item results only a result proves an event done,
/// and a batch holds JSON only: an event whose body is not JSON (a route's
/// `body = "data"` with `data_base64`) is parked `body_unbuildable`, never
/// sent as a request of its own whose 2xx would count (issue 54 item 4:
/// before, it was sent alone and delivered by a bare 200).
#[tokio::test]
async fn a_body_that_is_not_json_is_parked_on_a_route_with_results() {
    let api = BatchApi::new(&[], &[], None);
    let dlq = FakeDlq::default();
    let route =
        "[[api.routes]]\ntype = \"t\"\nurl = \"http://127.0.0.1:9/batch\"\nbody = \"data\"\n";
    let (d, _) = deliverer_with(QUICK, &format!("{BATCH}\n{route}"), &api, &dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    let raw =
        r#"{"specversion":"1.0","id":"e-0","source":"s","type":"t","data_base64":"aGVsbG8="}"#;
    let mut item = item_in("e-0", 0);
    item.payload = Some(Bytes::from(raw));
    // Its route, as the decoder chooses it (`core::mapping::Routes::choose`).
    item.target.route = Some(crate::core::mapping::RouteIndex(0));
    if let Work::Deliver(ev) = &mut item.work {
        ev.raw = Bytes::from(raw);
    }
    let job = Job {
        item: Arc::new(item),
        token: CompletionToken::new(inbox.clone(), 1, Src::Main, 0),
    };
    let done = finish_on(d, job, &inbox).await;
    assert_eq!(
        done.finished,
        Some(Finished::Parked {
            reason: "body_unbuildable".into()
        })
    );
    assert!(api.requests().is_empty(), "{:?}", api.requests());
    let parked = dlq.written("events.parking");
    assert_eq!(parked.len(), 1);
    let msg = &parked[0].envelope.last_error.message;
    assert!(msg.contains("not JSON"), "{msg}");
}

/// With results matched by id, events sharing an id never share a request:
/// they go in parts by occurrence rank, sent at once — one repeated id no
/// longer cuts a batch into sequential pieces at each repeat (issue 54 item
/// 16: `x` thrice among six events made three requests one after the
/// other, `[x, e-1] [x, e-3] [x, e-5]`).
#[tokio::test]
async fn a_repeated_id_makes_parts_by_rank_sent_at_once() {
    let api = BatchApi::new(&[], &[], None);
    api.slow(Duration::from_millis(50));
    let dlq = FakeDlq::default();
    let (d, _) = deliverer_with(QUICK, BATCH, &api, &dlq);
    let inbox = Arc::new(Inbox::new(Nobody));
    let ids = ["x", "e-1", "x", "e-3", "x", "e-5"];
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| tokio::spawn(d.clone().run(job_in(id, i as i64, &inbox), None)))
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("each delivery ends")
            .expect("no panic");
    }
    let done = inbox.take();
    assert_eq!(done.len(), ids.len());
    assert!(
        done.iter().all(|c| c.finished == Some(Finished::Delivered)),
        "{done:?}"
    );
    let mut reqs = api.requests();
    reqs.sort_by_key(|r| std::cmp::Reverse(r.len()));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        reqs,
        vec![s(&["x", "e-1", "e-3", "e-5"]), s(&["x"]), s(&["x"])],
        "one part per rank"
    );
    assert_eq!(api.max_in_flight(), 3, "the parts at once");
}
