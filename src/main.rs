//! The `courier` binary: the edge where errors become messages and exit codes.
//!
//! | file | holds |
//! |---|---|
//! | `main.rs` | `main`: a subcommand to its function, the result to an exit code; `run`, `check-config`, `expr eval` |
//! | `main/cli.rs` | the command line (clap): subcommands and arguments |
//! | `main/logging.rs` | the log's filter and format |
//! | `main/healthcheck.rs` | `courier healthcheck` |
//! | `main/dlq.rs` | `courier dlq inspect` and `courier dlq replay` |
//! | `main/exit.rs` | the exit codes: one enum, the guide's table generated from it |
//! | `main/guide_tests.rs` | the guide against the binary: its command lines, config fields, exit codes |
//!
//! The parts live in `src/main/` (named with `#[path]`: a crate root's modules
//! would otherwise sit beside `lib.rs`'s in `src/`).

use anyhow::Context;
use clap::Parser;
use courier::config::{Config, LogFormat};
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "main/cli.rs"]
mod cli;
#[path = "main/dlq.rs"]
mod dlq;
#[path = "main/exit.rs"]
mod exit;
#[cfg(test)]
#[path = "main/guide_tests.rs"]
mod guide_tests;
#[path = "main/healthcheck.rs"]
mod healthcheck;
#[path = "main/logging.rs"]
mod logging;

use cli::{Cli, Cmd, ConfigCmd, ExprCmd};
use dlq::dlq;
use exit::Exit;
use healthcheck::healthcheck;
use logging::{init_logging, init_logging_with};

// jemalloc: records are allocated on the poll thread and freed on tokio workers,
// and request buffers cross workers too; glibc malloc spent 24 % of Courier's CPU
// on that (docs/BENCHMARKS.md, profile and A/B).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The demo's log filter (`RUST_LOG` overrides it).
const DEMO_LOG: &str =
    "error,librdkafka=off,rdkafka=off,courier::delivery=warn,courier::actors::health=warn";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::CheckConfig { config, online } => check_config(config, online),
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
            Ok(Exit::Ok)
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
            runtime().and_then(|rt| {
                rt.block_on(courier::demo::run(events, batch, avro))
                    .map(|code| if code == 0 { Exit::Ok } else { Exit::No })
            })
        }
        Cmd::Expr {
            cmd: ExprCmd::Eval { config, event, key },
        } => expr_eval(&config, &event, key.as_deref()),
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
            let b = courier_standins::sink::Behaviour {
                latency_ms,
                fail_rate,
                ..Default::default()
            };
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => courier_standins::sink::SinkTls::from_files(
                    &cert,
                    &key,
                    tls_client_ca.as_deref(),
                )
                .map(Some)
                .map_err(anyhow::Error::from),
                _ => Ok(None),
            };
            tls.and_then(|tls| {
                runtime().and_then(|rt| {
                    rt.block_on(courier_standins::sink::run_standalone(listen, b, tls))
                        .map(|_| Exit::Ok)
                })
            })
        }
    };
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("courier: {e:#}");
            Exit::Failed.into()
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

/// `check-config`'s log (`--online`): start-up's warnings, as `run` logs them;
/// librdkafka's own lines only at ERROR (a refused connection, a failed handshake).
const ONLINE_LOG: &str = "warn,librdkafka=error";

/// `courier expr eval`: the report on stdout; exit 1 when an expression
/// failed for the event.
fn expr_eval(
    path: &std::path::Path,
    event: &std::path::Path,
    key: Option<&str>,
) -> anyhow::Result<Exit> {
    let cfg = load(path)?;
    let bytes = std::fs::read(event).with_context(|| format!("reading {}", event.display()))?;
    let report = courier::ops::expr_eval::explain(&cfg, &bytes, key.map(str::as_bytes))?;
    print!("{}", report.text);
    Ok(if report.failed { Exit::No } else { Exit::Ok })
}

fn check_config(path: PathBuf, online: bool) -> anyhow::Result<Exit> {
    let cfg = load(&path)?;
    cfg.check_secrets()?;
    for d in cfg.warnings() {
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
    if !online {
        return Ok(Exit::Ok);
    }
    init_logging(LogFormat::Human, ONLINE_LOG);
    let findings = runtime()?.block_on(courier::app::check_online(&cfg));
    use courier::app::Verdict;
    for f in &findings {
        let label = match f.verdict {
            Verdict::Ok => "ok",
            Verdict::Warning => "WARNING",
            Verdict::Problem => "PROBLEM",
        };
        println!("online {label} {}: {}", f.service, f.text);
    }
    let problems = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Problem)
        .count();
    if problems > 0 {
        println!(
            "online: {problems} problem(s): Courier would refuse to start, or deliver nothing"
        );
        return Ok(Exit::Failed);
    }
    println!("online ok");
    Ok(Exit::Ok)
}
async fn run(path: PathBuf, log_format: Option<String>) -> anyhow::Result<Exit> {
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
    for d in cfg.warnings() {
        tracing::warn!("config: {d}");
    }
    let prometheus = courier::metrics::install(&cfg.kafka.group_id, &cfg.kafka.topic);
    let running = courier::app::start(cfg, prometheus).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    let code = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); Exit::Ok }
        _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); Exit::Ok }
        reason = running.fatal() => {
            tracing::error!(%reason, "exiting with an error so the orchestrator restarts Courier");
            Exit::Restart
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
