//! Degraded mode against the real broker, Redis and PostgreSQL, with one or two
//! Courier instances: pause on outage (Redis marker + local breaker), rate-limited
//! DLQ drain, retry policies. Every test ends with the no-loss audit.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::HashMap;
use std::time::{Duration, Instant};

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
    // Never silent: the move to the parking lot is in the log too.
    let log = c.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("a DLQ record leaves the DLQ for the parking lot")
                && l.contains("max_retries")
                && l.contains(doomed.as_str())
        ),
        "the drop is logged with its reason and id"
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
    wait_dlq_drained_within(s, n, Duration::from_secs(60)).await;
}

/// The DLQ records not yet committed by the group.
fn dlq_unread(s: &Services, n: &Names) -> i64 {
    let ends = courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, n.partitions).unwrap();
    let committed =
        courier::kafka::admin::committed_offsets(&s.brokers, &n.group, &n.dlq, n.partitions)
            .unwrap();
    committed
        .iter()
        .zip(&ends)
        .map(|(c, e)| e - (*c).max(0))
        .sum()
}

async fn wait_dlq_drained_within(s: &Services, n: &Names, timeout: Duration) {
    wait_until(timeout, "the DLQ is drained", || {
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
    let in_dlq = topic_size(&s, &n.dlq);
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

/// One `partition mode` log line: (time, partition, from, to).
fn mode_changes(log: &str) -> Vec<(chrono_free::Ts, i32, String, String)> {
    let mut out = Vec::new();
    for line in log.lines().filter(|l| l.contains("partition mode")) {
        let clean: String = strip_ansi(line);
        let Some(ts) = chrono_free::parse(&clean) else {
            continue;
        };
        let field = |name: &str| -> Option<String> {
            let i = clean.find(&format!(" {name}="))? + name.len() + 2;
            let rest = &clean[i..];
            let end = rest.find(' ').unwrap_or(rest.len());
            Some(rest[..end].trim_matches('"').to_string())
        };
        if let (Some(p), Some(from), Some(to)) = (field("partition"), field("from"), field("to")) {
            if let Ok(p) = p.parse() {
                out.push((ts, p, from, to));
            }
        }
    }
    out
}

/// Log timestamps (`2026-11-29T21:29:15.517644Z`) as milliseconds of the day:
/// enough to compare times within one test run.
mod chrono_free {
    pub(crate) type Ts = i64;
    pub(crate) fn parse(line: &str) -> Option<Ts> {
        let t = line.get(11..23)?; // HH:MM:SS.mmm
        let h: i64 = t.get(0..2)?.parse().ok()?;
        let m: i64 = t.get(3..5)?.parse().ok()?;
        let s: i64 = t.get(6..8)?.parse().ok()?;
        let ms: i64 = t.get(9..12)?.parse().ok()?;
        Some(((h * 60 + m) * 60 + s) * 1000 + ms)
    }
}

/// API flapping (down/up every 2 s for 30 s): no partition leaves `paused` sooner
/// than the minimum pause after entering it; lost = 0; transitions are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_api_does_not_make_the_fsm_oscillate() {
    let s = services();
    let n = Names::new("flap", 4);
    n.create(&s, true).await;
    let api = sink(Behaviour {
        latency_ms: 10,
        ..Behaviour::default()
    })
    .await;
    let spec = Spec {
        count: 30_000,
        keys: 5_000,
        id_prefix: "flap".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = toml_with(&n, &api.url(), FAST).replace("concurrency = 256", "concurrency = 16");
    let mut c = Courier::start(&n.topic, &s, &toml);
    wait_until(Duration::from_secs(60), "delivery under way", || {
        api.delivered_count() > 200
    })
    .await;
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.tick().await;
    for i in 0..15 {
        let down = i % 2 == 0;
        api.update_behaviour(|b| b.down_status = down.then_some(503));
        tick.tick().await; // the flapping schedule itself
    }
    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    wait_dlq_drained(&s, &n).await;
    c.terminate(Duration::from_secs(30)).await;

    let changes = mode_changes(&c.log_text());
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (_, _, _, to) in &changes {
        *counts.entry(to.clone()).or_default() += 1;
    }
    println!("[flap] mode transitions over 30 s of flapping (4 partitions): {counts:?}");
    // Entering `paused` is immediate; leaving it waits `min_pause` (500 ms).
    let mut entered: HashMap<i32, i64> = HashMap::new();
    for (ts, p, from, to) in &changes {
        if from == "paused" {
            if let Some(t) = entered.get(p) {
                assert!(
                    ts - t >= 490,
                    "partition {p} left paused {} ms after entering it",
                    ts - t
                );
            }
        }
        if to == "paused" {
            entered.insert(*p, *ts);
        }
    }
    let pauses = counts.get("paused").copied().unwrap_or(0);
    assert!(pauses >= 4, "the outages were noticed ({pauses} pauses)");
    assert!(
        pauses <= 4 * 31,
        "at most one pause per partition per 2 s half-cycle ({pauses})"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("flap", &rep);
    println!(
        "[flap] delivered {}, in DLQ {}, parked {}, duplicates {}",
        rep.delivered, rep.in_dlq, rep.parked, rep.duplicates
    );
}

/// A rebalance during the drain: partitions that move to a new instance keep
/// their FSM semantics there (state from the marker and the DLQ lag); lost = 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_during_drain_keeps_the_fsm() {
    let s = services();
    let n = Names::new("rebal", 4);
    n.create(&s, true).await;
    let api = sink(Behaviour {
        latency_ms: 10,
        ..Behaviour::default()
    })
    .await;
    let spec = Spec {
        count: 8_000,
        keys: 4_000,
        id_prefix: "rebal".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // Slow enough that the first owner cannot drain the DLQ partitions the new
    // owner will receive before it has joined: at 2/s (≈ 10 s for the ~20
    // records) a CI run with another test binary beside it saw the second
    // instance join after its partitions were empty (modes paused → normal).
    let slow_drain = FAST.replace("drain_rate_per_sec = 20.0", "drain_rate_per_sec = 0.5");
    let toml =
        toml_with(&n, &api.url(), &slow_drain).replace("concurrency = 256", "concurrency = 64");
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    wait_until(Duration::from_secs(60), "delivery under way", || {
        api.delivered_count() > 500
    })
    .await;
    api.update_behaviour(|b| b.down_status = Some(503));
    wait_until(Duration::from_secs(30), "the onset reached the DLQ", || {
        topic_size(&s, &n.dlq) >= 20
    })
    .await;
    let dlq_records = topic_size(&s, &n.dlq);
    api.update_behaviour(|b| b.down_status = None);
    wait_until(Duration::from_secs(60), "the drain started", || {
        api.audit().per_second_redelivery.iter().sum::<u64>() >= 2
    })
    .await;
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    // At 0.5 records/s per instance, and a key's later events followed its
    // first into the DLQ (I39): a minute, and 2 s per record still there.
    let unread = dlq_unread(&s, &n);
    let within = Duration::from_secs(60 + 2 * unread.max(0) as u64);
    println!("[rebalance] {unread} DLQ records to drain once main p is committed");
    wait_dlq_drained_within(&s, &n, within).await;
    a.terminate(Duration::from_secs(30)).await;
    b.terminate(Duration::from_secs(30)).await;
    let b_modes = mode_changes(&b.log_text());
    println!(
        "[rebalance] {dlq_records} DLQ records; new owner's mode changes: {:?}",
        b_modes
            .iter()
            .map(|(_, p, f, t)| format!("{p}:{f}->{t}"))
            .collect::<Vec<_>>()
    );
    assert!(
        b_modes.iter().any(|(_, _, _, to)| to == "drain_dlq"),
        "the new owner drained the DLQ partitions it received"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("rebalance", &rep);
    assert_eq!(rep.delivered, 8_000, "everything delivered, DLQ included");
}
