//! Test 3 of the core pipeline. Transient failures: retried in place, then the DLQ with a correct envelope
//! and headers; offsets wait for the broker's acknowledgement of the DLQ write.

mod common;

use common::*;
use courier::core::envelope::Envelope;
use courier::loadgen::{self, Spec};
use courier::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_events_reach_the_dlq_and_offsets_wait_for_the_ack() {
    let s = services();
    let n = Names::new("dlq", 3);
    // The DLQ topic does not exist yet: DLQ writes fail until it is created.
    n.create(&s, false).await;
    let spec = Spec {
        count: 3_000,
        // One key per event: in `key` mode, later events of a failing event's key
        // would (correctly) wait behind it.
        keys: 3_000,
        id_prefix: "dlq".into(),
        ..Spec::default()
    };
    let failing: Vec<usize> = vec![100, 1_100, 2_100];
    let mut fail_ids = HashMap::new();
    for seq in &failing {
        fail_ids.insert(
            loadgen::event_id("dlq", *seq),
            FailRule {
                status: 503,
                times: None,
                retry_after_s: None,
            },
        );
    }
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids,
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let mut lowest_failing: BTreeMap<i32, i64> = BTreeMap::new();
    for seq in &failing {
        let (p, o) = produced.offsets[*seq];
        let e = lowest_failing.entry(p).or_insert(o);
        *e = (*e).min(o);
    }
    let toml = base_toml(&n, &api.url()).replace(
        "auto_commit_interval = \"200ms\"",
        "auto_commit_interval = \"200ms\"\nproducer_timeout = \"2s\"",
    );
    let mut c = Courier::start(&n.topic, &s, &toml);

    // Everything else is delivered, each failing event got its 3 in-place tries…
    wait_until(
        Duration::from_secs(60),
        "all other events delivered and failing ones retried",
        || {
            let a = api.audit();
            a.delivered.len() == 3_000 - failing.len()
                && failing
                    .iter()
                    .all(|seq| a.attempts.get(&loadgen::event_id("dlq", *seq)) == Some(&3))
        },
    )
    .await;
    // …and a DLQ write was refused by the broker (the topic is missing).
    let mut failures = 0.0;
    wait_until(
        Duration::from_secs(30),
        "a DLQ write failure is reported",
        || {
            failures = block(c.metric("courier_dlq_write_failures_total"));
            failures >= 1.0
        },
    )
    .await;
    // The watermark stops exactly at the lowest unacknowledged event of each
    // affected partition; the others reach their end.
    let ends = n.ends(&s);
    let expected: Vec<i64> = (0..n.partitions)
        .map(|p| lowest_failing.get(&p).copied().unwrap_or(ends[p as usize]))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "committed offsets stop at the failing events",
        || n.committed(&s) == expected,
    )
    .await;
    assert!(
        c.metric("courier_dlq_write_failures_total").await >= failures,
        "DLQ writes are still failing"
    );
    assert_eq!(
        n.committed(&s),
        expected,
        "no offset moved past an event whose DLQ write is not acknowledged"
    );

    // Create the DLQ: the pending writes go through and the offsets move to the end.
    courier::kafka::admin::create_topics(&s.brokers, &[(n.dlq.as_str(), n.partitions)])
        .await
        .unwrap();
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;

    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("dlq", &rep);
    assert_eq!(rep.in_dlq, failing.len());
    let records = courier::kafka::admin::read_all(&s.brokers, &n.dlq).unwrap();
    assert_eq!(
        records.len(),
        failing.len(),
        "each failing event written once"
    );
    for r in records {
        let env = Envelope::from_bytes(r.payload.as_deref().unwrap()).unwrap();
        let id = env.event_id.clone().unwrap();
        let seq: usize = id.rsplit('-').next().unwrap().parse().unwrap();
        let (p, o) = produced.offsets[seq];
        assert_eq!(env.version, 1);
        assert_eq!(env.dlq_retries, 0);
        assert_eq!(env.last_error.class, "transient");
        assert_eq!(env.last_error.reason, "http_503");
        assert_eq!(env.last_error.status, Some(503));
        assert_eq!((env.origin.partition, env.origin.offset), (p, o));
        assert_eq!(env.origin.topic, n.topic);
        assert_eq!(env.origin.consumer_group, n.group);
        assert_eq!(r.partition, p, "main partition p goes to DLQ partition p");
        assert_eq!(
            env.key.as_deref(),
            Some(loadgen::key_of(seq, spec.keys).as_bytes())
        );
        let original = loadgen::event_json(
            &id,
            &spec.event_type,
            &loadgen::key_of(seq, spec.keys),
            seq,
            spec.event_bytes,
        );
        assert_eq!(env.payload, original, "payload kept byte for byte");
        assert_eq!(r.headers["kafka_dlt-original-topic"], n.topic);
        assert_eq!(r.headers["kafka_dlt-original-partition"], p.to_string());
        assert_eq!(r.headers["kafka_dlt-original-offset"], o.to_string());
        assert_eq!(r.headers["courier-dlq-retries"], "0");
        assert_eq!(r.headers["courier-reason"], "http_503");
        assert_eq!(r.headers["courier-event-id"], id);
    }
}

/// A forged DLQ record at the head of DLQ p — a `not_before` in the year 9999,
/// or `u32::MAX` rounds — is parked `invalid_envelope`; it never blocks the
/// drain of the real DLQ record behind it. Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_envelopes_are_parked_and_never_block_the_drain() {
    use courier::core::envelope::{ErrorInfo, Origin, ENVELOPE_VERSION_PAYLOAD};
    use rdkafka::producer::FutureRecord;
    use rdkafka::util::Timeout;
    let s = services();
    let n = Names::new("forged", 1);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let now = courier::runtime::now_ms();
    let envelope = |id: &str, offset: i64| Envelope {
        version: ENVELOPE_VERSION_PAYLOAD,
        event_id: Some(id.to_string()),
        event_type: Some("t".into()),
        key: Some(b"k".to_vec()),
        payload: loadgen::event_json(id, "t", "k", 0, 300),
        omitted: None,
        origin_headers: Vec::new(),
        dlq_retries: 0,
        first_dlq_at_ms: now - 1_000,
        not_before_ms: now - 500,
        last_error: ErrorInfo {
            class: "transient".into(),
            reason: "http_503".into(),
            status: Some(503),
            message: "API answered 503".into(),
        },
        origin: Origin {
            topic: n.topic.clone(),
            partition: 0,
            offset,
            timestamp_ms: None,
            consumer_group: n.group.clone(),
        },
    };
    let mut year_9999 = envelope("forged-9999", 0);
    year_9999.not_before_ms = 253_402_300_799_000;
    let mut retries = envelope("forged-retries", 1);
    retries.dlq_retries = u32::MAX;
    let real = envelope("real-1", 2);
    let producer = loadgen::producer(&s.brokers).unwrap();
    for env in [&year_9999, &retries, &real] {
        producer
            .send(
                FutureRecord::to(&n.dlq)
                    .partition(0)
                    .key("k")
                    .payload(&env.to_bytes()),
                Timeout::After(Duration::from_secs(10)),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let spec = Spec {
        count: 100,
        keys: 10,
        id_prefix: "forged".into(),
        ..Spec::default()
    };
    let mut produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    produced.ids.push("real-1".into());
    produced.offsets.push((0, 2));
    let toml = toml_with(&n, &api.url(), FAST);
    let mut c = Courier::start(&n.topic, &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "the real DLQ record delivered",
        || api.audit().delivered.contains_key("real-1"),
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    // Parked as records of DLQ p (offsets 0 and 1), their bytes kept as they were.
    let parked: Vec<(String, i64, String)> = envelopes(&s, &n.parking)
        .into_iter()
        .map(|e| (e.origin.topic, e.origin.offset, e.last_error.reason))
        .collect();
    for offset in [0, 1] {
        assert!(
            parked.contains(&(n.dlq.clone(), offset, "invalid_envelope".into())),
            "DLQ offset {offset}: {parked:?}"
        );
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("forged envelopes", &rep);
}
