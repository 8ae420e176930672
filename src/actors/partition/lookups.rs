//! Work an effect starts off the runtime, each answering the actor through its
//! mailbox when it is worth an input: a side sought to its log's start, DLQ p
//! sought back to records handed back, a probe of a range with nothing to
//! deliver, a position reset's log lines and metrics.

use super::{PartitionMsg, PartitionState, Src};
use crate::core::offsets::NextOffset;
use crate::core::partition::Input;
use crate::kafka::seams::{KafkaIoError, LogEnd};
use ractor::ActorRef;

impl PartitionState {
    /// Seeks one side, off the runtime, to its log's start (the topic was
    /// replaced under the position) and answers `Input::ReadingFrom`.
    pub(super) fn read_from_start(&self, myself: &ActorRef<PartitionMsg>, src: Src) {
        let topic = self.decoder.topic(src).to_string();
        let Some(io) = self.a.io.clone() else {
            return; // Stopped.
        };
        let broker = self.a.broker.clone();
        let (partition, me) = (self.a.partition, myself.clone());
        tokio::task::spawn_blocking(move || {
            let timeout = std::time::Duration::from_secs(5);
            let start = broker
                .offsets(&topic, &[partition], LogEnd::Start)
                .and_then(|starts| starts.get(&partition).copied())
                .ok_or_else(|| KafkaIoError::Refused("the log start could not be read".into()))
                .and_then(|low| {
                    io.seek(&topic, partition, low, timeout)?;
                    Ok(low)
                });
            let start = match start {
                Ok(low) => {
                    tracing::info!(partition, %topic, start = low, "the recreated topic is read from its start");
                    Some(low)
                }
                Err(e) => {
                    tracing::warn!(partition, %topic, error = %e, "cannot seek to the recreated topic's start: asked again at the next lag check");
                    None
                }
            };
            let _ = me.send_message(PartitionMsg::Input(Input::ReadingFrom { src, start }));
        });
    }

    /// Seeks DLQ p, off the runtime, back to `to`: the records from there on
    /// were handed back, not begun (`core::partition::rewind`); answers
    /// `Input::DlqRewound`.
    pub(super) fn rewind_dlq(&self, myself: &ActorRef<PartitionMsg>, to: i64) {
        let topic = self.decoder.topic(Src::Dlq).to_string();
        let Some(io) = self.a.io.clone() else {
            return; // Stopped.
        };
        let (partition, me) = (self.a.partition, myself.clone());
        metrics::counter!(crate::metrics::DLQ_REWINDS).increment(1);
        tokio::task::spawn_blocking(move || {
            let r = io.seek(&topic, partition, to, std::time::Duration::from_secs(10));
            if let Err(e) = &r {
                tracing::warn!(partition, %topic, to, error = %e, "cannot seek the DLQ partition back to the records handed back: asked again at the next lag check");
            } else {
                tracing::debug!(partition, %topic, to, "DLQ records beyond their half of the in-flight budget handed back: the DLQ partition is read again from them once there is room");
            }
            let _ = me.send_message(PartitionMsg::Input(Input::DlqRewound { ok: r.is_ok() }));
        });
    }

    /// Reads `[from, to)` of one side off the runtime, on a reader of its own
    /// (`read_committed`, no group): if nothing there is to be delivered, the
    /// machine may move the side's position to `to`.
    pub(super) fn probe(
        &self,
        myself: &ActorRef<PartitionMsg>,
        src: Src,
        from: NextOffset,
        to: NextOffset,
    ) {
        let topic = self.decoder.topic(src).to_string();
        let broker = self.a.broker.clone();
        let (partition, me) = (self.a.partition, myself.clone());
        tokio::task::spawn_blocking(move || {
            if broker.nothing_to_deliver(&topic, partition, from.get(), to.get()) {
                metrics::counter!(crate::metrics::POSITIONS_PASSED).increment(1);
                tracing::debug!(partition, %topic, %from, %to, "nothing to deliver below the end (transaction markers): the position moves to the end");
                let _ = me.send_message(PartitionMsg::Input(Input::Probed { src, from, to }));
            }
        });
    }

    /// The read position of a side moved back without a seek of Courier's
    /// (the machine started a new incarnation at `to`): a WARN line and
    /// `courier_position_resets_total{topic,reason}`, once it is known
    /// whether the topic is another one now (its id changed: recreated).
    /// Then the old log's records Courier never read are gone: an ERROR line
    /// and `courier_events_deleted_unread_total` with what the last lag
    /// check saw of them (a lower bound: records written after it are not
    /// known).
    pub(super) fn position_reset(&self, src: Src, from: i64, to: i64, seen_end: Option<i64>) {
        let topic = self.decoder.topic(src).to_string();
        let before = self.a.logs[src.index()].clone();
        if self.a.io.is_none() {
            return; // Stopped.
        }
        let broker = self.a.broker.clone();
        let partition = self.a.partition;
        let pipeline = self.a.pipeline.clone();
        tokio::task::spawn_blocking(move || {
            let now = broker
                .topic_ids(&[topic.as_str()], std::time::Duration::from_secs(5))
                .remove(&topic);
            let recreated = matches!((&before, &now), (Some(b), Some(n)) if **b != **n);
            let reason = if recreated {
                "topic_recreated"
            } else {
                "offset_reset"
            };
            tracing::warn!(
                %topic,
                partition,
                old_position = from,
                new_position = to,
                reason,
                old_topic_id = before.as_deref().unwrap_or("unknown"),
                topic_id = now.as_deref().unwrap_or("unknown"),
                "read position moved back (an offset reset, a recreated topic or a truncation): the partition starts afresh at the new position (nothing dropped; the old position and its metadata are not committed onto the new log)"
            );
            metrics::counter!(crate::metrics::POSITION_RESETS, "topic" => topic.clone(), "reason" => reason)
                .increment(1);
            if recreated {
                // A new log: what the old one lost is counted afresh, here the
                // old log's records past Courier's position (at least this many:
                // the end the last lag check saw).
                pipeline.forget_deleted_unread(&topic, partition);
                if let Some(end) = seen_end.filter(|end| *end > from) {
                    pipeline.deleted_unread(&topic, partition, from, end, None);
                }
            }
        });
    }
}
