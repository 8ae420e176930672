//! The graceful shutdown: stop fetching, drain the partitions within
//! `pipeline.shutdown_grace`, then the final commit, the group leave and the
//! consumer's close on a thread of their own ([`finish`]), waited for until
//! [`close_deadline`].

use super::ConsumerState;
use crate::kafka::poller::Poller;
use crate::kafka::KafkaConsumer;
use rdkafka::consumer::{CommitMode, Consumer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the shutdown needs after waiting for the final commit and the
/// close: stopping the actors and the runtime, flushing the log.
pub(super) const EXIT_MARGIN: Duration = Duration::from_secs(1);
/// The least time the final commit and the close are given after the
/// drain, even when the drain took the whole grace.
pub(super) const CLOSE_AT_LEAST: Duration = Duration::from_secs(2);

impl ConsumerState {
    /// Graceful shutdown. librdkafka's close has no time limit of its own;
    /// one that does not end (it has hung around deleted topics) is left
    /// behind on its thread, which the process does not wait for at exit.
    /// Over fakes (no real client) it drains and lets go of the seam.
    pub(super) async fn shutdown(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        let Some(io) = self.io.take() else {
            return;
        };
        let grace = self.pipeline.config.pipeline.shutdown_grace;
        let grace_end = tokio::time::Instant::now() + grace;
        let client = self.client.take();
        // Stop fetching; the poll thread keeps running so the group sees us alive.
        if let Some(c) = &client {
            if let Ok(assignment) = c.consumer.assignment() {
                let _ = c.consumer.pause(&assignment);
            }
        }
        let partitions: Vec<i32> = self.parts.keys().copied().collect();
        self.hand_over(&partitions, grace).await;
        // The close waits for the last handle: this one goes now.
        drop(io);
        let Some(client) = client else {
            self.ready.assigned.store(false, Ordering::SeqCst);
            return;
        };
        let until = close_deadline(grace_end, tokio::time::Instant::now());
        let kafka = &self.pipeline.config.kafka;
        // A dynamic member leaves as it closes; a static one only if asked.
        let leave = kafka.leave_on_shutdown && kafka.instance_id().is_some();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let committed = Arc::new(AtomicBool::new(false));
        let by = std::time::Instant::now()
            + until.saturating_duration_since(tokio::time::Instant::now());
        let done = committed.clone();
        let spawned = std::thread::Builder::new()
            .name("courier-shutdown".into())
            .spawn(move || {
                finish(client.consumer, client.poller, leave, by, &done);
                let _ = tx.send(());
            });
        match spawned {
            Ok(_) => {
                if tokio::time::timeout_at(until, rx).await.is_err() {
                    if committed.load(Ordering::SeqCst) {
                        tracing::warn!("the Kafka consumer's close did not finish within pipeline.shutdown_grace: exiting without it (the final commit was made; the group reassigns the partitions after kafka.session_timeout)");
                    } else {
                        tracing::warn!("the final commit did not finish within pipeline.shutdown_grace: exiting without it (what finished since the last commit that landed is delivered again; the group reassigns the partitions after kafka.session_timeout)");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the shutdown thread: no final commit; the group reassigns the partitions after kafka.session_timeout")
            }
        }
        self.ready.assigned.store(false, Ordering::SeqCst);
    }
}

/// Until when the shutdown waits for the final commit and the close: the
/// end of `pipeline.shutdown_grace` less [`EXIT_MARGIN`] (with nothing in
/// flight the process exits within the grace), and at least
/// [`CLOSE_AT_LEAST`] after `now` (the drain's end).
pub(super) fn close_deadline(
    grace_end: tokio::time::Instant,
    now: tokio::time::Instant,
) -> tokio::time::Instant {
    let by_grace = grace_end.checked_sub(EXIT_MARGIN).unwrap_or(grace_end);
    by_grace.max(now + CLOSE_AT_LEAST)
}

/// The end of a graceful shutdown, off the runtime (every step blocks in
/// librdkafka): stops the poll thread, commits what is stored, leaves the
/// group if asked (a static member), and closes the consumer — its revoke
/// callback commits again and, for a dynamic member, the close sends
/// LeaveGroup. Nothing waits for this thread past `by`.
/// `committed`: set once the final commit was answered.
fn finish(
    consumer: Arc<KafkaConsumer>,
    mut poller: Option<Poller>,
    leave: bool,
    by: std::time::Instant,
    committed: &AtomicBool,
) {
    if let Some(p) = poller.as_mut() {
        p.stop_and_join();
    }
    // A consumer that failed fatally sends nothing any more: no commit,
    // no LeaveGroup (the group has already moved its partitions).
    if let Some((code, _)) = consumer.client().fatal_error() {
        tracing::warn!(?code, "no final commit: the Kafka consumer failed fatally; the partitions' new owners deliver again what finished since the last commit that landed");
        return;
    }
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!("final commit done"),
        Err(e) => {
            tracing::info!(error = %e, "final commit (nothing new to commit is fine)")
        }
    }
    committed.store(true, Ordering::SeqCst);
    if leave {
        let within = by
            .saturating_duration_since(std::time::Instant::now())
            .min(Duration::from_secs(5));
        if crate::kafka::leave_group(&consumer, within) {
            tracing::info!("left the consumer group: the other members take the partitions now");
        } else {
            tracing::warn!("could not leave the consumer group in time: the partitions move after kafka.session_timeout");
        }
    }
    // The close (rdkafka's drop: the revoke callback, LeaveGroup for a
    // dynamic member) runs here once this thread holds the last handle: a
    // partition actor's state or a lookup still holding one lets go within
    // moments. Past `by` the last holder's drop runs it, on a thread of its
    // own (`kafka::detached`).
    let mut consumer = consumer;
    loop {
        match Arc::try_unwrap(consumer) {
            Ok(last) => {
                drop(last.into_inner());
                tracing::debug!("the Kafka consumer is closed");
                return;
            }
            Err(shared) if std::time::Instant::now() < by => {
                consumer = shared;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => {
                tracing::warn!("the Kafka consumer is still in use at the end of pipeline.shutdown_grace: its close is left to its last user");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final commit and the close are waited for until a second before
    /// the grace ends (with nothing in flight the process exits within it),
    /// and for at least two seconds after a drain that took the whole grace.
    #[test]
    fn the_close_is_waited_for_within_the_grace_or_two_seconds_after_the_drain() {
        let t0 = tokio::time::Instant::now();
        let s = Duration::from_secs;
        let grace_end = t0 + s(15);
        assert_eq!(close_deadline(grace_end, t0), t0 + s(14));
        assert_eq!(close_deadline(grace_end, t0 + s(12)), t0 + s(14));
        assert_eq!(close_deadline(grace_end, t0 + s(15)), t0 + s(17));
        // A grace shorter than the margins.
        assert_eq!(close_deadline(t0 + s(1), t0), t0 + s(2));
    }
}
