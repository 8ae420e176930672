//! Issue 27: Protobuf and JSON Schema through a schema registry, end to end
//! against the real broker and a real registry, Apicurio Registry
//! (`courier_testkit::schema_registry`, its Confluent-compatible API). Records
//! are written by confluent-kafka's own `ProtobufSerializer` and `JSONSerializer`
//! (`tests/schema_formats_producer.py`, with `scripts/pyschema.sh`'s Python):
//! the serializers register the schemas (the `.proto` file and the file it
//! imports; a JSON Schema referencing another subject) and frame each record,
//! so the bytes are what real producers write. Each test ends with the audit:
//! lost 0.
//!
//! Seen failing with the JSON Schema check removed (the two records that break
//! the schema were delivered: the audit counted them lost as poison) and with
//! the message-index list ignored (every record read as the file's first
//! message: the Refund.Reason events, read as Orders without an `id`, were
//! never delivered under theirs).

mod common;

use common::schema::*;
use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::Behaviour;
use std::collections::HashMap;
use std::path::Path;

const PRODUCER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/schema_formats_producer.py"
);
const PROTO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/core/schema/fixtures");

/// Where one record landed.
#[derive(Debug, Clone, Copy)]
struct Landed {
    partition: i32,
    offset: i64,
    schema_id: u32,
}

/// Runs the producer with `spec`; where each record landed, in order.
async fn produce(py: &Path, spec: serde_json::Value, log: &Path) -> Vec<Landed> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(py)
        .arg(PRODUCER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).expect("producer log"))
        .kill_on_drop(true)
        .spawn()
        .expect("the producer starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(spec.to_string().as_bytes())
        .await
        .expect("spec written");
    drop(stdin);
    let out = child.wait_with_output().await.expect("the producer ends");
    assert!(
        out.status.success(),
        "the producer failed: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            Landed {
                partition: v["partition"].as_i64().expect("partition") as i32,
                offset: v["offset"].as_i64().expect("offset"),
                schema_id: v["schema_id"].as_u64().expect("schema_id") as u32,
            }
        })
        .collect()
}

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn parked_reasons(s: &Services, n: &Names) -> Vec<(String, String)> {
    let mut r: Vec<(String, String)> = envelopes(s, &n.parking)
        .into_iter()
        .map(|e| (e.last_error.reason, e.last_error.message))
        .collect();
    r.sort();
    r
}

/// Order `j` of partition `p`: the message as the producer writes it (proto3
/// JSON for `json_format.ParseDict`) and the JSON Courier must post.
fn order(p: i32, j: i64) -> (serde_json::Value, serde_json::Value) {
    use base64::Engine;
    let id = format!("pb-{p}-{j}");
    let blob = base64::engine::general_purpose::STANDARD.encode([j as u8, 0xff]);
    let status = if j % 2 == 0 { "PLACED" } else { "SHIPPED" };
    let at = format!("2026-12-02T10:11:{:02}.500Z", j % 60);
    let big = (9_007_199_254_740_993 + j).to_string();
    let mut written = serde_json::json!({
        "id": id, "status": status, "big": big, "small": -j, "price": j as f64 + 0.5,
        "paid": j % 3 == 0, "blob": blob, "lines": [{"sku": format!("s{j}"), "qty": j + 1}],
        "counts": {"a": j}, "at": at, "total": {"currency": "EUR", "units": j.to_string()},
        "tags": [format!("t{j}")],
    });
    let mut expect = serde_json::json!({
        "id": id, "status": status, "big": big, "ubig": "0", "small": -j, "neg": 0,
        "price": j as f64 + 0.5, "ratio": 0.0, "paid": j % 3 == 0, "blob": blob,
        "lines": [{"sku": format!("s{j}"), "qty": j + 1}], "counts": {"a": j}, "at": at,
        "total": {"currency": "EUR", "units": j.to_string()}, "tags": [format!("t{j}")],
    });
    let (member, value) = if j % 2 == 0 {
        ("email", format!("e{j}@example.com"))
    } else {
        ("phone", format!("+{j}"))
    };
    written[member] = value.clone().into();
    expect[member] = value.into();
    (written, expect)
}

/// Orders (message index `[0]`: every field type, the imported Money, a
/// Timestamp) and Refund.Reason messages (`[1, 0]`: a nested type) written by
/// `ProtobufSerializer`, delivered
/// as canonical proto3 JSON; records that cannot be read parked by reason:
/// bytes that do not decode (`malformed_protobuf`), an unknown id, an
/// unframed record, and a JSON Schema's id (`wrong_schema_type`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_events_are_delivered_as_canonical_json_and_bad_records_parked_by_reason() {
    let s = services();
    let py = python();
    let n = Names::new("sr-proto", 2);
    n.create(&s, true).await;
    let reg = registry_for(&n).await;
    let api = api(Behaviour::default()).await;
    let (mut produced, mut expect) = (Produced::default(), HashMap::new());

    let (mut orders, mut reasons) = (Vec::new(), Vec::new());
    for p in 0..n.partitions {
        for j in 0..30 {
            let (written, body) = order(p, j);
            expect.insert(written["id"].as_str().unwrap().to_string(), body);
            orders.push(
                serde_json::json!({"partition": p, "key": format!("k{}", j % 4), "value": written}),
            );
        }
        for j in 0..10 {
            let id = format!("rs-{p}-{j}");
            let value = serde_json::json!({"text": format!("r{p}-{j}"), "code": -j, "id": id});
            expect.insert(id, value.clone());
            reasons.push(serde_json::json!({"partition": p, "key": null, "value": value}));
        }
    }
    let spec = serde_json::json!({
        "brokers": s.brokers, "registry": reg.url(), "topic": n.topic,
        "proto_dir": PROTO_DIR, "proto_file": "order.proto",
        "batches": [{"message": "Order", "records": orders}, {"message": "Refund.Reason", "records": reasons}],
    });
    let log = log_dir().join(format!("{}-producer.log", n.topic));
    let landed = produce(&py, spec, &log).await;
    assert_eq!(landed.len(), 80);
    // Per partition in order: 30 orders, then 10 reasons.
    let mut by_partition: HashMap<i32, Vec<Landed>> = HashMap::new();
    for l in &landed {
        by_partition.entry(l.partition).or_default().push(*l);
    }
    for p in 0..n.partitions {
        let ls = &by_partition[&p];
        for (j, l) in ls.iter().enumerate() {
            produced.ids.push(if j < 30 {
                format!("pb-{p}-{j}")
            } else {
                format!("rs-{p}-{}", j - 30)
            });
            produced.offsets.push((l.partition, l.offset));
        }
    }
    let order_id = landed[0].schema_id;
    let json_id = register(
        &reg.url(),
        "other-json",
        "JSON",
        r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}"#,
    )
    .await;
    write_raw(
        &s,
        &n,
        &[
            framed(order_id, &[0, 0x0a, 0x7f, b'x']),
            framed(0x000f_423f, &[0, 0x0a, 0]),
            br#"{"id":"plain"}"#.to_vec(),
            framed(json_id, b"{}"),
        ],
        &mut produced,
    )
    .await;

    let toml = registry_config(&n, &api.url(), &reg.url(), "protobuf");
    let rep = run_to_the_end(&s, &n, &api, &toml, &produced, "protobuf").await;
    assert_eq!(rep.delivered, 80, "{rep}");
    assert_eq!(rep.parked, 4, "{rep}");
    check_bodies(&api, &expect);
    let reasons: Vec<String> = parked_reasons(&s, &n).into_iter().map(|r| r.0).collect();
    assert_eq!(
        reasons,
        [
            "malformed_protobuf",
            "not_registry_framed",
            "unknown_schema",
            "wrong_schema_type"
        ]
    );
}

const MONEY: &str = r#"{"$schema": "http://json-schema.org/draft-07/schema#", "$id": "money.json", "type": "object",
 "properties": {"currency": {"type": "string", "minLength": 3, "maxLength": 3}, "units": {"type": "integer"}},
 "required": ["currency", "units"]}"#;

const INVOICE: &str = r##"{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Invoice", "type": "object",
 "properties": {"id": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
  "total": {"$ref": "money.json"}, "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}}},
 "required": ["id", "qty"],
 "definitions": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}}"##;

/// Invoices written by `JSONSerializer` (their schema references another
/// subject) delivered byte for byte; records that break the schema parked
/// `schema_invalid` naming the part that failed, text that is not JSON
/// `malformed_json`, an unknown id, and a Protobuf schema's id
/// (`wrong_schema_type`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_events_are_checked_and_delivered_as_written() {
    let s = services();
    let py = python();
    let n = Names::new("sr-jsonschema", 2);
    n.create(&s, true).await;
    let reg = registry_for(&n).await;
    let api = api(Behaviour::default()).await;
    let (mut produced, mut expect) = (Produced::default(), HashMap::new());
    let mut records = Vec::new();
    for p in 0..n.partitions {
        for j in 0..40 {
            let id = format!("js-{p}-{j}");
            let value = serde_json::json!({
                "id": id, "qty": j + 1, "total": {"currency": "EUR", "units": j},
                "lines": [{"sku": format!("s{j}")}], "note": "é ✓",
            });
            expect.insert(id, value.clone());
            records.push(
                serde_json::json!({"partition": p, "key": format!("k{}", j % 3), "value": value}),
            );
        }
    }
    let spec = serde_json::json!({
        "brokers": s.brokers, "registry": reg.url(), "topic": n.topic,
        "batches": [{"schema": INVOICE, "references": [{"name": "money.json", "subject": "money-json", "schema": MONEY}], "records": records}],
    });
    let log = log_dir().join(format!("{}-producer.log", n.topic));
    let landed = produce(&py, spec, &log).await;
    assert_eq!(landed.len(), 80);
    let mut seen: HashMap<i32, i64> = HashMap::new();
    for l in &landed {
        let j = seen.entry(l.partition).or_default();
        produced.ids.push(format!("js-{}-{j}", l.partition));
        produced.offsets.push((l.partition, l.offset));
        *j += 1;
    }
    let invoice_id = landed[0].schema_id;
    let proto_id = register(
        &reg.url(),
        "other-proto",
        "PROTOBUF",
        "syntax = \"proto3\";\nmessage Other {\n  string id = 1;\n}\n",
    )
    .await;
    write_raw(
        &s,
        &n,
        &[
            framed(invoice_id, br#"{"id":"bad-1","qty":0}"#),
            framed(
                invoice_id,
                br#"{"id":"bad-2","qty":1,"total":{"currency":"EURO","units":1}}"#,
            ),
            framed(invoice_id, b"{\"id\":"),
            framed(0x000f_423f, b"{}"),
            framed(proto_id, &[0, 0x0a, 0x01, b'x']),
        ],
        &mut produced,
    )
    .await;

    let toml = registry_config(&n, &api.url(), &reg.url(), "json_schema");
    let rep = run_to_the_end(&s, &n, &api, &toml, &produced, "json_schema").await;
    assert_eq!(rep.delivered, 80, "{rep}");
    assert_eq!(rep.parked, 5, "{rep}");
    check_bodies(&api, &expect);
    let parked = parked_reasons(&s, &n);
    let reasons: Vec<&str> = parked.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "malformed_json",
            "schema_invalid",
            "schema_invalid",
            "unknown_schema",
            "wrong_schema_type"
        ]
    );
    let invalid: Vec<&str> = parked
        .iter()
        .filter(|r| r.0 == "schema_invalid")
        .map(|r| r.1.as_str())
        .collect();
    assert!(invalid.iter().any(|m| m.contains("/qty")), "{invalid:?}");
    assert!(
        invalid.iter().any(|m| m.contains("/total/currency")),
        "{invalid:?}"
    );
}
