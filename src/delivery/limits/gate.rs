//! The gate that keeps a semaphore's permits at a limit that moves.

use std::sync::Arc;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Keeps the pool's semaphore at the current limit: permits are added when the
/// limit grows, and taken out of circulation (free ones at once, held ones as
/// they come back) when it shrinks. Only the pool's dispatcher acquires
/// through it.
pub(crate) struct PermitGate {
    permits: Arc<Semaphore>,
    /// Permits in circulation (free + held).
    capacity: usize,
    limit: watch::Receiver<usize>,
}

impl PermitGate {
    /// A gate over `permits`, `capacity` of them in circulation, kept at
    /// `limit`.
    pub(in crate::delivery) fn new(
        permits: Arc<Semaphore>,
        capacity: usize,
        limit: watch::Receiver<usize>,
    ) -> PermitGate {
        PermitGate {
            permits,
            capacity,
            limit,
        }
    }

    /// A permit within the current limit; `None` if the semaphore was closed.
    pub(crate) async fn acquire(&mut self) -> Option<OwnedSemaphorePermit> {
        loop {
            let target = (*self.limit.borrow_and_update()).max(1);
            if target > self.capacity {
                self.permits.add_permits(target - self.capacity);
                self.capacity = target;
            } else if target < self.capacity {
                self.capacity -= self.permits.forget_permits(self.capacity - target);
            }
            let shrinking = self.capacity > target;
            tokio::select! {
                p = self.permits.clone().acquire_owned() => {
                    let p = p.ok()?;
                    if !shrinking {
                        return Some(p);
                    }
                    // A permit came back while above the limit: retire it.
                    p.forget();
                    self.capacity -= 1;
                }
                changed = self.limit.changed() => {
                    if changed.is_err() {
                        // The limits are gone (shutdown): plain permits from here.
                        return self.permits.clone().acquire_owned().await.ok();
                    }
                }
            }
        }
    }
}
