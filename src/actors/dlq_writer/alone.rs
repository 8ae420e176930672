//! A write in a produce batch of its own: what a refusal of a whole batch
//! leaves to find out for each of its records.

use super::{send, DlqRecord, WriteError};
use rdkafka::producer::FutureProducer;

/// Writes a record in a produce batch of its own: a producer used for nothing
/// else, one record at a time, no linger. Made on first use (a cluster that
/// never refuses a record never has it).
pub(super) struct Alone {
    config: rdkafka::ClientConfig,
    producer: tokio::sync::Mutex<Option<FutureProducer>>,
}

impl Alone {
    pub(super) fn new(mut config: rdkafka::ClientConfig) -> Alone {
        config.set("linger.ms", "0");
        Alone {
            config,
            producer: tokio::sync::Mutex::new(None),
        }
    }

    pub(super) async fn send(&self, rec: &DlqRecord, limit: usize) -> Result<i64, WriteError> {
        let mut slot = self.producer.lock().await;
        let producer = match &*slot {
            Some(p) => p.clone(),
            None => {
                let p: FutureProducer = self
                    .config
                    .create()
                    .map_err(|e| WriteError::Retry(format!("the producer for lone writes: {e}")))?;
                *slot = Some(p.clone());
                p
            }
        };
        let result = send(&producer, rec, limit).await;
        match &result {
            Err(WriteError::Refused(_, detail)) => tracing::warn!(
                topic = %rec.topic,
                id = rec.envelope.event_id.as_deref().unwrap_or("-"),
                origin_partition = rec.envelope.origin.partition,
                origin_offset = rec.envelope.origin.offset,
                error = %detail,
                "the broker refuses this record, alone in its batch too"
            ),
            Err(_) => {}
            Ok(_) => tracing::info!(
                topic = %rec.topic,
                id = rec.envelope.event_id.as_deref().unwrap_or("-"),
                origin_partition = rec.envelope.origin.partition,
                origin_offset = rec.envelope.origin.offset,
                "a record refused with others in its batch was written alone"
            ),
        }
        result
    }
}
