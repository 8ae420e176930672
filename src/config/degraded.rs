//! `[degraded]`: when the API is judged unavailable, partitions pause; when it
//! recovers, the DLQ drains at a limited rate, then the main topic resumes.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DegradedConfig {
    /// Lifetime of the shared "API down" marker in Redis (one value for the
    /// group: a marker without a TTL or with more than twice this left is not
    /// trusted, see `redis_conn::marker_alive`).
    #[serde(with = "humantime_serde")]
    pub marker_ttl: Duration,
    /// How often each instance looks at the marker.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Local circuit breaker: sliding window of call outcomes.
    #[serde(with = "humantime_serde")]
    pub breaker_window: Duration,
    /// No verdict on the failure rate below this many calls in the window.
    pub breaker_min_calls: u32,
    /// Failure share (0–1] in the window that opens the breaker.
    pub breaker_failure_rate: f64,
    /// How long the breaker stays open before it lets probes through (half-open).
    #[serde(with = "humantime_serde")]
    pub breaker_open: Duration,
    /// Calls admitted while half-open. After the breaker opened on the failure
    /// rate (or a flood), all of them must be delivered to close it, and one
    /// failure opens it again. After a systemic answer (401, 403, 1xx, 3xx, TLS),
    /// which makes it half-open at once, one delivered call closes it, and it opens
    /// only once calls sent after the first refusal were refused too and the
    /// half-open period is `breaker_open` old (see "Errors" in the guide's
    /// concepts).
    pub breaker_half_open_probes: u32,
    /// Failures in a row that open the breaker at once (0 = rate only).
    pub breaker_consecutive_failures: u32,
    /// A partition stays paused at least this long (anti-flapping).
    #[serde(with = "humantime_serde")]
    pub min_pause: Duration,
    /// With several destinations (`[[api.routes]] destination`): how long a
    /// destination that is down holds its events (not sent, the partition
    /// going on with the others') before they go to the DLQ with reason
    /// `destination_unavailable`; later events of their keys to it wait
    /// until those are redelivered (drained alongside the main topic once
    /// it is back), or follow them into the DLQ (order per key holds).
    /// Also diverted earlier when it holds half of
    /// `pipeline.max_in_flight_per_partition` events of a partition, or half
    /// of `pipeline.max_in_flight_bytes`. With one destination the
    /// partition pauses instead, and this is not used.
    #[serde(with = "humantime_serde")]
    pub destination_hold: Duration,
    /// DLQ drain: events in delivery at once (process-wide); a key's
    /// envelopes go one at a time, in order (a partition's, with `partition`
    /// ordering).
    pub drain_concurrency: usize,
    /// DLQ redeliveries per second.
    pub drain_rate_per_sec: f64,
    /// Backoff between DLQ rounds of one event (`not_before`), doubling, capped.
    #[serde(with = "humantime_serde")]
    pub dlq_backoff_base: Duration,
    /// Cap of that backoff.
    #[serde(with = "humantime_serde")]
    pub dlq_backoff_cap: Duration,
    /// DLQ writes per second (process-wide) above which the failure is treated as
    /// systemic and the breaker trips; 0 disables the guard.
    pub flood_dlq_per_sec: f64,
    /// Events parked per second (process-wide) because of the API's answers
    /// (a permanent status, not bad input) above which the breaker trips
    /// (`park_flood`); 0 disables the guard.
    pub flood_parked_per_sec: f64,
    /// How often DLQ lag is checked per partition.
    #[serde(with = "humantime_serde")]
    pub lag_check_interval: Duration,
}

impl Default for DegradedConfig {
    fn default() -> Self {
        DegradedConfig {
            marker_ttl: Duration::from_secs(10),
            poll_interval: Duration::from_millis(200),
            breaker_window: Duration::from_secs(10),
            breaker_min_calls: 20,
            breaker_failure_rate: 0.5,
            breaker_open: Duration::from_secs(5),
            breaker_half_open_probes: 3,
            breaker_consecutive_failures: 10,
            min_pause: Duration::from_secs(1),
            destination_hold: Duration::from_secs(30),
            drain_concurrency: 16,
            drain_rate_per_sec: 50.0,
            dlq_backoff_base: Duration::from_secs(1),
            dlq_backoff_cap: Duration::from_secs(60),
            flood_dlq_per_sec: 200.0,
            flood_parked_per_sec: 100.0,
            lag_check_interval: Duration::from_secs(1),
        }
    }
}

impl DegradedConfig {
    pub(crate) fn breaker(&self) -> crate::core::breaker::BreakerConfig {
        crate::core::breaker::BreakerConfig {
            window: self.breaker_window,
            min_calls: self.breaker_min_calls,
            failure_rate: self.breaker_failure_rate,
            open_for: self.breaker_open,
            half_open_probes: self.breaker_half_open_probes,
            consecutive_failures: self.breaker_consecutive_failures,
        }
    }

    /// `dlq_backoff_base` in milliseconds, for wall-clock arithmetic on envelopes.
    pub(crate) fn dlq_backoff_base_ms(&self) -> u64 {
        millis(self.dlq_backoff_base)
    }

    /// `dlq_backoff_cap` in milliseconds.
    pub(crate) fn dlq_backoff_cap_ms(&self) -> u64 {
        millis(self.dlq_backoff_cap)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.breaker()
            .validate()
            .map_err(|e| invalid("degraded.breaker_*", e.to_string()))?;
        if self.drain_concurrency == 0 {
            return Err(invalid("degraded.drain_concurrency", "must be at least 1"));
        }
        if !self.drain_rate_per_sec.is_finite() || self.drain_rate_per_sec <= 0.0 {
            return Err(invalid(
                "degraded.drain_rate_per_sec",
                "must be a finite number above 0",
            ));
        }
        for (field, rate) in [
            ("degraded.flood_dlq_per_sec", self.flood_dlq_per_sec),
            ("degraded.flood_parked_per_sec", self.flood_parked_per_sec),
        ] {
            if !rate.is_finite() || rate < 0.0 {
                return Err(invalid(
                    field,
                    "must be a finite number, 0 or above (0 disables the guard)",
                ));
            }
        }
        if self.poll_interval.is_zero() || self.poll_interval >= self.marker_ttl {
            return Err(invalid(
                "degraded.poll_interval",
                "must be above 0 and below degraded.marker_ttl",
            ));
        }
        if self.dlq_backoff_base.is_zero() || self.dlq_backoff_cap < self.dlq_backoff_base {
            return Err(invalid(
                "degraded.dlq_backoff_base",
                "must be above 0 and at most degraded.dlq_backoff_cap",
            ));
        }
        if self.lag_check_interval.is_zero() {
            return Err(invalid("degraded.lag_check_interval", "must be above 0"));
        }
        Ok(())
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
