//! The work one event needs between "dispatched" and "durable outcome": enrich,
//! POST with in-place retries, and on failure the DLQ or the parking lot.
//! Runs in tasks spawned by the delivery pool actor.

pub mod enrich;
pub mod http;
pub mod token;

use crate::actors::dlq_writer::{DlqRecord, DlqWriterMsg};
use crate::config::{Config, OnMissing};
use crate::core::backoff::{persistent_delay, RetryPolicy};
use crate::core::classify::{classify_status, FailureClass, Verdict};
use crate::core::envelope::{Envelope, ErrorInfo, Origin, ENVELOPE_VERSION};
use crate::core::event::Event;
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use bytes::Bytes;
use enrich::{EnrichError, Enricher};
use http::ApiClient;
use std::sync::Arc;
use std::time::{Duration, Instant};
use token::{CompletionToken, Finished};
use tokio::sync::Semaphore;

/// What to do with a consumed message, decided before any work is scheduled.
#[derive(Debug)]
pub enum Work {
    Deliver(Event),
    /// Bad input: straight to the parking lot with this reason.
    Park {
        reason: String,
        message: String,
    },
}

/// A consumed message and the work it needs. Shared (`Arc`) between the partition
/// actor, which keeps it until the outcome is durable, and the task doing the work.
#[derive(Debug)]
pub struct Item {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Bytes>,
    pub work: Work,
}

impl Item {
    pub fn event_id(&self) -> Option<&str> {
        match &self.work {
            Work::Deliver(e) => Some(&e.id),
            Work::Park { .. } => None,
        }
    }
}

pub struct Job {
    pub item: Arc<Item>,
    pub token: CompletionToken,
}

pub struct Deliverer {
    api: ApiClient,
    policy: RetryPolicy,
    permits: Semaphore,
    enricher: Option<Enricher>,
    pipeline: Arc<Pipeline>,
}

#[derive(Debug, thiserror::Error)]
pub enum DelivererError {
    #[error(transparent)]
    Client(#[from] http::ClientError),
    #[error(transparent)]
    Enrich(#[from] enrich::EnrichSetupError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

impl Deliverer {
    pub fn new(pipeline: Arc<Pipeline>) -> Result<Deliverer, DelivererError> {
        let cfg: &Config = &pipeline.config;
        let token = cfg.api_token()?;
        let api = ApiClient::new(&cfg.api, token.as_deref(), cfg.pipeline.concurrency)?;
        let enricher = if cfg.enrichment.enabled {
            let password = cfg
                .enrichment
                .password_env
                .as_ref()
                .and_then(|n| std::env::var(n).ok());
            Some(Enricher::new(&cfg.enrichment, password)?)
        } else {
            None
        };
        Ok(Deliverer {
            api,
            policy: cfg.api.retry_policy(),
            permits: Semaphore::new(cfg.pipeline.concurrency),
            enricher,
            pipeline,
        })
    }

    /// Does the job's work and reports its outcome through the token.
    pub async fn run(self: Arc<Self>, job: Job) {
        let Job { item, token } = job;
        let outcome = match &item.work {
            Work::Park { reason, message } => {
                let info = ErrorInfo {
                    class: "poison".into(),
                    reason: reason.clone(),
                    status: None,
                    message: message.clone(),
                };
                self.park(&item, info).await
            }
            Work::Deliver(ev) => self.deliver(&item, ev).await,
        };
        token.finish(outcome);
    }

    async fn deliver(&self, item: &Item, ev: &Event) -> Finished {
        let Ok(permit) = self.permits.acquire().await else {
            // The semaphore is never closed; if it were, the dropped token reports errored.
            return std::future::pending::<Finished>().await;
        };
        let gauge = metrics::gauge!(m::IN_FLIGHT);
        gauge.increment(1.0);
        let start = Instant::now();
        let mut attempts = 0u32;
        let failure = loop {
            attempts += 1;
            metrics::counter!(m::DELIVERY_ATTEMPTS).increment(1);
            let (class, reason, status, retry_after) = match self.body(item, ev).await {
                Ok(Some(body)) => match self.api.post(&ev.id, body).await {
                    Ok(answer) => match classify_status(answer.status) {
                        Verdict::Delivered => {
                            gauge.decrement(1.0);
                            metrics::histogram!(m::DELIVERY_LATENCY)
                                .record(start.elapsed().as_secs_f64());
                            if let Some(ts) = item.timestamp_ms {
                                let age = (now_ms() - ts).max(0) as f64 / 1000.0;
                                metrics::histogram!(m::EVENT_AGE).record(age);
                            }
                            metrics::counter!(m::DELIVERED).increment(1);
                            return Finished::Delivered;
                        }
                        Verdict::Failed(class) => (
                            class,
                            format!("http_{}", answer.status),
                            Some(answer.status),
                            answer.retry_after,
                        ),
                    },
                    Err(t) => (t.class(), t.as_str().to_string(), None, None),
                },
                Ok(None) => {
                    gauge.decrement(1.0);
                    drop(permit);
                    let info = ErrorInfo {
                        class: "permanent".into(),
                        reason: "enrichment_missing".into(),
                        status: None,
                        message: "no enrichment row for the event's key".into(),
                    };
                    return self.park(item, info).await;
                }
                Err(e) => {
                    let reason = match e {
                        EnrichError::Timeout => "enrichment_timeout",
                        _ => "enrichment_unavailable",
                    };
                    (FailureClass::Transient, reason.to_string(), None, None)
                }
            };
            metrics::counter!(m::DELIVERY_ERRORS, "class" => class.as_str(), "reason" => reason.clone())
                .increment(1);
            if class.is_retryable() {
                let jitter: f64 = rand::random();
                if let Some(d) =
                    self.policy
                        .next_delay(attempts, start.elapsed(), retry_after, jitter)
                {
                    tracing::debug!(attempts, %reason, delay_ms = d.as_millis() as u64, "transient failure, retrying in place");
                    tokio::time::sleep(d).await;
                    continue;
                }
            }
            break (class, reason, status);
        };
        gauge.decrement(1.0);
        drop(permit);
        let (class, reason, status) = failure;
        let info = ErrorInfo {
            class: class.as_str().into(),
            reason: reason.clone(),
            status,
            message: match status {
                Some(s) => format!("API answered {s} after {attempts} tries"),
                None => format!("{reason} after {attempts} tries"),
            },
        };
        if class == FailureClass::Permanent {
            self.park(item, info).await
        } else {
            self.dead_letter(item, info).await
        }
    }

    /// The body to POST: the original bytes, or the event with its enrichment.
    /// `Ok(None)`: the enrichment row is missing and the config says park.
    async fn body(&self, item: &Item, ev: &Event) -> Result<Option<Bytes>, EnrichError> {
        let (Some(enricher), Some(key)) = (&self.enricher, &item.key) else {
            return Ok(Some(ev.raw.clone()));
        };
        let cfg = &self.pipeline.config.enrichment;
        let key = String::from_utf8_lossy(key);
        match enricher.lookup(&key).await? {
            Some(doc) => {
                let mut obj: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(&ev.raw).unwrap_or_default();
                obj.insert(cfg.field.clone(), (*doc).clone());
                Ok(Some(Bytes::from(
                    serde_json::to_vec(&obj).unwrap_or_default(),
                )))
            }
            None => match cfg.on_missing {
                OnMissing::Deliver => Ok(Some(ev.raw.clone())),
                OnMissing::Park => Ok(None),
            },
        }
    }

    fn envelope(&self, item: &Item, error: ErrorInfo) -> Envelope {
        let now = now_ms();
        let (event_id, event_type) = match &item.work {
            Work::Deliver(e) => (Some(e.id.clone()), Some(e.event_type.clone())),
            Work::Park { .. } => (None, None),
        };
        Envelope {
            version: ENVELOPE_VERSION,
            event_id,
            event_type,
            key: item.key.clone(),
            payload: item
                .payload
                .as_ref()
                .map(|b| b.to_vec())
                .unwrap_or_default(),
            dlq_retries: 0,
            first_dlq_at_ms: now,
            not_before_ms: now,
            last_error: error,
            origin: Origin {
                topic: item.topic.clone(),
                partition: item.partition,
                offset: item.offset,
                timestamp_ms: item.timestamp_ms,
                consumer_group: self.pipeline.config.kafka.group_id.clone(),
            },
        }
    }

    async fn park(&self, item: &Item, error: ErrorInfo) -> Finished {
        let reason = error.reason.clone();
        let rec = DlqRecord {
            topic: self.pipeline.parking_topic.clone(),
            partition: None,
            key: item.key.clone(),
            envelope: self.envelope(item, error),
        };
        write_durably(&self.pipeline, rec).await;
        metrics::counter!(m::PARKED, "reason" => reason.clone()).increment(1);
        Finished::Parked { reason }
    }

    async fn dead_letter(&self, item: &Item, error: ErrorInfo) -> Finished {
        let reason = error.reason.clone();
        let rec = DlqRecord {
            topic: self.pipeline.dlq_topic.clone(),
            partition: Some(item.partition),
            key: item.key.clone(),
            envelope: self.envelope(item, error),
        };
        write_durably(&self.pipeline, rec).await;
        metrics::counter!(m::DLQ_WRITTEN, "reason" => reason.clone()).increment(1);
        Finished::DeadLettered { reason }
    }
}

/// Writes until the broker acknowledges. The event's offset waits for this, so
/// it never gives up by itself; shutdown abandons it (the token then reports
/// errored and the offset stays unstored).
async fn write_durably(pipeline: &Pipeline, rec: DlqRecord) {
    let mut tries = 0u32;
    loop {
        tries += 1;
        let err = match pipeline.dlq_writer() {
            None => "DLQ writer not running".to_string(),
            Some(writer) => {
                let r = writer
                    .call(
                        |reply| DlqWriterMsg::Write(Box::new(rec.clone()), reply),
                        Some(Duration::from_secs(60)),
                    )
                    .await;
                match r {
                    Ok(ractor::rpc::CallResult::Success(Ok(_offset))) => return,
                    Ok(ractor::rpc::CallResult::Success(Err(e))) => e,
                    Ok(_) => "DLQ writer did not answer".to_string(),
                    Err(e) => format!("DLQ writer unreachable: {e}"),
                }
            }
        };
        let delay = persistent_delay(tries, Duration::from_millis(200), Duration::from_secs(5));
        tracing::warn!(topic = %rec.topic, error = %err, tries, "write not acknowledged; retrying (the offset waits)");
        tokio::time::sleep(delay).await;
    }
}
