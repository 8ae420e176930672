//! Health actor: merges the Redis marker and the local breaker into one verdict,
//! `api_unavailable = marker_alive || breaker_open`, and publishes changes on the
//! verdict's watch channel (`ApiHealth::watch`): each partition actor watches it
//! directly, and `/readyz` reads it from [`Readiness`].
//!
//! Each destination (`core::destination`) has its own breaker, marker and
//! verdict. A destination's marker (`SET <prefix>:<group>:api-down NX PX ttl`
//! for the default destination, `<prefix>:<group>:api-down:<destination>` for
//! another: [`marker_key`]) is set by whichever instance's breaker for it
//! opens first and watched by all of them, so one instance's discovery holds
//! that destination's events in the whole group within a poll interval. When Redis cannot be
//! reached, the verdict rests on the local breaker alone: Redis is never a single
//! point of failure, and every Redis call has a short timeout.

use crate::api_health::{Destination, HealthVerdict};
use crate::metrics::{self as m, Readiness};
use crate::runtime::Pipeline;
use crate::status_page::HealthReport;
use fred::prelude::*;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Instant;

pub(crate) struct HealthActor;

/// A destination's marker: `<prefix>:<group>:api-down` for the default
/// destination (the key a single API always had), and
/// `<prefix>:<group>:api-down:<destination>` for another.
pub(crate) fn marker_key(prefix: &str, group: &str, destination: Option<&str>) -> String {
    match destination {
        None => format!("{prefix}:{group}:api-down"),
        Some(name) => format!("{prefix}:{group}:api-down:{name}"),
    }
}

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
    /// Each destination's marker key, by its id.
    keys: Vec<String>,
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
            keys: pipeline
                .destinations
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    marker_key(
                        &pipeline.config.redis.key_prefix,
                        &pipeline.config.kafka.group_id,
                        (i > 0).then_some(d.name.as_str()),
                    )
                })
                .collect(),
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
        let mut all_down = true;
        let mut redis_seen = true;
        for (i, d) in s.pipeline.destinations.iter().enumerate() {
            let v = s.evaluate(i, d).await;
            all_down &= v.api_unavailable;
            redis_seen &= v.redis_ok;
        }
        metrics::gauge!(m::HEALTH_SOURCE, "source" => "redis").set(if redis_seen {
            1.0
        } else {
            0.0
        });
        metrics::gauge!(m::HEALTH_SOURCE, "source" => "breaker").set(if redis_seen {
            0.0
        } else {
            1.0
        });
        // Not ready while every destination is unavailable: nothing this
        // instance reads can be delivered.
        s.ready
            .api_unavailable
            .store(all_down, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl HealthState {
    /// One destination's verdict: its breaker, and its marker (set if its
    /// breaker is open, read either way); published on its watch channel.
    async fn evaluate(&self, i: usize, d: &Destination) -> HealthVerdict {
        let health = &d.health;
        let key = &self.keys[i];
        let now = Instant::now();
        let breaker_open = health.breaker_is_open(now);
        let mut set_here = false;
        let (marker, redis_ok) = match &self.redis {
            // Not connected (down, or reconnecting): decide on the breaker alone
            // right away instead of waiting for command timeouts.
            Some(c) if !c.is_connected() => (false, false),
            None => (false, false),
            Some(c) => {
                let mut ok = true;
                if breaker_open {
                    let r: Result<Option<String>, _> = c
                        .set(
                            key.as_str(),
                            self.pipeline.instance.as_str(),
                            Some(Expiration::PX(self.ttl_ms)),
                            Some(SetOptions::NX),
                            false,
                        )
                        .await;
                    if let Ok(Some(_)) = &r {
                        set_here = true;
                        tracing::warn!(destination = %d.name, key = %key, ttl_ms = self.ttl_ms, "API unavailable: marker set for the whole group");
                    }
                    ok = r.is_ok();
                }
                // A marker without a TTL (or an absurd one) is not trusted.
                match crate::redis_conn::marker_alive(c, key, self.ttl_ms).await {
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
        let report = HealthReport {
            breaker,
            breaker_last: health.last_transition(),
            redis_ok,
            marker,
            set_here,
            api_unavailable: v.api_unavailable,
        };
        self.pipeline
            .board
            .publish_health(&d.name, report, crate::runtime::now_ms());
        let dest = d.name.clone();
        metrics::gauge!(m::BREAKER_STATE, "destination" => dest.clone()).set(breaker.as_gauge());
        metrics::gauge!(m::MARKER, "destination" => dest.clone()).set(if marker {
            1.0
        } else {
            0.0
        });
        metrics::gauge!(m::API_UNAVAILABLE, "destination" => dest).set(if v.api_unavailable {
            1.0
        } else {
            0.0
        });
        if health.publish(v) {
            if before.redis_ok != v.redis_ok && i == 0 {
                if v.redis_ok {
                    tracing::info!(
                        "Redis reachable again: the shared markers are back in the verdicts"
                    );
                } else {
                    tracing::warn!(
                        "Redis unreachable: each destination's verdict rests on its local breaker alone"
                    );
                }
            }
            if before.api_unavailable != v.api_unavailable {
                tracing::warn!(
                    destination = %d.name,
                    api_unavailable = v.api_unavailable,
                    marker = v.marker,
                    breaker_open = v.breaker_open,
                    "health verdict changed"
                );
            }
        }
        v
    }
}
