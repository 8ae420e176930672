//! [`FailureLog`]: which failures get a log line.

/// Which failures to log: the first of each reason at once, then at most one
/// line per reason per `every`, carrying how many were left out in between.
/// An operator sees what failed on its first occurrence without a line per
/// event. Pure: time is an input.
#[derive(Debug)]
pub(crate) struct FailureLog {
    every: std::time::Duration,
    pub(super) seen: std::collections::HashMap<String, Seen>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    logged_at: std::time::Instant,
    pub(super) left_out: u64,
}

/// A failure to log now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogNow {
    /// The first failure with this reason since the process started.
    pub first: bool,
    /// Failures with this reason not logged since the previous line.
    pub left_out: u64,
}

impl FailureLog {
    pub(crate) fn new(every: std::time::Duration) -> FailureLog {
        FailureLog {
            every,
            seen: std::collections::HashMap::new(),
        }
    }

    /// Counts one failure with `reason` at `now`; `Some` if it is to be logged.
    pub(crate) fn observe(&mut self, reason: &str, now: std::time::Instant) -> Option<LogNow> {
        match self.seen.get_mut(reason) {
            None => {
                self.seen.insert(
                    reason.to_string(),
                    Seen {
                        logged_at: now,
                        left_out: 0,
                    },
                );
                Some(LogNow {
                    first: true,
                    left_out: 0,
                })
            }
            Some(s) if now.saturating_duration_since(s.logged_at) >= self.every => {
                let left_out = s.left_out;
                *s = Seen {
                    logged_at: now,
                    left_out: 0,
                };
                Some(LogNow {
                    first: false,
                    left_out,
                })
            }
            Some(s) => {
                s.left_out += 1;
                None
            }
        }
    }
}
