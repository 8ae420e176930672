//! Issue 23 item 4's scenario, shared by `tests/policy.rs` (the check) and
//! `benches/tenant_403.rs` (the throughput with and without the refused tenant).

use super::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

/// One run of issue 23's item 4 at default settings: `others` events delivered,
/// and `refused` of them (spread among the others: one every `others/refused`,
/// each its own key) answered 403 for good by the API. Returns the audit and
/// the seconds from the API's first delivery to its `others`-th.
pub(crate) async fn tenant_403_run(
    tag: &str,
    others: usize,
    refused: usize,
) -> (courier_standins::audit::AuditReport, f64) {
    let s = services();
    let n = Names::new(tag, 2);
    n.create(&s, true).await;
    let total = others + refused;
    let spec = Spec {
        count: total,
        keys: total,
        id_prefix: tag.into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce");
    // The tenant's events: every `step`-th from the middle of the first step on,
    // so calls of other events are sent after each of them.
    let step = total / refused.max(1);
    let tenant: Vec<String> = (0..refused)
        .map(|i| loadgen::event_id(tag, i * step + step / 2))
        .collect();
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 5,
            fail_ids: tenant
                .iter()
                .map(|id| {
                    (
                        id.clone(),
                        courier_standins::sink::FailRule {
                            status: 403,
                            times: None,
                            retry_after_s: None,
                        },
                    )
                })
                .collect(),
            fail_body: Some("{\"error\":\"tenant t-17 is not allowed\"}".into()),
            ..Behaviour::default()
        },
    )
    .await
    .expect("API stand-in");
    // Default settings: no [degraded] tuning, the default retry policy and
    // concurrency, api.systemic_budget at its default.
    let toml = toml_with(&n, &api.url(), "")
        .replace(
            "retry_base = \"20ms\"\nretry_max_delay = \"100ms\"\nretry_budget = \"500ms\"\n",
            "",
        )
        .replace("concurrency = 256\n", "");
    let mut c = Courier::start(&n.topic, &s, &toml);
    let mut first: Option<std::time::Instant> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // The longest time the count stood still, and at what count (what a
    // slow round spent its time on).
    let (mut last, mut moved_at, mut stall) =
        (0u64, std::time::Instant::now(), (Duration::ZERO, 0));
    let secs = loop {
        let delivered = api.delivered_count();
        if delivered > 0 && first.is_none() {
            first = Some(std::time::Instant::now());
        }
        if delivered != last {
            if first.is_some() && last > 0 && moved_at.elapsed() > stall.0 {
                stall = (moved_at.elapsed(), last);
            }
            (last, moved_at) = (delivered, std::time::Instant::now());
        }
        if delivered >= others as u64 {
            let limit = c.metric("courier_api_concurrency_limit").await;
            eprintln!(
                "[{tag}] longest stall {} ms, at {} delivered; concurrency limit {limit}",
                stall.0.as_millis(),
                stall.1
            );
            break first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "[{tag}] {delivered} of the {others} others delivered in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The tenant's events leave the way: parked with their reason.
    wait_until(
        Duration::from_secs(60),
        "the tenant's events reached the parking lot",
        || topic_size(&s, &n.parking) >= refused as i64,
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let demoted = c
        .metric("courier_systemic_demoted_total{reason=\"http_403\"")
        .await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(demoted, refused as f64, "[{tag}] every demotion counted");
    let parked = envelopes(&s, &n.parking);
    let mut ids: Vec<String> = parked.iter().filter_map(|e| e.event_id.clone()).collect();
    ids.sort();
    let mut expected = tenant.clone();
    expected.sort();
    assert_eq!(ids, expected, "[{tag}] exactly the tenant's events parked");
    for e in &parked {
        assert_eq!(e.last_error.reason, "http_403", "{:?}", e.last_error);
        assert_eq!(
            e.last_error.class.as_str(),
            "systemic",
            "{:?}",
            e.last_error
        );
        assert!(
            e.last_error.message.contains("api.systemic_budget")
                && e.last_error.message.contains("not allowed"),
            "the message says why and what the API said: {}",
            e.last_error.message
        );
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss(tag, &rep);
    assert_eq!(
        (rep.delivered, rep.parked, rep.in_dlq),
        (others, refused, 0),
        "{rep}"
    );
    (rep, secs)
}
