//! Crash and rebalance cost (issue 13) against the real broker, with the API
//! stand-in at 20 ms: one of three static members is SIGKILLed under load and
//! restarted with the same instance id; a third instance joins two under load.
//! Each ends with the audit. The safety properties are asserted (lost 0,
//! duplicates within what was in flight plus what finished since the last
//! commit); the timings (takeover seconds) are printed for docs/DRILLS.md,
//! never asserted.

mod common;

use common::*;
use courier::loadgen::{self, Spec};
use courier::sink::{Behaviour, SinkHandle};
use std::time::{Duration, Instant};

/// `kafka.auto_commit_interval` in these tests.
const COMMIT_INTERVAL: &str = "100ms";

/// `pipeline.concurrency` per instance in these tests.
const CONCURRENCY: usize = 32;

async fn sink_20ms() -> SinkHandle {
    SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 20,
            ..Behaviour::default()
        },
    )
    .await
    .expect("start the API stand-in")
}

/// A static member named `id` (its `POD_NAME`), committing every 100 ms.
fn start(n: &Names, s: &Services, toml: &str, log_name: &str, id: &str) -> Courier {
    let concurrency = CONCURRENCY.to_string();
    Courier::start_with_env(
        &format!("{}-{log_name}", n.topic),
        s,
        toml,
        &[
            ("POD_NAME", id),
            ("COURIER__PIPELINE__CONCURRENCY", concurrency.as_str()),
            ("COURIER__KAFKA__AUTO_COMMIT_INTERVAL", COMMIT_INTERVAL),
        ],
    )
}

/// Polls `what` (a metric of `c`) until it equals `value`.
async fn wait_for_metric(c: &Courier, what: &str, value: f64, timeout: Duration) {
    let until = Instant::now() + timeout;
    while c.metric(what).await != value {
        assert!(
            Instant::now() < until,
            "{what} never reached {value} in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `what` (a metric of `c`) until it is above 0; returns when.
async fn first_positive(c: &Courier, what: &str, timeout: Duration) -> Instant {
    let until = Instant::now() + timeout;
    loop {
        if c.metric(what).await > 0.0 {
            return Instant::now();
        }
        assert!(Instant::now() < until, "{what} stayed 0 for {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILL one of three static members at ~30 % delivered and restart it at
/// once with the same instance id: it takes its partitions back without
/// waiting for the session timeout, the offsets its commit metadata names
/// done are skipped, nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_restart_of_a_static_member() {
    let s = services();
    let n = Names::new("crashcost", 6);
    n.create(&s, true).await;
    let api = sink_20ms().await;
    let spec = Spec {
        count: 20_000,
        keys: 2_000,
        id_prefix: "crashcost".into(),
        ..Spec::default()
    };
    let toml = base_toml(&n, &api.url());
    let ids = ["a", "b", "c"].map(|x| format!("{}-{x}", n.topic));
    let mut a = start(&n, &s, &toml, "a", &ids[0]);
    let mut b = start(&n, &s, &toml, "b", &ids[1]);
    let mut c = start(&n, &s, &toml, "c", &ids[2]);
    // Steady state first: each of the three owns its two partitions.
    for x in [&a, &b, &c] {
        wait_for_metric(
            x,
            "courier_assigned_partitions",
            2.0,
            Duration::from_secs(60),
        )
        .await;
    }
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    wait_until(Duration::from_secs(120), "6,000 events delivered", || {
        api.delivered_count() >= 6_000
    })
    .await;
    // The killed instance's requests on the wire, just before the kill.
    let in_flight = a.metric("courier_in_flight").await;
    let a_delivered = a.metric("courier_delivered_total").await;
    let duplicates_before = api.audit().duplicates();
    a.kill().await;
    let killed_at = Instant::now();
    let delivered_at_kill = api.delivered_count();
    let mut a2 = start(&n, &s, &toml, "a-restarted", &ids[0]);
    let first = first_positive(&a2, "courier_delivered_total", Duration::from_secs(90)).await;
    let takeover = first - killed_at;
    n.wait_committed_to_end(&s, Duration::from_secs(240)).await;
    let skipped = a2.metric("courier_offsets_skipped_total").await;
    for x in [&mut a2, &mut b, &mut c] {
        x.terminate(Duration::from_secs(30)).await;
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("crash-cost", &rep);
    let duplicates = rep.duplicates - duplicates_before;
    println!(
        "[crash-cost] commit interval {COMMIT_INTERVAL}: killed at {delivered_at_kill} delivered \
         ({a_delivered} by the killed instance) with {in_flight} requests in flight; \
         takeover (kill → the restarted instance's first delivery) {:.2} s; \
         duplicates {duplicates} ({:.2} × in flight; {duplicates_before} before the kill); \
         offsets skipped by the restarted instance {skipped}",
        takeover.as_secs_f64(),
        duplicates as f64 / in_flight.max(1.0),
    );
    // What was in flight (at most the concurrency), plus what an instance can
    // finish between two commits: at most `CONCURRENCY` per API round trip
    // (20 ms), over one commit interval and a commit's own round trip (50 ms).
    let interval = humantime::parse_duration(COMMIT_INTERVAL).unwrap();
    let window_ms = interval.as_millis() as usize + 50;
    let bound = CONCURRENCY + CONCURRENCY * window_ms / 20;
    assert!(
        duplicates as usize <= bound,
        "duplicates {duplicates} above {bound}: the concurrency {CONCURRENCY} plus what \
         finishes within one commit interval ({COMMIT_INTERVAL}); in flight at the kill: {in_flight}"
    );
}

/// A third instance joins two under load (every partition is revoked: eager
/// `range`). The revoke drain waits only for requests on the wire; queued jobs
/// are abandoned before they take a permit, so no request is made for a
/// revoked partition after its revoke completed (`courier_revoked_work_total`
/// counts the outcomes of any that were), and duplicates stay within what was
/// in flight at the rebalance. Few permits and many queued jobs per instance,
/// a short drain: without the cancellation, queued jobs outlive the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_instance_joins_without_zombie_work() {
    let s = services();
    let n = Names::new("scaleout", 6);
    n.create(&s, true).await;
    let api = sink_20ms().await;
    let spec = Spec {
        count: 20_000,
        keys: 2_000,
        id_prefix: "scaleout".into(),
        ..Spec::default()
    };
    let toml = base_toml(&n, &api.url());
    let start_small = |name: &str| {
        let id = format!("{}-{name}", n.topic);
        Courier::start_with_env(
            &id,
            &s,
            &toml,
            &[
                ("POD_NAME", id.as_str()),
                ("COURIER__PIPELINE__CONCURRENCY", "8"),
                ("COURIER__PIPELINE__DRAIN_TIMEOUT", "1s"),
                ("COURIER__KAFKA__AUTO_COMMIT_INTERVAL", COMMIT_INTERVAL),
            ],
        )
    };
    let mut a = start_small("a");
    let mut b = start_small("b");
    for x in [&a, &b] {
        wait_for_metric(
            x,
            "courier_assigned_partitions",
            3.0,
            Duration::from_secs(60),
        )
        .await;
    }
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    wait_until(Duration::from_secs(120), "3,000 events delivered", || {
        api.delivered_count() >= 3_000
    })
    .await;
    let in_flight = a.metric("courier_in_flight").await + b.metric("courier_in_flight").await;
    let duplicates_before = api.audit().duplicates();
    let mut c = start_small("c");
    for x in [&a, &b, &c] {
        wait_for_metric(
            x,
            "courier_assigned_partitions",
            2.0,
            Duration::from_secs(60),
        )
        .await;
    }
    n.wait_committed_to_end(&s, Duration::from_secs(240)).await;
    let mut revoked_work = 0.0;
    for x in [&a, &b, &c] {
        revoked_work += x.metric("courier_revoked_work_total").await;
    }
    for x in [&mut a, &mut b, &mut c] {
        x.terminate(Duration::from_secs(30)).await;
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("scale-out", &rep);
    let duplicates = rep.duplicates - duplicates_before;
    println!(
        "[scale-out] {in_flight} requests in flight at the rebalance; duplicates {duplicates}; \
         work done for revoked partitions after their revoke: {revoked_work}"
    );
    assert_eq!(
        revoked_work, 0.0,
        "requests were made for partitions after their revoke completed"
    );
    assert!(
        duplicates as f64 <= in_flight,
        "duplicates {duplicates} above the {in_flight} in flight at the rebalance"
    );
}

/// Static members send no LeaveGroup when they close (KIP-345): a SIGTERM'd
/// one would keep its partitions unread until the session timeout. Courier
/// leaves explicitly on shutdown (`kafka.leave_on_shutdown`), so the remaining
/// member owns every partition long before the (60 s) session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_static_member_hands_its_partitions_over_at_once() {
    let s = services();
    let n = Names::new("staticleave", 4);
    n.create(&s, true).await;
    let api = sink_20ms().await;
    let toml = base_toml(&n, &api.url());
    let start_static = |name: &str| {
        let id = format!("{}-{name}", n.topic);
        Courier::start_with_env(
            &id,
            &s,
            &toml,
            &[
                ("POD_NAME", id.as_str()),
                ("COURIER__KAFKA__SESSION_TIMEOUT", "60s"),
            ],
        )
    };
    let mut a = start_static("a");
    let mut b = start_static("b");
    for x in [&a, &b] {
        wait_for_metric(
            x,
            "courier_assigned_partitions",
            2.0,
            Duration::from_secs(60),
        )
        .await;
    }
    assert_eq!(a.terminate(Duration::from_secs(30)).await, Some(0));
    // Well inside the 60 s session timeout: only a LeaveGroup explains it.
    wait_for_metric(
        &b,
        "courier_assigned_partitions",
        4.0,
        Duration::from_secs(25),
    )
    .await;
    assert!(
        a.log_text().contains("left the consumer group"),
        "the static member said it left"
    );
    b.terminate(Duration::from_secs(30)).await;
}
