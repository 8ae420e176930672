//! The sliding time window of call outcomes that the failure rate is read from.

use std::time::{Duration, Instant};

/// Outcomes are aggregated into this many buckets spanning the window, as
/// Resilience4j aggregates per epoch second: memory stays constant whatever the
/// call rate and the window length.
const BUCKETS: usize = 10;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    calls: u32,
    failures: u32,
}

/// Outcomes of the last `window`, in [`BUCKETS`] buckets of `window / BUCKETS`.
///
/// An outcome older than `window` is always expired; because buckets expire whole,
/// one may expire up to one bucket width early. Epochs count bucket widths since the
/// origin, set one window before the first recorded outcome, and the highest epoch
/// seen acts as the present: an outcome time-stamped slightly in the past (outcomes
/// reach the actor out of order) still lands in its bucket, and one older than the
/// window is dropped rather than counted in, or corrupting, a newer bucket.
#[derive(Debug, Clone)]
pub(super) struct Window {
    span: Duration,
    width_nanos: u128,
    origin: Option<Instant>,
    high: u64,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    pub(super) fn new(window: Duration) -> Self {
        Window {
            span: window,
            width_nanos: (window.as_nanos() / BUCKETS as u128).max(1),
            origin: None,
            high: 0,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn epoch(&self, now: Instant) -> u64 {
        match self.origin {
            None => 0,
            Some(o) => {
                let e = now.saturating_duration_since(o).as_nanos() / self.width_nanos;
                u64::try_from(e).unwrap_or(u64::MAX)
            }
        }
    }

    pub(super) fn record(&mut self, now: Instant, success: bool) {
        let span = self.span;
        let origin = *self
            .origin
            .get_or_insert_with(|| now.checked_sub(span).unwrap_or(now));
        if now < origin {
            return; // more than a window before the first outcome seen
        }
        let e = self.epoch(now);
        self.high = self.high.max(e);
        if e.saturating_add(BUCKETS as u64) <= self.high {
            return; // older than the window
        }
        let b = &mut self.buckets[(e % BUCKETS as u64) as usize];
        if b.epoch != e {
            // The slot holds an expired epoch (a newer one in this slot would be at
            // least a full window ahead of `e`, which was refused above).
            *b = Bucket {
                epoch: e,
                calls: 0,
                failures: 0,
            };
        }
        b.calls = b.calls.saturating_add(1);
        if !success {
            b.failures = b.failures.saturating_add(1);
        }
    }

    /// `(calls, failures)` within the window ending at `now`.
    pub(super) fn totals(&self, now: Instant) -> (u32, u32) {
        let present = self.epoch(now).max(self.high);
        self.buckets
            .iter()
            .filter(|b| b.epoch.saturating_add(BUCKETS as u64) > present)
            .fold((0u32, 0u32), |(c, f), b| {
                (c.saturating_add(b.calls), f.saturating_add(b.failures))
            })
    }

    pub(super) fn clear(&mut self) {
        self.buckets = [Bucket::default(); BUCKETS];
        self.origin = None;
        self.high = 0;
    }
}
