//! The Redis client Courier's Redis users share the settings of (`[redis]`): the
//! health marker (`actors::health`) and the group-wide rate limit
//! (`delivery::ratelimit`). Below both, so neither reaches into the other.
//!
//! # Invariant I29: redis keys
//!
//! *Enforced in* `src/redis_conn.rs` (`marker_alive`, `KeyLife`), `src/delivery/ratelimit.rs`
//! (`ACQUIRE_LUA`, `capped_wait_us`). Redis cannot stall the group: the API-down marker
//! without a TTL or with one above twice `degraded.marker_ttl`, the rate limit's pause key
//! without a TTL or beyond `MAX_PAUSE`, and a TAT without a TTL or further ahead than the
//! limiter puts it (a clock step on the Redis host, a key written by hand) are treated as
//! absent, deleted or reset, and logged at most once a minute; a wait Redis answers is capped
//! at `MAX_PAUSE`.
//!
//! *Tested by:* `tests/redis_down.rs::a_marker_without_ttl_does_not_stall_the_group` (before:
//! nothing delivered in 60 s),
//! `tests/limits.rs::rate_limit_keys_without_ttl_do_not_stall_the_group` (before: told to
//! wait 3,599 s); unit tests.

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

/// One `PING` through the client [`redis_client`] builds (`courier check-config
/// --online`): connected within `redis.connect_timeout` (a second try after a
/// first that failed), answered within `redis.command_timeout`. The error is the
/// last connection error fred reported, or the timeout.
pub(crate) async fn ping(r: &RedisConfig) -> Result<(), String> {
    let client = redis_client(r).map_err(|e| e.to_string())?;
    let last = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let seen = last.clone();
    client.on_error(move |(error, _)| {
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
        async { Ok(()) }
    });
    let conn = client.connect();
    let wait = r.connect_timeout * 2 + r.command_timeout;
    let answer = tokio::time::timeout(wait, async {
        client.wait_for_connect().await?;
        client.ping::<String>(None).await
    })
    .await;
    let _ = client.quit().await;
    conn.abort();
    let last = last.lock().unwrap_or_else(|e| e.into_inner()).take();
    match answer {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "{} did not answer PING: {}",
            r.url,
            last.unwrap_or(e.to_string())
        )),
        Err(_) => Err(format!(
            "no connection to {} within {wait:?}{}",
            r.url,
            last.map(|e| format!(": {e}")).unwrap_or_default()
        )),
    }
}

/// What `PTTL` says of a key Courier writes with a lifetime (the health
/// marker, the rate limit's keys): a key without one, or with one longer than
/// Courier ever gives it, was not written by Courier as it is now — a key set
/// by hand, by another tool, or a clock step on the Redis host (Redis keeps
/// expiry as wall-clock time: a clock stepped back lengthens every TTL). Such a
/// key is not trusted: treated as absent, so it can never stall the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyLife {
    Absent,
    Alive,
    /// No TTL at all (`PTTL` = -1).
    NoTtl,
    /// A TTL above the most Courier sets (ms).
    TooLong(i64),
}

impl KeyLife {
    /// `pttl` as Redis answers it (-2: no key, -1: no TTL), `max_ms` the
    /// longest life Courier gives the key.
    pub(crate) fn of(pttl: i64, max_ms: i64) -> KeyLife {
        match pttl {
            -1 => KeyLife::NoTtl,
            t if t < 0 => KeyLife::Absent,
            t if t > max_ms => KeyLife::TooLong(t),
            _ => KeyLife::Alive,
        }
    }

    /// Whether the key counts as there.
    pub(crate) fn alive(self) -> bool {
        self == KeyLife::Alive
    }
}

/// A log line that may repeat at every poll, let through at most once per
/// `every` (a stale key is seen five times a second by every instance).
pub(crate) struct LogGate(std::sync::Mutex<Option<std::time::Instant>>);

impl LogGate {
    pub(crate) const fn new() -> LogGate {
        LogGate(std::sync::Mutex::new(None))
    }

    pub(crate) fn allow(&self, every: std::time::Duration) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < every) {
            return false;
        }
        *last = Some(now);
        true
    }
}

/// How often a distrusted key is logged, at most.
pub(crate) const STALE_KEY_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// `PTTL` of the marker, deleting it when it has no TTL or one above
/// `ARGV[1]` ms (a script: no other instance's `SET` comes in between).
const MARKER_LUA: &str = r#"
local t = redis.call('PTTL', KEYS[1])
if t == -1 or t > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
end
return t
"#;

/// Whether the group's "API down" marker is alive: there, with a TTL of at
/// most twice `ttl_ms` (what an instance sets is `ttl_ms`: the group shares
/// one `degraded.marker_ttl`). A marker without a TTL or with an absurd one
/// is treated as absent (logged, at most once a minute) and deleted, so it
/// cannot pause the group for ever; an instance whose breaker is open sets a
/// proper one at its next poll.
pub(crate) async fn marker_alive(
    c: &Client,
    key: &str,
    ttl_ms: i64,
) -> Result<bool, fred::error::Error> {
    static GATE: LogGate = LogGate::new();
    let max = ttl_ms.saturating_mul(2);
    let pttl: i64 = c
        .eval(MARKER_LUA, vec![key.to_string()], vec![max.to_string()])
        .await?;
    let life = KeyLife::of(pttl, max);
    if matches!(life, KeyLife::NoTtl | KeyLife::TooLong(_)) && GATE.allow(STALE_KEY_LOG_EVERY) {
        tracing::warn!(
            key,
            pttl_ms = pttl,
            max_ms = max,
            "the API-down marker has no TTL or one longer than any instance sets (written by hand, or the Redis host's clock stepped): not trusted, treated as absent and deleted"
        );
    }
    Ok(life.alive())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lives() {
        assert_eq!(KeyLife::of(-2, 10_000), KeyLife::Absent);
        assert_eq!(KeyLife::of(-1, 10_000), KeyLife::NoTtl);
        assert_eq!(KeyLife::of(0, 10_000), KeyLife::Alive);
        assert_eq!(KeyLife::of(10_000, 10_000), KeyLife::Alive);
        assert_eq!(KeyLife::of(10_001, 10_000), KeyLife::TooLong(10_001));
        assert!(!KeyLife::of(-1, 10_000).alive());
        assert!(!KeyLife::of(3_600_000, 10_000).alive());
    }

    #[test]
    fn a_log_gate_lets_one_through_per_period() {
        let g = LogGate::new();
        assert!(g.allow(std::time::Duration::from_secs(60)));
        assert!(!g.allow(std::time::Duration::from_secs(60)));
        assert!(g.allow(std::time::Duration::ZERO));
    }
}
