//! Health actor: merges the Redis marker and the local breaker into one verdict,
//! `api_unavailable = marker_alive || breaker_open`, and publishes changes on the
//! verdict's watch channel (`ApiHealth::watch`): each partition actor watches it
//! directly, and `/readyz` reads it from [`Readiness`].
//!
//! The marker (`SET <prefix>:<group>:api-down NX PX ttl`) is set by whichever
//! instance's breaker opens first and watched by all of them, so one instance's
//! discovery pauses the whole group within a poll interval. When Redis cannot be
//! reached, the verdict rests on the local breaker alone: Redis is never a single
//! point of failure, and every Redis call has a short timeout.

use crate::api_health::HealthVerdict;
use crate::metrics::{self as m, Readiness};
use crate::runtime::Pipeline;
use crate::status_page::HealthReport;
use fred::prelude::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Instant;

pub(crate) struct HealthActor;

/// What the health actor takes. The delivery tasks reach `Tripped` through
/// [`crate::delivery::peers::BreakerAlarm`], which the supervisor builds on
/// this actor's handle (delivery sits below the actors).
pub(crate) enum HealthMsg {
    Tick,
    /// The local breaker just opened: act now, not at the next tick.
    Tripped,
}

pub(crate) struct HealthArgs {
    pub pipeline: Arc<Pipeline>,
    /// `/readyz`'s view of the verdict.
    pub ready: Arc<Readiness>,
}

pub(crate) struct HealthState {
    pipeline: Arc<Pipeline>,
    ready: Arc<Readiness>,
    redis: Option<Client>,
    key: String,
    ttl_ms: i64,
    _conn: Option<fred::types::ConnectHandle>,
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
        HealthArgs { pipeline, ready }: HealthArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut conn = None;
        let redis = match crate::redis_conn::redis_client(&pipeline.config.redis) {
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
            ready,
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
                // A marker without a TTL (or an absurd one) is not trusted.
                match crate::redis_conn::marker_alive(c, &s.key, s.ttl_ms).await {
                    Ok(alive) => (alive, ok),
                    Err(_) => (false, false),
                }
            }
        };
        let v = HealthVerdict {
            api_unavailable: breaker_open || marker,
            breaker_open,
            marker,
            redis_ok,
        };
        let before = health.verdict();
        let breaker = health.breaker_state(now);
        s.pipeline.board.publish_health(
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
            s.ready
                .api_unavailable
                .store(v.api_unavailable, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
