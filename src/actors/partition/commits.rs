//! Commits before auto-commit, coalesced (the decision:
//! [`crate::core::commit_pace`]). A partition side due for a commit leaves
//! its offset and metadata here instead of sending an OffsetCommit request of
//! its own; what is waiting, the latest per partition, is committed in one
//! asynchronous request, at most one per [`COMMIT_FLOOR`] for the whole
//! consumer. A drain's commit (`Commit::Now`) is sent at once and takes its
//! partition's waiting entry away (`forget`), so a later flush does not send
//! an older position for a partition handed over.

use crate::core::commit_pace::{CommitPace, PaceEffect};
use crate::core::partition::COMMIT_FLOOR;
use crate::kafka::seams::{CommitAt, PartitionIo};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

pub(crate) struct SoonCommits {
    state: Mutex<State>,
    epoch: Instant,
}

struct State {
    pace: CommitPace,
    /// (topic, partition) → the offset and metadata to commit.
    waiting: HashMap<(String, i32), (i64, String)>,
}

impl SoonCommits {
    pub(crate) fn new() -> Arc<SoonCommits> {
        Arc::new(SoonCommits {
            state: Mutex::new(State {
                pace: CommitPace::new(COMMIT_FLOOR),
                waiting: HashMap::new(),
            }),
            epoch: Instant::now(),
        })
    }

    /// Commits `offset` with `metadata` for the partition now, or within the
    /// floor together with the others'. Called on a tokio runtime (a flush
    /// is a task).
    pub(crate) fn ask(
        self: &Arc<Self>,
        consumer: &Arc<dyn PartitionIo>,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: String,
    ) {
        let mut st = self.state();
        st.waiting
            .insert((topic.to_owned(), partition), (offset, metadata));
        let fx = st.pace.ask(self.epoch.elapsed());
        self.carry_out(st, fx, consumer);
    }

    /// The partition's own commit went out (a drain): nothing of it waits.
    pub(crate) fn forget(&self, topic: &str, partition: i32) {
        self.state().waiting.remove(&(topic.to_owned(), partition));
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing in it is left half-changed by a panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn carry_out(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        fx: PaceEffect,
        consumer: &Arc<dyn PartitionIo>,
    ) {
        match fx {
            PaceEffect::Send => {
                let waiting = std::mem::take(&mut st.waiting);
                drop(st);
                commit(&**consumer, waiting);
            }
            PaceEffect::FlushAt(at) => {
                drop(st);
                let this = self.clone();
                // A consumer closed meanwhile is not kept alive for this.
                let consumer: Weak<dyn PartitionIo> = Arc::downgrade(consumer);
                tokio::spawn(async move {
                    tokio::time::sleep_until((this.epoch + at).into()).await;
                    let Some(consumer) = consumer.upgrade() else {
                        return;
                    };
                    let mut st = this.state();
                    let fx = st.pace.flush(this.epoch.elapsed());
                    this.carry_out(st, fx, &consumer);
                });
            }
            PaceEffect::Nothing => {}
        }
    }
}

/// One asynchronous OffsetCommit request for every partition waiting.
fn commit(consumer: &dyn PartitionIo, waiting: HashMap<(String, i32), (i64, String)>) {
    if waiting.is_empty() {
        return; // All forgotten (drained) meanwhile.
    }
    let at: Vec<CommitAt<'_>> = waiting
        .iter()
        .map(|((topic, partition), (offset, metadata))| CommitAt {
            topic,
            partition: *partition,
            offset: *offset,
            metadata,
        })
        .collect();
    metrics::counter!(crate::metrics::OFFSET_COMMITS, "kind" => "coalesced").increment(1);
    if let Err(e) = consumer.commit(&at) {
        // Expected while a rebalance takes partitions away; what is stored
        // goes with the next auto-commit.
        tracing::debug!(error = %e, partitions = at.len(), "coalesced commit");
    }
}
