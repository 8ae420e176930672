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

/// The health actor driven through its mailbox (`Tripped`, `Tick`), with
/// its Redis real or out of reach: what it publishes on each
/// destination's verdict channel and to `/readyz`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::core::classify::CallOutcome;
    use crate::status_page::{BoardInfo, StatusBoard};
    use std::time::Duration;

    /// A pipeline on Redis `url` whose markers live under `prefix`; ticks
    /// every 30 s (the tests send them).
    fn pipeline(url: &str, prefix: &str) -> Arc<Pipeline> {
        let toml = format!(
            "[redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\nallow_plaintext = true\n\
             [degraded]\npoll_interval = \"30s\"\nmarker_ttl = \"60s\"\n"
        );
        let config = Config::from_toml(&toml).expect("the test's config parses");
        let board = Arc::new(StatusBoard::new(
            BoardInfo::new(&config, "test".into()),
            crate::runtime::now_ms(),
        ));
        Arc::new(Pipeline::new(config, board).expect("valid"))
    }

    async fn spawn(pipeline: &Arc<Pipeline>) -> (ActorRef<HealthMsg>, Arc<Readiness>) {
        let ready = Arc::new(Readiness::new(Duration::ZERO, Duration::ZERO));
        let args = HealthArgs {
            pipeline: pipeline.clone(),
            ready: ready.clone(),
        };
        let (actor, _) = Actor::spawn(None, HealthActor, args)
            .await
            .expect("the health actor starts");
        (actor, ready)
    }

    /// Failed calls until the default destination's breaker opens.
    fn trip(pipeline: &Pipeline) {
        let health = &pipeline.destinations[0].health;
        for _ in 0..10_000 {
            if health.breaker_is_open(Instant::now()) {
                return;
            }
            health.record(CallOutcome::Failed);
        }
        panic!("the breaker did not open after 10,000 failed calls");
    }

    /// The verdict published next on `rx` that `ok` accepts (10 s at most).
    async fn verdict(
        rx: &mut tokio::sync::watch::Receiver<HealthVerdict>,
        ok: impl Fn(&HealthVerdict) -> bool,
    ) -> HealthVerdict {
        let wait = rx.wait_for(|v| ok(v));
        let v = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("a verdict within 10 s")
            .expect("the verdict's channel is open");
        *v
    }

    /// Redis out of reach: the verdict rests on the local breaker alone,
    /// and acts on `Tripped` at once (no tick comes within the test).
    #[tokio::test]
    async fn without_redis_a_tripped_breaker_alone_makes_the_verdict() {
        let p = pipeline("redis://127.0.0.1:1", "courier-health-test");
        let (actor, ready) = spawn(&p).await;
        let mut rx = p.destinations[0].health.watch();
        trip(&p);
        actor
            .send_message(HealthMsg::Tripped)
            .expect("the actor takes messages");
        let v = verdict(&mut rx, |v| v.api_unavailable).await;
        assert!(v.breaker_open && !v.marker && !v.redis_ok, "{v:?}");
        assert!(
            ready
                .api_unavailable
                .load(std::sync::atomic::Ordering::Relaxed),
            "every destination is down: not ready"
        );
        actor.stop(None);
    }

    /// Sends `msg` to `actor` every 200 ms until the verdict on `rx`
    /// satisfies `ok` (10 s at most): a Redis client connects in the
    /// background, and a message before it has decides on the breaker alone.
    async fn until(
        actor: &ActorRef<HealthMsg>,
        msg: fn() -> HealthMsg,
        rx: &mut tokio::sync::watch::Receiver<HealthVerdict>,
        ok: impl Fn(&HealthVerdict) -> bool,
    ) -> HealthVerdict {
        let seen = async {
            loop {
                actor.send_message(msg()).expect("the actor takes messages");
                let next = tokio::time::timeout(Duration::from_millis(200), rx.wait_for(|v| ok(v)));
                if let Ok(Ok(v)) = next.await {
                    return *v;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .expect("the verdict within 10 s")
    }

    /// With Redis: the instance whose breaker opened sets the group's
    /// marker, and another instance of the group — its own breaker closed
    /// — takes its destination as unavailable at its next tick.
    #[tokio::test]
    async fn a_marker_set_by_one_instance_holds_the_others() {
        let url = std::env::var("COURIER_TEST_REDIS_URL").expect(
            "COURIER_TEST_REDIS_URL is not set: run the tests through scripts/test.sh (it starts Redis)",
        );
        let prefix = format!(
            "courier-health-test-{}-{}",
            std::process::id(),
            crate::runtime::now_ms()
        );
        let (a, b) = (pipeline(&url, &prefix), pipeline(&url, &prefix));
        let (actor_a, _) = spawn(&a).await;
        let (actor_b, ready_b) = spawn(&b).await;
        let mut rx_a = a.destinations[0].health.watch();
        let mut rx_b = b.destinations[0].health.watch();
        let v = until(&actor_b, || HealthMsg::Tick, &mut rx_b, |v| v.redis_ok).await;
        assert!(!v.api_unavailable, "nothing is down yet: {v:?}");
        trip(&a);
        let v = until(&actor_a, || HealthMsg::Tripped, &mut rx_a, |v| v.marker).await;
        assert!(v.breaker_open && v.api_unavailable && v.redis_ok, "{v:?}");
        // B hears of it at its next tick.
        let v = until(&actor_b, || HealthMsg::Tick, &mut rx_b, |v| v.marker).await;
        assert!(v.api_unavailable && !v.breaker_open && v.redis_ok, "{v:?}");
        assert!(ready_b
            .api_unavailable
            .load(std::sync::atomic::Ordering::Relaxed));
        actor_a.stop(None);
        actor_b.stop(None);
    }
}
