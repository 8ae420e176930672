//! Configuration: a TOML file, every field defaulted where a default is sane,
//! overridable from the environment as `COURIER__<SECTION>__<KEY>`.
//!
//! Secrets never live in the file: the API token, database and Redis passwords are
//! read from environment variables whose *names* the file may set.

use crate::core::backoff::RetryPolicy;
use crate::core::event::DecodeOptions;
use crate::core::ordering::OrderingMode;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config: {0}")]
    Load(String),
    #[error("config field `{field}`: {reason}")]
    Invalid { field: String, reason: String },
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub api: ApiConfig,
    pub pipeline: PipelineConfig,
    pub enrichment: EnrichmentConfig,
    pub supervision: SupervisionConfig,
    pub metrics: MetricsConfig,
    pub redis: RedisConfig,
    pub degraded: DegradedConfig,
    pub retry: RetryConfig,
    pub log: LogConfig,
    /// Fault hooks for tests. Inert unless set.
    pub testing: TestingConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub topic: String,
    /// Default: `<topic>.dlq`.
    pub dlq_topic: Option<String>,
    /// Default: `<topic>.parking`.
    pub parking_topic: Option<String>,
    pub session_timeout_ms: u64,
    pub max_poll_interval_ms: u64,
    pub auto_commit_interval_ms: u64,
    /// How long a DLQ / parking-lot write may take before it is reported failed
    /// (and retried; the event's offset waits meanwhile).
    pub producer_timeout_ms: u64,
    /// Name of the environment variable holding the SASL password (with
    /// `"sasl.mechanisms"` and `"sasl.username"` in `properties`).
    pub sasl_password_env: Option<String>,
    /// Extra librdkafka properties, passed through to consumer and producer.
    /// Secrets are refused here: they come from the environment.
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            group_id: "courier".into(),
            topic: "events".into(),
            dlq_topic: None,
            parking_topic: None,
            session_timeout_ms: 45_000,
            max_poll_interval_ms: 300_000,
            auto_commit_interval_ms: 1_000,
            producer_timeout_ms: 30_000,
            sasl_password_env: None,
            properties: BTreeMap::new(),
        }
    }
}

impl KafkaConfig {
    pub fn dlq_topic(&self) -> String {
        self.dlq_topic
            .clone()
            .unwrap_or_else(|| format!("{}.dlq", self.topic))
    }
    pub fn parking_topic(&self) -> String {
        self.parking_topic
            .clone()
            .unwrap_or_else(|| format!("{}.parking", self.topic))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    pub url: String,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Tries per event on the main path, the first included.
    pub max_attempts: u32,
    pub retry_base_ms: u64,
    pub retry_max_delay_ms: u64,
    /// No in-place retry starts later than this after the first try.
    pub retry_budget_ms: u64,
    /// Name of the environment variable holding a bearer token (never the token).
    pub token_env: Option<String>,
    /// Extra request headers (not secrets: those come from `token_env`).
    pub headers: BTreeMap<String, String>,
    /// Speak HTTP/2 without negotiation (h2c) to the API.
    pub http2_prior_knowledge: bool,
    pub pool_max_idle_per_host: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            url: "http://127.0.0.1:8080/events".into(),
            request_timeout_ms: 5_000,
            connect_timeout_ms: 1_000,
            max_attempts: 3,
            retry_base_ms: 100,
            retry_max_delay_ms: 1_000,
            retry_budget_ms: 2_000,
            token_env: None,
            headers: BTreeMap::new(),
            http2_prior_knowledge: false,
            pool_max_idle_per_host: 4096,
        }
    }
}

impl ApiConfig {
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            base_delay: Duration::from_millis(self.retry_base_ms),
            max_delay: Duration::from_millis(self.retry_max_delay_ms),
            total_budget: Duration::from_millis(self.retry_budget_ms),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Global limit of events being delivered (enrich + HTTP) at once.
    pub concurrency: usize,
    pub ordering: OrderingMode,
    /// Events held per partition (queued + in flight); a full partition is paused.
    pub max_in_flight_per_partition: usize,
    /// Records fetched but not yet taken in by a partition actor, process-wide:
    /// the poll thread fetches nothing more above this.
    pub max_buffered: usize,
    pub max_event_bytes: usize,
    /// CloudEvents extension attribute (integer) carrying the entity version.
    pub entity_version_attribute: String,
    /// On revoke: how long to wait for in-flight work before handing the partition over.
    pub drain_timeout_ms: u64,
    /// On SIGTERM: how long in-flight work may take before Courier stores, commits and exits.
    pub shutdown_grace_ms: u64,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            concurrency: 512,
            ordering: OrderingMode::Key,
            max_in_flight_per_partition: 1_000,
            max_buffered: 8_192,
            max_event_bytes: 1024 * 1024,
            entity_version_attribute: "entityversion".into(),
            drain_timeout_ms: 10_000,
            shutdown_grace_ms: 15_000,
        }
    }
}

impl PipelineConfig {
    pub fn decode_options(&self) -> DecodeOptions {
        DecodeOptions {
            max_event_bytes: self.max_event_bytes,
            entity_version_attribute: self.entity_version_attribute.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnMissing {
    /// Deliver the event without enrichment.
    #[default]
    Deliver,
    /// Park the event with reason `enrichment_missing`.
    Park,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnrichmentConfig {
    pub enabled: bool,
    /// `postgres://user@host:port/db` — without the password.
    pub url: String,
    /// Name of the environment variable holding the database password.
    pub password_env: Option<String>,
    /// Query with one parameter (`$1`, the Kafka key as text) returning one column
    /// of type `json`/`jsonb`.
    pub query: String,
    /// Attribute under which the looked-up JSON is added to the event.
    pub field: String,
    pub on_missing: OnMissing,
    pub cache_capacity: u64,
    pub cache_ttl_ms: u64,
    pub pool_size: usize,
    pub query_timeout_ms: u64,
}

impl Default for EnrichmentConfig {
    fn default() -> Self {
        EnrichmentConfig {
            enabled: false,
            url: "postgres://courier@127.0.0.1:5432/courier".into(),
            password_env: None,
            query: String::new(),
            field: "enrichment".into(),
            on_missing: OnMissing::Deliver,
            cache_capacity: 100_000,
            cache_ttl_ms: 60_000,
            pool_size: 8,
            query_timeout_ms: 1_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisionConfig {
    /// Child crashes absorbed within `window_ms` before the process exits non-zero.
    pub max_restarts: u32,
    pub window_ms: u64,
}

impl Default for SupervisionConfig {
    fn default() -> Self {
        SupervisionConfig {
            max_restarts: 10,
            window_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `/metrics`, `/healthz`, `/readyz`. Empty string disables the listener.
    pub listen: String,
    /// `/readyz` reports "stuck" when events are held but none finished for this
    /// long while the API is judged available.
    pub stuck_after_ms: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
            stuck_after_ms: 120_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port[/db]`, without a password (see `password_env`).
    pub url: String,
    /// Name of the environment variable holding the Redis password.
    pub password_env: Option<String>,
    /// Key prefix; the marker is `<prefix>:<group>:api-down`.
    pub key_prefix: String,
    /// Every Redis command gives up after this long: Redis is never allowed to
    /// stall the health verdict.
    pub command_timeout_ms: u64,
    pub connect_timeout_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            password_env: None,
            key_prefix: "courier".into(),
            command_timeout_ms: 250,
            connect_timeout_ms: 1_000,
        }
    }
}

/// Degraded mode: when the API is judged unavailable, partitions pause; when it
/// recovers, the DLQ drains at a limited rate, then the main topic resumes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DegradedConfig {
    /// Lifetime of the shared "API down" marker in Redis.
    pub marker_ttl_ms: u64,
    /// How often each instance looks at the marker.
    pub poll_interval_ms: u64,
    /// Local circuit breaker: sliding window of call outcomes.
    pub breaker_window_ms: u64,
    pub breaker_min_calls: u32,
    /// Failure share (0–1] in the window that opens the breaker.
    pub breaker_failure_rate: f64,
    pub breaker_open_ms: u64,
    pub breaker_half_open_probes: u32,
    /// Failures in a row that open the breaker at once (0 = rate only).
    pub breaker_consecutive_failures: u32,
    /// A partition stays paused at least this long (anti-flapping).
    pub min_pause_ms: u64,
    /// DLQ drain: events in delivery at once (process-wide) and events per second.
    pub drain_concurrency: usize,
    pub drain_rate_per_sec: f64,
    /// Backoff between DLQ rounds of one event (`not_before`), doubling, capped.
    pub dlq_backoff_base_ms: u64,
    pub dlq_backoff_cap_ms: u64,
    /// DLQ writes per second (process-wide) above which the failure is treated as
    /// systemic and the breaker trips; 0 disables the guard.
    pub flood_dlq_per_sec: f64,
    /// How often DLQ lag is checked per partition.
    pub lag_check_interval_ms: u64,
}

impl Default for DegradedConfig {
    fn default() -> Self {
        DegradedConfig {
            marker_ttl_ms: 10_000,
            poll_interval_ms: 200,
            breaker_window_ms: 10_000,
            breaker_min_calls: 20,
            breaker_failure_rate: 0.5,
            breaker_open_ms: 5_000,
            breaker_half_open_probes: 3,
            breaker_consecutive_failures: 10,
            min_pause_ms: 1_000,
            drain_concurrency: 16,
            drain_rate_per_sec: 50.0,
            dlq_backoff_base_ms: 1_000,
            dlq_backoff_cap_ms: 60_000,
            flood_dlq_per_sec: 200.0,
            lag_check_interval_ms: 1_000,
        }
    }
}

impl DegradedConfig {
    pub fn breaker(&self) -> crate::core::breaker::BreakerConfig {
        crate::core::breaker::BreakerConfig {
            window: Duration::from_millis(self.breaker_window_ms),
            min_calls: self.breaker_min_calls,
            failure_rate: self.breaker_failure_rate,
            open_for: Duration::from_millis(self.breaker_open_ms),
            half_open_probes: self.breaker_half_open_probes,
            consecutive_failures: self.breaker_consecutive_failures,
        }
    }
}

/// DLQ retry policy per CloudEvents `type`, with a default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    pub default: crate::core::dlq_policy::RetryPolicy,
    /// e.g. `[retry.types."order.paid"] kind = "deadline", deadline_ms = 3600000`
    pub types: BTreeMap<String, crate::core::dlq_policy::RetryPolicy>,
    /// Source of truth for `deadline` policies: a query with `$1` = the Kafka key
    /// that returns the entity's current version (one integer column), run against
    /// `enrichment.url`.
    pub source_query: String,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            default: crate::core::dlq_policy::RetryPolicy::Counter { max_retries: 5 },
            types: BTreeMap::new(),
            source_query: String::new(),
        }
    }
}

impl RetryConfig {
    pub fn policy_for(&self, event_type: Option<&str>) -> crate::core::dlq_policy::RetryPolicy {
        event_type
            .and_then(|t| self.types.get(t))
            .copied()
            .unwrap_or(self.default)
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

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TestingConfig {
    /// The partition actor panics (once per process) when it receives this event id.
    pub crash_on_event_id: Option<String>,
    /// With `crash_on_event_id`: panic every time the event is received, not once
    /// (exercises the restart budget).
    pub crash_repeatedly: bool,
}

impl Config {
    /// Loads defaults ← file (if given and present) ← `COURIER__*` environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(p) = path {
            if !p.exists() {
                return Err(ConfigError::Load(format!("{} does not exist", p.display())));
            }
            fig = fig.merge(Toml::file(p));
        }
        Self::from_figment(fig.merge(Env::prefixed("COURIER__").split("__")))
    }

    /// Parses a TOML string (no environment): for tests and `check-config`.
    pub fn from_toml(s: &str) -> Result<Config, ConfigError> {
        Self::from_figment(
            Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(s)),
        )
    }

    fn from_figment(fig: Figment) -> Result<Config, ConfigError> {
        let cfg: Config = fig.extract().map_err(|e| {
            let e = e.into_iter().next();
            match e {
                Some(e) => {
                    let field = e.path.join(".");
                    let reason = e.kind.to_string();
                    if field.is_empty() {
                        ConfigError::Load(reason)
                    } else {
                        invalid(&field, reason)
                    }
                }
                None => ConfigError::Load("unknown error".into()),
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what the types cannot: ranges, names, relations between fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must not be empty"));
        }
        if k.group_id.trim().is_empty() {
            return Err(invalid("kafka.group_id", "must not be empty"));
        }
        for (field, name) in [
            ("kafka.topic", k.topic.clone()),
            ("kafka.dlq_topic", k.dlq_topic()),
            ("kafka.parking_topic", k.parking_topic()),
        ] {
            valid_topic(&name).map_err(|r| invalid(field, r))?;
        }
        if k.dlq_topic() == k.topic
            || k.parking_topic() == k.topic
            || k.dlq_topic() == k.parking_topic()
        {
            return Err(invalid(
                "kafka.dlq_topic",
                "main, DLQ and parking-lot topics must be three different topics",
            ));
        }
        for key in k.properties.keys() {
            let lower = key.to_ascii_lowercase();
            if lower.contains("password")
                || lower.contains("secret")
                || lower.ends_with(".jaas.config")
            {
                return Err(invalid(
                    &format!("kafka.properties.{key}"),
                    "secrets do not belong in the config file: put the SASL password in an environment variable named by kafka.sasl_password_env",
                ));
            }
        }
        for key in [
            "enable.auto.offset.store",
            "enable.auto.commit",
            "group.id",
            "bootstrap.servers",
        ] {
            if k.properties.contains_key(key) {
                return Err(invalid(
                    &format!("kafka.properties.{key}"),
                    "is set by Courier itself (it is what keeps offsets safe) and cannot be overridden",
                ));
            }
        }
        let p = &self.pipeline;
        // Revocation must finish inside the rebalance: the drain deadline has to stay
        // below the session timeout and well below max.poll.interval.ms.
        if p.drain_timeout_ms >= k.session_timeout_ms {
            return Err(invalid(
                "pipeline.drain_timeout_ms",
                format!(
                    "must be below kafka.session_timeout_ms ({})",
                    k.session_timeout_ms
                ),
            ));
        }
        if p.drain_timeout_ms * 2 >= k.max_poll_interval_ms {
            return Err(invalid(
                "pipeline.drain_timeout_ms",
                format!(
                    "must be below half of kafka.max_poll_interval_ms ({})",
                    k.max_poll_interval_ms
                ),
            ));
        }
        if p.concurrency == 0 {
            return Err(invalid("pipeline.concurrency", "must be at least 1"));
        }
        if p.max_in_flight_per_partition == 0 {
            return Err(invalid(
                "pipeline.max_in_flight_per_partition",
                "must be at least 1",
            ));
        }
        if p.max_buffered == 0 {
            return Err(invalid("pipeline.max_buffered", "must be at least 1"));
        }
        if p.max_event_bytes == 0 {
            return Err(invalid("pipeline.max_event_bytes", "must be at least 1"));
        }
        if p.entity_version_attribute.is_empty()
            || !p
                .entity_version_attribute
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(invalid(
                "pipeline.entity_version_attribute",
                "a CloudEvents extension name: lowercase letters and digits only",
            ));
        }
        let a = &self.api;
        let url = reqwest::Url::parse(&a.url).map_err(|e| invalid("api.url", e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("api.url", "scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "api.url",
                "must not carry credentials: use api.token_env",
            ));
        }
        if a.max_attempts == 0 {
            return Err(invalid("api.max_attempts", "must be at least 1"));
        }
        if a.request_timeout_ms == 0 {
            return Err(invalid("api.request_timeout_ms", "must be above 0"));
        }
        for name in a.headers.keys() {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(
                    &format!("api.headers.{name}"),
                    "is not a valid header name",
                ));
            }
            let lower = name.to_ascii_lowercase();
            if lower == "authorization" || lower == "idempotency-key" {
                return Err(invalid(
                    &format!("api.headers.{name}"),
                    "is set by Courier (use api.token_env for the token)",
                ));
            }
        }
        if let Some(env) = &a.token_env {
            if env.is_empty() {
                return Err(invalid(
                    "api.token_env",
                    "must name an environment variable",
                ));
            }
        }
        let e = &self.enrichment;
        if e.enabled {
            if e.query.trim().is_empty() {
                return Err(invalid(
                    "enrichment.query",
                    "is required when enrichment is enabled",
                ));
            }
            if !e.query.contains("$1") {
                return Err(invalid(
                    "enrichment.query",
                    "must use `$1` for the entity key",
                ));
            }
            let u = reqwest::Url::parse(&e.url)
                .map_err(|err| invalid("enrichment.url", err.to_string()))?;
            if u.password().is_some() {
                return Err(invalid(
                    "enrichment.url",
                    "must not carry a password: use enrichment.password_env",
                ));
            }
            if e.pool_size == 0 {
                return Err(invalid("enrichment.pool_size", "must be at least 1"));
            }
        }
        if !self.metrics.listen.is_empty() && self.metrics.listen.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "metrics.listen",
                "must be an address like 127.0.0.1:9464",
            ));
        }
        let d = &self.degraded;
        d.breaker()
            .validate()
            .map_err(|e| invalid("degraded.breaker_*", e.to_string()))?;
        if d.drain_concurrency == 0 {
            return Err(invalid("degraded.drain_concurrency", "must be at least 1"));
        }
        if d.drain_rate_per_sec.is_nan() || d.drain_rate_per_sec <= 0.0 {
            return Err(invalid("degraded.drain_rate_per_sec", "must be above 0"));
        }
        if d.poll_interval_ms == 0 || d.poll_interval_ms >= d.marker_ttl_ms {
            return Err(invalid(
                "degraded.poll_interval_ms",
                "must be above 0 and below degraded.marker_ttl_ms",
            ));
        }
        if d.dlq_backoff_base_ms == 0 || d.dlq_backoff_cap_ms < d.dlq_backoff_base_ms {
            return Err(invalid(
                "degraded.dlq_backoff_base_ms",
                "must be above 0 and at most degraded.dlq_backoff_cap_ms",
            ));
        }
        if reqwest::Url::parse(&self.redis.url).map_or(true, |u| u.password().is_some()) {
            return Err(invalid(
                "redis.url",
                "must be a redis:// URL without a password (use redis.password_env)",
            ));
        }
        let uses_deadline = std::iter::once(&self.retry.default)
            .chain(self.retry.types.values())
            .any(|p| matches!(p, crate::core::dlq_policy::RetryPolicy::Deadline { .. }));
        if uses_deadline && !self.retry.source_query.contains("$1") {
            return Err(invalid(
                "retry.source_query",
                "a `deadline` policy needs a source-of-truth query using `$1` for the key",
            ));
        }
        if self.supervision.max_restarts == 0 {
            return Err(invalid("supervision.max_restarts", "must be at least 1"));
        }
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| invalid("log.level", e.to_string()))?;
        Ok(())
    }

    /// Checks that every secret the config names is present in the environment.
    pub fn check_secrets(&self) -> Result<(), ConfigError> {
        self.api_token()?;
        self.kafka_sasl_password()?;
        Ok(())
    }

    /// The SASL password, read from the environment variable the config names.
    pub fn kafka_sasl_password(&self) -> Result<Option<String>, ConfigError> {
        match &self.kafka.sasl_password_env {
            None => Ok(None),
            Some(name) => match std::env::var(name) {
                Ok(v) if !v.is_empty() => Ok(Some(v)),
                _ => Err(invalid(
                    "kafka.sasl_password_env",
                    format!("environment variable {name} is not set"),
                )),
            },
        }
    }

    /// The bearer token, read from the environment variable the config names.
    pub fn api_token(&self) -> Result<Option<String>, ConfigError> {
        match &self.api.token_env {
            None => Ok(None),
            Some(name) => match std::env::var(name) {
                Ok(v) if !v.is_empty() => Ok(Some(v)),
                _ => Err(invalid(
                    "api.token_env",
                    format!("environment variable {name} is not set"),
                )),
            },
        }
    }
}

fn valid_topic(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err("a topic name is 1 to 249 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!("`{name}` has characters other than [a-zA-Z0-9._-]"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.kafka.dlq_topic(), "events.dlq");
        assert_eq!(c.kafka.parking_topic(), "events.parking");
        assert_eq!(c.pipeline.ordering, OrderingMode::Key);
    }

    #[test]
    fn shipped_config_is_valid() {
        let s =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/courier.toml"))
                .unwrap();
        Config::from_toml(&s).unwrap();
    }

    fn field_of(toml: &str) -> String {
        match Config::from_toml(toml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            field_of("[pipeline]\nconcurrency = 0"),
            "pipeline.concurrency"
        );
        assert_eq!(
            field_of("[pipeline]\nconcurrency = \"many\""),
            "pipeline.concurrency"
        );
        assert_eq!(
            field_of("[pipeline]\nordering = \"random\""),
            "pipeline.ordering"
        );
        assert_eq!(field_of("[kafka]\ntopic = \"a b\""), "kafka.topic");
        assert_eq!(field_of("[kafka]\nbrokerz = \"x\""), "kafka.brokerz");
        assert_eq!(field_of("[api]\nurl = \"ftp://x\""), "api.url");
        assert_eq!(field_of("[api]\nurl = \"http://u:p@x/\""), "api.url");
        assert_eq!(
            field_of("[kafka.properties]\n\"sasl.password\" = \"hunter2\""),
            "kafka.properties.sasl.password"
        );
        assert_eq!(
            field_of("[kafka.properties]\n\"enable.auto.offset.store\" = \"true\""),
            "kafka.properties.enable.auto.offset.store"
        );
        assert_eq!(
            field_of("[pipeline]\ndrain_timeout_ms = 60000"),
            "pipeline.drain_timeout_ms"
        );
        assert_eq!(field_of("[enrichment]\nenabled = true"), "enrichment.query");
        assert_eq!(
            field_of("[metrics]\nlisten = \"nowhere\""),
            "metrics.listen"
        );
        assert_eq!(field_of("[log]\nlevel = \"[[\""), "log.level");
    }
}
