//! A librdkafka handle whose teardown never runs on the caller's thread.
//!
//! Dropping a group consumer closes it (`rdkafka`'s `BaseConsumer::drop`:
//! LeaveGroup, the revoke callback with its synchronous commit, then a poll
//! loop until librdkafka says the group is closed, with no time limit) and
//! then destroys it (joining librdkafka's threads). Whoever drops the last
//! `Arc` of a handle runs that: a stopped partition actor's state (which
//! ractor hands to the supervising consumer actor in its termination event:
//! at shutdown the consumer actor dropped them, on a tokio worker, after
//! its final commit), a lookup on tokio's blocking pool, a coalesced
//! commit's task. On a tokio thread a teardown that does not finish
//! (librdkafka has had such hangs around deleted topics,
//! confluentinc/librdkafka#4362) holds the thread, and the runtime's drop at
//! exit waits for every thread it owns: the process never exits. [`Detached`] hands the teardown to a thread of its own, which
//! nothing waits for; the shutdown tears the consumer down on its own
//! thread, within its deadline, when it holds the last handle
//! (`actors::consumer`).

use std::ops::Deref;

/// `T`, dropped on a new thread (or in place if no thread can be started).
pub(crate) struct Detached<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(inner: T) -> Detached<T> {
        Detached(Some(inner))
    }

    /// The handle itself, to be torn down by the caller (on a thread of
    /// its own).
    pub(crate) fn into_inner(mut self) -> T {
        self.0
            .take()
            .unwrap_or_else(|| unreachable!("taken in drop"))
    }
}

impl<T: Send + 'static> Deref for Detached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Taken only in `drop`.
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken in drop"))
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let Some(inner) = self.0.take() else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("courier-kafka-teardown".into())
            .spawn(move || drop(inner));
        if let Err(e) = spawned {
            // No thread to be had (resource limits): the closure, and the
            // handle with it, was dropped in place.
            tracing::debug!(error = %e, "a Kafka client was torn down in place");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Blocks its dropper until `release` is sent.
    struct Stuck {
        release: mpsc::Receiver<()>,
        dropped: mpsc::Sender<std::thread::ThreadId>,
    }

    impl Drop for Stuck {
        fn drop(&mut self) {
            let _ = self.dropped.send(std::thread::current().id());
            let _ = self.release.recv();
        }
    }

    /// A teardown that does not end does not hold the thread that dropped
    /// the handle (a tokio worker, here): the runtime shuts down.
    #[test]
    fn a_stuck_teardown_holds_no_runtime_thread() {
        let (release_tx, release) = mpsc::channel();
        let (dropped, dropped_rx) = mpsc::channel();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let handle = Detached::new(Stuck { release, dropped });
        let worker = rt.block_on(async move {
            tokio::spawn(async move {
                let me = std::thread::current().id();
                drop(handle);
                me
            })
            .await
            .unwrap()
        });
        let teardown = dropped_rx.recv().unwrap();
        assert_ne!(teardown, worker, "torn down on the worker that dropped it");
        // The runtime's threads are all free: its shutdown waits for none.
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            drop(rt);
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the runtime shut down while the teardown was stuck");
        let _ = release_tx.send(());
    }
}
