//! Enrichment: a PostgreSQL lookup by entity key behind a moka cache.
//!
//! Database errors are transient for the event (retried, then DLQ), never a reason
//! to park it. Concurrent misses of one key are merged into one query
//! (`try_get_with`), and errors are not cached.

use crate::config::EnrichmentConfig;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use moka::future::Cache;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub enum EnrichError {
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
}

pub struct Enricher {
    pool: Pool,
    query: String,
    cache: Cache<String, Option<Arc<Value>>>,
    timeout: Duration,
}

/// A small connection pool to PostgreSQL (also used by the source-of-truth check).
pub fn pg_pool(cfg: &EnrichmentConfig, password: Option<String>) -> Result<Pool, EnrichSetupError> {
    let mut pg: tokio_postgres::Config = cfg
        .url
        .parse()
        .map_err(|e: tokio_postgres::Error| EnrichSetupError::Url(e.to_string()))?;
    if let Some(p) = password {
        pg.password(p);
    }
    pg.connect_timeout(cfg.query_timeout.max(Duration::from_millis(500)));
    let mgr = Manager::from_config(
        pg,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(cfg.pool_size)
        .build()
        .map_err(|e| EnrichSetupError::Pool(e.to_string()))
}

impl Enricher {
    pub fn new(
        cfg: &EnrichmentConfig,
        password: Option<String>,
    ) -> Result<Enricher, EnrichSetupError> {
        let pool = pg_pool(cfg, password)?;
        let cache = Cache::builder()
            .max_capacity(cfg.cache_capacity)
            .time_to_live(cfg.cache_ttl)
            .build();
        Ok(Enricher {
            pool,
            query: cfg.query.clone(),
            cache,
            timeout: cfg.query_timeout,
        })
    }

    /// The enrichment document for `key`, `None` when the row does not exist.
    pub async fn lookup(&self, key: &str) -> Result<Option<Arc<Value>>, EnrichError> {
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
pub struct SourceOfTruth {
    pool: Pool,
    query: String,
    timeout: Duration,
}

impl SourceOfTruth {
    pub fn new(pool: Pool, query: String, timeout: Duration) -> SourceOfTruth {
        SourceOfTruth {
            pool,
            query,
            timeout,
        }
    }

    /// `Ok(None)`: no row for the key.
    pub async fn current_version(&self, key: &str) -> Result<Option<i64>, EnrichError> {
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
