//! The Redis client Courier's Redis users share the settings of (`[redis]`): the
//! health marker (`actors::health`) and the group-wide rate limit
//! (`delivery::ratelimit`). Below both, so neither reaches into the other.

use crate::config::RedisConfig;
use fred::prelude::*;

#[derive(Debug, thiserror::Error)]
pub(crate) enum RedisSetupError {
    #[error("redis.url: {0}")]
    Client(#[from] fred::error::Error),
    #[error("redis.tls_ca_file: {0}")]
    Tls(#[from] crate::store_tls::StoreTlsError),
}

pub(crate) fn redis_client(r: &RedisConfig) -> Result<Client, RedisSetupError> {
    // With `rediss://`, fred would build TLS settings of its own (the platform's
    // roots only): the URL is parsed as plain and TLS set here, from
    // `redis.tls_ca_file`. A TLS URL never connects without TLS.
    let (url, tls) = if r.tls() {
        // rediss → redis, valkeys → valkey, rediss-cluster → redis-cluster.
        let plain = match r.url.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.replacen("s", "", 1)),
            None => r.url.clone(),
        };
        let config = crate::store_tls::client_config(
            r.tls_ca_file.as_deref(),
            crate::store_tls::Verify::Full,
        )?;
        (plain, Some(config))
    } else {
        (r.url.clone(), None)
    };
    let mut cfg = Config::from_url(&url)?;
    cfg.tls = tls.map(|c| fred::types::config::TlsConnector::from(c).into());
    if let Some(pw) = r.password_env.as_ref().and_then(|n| std::env::var(n).ok()) {
        cfg.password = Some(pw);
    }
    // Start degraded rather than fail when Redis is down at start-up.
    cfg.fail_fast = false;
    let timeout = r.command_timeout;
    let connect = r.connect_timeout;
    Ok(Builder::from_config(cfg)
        .with_performance_config(|pc| pc.default_command_timeout = timeout)
        .with_connection_config(|cc| {
            cc.connection_timeout = connect;
            cc.internal_command_timeout = timeout;
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
        .build()?)
}
