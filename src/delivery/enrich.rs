//! Enrichment: a PostgreSQL lookup by entity key behind a moka cache.
//!
//! Database errors are transient for the event (retried, then DLQ), never a reason
//! to park it. Concurrent misses of one key are merged into one query
//! (`try_get_with`), and errors are not cached.

use crate::config::{EnrichmentConfig, SslMode};
use crate::store_tls::{self, PgTls, Verify};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use moka::future::Cache;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum EnrichError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database query failed: {0}")]
    Query(String),
    #[error("database query timed out")]
    Timeout,
}

#[derive(Debug, thiserror::Error)]
pub enum EnrichSetupError {
    #[error("enrichment.url: {0}")]
    Url(String),
    #[error("enrichment pool: {0}")]
    Pool(String),
    #[error("enrichment.tls_ca_file: {0}")]
    Tls(#[from] crate::store_tls::StoreTlsError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The URL asks for TLS (or a verified certificate) and the server cannot
    /// give it: refused at start, never downgraded.
    #[error("enrichment.url (sslmode={mode}): {reason}")]
    Handshake { mode: &'static str, reason: String },
}

pub(crate) struct Enricher {
    pool: Pool,
    query: String,
    cache: Cache<String, Option<Arc<Value>>>,
    timeout: Duration,
    /// The cache's weighted size (bytes), shown at each lookup.
    cache_bytes: metrics::Gauge,
}

/// What one cached entry weighs besides its key and document (moka's entry,
/// the `Arc`, the `Value` tree's nodes: a rough, deliberately generous figure).
const ENTRY_OVERHEAD: u64 = 128;

/// The enrichment cache, bounded in bytes: each entry weighs its key and its
/// JSON document as serialised, but at least `cache_max_bytes /
/// cache_capacity`, so the cache also never holds more than `cache_capacity`
/// entries.
fn cache(cfg: &EnrichmentConfig) -> Cache<String, Option<Arc<Value>>> {
    let floor = cfg.cache_max_bytes / cfg.cache_capacity.max(1);
    let max = if cfg.cache_capacity == 0 {
        0
    } else {
        cfg.cache_max_bytes
    };
    Cache::builder()
        .max_capacity(max)
        .weigher(move |key: &String, doc: &Option<Arc<Value>>| {
            let bytes = key.len() as u64 + doc.as_deref().map_or(0, json_bytes) + ENTRY_OVERHEAD;
            u32::try_from(bytes.max(floor)).unwrap_or(u32::MAX)
        })
        .time_to_live(cfg.cache_ttl)
        .build()
}

/// The size of `v` serialised as JSON.
fn json_bytes(v: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// A small connection pool to PostgreSQL (also used by the source-of-truth
/// check), with TLS as the URL's `sslmode` asks (`config::SslMode`): no TLS
/// for `disable`; rustls otherwise, the certificate checked as libpq would.
pub(crate) fn pg_pool(
    cfg: &EnrichmentConfig,
    password: Option<String>,
) -> Result<Pool, EnrichSetupError> {
    let mode = cfg.ssl_mode()?;
    let mut pg: tokio_postgres::Config = cfg
        .url_for_driver()
        .parse()
        .map_err(|e: tokio_postgres::Error| EnrichSetupError::Url(e.to_string()))?;
    if let Some(p) = password {
        pg.password(p);
    }
    pg.connect_timeout(cfg.query_timeout.max(Duration::from_millis(500)));
    pg.application_name("courier");
    let manager = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let verify = match mode {
        SslMode::Disable => None,
        SslMode::VerifyFull => Some(Verify::Full),
        SslMode::VerifyCa => Some(Verify::Chain),
        SslMode::Prefer | SslMode::Require if cfg.tls_ca_file.is_some() => Some(Verify::Chain),
        SslMode::Prefer | SslMode::Require => Some(Verify::Nothing),
    };
    let mgr = match verify {
        None => {
            pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
            Manager::from_config(pg, tokio_postgres::NoTls, manager)
        }
        Some(verify) => {
            pg.ssl_mode(if mode == SslMode::Prefer {
                tokio_postgres::config::SslMode::Prefer
            } else {
                tokio_postgres::config::SslMode::Require
            });
            let tls = store_tls::client_config(cfg.tls_ca_file.as_deref(), verify)?;
            Manager::from_config(pg, PgTls::new(tls), manager)
        }
    };
    Pool::builder(mgr)
        .max_size(cfg.pool_size)
        .build()
        .map_err(|e| EnrichSetupError::Pool(e.to_string()))
}

/// One connection at start, so that a URL asking for TLS the server cannot
/// give (no TLS, an untrusted or expired certificate, another host name) stops
/// the start with the reason instead of failing every lookup. A database that
/// is merely unreachable does not stop it: its lookups are transient failures
/// (retried, then the DLQ) until it is back.
pub(crate) async fn check_at_start(
    cfg: &EnrichmentConfig,
    password: Option<String>,
) -> Result<(), EnrichSetupError> {
    let mode = cfg.ssl_mode()?;
    let pool = pg_pool(cfg, password)?;
    let deadline = cfg.query_timeout.max(Duration::from_secs(2));
    match tokio::time::timeout(deadline, pool.get()).await {
        Ok(Ok(_)) => {
            tracing::info!(sslmode = mode.as_str(), "PostgreSQL reachable");
            Ok(())
        }
        Ok(Err(deadpool_postgres::PoolError::Backend(e))) if is_tls_failure(&e) => {
            Err(EnrichSetupError::Handshake {
                mode: mode.as_str(),
                reason: with_causes(&e),
            })
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "PostgreSQL unreachable at start: lookups fail (transient: retried, then the DLQ) until it is back");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(
                timeout = ?deadline,
                "PostgreSQL did not answer at start: lookups fail (transient: retried, then the DLQ) until it is back"
            );
            Ok(())
        }
    }
}

/// An error and its causes, `: `-separated (tokio-postgres's own text leaves
/// the cause out).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// tokio-postgres reports every TLS failure — the server refusing TLS under
/// `require`, a failed handshake or certificate check — with this text (its
/// error kind is not public); `tests/stores_tls.rs` exercises both.
fn is_tls_failure(e: &tokio_postgres::Error) -> bool {
    e.to_string().starts_with("error performing TLS handshake")
}

impl Enricher {
    pub(crate) fn new(
        cfg: &EnrichmentConfig,
        password: Option<String>,
    ) -> Result<Enricher, EnrichSetupError> {
        let pool = pg_pool(cfg, password)?;
        let m = crate::metrics::MEMORY_BUDGET;
        metrics::gauge!(m, "budget" => "enrichment_cache").set(cfg.cache_max_bytes as f64);
        Ok(Enricher {
            pool,
            query: cfg.query.clone(),
            cache: cache(cfg),
            timeout: cfg.query_timeout,
            cache_bytes: metrics::gauge!(crate::metrics::MEMORY_BUDGET_USED, "budget" => "enrichment_cache"),
        })
    }

    /// The enrichment document for `key`, `None` when the row does not exist.
    pub(crate) async fn lookup(&self, key: &str) -> Result<Option<Arc<Value>>, EnrichError> {
        self.cache_bytes.set(self.cache.weighted_size() as f64);
        if let Some(hit) = self.cache.get(key).await {
            metrics::counter!(crate::metrics::ENRICH_CACHE, "result" => "hit").increment(1);
            return Ok(hit);
        }
        metrics::counter!(crate::metrics::ENRICH_CACHE, "result" => "miss").increment(1);
        self.cache
            .try_get_with(key.to_string(), self.query_db(key))
            .await
            .map_err(|e: Arc<EnrichError>| (*e).clone())
    }

    async fn query_db(&self, key: &str) -> Result<Option<Arc<Value>>, EnrichError> {
        match lookup_row(&self.pool, &self.query, key, self.timeout).await? {
            None => Ok(None),
            Some(row) => {
                let v: Value = row
                    .try_get(0)
                    .map_err(|e| EnrichError::Query(e.to_string()))?;
                Ok(Some(Arc::new(v)))
            }
        }
    }
}

/// The source of truth for `deadline` retry policies: the entity's current
/// version, by key.
pub(crate) struct SourceOfTruth {
    pool: Pool,
    query: String,
    timeout: Duration,
}

impl SourceOfTruth {
    pub(crate) fn new(pool: Pool, query: String, timeout: Duration) -> SourceOfTruth {
        SourceOfTruth {
            pool,
            query,
            timeout,
        }
    }

    /// `Ok(None)`: no row for the key.
    pub(crate) async fn current_version(&self, key: &str) -> Result<Option<i64>, EnrichError> {
        match lookup_row(&self.pool, &self.query, key, self.timeout).await? {
            None => Ok(None),
            Some(row) => row
                .try_get::<_, i64>(0)
                .map(Some)
                .or_else(|_| row.try_get::<_, i32>(0).map(|v| Some(v as i64)))
                .map_err(|e| EnrichError::Query(e.to_string())),
        }
    }
}

/// Runs a one-parameter query (`$1` = the key) within `timeout`; at most one row.
async fn lookup_row(
    pool: &Pool,
    query: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<tokio_postgres::Row>, EnrichError> {
    let work = async {
        let client = pool
            .get()
            .await
            .map_err(|e| EnrichError::Unavailable(e.to_string()))?;
        client
            .query_opt(query, &[&key])
            .await
            .map_err(|e| EnrichError::Query(e.to_string()))
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| EnrichError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(capacity: u64, max_bytes: u64) -> EnrichmentConfig {
        EnrichmentConfig {
            cache_capacity: capacity,
            cache_max_bytes: max_bytes,
            ..EnrichmentConfig::default()
        }
    }

    fn doc(bytes: usize) -> Option<Arc<Value>> {
        Some(Arc::new(serde_json::json!({ "pad": "x".repeat(bytes) })))
    }

    /// Issue 16 item 2: the cache was bounded in entries only, so large
    /// documents could fill memory. It now weighs each entry in bytes.
    #[tokio::test]
    async fn the_cache_is_bounded_in_bytes() {
        let c = cache(&cfg(100_000, 100_000));
        for i in 0..200 {
            c.insert(format!("k{i}"), doc(10_000)).await;
        }
        c.run_pending_tasks().await;
        assert!(c.weighted_size() <= 100_000, "{}", c.weighted_size());
        assert!(c.entry_count() <= 10, "{} entries", c.entry_count());
        assert!(c.entry_count() > 0);
    }

    /// Small documents: the entry count still stays within `cache_capacity`.
    #[tokio::test]
    async fn small_entries_stay_within_the_capacity() {
        let c = cache(&cfg(50, 1_000_000));
        for i in 0..500 {
            c.insert(format!("k{i}"), None).await;
        }
        c.run_pending_tasks().await;
        assert!(c.entry_count() <= 50, "{} entries", c.entry_count());
    }

    #[test]
    fn json_bytes_is_the_serialised_size() {
        let v = serde_json::json!({"a": [1, "two", null], "b": {"c": true}});
        assert_eq!(json_bytes(&v), serde_json::to_vec(&v).unwrap().len() as u64);
    }
}
