//! Batch delivery (issue 25) against a real broker and the API stand-in's
//! batch endpoint (`/batch`, courier-standins' `sink::batch`), each ending with the audit:
//! every produced event reached the API or sits in the DLQ or the parking lot
//! with a reason; lost 0; duplicates counted.
//!
//! - every format (`json_array`, `ndjson`, `cloudevents_batch`, `template`)
//!   delivered, many events per request;
//! - per-item results with 3 % of the events answered 400 and 2 % 503: exactly
//!   the 400s parked, the 503s dead-lettered and redelivered by the drain, the
//!   rest delivered once;
//! - one poison event refusing its batch as a whole (400): only it parked, the
//!   others delivered, the extra requests within `2·⌈log₂ n⌉`;
//! - 413 above a size: smaller batches, everything delivered;
//! - key order kept (the stand-in checks each key's sequence), and with
//!   `ordered = true` a key's events share batches and, with some answered
//!   503 within them, each key's last writes stay in order;
//! - a revoke mid-batch: an instance holding every event in a batch when a
//!   second one joins the group sends none of the partitions handed to the
//!   other in its requests after the handover (each instance has its own
//!   stand-in; the audit counts both).

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

async fn stand_in(behaviour: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().expect("addr"), behaviour)
        .await
        .expect("stand-in")
}

fn batch_url(api: &SinkHandle) -> String {
    format!("http://{}/batch", api.addr())
}

/// The test's config with `[api.batch]` = `batch` (TOML lines).
fn batch_toml(n: &Names, url: &str, degraded: &str, batch: &str) -> String {
    toml_with(n, url, degraded).replace(
        "[pipeline]\n",
        &format!("[api.batch]\n{batch}\n\n[pipeline]\n"),
    )
}

fn spec(prefix: &str, count: usize, keys: usize) -> Spec {
    Spec {
        count,
        keys,
        id_prefix: prefix.into(),
        ..Spec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_is_delivered_in_batches() {
    let s = services();
    for (format, extra) in [
        ("json_array", ""),
        ("ndjson", ""),
        ("cloudevents_batch", ""),
        ("template", "template = '{\"events\": $items}'\n"),
    ] {
        let api = stand_in(Behaviour {
            latency_ms: 5,
            ..Behaviour::default()
        })
        .await;
        let n = Names::new(&format!("batch-{}", format.replace('_', "-")), 2);
        n.create(&s, true).await;
        let sp = spec(&format!("f{}", &format[..2]), 3_000, 3_000);
        let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
            .await
            .expect("produce");
        let toml = batch_toml(
            &n,
            &batch_url(&api),
            "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"",
            &format!("max_events = 100\nlinger = \"20ms\"\nformat = \"{format}\"\n{extra}"),
        );
        let mut c = Courier::start(&format!("batch-{format}"), &s, &toml);
        n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
        let requests = c.metric("courier_batch_requests_total").await;
        c.terminate(Duration::from_secs(30)).await;
        let audit = api.audit();
        println!(
            "[batch {format}] {} events in {requests} requests ({} batch requests at the stand-in, {} items)",
            sp.count, audit.batch_requests, audit.batch_items
        );
        assert!(
            requests > 0.0 && requests <= (sp.count / 5) as f64,
            "{format}: batched (more than 5 events per request on average): {requests} requests"
        );
        let rep = n.audit(&s, &produced, &api);
        assert_no_loss(&format!("batch {format}"), &rep);
        assert_eq!(rep.parked + rep.in_dlq, 0, "{format}: {rep}");
        api.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_item_results_park_and_dead_letter_exactly_the_failed_items() {
    let s = services();
    let n = Names::new("batch-items", 3);
    n.create(&s, true).await;
    let sp = spec("bi", 4_000, 4_000);
    let ids: Vec<String> = (0..sp.count)
        .map(|i| loadgen::event_id(&sp.id_prefix, i))
        .collect();
    // 3 % answered 400 for good, 2 % answered 503 for their 3 in-place tries
    // (in a batch or alone), then delivered by the DLQ drain.
    let bad: HashSet<String> = ids.iter().step_by(33).cloned().collect();
    let flaky: HashSet<String> = ids
        .iter()
        .skip(7)
        .step_by(50)
        .filter(|i| !bad.contains(*i))
        .cloned()
        .collect();
    let mut fail_ids = HashMap::new();
    for id in &bad {
        fail_ids.insert(
            id.clone(),
            FailRule {
                status: 400,
                times: None,
                retry_after_s: None,
            },
        );
    }
    for id in &flaky {
        fail_ids.insert(
            id.clone(),
            FailRule {
                status: 503,
                times: Some(3),
                retry_after_s: None,
            },
        );
    }
    let api = stand_in(Behaviour {
        latency_ms: 5,
        fail_ids,
        ..Behaviour::default()
    })
    .await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let toml = batch_toml(
        &n,
        &batch_url(&api),
        FAST,
        "max_events = 100\nlinger = \"20ms\"\nresults = \"/items\"\nresult_status = \"/status\"\nresult_id = \"/id\"\n",
    );
    let mut c = Courier::start("batch-items", &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    // The DLQ side too: every dead-lettered event redelivered.
    wait_until(
        Duration::from_secs(120),
        "the drain redelivers the 503s",
        || {
            flaky
                .iter()
                .all(|id| api.audit().delivered.contains_key(id))
        },
    )
    .await;
    c.terminate(Duration::from_secs(30)).await;
    let parked: HashSet<String> = envelopes(&s, &n.parking)
        .into_iter()
        .filter_map(|e| e.event_id)
        .collect();
    let dead: HashSet<String> = envelopes(&s, &n.dlq)
        .into_iter()
        .filter_map(|e| e.event_id)
        .collect();
    println!(
        "[batch items] {} bad, {} flaky; parked {}, dead-lettered {}",
        bad.len(),
        flaky.len(),
        parked.len(),
        dead.len()
    );
    assert_eq!(parked, bad, "exactly the events answered 400 are parked");
    assert_eq!(
        dead, flaky,
        "exactly the events answered 503 three times are dead-lettered"
    );
    let msg = envelopes(&s, &n.parking)
        .into_iter()
        .next()
        .map(|e| e.last_error.message)
        .unwrap_or_default();
    assert!(
        msg.contains("from a batch answer") && msg.contains("position"),
        "{msg}"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("batch items", &rep);
    println!("[batch items] duplicates {}", rep.duplicates);
    api.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_event_takes_only_itself_and_a_413_makes_batches_smaller() {
    let s = services();
    // One poison event: its batch is refused as a whole with 400.
    let n = Names::new("batch-poison", 1);
    n.create(&s, true).await;
    let sp = spec("bp", 1_000, 1_000);
    let poison = loadgen::event_id(&sp.id_prefix, 437);
    let api = stand_in(Behaviour {
        batch_poison_ids: [poison.clone()].into_iter().collect(),
        ..Behaviour::default()
    })
    .await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let toml = batch_toml(
        &n,
        &batch_url(&api),
        FAST,
        "max_events = 100\nlinger = \"50ms\"\n",
    );
    let mut c = Courier::start("batch-poison", &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let extra = c.metric("courier_batch_split_requests_total").await;
    c.terminate(Duration::from_secs(30)).await;
    let parked: Vec<String> = envelopes(&s, &n.parking)
        .into_iter()
        .filter_map(|e| e.event_id)
        .collect();
    println!(
        "[batch poison] parked {parked:?}, {extra} extra requests (bound {})",
        courier::core::batch::split_bound(100)
    );
    assert_eq!(parked, vec![poison], "only the poison event is parked");
    assert!(
        extra <= courier::core::batch::split_bound(100) as f64,
        "extra requests within 2·⌈log₂ n⌉: {extra}"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("batch poison", &rep);
    api.shutdown();

    // 413 above 12 KB: batches of 100 × ~300 B are refused, then held smaller.
    let n = Names::new("batch-413", 1);
    n.create(&s, true).await;
    let sp = spec("bt", 2_000, 2_000);
    let api = stand_in(Behaviour {
        batch_max_bytes: Some(12_000),
        ..Behaviour::default()
    })
    .await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let toml = batch_toml(
        &n,
        &batch_url(&api),
        FAST,
        "max_events = 100\nlinger = \"50ms\"\n",
    );
    let mut c = Courier::start("batch-413", &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let shrunk = c.metric("courier_batch_shrunk_total").await;
    c.terminate(Duration::from_secs(30)).await;
    let audit = api.audit();
    println!(
        "[batch 413] {} refused 413, shrunk {shrunk}; {} batch requests, {} items",
        audit.batch_refused_413, audit.batch_requests, audit.batch_items
    );
    assert!(
        audit.batch_refused_413 >= 1 && shrunk >= 1.0,
        "a 413 was answered and heeded"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("batch 413", &rep);
    assert_eq!(rep.parked + rep.in_dlq, 0, "{rep}");
    api.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_keep_each_keys_order() {
    let s = services();
    let n = Names::new("batch-order", 3);
    n.create(&s, true).await;
    // Few keys, many events each: every batch holds at most one event per key.
    let sp = spec("bo", 4_000, 40);
    let api = stand_in(Behaviour {
        latency_ms: 3,
        latency_jitter_ms: 10,
        fail_rate: 0.02,
        fail_status: 503,
        ..Behaviour::default()
    })
    .await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let toml = batch_toml(
        &n,
        &batch_url(&api),
        "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"",
        "max_events = 50\nlinger = \"10ms\"\nresults = \"/items\"\nresult_id = \"/id\"\n",
    )
    .replace(
        "retry_budget = \"500ms\"",
        "retry_budget = \"30s\"\nmax_attempts = 20",
    );
    let mut c = Courier::start("batch-order", &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;
    let audit = api.audit();
    println!(
        "[batch order] {} batch requests, {} items, {} order violations",
        audit.batch_requests, audit.batch_items, audit.order_violations
    );
    assert!(audit.batch_requests > 0);
    assert_eq!(
        audit.order_violations, 0,
        "each key's events arrive in order"
    );
    assert_eq!(
        audit.batch_same_key_items, 0,
        "without ordered = true a batch holds at most one event per key"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("batch order", &rep);
    api.shutdown();
}

/// `ordered = true`: a key's waiting events share a batch, in offset order.
/// Every 37th event is answered 503 once in its batch (the events after it
/// in the batch accepted): the rest of its run is sent again behind it, so
/// each key's last writes stay in produced order — the stand-in checks it —
/// and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_runs_share_batches_and_keep_each_keys_last_writes_in_order() {
    let s = services();
    let n = Names::new("batch-ordered", 3);
    n.create(&s, true).await;
    // 30 keys, 100 events each: while a key's batch is out, its next events
    // wait and go together.
    let sp = spec("bq", 3_000, 30);
    let flaky: HashMap<String, FailRule> = (0..sp.count)
        .step_by(37)
        .skip(1)
        .map(|i| {
            let rule = FailRule {
                status: 503,
                times: Some(1),
                retry_after_s: None,
            };
            (loadgen::event_id(&sp.id_prefix, i), rule)
        })
        .collect();
    let api = stand_in(Behaviour {
        latency_ms: 20,
        fail_ids: flaky.clone(),
        ..Behaviour::default()
    })
    .await;
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let toml = batch_toml(
        &n,
        &batch_url(&api),
        "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"",
        "max_events = 50\nlinger = \"5ms\"\nresults = \"/items\"\nresult_id = \"/id\"\nordered = true\n",
    )
    .replace(
        "retry_budget = \"500ms\"",
        "retry_budget = \"30s\"\nmax_attempts = 20",
    );
    let mut c = Courier::start("batch-ordered", &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let resent = c.metric("courier_ordered_resent_total").await;
    c.terminate(Duration::from_secs(30)).await;
    let audit = api.audit();
    println!(
        "[batch ordered] {} batch requests, {} items, {} sharing a key with an earlier item; \
         {} resent; {} first-delivery order inversions, {} keys with last writes out of order",
        audit.batch_requests,
        audit.batch_items,
        audit.batch_same_key_items,
        resent,
        audit.order_violations,
        audit.order_last_write_violations
    );
    assert!(
        audit.order_checked >= sp.count as u64,
        "{} first deliveries checked",
        audit.order_checked
    );
    assert!(
        audit.batch_same_key_items > 0,
        "a key's events shared batches"
    );
    assert!(resent > 0.0, "events behind a 503 were sent again");
    assert_eq!(
        audit.order_last_write_violations, 0,
        "each key's last writes in order: {:?}",
        audit.order_last_write_examples
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("batch ordered", &rep);
    assert_eq!(rep.parked + rep.in_dlq, 0, "{rep}");
    api.shutdown();
}

/// Issue 25: a revoke mid-batch. Instance A holds every event in one batch
/// (its linger not yet over) when instance B joins the group; the partitions
/// handed to B must not be in any request A sends after the handover — B
/// delivers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_mid_batch_sends_nothing_of_the_revoked_partitions() {
    let s = services();
    let n = Names::new("batch-revoke", 6);
    n.create(&s, true).await;
    // One key per event: no event waits for another of its key, so A can hold
    // all of them at once.
    let sp = spec("br", 2_400, 2_400);
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    let partition_of: HashMap<&str, i32> = produced
        .ids
        .iter()
        .map(String::as_str)
        .zip(produced.offsets.iter().map(|&(p, _)| p))
        .collect();
    let partitions = |ids: &HashMap<String, u32>| -> HashSet<i32> {
        ids.keys()
            .filter_map(|id| partition_of.get(id.as_str()).copied())
            .collect()
    };
    let api_a = stand_in(Behaviour::default()).await;
    let api_b = stand_in(Behaviour::default()).await;
    let degraded = "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"";
    let permits = format!("concurrency = {}", 2 * sp.count);

    // A: one batch for everything. It leaves when its first event has waited
    // `linger`, 10 s (the most `[api.batch]` allows); B's start and the
    // group's rebalance have to complete within it, which the test checks
    // rather than assumes (below). `max_events`, `max_bytes` and the permits
    // are above the whole topic's share: only the linger sends the batch. A
    // hears of B's join at its next heartbeat: every 500 ms rather than
    // librdkafka's 3 s, which leaves the handover more of the window (a
    // consumer property: A's producers log that they ignore it).
    let batch_a = "max_events = 10000\nmax_bytes = 1500000\nlinger = \"10s\"\n";
    let toml_a = format!(
        "{}\n[kafka.properties]\n\"heartbeat.interval.ms\" = \"500\"\n",
        batch_toml(&n, &batch_url(&api_a), degraded, batch_a)
            .replace("concurrency = 256", &permits)
    );
    let mut a = Courier::start("batch-revoke-a", &s, &toml_a);
    // A read every event and holds each in its batch: all in flight, and
    // nothing has reached its API yet.
    let count = sp.count as f64;
    wait_until(
        Duration::from_secs(60),
        "A holds every event in flight (in its batch)",
        || block(a.metric("courier_in_flight")) == count,
    )
    .await;
    assert_eq!(
        api_a.audit().requests_total,
        0,
        "A's batch left before B started: the test would say nothing"
    );

    // B joins the group: the partitions are revoked from A (the `range`
    // assignor is eager: all of them), then shared between A and B.
    let toml_b = batch_toml(
        &n,
        &batch_url(&api_b),
        degraded,
        "max_events = 100\nlinger = \"20ms\"\n",
    );
    let joined = std::time::Instant::now();
    let mut b = Courier::start("batch-revoke-b", &s, &toml_b);
    wait_until(
        Duration::from_secs(60),
        "B is assigned partitions (A's revoke completed)",
        || block(b.metric("courier_assigned_partitions")) > 0.0,
    )
    .await;
    println!(
        "[batch revoke] B started and assigned in {:?} (A's linger: 10 s)",
        joined.elapsed()
    );
    // A's batch is still waiting: every request A makes comes after the
    // handover (a batch sent before it would make the check below vacuous).
    assert_eq!(
        api_a.audit().requests_total,
        0,
        "A's batch left before the handover completed (its linger ran out first): \
         the revoke was not mid-batch\n{}{}",
        group_log_excerpt(&a.log),
        group_log_excerpt(&b.log)
    );
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    a.terminate(Duration::from_secs(30)).await;
    b.terminate(Duration::from_secs(30)).await;

    let (got_a, got_b) = (api_a.audit(), api_b.audit());
    let (parts_a, parts_b) = (partitions(&got_a.attempts), partitions(&got_b.attempts));
    println!(
        "[batch revoke] A: {} requests, {} events, partitions {parts_a:?}; \
         B: {} requests, {} events, partitions {parts_b:?}",
        got_a.batch_requests, got_a.batch_items, got_b.batch_requests, got_b.batch_items
    );
    assert!(
        !parts_b.is_empty(),
        "B delivered events of some partition (the handover happened)"
    );
    // Every partition B delivered was A's, its events waiting in A's batch,
    // until the revoke: none of them may be in what A sent afterwards.
    let zombies: Vec<(&String, i32)> = got_a
        .attempts
        .keys()
        .filter_map(|id| {
            let p = partition_of.get(id.as_str()).copied()?;
            parts_b.contains(&p).then_some((id, p))
        })
        .collect();
    assert!(
        zombies.is_empty(),
        "A sent {} events of partitions revoked from it and handed to B {parts_b:?} after \
         the handover, e.g. {:?}\n{}{}",
        zombies.len(),
        &zombies[..zombies.len().min(5)],
        group_log_excerpt(&a.log),
        group_log_excerpt(&b.log)
    );
    let rep = n.audit_all(&s, &produced, &[&api_a, &api_b]);
    assert_no_loss("batch revoke", &rep);
    assert_eq!(rep.parked + rep.in_dlq, 0, "{rep}");
    println!("[batch revoke] duplicates {}", rep.duplicates);
    api_a.shutdown();
    api_b.shutdown();
}
