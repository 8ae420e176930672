//! The `destination-outage` scenario (destinations, `[[api.routes]]
//! destination`): two APIs behind one group. The load has two CloudEvents
//! types, about half each, over the same keys: `profile.updated` goes to
//! `api.url` (the cluster's stand-in, the default destination), `order.placed`
//! through a route to a second stand-in (destination `second`). The second API
//! answers 503 for 15 s (60 s full), longer than `degraded.destination_hold`
//! (5 s / 20 s), and Redis is killed in the middle of that outage and started
//! again at its end; then the second API comes back.
//!
//! Checks: every instance reports `courier_api_unavailable{destination="second"}
//! = 1` within 15 s, and the default destination never reports 1 during the
//! outage; the first API's delivery rate during the outage is at least 0.9 ×
//! its rate in the warm-up; the second destination's events were diverted to
//! the DLQ (`courier_destination_diverted_total`) and every instance reports
//! it available again within 30 s of its return. After the group settled:
//! nothing of the first type ever went to the DLQ, and every event was
//! delivered (to one stand-in, never both), through the no-loss audit over
//! both stand-ins.

use crate::cluster::Cluster;
use crate::faults::Faults;
use crate::opts::Opts;
use crate::report::Check;
use anyhow::Context as _;
use courier_standins::audit::AuditReport;
use courier_standins::sink::SinkHandle;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The default destination's type (no route matches it: `api.url`).
pub const FIRST_TYPE: &str = "profile.updated";
/// The second destination's type (its route's `type`).
pub const SECOND_TYPE: &str = "order.placed";
/// The load's types, in the order the load takes them chunk by chunk.
pub const TYPES: [&str; 2] = [FIRST_TYPE, SECOND_TYPE];
/// The second destination's name (`[[api.routes]] destination`).
pub const SECOND: &str = "second";

/// How long the second API is down.
fn outage(o: &Opts) -> Duration {
    o.pick(15.0, 60.0)
}

/// `degraded.destination_hold`: below the outage, so that the second
/// destination's events are diverted to the DLQ during it.
fn hold(o: &Opts) -> &'static str {
    if o.short {
        "5s"
    } else {
        "20s"
    }
}

/// The window, after the warm-up, over which the first API's rate before the
/// outage is measured.
fn window(o: &Opts) -> Duration {
    o.pick(5.0, 10.0)
}

/// The faults' part of the load's duration (the runner adds warm-up and tail).
pub fn duration(o: &Opts) -> Duration {
    window(o) + outage(o)
}

/// Starts the second stand-in and writes the route to it and the hold into
/// the instances' config (before they start).
pub async fn prepare(c: &mut Cluster, o: &Opts) -> anyhow::Result<()> {
    let second = SinkHandle::start("127.0.0.1:0".parse()?, c.baseline())
        .await
        .context("starting the second API stand-in")?;
    c.toml = toml(&c.toml, &second.url(), hold(o));
    c.extra_sinks.push(second);
    Ok(())
}

fn toml(base: &str, second_url: &str, hold: &str) -> String {
    format!(
        "{}\n[[api.routes]]\ntype = \"{SECOND_TYPE}\"\nurl = \"{second_url}\"\ndestination = \"{SECOND}\"\n",
        base.replace(
            "[degraded]\n",
            &format!("[degraded]\ndestination_hold = \"{hold}\"\n")
        )
    )
}

/// The default destination's name: `api.url`'s origin.
fn first_destination(c: &Cluster) -> String {
    format!("http://{}", c.sink.addr())
}

/// What [`watch`] saw of one destination's `courier_api_unavailable`.
#[derive(Default)]
struct Seen {
    /// Samples read (instances × scrapes): 0 when the series was never there.
    samples: usize,
    max: f64,
}

/// Polls every instance until `until`, adding what it reads of
/// `destination`'s `courier_api_unavailable` to `seen`.
async fn watch(c: &Cluster, destination: &str, until: Instant, seen: &mut Seen) {
    while Instant::now() < until {
        for s in c.scrape_all().await {
            if let Some(v) = s.unavailable_by_destination.get(destination) {
                seen.samples += 1;
                seen.max = seen.max.max(*v);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Delivered per second to `sink` since `(t, n)`.
fn rate_since(sink: &SinkHandle, (t, n): (Instant, u64)) -> f64 {
    (sink.delivered_count() - n) as f64 / t.elapsed().as_secs_f64()
}

pub async fn run(c: &Cluster, o: &Opts, f: &mut Faults) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let second = c.extra_sinks.first().context("no second stand-in")?;
    let first_dest = first_destination(c);
    tokio::time::sleep(o.warm()).await;
    let mark = (Instant::now(), c.sink.delivered_count());
    tokio::time::sleep(window(o)).await;
    let before = rate_since(&c.sink, mark);
    eprintln!(
        "[drill] first API: {before:.1} events/s before the outage; second API: {} delivered",
        second.delivered_count()
    );

    eprintln!("[drill] second API down (503) for {:?}", outage(o));
    second.update_behaviour(|b| b.down_status = Some(503));
    let t_out = Instant::now();
    let mark = (t_out, c.sink.delivered_count());
    let unavailable = c
        .wait_destination_unavailable(SECOND, true, Duration::from_secs(15))
        .await;
    checks.push(Check::new(
        "second-unavailable",
        unavailable.is_some(),
        match unavailable {
            Some(d) => format!(
                "every instance reported courier_api_unavailable{{destination=\"{SECOND}\"}}=1 after {} ms",
                d.as_millis()
            ),
            None => format!("not every instance reported destination {SECOND} unavailable within 15 s"),
        },
    ));
    let mut first_seen = Seen::default();
    watch(c, &first_dest, t_out + outage(o) / 2, &mut first_seen).await;
    eprintln!("[drill] Redis killed in the middle of the outage");
    f.redis_down = true;
    c.svc.ctl("redis-stop").await?;
    watch(c, &first_dest, t_out + outage(o), &mut first_seen).await;
    let during = rate_since(&c.sink, mark);
    let outage_s = t_out.elapsed().as_secs_f64();
    let diverted: f64 = c
        .scrape_all()
        .await
        .iter()
        .filter_map(|s| s.diverted_by_destination.get(SECOND))
        .sum();
    checks.push(Check::new(
        "first-stays-available",
        first_seen.samples > 0 && first_seen.max == 0.0,
        format!(
            "the default destination ({first_dest}) reported courier_api_unavailable {} at most during the outage ({} samples)",
            first_seen.max, first_seen.samples
        ),
    ));
    checks.push(Check::new(
        "first-keeps-flowing",
        during >= 0.9 * before,
        format!(
            "the first API got {during:.1} events/s during the second's {outage_s:.0} s outage, {before:.1} before (≥ 0.9 × wanted)"
        ),
    ));
    checks.push(Check::new(
        "second-diverted",
        diverted > 0.0,
        format!(
            "courier_destination_diverted_total{{destination=\"{SECOND}\"}} summed over the instances: {diverted} (hold {})",
            hold(o)
        ),
    ));

    c.svc.ctl("redis-start").await?;
    f.redis_down = false;
    eprintln!("[drill] second API back");
    second.set_behaviour(c.baseline());
    let resumed = c
        .wait_destination_unavailable(SECOND, false, Duration::from_secs(30))
        .await;
    checks.push(Check::new(
        "second-resumes",
        resumed.is_some(),
        match resumed {
            Some(d) => format!(
                "every instance reported destination {SECOND} available {} ms after its return",
                d.as_millis()
            ),
            None => {
                format!("not every instance reported destination {SECOND} available within 30 s")
            }
        },
    ));
    Ok(checks)
}

/// The checks after the group settled and the audit over both stand-ins
/// (`audit`, from [`Cluster::api_audit`]). What cannot be read fails its check.
pub fn after(c: &Cluster, audit: &AuditReport) -> Vec<Check> {
    vec![
        not_in_dlq(c).unwrap_or_else(|e| Check::new("first-not-in-dlq", false, format!("{e:#}"))),
        all_delivered(c, audit)
            .unwrap_or_else(|e| Check::new("all-delivered", false, format!("{e:#}"))),
    ]
}

/// Nothing of the first destination's type (nor of a type the load does not
/// make) ever went to the DLQ: its records are read from the start.
fn not_in_dlq(c: &Cluster) -> anyhow::Result<Check> {
    let records = tokio::task::block_in_place(|| {
        courier_standins::admin::read_all(&c.svc.brokers, &c.names.dlq)
    })
    .context("reading the DLQ")?;
    let mut by_type: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for r in &records {
        let Some(e) = r
            .payload
            .as_deref()
            .and_then(|p| courier::core::envelope::Envelope::from_bytes(p).ok())
        else {
            continue;
        };
        let t = e.event_type.unwrap_or_else(|| "(no type)".into());
        *by_type
            .entry(t)
            .or_default()
            .entry(e.last_error.reason)
            .or_default() += 1;
    }
    let describe = by_type
        .iter()
        .map(|(t, reasons)| {
            let rs: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}={n}")).collect();
            format!("{t}: {}", rs.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ");
    let first_in_dlq: usize = by_type.get(FIRST_TYPE).map_or(0, |r| r.values().sum());
    let others = by_type.keys().any(|t| t != SECOND_TYPE && t != FIRST_TYPE);
    Ok(Check::new(
        "first-not-in-dlq",
        first_in_dlq == 0 && !others,
        format!(
            "{} DLQ records, {first_in_dlq} of {FIRST_TYPE} ({})",
            records.len(),
            if describe.is_empty() {
                "none"
            } else {
                &describe
            }
        ),
    ))
}

/// Every event delivered at the end (none left in the DLQ, none parked), each
/// to one stand-in only.
fn all_delivered(c: &Cluster, audit: &AuditReport) -> anyhow::Result<Check> {
    let first = c.sink.audit();
    let second = c.extra_sinks.first().context("no second stand-in")?.audit();
    let both = first
        .delivered
        .keys()
        .filter(|id| second.delivered.contains_key(*id))
        .count();
    Ok(Check::new(
        "all-delivered",
        audit.delivered == audit.produced && audit.lost.is_empty() && both == 0,
        format!(
            "{} produced, {} delivered ({} to the first API, {} to the second, {both} to both), {} still in the DLQ, {} parked",
            audit.produced,
            audit.delivered,
            first.delivered.len(),
            second.delivered.len(),
            audit.in_dlq,
            audit.parked
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Courier reads the route and the hold from the instances' config.
    #[test]
    fn the_route_and_the_hold_go_into_the_config() {
        let n = crate::cluster::Names::new("t", 2);
        let base = crate::cluster::courier_toml(&n, "http://127.0.0.1:1/events", 4);
        let text = toml(&base, "http://127.0.0.1:2/events", "5s");
        let path = std::env::temp_dir().join(format!(
            "courier-drill-destination-outage-{}.toml",
            std::process::id()
        ));
        std::fs::write(&path, &text).unwrap();
        let cfg = courier::config::Config::load(Some(&path));
        let _ = std::fs::remove_file(&path);
        let cfg = cfg.unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.degraded.destination_hold, Duration::from_secs(5));
        assert_eq!(cfg.api.routes.len(), 1);
        let route = &cfg.api.routes[0];
        assert_eq!(route.event_type, SECOND_TYPE);
        assert_eq!(route.url, "http://127.0.0.1:2/events");
        assert_eq!(route.destination.as_deref(), Some(SECOND));
        assert_eq!(cfg.api.url, "http://127.0.0.1:1/events");
    }
}
