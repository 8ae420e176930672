//! Batch delivery (issue 25): what `[api.batch]` buys, against the physical limit
//! of the pipeline and against a peer, all in one run.
//!
//! One backlog (a fresh topic) is written once; then, for each API latency L
//! (50 ms and 0 by default) and in rounds (`--repeat`), each engine drains it
//! with a consumer group of its own, against the same API stand-in
//! (`courier sink`, a child process):
//!
//! 1. **bare**: a plain librdkafka consumer (`BaseConsumer`, this binary run
//!    again as a child) reading the backlog, no HTTP: the broker's bare consume
//!    rate, the physical limit of the pipeline here;
//! 2. **unbatched**: `courier run`, one request per event, C = 512 in flight;
//! 3. **batched**: `courier run` with `[api.batch] max_events = 100`, C = 512
//!    requests in flight (`pipeline.concurrency` counts requests with
//!    batching; before issue 43 it counted events and was set to 51,200);
//! 4. **benthos**: Benthos v4.27.0 (`scripts/benthos.sh`), `kafka_franz` in,
//!    `http_client` out with `batching.count: 100` + `archive: json_array`,
//!    `max_in_flight: 512`.
//!
//! Every engine is timed the same way: from the first event the stand-in books
//! to the moment it has booked every event of the backlog (the bare consumer:
//! from its first record to its last). CPU is the engine process's (utime +
//! stime) over that window, peak RSS its `VmHWM`. Beside it, the whole run's CPU
//! per event: the process's from its start to the moment the group's commits
//! reached the end offsets (the bare consumer: to its last record), over every
//! event of the backlog, and its ratio to the bare consumer's in the same round
//! (issue 55 item 7: start-up, the tail and the commit are in it, the window
//! leaves them out). Each delivering run ends with
//! an audit: every backlog event answered 2xx at least once (duplicates
//! counted), and the group's committed offsets at the end offsets.
//!
//! ```sh
//! source /tmp/courier-services/services.env
//! cargo bench --bench batch -- --repeat 3
//! ```
//!
//! Results and how to read them: `docs/BENCHMARKS.md`, "Batch delivery (issue 25)".

// Test certificates: only for the stand-in's signature (`Sink::start` takes an
// optional TLS pair; this benchmark serves plain HTTP).
#[path = "../../tests/common/certs.rs"]
mod certs;
// What `/proc` says about a process; the e2e benchmark's.
#[allow(dead_code)]
#[path = "../e2e/procs.rs"]
mod procs;
// The API stand-in as a child process; the e2e benchmark's.
#[path = "../e2e/sink.rs"]
mod sink;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use courier_testkit::{ChildGuard, CourierProcess, Launch};
use procs::{cpu_seconds, peak_rss_bytes, Pid};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::Message as _;
use serde::{Deserialize, Serialize};
use sink::Sink;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const MB: f64 = 1024.0 * 1024.0;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "batch",
    about = "Batched Courier against unbatched Courier, the bare consume rate and Benthos (issue 25)"
)]
struct Opts {
    /// Events in the backlog (~--event-bytes each).
    #[arg(long, default_value_t = 200_000)]
    events: usize,
    /// Partitions of the backlog's topic.
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Distinct Kafka keys.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Approximate size of each event.
    #[arg(long, default_value_t = 512)]
    event_bytes: usize,
    /// API latencies to measure, in ms.
    #[arg(long, value_delimiter = ',', default_values_t = [50u64, 0])]
    latency_ms: Vec<u64>,
    /// Requests in flight (C), for every delivering engine.
    #[arg(long, default_value_t = 512)]
    concurrency: usize,
    /// Events per batch (Courier's `api.batch.max_events`, Benthos'
    /// `batching.count`).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// The longest a batch waits to fill (Courier's `api.batch.linger`,
    /// Benthos' `batching.period`).
    #[arg(long, default_value_t = 20)]
    linger_ms: u64,
    /// Engines to measure, in this order within each round.
    #[arg(long, value_delimiter = ',', default_values_t = [Engine::Bare, Engine::Unbatched, Engine::Batched, Engine::Benthos])]
    engines: Vec<Engine>,
    /// Rounds: every (L, engine) once per round; medians over the rounds, and
    /// each ratio computed within a round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// The Benthos binary (default: what `scripts/benthos.sh` prints, building
    /// it the first time).
    #[arg(long, env = "BENTHOS_BIN")]
    benthos: Option<PathBuf>,
    /// Kafka bootstrap servers (`source /tmp/courier-services/services.env`).
    #[arg(long, env = "COURIER_TEST_BROKERS")]
    brokers: String,
    /// Redis for Courier's shared marker (optional: without it Courier relies
    /// on its local breaker).
    #[arg(long, env = "COURIER_TEST_REDIS_URL")]
    redis_url: Option<String>,
    /// Give up on one engine's run after this long.
    #[arg(long, default_value_t = 300)]
    run_timeout_secs: u64,
    /// Write every run and the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the Markdown report here (it is printed in any case).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Keep the backlog's topics.
    #[arg(long)]
    keep_topic: bool,
    /// Batched Courier with its default in-flight limits
    /// (`pipeline.max_in_flight_per_partition`, `max_in_flight_bytes`):
    /// only `[api.batch]` and `pipeline.concurrency` set, as a user who turns
    /// batching on has it (issue 43's "L = 50 ÷ L = 0 with default settings").
    #[arg(long)]
    courier_defaults: bool,
    /// Internal: run as the bare consumer of this topic (a child of the bench).
    #[arg(long, hide = true)]
    bare_topic: Option<String>,
    #[arg(long, hide = true)]
    bare_group: Option<String>,
    #[arg(long, hide = true, default_value_t = 0)]
    bare_expect: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    #[serde(skip)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Engine {
    Bare,
    Unbatched,
    Batched,
    /// Batched with the adaptive concurrency limit on (it holds requests):
    /// Courier's default, not one of the criterion's engines.
    BatchedAdaptive,
    /// Batched in `key` order: a key has one event in flight, so a batch
    /// holds at most one event per key. Not one of the criterion's engines.
    BatchedKey,
    /// Batched in `key` order with `ordered = true`: a key's waiting events
    /// share a batch, in offset order. Not one of the criterion's engines.
    BatchedOrdered,
    Benthos,
}

impl Engine {
    fn as_str(self) -> &'static str {
        match self {
            Engine::Bare => "bare",
            Engine::Unbatched => "unbatched",
            Engine::Batched => "batched",
            Engine::BatchedAdaptive => "batched-adaptive",
            Engine::BatchedKey => "batched-key",
            Engine::BatchedOrdered => "batched-ordered",
            Engine::Benthos => "benthos",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Engine::Bare => "bare librdkafka consume (no HTTP)",
            Engine::Unbatched => "Courier, unbatched",
            Engine::Batched => "Courier, batched",
            Engine::BatchedAdaptive => "Courier, batched, adaptive limit",
            Engine::BatchedKey => "Courier, batched, key order",
            Engine::BatchedOrdered => "Courier, batched, key order, ordered = true",
            Engine::Benthos => "Benthos v4.27.0, batched",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One engine draining the backlog once.
#[derive(Debug, Clone, Default, Serialize)]
struct RunResult {
    round: u64,
    latency_ms: u64,
    engine: String,
    group: String,
    /// Events inside the measured window (those after the first one seen).
    events_measured: u64,
    window_secs: f64,
    events_per_s: f64,
    /// Spawn to the first event seen (start-up, group join).
    startup_secs: f64,
    cpu_secs_window: Option<f64>,
    /// CPU seconds of the engine's process per 1,000 events.
    cpu_s_per_1k: Option<f64>,
    /// CPU seconds of the engine's process over its whole run: from its
    /// start to its commits at the end offsets (the bare consumer: its last
    /// record). None when the commits did not get there.
    cpu_secs_whole: Option<f64>,
    /// `cpu_secs_whole` per backlog event, in µs.
    whole_us_per_event: Option<f64>,
    peak_rss_mb: Option<f64>,
    /// Heap allocations of Courier's process per event over the window
    /// (`courier_memory_allocations_total`, jemalloc's count); None for the
    /// other engines.
    allocs_per_event: Option<f64>,
    /// CPU of the API stand-in per 1,000 events over the same window.
    sink_cpu_s_per_1k: Option<f64>,
    /// The audit, after the engine stopped: distinct backlog ids answered 2xx,
    /// 2xx answers in all, requests (each event of a batch counts) and batch
    /// requests, non-2xx answers.
    delivered_distinct: u64,
    delivered_total: u64,
    duplicates: u64,
    requests_total: u64,
    batch_requests: u64,
    failures_total: u64,
    /// Every backlog event delivered (the bare consumer: read).
    audit_ok: bool,
    /// The group's committed offsets reached the end offsets (after the
    /// window; not timed). None for the bare consumer (it commits nothing).
    committed: Option<bool>,
    loadavg_before: Option<f64>,
    loadavg_after: Option<f64>,
    error: Option<String>,
}

/// What the bare consumer prints (one JSON line) when it has read everything.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct BareReport {
    records: u64,
    bytes: u64,
    startup_secs: f64,
    window_secs: f64,
    cpu_secs_window: Option<f64>,
    /// The process's CPU from its start to its last record.
    cpu_secs_whole: Option<f64>,
    peak_rss_bytes: Option<u64>,
}

/// The bare consumer: subscribe with a fresh group, read from the earliest
/// offset until `expect` records arrived, touch each payload, commit nothing.
fn bare_consume(brokers: &str, topic: &str, group: &str, expect: u64) -> anyhow::Result<()> {
    let ticks = procs::clock_ticks();
    let started = Instant::now();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the consumer")?;
    consumer.subscribe(&[topic]).context("subscribing")?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut first: Option<(Instant, Option<f64>)> = None;
    let mut last = started;
    while records < expect {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "read {records} of {expect} records in 600 s"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if first.is_none() {
                    first = Some((Instant::now(), cpu_seconds(Pid::SelfProcess, ticks)));
                }
                records += 1;
                bytes += m.payload().map_or(0, <[u8]>::len) as u64;
                last = Instant::now();
            }
            Some(Err(e)) => eprintln!("bare consumer: {e}"),
            None => {}
        }
    }
    let cpu_end = cpu_seconds(Pid::SelfProcess, ticks);
    let (t_first, cpu_first) = first.unwrap_or((last, cpu_end));
    let report = BareReport {
        records,
        bytes,
        startup_secs: t_first.duration_since(started).as_secs_f64(),
        window_secs: last.duration_since(t_first).as_secs_f64(),
        cpu_secs_window: cpu_end.zip(cpu_first).map(|(b, a)| b - a),
        cpu_secs_whole: cpu_end,
        peak_rss_bytes: peak_rss_bytes(Pid::SelfProcess),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A delivering engine's process.
enum Proc {
    Courier(CourierProcess),
    Other(ChildGuard),
}

impl Proc {
    fn pid(&self) -> Option<u32> {
        match self {
            Proc::Courier(c) => c.pid(),
            Proc::Other(g) => g.pid(),
        }
    }

    /// Courier's heap allocations so far (`courier_memory_allocations_total`).
    async fn allocations(&self) -> Option<f64> {
        match self {
            Proc::Courier(c) => c
                .metric("courier_memory_allocations_total")
                .await
                .ok()
                .filter(|n| *n > 0.0),
            Proc::Other(_) => None,
        }
    }

    fn exited(&mut self) -> Option<Option<i32>> {
        match self {
            Proc::Courier(c) => c.exited(),
            Proc::Other(g) => g.exited(),
        }
    }

    /// SIGTERM and a wait (killed after 20 s).
    async fn stop(&mut self) {
        match self {
            Proc::Courier(c) => {
                if let Err(e) = c.terminate(Duration::from_secs(20)).await {
                    eprintln!("  {e}");
                }
            }
            Proc::Other(g) => {
                g.stop("-TERM", Duration::from_secs(20)).await;
            }
        }
    }
}

struct Bench {
    opts: Opts,
    /// The pinned copy of the `courier` binary.
    courier: String,
    benthos: Option<PathBuf>,
    ticks: f64,
    log_dir: PathBuf,
    sink: Sink,
    topic: String,
    ends: Vec<i64>,
}

impl Bench {
    fn events(&self) -> u64 {
        self.opts.events as u64
    }

    /// Events in flight that C requests of `batch` events need, spread over
    /// the partitions, with a batch of slack: Courier's
    /// `max_in_flight_per_partition` and Benthos' `checkpoint_limit`.
    fn per_partition(&self) -> usize {
        let total = self.opts.concurrency * self.opts.batch;
        total.div_ceil(self.opts.partitions.max(1) as usize) + self.opts.batch
    }

    fn courier_config(&self, group: &str, engine: Engine) -> String {
        let batched = matches!(
            engine,
            Engine::Batched | Engine::BatchedAdaptive | Engine::BatchedKey | Engine::BatchedOrdered
        );
        let adaptive = engine == Engine::BatchedAdaptive;
        let ordering = match engine {
            Engine::BatchedKey | Engine::BatchedOrdered => "key",
            // Benthos keeps no per-key order either.
            _ => "unordered",
        };
        let ordered = engine == Engine::BatchedOrdered;
        let o = &self.opts;
        let (url, concurrency, batch, limits) = if batched {
            (
                format!("{}/batch", self.sink.base),
                o.concurrency,
                format!(
                    "\n[api.batch]\nmax_events = {}\nlinger = \"{}ms\"\nordered = {ordered}\n",
                    o.batch, o.linger_ms
                ),
                if o.courier_defaults {
                    String::new()
                } else {
                    format!(
                        "max_in_flight_per_partition = {}\nmax_in_flight_bytes = {}\n",
                        self.per_partition(),
                        256 * 1024 * 1024
                    )
                },
            )
        } else {
            (self.sink.url(), o.concurrency, String::new(), String::new())
        };
        format!(
            r#"# generated by benches/batch/main.rs
[kafka]
topic = "{topic}"
dlq_topic = "{topic}.dlq"
parking_topic = "{topic}.parking"
group_id = "{group}"
auto_commit_interval = "100ms"
session_timeout = "10s"

[api]
url = "{url}"
pool_max_idle_per_host = {pool}
# C fixed, as Benthos' max_in_flight is (batched-adaptive: the limit on
# requests finds C itself, up to pipeline.concurrency).
adaptive_concurrency = {adaptive}
{batch}
[pipeline]
concurrency = {concurrency}
ordering = "{ordering}"
{limits}drain_timeout = "3s"
shutdown_grace = "5s"
"#,
            topic = self.topic,
            pool = o.concurrency.max(4096),
        )
    }

    fn benthos_config(&self, group: &str) -> String {
        let o = &self.opts;
        format!(
            r#"# generated by benches/batch/main.rs
http:
  enabled: false
input:
  kafka_franz:
    seed_brokers: [ "{brokers}" ]
    topics: [ "{topic}" ]
    consumer_group: "{group}"
    checkpoint_limit: {limit}
    commit_period: 100ms
output:
  http_client:
    url: "{base}/batch"
    verb: POST
    headers:
      Content-Type: application/json
    max_in_flight: {c}
    batching:
      count: {batch}
      period: {linger}ms
      processors:
        - archive:
            format: json_array
logger:
  level: WARN
"#,
            brokers = o.brokers,
            topic = self.topic,
            limit = self.per_partition(),
            base = self.sink.base,
            c = o.concurrency,
            batch = o.batch,
            linger = o.linger_ms,
        )
    }

    async fn run(&mut self, round: u64, latency_ms: u64, engine: Engine) -> RunResult {
        let group = format!("{}-{engine}-l{latency_ms}-r{round}", self.topic);
        let mut r = RunResult {
            round,
            latency_ms,
            engine: engine.to_string(),
            group: group.clone(),
            loadavg_before: procs::loadavg(),
            ..Default::default()
        };
        let res = match engine {
            Engine::Bare => self.bare(&group, &mut r).await,
            _ => self.deliver(engine, latency_ms, &group, &mut r).await,
        };
        if let Err(e) = res {
            eprintln!("  {engine} failed: {e:#}");
            r.error = Some(format!("{e:#}"));
        }
        r.loadavg_after = procs::loadavg();
        r
    }

    /// The bare consumer, as a child process (its CPU and RSS its own).
    async fn bare(&mut self, group: &str, r: &mut RunResult) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("this benchmark's own path")?;
        let mut cmd = Command::new(exe);
        cmd.args(["--bench", "--brokers", &self.opts.brokers])
            .args(["--bare-topic", &self.topic, "--bare-group", group])
            .args(["--bare-expect", &self.events().to_string()]);
        let log = self.log_dir.join(format!("{group}.log"));
        let mut child = ChildGuard::spawn("bare", cmd, &log)?;
        let code = child
            .wait_exit(Duration::from_secs(self.opts.run_timeout_secs))
            .await?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        anyhow::ensure!(
            code == Some(0),
            "the bare consumer exited with {code:?}; log: {}",
            log.display()
        );
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .with_context(|| format!("no report in {}", log.display()))?;
        let b: BareReport = serde_json::from_str(line)?;
        let measured = b.records.saturating_sub(1);
        r.events_measured = measured;
        r.window_secs = b.window_secs.max(1e-9);
        r.events_per_s = measured as f64 / r.window_secs;
        r.startup_secs = b.startup_secs;
        r.cpu_secs_window = b.cpu_secs_window;
        r.cpu_s_per_1k = per_1k(b.cpu_secs_window, measured);
        r.cpu_secs_whole = b.cpu_secs_whole;
        r.whole_us_per_event = per_event_us(b.cpu_secs_whole, b.records);
        r.peak_rss_mb = b.peak_rss_bytes.map(|x| x as f64 / MB);
        r.delivered_distinct = b.records;
        r.delivered_total = b.records;
        r.audit_ok = b.records >= self.events();
        eprintln!(
            "  bare: {:.0} records/s ({} in {:.2} s), {:.3} CPU s/1k, whole run {:.2} µs/record, peak RSS {:.0} MB",
            r.events_per_s,
            measured,
            r.window_secs,
            r.cpu_s_per_1k.unwrap_or(f64::NAN),
            r.whole_us_per_event.unwrap_or(f64::NAN),
            r.peak_rss_mb.unwrap_or(f64::NAN)
        );
        Ok(())
    }

    fn spawn(&self, engine: Engine, group: &str) -> anyhow::Result<Proc> {
        let name = group.to_string();
        match engine {
            Engine::Unbatched
            | Engine::Batched
            | Engine::BatchedAdaptive
            | Engine::BatchedKey
            | Engine::BatchedOrdered => {
                let mut launch = Launch::new(
                    &self.courier,
                    &self.log_dir,
                    &name,
                    self.courier_config(group, engine),
                    &self.opts.brokers,
                    self.opts
                        .redis_url
                        .as_deref()
                        .unwrap_or("redis://127.0.0.1:1"),
                );
                launch.rust_log = "warn".into();
                Ok(Proc::Courier(CourierProcess::start(&launch)?))
            }
            Engine::Benthos => {
                let bin = self
                    .benthos
                    .as_ref()
                    .context("no Benthos binary (scripts/benthos.sh failed)")?;
                let config = self.log_dir.join(format!("{name}.yaml"));
                std::fs::write(&config, self.benthos_config(group))?;
                let mut cmd = Command::new(bin);
                cmd.arg("-c").arg(&config);
                let log = self.log_dir.join(format!("{name}.log"));
                Ok(Proc::Other(ChildGuard::spawn("benthos", cmd, &log)?))
            }
            Engine::Bare => unreachable!("the bare consumer delivers nothing"),
        }
    }

    /// One delivering engine: timed by the stand-in's books, then audited.
    async fn deliver(
        &mut self,
        engine: Engine,
        latency_ms: u64,
        group: &str,
        r: &mut RunResult,
    ) -> anyhow::Result<()> {
        let events = self.events();
        self.sink.prepare(latency_ms, events as usize).await?;
        let timeout = Duration::from_secs(self.opts.run_timeout_secs);
        let spawned = Instant::now();
        let mut proc = self.spawn(engine, group)?;
        let pid = Pid::Of(proc.pid().unwrap_or(0));
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        // Courier's allocations at the window's ends.
        let mut allocs_first = None;
        // (when, delivered then, engine CPU, stand-in CPU)
        let mut first: Option<(Instant, u64, Option<f64>, Option<f64>)> = None;
        let measured = loop {
            tick.tick().await;
            if let Some(code) = proc.exited() {
                anyhow::bail!(
                    "{engine} exited early ({code:?}); logs in {}",
                    self.log_dir.display()
                );
            }
            if spawned.elapsed() > timeout {
                proc.stop().await;
                anyhow::bail!("{engine} did not deliver the backlog within {timeout:?}");
            }
            let Ok(d) = self.sink.delivered().await else {
                continue;
            };
            if first.is_none() && d.distinct > 0 {
                allocs_first = proc.allocations().await;
                first = Some((
                    Instant::now(),
                    d.distinct,
                    cpu_seconds(pid, self.ticks),
                    self.sink.cpu(self.ticks),
                ));
            }
            if d.distinct >= events {
                break (
                    proc.allocations().await,
                    Instant::now(),
                    cpu_seconds(pid, self.ticks),
                    self.sink.cpu(self.ticks),
                    peak_rss_bytes(pid),
                );
            }
        };
        let (allocs_end, t_end, cpu_end, sink_end, rss) = measured;
        let (t_first, d_first, cpu_first, sink_first) =
            first.unwrap_or((t_end, events, cpu_end, sink_end));
        let n = events.saturating_sub(d_first);
        r.events_measured = n;
        r.window_secs = t_end.duration_since(t_first).as_secs_f64().max(1e-9);
        r.events_per_s = n as f64 / r.window_secs;
        r.startup_secs = t_first.duration_since(spawned).as_secs_f64();
        r.cpu_secs_window = cpu_end.zip(cpu_first).map(|(b, a)| b - a);
        r.cpu_s_per_1k = per_1k(r.cpu_secs_window, n);
        r.sink_cpu_s_per_1k = per_1k(sink_end.zip(sink_first).map(|(b, a)| b - a), n);
        r.peak_rss_mb = rss.map(|b| b as f64 / MB);
        r.allocs_per_event = allocs_end
            .zip(allocs_first)
            .filter(|_| n > 0)
            .map(|(b, a)| (b - a) / n as f64);

        // At least once: the offsets must follow (not timed).
        let until = Instant::now() + Duration::from_secs(60);
        let mut committed = false;
        while Instant::now() < until {
            if self.committed_at_end(group).await {
                committed = true;
                // The whole run's CPU: the process's own, since its start.
                r.cpu_secs_whole = cpu_seconds(pid, self.ticks);
                r.whole_us_per_event = per_event_us(r.cpu_secs_whole, events);
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        r.committed = Some(committed);
        proc.stop().await;
        let d = self.sink.delivered().await?;
        r.delivered_distinct = d.distinct;
        r.delivered_total = d.total;
        r.duplicates = d.total.saturating_sub(d.distinct);
        r.requests_total = d.requests_total;
        r.batch_requests = d.batch_requests;
        r.failures_total = d.failures_total;
        r.audit_ok = d.distinct >= events;
        eprintln!(
            "  {engine}: {:.0} events/s ({n} in {:.2} s after {:.1} s start-up), {:.3} CPU s/1k, whole run {:.2} µs/event, peak RSS {:.0} MB; audit: {} of {events} delivered, {} duplicates, {} failures, {} batch requests, committed {}",
            r.events_per_s,
            r.window_secs,
            r.startup_secs,
            r.cpu_s_per_1k.unwrap_or(f64::NAN),
            r.whole_us_per_event.unwrap_or(f64::NAN),
            r.peak_rss_mb.unwrap_or(f64::NAN),
            d.distinct,
            r.duplicates,
            d.failures_total,
            d.batch_requests,
            if committed { "to the end" } else { "NOT to the end" },
        );
        Ok(())
    }

    async fn committed_at_end(&self, group: &str) -> bool {
        let (b, g, t, p) = (
            self.opts.brokers.clone(),
            group.to_string(),
            self.topic.clone(),
            self.opts.partitions,
        );
        let got = tokio::task::spawn_blocking(move || {
            courier::kafka::admin::committed_offsets(&b, &g, &t, p)
        })
        .await;
        matches!(got, Ok(Ok(c)) if c.iter().zip(&self.ends).all(|(c, e)| c >= e))
    }
}

fn per_1k(cpu: Option<f64>, n: u64) -> Option<f64> {
    cpu.filter(|_| n > 0).map(|c| c * 1000.0 / n as f64)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The criterion's ratios: (name, numerator, denominator, threshold).
const RATIOS: [(&str, Engine, Engine, f64); 5] = [
    (
        "batched ÷ unbatched",
        Engine::Batched,
        Engine::Unbatched,
        5.0,
    ),
    ("batched ÷ bare consume", Engine::Batched, Engine::Bare, 0.5),
    ("batched ÷ Benthos", Engine::Batched, Engine::Benthos, 2.0),
    // Not the issue's: what the default adaptive limit costs against C fixed.
    (
        "batched-adaptive ÷ batched",
        Engine::BatchedAdaptive,
        Engine::Batched,
        0.9,
    ),
    // Not the issue's: what `ordered = true` buys when keys are few.
    (
        "batched-ordered ÷ batched-key",
        Engine::BatchedOrdered,
        Engine::BatchedKey,
        1.0,
    ),
];

#[derive(Debug, Clone, Serialize)]
struct Summary {
    latency_ms: u64,
    engine: String,
    runs: usize,
    failed_runs: usize,
    events_per_s: Option<f64>,
    events_per_s_min: Option<f64>,
    events_per_s_max: Option<f64>,
    cpu_s_per_1k: Option<f64>,
    /// The whole run's CPU per event (µs), and its ratio to the bare
    /// consumer's per record within each round (median).
    whole_us_per_event: Option<f64>,
    whole_vs_bare: Option<f64>,
    peak_rss_mb: Option<f64>,
    allocs_per_event: Option<f64>,
    sink_cpu_s_per_1k: Option<f64>,
    duplicates: u64,
    audits_ok: usize,
}

#[derive(Debug, Clone, Serialize)]
struct RatioResult {
    latency_ms: u64,
    name: String,
    threshold: f64,
    /// The ratio within each round.
    per_round: Vec<f64>,
    median: Option<f64>,
    met: Option<bool>,
}

fn summarise(opts: &Opts, runs: &[RunResult]) -> (Vec<Summary>, Vec<RatioResult>) {
    let ok = |r: &&RunResult| r.error.is_none() && r.audit_ok;
    let mut summaries = Vec::new();
    let mut ratios = Vec::new();
    for &l in &opts.latency_ms {
        for &e in &opts.engines {
            let all: Vec<&RunResult> = runs
                .iter()
                .filter(|r| r.latency_ms == l && r.engine == e.as_str())
                .collect();
            let good: Vec<&RunResult> = all.iter().copied().filter(ok).collect();
            let rates: Vec<f64> = good.iter().map(|r| r.events_per_s).collect();
            let bare_whole = |round: u64| {
                runs.iter()
                    .filter(ok)
                    .find(|r| {
                        r.round == round && r.latency_ms == l && r.engine == Engine::Bare.as_str()
                    })
                    .and_then(|r| r.whole_us_per_event)
            };
            let whole_vs_bare: Vec<f64> = good
                .iter()
                .filter_map(|r| Some(r.whole_us_per_event? / bare_whole(r.round)?))
                .collect();
            summaries.push(Summary {
                latency_ms: l,
                engine: e.to_string(),
                runs: all.len(),
                failed_runs: all.len() - good.len(),
                events_per_s: median(rates.clone()),
                events_per_s_min: rates.iter().copied().reduce(f64::min),
                events_per_s_max: rates.iter().copied().reduce(f64::max),
                cpu_s_per_1k: median(good.iter().filter_map(|r| r.cpu_s_per_1k).collect()),
                whole_us_per_event: median(
                    good.iter().filter_map(|r| r.whole_us_per_event).collect(),
                ),
                whole_vs_bare: median(whole_vs_bare),
                peak_rss_mb: median(good.iter().filter_map(|r| r.peak_rss_mb).collect()),
                allocs_per_event: median(good.iter().filter_map(|r| r.allocs_per_event).collect()),
                sink_cpu_s_per_1k: median(
                    good.iter().filter_map(|r| r.sink_cpu_s_per_1k).collect(),
                ),
                duplicates: good.iter().map(|r| r.duplicates).sum(),
                audits_ok: good.len(),
            });
        }
        for (name, num, den, threshold) in RATIOS {
            if !(opts.engines.contains(&num) && opts.engines.contains(&den)) {
                continue;
            }
            let rate = |round: u64, e: Engine| {
                runs.iter()
                    .filter(ok)
                    .find(|r| r.round == round && r.latency_ms == l && r.engine == e.as_str())
                    .map(|r| r.events_per_s)
            };
            let per_round: Vec<f64> = (0..opts.repeat)
                .filter_map(|round| Some(rate(round, num)? / rate(round, den)?))
                .collect();
            let m = median(per_round.clone());
            ratios.push(RatioResult {
                latency_ms: l,
                name: name.to_string(),
                threshold,
                per_round,
                median: m,
                met: m.map(|m| m >= threshold),
            });
        }
    }
    (summaries, ratios)
}

/// CPU seconds over `n` events, in µs per event.
fn per_event_us(cpu_secs: Option<f64>, n: u64) -> Option<f64> {
    cpu_secs.filter(|_| n > 0).map(|c| c * 1e6 / n as f64)
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

fn markdown(
    opts: &Opts,
    summaries: &[Summary],
    ratios: &[RatioResult],
    runs: &[RunResult],
    machine: &BTreeMap<&str, String>,
) -> String {
    let mut s = String::new();
    let loads: Vec<f64> = runs
        .iter()
        .flat_map(|r| [r.loadavg_before, r.loadavg_after])
        .flatten()
        .collect();
    s += &format!(
        "Backlog: {} events of ~{} B, {} partitions, {} keys; C = {} requests in flight; batches of {} (linger {} ms); {} round(s).\n",
        opts.events, opts.event_bytes, opts.partitions, opts.keys, opts.concurrency, opts.batch, opts.linger_ms, opts.repeat
    );
    s += &format!(
        "Machine: {} CPUs, {}; {}; git {}. Load average (1 min) over the runs: median {}, min {}, max {}.\n\n",
        machine.get("nproc").map_or("?", String::as_str),
        machine.get("cpu").map_or("?", String::as_str),
        machine.get("date").map_or("?", String::as_str),
        machine.get("git").map_or("?", String::as_str),
        fmt(median(loads.clone()), 2),
        fmt(loads.iter().copied().reduce(f64::min), 2),
        fmt(loads.iter().copied().reduce(f64::max), 2),
    );
    s += "| L | engine | events/s (median) | min–max | CPU s / 1k events | whole run µs / event | × bare's | peak RSS MB | allocations / event | stand-in CPU s / 1k | audits ok | duplicates |\n";
    s += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for x in summaries {
        let engine = Engine::from_str(&x.engine, true).map_or(x.engine.as_str(), |e| e.label());
        s += &format!(
            "| {} ms | {} | {} | {}–{} | {} | {} | {} | {} | {} | {} | {}/{} | {} |\n",
            x.latency_ms,
            engine,
            fmt(x.events_per_s, 0),
            fmt(x.events_per_s_min, 0),
            fmt(x.events_per_s_max, 0),
            fmt(x.cpu_s_per_1k, 4),
            fmt(x.whole_us_per_event, 2),
            fmt(x.whole_vs_bare, 2),
            fmt(x.peak_rss_mb, 0),
            fmt(x.allocs_per_event, 1),
            fmt(x.sink_cpu_s_per_1k, 4),
            x.audits_ok,
            x.runs,
            x.duplicates,
        );
    }
    s += "\n| L | ratio | criterion | per round | median | met |\n|---|---|---:|---|---:|---|\n";
    for r in ratios {
        let per: Vec<String> = r.per_round.iter().map(|x| format!("{x:.2}")).collect();
        s += &format!(
            "| {} ms | {} | ≥ {} | {} | {} | {} |\n",
            r.latency_ms,
            r.name,
            r.threshold,
            per.join(", "),
            fmt(r.median, 2),
            match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "–",
            }
        );
    }
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| r.error.is_some() || !r.audit_ok)
        .map(|r| {
            format!(
                "- round {}, L = {} ms, {}: {}",
                r.round,
                r.latency_ms,
                r.engine,
                r.error.clone().unwrap_or_else(|| format!(
                    "audit failed ({} of {} delivered)",
                    r.delivered_distinct, opts.events
                ))
            )
        })
        .collect();
    if !failed.is_empty() {
        s += "\nLeft out of the medians:\n";
        s += &failed.join("\n");
        s += "\n";
    }
    s
}

fn machine() -> BTreeMap<&'static str, String> {
    let sh = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    BTreeMap::from([
        ("nproc", sh("nproc", &[])),
        ("cpu", cpu),
        ("date", sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"])),
        ("git", sh("git", &["describe", "--always", "--dirty"])),
    ])
}

/// The Benthos binary: --benthos, else what `scripts/benthos.sh` prints.
fn benthos_bin(opts: &Opts) -> anyhow::Result<PathBuf> {
    if let Some(b) = &opts.benthos {
        return Ok(b.clone());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/benthos.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(out.status.success(), "{} failed", script.display());
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(!path.is_empty(), "{} printed no path", script.display());
    Ok(PathBuf::from(path))
}

async fn run(opts: Opts) -> anyhow::Result<()> {
    let log_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("batch");
    std::fs::create_dir_all(&log_dir)?;
    let benthos = if opts.engines.contains(&Engine::Benthos) {
        Some(benthos_bin(&opts)?)
    } else {
        None
    };
    let machine = machine();
    // Other builds may replace target/release/courier during the run.
    let built = courier_testkit::measured_courier(env!("CARGO_BIN_EXE_courier"));
    let pinned = log_dir.join(format!("courier-{}", std::process::id()));
    std::fs::copy(&built, &pinned).with_context(|| format!("copying {built}"))?;
    let courier = pinned.display().to_string();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let sink = Sink::start(&courier, &log_dir, http, None).await?;

    // The backlog, written once for every engine and round.
    let topic = format!(
        "bench-batch-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let t = Instant::now();
    let (dlq, parking) = (format!("{topic}.dlq"), format!("{topic}.parking"));
    courier_standins::admin::create_topics(
        &opts.brokers,
        &[
            (topic.as_str(), opts.partitions),
            (dlq.as_str(), opts.partitions),
            (parking.as_str(), 1),
        ],
    )
    .await?;
    let spec = courier_standins::loadgen::Spec {
        count: opts.events,
        keys: opts.keys,
        id_prefix: format!("{topic}-ev"),
        event_bytes: opts.event_bytes,
        ..Default::default()
    };
    let produced = courier_standins::loadgen::produce(&opts.brokers, &topic, &spec).await?;
    let valid = produced.ids.len();
    drop(produced);
    let (b, tp, p) = (opts.brokers.clone(), topic.clone(), opts.partitions);
    let ends = tokio::task::spawn_blocking(move || courier::kafka::admin::end_offsets(&b, &tp, p))
        .await??;
    anyhow::ensure!(
        valid == opts.events && ends.iter().sum::<i64>() == valid as i64,
        "end offsets {ends:?} do not add up to the {} events asked for",
        opts.events
    );
    eprintln!(
        "batch: {valid} events in {topic} ({} partitions) in {:.1} s; {} CPUs; logs in {}",
        opts.partitions,
        t.elapsed().as_secs_f64(),
        machine.get("nproc").map_or("?", String::as_str),
        log_dir.display()
    );

    let mut bench = Bench {
        opts: opts.clone(),
        courier,
        benthos,
        ticks: procs::clock_ticks(),
        log_dir,
        sink,
        topic: topic.clone(),
        ends,
    };
    let mut runs = Vec::new();
    let total = opts.repeat as usize * opts.latency_ms.len() * opts.engines.len();
    for round in 0..opts.repeat {
        for &l in &opts.latency_ms {
            for &engine in &opts.engines {
                eprintln!(
                    "[{}/{total}] round {}, L = {l} ms, {engine} (load average {:.2})",
                    runs.len() + 1,
                    round + 1,
                    procs::loadavg().unwrap_or(f64::NAN)
                );
                runs.push(bench.run(round, l, engine).await);
            }
        }
    }
    let _ = bench.sink.guard.stop("-INT", Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(&pinned);
    if !opts.keep_topic {
        delete_topics(&opts.brokers, &[topic.clone(), dlq, parking]).await;
    }

    let (summaries, ratios) = summarise(&opts, &runs);
    let md = markdown(&opts, &summaries, &ratios, &runs, &machine);
    println!("{md}");
    if let Some(path) = &opts.markdown {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &opts.json {
        let doc = serde_json::json!({
            "machine": machine,
            "options": opts,
            "summaries": summaries,
            "ratios": ratios,
            "runs": runs,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("JSON written to {}", path.display());
    }
    Ok(())
}

async fn delete_topics(brokers: &str, topics: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: Result<AdminClient<DefaultClientContext>, _> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create();
    if let Ok(admin) = admin {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let _ = admin.delete_topics(&names, &AdminOptions::new()).await;
    }
}

fn main() -> ExitCode {
    if !courier_testkit::asked_as_benchmark("batch") {
        return ExitCode::SUCCESS;
    }
    let opts = Opts::parse();
    if let Some(topic) = &opts.bare_topic {
        let group = opts
            .bare_group
            .clone()
            .unwrap_or_else(|| format!("{topic}-bare"));
        return match bare_consume(&opts.brokers, topic, &group, opts.bare_expect) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bare consumer: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("batch: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Ctrl-C drops the benchmark future, and with it every child-process guard.
    let result = rt.block_on(async {
        tokio::select! {
            r = run(opts) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("batch: {e:#}");
            ExitCode::FAILURE
        }
    }
}
