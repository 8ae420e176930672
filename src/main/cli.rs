//! The command line: `courier`'s subcommands and their arguments (clap).

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "courier",
    version,
    about = "Kafka → HTTP delivery with at-least-once semantics, DLQ and degraded mode",
    after_help = GUIDE
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
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
    /// to write instead. Exit 0 valid, 2 not.
    #[command(after_help = GUIDE)]
    CheckConfig {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// Also ask the brokers (and Redis, PostgreSQL, the schema registry, the
        /// token endpoint, where configured) what start-up would refuse: missing
        /// topics, partition counts, compaction, configs the principal may not read.
        #[arg(long)]
        online: bool,
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
    /// Try filters and route predicates on one event, offline.
    Expr {
        #[command(subcommand)]
        cmd: ExprCmd,
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
        /// Ask `/readyz` instead (200 only with a partition assignment and nothing
        /// stuck: a standby without partitions is healthy, but not ready).
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
pub(crate) enum ConfigCmd {
    /// Every field: type, default, meaning (from the config types themselves).
    Reference {
        /// The user guide's page (Markdown) instead of plain text.
        #[arg(long)]
        markdown: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum ExprCmd {
    /// What each filter says of an event, which route it takes, and the
    /// request it would send (method, URL, headers, body).
    ///
    /// No broker and no API: the event file is one record's value, decoded as
    /// `input.format` says (CloudEvents or json). Exit 0 when every
    /// expression answered, 1 when one failed (the event would be parked
    /// `expression_failed`), 2 for a config or event that cannot be read.
    #[command(after_help = GUIDE)]
    Eval {
        /// Config file (TOML); `COURIER__<SECTION>__<KEY>` variables override it.
        #[arg(long, short, default_value = "config/courier.toml")]
        config: PathBuf,
        /// The record's value: a file holding the event.
        #[arg(long)]
        event: PathBuf,
        /// The record's Kafka key (text), for `key` and `record_key`.
        #[arg(long)]
        key: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum DlqCmd {
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

/// Where `--help` points for the long explanations.
const GUIDE: &str = "The user guide explains more: docs/guide (mdbook serve docs/guide), \
                     e.g. docs/guide/src/operating.md; every config field: courier config reference";

#[cfg(test)]
mod tests {
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
}
