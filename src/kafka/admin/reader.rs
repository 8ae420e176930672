//! The readers' consumer: its client context remembers an authentication
//! failure, so a helper that cannot reach a broker says why.

use super::AdminError;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use std::sync::Mutex;
use std::time::Duration;

/// The readers' client context: remembers an authentication failure librdkafka
/// reports (with its reason), so a helper that cannot reach a broker says why
/// rather than only that it timed out.
#[derive(Default)]
pub(super) struct ReaderContext {
    auth_failure: Mutex<Option<String>>,
}

impl ReaderContext {
    fn auth_failure(&self) -> Option<String> {
        self.auth_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            *self.auth_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        }
        tracing::warn!(%error, reason, "kafka client error");
    }
}

impl ConsumerContext for ReaderContext {}

pub(super) type Reader = BaseConsumer<ReaderContext>;

pub(super) fn reader(cfg: &ClientConfig) -> Result<Reader, AdminError> {
    Ok(cfg.create_with_context(ReaderContext::default())?)
}

/// Turns a failure of `c` into an error, naming an authentication failure if
/// librdkafka reported one. Its reports are events on the consumer's queue,
/// served by `poll`: this serves the ones already queued (a poll that serves a
/// log event returns nothing, like one that finds the queue empty, hence the
/// bounded count). It runs only on the way out with an error.
pub(super) fn failure(c: &Reader, e: KafkaError) -> AdminError {
    for _ in 0..1_000 {
        if c.context().auth_failure().is_some() {
            break;
        }
        let _ = c.poll(Duration::ZERO);
    }
    match c.context().auth_failure() {
        Some(reason) => AdminError::Auth(reason),
        None => AdminError::Kafka(e),
    }
}
