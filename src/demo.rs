//! `courier demo`: the real pipeline, with no setup. An embedded librdkafka mock
//! cluster stands in for Kafka, the API stand-in for the external API. A stream of
//! synthetic CloudEvents with some bad input and some API failures goes through,
//! progress is shown while it runs, and the run ends with the no-loss audit.

use crate::audit::{audit, AuditReport};
use crate::config::Config;
use crate::kafka::admin::{committed_offsets, end_offsets};
use crate::loadgen::{self, Spec};
use crate::sink::{Behaviour, FailRule, SinkHandle};
use anyhow::Context;
use rdkafka::mocking::MockCluster;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const TOPIC: &str = "demo.events";
const PARTITIONS: i32 = 6;
const GROUP: &str = "courier-demo";

pub async fn run(events: usize) -> anyhow::Result<u8> {
    println!("Courier demo: embedded Kafka (librdkafka mock cluster) + embedded API stand-in\n");
    let mock = MockCluster::new(1).context("cannot start the embedded mock cluster")?;
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
        ..Spec::default()
    };
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
    let behaviour = Behaviour {
        latency_ms: 5,
        latency_jitter_ms: 10,
        fail_ids,
        fail_rate: 0.002,
        fail_status: 503,
        ..Behaviour::default()
    };
    let sink = SinkHandle::start("127.0.0.1:0".parse()?, behaviour).await?;
    println!("API stand-in on {}", sink.url());

    print!(
        "producing {events} events ({} of them bad input)… ",
        events / 250
    );
    let produced = loadgen::produce(&brokers, TOPIC, &spec).await?;
    println!("done");

    let mut cfg = cfg;
    cfg.api.url = sink.url();
    let started = Instant::now();
    let running = crate::app::start(cfg.clone(), None).await?;
    let ends = end_offsets(&brokers, TOPIC, PARTITIONS)?;
    let total: i64 = ends.iter().sum();
    let mut caught_up = false;
    while started.elapsed() < Duration::from_secs(50) {
        tokio::time::sleep(Duration::from_millis(500)).await;
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
        println!(
            "  {:>5.1}s  delivered {:>6}  committed {:>6}/{}  DLQ {:>3}  parked {:>3}  API requests {:>6}",
            started.elapsed().as_secs_f64(),
            sink.delivered_count(),
            committed,
            total,
            dlq,
            parked,
            sink.audit().requests_total
        );
        if committed >= total {
            caught_up = true;
            break;
        }
    }
    running.shutdown().await;
    let elapsed = started.elapsed();
    let report: AuditReport = audit(
        &brokers,
        &cfg.kafka.dlq_topic(),
        &cfg.kafka.parking_topic(),
        &produced,
        &sink.audit(),
    )?;
    sink.shutdown();
    println!(
        "\nAudit after {:.1}s ({}):",
        elapsed.as_secs_f64(),
        if caught_up {
            "all offsets committed"
        } else {
            "NOT caught up"
        }
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

fn demo_config(brokers: &str) -> Config {
    let mut c = Config::default();
    c.kafka.brokers = brokers.to_string();
    c.kafka.topic = TOPIC.into();
    c.kafka.group_id = GROUP.into();
    c.kafka.auto_commit_interval_ms = 200;
    c.api.retry_base_ms = 20;
    c.api.retry_max_delay_ms = 200;
    c.api.retry_budget_ms = 600;
    c.pipeline.concurrency = 256;
    c.metrics.listen = String::new();
    c
}
