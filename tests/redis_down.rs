//! Degraded-mode test 2: Redis stopped before an API outage. Both instances still
//! stop hammering the API through their local breakers (requests per second during
//! the outage bounded by the half-open probes) and resume after it; when Redis is
//! back, the marker protocol takes over again. Ends with the audit.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_breakers_protect_the_api_while_redis_is_down() {
    let mut redis = OwnRedis::start();
    let s = redis.services(&services());
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

    redis.stop();
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
    redis.start_again();
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

/// Review finding (issue 23): the group's "API down" marker written without a
/// TTL — by hand, by another tool, or one a clock step on the Redis host made
/// hours long — used to be trusted by `EXISTS`: every instance paused for
/// ever, nothing delivered, no fallback. Now such a marker is treated as
/// absent (logged) and deleted: a healthy API gets every event. The events
/// are produced once Courier reads the marker through Redis. Ends with the
/// audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_without_ttl_does_not_stall_the_group() {
    use fred::prelude::*;
    let s = services();
    let n = Names::new("stalemarker", 2);
    n.create(&s, true).await;
    let client = Builder::from_config(Config::from_url(&s.redis_url).unwrap())
        .build()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), client.init())
        .await
        .expect("Redis answers within 30 s")
        .expect("Redis");
    let key = format!("courier:{}:api-down", n.group);
    let _: () = client
        .set(key.as_str(), "written-by-hand", None, None, false)
        .await
        .unwrap();
    let api = api_with_latency(1).await;
    let mut c = Courier::start(&n.topic, &s, &base_toml(&n, &api.url()));
    wait_until(
        Duration::from_secs(60),
        "Courier has its partitions and reads the marker through Redis",
        || {
            block(c.metric("courier_assigned_partitions")) >= 2.0
                && block(c.metric("courier_health_source{source=\"redis\"")) == 1.0
        },
    )
    .await;
    let spec = Spec {
        count: 60,
        keys: 60,
        id_prefix: "stalemarker".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    wait_until(
        Duration::from_secs(60),
        "every event delivered though a marker without TTL is in Redis",
        || api.delivered_count() >= 60,
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(block(c.metric("courier_marker_alive")), 0.0);
    let left: i64 = client.exists(key.as_str()).await.unwrap();
    assert_eq!(left, 0, "the marker without TTL is deleted");
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert!(
        c.log_text().contains("the API-down marker has no TTL"),
        "the distrusted marker is logged"
    );
    let _: i64 = client.del(key.as_str()).await.unwrap_or(0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("stalemarker", &rep);
    assert_eq!(rep.delivered, 60, "{rep}");
}
