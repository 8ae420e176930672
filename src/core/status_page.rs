//! What the status page decides (time is an input): the Redis marker's state and
//! its transitions, which source the health verdict rests on, and the delivery
//! errors of the last few minutes from periodic samples of cumulative counts.
//!
//! The status board that holds the live state and the page that shows it only
//! carry these decisions out.

use std::collections::{BTreeMap, VecDeque};

/// The shared "API down" marker as this instance last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MarkerState {
    /// Not looked at yet (before the health actor's first evaluation).
    Unknown,
    /// Redis cannot be reached: the marker's state is not known.
    Unreachable,
    Absent,
    Present,
}

impl MarkerState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MarkerState::Unknown => "unknown",
            MarkerState::Unreachable => "unreachable",
            MarkerState::Absent => "absent",
            MarkerState::Present => "present",
        }
    }

    /// The state one evaluation of the health actor saw.
    pub(crate) fn seen(redis_ok: bool, marker: bool) -> MarkerState {
        match (redis_ok, marker) {
            (false, _) => MarkerState::Unreachable,
            (true, true) => MarkerState::Present,
            (true, false) => MarkerState::Absent,
        }
    }
}

/// Why the marker's state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MarkerReason {
    /// This instance's breaker opened and its `SET NX` created the marker.
    SetByThisInstance,
    /// The marker appeared without this instance setting it: another instance's
    /// breaker opened (or it was there before this instance could look).
    SetByAnotherInstance,
    /// The marker is gone: its TTL ran out (or someone deleted it).
    Expired,
    /// Redis stopped answering.
    RedisUnreachable,
    /// Redis answers again (after being unreachable, or at the first look).
    RedisReachable,
}

impl MarkerReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MarkerReason::SetByThisInstance => "set_by_this_instance",
            MarkerReason::SetByAnotherInstance => "set_by_another_instance",
            MarkerReason::Expired => "expired",
            MarkerReason::RedisUnreachable => "redis_unreachable",
            MarkerReason::RedisReachable => "redis_reachable",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MarkerChange {
    pub from: MarkerState,
    pub to: MarkerState,
    pub reason: MarkerReason,
}

/// The change from `from` to `to`, if any. `set_here`: this evaluation's own
/// `SET NX` created the marker.
pub(crate) fn marker_change(
    from: MarkerState,
    to: MarkerState,
    set_here: bool,
) -> Option<MarkerChange> {
    if from == to {
        return None;
    }
    let reason = match (from, to) {
        (_, MarkerState::Unreachable) => MarkerReason::RedisUnreachable,
        (_, MarkerState::Present) if set_here => MarkerReason::SetByThisInstance,
        (MarkerState::Absent, MarkerState::Present) => MarkerReason::SetByAnotherInstance,
        (MarkerState::Present, MarkerState::Absent) => MarkerReason::Expired,
        // From unknown or unreachable to a known state: what changed is that
        // Redis answers (the marker may have been set or expired meanwhile).
        _ => MarkerReason::RedisReachable,
    };
    Some(MarkerChange { from, to, reason })
}

/// What the health verdict rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HealthSource {
    /// `api_unavailable = marker_alive || breaker_open`.
    BreakerAndMarker,
    /// Redis unreachable: `api_unavailable = breaker_open`.
    BreakerOnly,
}

impl HealthSource {
    pub(crate) fn of(redis_ok: bool) -> HealthSource {
        if redis_ok {
            HealthSource::BreakerAndMarker
        } else {
            HealthSource::BreakerOnly
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HealthSource::BreakerAndMarker => "breaker+marker",
            HealthSource::BreakerOnly => "breaker_only",
        }
    }
}

/// A counter's identity: failure class and reason (`transient`, `http_503`).
pub(crate) type ErrorKey = (String, String);

/// Errors counted over a sliding window from samples of cumulative counts.
///
/// The counts only grow (they are the process's totals). A sample is kept at most
/// every `step_ms`; the recent count is the current total minus the total at the
/// newest sample at or before `now - window`. It therefore never misses an error
/// of the window, and may include some from up to one sampling gap before it: the
/// span it covers is reported with it (shorter than the window only while the
/// process is younger than that). Memory: at most `window / step + 2` samples.
#[derive(Debug, Clone)]
pub(crate) struct ErrorWindow {
    window_ms: i64,
    step_ms: i64,
    samples: VecDeque<(i64, BTreeMap<ErrorKey, u64>)>,
}

/// The recent errors of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecentErrors {
    pub key: ErrorKey,
    /// Within the span reported by [`ErrorWindow::recent`].
    pub recent: u64,
    /// Since the process started.
    pub total: u64,
}

impl ErrorWindow {
    /// Starts with a baseline of zero counts at `start_ms`.
    pub(crate) fn new(window_ms: i64, step_ms: i64, start_ms: i64) -> ErrorWindow {
        let mut samples = VecDeque::new();
        samples.push_back((start_ms, BTreeMap::new()));
        ErrorWindow {
            window_ms: window_ms.max(1),
            step_ms: step_ms.clamp(1, window_ms.max(1)),
            samples,
        }
    }

    pub(crate) fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Offers the cumulative counts at `now_ms`; kept if the last kept sample is at
    /// least a step old. Samples that fell out of the window are dropped (the
    /// newest one is always kept).
    pub(crate) fn sample(&mut self, now_ms: i64, counts: &BTreeMap<ErrorKey, u64>) {
        let due = self
            .samples
            .back()
            .is_none_or(|(t, _)| now_ms - t >= self.step_ms);
        if due {
            self.samples.push_back((now_ms, counts.clone()));
        }
        self.prune(now_ms);
    }

    fn prune(&mut self, now_ms: i64) {
        // Keep one sample at or before the window's start: the baseline.
        while self
            .samples
            .get(1)
            .is_some_and(|(t, _)| *t <= now_ms - self.window_ms)
        {
            self.samples.pop_front();
        }
    }

    /// The errors since the baseline sample, per key with any count, and the
    /// span they cover in ms (`now_ms` minus the baseline's time).
    pub(crate) fn recent(
        &self,
        now_ms: i64,
        counts: &BTreeMap<ErrorKey, u64>,
    ) -> (Vec<RecentErrors>, i64) {
        let cutoff = now_ms - self.window_ms;
        // The newest sample at or before the window's start; the oldest one (the
        // start) while the process is younger than the window.
        let base = self
            .samples
            .iter()
            .rev()
            .find(|(t, _)| *t <= cutoff)
            .or(self.samples.front());
        let (base_ms, base_counts) = match base {
            Some((t, c)) => (*t, Some(c)),
            None => (now_ms, None),
        };
        let rows = counts
            .iter()
            .filter(|(_, total)| **total > 0)
            .map(|(key, total)| {
                let before = base_counts.and_then(|c| c.get(key)).copied().unwrap_or(0);
                RecentErrors {
                    key: key.clone(),
                    recent: total.saturating_sub(before),
                    total: *total,
                }
            })
            .collect();
        (rows, (now_ms - base_ms).max(0))
    }

    /// Samples held (for the memory bound).
    #[cfg(test)]
    pub(crate) fn samples(&self) -> usize {
        self.samples.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn marker_transitions_name_their_reason() {
        use MarkerReason::*;
        use MarkerState::*;
        let c = |from, to, here| marker_change(from, to, here).map(|c| c.reason);
        assert_eq!(c(Absent, Absent, false), None);
        assert_eq!(c(Present, Present, true), None, "a renewal is no change");
        assert_eq!(c(Absent, Present, true), Some(SetByThisInstance));
        assert_eq!(c(Absent, Present, false), Some(SetByAnotherInstance));
        assert_eq!(c(Present, Absent, false), Some(Expired));
        assert_eq!(c(Present, Unreachable, false), Some(RedisUnreachable));
        assert_eq!(c(Unknown, Unreachable, false), Some(RedisUnreachable));
        assert_eq!(c(Unreachable, Absent, false), Some(RedisReachable));
        assert_eq!(c(Unknown, Absent, false), Some(RedisReachable));
        assert_eq!(c(Unknown, Present, false), Some(RedisReachable));
        assert_eq!(c(Unreachable, Present, true), Some(SetByThisInstance));
        assert_eq!(MarkerState::seen(false, true), Unreachable);
        assert_eq!(MarkerState::seen(true, true), Present);
        assert_eq!(HealthSource::of(false).as_str(), "breaker_only");
        assert_eq!(HealthSource::of(true).as_str(), "breaker+marker");
    }

    fn key(r: &str) -> ErrorKey {
        ("transient".into(), r.into())
    }

    #[test]
    fn recent_errors_leave_the_window() {
        let mut w = ErrorWindow::new(300_000, 10_000, 0);
        let mut counts = BTreeMap::new();
        counts.insert(key("http_503"), 40);
        w.sample(5_000, &counts); // within a step of the start: not kept
        assert_eq!(w.samples(), 1);
        let (rows, span) = w.recent(5_000, &counts);
        assert_eq!((rows[0].recent, rows[0].total, span), (40, 40, 5_000));
        // Ten minutes later, with samples every 10 s and 2 more errors at the end.
        for t in (10_000..=600_000).step_by(10_000) {
            if t == 600_000 {
                counts.insert(key("http_503"), 42);
                counts.insert(key("timeout"), 1);
            }
            w.sample(t, &counts);
        }
        let (rows, span) = w.recent(600_000, &counts);
        assert_eq!(span, 300_000);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].recent, rows[0].total), (2, 42));
        assert_eq!((rows[1].recent, rows[1].total), (1, 1));
        assert!(w.samples() <= 300_000 / 10_000 + 2);
    }

    #[test]
    fn a_stalled_sampler_reports_the_longer_span() {
        let mut w = ErrorWindow::new(60_000, 10_000, 0);
        let mut counts = BTreeMap::new();
        counts.insert(key("connect"), 3);
        w.sample(10_000, &counts);
        counts.insert(key("connect"), 5);
        // No sample for 10 minutes: the baseline is the last one, 590 s old.
        let (rows, span) = w.recent(600_000, &counts);
        assert_eq!((rows[0].recent, span), (2, 590_000));
    }

    type Tick = (i64, u64, u64);

    proptest! {
        /// Offered a sample at most every `step`, the recent count includes every
        /// error of the last `window` (none is missed) and none older than one
        /// sampling gap (< 2 steps) before it; the span says which.
        #[test]
        fn recent_counts_cover_the_window(
            window_steps in 1i64..8,
            step in 1i64..50,
            ticks in proptest::collection::vec((1i64..60, 0u64..4, 0u64..3), 1..150),
        ) {
            let window = window_steps * step;
            let mut w = ErrorWindow::new(window, step, 0);
            let mut counts: BTreeMap<ErrorKey, u64> = BTreeMap::new();
            let mut history: Vec<Tick> = Vec::new();
            let mut now = 0;
            for (dt, a, b) in ticks {
                now += dt.min(step);
                *counts.entry(key("a")).or_default() += a;
                *counts.entry(key("b")).or_default() += b;
                history.push((now, a, b));
                w.sample(now, &counts);
                let (rows, span) = w.recent(now, &counts);
                prop_assert!(span >= window.min(now), "span {} shorter than the window", span);
                prop_assert!(span <= window + 2 * step - 2, "span {} too long", span);
                // Errors counted after `from`.
                let after = |from: i64, pick: fn(&Tick) -> u64| -> u64 {
                    history.iter().filter(|h| h.0 > from).map(pick).sum()
                };
                for r in rows {
                    let pick: fn(&Tick) -> u64 = if r.key.1 == "a" { |h| h.1 } else { |h| h.2 };
                    prop_assert!(r.recent <= r.total);
                    prop_assert_eq!(r.recent, after(now - span, pick));
                    prop_assert!(r.recent >= after(now - window, pick),
                        "recent {} misses errors of the window", r.recent);
                }
                prop_assert!(w.samples() as i64 <= window / step + 2);
            }
        }
    }
}
