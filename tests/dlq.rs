//! Test 3 of the core pipeline. Transient failures: retried in place, then the DLQ with a correct envelope
//! and headers; offsets wait for the broker's acknowledgement of the DLQ write.

mod common;

use common::*;
use courier::core::envelope::Envelope;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_events_reach_the_dlq_and_offsets_wait_for_the_ack() {
    let s = services();
    let n = Names::new("dlq", 3);
    // The DLQ refuses every write (INVALID_TIMESTAMP, which Courier retries)
    // until the limit is lifted. (A missing DLQ is refused at start:
    // `a_missing_dlq_or_parking_topic_is_refused_at_start`.)
    n.create(&s, true).await;
    dlq_accepts_writes(&s, &n, false).await;
    let spec = Spec {
        count: 3_000,
        // One key per event: in `key` mode, later events of a failing event's key
        // would (correctly) wait behind it.
        keys: 3_000,
        id_prefix: "dlq".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // One failing event per partition, a third of the way in: main partition p
    // writes to DLQ partition p, so no two of their writes share a produce
    // batch and each answer is INVALID_TIMESTAMP (two refused records in one
    // batch are both answered INVALID_RECORD and written again alone: see
    // `dlq_accepts_writes`).
    let mut lowest_failing: BTreeMap<i32, i64> = BTreeMap::new();
    let mut failing: Vec<usize> = Vec::new();
    for p in 0..n.partitions {
        let of_p: Vec<usize> = (0..spec.count)
            .filter(|&seq| produced.offsets[seq].0 == p)
            .collect();
        let seq = of_p[of_p.len() / 3];
        failing.push(seq);
        lowest_failing.insert(p, produced.offsets[seq].1);
    }
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
    // Each failing event's 3 tries start well within the retry budget, however
    // slow the machine (with the tests' 500 ms, a loaded one made only 2).
    let toml = base_toml(&n, &api.url())
        .replace(
            "auto_commit_interval = \"200ms\"",
            "auto_commit_interval = \"200ms\"\nproducer_timeout = \"2s\"",
        )
        .replace("retry_budget = \"500ms\"", "retry_budget = \"30s\"");
    assert!(toml.contains("retry_budget = \"30s\""), "{toml}");
    let mut c = Courier::start(&n.topic, &s, &toml);

    // Everything else is delivered, each failing event got its 3 in-place tries…
    wait_for_eq(
        Duration::from_secs(60),
        "all other events delivered and failing ones retried",
        &(3_000 - failing.len(), vec![Some(3); failing.len()]),
        || {
            let a = api.audit();
            let tries = failing
                .iter()
                .map(|seq| a.attempts.get(&loadgen::event_id("dlq", *seq)).copied())
                .collect::<Vec<_>>();
            (a.delivered.len(), tries)
        },
    )
    .await;
    // …and a DLQ write was refused by the broker (invalid timestamp).
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
    wait_for_eq(
        Duration::from_secs(30),
        "committed offsets stop at the failing events",
        &expected,
        || n.committed(&s),
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

    // Let the DLQ accept writes: the pending ones go through and the offsets
    // move to the end.
    dlq_accepts_writes(&s, &n, true).await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;

    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("dlq", &rep);
    assert_eq!(rep.in_dlq, failing.len());
    let records = courier_standins::admin::read_all(&s.brokers, &n.dlq).unwrap();
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

/// Forged DLQ records at the head of DLQ p never block the drain of the real
/// DLQ record behind them: `u32::MAX` rounds is parked `invalid_envelope`; a
/// `not_before` in the year 9999 waits the backoff cap, then is delivered (as a
/// record written under a longer `dlq_backoff_cap` would be). Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_envelopes_never_block_the_drain() {
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
        entity_key: None,
        route: None,
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
        "the real DLQ record and the one from the year 9999 delivered",
        || {
            let a = api.audit();
            a.delivered.contains_key("real-1") && a.delivered.contains_key("forged-9999")
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    // Parked as a record of DLQ p (offset 1), its bytes kept as they were.
    let parked: Vec<(String, i64, String)> = envelopes(&s, &n.parking)
        .into_iter()
        .map(|e| (e.origin.topic, e.origin.offset, e.last_error.reason))
        .collect();
    assert_eq!(
        parked,
        [(n.dlq.clone(), 1, "invalid_envelope".to_string())],
        "only the one with u32::MAX rounds"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("forged envelopes", &rep);
}

/// `count` events with a key each (none waits behind another of its key).
fn spec(prefix: &str, count: usize) -> Spec {
    Spec {
        count,
        keys: count,
        id_prefix: prefix.into(),
        ..Spec::default()
    }
}

/// The `courier_events_deleted_unread_total` series of `topic`, read from the
/// `/metrics` page (0 when absent).
async fn deleted_unread(c: &Courier, topic: &str) -> f64 {
    let page = courier_testkit::metrics_page(c.metrics_port, Some(Duration::from_secs(5)))
        .await
        .unwrap_or_default();
    page.lines()
        .filter(|l| l.starts_with("courier_events_deleted_unread_total{"))
        // Not `main_topic="…"`, on every series.
        .filter(|l| {
            l.contains(&format!("{{topic=\"{topic}\""))
                || l.contains(&format!(",topic=\"{topic}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The log lines saying events were deleted unread.
fn deleted_lines(c: &Courier) -> Vec<String> {
    strip_ansi(&c.log_text())
        .lines()
        .filter(|l| l.contains("events deleted unread"))
        .map(str::to_string)
        .collect()
}

/// Issue 23 #2: events deleted (here by `delete-records`, as retention would)
/// while Courier was stopped are reported at the assignment: an ERROR naming
/// topic, partition, range and count, and the counter, exactly K - committed,
/// on the main topic and the DLQ. The DLQ was purged to its end: the drain must
/// not wait for envelopes that can never be read (the DLQ start is raised to
/// the log start), so the main topic flows on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_deleted_unread_are_counted_exactly_at_assignment() {
    use rdkafka::producer::FutureRecord;
    use rdkafka::util::Timeout;
    let s = services();
    let n = Names::new("deleted", 1);
    n.create(&s, true).await;
    // Events 5..10 fail their in-place tries, then succeed from the DLQ: the
    // group commits a DLQ position (5, or more if a round is retried).
    let fail_ids = (5..10)
        .map(|seq| {
            let rule = FailRule {
                status: 503,
                times: Some(3),
                retry_after_s: None,
            };
            (loadgen::event_id("del-a", seq), rule)
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
    let first = loadgen::produce(&s.brokers, &n.topic, &spec("del-a", 40))
        .await
        .unwrap();
    let toml = toml_with(&n, &api.url(), FAST);
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let dlq_committed =
        || courier::kafka::admin::committed_offsets(&s.brokers, &n.group, &n.dlq, 1).unwrap()[0];
    // Every DLQ round (a retry under load may take one more) read and
    // committed: the DLQ's committed position is its end.
    let dlq_end = || courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, 1).unwrap()[0];
    wait_until(
        Duration::from_secs(90),
        "the DLQ drained and committed",
        || {
            let end = dlq_end();
            end >= 5 && dlq_committed() == end && api.audit().delivered.len() == 40
        },
    )
    .await;
    let d = dlq_committed();
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(n.committed(&s), vec![40]);

    // Courier is stopped: 60 more events arrive, and the log loses offsets
    // up to 70 (30 of them never read); 3 envelopes reach the DLQ and are
    // purged with it.
    let second = loadgen::produce(&s.brokers, &n.topic, &spec("del-b", 60))
        .await
        .unwrap();
    let producer = loadgen::producer(&s.brokers).unwrap();
    for i in 0..3 {
        producer
            .send(
                FutureRecord::to(&n.dlq)
                    .partition(0)
                    .key("k")
                    .payload(&format!("envelope {i}")),
                Timeout::After(Duration::from_secs(10)),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    courier_standins::admin::delete_records(&s.brokers, &n.topic, 0, 70)
        .await
        .unwrap();
    courier_standins::admin::delete_records(&s.brokers, &n.dlq, 0, d + 3)
        .await
        .unwrap();

    // RUST_LOG=info: see the marker test below.
    let mut c = Courier::start_with_env(&n.topic, &s, &toml, &[("RUST_LOG", "info")]);
    wait_until(
        Duration::from_secs(60),
        "the losses reported on both topics",
        || deleted_lines(&c).len() >= 2,
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let main = deleted_unread(&c, &n.topic).await;
    let dlq = deleted_unread(&c, &n.dlq).await;
    let lines = deleted_lines(&c);
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!((main, dlq), (30.0, 3.0), "K - committed on each topic");
    assert_eq!(lines.len(), 2, "each loss said once: {lines:#?}");
    let line_of = |topic: &str| {
        lines
            .iter()
            .find(|l| {
                l.contains(&format!("topic={topic} ")) || l.contains(&format!("topic=\"{topic}\""))
            })
            .unwrap_or_else(|| panic!("no line for {topic}: {lines:#?}"))
            .clone()
    };
    for (topic, from, to, count) in [(&n.topic, 40, 70, 30), (&n.dlq, d, d + 3, 3)] {
        let l = line_of(topic);
        assert!(l.contains("ERROR"), "{l}");
        for field in [
            "partition=0".to_string(),
            format!("from={from}"),
            format!("to={to}"),
            format!("count={count}"),
        ] {
            assert!(l.contains(&field), "{field} missing: {l}");
        }
    }
    // The audit: exactly the deleted events are lost, everything else arrived.
    let mut produced = first;
    produced.ids.extend(second.ids.iter().cloned());
    produced.offsets.extend(second.offsets.iter().copied());
    let rep = n.audit(&s, &produced, &api);
    println!("[deleted unread] audit:\n{rep}");
    let mut expected: Vec<String> = (0..30).map(|seq| loadgen::event_id("del-b", seq)).collect();
    let mut lost = rep.lost.clone();
    lost.sort();
    expected.sort();
    assert_eq!(
        lost, expected,
        "lost = the 30 events deleted unread, nothing else"
    );
    assert_eq!(rep.delivered, 40 + 30);

    // The operator tools report the same way: the DLQ below the group's
    // committed position, and the parking lot (which nothing consumes) below
    // what the replay log lists.
    for i in 0..2 {
        producer
            .send(
                FutureRecord::to(&n.parking)
                    .partition(0)
                    .key("k")
                    .payload(&format!("parked {i}")),
                Timeout::After(Duration::from_secs(10)),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    courier_standins::admin::delete_records(&s.brokers, &n.parking, 0, 2)
        .await
        .unwrap();
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();
    for (args, topic, range) in [
        (
            &["dlq", "inspect"][..],
            &n.dlq,
            format!("[0] offsets {d}..{}: 3 records", d + 3),
        ),
        (
            &["dlq", "inspect", "--parking"][..],
            &n.parking,
            "[0] offsets 0..2: 2 records".to_string(),
        ),
    ] {
        let (code, out) = courier_cli(&s, &cfg, args);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!("events deleted unread: {topic}{range}")),
            "{out}"
        );
    }
}

/// Issue 23 #2, while running: Courier's read position is behind (main p
/// paused: the API is down), and `delete-records` (as retention would) moves
/// the log start past it. When reading resumes, librdkafka's fetch there is
/// out of range and it moves the position to the log start, saying so only
/// in its log: the ERROR line and the counter name exactly the records deleted
/// unread, and the audit finds exactly those lost. (Before: nothing said.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_deleted_unread_while_running_are_counted_exactly() {
    let s = services();
    let n = Names::new("delrun", 1);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let first = loadgen::produce(&s.brokers, &n.topic, &spec("delrun-a", 40))
        .await
        .unwrap();
    let toml = toml_with(&n, &api.url(), FAST);
    let mut c = Courier::start_with_env(&n.topic, &s, &toml, &[("RUST_LOG", "info")]);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    // The API goes down; 20 events trip the breaker, which pauses main p at
    // offset 60 (they wait in memory, or in the DLQ).
    api.set_behaviour(Behaviour {
        down_status: Some(503),
        ..Behaviour::default()
    });
    let trip = loadgen::produce(&s.brokers, &n.topic, &spec("delrun-t", 20))
        .await
        .unwrap();
    wait_until(Duration::from_secs(60), "main p paused", || {
        block(c.metric("courier_partition_paused")) >= 1.0
    })
    .await;
    // 60 more arrive, unread; the log loses offsets up to 90 (30 of them).
    let second = loadgen::produce(&s.brokers, &n.topic, &spec("delrun-b", 60))
        .await
        .unwrap();
    assert_eq!(second.offsets.first(), Some(&(0, 60)));
    courier_standins::admin::delete_records(&s.brokers, &n.topic, 0, 90)
        .await
        .unwrap();
    api.set_behaviour(Behaviour::default());
    wait_until(Duration::from_secs(60), "the loss reported", || {
        !deleted_lines(&c).is_empty()
    })
    .await;
    let rest: Vec<String> = (30..60)
        .map(|seq| loadgen::event_id("delrun-b", seq))
        .collect();
    wait_until(Duration::from_secs(90), "the rest delivered", || {
        let delivered = api.audit().delivered;
        rest.iter()
            .chain(&trip.ids)
            .all(|id| delivered.contains_key(id))
    })
    .await;
    let main = deleted_unread(&c, &n.topic).await;
    let lines = deleted_lines(&c);
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(main, 30.0, "the records deleted unread");
    assert_eq!(lines.len(), 1, "said once: {lines:#?}");
    for field in ["ERROR", "partition=0", "from=60", "to=90", "count=30"] {
        assert!(lines[0].contains(field), "{field} missing: {}", lines[0]);
    }
    let mut produced = first;
    for p in [&trip, &second] {
        produced.ids.extend(p.ids.iter().cloned());
        produced.offsets.extend(p.offsets.iter().copied());
    }
    let rep = n.audit(&s, &produced, &api);
    println!("[deleted while running] audit:\n{rep}");
    let mut expected: Vec<String> = (0..30)
        .map(|seq| loadgen::event_id("delrun-b", seq))
        .collect();
    let mut lost = rep.lost.clone();
    lost.sort();
    expected.sort();
    assert_eq!(
        lost, expected,
        "lost = the 30 events deleted unread, nothing else"
    );
}

/// A DLQ partition whose only remaining offsets are an aborted transaction
/// (its records and its control marker, which no read returns) has nothing
/// unread: main p does not wait in `drain_dlq` for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_marker_at_the_dlq_end_is_not_unread() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let s = services();
    let n = Names::new("marker", 1);
    n.create(&s, true).await;
    let tx: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", &s.brokers)
        .set("transactional.id", format!("{}-tx", n.topic))
        .create()
        .unwrap();
    let t = Duration::from_secs(30);
    tx.init_transactions(t).unwrap();
    tx.begin_transaction().unwrap();
    tx.send(
        BaseRecord::to(&n.dlq)
            .partition(0)
            .key("k")
            .payload("aborted"),
    )
    .map_err(|(e, _)| e)
    .unwrap();
    tx.flush(t).unwrap();
    tx.abort_transaction(t).unwrap();
    drop(tx);
    // The coordinator writes the abort marker after `abort_transaction`
    // returns (EndTxn answers once the abort is prepared): wait for it.
    wait_until(
        Duration::from_secs(30),
        "the aborted record and its marker",
        || courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, 1).unwrap_or_default() == vec![2],
    )
    .await;
    // A DLQ retention shorter than the policy's horizon (FAST: the default 5
    // rounds, back-off 300 ms doubling up to 2 s: an envelope waits up to 2 s)
    // is warned about at start.
    courier_standins::admin::alter_topic_config(&s.brokers, &n.dlq, &[("retention.ms", "1500")])
        .await
        .unwrap();
    // The broker applies a config change a moment after acknowledging it.
    let mut applied = false;
    for _ in 0..100 {
        let now =
            courier::kafka::admin::topic_setting(&s.brokers, &[n.dlq.as_str()], "retention.ms")
                .await
                .unwrap();
        if now.get(&n.dlq).map(String::as_str) == Some("1500") {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(applied, "retention.ms of {} not applied within 10 s", n.dlq);
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let spec = Spec {
        count: 50,
        keys: 10,
        id_prefix: "marker".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // RUST_LOG=info: with the harness's default (`info,librdkafka=warn,…`)
    // some of the process's first lines never reach the log (noticed here, not
    // understood; the warning is one of them).
    let mut c = Courier::start_with_env(
        &n.topic,
        &s,
        &toml_with(&n, &api.url(), FAST),
        &[("RUST_LOG", "info")],
    );
    wait_until(Duration::from_secs(60), "every event delivered", || {
        api.audit().delivered.len() == 50
    })
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    // The check runs beside the start: wait for its line.
    let warning = "retention.ms is shorter than the longest time";
    wait_until(Duration::from_secs(60), "the retention warning", || {
        c.log_text().contains(warning)
    })
    .await;
    c.terminate(Duration::from_secs(30)).await;
    let log = strip_ansi(&c.log_text());
    let warned = log
        .lines()
        .find(|l| l.contains(warning))
        .unwrap_or_else(|| panic!("no retention warning: {}", group_log_excerpt(&c.log)));
    assert!(
        warned.contains("retention_ms=1500") && warned.contains("horizon_ms=2000"),
        "{warned}"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("marker at the DLQ end", &rep);
}

/// A missing DLQ or parking topic is refused at start, naming it (the producer
/// never has the broker create one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dlq_or_parking_topic_is_refused_at_start() {
    let s = services();
    for missing in ["DLQ", "parking"] {
        let n = Names::new("missing", 1);
        let mut t = vec![(n.topic.as_str(), 1)];
        let absent = if missing == "DLQ" {
            t.push((n.parking.as_str(), 1));
            n.dlq.clone()
        } else {
            t.push((n.dlq.as_str(), 1));
            n.parking.clone()
        };
        courier_standins::admin::create_topics(&s.brokers, &t)
            .await
            .unwrap();
        let mut c = Courier::start(&n.topic, &s, &base_toml(&n, "http://127.0.0.1:9/"));
        let code = c.wait_exit(Duration::from_secs(60)).await;
        assert!(
            matches!(code, Some(c) if c != 0),
            "{missing}: exit {code:?}"
        );
        let log = strip_ansi(&c.log_text());
        assert!(
            log.contains(&format!("{missing} topic `{absent}` does not exist")),
            "{missing}: {log}"
        );
        let exists = courier::kafka::admin::snapshot(&s.brokers, &absent).unwrap();
        assert!(exists.is_empty(), "{absent} was not created");
    }
}

/// A compacted DLQ or parking lot is refused at start, naming it and the
/// remedy: compaction would delete every event but the latest of its key
/// before it is retried or inspected (and a keyless one cannot be written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_dlq_or_parking_topic_is_refused_at_start() {
    let s = services();
    for (role, policy) in [("DLQ", "compact"), ("parking", "compact,delete")] {
        let n = Names::new("compacted", 1);
        n.create(&s, true).await;
        let topic = if role == "DLQ" { &n.dlq } else { &n.parking };
        courier_standins::admin::alter_topic_config(
            &s.brokers,
            topic,
            &[("cleanup.policy", policy)],
        )
        .await
        .expect("compact it");
        let mut c = Courier::start(&n.topic, &s, &base_toml(&n, "http://127.0.0.1:9/"));
        let code = c.wait_exit(Duration::from_secs(60)).await;
        assert!(matches!(code, Some(c) if c != 0), "{role}: exit {code:?}");
        let log = strip_ansi(&c.log_text());
        assert!(
            log.contains(&format!(
                "{role} topic `{topic}` has cleanup.policy={policy}"
            )) && log.contains("set cleanup.policy=delete"),
            "{role}: {log}"
        );
    }
}

/// Partitions added to the main topic of a running Courier: the group
/// rebalances, and `range` would pair main p with no DLQ partition. Courier
/// refuses the assignment and exits for a restart (which refuses to start
/// until the DLQ has as many partitions); main p and DLQ p are never split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_while_running_are_refused() {
    let s = services();
    let n = Names::new("grown", 2);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let spec = Spec {
        count: 100,
        keys: 10,
        id_prefix: "grown".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url());
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    courier_standins::admin::add_partitions(&s.brokers, &n.topic, 3)
        .await
        .unwrap();
    let code = c.wait_exit(Duration::from_secs(90)).await;
    let log = strip_ansi(&c.log_text());
    assert_eq!(
        code,
        Some(70),
        "exit for a restart: {}",
        group_log_excerpt(&c.log)
    );
    assert!(
        log.contains("has 2 partitions but") && log.contains("has 3"),
        "the mismatch named: {}",
        group_log_excerpt(&c.log)
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("partitions added", &rep);
    // A restart refuses to start until the counts match.
    let mut again = Courier::start(&n.topic, &s, &toml);
    let code = again.wait_exit(Duration::from_secs(60)).await;
    assert!(matches!(code, Some(c) if c != 0), "restart: exit {code:?}");
    assert!(strip_ansi(&again.log_text()).contains("has 2 partitions but"));
}

/// An invalid record takes its produce batch down with it: on a compacted DLQ
/// the broker refuses a keyless record, and every record sharing its batch
/// comes back INVALID_RECORD too. The operator compacts the DLQ of a running
/// Courier; forty keyed events and one keyless one fail together and go to
/// the DLQ at once: the keyless one is parked (`dlq_invalid_record`), each
/// keyed one reaches the DLQ (it is written again alone before its refusal
/// counts). Before, all forty-one were parked. Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_refused_with_an_invalid_one_in_its_batch_is_written_alone() {
    use courier_standins::audit::Produced;
    use courier_standins::loadgen::event_json;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    const EVENTS: usize = 41;
    const KEYLESS: usize = 20;
    let s = services();
    let n = Names::new("dlq-batchmate", 1);
    n.create(&s, true).await;
    let api = api_failing_every((0..EVENTS).map(|i| loadgen::event_id("batchmate", i))).await;
    let mut c = Courier::start(&n.topic, &s, &all_failing_toml(&n, &api.url()));
    wait_until(Duration::from_secs(60), "assigned", || {
        block(c.metric("courier_assigned_partitions")) > 0.0
    })
    .await;
    // Compacted while running (a Courier that starts refuses it:
    // `a_compacted_dlq_or_parking_topic_is_refused_at_start`).
    courier_standins::admin::alter_topic_config(
        &s.brokers,
        &n.dlq,
        &[("cleanup.policy", "compact")],
    )
    .await
    .expect("compact the DLQ");
    wait_topic_setting(&s, &n.dlq, "cleanup.policy", "compact").await;
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.brokers)
        .create()
        .expect("producer");
    let mut produced = Produced::default();
    for i in 0..EVENTS {
        let id = loadgen::event_id("batchmate", i);
        let key = format!("k{i}");
        let v = event_json(&id, "profile.updated", &key, i, 300);
        let rec = FutureRecord::to(&n.topic).payload(&v).partition(0);
        let rec = if i == KEYLESS { rec } else { rec.key(&key) };
        let d = producer
            .send(rec, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        produced.ids.push(id);
        produced.offsets.push((d.partition, d.offset));
    }
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    println!("[batchmate] {rep}");
    assert_no_loss("batchmate", &rep);
    let parked: Vec<String> = envelopes(&s, &n.parking)
        .into_iter()
        .filter_map(|e| e.event_id)
        .collect();
    assert_eq!(
        parked,
        vec![loadgen::event_id("batchmate", KEYLESS)],
        "only the keyless event is parked"
    );
    assert_eq!(
        rep.parked_by_reason.get("dlq_invalid_record"),
        Some(&1),
        "{:?}",
        rep.parked_by_reason
    );
    assert_eq!(rep.in_dlq, EVENTS - 1, "every keyed event is in the DLQ");
    let log = strip_ansi(&c.log_text());
    assert!(
        log.contains("written alone"),
        "a keyed event was refused with the keyless one and written alone"
    );
}

/// A Courier whose every event fails at once and goes to the DLQ together:
/// its DLQ producer lingers 2 s, so writes made within well under that share a
/// produce batch; the breaker and the DLQ flood guard are off, or the failures
/// would count as systemic and hold the events instead.
fn all_failing_toml(n: &Names, api_url: &str) -> String {
    let degraded = "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"\n\
                    breaker_consecutive_failures = 0\nbreaker_min_calls = 1000000\n\
                    flood_dlq_per_sec = 0";
    let toml = toml_with(n, api_url, degraded).replacen(
        "[kafka]\n",
        "[kafka]\nproperties = { \"linger.ms\" = \"2000\" }\n",
        1,
    );
    assert!(toml.contains("linger.ms"), "{toml}");
    toml
}

/// The API stand-in answering 503 to every try of each of `ids`.
async fn api_failing_every(ids: impl Iterator<Item = String>) -> SinkHandle {
    let rule = FailRule {
        status: 503,
        times: None,
        retry_after_s: None,
    };
    let fail_ids: HashMap<String, FailRule> = ids.map(|id| (id, rule.clone())).collect();
    SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids,
            ..Behaviour::default()
        },
    )
    .await
    .unwrap()
}

/// Waits until the broker reports `key = value` for `topic` (an altered config
/// applied).
async fn wait_topic_setting(s: &Services, topic: &str, key: &str, value: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("{topic}: {key} = {value}"),
        || {
            let got = block(courier::kafka::admin::topic_setting(
                s.brokers.as_str(),
                &[topic],
                key,
            ));
            got.ok().and_then(|m| m.get(topic).cloned()).as_deref() == Some(value)
        },
    )
    .await;
}

/// A produce batch larger than the DLQ's `max.message.bytes` is refused whole
/// (MESSAGE_TOO_LARGE for every record), though each of its records fits: with
/// a DLQ of 4,000 bytes, thirty events of about 1 KB envelopes failing at once
/// all reach the DLQ, none is parked `dlq_too_large` — whether the limit was
/// there at start (the producer's batches are kept under it) or lowered by the
/// operator while Courier runs (each refused record is written again alone).
/// Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_that_fit_the_dlq_are_not_refused_for_their_batch() {
    for lowered_while_running in [false, true] {
        batch_over_the_dlq_limit(lowered_while_running).await;
    }
}

async fn batch_over_the_dlq_limit(lowered_while_running: bool) {
    const EVENTS: usize = 30;
    let s = services();
    let n = Names::new("dlq-batchsize", 1);
    n.create(&s, true).await;
    let small_dlq = || dlq_of_4000_bytes(&s, &n);
    if !lowered_while_running {
        small_dlq().await;
    }
    let spec = Spec {
        count: EVENTS,
        keys: EVENTS,
        id_prefix: "batchsize".into(),
        ..Spec::default()
    };
    let api = api_failing_every((0..EVENTS).map(|i| loadgen::event_id("batchsize", i))).await;
    // Uncompressed: zstd would fold thirty similar envelopes below the limit.
    let mut c = start_uncompressed_and_assigned(&s, &n, &api).await;
    if lowered_while_running {
        small_dlq().await;
    }
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    println!("[batchsize, lowered while running: {lowered_while_running}] {rep}");
    assert_no_loss("batchsize", &rep);
    assert_eq!(rep.parked, 0, "{:?}", rep.parked_by_reason);
    assert_eq!(rep.in_dlq, EVENTS);
    let sizes: Vec<usize> = courier_standins::admin::read_all(&s.brokers, &n.dlq)
        .unwrap()
        .iter()
        .map(|r| r.payload.as_ref().map_or(0, Vec::len))
        .collect();
    assert!(
        sizes.iter().all(|&b| b > 500 && b < 4_000),
        "each envelope fits alone, and several exceed the limit together: {sizes:?}"
    );
    let alone = strip_ansi(&c.log_text()).matches("written alone").count();
    if lowered_while_running {
        assert!(
            alone > 0,
            "the records of the refused batch were written alone"
        );
    } else {
        assert_eq!(alone, 0, "no batch above the limit at start");
    }
}

/// The DLQ's `max.message.bytes` set to 4,000, and applied.
async fn dlq_of_4000_bytes(s: &Services, n: &Names) {
    courier_standins::admin::alter_topic_config(
        &s.brokers,
        &n.dlq,
        &[("max.message.bytes", "4000")],
    )
    .await
    .expect("a small DLQ");
    wait_topic_setting(s, &n.dlq, "max.message.bytes", "4000").await;
}

/// Courier over an API failing every event, its DLQ producer uncompressed,
/// once it holds its partitions.
async fn start_uncompressed_and_assigned(s: &Services, n: &Names, api: &SinkHandle) -> Courier {
    let toml = all_failing_toml(n, &api.url()).replacen(
        "[kafka]\n",
        "[kafka]\nproducer_compression = \"none\"\n",
        1,
    );
    let c = Courier::start(&n.topic, s, &toml);
    wait_until(Duration::from_secs(60), "assigned", || {
        block(c.metric("courier_assigned_partitions")) > 0.0
    })
    .await;
    c
}

/// An operator lowers the DLQ's `max.message.bytes` (to 4,000) while Courier
/// runs, below the envelopes of the events about to fail (~10 KB payloads).
/// The broker refuses each record, alone too; Courier reads the limit again
/// and writes a reference envelope (the payload left in the origin topic)
/// that fits the new one. Before: each was parked `dlq_too_large` (fitted to
/// the limit read at start). Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_over_a_limit_lowered_while_running_goes_to_the_dlq_as_a_reference() {
    const EVENTS: usize = 10;
    let s = services();
    let n = Names::new("dlq-lowered", 1);
    n.create(&s, true).await;
    let spec = Spec {
        count: EVENTS,
        keys: EVENTS,
        id_prefix: "lowered".into(),
        event_bytes: 10_000,
        ..Spec::default()
    };
    let api = api_failing_every((0..EVENTS).map(|i| loadgen::event_id("lowered", i))).await;
    // Uncompressed: zstd would fold the load generator's payload below 4,000.
    let mut c = start_uncompressed_and_assigned(&s, &n, &api).await;
    dlq_of_4000_bytes(&s, &n).await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    println!("[lowered while running] {rep}");
    assert_no_loss("lowered while running", &rep);
    assert_eq!(rep.parked, 0, "{:?}", rep.parked_by_reason);
    assert_eq!(rep.in_dlq, EVENTS);
    let dlq = envelopes(&s, &n.dlq);
    assert!(
        dlq.iter().all(|e| e.omitted.is_some()),
        "each a reference to its origin record"
    );
    let sizes: Vec<usize> = courier_standins::admin::read_all(&s.brokers, &n.dlq)
        .unwrap()
        .iter()
        .map(|r| r.payload.as_ref().map_or(0, Vec::len))
        .collect();
    assert!(sizes.iter().all(|&b| b < 4_000), "{sizes:?}");
    assert!(
        strip_ansi(&c.log_text()).contains("lowered while running"),
        "the new limit is logged"
    );
}

/// A DLQ outage a real broker holds: with `message.timestamp.before.max.ms` 0 it
/// answers a write stamped earlier than it arrives INVALID_TIMESTAMP, which
/// Courier retries; `accept` lifts the limit. The producer's 5 ms linger makes
/// every record older than that on arrival. Two such records in one produce
/// batch are both answered INVALID_RECORD instead; Courier writes each again
/// alone and gets INVALID_TIMESTAMP (seen before that: both parked, the offsets
/// moved on). (`min.insync.replicas` above the replication factor would be a
/// cleaner outage, but the broker caps it at the replica count.)
async fn dlq_accepts_writes(s: &Services, n: &Names, accept: bool) {
    let limit = if accept { "9223372036854775807" } else { "0" };
    courier_standins::admin::alter_topic_config(
        &s.brokers,
        &n.dlq,
        &[("message.timestamp.before.max.ms", limit)],
    )
    .await
    .expect("set the DLQ's timestamp limit");
}
