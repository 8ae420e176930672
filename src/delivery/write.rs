//! Stage 7, durable writes: the envelope of a failed event and its writes
//! to the DLQ and the parking lot (each retried until the broker acknowledges,
//! `durable::write_durably`); a DLQ that refuses an event for good parks it, a
//! parking lot that refuses it stops the process.

use super::durable::{self, DlqWrite};
use super::hear::Ears;
use super::peers::DlqRecord;
use super::token::Finished;
use super::{Item, Work};
use crate::core::classify::{ErrorClass, FailureLog, FailureReason};
use crate::core::envelope::{Envelope, ErrorInfo, Origin, ENVELOPE_VERSION_PAYLOAD};
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use std::sync::Arc;

/// The durable writes of failed events: the DLQ writer (one try per call;
/// `durable::write_durably` retries), and what the breaker hears of them.
pub(super) struct Writes<W> {
    writer: W,
    pipeline: Arc<Pipeline>,
    ears: Arc<Ears>,
    /// Which drops get a log line (the first of each reason, then one per
    /// reason every `report::FAILURE_LOG_EVERY`).
    drop_log: std::sync::Mutex<FailureLog>,
}

impl<W: DlqWrite> Writes<W> {
    pub(super) fn new(writer: W, pipeline: Arc<Pipeline>, ears: Arc<Ears>) -> Writes<W> {
        Writes {
            writer,
            pipeline,
            ears,
            drop_log: std::sync::Mutex::new(FailureLog::new(super::report::FAILURE_LOG_EVERY)),
        }
    }

    pub(super) fn envelope(&self, item: &Item, error: ErrorInfo) -> Envelope {
        let now = now_ms();
        let (event_id, event_type) = match &item.work {
            Work::Deliver(e) => (Some(e.id.clone()), Some(e.event_type.clone())),
            Work::FromDlq(env) => (env.event_id.clone(), env.event_type.clone()),
            Work::Park { .. } | Work::Filtered { .. } => (None, None),
        };
        Envelope {
            version: ENVELOPE_VERSION_PAYLOAD,
            event_id,
            event_type,
            key: item.keys.record.clone(),
            entity_key: item.keys.entity.clone(),
            route: item
                .target
                .route
                .and_then(|r| self.pipeline.routes.get(r))
                .map(|r| r.name.clone()),
            payload: item
                .payload
                .as_ref()
                .map(|b| b.to_vec())
                .unwrap_or_default(),
            omitted: None,
            origin_headers: crate::core::envelope::OriginHeader::from_record(
                item.headers.as_deref(),
            ),
            dlq_retries: 0,
            first_dlq_at_ms: now,
            not_before_ms: now + self.pipeline.config.degraded.dlq_backoff_base_ms() as i64,
            last_error: error,
            origin: Origin {
                topic: item.topic.to_string(),
                partition: item.partition,
                offset: item.offset,
                timestamp_ms: item.timestamp_ms,
                consumer_group: self.pipeline.config.kafka.group_id.clone(),
            },
        }
    }

    pub(super) async fn park(&self, item: &Item, error: ErrorInfo) -> Finished {
        self.to_parking(self.envelope(item, error)).await
    }

    /// `per_item`: its last failure was its own result inside a 2xx batch
    /// answer (not counted by the flood guard: the API is up).
    pub(super) async fn dead_letter(
        &self,
        item: &Item,
        error: ErrorInfo,
        per_item: bool,
    ) -> Finished {
        let reason = error.reason.clone();
        let at = match self
            .to_dlq(item.partition, self.envelope(item, error))
            .await
        {
            Ok(at) => at,
            Err(parked) => return parked,
        };
        metrics::counter!(m::DLQ_WRITTEN, "reason" => reason.clone()).increment(1);
        // Flood guard: many events going to the DLQ at once is systemic —
        // unless each was refused on its own by an API that answered 2xx.
        if !per_item {
            if let Some(t) = self.ears.health().dlq_written() {
                self.ears.on_transition(t);
            }
        }
        Finished::DeadLettered { reason, at }
    }

    /// Writes `env` to DLQ partition `partition`; `Ok`: the DLQ offset the
    /// broker acknowledged it at. When the DLQ refuses it for
    /// good (too large even as a reference, not authorized, no such topic after
    /// the grace period), the event is parked with the refusal as its reason
    /// (`dlq_too_large`, …): it never waits forever.
    pub(super) async fn to_dlq(&self, partition: i32, env: Envelope) -> Result<i64, Finished> {
        let rec = DlqRecord {
            topic: self.pipeline.dlq_topic.clone(),
            partition: Some(partition),
            key: env.key.clone(),
            envelope: env,
        };
        let (refusal, detail) = match durable::write_durably(&self.writer, &rec).await {
            Ok(at) => return Ok(at),
            Err(refused) => refused,
        };
        let mut env = rec.envelope;
        tracing::error!(
            topic = %rec.topic,
            id = env.event_id.as_deref().unwrap_or("-"),
            origin_partition = env.origin.partition,
            origin_offset = env.origin.offset,
            refusal = refusal.as_str(),
            error = %detail,
            "the DLQ refuses this event for good; parking it"
        );
        env.last_error = ErrorInfo::new(
            ErrorClass::Systemic,
            FailureReason::DlqRefused(refusal),
            None,
            &format!("DLQ write refused: {detail}"),
        );
        Err(self.to_parking(env).await)
    }

    /// Parks `env` (its `last_error.reason` says why); the offset waits for the
    /// broker's acknowledgement. A parking lot that refuses the record for good
    /// leaves nowhere durable to put the event: Courier names it and exits
    /// non-zero (the orchestrator restarts it, the offset stays before the event)
    /// rather than stall silently or lose it.
    pub(super) async fn to_parking(&self, env: Envelope) -> Finished {
        let reason = env.last_error.reason.clone();
        let rec = DlqRecord {
            topic: self.pipeline.parking_topic.clone(),
            partition: None,
            key: env.key.clone(),
            envelope: env,
        };
        if let Err((refusal, detail)) = durable::write_durably(&self.writer, &rec).await {
            let e = &rec.envelope;
            let why = format!(
                "the parking lot {} refuses event {} ({}/{}@{}) for good ({}: {detail}); fix the topic (size limit, ACLs, existence) and restart",
                rec.topic,
                e.event_id.as_deref().unwrap_or("-"),
                e.origin.topic,
                e.origin.partition,
                e.origin.offset,
                refusal.as_str()
            );
            self.pipeline.fatal(why);
            // The event is neither delivered nor durable: its token must not
            // report an outcome (the offset stays before it) while the process
            // shuts down.
            return std::future::pending().await;
        }
        metrics::counter!(m::PARKED, "reason" => reason.clone()).increment(1);
        Finished::Parked { reason }
    }

    /// Back into DLQ partition p (the envelope only ever gains retries). A DLQ
    /// that refuses the record for good parks the event instead (`Err`, with
    /// what the caller returns).
    pub(super) async fn rewrite_dlq(&self, item: &Item, env: Envelope) -> Result<i64, Finished> {
        self.to_dlq(item.partition, env).await
    }

    pub(super) async fn drop_from_dlq(
        &self,
        _item: &Item,
        env: &Envelope,
        reason: FailureReason,
        message: String,
    ) -> Finished {
        let mut last = env.clone();
        last.last_error = ErrorInfo::new(ErrorClass::Dropped, reason, None, &message);
        self.drop_enveloped(last, reason.as_str()).await
    }

    /// A drop is never silent: the envelope goes to the parking lot with its
    /// reason, `dlq_dropped{reason}` counts it, and a WARN line says so (on
    /// the first drop of its reason, then once per `FAILURE_LOG_EVERY` with
    /// the count left out).
    pub(super) async fn drop_enveloped(&self, env: Envelope, reason: &str) -> Finished {
        let log = self
            .drop_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(&format!("dlq_dropped/{reason}"), std::time::Instant::now());
        if let Some(l) = log {
            tracing::warn!(
                reason,
                id = %crate::core::text::excerpt(env.event_id.as_deref().unwrap_or("-"), crate::core::text::LOG_TEXT_MAX),
                origin_partition = env.origin.partition,
                origin_offset = env.origin.offset,
                dlq_retries = env.dlq_retries,
                first = l.first,
                left_out = l.left_out,
                "a DLQ record leaves the DLQ for the parking lot"
            );
        }
        let done = self.to_parking(env).await;
        metrics::counter!(m::DLQ_DROPPED, "reason" => reason.to_string()).increment(1);
        done
    }

    pub(super) async fn park_envelope(&self, _item: &Item, env: Envelope) -> Finished {
        self.to_parking(env).await
    }
}
