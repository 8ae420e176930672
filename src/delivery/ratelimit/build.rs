//! Building a [`RateLimiter`]: from its numbers, or from the configuration
//! for one destination.

use super::{Fallback, Local, RateLimiter, Shared, Source};
use crate::core::ratelimit::{fallback_share, Assignment, Gcra, ShareBasis};
use crate::metrics as m;
use fred::prelude::*;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl RateLimiter {
    /// `rate` permits per second for the group, `burst` (0: rate ÷ 50, at
    /// least 1) at once; `redis` shared by the group (`None`: the fallback
    /// only, at the full rate — a single instance).
    pub fn new(
        rate: u64,
        burst: u64,
        redis: Option<Client>,
        key_prefix: &str,
        member: &str,
    ) -> RateLimiter {
        RateLimiter::labelled(rate, burst, redis, key_prefix, member, None)
    }

    /// [`RateLimiter::new`] whose gauges carry `destination`'s name
    /// (`core::destination`; `None`: no such label).
    pub(crate) fn labelled(
        rate: u64,
        burst: u64,
        redis: Option<Client>,
        key_prefix: &str,
        member: &str,
        destination: Option<&str>,
    ) -> RateLimiter {
        let burst = if burst == 0 {
            (rate / 50).max(1)
        } else {
            burst
        };
        let batch = (rate / 100).clamp(1, burst);
        let gcra = Gcra::new(rate as f64, burst);
        let now = Instant::now();
        let gauge = |scope: &'static str| match destination {
            Some(d) => {
                metrics::gauge!(m::API_RATE_LIMIT, "scope" => scope, "destination" => d.to_string())
            }
            None => metrics::gauge!(m::API_RATE_LIMIT, "scope" => scope),
        };
        gauge("group").set(rate as f64);
        let fallback_gauge = gauge("local_fallback");
        fallback_gauge.set(0.0);
        let (share, share_burst) = fallback_share(rate, burst, ShareBasis::Live(1));
        RateLimiter {
            rate,
            burst,
            batch,
            gcra,
            shared: Shared {
                redis,
                // One hash tag: the script touches all three keys, which
                // Redis Cluster allows only within one slot.
                keys: [
                    format!("{{{key_prefix}}}:rate:tat"),
                    format!("{{{key_prefix}}}:rate:not-before"),
                    format!("{{{key_prefix}}}:rate:members"),
                ],
                member: member.to_string(),
                scripts: std::sync::Mutex::new(None),
                connect_wait: Duration::from_secs(1),
            },
            state: tokio::sync::Mutex::new(Local {
                stock: 0,
                expires: now,
                source: Source::Redis,
                live: 1,
                fallback: Fallback {
                    retry_at: now,
                    gcra: Gcra::new(share, share_burst),
                    tat: 0,
                    fraction: 1.0,
                },
                waited_for_connect: false,
                reached_redis: false,
                rejoin: None,
            }),
            paused_until_ms: AtomicU64::new(0),
            epoch: now,
            fallback_gauge,
            assignment: Arc::default(),
        }
    }

    /// The consumer's partition counts (the fallback's share before Redis was
    /// ever reached).
    pub fn with_assignment(mut self, assignment: Arc<Assignment>) -> RateLimiter {
        self.assignment = assignment;
        self
    }

    /// The limiter `api.rate_limit_per_sec` asks for (`None` when 0), sharing
    /// the group's Redis (`[redis]`); keys `{<prefix>:<group>}:rate:*` for the
    /// default destination, `{<prefix>:<group>:<destination>}:rate:*` for another.
    pub(crate) fn from_config(
        p: &crate::runtime::Pipeline,
        dest: crate::core::destination::DestinationId,
    ) -> Option<Arc<RateLimiter>> {
        let api = &p.config.api;
        if api.rate_limit_per_sec == 0 {
            return None;
        }
        let redis = match crate::redis_conn::redis_client(&p.config.redis) {
            Ok(c) => {
                // Connects (and reconnects) in the background (the task ends
                // with the client); meanwhile the script calls fail after
                // their timeout and the fallback serves.
                std::mem::drop(c.connect());
                Some(c)
            }
            Err(e) => {
                tracing::error!(error = %e, "rate limit: Redis client could not be built; this instance limits itself to the whole rate");
                None
            }
        };
        let group = format!("{}:{}", p.config.redis.key_prefix, p.config.kafka.group_id);
        // Each destination has its own rate: the default one keeps the keys
        // it always had, another adds its name (`{<prefix>:<group>:<name>}`).
        let name = p.destination(dest).name.as_str();
        let prefix = if dest == crate::core::destination::DestinationId::DEFAULT {
            group
        } else {
            format!("{group}:{name}")
        };
        let mut limiter = RateLimiter::labelled(
            u64::from(api.rate_limit_per_sec),
            u64::from(api.rate_limit_burst),
            redis,
            &prefix,
            &p.instance,
            Some(name),
        );
        limiter.shared.connect_wait = p.config.redis.connect_timeout;
        Some(Arc::new(limiter.with_assignment(p.assignment.clone())))
    }
}
