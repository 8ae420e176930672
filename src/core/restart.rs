//! Restart budget: how many child crashes the supervisor absorbs within a window
//! before it gives up and ends the process (so the orchestrator restarts the pod).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub(crate) struct RestartBudget {
    max_restarts: u32,
    window: Duration,
    recent: VecDeque<Instant>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{count} restarts within {window:?} (limit {max})")]
pub(crate) struct BudgetExhausted {
    pub count: usize,
    pub max: u32,
    pub window: Duration,
}

impl RestartBudget {
    pub(crate) fn new(max_restarts: u32, window: Duration) -> Self {
        RestartBudget {
            max_restarts,
            window,
            recent: VecDeque::new(),
        }
    }

    /// Records a crash at `now`; `Err` when the crash goes over the budget.
    pub(crate) fn record(&mut self, now: Instant) -> Result<(), BudgetExhausted> {
        while let Some(&t) = self.recent.front() {
            if now.duration_since(t) > self.window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        self.recent.push_back(now);
        if self.recent.len() > self.max_restarts as usize {
            return Err(BudgetExhausted {
                count: self.recent.len(),
                max: self.max_restarts,
                window: self.window,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crashes_outside_the_window_are_forgiven() {
        let t0 = Instant::now();
        let mut b = RestartBudget::new(2, Duration::from_secs(10));
        assert!(b.record(t0).is_ok());
        assert!(b.record(t0 + Duration::from_secs(1)).is_ok());
        assert!(b.record(t0 + Duration::from_secs(2)).is_err());
        let mut b = RestartBudget::new(2, Duration::from_secs(10));
        assert!(b.record(t0).is_ok());
        assert!(b.record(t0 + Duration::from_secs(5)).is_ok());
        assert!(b.record(t0 + Duration::from_secs(11)).is_ok());
        assert!(b.record(t0 + Duration::from_secs(12)).is_err());
    }
}
