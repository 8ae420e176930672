//! `courier dlq replay`: moves events from the parking lot (or the DLQ) back to the
//! main topic after a fix. Replayed events keep their bytes, so they keep their ids
//! and the API's idempotency key still deduplicates them.
//!
//! Idempotence: every replayed record is noted in a log topic (`<source>.replayed`,
//! key `partition/offset`) *after* the main-topic write is acknowledged. A second run
//! skips what the log lists. A crash between the two writes can replay one record
//! twice (a duplicate the idempotency key absorbs), never skip one.

use crate::config::KafkaConfig;
use crate::core::envelope::Envelope;
use crate::kafka::admin::{create_topics, read_all, AdminError, ReadRecord};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use serde::Serialize;
use std::collections::HashSet;
use std::time::Duration;

/// Which records to replay. Empty lists match everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub reasons: Vec<String>,
    pub types: Vec<String>,
    pub keys: Vec<String>,
    pub ids: Vec<String>,
    /// Entered the DLQ / parking lot at or after this time (ms since epoch).
    pub since_ms: Option<i64>,
    /// Entered before this time.
    pub until_ms: Option<i64>,
}

impl Filter {
    pub fn matches(&self, e: &Envelope) -> bool {
        let any = |list: &[String], v: Option<&str>| {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v))
        };
        let key = e.key.as_deref().map(String::from_utf8_lossy);
        any(&self.reasons, Some(&e.last_error.reason))
            && any(&self.types, e.event_type.as_deref())
            && any(&self.keys, key.as_deref())
            && any(&self.ids, e.event_id.as_deref())
            && self.since_ms.is_none_or(|t| e.first_dlq_at_ms >= t)
            && self.until_ms.is_none_or(|t| e.first_dlq_at_ms < t)
    }
}

#[derive(Debug, Clone)]
pub struct Candidate {
    pub partition: i32,
    pub offset: i64,
    pub envelope: Envelope,
}

#[derive(Debug, Default, Serialize)]
pub struct Plan {
    #[serde(skip)]
    pub selected: Vec<Candidate>,
    pub selected_count: usize,
    pub already_replayed: usize,
    pub not_matching: usize,
    pub unreadable: usize,
}

pub fn log_key(partition: i32, offset: i64) -> String {
    format!("{partition}/{offset}")
}

/// Decides what a run would replay (pure).
pub fn plan(records: &[ReadRecord], filter: &Filter, already: &HashSet<String>) -> Plan {
    let mut p = Plan::default();
    for r in records {
        let Some(env) = r
            .payload
            .as_deref()
            .and_then(|b| Envelope::from_bytes(b).ok())
        else {
            p.unreadable += 1;
            continue;
        };
        if !filter.matches(&env) {
            p.not_matching += 1;
        } else if already.contains(&log_key(r.partition, r.offset)) {
            p.already_replayed += 1;
        } else {
            p.selected.push(Candidate {
                partition: r.partition,
                offset: r.offset,
                envelope: env,
            });
        }
    }
    p.selected_count = p.selected.len();
    p
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("write to {0} failed: {1}")]
    Write(String, String),
}

pub fn log_topic(source: &str) -> String {
    format!("{source}.replayed")
}

/// Reads the source topic and the replay log, and plans. Connects with the whole
/// Kafka config (`[kafka.properties]`, the SASL password from the environment).
pub async fn prepare(
    kafka: &KafkaConfig,
    source: &str,
    filter: &Filter,
) -> Result<Plan, ReplayError> {
    let (k, s) = (kafka.clone(), source.to_string());
    let (records, logged) = tokio::task::spawn_blocking(move || {
        Ok::<_, AdminError>((read_all(&k, &s)?, read_all(&k, &log_topic(&s))?))
    })
    .await
    .map_err(|e| AdminError::Timeout(e.to_string()))??;
    let already: HashSet<String> = logged
        .iter()
        .filter_map(|r| {
            r.key
                .as_deref()
                .map(|k| String::from_utf8_lossy(k).into_owned())
        })
        .collect();
    Ok(plan(&records, filter, &already))
}

/// Replays the plan to `main_topic` at no more than `rate_per_sec`, with the
/// pipeline's own producer configuration (idempotent, `acks=all`,
/// `[kafka.properties]`, the SASL password from the environment).
pub async fn execute(
    kafka: &KafkaConfig,
    source: &str,
    main_topic: &str,
    plan: &Plan,
    rate_per_sec: f64,
) -> Result<usize, ReplayError> {
    let log = log_topic(source);
    create_topics(kafka, &[(log.as_str(), 1)]).await?;
    let producer: FutureProducer = crate::kafka::producer_config(kafka).create()?;
    let interval = Duration::from_secs_f64(1.0 / rate_per_sec.max(0.001));
    let mut tick = tokio::time::interval(interval);
    let mut done = 0;
    for c in &plan.selected {
        tick.tick().await; // the rate limit
        let from = format!("{source}/{}", log_key(c.partition, c.offset));
        let headers = OwnedHeaders::new().insert(Header {
            key: "courier-replayed-from",
            value: Some(from.as_bytes()),
        });
        let mut rec = FutureRecord::to(main_topic)
            .payload(&c.envelope.payload)
            .headers(headers);
        if let Some(k) = &c.envelope.key {
            rec = rec.key(k);
        }
        producer
            .send(rec, Timeout::Never)
            .await
            .map_err(|(e, _)| ReplayError::Write(main_topic.into(), e.to_string()))?;
        let key = log_key(c.partition, c.offset);
        let id = c.envelope.event_id.clone().unwrap_or_default();
        producer
            .send(
                FutureRecord::to(&log).key(&key).payload(&id),
                Timeout::Never,
            )
            .await
            .map_err(|(e, _)| ReplayError::Write(log.clone(), e.to_string()))?;
        done += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::envelope::tests::sample;

    fn rec(partition: i32, offset: i64, env: &Envelope) -> ReadRecord {
        ReadRecord {
            partition,
            offset,
            key: None,
            payload: Some(env.to_bytes()),
            headers: Default::default(),
        }
    }

    #[test]
    fn filters_combine() {
        let e = sample();
        assert!(Filter::default().matches(&e));
        let by_reason = Filter {
            reasons: vec!["http_503".into()],
            ..Filter::default()
        };
        assert!(by_reason.matches(&e));
        let other = Filter {
            reasons: vec!["http_400".into()],
            ..Filter::default()
        };
        assert!(!other.matches(&e));
        let by_key = Filter {
            keys: vec![String::from_utf8_lossy(b"k\x00\xff").into_owned()],
            types: vec!["profile.updated".into()],
            ids: vec!["e-1".into()],
            since_ms: Some(1_000),
            until_ms: Some(1_001),
            ..Filter::default()
        };
        assert!(by_key.matches(&e));
        let late = Filter {
            since_ms: Some(1_001),
            ..Filter::default()
        };
        assert!(!late.matches(&e));
    }

    #[test]
    fn plan_skips_what_the_log_has() {
        let a = sample();
        let mut b = sample();
        b.last_error.reason = "http_400".into();
        let records = vec![rec(0, 1, &a), rec(0, 2, &b), rec(1, 1, &a)];
        let already: HashSet<String> = [log_key(1, 1)].into_iter().collect();
        let p = plan(
            &records,
            &Filter {
                reasons: vec!["http_503".into()],
                ..Filter::default()
            },
            &already,
        );
        assert_eq!(p.selected_count, 1);
        assert_eq!((p.selected[0].partition, p.selected[0].offset), (0, 1));
        assert_eq!(p.already_replayed, 1);
        assert_eq!(p.not_matching, 1);
    }
}
