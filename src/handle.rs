//! Stable handles to the long-lived peers an actor or task talks to.
//!
//! Each actor is given, at construction, a [`Handle`] for every peer it sends to
//! (its arguments name its dependencies; nothing is looked up in a shared
//! registry). The supervisor keeps the matching [`Binding`] and re-points it
//! when it re-spawns the peer, so every holder reaches the current incarnation
//! without being re-spawned itself: a restarted DLQ writer or delivery pool is
//! reachable by the others at once (see "Handles" below).
//!
//! # Invariant I8: restarts
//!
//! *Enforced in* `src/actors/supervisor.rs`, `src/handle.rs` (restarts). A re-spawned DLQ
//! writer, delivery pool, health actor or consumer is reached by every holder of its handle
//! at once (the supervisor re-points the `Binding` before anything can use the new
//! incarnation); work sent to a dead incarnation is lost only as tokens that report
//! *errored*, so it is dispatched again, never counted done.
//!
//! *Tested by:* `handle` unit test;
//! `tests/pipeline.rs::partition_actor_crash_rereads_from_watermark`,
//! `repeated_crashes_exhaust_the_restart_budget`, `sigkill_mid_run_loses_nothing`.
//!
//! # Handles
//!
//! Each actor is given, in its arguments, a handle for every peer it sends to — nothing is
//! looked up in a shared registry at call time, and an actor's constructor lists its
//! dependencies:
//!
//! | actor / task | is given | to |
//! |---|---|---|
//! | `HealthActor` | `HealthArgs::ready` | `/readyz`'s view of the verdict (partition actors watch the verdict itself: `ApiHealth::watch`, no handle) |
//! | `DeliveryPool` → `Deliverer` | `DeliveryArgs::peers` (`delivery::peers::Peers`: the DLQ writer's handle, a `BreakerAlarm` on the health actor's) | write envelopes durably; wake the health actor when the breaker opens |
//! | `DeliveryPool` | `DeliveryArgs::queue` (a `Binding`) | publish its own queue of deliveries |
//! | `ConsumerActor` → each `PartitionActor` | `ConsumerArgs::delivery` → `PartitionArgs::delivery` (`PoolHandles`: pool mailbox, queue) | send jobs |
//!
//! A `handle::Handle<T>` reads the peer's current incarnation; the matching
//! `handle::Binding<T>` re-points every clone of it. The supervisor creates the bindings,
//! keeps them, and binds a peer right after spawning it (the pool binds its own queue in
//! `pre_start`, before the supervisor's spawn returns, so before the consumer — spawned
//! after it — can dispatch).
//!
//! Why stable handles and not "re-spawn the dependents together" (Quickwit re-spawns a
//! failed pipeline as a whole and hands each actor its downstream mailboxes at construction;
//! the second half is taken from it, the first is not): a re-spawn of the DLQ writer (its
//! producer hit a fatal error) or of the delivery pool would then also have to stop the
//! consumer and every partition actor, so the group would rebalance and every in-flight
//! event be redelivered — a restart of one producer would cost the whole instance's
//! progress and a wave of duplicates, and it would change the supervisor's behaviour,
//! which this refactor does not. The partition actors hold nothing the writer or pool
//! need to rebuild: what was in flight in a dead incarnation comes back as *errored*
//! tokens and is dispatched again, to the new incarnation, through the same handle. The
//! price is a read lock per lookup (a partition actor caches the queue's sender and looks
//! again only when a send fails), and that a handle may be empty before its peer first
//! started (`None`: the job is dropped, its token reports *errored*, it is re-dispatched).

use std::sync::{Arc, RwLock};

/// A peer's current incarnation (an `ActorRef`, a queue's sender). Cheap to
/// clone; every clone follows the same [`Binding`].
pub(crate) struct Handle<T> {
    slot: Arc<RwLock<Option<T>>>,
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Handle {
            slot: self.slot.clone(),
        }
    }
}

impl<T: Clone> Handle<T> {
    /// The current incarnation; `None` before the peer was first started.
    pub(crate) fn current(&self) -> Option<T> {
        self.slot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The side that points a peer's handles at a new incarnation: held by whoever
/// starts the peer (the supervisor; the delivery pool for its own queue).
pub(crate) struct Binding<T>(Handle<T>);

impl<T> Clone for Binding<T> {
    fn clone(&self) -> Self {
        Binding(self.0.clone())
    }
}

impl<T> Default for Binding<T> {
    fn default() -> Self {
        Binding(Handle {
            slot: Arc::new(RwLock::new(None)),
        })
    }
}

impl<T> Binding<T> {
    /// Every handle of this binding now reaches `peer`.
    pub(crate) fn bind(&self, peer: T) {
        *self.0.slot.write().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    /// A handle that follows this binding.
    pub(crate) fn handle(&self) -> Handle<T> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_handle_follows_its_binding() {
        let binding = Binding::default();
        let (a, b) = (binding.handle(), binding.handle().clone());
        assert_eq!(a.current(), None::<u32>);
        binding.bind(1);
        assert_eq!((a.current(), b.current()), (Some(1), Some(1)));
        binding.clone().bind(2);
        assert_eq!((a.current(), b.current()), (Some(2), Some(2)));
        assert_eq!(Binding::<u32>::default().handle().current(), None);
    }
}
