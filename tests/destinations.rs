//! Destinations (`core::destination`) against the real broker and Redis: one
//! API's outage is that API's alone. Every test ends with the no-loss audit.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn sink() -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .expect("sink")
}

/// Produces, every 100 ms until `stop`, `per_tick` events of type `a.thing`
/// and as many of `b.thing`, over `keys` keys (a key carries both types).
async fn produce_mixed(
    brokers: String,
    topic: String,
    per_tick: usize,
    keys: usize,
    stop: Arc<AtomicBool>,
) -> Produced {
    let producer = loadgen::producer(&brokers).expect("producer");
    let mut all = Produced::default();
    let mut seq = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        for event_type in ["a.thing", "b.thing"] {
            let spec = Spec {
                count: per_tick,
                keys,
                id_prefix: "dest".into(),
                event_type: event_type.into(),
                ..Spec::default()
            };
            let p = loadgen::produce_with(&producer, &topic, &spec, seq)
                .await
                .expect("produce");
            seq += per_tick;
            all.ids.extend(p.ids);
            all.offsets.extend(p.offsets);
        }
    }
    all
}

/// Two routes by type to two APIs; the second answers 503 for 40 s under
/// load. The first keeps receiving its events at the rate it had before
/// (≥ 0.9 ×), the second gets every one of its events once it is back,
/// each API sees each key's events in order, nothing of the first goes to
/// the DLQ, nothing is lost. Before destinations (one breaker, one verdict
/// for every route) the first received ~0 events/s during the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apis_outage_does_not_stop_the_other() {
    let s = services();
    let n = Names::new("dest-outage", 8);
    n.create(&s, true).await;
    let first = sink().await;
    let second = sink().await;
    // `api.url` and the `a.*` route share an origin: one destination; the
    // `b.*` route's origin is the second.
    let toml = toml_with(&n, &first.url(), FAST)
        + &format!(
            "\n[[api.routes]]\ntype = \"a.*\"\nurl = \"{}\"\n\n[[api.routes]]\ntype = \"b.*\"\nurl = \"{}\"\n",
            first.url(),
            second.url()
        );
    let mut c = Courier::start("dest-outage", &s, &toml);
    let stop = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn(produce_mixed(
        s.brokers.clone(),
        n.topic.clone(),
        5,
        40,
        stop.clone(),
    ));

    wait_until(Duration::from_secs(60), "both APIs receive events", || {
        first.delivered_count() >= 100 && second.delivered_count() >= 100
    })
    .await;
    // The first API's rate before the outage, over 10 s.
    let (t0, c0) = (Instant::now(), first.delivered_count());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = (first.delivered_count() - c0) as f64 / t0.elapsed().as_secs_f64();

    second.update_behaviour(|b| b.down_status = Some(503));
    let (t1, c1) = (Instant::now(), first.delivered_count());
    let second_at_outage = second.delivered_count();
    tokio::time::sleep(Duration::from_secs(40)).await;
    let during = (first.delivered_count() - c1) as f64 / t1.elapsed().as_secs_f64();
    let second_during = second.delivered_count() - second_at_outage;
    second.update_behaviour(|b| b.down_status = None);
    // The second destination's breaker saw the outage; the first's did not.
    let second_open = c
        .metric(&format!(
            "courier_breaker_state{{destination=\"{}\"",
            origin(&second.url())
        ))
        .await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let produced = producing.await.expect("producer");
    wait_until(
        Duration::from_secs(120),
        "every event reached its API",
        || {
            let (a, b) = (first.audit(), second.audit());
            produced
                .ids
                .iter()
                .all(|id| a.delivered.contains_key(id) || b.delivered.contains_key(id))
        },
    )
    .await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("dest-outage", &rep);
    println!(
        "first API: {before:.1} events/s before, {during:.1} during the second's outage; \
         second API: {second_during} delivered during its outage (breaker gauge {second_open})"
    );
    assert!(
        during >= 0.9 * before,
        "the first API got {during:.1} events/s during the second's outage, {before:.1} before"
    );
    let (a, b) = (first.audit(), second.audit());
    assert!(a.delivered.keys().all(|id| !b.delivered.contains_key(id)));
    for (name, audit) in [("first", &a), ("second", &b)] {
        assert!(audit.order_checked > 0, "{name}: order checked");
        assert_eq!(
            audit.order_violations, 0,
            "{name}: per-key order: {:?}",
            audit.order_violation_examples
        );
    }
    let in_dlq = envelopes(&s, &n.dlq);
    assert!(
        in_dlq
            .iter()
            .all(|e| e.event_type.as_deref() == Some("b.thing")),
        "only the second destination's events may go through the DLQ"
    );
    c.terminate(Duration::from_secs(20)).await;
}

/// A URL's origin, as Courier names a destination no route names.
fn origin(url: &str) -> String {
    let rest = url.find("://").map_or(0, |i| i + 3);
    let end = url[rest..].find('/').map_or(url.len(), |i| rest + i);
    url[..end].to_ascii_lowercase()
}
