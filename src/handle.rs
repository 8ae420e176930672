//! Stable handles to the long-lived peers an actor or task talks to.
//!
//! Each actor is given, at construction, a [`Handle`] for every peer it sends to
//! (its arguments name its dependencies; nothing is looked up in a shared
//! registry). The supervisor keeps the matching [`Binding`] and re-points it
//! when it re-spawns the peer, so every holder reaches the current incarnation
//! without being re-spawned itself: a restarted DLQ writer or delivery pool is
//! reachable by the others at once (see docs/ARCHITECTURE.md, "Handles").

use std::sync::{Arc, RwLock};

/// A peer's current incarnation (an `ActorRef`, a queue's sender). Cheap to
/// clone; every clone follows the same [`Binding`].
pub struct Handle<T> {
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
    pub fn current(&self) -> Option<T> {
        self.slot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The side that points a peer's handles at a new incarnation: held by whoever
/// starts the peer (the supervisor; the delivery pool for its own queue).
pub struct Binding<T>(Handle<T>);

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
    pub fn bind(&self, peer: T) {
        *self.0.slot.write().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    /// A handle that follows this binding.
    pub fn handle(&self) -> Handle<T> {
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
