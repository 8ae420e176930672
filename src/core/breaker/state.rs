//! The breaker's states and the transitions it reports.

use std::time::Instant;

/// The stored state. `Open` past its `until` is still stored as `Open` until a
/// mutating call ([`Breaker::allow`] or [`Breaker::advance`]) moves it; the read-only
/// methods already report it as `HalfOpen`.
///
/// [`Breaker::allow`]: super::Breaker::allow
/// [`Breaker::advance`]: super::Breaker::advance
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerState {
    Closed,
    Open { until: Instant },
    HalfOpen { admitted: u32, succeeded: u32 },
}

/// The state without its data, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerStateKind {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerStateKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BreakerStateKind::Closed => "closed",
            BreakerStateKind::Open => "open",
            BreakerStateKind::HalfOpen => "half_open",
        }
    }
    /// A gauge value: 0 closed, 1 half-open, 2 open (the usual encoding).
    pub(crate) fn as_gauge(self) -> f64 {
        match self {
            BreakerStateKind::Closed => 0.0,
            BreakerStateKind::HalfOpen => 1.0,
            BreakerStateKind::Open => 2.0,
        }
    }
}

/// Why the state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionReason {
    /// Closed → Open: the failure rate over the window reached the threshold.
    FailureRate,
    /// Closed → Open: `consecutive_failures` failures in a row.
    ConsecutiveFailures,
    /// Open → HalfOpen: `open_for` elapsed.
    OpenElapsed,
    /// HalfOpen → Closed: every probe succeeded.
    ProbesSucceeded,
    /// HalfOpen → Closed: a probe of a suspected systemic failure succeeded
    /// (the API does not refuse every call).
    Refuted,
    /// HalfOpen → Open: a probe failed.
    ProbeFailed,
    /// Any → Open by [`Breaker::trip`], with the caller's reason (`"systemic"`,
    /// `"dlq_flood"`, ...).
    ///
    /// [`Breaker::trip`]: super::Breaker::trip
    Forced(&'static str),
}

impl TransitionReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TransitionReason::FailureRate => "failure_rate",
            TransitionReason::ConsecutiveFailures => "consecutive_failures",
            TransitionReason::OpenElapsed => "open_elapsed",
            TransitionReason::ProbesSucceeded => "probes_succeeded",
            TransitionReason::Refuted => "refuted",
            TransitionReason::ProbeFailed => "probe_failed",
            TransitionReason::Forced(r) => r,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: BreakerStateKind,
    pub to: BreakerStateKind,
    pub reason: TransitionReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_for_metrics() {
        assert_eq!(BreakerStateKind::Closed.as_str(), "closed");
        assert_eq!(BreakerStateKind::Open.as_str(), "open");
        assert_eq!(BreakerStateKind::HalfOpen.as_str(), "half_open");
        assert_eq!(BreakerStateKind::Closed.as_gauge(), 0.0);
        assert_eq!(BreakerStateKind::HalfOpen.as_gauge(), 1.0);
        assert_eq!(BreakerStateKind::Open.as_gauge(), 2.0);
        assert_eq!(TransitionReason::FailureRate.as_str(), "failure_rate");
        assert_eq!(TransitionReason::OpenElapsed.as_str(), "open_elapsed");
        assert_eq!(
            TransitionReason::ProbesSucceeded.as_str(),
            "probes_succeeded"
        );
        assert_eq!(TransitionReason::Refuted.as_str(), "refuted");
        assert_eq!(TransitionReason::ProbeFailed.as_str(), "probe_failed");
    }
}
