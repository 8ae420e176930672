//! Degraded-mode test 5: the `deadline` retry policy with the source of truth in
//! PostgreSQL — one event per outcome: MATCH delivered, MISMATCH parked as stale,
//! EXPIRED parked, QUERY_FAILED (PostgreSQL stopped) kept in the DLQ and delivered
//! once PostgreSQL is back. Ends with the audit.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::time::Duration;

/// Restarts PostgreSQL even when the test fails half-way.
struct PgBack<'a>(&'a Services);
impl Drop for PgBack<'_> {
    fn drop(&mut self) {
        self.0.ctl("pg-start");
    }
}

fn event(id: &str, ty: &str, version: i64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "specversion": "1.0", "id": id, "source": "/orders", "type": ty,
        "entityversion": version, "data": {"id": id}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_policy_consults_the_source_of_truth() {
    let s = services();
    let n = Names::new("deadline", 2);
    n.create(&s, true).await;
    let table = format!("versions_{}", n.topic.replace('-', "_"));
    let (db, conn) = tokio_postgres::connect(&s.pg_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db.batch_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, version bigint NOT NULL)"
    ))
    .await
    .unwrap();
    for (k, v) in [
        ("k-match", 1i64),
        ("k-stale", 2),
        ("k-expire", 1),
        ("k-qf", 1),
    ] {
        db.execute(&format!("INSERT INTO {table} VALUES ($1, $2)"), &[&k, &v])
            .await
            .unwrap();
    }

    // Each tested event fails its three in-place tries, so it enters the DLQ.
    let ids = ["dl-match", "dl-stale", "dl-expire", "dl-qf"];
    let fail_ids: HashMap<String, FailRule> = ids
        .iter()
        .map(|id| {
            (
                id.to_string(),
                FailRule {
                    status: 503,
                    times: Some(3),
                    retry_after_s: None,
                },
            )
        })
        .collect();
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids,
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let pg = s.pg_url.replace("courier:courier@", "courier@");
    let degraded = "poll_interval = \"100ms\"
breaker_consecutive_failures = 0
min_pause = \"200ms\"
dlq_backoff_base = \"500ms\"
dlq_backoff_cap = \"1s\"
lag_check_interval = \"200ms\"";
    let toml = toml_with(&n, &api.url(), degraded)
        + &format!(
            r#"
[enrichment]
url = "{pg}"
query_timeout = "500ms"

[retry]
default = {{ kind = "counter", max_retries = 5 }}
source_query = "SELECT version FROM {table} WHERE key = $1"

[retry.types."order.paid"]
kind = "deadline"
deadline = "1m"

[retry.types."order.short"]
kind = "deadline"
deadline = "200ms"
"#
        );
    let mut c = Courier::start(&n.topic, &s, &toml);

    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    let mut produced = Produced::default();
    let send = |id: &'static str, key: &'static str, ty: &'static str, v: i64| {
        let payload = event(id, ty, v);
        let p = producer.clone();
        let topic = n.topic.clone();
        async move {
            let d = p
                .send(
                    FutureRecord::to(&topic).key(key).payload(&payload),
                    Timeout::Never,
                )
                .await
                .expect("produce");
            (id.to_string(), (d.partition, d.offset))
        }
    };
    // Filler traffic, so the failures are a small share of the calls.
    let filler = courier_standins::loadgen::Spec {
        count: 300,
        keys: 300,
        id_prefix: "fill".into(),
        ..Default::default()
    };
    let f = courier_standins::loadgen::produce_with(&producer, &n.topic, &filler, 0)
        .await
        .unwrap();
    produced.ids.extend(f.ids);
    produced.offsets.extend(f.offsets);
    for (id, key, ty, v) in [
        ("dl-match", "k-match", "order.paid", 1),
        ("dl-stale", "k-stale", "order.paid", 1),
        ("dl-expire", "k-expire", "order.short", 1),
    ] {
        let (id, at) = send(id, key, ty, v).await;
        produced.ids.push(id);
        produced.offsets.push(at);
    }

    wait_until(
        Duration::from_secs(60),
        "MATCH delivered, MISMATCH and EXPIRED parked",
        || {
            let parked = envelopes(&s, &n.parking);
            let reason = |id: &str| {
                parked
                    .iter()
                    .find(|e| e.event_id.as_deref() == Some(id))
                    .map(|e| e.last_error.reason.clone())
            };
            api.audit().delivered.contains_key("dl-match")
                && reason("dl-stale").as_deref() == Some("stale")
                && reason("dl-expire").as_deref() == Some("expired")
        },
    )
    .await;
    assert_eq!(
        c.metric("courier_dlq_dropped_total{reason=\"stale\"").await,
        1.0
    );
    assert_eq!(
        c.metric("courier_dlq_dropped_total{reason=\"expired\"")
            .await,
        1.0
    );
    assert!(
        c.metric("courier_reconciliation_total{result=\"match\"")
            .await
            >= 1.0
    );

    // QUERY_FAILED: the source of truth is down; the event stays in the DLQ…
    s.ctl("pg-stop");
    let back = PgBack(&s);
    let (id, at) = send("dl-qf", "k-qf", "order.paid", 1).await;
    produced.ids.push(id);
    produced.offsets.push(at);
    wait_until(
        Duration::from_secs(60),
        "a failed source-of-truth query keeps the event in the DLQ",
        || block(c.metric("courier_reconciliation_total{result=\"query_failed\"")) >= 1.0,
    )
    .await;
    assert!(!api.audit().delivered.contains_key("dl-qf"));
    assert!(
        envelopes(&s, &n.parking)
            .iter()
            .all(|e| e.event_id.as_deref() != Some("dl-qf")),
        "not dropped"
    );
    // …and is delivered once PostgreSQL is back.
    drop(back);
    wait_until(
        Duration::from_secs(60),
        "the kept event is delivered after PostgreSQL returns",
        || api.audit().delivered.contains_key("dl-qf"),
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(30)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("deadline", &rep);
    assert_eq!(rep.parked_by_reason.get("stale"), Some(&1));
    assert_eq!(rep.parked_by_reason.get("expired"), Some(&1));
}
