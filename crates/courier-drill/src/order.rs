//! The `order` scenario (issue 54): per-key order through every recovery,
//! at APIs that apply each write per key and count *stale writes*
//! (courier-standins' `sink::order`: the first write of an event older than
//! its key's latest one applied, a DLQ redelivery included; an id written
//! again is a duplicate, counted apart).
//!
//! Two destinations over the same keys (100 keys, so that a key's events
//! follow each other closely): the load's `profile.updated` events go one
//! at a time to `api.url` (the cluster's stand-in, the default destination,
//! `ordering = "key"`), its `order.placed` events through a route to a
//! second stand-in's batch endpoint in ordered batches (`ordered = true`, 50
//! per batch, per-item results by id); both stand-ins keep each key's order
//! within a request (`keep_key_order`). The records are Avro, their schema
//! served by the first stand-in as the schema registry. Faults, in turn under
//! load: both APIs down (503) for 3 s / 10 s, then back through half-open
//! probes; SIGKILL of an instance, restarted at once; a rebalance (SIGTERM
//! of another, restarted, joined); the default destination down past
//! `destination_hold` (4 s / 15 s) for 8 s / 30 s, its events diverted to the
//! DLQ; a registry 404 burst: the load's records move to a new schema id the
//! registry answers 404 for during its first second (a follower registry a
//! moment behind).
//!
//! Checks, after the group settled: stale writes 0 at both APIs (first
//! writes checked at both); ordered runs shared batches at the second; the
//! default destination's events were diverted; no record parked
//! `unknown_schema` (the burst is shorter than the wait before a 404 parks).

use crate::cluster::{Cluster, Load, LoadShape};
use crate::opts::Opts;
use crate::report::Check;
use anyhow::Context as _;
use courier_standins::audit::AuditReport;
use courier_standins::loadgen::AVRO_SCHEMA;
use courier_standins::sink::SinkHandle;
use std::time::{Duration, Instant};

/// The default destination's type (no route matches it: `api.url`, unbatched).
const FIRST_TYPE: &str = "profile.updated";
/// The second destination's type (its route's: ordered batches).
const SECOND_TYPE: &str = "order.placed";
const SECOND: &str = "second";
/// Keys of the load: few enough that a key's events follow each other closely.
const KEYS: usize = 100;
/// The schema id of the load's records, and the one it moves to in the burst.
const SCHEMA_ID: u32 = 1;
const NEW_SCHEMA_ID: u32 = 2;
/// How long the registry answers 404 for the new schema id.
const BURST: Duration = Duration::from_secs(1);

/// The load's shape: both types, few keys, Avro.
pub fn load_shape() -> LoadShape {
    LoadShape {
        event_types: vec![FIRST_TYPE.into(), SECOND_TYPE.into()],
        keys: KEYS,
        avro_schema_id: Some(SCHEMA_ID),
    }
}

fn outage(o: &Opts) -> Duration {
    o.pick(3.0, 10.0)
}

fn gap(o: &Opts) -> Duration {
    o.pick(2.0, 5.0)
}

/// `degraded.destination_hold`: longer than the APIs' outage, shorter than
/// the default destination's.
fn hold(o: &Opts) -> &'static str {
    if o.short {
        "4s"
    } else {
        "15s"
    }
}

fn past_hold(o: &Opts) -> Duration {
    o.pick(8.0, 30.0)
}

/// The faults' part of the load's duration (the runner adds warm-up and
/// tail): the outage, the kill and the rebalance (about 6 s), the long
/// outage, the burst, the gaps between them.
pub fn duration(o: &Opts) -> Duration {
    outage(o) + gap(o) * 3 + Duration::from_secs(6) + past_hold(o) + BURST * 3
}

/// The instances' config: the route, the hold, Avro through the first
/// stand-in as the registry.
fn toml(base: &str, second_url: &str, registry: &str, hold: &str) -> String {
    format!(
        "{}\n[[api.routes]]\ntype = \"{SECOND_TYPE}\"\nurl = \"{second_url}\"\ndestination = \"{SECOND}\"\n\
         batch = {{ max_events = 50, linger = \"10ms\", results = \"/items\", result_status = \"/status\", \
         result_id = \"/id\", ordered = true }}\n\n\
         [input]\nformat = \"avro\"\nkey = \"/subject\"\n\n[input.schema_registry]\nurl = \"{registry}\"\n",
        base.replace(
            "[degraded]\n",
            &format!("[degraded]\ndestination_hold = \"{hold}\"\n")
        )
    )
}

/// Makes the stand-ins APIs that keep each key's order, the first also the
/// registry (both schema ids), starts the second and writes the config
/// (before the instances start).
pub async fn prepare(c: &mut Cluster, o: &Opts) -> anyhow::Result<()> {
    c.healthy.keep_key_order = true;
    for id in [SCHEMA_ID, NEW_SCHEMA_ID] {
        c.healthy.schemas.insert(id, AVRO_SCHEMA.to_string());
    }
    c.sink.set_behaviour(c.baseline());
    let second = SinkHandle::start("127.0.0.1:0".parse()?, c.baseline())
        .await
        .context("starting the second API stand-in")?;
    let second_url = format!("http://{}/batch", second.addr());
    let registry = format!("http://{}", c.sink.addr());
    c.toml = toml(&c.toml, &second_url, &registry, hold(o));
    c.extra_sinks.push(second);
    Ok(())
}

/// The default destination's name: `api.url`'s origin.
fn first_destination(c: &Cluster) -> String {
    format!("http://{}", c.sink.addr())
}

pub async fn run(c: &mut Cluster, o: &Opts, load: &Load) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let second = c.extra_sinks.first().context("no second stand-in")?.clone();
    tokio::time::sleep(o.warm()).await;

    eprintln!("[drill] both APIs down (503) for {:?}", outage(o));
    for sink in [&c.sink, &second] {
        sink.update_behaviour(|b| b.down_status = Some(503));
    }
    tokio::time::sleep(outage(o)).await;
    eprintln!("[drill] both APIs back (half-open probes first)");
    c.heal_sinks();
    tokio::time::sleep(gap(o)).await;

    c.reap()?;
    eprintln!("[drill] SIGKILL {}, restarted at once", c.instances[0].name);
    c.kill(0).await;
    c.spawn(0)?;
    tokio::time::sleep(gap(o)).await;
    eprintln!(
        "[drill] a rebalance: SIGTERM {}, restarted",
        c.instances[1].name
    );
    c.terminate(1, Duration::from_secs(30)).await;
    c.spawn(1)?;
    c.wait_joined(Some(1), Duration::from_secs(60)).await?;
    tokio::time::sleep(gap(o)).await;

    let first = first_destination(c);
    eprintln!(
        "[drill] the default destination down (503) for {:?}, past the hold ({})",
        past_hold(o),
        hold(o)
    );
    c.sink.update_behaviour(|b| b.down_status = Some(503));
    tokio::time::sleep(past_hold(o)).await;
    let diverted: f64 = c
        .scrape_all()
        .await
        .iter()
        .filter_map(|s| s.diverted_by_destination.get(&first))
        .sum();
    c.heal_sinks();
    checks.push(Check::new(
        "order-first-diverted",
        diverted > 0.0,
        format!(
            "courier_destination_diverted_total{{destination=\"{first}\"}} summed over the live instances: {diverted} (hold {})",
            hold(o)
        ),
    ));
    tokio::time::sleep(gap(o)).await;

    eprintln!(
        "[drill] registry 404 burst: the load moves to schema id {NEW_SCHEMA_ID}, unknown to the registry for {BURST:?}"
    );
    c.sink.update_behaviour(|b| {
        b.schemas.remove(&NEW_SCHEMA_ID);
    });
    let t = Instant::now();
    load.set_schema_id(NEW_SCHEMA_ID);
    tokio::time::sleep(BURST.saturating_sub(t.elapsed())).await;
    c.heal_sinks();
    Ok(checks)
}

/// The checks after the group settled and the audit (`audit`, over both
/// stand-ins).
pub fn after(c: &Cluster, audit: &AuditReport) -> Vec<Check> {
    let Some(second) = c.extra_sinks.first() else {
        return vec![Check::new(
            "order-stale-writes",
            false,
            "no second stand-in",
        )];
    };
    let (a, b) = (c.sink.audit(), second.audit());
    let stale = a.stale_writes + b.stale_writes;
    let examples: Vec<&String> = a
        .stale_write_examples
        .iter()
        .chain(&b.stale_write_examples)
        .take(5)
        .collect();
    let parked_unknown = audit
        .parked_by_reason
        .get("unknown_schema")
        .copied()
        .unwrap_or(0);
    vec![
        Check::new(
            "order-stale-writes",
            stale == 0 && a.writes_checked > 0 && b.writes_checked > 0,
            format!(
                "stale writes {} at the default destination ({} first writes checked), {} at the \
                 second ({} checked; {} batch items held back behind a failed one of their key); \
                 e.g. {examples:?}",
                a.stale_writes,
                a.writes_checked,
                b.stale_writes,
                b.writes_checked,
                b.batch_items_held_back
            ),
        ),
        Check::new(
            "order-runs-shared-batches",
            b.batch_same_key_items > 0,
            format!(
                "{} batch items shared a request with an earlier item of their key ({} batch requests)",
                b.batch_same_key_items, b.batch_requests
            ),
        ),
        Check::new(
            "order-registry-burst-parks-nothing",
            parked_unknown == 0,
            format!(
                "{parked_unknown} records parked unknown_schema after a {BURST:?} registry 404 burst for a new schema id"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Courier reads the route, the hold and the Avro input from the
    /// instances' config.
    #[test]
    fn the_route_the_hold_and_the_registry_go_into_the_config() {
        let n = crate::cluster::Names::new("t", 2);
        let base = crate::cluster::courier_toml(&n, "http://127.0.0.1:1/events", 4);
        let text = toml(
            &base,
            "http://127.0.0.1:2/batch",
            "http://127.0.0.1:1",
            "4s",
        );
        let path =
            std::env::temp_dir().join(format!("courier-drill-order-{}.toml", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let cfg = courier::config::Config::load(Some(&path));
        let _ = std::fs::remove_file(&path);
        let cfg = cfg.unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.degraded.destination_hold, Duration::from_secs(4));
        let route = &cfg.api.routes[0];
        assert_eq!(route.event_type, SECOND_TYPE);
        assert_eq!(route.destination.as_deref(), Some(SECOND));
        let batch = route.batch.as_ref().expect("the route batches");
        assert_eq!((batch.max_events, batch.ordered), (Some(50), Some(true)));
        assert_eq!(cfg.input.key, "/subject");
        assert_eq!(cfg.input.schema_registry.url, "http://127.0.0.1:1");
    }
}
