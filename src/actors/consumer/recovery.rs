//! What earlier work left behind, read back so that finished events are not
//! delivered again and unfinished ones are not lost.
//!
//! * At an assignment: the group's committed offsets and their metadata
//!   (`core::completed`: the offsets an earlier owner finished above its
//!   committed position, bound to the log it was made for), judged by
//!   `core::completed::assess`.
//! * After a partition actor crashed: its in-flight set is gone, so the
//!   partition is sought back to the last stored watermark and read again,
//!   skipping what the crashed incarnation's last stored metadata names done
//!   (the decision: `core::completed::after_crash`). Records of the old read
//!   position that were already polled are fenced off (`route.rs`).
//!
//! # Invariant I7: crash recovery
//!
//! *Enforced in* this file ([`ConsumerState::recover`]; the decision is
//! `core::completed::after_crash`) and `route.rs` (the fence). A crashed partition
//! actor's partition is sought back to its last stored watermark; records polled before
//! the seek are fenced off until the re-read arrives, and the re-read skips what the
//! crashed incarnation's last stored metadata names done.
//!
//! *Tested by:* `tests/pipeline.rs::partition_actor_crash_rereads_from_watermark` (fault
//! hook `testing.crash_on_event_id`, built only with the cargo feature `test-hooks`);
//! `tests/positions.rs::a_crashed_partition_actor_skips_what_its_metadata_names`;
//! without a broker, `consumer/tests.rs`
//! (`a_crashed_partition_is_read_again_skipping_what_its_metadata_names_done`: seen
//! failing with `after_crash` skipping nothing) and `core::completed::crash`'s unit tests.

use super::{ConsumerMsg, ConsumerState};
use crate::actors::partition::Src;
use crate::core::completed::{self, Completed, Crashed};
use crate::core::offsets::NextOffset;
use crate::kafka::seams::LogEnd;
use ractor::{ActorProcessingErr, ActorRef};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What the committed offsets of a partition pair say (main, DLQ).
#[derive(Debug, Default)]
pub(super) struct Committed {
    /// The offsets an earlier owner finished above the committed position.
    pub skip: [Option<Completed>; 2],
    /// The position was made for another log (see `SideStart::read_from_start`).
    pub other_log: [bool; 2],
    /// The log the position was made for, to check once the topic's id is
    /// read (see `SideStart::verify`).
    pub verify: [Option<Arc<str>>; 2],
}

/// A committed position above the log start: what deleted-unread accounting
/// looks at (side, partition, committed, log start, done above it).
type Gap = (usize, i32, i64, i64, Option<Completed>);

impl ConsumerState {
    /// A partition actor crashed: reads its partition again from what it
    /// stored, with a new actor.
    pub(super) async fn recover(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        p: i32,
    ) -> Result<(), ActorProcessingErr> {
        let Some(old) = self.parts.remove(&p) else {
            return Ok(());
        };
        // A crashed actor's post_stop did not run: give its counts back here.
        old.shared.release_held(&self.ready);
        old.shared.release_buffered(&self.pipeline.buffered);
        let io = self.io()?.clone();
        let topics = self.topics();
        let mut starts = [None, None];
        let mut fences = [None, None];
        let mut skip = [None, None];
        for src in Src::BOTH {
            let i = src.index();
            let stored = old.shared.stored_with_metadata(src);
            let decided = completed::after_crash(Crashed {
                stored: stored.as_ref().map(|(at, meta)| (*at, meta.as_str())),
                log: self.topic_ids[i].as_deref(),
                first_forwarded: old.first_forwarded[i],
                last_forwarded: old.last_forwarded[i],
            });
            skip[i] = decided.skip;
            starts[i] = decided.start.map(NextOffset::at);
            if let Some(reread) = decided.reread {
                // Unfinished work was lost with the actor: read again from the watermark.
                let _ = io.resume(&topics[i], p);
                let (io, topic) = (io.clone(), topics[i].clone());
                tokio::task::spawn_blocking(move || {
                    io.seek(&topic, p, reread.from, Duration::from_secs(10))
                })
                .await??;
                fences[i] = Some(reread.fence);
                tracing::info!(partition = p, topic = %topics[i], from = reread.from, "partition sought back to its watermark");
            }
        }
        let named: u64 = skip.iter().flatten().map(Completed::len).sum();
        tracing::info!(
            partition = p,
            named,
            "re-read skips the offsets the crashed actor's last stored metadata names done"
        );
        let committed = Committed {
            skip,
            ..Committed::default()
        };
        self.spawn_partition(myself, p, starts, old.shared, committed)
            .await?;
        if let Some(part) = self.parts.get_mut(&p) {
            part.fence = fences;
            part.last_forwarded = old.last_forwarded;
        }
        // As after an assignment: the new actor learns DLQ p's lag (its main
        // p's records wait until DLQ p is read: `core::partition`, I39).
        self.check_lag(myself, true);
        Ok(())
    }

    /// Reads, off the runtime, the group's committed offsets of `partitions` (main
    /// and DLQ) and decodes their metadata: the offsets an earlier owner finished
    /// above its committed position, and whether the position was made for
    /// another log. A failed lookup skips nothing (the earlier owner's finished
    /// work is then delivered again).
    pub(super) async fn committed_metadata(
        &mut self,
        partitions: &[i32],
    ) -> HashMap<i32, Committed> {
        if partitions.is_empty() {
            return HashMap::new();
        }
        let b = self.broker.clone();
        let topics = self.topics();
        // The topics' ids now: metadata made for another incarnation of a
        // topic (deleted and recreated under its name) names offsets of a log
        // that is gone, and is not trusted.
        let (b2, t2) = (b.clone(), topics.clone());
        let ids = tokio::task::spawn_blocking(move || {
            let names = [t2[0].as_str(), t2[1].as_str()];
            let mut ids = b2.topic_ids(&names, Duration::from_secs(10));
            t2.map(|t| ids.remove(&t).map(Arc::<str>::from))
        })
        .await
        .unwrap_or_default();
        if ids[0].is_none() {
            tracing::warn!(topic = %topics[0], "cannot read the topic's id at the assignment: the committed metadata cannot be tied to this log, so the finished work it names is delivered again, and a position made for a log is not stored over until a lag check reads the id (another id: the partition is read from its log's start)");
        }
        self.topic_ids = ids.clone();
        let parts = partitions.to_vec();
        let lookup = tokio::task::spawn_blocking(move || {
            let names = [topics[0].as_str(), topics[1].as_str()];
            let committed = b.committed(&names, &parts, Duration::from_secs(10))?;
            let mut out: HashMap<i32, Committed> = HashMap::new();
            let mut gaps: Vec<Gap> = Vec::new();
            for (i, t) in topics.iter().enumerate() {
                // The log start of each partition: where a committed position
                // below it lost events (deleted-unread accounting).
                let starts = b.offsets(t, &parts, LogEnd::Start);
                if starts.is_none() {
                    tracing::warn!(topic = %t, partitions = ?parts, "cannot read the log start offsets: events deleted unread are not checked at this assignment");
                }
                for e in committed.iter().filter(|e| e.topic == *t) {
                    let at = e.offset;
                    let judged = completed::assess(at, &e.metadata, ids[i].as_deref());
                    let start = starts.as_ref().and_then(|s| s.get(&e.partition));
                    if let Some(&start) = start {
                        gaps.push((i, e.partition, at, start, judged.skip.clone()));
                    }
                    if judged.other_log {
                        tracing::warn!(topic = %t, partition = e.partition, committed = at, "the committed position was made for another log (its metadata names another topic id: the topic was recreated): the partition is read from its log's start");
                    }
                    let entry = out.entry(e.partition).or_default();
                    entry.skip[i] = judged.skip;
                    entry.other_log[i] = judged.other_log;
                    entry.verify[i] = judged.verify.map(Arc::from);
                }
            }
            Ok::<_, crate::kafka::seams::KafkaIoError>((out, gaps))
        });
        match lookup.await {
            Ok(Ok((out, gaps))) => {
                let topics = [&self.pipeline.config.kafka.topic, &self.pipeline.dlq_topic];
                for t in topics {
                    for p in partitions {
                        self.pipeline.deleted_unread_series(t, *p);
                    }
                }
                for (i, p, committed, start, done) in gaps {
                    self.pipeline
                        .deleted_unread(topics[i], p, committed, start, done.as_ref());
                }
                let named: u64 = out
                    .values()
                    .flat_map(|c| c.skip.iter().flatten())
                    .map(Completed::len)
                    .sum();
                tracing::info!(partitions = ?partitions, named, "committed metadata read: offsets done above the committed positions are skipped");
                out
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the committed offsets' metadata: the previous owner's finished work above its watermark is delivered again");
                HashMap::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "committed metadata lookup failed");
                HashMap::new()
            }
        }
    }
}
