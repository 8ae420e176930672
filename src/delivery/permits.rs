//! The permits of one destination's delivery, behind one gate: an event's
//! permit from the pool, kept at the concurrency limit
//! ([`limits::PermitGate`]), and a DLQ round's share — the drain's own,
//! smaller concurrency and its pace ([`DrainPacer`]), so that a recovering
//! API does not receive the whole backlog at once. Each is taken here and
//! nowhere else (`tests/layers.rs`: `permits_are_taken_behind_one_gate`),
//! and given back when its guard ([`Permit`]) drops. What a call takes
//! besides — its breaker admission, request slot and rate slots — it takes
//! as it is admitted (`send::Calls::admit`, through `limits::Limits`).

use super::limits;
use super::pacer::DrainPacer;
use super::token::CompletionToken;
use crate::config::DegradedConfig;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A held permit: given back when it drops.
pub(crate) type Permit = OwnedSemaphorePermit;

pub(crate) struct Permits {
    /// Every event's permit is taken through this gate (the dispatcher's,
    /// an event's again after its back-off), so none bypasses the limit's
    /// shrinking. Takers queue in turn.
    pool: tokio::sync::Mutex<limits::PermitGate>,
    /// The drain's concurrency (`degraded.drain_concurrency`).
    drain: Arc<Semaphore>,
    /// The drain's pace (`degraded.drain_rate_per_sec`).
    pace: DrainPacer,
}

impl Permits {
    pub(super) fn new(pool: limits::PermitGate, d: &DegradedConfig) -> Permits {
        Permits {
            pool: tokio::sync::Mutex::new(pool),
            drain: Arc::new(Semaphore::new(d.drain_concurrency)),
            pace: DrainPacer::new(Duration::from_secs_f64(1.0 / d.drain_rate_per_sec)),
        }
    }

    /// One of the pool's permits, within the current concurrency limit
    /// (fixed at `pipeline.concurrency` with batching, where the limit
    /// holds requests). `None`: never (the semaphore is not closed).
    pub(crate) async fn event(&self) -> Option<Permit> {
        self.pool.lock().await.acquire().await
    }

    /// An event's permit, unless its partition is handed over first
    /// (`None`: no permit taken).
    pub(super) async fn event_for(&self, token: &CompletionToken) -> Option<Permit> {
        tokio::select! {
            biased;
            _ = token.until_cancelled() => None,
            p = self.event() => p,
        }
    }

    /// A DLQ round's share: a drain permit, then its pace slot. `None`: the
    /// partition was handed over first — at once, before it took either
    /// (nothing left behind for the others to wait behind).
    pub(super) async fn drain_round(&self, token: &CompletionToken) -> Option<Permit> {
        // Biased: a partition handed over already takes no permit.
        let permit = tokio::select! {
            biased;
            _ = token.until_cancelled() => return None,
            p = self.drain.clone().acquire_owned() => p.ok()?,
        };
        self.pace.slot(token).await.then_some(permit)
    }
}
