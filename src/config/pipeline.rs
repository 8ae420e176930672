//! `[pipeline]`: concurrency, ordering, in-memory limits, drain and shutdown waits.

use super::{invalid, ConfigError};
use crate::core::byte_budget::RECORD_OVERHEAD;
use crate::core::event::DecodeOptions;
use crate::core::ordering::OrderingMode;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to do when an envelope with the event's payload would not fit the DLQ
/// or parking-lot topic's `max.message.bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Oversize {
    /// Write a reference to the origin record (topic, partition, offset, size,
    /// SHA-256) instead of the payload; `courier dlq replay` reads it back.
    #[default]
    Reference,
    /// Refuse to start when `max_event_bytes` cannot fit an envelope.
    Refuse,
}

/// `max_in_flight_bytes` when batching is on and the configuration does not
/// set it: twice the default, since a request carries many events and latency
/// is hidden by requests in flight, which need events in flight (at 50 ms and
/// ~300,000 events/s, ~15,000 of them; BENCHMARKS "Batch delivery", run 14).
pub(crate) const BATCHING_IN_FLIGHT_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Without batching: the global limit of events being delivered (enrich +
    /// HTTP) at once. With batching (`[api.batch]` on any route): the limit of
    /// requests in flight; the events in delivery are then bounded by
    /// `max_in_flight_bytes`, `max_in_flight_per_partition` and
    /// `concurrency × max_events` (a value above 512 and at least the batch
    /// size — likely sized in events, the meaning before — is noticed at
    /// start and by `check-config`).
    pub concurrency: usize,
    /// Which events wait for each other: `key` (one at a time per Kafka key),
    /// `partition` (one at a time per partition) or `unordered`.
    pub ordering: OrderingMode,
    /// Events held per partition (queued + in flight); a full partition is
    /// paused. With batching on and this not set: as many events as
    /// `max_in_flight_bytes` holds at 2 KiB each (32,768 with its batching
    /// default), so the byte budget bounds the events in delivery.
    pub max_in_flight_per_partition: usize,
    /// Records fetched but not yet taken in by a partition actor, process-wide:
    /// the poll thread fetches nothing more above this.
    pub max_buffered: usize,
    /// The same fetch budget in bytes (record values, keys and headers, plus
    /// `kafka::HEADER_OVERHEAD` per header and `kafka::RECORD_OVERHEAD` each).
    /// One compressed batch may decompress to three times this
    /// (`kafka::cap_decompression`).
    pub max_buffered_bytes: usize,
    /// Bytes of the events begun and not yet durable (DLQ records waiting for the
    /// drain included), counted like `max_buffered_bytes`, process-wide: a
    /// partition begins a record only while the held bytes are below this. An
    /// event larger than the budget still goes. With batching on and this not
    /// set: 64 MiB (twice the default: requests in flight hide the API's
    /// latency, and they need events in flight).
    pub max_in_flight_bytes: usize,
    /// Larger events are parked (`too_large`).
    pub max_event_bytes: usize,
    /// Envelopes too large for the DLQ / parking topics: `reference` or `refuse`.
    pub oversize: Oversize,
    /// CloudEvents extension attribute (integer) carrying the entity version.
    pub entity_version_attribute: String,
    /// On revoke: how long to wait for in-flight work before handing the partition over.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// On SIGTERM: how long in-flight work may take before Courier stores, commits and exits.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            concurrency: 512,
            ordering: OrderingMode::Key,
            max_in_flight_per_partition: 1_000,
            max_buffered: 8_192,
            max_buffered_bytes: 16 * 1024 * 1024,
            max_in_flight_bytes: 32 * 1024 * 1024,
            max_event_bytes: 1024 * 1024,
            oversize: Oversize::Reference,
            entity_version_attribute: "entityversion".into(),
            drain_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(15),
        }
    }
}

impl PipelineConfig {
    /// With batching on, the in-flight limits the configuration left unset
    /// (`bytes_set`, `per_partition_set`: named by a source) take their
    /// batching defaults ([`BATCHING_IN_FLIGHT_BYTES`], and as many events
    /// per partition as the byte budget holds at `RECORD_OVERHEAD`, the least
    /// a record is charged).
    /// A value set is kept as it is.
    pub(crate) fn batching_defaults(&mut self, bytes_set: bool, per_partition_set: bool) {
        if !bytes_set {
            self.max_in_flight_bytes = BATCHING_IN_FLIGHT_BYTES;
        }
        if !per_partition_set {
            self.max_in_flight_per_partition = (self.max_in_flight_bytes / RECORD_OVERHEAD)
                .max(PipelineConfig::default().max_in_flight_per_partition);
        }
    }

    pub(crate) fn decode_options(&self) -> DecodeOptions {
        DecodeOptions {
            max_event_bytes: self.max_event_bytes,
            entity_version_attribute: self.entity_version_attribute.clone(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 {
            return Err(invalid("pipeline.concurrency", "must be at least 1"));
        }
        if self.max_in_flight_per_partition == 0 {
            return Err(invalid(
                "pipeline.max_in_flight_per_partition",
                "must be at least 1",
            ));
        }
        if self.max_buffered == 0 {
            return Err(invalid("pipeline.max_buffered", "must be at least 1"));
        }
        if self.max_buffered_bytes == 0 {
            return Err(invalid("pipeline.max_buffered_bytes", "must be at least 1"));
        }
        if self.max_in_flight_bytes == 0 {
            return Err(invalid(
                "pipeline.max_in_flight_bytes",
                "must be at least 1",
            ));
        }
        if self.max_event_bytes == 0 {
            return Err(invalid("pipeline.max_event_bytes", "must be at least 1"));
        }
        if self.entity_version_attribute.is_empty()
            || !self
                .entity_version_attribute
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(invalid(
                "pipeline.entity_version_attribute",
                "a CloudEvents extension name: lowercase letters and digits only",
            ));
        }
        Ok(())
    }
}
