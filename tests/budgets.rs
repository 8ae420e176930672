//! Issue 16 item 2: memory bounded in bytes, against the real broker. The
//! in-flight byte budget (`pipeline.max_in_flight_bytes`) is process-wide: with
//! room for five 20 KB events, no more than five are ever held, so the API
//! never sees more than five at once — although `pipeline.concurrency` and the
//! per-partition limit would allow hundreds. The budgets show as metrics, and
//! everything taken is given back. Ends with the audit.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_byte_budget_bounds_the_events_held_process_wide() {
    let s = services();
    let n = Names::new("budget", 3);
    n.create(&s, true).await;
    let api = api_with_latency(30).await;
    let spec = Spec {
        count: 300,
        keys: 300,
        id_prefix: "big".into(),
        event_bytes: 20_000,
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // Each record counts ~21,000 bytes (value, key, `RECORD_OVERHEAD`): the budget admits a record
    // while less than 100,000 bytes are held, so at most five at once.
    let mut c = Courier::start_with_env(
        &n.topic,
        &s,
        &base_toml(&n, &api.url()),
        &[
            ("COURIER__PIPELINE__MAX_IN_FLIGHT_BYTES", "100000"),
            ("COURIER__PIPELINE__MAX_BUFFERED_BYTES", "200000"),
        ],
    );
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    assert_eq!(
        c.metric("courier_memory_budget_bytes{budget=\"in_flight\"")
            .await,
        100_000.0
    );
    assert_eq!(
        c.metric("courier_memory_budget_bytes{budget=\"buffered\"")
            .await,
        200_000.0
    );
    // Everything taken from the budgets is given back once the work is done.
    let mut used = f64::NAN;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        used = c.metric("courier_memory_budget_used_bytes").await;
        if used == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(used, 0.0, "bytes still counted as held or buffered");
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));

    let audit = api.audit();
    println!("API peak concurrency: {}", audit.max_concurrent);
    assert!(
        audit.max_concurrent <= 5,
        "{} events at the API at once with a budget for five",
        audit.max_concurrent
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("budget", &rep);
    assert_eq!(rep.delivered, 300);
}
