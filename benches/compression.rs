//! Which `kafka.producer_compression` for the DLQ and parking-lot producers:
//! bytes sent to the broker and CPU per record for each codec, with
//! envelope-sized records (a ~600-byte event of varied JSON, base64 inside the
//! envelope, with the envelope's headers) and Courier's own producer
//! configuration (`kafka::producer_config`: idempotent, `linger.ms = 5`).
//!
//! Two patterns: a *burst* (every record in flight at once, as when an outage
//! starts and the in-flight events all fail into the DLQ: large batches) and a
//! *trickle* (one record at a time, each acknowledged before the next: batches
//! of one, the steady state of a few poison events).
//!
//! ```sh
//! source /tmp/courier-services/services.env
//! cargo bench --bench compression            # ~1 min against the test broker
//! ```

use courier::config::{Compression, KafkaConfig};
use courier::core::envelope::{Envelope, ErrorInfo, Origin, ENVELOPE_VERSION_PAYLOAD};
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BURST: usize = 50_000;
const TRICKLE: usize = 2_000;

/// The latest statistics of a producer: bytes and messages sent.
#[derive(Default, Clone)]
struct Stats {
    tx_bytes: Arc<AtomicI64>,
    txmsgs: Arc<AtomicI64>,
}

impl ClientContext for Stats {
    fn stats(&self, s: Statistics) {
        self.tx_bytes.store(s.tx_bytes, Ordering::SeqCst);
        self.txmsgs.store(s.txmsgs, Ordering::SeqCst);
    }
}

impl ProducerContext for Stats {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

/// Process CPU time (all threads, librdkafka's included), from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the ')'.
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    ticks / 100.0
}

const WORDS: [&str; 16] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa",
];

/// A CloudEvent of about 600 bytes with varied content: ids, timestamps,
/// numbers and words, as a profile update might carry.
fn event(rng: &mut impl Rng, seq: usize) -> Vec<u8> {
    let word = |rng: &mut dyn rand::RngCore| WORDS[rng.random_range(0..WORDS.len())];
    let id: u128 = rng.random();
    let attrs: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "\"attr_{i}\":{{\"value\":\"{} {} {}\",\"score\":{},\"updated\":{}}}",
                word(rng),
                word(rng),
                rng.random::<u32>(),
                rng.random_range(0.0..1000.0f64),
                1_790_000_000_000u64 + rng.random_range(0..10_000_000u64)
            )
        })
        .collect();
    format!(
        "{{\"specversion\":\"1.0\",\"id\":\"{id:032x}\",\"source\":\"/profiles/{}\",\"type\":\"profile.updated\",\"subject\":\"user-{seq}\",\"entityversion\":{},\"data\":{{{}}}}}",
        word(rng),
        rng.random_range(1..100),
        attrs.join(",")
    )
    .into_bytes()
}

fn envelope(rng: &mut impl Rng, seq: usize) -> Envelope {
    let payload = event(rng, seq);
    Envelope {
        version: ENVELOPE_VERSION_PAYLOAD,
        event_id: Some(format!("{:032x}", rng.random::<u128>())),
        event_type: Some("profile.updated".into()),
        key: Some(format!("user-{seq}").into_bytes()),
        entity_key: None,
        route: None,
        payload,
        omitted: None,
        dlq_retries: 0,
        first_dlq_at_ms: 1_790_000_000_000,
        not_before_ms: 1_790_000_001_000,
        last_error: ErrorInfo {
            class: "transient".into(),
            reason: "http_503".into(),
            status: Some(503),
            message: "API answered 503 after 3 attempts".into(),
        },
        origin: Origin {
            topic: "profiles".into(),
            partition: (seq % 12) as i32,
            offset: 1_000_000 + seq as i64,
            timestamp_ms: Some(1_789_999_999_000),
            consumer_group: "courier".into(),
        },
        origin_headers: Vec::new(),
    }
}

/// A DLQ record as the writer sends it: key, envelope, headers.
type Record = (Vec<u8>, Vec<u8>, Vec<(&'static str, String)>);

struct Row {
    codec: Compression,
    pattern: &'static str,
    records: usize,
    payload_bytes: usize,
    wire_bytes: i64,
    cpu_s: f64,
    wall_s: f64,
}

async fn run(
    brokers: &str,
    codec: Compression,
    pattern: &'static str,
    records: &[Record],
) -> anyhow::Result<Row> {
    let topic = format!(
        "compression-bench-{}-{pattern}-{:x}",
        codec.as_str(),
        rand::random::<u32>()
    );
    courier_standins::admin::create_topics(brokers, &[(topic.as_str(), 1)]).await?;
    let kafka = KafkaConfig {
        brokers: brokers.into(),
        producer_compression: codec,
        ..KafkaConfig::default()
    };
    let mut cfg: ClientConfig = courier::kafka::producer_config(&kafka);
    cfg.set("statistics.interval.ms", "100");
    let stats = Stats::default();
    let producer: FutureProducer<Stats> = cfg.create_with_context(stats.clone())?;
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let send = |(key, payload, headers): &Record| {
        let mut h = OwnedHeaders::new();
        for (k, v) in headers {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        producer
            .send_result(
                FutureRecord::to(&topic)
                    .key(key.as_slice())
                    .payload(payload.as_slice())
                    .headers(h),
            )
            .map_err(|(e, _)| e)
    };
    if pattern == "burst" {
        let mut pending = Vec::with_capacity(records.len());
        for r in records {
            pending.push(send(r)?);
        }
        for p in pending {
            p.await?.map_err(|(e, _)| e)?;
        }
    } else {
        for r in records {
            send(r)?.await?.map_err(|(e, _)| e)?;
        }
    }
    let (cpu_s, wall_s) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    // The statistics come every 100 ms: wait for the ones that count every record.
    let until = Instant::now() + Duration::from_secs(10);
    while stats.txmsgs.load(Ordering::SeqCst) < records.len() as i64 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::ensure!(
        stats.txmsgs.load(Ordering::SeqCst) >= records.len() as i64,
        "statistics never counted every record"
    );
    Ok(Row {
        codec,
        pattern,
        records: records.len(),
        payload_bytes: records.iter().map(|(k, p, _)| k.len() + p.len()).sum(),
        wire_bytes: stats.tx_bytes.load(Ordering::SeqCst),
        cpu_s,
        wall_s,
    })
}

fn main() -> anyhow::Result<()> {
    if !courier_testkit::asked_as_benchmark("compression") {
        return Ok(());
    }
    let brokers = std::env::var("COURIER_TEST_BROKERS")
        .map_err(|_| anyhow::anyhow!("COURIER_TEST_BROKERS is not set: source services.env"))?;
    let rt = tokio::runtime::Runtime::new()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let records: Vec<_> = (0..BURST)
        .map(|i| {
            let e = envelope(&mut rng, i);
            let headers = e.headers();
            (e.key.clone().unwrap_or_default(), e.to_bytes(), headers)
        })
        .collect();
    let avg_event = records.iter().map(|r| r.1.len()).sum::<usize>() / records.len();
    println!("envelopes: {avg_event} bytes on average (event ~600 bytes, base64 inside)");
    let mut rows = Vec::new();
    for (pattern, n) in [("burst", BURST), ("trickle", TRICKLE)] {
        for codec in Compression::ALL {
            rows.push(rt.block_on(run(&brokers, codec, pattern, &records[..n]))?);
        }
    }
    println!(
        "\n| pattern | codec | records | record bytes | bytes sent / record | vs none | CPU µs / record | CPU vs none | wall s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let none = rows
            .iter()
            .find(|b| b.pattern == r.pattern && b.codec == Compression::None)
            .expect("a `none` row per pattern");
        let per = |bytes: i64, n: usize| bytes as f64 / n as f64;
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:+.1} | {:.2} |",
            r.pattern,
            r.codec.as_str(),
            r.records,
            per(r.payload_bytes as i64, r.records),
            per(r.wire_bytes, r.records),
            r.wire_bytes as f64 / none.wire_bytes as f64,
            r.cpu_s * 1e6 / r.records as f64,
            (r.cpu_s - none.cpu_s) * 1e6 / r.records as f64,
            r.wall_s
        );
    }
    Ok(())
}
