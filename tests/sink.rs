//! The API stand-in over real HTTP: what it answers and what it books.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use courier_standins::sink::{Audit, Behaviour, FailRule, SinkHandle};
use reqwest::StatusCode;
use serde_json::json;

async fn start(behaviour: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().unwrap(), behaviour)
        .await
        .expect("sink starts")
}

fn event(id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "specversion": "1.0",
        "id": id,
        "source": "test",
        "type": "order.created",
        "data": {"n": 1},
    }))
    .unwrap()
}

/// Posts a well-formed delivery of `id` (key = id).
async fn deliver(client: &reqwest::Client, sink: &SinkHandle, id: &str) -> reqwest::Response {
    post(client, sink, Some(id), event(id)).await
}

async fn post(
    client: &reqwest::Client,
    sink: &SinkHandle,
    key: Option<&str>,
    body: Vec<u8>,
) -> reqwest::Response {
    let mut request = client
        .post(sink.url())
        .header("content-type", "application/cloudevents+json")
        .body(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.expect("request reaches the sink")
}

fn base(sink: &SinkHandle) -> String {
    format!("http://{}", sink.addr())
}

/// `POST /reset` with `query` (`""` or `"?expect=N"`): its status.
async fn reset(client: &reqwest::Client, sink: &SinkHandle, query: &str) -> StatusCode {
    client
        .post(format!("{}/reset{query}", base(sink)))
        .send()
        .await
        .unwrap()
        .status()
}

async fn http_audit(client: &reqwest::Client, sink: &SinkHandle) -> Audit {
    let response = client
        .get(format!("{}/audit", base(sink)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn successful_deliveries_are_booked_once_each_in_order() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let ids: Vec<String> = (0..5).map(|i| format!("evt-{i}")).collect();
    for id in &ids {
        assert_eq!(deliver(&client, &sink, id).await.status(), StatusCode::OK);
    }

    let audit = sink.audit();
    assert_eq!(audit.order, ids);
    for id in &ids {
        assert_eq!(audit.delivered[id], 1);
        assert_eq!(audit.attempts[id], 1);
    }
    assert_eq!(audit.delivered.len(), 5);
    assert_eq!(audit.requests_total, 5);
    assert_eq!(audit.failures_total, 0);
    assert_eq!(audit.bad_requests, 0);
    assert_eq!(audit.duplicates(), 0);
    assert_eq!(sink.delivered_count(), 5);
    assert_eq!(audit.per_second.iter().sum::<u64>(), 5);
    assert!(audit.peak_rps() >= 1);
    assert!(audit.max_concurrent >= 1);
    assert!(audit.bodies_sample.is_empty(), "bodies are off by default");

    // The HTTP view is the same snapshot.
    assert_eq!(http_audit(&client, &sink).await, sink.audit());
}

#[tokio::test]
async fn fail_rule_with_times_fails_the_first_attempts_then_succeeds() {
    let mut behaviour = Behaviour::default();
    behaviour.fail_ids.insert(
        "flaky".into(),
        FailRule {
            status: 503,
            times: Some(2),
            retry_after_s: Some(7),
        },
    );
    let sink = start(behaviour).await;
    let client = reqwest::Client::new();

    for _ in 0..2 {
        let response = deliver(&client, &sink, "flaky").await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "7");
    }
    let response = deliver(&client, &sink, "flaky").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("retry-after").is_none());
    // Other ids are not affected by the rule.
    assert_eq!(
        deliver(&client, &sink, "steady").await.status(),
        StatusCode::OK
    );

    let audit = sink.audit();
    assert_eq!(audit.attempts["flaky"], 3);
    assert_eq!(audit.delivered["flaky"], 1);
    assert_eq!(audit.failures_total, 2);
    assert_eq!(audit.requests_total, 4);
    assert_eq!(audit.order, ["flaky", "steady"]);
}

#[tokio::test]
async fn fail_rule_without_times_always_fails() {
    let mut behaviour = Behaviour::default();
    behaviour.fail_ids.insert(
        "poison".into(),
        FailRule {
            status: 422,
            ..FailRule::default()
        },
    );
    let sink = start(behaviour).await;
    let client = reqwest::Client::new();
    for _ in 0..4 {
        let response = deliver(&client, &sink, "poison").await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(response.headers().get("retry-after").is_none());
    }
    let audit = sink.audit();
    assert_eq!(audit.attempts["poison"], 4);
    assert!(audit.delivered.is_empty());
    assert_eq!(sink.delivered_count(), 0);
}

#[tokio::test]
async fn down_status_answers_everyone_and_delivers_nothing() {
    let sink = start(Behaviour {
        down_status: Some(502),
        ..Behaviour::default()
    })
    .await;
    let client = reqwest::Client::new();
    for id in ["a", "b", "c"] {
        assert_eq!(
            deliver(&client, &sink, id).await.status(),
            StatusCode::BAD_GATEWAY
        );
    }
    let audit = sink.audit();
    assert!(audit.delivered.is_empty());
    assert!(audit.order.is_empty());
    assert_eq!(sink.delivered_count(), 0);
    assert_eq!(audit.attempts.len(), 3);
    assert_eq!(audit.failures_total, 3);

    // The API comes back.
    sink.update_behaviour(|b| b.down_status = None);
    assert_eq!(deliver(&client, &sink, "a").await.status(), StatusCode::OK);
    let audit = sink.audit();
    assert_eq!(audit.attempts["a"], 2);
    assert_eq!(audit.delivered["a"], 1);
    assert_eq!(sink.delivered_count(), 1);
}

#[tokio::test]
async fn fail_rate_one_fails_with_fail_status() {
    let sink = start(Behaviour {
        fail_rate: 1.0,
        fail_status: 429,
        ..Behaviour::default()
    })
    .await;
    let client = reqwest::Client::new();
    assert_eq!(
        deliver(&client, &sink, "x").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sink.update_behaviour(|b| b.fail_rate = 0.0);
    assert_eq!(deliver(&client, &sink, "x").await.status(), StatusCode::OK);
    assert_eq!(sink.audit().failures_total, 1);
}

#[tokio::test]
async fn mismatched_idempotency_key_is_a_bad_request() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let response = post(&client, &sink, Some("other"), event("e1")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let audit = sink.audit();
    assert_eq!(audit.bad_requests, 1);
    assert_eq!(audit.requests_total, 1);
    assert_eq!(audit.failures_total, 1);
    assert!(audit.attempts.is_empty());
    assert!(audit.delivered.is_empty());
}

#[tokio::test]
async fn malformed_deliveries_are_bad_requests() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let cases: Vec<(Option<&str>, Vec<u8>)> = vec![
        (None, event("e1")),                                   // no key
        (Some("e1"), b"not json".to_vec()),                    // not JSON
        (Some("e1"), br#"["e1"]"#.to_vec()),                   // not an object
        (Some("1"), br#"{"id": 1}"#.to_vec()),                 // id not a string
        (Some("e1"), br#"{"type": "x"}"#.to_vec()),            // no id
        (Some("e1"), br#"{"id": "e1", "id": "e2"}"#.to_vec()), // ambiguous id
    ];
    let n = cases.len() as u64;
    for (key, body) in cases {
        assert_eq!(
            post(&client, &sink, key, body).await.status(),
            StatusCode::BAD_REQUEST
        );
    }
    let audit = sink.audit();
    assert_eq!(audit.bad_requests, n);
    assert_eq!(audit.requests_total, n);
    assert!(audit.attempts.is_empty());
}

#[tokio::test]
async fn latency_delays_the_answer() {
    let sink = start(Behaviour {
        latency_ms: 50,
        ..Behaviour::default()
    })
    .await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    assert_eq!(
        deliver(&client, &sink, "slow").await.status(),
        StatusCode::OK
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
}

/// Issue 54, item 16: `GET|PUT /behaviour` never show `required_token`.
/// Seen failing on 45109fa: both echoed it.
#[tokio::test]
async fn the_required_token_is_never_echoed() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/behaviour", base(&sink));
    let put = client
        .put(&url)
        .body(r#"{"required_token": "s3cret-tok"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    let put = put.text().await.unwrap();
    let got = client.get(&url).send().await.unwrap().text().await.unwrap();
    for body in [&put, &got] {
        assert!(!body.contains("s3cret-tok"), "{body}");
        let b: Behaviour = serde_json::from_str(body).unwrap();
        assert_eq!(b.required_token.as_deref(), Some("***"));
    }
    // Still required.
    assert_eq!(
        sink.behaviour().required_token.as_deref(),
        Some("s3cret-tok")
    );
}

#[tokio::test]
async fn behaviour_can_be_read_and_replaced_over_http() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/behaviour", base(&sink));

    let response = client
        .put(&url)
        .body(r#"{"down_status": 418, "fail_ids": {"p": {"status": 500}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let read: Behaviour = serde_json::from_slice(
        &client
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(read.down_status, Some(418));
    assert_eq!(read.fail_status, 503, "missing fields take their defaults");
    assert_eq!(
        read.fail_ids["p"],
        FailRule {
            status: 500,
            times: None,
            retry_after_s: None
        }
    );
    assert_eq!(read, sink.behaviour());
    assert_eq!(
        deliver(&client, &sink, "e").await.status(),
        StatusCode::IM_A_TEAPOT
    );

    // Statuses that cannot be a final answer are refused; the behaviour stays.
    let response = client
        .put(&url)
        .body(r#"{"down_status": 99}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = client.put(&url).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(sink.behaviour().down_status, Some(418));
}

#[tokio::test]
async fn redelivery_is_counted_as_a_duplicate() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    for id in ["d", "e", "d"] {
        assert_eq!(deliver(&client, &sink, id).await.status(), StatusCode::OK);
    }
    let audit = sink.audit();
    assert_eq!(audit.delivered["d"], 2);
    assert_eq!(audit.duplicates(), 1);
    assert_eq!(audit.order, ["d", "e", "d"]);
    assert_eq!(sink.delivered_count(), 2, "distinct ids");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_many_concurrent_requests() {
    let sink = start(Behaviour {
        latency_ms: 100,
        ..Behaviour::default()
    })
    .await;
    let client = reqwest::Client::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (client, sink) = (client.clone(), sink.clone());
        tasks.spawn(async move { deliver(&client, &sink, &format!("c-{i}")).await.status() });
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    let audit = sink.audit();
    assert!(
        audit.max_concurrent >= 100,
        "max_concurrent = {}",
        audit.max_concurrent
    );
    assert_eq!(audit.delivered.len(), 200);
    assert_eq!(audit.order.len(), 200);
    assert_eq!(sink.delivered_count(), 200);
}

#[tokio::test]
async fn reset_clears_the_books_and_restarts_fail_rules() {
    let mut behaviour = Behaviour::default();
    behaviour.fail_ids.insert(
        "f".into(),
        FailRule {
            times: Some(1),
            ..FailRule::default()
        },
    );
    let sink = start(behaviour).await;
    let client = reqwest::Client::new();
    assert_eq!(
        deliver(&client, &sink, "f").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(deliver(&client, &sink, "f").await.status(), StatusCode::OK);

    assert!(reset(&client, &sink, "").await.is_success());
    let audit = sink.audit();
    assert_eq!(
        audit,
        Audit {
            max_concurrent: audit.max_concurrent,
            ..Audit::default()
        }
    );
    assert_eq!(sink.delivered_count(), 0);

    // Attempts count from zero again.
    assert_eq!(
        deliver(&client, &sink, "f").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_reset_may_reserve_room_and_refuses_a_bad_expect() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    assert_eq!(deliver(&client, &sink, "a").await.status(), StatusCode::OK);
    for bad in ["abc", "-1", "50000001"] {
        let status = reset(&client, &sink, &format!("?expect={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "expect={bad}");
        // Refused: the books are as they were.
        assert_eq!(sink.audit().delivered.len(), 1, "expect={bad}");
    }
    let status = reset(&client, &sink, "?expect=1000").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(sink.delivered_count(), 0);
    assert!(sink.audit().delivered.is_empty());
    assert_eq!(deliver(&client, &sink, "a").await.status(), StatusCode::OK);
    assert_eq!(sink.audit().delivered.get("a"), Some(&1));
}

#[tokio::test]
async fn bodies_are_sampled_when_asked() {
    let sink = start(Behaviour::default()).await;
    sink.set_record_bodies(true);
    let client = reqwest::Client::new();
    deliver(&client, &sink, "b").await;
    let body = json!({"id": "b", "data": {"enriched": true}});
    post(
        &client,
        &sink,
        Some("b"),
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    let audit = sink.audit();
    assert_eq!(
        audit.bodies_sample,
        HashMap::from([("b".to_string(), body)])
    );
}

#[tokio::test]
async fn healthz_and_shutdown() {
    let sink = start(Behaviour::default()).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{}/healthz", base(&sink)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    sink.shutdown();
    tokio::time::timeout(Duration::from_secs(10), sink.stopped())
        .await
        .expect("graceful shutdown completes");
    let fresh = reqwest::Client::new();
    assert!(fresh
        .post(sink.url())
        .body(event("late"))
        .send()
        .await
        .is_err());
}

// ---- The batch endpoint (`[api.batch]`) ----

mod batch {
    use super::*;
    use courier::core::batch::{idempotency_key, item_results, BatchFormat, ResultsSpec};
    use courier_standins::loadgen::event_json;

    /// How Courier reads the stand-in's per-item results.
    fn results_spec(by_id: bool) -> ResultsSpec {
        ResultsSpec {
            results: "/items".into(),
            status: "/status".into(),
            id: by_id.then(|| "/id".into()),
        }
    }

    /// Posts `ids` to `path` as Courier would: the format's body and
    /// Content-Type, the key derived from the ids.
    async fn post_batch(
        client: &reqwest::Client,
        sink: &SinkHandle,
        path: &str,
        format: &BatchFormat,
        ids: &[&str],
    ) -> reqwest::Response {
        let bodies: Vec<Vec<u8>> = ids.iter().map(|id| event(id)).collect();
        post_bodies(client, sink, path, format, ids, &bodies).await
    }

    async fn post_bodies(
        client: &reqwest::Client,
        sink: &SinkHandle,
        path: &str,
        format: &BatchFormat,
        ids: &[&str],
        bodies: &[Vec<u8>],
    ) -> reqwest::Response {
        client
            .post(format!("{}{path}", base(sink)))
            .header("content-type", format.content_type())
            .header("Idempotency-Key", idempotency_key(ids.iter().copied()))
            .body(format.encode(bodies.iter().map(Vec::as_slice), 0))
            .send()
            .await
            .expect("request reaches the sink")
    }

    /// The per-item statuses of an answer, read the way Courier reads them.
    async fn statuses(response: reqwest::Response, ids: &[&str], by_id: bool) -> Vec<u16> {
        let body = response.bytes().await.expect("answer body");
        item_results(&results_spec(by_id), &body, ids)
            .expect("per-item results at /items")
            .iter()
            .map(|r| r.status())
            .collect()
    }

    fn template() -> BatchFormat {
        BatchFormat::template(r#"{"events": $items}"#).expect("template")
    }

    #[tokio::test]
    async fn every_format_is_read_and_each_item_booked_like_a_delivery() {
        let sink = start(Behaviour::default()).await;
        let client = reqwest::Client::new();
        let formats = [
            ("/batch", BatchFormat::JsonArray, ["a1", "a2", "a3"]),
            ("/batch/nd", BatchFormat::Ndjson, ["n1", "n2", "n3"]),
            (
                "/batch/ce/x",
                BatchFormat::CloudEventsBatch,
                ["c1", "c2", "c3"],
            ),
            ("/batch", template(), ["t1", "t2", "t3"]),
        ];
        for (path, format, ids) in &formats {
            let response = post_batch(&client, &sink, path, format, ids).await;
            assert_eq!(response.status(), StatusCode::OK, "{format:?}");
            assert_eq!(statuses(response, ids, false).await, [200, 200, 200]);
        }
        // A batch of one is the event alone, keyed by its id.
        let response = client
            .post(format!("{}/batch/any", base(&sink)))
            .header("content-type", "application/cloudevents+json")
            .header("Idempotency-Key", "solo")
            .body(event("solo"))
            .send()
            .await
            .expect("request reaches the sink");
        assert_eq!(response.status(), StatusCode::OK);

        let audit = sink.audit();
        let mut expected: Vec<&str> = formats.iter().flat_map(|(_, _, ids)| *ids).collect();
        expected.push("solo");
        assert_eq!(audit.order, expected);
        for id in &expected {
            assert_eq!((audit.delivered[*id], audit.attempts[*id]), (1, 1), "{id}");
        }
        assert_eq!(audit.requests_total, 13, "one per event");
        assert_eq!(audit.per_second.iter().sum::<u64>(), 13);
        assert_eq!(audit.batch_requests, 5);
        assert_eq!(audit.per_second_batches.iter().sum::<u64>(), 5);
        assert_eq!(audit.batch_items, 13);
        assert_eq!(audit.batch_singles, 1);
        assert_eq!(audit.batch_max_items, 3);
        assert_eq!(audit.batch_key_mismatches, 0);
        assert_eq!((audit.failures_total, audit.bad_requests), (0, 0));
        assert_eq!(sink.delivered_count(), 13);
        assert_eq!(http_audit(&client, &sink).await, audit);
    }

    #[tokio::test]
    async fn the_template_pointer_is_configurable() {
        let sink = start(Behaviour {
            batch_items_pointer: "/data/records".into(),
            ..Behaviour::default()
        })
        .await;
        let client = reqwest::Client::new();
        let format = BatchFormat::template(r#"{"data": {"records": $items}}"#).expect("template");
        let response = post_batch(&client, &sink, "/batch", &format, &["x", "y"]).await;
        assert_eq!(response.status(), StatusCode::OK);
        // The default pointer finds nothing there: a bad request.
        sink.update_behaviour(|b| b.batch_items_pointer = "/events".into());
        let response = post_batch(&client, &sink, "/batch", &format, &["z", "w"]).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let audit = sink.audit();
        assert_eq!(audit.order, ["x", "y"]);
        assert_eq!(audit.bad_requests, 1);
    }

    #[tokio::test]
    async fn items_failing_on_their_own_get_a_207_with_each_status() {
        let mut behaviour = Behaviour::default();
        behaviour.fail_ids.insert(
            "bad".into(),
            FailRule {
                status: 400,
                ..FailRule::default()
            },
        );
        behaviour.fail_ids.insert(
            "busy".into(),
            FailRule {
                status: 503,
                times: Some(1),
                retry_after_s: Some(3),
            },
        );
        let sink = start(behaviour).await;
        let client = reqwest::Client::new();
        let ids = ["ok1", "bad", "busy", "ok2"];
        let response = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &ids).await;
        assert_eq!(response.status(), StatusCode::MULTI_STATUS);
        assert_eq!(response.headers()["retry-after"], "3");
        assert_eq!(statuses(response, &ids, false).await, [200, 400, 503, 200]);

        // Sent again (reversed results, read by id): `busy` is through now.
        sink.update_behaviour(|b| b.batch_results_reversed = true);
        let again = ["bad", "busy"];
        let response = post_batch(&client, &sink, "/batch", &BatchFormat::Ndjson, &again).await;
        assert_eq!(response.status(), StatusCode::MULTI_STATUS);
        assert!(response.headers().get("retry-after").is_none());
        let body = response.bytes().await.expect("body");
        let shape: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            shape,
            json!({"items": [{"id": "busy", "status": 200}, {"id": "bad", "status": 400}]})
        );
        let by_id = item_results(&results_spec(true), &body, &again).expect("results");
        assert_eq!(
            by_id.iter().map(|r| r.status()).collect::<Vec<_>>(),
            [400, 200]
        );

        let audit = sink.audit();
        assert_eq!(audit.order, ["ok1", "ok2", "busy"]);
        assert_eq!(audit.attempts["bad"], 2);
        assert_eq!(audit.attempts["busy"], 2);
        assert!(!audit.delivered.contains_key("bad"));
        assert_eq!(audit.failures_total, 3);
        assert_eq!(audit.requests_total, 6);
        assert_eq!(audit.batch_requests, 2);
    }

    #[tokio::test]
    async fn a_batch_above_max_bytes_is_refused_413_but_a_single_event_is_not() {
        let sink = start(Behaviour {
            batch_max_bytes: Some(300),
            ..Behaviour::default()
        })
        .await;
        let client = reqwest::Client::new();
        let ids: Vec<String> = (0..5).map(|i| format!("big-{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let response = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &ids).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let audit = sink.audit();
        assert!(audit.delivered.is_empty());
        assert_eq!(audit.batch_refused_413, 1);
        assert_eq!(audit.attempts["big-0"], 1, "the attempt is booked");
        assert_eq!(audit.failures_total, 5);

        // Halves that fit are taken; a single event is never refused for its size.
        let fits = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &ids[..2]).await;
        assert_eq!(fits.status(), StatusCode::OK);
        let mut padded = event("alone");
        padded.splice(1..1, format!("\"pad\":\"{}\",", "x".repeat(400)).bytes());
        let alone = client
            .post(format!("{}/batch", base(&sink)))
            .header("Idempotency-Key", "alone")
            .body(padded)
            .send()
            .await
            .expect("request reaches the sink");
        assert_eq!(alone.status(), StatusCode::OK);
        let audit = sink.audit();
        assert_eq!(audit.order, ["big-0", "big-1", "alone"]);
        assert_eq!(audit.batch_refused_413, 1);
        assert_eq!(audit.batch_requests, 3);
    }

    #[tokio::test]
    async fn a_poison_id_gets_its_whole_batch_400_and_alone_too() {
        let sink = start(Behaviour {
            batch_poison_ids: ["p".to_string()].into(),
            fail_body: Some("{\"error\":\"bad batch\"}".into()),
            ..Behaviour::default()
        })
        .await;
        let client = reqwest::Client::new();
        let all = ["a", "b", "p", "c"];
        let response = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &all).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.text().await.expect("body"),
            "{\"error\":\"bad batch\"}"
        );
        let audit = sink.audit();
        assert!(audit.delivered.is_empty());
        assert_eq!(audit.attempts.len(), 4);

        // Bisected as Courier does: the clean half through, the poison half
        // refused again, then its two singles.
        let clean = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &all[..2]).await;
        assert_eq!(clean.status(), StatusCode::OK);
        let dirty = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &all[2..]).await;
        assert_eq!(dirty.status(), StatusCode::BAD_REQUEST);
        for (id, status) in [("p", StatusCode::BAD_REQUEST), ("c", StatusCode::OK)] {
            let response = client
                .post(format!("{}/batch", base(&sink)))
                .header("Idempotency-Key", id)
                .body(event(id))
                .send()
                .await
                .expect("request reaches the sink");
            assert_eq!(response.status(), status, "{id}");
        }
        let audit = sink.audit();
        assert_eq!(audit.order, ["a", "b", "c"]);
        assert_eq!(audit.attempts["p"], 3);
        assert_eq!(audit.batch_refused_whole, 3);
        assert_eq!(audit.batch_requests, 5);
        assert_eq!(audit.batch_singles, 2);
    }

    #[tokio::test]
    async fn whole_status_answers_plainly_and_fails_the_whole_batch() {
        let mut behaviour = Behaviour {
            batch_whole_status: true,
            ..Behaviour::default()
        };
        behaviour.fail_ids.insert(
            "flaky".into(),
            FailRule {
                status: 503,
                times: Some(1),
                retry_after_s: Some(2),
            },
        );
        let sink = start(behaviour).await;
        let client = reqwest::Client::new();
        let ids = ["x", "flaky", "y"];
        let first = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &ids).await;
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(first.headers()["retry-after"], "2");
        assert!(sink.audit().delivered.is_empty());
        let second = post_batch(&client, &sink, "/batch", &BatchFormat::JsonArray, &ids).await;
        assert_eq!(second.status(), StatusCode::OK);
        assert_eq!(second.bytes().await.expect("body").len(), 0, "no detail");
        let audit = sink.audit();
        assert_eq!(audit.order, ids);
        assert_eq!(audit.duplicates(), 0);
        assert_eq!(audit.failures_total, 3);
    }

    #[tokio::test]
    async fn a_down_or_unauthorized_api_refuses_the_whole_batch() {
        let sink = start(Behaviour {
            down_status: Some(503),
            ..Behaviour::default()
        })
        .await;
        let client = reqwest::Client::new();
        let ids = ["d1", "d2"];
        let down = post_batch(&client, &sink, "/batch", &template(), &ids).await;
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        sink.set_behaviour(Behaviour {
            required_token: Some("t".into()),
            ..Behaviour::default()
        });
        let denied = post_batch(&client, &sink, "/batch", &template(), &ids).await;
        assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
        let audit = sink.audit();
        assert!(audit.delivered.is_empty());
        assert_eq!((audit.attempts["d1"], audit.failures_total), (2, 4));
    }

    #[tokio::test]
    async fn malformed_batches_and_wrong_keys_are_bad_requests() {
        let sink = start(Behaviour::default()).await;
        let client = reqwest::Client::new();
        let url = format!("{}/batch", base(&sink));
        let array = format!(
            "[{},{}]",
            String::from_utf8(event("k1")).expect("utf-8"),
            String::from_utf8(event("k2")).expect("utf-8")
        );
        // (A keyless array is a batch: `a_keyless_json_array_is_booked_per_item`.)
        for (key, body) in [
            (None, String::from_utf8(event("k1")).expect("utf-8")),
            (Some("k1"), array.clone()),
            (Some("batch-0"), "[]".to_string()),
            (Some("batch-0"), "[{\"no\":\"id\"}]".to_string()),
            (Some("batch-0"), "{\"events\": 1}".to_string()),
            (
                Some("other"),
                String::from_utf8(event("k1")).expect("utf-8"),
            ),
        ] {
            let mut request = client.post(&url).body(body.clone());
            if let Some(key) = key {
                request = request.header("Idempotency-Key", key);
            }
            let response = request.send().await.expect("request reaches the sink");
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{key:?} {body}");
        }
        // A batch- key that is not the one derived from the ids: answered, counted.
        let response = client
            .post(&url)
            .header("Idempotency-Key", "batch-0")
            .body(array)
            .send()
            .await
            .expect("request reaches the sink");
        assert_eq!(response.status(), StatusCode::OK);
        let audit = sink.audit();
        assert_eq!(audit.bad_requests, 6);
        assert_eq!(audit.batch_requests, 1);
        assert_eq!(audit.batch_key_mismatches, 1);
        assert_eq!(audit.order, ["k1", "k2"]);
    }

    #[tokio::test]
    async fn per_key_order_is_checked_on_first_deliveries() {
        let sink = start(Behaviour::default()).await;
        let client = reqwest::Client::new();
        let ev = |seq: usize, key: &str| {
            let id = courier_standins::loadgen::event_id("ev", seq);
            let body = event_json(&id, "t", key, seq, 200);
            (id, body)
        };
        // key-0: 0, 2 in one batch, then 4 alone on /events; key-1: 1, 3.
        let batch: Vec<_> = [(0, "key-0"), (1, "key-1"), (2, "key-0"), (3, "key-1")]
            .into_iter()
            .map(|(s, k)| ev(s, k))
            .collect();
        let ids: Vec<&str> = batch.iter().map(|(id, _)| id.as_str()).collect();
        let bodies: Vec<Vec<u8>> = batch.iter().map(|(_, b)| b.clone()).collect();
        let response = post_bodies(
            &client,
            &sink,
            "/batch",
            &BatchFormat::JsonArray,
            &ids,
            &bodies,
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let (id4, body4) = ev(4, "key-0");
        assert_eq!(
            post(&client, &sink, Some(&id4), body4).await.status(),
            StatusCode::OK
        );
        assert_eq!(sink.audit().order_violations, 0);

        // A duplicate of an old one is not a new position.
        let (id0, body0) = ev(0, "key-0");
        assert_eq!(
            post(&client, &sink, Some(&id0), body0).await.status(),
            StatusCode::OK
        );
        // key-1's seq 3 is in: a new event with seq 2 now is late.
        let late = "late-2";
        let late_body = event_json(late, "t", "key-1", 2, 200);
        assert_eq!(
            post(&client, &sink, Some(late), late_body).await.status(),
            StatusCode::OK
        );
        // A DLQ redelivery of an old seq is not checked.
        let replay = "replay-1";
        let response = client
            .post(format!("{}/batch", base(&sink)))
            .header("Idempotency-Key", replay)
            .header("Courier-Redelivery", "1")
            .body(event_json(replay, "t", "key-0", 1, 200))
            .send()
            .await
            .expect("request reaches the sink");
        assert_eq!(response.status(), StatusCode::OK);

        let audit = sink.audit();
        assert_eq!(audit.order_checked, 6, "4 in the batch, ev-4, the late one");
        assert_eq!(audit.order_violations, 1);
        assert_eq!(
            audit.order_violation_examples,
            ["key-1: late-2 (seq 2) after seq 3"]
        );
        assert_eq!(audit.duplicates(), 1);
    }

    /// A generic batching client's body (Benthos' `http_client` with `archive:
    /// json_array`): a JSON array of the events, no `Idempotency-Key`. Each item
    /// is booked by its id, a resend counted as duplicates, and
    /// `/audit/delivered` adds it all up.
    #[tokio::test]
    async fn a_keyless_json_array_is_booked_per_item() {
        use courier_standins::sink::DeliveredCount;
        let sink = start(Behaviour::default()).await;
        let client = reqwest::Client::new();
        let send = |ids: &'static [&'static str]| {
            let body = BatchFormat::JsonArray.encode(
                ids.iter()
                    .map(|id| event(id))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(Vec::as_slice),
                0,
            );
            client
                .post(format!("{}/batch", base(&sink)))
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let response = send(&["k1", "k2", "k3"]).await.expect("reaches the sink");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            statuses(response, &["k1", "k2", "k3"], true).await,
            [200, 200, 200]
        );
        let again = send(&["k3", "k4"]).await.expect("reaches the sink");
        assert_eq!(again.status(), StatusCode::OK);
        // A keyless single event is still a bad request.
        let single = client
            .post(format!("{}/batch", base(&sink)))
            .header("content-type", "application/json")
            .body(event("k5"))
            .send()
            .await
            .expect("reaches the sink");
        assert_eq!(single.status(), StatusCode::BAD_REQUEST);

        let audit = sink.audit();
        assert_eq!(audit.order, ["k1", "k2", "k3", "k3", "k4"]);
        assert_eq!((audit.batch_keyless, audit.batch_key_mismatches), (2, 0));
        assert_eq!(audit.duplicates(), 1);
        let expected = DeliveredCount {
            distinct: 4,
            total: 5,
            requests_total: 6,
            batch_requests: 2,
            failures_total: 1,
        };
        assert_eq!(sink.delivered(), expected);
        let over_http = client
            .get(format!("{}/audit/delivered", base(&sink)))
            .send()
            .await
            .expect("reaches the sink");
        assert_eq!(over_http.status(), StatusCode::OK);
        let counted: DeliveredCount =
            serde_json::from_slice(&over_http.bytes().await.expect("body")).expect("json");
        assert_eq!(counted, expected);
    }
}
