//! End-to-end tests of the core pipeline against the real broker, with the API
//! stand-in as a real HTTP server. Each ends with the no-loss audit.

mod common;

use common::*;
use courier_standins::loadgen::{self, Poison, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::collections::HashMap;
use std::time::Duration;

async fn sink(latency_ms: u64) -> SinkHandle {
    jittery_sink(latency_ms, 0).await
}

async fn jittery_sink(latency_ms: u64, latency_jitter_ms: u64) -> SinkHandle {
    SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms,
            latency_jitter_ms,
            ..Behaviour::default()
        },
    )
    .await
    .expect("sink")
}

/// Event seq → key is known from the generator; the API's arrival order must list
/// each key's sequence numbers in increasing order.
fn assert_per_key_order(order: &[String], keys: usize) {
    let mut last: HashMap<String, usize> = HashMap::new();
    for id in order {
        let seq: usize = id.rsplit('-').next().unwrap().parse().unwrap();
        let key = loadgen::key_of(seq, keys);
        if let Some(prev) = last.insert(key.clone(), seq) {
            assert!(seq > prev, "key {key}: seq {seq} delivered after {prev}");
        }
    }
}

/// 1. 10,000 events on 6 partitions, API latency 20 ms: all delivered, committed
/// offsets equal end offsets, lost = 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_everything_and_commits_to_the_end() {
    let s = services();
    let n = Names::new("e2e", 6);
    n.create(&s, true).await;
    let api = sink(20).await;
    let spec = Spec {
        count: 10_000,
        keys: 1_000,
        id_prefix: "e2e".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let mut c = Courier::start(&n.topic, &s, &base_toml(&n, &api.url()));
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    assert_eq!(
        c.terminate(Duration::from_secs(30)).await,
        Some(0),
        "clean exit on SIGTERM"
    );
    assert_eq!(n.committed(&s), n.ends(&s));
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("e2e", &rep);
    assert_eq!(rep.delivered, 10_000);
    assert_eq!(
        api.audit().bad_requests,
        0,
        "every request carried Idempotency-Key = event id"
    );
}

/// 2. Poison mixed in: each parked with its reason, the partition keeps flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_is_parked_with_its_reason_and_the_rest_flows() {
    let s = services();
    let n = Names::new("poison", 3);
    n.create(&s, true).await;
    let api = sink(0).await;
    let spec = Spec {
        count: 2_000,
        keys: 50,
        id_prefix: "poison".into(),
        poison_every: Some(20),
        poison_kinds: vec![
            Poison::InvalidUtf8,
            Poison::MalformedJson,
            Poison::MissingAttribute,
            Poison::TooLarge(5_000),
            Poison::WrongType,
        ],
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    assert_eq!(produced.poison.len(), 100);
    let toml = base_toml(&n, &api.url()) + "max_event_bytes = 4096\n";
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("poison", &rep);
    assert_eq!(rep.delivered, 1_900, "every valid event delivered");
    assert_eq!(rep.parked, 100);
    for reason in [
        "invalid_utf8",
        "malformed_json",
        "missing_attribute",
        "too_large",
        "wrong_type",
    ] {
        assert_eq!(
            rep.parked_by_reason.get(reason),
            Some(&20),
            "reason {reason}: {:?}",
            rep.parked_by_reason
        );
    }
    // The parking-lot records carry the reason in headers too.
    let parked = courier_standins::admin::read_all(&s.brokers, &n.parking).unwrap();
    assert_eq!(parked.len(), 100);
    for r in &parked {
        assert!(r.headers.contains_key("courier-reason"), "{:?}", r.headers);
        assert_eq!(r.headers["kafka_dlt-original-topic"], n.topic);
    }
}

/// 4. SIGKILL mid-run with work in flight, then a restart: lost = 0, duplicates
/// counted and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_loses_nothing() {
    let s = services();
    let n = Names::new("kill", 6);
    n.create(&s, true).await;
    let api = sink(20).await;
    let spec = Spec {
        count: 10_000,
        keys: 1_000,
        id_prefix: "kill".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url());
    let mut c = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    wait_until(Duration::from_secs(60), "3,000 events delivered", || {
        api.delivered_count() >= 3_000
    })
    .await;
    c.kill().await;
    let at_kill = api.delivered_count();
    let mut c2 = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c2.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("sigkill", &rep);
    assert_eq!(rep.delivered, 10_000);
    println!(
        "[sigkill] killed after {at_kill} deliveries; duplicates after restart: {} ({:.2}%)",
        rep.duplicates,
        rep.duplicate_pct()
    );
}

/// 5. A partition actor crash injected on a marked event: it restarts, the
/// partition is re-read from the watermark, lost = 0.
// Uses the `[testing]` fault hook: needs the `test-hooks` feature (scripts/test.sh).
#[cfg(feature = "test-hooks")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_actor_crash_rereads_from_watermark() {
    let s = services();
    let n = Names::new("crash", 3);
    n.create(&s, true).await;
    let api = sink(5).await;
    let spec = Spec {
        count: 3_000,
        keys: 100,
        id_prefix: "crash".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let marked = loadgen::event_id("crash", 1_500);
    let toml =
        base_toml(&n, &api.url()) + &format!("\n[testing]\ncrash_on_event_id = \"{marked}\"\n");
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let restarts = c.metric("courier_actor_restarts_total").await;
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        log.contains("test fault hook: partition actor crashes"),
        "the hook fired"
    );
    assert!(
        log.contains("partition actor crashed"),
        "the consumer saw the crash"
    );
    assert_eq!(restarts, 1.0, "one actor restart counted");
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("crash", &rep);
    assert_eq!(rep.delivered, 3_000);
    assert!(
        api.audit().delivered.contains_key(&marked),
        "the marked event itself was delivered after the restart"
    );
    println!("[crash] duplicates: {}", rep.duplicates);
}

/// Supervision gives up after `max_restarts` crashes within the window: the
/// process exits non-zero with a clear log line, and nothing past the crashing
/// event is committed.
// Uses the `[testing]` fault hook: needs the `test-hooks` feature (scripts/test.sh).
#[cfg(feature = "test-hooks")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_crashes_exhaust_the_restart_budget() {
    let s = services();
    let n = Names::new("budget", 1);
    n.create(&s, true).await;
    let api = sink(0).await;
    let spec = Spec {
        count: 200,
        keys: 10,
        id_prefix: "budget".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let marked = loadgen::event_id("budget", 100);
    let toml = base_toml(&n, &api.url())
        + &format!(
            "
[supervision]
max_restarts = 3
window = \"1m\"

[testing]
crash_on_event_id = \"{marked}\"
crash_repeatedly = true
"
        );
    let mut c = Courier::start(&n.topic, &s, &toml);
    let code = c.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        code,
        Some(70),
        "exit code 70 when the restart budget is exhausted"
    );
    let log = c.log_text();
    assert!(log.contains("giving up"), "a clear log line says why");
    assert!(log.contains("partition actors crash too often"));
    // The marked event never finished, so no committed offset passes it.
    let (_, marked_offset) = produced.offsets[100];
    let committed = n.committed(&s)[0];
    assert!(
        committed <= marked_offset,
        "committed {committed} must not pass the crashing event at {marked_offset}"
    );
    assert!(!api.audit().delivered.contains_key(&marked));
}

/// Issue 23 item 3: a panic in the poll thread (injected on reading a record
/// with a marked key) ends the process non-zero after draining what it holds,
/// like a fatal client error, instead of leaving a process that looks healthy
/// and fetches nothing (seen before the fix: still running after 60 s). A
/// restart delivers the rest: lost 0.
// Uses the `[testing]` fault hook: needs the `test-hooks` feature (scripts/test.sh).
#[cfg(feature = "test-hooks")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_poll_thread_ends_the_process() {
    let s = services();
    let n = Names::new("pollpanic", 2);
    n.create(&s, true).await;
    let api = sink(0).await;
    let spec = Spec {
        count: 400,
        keys: 40,
        id_prefix: "pollpanic".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url()) + "\n[testing]\npoll_panic_on_key = \"key-7\"\n";
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    let code = a.wait_exit(Duration::from_secs(60)).await;
    let log = a.log_text();
    assert_eq!(code, Some(70), "exit 70 after the poll thread panicked");
    assert!(
        log.contains("the poll thread panicked: test fault hook"),
        "the reason is logged"
    );
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &base_toml(&n, &api.url()));
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(b.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("pollpanic", &rep);
    assert_eq!(rep.delivered, 400);
}

/// 6. A second instance joins the group mid-run and later leaves: lost = 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_joins_and_leaves_mid_run() {
    let s = services();
    let n = Names::new("join", 6);
    n.create(&s, true).await;
    let api = sink(20).await;
    let spec = Spec {
        count: 10_000,
        keys: 1_000,
        id_prefix: "join".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url()).replace("concurrency = 256", "concurrency = 64");
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    wait_until(Duration::from_secs(60), "2,000 delivered", || {
        api.delivered_count() >= 2_000
    })
    .await;
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    let before_b = api.delivered_count();
    wait_until(
        Duration::from_secs(60),
        "the second instance takes part",
        || {
            b.log_text().contains("partitions assigned")
                && api.delivered_count() >= before_b + 2_000
        },
    )
    .await;
    assert_eq!(
        b.terminate(Duration::from_secs(30)).await,
        Some(0),
        "b leaves cleanly"
    );
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    a.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("join-leave", &rep);
    assert_eq!(rep.delivered, 10_000);
    println!(
        "[join-leave] duplicates: {} ({:.2}%)",
        rep.duplicates,
        rep.duplicate_pct()
    );
}

/// 7. `key` mode: each key's events reach the API in offset order, while
/// different keys proceed in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_mode_keeps_per_key_order() {
    let s = services();
    let n = Names::new("order", 2);
    n.create(&s, true).await;
    let api = jittery_sink(2, 20).await;
    let spec = Spec {
        count: 3_000,
        keys: 30,
        id_prefix: "order".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let mut c = Courier::start(&n.topic, &s, &base_toml(&n, &api.url()));
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("order", &rep);
    let audit = api.audit();
    assert_per_key_order(&audit.order, spec.keys);
    assert!(
        audit.max_concurrent > 5,
        "keys proceed in parallel (peak concurrency {})",
        audit.max_concurrent
    );
}

/// Tight limits: a handful of events begun per partition and a small fetch budget,
/// so records queue in the partitions' backlogs and the backlog cap pauses
/// partitions in librdkafka (which drops their prefetched records) over and over.
/// Everything is still delivered once, in per-key order, and committed to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tight_backpressure_limits_lose_nothing_and_keep_order() {
    let s = services();
    let n = Names::new("tight", 3);
    n.create(&s, true).await;
    let api = jittery_sink(1, 5).await;
    let spec = Spec {
        count: 4_000,
        keys: 40,
        id_prefix: "tight".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url()).replace(
        "concurrency = 256\n",
        "concurrency = 16\nmax_in_flight_per_partition = 8\nmax_buffered = 64\n",
    );
    assert!(toml.contains("max_buffered = 64"), "{toml}");
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("tight", &rep);
    assert_eq!(rep.duplicates, 0, "no redelivery without a fault");
    let audit = api.audit();
    assert_per_key_order(&audit.order, spec.keys);
    assert!(
        audit.max_concurrent <= 16,
        "pipeline.concurrency bounds the calls in flight (peak {})",
        audit.max_concurrent
    );
}

/// `/readyz`: ready once assigned; "stuck" (503) while events are held but none
/// finishes for `metrics.stuck_after` with the API judged available; ready
/// again when work completes. `/healthz` (liveness) fails the same way after the
/// longer `metrics.wedged_after`, and recovers too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_assignment_and_stuck_work() {
    let s = services();
    let n = Names::new("ready", 1);
    n.create(&s, true).await;
    let api = sink(4_000).await;
    let toml = base_toml(&n, &api.url()).replace(
        "[api]\n",
        "[metrics]\nstuck_after = \"1s\"\nwedged_after = \"2s\"\n\n[api]\nrequest_timeout = \"10s\"\n",
    );
    let mut c = Courier::start(&n.topic, &s, &toml);
    let url = format!("http://127.0.0.1:{}/readyz", c.metrics_port);
    let live = format!("http://127.0.0.1:{}/healthz", c.metrics_port);
    let probe = |url: String| async move {
        match reqwest::get(&url).await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    };
    wait_until(Duration::from_secs(30), "ready once assigned", || {
        block(probe(url.clone())).0 == 200
    })
    .await;
    let spec = Spec {
        count: 20,
        keys: 20,
        id_prefix: "ready".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    assert_eq!(block(probe(live.clone())).0, 200, "live while idle");
    wait_until(
        Duration::from_secs(30),
        "not ready while work is stuck",
        || {
            let (code, body) = block(probe(url.clone()));
            code == 503 && body.contains("stuck")
        },
    )
    .await;
    wait_until(Duration::from_secs(30), "not live once wedged", || {
        let (code, body) = block(probe(live.clone()));
        code == 503 && body.contains("wedged")
    })
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    wait_until(
        Duration::from_secs(30),
        "ready again after progress",
        || block(probe(url.clone())).0 == 200,
    )
    .await;
    assert_eq!(
        block(probe(live.clone())).0,
        200,
        "live again after progress"
    );
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("readyz", &rep);
}
