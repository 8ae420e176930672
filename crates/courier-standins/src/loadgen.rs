//! Synthetic CloudEvents for the demo, the tests, the drills and the benchmarks:
//! valid events over a set of keys, with bad input mixed in on request. Every
//! produced record is acknowledged by the broker before it counts as produced.

use crate::audit::Produced;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("produce failed: {0}")]
    Delivery(String),
    #[error("encoding an Avro record: {0}")]
    Encode(String),
}

/// The kinds of bad input the generator can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    InvalidUtf8,
    MalformedJson,
    MissingAttribute,
    TooLarge(usize),
    WrongType,
}

impl Poison {
    pub fn bytes(self, seq: usize) -> Vec<u8> {
        match self {
            Poison::InvalidUtf8 => {
                let mut v = format!("{{\"specversion\":\"1.0\",\"id\":\"bad-{seq}\",\"source\":\"/x\",\"type\":\"t\",\"data\":\"").into_bytes();
                v.extend_from_slice(&[0xff, 0xfe, 0xfd]);
                v.extend_from_slice(b"\"}");
                v
            }
            Poison::MalformedJson => {
                format!("{{\"specversion\":\"1.0\",\"id\":\"bad-{seq}\",").into_bytes()
            }
            Poison::MissingAttribute => {
                format!("{{\"specversion\":\"1.0\",\"id\":\"bad-{seq}\",\"type\":\"t\"}}")
                    .into_bytes()
            }
            Poison::TooLarge(n) => {
                let pad = "x".repeat(n);
                format!("{{\"specversion\":\"1.0\",\"id\":\"bad-{seq}\",\"source\":\"/x\",\"type\":\"t\",\"data\":\"{pad}\"}}")
                    .into_bytes()
            }
            Poison::WrongType => {
                format!("{{\"specversion\":\"1.0\",\"id\":{seq},\"source\":\"/x\",\"type\":\"t\"}}")
                    .into_bytes()
            }
        }
    }
}

/// What to produce.
#[derive(Debug, Clone)]
pub struct Spec {
    pub count: usize,
    pub keys: usize,
    pub id_prefix: String,
    /// Every n-th record is bad input, cycling through `poison_kinds`.
    pub poison_every: Option<usize>,
    pub poison_kinds: Vec<Poison>,
    /// Approximate size of each valid event.
    pub event_bytes: usize,
    pub event_type: String,
    /// Valid events as Avro records of [`AVRO_SCHEMA`] in the Confluent wire
    /// format, framed for this registry schema id (`input.format = "avro"`);
    /// bad input stays as it is (not framed). `None`: CloudEvents JSON.
    pub avro_schema_id: Option<u32>,
    /// Where a record names its entity (its key): the Kafka key, or the body.
    pub keying: Keying,
}

/// Where a record names its entity key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keying {
    /// The Kafka record key; the producer's partitioner picks the partition
    /// from it.
    #[default]
    Kafka,
    /// No Kafka key: the key is the event's top-level `"k"` field (Courier's
    /// `input.format = "json"` with `input.key = "/k"`; the event is otherwise
    /// [`event_json`]'s), and the producer picks the partition by entity: the
    /// key's number modulo `partitions`, so each entity's events stay in one
    /// partition, in order. Bad input has no key either. Not with Avro.
    Body { partitions: i32 },
}

impl Keying {
    /// The partition of the key numbered `key_no` (`None`: the partitioner's choice).
    fn partition(self, key_no: usize) -> Option<i32> {
        match self {
            Keying::Kafka => None,
            Keying::Body { partitions } => Some((key_no % partitions.max(1) as usize) as i32),
        }
    }
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            count: 1000,
            keys: 100,
            id_prefix: "ev".into(),
            poison_every: None,
            poison_kinds: vec![
                Poison::InvalidUtf8,
                Poison::MalformedJson,
                Poison::MissingAttribute,
                Poison::WrongType,
            ],
            event_bytes: 300,
            event_type: "profile.updated".into(),
            avro_schema_id: None,
            keying: Keying::Kafka,
        }
    }
}

/// The id of the `seq`-th valid event of a spec.
pub fn event_id(prefix: &str, seq: usize) -> String {
    format!("{prefix}-{seq}")
}

pub fn key_of(seq: usize, keys: usize) -> String {
    format!("key-{}", seq % keys.max(1))
}

/// A valid CloudEvent. `data` carries the key and a per-run sequence number, so a
/// receiver can check per-key order.
pub fn event_json(id: &str, event_type: &str, key: &str, seq: usize, size: usize) -> Vec<u8> {
    let head = format!(
        "{{\"specversion\":\"1.0\",\"id\":\"{id}\",\"source\":\"/courier/loadgen\",\"type\":\"{event_type}\",\"subject\":\"{key}\",\"entityversion\":1,\"data\":{{\"key\":\"{key}\",\"seq\":{seq},\"pad\":\""
    );
    let pad = size.saturating_sub(head.len() + 3);
    let mut v = head.into_bytes();
    v.extend(std::iter::repeat_n(b'.', pad));
    v.extend_from_slice(b"\"}}");
    v
}

/// [`event_json`]'s event with its key also at the top, as `"k"`: for
/// [`Keying::Body`] (`input.key = "/k"`).
pub fn event_json_keyed(id: &str, event_type: &str, key: &str, seq: usize, size: usize) -> Vec<u8> {
    let mut v = format!("{{\"k\":\"{key}\",").into_bytes();
    let rest = event_json(id, event_type, key, seq, size.saturating_sub(v.len()));
    v.extend_from_slice(&rest[1..]);
    v
}

/// The Avro schema of [`event_avro`]: the fields of [`event_json`]'s CloudEvent.
pub const AVRO_SCHEMA: &str = r#"{"type": "record", "name": "Event", "namespace": "courier.loadgen",
 "fields": [{"name": "specversion", "type": "string"}, {"name": "id", "type": "string"},
  {"name": "source", "type": "string"}, {"name": "type", "type": "string"},
  {"name": "subject", "type": "string"}, {"name": "entityversion", "type": "long"},
  {"name": "data", "type": {"type": "record", "name": "Data", "fields": [
    {"name": "key", "type": "string"}, {"name": "seq", "type": "long"},
    {"name": "pad", "type": "string"}]}}]}"#;

/// [`event_json`]'s event as an Avro record of [`AVRO_SCHEMA`], framed for the
/// registry's `schema_id` (magic byte 0, the id, the Avro binary): what a
/// Confluent serializer writes. Decoded to JSON it is [`event_json`]'s text.
pub fn event_avro(
    id: &str,
    event_type: &str,
    key: &str,
    seq: usize,
    size: usize,
    schema_id: u32,
) -> Result<Vec<u8>, LoadError> {
    use apache_avro::types::Value;
    static SCHEMA: std::sync::OnceLock<Result<apache_avro::Schema, String>> =
        std::sync::OnceLock::new();
    let schema = SCHEMA
        .get_or_init(|| apache_avro::Schema::parse_str(AVRO_SCHEMA).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| LoadError::Encode(e.clone()))?;
    let s = |v: &str| Value::String(v.to_string());
    let pad = size.saturating_sub(34 + id.len() + event_type.len() + 2 * key.len());
    let record = Value::Record(vec![
        ("specversion".into(), s("1.0")),
        ("id".into(), s(id)),
        ("source".into(), s("/courier/loadgen")),
        ("type".into(), s(event_type)),
        ("subject".into(), s(key)),
        ("entityversion".into(), Value::Long(1)),
        (
            "data".into(),
            Value::Record(vec![
                ("key".into(), s(key)),
                ("seq".into(), Value::Long(seq as i64)),
                ("pad".into(), Value::String(".".repeat(pad))),
            ]),
        ),
    ]);
    // The Confluent wire format's header, written here rather than with
    // Courier's `core::schema::frame` (the input it reads): magic byte 0, then
    // the schema id, big-endian.
    let mut out = vec![0u8];
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend(
        apache_avro::to_avro_datum(schema, record).map_err(|e| LoadError::Encode(e.to_string()))?,
    );
    Ok(out)
}

pub fn producer(brokers: &str) -> Result<FutureProducer, LoadError> {
    producer_with_timeout(brokers, Duration::from_secs(300))
}

/// [`producer`] whose records fail after `message_timeout` without an
/// acknowledgement (the drill's load sends a failed chunk again with a new
/// producer, so it need not wait five minutes to find out).
pub fn producer_with_timeout(
    brokers: &str,
    message_timeout: Duration,
) -> Result<FutureProducer, LoadError> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "10")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "200000")
        // Through a broker restart or two (the kafka-restart drill stops and
        // starts it twice; on a loaded machine that took 93 s and a 60 s
        // timeout failed the drill's load): keep trying, like a producer
        // configured for outages, rather than give up on an event.
        .set(
            "message.timeout.ms",
            message_timeout.as_millis().max(1).to_string(),
        )
        .create()?)
}

enum Pending {
    Valid(String, DeliveryFuture),
    Bad(DeliveryFuture),
}

/// Produces `spec.count` records to `topic` and returns what the audit needs.
pub async fn produce(brokers: &str, topic: &str, spec: &Spec) -> Result<Produced, LoadError> {
    let producer = producer(brokers)?;
    produce_with(&producer, topic, spec, 0).await
}

/// Like [`produce`] with an existing producer, numbering valid events from `first_seq`.
pub async fn produce_with(
    producer: &FutureProducer,
    topic: &str,
    spec: &Spec,
    first_seq: usize,
) -> Result<Produced, LoadError> {
    let mut out = Produced::default();
    let mut pending: Vec<Pending> = Vec::with_capacity(10_000);
    for i in 0..spec.count {
        let seq = first_seq + i;
        let key = key_of(seq, spec.keys);
        let bad = spec
            .poison_every
            .filter(|n| *n > 0 && i % n == n - 1 && !spec.poison_kinds.is_empty())
            .map(|n| spec.poison_kinds[(i / n) % spec.poison_kinds.len()]);
        let (payload, id) = match bad {
            Some(p) => (p.bytes(seq), None),
            None => {
                let id = event_id(&spec.id_prefix, seq);
                let value = match spec.avro_schema_id {
                    None if spec.keying != Keying::Kafka => {
                        event_json_keyed(&id, &spec.event_type, &key, seq, spec.event_bytes)
                    }
                    None => event_json(&id, &spec.event_type, &key, seq, spec.event_bytes),
                    Some(schema_id) => event_avro(
                        &id,
                        &spec.event_type,
                        &key,
                        seq,
                        spec.event_bytes,
                        schema_id,
                    )?,
                };
                (value, Some(id))
            }
        };
        let partition = spec.keying.partition(seq % spec.keys.max(1));
        let fut = loop {
            let rec = FutureRecord::to(topic).payload(&payload);
            let rec = match partition {
                None => rec.key(&key),
                Some(p) => rec.partition(p),
            };
            match producer.send_result(rec) {
                Ok(f) => break f,
                Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    // Let deliveries drain before enqueueing more.
                    settle(&mut pending, &mut out).await?;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(e.into()),
            }
        };
        pending.push(match id {
            Some(id) => Pending::Valid(id, fut),
            None => Pending::Bad(fut),
        });
        if pending.len() >= 10_000 {
            settle(&mut pending, &mut out).await?;
        }
    }
    settle(&mut pending, &mut out).await?;
    Ok(out)
}

async fn settle(pending: &mut Vec<Pending>, out: &mut Produced) -> Result<(), LoadError> {
    for p in pending.drain(..) {
        match p {
            Pending::Valid(id, f) => {
                let at = wait(f).await?;
                out.ids.push(id);
                out.offsets.push(at);
            }
            Pending::Bad(f) => {
                let (part, off) = wait(f).await?;
                out.poison.push((part, off));
            }
        }
    }
    Ok(())
}

async fn wait(f: DeliveryFuture) -> Result<(i32, i64), LoadError> {
    match f.await {
        Ok(Ok(d)) => Ok((d.partition, d.offset)),
        Ok(Err((e, _))) => Err(LoadError::Delivery(e.to_string())),
        Err(_) => Err(LoadError::Delivery("producer dropped the delivery".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_keyed_event_carries_its_key_at_the_top_and_in_data() {
        let v: serde_json::Value =
            serde_json::from_slice(&event_json_keyed("e-7", "t", "key-3", 7, 300)).expect("JSON");
        assert_eq!(v["k"], "key-3");
        assert_eq!(v["id"], "e-7");
        assert_eq!(v["data"]["key"], "key-3");
        assert_eq!(v["data"]["seq"], 7);
        let keying = Keying::Body { partitions: 4 };
        assert_eq!(
            (
                keying.partition(3),
                keying.partition(7),
                keying.partition(8)
            ),
            (Some(3), Some(3), Some(0))
        );
        assert_eq!(Keying::Kafka.partition(3), None);
    }
}
