//! `[enrichment]`: the PostgreSQL lookup (and cache) that adds a document to each event.

use super::{check_ca_file, invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
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
    /// Look up each event's key in PostgreSQL and add the document found.
    pub enabled: bool,
    /// `postgres://user@host:port/db[?sslmode=…]` — without the password.
    /// `sslmode` as libpq: `disable`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`. Without it: `verify-full`, except to a loopback host or a
    /// Unix socket, where `prefer` (see [`EnrichmentConfig::ssl_mode`]).
    pub url: String,
    /// PEM bundle of the CA(s) that sign the server's certificate; replaces the
    /// platform's roots. With `require`/`prefer` it makes the chain verified
    /// (as libpq's root certificate file does).
    pub tls_ca_file: Option<PathBuf>,
    /// Name of the environment variable holding the database password.
    pub password_env: Option<String>,
    /// Query with one parameter (`$1`, the Kafka key as text) returning one column
    /// of type `json`/`jsonb`.
    pub query: String,
    /// Attribute under which the looked-up JSON is added to the event.
    pub field: String,
    pub on_missing: OnMissing,
    /// Keys kept in the lookup cache.
    pub cache_capacity: u64,
    /// The cache's size in bytes (keys and JSON documents, as serialised).
    pub cache_max_bytes: u64,
    /// How long a cached lookup is used.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// Database connections.
    pub pool_size: usize,
    /// Deadline of one lookup.
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
}

impl Default for EnrichmentConfig {
    fn default() -> Self {
        EnrichmentConfig {
            enabled: false,
            url: "postgres://courier@127.0.0.1:5432/courier".into(),
            tls_ca_file: None,
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
    /// `[enrichment]` given a database or a query but not `enabled` (and no
    /// source-of-truth query using the database, `used`): no lookup is made.
    pub(crate) fn unused_notice(&self, used: bool) -> Option<String> {
        let default = EnrichmentConfig::default();
        let configured = self.url != default.url || !self.query.is_empty();
        (!self.enabled && !used && configured).then(|| {
            "[enrichment] names a database or a query, but enrichment.enabled is false: \
             no event is enriched (set enabled = true, with a query)"
                .to_string()
        })
    }

    /// The URL is checked whenever it may be used: by enrichment, or by the
    /// deadline policy's source-of-truth query (`needed`).
    pub(crate) fn validate(&self, needed: bool) -> Result<(), ConfigError> {
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
            let mode = self.ssl_mode()?;
            if let Some(ca) = &self.tls_ca_file {
                if mode == SslMode::Disable {
                    return Err(invalid(
                        "enrichment.tls_ca_file",
                        "is set but enrichment.url says sslmode=disable: the connection would not use TLS",
                    ));
                }
                check_ca_file("enrichment.tls_ca_file", ca)?;
            }
        }
        Ok(())
    }

    /// The URL's `sslmode`; when absent, [`SslMode::VerifyFull`] — not libpq's
    /// `prefer`, which falls back to plain text and checks no certificate (an
    /// attacker on the path reads the password and every lookup), nor
    /// `verify-ca`, which accepts any certificate the CA signed, for any host.
    /// Only `verify-full` is what someone who wrote a host name expects: that
    /// host, over TLS. Exception: a loopback host (`localhost`, 127.0.0.0/8,
    /// ::1) or a Unix socket keeps `prefer` — nothing crosses a network there,
    /// a sidecar or local PostgreSQL rarely has TLS and never a certificate for
    /// 127.0.0.1, and libpq's own default is `prefer`. Explicit modes are kept
    /// as written.
    pub(crate) fn ssl_mode(&self) -> Result<SslMode, ConfigError> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|err| invalid("enrichment.url", err.to_string()))?;
        let mut mode = if pg_host_is_local(&url) {
            SslMode::Prefer
        } else {
            SslMode::VerifyFull
        };
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "sslmode" => {
                    mode = SslMode::parse(&v).ok_or_else(|| {
                        invalid(
                            "enrichment.url",
                            format!("sslmode={v} is not one of disable, prefer, require, verify-ca, verify-full"),
                        )
                    })?
                }
                "sslrootcert" | "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(invalid(
                        "enrichment.url",
                        format!("{k} is not read from the URL: give the CA bundle in enrichment.tls_ca_file"),
                    ))
                }
                _ => {}
            }
        }
        Ok(mode)
    }

    /// The URL without `sslmode` (which tokio-postgres only knows as
    /// disable/prefer/require): Courier applies the mode itself.
    pub(crate) fn url_for_driver(&self) -> String {
        match reqwest::Url::parse(&self.url) {
            Ok(mut url) => {
                let rest: Vec<(String, String)> = url
                    .query_pairs()
                    .filter(|(k, _)| k != "sslmode")
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect();
                if rest.is_empty() {
                    url.set_query(None);
                } else {
                    url.query_pairs_mut().clear().extend_pairs(rest);
                }
                url.to_string()
            }
            Err(_) => self.url.clone(),
        }
    }
}

/// Whether every host a PostgreSQL URL names is loopback or a Unix socket
/// directory (`?host=/run/postgresql`, or no host at all).
fn pg_host_is_local(url: &reqwest::Url) -> bool {
    let hosts = url
        .query_pairs()
        .find(|(k, _)| k == "host")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| url.host_str().unwrap_or_default().to_string());
    hosts.split(',').all(|h| {
        let h = h.trim();
        if h.is_empty() || h.starts_with('/') || h.starts_with("%2F") || h.starts_with("%2f") {
            return true;
        }
        reqwest::Url::parse(&format!("postgres://{h}/")).is_ok_and(|u| super::is_loopback(&u))
    })
}

/// libpq's `sslmode` values (`allow` is not offered: it starts in plain text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain text.
    Disable,
    /// TLS if the server offers it, plain text otherwise; certificate not
    /// checked unless `tls_ca_file` is set.
    Prefer,
    /// TLS or no connection; certificate not checked unless `tls_ca_file` is set.
    Require,
    /// TLS, the chain checked, any host name.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}
