//! The group-wide rate limit toward the API (`api.rate_limit_per_sec`), at the
//! edge: permits come from Redis in batches (one `EVALSHA` per batch, GCRA on
//! Redis's clock, [`crate::core::ratelimit`]), and from a local GCRA at this
//! instance's share when Redis cannot be reached.
//!
//! - **Batches.** A call takes a permit from the instance's local stock; when
//!   it is empty, one script call asks Redis for up to `batch` permits
//!   (`rate / 100`, within `1..=burst`). Permits not used within twice their
//!   batch's span expire: a stock kept for later would add to a later second.
//! - **Live instances.** The same script call refreshes this instance in a
//!   sorted set (score: Redis time) and drops members silent for
//!   [`MEMBER_TTL`]; its answer carries the count, so every instance knows how
//!   many share the limit without an extra round trip.
//! - **Fallback.** A script call that fails (Redis down, timeout) switches the
//!   instance to a local GCRA at `rate ÷ live` (burst likewise), starting with
//!   no burst; Redis is tried again every [`REDIS_RETRY`], once the client is
//!   connected again. A call that timed out with the client still connected is
//!   made once more first: one late answer is not an outage, and the local
//!   share comes on top of what the others still take from Redis. Never a
//!   stall: a client that is not connected is not asked at all, and a call is
//!   bounded by `redis.command_timeout` (twice it, once, on the way into the
//!   fallback).
//! - **Return.** The first script call after a fallback says so (`resume`):
//!   the shared TAT is moved to at least `now + τ`, so the group gets the
//!   steady rate back, never a burst on top of what it spent meanwhile.
//! - **Retry-After.** A 429 or 503 with `Retry-After` pauses this instance at
//!   once and the group through a shared "not before" key (Redis time, raised
//!   only, at most [`MAX_PAUSE`]) that the script honours.

use crate::core::ratelimit::{fallback_share, Assignment, Gcra, ShareBasis};
use crate::metrics as m;
use fred::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod build;
mod local;
mod redis;
use local::{Fallback, Local, Rejoin};
pub use redis::{capped_wait_us, ACQUIRE_LUA, PAUSE_LUA};

/// An instance that has not asked Redis for this long no longer counts as live.
pub const MEMBER_TTL: Duration = Duration::from_secs(5);
/// How often an instance on its fallback tries Redis again.
pub const REDIS_RETRY: Duration = Duration::from_secs(1);
/// The longest an instance back on Redis keeps to its local share while the
/// instances it knew have not all come back (see `local::Rejoin`).
pub const REJOIN_MAX: Duration = Duration::from_secs(15);
/// The longest group pause a `Retry-After` can cause.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Where the permits come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Redis,
    LocalFallback,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::LocalFallback => "local_fallback",
        }
    }
}

pub struct RateLimiter {
    rate: u64,
    burst: u64,
    batch: u64,
    gcra: Gcra,
    /// The group's side: Redis and what this instance is there.
    shared: Shared,
    state: tokio::sync::Mutex<Local>,
    /// This instance's pause (ms since `epoch`), set by `Retry-After`.
    paused_until_ms: AtomicU64,
    epoch: Instant,
    fallback_gauge: metrics::Gauge,
    /// This instance's partitions: its share when Redis was never reached.
    assignment: Arc<Assignment>,
}

/// The group-wide limit's side in Redis.
struct Shared {
    redis: Option<Client>,
    keys: [String; 3],
    /// This instance, in the members' set.
    member: String,
    /// The scripts' SHA1s once loaded.
    scripts: std::sync::Mutex<Option<(String, String)>>,
    /// How long the first batch waits for the connection to Redis
    /// (`redis.connect_timeout`).
    connect_wait: Duration,
}

impl RateLimiter {
    /// What this instance's fallback share is based on now.
    fn basis(&self, st: &Local) -> ShareBasis {
        let (assigned, total) = self.assignment.get();
        ShareBasis::of(st.reached_redis.then_some(st.live), assigned, total)
    }

    /// (Re)builds the fallback GCRA at the share `basis` gives, keeping its TAT.
    fn set_fallback(&self, st: &mut Local, basis: ShareBasis) -> f64 {
        let (share, burst) = fallback_share(self.rate, self.burst, basis);
        st.fallback.gcra = Gcra::new(share, burst);
        st.fallback.fraction = basis.fraction();
        self.fallback_gauge.set(share);
        share
    }

    /// Where this instance's permits come from now.
    pub async fn source(&self) -> Source {
        self.state.lock().await.source
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Waits for one permit.
    pub async fn acquire(&self) {
        let mut st = self.state.lock().await;
        loop {
            let paused = self.paused_until_ms.load(Relaxed);
            let now_ms = self.epoch.elapsed().as_millis() as u64;
            if paused > now_ms {
                tokio::time::sleep(Duration::from_millis(paused - now_ms)).await;
                continue;
            }
            if st.stock > 0 && Instant::now() < st.expires {
                st.stock -= 1;
                return;
            }
            st.stock = 0;
            let (source, granted, wait) = self.fetch(&mut st).await;
            let result = if granted > 0 { "granted" } else { "denied" };
            metrics::counter!(m::API_RATE_PERMITS, "result" => result, "source" => source.as_str())
                .increment(granted.max(1));
            if granted > 0 {
                let span = Duration::from_micros(self.gcra.interval_us * granted);
                st.stock = granted - 1;
                st.expires = Instant::now() + (span * 2).max(Duration::from_millis(5));
                return;
            }
            tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
        }
    }

    /// One batch: from Redis (or the fallback when it cannot be reached).
    async fn fetch(&self, st: &mut Local) -> (Source, u64, Duration) {
        let try_redis = st.source == Source::Redis || Instant::now() >= st.fallback.retry_at;
        if let (true, Some(client)) = (try_redis, &self.shared.redis) {
            let resume = st.source == Source::LocalFallback;
            // A client that is not connected fails at once instead of after its
            // command timeout: the limiter never waits on a Redis that is down
            // (fred reconnects in the background).
            if !st.waited_for_connect {
                // The very first batch only: the flag is set whether or not it
                // waits (it used to be set only by a wait, so an instance that
                // found Redis connected at start waited here instead, holding
                // every call, at its first retry during a later outage: 1 s
                // with nothing granted, 175 requests/s at 500/s in the test).
                st.waited_for_connect = true;
                if !client.is_connected() {
                    // At start the connection is still being made, and an
                    // instance that has never heard from Redis knows of no
                    // other. Wait for it once, bounded by
                    // `redis.connect_timeout`.
                    let _ =
                        tokio::time::timeout(self.shared.connect_wait, client.wait_for_connect())
                            .await;
                }
            }
            let answer = if client.is_connected() {
                match self.take_batch(client, resume).await {
                    // One answer later than `redis.command_timeout` from a
                    // Redis still connected is not yet an outage: asked once
                    // more before the local share, which the instances still
                    // on Redis do not count (the group would get it on top
                    // of the limit until the next try, a second later).
                    Err(e)
                        if *e.kind() == ErrorKind::Timeout
                            && st.source == Source::Redis
                            && client.is_connected() =>
                    {
                        tracing::debug!(error = %e, "rate limit: Redis answered late; asking once more");
                        self.take_batch(client, resume).await
                    }
                    answer => answer,
                }
            } else {
                Err(Error::new(ErrorKind::IO, "not connected to Redis"))
            };
            match answer {
                Ok((granted, wait_us, live)) => {
                    if resume {
                        tracing::info!(
                            live,
                            known = st.live,
                            "rate limit: Redis is back; permits come from the group's limit again"
                        );
                        self.fallback_gauge.set(0.0);
                        if st.reached_redis && st.live > 1 {
                            st.rejoin = Some(Rejoin {
                                expect_live: st.live,
                                until: Instant::now() + REJOIN_MAX,
                            });
                        }
                    }
                    st.source = Source::Redis;
                    st.reached_redis = true;
                    let mut granted = granted;
                    let mut wait = Duration::from_micros(wait_us);
                    if let Some(r) = &st.rejoin {
                        if live >= r.expect_live || Instant::now() >= r.until {
                            tracing::info!(live, "rate limit: the group is back on Redis");
                            st.rejoin = None;
                        } else if granted > 0 {
                            // Redis's grant and the local share's, both.
                            let t = st.fallback.gcra.take(
                                st.fallback.tat,
                                self.now_us(),
                                granted,
                                false,
                            );
                            st.fallback.tat = t.tat_us;
                            granted = t.granted;
                            wait = Duration::from_micros(t.wait_us);
                        }
                    }
                    if st.rejoin.is_none() {
                        st.live = live.max(1);
                    }
                    return (Source::Redis, granted, wait);
                }
                Err(e) => {
                    if st.source == Source::Redis {
                        let basis = self.basis(st);
                        st.rejoin = None;
                        let share = self.set_fallback(st, basis);
                        tracing::warn!(error = %e, basis = ?basis, share, "rate limit: Redis unreachable; this instance takes its share of the limit locally");
                        // No burst on the way in: the group may just have spent it.
                        st.fallback.tat = self.now_us() + st.fallback.gcra.tolerance_us;
                    }
                    st.source = Source::LocalFallback;
                    st.fallback.retry_at = Instant::now() + REDIS_RETRY;
                }
            }
        } else if self.shared.redis.is_none() && st.source == Source::Redis {
            st.source = Source::LocalFallback;
            let basis = self.basis(st);
            self.set_fallback(st, basis);
        }
        if !st.reached_redis {
            // Never heard from Redis: the share follows this instance's
            // partitions, which rebalances move.
            let basis = self.basis(st);
            if (basis.fraction() - st.fallback.fraction).abs() > 1e-9 {
                let share = self.set_fallback(st, basis);
                tracing::info!(basis = ?basis, share, "rate limit: local share follows the assigned partitions");
            }
        }
        let t = st
            .fallback
            .gcra
            .take(st.fallback.tat, self.now_us(), self.batch, false);
        st.fallback.tat = t.tat_us;
        (
            Source::LocalFallback,
            t.granted,
            Duration::from_micros(t.wait_us),
        )
    }
}
