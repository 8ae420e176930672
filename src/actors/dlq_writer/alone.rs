//! A write in a produce batch of its own: what a refusal of a whole batch
//! leaves to find out for each of its records.

use super::{send, DlqRecord, WriteError};
use rdkafka::producer::{FutureProducer, Producer};

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
        // A fatal error (an idempotent producer's broken sequence) fails
        // every later send: made anew, or the write would be retried forever.
        // (The main producer's fatal error fails the writer actor, which the
        // supervisor re-creates.)
        if let Some((code, reason)) = slot.as_ref().and_then(|p| p.client().fatal_error()) {
            tracing::warn!(?code, %reason, "the producer for lone writes failed fatally: making a new one");
            *slot = None;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::envelope::tests::sample;
    use rdkafka::mocking::MockCluster;

    /// A fatal error of the lone-write producer (raised with librdkafka's own
    /// test hook, `rd_kafka_test_fatal_error`, on a mock cluster: a real
    /// broker cannot break an idempotent producer's sequence on demand) is
    /// not the end of lone writes: the next one has a new producer. Before,
    /// every later write failed with the fatal error, retried forever.
    #[tokio::test]
    async fn a_fatal_error_gives_lone_writes_a_new_producer() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("dlq", 1, 1).expect("topic");
        let mut config = rdkafka::ClientConfig::new();
        config
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "10000");
        let alone = Alone::new(config);
        let rec = DlqRecord {
            topic: "dlq".into(),
            partition: Some(0),
            key: Some(b"k".to_vec()),
            envelope: sample(),
        };
        let first = alone.send(&rec, 1_000_000).await.expect("written");
        let broken = alone.producer.lock().await.clone().expect("made");
        let reason = std::ffi::CString::new("test: broken sequence").expect("no NUL");
        // SAFETY: a live client's handle; librdkafka copies the reason.
        let raised = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                broken.client().native_ptr(),
                rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        assert_eq!(
            raised,
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
            "the fatal error was raised"
        );
        assert!(broken.client().fatal_error().is_some());
        let second = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            alone.send(&rec, 1_000_000),
        )
        .await
        .expect("answered")
        .expect("written by a new producer");
        assert!(second > first, "{second} after {first}");
    }
}
