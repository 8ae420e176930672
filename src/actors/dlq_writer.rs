//! DLQ writer: the idempotent producer (acks=all) for the DLQ and the parking lot.
//! Each write is confirmed back to its caller only once the broker acknowledged
//! it; only then may the event's offset count as done.

use crate::core::envelope::Envelope;
use crate::kafka::producer_config;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use std::sync::Arc;

/// One record for the DLQ or the parking lot.
#[derive(Debug, Clone)]
pub struct DlqRecord {
    pub topic: String,
    /// Explicit for the DLQ: a failed event from main partition p goes to DLQ
    /// partition p. `None` (parking lot): the producer's partitioner decides.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub envelope: Envelope,
}

pub enum DlqWriterMsg {
    /// Reply: `Ok(offset)` once acknowledged by the broker, `Err(reason)` otherwise.
    Write(Box<DlqRecord>, RpcReplyPort<Result<i64, String>>),
}

pub struct DlqWriter;

pub struct DlqWriterState {
    producer: FutureProducer,
}

impl Actor for DlqWriter {
    type Msg = DlqWriterMsg;
    type State = DlqWriterState;
    type Arguments = Arc<Pipeline>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        pipeline: Arc<Pipeline>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let producer: FutureProducer = producer_config(&pipeline.config.kafka).create()?;
        Ok(DlqWriterState { producer })
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
                // Sends run concurrently; the actor only hands them out.
                tokio::spawn(async move {
                    let result = send(&producer, &rec).await;
                    if result.is_err() {
                        metrics::counter!(crate::metrics::DLQ_WRITE_FAILURES, "topic" => rec.topic.clone())
                            .increment(1);
                    }
                    let _ = reply.send(result);
                });
            }
        }
        Ok(())
    }
}

async fn send(producer: &FutureProducer, rec: &DlqRecord) -> Result<i64, String> {
    let payload = rec.envelope.to_bytes();
    let mut headers = OwnedHeaders::new();
    for (name, value) in rec.envelope.headers() {
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
    if let Some(k) = &rec.key {
        record = record.key(k);
    }
    match producer.send(record, Timeout::Never).await {
        Ok(delivery) => Ok(delivery.offset),
        Err((e, _)) => Err(e.to_string()),
    }
}
