//! Destinations across a group (`core::destination`, `actors::health`): each
//! destination's Redis marker is shared by the instances, and with Redis down
//! each instance falls back to its own breaker per destination. Stops and
//! starts Redis: the only test of its binary (binaries run one at a time).

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

async fn sink() -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .expect("sink")
}

/// Two instances, two destinations; only instance A's breaker can open (B's
/// never does on its own). The second API goes down: A opens its breaker for
/// it and sets its marker; B holds the second destination's events too,
/// learnt from the marker alone, and both go on with the first destination.
/// Redis stopped: each rests on its own breakers, per destination — A still
/// holds the second destination, B (its breaker closed) no longer does, and
/// neither holds the first. Ends with the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_share_each_destinations_marker_and_fall_back_to_their_breakers() {
    let mut redis = OwnRedis::start();
    let s = redis.services(&services());
    let n = Names::new("dest-shared", 4);
    n.create(&s, true).await;
    let first = sink().await;
    let second = sink().await;
    let routes = format!(
        "\n[[api.routes]]\ntype = \"b.*\"\nurl = \"{}\"\ndestination = \"second\"\n",
        second.url()
    );
    let degraded = FAST.replace("marker_ttl = \"3s\"", "marker_ttl = \"10s\"");
    let toml_a = toml_with(&n, &first.url(), &degraded) + &routes;
    // B's breaker never opens: what it knows of the outage, it knows from Redis.
    let degraded_b = degraded.replace("breaker_min_calls = 10", "breaker_min_calls = 1000000")
        + "\nbreaker_consecutive_failures = 0\n";
    let toml_b = toml_with(&n, &first.url(), &degraded_b) + &routes;
    let mut a = Courier::start("dest-shared-a", &s, &toml_a);
    let mut b = Courier::start("dest-shared-b", &s, &toml_b);
    let mut produced = courier_standins::audit::Produced::default();
    let mut seq = 0;
    let mut produce = |event_type: &str, count: usize| {
        let p = block(loadgen::produce(
            &s.brokers,
            &n.topic,
            &Spec {
                count,
                keys: 50,
                id_prefix: format!("shared-{seq}"),
                event_type: event_type.into(),
                ..Spec::default()
            },
        ))
        .expect("produce");
        seq += 1;
        produced.ids.extend(p.ids);
        produced.offsets.extend(p.offsets);
    };
    produce("a.thing", 200);
    produce("b.thing", 200);
    let unavailable = |c: &Courier, dest: &str| {
        block(c.metric(&format!("courier_api_unavailable{{destination=\"{dest}\"")))
    };
    let first_dest = origin(&first.url());
    wait_until(Duration::from_secs(60), "both instances deliver", || {
        block(a.metric("courier_assigned_partitions")) >= 1.0
            && block(b.metric("courier_assigned_partitions")) >= 1.0
            && first.delivered_count() >= 200
            && second.delivered_count() >= 200
    })
    .await;

    second.update_behaviour(|b| b.down_status = Some(503));
    produce("b.thing", 300);
    produce("a.thing", 100);
    wait_until(
        Duration::from_secs(30),
        "A's breaker opens; B holds the second destination by the marker alone",
        || {
            unavailable(&a, "second") == 1.0
                && unavailable(&b, "second") == 1.0
                && block(b.metric("courier_marker_alive{destination=\"second\"")) == 1.0
                && block(b.metric("courier_breaker_state{destination=\"second\"")) == 0.0
        },
    )
    .await;
    assert_eq!(unavailable(&a, &first_dest), 0.0);
    assert_eq!(unavailable(&b, &first_dest), 0.0);
    let before = first.delivered_count();
    produce("a.thing", 200);
    wait_until(
        Duration::from_secs(30),
        "the first destination flows",
        || first.delivered_count() >= before + 200,
    )
    .await;

    redis.stop();
    wait_until(
        Duration::from_secs(30),
        "each rests on its own breakers: A holds the second, B does not",
        || {
            block(a.metric("courier_health_source{source=\"breaker\"")) == 1.0
                && block(b.metric("courier_health_source{source=\"breaker\"")) == 1.0
                && unavailable(&a, "second") == 1.0
                && unavailable(&b, "second") == 0.0
        },
    )
    .await;
    assert_eq!(unavailable(&a, &first_dest), 0.0);
    assert_eq!(unavailable(&b, &first_dest), 0.0);

    second.update_behaviour(|b| b.down_status = None);
    redis.start_again();
    wait_all_reached(Duration::from_secs(180), &produced, &[&first, &second]).await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("dest-shared", &rep);
    a.terminate(Duration::from_secs(20)).await;
    b.terminate(Duration::from_secs(20)).await;
}
