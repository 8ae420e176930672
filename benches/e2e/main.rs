//! End-to-end throughput benchmark: "throughput must be set by concurrency, not by
//! the API's round-trip time".
//!
//! For each cell (API latency L, concurrency C, ordering mode) it preloads a fresh
//! topic, then measures, against the same API stand-in and in the same run:
//!
//! 1. the **HTTP ceiling**: Courier's own HTTP client (`ApiClient`), alone, POSTing
//!    the same events at concurrency C (`benches/e2e/ceiling.rs`);
//! 2. **Courier** (`courier run`, a child process) draining the topic
//!    (`benches/e2e/courier_run.rs`);
//! 3. once per L, the **classic loop**: consume one, POST, commit synchronously
//!    (`benches/e2e/classic.rs`).
//!
//! The machine is small and shared, so every figure is reported as a ratio against
//! a baseline measured in the same run. Definitions, commands and results:
//! `docs/BENCHMARKS.md`.
//!
//! ```sh
//! source /tmp/courier-services/services.env
//! cargo bench --bench e2e -- --quick
//! cargo bench --bench e2e -- --json target/bench-e2e.json
//! ```

mod ceiling;
mod classic;
mod courier_run;
mod drain;
mod procs;
mod report;
mod sink;
// Test certificates (rcgen), shared with tests/tls_api.rs.
#[path = "../../tests/common/certs.rs"]
mod certs;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use sink::Sink;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The binary measured: this build's, or `E2E_COURIER_BIN` (an A/B against
/// another build).
fn courier_bin() -> String {
    courier_testkit::measured_courier(env!("CARGO_BIN_EXE_courier"))
}

// The same allocator as the `courier` binary, so the bare client's CPU per request
// is measured on the same footing as Courier's.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug, Clone, serde::Serialize)]
#[command(
    name = "e2e",
    about = "Courier end-to-end throughput, CPU, memory and latency, against the HTTP ceiling and the classic loop"
)]
pub struct Opts {
    /// Events preloaded per cell (~event_bytes each). With L > 0 a cell gets fewer
    /// when --max-cell-secs says so.
    #[arg(long, default_value_t = 200_000)]
    events: usize,
    /// API latencies to measure, in ms.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 10, 50, 100])]
    latency_ms: Vec<u64>,
    /// Concurrencies to measure (pipeline.concurrency).
    #[arg(long, value_delimiter = ',', default_values_t = [64usize, 512, 2048])]
    concurrency: Vec<usize>,
    /// Ordering modes for the whole L × C matrix.
    #[arg(long, value_delimiter = ',', default_values_t = [Ordering::Key])]
    ordering: Vec<Ordering>,
    /// Extra cells `L:C:mode` besides the matrix.
    #[arg(long, value_delimiter = ',', default_values = ["50:512:unordered", "50:512:partition"])]
    extra: Vec<String>,
    /// No extra cells.
    #[arg(long)]
    no_extra: bool,
    /// The memory-bound cell `L:C` (key ordering, --memory-events, never capped).
    #[arg(long, default_value = "50:2048")]
    memory_cell: Option<String>,
    /// Backlog of the memory-bound cell.
    #[arg(long, default_value_t = 1_000_000)]
    memory_events: usize,
    /// No memory-bound cell.
    #[arg(long)]
    no_memory: bool,
    /// Partitions of the main topic (and of its DLQ).
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Distinct Kafka keys.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Approximate size of each event.
    #[arg(long, default_value_t = 512)]
    event_bytes: usize,
    /// With L > 0, size a cell to last about this long at C_eff/L (at least 2,000
    /// events, at most --events); 0 = always --events.
    #[arg(long, default_value_t = 20)]
    max_cell_secs: u64,
    /// The HTTP-ceiling phase stops after this many seconds (or the cell's events).
    #[arg(long, default_value_t = 10)]
    ceiling_secs: u64,
    /// The classic loop stops after this many events...
    #[arg(long, default_value_t = 2000)]
    classic_events: u64,
    /// ...or this many seconds.
    #[arg(long, default_value_t = 10)]
    classic_secs: u64,
    /// Measure the HTTP ceiling only before the Courier run (default: before and
    /// after, ratios against the mean).
    #[arg(long)]
    single_ceiling: bool,
    /// Open the bare client's connections (one request per worker) before its
    /// clock starts; by default connection set-up (over HTTPS: C handshakes at
    /// once) is inside the measured phase.
    #[arg(long)]
    warm_ceiling: bool,
    /// HTTP/2 to the API stand-in, for Courier and the bare client alike: with
    /// prior knowledge (h2c, `api.http2_prior_knowledge = true`), or with --https
    /// negotiated by ALPN (`api.http2 = true`).
    #[arg(long)]
    http2: bool,
    /// Serve the stand-in over HTTPS (a CA and a certificate for 127.0.0.1 made at
    /// start with rcgen); Courier, the bare client and the classic loop trust that
    /// CA (`api.tls.ca_file`). The ceiling is then the bare client over HTTPS.
    #[arg(long)]
    https: bool,
    /// `pipeline.max_in_flight_per_partition` for Courier (default: Courier's own
    /// default, 1,000 events held per partition).
    #[arg(long)]
    max_in_flight_per_partition: Option<usize>,
    /// Skip the classic loop.
    #[arg(long)]
    no_classic: bool,
    /// Drain-rate check: `degraded.drain_rate_per_sec` settings to measure, each on
    /// a DLQ preloaded with --drain-secs worth of due envelopes.
    #[arg(long, value_delimiter = ',', default_values_t = vec![50.0, 500.0])]
    drain_rates: Vec<f64>,
    #[arg(long, default_value_t = 10)]
    drain_secs: u64,
    /// Skip the drain-rate check.
    #[arg(long)]
    no_drain: bool,
    /// One small cell (L = 10 ms, C = 256, key, 20,000 events) for smoke-testing.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as a Markdown report here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Kafka bootstrap servers (`source /tmp/courier-services/services.env`).
    #[arg(long, env = "COURIER_TEST_BROKERS")]
    brokers: String,
    /// Redis for Courier's shared marker (optional: without it Courier relies on
    /// its local breaker).
    #[arg(long, env = "COURIER_TEST_REDIS_URL")]
    redis_url: Option<String>,
    /// Keep the benchmark topics (deleted after each cell by default).
    #[arg(long)]
    keep_topics: bool,
    /// Record a `perf record -g` profile of Courier for this many seconds per cell.
    #[arg(long)]
    perf_secs: Option<u64>,
    /// With --perf-secs: DWARF call graphs (`--call-graph dwarf`) instead of `-g`
    /// (frame pointers, which Rust release builds and glibc do not keep).
    #[arg(long)]
    perf_dwarf: bool,
    /// Extra librdkafka property for Courier, `key=value` (repeatable), written to
    /// `[kafka.properties]` of its config: for tuning experiments.
    #[arg(long = "kafka-property", value_parser = parse_property)]
    kafka_properties: Vec<(String, String)>,
    /// TOML appended to Courier's config, e.g. `[[filters]]` and
    /// `[[api.routes]]` with `when` (issue 58's cost with expressions);
    /// `{api_url}` in it is replaced by the stand-in's URL.
    #[arg(long)]
    config_extra: Option<String>,
    /// Extra environment variable for the Courier process only, `KEY=value`
    /// (repeatable), e.g. `LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2`.
    #[arg(long = "courier-env", value_parser = parse_property)]
    courier_env: Vec<(String, String)>,
    /// Measure a cell again (fresh topic) when the run failed or was disturbed.
    #[arg(long, default_value_t = 2)]
    retries: usize,
    /// Run the cells this many times, in rounds (every cell, then every cell
    /// again), and report each cell's ratios to the ceiling, their median and how
    /// many reach 0.8: on a shared 2-core machine one run's ratio moves by ±0.15
    /// in the CPU-bound cells (docs/BENCHMARKS.md, run 11).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// Give up on a Courier run after this long.
    #[arg(long, default_value_t = 600)]
    cell_timeout_secs: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    #[serde(skip)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    Key,
    Unordered,
    Partition,
}

impl Ordering {
    pub fn as_str(self) -> &'static str {
        match self {
            Ordering::Key => "key",
            Ordering::Unordered => "unordered",
            Ordering::Partition => "partition",
        }
    }
}

impl std::fmt::Display for Ordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Cell {
    pub latency_ms: u64,
    pub concurrency: usize,
    pub ordering: Ordering,
    /// The memory-bound cell: this many events, never capped.
    pub events: Option<usize>,
}

impl Opts {
    fn normalise(&mut self) {
        if self.quick {
            self.events = 20_000;
            self.latency_ms = vec![10];
            self.concurrency = vec![256];
            self.ordering = vec![Ordering::Key];
            self.no_extra = true;
            self.no_memory = true;
            self.ceiling_secs = 3;
            self.classic_events = 200;
            self.classic_secs = 3;
            if self.drain_rates == [50.0, 500.0] {
                self.drain_rates = vec![200.0];
                self.drain_secs = 4;
            }
        }
    }

    fn cells(&self) -> anyhow::Result<Vec<Cell>> {
        let mut cells = Vec::new();
        for &latency_ms in &self.latency_ms {
            for &concurrency in &self.concurrency {
                for &ordering in &self.ordering {
                    cells.push(Cell {
                        latency_ms,
                        concurrency,
                        ordering,
                        events: None,
                    });
                }
            }
        }
        if !self.no_extra {
            for e in self.extra.iter().filter(|e| !e.is_empty()) {
                let parts: Vec<&str> = e.split(':').collect();
                let [l, c, m] = parts[..] else {
                    anyhow::bail!("--extra {e}: expected L:C:mode");
                };
                cells.push(Cell {
                    latency_ms: l.parse().with_context(|| format!("--extra {e}"))?,
                    concurrency: c.parse().with_context(|| format!("--extra {e}"))?,
                    ordering: Ordering::from_str(m, true)
                        .map_err(|err| anyhow::anyhow!("--extra {e}: {err}"))?,
                    events: None,
                });
            }
        }
        if let (false, Some(m)) = (self.no_memory, &self.memory_cell) {
            let (l, c) = m
                .split_once(':')
                .with_context(|| format!("--memory-cell {m}: expected L:C"))?;
            cells.push(Cell {
                latency_ms: l.parse().with_context(|| format!("--memory-cell {m}"))?,
                concurrency: c.parse().with_context(|| format!("--memory-cell {m}"))?,
                ordering: Ordering::Key,
                events: Some(self.memory_events),
            });
        }
        if cells.iter().any(|c| c.concurrency == 0) {
            anyhow::bail!("concurrency must be at least 1");
        }
        // Rounds, not each cell N times in a row: a slow minute of the machine
        // then falls on different cells, not on all runs of one.
        let round = cells.len();
        Ok(cells
            .into_iter()
            .cycle()
            .take(round * self.repeat as usize)
            .collect())
    }

    /// At most one event per partition is in flight in `partition` mode.
    pub fn effective_concurrency(&self, cell: &Cell) -> usize {
        match cell.ordering {
            Ordering::Partition => cell.concurrency.min(self.partitions.max(1) as usize),
            _ => cell.concurrency,
        }
    }

    /// Events for a cell: all of --events at L = 0, else enough for about
    /// --max-cell-secs at C_eff/L.
    fn cell_events(&self, cell: &Cell) -> usize {
        if let Some(n) = cell.events {
            return n;
        }
        if cell.latency_ms == 0 || self.max_cell_secs == 0 {
            return self.events;
        }
        let rate = self.effective_concurrency(cell) as f64 * 1000.0 / cell.latency_ms as f64;
        let n = (rate * self.max_cell_secs as f64).ceil() as usize;
        n.clamp(self.events.min(2000), self.events)
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CellResult {
    pub latency_ms: u64,
    pub concurrency: usize,
    pub ordering: String,
    pub effective_concurrency: usize,
    pub events: usize,
    pub topic: String,
    pub preload_secs: f64,
    pub loadavg_before: Option<f64>,
    pub loadavg_after: Option<f64>,
    /// The HTTP ceiling measured just before the Courier run...
    pub ceiling: Option<ceiling::CeilingResult>,
    /// ...and just after it.
    pub ceiling_after: Option<ceiling::CeilingResult>,
    pub courier: Option<courier_run::CourierResult>,
    /// CPU of the API stand-in per request, in each phase (same work; a sanity check).
    pub sink_cpu_us_per_req_ceiling: Option<f64>,
    pub sink_cpu_us_per_req_courier: Option<f64>,
    /// The audit after Courier's phase: produced events the stand-in never
    /// answered 2xx, and 2xx answers beyond the first per event.
    pub audit_lost: Option<u64>,
    pub audit_duplicates: Option<u64>,
    pub error: Option<String>,
    /// Why earlier measurements of this cell were discarded.
    pub earlier_attempts: Vec<String>,
}

fn log_dir() -> anyhow::Result<PathBuf> {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e");
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

async fn delete_topics(brokers: &str, topics: &[String]) {
    let admin: Result<AdminClient<DefaultClientContext>, _> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create();
    if let Ok(admin) = admin {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let _ = admin.delete_topics(&names, &AdminOptions::new()).await;
    }
}

struct Bench {
    opts: Opts,
    bin: String,
    ticks: f64,
    run_id: String,
    log_dir: PathBuf,
    http: reqwest::Client,
    sink: Sink,
    transport: ceiling::Transport,
}

impl Bench {
    /// Measures a cell; a run the shared machine disturbed (broker or Redis
    /// restarted by someone else's test, a rebalance, redeliveries) or that failed
    /// is measured again on a fresh topic, up to --retries times.
    async fn cell(
        &mut self,
        idx: usize,
        cell: Cell,
        classic_for: Option<u64>,
    ) -> (CellResult, Option<classic::ClassicResult>) {
        let mut classic = None;
        let mut history = Vec::new();
        let mut attempt = 0;
        loop {
            let topic = match attempt {
                0 => format!("{}-c{idx}", self.run_id),
                n => format!("{}-c{idx}r{n}", self.run_id),
            };
            let mut r = self
                .attempt(
                    &topic,
                    cell,
                    classic_for.filter(|_| classic.is_none()),
                    &mut classic,
                )
                .await;
            let problem = r.error.clone().or_else(|| {
                let d = r
                    .courier
                    .as_ref()
                    .map(|c| c.disturbed.join("; "))
                    .unwrap_or_default();
                (!d.is_empty()).then_some(d)
            });
            match problem {
                Some(p) if attempt < self.opts.retries => {
                    eprintln!("  measured again: {p}");
                    history.push(p);
                    attempt += 1;
                }
                _ => {
                    r.earlier_attempts = history;
                    return (r, classic);
                }
            }
        }
    }

    /// One bare-client phase against the stand-in, at the cell's latency.
    async fn ceiling(
        &mut self,
        cell: Cell,
        c_eff: usize,
        events: usize,
        requests: &Arc<ceiling::Requests>,
    ) -> anyhow::Result<ceiling::CeilingResult> {
        self.sink.prepare(cell.latency_ms, events).await?;
        ceiling::run(
            &self.sink.url(),
            c_eff,
            events,
            Duration::from_secs(self.opts.ceiling_secs),
            requests.clone(),
            self.ticks,
            &self.transport,
            self.opts.warm_ceiling,
        )
        .await
    }

    async fn attempt(
        &mut self,
        topic: &str,
        cell: Cell,
        classic_for: Option<u64>,
        classic: &mut Option<classic::ClassicResult>,
    ) -> CellResult {
        let o = &self.opts;
        let mut r = CellResult {
            latency_ms: cell.latency_ms,
            concurrency: cell.concurrency,
            ordering: cell.ordering.to_string(),
            effective_concurrency: o.effective_concurrency(&cell),
            events: o.cell_events(&cell),
            topic: topic.to_string(),
            loadavg_before: procs::loadavg(),
            ..Default::default()
        };
        if let Err(e) = self.measure(&mut r, cell, classic_for, classic).await {
            eprintln!("  cell failed: {e:#}");
            r.error = Some(format!("{e:#}"));
        }
        r.loadavg_after = procs::loadavg();
        if !self.opts.keep_topics {
            let topics = [
                topic.to_string(),
                format!("{topic}.dlq"),
                format!("{topic}.parking"),
            ];
            delete_topics(&self.opts.brokers, &topics).await;
        }
        r
    }

    async fn measure(
        &mut self,
        r: &mut CellResult,
        cell: Cell,
        classic_for: Option<u64>,
        classic_out: &mut Option<classic::ClassicResult>,
    ) -> anyhow::Result<()> {
        let o = self.opts.clone();
        let topic = r.topic.clone();
        let (dlq, parking) = (format!("{topic}.dlq"), format!("{topic}.parking"));

        // Preload.
        let t = Instant::now();
        courier_standins::admin::create_topics(
            &o.brokers,
            &[
                (topic.as_str(), o.partitions),
                (dlq.as_str(), o.partitions),
                (parking.as_str(), 1),
            ],
        )
        .await?;
        let spec = courier_standins::loadgen::Spec {
            count: r.events,
            keys: o.keys,
            id_prefix: format!("{topic}-ev"),
            event_bytes: o.event_bytes,
            ..Default::default()
        };
        let produced = courier_standins::loadgen::produce(&o.brokers, &topic, &spec).await?;
        let valid = produced.ids.len() as u64;
        drop(produced);
        let (b, tp, p) = (o.brokers.clone(), topic.clone(), o.partitions);
        let ends =
            tokio::task::spawn_blocking(move || courier::kafka::admin::end_offsets(&b, &tp, p))
                .await??;
        anyhow::ensure!(
            ends.iter().sum::<i64>() == valid as i64,
            "end offsets {ends:?} do not add up to the {valid} events produced"
        );
        r.preload_secs = t.elapsed().as_secs_f64();
        eprintln!(
            "  preloaded {valid} events into {topic} in {:.1} s",
            r.preload_secs
        );

        // 1. The HTTP ceiling.
        let c_eff = r.effective_concurrency;
        let requests = Arc::new(ceiling::Requests::new(
            &format!("{topic}-bare"),
            r.events.min(200_000),
            o.keys,
            o.event_bytes,
        ));
        let sink0 = self.sink.cpu(self.ticks);
        let ceil = self.ceiling(cell, c_eff, r.events, &requests).await?;
        r.sink_cpu_us_per_req_ceiling = per_req(self.sink.cpu(self.ticks), sink0, ceil.requests);
        eprintln!(
            "  ceiling: {:.0} req/s at concurrency {c_eff} ({} requests, {:.1} s)",
            ceil.req_per_s, ceil.requests, ceil.secs
        );
        r.ceiling = Some(ceil);

        // 2. Courier.
        self.sink.prepare(cell.latency_ms, r.events).await?;
        let sink0 = self.sink.cpu(self.ticks);
        let name = format!("{topic}-courier");
        let setup = courier_run::Setup {
            bin: &self.bin,
            brokers: &o.brokers,
            redis_url: o.redis_url.as_deref(),
            topic: &topic,
            group: &format!("{topic}-group"),
            api_url: &self.sink.url(),
            concurrency: cell.concurrency,
            ordering: cell.ordering.as_str(),
            partitions: o.partitions,
            events: valid,
            ends: ends.clone(),
            timeout: Duration::from_secs(o.cell_timeout_secs),
            ticks: self.ticks,
            log_dir: &self.log_dir,
            name: &name,
            perf_secs: o.perf_secs,
            perf_dwarf: o.perf_dwarf,
            kafka_properties: &o.kafka_properties,
            env: &o.courier_env,
            transport: &self.transport,
            max_in_flight_per_partition: o.max_in_flight_per_partition,
            config_extra: o.config_extra.as_deref().unwrap_or_default(),
        };
        let cr = courier_run::run(&setup, &self.http).await?;
        r.sink_cpu_us_per_req_courier =
            per_req(self.sink.cpu(self.ticks), sink0, cr.events_measured);
        eprintln!(
            "  courier: {:.0} events/s ({} events in {:.1} s after {:.1} s start-up), {:.1} µs CPU/event, peak RSS {:.0} MB (heap: {:.0} MB live, {:.0} MB resident at most)",
            cr.events_per_s,
            cr.events_measured,
            cr.window_secs,
            cr.startup_secs,
            cr.cpu_us_per_event.unwrap_or(f64::NAN),
            cr.peak_rss_mb.unwrap_or(f64::NAN),
            cr.peak_heap_allocated_mb,
            cr.peak_heap_resident_mb,
        );
        r.courier = Some(cr);

        // The audit: every produced event answered 2xx by the stand-in. Its books
        // were reset for this phase, and the loadgen's ids (`<topic>-ev<n>`) are
        // distinct by construction, so the ids it answered count the events.
        let book = self.sink.audit().await?;
        let prefix = format!("{topic}-ev");
        let answered = book
            .delivered
            .keys()
            .filter(|id| id.starts_with(&prefix))
            .count() as u64;
        let lost = valid.saturating_sub(answered);
        let duplicates: u64 = book
            .delivered
            .values()
            .map(|n| u64::from(n.saturating_sub(1)))
            .sum();
        drop(book);
        eprintln!(
            "  audit: {valid} produced, {answered} answered 2xx, lost {lost}, duplicates {duplicates}"
        );
        r.audit_lost = Some(lost);
        r.audit_duplicates = Some(duplicates);
        anyhow::ensure!(lost == 0, "the audit lost {lost} of {valid} events");

        // 1 again: the machine is shared, so the ceiling is measured on both sides of
        // the Courier run and the ratios use the mean (the spread is reported).
        if !o.single_ceiling {
            let after = self.ceiling(cell, c_eff, r.events, &requests).await?;
            eprintln!(
                "  ceiling again: {:.0} req/s ({} requests, {:.1} s)",
                after.req_per_s, after.requests, after.secs
            );
            r.ceiling_after = Some(after);
        }

        // 3. The classic loop, once per latency, on the same topic.
        if let Some(latency_ms) = classic_for {
            self.sink.prepare(latency_ms, 0).await?;
            let (brokers, url, group) = (
                o.brokers.clone(),
                self.sink.url(),
                format!("{topic}-classic"),
            );
            let (max_events, max, ticks, transport) = (
                o.classic_events,
                Duration::from_secs(o.classic_secs),
                self.ticks,
                self.transport.clone(),
            );
            let handle = tokio::runtime::Handle::current();
            let res = tokio::task::spawn_blocking(move || {
                classic::Classic {
                    brokers: &brokers,
                    topic: &topic,
                    group: &group,
                    url: &url,
                    max_events,
                    max,
                    ticks,
                    transport,
                }
                .run(&handle)
            })
            .await?;
            // A failure here (the broker restarted by someone else's test) leaves
            // the classic loop to the next cell with this latency.
            match res {
                Ok(mut res) => {
                    res.latency_ms = latency_ms;
                    eprintln!(
                        "  classic loop: {:.0} events/s ({} events in {:.1} s)",
                        res.events_per_s, res.events, res.secs
                    );
                    *classic_out = Some(res);
                }
                Err(e) => eprintln!("  classic loop failed: {e:#}"),
            }
        }
        Ok(())
    }
}

fn parse_property(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}`: expected key=value"))
}

fn per_req(after: Option<f64>, before: Option<f64>, n: u64) -> Option<f64> {
    let cpu = after? - before?;
    (n > 0).then(|| cpu * 1e6 / n as f64)
}

fn machine() -> report::Machine {
    let sh = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    report::Machine {
        nproc: sh("nproc", &[]),
        free_g: sh("free", &["-g"]),
        date: sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        kernel: sh("uname", &["-sr"]),
        cpu_model,
        loadavg: procs::loadavg(),
        git: sh("git", &["describe", "--always", "--dirty"]),
    }
}

async fn run(opts: Opts) -> anyhow::Result<()> {
    let cells = opts.cells()?;
    let log_dir = log_dir()?;
    let ticks = procs::clock_ticks();
    // --https: a CA and the stand-in's certificate, made for this run.
    let tls = if opts.https {
        let dir = log_dir.join("tls");
        let ca = certs::Ca::new(&dir, "bench");
        let server = ca.server("sink", certs::LOOPBACK, certs::Validity::Current);
        Some((ca.pem, server))
    } else {
        None
    };
    let transport = ceiling::Transport {
        http2: opts.http2,
        ca_file: tls.as_ref().map(|(ca, _)| ca.cert_file.clone()),
    };
    let mut http = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if let Some((ca, _)) = &tls {
        http = http.tls_certs_only([reqwest::Certificate::from_pem(ca.cert.as_bytes())?]);
    }
    let http = http.build()?;
    let machine = machine();
    let courier = courier_bin();
    eprintln!(
        "e2e: {} cells, {} events max per cell, {} partitions, {} keys, {} B events; {} CPUs; courier = {courier}; logs in {}",
        cells.len(),
        opts.events,
        opts.partitions,
        opts.keys,
        opts.event_bytes,
        machine.nproc,
        log_dir.display()
    );
    // Other builds may replace target/release/courier during a long run: every
    // process of this run starts from one copy.
    let pinned = log_dir.join(format!("courier-{}", std::process::id()));
    std::fs::copy(&courier, &pinned).with_context(|| format!("copying {courier}"))?;
    let bin = pinned.display().to_string();
    let sink = Sink::start(&bin, &log_dir, http.clone(), tls.as_ref().map(|(_, s)| s)).await?;
    let run_id = format!(
        "bench-e2e-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let mut bench = Bench {
        opts: opts.clone(),
        bin: bin.clone(),
        ticks,
        run_id,
        log_dir,
        http,
        sink,
        transport,
    };
    let mut results = Vec::new();
    let mut classics = Vec::new();
    let mut classic_done: Vec<u64> = Vec::new();
    let started = Instant::now();
    for (i, cell) in cells.iter().enumerate() {
        eprintln!(
            "[{}/{}] L = {} ms, C = {}, ordering = {} (load average {:.2})",
            i + 1,
            cells.len(),
            cell.latency_ms,
            cell.concurrency,
            cell.ordering,
            procs::loadavg().unwrap_or(f64::NAN)
        );
        let classic_for = (!opts.no_classic && !classic_done.contains(&cell.latency_ms))
            .then_some(cell.latency_ms);
        let (r, c) = bench.cell(i, *cell, classic_for).await;
        if let Some(c) = c {
            classic_done.push(c.latency_ms);
            classics.push(c);
        }
        results.push(r);
    }
    let mut drains = Vec::new();
    if !opts.no_drain {
        for (i, &rate) in opts.drain_rates.iter().enumerate() {
            let topic = format!("{}-drain{i}", bench.run_id);
            eprintln!(
                "[drain] degraded.drain_rate_per_sec = {rate}, {} s of envelopes",
                opts.drain_secs
            );
            let setup = drain::DrainSetup {
                bin: &bin,
                brokers: &opts.brokers,
                redis_url: opts
                    .redis_url
                    .as_deref()
                    .unwrap_or("redis://127.0.0.1:16379"),
                log_dir: &bench.log_dir,
                topic: &topic,
                partitions: opts.partitions,
                rate,
                secs: opts.drain_secs,
                event_bytes: opts.event_bytes,
                transport: &bench.transport,
            };
            let r = match drain::run(&setup, &mut bench.sink).await {
                Ok(r) => r,
                Err(e) => drain::DrainResult {
                    rate_setting: rate,
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                },
            };
            eprintln!(
                "  drained {} of {} envelopes: steady {:.1}/s ({:.3} × setting), peak second {} ({:.3} ×){}",
                r.delivered,
                r.envelopes,
                r.steady_rate.unwrap_or(f64::NAN),
                r.steady_ratio.unwrap_or(f64::NAN),
                r.peak_second,
                r.peak_ratio.unwrap_or(f64::NAN),
                r.error.as_deref().map(|e| format!("; {e}")).unwrap_or_default(),
            );
            if !opts.keep_topics {
                let topics = [
                    topic.clone(),
                    format!("{topic}.dlq"),
                    format!("{topic}.parking"),
                ];
                delete_topics(&opts.brokers, &topics).await;
            }
            drains.push(r);
        }
    }
    let _ = bench.sink.guard.stop("-INT", Duration::from_secs(5)).await;
    if opts.perf_secs.is_none() {
        // perf reports need the binary; otherwise the copy goes.
        let _ = std::fs::remove_file(&pinned);
    }

    let report = report::Report {
        machine,
        options: opts.clone(),
        wall_secs: started.elapsed().as_secs_f64(),
        cells: results,
        classic: classics,
        drains,
    };
    let md = report.markdown();
    println!("{md}");
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json())?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("JSON written to {}", path.display());
    }
    if let Some(path) = &opts.markdown {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("Markdown written to {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    if !courier_testkit::asked_as_benchmark("e2e") {
        return ExitCode::SUCCESS;
    }
    let mut opts = Opts::parse();
    opts.normalise();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("e2e: cannot start the runtime: {e}");
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
            eprintln!("e2e: {e:#}");
            ExitCode::FAILURE
        }
    }
}
