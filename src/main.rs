//! The `courier` binary: the edge where errors become messages and exit codes.

use anyhow::Context;
use clap::{Parser, Subcommand};
use courier::config::{Config, LogFormat};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "courier",
    version,
    about = "Kafka → HTTP delivery with at-least-once semantics, DLQ and degraded mode"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the service until SIGTERM/SIGINT.
    Run {
        /// Config file (TOML). Environment `COURIER__<SECTION>__<KEY>` overrides it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
    },
    /// Validate a config file (with the environment applied) and print the result.
    CheckConfig {
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
    },
    /// Run the real pipeline against an embedded broker and API stand-in: no setup needed.
    Demo {
        /// Events to produce.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
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
    },
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Human => b.init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::CheckConfig { config } => check_config(config),
        Cmd::Run { config } => runtime().and_then(|rt| rt.block_on(run(config))),
        Cmd::Demo { events } => {
            init_logging(LogFormat::Human, "warn");
            runtime().and_then(|rt| rt.block_on(courier::demo::run(events)))
        }
        Cmd::Sink {
            listen,
            latency_ms,
            fail_rate,
        } => {
            init_logging(LogFormat::Human, "info");
            let b = courier::sink::Behaviour {
                latency_ms,
                fail_rate,
                ..Default::default()
            };
            runtime().and_then(|rt| {
                rt.block_on(courier::sink::run_standalone(listen, b))
                    .map(|_| 0)
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
    cfg.api_token()?;
    println!(
        "config ok: topic {} (DLQ {}, parking lot {}), group {}, API {}",
        cfg.kafka.topic,
        cfg.kafka.dlq_topic(),
        cfg.kafka.parking_topic(),
        cfg.kafka.group_id,
        cfg.api.url
    );
    Ok(0)
}

async fn run(path: PathBuf) -> anyhow::Result<u8> {
    let cfg = load(&path)?;
    init_logging(cfg.log.format, &cfg.log.level);
    let prometheus = courier::metrics::install();
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
    tracing::info!("stopped");
    Ok(code)
}
