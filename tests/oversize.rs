//! Events near the size limit, against the real broker with its default topic
//! settings (`max.message.bytes` ≈ 1 MB): a 900 KB event the API refuses (400)
//! and one it keeps failing (503) must not stop their partition. The refused
//! one is parked and its key goes on; the failing one goes to the DLQ and the
//! later events of its key follow it there (I39: never delivered before it).
//! Their envelopes (base64 would make them ~1.2 MB) carry a reference to the
//! origin record instead of the payload, `courier dlq inspect` shows it; the
//! drain cannot send such an envelope and parks it, which frees its key; and
//! `courier dlq replay` puts the original bytes back. Ends with the audit.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::time::Duration;

const BIG: usize = 900 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_events_reach_dlq_and_parking_as_references_and_replay() {
    let s = services();
    let n = Names::new("big", 3);
    n.create(&s, true).await;
    let producer = loadgen::producer(&s.brokers).unwrap();
    let spec = Spec {
        count: 5_000,
        keys: 50,
        id_prefix: "big".into(),
        ..Spec::default()
    };
    let mut produced = loadgen::produce_with(&producer, &n.topic, &spec, 0)
        .await
        .unwrap();
    // Two big events on keys the small events use, between two halves of them:
    // in `key` mode the later small events of these keys wait behind them, and
    // those of the failing one's key follow it into the DLQ.
    let big_ids = ["big-refused".to_string(), "big-failing".to_string()];
    for (i, id) in big_ids.iter().enumerate() {
        let key = loadgen::key_of(i + 1, spec.keys);
        let payload = loadgen::event_json(id, "order.big", &key, 0, BIG);
        let delivery = producer
            .send(
                FutureRecord::to(&n.topic).key(&key).payload(&payload),
                Timeout::After(Duration::from_secs(30)),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("a 900 KB event fits the default limits");
        produced.ids.push(id.clone());
        produced.offsets.push((delivery.partition, delivery.offset));
    }
    let more = loadgen::produce_with(&producer, &n.topic, &spec, 5_000)
        .await
        .unwrap();
    produced.ids.extend(more.ids);
    produced.offsets.extend(more.offsets);

    let rule = |status| FailRule {
        status,
        times: None,
        retry_after_s: None,
    };
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids: HashMap::from([
                (big_ids[0].clone(), rule(400)),
                (big_ids[1].clone(), rule(503)),
            ]),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    // A short DLQ backoff: the failing event comes due in the drain at once,
    // which cannot send an envelope without its payload and parks it
    // (`unreadable_envelope`); its key's followers are then redelivered.
    let toml = toml_with(
        &n,
        &api.url(),
        "dlq_backoff_base = \"200ms\"\ndlq_backoff_cap = \"1s\"",
    );
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    // Main p committed to its end does not mean drained: the failing key's
    // followers are redelivered from the DLQ once its envelope is parked
    // (seen in CI under load: 28 still in the DLQ at the audit).
    wait_until(
        Duration::from_secs(120),
        "every small event delivered, the followers from the DLQ too",
        || api.audit().delivered.len() >= 10_000,
    )
    .await;
    let failing_key = loadgen::key_of(2, spec.keys);
    let followers = (5_000..10_000)
        .filter(|&i| loadgen::key_of(i, spec.keys) == failing_key)
        .count();
    assert!(followers > 0, "the second half uses the failing key");
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("oversize", &rep);
    assert_eq!(rep.delivered, 10_000, "every small event delivered: {rep}");
    assert_eq!((rep.parked, rep.in_dlq), (2, 0), "{rep}");
    assert!(
        c.metric("courier_envelope_payload_omitted_total").await >= 2.0,
        "both envelopes written as references"
    );
    // The failing key's later events followed it into the DLQ (I39) and were
    // delivered from there, in their order.
    let a = api.audit();
    assert_eq!(a.stale_writes, 0, "{:?}", a.stale_write_examples);

    // `dlq inspect` finds them, with the reference: the parking lot holds both
    // (the refused one, and the failing one the drain could not send); the DLQ
    // still holds the failing one's envelope with its reason, and those of its
    // followers.
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();
    let sample_of = |out: &str, id: &str| -> serde_json::Value {
        let summary: serde_json::Value = serde_json::from_str(out).expect("JSON");
        summary["samples"]
            .as_array()
            .and_then(|s| s.iter().find(|e| e["event_id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("{id} among the samples: {out}"))
    };
    for (args, omitted, samples) in [
        (
            vec!["dlq", "inspect", "--parking", "--json"],
            2,
            vec![
                (&big_ids[0], "http_400"),
                (&big_ids[1], "unreadable_envelope"),
            ],
        ),
        (
            vec!["dlq", "inspect", "--samples", "1000", "--json"],
            1,
            vec![(&big_ids[1], "http_503")],
        ),
    ] {
        let (code, out) = courier_cli(&s, &cfg, &args);
        assert_eq!(code, 0, "{out}");
        let summary: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(summary["payload_omitted"], omitted, "{out}");
        for (id, reason) in samples {
            let sample = sample_of(&out, id);
            assert_eq!(sample["last_error"]["reason"], reason, "{out}");
            assert_eq!(sample["omitted"]["payload_omitted"], true, "{out}");
            assert_eq!(sample["omitted"]["payload_bytes"], BIG, "{out}");
            assert_eq!(sample["payload"], "", "{out}");
            assert_eq!(sample["origin"]["topic"], n.topic.as_str(), "{out}");
        }
        let (code, table) = courier_cli(&s, &cfg, &args[..args.len() - 1]);
        assert_eq!(code, 0, "{table}");
        assert!(table.contains("payload omitted: 921600 bytes"), "{table}");
    }

    // The API is fixed; both are replayed from the parking lot with their
    // original bytes, read back from the main topic.
    api.set_behaviour(Behaviour::default());
    api.set_record_bodies(true);
    let (code, out) = courier_cli(&s, &cfg, &["dlq", "replay", "--yes", "--rate", "50"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("replayed 2 events (2 with the payload read back"),
        "{out}"
    );
    wait_until(
        Duration::from_secs(60),
        "replayed big events delivered",
        || {
            let a = api.audit();
            big_ids.iter().all(|id| a.delivered.contains_key(id))
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let a = api.audit();
    for id in &big_ids {
        assert_eq!(a.delivered.get(id), Some(&1), "{id} delivered once");
        let body = a
            .bodies_sample
            .get(id)
            .expect("the stand-in keeps the body");
        let original: serde_json::Value = serde_json::from_slice(&loadgen::event_json(
            id,
            "order.big",
            &loadgen::key_of(if id == &big_ids[0] { 1 } else { 2 }, spec.keys),
            0,
            BIG,
        ))
        .unwrap();
        assert_eq!(body, &original, "{id}: the original event, unchanged");
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("oversize after replay", &rep);
    assert_eq!(rep.delivered, 10_002, "{rep}");
}

/// Sets `max.message.bytes` of existing topics (the broker's own check, not
/// Courier's estimate, is what refuses then).
async fn set_max_message_bytes(s: &Services, topics: &[&str], bytes: usize) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.brokers)
        .create()
        .unwrap();
    let value = bytes.to_string();
    let alters: Vec<AlterConfig> = topics
        .iter()
        .map(|t| AlterConfig::new(ResourceSpecifier::Topic(t)).set("max.message.bytes", &value))
        .collect();
    for r in admin
        .alter_configs(alters.iter(), &AdminOptions::new())
        .await
        .unwrap()
    {
        r.expect("alter max.message.bytes");
    }
}

/// A DLQ that refuses a record for good (here: smaller than any envelope) parks
/// the event with the refusal as its reason; a parking lot that refuses makes
/// Courier name the event and exit non-zero, with the event's offset left
/// uncommitted — never a silent stall. Fixed and restarted, it parks the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_park_or_stop_never_stall() {
    let s = services();
    let n = Names::new("refused", 2);
    n.create(&s, true).await;
    set_max_message_bytes(&s, &[&n.dlq], 600).await;
    let spec = Spec {
        count: 400,
        keys: 20,
        id_prefix: "refused".into(),
        ..Spec::default()
    };
    let failing = loadgen::event_id("refused", 17);
    let rule = |status| FailRule {
        status,
        times: None,
        retry_after_s: None,
    };
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids: HashMap::from([(failing.clone(), rule(503))]),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url());
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("dlq refuses", &rep);
    assert_eq!(rep.parked_by_reason.get("dlq_too_large"), Some(&1), "{rep}");
    assert!(c.metric("courier_produce_refused_total").await >= 1.0);
    c.terminate(Duration::from_secs(30)).await;

    // Now the parking lot refuses too, and an event is refused by the API.
    set_max_message_bytes(&s, &[&n.parking], 600).await;
    let refused = loadgen::event_id("refused", 400 + 3);
    api.set_behaviour(Behaviour {
        fail_ids: HashMap::from([(refused.clone(), rule(400))]),
        ..Behaviour::default()
    });
    let producer = loadgen::producer(&s.brokers).unwrap();
    let more = loadgen::produce_with(
        &producer,
        &n.topic,
        &Spec {
            count: 100,
            ..spec.clone()
        },
        400,
    )
    .await
    .unwrap();
    let at = more.offsets[more.ids.iter().position(|i| *i == refused).unwrap()];
    let mut c = Courier::start(&format!("{}-2", n.topic), &s, &toml);
    let code = c.wait_exit(Duration::from_secs(60)).await;
    assert!(
        matches!(code, Some(c) if c != 0),
        "exits non-zero: {code:?}"
    );
    let log = c.log_text();
    assert!(
        log.contains(&format!("refuses event {refused}")) && log.contains("too_large"),
        "the log names the event and why"
    );
    let committed = n.committed(&s);
    assert!(
        committed[at.0 as usize] <= at.1,
        "the refused event's offset is not committed: {committed:?} vs {at:?}"
    );

    // Fixed: the next run parks it and finishes.
    set_max_message_bytes(&s, &[&n.parking], 1_048_588).await;
    let mut c = Courier::start(&format!("{}-3", n.topic), &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    c.terminate(Duration::from_secs(30)).await;
    let mut all = produced.clone();
    all.ids.extend(more.ids);
    all.offsets.extend(more.offsets);
    let rep = n.audit(&s, &all, &api);
    assert_no_loss("parking refused, then fixed", &rep);
    assert_eq!(rep.parked_by_reason.get("http_400"), Some(&1), "{rep}");
}

/// `pipeline.oversize = "refuse"` with a default topic (1 MB) and the default
/// `max_event_bytes` (1 MiB, ~1.4 MB as an envelope): Courier refuses to start,
/// naming both numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_refuse_stops_at_start_naming_the_numbers() {
    let s = services();
    let n = Names::new("oversize-refuse", 1);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let toml =
        base_toml(&n, &api.url()).replace("[pipeline]\n", "[pipeline]\noversize = \"refuse\"\n");
    let mut c = Courier::start(&n.topic, &s, &toml);
    assert_eq!(c.wait_exit(Duration::from_secs(30)).await, Some(2));
    let log = c.log_text();
    assert!(
        log.contains("pipeline.max_event_bytes (1048576 bytes)")
            && log.contains("max.message.bytes of 1048588"),
        "{log}"
    );
}
