//! The `partial-api` scenario (issue 42, fail closed): a cluster delivering
//! in batches with per-item results to an API that answers a mix of per-item
//! 201/400/429/503, some whole batches 200 with an HTML page, and some
//! answers cut mid-body (the connection dropped after the status). Nothing a
//! 2xx answer does not prove done may count as delivered, and none of it may
//! open the breaker (the API is up the whole time): every event ends
//! delivered, or parked `http_400` with its reason, and the audit finds none
//! lost.

use crate::cluster::Cluster;
use crate::opts::Opts;
use crate::report::Check;
use courier_standins::sink::faults::{BatchFaults, ItemMix};
use std::time::Duration;

/// The instances' config: the stand-in's batch endpoint, batches of 50 with
/// per-item results matched by id.
pub fn toml(base: &str, sink_url: &str) -> String {
    let batch_url = sink_url.replace("/events", "/batch");
    base.replace(&format!("url = \"{sink_url}\""), &format!("url = \"{batch_url}\""))
        .replace(
            "[pipeline]\n",
            "[api.batch]\nmax_events = 50\nlinger = \"10ms\"\nresults = \"/items\"\nresult_status = \"/status\"\nresult_id = \"/id\"\n\n[pipeline]\n",
        )
}

/// What the API does wrong during the scenario.
fn faults() -> BatchFaults {
    let mix = |status, rate| ItemMix { status, rate };
    BatchFaults {
        html_rate: 0.1,
        cut_rate: 0.1,
        item_mix: vec![
            mix(201, 0.4),
            mix(400, 0.01),
            mix(429, 0.08),
            mix(503, 0.08),
        ],
        ..BatchFaults::default()
    }
}

/// How long the faults last.
pub fn duration(o: &Opts) -> Duration {
    o.pick(12.0, 40.0)
}

pub async fn run(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    tokio::time::sleep(o.warm()).await;
    eprintln!(
        "[drill] the API answers batches partly: per-item 201/400/429/503, HTML 200s, cut bodies"
    );
    c.sink.update_behaviour(|b| b.batch_faults = faults());
    tokio::time::sleep(duration(o)).await;
    let scrapes = c.scrape_all().await;
    c.sink
        .update_behaviour(|b| b.batch_faults = BatchFaults::default());
    let transitions: f64 = scrapes.iter().map(|s| s.breaker_transitions).sum();
    let unreadable: f64 = scrapes.iter().map(|s| s.batch_results_unreadable).sum();
    Ok(vec![
        Check::new(
            "partial-api-breaker-closed",
            transitions == 0.0 && scrapes.len() == c.instances.len(),
            format!(
                "breaker transitions during the faults: {:.0} over {} instances (an API answering 2xx is up)",
                transitions.abs(),
                scrapes.len()
            ),
        ),
        Check::new(
            "partial-api-unreadable-answers-seen",
            unreadable > 0.0,
            format!("2xx batch answers whose results could not be read, each sent again: {unreadable}"),
        ),
    ])
}
