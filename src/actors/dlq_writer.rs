//! DLQ writer: the idempotent producer (acks=all) for the DLQ and the parking lot.
//! Each write is confirmed back to its caller only once the broker acknowledged
//! it; only then may the event's offset count as done.
//!
//! Every record fits its topic: at start the writer reads the DLQ and parking
//! topics' `max.message.bytes` (DescribeConfigs) and sizes its producer for them;
//! an envelope that would not fit with its payload carries a reference to the
//! origin record instead (`Envelope::fitted`). A write the broker refuses for good
//! (too large after all, not authorized, an unknown topic, an invalid record) is
//! reported as a [`Refusal`], never retried forever: the caller parks the event
//! or, for the parking lot itself, ends the process.
//!
//! The broker answers a produce batch, not a record: an invalid record takes
//! its batch down with it (every record in it comes back INVALID_RECORD: a
//! keyed record sharing a batch with a keyless one on a compacted topic; two
//! records a timestamp policy refuses), and a batch above the topic's
//! `max.message.bytes` is refused MESSAGE_TOO_LARGE for each record, though
//! each fits. So batches are no larger than the smaller topic's limit
//! (`batch.size`), and a record refused as invalid or too large is written once
//! more alone ([`Alone`]) before the refusal counts: only its own answer says.
//!
//! # Invariant I9: durable writes
//!
//!
//! *Enforced in* `src/actors/dlq_writer.rs`, `src/delivery/write.rs` (`to_dlq`, `to_parking`),
//! `src/delivery/durable.rs` (`write_durably`). Every accepted event can become durable: the writer sizes each envelope
//! for its topic's `max.message.bytes` (`Envelope::fitted`: a payload reference when it would
//! not fit); a write refused for good is never retried forever — a DLQ refusal parks the
//! event, a parking-lot refusal ends the process (`Pipeline::fatal`) with the event's token
//! unfinished, so its offset is never stored. A refusal is the record's own: the broker
//! answers a produce batch, not a record. One invalid record makes every record of its batch
//! come back INVALID_RECORD, and a batch above the topic's `max.message.bytes` is refused
//! MESSAGE_TOO_LARGE for each record though each fits. So the producer's `batch.size` is at
//! most the smaller topic's limit, and a record refused as invalid or too large (by the
//! broker) is written once more alone (a producer used for nothing else, one record at a
//! time, no linger: `actors/dlq_writer/alone.rs`; made anew after a fatal error) before the
//! refusal counts. Refused as too large alone, the topic's `max.message.bytes` is read again
//! (`Limits::reread`): an operator may have lowered it since the start; below the limit used,
//! the envelope is fitted to the new one (a reference) and written, and later envelopes use it.
//!
//! *Tested by:* `core::envelope` unit tests; `tests/oversize.rs` (900 KB events answered 400
//! and 503 with default topic settings: committed to the end, inspected, replayed from the
//! origin; a DLQ and then a parking lot of 600 bytes: parked `dlq_too_large`, then exit
//! non-zero with the offset uncommitted, then parked after the fix; `oversize = "refuse"`).
//! `tests/dlq.rs::an_envelope_over_a_limit_lowered_while_running_goes_to_the_dlq_as_a_reference`
//! (the DLQ lowered to 4,000 bytes while running, ten ~10 KB events failing: ten references in
//! the DLQ; before: ten parked `dlq_too_large`); `alone`'s unit test (a fatal error raised with
//! librdkafka's `rd_kafka_test_fatal_error` on a mock cluster: the next lone write has a new
//! producer; before: `Fatal`, retried forever).
//! `tests/dlq.rs::a_record_refused_with_an_invalid_one_in_its_batch_is_written_alone`: a
//! compacted DLQ, forty keyed events and one keyless one in one produce batch: the keyless
//! one parked `dlq_invalid_record`, the forty in the DLQ (before: all 41 parked);
//! `envelopes_that_fit_the_dlq_are_not_refused_for_their_batch` (a 4,000-byte DLQ, thirty
//! uncompressed envelopes of ~1 KB at once: all in the DLQ, whether the limit was there at
//! start — batches kept under it, no lone write — or lowered while running — each record of
//! the refused batch written alone; before: all 30 parked `dlq_too_large` in each case).

pub(crate) use crate::delivery::peers::{DlqRecord, DlqWriterMsg, Refusal, WriteError};
use crate::kafka::producer_config;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use std::collections::BTreeMap;
use std::sync::Arc;

mod alone;
mod held;
use alone::Alone;
pub(crate) use held::HeldTopics;

pub(crate) struct DlqWriter;

pub(crate) struct DlqWriterState {
    producer: FutureProducer,
    alone: Arc<Alone>,
    limits: Arc<Limits>,
    /// For `fatal_on_panic`: a send task's panic would otherwise go unanswered
    /// and be retried forever.
    pipeline: Arc<Pipeline>,
}

/// `max.message.bytes` of the DLQ and parking topics: read at start, and
/// lowered when a record alone is refused as too large for a limit an
/// operator lowered since ([`Limits::reread`]).
#[derive(Debug)]
struct Limits {
    by_topic: std::sync::RwLock<BTreeMap<String, usize>>,
}

impl Limits {
    fn of(&self, topic: &str) -> usize {
        self.by_topic
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .copied()
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
    }

    /// Reads `topic`'s `max.message.bytes` again after the broker refused a
    /// record of at most `was` bytes alone; the new limit if it is lower (the
    /// writer then uses it), else `None`.
    async fn reread(
        &self,
        cfg: &crate::config::KafkaConfig,
        topic: &str,
        was: usize,
    ) -> Option<usize> {
        let key = "max.message.bytes";
        let now = match crate::kafka::admin::topic_settings(cfg, &[topic], &[key]).await {
            Ok(m) => m.get(topic)?.get(key)?.parse::<usize>().ok()?,
            Err(e) => {
                tracing::warn!(topic, error = %e, "cannot read max.message.bytes again");
                return None;
            }
        };
        if now >= was {
            return None;
        }
        self.by_topic
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(topic.to_string(), now);
        tracing::warn!(
            topic,
            was,
            now,
            "the topic's max.message.bytes was lowered while running: envelopes are fitted to the new limit (the producer's batch.size keeps the old one until a restart)"
        );
        Some(now)
    }
}

/// The broker's default `max.message.bytes` (and the producer's default
/// `message.max.bytes`), assumed when a topic's config cannot be read.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_000_000;

impl Actor for DlqWriter {
    type Msg = DlqWriterMsg;
    type State = DlqWriterState;
    type Arguments = Arc<Pipeline>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        pipeline: Arc<Pipeline>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let held = HeldTopics::read(&pipeline.config.kafka).await;
        held.refuse_compacted(&pipeline.config.kafka)?;
        let by_topic = held.limits;
        let largest = by_topic
            .values()
            .copied()
            .max()
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        let mut cfg = producer_config(&pipeline.config.kafka);
        // The producer checks sizes itself, before the broker: let it take the
        // largest record a topic accepts (it checks against 1,000,000 otherwise).
        cfg.set(
            "message.max.bytes",
            largest.max(DEFAULT_MAX_MESSAGE_BYTES).to_string(),
        );
        // The broker's `max.message.bytes` bounds a whole produce batch: one
        // larger is refused MESSAGE_TOO_LARGE for each of its records, though
        // each fits alone. No batch is larger than the smaller topic's limit
        // (nor than `[kafka.properties]`'s own `batch.size`).
        let smallest = by_topic
            .values()
            .copied()
            .min()
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
        let batch_size = cfg
            .get("batch.size")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
            .min(smallest)
            .max(1);
        cfg.set("batch.size", batch_size.to_string());
        let producer: FutureProducer = cfg.create()?;
        let alone = Arc::new(Alone::new(cfg));
        // Refusals and unacknowledged writes are rare: their series start at 0
        // (`increment(0)`: a restarted
        // writer must not reset them) so the dashboard has them and the first one is a visible increase.
        let k = &pipeline.config.kafka;
        for topic in [k.dlq_topic(), k.parking_topic()] {
            metrics::counter!(crate::metrics::DLQ_WRITE_FAILURES, "topic" => topic.clone())
                .increment(0);
            for r in Refusal::ALL {
                metrics::counter!(crate::metrics::PRODUCE_REFUSED, "topic" => topic.clone(), "reason" => r.as_str())
                    .increment(0);
            }
        }
        tracing::info!(limits = ?by_topic, "DLQ writer ready");
        Ok(DlqWriterState {
            producer,
            alone,
            limits: Arc::new(Limits {
                by_topic: std::sync::RwLock::new(by_topic),
            }),
            pipeline,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A fatal producer error (e.g. fenced idempotent producer) cannot be
        // recovered in place: fail, and the supervisor re-creates the producer.
        if let Some((code, reason)) = state.producer.client().fatal_error() {
            return Err(format!("fatal producer error {code:?}: {reason}").into());
        }
        match msg {
            DlqWriterMsg::Write(rec, reply) => {
                let producer = state.producer.clone();
                let alone = state.alone.clone();
                let limits = state.limits.clone();
                let limit = limits.of(&rec.topic);
                // Sends run concurrently; the actor only hands them out.
                let pipeline = state.pipeline.clone();
                tokio::spawn(async move {
                    let settings = pipeline.clone();
                    let sent = async {
                        match send(&producer, &rec, limit).await {
                            // The broker's answer to the batch (not the local
                            // "not even a reference fits").
                            Err(WriteError::Refused(Refusal::InvalidRecord, _)) => {
                                alone.send(&rec, limit).await
                            }
                            Err(WriteError::Refused(Refusal::TooLarge, _))
                                if rec.envelope.clone().fitted(limit).is_some() =>
                            {
                                match alone.send(&rec, limit).await {
                                    // Too large alone: the limit may have
                                    // been lowered since it was read.
                                    Err(WriteError::Refused(Refusal::TooLarge, detail)) => {
                                        let kafka = &settings.config.kafka;
                                        match limits.reread(kafka, &rec.topic, limit).await {
                                            Some(lower) => alone.send(&rec, lower).await,
                                            None => {
                                                Err(WriteError::Refused(Refusal::TooLarge, detail))
                                            }
                                        }
                                    }
                                    r => r,
                                }
                            }
                            r => r,
                        }
                    };
                    let Some(result) =
                        crate::runtime::fatal_on_panic(pipeline, "a DLQ write", sent).await
                    else {
                        return;
                    };
                    match &result {
                        Ok(_) => {}
                        Err(WriteError::Retry(_)) => {
                            metrics::counter!(crate::metrics::DLQ_WRITE_FAILURES, "topic" => rec.topic.clone())
                                .increment(1);
                        }
                        Err(WriteError::Refused(r, _)) => {
                            metrics::counter!(crate::metrics::PRODUCE_REFUSED, "topic" => rec.topic.clone(), "reason" => r.as_str())
                                .increment(1);
                        }
                    }
                    let _ = reply.send(result);
                });
            }
        }
        Ok(())
    }
}
async fn send(producer: &FutureProducer, rec: &DlqRecord, limit: usize) -> Result<i64, WriteError> {
    let Some(envelope) = rec.envelope.clone().fitted(limit) else {
        return Err(WriteError::Refused(
            Refusal::TooLarge,
            format!(
                "not even a reference envelope fits {}'s max.message.bytes of {limit}",
                rec.topic
            ),
        ));
    };
    if envelope.omitted.is_some() && rec.envelope.omitted.is_none() {
        metrics::counter!(crate::metrics::ENVELOPE_REFERENCES, "topic" => rec.topic.clone())
            .increment(1);
        tracing::info!(
            topic = %rec.topic,
            id = envelope.event_id.as_deref().unwrap_or("-"),
            origin_partition = envelope.origin.partition,
            origin_offset = envelope.origin.offset,
            payload_bytes = rec.envelope.payload.len(),
            limit,
            "envelope too large for the topic: writing a reference to the origin record instead of the payload"
        );
    }
    let key = if envelope.omitted.as_ref().is_some_and(|o| o.key_omitted) {
        None
    } else {
        rec.key.as_ref()
    };
    let payload = envelope.to_bytes();
    let mut headers = OwnedHeaders::new();
    for (name, value) in envelope.headers() {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    let mut record = FutureRecord::to(&rec.topic)
        .payload(&payload)
        .headers(headers);
    if let Some(p) = rec.partition {
        record = record.partition(p);
    }
    if let Some(k) = key {
        record = record.key(k);
    }
    match producer.send(record, Timeout::Never).await {
        Ok(delivery) => Ok(delivery.offset),
        Err((e, _)) => Err(match refusal_of(&e) {
            Some(r) => WriteError::Refused(r, e.to_string()),
            None => WriteError::Retry(e.to_string()),
        }),
    }
}

/// The [`Refusal`] a producer error means, if it is one.
fn refusal_of(e: &KafkaError) -> Option<Refusal> {
    use RDKafkaErrorCode as C;
    match e.rdkafka_error_code()? {
        C::MessageSizeTooLarge | C::MessageBatchTooLarge | C::InvalidMessageSize => {
            Some(Refusal::TooLarge)
        }
        C::TopicAuthorizationFailed => Some(Refusal::NotAuthorized),
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition => {
            Some(Refusal::UnknownTopic)
        }
        C::InvalidRecord | C::InvalidMessage | C::PolicyViolation => Some(Refusal::InvalidRecord),
        _ => None,
    }
}
