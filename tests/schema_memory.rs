//! Issue 54, items 10, 11 and 15: what a registry answer or a record can make
//! Courier allocate, sent to a running Courier process on the real broker,
//! its peak resident set (`VmHWM`) read from `/proc` while it runs and
//! bounded. The registry is a stand-in in this file serving the hostile
//! answers. Each test ends with the audit: lost 0.

mod common;

use common::schema::*;
use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::Behaviour;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

/// What the stand-in registry answers a path: status, body (JSON).
type Answer = dyn Fn(&str) -> (u16, String) + Send + Sync;

/// A registry stand-in answering every `GET` by `answer(path)`; requests
/// counted by path.
struct StandIn {
    url: String,
    asked: Arc<Mutex<HashMap<String, usize>>>,
    total: Arc<AtomicUsize>,
}

impl StandIn {
    async fn start(answer: Arc<Answer>) -> StandIn {
        let asked: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let total = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (asked.clone(), total.clone());
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (answer, seen, count) = (answer.clone(), seen.clone(), count.clone());
            async move {
                let path = uri.path().to_string();
                *seen.lock().unwrap().entry(path.clone()).or_default() += 1;
                count.fetch_add(1, Ordering::SeqCst);
                let (status, body) = answer(&path);
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    [("content-type", "application/vnd.schemaregistry.v1+json")],
                    body,
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        StandIn { url, asked, total }
    }

    fn asked(&self, path: &str) -> usize {
        self.asked.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }
}

/// The registry's 404 for an id.
fn not_found() -> (u16, String) {
    (
        404,
        r#"{"error_code": 40403, "message": "Schema not found"}"#.into(),
    )
}

/// Waits until `cond` holds, reading Courier's peak RSS at every look and
/// failing at once past `max_rss` (the process is killed when `c` drops:
/// an unbounded allocation is stopped early, not left to the OOM killer).
/// Returns the peak seen.
async fn until_within(
    c: &Courier,
    max_rss: u64,
    timeout: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
) -> u64 {
    let until = Instant::now() + timeout;
    loop {
        let peak = c.peak_rss().expect("courier is running");
        assert!(
            peak <= max_rss,
            "peak RSS {} MB passed {} MB while waiting until {what}",
            peak / MB,
            max_rss / MB
        );
        if cond() {
            return peak;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting until {what} (peak RSS {} MB)",
            peak / MB
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The peak RSS a test allows: "a few hundred MB" (issue 54).
const MAX_RSS: u64 = 300 * MB;

/// The JSON Schema of the good events.
const EVENT_SCHEMA: &str =
    r#"{"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}"#;

/// Item 10: a registry answer naming 60,000 references (each its own name)
/// to one 48 KiB JSON Schema, and another naming 9,000 (under the cap on
/// references named, over the byte budget once each name is charged its
/// text). The process stays within a few hundred MB, the records naming those
/// ids are parked `schema_too_large`, the others delivered.
///
/// Seen failing on 45109fa: "peak RSS 303 MB passed 300 MB" within seconds
/// (and 2,050 MB with the bound raised to 2 GB: the process was stopped there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_naming_60000_references_to_one_schema_is_parked_in_bounded_memory() {
    const GOOD: u32 = 1;
    const HOSTILE: u32 = 2;
    const WIDE: u32 = 3;
    let s = services();
    let n = Names::new("mem-refs", 1);
    n.create(&s, true).await;

    let big =
        serde_json::json!({"type": "object", "description": "x".repeat(48 * 1024)}).to_string();
    let naming = |names: usize| {
        let references: Vec<serde_json::Value> = (0..names)
            .map(|i| serde_json::json!({"name": format!("r{i}.json"), "subject": "big", "version": 1}))
            .collect();
        serde_json::json!({
            "schema": r#"{"$ref": "r0.json"}"#,
            "schemaType": "JSON",
            "references": references,
        })
        .to_string()
    };
    let (root, wide) = (naming(60_000), naming(9_000));
    let good = serde_json::json!({"schema": EVENT_SCHEMA, "schemaType": "JSON"}).to_string();
    let big_answer =
        serde_json::json!({"schema": big, "schemaType": "JSON", "subject": "big", "version": 1})
            .to_string();
    let registry = StandIn::start(Arc::new(move |path: &str| match path {
        "/schemas/ids/1" => (200, good.clone()),
        "/schemas/ids/2" => (200, root.clone()),
        "/schemas/ids/3" => (200, wide.clone()),
        "/subjects/big/versions/1" => (200, big_answer.clone()),
        _ => not_found(),
    }))
    .await;
    let api = api(Behaviour::default()).await;

    let mut produced = Produced::default();
    let mut records = Vec::new();
    let event = |id: String| {
        let body = serde_json::json!({"id": id}).to_string();
        (Some(id), framed(GOOD, body.as_bytes()))
    };
    for j in 0..20 {
        records.push(event(format!("before-{j}")));
    }
    for id in [HOSTILE, WIDE, HOSTILE, WIDE, HOSTILE, WIDE] {
        records.push((None, framed(id, br#"{"id": "hostile"}"#)));
    }
    for j in 0..20 {
        records.push(event(format!("after-{j}")));
    }
    write_to(&s, &n, 0, &records, &mut produced).await;

    let toml = registry_config(&n, &api.url(), &registry.url, "json_schema");
    let mut c = Courier::start(&n.topic, &s, &toml);
    let peak = until_within(
        &c,
        MAX_RSS,
        Duration::from_secs(90),
        "the hostile records are parked and the others delivered",
        || {
            let a = api.audit();
            produced.ids.iter().all(|id| a.delivered.contains_key(id))
                && topic_size(&s, &n.parking) == 6
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let peak = peak.max(c.peak_rss().expect("courier is running"));
    println!(
        "[60,000 references] peak RSS {} MB (allowed {} MB); registry asked {} times",
        peak / MB,
        MAX_RSS / MB,
        registry.total()
    );
    assert!(peak <= MAX_RSS, "peak RSS {} MB", peak / MB);
    // What the allocator says of it (jemalloc's mallctl, item 16): served,
    // and within the peak.
    let allocated = c.metric("courier_memory_allocated_bytes").await;
    let resident = c.metric("courier_memory_resident_bytes").await;
    let allocations = c.metric("courier_memory_allocations_total").await;
    println!("[60,000 references] jemalloc: allocated {allocated}, resident {resident}, {allocations} allocations");
    assert!(
        allocated > 0.0 && allocations > 0.0,
        "{allocated} {allocations}"
    );
    assert!(
        resident >= allocated && resident <= peak as f64,
        "{resident}"
    );
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(
        parked_reasons(&s, &n),
        HashMap::from([("schema_too_large".to_string(), 6)])
    );
    for id in [HOSTILE, WIDE] {
        let asked = registry.asked(&format!("/schemas/ids/{id}"));
        assert_eq!(asked, 1, "the refusal of {id} is cached");
    }
    assert_eq!(registry.asked("/subjects/big/versions/1"), 1);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("60,000 references", &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
}

/// Records to `partition`, all queued before any is awaited (tens of
/// thousands): those with an id are events, the others bad input.
async fn write_many(
    s: &Services,
    n: &Names,
    partition: i32,
    records: &[(Option<String>, Vec<u8>)],
    produced: &mut Produced,
) {
    use rdkafka::producer::FutureRecord;
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    let mut sends = Vec::new();
    for (id, v) in records {
        let rec: FutureRecord<'_, str, Vec<u8>> = FutureRecord::to(&n.topic)
            .payload(v)
            .key("k")
            .partition(partition);
        sends.push((id, producer.send_result(rec).expect("queued")));
    }
    for (id, f) in sends {
        let d = f
            .await
            .expect("delivery")
            .map_err(|(e, _)| e)
            .expect("produce");
        match id {
            Some(id) => {
                produced.ids.push(id.clone());
                produced.offsets.push((d.partition, d.offset));
            }
            None => produced.poison.push((d.partition, d.offset)),
        }
    }
}

/// Item 11: 40,000 records each naming a schema id the registry does not
/// know (random, never twice), on two partitions, a good record every 1,000.
/// Each partition asks the registry for a few of them (4 at once, one more
/// every 15 s, each asked three times over 1.5 s) and parks the others
/// `unknown_schema` without asking; the good records are delivered; the
/// process stays small.
///
/// Seen failing on 45109fa: "39960 requests for unknown ids in 102.6s" —
/// one request per record, its partition waiting for each (peak RSS 90 MB:
/// 40,000 refusals are ~17 MB; the default budget let a partition keep
/// 262,144). Fixed: 30 requests (10 ids asked for three times), 30 s (the
/// parking lot's writes), peak RSS 118 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_naming_random_schema_ids_are_parked_without_a_fetch_each() {
    const GOOD: u32 = 1;
    const PER_PARTITION: usize = 20_000;
    let s = services();
    let n = Names::new("mem-ids", 2);
    n.create(&s, true).await;
    let good = serde_json::json!({"schema": EVENT_SCHEMA, "schemaType": "JSON"}).to_string();
    let registry = StandIn::start(Arc::new(move |path: &str| match path {
        "/schemas/ids/1" => (200, good.clone()),
        _ => not_found(),
    }))
    .await;
    let api = api(Behaviour::default()).await;
    let mut produced = Produced::default();
    let mut random = std::collections::HashSet::new();
    for p in 0..n.partitions {
        let mut records = Vec::new();
        for j in 0..PER_PARTITION {
            if j % 1000 == 0 {
                let id = format!("ev-{p}-{j}");
                let body = serde_json::json!({"id": id}).to_string();
                records.push((Some(id), framed(GOOD, body.as_bytes())));
            } else {
                let id = loop {
                    let id = rand::random::<u32>() | 0x1000;
                    if random.insert(id) {
                        break id;
                    }
                };
                records.push((None, framed(id, br#"{"id": "random"}"#)));
            }
        }
        write_many(&s, &n, p, &records, &mut produced).await;
    }
    let unknown = produced.poison.len() as i64;

    let toml = registry_config(&n, &api.url(), &registry.url, "json_schema");
    let start = Instant::now();
    let mut c = Courier::start(&n.topic, &s, &toml);
    let peak = until_within(
        &c,
        MAX_RSS,
        Duration::from_secs(180),
        "the random ids' records are parked and the others delivered",
        || {
            let a = api.audit();
            // (At least: a record read again is parked again.)
            produced.ids.iter().all(|id| a.delivered.contains_key(id))
                && topic_size(&s, &n.parking) >= unknown
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let took = start.elapsed();
    let peak = peak.max(c.peak_rss().expect("courier is running"));
    let asked = registry.total() - registry.asked("/schemas/ids/1");
    println!(
        "[random ids] {unknown} records parked in {took:?}; the registry asked {asked} times \
         for them; peak RSS {} MB (allowed {} MB)",
        peak / MB,
        MAX_RSS / MB
    );
    // Per partition: 4 ids, one more each 15 s, each asked 3 times.
    let ids_allowed = n.partitions as u64 * (4 + took.as_secs() / 15 + 1);
    assert!(
        asked as u64 <= 3 * ids_allowed,
        "{asked} requests for unknown ids in {took:?}"
    );
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let reasons = parked_reasons(&s, &n);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons["unknown_schema"] >= unknown as usize, "{reasons:?}");
    let not_asked = envelopes(&s, &n.parking)
        .iter()
        .filter(|e| e.last_error.message.contains("not asked"))
        .count();
    assert!(
        not_asked as i64 >= unknown - 3 * ids_allowed as i64,
        "{not_asked} not asked"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("random ids", &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
}

/// The Protobuf schema of item 15's records: an id and a packed list of bools.
const FLAGS_PROTO: &str =
    "syntax = \"proto3\"; message Flags { string id = 1; repeated bool flags = 2; }";

/// A varint.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A `Flags` record framed for schema `id`: the message-index list `[0]`, the
/// id (field 1), `flags` packed bools (field 2).
fn flags_record(id: u32, event: &str, flags: usize) -> Vec<u8> {
    let mut m = vec![0];
    m.push(0x0a);
    m.extend(varint(event.len() as u64));
    m.extend_from_slice(event.as_bytes());
    if flags > 0 {
        m.push(0x12);
        m.extend(varint(flags as u64));
        m.extend(std::iter::repeat_n(1u8, flags));
    }
    framed(id, &m)
}

/// Item 15: Protobuf records of 900,000 packed bools (a value a wire byte),
/// 20 on each of two partitions among good records. Counted before they are
/// decoded, they are parked `too_large`, the others delivered, and the
/// process stays small.
///
/// Seen failing on 45109fa (with the item 10 fix, which does not touch
/// decoding): "timed out after 400s waiting until the hostile records are
/// parked and the others delivered (peak RSS 239 MB)" — every hostile record
/// was decoded before the JSON cap refused it, the workers were so busy that
/// an API call timed out and its event went to the DLQ (not due within the
/// test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_records_of_a_million_values_are_refused_before_decoding() {
    const ID: u32 = 7;
    const HOSTILE_PER_PARTITION: usize = 20;
    let s = services();
    let n = Names::new("mem-proto", 2);
    n.create(&s, true).await;
    let answer = serde_json::json!({"schema": FLAGS_PROTO, "schemaType": "PROTOBUF"}).to_string();
    let registry = StandIn::start(Arc::new(move |path: &str| match path {
        "/schemas/ids/7" => (200, answer.clone()),
        _ => not_found(),
    }))
    .await;
    let api = api(Behaviour::default()).await;
    let mut produced = Produced::default();
    for p in 0..n.partitions {
        let mut records = Vec::new();
        for j in 0..HOSTILE_PER_PARTITION {
            let id = format!("ev-{p}-{j}");
            records.push((Some(id.clone()), flags_record(ID, &id, 3)));
            records.push((None, flags_record(ID, "hostile", 900_000)));
        }
        write_to(&s, &n, p, &records, &mut produced).await;
    }

    let toml = registry_config(&n, &api.url(), &registry.url, "protobuf");
    let mut c = Courier::start(&n.topic, &s, &toml);
    let hostile = (HOSTILE_PER_PARTITION * n.partitions as usize) as i64;
    let peak = until_within(
        &c,
        PROTO_MAX_RSS,
        Duration::from_secs(90),
        "the hostile records are parked and the others delivered",
        || {
            let a = api.audit();
            produced.ids.iter().all(|id| a.delivered.contains_key(id))
                && topic_size(&s, &n.parking) == hostile
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let peak = peak.max(c.peak_rss().expect("courier is running"));
    println!(
        "[900,000 packed bools] peak RSS {} MB (allowed {} MB)",
        peak / MB,
        PROTO_MAX_RSS / MB
    );
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(
        parked_reasons(&s, &n),
        HashMap::from([("too_large".to_string(), hostile as usize)])
    );
    let parked = envelopes(&s, &n.parking);
    assert!(
        parked[0].last_error.message.contains("values"),
        "{}",
        parked[0].last_error.message
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("900,000 packed bools", &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
}

/// Item 15's bound. 40 MB of records read through two partitions (each
/// buffering up to `max_buffered_bytes`, 16 MiB, beside librdkafka's
/// prefetch) peak at ~140 MB with the count; each record decoded before it
/// (~56 bytes a packed bool) added ~50 MB a tokio worker: 239 MB on 45109fa.
const PROTO_MAX_RSS: u64 = 200 * MB;
