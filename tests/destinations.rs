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
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Its events held out (those of keys with none in the DLQ yet: the
    // others follow their key's event there, `key_in_dlq`).
    let held_out = c.metric("courier_destination_held_out").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
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
    wait_all_reached(Duration::from_secs(120), &produced, &[&first, &second]).await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("dest-outage", &rep);
    println!(
        "first API: {before:.1} events/s before, {during:.1} during the second's outage; \
         second API: {second_during} delivered during its outage (breaker gauge {second_open}, \
         held out after 10 s: {held_out})"
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

/// The events that reached the API directly (not through the DLQ) before an
/// earlier event of their key (`keys` keys, `key_of`) that went through the
/// DLQ: `order` is the API's acceptances in order, `through_dlq` the ids with
/// an envelope in the DLQ. Ids are the load generator's (`dest-<seq>`).
fn overtaken_through_dlq(
    order: &[String],
    through_dlq: &std::collections::HashSet<String>,
    keys: usize,
) -> Vec<String> {
    let seq = |id: &str| id.rsplit('-').next().and_then(|s| s.parse::<usize>().ok());
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, id) in order.iter().enumerate() {
        first.entry(id.as_str()).or_insert(i);
    }
    let mut out = Vec::new();
    for (id, &at) in &first {
        let Some(s) = seq(id) else { continue };
        if through_dlq.contains(*id) {
            continue;
        }
        for d in through_dlq {
            let Some(ds) = seq(d) else { continue };
            let before = first.get(d.as_str()).is_none_or(|&dat| dat > at);
            if ds % keys == s % keys && ds < s && before {
                out.push(format!("{id} before {d}"));
            }
        }
    }
    out
}

/// The second API is down longer than `degraded.destination_hold`: its events
/// go to the DLQ (`destination_unavailable`, counted per destination), those
/// of their keys follow them, and once it is back the DLQ drain delivers them
/// (at 50/s) while main p is read (`drain_alongside`). No event of a key
/// reaches the second API directly before an earlier event of that key that
/// went through the DLQ (the follow rule); first arrivals keep per-key order.
/// The first API's rate holds during the outage and during the drain
/// (before `drain_alongside` main p waited for the drain: the first API
/// got nothing meanwhile); nothing of it goes to the DLQ; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_diverts_to_the_dlq_in_order() {
    let s = services();
    let n = Names::new("dest-divert", 4);
    n.create(&s, true).await;
    let first = sink().await;
    let second = sink().await;
    // `drain_concurrency` 4 (FAST's): a key's envelopes still go one at a
    // time (the drain lanes).
    let degraded = FAST.replace("drain_rate_per_sec = 20.0", "drain_rate_per_sec = 50.0")
        + "\ndestination_hold = \"2s\"\n";
    let toml = toml_with(&n, &first.url(), &degraded)
        + &format!(
            "\n[[api.routes]]\ntype = \"b.*\"\nurl = \"{}\"\ndestination = \"second\"\n",
            second.url()
        );
    let mut c = Courier::start("dest-divert", &s, &toml);
    let stop = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn(produce_mixed(
        s.brokers.clone(),
        n.topic.clone(),
        3,
        10,
        stop.clone(),
    ));
    wait_until(Duration::from_secs(60), "both APIs receive events", || {
        first.delivered_count() >= 60 && second.delivered_count() >= 60
    })
    .await;
    let (t0, c0) = (Instant::now(), first.delivered_count());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = (first.delivered_count() - c0) as f64 / t0.elapsed().as_secs_f64();

    second.update_behaviour(|b| b.down_status = Some(503));
    let (t1, c1) = (Instant::now(), first.delivered_count());
    wait_until(
        Duration::from_secs(30),
        "the second destination's events are diverted",
        || {
            envelopes(&s, &n.dlq)
                .iter()
                .any(|e| e.last_error.reason == "destination_unavailable")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let during = (first.delivered_count() - c1) as f64 / t1.elapsed().as_secs_f64();
    let diverted = c
        .metric("courier_destination_diverted_total{destination=\"second\"")
        .await;
    second.update_behaviour(|b| b.down_status = None);
    // Back: the drain redelivers the second's envelopes while the first
    // keeps its rate.
    let redelivered = |s: &SinkHandle| s.audit().per_second_redelivery.iter().sum::<u64>();
    let (t2, c2, r2) = (
        Instant::now(),
        first.delivered_count(),
        redelivered(&second),
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r6 = redelivered(&second);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let draining = (first.delivered_count() - c2) as f64 / t2.elapsed().as_secs_f64();
    let (early, late) = (r6 - r2, redelivered(&second) - r6);
    stop.store(true, Ordering::SeqCst);
    let produced = producing.await.expect("producer");
    wait_all_reached(Duration::from_secs(180), &produced, &[&first, &second]).await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("dest-divert", &rep);
    println!(
        "first API: {before:.1} events/s before, {during:.1} during, {draining:.1} during the drain; \
         {diverted} events of the second diverted; redelivered in the drain window: {early} in 6 s, \
         {late} in the last 2 s"
    );
    assert!(diverted > 0.0, "events were diverted");
    assert!(
        during >= 0.9 * before,
        "the first API got {during:.1} events/s during the second's outage, {before:.1} before"
    );
    assert!(
        early > 0 && late > 0,
        "the drain went on through the window: {early} then {late} redelivered"
    );
    assert!(
        draining >= 0.9 * before,
        "the first API got {draining:.1} events/s while the second's envelopes drained, {before:.1} before"
    );
    let in_dlq = envelopes(&s, &n.dlq);
    assert!(in_dlq
        .iter()
        .all(|e| e.event_type.as_deref() == Some("b.thing")));
    let (a, b) = (first.audit(), second.audit());
    assert!(
        b.per_second_redelivery.iter().sum::<u64>() > 0,
        "the drain redelivered"
    );
    let through_dlq: std::collections::HashSet<String> =
        in_dlq.iter().filter_map(|e| e.event_id.clone()).collect();
    let overtaken = overtaken_through_dlq(&b.order, &through_dlq, 10);
    assert!(
        overtaken.is_empty(),
        "events reached the second API before an earlier event of their key that went through the DLQ: {:?}",
        &overtaken[..overtaken.len().min(10)]
    );
    for (name, audit) in [("first", &a), ("second", &b)] {
        assert!(audit.order_checked > 0, "{name}: order checked");
        assert_eq!(
            audit.order_violations, 0,
            "{name}: per-key order: {:?}",
            audit.order_violation_examples
        );
    }
    c.terminate(Duration::from_secs(20)).await;
}
