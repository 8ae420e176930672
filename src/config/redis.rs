//! `[redis]`: where the shared "API down" marker lives.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            password_env: None,
            key_prefix: "courier".into(),
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(1),
        }
    }
}

impl RedisConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if reqwest::Url::parse(&self.url).map_or(true, |u| u.password().is_some()) {
            return Err(invalid(
                "redis.url",
                "must be a redis:// URL without a password (use redis.password_env)",
            ));
        }
        if self.command_timeout.is_zero() {
            return Err(invalid("redis.command_timeout", "must be above 0"));
        }
        Ok(())
    }
}
