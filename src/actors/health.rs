//! Health actor: merges the Redis marker and the local breaker into one verdict,
//! `api_unavailable = marker_alive || breaker_open`, and publishes changes to the
//! consumer (which fans them out to the partition actors).
//!
//! The marker (`SET <prefix>:<group>:api-down NX PX ttl`) is set by whichever
//! instance's breaker opens first and watched by all of them, so one instance's
//! discovery pauses the whole group within a poll interval. When Redis cannot be
//! reached, the verdict rests on the local breaker alone: Redis is never a single
//! point of failure, and every Redis call has a short timeout.

use crate::actors::consumer::ConsumerMsg;
use crate::handle::Handle;
pub use crate::health::HealthMsg;
use crate::health::Verdict;
use crate::metrics as m;
use crate::runtime::Pipeline;
use crate::status::HealthReport;
use fred::prelude::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Instant;

pub struct HealthActor;

pub struct HealthArgs {
    pub pipeline: Arc<Pipeline>,
    /// Where verdict changes go (the current consumer incarnation).
    pub consumer: Handle<ActorRef<ConsumerMsg>>,
}

pub struct HealthState {
    pipeline: Arc<Pipeline>,
    consumer: Handle<ActorRef<ConsumerMsg>>,
    redis: Option<Client>,
    key: String,
    ttl_ms: i64,
    _conn: Option<fred::types::ConnectHandle>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RedisSetupError {
    #[error("redis.url: {0}")]
    Client(#[from] fred::error::Error),
    #[error("redis.tls_ca_file: {0}")]
    Tls(#[from] crate::store_tls::StoreTlsError),
}

pub(crate) fn redis_client(p: &Pipeline) -> Result<Client, RedisSetupError> {
    let r = &p.config.redis;
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

/// Logs connection errors (refused, TLS handshake, authentication) when their
/// text changes: a Redis that cannot be reached leaves the verdict to the local
/// breaker, and the log says why.
fn log_connection_errors(c: &Client, tls: bool) {
    let last = std::sync::Mutex::new(String::new());
    c.on_error(move |(error, server)| {
        let text = error.to_string();
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if *last != text {
            tracing::warn!(error = %text, server = ?server.map(|s| s.to_string()), tls, "Redis connection failed: the health verdict rests on the local breaker until it connects");
            *last = text;
        }
        async { Ok(()) }
    });
}

impl Actor for HealthActor {
    type Msg = HealthMsg;
    type State = HealthState;
    type Arguments = HealthArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        HealthArgs { pipeline, consumer }: HealthArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut conn = None;
        let redis = match redis_client(&pipeline) {
            Ok(c) => {
                // Connects (and reconnects) in the background; commands meanwhile
                // fail after their timeout and the verdict rests on the breaker.
                log_connection_errors(&c, pipeline.config.redis.tls());
                conn = Some(c.connect());
                Some(c)
            }
            Err(e) => {
                tracing::error!(error = %e, "Redis client could not be built: the health verdict rests on the local breaker alone");
                None
            }
        };
        let d = &pipeline.config.degraded;
        myself.send_interval(d.poll_interval, || HealthMsg::Tick);
        Ok(HealthState {
            key: format!(
                "{}:{}:api-down",
                pipeline.config.redis.key_prefix, pipeline.config.kafka.group_id
            ),
            ttl_ms: crate::config::millis(d.marker_ttl) as i64,
            redis,
            _conn: conn,
            pipeline,
            consumer,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        _msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let health = &s.pipeline.health;
        let now = Instant::now();
        let breaker_open = health.breaker_is_open(now);
        let mut set_here = false;
        let (marker, redis_ok) = match &s.redis {
            // Not connected (down, or reconnecting): decide on the breaker alone
            // right away instead of waiting for command timeouts.
            Some(c) if !c.is_connected() => (false, false),
            None => (false, false),
            Some(c) => {
                let mut ok = true;
                if breaker_open {
                    let r: Result<Option<String>, _> = c
                        .set(
                            s.key.as_str(),
                            s.pipeline.instance.as_str(),
                            Some(Expiration::PX(s.ttl_ms)),
                            Some(SetOptions::NX),
                            false,
                        )
                        .await;
                    if let Ok(Some(_)) = &r {
                        set_here = true;
                        tracing::warn!(key = %s.key, ttl_ms = s.ttl_ms, "API unavailable: marker set for the whole group");
                    }
                    ok = r.is_ok();
                }
                match c.exists::<i64, _>(s.key.as_str()).await {
                    Ok(n) => (n > 0, ok),
                    Err(_) => (false, false),
                }
            }
        };
        let v = Verdict {
            api_unavailable: breaker_open || marker,
            breaker_open,
            marker,
            redis_ok,
        };
        let before = health.verdict();
        let breaker = health.breaker_state(now);
        s.pipeline.status.publish_health(
            HealthReport {
                breaker,
                breaker_last: health.last_transition(),
                redis_ok,
                marker,
                set_here,
                api_unavailable: v.api_unavailable,
            },
            crate::runtime::now_ms(),
        );
        metrics::gauge!(m::BREAKER_STATE).set(breaker.as_gauge());
        metrics::gauge!(m::MARKER).set(if marker { 1.0 } else { 0.0 });
        metrics::gauge!(m::HEALTH_SOURCE, "source" => "redis").set(if redis_ok {
            1.0
        } else {
            0.0
        });
        metrics::gauge!(m::HEALTH_SOURCE, "source" => "breaker").set(if redis_ok {
            0.0
        } else {
            1.0
        });
        metrics::gauge!(m::API_UNAVAILABLE).set(if v.api_unavailable { 1.0 } else { 0.0 });
        if health.publish(v) {
            if before.redis_ok != v.redis_ok {
                if v.redis_ok {
                    tracing::info!(
                        "Redis reachable again: the shared marker is back in the verdict"
                    );
                } else {
                    tracing::warn!(
                        "Redis unreachable: the health verdict rests on the local breaker alone"
                    );
                }
            }
            if before.api_unavailable != v.api_unavailable {
                tracing::warn!(
                    api_unavailable = v.api_unavailable,
                    marker = v.marker,
                    breaker_open = v.breaker_open,
                    "health verdict changed"
                );
            }
            if let Some(c) = s.consumer.current() {
                let _ = c.send_message(ConsumerMsg::Health(v));
            }
        }
        Ok(())
    }
}
