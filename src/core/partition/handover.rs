//! [`Handover`]: where a drain (revoke, shutdown) stands. Once requested it
//! never ends: the partition is being handed over, and whatever arrives after
//! the answer (records still in the mailbox, completions) must not start new
//! work.
//!
//! # Invariant I23: revoke and shutdown
//!
//!
//! *Enforced in* `src/core/partition/` (the drain) and `src/actors/consumer/` (revoke,
//! shutdown, the commit). The partition machine stops dispatching (for good: records or
//! completions arriving after its answer start nothing), waits (bounded by `pipeline.drain_timeout`
//! / `pipeline.shutdown_grace`) for in-flight work, stores; then a synchronous commit. What is
//! still in flight is redelivered to the next owner (a duplicate, absorbed by the idempotency
//! key). As the drain begins the machine forgets its sides' waiting coalesced commits
//! (`Effect::ForgetWaitingCommits`): nothing committed "soon" can land after the drain's
//! synchronous commit and move the position back. On SIGTERM the final commit, the leave and
//! the consumer's close run on a `courier-shutdown` thread that waits to hold the last handle
//! (`kafka::detached::Detached`: the group consumer, the lag client and the probe reader are
//! always torn down off the runtime's threads), waited for until 1 s before `shutdown_grace`
//! ends (at least 2 s after the drain): a librdkafka close that never ends (seen once in CI
//! after a topic recreation) cannot hold the process.
//!
//! *Tested by:* `instance_joins_and_leaves_mid_run`, `sigkill_mid_run_loses_nothing`, the
//! SIGTERM exits of every e2e test; `core::partition::handover_tests` (a drain never lets a
//! waiting commit land after its own: seen failing, the position went back 3 → 2);
//! `tests/shutdown_after_reset.rs` (SIGTERM after a recreation, after delete-records past the
//! position, after a recreated log is read again — with a close that never ends, by the
//! `COURIER_TEST_HOOK_STUCK_CLOSE` hook of `test-hooks` builds: exit 0 within
//! `shutdown_grace`; seen killed after 5 s before the fix).

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Off,
    /// Requested: waiting for the jobs in flight (or the deadline).
    Waiting,
    Answered,
}

/// What a handover request calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// The first: hand the backlog back, commit, and answer once nothing is
    /// in flight (or at the deadline, after [`Handover::timeout`]).
    Begin,
    /// Already waiting: the answer is still to come.
    Pending,
    /// Answered already: answer again.
    AnswerAgain,
}

/// The handover's state and deadline.
pub(super) struct Handover {
    stage: Stage,
    /// How long a handover waits for in-flight jobs.
    timeout: Duration,
}

impl Handover {
    pub(super) fn new(timeout: Duration) -> Self {
        Handover {
            stage: Stage::Off,
            timeout,
        }
    }

    /// A drain was requested (answered or not): nothing is begun or dispatched.
    pub(super) fn draining(&self) -> bool {
        self.stage != Stage::Off
    }

    /// A drain waits for its jobs: the answer is due once none is in flight.
    pub(super) fn waiting(&self) -> bool {
        self.stage == Stage::Waiting
    }

    /// How long the drain waits for in-flight jobs.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A drain is requested.
    pub(super) fn request(&mut self) -> Request {
        match self.stage {
            Stage::Waiting => Request::Pending,
            Stage::Answered => Request::AnswerAgain,
            Stage::Off => {
                self.stage = Stage::Waiting;
                Request::Begin
            }
        }
    }

    /// The drain is answered.
    pub(super) fn answered(&mut self) {
        self.stage = Stage::Answered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_begins_once_waits_and_is_answered_again_when_asked_again() {
        let mut h = Handover::new(Duration::from_secs(3));
        assert!(!h.draining() && !h.waiting());
        assert_eq!(h.request(), Request::Begin);
        assert!(h.draining() && h.waiting());
        assert_eq!(h.request(), Request::Pending);
        h.answered();
        assert!(h.draining() && !h.waiting(), "answered: never off again");
        assert_eq!(h.request(), Request::AnswerAgain);
        assert_eq!(h.timeout(), Duration::from_secs(3));
    }
}
