//! The fault scenarios. Each one starts its own cluster (fresh topics and group),
//! runs the load in the background while it injects its faults on a schedule,
//! heals everything it broke, waits until the group has committed to the end and
//! drained the DLQ, and ends with the no-loss audit.

use crate::cluster::{Cluster, Load, LoadShape, Services};
use crate::faults::Faults;
use crate::metrics;
use crate::opts::Opts;
use crate::report::{Check, ScenarioReport};
use crate::toxiproxy::Toxiproxy;
use anyhow::{bail, Context as _};
use rand::Rng as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub const ALL: &[&str] = &[
    "api-outage",
    "api-flap",
    "api-401",
    "redis",
    "kafka-restart",
    "kill-instances",
    "partition-one",
    "rolling-restart",
    "poison-storm",
    "crash-cost",
    "partial-api",
    "destination-outage",
    "order",
    "hostile",
];

/// Scenarios that run only when named, not in `all` (the CI sequence): none
/// now (`order` was one until its failure under the CI's load was found,
/// docs/DRILLS.md, "Order").
pub const NAMED_ONLY: &[&str] = &[];

/// A scenario of `all`, or one that runs only when named (parts of
/// `hostile`, `NAMED_ONLY`).
pub fn known(name: &str) -> bool {
    ALL.contains(&name) || NAMED_ONLY.contains(&name) || crate::hostile::PARTS.contains(&name)
}

/// How long a scenario's load should last, so that its faults happen under load.
fn load_duration(name: &str, o: &Opts) -> Duration {
    if name.starts_with("hostile") {
        return crate::hostile::load_duration(o);
    }
    let w = o.warm();
    let t = o.tail();
    w + t
        + match name {
            "api-outage" => o.pick(8.0, 30.0),
            "api-flap" => flap_cycle(o) * o.rounds(3, 8) as u32 + o.pick(6.0, 25.0),
            "api-401" => o.pick(6.0, 20.0),
            "redis" => o.pick(12.0, 30.0),
            "kafka-restart" => o.pick(10.0, 30.0),
            "kill-instances" => o.pick(6.0, 10.0) * o.rounds(3, 10) as u32,
            "partition-one" => o.pick(15.0, 30.0),
            "rolling-restart" => o.pick(5.0, 10.0) * o.cluster.instances as u32,
            "poison-storm" => o.pick(10.0, 60.0),
            "crash-cost" => o.pick(6.0, 15.0),
            "partial-api" => crate::partial_api::duration(o),
            "destination-outage" => crate::destination_outage::duration(o),
            "order" => crate::order::duration(o),
            _ => Duration::ZERO,
        }
}

fn flap_cycle(o: &Opts) -> Duration {
    o.pick(1.5, 2.0) + o.pick(2.0, 4.0)
}

pub async fn run(name: &str, svc: &Services, o: &Opts) -> ScenarioReport {
    eprintln!("\n[drill] ═══ scenario {name} ═══");
    let t0 = Instant::now();
    let mut rep = ScenarioReport {
        scenario: name.to_string(),
        rate_per_s: o.rate,
        log_dir: o.cluster.log_dir.display().to_string(),
        ..ScenarioReport::default()
    };
    let mut faults = Faults::default();
    let res = run_inner(name, svc, o, &mut faults, &mut rep).await;
    if let Err(e) = faults.heal(svc).await {
        rep.error
            .get_or_insert(format!("healing after the scenario failed: {e:#}"));
    }
    if let Some(t) = faults.toxiproxy.take() {
        t.cleanup(&o.toxiproxy_script).await;
    }
    if let Err(e) = res {
        eprintln!("[drill] scenario {name} ERROR: {e:#}");
        rep.error.get_or_insert(format!("{e:#}"));
    }
    rep.duration_s = t0.elapsed().as_secs_f64();
    rep.ok = rep.error.is_none() && rep.lost == 0 && rep.checks.iter().all(|c| c.ok);
    if !rep.ok {
        crate::digest::print(name, &o.cluster.log_dir);
    }
    eprintln!(
        "[drill] scenario {name}: {} ({} produced, {} delivered, {} lost, {} duplicates, {:.0}s)",
        if rep.ok { "ok" } else { "FAILED" },
        rep.produced,
        rep.delivered,
        rep.lost,
        rep.duplicates,
        rep.duration_s
    );
    rep
}

async fn run_inner(
    name: &str,
    svc: &Services,
    o: &Opts,
    f: &mut Faults,
    rep: &mut ScenarioReport,
) -> anyhow::Result<()> {
    if !known(name) {
        bail!("unknown scenario {name}");
    }
    let mut c = Cluster::new(name, svc.clone(), o.cluster.clone()).await?;
    // Faults that hold from the start.
    match name {
        "redis" => {
            f.redis_down = true;
            svc.ctl("redis-stop").await?;
        }
        "partition-one" => {
            let t = Toxiproxy::ensure(&o.toxiproxy_script).await?;
            ensure_proxied_listener(svc).await?;
            t.create(&svc.proxied_brokers, &svc.proxied_upstream)
                .await?;
            f.toxiproxy = Some(t);
            c.proxied_slots = vec![0];
        }
        "crash-cost" => c.static_ids = true,
        "partial-api" => c.toml = crate::partial_api::toml(&c.toml, &c.sink.url()),
        "destination-outage" => crate::destination_outage::prepare(&mut c, o).await?,
        "order" => crate::order::prepare(&mut c, o).await?,
        _ => {}
    }
    c.start_all().await?;
    eprintln!(
        "[drill] {} instances joined group {} ({} partitions)",
        c.instances.len(),
        c.names.group,
        c.names.partitions
    );
    let count = o
        .events
        .unwrap_or((o.rate as f64 * load_duration(name, o).as_secs_f64()) as usize);
    let shape = match name {
        "destination-outage" => LoadShape {
            event_types: crate::destination_outage::TYPES.map(String::from).to_vec(),
            ..LoadShape::default()
        },
        "order" => crate::order::load_shape(),
        _ => LoadShape::default(),
    };
    let load = Load::start(
        &svc.brokers,
        &c.names.topic,
        &format!("drill-{name}"),
        count,
        o.rate,
        shape,
    );
    eprintln!("[drill] producing {count} events at {}/s", o.rate);

    let t_faults = Instant::now();
    let mut book = crate::hostile::Book::default();
    let script = match name {
        "api-outage" => api_outage(&mut c, o).await,
        "api-flap" => api_flap(&mut c, o).await,
        "api-401" => api_401(&mut c, o).await,
        "redis" => redis(&mut c, o, f).await,
        "kafka-restart" => kafka_restart(&mut c, o, f).await,
        "kill-instances" => kill_instances(&mut c, o).await,
        "partition-one" => partition_one(&mut c, o, f).await,
        "rolling-restart" => rolling_restart(&mut c, o).await,
        "poison-storm" => poison_storm(o, &load).await,
        "crash-cost" => crash_cost(&mut c, o).await,
        "partial-api" => crate::partial_api::run(&mut c, o).await,
        "destination-outage" => crate::destination_outage::run(&c, o, f).await,
        "order" => crate::order::run(&mut c, o, &load).await,
        n if n.starts_with("hostile") => {
            let r = crate::hostile::run(name, &mut c, o, &load, &mut book).await;
            // Whatever happened, the load ends (its count is only a ceiling).
            load.stop();
            r
        }
        _ => unreachable!(),
    };
    eprintln!(
        "[drill] faults done after {:.0}s; healing",
        t_faults.elapsed().as_secs_f64()
    );
    c.heal_sinks();
    f.heal(svc).await?;
    let script_err = match script {
        Ok(checks) => {
            rep.checks.extend(checks);
            None
        }
        Err(e) => Some(e),
    };
    let mut produced = load.wait().await?;
    let load_produced = produced.clone();
    let special = book.special_produced();
    produced.ids.extend(special.ids);
    produced.offsets.extend(special.offsets);
    eprintln!(
        "[drill] load done: {} valid + {} bad records; waiting for the group to settle",
        produced.ids.len(),
        produced.poison.len()
    );
    match c.wait_settled(o.settle_timeout).await {
        Ok(d) => rep.settle_s = d.as_secs_f64(),
        Err(e) => {
            rep.error = Some(format!("{e:#}"));
            rep.settle_s = o.settle_timeout.as_secs_f64();
        }
    }
    let api_audit = c.api_audit();
    let audit = tokio::task::block_in_place(|| {
        courier_standins::audit::audit(
            &svc.brokers,
            &c.names.dlq,
            &c.names.parking,
            &produced,
            &api_audit,
        )
    })
    .context("the audit")?;
    let mut audit = audit;
    if name.starts_with("hostile") {
        let reported = c.deleted_unread_reported().await;
        let logs: String = c
            .instances
            .iter()
            .map(|i| std::fs::read_to_string(&i.log).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let (acc, checks) = crate::hostile::account(&book, &load_produced, &audit, reported, &logs);
        rep.checks.extend(checks);
        rep.deleted_unread = acc.deleted_unread;
        rep.deleted_unread_reported = Some(reported);
        audit.lost = acc.lost;
    }
    if name == "destination-outage" {
        rep.checks
            .extend(crate::destination_outage::after(&c, &audit));
    }
    if name == "order" {
        rep.checks.extend(crate::order::after(&c, &audit));
    }
    println!("[{name}] audit:\n{audit}");
    if rep.deleted_unread_reported.is_some() {
        println!(
            "[{name}] deleted unread by the drill: {} (Courier reported {:.0})",
            rep.deleted_unread,
            rep.deleted_unread_reported.unwrap_or(0.0)
        );
    }
    rep.produced = audit.produced;
    rep.delivered = audit.delivered;
    rep.in_dlq = audit.in_dlq;
    rep.parked = audit.parked;
    rep.parked_by_reason = audit.parked_by_reason.clone();
    rep.lost = audit.lost_count();
    rep.lost_sample = audit.lost.iter().take(20).cloned().collect();
    rep.duplicates = audit.duplicates;
    rep.duplicate_pct = audit.duplicate_pct();

    let bad_exits = c.stop_all().await;
    rep.checks.push(Check::new(
        "clean-shutdown",
        bad_exits.is_empty(),
        if bad_exits.is_empty() {
            "every instance exited 0 on SIGTERM".to_string()
        } else {
            format!("exits other than 0 on SIGTERM: {bad_exits:?}")
        },
    ));
    for inst in &c.instances {
        let tail = inst.log_tail(3);
        if !tail.is_empty() && rep.lost > 0 {
            eprintln!(
                "[drill] {} last warnings:\n  {}",
                inst.name,
                tail.join("\n  ")
            );
        }
    }
    rep.unexpected_exits = std::mem::take(&mut c.unexpected_exits);
    if rep.lost == 0 {
        if let Err(e) = c.names.delete(&svc.brokers).await {
            eprintln!("[drill] could not delete the scenario's topics: {e:#}");
        }
    } else {
        eprintln!(
            "[drill] topics kept for a post-mortem: {} (+ .dlq, .parking)",
            c.names.topic
        );
    }
    let observed = c.finish().await;
    let merged = metrics::merge(observed.last.values());
    rep.p99_latency_s = merged.quantile(0.99);
    rep.p50_latency_s = merged.quantile(0.50);
    rep.paused_s = observed.paused_s;
    rep.paused_instance_s = observed.paused_instance_s;
    if let Some(e) = script_err {
        return Err(e.context("the fault script"));
    }
    Ok(())
}

/// Starts the broker again with the current config when its PROXIED listener is
/// missing (a broker started before that listener existed).
async fn ensure_proxied_listener(svc: &Services) -> anyhow::Result<()> {
    let open = || std::net::TcpStream::connect(&svc.proxied_upstream).is_ok();
    if open() {
        return Ok(());
    }
    eprintln!(
        "[drill] the broker has no PROXIED listener on {}: restarting it with the current config",
        svc.proxied_upstream
    );
    svc.ctl("kafka-start").await?;
    if !open() {
        bail!(
            "the broker has no PROXIED listener on {} even after kafka-start (is scripts/services.sh current?)",
            svc.proxied_upstream
        );
    }
    Ok(())
}

async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Takes the API down (`down_status`), checks that the whole group pauses and
/// returns the DLQ size before the change and the check. The API stays down.
async fn outage_begins(
    c: &Cluster,
    what: &str,
    change: impl FnOnce(&mut courier_standins::sink::Behaviour),
) -> (i64, Check) {
    let dlq0 = c.dlq_size();
    c.sink.update_behaviour(change);
    let paused = c.wait_all_unavailable(true, Duration::from_secs(15)).await;
    let check = Check::new(
        &format!("{what}-pauses"),
        paused.is_some(),
        match paused {
            Some(d) => format!(
                "every instance reported courier_api_unavailable=1 after {} ms",
                d.as_millis()
            ),
            None => "not every instance paused within 15 s".to_string(),
        },
    );
    (dlq0, check)
}

fn no_flood(c: &Cluster, o: &Opts, what: &str, dlq0: i64) -> Check {
    let added = c.dlq_size() - dlq0;
    Check::new(
        &format!("{what}-no-dlq-flood"),
        added <= o.dlq_bound(),
        format!(
            "{added} DLQ records during the fault (bound {}: in flight at its onset)",
            o.dlq_bound()
        ),
    )
}

async fn outage_ends(c: &Cluster, what: &str) -> Check {
    c.sink.set_behaviour(c.baseline());
    let resumed = c.wait_all_unavailable(false, Duration::from_secs(30)).await;
    Check::new(
        &format!("{what}-resumes"),
        resumed.is_some(),
        match resumed {
            Some(d) => format!(
                "every instance back to available after {} ms",
                d.as_millis()
            ),
            None => "not every instance resumed within 30 s".to_string(),
        },
    )
}

async fn api_outage(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    sleep(o.warm()).await;
    let t = Instant::now();
    let (dlq0, chk) = outage_begins(c, "outage", |b| b.down_status = Some(503)).await;
    checks.push(chk);
    sleep(o.pick(8.0, 30.0).saturating_sub(t.elapsed())).await;
    checks.push(no_flood(c, o, "outage", dlq0));
    checks.push(outage_ends(c, "outage").await);
    Ok(checks)
}

async fn api_flap(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    sleep(o.warm()).await;
    // Flapping: down, up, down, up …
    for i in 0..o.rounds(3, 8) {
        eprintln!("[drill] flap {}: API down", i + 1);
        c.sink.update_behaviour(|b| b.down_status = Some(503));
        sleep(o.pick(1.5, 2.0)).await;
        c.sink.update_behaviour(|b| b.down_status = None);
        sleep(o.pick(2.0, 4.0)).await;
    }
    // Latency spike: 10× the normal latency.
    let normal = c.cfg.api_latency_ms;
    eprintln!(
        "[drill] latency spike: {} ms ± {} ms",
        normal * 10,
        normal * 10
    );
    c.sink.update_behaviour(|b| {
        b.latency_ms = normal * 10;
        b.latency_jitter_ms = normal * 10;
    });
    sleep(o.pick(3.0, 15.0)).await;
    // Partial failure: a fifth of the calls refused.
    eprintln!("[drill] 20 % of calls answered 503");
    c.sink.set_behaviour(courier_standins::sink::Behaviour {
        fail_rate: 0.2,
        ..c.baseline()
    });
    sleep(o.pick(3.0, 10.0)).await;
    c.sink.set_behaviour(c.baseline());
    Ok(Vec::new())
}

async fn api_401(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    sleep(o.warm()).await;
    let t = Instant::now();
    eprintln!("[drill] credentials revoked: the API now wants another token");
    let (dlq0, chk) =
        outage_begins(c, "revoked", |b| b.required_token = Some("rotated".into())).await;
    checks.push(chk);
    sleep(o.pick(6.0, 20.0).saturating_sub(t.elapsed())).await;
    checks.push(no_flood(c, o, "revoked", dlq0));
    checks.push(outage_ends(c, "revoked").await);
    Ok(checks)
}

async fn redis(c: &mut Cluster, o: &Opts, f: &mut Faults) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let svc = c.svc.clone();
    // Phase 1: Redis has been down since before the instances started; an API
    // outage must still pause each instance (local breaker).
    sleep(o.warm()).await;
    let t = Instant::now();
    let (dlq0, chk) = outage_begins(c, "no-redis-outage", |b| b.down_status = Some(503)).await;
    checks.push(chk);
    sleep(o.pick(4.0, 10.0).saturating_sub(t.elapsed())).await;
    checks.push(no_flood(c, o, "no-redis-outage", dlq0));
    checks.push(outage_ends(c, "no-redis-outage").await);
    svc.ctl("redis-start").await?;
    f.redis_down = false;
    sleep(o.pick(2.0, 5.0)).await;
    // Phase 2: Redis killed in the middle of an API outage.
    let t = Instant::now();
    let (dlq0, chk) = outage_begins(c, "redis-killed-outage", |b| b.down_status = Some(503)).await;
    checks.push(chk);
    let hold = o.pick(6.0, 15.0);
    sleep((hold / 2).saturating_sub(t.elapsed())).await;
    f.redis_down = true;
    svc.ctl("redis-stop").await?;
    sleep(hold.saturating_sub(t.elapsed())).await;
    checks.push(no_flood(c, o, "redis-killed-outage", dlq0));
    checks.push(outage_ends(c, "redis-killed-outage").await);
    svc.ctl("redis-start").await?;
    f.redis_down = false;
    Ok(checks)
}

async fn kafka_restart(c: &mut Cluster, o: &Opts, f: &mut Faults) -> anyhow::Result<Vec<Check>> {
    let svc = c.svc.clone();
    sleep(o.warm()).await;
    for (stop, how) in [("kafka-stop", "SIGTERM"), ("kafka-kill", "SIGKILL")] {
        eprintln!("[drill] broker restart ({how})");
        f.kafka_down = true;
        svc.ctl(stop).await?;
        svc.ctl("kafka-start").await?;
        f.kafka_down = false;
        sleep(o.pick(5.0, 15.0)).await;
    }
    c.reap()?;
    Ok(Vec::new())
}

async fn kill_instances(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    let period = o.pick(6.0, 10.0);
    let down = Duration::from_secs(3);
    for round in 0..o.rounds(3, 10) {
        sleep(period - down).await;
        c.reap()?;
        let slot = rand::rng().random_range(0..c.instances.len());
        eprintln!(
            "[drill] round {}: SIGKILL {}",
            round + 1,
            c.instances[slot].name
        );
        c.kill(slot).await;
        sleep(down).await;
        c.spawn(slot)?;
    }
    c.wait_joined(None, Duration::from_secs(60)).await?;
    Ok(Vec::new())
}

/// SIGKILL one static member under load and restart it at once with the same
/// instance id: takeover is kill → the restarted instance's first delivery.
/// Duplicates (the audit's, for the whole scenario) and the ratio to what was
/// in flight at the kill are in the check's detail and the report.
async fn crash_cost(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    sleep(o.warm()).await;
    c.reap()?;
    let slot = 0;
    let port = c.instances[slot].metrics_port;
    let page = courier_testkit::metrics_page(port, Some(metrics::SCRAPE_TIMEOUT)).await;
    let in_flight = page
        .as_deref()
        .map(|p| courier_testkit::metric_sum(p, "courier_in_flight"))
        .unwrap_or(0.0);
    let duplicates_before = c.sink.audit().duplicates();
    eprintln!(
        "[drill] SIGKILL {} ({in_flight} requests in flight), restarted at once",
        c.instances[slot].name
    );
    c.kill(slot).await;
    let killed = Instant::now();
    c.spawn(slot)?;
    let deadline = killed + Duration::from_secs(60);
    let mut takeover = None;
    while Instant::now() < deadline {
        if c.instances[slot]
            .scrape()
            .await
            .is_some_and(|s| s.delivered > 0.0)
        {
            takeover = Some(killed.elapsed());
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    c.wait_joined(None, Duration::from_secs(60)).await?;
    sleep(o.tail()).await;
    let duplicates = c.sink.audit().duplicates() - duplicates_before;
    // The 3 s target is a measurement, held by the full drill; the short one
    // (the CI test, on a shared machine) reports the time against it and fails
    // only when the restarted instance never delivers.
    const TARGET: Duration = Duration::from_secs(3);
    let ok = takeover.is_some_and(|t| o.short || t <= TARGET);
    Ok(vec![Check::new(
        "takeover",
        ok,
        match takeover {
            Some(t) => format!(
                "kill → the restarted instance's first delivery {:.2} s (target ≤ {} s{}); \
                 duplicates since the kill {duplicates} = {:.2} × the {in_flight} in flight",
                t.as_secs_f64(),
                TARGET.as_secs(),
                if o.short && t > TARGET {
                    ", not met: reported, the short drill does not time"
                } else {
                    ""
                },
                duplicates as f64 / in_flight.max(1.0)
            ),
            None => "the restarted instance delivered nothing within 60 s".into(),
        },
    )])
}

async fn partition_one(c: &mut Cluster, o: &Opts, f: &mut Faults) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let t = f.toxiproxy.as_ref().context("toxiproxy")?;
    sleep(o.warm()).await;
    eprintln!("[drill] cutting {} off from Kafka", c.instances[0].name);
    t.set_enabled(false).await?;
    let hold = o.pick(15.0, 30.0);
    let t0 = Instant::now();
    // The others take the cut instance's partitions once its session times out.
    let mut taken = None;
    while t0.elapsed() < hold {
        let mut others = 0.0;
        for inst in c.instances.iter().skip(1) {
            others += inst.scrape().await.map(|s| s.assigned).unwrap_or(0.0);
        }
        if taken.is_none() && others as i32 == c.cfg.partitions {
            taken = Some(t0.elapsed());
        }
        sleep(Duration::from_millis(250)).await;
    }
    checks.push(Check::new(
        "others-take-over",
        taken.is_some(),
        match taken {
            Some(d) => format!(
                "the other instances owned every partition {:.1} s after the cut",
                d.as_secs_f64()
            ),
            None => format!(
                "the other instances never owned every partition during the {:.0} s cut",
                hold.as_secs_f64()
            ),
        },
    ));
    eprintln!("[drill] healing the partition");
    t.set_enabled(true).await?;
    let rejoined = c.wait_joined(Some(0), Duration::from_secs(60)).await;
    checks.push(Check::new(
        "cut-instance-rejoins",
        rejoined.is_ok(),
        match &rejoined {
            Ok(()) => "the cut instance owns partitions again".to_string(),
            Err(e) => format!("{e:#}"),
        },
    ));
    Ok(checks)
}

async fn rolling_restart(c: &mut Cluster, o: &Opts) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    sleep(o.warm()).await;
    for slot in 0..c.instances.len() {
        let name = c.instances[slot].name.clone();
        eprintln!("[drill] rolling restart: SIGTERM {name}");
        let t = Instant::now();
        let code = c.terminate(slot, Duration::from_secs(30)).await;
        checks.push(Check::new(
            &format!("sigterm-exit-{slot}"),
            code == Some(0),
            format!(
                "{name} exited with {code:?} after {} ms",
                t.elapsed().as_millis()
            ),
        ));
        c.spawn(slot)?;
        c.wait_joined(Some(slot), Duration::from_secs(60)).await?;
        sleep(o.pick(2.0, 5.0)).await;
    }
    Ok(checks)
}

async fn poison_storm(o: &Opts, load: &Load) -> anyhow::Result<Vec<Check>> {
    sleep(o.warm()).await;
    eprintln!(
        "[drill] poison storm: 1 record in {} is malformed",
        crate::cluster::POISON_EVERY
    );
    load.poison.store(true, Ordering::Relaxed);
    sleep(o.pick(10.0, 60.0)).await;
    load.poison.store(false, Ordering::Relaxed);
    Ok(Vec::new())
}
