//! Whether a route's batches mostly end as single events after splits:
//! batching turned on against an endpoint that takes single events only
//! refuses every batch as a whole, and bisection sends each event alone in
//! the end — nothing is lost, but at several times the CPU and requests of
//! an unbatched route, and silently. Over each window, the share of the
//! events answered (their batch not split further) that were answered in a
//! request of one *after a split* is measured; above
//! [`SPLIT_SINGLES_WARN`] the route is reported: each window's share is shown
//! on `/status`, and a warning is due at most once per [`SPLIT_WARN_EVERY`].

use std::time::{Duration, Instant};

/// The window the share is measured over.
pub(crate) const SPLIT_WINDOW: Duration = Duration::from_secs(10);
/// At most one warning per route this often.
pub(crate) const SPLIT_WARN_EVERY: Duration = Duration::from_secs(60);
/// Above this share of events ending alone after a split, the route is
/// reported.
pub(crate) const SPLIT_SINGLES_WARN: f64 = 0.5;
/// No verdict on fewer events than this in a window.
const MIN_EVENTS: u64 = 20;

/// One window's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SplitReport {
    /// Events answered in the window (a request not split further).
    pub events: u64,
    /// Of them, events answered alone after their batch was split.
    pub split_singles: u64,
}

impl SplitReport {
    /// The share of events that ended alone after a split.
    pub(crate) fn share(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.split_singles as f64 / self.events as f64
        }
    }

    /// Whether the window says the route's batches mostly end as singles.
    pub(crate) fn mostly_singles(&self) -> bool {
        self.events >= MIN_EVENTS && self.share() > SPLIT_SINGLES_WARN
    }
}

/// The counts of the current window.
#[derive(Debug, Clone)]
pub(crate) struct SplitWindow {
    started: Instant,
    now: SplitReport,
    warned: Option<Instant>,
}

/// A window's end: its report, and whether a warning is due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitEnd {
    pub report: SplitReport,
    pub warn: bool,
}

impl SplitWindow {
    pub(crate) fn new(now: Instant) -> SplitWindow {
        SplitWindow {
            started: now,
            now: SplitReport::default(),
            warned: None,
        }
    }

    /// A request of `n` events was answered for them at `now` (not split
    /// further); `after_split`: it is a part of a batch refused as a whole.
    /// When the window is over, its report (and a new window begins).
    pub(crate) fn answered(
        &mut self,
        n: usize,
        after_split: bool,
        now: Instant,
    ) -> Option<SplitEnd> {
        let ended = (now.saturating_duration_since(self.started) >= SPLIT_WINDOW).then(|| {
            let report = self.now;
            let warn = report.mostly_singles()
                && self
                    .warned
                    .is_none_or(|at| now.saturating_duration_since(at) >= SPLIT_WARN_EVERY);
            if warn {
                self.warned = Some(now);
            }
            self.started = now;
            self.now = SplitReport::default();
            SplitEnd { report, warn }
        });
        self.now.events += n as u64;
        if n == 1 && after_split {
            self.now.split_singles += 1;
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(answers: &[(usize, bool)], times: usize) -> SplitReport {
        let t0 = Instant::now();
        let mut w = SplitWindow::new(t0);
        for _ in 0..times {
            for &(n, split) in answers {
                assert_eq!(w.answered(n, split, t0), None);
            }
        }
        w.answered(0, false, t0 + SPLIT_WINDOW)
            .expect("the window ended")
            .report
    }

    #[test]
    fn a_route_whose_batches_end_alone_is_reported() {
        // An endpoint taking single events only: every event ends alone.
        let r = window(&[(1, true); 4], 10);
        assert_eq!(
            r,
            SplitReport {
                events: 40,
                split_singles: 40
            }
        );
        assert!(r.mostly_singles());
        // One poison event in 100: it and its sibling end alone.
        let leaves = [
            (50, true),
            (25, true),
            (12, true),
            (6, true),
            (3, true),
            (2, true),
            (1, true),
            (1, true),
        ];
        let r = window(&leaves, 5);
        assert!(!r.mostly_singles(), "{r:?}");
        // Half of each batch alone: not above half.
        let r = window(&[(2, true), (1, true), (1, true)], 10);
        assert_eq!(r.split_singles * 2, r.events);
        assert!(!r.mostly_singles());
        // Batches of one that were never split: singles, but not split ones.
        let r = window(&[(1, false)], 50);
        assert!(!r.mostly_singles());
        // Too few events: no verdict.
        let r = window(&[(1, true)], 3);
        assert!(!r.mostly_singles());
    }

    #[test]
    fn a_warning_is_due_at_most_once_a_minute() {
        let t0 = Instant::now();
        let mut w = SplitWindow::new(t0);
        let mut warned = Vec::new();
        for k in 1..=13u32 {
            for _ in 0..30 {
                w.answered(1, true, t0 + SPLIT_WINDOW * (k - 1));
            }
            if let Some(end) = w.answered(1, true, t0 + SPLIT_WINDOW * k) {
                assert!(end.report.mostly_singles());
                if end.warn {
                    warned.push(k);
                }
            }
        }
        // Windows end every 10 s; warnings 60 s apart.
        assert_eq!(warned, vec![1, 7, 13]);
    }
}
