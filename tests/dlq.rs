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

/// Review finding (issue 23): a DLQ write retried forever and never looked at
/// the completion token, so after a revoke during a DLQ outage it outlived the
/// partition while the new owner wrote the same envelope again (N envelopes for
/// one event after N rebalances). Instance A owns 4 partitions whose 8 events
/// answered 503 wait for the DLQ (a DLQ topic not created yet);
/// instance B joins and takes 2 partitions: A abandons the writes of the
/// events it no longer owns at its next try, B writes them; once the DLQ is
/// back, each event has exactly one envelope, audit lost 0. (Before: A kept
/// retrying the moved events' writes after the revoke.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_during_a_dlq_outage_abandons_the_old_owners_writes() {
    let s = services();
    let n = Names::new("dlqrevoke", 4);
    // No DLQ topic yet: every DLQ write fails (and is retried) until it exists.
    n.create(&s, false).await;
    let spec = Spec {
        count: 400,
        keys: 400,
        id_prefix: "dlqrv".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // Two failing events per partition.
    let mut per_partition: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (seq, (p, _)) in produced.offsets.iter().enumerate().skip(50) {
        let v = per_partition.entry(*p).or_default();
        if v.len() < 2 && seq % 7 == 0 {
            v.push(seq);
        }
    }
    let failing: Vec<(i32, String)> = per_partition
        .iter()
        .flat_map(|(p, seqs)| seqs.iter().map(|q| (*p, loadgen::event_id("dlqrv", *q))))
        .collect();
    assert_eq!(failing.len(), 8, "two failing events in each partition");
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids: failing
                .iter()
                .map(|(_, id)| {
                    (
                        id.clone(),
                        FailRule {
                            status: 503,
                            times: None,
                            retry_after_s: None,
                        },
                    )
                })
                .collect(),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    // The new owners' first calls are the failing events' tries: no breaker
    // on a run of them (it would pause the group and slow the test down).
    let toml = base_toml(&n, &api.url())
        .replace(
            "auto_commit_interval = \"200ms\"",
            "auto_commit_interval = \"200ms\"\nproducer_timeout = \"2s\"",
        )
        .replace(
            "dlq_backoff_cap = \"1h\"",
            "dlq_backoff_cap = \"1h\"\nbreaker_consecutive_failures = 0",
        );
    let a = Courier::start("dlqrevoke-a", &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "A tried each failing event and its DLQ write failed",
        || {
            let at = api.audit().attempts;
            failing.iter().all(|(_, id)| at.get(id) == Some(&3))
                && block(a.metric("courier_dlq_write_failures_total")) >= 1.0
        },
    )
    .await;
    let b = Courier::start("dlqrevoke-b", &s, &toml);
    // The eager rebalance revokes A's four partitions and gives two to B; the
    // failing events are tried again by their new owners.
    wait_until(
        Duration::from_secs(60),
        "A owns two partitions and every failing event was tried again",
        || {
            let at = api.audit().attempts;
            failing
                .iter()
                .all(|(_, id)| at.get(id).is_some_and(|n| *n >= 4))
                && block(a.metric("courier_assigned_partitions")) == 2.0
        },
    )
    .await;
    // The events of the partitions A no longer owns (its last assignment).
    let a_log = strip_ansi(&a.log_text());
    let owned: Vec<i32> = a_log
        .lines()
        .rev()
        .find_map(|l| l.split("partitions assigned partitions=[").nth(1))
        .map(|rest| {
            rest.split(']')
                .next()
                .unwrap_or_default()
                .split(", ")
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        owned.len(),
        2,
        "A's assignment after the rebalance: {owned:?}"
    );
    let moved: Vec<String> = failing
        .iter()
        .filter(|(p, _)| !owned.contains(p))
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(moved.len(), 4, "two partitions moved to B");
    // A stops retrying the writes of the events it no longer owns.
    let abandoned = |log: &str, id: &str| {
        log.lines()
            .any(|l| l.contains("the write is abandoned") && l.contains(&format!("id=\"{id}\"")))
    };
    wait_until(
        Duration::from_secs(60),
        "A abandoned the DLQ writes of the events it no longer owns",
        || {
            let log = strip_ansi(&a.log_text());
            moved.iter().all(|id| abandoned(&log, id))
        },
    )
    .await;
    courier::kafka::admin::create_topics(&s.brokers, &[(n.dlq.as_str(), n.partitions)])
        .await
        .expect("create the DLQ");
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    let log = strip_ansi(&a.log_text());
    let retried_after: Vec<&str> = moved
        .iter()
        .filter(|id| {
            log.lines()
                .skip_while(|l| {
                    !(l.contains("the write is abandoned") && l.contains(&format!("id=\"{id}\"")))
                })
                .skip(1)
                .any(|l| {
                    l.contains("retrying (the offset waits)") && l.contains(&format!("id=\"{id}\""))
                })
        })
        .map(String::as_str)
        .collect();
    assert!(
        retried_after.is_empty(),
        "A wrote again after abandoning: {retried_after:?}"
    );
    let mut a = a;
    let mut b = b;
    assert_eq!(b.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(a.terminate(Duration::from_secs(30)).await, Some(0));
    let mut envelopes_of: BTreeMap<String, usize> = BTreeMap::new();
    for e in envelopes(&s, &n.dlq) {
        *envelopes_of
            .entry(e.event_id.unwrap_or_default())
            .or_default() += 1;
    }
    println!("[dlq-revoke] moved {moved:?}; envelopes per event {envelopes_of:?}");
    let expected: BTreeMap<String, usize> = failing.iter().map(|(_, id)| (id.clone(), 1)).collect();
    assert_eq!(envelopes_of, expected, "one envelope per failing event");
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("dlq-revoke", &rep);
    assert_eq!(rep.in_dlq, 8, "{rep}");
}
