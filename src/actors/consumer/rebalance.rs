//! Rebalances. An assignment starts one partition actor per new partition
//! pair, with what the committed offsets' metadata says an earlier owner
//! finished (`recovery.rs`), once the topics are checked to still pair up. A
//! revocation drains the revoked partitions (bounded: requests on the wire
//! are waited for, what is queued ends now, the watermark is committed) and
//! stops their actors; records of theirs still arriving are dropped
//! (`route.rs`: not ours any more) and read again by the next owner.

use super::start::{check_pairs, partition_count, StartupError};
use super::{ConsumerMsg, ConsumerState, PartitionMsg, PartitionShared};
use crate::metrics as m;
use ractor::{ActorProcessingErr, ActorRef};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl ConsumerState {
    pub(super) async fn assigned(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        partitions: Vec<i32>,
    ) -> Result<(), ActorProcessingErr> {
        let mut new = Vec::with_capacity(partitions.len());
        for p in partitions {
            if self.parts.contains_key(&p) {
                // Only an incremental assignment (refused in the config)
                // names a partition already owned: replacing its actor
                // would lose its in-flight set, and the new actor's
                // watermark would pass the old one's unfinished events.
                tracing::warn!(
                    partition = p,
                    "assigned a partition already owned: keeping its actor"
                );
                continue;
            }
            new.push(p);
        }
        // Partitions added to the main topic or the DLQ while running
        // (the group rebalances when they appear): the `range` assignor
        // would then pair main p with a DLQ p elsewhere, or with none.
        // Nothing is started on such an assignment: the process exits
        // for a restart, which refuses to start until the counts match.
        if let Err(e) = self.check_partition_counts().await {
            tracing::error!(error = %e, "partition counts changed while running: refusing this assignment and exiting");
            self.pipeline.fatal(e.to_string());
            return Ok(());
        }
        // Records of the new assignment wait in this mailbox meanwhile.
        let mut skips = self.committed_metadata(&new).await;
        for p in new {
            let c = skips.remove(&p).unwrap_or_default();
            self.spawn_partition(
                myself,
                p,
                [None, None],
                Arc::new(PartitionShared::default()),
                c,
            )
            .await?;
        }
        self.ready.assigned.store(true, Ordering::SeqCst);
        metrics::gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        if let Some(at) = self.subscribed_at.filter(|_| !self.parts.is_empty()) {
            self.subscribed_at = None;
            let waited = at.elapsed();
            metrics::gauge!(m::TAKEOVER).set(waited.as_secs_f64());
            tracing::info!(
                waited_ms = waited.as_millis() as u64,
                partitions = self.parts.len(),
                "first assignment"
            );
        }
        self.pipeline.assignment.set_assigned(self.parts.len());
        // New partitions read DLQ p before main p until their DLQ lag is
        // known: look it up now rather than at the next tick.
        self.check_lag(myself, true);
        Ok(())
    }

    /// Drains the revoked partitions (the revoke callback waits for this).
    pub(super) async fn revoked(&mut self, partitions: &[i32]) {
        let deadline = self.pipeline.config.pipeline.drain_timeout + Duration::from_millis(1_000);
        self.hand_over(partitions, deadline).await;
        metrics::gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        self.pipeline.assignment.set_assigned(self.parts.len());
        if self.parts.is_empty() {
            self.ready.assigned.store(false, Ordering::SeqCst);
        }
    }

    /// The main topic and the DLQ still have as many partitions as each other
    /// (when both are in the metadata).
    async fn check_partition_counts(&self) -> Result<(), StartupError> {
        let b = self.broker.clone();
        let [main, dlq] = self.topics();
        tokio::task::spawn_blocking(move || {
            let main_n = partition_count(&*b, &main)?;
            let dlq_n = partition_count(&*b, &dlq)?;
            match (main_n, dlq_n) {
                (Some(m), Some(d)) => check_pairs(&main, m, &dlq, d),
                // A topic being deleted and created again (a purge) has no
                // partitions for a moment: its next assignment is checked.
                _ => {
                    tracing::warn!(main = %main, dlq = %dlq, main_partitions = ?main_n, dlq_partitions = ?dlq_n, "a topic of the pair has no partitions in the metadata (deleted, or being created): partition counts checked again at the next assignment");
                    Ok(())
                }
            }
        })
        .await
        .map_err(|e| StartupError::Metadata("main and DLQ".into(), e.to_string()))?
    }

    /// Drains the given partitions concurrently (bounded) and stops their actors.
    pub(super) async fn hand_over(&mut self, partitions: &[i32], deadline: Duration) {
        let mut waits = Vec::new();
        for p in partitions {
            if let Some(part) = self.parts.remove(p) {
                let (tx, rx) = ractor::concurrency::oneshot();
                let _ = part.actor.send_message(PartitionMsg::Handover(tx.into()));
                waits.push((*p, part.actor, rx));
            }
        }
        let until = tokio::time::Instant::now() + deadline;
        for (p, actor, rx) in waits {
            match tokio::time::timeout_at(until, rx).await {
                Ok(Ok(stored)) => tracing::info!(partition = p, ?stored, "partition drained"),
                _ => tracing::warn!(partition = p, "partition did not drain in time"),
            }
            actor.stop(Some("revoked".into()));
        }
    }
}
