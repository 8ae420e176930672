//! The `courier` binary: the edge where errors become messages and exit codes.

use anyhow::Context;
use clap::{Parser, Subcommand};
use courier::config::{Config, LogFormat};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

// jemalloc: records are allocated on the poll thread and freed on tokio workers,
// and request buffers cross workers too; glibc malloc spent 24 % of Courier's CPU
// on that (docs/BENCHMARKS.md, profile and A/B).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "courier",
    version,
    about = "Kafka → HTTP delivery with at-least-once semantics, DLQ and degraded mode",
    after_help = GUIDE
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the service until SIGTERM/SIGINT.
    #[command(after_help = GUIDE)]
    Run {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// Log format, overriding `log.format`: `human` or `json`.
        #[arg(long, value_parser = ["human", "json"])]
        log_format: Option<String>,
    },
    /// Validate a config file (with the environment applied).
    ///
    /// Names the offending field and the reason, and each deprecated key with the one
    /// to write instead.
    #[command(after_help = GUIDE)]
    CheckConfig {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
    },
    /// The real pipeline against an embedded Kafka and API stand-in (no setup).
    ///
    /// A quarter of the way in the API goes down for 6 s; the run ends with the
    /// no-loss audit. The guide's demo chapter (docs/guide/src/demo.md) reads the output.
    #[command(after_help = GUIDE)]
    Demo {
        /// Events to produce.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Events per API request (`[api.batch] max_events`); 1: one each.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Avro records through a schema registry (the stand-in serves the schema).
        #[arg(long)]
        avro: bool,
    },
    /// The configuration reference: every field's type, default and meaning.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Look into the DLQ or the parking lot, or replay events from them.
    Dlq {
        #[command(subcommand)]
        cmd: DlqCmd,
    },
    /// Ask this instance's own /healthz (the image's HEALTHCHECK).
    ///
    /// Asks `/healthz` on `metrics.listen` (no curl in the image). Exit 0 when it
    /// answers 200, 1 otherwise (refused, timed out, another status, or a config
    /// naming no listener).
    Healthcheck {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// Ask `/readyz` instead (200 only with a partition assignment and progress:
        /// an idle standby is not ready, but it is healthy).
        #[arg(long)]
        ready: bool,
        /// Deadline for the connection and the answer together.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Run the API stand-in (the flaky external API) on its own.
    Sink {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Added latency per request, in ms.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Probability of answering 503 to any request.
        #[arg(long, default_value_t = 0.0)]
        fail_rate: f64,
        /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM, unencrypted).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Require client certificates signed by these CAs (PEM bundle): mTLS.
        #[arg(long, requires = "tls_cert")]
        tls_client_ca: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Every field: type, default, meaning (from the config types themselves).
    Reference {
        /// The user guide's page (Markdown) instead of plain text.
        #[arg(long)]
        markdown: bool,
    },
}

#[derive(Subcommand)]
enum DlqCmd {
    /// Counts by reason, event type and age; oldest, newest and samples.
    ///
    /// Progress on stderr while it reads (a bar on a terminal, a line every 2 s
    /// otherwise); Ctrl-C stops with the summary of what was read.
    #[command(after_help = GUIDE)]
    Inspect {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// Inspect the parking lot instead of the DLQ.
        #[arg(long)]
        parking: bool,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
        /// Sample records shown.
        #[arg(long, default_value_t = 5)]
        samples: usize,
    },
    /// Move events back to the main topic (after a fix). Idempotent across runs.
    ///
    /// A log topic (`<source>.replayed`) lists what was replayed: a run again skips
    /// it. Progress on stderr (a bar on a terminal, a line every 2 s otherwise);
    /// Ctrl-C finishes the event being written, prints what was replayed and exits
    /// 130: run the same command again to replay the rest.
    #[command(after_help = GUIDE)]
    Replay {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// Replay from the DLQ instead of the parking lot.
        #[arg(long)]
        from_dlq: bool,
        /// Only these reasons (repeatable), e.g. `--reason http_400`.
        #[arg(long = "reason")]
        reasons: Vec<String>,
        /// Only these CloudEvents types (repeatable).
        #[arg(long = "type")]
        types: Vec<String>,
        /// Only these Kafka keys (repeatable).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// Only these event ids (repeatable).
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Entered the DLQ/parking lot at or after: RFC 3339 time or a duration ago (`2h`).
        #[arg(long)]
        since: Option<String>,
        /// Entered before: RFC 3339 time or a duration ago.
        #[arg(long)]
        until: Option<String>,
        /// Show what would be replayed; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Events per second (a number above 0).
        #[arg(long, default_value_t = 100.0, value_parser = positive_rate)]
        rate: f64,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// `--rate`: a finite number of events per second above 0 (`inf`, `nan`, 0 and
/// negative numbers are refused: the pacing interval is 1/rate).
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "`{s}` is not a rate: give events per second, a number above 0 (e.g. 100 or 0.5)"
        )),
    }
}

/// ractor instruments every actor's processing loop with an INFO span, entered and
/// left on every poll: at `info` that cost ~10 % of Courier's CPU per event
/// (docs/BENCHMARKS.md). Unless a filter names `ractor` itself, its spans and events
/// below WARN are left out (its warnings and errors still show).
///
/// rustls-platform-verifier logs an ERROR for every certificate it refuses, i.e.
/// for every connection attempt to an API with a bad certificate (hundreds at
/// once at full concurrency, then each probe). Courier logs the failure itself,
/// named (`tls_untrusted`, ...), on its first occurrence and then once every
/// 10 s; the verifier's lines are off unless a filter names it.
fn quiet_ractor(spec: &str) -> String {
    let mut out = spec.to_string();
    if !spec.contains("ractor") {
        out.push_str(",ractor=warn");
    }
    if !spec.contains("rustls_platform_verifier") {
        out.push_str(",rustls_platform_verifier=off");
    }
    out
}

use courier::otel::OtelLayer;

fn init_logging(format: LogFormat, level: &str) {
    init_logging_with(format, level, None);
}

fn init_logging_with(format: LogFormat, level: &str, otel: Option<OtelLayer>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let spec = quiet_ractor(from_env.as_deref().unwrap_or(level));
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(quiet_ractor(level)))
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,ractor=warn,rustls_platform_verifier=off")
        });
    match otel {
        // The OTLP layer sees its own target whatever the level: the filter is
        // the fmt layer's alone.
        Some(otel) => tracing_subscriber::registry()
            .with(otel)
            .with(fmt_layer(format).with_filter(filter))
            .init(),
        // One global filter otherwise: a per-layer filter can drop events
        // after a `log` record it refused left stale state behind
        // (tokio-rs/tracing#2519, #2448).
        None => tracing_subscriber::registry()
            .with(filter)
            .with(fmt_layer(format))
            .init(),
    }
}

/// The log lines' layer, to stderr, for any subscriber it is stacked on.
fn fmt_layer<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Human => fmt.boxed(),
    }
}

/// Where `--help` points for the long explanations.
const GUIDE: &str = "The user guide explains more: docs/guide (mdbook serve docs/guide), \
                     e.g. docs/guide/src/operating.md; every config field: courier config reference";

/// The demo's log filter (`RUST_LOG` overrides it).
const DEMO_LOG: &str =
    "error,librdkafka=off,rdkafka=off,courier::delivery=warn,courier::actors::health=warn";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::CheckConfig { config } => check_config(config),
        Cmd::Config {
            cmd: ConfigCmd::Reference { markdown },
        } => {
            use courier::config::reference;
            let text = if markdown {
                reference::markdown()
            } else {
                reference::text()
            };
            print!("{text}");
            Ok(0)
        }
        Cmd::Healthcheck {
            config,
            ready,
            timeout,
        } => Ok(healthcheck(&config, ready, timeout)),
        Cmd::Run { config, log_format } => {
            runtime().and_then(|rt| rt.block_on(run(config, log_format)))
        }
        Cmd::Demo {
            events,
            batch,
            avro,
        } => {
            // The story's lines: the circuit breaker and the health verdict, and
            // any error. Not the start-up checks of the topics' configs (the
            // embedded cluster keeps none: retention, size limit, cleanup policy
            // and the commit metadata limit are not asked of a mock), nor the
            // embedded cluster's connection chatter at teardown.
            init_logging(LogFormat::Human, DEMO_LOG);
            runtime().and_then(|rt| rt.block_on(courier::demo::run(events, batch, avro)))
        }
        Cmd::Dlq { cmd } => runtime().and_then(|rt| rt.block_on(dlq(cmd))),
        Cmd::Sink {
            listen,
            latency_ms,
            fail_rate,
            tls_cert,
            tls_key,
            tls_client_ca,
        } => {
            init_logging(LogFormat::Human, "info");
            let b = courier::sink::Behaviour {
                latency_ms,
                fail_rate,
                ..Default::default()
            };
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => {
                    courier::sink::SinkTls::from_files(&cert, &key, tls_client_ca.as_deref())
                        .map(Some)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", e.field))
                }
                _ => Ok(None),
            };
            tls.and_then(|tls| {
                runtime().and_then(|rt| {
                    rt.block_on(courier::sink::run_standalone(listen, b, tls))
                        .map(|_| 0)
                })
            })
        }
    };
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("courier: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("courier")
        .build()
        .context("cannot start the async runtime")
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    // A missing default file is fine (defaults + environment); a missing
    // explicitly named file is not.
    let p = if path.exists() || path != std::path::Path::new("config/courier.toml") {
        Some(path)
    } else {
        None
    };
    Ok(Config::load(p)?)
}

fn check_config(path: PathBuf) -> anyhow::Result<u8> {
    let cfg = load(&path)?;
    cfg.check_secrets()?;
    for d in &cfg.deprecations {
        println!("warning: {d}");
    }
    println!(
        "config ok: topic {} (DLQ {}, parking lot {}), group {}, API {}",
        cfg.kafka.topic,
        cfg.kafka.dlq_topic(),
        cfg.kafka.parking_topic(),
        cfg.kafka.group_id,
        cfg.api.url
    );
    println!("API credentials: {}", cfg.api.auth_summary());
    Ok(0)
}

/// `courier healthcheck`: 0 when the instance's own listener answers 200 on
/// `/healthz` (`/readyz` with `ready`), else 1 with the reason on stderr. Never
/// 2: Docker reserves it.
fn healthcheck(config: &std::path::Path, ready: bool, timeout: std::time::Duration) -> u8 {
    let path = if ready { "/readyz" } else { "/healthz" };
    let addr = match load(config) {
        Ok(cfg) => probe_addr(&cfg.metrics.listen),
        Err(e) => Err(format!("{e:#}")),
    };
    match addr.and_then(|a| http_status(a, path, timeout).map(|st| (a, st))) {
        Ok((a, (200, _))) => {
            println!("healthy: http://{a}{path} answered 200");
            0
        }
        Ok((a, (code, line))) => {
            eprintln!("unhealthy: http://{a}{path} answered {code} ({line})");
            1
        }
        Err(e) => {
            eprintln!("unhealthy: {e}");
            1
        }
    }
}

/// Where to reach `metrics.listen` from inside the instance's host or container:
/// an unspecified address (0.0.0.0, [::]) is asked on loopback.
fn probe_addr(listen: &str) -> Result<SocketAddr, String> {
    if listen.is_empty() {
        return Err("metrics.listen is empty: the instance serves no /healthz".into());
    }
    let mut a: SocketAddr = listen
        .parse()
        .map_err(|_| format!("metrics.listen {listen:?} is not an address"))?;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(a)
}

/// One `GET path` (HTTP/1.1, `Connection: close`) to `addr` within `timeout`:
/// the status code and the status line.
fn http_status(
    addr: SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> Result<(u16, String), String> {
    use std::io::{Read as _, Write as _};
    let deadline = std::time::Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer from {addr} within {timeout:?}"))
    };
    let mut s = std::net::TcpStream::connect_timeout(&addr, left()?)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("cannot send to {addr}: {e}"))?;
    // The status line is all that is needed; read until it is complete.
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no answer from {addr}: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or("").trim().to_string();
    let mut words = line.split_whitespace();
    match (
        words.next(),
        words.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok((code, line)),
        _ => Err(format!("{addr} did not answer HTTP: {line:?}")),
    }
}

async fn run(path: PathBuf, log_format: Option<String>) -> anyhow::Result<u8> {
    let mut cfg = load(&path)?;
    if let Some(f) = log_format {
        cfg.log.format = if f == "json" {
            LogFormat::Json
        } else {
            LogFormat::Human
        };
    }
    // Built off the async runtime: the exporter's blocking HTTP client must not
    // be created or dropped on it.
    let tracing_cfg = cfg.tracing.clone();
    let otel = tokio::task::spawn_blocking(move || courier::otel::init(&tracing_cfg))
        .await
        .context("setting up OTLP export")??;
    let (otel_guard, otel_layer) = match otel {
        Some((g, l)) => (Some(g), Some(l)),
        None => (None, None),
    };
    init_logging_with(cfg.log.format, &cfg.log.level, otel_layer);
    for d in &cfg.deprecations {
        tracing::warn!("config: {d}");
    }
    let prometheus = courier::metrics::install(&cfg.kafka.group_id, &cfg.kafka.topic);
    let running = courier::app::start(cfg, prometheus).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    let code = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); 0 }
        _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); 0 }
        reason = running.fatal() => {
            tracing::error!(%reason, "exiting with an error so the orchestrator restarts Courier");
            70
        }
    };
    running.shutdown().await;
    if let Some(g) = otel_guard {
        // Flushes the last spans (blocking: off the runtime).
        let _ = tokio::task::spawn_blocking(move || drop(g)).await;
    }
    tracing::info!("stopped");
    Ok(code)
}

/// Parses an RFC 3339 time or a duration ago (`90m`, `2h`) into ms since the epoch.
fn parse_time(s: &str) -> anyhow::Result<i64> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(courier::runtime::now_ms() - d.as_millis() as i64);
    }
    let t = humantime::parse_rfc3339_weak(s)
        .with_context(|| format!("`{s}` is neither an RFC 3339 time nor a duration"))?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0))
}

/// The exit code of a command stopped by Ctrl-C (128 + SIGINT, as a shell's).
const INTERRUPTED: u8 = 130;

/// The records of `topic` now (its partitions' end minus start): what a scan
/// of it reads at most.
async fn source_records(kafka: &courier::config::KafkaConfig, topic: &str) -> anyhow::Result<u64> {
    let (k, t) = (kafka.clone(), topic.to_string());
    let snapshot =
        tokio::task::spawn_blocking(move || courier::kafka::admin::snapshot(&k, &t)).await??;
    Ok(snapshot
        .values()
        .map(|(lo, hi)| (hi - lo).max(0) as u64)
        .sum())
}

/// Awaits `work`, updating `progress`'s bar meanwhile (a terminal's).
async fn ticking<T>(
    progress: &courier::ops::progress::Progress,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        tokio::select! {
            out = &mut work => { progress.tick(); return out; }
            _ = tick.tick() => progress.tick(),
        }
    }
}

async fn dlq(cmd: DlqCmd) -> anyhow::Result<u8> {
    use courier::ops::progress::{Follow, Progress, Stop};
    use courier::ops::{inspect, replay};
    use std::sync::atomic::Ordering;
    init_logging(LogFormat::Human, "warn");
    match cmd {
        DlqCmd::Inspect {
            config,
            parking,
            json,
            samples,
        } => {
            let cfg = load(&config)?;
            let topic = if parking {
                cfg.kafka.parking_topic()
            } else {
                cfg.kafka.dlq_topic()
            };
            cfg.kafka.secret_properties()?;
            let (k, t) = (cfg.kafka.clone(), topic.clone());
            // The DLQ is consumed by the group: what it read is below its
            // committed position. The parking lot is not: what was handled is
            // what the replay log lists.
            let group = (!parking).then(|| cfg.kafka.group_id.clone());
            let now = courier::runtime::now_ms();
            let stop = Stop::on_ctrl_c();
            let total = source_records(&cfg.kafka, &topic).await?;
            let progress = Progress::start("inspect", Some(total), Follow::Read);
            let (counts, stop2) = (progress.counts.clone(), stop.clone());
            // Streamed: the summary keeps counts and samples, not the records.
            let s = tokio::task::spawn_blocking(move || {
                let mut s = inspect::Summarizer::new(&t, now, samples);
                courier::kafka::admin::scan(&k, &t, |r| {
                    s.add(r.payload.as_deref());
                    counts.read.fetch_add(1, Ordering::Relaxed);
                    if stop2.asked() {
                        return std::ops::ControlFlow::Break(());
                    }
                    std::ops::ControlFlow::Continue(())
                })?;
                let mut s = s.finish();
                s.deleted = inspect::deleted_report(&k, &t, group.as_deref())?;
                Ok::<_, courier::kafka::admin::AdminError>(s)
            });
            let s = ticking(&progress, s).await??;
            let read = progress.finish().read;
            let mut s = s;
            let max = cfg.pipeline.max_event_bytes;
            s.decoded = inspect::decode_samples(&cfg.input, &s.samples, max).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", inspect::Table(&s, now));
            }
            if stop.asked() {
                eprintln!(
                    "interrupted (Ctrl-C): the summary covers the {read} of {total} records read"
                );
                return Ok(INTERRUPTED);
            }
            Ok(0)
        }
        DlqCmd::Replay {
            config,
            from_dlq,
            reasons,
            types,
            keys,
            ids,
            since,
            until,
            dry_run,
            rate,
            yes,
        } => {
            let cfg = load(&config)?;
            let source = if from_dlq {
                cfg.kafka.dlq_topic()
            } else {
                cfg.kafka.parking_topic()
            };
            let filter = replay::Filter {
                reasons,
                types,
                keys,
                ids,
                since_ms: since.as_deref().map(parse_time).transpose()?,
                until_ms: until.as_deref().map(parse_time).transpose()?,
            };
            cfg.kafka.secret_properties()?;
            let stop = Stop::on_ctrl_c();
            let total = source_records(&cfg.kafka, &source).await?;
            let counting = Progress::start("replay (counting)", Some(total), Follow::Read);
            let prepare = replay::prepare(
                &cfg.kafka,
                &source,
                &filter,
                counting.counts.clone(),
                stop.clone(),
            );
            let plan = ticking(&counting, prepare).await?;
            counting.finish();
            if stop.asked() {
                println!("interrupted (Ctrl-C) while counting: nothing replayed");
                return Ok(INTERRUPTED);
            }
            // Records deleted before they were handled cannot be replayed: said
            // (and logged) as the consumer says it.
            let (k, t, g) = (
                cfg.kafka.clone(),
                source.clone(),
                cfg.kafka.group_id.clone(),
            );
            let deleted = tokio::task::spawn_blocking(move || {
                inspect::deleted_report(&k, &t, from_dlq.then_some(g.as_str()))
            })
            .await??;
            for d in &deleted {
                println!(
                    "{source}[{}] offsets {}..{}: {} events deleted unread (retention or delete-records): they cannot be replayed",
                    d.partition, d.from, d.to, d.count
                );
            }
            println!(
                "{source}: {} to replay to {} ({} with the payload read back from the origin topic), {} already replayed, {} not matching, {} unreadable",
                plan.selected_count,
                cfg.kafka.topic,
                plan.payload_omitted,
                plan.already_replayed,
                plan.not_matching,
                plan.unreadable
            );
            if dry_run || plan.selected_count == 0 {
                for c in &plan.samples {
                    println!(
                        "  would replay {}/{} {}{}",
                        c.partition,
                        c.offset,
                        c.envelope.event_id.as_deref().unwrap_or("(no id)"),
                        if c.envelope.omitted.is_some() {
                            " (payload from the origin topic)"
                        } else {
                            ""
                        }
                    );
                }
                return Ok(0);
            }
            if !yes {
                use std::io::Write;
                print!(
                    "Replay {} events to {}? [y/N] ",
                    plan.selected_count, cfg.kafka.topic
                );
                std::io::stdout().flush()?;
                let read = tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map(|_| line)
                });
                let line = tokio::select! {
                    line = read => line??,
                    _ = tokio::signal::ctrl_c() => String::new(),
                };
                if !matches!(line.trim(), "y" | "Y" | "yes") {
                    println!("nothing replayed");
                    return Ok(1);
                }
            }
            let writing =
                Progress::start("replay", Some(plan.selected_count as u64), Follow::Written);
            let execute = replay::execute(
                &cfg.kafka,
                &source,
                &cfg.kafka.topic,
                &filter,
                rate,
                writing.counts.clone(),
                stop.clone(),
            );
            let out = ticking(&writing, execute).await?;
            writing.finish();
            println!(
                "replayed {} events ({} with the payload read back from the origin topic)",
                out.replayed, out.payload_fetched
            );
            if out.interrupted {
                println!(
                    "interrupted (Ctrl-C) after {} of {} events: each one replayed is in the replay log; run the same command again to replay the rest",
                    out.replayed, plan.selected_count
                );
                return Ok(INTERRUPTED);
            }
            if out.payload_unavailable.is_empty() {
                return Ok(0);
            }
            println!(
                "{} events NOT replayed: their payload is no longer in the origin topic",
                out.payload_unavailable.len()
            );
            for line in &out.payload_unavailable {
                println!("  {line}");
            }
            Ok(3)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{http_status, probe_addr, quiet_ractor};

    /// `courier --help` and every subcommand's help fit an 80-column terminal;
    /// the long explanations live in the guide.
    #[test]
    fn every_help_fits_80_columns() {
        use clap::CommandFactory as _;
        fn check(cmd: &mut clap::Command, path: &str, long: &mut Vec<String>) {
            for help in [cmd.render_help(), cmd.render_long_help()] {
                for line in help.to_string().lines() {
                    if line.chars().count() > 80 {
                        long.push(format!("{path}: {line}"));
                    }
                }
            }
            for sub in cmd.get_subcommands_mut() {
                let p = format!("{path} {}", sub.get_name());
                check(sub, &p, long);
            }
        }
        let mut cmd = super::Cli::command().term_width(80);
        cmd.build();
        let mut long = Vec::new();
        check(&mut cmd, "courier", &mut long);
        assert!(
            long.is_empty(),
            "help lines wider than 80 columns: {long:#?}"
        );
    }
    use std::io::{Read as _, Write as _};
    use std::time::Duration;

    /// A listener that answers one request with `answer` (None: accepts and
    /// says nothing).
    fn one_answer(answer: Option<&'static str>) -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut req = [0u8; 1024];
                let _ = s.read(&mut req);
                match answer {
                    Some(a) => {
                        let _ = s.write_all(a.as_bytes());
                    }
                    None => std::thread::sleep(Duration::from_secs(3)),
                }
            }
        });
        addr
    }

    #[test]
    fn the_probe_reads_the_status_line() {
        let t = Duration::from_secs(2);
        let ok = one_answer(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
        assert_eq!(http_status(ok, "/healthz", t).map(|s| s.0), Ok(200));
        let bad = one_answer(Some("HTTP/1.1 503 Service Unavailable\r\n\r\nwedged"));
        assert_eq!(http_status(bad, "/healthz", t).map(|s| s.0), Ok(503));
        let junk = one_answer(Some("SSH-2.0-OpenSSH\r\n"));
        assert!(http_status(junk, "/healthz", t).is_err());
        let silent = one_answer(None);
        let e = http_status(silent, "/healthz", Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("no answer"), "{e}");
        // Nothing listening: a port just released.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let e = http_status(closed, "/healthz", t).unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }

    #[test]
    fn an_unspecified_listener_is_asked_on_loopback() {
        assert_eq!(
            probe_addr("0.0.0.0:9464").map(|a| a.to_string()),
            Ok("127.0.0.1:9464".into())
        );
        assert_eq!(
            probe_addr("[::]:9464").map(|a| a.to_string()),
            Ok("[::1]:9464".into())
        );
        assert_eq!(
            probe_addr("10.0.0.7:9464").map(|a| a.to_string()),
            Ok("10.0.0.7:9464".into())
        );
        assert!(probe_addr("").is_err());
    }

    #[test]
    fn ractor_is_quiet_unless_named() {
        let quiet = ",rustls_platform_verifier=off";
        assert_eq!(quiet_ractor("info"), format!("info,ractor=warn{quiet}"));
        assert_eq!(
            quiet_ractor("debug,librdkafka=warn"),
            format!("debug,librdkafka=warn,ractor=warn{quiet}")
        );
        assert_eq!(
            quiet_ractor("info,ractor=debug"),
            format!("info,ractor=debug{quiet}")
        );
        assert_eq!(
            quiet_ractor("info,rustls_platform_verifier=error"),
            "info,rustls_platform_verifier=error,ractor=warn"
        );
    }
}
