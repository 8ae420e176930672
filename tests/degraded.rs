//! Degraded mode against the real broker, Redis and PostgreSQL, with one or two
//! Courier instances: pause on outage (Redis marker + local breaker), rate-limited
//! DLQ drain, retry policies. Every test ends with the no-loss audit.

mod common;

use common::*;
use courier::loadgen::{self, Spec};
use courier::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Settings that make degraded mode quick enough to test.
const FAST: &str = "marker_ttl_ms = 3000
poll_interval_ms = 100
breaker_min_calls = 10
breaker_open_ms = 1500
min_pause_ms = 500
drain_rate_per_sec = 20.0
drain_concurrency = 4
dlq_backoff_base_ms = 300
dlq_backoff_cap_ms = 2000
lag_check_interval_ms = 250";

async fn sink(b: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().unwrap(), b)
        .await
        .expect("sink")
}

/// Counter policy: an event that always fails reaches the parking lot after
/// `max_retries` DLQ rounds, with `dlq_retries` equal to the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_policy_parks_after_max_retries() {
    let s = services();
    let n = Names::new("counter", 2);
    n.create(&s, true).await;
    let doomed = loadgen::event_id("counter", 7);
    let mut fail_ids = HashMap::new();
    fail_ids.insert(
        doomed.clone(),
        FailRule {
            status: 503,
            times: None,
            retry_after_s: None,
        },
    );
    let api = sink(Behaviour {
        fail_ids,
        ..Behaviour::default()
    })
    .await;
    let spec = Spec {
        count: 500,
        keys: 500,
        id_prefix: "counter".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = toml_with(&n, &api.url(), FAST)
        + "\n[retry]\ndefault = { kind = \"counter\", max_retries = 2 }\n";
    let mut c = Courier::start(&n.topic, &s, &toml);

    wait_until(
        Duration::from_secs(60),
        "the doomed event is parked",
        || {
            envelopes(&s, &n.parking)
                .iter()
                .any(|e| e.event_id.as_deref() == Some(doomed.as_str()))
        },
    )
    .await;
    let parked = envelopes(&s, &n.parking);
    let env = parked
        .iter()
        .find(|e| e.event_id.as_deref() == Some(doomed.as_str()))
        .unwrap();
    assert_eq!(env.dlq_retries, 2, "dlq_retries equals the limit");
    assert_eq!(env.last_error.reason, "max_retries");
    assert_eq!(
        c.metric("courier_dlq_dropped_total{reason=\"max_retries\"")
            .await,
        1.0
    );
    // 3 in-place tries on the main path, then one try per DLQ round.
    assert_eq!(api.audit().attempts.get(&doomed), Some(&5));
    // The DLQ holds the first entry and one re-produce; each with growing retries.
    let rounds: Vec<u32> = envelopes(&s, &n.dlq)
        .iter()
        .filter(|e| e.event_id.as_deref() == Some(doomed.as_str()))
        .map(|e| e.dlq_retries)
        .collect();
    assert_eq!(rounds, vec![0, 1], "dlq_retries grows by one per round");
    n.wait_committed_to_end(&s, Duration::from_secs(30)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("counter", &rep);
    assert_eq!(rep.parked, 1);
}

/// Waits until the group's committed DLQ offsets reach the DLQ's end offsets
/// (a partition that never had a DLQ record has nothing to commit).
async fn wait_dlq_drained(s: &Services, n: &Names) {
    wait_until(Duration::from_secs(60), "the DLQ is drained", || {
        let ends = courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, n.partitions).unwrap();
        let committed =
            courier::kafka::admin::committed_offsets(&s.brokers, &n.group, &n.dlq, n.partitions)
                .unwrap();
        committed.iter().zip(&ends).all(|(c, e)| (*c).max(0) == *e)
    })
    .await;
}

/// Polls an instance's metric until it reaches `value`; returns how long it took.
async fn time_until_metric(c: &Courier, name: &str, value: f64, timeout: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        if c.metric(name).await == value {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < timeout,
            "{name} did not reach {value} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// API fully down for 10 s under load with 2 instances: both pause (time to pause
/// printed), the DLQ holds about the onset's in-flight events, not the backlog; the
/// DLQ then drains at no more than the configured rate and the main topic resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_pauses_both_instances_then_drains_at_the_limit() {
    let s = services();
    let n = Names::new("outage", 4);
    n.create(&s, true).await;
    let api = sink(Behaviour {
        latency_ms: 20,
        ..Behaviour::default()
    })
    .await;
    let spec = Spec {
        count: 20_000,
        keys: 5_000,
        id_prefix: "outage".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = toml_with(&n, &api.url(), FAST).replace("concurrency = 256", "concurrency = 32");
    let a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    let b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    wait_until(Duration::from_secs(60), "both instances deliver", || {
        block(a.metric("courier_delivered_total")) > 200.0
            && block(b.metric("courier_delivered_total")) > 200.0
    })
    .await;

    // The outage begins.
    let t0 = Instant::now();
    api.update_behaviour(|b| b.down_status = Some(503));
    let (ta, tb) = tokio::join!(
        time_until_metric(&a, "courier_api_unavailable", 1.0, Duration::from_secs(10)),
        time_until_metric(&b, "courier_api_unavailable", 1.0, Duration::from_secs(10)),
    );
    let both = ta.max(tb);
    println!(
        "[outage] time from the first failure to both instances paused: {} ms (a {} ms, b {} ms)",
        both.as_millis(),
        ta.as_millis(),
        tb.as_millis()
    );
    assert!(both < Duration::from_secs(3), "pause took {both:?}");

    // Hold the outage for 10 s. Meanwhile the DLQ takes the onset only.
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(t0.elapsed())).await; // the outage's length itself
    let in_dlq = topic_size(&s, &n.dlq, n.partitions);
    let delivered = api.delivered_count();
    let backlog = 20_000 - delivered as i64;
    println!("[outage] after 10 s down: {in_dlq} DLQ records, backlog {backlog} events");
    assert!(
        backlog > 5_000,
        "the outage hit under load (backlog {backlog})"
    );
    assert!(
        in_dlq <= 2 * 32 + 40,
        "the DLQ holds about the onset's in-flight events ({in_dlq}), not the backlog"
    );

    // Recovery: the DLQ drains at no more than 20/s per instance, then the rest.
    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    wait_dlq_drained(&s, &n).await;
    let audit = api.audit();
    let peak = audit.peak_redelivery_rps();
    let redelivered: u64 = audit.per_second_redelivery.iter().sum();
    println!("[outage] DLQ redeliveries: {redelivered}, peak {peak}/s (limit 2 × 20/s)");
    assert!(
        redelivered > 0 || in_dlq == 0,
        "the DLQ was drained through the API"
    );
    assert!(
        peak <= 2 * 21,
        "drain peak {peak}/s above 2 instances × 20/s"
    );
    let (mut a, mut b) = (a, b);
    a.terminate(Duration::from_secs(30)).await;
    b.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("outage", &rep);
    assert_eq!(
        rep.delivered, 20_000,
        "everything delivered once the API is back"
    );
    println!(
        "[outage] duplicates: {} ({:.2}%)",
        rep.duplicates,
        rep.duplicate_pct()
    );
}
