//! `[api]`: the external HTTP API, its client and the in-place retry policy.

use super::{invalid, ConfigError};
use crate::core::backoff::RetryPolicy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    pub url: String,
    /// Total deadline of one request (connect, send, answer).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Tries per event on the main path, the first included.
    pub max_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub retry_base: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// No in-place retry starts later than this after the first try.
    #[serde(with = "humantime_serde")]
    pub retry_budget: Duration,
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
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            max_attempts: 3,
            retry_base: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(1),
            retry_budget: Duration::from_secs(2),
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
            base_delay: self.retry_base,
            max_delay: self.retry_max_delay,
            total_budget: self.retry_budget,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| invalid("api.url", e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("api.url", "scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "api.url",
                "must not carry credentials: use api.token_env",
            ));
        }
        if self.max_attempts == 0 {
            return Err(invalid("api.max_attempts", "must be at least 1"));
        }
        if self.request_timeout.is_zero() {
            return Err(invalid("api.request_timeout", "must be above 0"));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid("api.connect_timeout", "must be above 0"));
        }
        for name in self.headers.keys() {
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
        if let Some(env) = &self.token_env {
            if env.is_empty() {
                return Err(invalid(
                    "api.token_env",
                    "must name an environment variable",
                ));
            }
        }
        Ok(())
    }
}
