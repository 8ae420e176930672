//! Issue 42, item 5: a hostile Avro record through a real registry. One
//! `big-decimal` whose scale is 2^40 (a few bytes) among 1,000 records: the
//! other 999 are delivered, it is parked `decimal_out_of_range` with its
//! original bytes, the offsets are committed to the end and the process is
//! alive and exits 0 on SIGTERM. Every record, the hostile one included, is
//! written by confluent-kafka's own `AvroSerializer` (fastavro writes a
//! `big-decimal` as the `bytes` it is: the unscaled value, length-prefixed,
//! then the scale), registered in a real Apicurio Registry. Ends with the
//! audit: lost 0.
//!
//! Seen failing before the bounds (3595d1c): "timed out after 90s waiting
//! until committed offsets reach the end offsets: last [-1, 500], expected
//! [500, 500]" — jemalloc gave Courier the 1 TiB string of zeros (total-vm
//! 1.3 TB) and it wrote them until the kernel's OOM killer killed it
//! (anon-rss 21 GB), nothing logged; partition 0 never committed.

mod common;

use common::schema::*;
use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::Behaviour;
use courier_testkit::schema_registry::{produce, Written};
use std::collections::HashMap;
use std::time::Duration;

const ORDER: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "big-decimal"}}
  ]
}"#;

/// Records per partition (two partitions: 1,000 in all, one of them hostile).
const PER_PARTITION: i64 = 500;
/// Where the hostile record goes: partition 0, in the middle.
const HOSTILE_AT: i64 = 250;

/// A zig-zag varint.
fn varint(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// The bytes of a `big-decimal` (what the serializer is given; it writes
/// their length before them): the unscaled value, big-endian two's
/// complement, length-prefixed, then the scale.
fn big_decimal(unscaled: i64, scale: i64) -> Vec<u8> {
    // Big-endian two's complement without the zeros that only extend the
    // sign (a byte from 0x80 keeps a zero before it).
    let be = unscaled.to_be_bytes();
    let skip = (0..7)
        .take_while(|i| be[*i] == 0 && be[i + 1] & 0x80 == 0)
        .count();
    let digits = &be[skip..];
    let mut out = varint(digits.len() as i64);
    out.extend_from_slice(digits);
    out.extend(varint(scale));
    out
}

/// Bytes as the producer script takes them.
fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_decimal_with_a_scale_of_2_40_is_parked_and_the_others_delivered() {
    let s = services();
    let py = python();
    let n = Names::new("avro-bounds", 2);
    n.create(&s, true).await;
    let reg = registry_for(&n).await;
    let api = api(Behaviour::default()).await;

    // 999 orders with amounts at scale 2, and one with 1 at scale 2^40.
    let mut records = Vec::new();
    let mut expect = HashMap::new();
    let mut ids = Vec::new();
    for p in 0..n.partitions {
        for j in 0..PER_PARTITION {
            if p == 0 && j == HOSTILE_AT {
                let value =
                    serde_json::json!({"id": "hostile", "amount": hex(&big_decimal(1, 1 << 40))});
                records.push(serde_json::json!({"partition": p, "key": "k", "value": value}));
                ids.push(None);
                continue;
            }
            let id = format!("ord-{p}-{j}");
            let cents = 100_000 * j + 7 * i64::from(p) + 5;
            let value = serde_json::json!({"id": id, "amount": hex(&big_decimal(cents, 2))});
            let amount = format!("{}.{:02}", cents / 100, cents % 100);
            expect.insert(id.clone(), serde_json::json!({"id": id, "amount": amount}));
            records.push(
                serde_json::json!({"partition": p, "key": format!("k{}", j % 5), "value": value}),
            );
            ids.push(Some(id));
        }
    }
    let spec = serde_json::json!({
        "brokers": s.brokers, "registry": reg.url(), "topic": n.topic,
        "batches": [{"schema": ORDER, "records": records}],
    });
    let log = log_dir().join(format!("{}-producer.log", n.topic));
    let written = produce(&py, &spec, &log)
        .await
        .expect("the serializer writes");
    assert_eq!(written.len(), 1000);

    // Acknowledged in order within each partition: the k-th of a partition is
    // the k-th record written to it.
    let mut by_partition: HashMap<i32, Vec<Written>> = HashMap::new();
    for w in &written {
        by_partition.entry(w.partition).or_default().push(*w);
    }
    let mut produced = Produced::default();
    let mut hostile = None;
    let mut seen: HashMap<i32, usize> = HashMap::new();
    for (r, id) in records.iter().zip(&ids) {
        let p = r["partition"].as_i64().unwrap() as i32;
        let k = seen.entry(p).or_default();
        let w = by_partition[&p][*k];
        *k += 1;
        match id {
            Some(id) => {
                produced.ids.push(id.clone());
                produced.offsets.push((w.partition, w.offset));
            }
            None => {
                produced.poison.push((w.partition, w.offset));
                hostile = Some(w);
            }
        }
    }
    let hostile = hostile.expect("the hostile record was written");

    let toml = registry_config(&n, &api.url(), &reg.url(), "avro");
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(60), "every order is delivered", || {
        let a = api.audit();
        produced.ids.iter().all(|id| a.delivered.contains_key(id))
    })
    .await;
    // Alive: the process that started is still running, answers its metrics
    // and stops cleanly.
    assert!(c.pid().is_some(), "courier is running");
    assert_eq!(c.metric("courier_parked_total").await, 1.0);
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    // Said in the log, with the partition, the offset and the reason.
    let log = strip_ansi(&c.log_text());
    assert!(
        log.lines().any(|l| l.contains("bad input, parking")
            && l.contains(&format!("partition=0 offset={}", hostile.offset))
            && l.contains("decimal_out_of_range")),
        "{log}"
    );

    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("avro bounds", &rep);
    assert_eq!(rep.delivered, 999, "{rep}");
    assert_eq!(rep.parked, 1, "{rep}");
    check_bodies(&api, &expect);
    let parked = envelopes(&s, &n.parking);
    assert_eq!(parked.len(), 1);
    let e = &parked[0];
    assert_eq!(e.last_error.reason, "decimal_out_of_range");
    assert!(
        e.last_error
            .message
            .contains("big-decimal has a scale of 1099511627776"),
        "{}",
        e.last_error.message
    );
    assert_eq!(
        (e.origin.partition, e.origin.offset),
        (hostile.partition, hostile.offset)
    );
    // The original bytes: the serializer's frame (magic byte, schema id), the
    // id "hostile", then the big-decimal of 1 at scale 2^40.
    let mut want = vec![0];
    want.extend_from_slice(&hostile.schema_id.to_be_bytes());
    want.extend(varint(7));
    want.extend_from_slice(b"hostile");
    let amount = big_decimal(1, 1 << 40);
    want.extend(varint(amount.len() as i64));
    want.extend(amount);
    assert_eq!(e.payload, want);
}
