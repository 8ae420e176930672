//! What the partition actor shows: its metric handles, its row on the status
//! board, and log lines.

use crate::core::fsm::{Change, Mode};
use crate::core::partition::Note;
use crate::metrics as m;
use crate::status_page::PartitionRow;
use std::sync::Arc;

/// The partition's metric handles, registered once: building a labelled key per
/// record showed in the profile.
pub(super) struct Gauges {
    pub(super) watermark: metrics::Gauge,
    pub(super) paused: metrics::Gauge,
    dlq_lag: metrics::Gauge,
    lag: metrics::Gauge,
    mode: [(Mode, metrics::Gauge); 4],
    /// This incarnation's row on the status board (removed in `post_stop`).
    pub(super) row: Arc<PartitionRow>,
    /// Per destination that held events out: the count shown and its gauge.
    held_out: Vec<Option<(usize, metrics::Gauge)>>,
    /// Records begun, per side's topic (`courier_consumed_total`).
    pub(super) consumed: [metrics::Counter; 2],
}

impl Gauges {
    pub(super) fn new(partition: i32, row: Arc<PartitionRow>, topics: [&str; 2]) -> Gauges {
        let label = partition.to_string();
        let g = |name: &'static str| metrics::gauge!(name, "partition" => label.clone());
        let mode = |mode: Mode| {
            let g = metrics::gauge!(m::PARTITION_MODE, "partition" => label.clone(), "mode" => mode.as_str());
            (mode, g)
        };
        Gauges {
            watermark: g(m::COMMIT_WATERMARK),
            paused: g(m::PARTITION_PAUSED),
            dlq_lag: g(m::DLQ_LAG),
            lag: g(m::CONSUMER_LAG),
            mode: Mode::ALL.map(mode),
            row,
            held_out: Vec::new(),
            consumed: topics.map(|t| metrics::counter!(m::CONSUMED, "topic" => t.to_string())),
        }
    }

    /// Destination `d` (named `name`) holds `n` events out in `partition`
    /// (`courier_destination_held_out`): set when it changed.
    pub(super) fn held_out(&mut self, partition: i32, d: usize, name: &str, n: usize) {
        if self.held_out.len() <= d {
            self.held_out.resize_with(d + 1, || None);
        }
        match &mut self.held_out[d] {
            Some((shown, _)) if *shown == n => {}
            Some((shown, g)) => {
                *shown = n;
                g.set(n as f64);
            }
            slot @ None => {
                let g = metrics::gauge!(m::HELD_OUT, "partition" => partition.to_string(), "destination" => name.to_string());
                g.set(n as f64);
                *slot = Some((n, g));
            }
        }
    }

    /// The FSM's mode (and the change that led to it).
    pub(super) fn show_mode(&self, partition: i32, mode: Mode, change: Option<Change>) {
        if let Some(c) = change {
            tracing::info!(
                partition,
                from = c.from.as_str(),
                to = c.to.as_str(),
                "partition mode"
            );
            metrics::counter!(m::MODE_TRANSITIONS, "to" => c.to.as_str()).increment(1);
        }
        for (shown, g) in &self.mode {
            g.set(if *shown == mode { 1.0 } else { 0.0 });
        }
        self.row.set_mode(mode);
    }

    pub(super) fn show_lag(&self, dlq: i64, main: Option<i64>) {
        self.dlq_lag.set(dlq as f64);
        if let Some(lag) = main {
            self.lag.set(lag as f64);
        }
        self.row.set_lag(dlq, main);
    }

    /// The partition is no longer ours: its per-partition gauges go to 0 so a
    /// revoked partition does not keep showing as paused or lagging here (the
    /// exporter cannot delete a series; dashboards take `max by (partition)`).
    pub(super) fn clear(&self) {
        for (_, g) in &self.mode {
            g.set(0.0);
        }
        self.paused.set(0.0);
        self.dlq_lag.set(0.0);
        self.lag.set(0.0);
        for (_, g) in self.held_out.iter().flatten() {
            g.set(0.0);
        }
    }
}

/// The log line for a machine's [`Note`].
pub(super) fn log(partition: i32, note: Note) {
    match note {
        // Logged by the actor once it knows why (`PartitionState::position_reset`).
        // Logged and counted by the actor (`Pipeline::deleted_unread`).
        Note::PositionReset { .. } | Note::DeletedUnread { .. } => {}
        Note::RefusedReport { src, error } => {
            tracing::error!(partition, ?src, error = %error, "impossible completion refused")
        }
        Note::ParkingErrored { src, offset, times } => tracing::error!(
            partition,
            ?src,
            offset,
            "work for this event vanished {times} times; parking it"
        ),
        Note::LogReplaced {
            src,
            old,
            new,
            read_again,
        } => tracing::warn!(
            partition,
            ?src,
            old_topic_id = %old,
            topic_id = %new,
            read_again,
            "the topic was deleted and recreated under its name (its id changed): {}",
            if read_again {
                "the position still pointed into the old log, so the new log is read from its start (nothing of it skipped; the old position is not committed onto it)"
            } else {
                "the position reset already began the new log"
            }
        ),
        Note::DrainDeadline { in_flight } => tracing::warn!(
            partition,
            in_flight,
            "drain deadline passed; unfinished events will be redelivered"
        ),
    }
}
