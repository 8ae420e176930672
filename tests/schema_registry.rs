//! Issue 27: Avro through a schema registry, end to end against the real
//! broker. Records are written by confluent-kafka's own `AvroSerializer`
//! (`scripts/pyschema.sh`; it registers each schema and frames each record),
//! so the bytes are what real producers write. The registry is a real one:
//! Apicurio Registry from Maven Central through its Confluent-compatible API
//! (`scripts/apicurio.sh`, `courier_testkit::schema_registry`), one instance per
//! test. Each test ends with the audit: lost 0.
//!
//! Seen failing with the partition's schema gate removed (every record handed
//! to the machine before its schema is at hand): the first test timed out
//! waiting for the deliveries (the events were parked `unknown_schema`), the
//! second found no partition waiting for the schema.

mod common;

use common::schema::*;
use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::{Behaviour, FailRule};
use courier_testkit::schema_registry::{produce, Registry, SlowProxy, Written};
use std::collections::HashMap;
use std::time::Duration;

const V1: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CREATED", "PAID"]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "placed_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "qty", "type": "int"},
    {"name": "tags", "type": {"type": "map", "values": "string"}},
    {"name": "raw", "type": "bytes"},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line",
      "fields": [{"name": "sku", "type": "string"}, {"name": "weight", "type": "double"}]}}}
  ]
}"#;

/// V1 with a field added (a default, so a backward-compatible new version).
fn v2() -> String {
    V1.replace(
        r#"{"name": "qty", "type": "int"},"#,
        r#"{"name": "qty", "type": "int"}, {"name": "channel", "type": "string", "default": "web"},"#,
    )
}

/// 2026-12-02T10:11:12.345Z.
const T0_MS: i64 = 1_796_206_272_345;

/// Keys per partition: record j of a partition has key `k{j % KEYS}`.
const KEYS: i64 = 5;

/// The partition and the index within it of an id `order` made.
fn partition_and_index(id: &str) -> (i32, i64) {
    let mut parts = id.trim_start_matches("ord-").split('-');
    let p = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("an order id");
    let j = parts
        .next()
        .and_then(|j| j.parse().ok())
        .expect("an order id");
    (p, j)
}

/// Record `j` of partition `p`: the value written and the JSON Courier must post.
fn order(p: i32, j: i64, v2: bool) -> (serde_json::Value, serde_json::Value) {
    let id = format!("ord-{p}-{j}{}", if v2 { "-v2" } else { "" });
    let cents = 100_000 * j + 7 * i64::from(p) + 5;
    let amount = format!("{}.{:02}", cents / 100, cents % 100);
    let placed = T0_MS + j * 1_000;
    let day = 20_789 + j;
    let note = (j % 3 != 0).then(|| format!("note {j}"));
    let kind = if j % 2 == 0 { "CREATED" } else { "PAID" };
    let mut written = serde_json::json!({
        "id": id, "kind": kind, "amount": amount, "placed": placed,
        "placed_us": placed * 1000 + 123, "day": day, "note": note, "qty": j,
        "tags": {"p": p.to_string(), "j": j.to_string()}, "raw": format!("{:02x}ff00", j % 256),
        "lines": [{"sku": format!("sku-{j}"), "weight": 0.5 + j as f64}],
    });
    let ts = chrono_like(placed);
    let mut expect = serde_json::json!({
        "id": id, "kind": kind, "amount": amount, "placed": ts,
        "placed_us": format!("{}123Z", ts.trim_end_matches('Z')),
        "day": chrono_like(day * 86_400_000)[..10].to_string(), "note": note, "qty": j,
        "tags": {"j": j.to_string(), "p": p.to_string()},
        "raw": base64_of(&[(j % 256) as u8, 0xff, 0x00]),
        "lines": [{"sku": format!("sku-{j}"), "weight": 0.5 + j as f64}],
    });
    if v2 {
        written["channel"] = "app".into();
        expect["channel"] = "app".into();
    }
    (written, expect)
}

/// RFC 3339 (UTC, milliseconds) of a Unix time in milliseconds at or after
/// 2026-12-02 (day 20,789), counted forward day by day: an independent
/// calendar, not Courier's.
fn chrono_like(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (mut y, mut m, mut d) = (2026, 12, 2);
    for _ in 20_789..days {
        let dim = match m {
            2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        d += 1;
        if d > dim {
            d = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ms.rem_euclid(1000)
    )
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A registry of its own for `n`, and `per_partition` V1 orders written through
/// it to each partition: the registry, what was produced, the bodies expected.
async fn registry_with_orders(
    py: &std::path::Path,
    s: &Services,
    n: &Names,
    per_partition: i64,
) -> (Registry, Produced, HashMap<String, serde_json::Value>) {
    let reg = registry_for(n).await;
    let (mut produced, mut expect) = (Produced::default(), HashMap::new());
    let batch = [(V1.to_string(), false, 0, per_partition)];
    write_orders(py, s, n, &reg, &batch, &mut produced, &mut expect).await;
    (reg, produced, expect)
}

/// Writes `batches` (schema text, per partition `count` records from
/// `order`) through the serializer; returns the expected bodies by id and
/// where each landed.
async fn write_orders(
    py: &std::path::Path,
    s: &Services,
    n: &Names,
    reg: &Registry,
    batches: &[(String, bool, i64, i64)],
    produced: &mut Produced,
    expect: &mut HashMap<String, serde_json::Value>,
) -> Vec<Written> {
    let mut spec_batches = Vec::new();
    let mut ids = Vec::new();
    for (schema, is_v2, from, to) in batches {
        let mut records = Vec::new();
        for p in 0..n.partitions {
            for j in *from..*to {
                let (written, body) = order(p, j, *is_v2);
                let id = written["id"].as_str().unwrap().to_string();
                expect.insert(id.clone(), body);
                ids.push(id);
                records.push(serde_json::json!({"partition": p, "key": format!("k{}", j % KEYS), "value": written}));
            }
        }
        spec_batches.push(serde_json::json!({"schema": schema, "records": records}));
    }
    let spec = serde_json::json!({
        "brokers": s.brokers, "registry": reg.url(), "topic": n.topic, "batches": spec_batches,
    });
    let log = log_dir().join(format!("{}-producer.log", n.topic));
    let written = produce(py, &spec, &log)
        .await
        .expect("the serializer writes");
    assert_eq!(written.len(), ids.len());
    // The producer prints in acknowledgement order, per partition in order;
    // match records to ids by (partition, order within the partition).
    let mut by_partition: HashMap<i32, Vec<Written>> = HashMap::new();
    for w in &written {
        by_partition.entry(w.partition).or_default().push(*w);
    }
    let mut seen: HashMap<i32, usize> = HashMap::new();
    for (_, _, from, to) in batches {
        for p in 0..n.partitions {
            for _ in *from..*to {
                let k = seen.entry(p).or_default();
                let w = by_partition[&p][*k];
                *k += 1;
                produced.offsets.push((w.partition, w.offset));
            }
        }
    }
    produced.ids.extend(ids);
    written
}

/// Every event delivered as the documented JSON (logical types included), a
/// new schema version mid-topic delivered, and the records that cannot be
/// read parked with their reasons: unframed (`not_registry_framed`), an id
/// the registry does not know (`unknown_schema`), bytes that do not decode
/// with their schema (`malformed_avro`). The registry serves each of the two
/// schemas once for both partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_events_are_delivered_as_documented_json_and_bad_records_parked_by_reason() {
    let s = services();
    let py = python();
    let n = Names::new("sr-avro", 2);
    n.create(&s, true).await;
    let reg = registry_for(&n).await;
    let api = api(Behaviour::default()).await;
    let (mut produced, mut expect) = (Produced::default(), HashMap::new());
    let written = write_orders(
        &py,
        &s,
        &n,
        &reg,
        &[(V1.to_string(), false, 0, 60), (v2(), true, 60, 100)],
        &mut produced,
        &mut expect,
    )
    .await;
    let (v1_id, v2_id) = (written[0].schema_id, written[written.len() - 1].schema_id);
    assert_ne!(v1_id, v2_id, "the new version has its own id");
    // Unframed JSON; a framed record naming an unknown id; a v1 record cut short.
    let mut unknown = vec![0, 0, 0x0f, 0x42, 0x3f];
    unknown.extend_from_slice(b"\x02ab");
    let mut cut = vec![0];
    cut.extend_from_slice(&v1_id.to_be_bytes());
    cut.extend_from_slice(b"\x0eord-x");
    write_raw(
        &s,
        &n,
        &[br#"{"id":"plain"}"#.to_vec(), unknown, cut],
        &mut produced,
    )
    .await;

    let toml = registry_config(&n, &api.url(), &reg.url(), "avro");
    let rep = run_to_the_end(&s, &n, &api, &toml, &produced, "avro").await;
    assert_eq!(rep.delivered, 200, "{rep}");
    assert_eq!(rep.parked, 3, "{rep}");
    check_bodies(&api, &expect);
    let mut reasons: Vec<String> = envelopes(&s, &n.parking)
        .into_iter()
        .map(|e| e.last_error.reason)
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        ["malformed_avro", "not_registry_framed", "unknown_schema"]
    );
    // The envelopes keep the original bytes.
    let parked = envelopes(&s, &n.parking);
    let plain = parked
        .iter()
        .find(|e| e.last_error.reason == "not_registry_framed")
        .unwrap();
    assert_eq!(plain.payload, br#"{"id":"plain"}"#.to_vec());
    // Both partitions needed each schema at once: one fetch per id, as the
    // registry counted the schemas it served (the serializers only register).
    assert_eq!(reg.schema_fetches().await.unwrap(), 2);
}

/// The registry stopped while Courier needs a schema: the partitions wait
/// (nothing delivered, nothing parked) for the 10 s it is down, then every
/// event is delivered; lost 0, parked 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_for_10s_pauses_then_everything_is_delivered() {
    let s = services();
    let py = python();
    let n = Names::new("sr-down", 2);
    n.create(&s, true).await;
    let (mut reg, produced, expect) = registry_with_orders(&py, &s, &n, 100).await;
    let api = api(Behaviour::default()).await;
    reg.stop().await;
    let mut c = Courier::start(
        &n.topic,
        &s,
        &registry_config(&n, &api.url(), &reg.url(), "avro"),
    );
    // Observable: both partitions wait for the schema, and fetches failed.
    let mut waited = false;
    for _ in 0..300 {
        if c.metric("courier_schema_registry_waiting_partitions").await >= 2.0
            && c.metric("courier_schema_registry_fetches_total").await >= 1.0
        {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(waited, "both partitions wait for the schema");
    // The outage itself: 10 s with the registry down.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        api.audit().delivered.len(),
        0,
        "nothing delivered without the schema"
    );
    assert_eq!(topic_size(&s, &n.parking), 0, "nothing parked");
    assert_eq!(
        c.metric("courier_schema_registry_waiting_partitions").await,
        2.0
    );
    reg.start_again().await.expect("registry restarts");
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("registry down", &rep);
    assert_eq!(rep.delivered, 200, "{rep}");
    assert_eq!(rep.parked, 0, "{rep}");
    check_bodies(&api, &expect);
}

/// Dead-lettered Avro events are redelivered by the drain, which decodes each
/// envelope's original bytes with their schema like the main path. A second
/// Courier, started with an empty schema cache while the registry is down,
/// keeps the DLQ records in the DLQ (`schema_registry_unavailable`, no retry
/// used, nothing parked) until the registry is back; then everything is
/// delivered. Lost 0, parked 0. A key's events after its first failing one
/// wait behind its envelope (I39), untried, through both Couriers.
///
/// Seen failing before the drain read registry formats: the dead-lettered
/// events were parked `unreadable_envelope` ("decoded with its registry
/// schema (not available here)").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettered_avro_events_are_redelivered_also_after_a_registry_outage() {
    let s = services();
    let py = python();
    let n = Names::new("sr-dlq", 2);
    n.create(&s, true).await;
    let (mut reg, produced, expect) = registry_with_orders(&py, &s, &n, 100).await;
    // One event in 20 fails its 3 tries in place (503), then goes to the DLQ;
    // the next call for it succeeds. (Few enough that the breaker, at a failure
    // rate of 0.5, stays closed.)
    let failing: Vec<String> = produced.ids.iter().step_by(20).cloned().collect();
    // A failing event's key keeps its order (I39): the first failing event
    // of a key goes to the DLQ, and the key's later events in its partition
    // (failing ones included) wait behind it, untried, until it is
    // redelivered: not delivered, not committed.
    let held_back: Vec<&String> = produced
        .ids
        .iter()
        .filter(|id| {
            let (p, j) = partition_and_index(id);
            failing.iter().any(|f| {
                let (fp, fj) = partition_and_index(f);
                fp == p && fj % KEYS == j % KEYS && fj <= j
            })
        })
        .collect();
    let heads = failing
        .iter()
        .filter(|f| {
            let (p, j) = partition_and_index(f);
            !failing.iter().any(|e| {
                let (ep, ej) = partition_and_index(e);
                ep == p && ej % KEYS == j % KEYS && ej < j
            })
        })
        .count();
    let mut fail_ids: HashMap<String, FailRule> = failing
        .iter()
        .map(|id| {
            let rule = FailRule {
                status: 503,
                times: Some(3),
                retry_after_s: None,
            };
            (id.clone(), rule)
        })
        .collect();
    // And one is refused (400) once: parked, later inspected and replayed.
    let refused = produced.ids[7].clone();
    fail_ids.insert(
        refused.clone(),
        FailRule {
            status: 400,
            times: Some(1),
            retry_after_s: None,
        },
    );
    let api = api(Behaviour {
        fail_ids,
        ..Behaviour::default()
    })
    .await;

    // First Courier: the DLQ drain waits an hour, so the failing events stay in the DLQ.
    let mut c = Courier::start(
        &n.topic,
        &s,
        &registry_config(&n, &api.url(), &reg.url(), "avro"),
    );
    wait_until(
        Duration::from_secs(90),
        "each key's first failing event is in the DLQ, the refused one parked, \
         the others delivered but those waiting behind the DLQ",
        || {
            let a = api.audit();
            a.delivered.len() == produced.ids.len() - held_back.len() - 1
                && envelopes(&s, &n.dlq).len() == heads
                && envelopes(&s, &n.parking).len() == 1
        },
    )
    .await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));

    // Second Courier, a quick drain, the registry down: its cache is empty.
    reg.stop().await;
    let toml = with_registry(toml_with(&n, &api.url(), FAST), &reg.url(), "avro");
    let mut c = Courier::start(&n.topic, &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "DLQ rounds find the registry down",
        || {
            envelopes(&s, &n.dlq)
                .iter()
                .filter(|e| e.last_error.reason == "schema_registry_unavailable")
                .count()
                >= heads
        },
    )
    .await;
    assert_eq!(
        topic_size(&s, &n.parking),
        1,
        "nothing parked but the refused one"
    );
    assert!(
        envelopes(&s, &n.dlq).iter().all(|e| e.dlq_retries == 0),
        "a round without the registry uses no retry"
    );
    reg.start_again().await.expect("registry restarts");
    wait_until(
        Duration::from_secs(60),
        "every event but the refused one is delivered",
        || {
            let a = api.audit();
            produced
                .ids
                .iter()
                .filter(|id| **id != refused)
                .all(|id| a.delivered.contains_key(id))
        },
    )
    .await;

    // `dlq inspect` shows the parked record's Avro bytes decoded, as delivered.
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();
    let (code, out) = courier_cli(&s, &cfg, &["dlq", "inspect", "--parking", "--json"]);
    assert_eq!(code, 0, "{out}");
    let summary: serde_json::Value =
        serde_json::from_str(&out).expect("inspect --json prints JSON");
    assert_eq!(summary["samples"][0]["event_id"], refused.as_str(), "{out}");
    assert_eq!(summary["decoded"][0]["json"], expect[&refused], "{out}");
    let (code, out) = courier_cli(&s, &cfg, &["dlq", "inspect", "--parking"]);
    assert_eq!(code, 0, "{out}");
    let id_field = format!("\"id\":\"{refused}\"");
    assert!(
        out.contains("decoded: {") && out.contains(&id_field),
        "{out}"
    );
    // Replayed, the original bytes go through the same decoding and are delivered.
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &["dlq", "replay", "--reason", "http_400", "--yes"],
    );
    assert_eq!(code, 0, "{out}");
    wait_until(
        Duration::from_secs(60),
        "the replayed event is delivered",
        || api.audit().delivered.contains_key(&refused),
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("avro dlq", &rep);
    check_bodies(&api, &expect);
}

/// A registry that answers slowly does not stall the partitions that have
/// their schemas: while partition 1 waits 20 s for a new version's schema
/// (through a proxy holding every answer), partition 0's new records are all
/// delivered; then partition 1's are too. Lost 0, parked 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_registry_stalls_only_the_partition_waiting_for_it() {
    let s = services();
    let py = python();
    let n = Names::new("sr-slow", 2);
    n.create(&s, true).await;
    let (reg, mut produced, mut expect) = registry_with_orders(&py, &s, &n, 20).await;
    let proxy = SlowProxy::start(&reg).await.expect("the proxy listens");
    let api = api(Behaviour::default()).await;
    // The registry's answers are held longer than p0 needs for its records,
    // well within Courier's request timeout.
    let toml = with_registry(base_toml(&n, &api.url()), &proxy.url(), "avro")
        .replace("request_timeout = \"2s\"", "request_timeout = \"60s\"");
    let mut c = Courier::start(&n.topic, &s, &toml);
    wait_until(
        Duration::from_secs(90),
        "the first orders are delivered",
        || {
            let a = api.audit();
            produced.ids.iter().all(|id| a.delivered.contains_key(id))
        },
    )
    .await;

    proxy.set_delay(Duration::from_secs(20));
    // A new version on partition 1 only (its schema is not cached), then more
    // of the known version on partition 0.
    let (mut p1_ids, mut p0_ids, mut records_v2, mut records_v1) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for j in 100..120 {
        let (written, body) = order(1, j, true);
        let id = written["id"].as_str().unwrap().to_string();
        expect.insert(id.clone(), body);
        p1_ids.push(id);
        records_v2.push(serde_json::json!({"partition": 1, "key": "k", "value": written}));
        let (written, body) = order(0, j, false);
        let id = written["id"].as_str().unwrap().to_string();
        expect.insert(id.clone(), body);
        p0_ids.push(id);
        records_v1.push(serde_json::json!({"partition": 0, "key": "k", "value": written}));
    }
    let spec = serde_json::json!({
        "brokers": s.brokers, "registry": reg.url(), "topic": n.topic,
        "batches": [{"schema": v2(), "records": records_v2}, {"schema": V1, "records": records_v1}],
    });
    let log = log_dir().join(format!("{}-producer-2.log", n.topic));
    let written = produce(&py, &spec, &log)
        .await
        .expect("the serializer writes");
    for w in &written {
        produced.offsets.push((w.partition, w.offset));
    }
    produced.ids.extend(p1_ids.iter().cloned());
    produced.ids.extend(p0_ids.iter().cloned());

    wait_until(
        Duration::from_secs(60),
        "partition 0's new records are delivered",
        || {
            let a = api.audit();
            p0_ids.iter().all(|id| a.delivered.contains_key(id))
        },
    )
    .await;
    // Observed at that moment: partition 1 still waits for its schema.
    let a = api.audit();
    assert!(
        p1_ids.iter().all(|id| !a.delivered.contains_key(id)),
        "partition 1 waited for the new schema"
    );
    assert_eq!(
        c.metric("courier_schema_registry_waiting_partitions").await,
        1.0,
        "one partition waits: partition 1"
    );
    proxy.set_delay(Duration::ZERO);
    wait_until(
        Duration::from_secs(90),
        "partition 1's records are delivered",
        || {
            let a = api.audit();
            p1_ids.iter().all(|id| a.delivered.contains_key(id))
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("slow registry", &rep);
    assert_eq!(rep.parked, 0, "{rep}");
    check_bodies(&api, &expect);
}
