//! `courier-drill`: scripted fault scenarios against a running cluster (the real
//! broker, Redis, the API stand-in and N Courier processes in one group), each
//! ending in the no-loss audit. See docs/DRILLS.md.
//!
//! ```sh
//! cargo build --workspace --bins && cargo run -p courier-drill -- --scenario all --json drill.json
//! cargo run -p courier-drill -- --short --scenario api-outage
//! ```
//!
//! Exit code: 0 when every scenario lost nothing and every check held; 1 otherwise;
//! 2 for bad options.

mod cluster;
mod destination_outage;
mod digest;
mod faults;
mod hostile;
mod metrics;
mod opts;
mod order;
mod partial_api;
mod report;
mod scenarios;
mod toxiproxy;

use anyhow::{bail, Context as _};
use clap::Parser;
use cluster::{ClusterCfg, Services};
use report::DrillReport;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "courier-drill",
    about = "Chaos drills against a running cluster, each ending in a no-loss audit"
)]
struct Args {
    /// A scenario name, a comma-separated list, or `all` (in order):
    /// api-outage, api-flap, api-401, redis, kafka-restart, kill-instances,
    /// partition-one, rolling-restart, poison-storm, crash-cost, partial-api,
    /// destination-outage, order, hostile
    /// (its parts alone: hostile-403, hostile-header, hostile-recreate,
    /// hostile-deleted).
    #[arg(long, default_value = "all")]
    scenario: String,
    /// The CI version: small counts and short faults.
    #[arg(long)]
    short: bool,
    /// Write the summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The Courier binary (default: `courier` beside this binary).
    #[arg(long)]
    courier: Option<PathBuf>,
    /// Courier instances in the group.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Partitions of the main topic (and the DLQ).
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Events produced per second (default: 300 with --short, 1000 otherwise).
    #[arg(long)]
    rate: Option<u64>,
    /// Events per scenario (default: rate × the scenario's load duration).
    #[arg(long)]
    events: Option<usize>,
    /// `pipeline.concurrency` of each instance.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Normal API latency in ms (plus up to as much jitter).
    #[arg(long, default_value_t = 5)]
    api_latency_ms: u64,
    /// Deadline for committed offsets to reach the ends after the faults (s).
    #[arg(long)]
    settle_timeout_s: Option<u64>,
    /// Where Courier's configs and logs go.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// scripts/services.sh (stops and starts Kafka and Redis).
    #[arg(long)]
    services_script: Option<PathBuf>,
    /// scripts/toxiproxy.sh (installs and starts Toxiproxy).
    #[arg(long)]
    toxiproxy_script: Option<PathBuf>,
}

fn repo_path(rel: &str) -> PathBuf {
    // This crate sits at crates/courier-drill of the repository.
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn scenarios(arg: &str) -> anyhow::Result<Vec<&'static str>> {
    if arg == "all" {
        return Ok(scenarios::ALL.to_vec());
    }
    arg.split(',')
        .map(|s| {
            scenarios::ALL
                .iter()
                .chain(hostile::PARTS)
                .chain(scenarios::NAMED_ONLY)
                .copied()
                .find(|n| *n == s.trim())
                .with_context(|| {
                    format!(
                        "unknown scenario {s:?}; known: all, {}, {}, {}",
                        scenarios::ALL.join(", "),
                        hostile::PARTS.join(", "),
                        scenarios::NAMED_ONLY.join(", ")
                    )
                })
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // On SIGINT/SIGTERM the drill's future is dropped, which kills the Courier
    // children (`kill_on_drop`); Kafka and Redis are left as they are.
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("courier-drill: cannot install a SIGTERM handler: {e}");
            std::process::exit(2);
        }
    };
    let outcome = tokio::select! {
        r = run(args) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated")),
    };
    match outcome {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("courier-drill: {e:#}");
            eprintln!("courier-drill: if a scenario was cut short, run `scripts/services.sh kafka-start` and `redis-start`");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let names = scenarios(&args.scenario)?;
    if args.instances < 2 {
        bail!("--instances must be at least 2 (the drills move partitions between instances)");
    }
    let courier = match &args.courier {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the drill binary has no directory")?
            .join("courier"),
    };
    if !courier.exists() {
        bail!(
            "Courier binary {} not found: build it (cargo build --bins) or pass --courier PATH",
            courier.display()
        );
    }
    let log_dir = args
        .log_dir
        .clone()
        .unwrap_or_else(|| repo_path("target/drill-logs").join(format!("{}", std::process::id())));
    let svc = Services::load(
        &args
            .services_script
            .clone()
            .unwrap_or_else(|| repo_path("scripts/services.sh")),
    )
    .await?;
    let opts = opts::Opts {
        short: args.short,
        rate: args.rate.unwrap_or(if args.short { 300 } else { 1000 }),
        events: args.events,
        cluster: ClusterCfg {
            courier,
            instances: args.instances,
            partitions: args.partitions,
            concurrency: args.concurrency,
            log_dir: log_dir.clone(),
            api_latency_ms: args.api_latency_ms,
        },
        toxiproxy_script: args
            .toxiproxy_script
            .clone()
            .unwrap_or_else(|| repo_path("scripts/toxiproxy.sh")),
        settle_timeout: Duration::from_secs(args.settle_timeout_s.unwrap_or(if args.short {
            120
        } else {
            300
        })),
    };
    eprintln!(
        "[drill] {} scenario(s), {} instances, brokers {}, logs in {}",
        names.len(),
        args.instances,
        svc.brokers,
        log_dir.display()
    );
    let t0 = Instant::now();
    let mut reports = Vec::new();
    for name in names {
        reports.push(scenarios::run(name, &svc, &opts).await);
    }
    let report = DrillReport {
        short: args.short,
        ok: reports.iter().all(|r| r.ok),
        total_produced: reports.iter().map(|r| r.produced).sum(),
        total_lost: reports.iter().map(|r| r.lost).sum(),
        duration_s: t0.elapsed().as_secs_f64(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        scenarios: reports,
    };
    println!("\n{}", report::table(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("[drill] summary written to {}", path.display());
    }
    Ok(report.ok && report.total_lost == 0)
}
