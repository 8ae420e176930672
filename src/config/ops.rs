//! The operational sections: `[supervision]`, `[metrics]`, `[log]` and `[testing]`.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisionConfig {
    /// Child crashes absorbed within `window` before the process exits non-zero.
    pub max_restarts: u32,
    /// The window of `max_restarts`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for SupervisionConfig {
    fn default() -> Self {
        SupervisionConfig {
            max_restarts: 10,
            window: Duration::from_secs(60),
        }
    }
}

impl SupervisionConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_restarts == 0 {
            return Err(invalid("supervision.max_restarts", "must be at least 1"));
        }
        if self.window.is_zero() {
            return Err(invalid("supervision.window", "must be above 0"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where `/metrics`, `/healthz`, `/readyz` and `/status` (with
    /// `/status.json`) are served. `/healthz` fails once the instance was stuck for
    /// `wedged_after`; `/readyz` answers 200 only with a partition assignment and
    /// nothing stuck for `stuck_after` (a standby without partitions is alive, not
    /// ready). Empty string disables the listener (and `courier healthcheck`).
    pub listen: String,
    /// `/readyz` reports "stuck" when events are held but none finished for this
    /// long while the API is judged available.
    #[serde(with = "humantime_serde")]
    pub stuck_after: Duration,
    /// `/healthz` (the liveness probe) fails when the instance has been stuck
    /// this long: events held, none finished, the API judged available. "0s"
    /// turns it off. At least `stuck_after`.
    #[serde(with = "humantime_serde")]
    pub wedged_after: Duration,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
            stuck_after: Duration::from_secs(120),
            wedged_after: Duration::from_secs(600),
        }
    }
}

impl MetricsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.listen.is_empty() && self.listen.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "metrics.listen",
                "must be an address like 127.0.0.1:9464",
            ));
        }
        if self.stuck_after.is_zero() {
            return Err(invalid("metrics.stuck_after", "must be above 0"));
        }
        if !self.wedged_after.is_zero() && self.wedged_after < self.stuck_after {
            return Err(invalid(
                "metrics.wedged_after",
                "must be at least metrics.stuck_after (or \"0s\" to turn the liveness check off)",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Log lines as text for people (`human`) or one JSON object each (`json`).
    pub format: LogFormat,
    /// `tracing` filter directive, e.g. `info` or `courier=debug,rdkafka=warn`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

impl LogConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        tracing_subscriber::EnvFilter::try_new(&self.level)
            .map_err(|e| invalid("log.level", e.to_string()))?;
        Ok(())
    }
}

/// Fault hooks for the tests. Only a build with the cargo feature `test-hooks`
/// (which `scripts/test.sh` enables and release builds do not) accepts them: a
/// production binary refuses a config that sets one.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TestingConfig {
    /// The partition actor panics (once per process) when it receives this event id.
    pub crash_on_event_id: Option<String>,
    /// With `crash_on_event_id`: panic every time the event is received, not once
    /// (exercises the restart budget).
    pub crash_repeatedly: bool,
    /// The poll thread panics (once per process) on reading a record with this
    /// key: what a library panic on hostile input does (issue 23 item 3).
    pub poll_panic_on_key: Option<String>,
    /// The poll thread keeps records it polled from the DLQ topic this long
    /// before it hands them over: a poll thread descheduled on a loaded
    /// machine, its records on their way while a lag check reads the
    /// consumer's position.
    #[serde(with = "humantime_serde")]
    pub dlq_handover_delay: Option<std::time::Duration>,
}

impl TestingConfig {
    /// Whether this build honours test hooks.
    pub(crate) const HOOKS_BUILT_IN: bool = cfg!(feature = "test-hooks");

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !Self::HOOKS_BUILT_IN && *self != TestingConfig::default() {
            return Err(invalid(
                "testing",
                "test fault hooks are not built into this binary (cargo feature `test-hooks`); remove the [testing] section",
            ));
        }
        Ok(())
    }
}
