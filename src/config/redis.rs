//! `[redis]`: where the shared "API down" marker lives.

use super::{check_ca_file, invalid, is_loopback, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port[/db]`, or `rediss://` for TLS; without a password
    /// (see `password_env`).
    pub url: String,
    /// PEM bundle of the CA(s) that sign the server's certificate, with
    /// `rediss://`; replaces the platform's roots. Unset: the platform's roots.
    pub tls_ca_file: Option<PathBuf>,
    /// Name of the environment variable holding the Redis password.
    pub password_env: Option<String>,
    /// Key prefix; the marker is `<prefix>:<group>:api-down`.
    pub key_prefix: String,
    /// Every Redis command gives up after this long: Redis is never allowed to
    /// stall the health verdict.
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    /// Deadline of a connection attempt (Redis is reconnected in the background).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Allow plain `redis://` with a password (`password_env`) to a host other
    /// than loopback: the password (and the group's keys) would cross the
    /// network in clear. Off: such a config is refused; use `rediss://`.
    pub allow_plaintext: bool,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            tls_ca_file: None,
            password_env: None,
            key_prefix: "courier".into(),
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(1),
            allow_plaintext: false,
        }
    }
}

impl RedisConfig {
    /// `rediss://` (or `valkeys://`): TLS, the host name verified.
    pub(crate) fn tls(&self) -> bool {
        self.scheme()
            .is_some_and(|s| s.starts_with("rediss") || s.starts_with("valkeys"))
    }

    fn scheme(&self) -> Option<String> {
        reqwest::Url::parse(&self.url)
            .ok()
            .map(|u| u.scheme().to_ascii_lowercase())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let url = reqwest::Url::parse(&self.url).ok();
        if url.as_ref().is_none_or(|u| u.password().is_some()) {
            return Err(invalid(
                "redis.url",
                "must be a redis:// or rediss:// URL without a password (use redis.password_env)",
            ));
        }
        let scheme = self.scheme().unwrap_or_default();
        if !(scheme.starts_with("redis") || scheme.starts_with("valkey")) {
            return Err(invalid(
                "redis.url",
                format!("`{scheme}://` is not a Redis URL: use redis:// or rediss:// (TLS)"),
            ));
        }
        if let Some(u) = &url {
            if !self.tls() && self.password_env.is_some() && !self.allow_plaintext && !is_local(u) {
                return Err(invalid(
                    "redis.url",
                    format!(
                        "is plain redis:// to {}, which is not loopback, and redis.password_env is set: \
                         the password would cross the network in clear. Use rediss:// (TLS), or set \
                         redis.allow_plaintext = true if the network is trusted",
                        u.host_str().unwrap_or_default()
                    ),
                ));
            }
        }
        if let Some(ca) = &self.tls_ca_file {
            if !self.tls() {
                return Err(invalid(
                    "redis.tls_ca_file",
                    "is set but redis.url is not rediss://: the connection would not use TLS",
                ));
            }
            check_ca_file("redis.tls_ca_file", ca)?;
        }
        if self.command_timeout.is_zero() {
            return Err(invalid("redis.command_timeout", "must be above 0"));
        }
        Ok(())
    }
}

/// Loopback, or no host at all (a Unix socket: nothing crosses a network).
fn is_local(u: &reqwest::Url) -> bool {
    u.host_str().is_none_or(str::is_empty) || is_loopback(u)
}
