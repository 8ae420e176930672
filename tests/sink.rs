//! The API stand-in over real HTTP: what it answers and what it books.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use courier::sink::{Audit, Behaviour, FailRule, SinkHandle};
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

    let response = client
        .post(format!("{}/reset", base(&sink)))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
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
