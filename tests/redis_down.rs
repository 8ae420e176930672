//! Degraded-mode test 2: Redis stopped before an API outage. Both instances still
//! stop hammering the API through their local breakers (requests per second during
//! the outage bounded by the half-open probes) and resume after it; when Redis is
//! back, the marker protocol takes over again. Ends with the audit.

mod common;

use common::*;
use courier::loadgen::{self, Spec};
use std::time::{Duration, Instant};

/// Restarts Redis even when the test fails half-way.
struct RedisBack<'a>(&'a Services);
impl Drop for RedisBack<'_> {
    fn drop(&mut self) {
        self.0.ctl("redis-start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_breakers_protect_the_api_while_redis_is_down() {
    let s = services();
    let n = Names::new("noredis", 4);
    n.create(&s, true).await;
    let api = api_with_latency(20).await;
    let sink_t0 = Instant::now();
    let spec = Spec {
        count: 20_000,
        keys: 5_000,
        id_prefix: "noredis".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let degraded = FAST.replace("drain_rate_per_sec = 20.0", "drain_rate_per_sec = 50.0");
    let toml =
        toml_with(&n, &api.url(), &degraded).replace("concurrency = 256", "concurrency = 32");
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    let on_both = |name: &str, v: f64| block(a.metric(name)) == v && block(b.metric(name)) == v;
    // Each instance has partitions and delivers: the first one can take all the
    // partitions and deliver hundreds of events before the second has joined.
    let both_at_least =
        |name: &str, v: f64| block(a.metric(name)) >= v && block(b.metric(name)) >= v;
    wait_until(
        Duration::from_secs(60),
        "both deliver with Redis as the health source",
        || {
            api.delivered_count() > 500
                && both_at_least("courier_assigned_partitions", 1.0)
                && both_at_least("courier_delivered_total", 1.0)
                && on_both("courier_health_source{source=\"redis\"", 1.0)
        },
    )
    .await;

    s.ctl("redis-stop");
    let back = RedisBack(&s);
    wait_until(
        Duration::from_secs(30),
        "both rest on their breakers",
        || on_both("courier_health_source{source=\"breaker\"", 1.0),
    )
    .await;

    let t0 = Instant::now();
    api.update_behaviour(|b| b.down_status = Some(503));
    wait_until(Duration::from_secs(10), "both pause", || {
        on_both("courier_api_unavailable", 1.0)
    })
    .await;
    println!(
        "[noredis] both paused {} ms after the outage began",
        t0.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(t0.elapsed())).await; // the outage's length itself
    let first = (t0 - sink_t0).as_secs() as usize + 2;
    let last = (Instant::now() - sink_t0).as_secs() as usize;
    let per_second = api.audit().per_second;
    let during: Vec<u64> = (first..last)
        .map(|i| per_second.get(i).copied().unwrap_or(0))
        .collect();
    println!(
        "[noredis] API requests per second during the outage (after its first 2 s): {during:?}"
    );
    let peak = during.iter().copied().max().unwrap_or(0);
    // Each instance admits 3 probes per 1.5 s open interval.
    assert!(
        peak <= 12,
        "the API was hammered during the outage: {peak}/s"
    );
    let backlog = 20_000 - api.delivered_count() as i64;
    assert!(
        backlog > 5_000,
        "the outage hit under load (backlog {backlog})"
    );

    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;

    // Redis is back: the shared marker is part of the verdict again.
    drop(back);
    wait_until(Duration::from_secs(30), "both use Redis again", || {
        on_both("courier_health_source{source=\"redis\"", 1.0)
    })
    .await;
    api.update_behaviour(|b| b.down_status = Some(503));
    let produced2 = loadgen::produce(
        &s.brokers,
        &n.topic,
        &Spec {
            count: 2_000,
            keys: 2_000,
            id_prefix: "noredis2".into(),
            ..Spec::default()
        },
    )
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(30),
        "the marker pauses both instances",
        || on_both("courier_marker_alive", 1.0),
    )
    .await;
    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    a.terminate(Duration::from_secs(30)).await;
    b.terminate(Duration::from_secs(30)).await;

    let mut all = produced;
    all.ids.extend(produced2.ids);
    all.offsets.extend(produced2.offsets);
    let rep = n.audit(&s, &all, &api);
    assert_no_loss("noredis", &rep);
    println!(
        "[noredis] duplicates: {} ({:.2}%)",
        rep.duplicates,
        rep.duplicate_pct()
    );
}
