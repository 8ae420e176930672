//! Keys of the previous release. Durations used to be integers of milliseconds
//! under `*_ms` names; they are now humantime strings (`"5s"`, `"250ms"`). The old
//! keys are accepted for one release: each source (the file, the environment) is
//! rewritten before it is merged, and every rewrite is reported so `check-config`
//! and the log say what to change.

use super::{invalid, ConfigError};
use figment::value::{Dict, Value};
use std::time::Duration;

/// `(section, new name)` of every duration that used to be `<name>_ms`.
const DURATIONS: &[(&str, &str)] = &[
    ("kafka", "session_timeout"),
    ("kafka", "max_poll_interval"),
    ("kafka", "auto_commit_interval"),
    ("kafka", "producer_timeout"),
    ("api", "request_timeout"),
    ("api", "connect_timeout"),
    ("api", "retry_base"),
    ("api", "retry_max_delay"),
    ("api", "retry_budget"),
    ("pipeline", "drain_timeout"),
    ("pipeline", "shutdown_grace"),
    ("enrichment", "cache_ttl"),
    ("enrichment", "query_timeout"),
    ("supervision", "window"),
    ("metrics", "stuck_after"),
    ("redis", "command_timeout"),
    ("redis", "connect_timeout"),
    ("degraded", "marker_ttl"),
    ("degraded", "poll_interval"),
    ("degraded", "breaker_window"),
    ("degraded", "breaker_open"),
    ("degraded", "min_pause"),
    ("degraded", "dlq_backoff_base"),
    ("degraded", "dlq_backoff_cap"),
    ("degraded", "lag_check_interval"),
];

/// Rewrites the `*_ms` keys of one source in place; returns one warning per key.
pub(super) fn migrate(source: &mut Dict) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for (section, name) in DURATIONS {
        if let Some(Value::Dict(_, d)) = source.get_mut(*section) {
            rename(d, section, name, &mut warnings)?;
        }
    }
    // DLQ retry policies: `deadline_ms` → `deadline`.
    if let Some(Value::Dict(_, retry)) = source.get_mut("retry") {
        if let Some(Value::Dict(_, d)) = retry.get_mut("default") {
            rename(d, "retry.default", "deadline", &mut warnings)?;
        }
        if let Some(Value::Dict(_, types)) = retry.get_mut("types") {
            for (t, policy) in types.iter_mut() {
                if let Value::Dict(_, d) = policy {
                    rename(d, &format!("retry.types.{t}"), "deadline", &mut warnings)?;
                }
            }
        }
    }
    Ok(warnings)
}

fn rename(
    section: &mut Dict,
    path: &str,
    name: &str,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let old = format!("{name}_ms");
    let Some(value) = section.remove(&old) else {
        return Ok(());
    };
    let field = format!("{path}.{old}");
    if section.contains_key(name) {
        return Err(invalid(
            &field,
            format!("is set together with `{path}.{name}`: keep only `{name}`"),
        ));
    }
    let ms = value
        .to_i128()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| invalid(&field, "must be a whole number of milliseconds"))?;
    let new = humantime::format_duration(Duration::from_millis(ms)).to_string();
    warnings.push(format!(
        "`{field}` is deprecated and will be removed in the next release: write `{path}.{name} = \"{new}\"`"
    ));
    section.insert(name.to_string(), Value::from(new));
    Ok(())
}
