//! Adaptive concurrency against an API with a hidden capacity (issue 14): the
//! stand-in answers at most K requests at once (429 above it, at once) after L
//! ms, so it serves at most K × 1000 / L requests/s. For each mode (adaptive,
//! and fixed at `pipeline.concurrency`) it preloads a fresh topic, runs
//! `courier run` for a measured window and reads the stand-in's per-second
//! books: 2xx/s and the share of 429s from `--settle-secs` after the first
//! request on. Not a test: no assertion, the numbers go to docs/BENCHMARKS.md.
//!
//! ```sh
//! source /tmp/courier-services/services.env
//! cargo bench --bench capacity
//! ```

use clap::Parser;
use courier_standins::admin::create_topics;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::{CourierProcess, Launch};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
struct Opts {
    /// The hidden capacity K (requests at once).
    #[arg(long, default_value_t = 200)]
    capacity: u64,
    /// The stand-in's latency L in ms.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// `pipeline.concurrency` (the fixed mode's concurrency, the adaptive mode's bound).
    #[arg(long, default_value_t = 2048)]
    concurrency: usize,
    /// Seconds from the first request before the measured window.
    #[arg(long, default_value_t = 5)]
    settle_secs: usize,
    /// The measured window, in seconds.
    #[arg(long, default_value_t = 10)]
    window_secs: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Modes to run: `adaptive` (bounded by --concurrency), `fixed` (at
    /// --concurrency), `fixed:<C>` (at C: e.g. the oracle `fixed:<K>`).
    #[arg(long, value_delimiter = ',', default_values = ["adaptive", "fixed", "fixed:200"])]
    modes: Vec<String>,
    #[arg(long, env = "COURIER_TEST_BROKERS")]
    brokers: String,
    #[arg(
        long,
        env = "COURIER_TEST_REDIS_URL",
        default_value = "redis://127.0.0.1:16379"
    )]
    redis_url: String,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

struct Row {
    mode: String,
    ok_per_sec: f64,
    share_429: f64,
    first_seconds_429: u64,
    load: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn run_mode(o: &Opts, sink: &SinkHandle, mode: &str) -> anyhow::Result<Row> {
    let id = format!("capbench-{}-{}", mode.replace(':', "-"), std::process::id());
    let (adaptive, concurrency) = match mode.split_once(':') {
        Some((_, c)) => (false, c.parse()?),
        None => (mode == "adaptive", o.concurrency),
    };
    let (topic, dlq, parking) = (id.clone(), format!("{id}-dlq"), format!("{id}-parking"));
    create_topics(
        o.brokers.as_str(),
        &[
            (topic.as_str(), o.partitions),
            (dlq.as_str(), o.partitions),
            (parking.as_str(), 1),
        ],
    )
    .await?;
    let rate = o.capacity as f64 * 1000.0 / o.latency_ms as f64;
    let events = (rate * (o.settle_secs + o.window_secs + 5) as f64) as usize;
    let spec = Spec {
        count: events,
        keys: events,
        id_prefix: id.clone(),
        ..Spec::default()
    };
    loadgen::produce(&o.brokers, &topic, &spec).await?;
    let toml = format!(
        r#"
[kafka]
topic = "{topic}"
dlq_topic = "{dlq}"
parking_topic = "{parking}"
group_id = "{id}-group"

[degraded]
dlq_backoff_base = "1h"
dlq_backoff_cap = "1h"

[api]
url = "{url}"
adaptive_concurrency = {adaptive}

[pipeline]
concurrency = {c}
"#,
        url = sink.url(),
        c = concurrency,
    );
    sink.reset();
    let launch = Launch::new(
        courier_testkit::measured_courier(env!("CARGO_BIN_EXE_courier")),
        std::env::temp_dir().join("courier-capacity-bench"),
        id.clone(),
        toml,
        o.brokers.clone(),
        o.redis_url.clone(),
    );
    let mut courier = CourierProcess::start(&launch)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let first = loop {
        let a = sink.audit();
        if let Some(i) = a.per_second.iter().position(|&n| n > 0) {
            break i;
        }
        anyhow::ensure!(Instant::now() < deadline, "no request within 120 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (from, to) = (first + o.settle_secs, first + o.settle_secs + o.window_secs);
    // The measured window is wall time on the stand-in's clock; the limit is
    // sampled once a second on the way.
    let mut limits = Vec::new();
    while sink.audit().per_second.len() <= to {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let limit = courier.metric("courier_api_concurrency_limit").await;
        limits.push(limit.map_or(-1.0, |l| l));
    }
    println!("{mode}: concurrency limit, once a second: {limits:?}");
    let load = load_average();
    let a = sink.audit();
    let _ = courier.terminate(Duration::from_secs(30)).await;
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
    let requests: u64 = (from..to).map(|i| at(&a.per_second, i)).sum();
    let rejected: u64 = (from..to).map(|i| at(&a.per_second_over_capacity, i)).sum();
    let first_rejected: u64 = (first..from)
        .map(|i| at(&a.per_second_over_capacity, i))
        .sum();
    println!(
        "{mode}: per second {:?}",
        &a.per_second[first..=to.min(a.per_second.len() - 1)]
    );
    println!(
        "{mode}: 429 per second {:?}",
        &a.per_second_over_capacity[first.min(a.per_second_over_capacity.len())..]
    );
    Ok(Row {
        mode: mode.to_string(),
        ok_per_sec: (requests - rejected) as f64 / o.window_secs as f64,
        share_429: if requests == 0 {
            0.0
        } else {
            rejected as f64 / requests as f64
        },
        first_seconds_429: first_rejected,
        load,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if !courier_testkit::asked_as_benchmark("capacity") {
        return Ok(());
    }
    let o = Opts::parse();
    let sink = SinkHandle::start(
        "127.0.0.1:0".parse()?,
        Behaviour {
            latency_ms: o.latency_ms,
            capacity: Some(o.capacity),
            ..Behaviour::default()
        },
    )
    .await?;
    let ceiling = o.capacity as f64 * 1000.0 / o.latency_ms as f64;
    let mut rows = Vec::new();
    for mode in &o.modes {
        rows.push(run_mode(&o, &sink, mode).await?);
    }
    println!(
        "\nK = {}, L = {} ms (at most {ceiling:.0} requests/s), pipeline.concurrency = {}; window: {} s from {} s after the first request\n",
        o.capacity, o.latency_ms, o.concurrency, o.window_secs, o.settle_secs
    );
    println!("| mode | 2xx/s | × K/L | 429 share in the window | 429s in the first {} s | load (1/5/15 min) |", o.settle_secs);
    println!("|---|---:|---:|---:|---:|---|");
    for r in rows {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} % | {} | {} |",
            r.mode,
            r.ok_per_sec,
            r.ok_per_sec / ceiling,
            r.share_429 * 100.0,
            r.first_seconds_429,
            r.load
        );
    }
    Ok(())
}
