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
    // The DLQ refuses every write (a record's timestamp may be 0 ms old:
    // INVALID_TIMESTAMP, which Courier retries) until the limit is lifted. (A
    // missing DLQ is refused at start:
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

    // Let the DLQ accept writes: the pending ones go through and the offsets
    // move to the end.
    dlq_accepts_writes(&s, &n, true).await;
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

/// The `courier_events_deleted_unread_total` series of `topic`, read from the
/// `/metrics` page (0 when absent).
async fn deleted_unread(c: &Courier, topic: &str) -> f64 {
    let page = courier::testkit::metrics_page(c.metrics_port, Some(Duration::from_secs(5)))
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
    let spec = |prefix: &str, count| Spec {
        count,
        keys: count,
        id_prefix: prefix.into(),
        ..Spec::default()
    };
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
    courier::kafka::admin::delete_records(&s.brokers, &n.topic, 0, 70)
        .await
        .unwrap();
    courier::kafka::admin::delete_records(&s.brokers, &n.dlq, 0, d + 3)
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
    courier::kafka::admin::delete_records(&s.brokers, &n.parking, 0, 2)
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
    let ends = courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, 1).unwrap();
    assert_eq!(ends, vec![2], "the aborted record and its marker");
    // A DLQ retention shorter than the policy's horizon (FAST: the default 5
    // rounds, back-off 300 ms doubling up to 2 s: an envelope waits up to 2 s)
    // is warned about at start.
    courier::kafka::admin::alter_topic_config(&s.brokers, &n.dlq, &[("retention.ms", "1500")])
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
        courier::kafka::admin::create_topics(&s.brokers, &t)
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
    courier::kafka::admin::add_partitions(&s.brokers, &n.topic, 3)
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

/// Review finding (issue 23): a DLQ write retried forever and never looked at
/// the completion token, so after a revoke during a DLQ outage it outlived the
/// partition while the new owner wrote the same envelope again (N envelopes for
/// one event after N rebalances). Instance A owns 4 partitions whose 8 events
/// answered 503 wait for the DLQ (a DLQ refusing every write);
/// instance B joins and takes 2 partitions: A abandons the writes of the
/// events it no longer owns at its next try, B writes them; once the DLQ is
/// back, each event has exactly one envelope, audit lost 0. (Before: A kept
/// retrying the moved events' writes after the revoke.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a DLQ outage a real broker holds for every write: a missing DLQ is now refused at start, and message.timestamp.before.max.ms=0 lets a write through when it reaches the broker within the millisecond it was stamped (seen: all 8 envelopes landed while the test waited, so the new owners had nothing to retry); run with --ignored"]
async fn a_revoke_during_a_dlq_outage_abandons_the_old_owners_writes() {
    let s = services();
    let n = Names::new("dlqrevoke", 4);
    // The DLQ refuses every write (INVALID_TIMESTAMP, retried by Courier)
    // until the limit is lifted (a missing DLQ is refused at start).
    n.create(&s, true).await;
    dlq_accepts_writes(&s, &n, false).await;
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
        )
        // One record per produce request: the broker answers a batch holding
        // several too-old records INVALID_RECORD (a refusal for good, so they
        // would be parked) instead of INVALID_TIMESTAMP (retried: the outage).
        + "\n[kafka.properties]\n\"batch.num.messages\" = \"1\"\n";
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
    dlq_accepts_writes(&s, &n, true).await;
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

/// A DLQ outage a real broker holds: with `message.timestamp.before.max.ms` 0 it
/// answers every write (stamped earlier than it arrives) INVALID_TIMESTAMP, which
/// Courier retries; `accept` lifts the limit.
async fn dlq_accepts_writes(s: &Services, n: &Names, accept: bool) {
    let limit = if accept { "9223372036854775807" } else { "0" };
    courier::kafka::admin::alter_topic_config(
        &s.brokers,
        &n.dlq,
        &[("message.timestamp.before.max.ms", limit)],
    )
    .await
    .expect("set the DLQ's timestamp limit");
}
