//! Configuration: a TOML file, every field defaulted where a default is sane,
//! overridable from the environment as `COURIER__<SECTION>__<KEY>`.
//!
//! One file per section, each with its own `validate`; `Config::validate` runs
//! them and checks what relates two sections. Durations are humantime strings
//! (`"5s"`, `"250ms"`); the previous release's `*_ms` integers are still accepted
//! and reported (`legacy`).
//!
//! Secrets never live in the file: the API token, database and Redis passwords are
//! read from environment variables whose *names* the file may set.
//!
//! # Secrets
//!
//! Only environment variables named by the config (`api.token_env`,
//! `kafka.sasl_password_env`, `kafka.oauth_client_secret_env`, `kafka.ssl_key_password_env`,
//! `redis.password_env`, `enrichment.password_env`, `api.oauth2.client_secret_env`,
//! `api.signing.secret_env`), and files the config names (`api.tls.key_file`: its path in
//! the config, its content read at start; `api.token_file`, `api.oauth2.client_secret_file`,
//! `api.signing.secret_file`: re-read when they change, I33);
//! `Config::validate` refuses secrets in the
//! file (and a private key's content, `ssl.key.pem`: keys are given by path), refuses a
//! `*_env` value that does not look like a variable name (`^[A-Za-z_][A-Za-z0-9_]*$`: likely
//! the secret itself) without showing it, and
//! `Config::check_secrets` fails the start — and `check-config` — naming the field and the
//! variable when a named one is missing (PostgreSQL's only when PostgreSQL is used: enrichment
//! or the source-of-truth query). The token goes into a sensitive header value; the Kafka
//! secrets become librdkafka's `sasl.password`, `sasl.oauthbearer.client.secret` and
//! `ssl.key.password` (`KafkaConfig::secret_properties`), which librdkafka redacts.
//! `tests/security.rs`, `tests/sasl.rs`, `tests/kafka_security.rs` and `tests/stores_tls.rs`
//! search debug-level logs (and `/metrics`) for the secrets.
//!
//! Transport security, per connection:
//!
//! - **Kafka**: librdkafka's own TLS (OpenSSL) and SASL, from `[kafka.properties]`. The build
//!   (`Cargo.toml`: `ssl`, `zstd`, `curl-static`, `cmake-build`) has every codec, SASL PLAIN,
//!   SCRAM and OAUTHBEARER with OIDC token fetching (a static libcurl); a unit test reads
//!   librdkafka's `builtin.features` and fails when one is missing. With
//!   `sasl.oauthbearer.method = "oidc"` librdkafka fetches and renews the token itself
//!   (client credentials); `KafkaConfig::validate` requires the client id, the token
//!   endpoint and `oauth_client_secret_env` together.

mod api;
mod auth;
mod batch;
#[cfg(test)]
mod completeness;
mod degraded;
mod enrichment;
mod filters;
mod input;
mod kafka;
mod legacy;
mod ops;
mod pipeline;
mod redis;
pub mod reference;
mod retry;
pub(crate) mod schema_registry;
mod tracing;

pub(crate) use crate::core::batch::BatchSpec;
use api::is_loopback;
pub(crate) use api::CaMode;
pub use api::{ApiConfig, ApiTlsConfig};
pub(crate) use auth::{read_secret_file, AuthStyle, OAuth2Config, SecretSpec, SigningConfig};
pub(crate) use batch::{BatchConfig, BatchOverride, RateLimitUnit};
pub(crate) use degraded::millis;
pub(crate) use degraded::DegradedConfig;
pub(crate) use enrichment::{EnrichmentConfig, OnMissing, SslMode};
pub use filters::FilterConfig;
pub(crate) use input::InputConfig;
pub use kafka::{Compression, KafkaConfig};
pub use ops::LogFormat;
pub(crate) use ops::{LogConfig, MetricsConfig, SupervisionConfig, TestingConfig};
pub(crate) use pipeline::{Oversize, PipelineConfig};
pub(crate) use redis::RedisConfig;
pub(crate) use retry::RetryConfig;
pub(crate) use tracing::TracingConfig;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::Dict;
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config: {0}")]
    Load(String),
    #[error("config field `{field}`: {reason}")]
    Invalid { field: String, reason: String },
}

pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The broker, the consumer group and the three topics (main, DLQ, parking lot).
    pub kafka: KafkaConfig,
    /// What the records of the main topic look like.
    pub input: InputConfig,
    /// The external HTTP API, its client and the in-place retry policy.
    pub api: ApiConfig,
    /// How many events are worked on at once, in which order, and the memory budgets.
    pub pipeline: PipelineConfig,
    /// The PostgreSQL lookup (and cache) that adds a document to each event.
    pub enrichment: EnrichmentConfig,
    /// How many crashes of its parts the process absorbs before it exits.
    pub supervision: SupervisionConfig,
    /// The HTTP listener of `/metrics`, `/healthz`, `/readyz` and `/status`.
    pub metrics: MetricsConfig,
    /// Where the group's shared "API down" marker lives (and the group's rate limit).
    pub redis: RedisConfig,
    /// When the API is judged unavailable, partitions pause; when it recovers, the
    /// DLQ drains at a limited rate, then the main topic resumes.
    pub degraded: DegradedConfig,
    /// The DLQ retry policy per CloudEvents `type`, with a default.
    pub retry: RetryConfig,
    /// `[[filters]]`: events not delivered, by a CEL expression (none: every
    /// event is delivered, and no expression is evaluated).
    pub filters: Vec<FilterConfig>,
    /// The log's format and level.
    pub log: LogConfig,
    /// Optional OTLP export of delivery spans.
    pub tracing: TracingConfig,
    /// Fault hooks for tests (cargo feature `test-hooks` only). Inert unless set.
    pub testing: TestingConfig,
    /// Deprecated keys this config used (see `legacy`) and settings whose
    /// meaning changed, one line each: logged at start and printed by
    /// `check-config`.
    #[serde(skip)]
    pub deprecations: Vec<String>,
}

impl Config {
    /// Loads defaults ← file (if given and present) ← `COURIER__*` environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut sources = Sources::default();
        if let Some(p) = path {
            if !p.exists() {
                return Err(ConfigError::Load(format!("{} does not exist", p.display())));
            }
            sources.add(Toml::file(p))?;
        }
        sources.add(Env::prefixed("COURIER__").split("__"))?;
        sources.finish()
    }

    /// What `check-config` prints and `courier run` logs at WARN before it
    /// starts: each of [`Config::deprecations`], a `kafka.group_id` left at its
    /// default, and an `[enrichment]` configured but not enabled.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.deprecations.clone();
        out.extend(self.kafka.default_group_notice());
        out.extend(self.enrichment.unused_notice(self.uses_postgres()));
        out
    }

    /// Parses a TOML string (no environment): for tests and `check-config`.
    #[cfg(test)]
    pub(crate) fn from_toml(s: &str) -> Result<Config, ConfigError> {
        let mut sources = Sources::default();
        sources.add(Toml::string(s))?;
        sources.finish()
    }

    /// Checks what the types cannot: ranges, names, relations between fields.
    /// With batching on, `pipeline.concurrency` counts requests in flight
    /// (it counted events before issue 43): a value sized in events — at
    /// least the largest batch and above the default 512 — is worth a word,
    /// since it now allows that many requests of up to `max_events` each.
    /// The config still works either way (the byte budget bounds the events).
    fn batching_concurrency_notice(&self) -> Result<Option<String>, ConfigError> {
        if !self.batching()? {
            return Ok(None);
        }
        let batch = self.api.batch_spec()?;
        let routes = self.api.routes()?;
        let events = routes.max_batch_events(batch.as_deref());
        let c = self.pipeline.concurrency;
        if c <= PipelineConfig::default().concurrency || c < events {
            return Ok(None);
        }
        Ok(Some(format!(
            "pipeline.concurrency = {c} counts requests in flight when batching is on \
             (up to {c} requests of up to {events} events each, within \
             pipeline.max_in_flight_bytes); it counted events before. If it was sized \
             in events, set it to about {} (= {c} / {events})",
            (c / events).max(1)
        )))
    }

    /// `[[filters]]`, compiled (errors name the filter, line and column).
    pub(crate) fn filters(&self) -> Result<crate::core::expr::Filters, ConfigError> {
        filters::compile(&self.filters)
    }

    /// Whether any route batches (`[api.batch]`, or a route's `batch`).
    pub(crate) fn batching(&self) -> Result<bool, ConfigError> {
        Ok(self.api.batch_spec()?.is_some() || self.api.routes()?.any_batched())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.kafka.validate()?;
        self.pipeline.validate()?;
        self.input.validate()?;
        self.api.validate()?;
        self.api.validate_for_input(self.input.format)?;
        self.enrichment.validate(self.retry.uses_deadline())?;
        self.metrics.validate()?;
        self.degraded.validate()?;
        self.redis.validate()?;
        self.retry.validate()?;
        self.supervision.validate()?;
        self.log.validate()?;
        self.tracing.validate()?;
        self.testing.validate()?;
        self.filters()?;
        for (field, name) in [
            ("api.token_env", &self.api.token_env),
            ("kafka.sasl_password_env", &self.kafka.sasl_password_env),
            (
                "kafka.oauth_client_secret_env",
                &self.kafka.oauth_client_secret_env,
            ),
            (
                "kafka.ssl_key_password_env",
                &self.kafka.ssl_key_password_env,
            ),
            ("redis.password_env", &self.redis.password_env),
            ("enrichment.password_env", &self.enrichment.password_env),
        ] {
            check_env_name(field, name.as_deref())?;
        }
        let oauth2 = self.api.oauth2.as_ref();
        let signing = self.api.signing.as_ref();
        for (field, name) in [
            (
                "api.oauth2.client_secret_env",
                oauth2.and_then(|o| o.client_secret_env.as_deref()),
            ),
            (
                "api.signing.secret_env",
                signing.and_then(|s| s.secret_env.as_deref()),
            ),
        ] {
            check_env_name(field, name)?;
        }
        // A run keeps order only where a lane does: not with `unordered`.
        if self.pipeline.ordering == crate::core::ordering::OrderingMode::Unordered {
            let ordered =
                std::iter::once(("api.batch.ordered".to_string(), self.api.batch.ordered)).chain(
                    self.api.routes.iter().enumerate().map(|(i, r)| {
                        let on = r.batch.as_ref().and_then(|b| b.ordered);
                        (
                            format!("api.routes[{i}].batch.ordered"),
                            on.unwrap_or(false),
                        )
                    }),
                );
            if let Some((field, _)) = ordered.into_iter().find(|(_, on)| *on) {
                return Err(invalid(
                    &field,
                    "keeps each key's order within a batch; with pipeline.ordering = \"unordered\" \
                     there is none to keep (use \"key\" or \"partition\")",
                ));
            }
        }
        // Revocation must finish inside the rebalance: the drain deadline has to stay
        // below the session timeout and well below max.poll.interval.ms.
        let (p, k) = (&self.pipeline, &self.kafka);
        if p.drain_timeout >= k.session_timeout {
            return Err(invalid(
                "pipeline.drain_timeout",
                format!(
                    "must be below kafka.session_timeout ({})",
                    humantime::format_duration(k.session_timeout)
                ),
            ));
        }
        if p.drain_timeout * 2 >= k.max_poll_interval {
            return Err(invalid(
                "pipeline.drain_timeout",
                format!(
                    "must be below half of kafka.max_poll_interval ({})",
                    humantime::format_duration(k.max_poll_interval)
                ),
            ));
        }
        Ok(())
    }

    /// Checks that every secret the config names is present in the environment:
    /// the API token, Kafka's (SASL password, OIDC client secret, TLS key
    /// passphrase), Redis's password, and PostgreSQL's when PostgreSQL is used;
    /// and that the API's TLS files are readable PEM.
    pub fn check_secrets(&self) -> Result<(), ConfigError> {
        self.api.check_auth_secrets()?;
        self.api.check_tls_files()?;
        self.kafka.secret_properties()?;
        self.redis_password()?;
        if self.uses_postgres() {
            self.enrichment_password()?;
        }
        Ok(())
    }

    /// PostgreSQL is used for enrichment and for the deadline policies'
    /// source-of-truth query.
    pub(crate) fn uses_postgres(&self) -> bool {
        self.enrichment.enabled || !self.retry.source_query.is_empty()
    }

    /// The Redis password, read from the environment variable the config names.
    pub(crate) fn redis_password(&self) -> Result<Option<String>, ConfigError> {
        secret("redis.password_env", self.redis.password_env.as_deref())
    }

    /// The PostgreSQL password, read from the environment variable the config names.
    pub(crate) fn enrichment_password(&self) -> Result<Option<String>, ConfigError> {
        secret(
            "enrichment.password_env",
            self.enrichment.password_env.as_deref(),
        )
    }
}

/// A `*_env` field names an environment variable: letters, digits and `_`,
/// not starting with a digit (`^[A-Za-z_][A-Za-z0-9_]*$`). Anything else is
/// likely the secret itself, put there by mistake: refused, and the value is
/// never shown (the error goes to logs and terminals).
fn check_env_name(field: &str, name: Option<&str>) -> Result<(), ConfigError> {
    let Some(name) = name else {
        return Ok(());
    };
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Ok(());
    }
    Err(invalid(
        field,
        "must be the name of an environment variable (letters, digits and `_`, not starting \
         with a digit), not a value; what is there is not shown. If it is the secret itself, \
         put the secret in an environment variable, name that here, and rotate the secret",
    ))
}

/// The value of the environment variable a `*_env` field names; a named but
/// missing (or empty) variable is an error naming the field and the variable.
fn secret(field: &str, name: Option<&str>) -> Result<Option<String>, ConfigError> {
    match name {
        None => Ok(None),
        Some(name) => match std::env::var(name) {
            Ok(v) if !v.is_empty() => Ok(Some(v)),
            _ => Err(invalid(
                field,
                format!("environment variable {name} is not set"),
            )),
        },
    }
}

/// A CA file a `*.tls_ca_file` field names must exist, be readable and hold at
/// least one PEM certificate (checked by `check-config`, not only at the first
/// connection).
fn check_ca_file(field: &str, path: &Path) -> Result<(), ConfigError> {
    crate::store_tls::read_ca_file(path)
        .map(|_| ())
        .map_err(|e| invalid(field, e.to_string()))
}

/// Whether source `d` names `section.name` (any value).
fn names(d: &Dict, section: &str, name: &str) -> bool {
    matches!(d.get(section), Some(figment::value::Value::Dict(_, s)) if s.contains_key(name))
}

/// The sources of one config, each rewritten by `legacy::migrate` before it is
/// merged over the defaults (so an old key in the file and a new one in the
/// environment do not collide).
#[derive(Default)]
struct Sources {
    merged: Vec<Dict>,
    deprecations: Vec<String>,
}

impl Sources {
    fn add(&mut self, provider: impl Provider) -> Result<(), ConfigError> {
        let mut dict: Dict = Figment::from(provider)
            .extract()
            .map_err(|e| ConfigError::Load(e.to_string()))?;
        self.deprecations.extend(legacy::migrate(&mut dict)?);
        self.merged.push(dict);
        Ok(())
    }

    fn finish(self) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        for d in &self.merged {
            fig = fig.merge(Serialized::defaults(d));
        }
        let mut cfg: Config = fig.extract().map_err(|e| match e.into_iter().next() {
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
        })?;
        cfg.deprecations = self.deprecations;
        cfg.validate()?;
        if cfg.batching()? {
            let set = |name: &str| self.merged.iter().any(|d| names(d, "pipeline", name));
            cfg.pipeline.batching_defaults(
                set("max_in_flight_bytes"),
                set("max_in_flight_per_partition"),
            );
        }
        cfg.deprecations.extend(cfg.batching_concurrency_notice()?);
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ordering::OrderingMode;
    use std::time::Duration;

    #[test]
    fn defaults_are_valid() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.kafka.dlq_topic(), "events.dlq");
        assert_eq!(c.kafka.parking_topic(), "events.parking");
        assert_eq!(c.pipeline.ordering, OrderingMode::Key);
    }

    /// The guide's real-cluster examples, as they were (issue 59): a group left
    /// at its default and an `[enrichment]` without `enabled` and `query` are
    /// valid, but each is named; set right, neither is.
    #[test]
    fn warnings_name_a_default_group_and_an_enrichment_left_off() {
        let c = Config::from_toml(
            "[enrichment]\nurl = \"postgres://courier@db.example.com:5432/courier?sslmode=verify-full\"\n",
        )
        .unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("kafka.group_id is left at its default"),
            "{w:?}"
        );
        assert!(w[1].contains("enrichment.enabled is false"), "{w:?}");
        let c = Config::from_toml(
            "[kafka]\ngroup_id = \"courier-orders\"\n[enrichment]\nenabled = true\n\
             query = \"SELECT doc FROM profiles WHERE key = $1\"\n",
        )
        .unwrap();
        assert_eq!(c.warnings(), Vec::<String>::new());
    }

    #[test]
    fn shipped_config_is_valid() {
        let s =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/courier.toml"))
                .unwrap();
        let c = Config::from_toml(&s).unwrap();
        assert!(
            c.deprecations.is_empty(),
            "the shipped config uses deprecated keys: {:?}",
            c.deprecations
        );
    }

    /// A batching config whose `pipeline.concurrency` looks sized in events
    /// (the meaning before issue 43) starts, with one line saying what it
    /// means now; the default, an unbatched config and a count of requests
    /// below the batch size say nothing.
    #[test]
    fn a_concurrency_sized_in_events_with_batching_is_noticed() {
        let batched = "[api.batch]\nmax_events = 100\n";
        let c = Config::from_toml(&format!("[pipeline]\nconcurrency = 51200\n{batched}"))
            .expect("an old batching config still loads");
        assert_eq!(c.deprecations.len(), 1, "{:?}", c.deprecations);
        let d = &c.deprecations[0];
        assert!(d.contains("counts requests in flight"), "{d}");
        assert!(d.contains("about 512 (= 51200 / 100)"), "{d}");
        for quiet in [
            batched.to_string(),
            format!("[pipeline]\nconcurrency = 64\n{batched}"),
            "[pipeline]\nconcurrency = 51200\n".to_string(),
        ] {
            let c = Config::from_toml(&quiet).expect("loads");
            assert!(c.deprecations.is_empty(), "{quiet}: {:?}", c.deprecations);
        }
    }

    /// With batching on, the in-flight limits left unset take their
    /// batching defaults (bytes bound, not a count of events); a value set
    /// is kept; without batching the defaults are the usual ones.
    #[test]
    fn batching_raises_the_in_flight_limits_left_unset() {
        let limits = |toml: &str| {
            let p = Config::from_toml(toml).expect("loads").pipeline;
            (p.max_in_flight_bytes, p.max_in_flight_per_partition)
        };
        let batched = "[api.batch]\nmax_events = 100\n";
        let route = "[[api.routes]]\ntype = \"a.*\"\nurl = \"http://127.0.0.1:1/a\"\nbatch = { max_events = 10 }\n";
        assert_eq!(limits(""), (32 << 20, 1_000));
        assert_eq!(limits(batched), (64 << 20, 32_768));
        assert_eq!(limits(route), (64 << 20, 32_768));
        assert_eq!(
            limits(&format!(
                "[pipeline]\nmax_in_flight_bytes = 8388608\n{batched}"
            )),
            (8 << 20, 4_096)
        );
        assert_eq!(
            limits(&format!(
                "[pipeline]\nmax_in_flight_bytes = 1024\n{batched}"
            )),
            (1024, 1_000),
            "never below the unbatched default"
        );
        assert_eq!(
            limits(&format!(
                "[pipeline]\nmax_in_flight_per_partition = 700\n{batched}"
            )),
            (64 << 20, 700)
        );
        assert_eq!(
            limits(
                "[pipeline]\nmax_in_flight_per_partition = 700\nmax_in_flight_bytes = 1000000\n"
            ),
            (1_000_000, 700)
        );
    }

    fn field_of(toml: &str) -> String {
        match Config::from_toml(toml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn ordered_batches_need_batching_and_an_order_to_keep() {
        assert_eq!(
            field_of("[api.batch]\nordered = true"),
            "api.batch.ordered",
            "max_events = 1 batches nothing"
        );
        assert_eq!(
            field_of("[api.batch]\nmax_events = 10\nordered = true\n[pipeline]\nordering = \"unordered\""),
            "api.batch.ordered"
        );
        assert_eq!(
            field_of(
                "[pipeline]\nordering = \"unordered\"\n[[api.routes]]\ntype = \"t\"\nurl = \"http://localhost:8080/{type}\"\n\
                 batch = { max_events = 5, ordered = true }"
            ),
            "api.routes[0].batch.ordered"
        );
        for ordering in ["key", "partition"] {
            let toml = format!(
                "[api.batch]\nmax_events = 10\nordered = true\n[pipeline]\nordering = \"{ordering}\""
            );
            let c = Config::from_toml(&toml).expect("ordered runs in key and partition mode");
            assert!(c.api.batch_spec().expect("spec").expect("batched").ordered);
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
            field_of("[pipeline]\ndrain_timeout = \"60s\""),
            "pipeline.drain_timeout"
        );
        assert_eq!(
            field_of("[api]\nrequest_timeout = \"soon\""),
            "api.request_timeout"
        );
        assert_eq!(
            field_of("[degraded]\ndrain_rate_per_sec = inf"),
            "degraded.drain_rate_per_sec"
        );
        assert_eq!(field_of("[enrichment]\nenabled = true"), "enrichment.query");
        assert_eq!(
            field_of("[metrics]\nlisten = \"nowhere\""),
            "metrics.listen"
        );
        assert_eq!(field_of("[log]\nlevel = \"[[\""), "log.level");
    }

    #[test]
    fn durations_are_humantime_strings() {
        let c = Config::from_toml(
            "[api]\nrequest_timeout = \"2s 500ms\"\n[degraded]\nmin_pause = \"250ms\"\n\
             [retry.default]\nkind = \"deadline\"\ndeadline = \"1h\"\n\
             [retry]\nsource_query = \"select 1 where $1 = $1\"",
        )
        .unwrap();
        assert_eq!(c.api.request_timeout, Duration::from_millis(2_500));
        assert_eq!(c.degraded.min_pause, Duration::from_millis(250));
        assert_eq!(
            c.retry.default,
            crate::core::dlq_policy::DlqRetry::Deadline {
                deadline_ms: 3_600_000
            }
        );
        assert!(c.deprecations.is_empty());
    }

    /// The previous release's `*_ms` integers still work for one release, and
    /// each one is reported with the key to write instead.
    #[test]
    fn legacy_millisecond_keys_are_migrated_and_reported() {
        let c = Config::from_toml(
            "[api]\nrequest_timeout_ms = 2500\n[pipeline]\ndrain_timeout_ms = 3000\n\
             [retry]\nsource_query = \"select 1 where $1 = $1\"\n\
             [retry.types.\"order.paid\"]\nkind = \"deadline\"\ndeadline_ms = 60000",
        )
        .unwrap();
        assert_eq!(c.api.request_timeout, Duration::from_millis(2_500));
        assert_eq!(c.pipeline.drain_timeout, Duration::from_secs(3));
        assert_eq!(
            c.retry.types["order.paid"],
            crate::core::dlq_policy::DlqRetry::Deadline {
                deadline_ms: 60_000
            }
        );
        assert_eq!(c.deprecations.len(), 3, "{:?}", c.deprecations);
        assert!(c
            .deprecations
            .iter()
            .any(|d| d.contains("`api.request_timeout_ms`")
                && d.contains("api.request_timeout = \"2s 500ms\"")));
        // Both spellings in one source is ambiguous: refused, naming the old key.
        assert_eq!(
            field_of("[api]\nrequest_timeout_ms = 1\nrequest_timeout = \"1s\""),
            "api.request_timeout_ms"
        );
        assert_eq!(
            field_of("[api]\nrequest_timeout_ms = -5"),
            "api.request_timeout_ms"
        );
    }

    #[test]
    fn kafka_secrets_and_codecs() {
        let c = Config::from_toml("[kafka]\nproducer_compression = \"lz4\"").unwrap();
        assert_eq!(c.kafka.producer_compression, Compression::Lz4);
        assert_eq!(
            Config::from_toml("").unwrap().kafka.producer_compression,
            Compression::Zstd
        );
        assert_eq!(
            field_of("[kafka]\nproducer_compression = \"brotli\""),
            "kafka.producer_compression"
        );
        for (key, field) in [
            ("compression.type", "kafka.producer_compression"),
            (
                "sasl.oauthbearer.client.secret",
                "kafka.oauth_client_secret_env",
            ),
            ("ssl.key.password", "kafka.ssl_key_password_env"),
            ("ssl.key.pem", "ssl.key.location"),
        ] {
            match Config::from_toml(&format!("[kafka.properties]\n\"{key}\" = \"x\"")) {
                Err(ConfigError::Invalid { field: f, reason }) => {
                    assert_eq!(f, format!("kafka.properties.{key}"));
                    assert!(reason.contains(field), "{key}: {reason}");
                }
                other => panic!("{key}: expected an error, got {other:?}"),
            }
        }
        let oidc = "[kafka.properties]\n\"sasl.oauthbearer.method\" = \"OIDC\"\n";
        assert_eq!(
            field_of(oidc),
            "kafka.properties.sasl.oauthbearer.client.id"
        );
        let oidc = format!(
            "{oidc}\"sasl.oauthbearer.client.id\" = \"c\"\n\"sasl.oauthbearer.token.endpoint.url\" = \"https://idp/token\"\n"
        );
        assert_eq!(field_of(&oidc), "kafka.oauth_client_secret_env");
        let c = Config::from_toml(&format!(
            "[kafka]\noauth_client_secret_env = \"COURIER_TEST_UNSET_OIDC\"\n{oidc}"
        ))
        .unwrap();
        match c.check_secrets() {
            Err(ConfigError::Invalid { field, reason }) => {
                assert_eq!(field, "kafka.oauth_client_secret_env");
                assert!(reason.contains("COURIER_TEST_UNSET_OIDC"), "{reason}");
            }
            other => panic!("expected the missing variable, got {other:?}"),
        }
    }

    #[test]
    fn store_passwords_are_checked_where_the_store_is_used() {
        let missing = |toml: &str| match Config::from_toml(toml).unwrap().check_secrets() {
            Err(ConfigError::Invalid { field, reason }) => Some((field, reason)),
            Ok(()) => None,
            Err(e) => panic!("{e}"),
        };
        let (field, reason) =
            missing("[redis]\npassword_env = \"COURIER_TEST_UNSET_REDIS\"").unwrap();
        assert_eq!(field, "redis.password_env");
        assert!(reason.contains("COURIER_TEST_UNSET_REDIS"));
        let pg = "[enrichment]\npassword_env = \"COURIER_TEST_UNSET_PG\"\n";
        // PostgreSQL unused: its password is not needed.
        assert_eq!(missing(pg), None);
        let (field, reason) = missing(&format!(
            "{pg}enabled = true\nquery = \"select doc from t where k = $1\""
        ))
        .unwrap();
        assert_eq!(field, "enrichment.password_env");
        assert!(reason.contains("COURIER_TEST_UNSET_PG"));
        let (field, _) = missing(&format!(
            "{pg}[retry]\nsource_query = \"select v from t where k = $1\""
        ))
        .unwrap();
        assert_eq!(field, "enrichment.password_env");
    }

    /// A `*_env` field holding the secret itself by mistake: refused, naming
    /// the field, never echoing the value (it used to come back in
    /// "environment variable <the secret> is not set").
    #[test]
    fn env_fields_must_be_variable_names_and_are_never_echoed() {
        let secret = "sk_live_9f8e-7d6c/5b4a+3c2d==";
        for (section, key) in [
            ("api", "token_env"),
            ("kafka", "sasl_password_env"),
            ("kafka", "oauth_client_secret_env"),
            ("kafka", "ssl_key_password_env"),
            ("redis", "password_env"),
            ("enrichment", "password_env"),
        ] {
            let toml = format!("[{section}]\n{key} = \"{secret}\"\n");
            let err = Config::from_toml(&toml)
                .and_then(|c| c.check_secrets())
                .expect_err("a value that is no variable name is refused");
            let shown = err.to_string();
            assert!(shown.contains(&format!("{section}.{key}")), "{shown}");
            assert!(!shown.contains("sk_live"), "the value is echoed: {shown}");
            for bad in ["", "1ABC", "MY VAR", "A-B", "ÄPFEL"] {
                let toml = format!("[{section}]\n{key} = \"{bad}\"\n");
                assert_eq!(field_of(&toml), format!("{section}.{key}"), "{bad:?}");
            }
        }
        for good in ["COURIER_API_TOKEN", "_x", "a1"] {
            let c = Config::from_toml(&format!("[api]\ntoken_env = \"{good}\"")).unwrap();
            assert_eq!(c.api.token_env.as_deref(), Some(good));
        }
    }

    /// Plain `redis://` with a password to a host other than loopback: the
    /// password would cross the network in clear; refused unless allowed.
    #[test]
    fn plaintext_redis_with_a_password_only_to_loopback_unless_allowed() {
        let with = |url: &str, extra: &str| {
            format!("[redis]\nurl = \"{url}\"\npassword_env = \"REDIS_PW\"\n{extra}")
        };
        for url in [
            "redis://redis.internal:6379",
            "redis://10.1.2.3:6379/2",
            "valkey://v:6379",
        ] {
            assert_eq!(field_of(&with(url, "")), "redis.url", "{url}");
            assert!(
                Config::from_toml(&with(url, "allow_plaintext = true")).is_ok(),
                "{url}"
            );
        }
        for url in [
            "redis://127.0.0.1:6379",
            "redis://localhost:6379",
            "redis://[::1]:6379",
            "rediss://redis.internal:6379",
        ] {
            assert!(Config::from_toml(&with(url, "")).is_ok(), "{url}");
        }
        // Without a password nothing secret crosses.
        assert!(Config::from_toml("[redis]\nurl = \"redis://redis.internal:6379\"").is_ok());
    }

    /// Without `sslmode`, PostgreSQL is verified (`verify-full`), except on
    /// loopback or a Unix socket (`prefer`); an explicit mode is kept.
    #[test]
    fn postgres_verifies_the_server_by_default() {
        let on = "[enrichment]\nenabled = true\nquery = \"select d from t where k = $1\"\n";
        for (url, want) in [
            ("postgres://u@db.example.com:5432/db", SslMode::VerifyFull),
            (
                "postgres://u@10.0.0.5/db?connect_timeout=3",
                SslMode::VerifyFull,
            ),
            ("postgres://u@127.0.0.1:5432/db", SslMode::Prefer),
            ("postgres://u@localhost/db", SslMode::Prefer),
            ("postgres://u@[::1]:5432/db", SslMode::Prefer),
            ("postgres:///db?host=/run/postgresql", SslMode::Prefer),
            (
                "postgres://u@127.0.0.1/db?host=db.example.com",
                SslMode::VerifyFull,
            ),
            (
                "postgres://u@127.0.0.1/db?host=localhost,db2.example.com",
                SslMode::VerifyFull,
            ),
            (
                "postgres://u@db.example.com/db?sslmode=prefer",
                SslMode::Prefer,
            ),
            (
                "postgres://u@db.example.com/db?sslmode=disable",
                SslMode::Disable,
            ),
        ] {
            let c = Config::from_toml(&format!("{on}url = \"{url}\"")).unwrap();
            assert_eq!(c.enrichment.ssl_mode().unwrap(), want, "{url}");
        }
        // The default URL (loopback) still connects to a PostgreSQL without TLS.
        assert_eq!(
            Config::default().enrichment.ssl_mode().unwrap(),
            SslMode::Prefer
        );
    }

    #[test]
    fn store_tls_settings() {
        assert_eq!(
            field_of("[redis]\nurl = \"redis://h:6379\"\ntls_ca_file = \"/ca.pem\""),
            "redis.tls_ca_file"
        );
        assert_eq!(
            field_of("[redis]\nurl = \"rediss://h:6379\"\ntls_ca_file = \"/nonexistent/ca.pem\""),
            "redis.tls_ca_file"
        );
        assert_eq!(field_of("[redis]\nurl = \"http://h:6379\""), "redis.url");
        let c = Config::from_toml("[redis]\nurl = \"rediss://h:6379\"").unwrap();
        assert!(c.redis.tls());
        assert!(!Config::from_toml("").unwrap().redis.tls());

        let on = "[enrichment]\nenabled = true\nquery = \"select d from t where k = $1\"\n";
        for (mode, want) in [
            ("", SslMode::VerifyFull),
            ("?sslmode=prefer", SslMode::Prefer),
            ("?sslmode=disable", SslMode::Disable),
            ("?sslmode=require", SslMode::Require),
            ("?sslmode=verify-ca", SslMode::VerifyCa),
            (
                "?connect_timeout=3&sslmode=verify-full",
                SslMode::VerifyFull,
            ),
        ] {
            let c =
                Config::from_toml(&format!("{on}url = \"postgres://u@h:5432/db{mode}\"")).unwrap();
            assert_eq!(c.enrichment.ssl_mode().unwrap(), want, "{mode}");
            assert!(!c.enrichment.url_for_driver().contains("sslmode"));
        }
        let c = Config::from_toml(&format!(
            "{on}url = \"postgres://u@h:5432/db?connect_timeout=3&sslmode=verify-full\""
        ))
        .unwrap();
        assert_eq!(
            c.enrichment.url_for_driver(),
            "postgres://u@h:5432/db?connect_timeout=3"
        );
        assert_eq!(
            field_of(&format!("{on}url = \"postgres://u@h/db?sslmode=allow\"")),
            "enrichment.url"
        );
        assert_eq!(
            field_of(&format!(
                "{on}url = \"postgres://u@h/db?sslrootcert=/ca.pem\""
            )),
            "enrichment.url"
        );
        assert_eq!(
            field_of(&format!(
                "{on}url = \"postgres://u@h/db?sslmode=disable\"\ntls_ca_file = \"/ca.pem\""
            )),
            "enrichment.tls_ca_file"
        );
    }

    #[test]
    fn test_hooks_only_in_a_test_build() {
        let r = Config::from_toml("[testing]\ncrash_on_event_id = \"x\"");
        if TestingConfig::HOOKS_BUILT_IN {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(field_of("[testing]\ncrash_on_event_id = \"x\""), "testing");
        }
    }
}
