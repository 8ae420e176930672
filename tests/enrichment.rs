//! Test 8 of the core pipeline. Enrichment from a real PostgreSQL table behind the cache: the delivered body
//! carries the enrichment; with PostgreSQL stopped, enrichment failures are
//! transient (retried, then DLQ), never parked.

mod common;

use common::*;
use courier::core::envelope::Envelope;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

/// Restarts PostgreSQL even when the test fails half-way.
struct PgBack<'a>(&'a Services);
impl Drop for PgBack<'_> {
    fn drop(&mut self) {
        self.0.ctl("pg-start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrichment_from_postgres_and_db_outage_is_transient() {
    let s = services();
    let n = Names::new("enrich", 3);
    n.create(&s, true).await;
    let rows: Vec<(String, serde_json::Value)> = (0..50)
        .map(|k| {
            let doc = serde_json::json!({"tier": format!("gold-{k}"), "score": k});
            (format!("key-{k}"), doc)
        })
        .collect();
    let table = pg_table(&s, &n, "profiles", &rows).await;

    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    api.set_record_bodies(true);
    let spec = Spec {
        count: 500,
        keys: 50,
        id_prefix: "enrich".into(),
        ..Spec::default()
    };
    let producer = loadgen::producer(&s.brokers).unwrap();
    let mut produced = loadgen::produce_with(&producer, &n.topic, &spec, 0)
        .await
        .unwrap();
    let pg_no_password = s.pg_url.replace("courier:courier@", "courier@");
    let toml = base_toml(&n, &api.url())
        + &format!(
            "\n[enrichment]\nenabled = true\nurl = \"{pg_no_password}\"\nquery = \"SELECT doc FROM {table} WHERE key = $1\"\nquery_timeout = \"500ms\"\n"
        );
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;

    let audit = api.audit();
    assert_eq!(audit.delivered.len(), 500);
    for seq in 0..500 {
        let id = loadgen::event_id("enrich", seq);
        let body = &audit.bodies_sample[&id];
        let k = seq % 50;
        assert_eq!(
            body["enrichment"]["tier"],
            format!("gold-{k}"),
            "body of {id}: {body}"
        );
        assert_eq!(body["id"], id.as_str(), "the event itself is kept");
    }
    let misses = c
        .metric("courier_enrichment_cache_total{result=\"miss\"")
        .await;
    println!("[enrich] cache misses: {misses} for 500 events over 50 keys");
    assert!(
        (50.0..100.0).contains(&misses),
        "the cache absorbs repeated keys ({misses} misses)"
    );

    // PostgreSQL down: keys never seen before cannot be enriched.
    s.ctl("pg-stop");
    let _back = PgBack(&s);
    let spec2 = Spec {
        count: 200,
        keys: 1_000_000,
        id_prefix: "enrich".into(),
        ..Spec::default()
    };
    let second = loadgen::produce_with(&producer, &n.topic, &spec2, 100_000)
        .await
        .unwrap();
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    c.terminate(Duration::from_secs(30)).await;

    produced.ids.extend(second.ids.iter().cloned());
    produced.offsets.extend(second.offsets.iter().cloned());
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("enrichment", &rep);
    assert_eq!(
        rep.parked, 0,
        "database failures are never a reason to park"
    );
    assert_eq!(
        rep.in_dlq, 200,
        "enrichment failures are transient: retried, then DLQ"
    );
    for r in courier_standins::admin::read_all(&s.brokers, &n.dlq).unwrap() {
        let env = Envelope::from_bytes(r.payload.as_deref().unwrap()).unwrap();
        assert_eq!(env.last_error.class, "transient");
        assert!(
            env.last_error.reason.starts_with("enrichment_"),
            "{:?}",
            env.last_error
        );
    }
}
