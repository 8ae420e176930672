//! The breaker's configuration and its load-time check.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BreakerConfig {
    /// Sliding time window of call outcomes that the failure rate is computed over.
    pub window: Duration,
    /// No verdict below this many calls in the window: two failures out of three
    /// calls say nothing about the API.
    pub min_calls: u32,
    /// Opens when `failures / calls >= failure_rate` (and `calls >= min_calls`).
    /// In `(0, 1]`.
    pub failure_rate: f64,
    /// How long `Open` refuses every call before probing.
    pub open_for: Duration,
    /// Calls admitted in `HalfOpen`; all must succeed to close.
    pub half_open_probes: u32,
    /// Opens after this many failures in a row, whatever the window says (0 = off).
    /// At high throughput the window holds thousands of recent successes, so the
    /// rate alone reacts to a sudden, total outage only after as many failures;
    /// a run of failures with no success between them is the faster, surer sign.
    pub consecutive_failures: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(10),
            min_calls: 20,
            failure_rate: 0.5,
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
            consecutive_failures: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum BreakerConfigError {
    #[error("breaker window must be positive")]
    ZeroWindow,
    #[error("breaker min_calls must be at least 1")]
    ZeroMinCalls,
    #[error("breaker failure_rate must be in (0, 1], got {0}")]
    FailureRate(f64),
    #[error("breaker half_open_probes must be at least 1")]
    ZeroProbes,
}

impl BreakerConfig {
    /// Checks the config at load time. A rate of 0 would open on successes alone,
    /// zero probes would leave `HalfOpen` forever.
    pub(crate) fn validate(&self) -> Result<(), BreakerConfigError> {
        if self.window.is_zero() {
            return Err(BreakerConfigError::ZeroWindow);
        }
        if self.min_calls == 0 {
            return Err(BreakerConfigError::ZeroMinCalls);
        }
        if !(self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            return Err(BreakerConfigError::FailureRate(self.failure_rate));
        }
        if self.half_open_probes == 0 {
            return Err(BreakerConfigError::ZeroProbes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::breaker::tests::{cfg, secs};
    use std::time::Duration;

    #[test]
    fn default_config_is_valid() {
        let d = BreakerConfig::default();
        assert_eq!(d.validate(), Ok(()));
        assert_eq!(d.window, secs(10));
        assert_eq!(d.min_calls, 20);
        assert_eq!(d.half_open_probes, 3);
    }

    #[test]
    fn validate_refuses_degenerate_configs() {
        let bad = |f: fn(&mut BreakerConfig)| {
            let mut c = cfg();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(
            bad(|c| c.window = Duration::ZERO),
            BreakerConfigError::ZeroWindow
        );
        assert_eq!(bad(|c| c.min_calls = 0), BreakerConfigError::ZeroMinCalls);
        assert_eq!(
            bad(|c| c.failure_rate = 0.0),
            BreakerConfigError::FailureRate(0.0)
        );
        assert_eq!(
            bad(|c| c.failure_rate = 1.5),
            BreakerConfigError::FailureRate(1.5)
        );
        assert!(matches!(
            bad(|c| c.failure_rate = f64::NAN),
            BreakerConfigError::FailureRate(_)
        ));
        assert_eq!(
            bad(|c| c.half_open_probes = 0),
            BreakerConfigError::ZeroProbes
        );
        let mut ok = cfg();
        ok.failure_rate = 1.0;
        assert_eq!(ok.validate(), Ok(()));
    }
}
