//! Issue 16 item 3: input formats end to end against the real broker. A topic
//! of binary-mode CloudEvents (attributes in Kafka headers, produced with
//! rdkafka's `OwnedHeaders`) mixed with structured ones, and a topic of plain
//! JSON read with JSON pointers (ids, the coordinates fallback, the entity key
//! used for ordering and enrichment). In each, one event is answered 503 until
//! it goes to the DLQ and is delivered by the drain, which decodes it again
//! from the envelope (payload, origin headers, origin coordinates). Each ends
//! with the audit: lost 0, every valid event delivered.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// One record to produce.
struct Out {
    partition: Option<i32>,
    key: Option<String>,
    value: Option<Vec<u8>>,
    headers: Vec<(&'static str, Vec<u8>)>,
    /// The id the audit expects (`None`: bad input, parked by coordinates).
    id: Option<String>,
}

/// Produces in order, each acknowledged; returns what the audit needs and each
/// record's (partition, offset).
async fn produce(p: &FutureProducer, topic: &str, out: &[Out]) -> (Produced, Vec<(i32, i64)>) {
    let mut produced = Produced::default();
    let mut at = Vec::new();
    for o in out {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &o.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v),
            });
        }
        let mut rec: FutureRecord<'_, String, Vec<u8>> = FutureRecord::to(topic).headers(headers);
        if let Some(k) = &o.key {
            rec = rec.key(k);
        }
        if let Some(v) = &o.value {
            rec = rec.payload(v);
        }
        if let Some(part) = o.partition {
            rec = rec.partition(part);
        }
        let d = p
            .send(rec, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        at.push((d.partition, d.offset));
        match &o.id {
            Some(id) => {
                produced.ids.push(id.clone());
                produced.offsets.push((d.partition, d.offset));
            }
            None => produced.poison.push((d.partition, d.offset)),
        }
    }
    (produced, at)
}

/// The API stand-in, recording bodies, answering `id` 503 three times: the
/// main path's tries fail, the event goes to the DLQ, and the drain (a fourth
/// try) delivers it.
async fn api_failing_three_times(id: &str) -> SinkHandle {
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    api.set_record_bodies(true);
    let rule = FailRule {
        status: 503,
        times: Some(3),
        retry_after_s: None,
    };
    api.update_behaviour(|b| {
        b.fail_ids.insert(id.to_string(), rule);
    });
    api
}

/// `[degraded]` for these tests: a DLQ entry is drained back within a second.
fn config(n: &Names, api_url: &str, extra: &str) -> String {
    toml_with(n, api_url, FAST) + extra
}

/// Waits until the main topic is committed to its end and `ids` were all
/// delivered (the DLQ'd one comes back through the drain), then stops Courier
/// and runs the audit.
async fn finish(
    name: &str,
    s: &Services,
    n: &Names,
    c: &mut Courier,
    api: &SinkHandle,
    produced: &Produced,
) {
    n.wait_committed_to_end(s, Duration::from_secs(90)).await;
    wait_until(
        Duration::from_secs(60),
        "every valid event is delivered",
        || {
            let a = api.audit();
            produced.ids.iter().all(|id| a.delivered.contains_key(id))
        },
    )
    .await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(s, produced, api);
    assert_no_loss(name, &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
    assert_eq!(rep.parked, produced.poison.len(), "{rep}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_mode_cloudevents_from_kafka_headers_are_delivered() {
    let s = services();
    let n = Names::new("input-binary", 3);
    n.create(&s, true).await;
    let retried = "bin-7".to_string();
    let api = api_failing_three_times(&retried).await;
    let binary = |i: usize, content_type: &str, value: Vec<u8>| Out {
        partition: None,
        key: Some(format!("key-{}", i % 20)),
        value: Some(value),
        headers: vec![
            ("ce_specversion", b"1.0".to_vec()),
            ("ce_id", format!("bin-{i}").into_bytes()),
            ("ce_source", b"/test/input".to_vec()),
            ("ce_type", b"order.paid".to_vec()),
            ("ce_entityversion", i.to_string().into_bytes()),
            (
                "ce_traceparent",
                b"00-0af7651916cd43dd-b7ad6b7169203331-01".to_vec(),
            ),
            ("content-type", content_type.as_bytes().to_vec()),
        ],
        id: Some(format!("bin-{i}")),
    };
    let mut out = Vec::new();
    for i in 0..300 {
        out.push(match i % 50 {
            // Structured mode, detected per record (no `ce_specversion` header).
            10 => Out {
                partition: None,
                key: Some(format!("key-{}", i % 20)),
                value: Some(courier_standins::loadgen::event_json(
                    &format!("structured-{i}"),
                    "t",
                    "k",
                    i,
                    300,
                )),
                headers: vec![("content-type", b"application/cloudevents+json".to_vec())],
                id: Some(format!("structured-{i}")),
            },
            // Data that is not JSON: posted as `data_base64`.
            20 => binary(
                i,
                "application/octet-stream",
                vec![0, 159, 146, 150, i as u8],
            ),
            // No `ce_id`: parked `missing_attribute`.
            30 => {
                let mut o = binary(i, "application/json", b"{}".to_vec());
                o.headers.retain(|(k, _)| *k != "ce_id");
                o.id = None;
                o
            }
            _ => binary(
                i,
                "application/json",
                format!("{{\"n\":{i},\"big\":123456789012345678901234567890}}").into_bytes(),
            ),
        });
    }
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    let (produced, _) = produce(&producer, &n.topic, &out).await;
    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), ""));
    finish("binary", &s, &n, &mut c, &api, &produced).await;

    let audit = api.audit();
    assert!(
        audit.attempts[&retried] >= 4,
        "{retried} went through the DLQ: {} attempts",
        audit.attempts[&retried]
    );
    for id in ["bin-1", "bin-7", "bin-299"] {
        let body = &audit.bodies_sample[id];
        let i: u64 = id[4..].parse().unwrap();
        assert_eq!(body["specversion"], "1.0", "{body}");
        assert_eq!(body["type"], "order.paid", "{body}");
        assert_eq!(body["source"], "/test/input", "{body}");
        assert_eq!(body["entityversion"], i, "{body}");
        assert_eq!(
            body["traceparent"],
            "00-0af7651916cd43dd-b7ad6b7169203331-01"
        );
        assert_eq!(body["data"]["n"], i, "{body}");
    }
    assert_eq!(audit.bodies_sample["bin-70"]["data_base64"], "AJ+SlkY=");
    assert_eq!(audit.bodies_sample["structured-60"]["id"], "structured-60");
    let parked = envelopes(&s, &n.parking);
    assert_eq!(parked.len(), 6, "one bad record in every 50");
    assert!(parked
        .iter()
        .all(|e| e.last_error.reason == "missing_attribute"));
    // The parked envelope keeps the record's headers: a replay writes them back.
    assert!(parked[0].origin_headers.iter().any(|h| h.name == "ce_type"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_json_read_with_pointers_is_delivered_and_enriched_by_its_entity_key() {
    let s = services();
    let n = Names::new("input-json", 2);
    n.create(&s, true).await;
    let rows: Vec<(String, serde_json::Value)> = (0..10)
        .map(|k| {
            (
                format!("c-{k}"),
                serde_json::json!({ "tier": format!("tier-{k}") }),
            )
        })
        .collect();
    let table = pg_table(&s, &n, "customers", &rows).await;

    // Records go to explicit partitions in order, so on this fresh topic the
    // j-th record of partition p sits at offset j: the id of an event without
    // one (the coordinates fallback) is known before it is produced, and the
    // body carries it as its top-level `id` (the API stand-in checks that the
    // `Idempotency-Key` equals it).
    let coords = |p: i32, j: usize| format!("{}-{p}-{j}", n.topic);
    let mut out = Vec::new();
    // (partition, customer, seq) of each valid event, by id.
    let mut meta: HashMap<String, (i32, String, usize)> = HashMap::new();
    for p in 0..2 {
        for j in 0..150 {
            let customer = if (p, j) == (1, 76) {
                "c-99".to_string() // its own lane: the DLQ'd one
            } else {
                format!("c-{}", j % 10)
            };
            let (id, value) = match j % 6 {
                // No id at the pointer: `<topic>-<partition>-<offset>`.
                4 => {
                    let id = coords(p, j);
                    let v =
                        serde_json::json!({"id": id, "order": {"customer": customer}, "seq": j});
                    (Some(id), v.to_string())
                }
                // An integer id.
                5 => {
                    let id = format!("{}", 1_000_000 + p as usize * 1_000 + j);
                    let v = serde_json::json!({"id": id, "order": {"id": id.parse::<u64>().unwrap(), "customer": customer}, "kind": "order.created", "seq": j});
                    (Some(id), v.to_string())
                }
                // Not an object: parked `not_an_object`.
                0 if j == 30 => (None, "[1, 2, 3]".to_string()),
                _ => {
                    let id = format!("ord-{p}-{j}");
                    let v = serde_json::json!({"id": id, "order": {"id": id, "customer": customer}, "kind": "order.created", "seq": j});
                    (Some(id), v.to_string())
                }
            };
            if let Some(id) = &id {
                meta.insert(id.clone(), (p, customer.clone(), j));
            }
            out.push(Out {
                partition: Some(p),
                // No Kafka key: lanes and enrichment can only come from the body.
                key: None,
                value: Some(value.into_bytes()),
                headers: Vec::new(),
                id,
            });
        }
    }
    let retried = coords(1, 76);
    assert!(
        meta.contains_key(&retried),
        "a fallback id is the DLQ'd one"
    );
    let api = api_failing_three_times(&retried).await;
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    let (produced, at) = produce(&producer, &n.topic, &out).await;
    let mut next = [0i64; 2];
    for (p, o) in at {
        assert_eq!(
            o, next[p as usize],
            "offsets of a fresh partition are 0, 1, 2, …"
        );
        next[p as usize] += 1;
    }
    let pg_no_password = s.pg_url.replace("courier:courier@", "courier@");
    let extra = format!(
        r#"
[input]
format = "json"
id = "/order/id"
id_fallback = "coordinates"
type = "/kind"
default_type = "order.unknown"
key = "/order/customer"

[enrichment]
enabled = true
url = "{pg_no_password}"
query = "SELECT doc FROM {table} WHERE key = $1"
query_timeout = "2s"
"#
    );
    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), &extra));
    finish("json", &s, &n, &mut c, &api, &produced).await;

    let audit = api.audit();
    assert!(
        audit.attempts[&retried] >= 4,
        "{retried} went through the DLQ"
    );
    // Enriched by the customer read from the body (the records have no key).
    for (id, (_, customer, _)) in &meta {
        let body = &audit.bodies_sample[id];
        let want = if customer == "c-99" {
            serde_json::Value::Null // no row: delivered without enrichment
        } else {
            format!("tier-{}", &customer[2..]).into()
        };
        assert_eq!(body["enrichment"]["tier"], want, "body of {id}: {body}");
        assert_eq!(body["id"], id.as_str());
    }
    // Ordered by the customer: within a partition, a customer's events were
    // answered in their order.
    let mut last: BTreeMap<(i32, String), usize> = BTreeMap::new();
    for id in &audit.order {
        let (p, customer, seq) = &meta[id];
        if let Some(prev) = last.insert((*p, customer.clone()), *seq) {
            assert!(
                prev < *seq,
                "{customer} in partition {p}: {seq} after {prev}"
            );
        }
    }
    let parked = envelopes(&s, &n.parking);
    assert_eq!(parked.len(), 2);
    assert!(parked
        .iter()
        .all(|e| e.last_error.reason == "not_an_object"));
}

/// Issue 23 item 3: one record whose header *name* is not UTF-8, written by
/// kcat as the field writes it (`-H $'\xff=x'`; Kafka checks neither names nor
/// values), among 1,000 events. rdkafka's header accessor panicked on it in the
/// poll thread (seen before the fix: `courier-poll` panicked at rdkafka's
/// message.rs:284, the process stayed up and the wait for the commits to reach
/// the end timed out after 90 s). Now every event
/// is delivered; the hostile one goes through the DLQ (answered 503 three
/// times) and its envelope carries the name as its bytes; lost 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_name_that_is_not_utf8_stops_nothing() {
    let s = services();
    let n = Names::new("input-hdr", 3);
    n.create(&s, true).await;
    let hostile = "hdr-hostile".to_string();
    let api = api_failing_three_times(&hostile).await;
    let spec = |prefix: &str| courier_standins::loadgen::Spec {
        count: 500,
        keys: 50,
        id_prefix: prefix.into(),
        ..Default::default()
    };
    let mut produced = courier_standins::loadgen::produce(&s.brokers, &n.topic, &spec("hdr-a"))
        .await
        .unwrap();
    // The hostile record goes to partition 1, where the next offset is its.
    let at = courier::kafka::admin::end_offsets(&s.brokers, &n.topic, 3).unwrap()[1];
    let value = courier_standins::loadgen::event_json(&hostile, "profile.updated", "k", 0, 300);
    kcat_with_headers(&s, &n.topic, 1, &[b"\xff=x", b"tenant=\xfe\xfd"], &value);
    produced.ids.push(hostile.clone());
    produced.offsets.push((1, at));
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    let rest = courier_standins::loadgen::produce_with(&producer, &n.topic, &spec("hdr-b"), 0)
        .await
        .unwrap();
    produced.ids.extend(rest.ids);
    produced.offsets.extend(rest.offsets);
    assert_eq!(produced.ids.len(), 1_001);

    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), ""));
    // Counted once, as the record is begun.
    let counted = "courier_header_names_not_utf8_total";
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while c.metric(counted).await < 1.0 {
        assert!(std::time::Instant::now() < until, "{counted} never counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.metric(counted).await, 1.0);
    finish("hdr", &s, &n, &mut c, &api, &produced).await;
    assert!(api.audit().attempts[&hostile] >= 4, "through the DLQ");
    let log = c.log_text();
    assert!(!log.contains("panicked"), "no panic");
    // The envelope kept the name as its bytes, and the value as it was.
    let env = envelopes(&s, &n.dlq)
        .into_iter()
        .find(|e| e.event_id.as_deref() == Some(hostile.as_str()))
        .expect("the hostile event's envelope");
    let names: Vec<_> = env
        .origin_headers
        .iter()
        .map(|h| (h.name_of().as_bytes().to_vec(), h.value.clone()))
        .collect();
    assert_eq!(
        names,
        vec![
            (b"\xff".to_vec(), Some(b"x".to_vec())),
            (b"tenant".to_vec(), Some(b"\xfe\xfd".to_vec())),
        ]
    );
    // Replay writes the name back as its bytes.
    // The record has no key, so replay's producer picks any partition.
    let end = courier::kafka::admin::end_offsets(&s.brokers, &n.topic, 3).unwrap();
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, config(&n, &api.url(), "")).unwrap();
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &["dlq", "replay", "--from-dlq", "--id", &hostile, "--yes"],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        replayed_headers(&s, &n.topic, &end),
        vec![
            (b"\xff".to_vec(), Some(b"x".to_vec())),
            (b"tenant".to_vec(), Some(b"\xfe\xfd".to_vec())),
        ],
        "{out}"
    );
    // `courier dlq inspect`'s reader takes such a name in the topic's own
    // headers too (it read them with rdkafka's panicking accessor).
    kcat_with_headers(&s, &n.parking, 0, &[b"\xff=y"], b"not an envelope");
    let read = courier_standins::admin::read_all(&s.brokers, &n.parking).expect("read back");
    assert!(read
        .iter()
        .any(|r| r.headers.get("\u{fffd}").map(String::as_str) == Some("y")));
}

/// Produces one record with kcat to `partition`, with `-H name=value` headers
/// given as bytes (Kafka checks neither names nor values for UTF-8).
fn kcat_with_headers(s: &Services, topic: &str, partition: i32, headers: &[&[u8]], value: &[u8]) {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = std::process::Command::new("kcat");
    cmd.args([
        "-b",
        &s.brokers,
        "-t",
        topic,
        "-P",
        "-p",
        &partition.to_string(),
    ]);
    for h in headers {
        cmd.arg("-H").arg(std::ffi::OsStr::from_bytes(h));
    }
    let mut child = cmd
        // `cargo test` puts the build's own librdkafka on LD_LIBRARY_PATH.
        .env_remove("LD_LIBRARY_PATH")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kcat (installed by scripts/services.sh)");
    let written = child.stdin.take().expect("kcat stdin").write_all(value);
    let out = child.wait_with_output().expect("kcat");
    assert!(
        out.status.success() && written.is_ok(),
        "kcat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The headers of the first record written after `end` (one offset per
/// partition) that carries replay's `courier-replayed-from`, as bytes, without
/// that header.
fn replayed_headers(s: &Services, topic: &str, end: &[i64]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.brokers)
        .set("group.id", unique("replayed"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for (p, at) in end.iter().enumerate() {
        tpl.add_partition_offset(topic, p as i32, rdkafka::Offset::Offset(*at))
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < until,
            "no replayed record after {end:?}"
        );
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let headers = courier::kafka::record_headers(&m).unwrap_or_default();
        let replayed =
            |n: &courier::core::input::HeaderName| n.eq_ignore_ascii_case("courier-replayed-from");
        if !headers.iter().any(|(n, _)| replayed(n)) {
            panic!("record at {}/{} is not replay's", m.partition(), m.offset());
        }
        return headers
            .iter()
            .filter(|(n, _)| !replayed(n))
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_ref().map(|v| v.to_vec())))
            .collect();
    }
}
