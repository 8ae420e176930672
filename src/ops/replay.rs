//! `courier dlq replay`: moves events from the parking lot (or the DLQ) back to the
//! main topic after a fix. Replayed events keep their bytes, so they keep their ids
//! and the API's idempotency key still deduplicates them.
//!
//! Both passes (the count, then the replay) stream the topics: memory does not
//! grow with the parking lot's size. An envelope that carries a reference
//! instead of its payload (`payload_omitted`, see `core::envelope`) is replayed
//! with the origin record's value, read back and checked against the reference's
//! size and SHA-256; when retention has removed it, the run says so and skips it.
//!
//! Idempotence: every replayed record is noted in a log topic (`<source>.replayed`,
//! key `partition/offset`) *after* the main-topic write is acknowledged. A second run
//! skips what the log lists. A crash between the two writes can replay one record
//! twice (a duplicate the idempotency key absorbs), never skip one.

use crate::config::KafkaConfig;
use crate::core::envelope::sha256_hex;
use crate::core::envelope::Envelope;
use crate::kafka::admin::{ensure_topic, fetch_one, scan, AdminError, ReadRecord};
use crate::ops::progress::{Counts, Stop};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use serde::Serialize;
use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
    pub(crate) fn matches(&self, e: &Envelope) -> bool {
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

/// What a run would do, counted while streaming the source (only the first
/// [`Plan::SAMPLES`] candidates are kept, for the dry run's listing).
#[derive(Debug, Default, Serialize)]
pub struct Plan {
    #[serde(skip)]
    pub samples: Vec<Candidate>,
    pub selected_count: usize,
    /// Of those, envelopes that carry a reference instead of the payload: the
    /// payload is read back from the origin topic when replayed.
    pub payload_omitted: usize,
    pub already_replayed: usize,
    pub not_matching: usize,
    pub unreadable: usize,
}

impl Plan {
    pub(crate) const SAMPLES: usize = 20;
}

pub(crate) fn log_key(partition: i32, offset: i64) -> String {
    format!("{partition}/{offset}")
}

/// What one source record means for a run (pure).
#[derive(Debug)]
pub(crate) enum Decision {
    Unreadable,
    NotMatching,
    AlreadyReplayed,
    Replay(Box<Candidate>),
}

pub(crate) fn decide(r: &ReadRecord, filter: &Filter, already: &HashSet<String>) -> Decision {
    let Some(env) = r
        .payload
        .as_deref()
        .and_then(|b| Envelope::from_bytes(b).ok())
    else {
        return Decision::Unreadable;
    };
    if !filter.matches(&env) {
        Decision::NotMatching
    } else if already.contains(&log_key(r.partition, r.offset)) {
        Decision::AlreadyReplayed
    } else {
        Decision::Replay(Box::new(Candidate {
            partition: r.partition,
            offset: r.offset,
            envelope: env,
        }))
    }
}

impl Plan {
    fn count(&mut self, d: Decision) {
        match d {
            Decision::Unreadable => self.unreadable += 1,
            Decision::NotMatching => self.not_matching += 1,
            Decision::AlreadyReplayed => self.already_replayed += 1,
            Decision::Replay(c) => {
                self.selected_count += 1;
                if c.envelope.omitted.is_some() {
                    self.payload_omitted += 1;
                }
                if self.samples.len() < Self::SAMPLES {
                    self.samples.push(*c);
                }
            }
        }
    }
}

/// Decides what a run over these records would replay (pure).
#[cfg(test)]
pub(crate) fn plan(records: &[ReadRecord], filter: &Filter, already: &HashSet<String>) -> Plan {
    let mut p = Plan::default();
    for r in records {
        p.count(decide(r, filter, already));
    }
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
    #[error("--rate must be a number of events per second above 0, got {0}")]
    Rate(f64),
}

pub(crate) fn log_topic(source: &str) -> String {
    format!("{source}.replayed")
}

/// The keys of the replay log: what earlier runs replayed.
pub(crate) fn replayed_before(
    kafka: &KafkaConfig,
    source: &str,
) -> Result<HashSet<String>, AdminError> {
    let mut already = HashSet::new();
    scan(kafka, &log_topic(source), |r| {
        if let Some(k) = r.key {
            already.insert(String::from_utf8_lossy(&k).into_owned());
        }
        ControlFlow::Continue(())
    })?;
    Ok(already)
}

/// Streams the replay log and the source topic and counts what a run would do.
/// Connects with the whole Kafka config (`[kafka.properties]`, the SASL password
/// from the environment). Counts the records read in `counts`; stops reading
/// when `stop` is asked (the plan then counts what was read).
pub async fn prepare(
    kafka: &KafkaConfig,
    source: &str,
    filter: &Filter,
    counts: Arc<Counts>,
    stop: Stop,
) -> Result<Plan, ReplayError> {
    let (k, s, f) = (kafka.clone(), source.to_string(), filter.clone());
    tokio::task::spawn_blocking(move || {
        let already = replayed_before(&k, &s)?;
        let mut p = Plan::default();
        scan(&k, &s, |r| {
            counts.read.fetch_add(1, Ordering::Relaxed);
            p.count(decide(&r, &f, &already));
            if stop.asked() {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        Ok::<_, AdminError>(p)
    })
    .await
    .map_err(|e| AdminError::Timeout(e.to_string()))?
    .map_err(ReplayError::from)
}

/// What a run did.
#[derive(Debug, Default, Serialize)]
pub struct Replayed {
    pub replayed: usize,
    /// Envelopes whose payload was read back from the origin topic.
    pub payload_fetched: usize,
    /// Envelopes whose payload could not be read back (retention removed it, or
    /// what is there is not the event): not replayed, one line each.
    pub payload_unavailable: Vec<String>,
    /// Stopped by Ctrl-C before the end: a run again continues (what was
    /// replayed is in the log).
    pub interrupted: bool,
}

/// The bytes to replay for an envelope: its payload, or — when it carries a
/// reference — the origin record's value, checked against the size and SHA-256
/// the reference names.
fn payload_of(kafka: &KafkaConfig, env: &Envelope) -> Result<Vec<u8>, String> {
    let Some(o) = &env.omitted else {
        return Ok(env.payload.clone());
    };
    let origin = &env.origin;
    let r = fetch_one(kafka, &origin.topic, origin.partition, origin.offset)
        .map_err(|e| e.to_string())?;
    let value = r.payload.unwrap_or_default();
    if value.len() as u64 != o.payload_bytes || sha256_hex(&value) != o.payload_sha256 {
        return Err(format!(
            "{}/{}@{} holds {} bytes that do not match the reference ({} bytes, sha256 {})",
            origin.topic,
            origin.partition,
            origin.offset,
            value.len(),
            o.payload_bytes,
            o.payload_sha256
        ));
    }
    Ok(value)
}

/// Streams the source again and replays what the filter selects and the log
/// does not list, to `main_topic`, at no more than `rate_per_sec`, with the
/// pipeline's own producer configuration (idempotent, `acks=all`,
/// `[kafka.properties]`, the SASL password from the environment). Records
/// written to the source after `prepare` are left for the next run. `counts`:
/// records read, events selected, events replayed. When `stop` is asked, the
/// event being written is finished (main topic and log) and no other begins.
pub async fn execute(
    kafka: &KafkaConfig,
    source: &str,
    main_topic: &str,
    filter: &Filter,
    rate_per_sec: f64,
    counts: Arc<Counts>,
    stop: Stop,
) -> Result<Replayed, ReplayError> {
    if !rate_per_sec.is_finite() || rate_per_sec <= 0.0 {
        return Err(ReplayError::Rate(rate_per_sec));
    }
    let log = log_topic(source);
    ensure_topic(kafka, &log, 1).await?;
    let producer: FutureProducer = crate::kafka::producer_config(kafka).create()?;
    // The scan runs on a blocking thread and hands candidates over a small
    // bounded channel: memory stays flat, and the rate limit below holds the
    // scan back.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Candidate, Result<Vec<u8>, String>)>(16);
    let (k, s, f) = (kafka.clone(), source.to_string(), filter.clone());
    let (c2, stop2) = (counts.clone(), stop.clone());
    let scanner = tokio::task::spawn_blocking(move || {
        let already = replayed_before(&k, &s)?;
        scan(&k, &s, |r| {
            c2.read.fetch_add(1, Ordering::Relaxed);
            if stop2.asked() {
                return ControlFlow::Break(());
            }
            match decide(&r, &f, &already) {
                Decision::Replay(c) => {
                    c2.matched.fetch_add(1, Ordering::Relaxed);
                    let payload = payload_of(&k, &c.envelope);
                    match tx.blocking_send((*c, payload)) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(_) => ControlFlow::Break(()),
                    }
                }
                _ => ControlFlow::Continue(()),
            }
        })
    });
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate_per_sec));
    let mut out = Replayed::default();
    while let Some((c, payload)) = rx.recv().await {
        if stop.asked() {
            out.interrupted = true;
            break;
        }
        let id = c.envelope.event_id.clone().unwrap_or_default();
        let payload = match payload {
            Ok(p) => p,
            Err(why) => {
                out.payload_unavailable.push(format!(
                    "{} ({}): {why}",
                    log_key(c.partition, c.offset),
                    id
                ));
                continue;
            }
        };
        tick.tick().await; // the rate limit
        let from = format!("{source}/{}", log_key(c.partition, c.offset));
        // The origin record's own headers first (a binary-mode CloudEvent's
        // attributes), then where the replay came from.
        let mut headers = OwnedHeaders::new_with_capacity(c.envelope.origin_headers.len() + 1);
        for h in &c.envelope.origin_headers {
            // A name that is not UTF-8 goes back as the bytes it was.
            headers = match &h.name_bytes {
                Some(name) => crate::kafka::insert_header_bytes(headers, name, h.value.as_deref()),
                None => headers.insert(Header {
                    key: &h.name,
                    value: h.value.as_deref(),
                }),
            };
        }
        let headers = headers.insert(Header {
            key: "courier-replayed-from",
            value: Some(from.as_bytes()),
        });
        let mut rec = FutureRecord::to(main_topic)
            .payload(&payload)
            .headers(headers);
        if let Some(k) = &c.envelope.key {
            rec = rec.key(k);
        }
        producer
            .send(rec, Timeout::Never)
            .await
            .map_err(|(e, _)| ReplayError::Write(main_topic.into(), e.to_string()))?;
        let key = log_key(c.partition, c.offset);
        producer
            .send(
                FutureRecord::to(&log).key(&key).payload(&id),
                Timeout::Never,
            )
            .await
            .map_err(|(e, _)| ReplayError::Write(log.clone(), e.to_string()))?;
        out.replayed += 1;
        counts.written.fetch_add(1, Ordering::Relaxed);
        if c.envelope.omitted.is_some() {
            out.payload_fetched += 1;
        }
    }
    // The scanner stops at its next record once the receiver is gone.
    drop(rx);
    out.interrupted |= stop.asked();
    scanner
        .await
        .map_err(|e| AdminError::Timeout(e.to_string()))??;
    Ok(out)
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
        assert_eq!((p.samples[0].partition, p.samples[0].offset), (0, 1));
        assert_eq!(p.already_replayed, 1);
        assert_eq!(p.not_matching, 1);
    }
}
