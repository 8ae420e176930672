//! Issue 27's benchmark cell: Courier's CPU per event reading Avro records of
//! about 512 bytes through a real schema registry (Apicurio Registry,
//! `scripts/apicurio.sh`), against the same run's JSON input carrying the same
//! events, at L = 0 (the API stand-in answers at once) and C = 512
//! (docs/BENCHMARKS.md, "Avro input").
//!
//! ```sh
//! source /tmp/courier-services/services.env
//! cargo bench --features test-hooks --bench schema_cpu -- --bench
//! ```
//!
//! `BENCH_EVENTS` events per topic (default 100,000), `BENCH_ROUNDS` rounds
//! (default 3; each runs JSON then Avro, a fresh consumer group over the same two
//! topics). CPU is the Courier process's utime + stime between 10 % and 100 % of
//! the events delivered (its start-up and the one schema fetch left out).

#[path = "../tests/common/mod.rs"]
mod common;
// What `/proc` says about a process; the e2e benchmark's.
#[allow(dead_code)]
#[path = "e2e/procs.rs"]
mod procs;

use common::schema::{apicurio, register};
use common::*;
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::schema_registry::Registry;
use rdkafka::producer::FutureRecord;
use std::time::{Duration, Instant};

const SCHEMA: &str = r#"{"type": "record", "name": "Event", "namespace": "bench",
  "fields": [{"name": "id", "type": "string"}, {"name": "type", "type": "string"},
             {"name": "key", "type": "string"}, {"name": "seq", "type": "long"},
             {"name": "pad", "type": "string"}]}"#;

/// The Avro record's size: the 5-byte header and the encoded fields.
const AVRO_BYTES: usize = 512;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Event `seq` as JSON text and as an Avro record framed for `schema_id`.
fn event(seq: usize, schema: &apache_avro::Schema, schema_id: u32) -> (Vec<u8>, Vec<u8>) {
    use apache_avro::types::Value;
    let (id, key) = (format!("ev-{seq:08}"), format!("k{}", seq % 1000));
    let fixed = 5 + (1 + id.len()) + (1 + 5) + (1 + key.len()) + 3 + 2;
    let pad = ".".repeat(AVRO_BYTES - fixed);
    let record = Value::Record(vec![
        ("id".into(), Value::String(id.clone())),
        ("type".into(), Value::String("order".into())),
        ("key".into(), Value::String(key.clone())),
        ("seq".into(), Value::Long(seq as i64)),
        ("pad".into(), Value::String(pad.clone())),
    ]);
    let mut avro = courier::core::schema::frame::header(schema_id).to_vec();
    avro.extend(apache_avro::to_avro_datum(schema, record).expect("the record fits its schema"));
    let json = serde_json::json!({"id": id, "type": "order", "key": key, "seq": seq, "pad": pad});
    (json.to_string().into_bytes(), avro)
}

async fn produce(s: &Services, topic: &str, values: &[Vec<u8>]) {
    let producer = courier_standins::loadgen::producer(&s.brokers).expect("a producer");
    for chunk in values.chunks(5_000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for (i, v) in chunk.iter().enumerate() {
            let key = format!("k{}", i % 1000);
            let ack = producer
                .send_result(FutureRecord::to(topic).payload(v).key(&key))
                .map_err(|(e, _)| e)
                .expect("enqueued");
            acks.push(ack);
        }
        for ack in acks {
            ack.await
                .expect("not cancelled")
                .map_err(|(e, _)| e)
                .expect("produced");
        }
    }
}

/// One run of Courier over `topic`: (µs of CPU per event, events per second),
/// between 10 % and 100 % delivered.
async fn run(s: &Services, n: &Names, api: &SinkHandle, input: &str, events: u64) -> (f64, f64) {
    api.reset();
    let toml = base_toml(n, &api.url()).replace("concurrency = 256", "concurrency = 512") + input;
    let mut c = Courier::start(&n.topic, s, &toml);
    let tenth = events / 10;
    wait_until(Duration::from_secs(300), "10 % delivered", || {
        api.delivered_count() >= tenth
    })
    .await;
    let pid = procs::Pid::Of(c.pid().expect("courier runs"));
    let ticks = procs::clock_ticks();
    let (cpu0, t0, d0) = (
        procs::cpu_seconds(pid, ticks),
        Instant::now(),
        api.delivered_count(),
    );
    while api.delivered_count() < events {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (t1, d1) = (Instant::now(), api.delivered_count());
    let cpu1 = procs::cpu_seconds(pid, ticks);
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let (Some(a), Some(b)) = (cpu0, cpu1) else {
        panic!("no CPU figures for the Courier process")
    };
    let n_events = (d1 - d0) as f64;
    ((b - a) * 1e6 / n_events, n_events / (t1 - t0).as_secs_f64())
}

async fn bench() {
    let s = services();
    let events = env_usize("BENCH_EVENTS", 100_000);
    let rounds = env_usize("BENCH_ROUNDS", 3);
    let dir = log_dir().join("bench-schema-cpu-registry");
    let registry = Registry::start(&apicurio(), &dir)
        .await
        .expect("registry starts");
    let json_topic = Names::new("bench-json", 4);
    let avro_topic = Names::new("bench-avro", 4);
    json_topic.create(&s, true).await;
    avro_topic.create(&s, true).await;
    let schema = apache_avro::Schema::parse_str(SCHEMA).expect("the schema parses");
    let subject = format!("{}-value", avro_topic.topic);
    let id = register(&registry.url(), &subject, "AVRO", SCHEMA).await;
    let (json, avro): (Vec<_>, Vec<_>) = (0..events).map(|i| event(i, &schema, id)).unzip();
    println!(
        "[schema_cpu] {events} events: JSON {} B, Avro {} B each",
        json[0].len(),
        avro[0].len()
    );
    produce(&s, &json_topic.topic, &json).await;
    produce(&s, &avro_topic.topic, &avro).await;
    drop((json, avro));
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let json_input =
        "\n[input]\nformat = \"json\"\nid = \"/id\"\ntype = \"/type\"\nkey = \"/key\"\n";
    let avro_input = format!(
        "{json_input}format = \"avro\"\n[input.schema_registry]\nurl = \"{}\"\n",
        registry.url()
    )
    .replacen("format = \"json\"\n", "", 1);
    let (mut ratios, mut js, mut avs) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        // A fresh group each round reads each topic from its start.
        let in_group = |n: &Names| Names {
            group: format!("{}-r{r}", n.group),
            ..n.clone()
        };
        let (jn, an) = (in_group(&json_topic), in_group(&avro_topic));
        let (j_cpu, j_rate) = run(&s, &jn, &api, json_input, events as u64).await;
        let (a_cpu, a_rate) = run(&s, &an, &api, &avro_input, events as u64).await;
        println!(
            "[schema_cpu] round {r}: JSON {j_cpu:.1} µs/event ({j_rate:.0}/s), Avro {a_cpu:.1} µs/event ({a_rate:.0}/s), Avro/JSON {:.3}, load {:.1}",
            a_cpu / j_cpu,
            procs::loadavg().unwrap_or(f64::NAN)
        );
        ratios.push(a_cpu / j_cpu);
        js.push(j_cpu);
        avs.push(a_cpu);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let shown = format!("{ratios:.3?}");
    println!(
        "[schema_cpu] {rounds} rounds: median JSON {:.1} µs/event, Avro {:.1} µs/event; median ratio Avro/JSON {:.3} (rounds {shown}); target ≤ 1.2",
        median(&mut js),
        median(&mut avs),
        median(&mut ratios)
    );
}

fn main() -> anyhow::Result<()> {
    if !courier_testkit::asked_as_benchmark("schema_cpu") {
        return Ok(());
    }
    tokio::runtime::Runtime::new()?.block_on(bench());
    Ok(())
}
