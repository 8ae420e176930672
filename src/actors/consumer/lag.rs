//! The lag check: each assigned partition's end offsets and the group's
//! committed DLQ position, looked up on the [`BrokerView`] (a client outside
//! the group: on the group consumer's connection each `ListOffsets` waits
//! behind a long-poll `Fetch`), and handed to the partition actors as
//! [`Positions`] — which decide whether DLQ p has anything unread (it is
//! read before main p), and whether an idle side sits behind transaction
//! markers (`core::partition`'s probe).
//!
//! At most one check runs at a time: ticks skip while one runs; an
//! assignment asks for one more after it.

use super::{ConsumerMsg, ConsumerState, PartitionMsg, Src};
use crate::actors::partition::Positions;
use crate::core::partition::Input;
use crate::kafka::seams::{BrokerView, LogEnd};
use ractor::ActorRef;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The state of the lag checks.
#[derive(Debug, Default)]
pub(super) struct Checks {
    /// A lag check is running (until its `Lag` message arrives): ticks skip
    /// instead of piling up behind it.
    running: bool,
    /// Partitions were assigned while a check was running: check again when it ends.
    again: bool,
    /// When a lag check last read the topics' ids (at most once a second).
    ids_read_at: Option<Instant>,
}

/// How far the group consumer read a DLQ partition (see `ConsumerState::dlq_read`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DlqRead {
    pub position: Option<i64>,
    pub last_forwarded: Option<i64>,
}

/// What one lag check found.
#[derive(Debug, Default)]
pub(crate) struct LagAnswer {
    /// Per partition pair.
    positions: Vec<(i32, Positions)>,
    /// The topics' ids (main, DLQ) now (`None`: not read): a changed id is a
    /// topic recreated under the partitions' positions.
    logs: [Option<Arc<str>>; 2],
}

impl ConsumerState {
    /// Looks up, off the runtime, each assigned partition's end offsets and the
    /// group's committed DLQ position (where reading starts when nothing was read).
    /// While one check runs, a tick is skipped; an assignment (`again_if_busy`)
    /// asks for one more run after it, since the running check predates it.
    pub(super) fn check_lag(&mut self, myself: &ActorRef<ConsumerMsg>, again_if_busy: bool) {
        if self.parts.is_empty() {
            return;
        }
        if self.lag.running {
            self.lag.again |= again_if_busy;
            return;
        }
        self.lag.running = true;
        let b = self.broker.clone();
        let [main, dlq] = self.topics();
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        let read = self.dlq_read(&parts);
        let ids = self
            .lag
            .ids_read_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if ids {
            self.lag.ids_read_at = Some(Instant::now());
        }
        let me = myself.clone();
        tokio::spawn(async move {
            let lookup = tokio::task::spawn_blocking(move || {
                lag_lookup(&*b, &main, &dlq, &parts, &read, ids)
            });
            // Always answer, even if the lookup panicked: the answer ends the check.
            let _ = me.send_message(ConsumerMsg::Lag(lookup.await.unwrap_or_default()));
        });
    }

    /// A check ended: its findings go to the partition actors.
    pub(super) fn lag_answered(&mut self, myself: &ActorRef<ConsumerMsg>, answer: LagAnswer) {
        self.lag.running = false;
        if std::mem::take(&mut self.lag.again) {
            self.check_lag(myself, false);
        }
        let read_ids = answer.logs.iter().any(Option::is_some);
        for (p, positions) in answer.positions {
            if let Some(part) = self.parts.get(&p) {
                if read_ids {
                    let _ = part
                        .actor
                        .send_message(PartitionMsg::Input(Input::Logs(answer.logs.clone())));
                }
                let _ = part
                    .actor
                    .send_message(PartitionMsg::Input(Input::Positions(positions)));
            }
        }
    }

    /// How far each partition's DLQ side was read: the group consumer's
    /// position (librdkafka moves it past control records, which are never
    /// handed over; not past a record still pending in the poll thread:
    /// `PartitionIo::positions`) and the last DLQ offset handed to the
    /// partition actor.
    fn dlq_read(&self, parts: &[i32]) -> HashMap<i32, DlqRead> {
        let positions = self
            .io
            .as_ref()
            .map(|io| io.positions(&self.pipeline.dlq_topic))
            .unwrap_or_default();
        parts
            .iter()
            .map(|p| {
                let last = self
                    .parts
                    .get(p)
                    .and_then(|part| part.last_forwarded[Src::Dlq.index()]);
                let read = DlqRead {
                    position: positions.get(p).copied(),
                    last_forwarded: last,
                };
                (*p, read)
            })
            .collect()
    }
}

/// One batched `ListOffsets` per topic and kind (not one per partition), plus one
/// `OffsetFetch`, and one `DescribeTopics` for the topics' ids.
fn lag_lookup(
    b: &dyn BrokerView,
    main: &str,
    dlq: &str,
    parts: &[i32],
    read: &HashMap<i32, DlqRead>,
    read_ids: bool,
) -> LagAnswer {
    let main_highs = b.offsets(main, parts, LogEnd::End).unwrap_or_default();
    // The ids only when the brokers answered: a DescribeTopics while none is
    // up makes librdkafka reconnect without its backoff (measured: ~30,000
    // refused connections per instance in a broker restart, against ~500).
    let logs = if read_ids && !main_highs.is_empty() {
        let mut ids = b.topic_ids(&[main, dlq], Duration::from_secs(5));
        [main, dlq].map(|t| ids.remove(t).map(Arc::<str>::from))
    } else {
        [None, None]
    };
    let highs = b.offsets(dlq, parts, LogEnd::End).unwrap_or_default();
    let lows = b.offsets(dlq, parts, LogEnd::Start).unwrap_or_default();
    let committed: HashMap<i32, i64> = b
        .committed(&[dlq], parts, Duration::from_secs(5))
        .map(|c| c.into_iter().map(|c| (c.partition, c.offset)).collect())
        .unwrap_or_default();
    let positions = parts
        .iter()
        .map(|p| {
            let main_high = main_highs.get(p).copied();
            let (Some(&high), Some(&low)) = (highs.get(p), lows.get(p)) else {
                // No DLQ partition to look at (e.g. the topic does not exist yet):
                // nothing to drain there.
                let none = Positions {
                    main_high,
                    dlq_high: 0,
                    dlq_start: 0,
                };
                return (*p, none);
            };
            let committed = committed.get(p).copied();
            let positions = dlq_positions(main_high, low, high, committed, read.get(p));
            (*p, positions)
        })
        .collect();
    LagAnswer { positions, logs }
}

/// What a partition is told about its DLQ side: "unread" must mean records a
/// fetch can still return. Reading starts at the committed position, raised to
/// the log start (envelopes deleted by retention or `delete-records` can never
/// be read: a start below them would keep the partition draining forever). And
/// when the consumer has read to the end (its position, which librdkafka moves
/// past control records, is at the end offset) the end reported is what was
/// handed over: a transaction marker (or an aborted batch) at the end takes
/// offsets that no record will ever fill.
fn dlq_positions(
    main_high: Option<i64>,
    low: i64,
    high: i64,
    committed: Option<i64>,
    read: Option<&DlqRead>,
) -> Positions {
    let start = committed.unwrap_or(low).max(low).min(high);
    let read = read.copied().unwrap_or_default();
    let handed = read.last_forwarded.map(|l| l + 1);
    let read_to = read.position.max(handed).unwrap_or(start);
    let dlq_high = if read_to.max(start) >= high {
        // Not raised to `start`: what was handed over before the log start
        // moved up is what the partition compares with (its next offset).
        handed.unwrap_or(start).min(high)
    } else {
        high
    };
    Positions {
        main_high,
        dlq_high,
        dlq_start: start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(position: Option<i64>, last_forwarded: Option<i64>) -> DlqRead {
        DlqRead {
            position,
            last_forwarded,
        }
    }

    /// What the partition machine would conclude (`dlq_has_unread` with
    /// nothing begun, or with `begun` the highest begun offset).
    fn unread(p: &Positions, begun: Option<i64>) -> bool {
        p.dlq_high > begun.map_or(p.dlq_start, |b| b + 1)
    }

    #[test]
    fn the_dlq_start_is_raised_to_the_log_start() {
        // Committed 5, everything up to 8 deleted (the DLQ purged to its end).
        let p = dlq_positions(None, 8, 8, Some(5), None);
        assert_eq!((p.dlq_start, p.dlq_high), (8, 8));
        assert!(!unread(&p, None), "nothing can be read: not unread");
        // Purged up to 8 of 10: two envelopes left to read.
        let p = dlq_positions(None, 8, 10, Some(5), None);
        assert_eq!(p.dlq_start, 8);
        assert!(unread(&p, None));
        // Nothing committed: from the log start.
        let p = dlq_positions(None, 3, 10, None, None);
        assert_eq!(p.dlq_start, 3);
    }

    #[test]
    fn a_control_marker_at_the_end_is_not_unread() {
        // An aborted record (0) and its marker (1): the consumer's position
        // passed both, nothing was handed over.
        let p = dlq_positions(None, 0, 2, None, Some(&read(Some(2), None)));
        assert!(!unread(&p, None), "{p:?}");
        // A committed transaction: record 4 read and begun, marker at 5.
        let p = dlq_positions(None, 0, 6, Some(4), Some(&read(Some(6), Some(4))));
        assert_eq!(p.dlq_high, 5);
        assert!(!unread(&p, Some(4)));
        // Before the position passed the marker: still unread (looked at again
        // at the next lag check).
        let p = dlq_positions(None, 0, 6, Some(4), Some(&read(Some(5), Some(4))));
        assert!(unread(&p, Some(4)));
        // Records not handed over yet are unread whatever the position says.
        let p = dlq_positions(None, 0, 10, Some(4), Some(&read(None, Some(4))));
        assert!(unread(&p, Some(4)));
    }

    #[test]
    fn a_log_start_moved_past_what_was_read_leaves_nothing_unread() {
        // Read and begun up to 2, then the log was purged to 10 (= its end).
        let p = dlq_positions(None, 10, 10, Some(0), Some(&read(Some(3), Some(2))));
        assert!(!unread(&p, Some(2)), "{p:?}");
    }
}
