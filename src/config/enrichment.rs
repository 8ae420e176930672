//! `[enrichment]`: the PostgreSQL lookup (and cache) that adds a document to each event.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// The cache's size in bytes (keys and JSON documents, as serialised).
    pub cache_max_bytes: u64,
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    pub pool_size: usize,
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
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
            cache_max_bytes: 64 * 1024 * 1024,
            cache_ttl: Duration::from_secs(60),
            pool_size: 8,
            query_timeout: Duration::from_secs(1),
        }
    }
}

impl EnrichmentConfig {
    /// The URL is checked whenever it may be used: by enrichment, or by the
    /// deadline policy's source-of-truth query (`needed`).
    pub fn validate(&self, needed: bool) -> Result<(), ConfigError> {
        if self.enabled {
            if self.query.trim().is_empty() {
                return Err(invalid(
                    "enrichment.query",
                    "is required when enrichment is enabled",
                ));
            }
            if !self.query.contains("$1") {
                return Err(invalid(
                    "enrichment.query",
                    "must use `$1` for the entity key",
                ));
            }
            if self.pool_size == 0 {
                return Err(invalid("enrichment.pool_size", "must be at least 1"));
            }
            if self.cache_max_bytes == 0 {
                return Err(invalid("enrichment.cache_max_bytes", "must be at least 1"));
            }
        }
        if self.enabled || needed {
            let u = reqwest::Url::parse(&self.url)
                .map_err(|err| invalid("enrichment.url", err.to_string()))?;
            if u.password().is_some() {
                return Err(invalid(
                    "enrichment.url",
                    "must not carry a password: use enrichment.password_env",
                ));
            }
            if self.query_timeout.is_zero() {
                return Err(invalid("enrichment.query_timeout", "must be above 0"));
            }
        }
        Ok(())
    }
}
