//! `courier demo`: the real pipeline, with no setup. An embedded librdkafka mock
//! cluster stands in for Kafka, the API stand-in for the external API. A stream of
//! synthetic CloudEvents with some bad input and some API failures goes through,
//! progress is shown while it runs, and the run ends with the no-loss audit.
//!
//! The progress lines start with the pipeline: one every half second from the
//! moment it is asked to start, so the lines before the first delivery measure
//! how long Courier takes to get going (tests/demo.rs counts them).

use crate::config::Config;
use crate::kafka::admin::{committed_offsets, end_offsets};
use anyhow::Context;
use courier_standins::audit::{audit, AuditReport};
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const TOPIC: &str = "demo.events";
const PARTITIONS: i32 = 6;
const GROUP: &str = "courier-demo";

/// The schema id the demo's Avro events name (`--avro`).
const AVRO_SCHEMA_ID: u32 = 1;

/// One progress line every this often.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// How long the story may take before the demo gives up (exit 1).
const STORY_LIMIT: Duration = Duration::from_secs(90);

/// The embedded cluster: librdkafka's mock cluster, made by a client of the
/// demo's own (`test.mock.num.brokers`) so that its group settings can be set.
struct Embedded {
    holder: BaseProducer,
}

impl Embedded {
    fn start() -> anyhow::Result<Embedded> {
        let holder: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", "1")
            .create()
            .context("cannot start the embedded mock cluster")?;
        // SAFETY: `holder` is a live client; the cluster it made lives as
        // long as it does, and this call only sets one of its defaults.
        unsafe {
            let cluster =
                rdkafka::bindings::rd_kafka_handle_mock_cluster(holder.client().native_ptr());
            anyhow::ensure!(
                !cluster.is_null(),
                "the embedded mock cluster did not start"
            );
            // The mock waits 3 s (Kafka's group.initial.rebalance.delay.ms) before
            // it assigns a new group's partitions; one member needs no wait.
            rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 0);
        }
        Ok(Embedded { holder })
    }

    fn cluster(&self) -> anyhow::Result<MockCluster<'_, DefaultProducerContext>> {
        self.holder
            .client()
            .mock_cluster()
            .context("the embedded mock cluster is gone")
    }
}

/// `batch`: events per request (`[api.batch] max_events`); 1 sends one each.
/// `avro`: the events are Avro records in the Confluent wire format, their
/// schema served by the stand-in as a schema registry (`input.format = "avro"`).
pub async fn run(events: usize, batch: usize, avro: bool) -> anyhow::Result<u8> {
    println!("Courier demo: embedded Kafka (librdkafka mock cluster) + embedded API stand-in\n");
    let embedded = Embedded::start()?;
    let mock = embedded.cluster()?;
    let brokers = mock.bootstrap_servers();
    let cfg = demo_config(&brokers);
    mock.create_topic(TOPIC, PARTITIONS, 1)?;
    mock.create_topic(&cfg.kafka.dlq_topic(), PARTITIONS, 1)?;
    mock.create_topic(&cfg.kafka.parking_topic(), 1, 1)?;

    // The API: 5–15 ms per call, 0.2% random 503s (retried in place), a few
    // events it always refuses with 503 (they end in the DLQ), a few refused once.
    let spec = Spec {
        count: events,
        keys: 500,
        id_prefix: "demo".into(),
        poison_every: Some(250),
        avro_schema_id: avro.then_some(AVRO_SCHEMA_ID),
        ..Spec::default()
    };
    let sink = SinkHandle::start("127.0.0.1:0".parse()?, api_behaviour(&spec, avro)).await?;
    println!("API stand-in on {}", sink.url());

    let mut cfg = cfg;
    cfg.api.url = sink.url();
    if avro {
        // The stand-in doubles as the schema registry; the decoded JSON is the
        // CloudEvent the other runs send, read as `input.format = "json"`.
        cfg.input.format = crate::core::input::InputFormat::Avro;
        cfg.input.schema_registry.url = format!("http://{}", sink.addr());
        cfg.input.key = "/subject".into();
        cfg.input.validate()?;
        println!(
            "Avro records (Confluent wire format, schema id {AVRO_SCHEMA_ID} served by the stand-in as a schema registry); the bad input is not framed"
        );
    }
    if batch > 1 {
        // The stand-in's batch endpoint answers per item: {"items":[{"id","status"}]}.
        cfg.api.url = format!("http://{}/batch", sink.addr());
        cfg.api.batch.max_events = batch;
        cfg.api.batch.results = Some("/items".into());
        cfg.api.batch.result_status = "/status".into();
        cfg.api.batch.result_id = Some("/id".into());
        cfg.api.batch.spec("api.batch")?;
        println!(
            "batches of up to {batch} events per request ({})",
            cfg.api.url
        );
    }
    println!("The story: at a quarter of the way the API goes down for 6 s; watch the partitions pause, the DLQ drain, and delivery resume.");
    println!("(No Redis in the demo: each instance's local circuit breaker decides on its own.)\n");

    print!(
        "producing {events} {}events ({} of them bad input)… ",
        if avro { "Avro " } else { "" },
        events / 250
    );
    let produced = loadgen::produce(&brokers, TOPIC, &spec).await?;
    println!("done");

    // The pipeline's start: the progress lines count from here, while it starts.
    let started = Instant::now();
    let prometheus = crate::metrics::install(&cfg.kafka.group_id, &cfg.kafka.topic);
    // On a task of its own: what the start does synchronously must not hold
    // the progress lines back (they are the demo's clock).
    let mut starting = tokio::spawn(crate::app::start(cfg.clone(), prometheus.clone()));
    let mut running = None;
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outage: Option<Instant> = None;
    let mut restored = false;
    let mut first_delivery: Option<Duration> = None;
    let ends = end_offsets(&brokers, TOPIC, PARTITIONS)?;
    let total: i64 = ends.iter().sum();
    let mut caught_up = false;
    while started.elapsed() < STORY_LIMIT {
        tokio::select! {
            r = &mut starting, if running.is_none() => {
                running = Some(r.context("the pipeline's start panicked")??);
                continue;
            }
            _ = tick.tick() => {}
        }
        let committed: i64 = committed_offsets(&brokers, GROUP, TOPIC, PARTITIONS)?
            .iter()
            .map(|o| (*o).max(0))
            .sum();
        let dlq: i64 = end_offsets(&brokers, &cfg.kafka.dlq_topic(), PARTITIONS)?
            .iter()
            .sum();
        let parked: i64 = end_offsets(&brokers, &cfg.kafka.parking_topic(), 1)?
            .iter()
            .sum();
        let delivered = sink.delivered_count();
        if delivered > 0 && first_delivery.is_none() {
            first_delivery = Some(started.elapsed());
        }
        if outage.is_none() && delivered as i64 >= total / 4 {
            sink.update_behaviour(|b| b.down_status = Some(503));
            outage = Some(Instant::now());
            println!("  ── the API goes down: every call answers 503 ──");
        }
        if let Some(t) = outage {
            if !restored && t.elapsed() >= Duration::from_secs(6) {
                sink.update_behaviour(|b| b.down_status = None);
                restored = true;
                println!("  ── the API is back ──");
            }
        }
        let a = sink.audit();
        let calls = if batch > 1 {
            let per = a.batch_items as f64 / a.batch_requests.max(1) as f64;
            format!("API calls {:>6} ({per:.0} events each)", a.batch_requests)
        } else {
            format!("API calls {:>6}", a.requests_total)
        };
        println!(
            "  {:>5.1}s  delivered {:>6}  committed {:>6}/{}  DLQ {:>3}  parked {:>3}  {calls}  partitions {}",
            started.elapsed().as_secs_f64(),
            delivered,
            committed,
            total,
            dlq,
            parked,
            prometheus.as_ref().map(|h| modes(&h.render())).unwrap_or_default()
        );
        if committed >= total && restored && dlq_drained(&brokers, &cfg)? {
            caught_up = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    match running {
        Some(r) => r.shutdown().await,
        // Still starting after the whole story's time: nothing to stop yet.
        None => {
            starting.abort();
            println!(
                "the pipeline did not start within {}s",
                STORY_LIMIT.as_secs()
            );
        }
    }
    let report: AuditReport = audit(
        &brokers,
        &cfg.kafka.dlq_topic(),
        &cfg.kafka.parking_topic(),
        &produced,
        &sink.audit(),
    )?;
    sink.shutdown();
    println!(
        "\nAudit after {:.1}s ({}; first events delivered after {}):",
        elapsed.as_secs_f64(),
        if caught_up {
            "all offsets committed"
        } else {
            "NOT caught up"
        },
        first_delivery.map_or("—".into(), |d| format!("{:.1}s", d.as_secs_f64()))
    );
    println!("{report}");
    if report.lost_count() > 0 || !caught_up {
        println!(
            "LOST events: {:?}",
            report.lost.iter().take(20).collect::<Vec<_>>()
        );
        return Ok(1);
    }
    println!("lost = 0: every event reached the API, the DLQ or the parking lot.");
    Ok(0)
}

/// The API stand-in's behaviour: 5–15 ms per call, 0.2 % random 503s (retried in
/// place), 8 events always refused with 503 (they end in the DLQ), 20 refused
/// once; with `avro`, the events' schema served as a schema registry.
fn api_behaviour(spec: &Spec, avro: bool) -> Behaviour {
    let events = spec.count;
    let mut fail_ids = HashMap::new();
    for seq in (1_000..events).step_by(1_999).take(8) {
        fail_ids.insert(
            loadgen::event_id(&spec.id_prefix, seq),
            FailRule {
                status: 503,
                times: None,
                retry_after_s: None,
            },
        );
    }
    for seq in (500..events).step_by(997).take(20) {
        fail_ids
            .entry(loadgen::event_id(&spec.id_prefix, seq))
            .or_insert(FailRule {
                status: 503,
                times: Some(1),
                retry_after_s: None,
            });
    }
    Behaviour {
        latency_ms: 5,
        latency_jitter_ms: 10,
        fail_ids,
        fail_rate: 0.002,
        fail_status: 503,
        schemas: if avro {
            [(AVRO_SCHEMA_ID, loadgen::AVRO_SCHEMA.to_string())].into()
        } else {
            Default::default()
        },
        ..Behaviour::default()
    }
}

/// "normal 4 · paused 2 · drain_dlq 0", read from the metrics.
fn modes(text: &str) -> String {
    let mut counts = [0usize; 3];
    let names = ["normal", "paused", "drain_dlq"];
    for line in text
        .lines()
        .filter(|l| l.starts_with(crate::metrics::PARTITION_MODE) && l.ends_with(" 1"))
    {
        for (i, n) in names.iter().enumerate() {
            if line.contains(&format!("mode=\"{n}\"")) {
                counts[i] += 1;
            }
        }
    }
    format!(
        "normal {} · paused {} · drain_dlq {}",
        counts[0], counts[1], counts[2]
    )
}

/// Every DLQ record that is due has been consumed (the always-failing events keep
/// coming back with a growing `not_before`; those are not waited for).
fn dlq_drained(brokers: &str, cfg: &Config) -> anyhow::Result<bool> {
    let ends = end_offsets(brokers, &cfg.kafka.dlq_topic(), PARTITIONS)?;
    let committed = committed_offsets(brokers, GROUP, &cfg.kafka.dlq_topic(), PARTITIONS)?;
    let pending: i64 = ends
        .iter()
        .zip(&committed)
        .map(|(e, c)| e - (*c).max(0))
        .sum();
    Ok(pending <= 8)
}

fn demo_config(brokers: &str) -> Config {
    let mut c = Config::default();
    c.kafka.brokers = brokers.to_string();
    c.kafka.topic = TOPIC.into();
    c.kafka.group_id = GROUP.into();
    c.kafka.auto_commit_interval = ms(200);
    c.api.retry_base = ms(20);
    c.api.retry_max_delay = ms(200);
    c.api.retry_budget = ms(600);
    c.pipeline.concurrency = 256;
    c.metrics.listen = String::new();
    // Quick degraded-mode timings, so the story fits in a minute.
    c.degraded.breaker_open = ms(2_000);
    c.degraded.min_pause = ms(500);
    c.degraded.dlq_backoff_base = ms(500);
    c.degraded.dlq_backoff_cap = ms(5_000);
    c.degraded.drain_rate_per_sec = 100.0;
    c.degraded.lag_check_interval = ms(250);
    // No Redis: a port nothing listens on (a Redis of the user's own on 6379
    // is left alone), refused at once.
    c.redis.url = "redis://127.0.0.1:1".into();
    c.redis.connect_timeout = ms(200);
    c
}

fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// The demo's events, made by the load generator, are what Courier reads: the
/// generator lives in courier-standins, which cannot use Courier's decoders.
#[cfg(test)]
mod tests {
    use crate::core::event::{decode, DecodeOptions};
    use bytes::Bytes;
    use courier_standins::loadgen::{event_avro, event_json, Poison, AVRO_SCHEMA};

    #[test]
    fn an_avro_event_decodes_to_the_json_event() {
        use crate::core::schema::{frame, AvroSchema, JsonOptions};
        let framed = event_avro("a-1", "t", "key-1", 7, 512, 42).unwrap();
        let f = frame::parse(&framed).unwrap();
        assert_eq!(f.schema_id, 42);
        let schema = AvroSchema::parse(AVRO_SCHEMA, &[]).unwrap();
        let json = schema
            .to_json(f.body, JsonOptions::default(), usize::MAX)
            .unwrap();
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let mut want: serde_json::Value =
            serde_json::from_slice(&event_json("a-1", "t", "key-1", 7, 512)).unwrap();
        // The same event; only the padding's length differs.
        want["data"]["pad"] = got["data"]["pad"].clone();
        assert_eq!(got, want);
        assert!((500..=524).contains(&framed.len()), "{}", framed.len());
    }

    #[test]
    fn generated_events_decode_and_poison_does_not() {
        let o = DecodeOptions {
            max_event_bytes: 4096,
            ..Default::default()
        };
        let e = event_json("a-1", "t", "key-1", 1, 512);
        assert!((500..530).contains(&e.len()), "{}", e.len());
        let ev = decode(Some(&Bytes::from(e)), &o).unwrap();
        assert_eq!(ev.id, "a-1");
        for (p, reason) in [
            (Poison::InvalidUtf8, "invalid_utf8"),
            (Poison::MalformedJson, "malformed_json"),
            (Poison::MissingAttribute, "missing_attribute"),
            (Poison::TooLarge(5000), "too_large"),
            (Poison::WrongType, "wrong_type"),
        ] {
            let err = decode(Some(&Bytes::from(p.bytes(7))), &o).unwrap_err();
            assert_eq!(err.reason(), reason);
        }
    }
}
