//! The DLQ / parking-lot envelope (versioned) and the headers that mirror it.
//!
//! The original key and payload travel as bytes, unchanged (base64 in the JSON
//! body). The same context also goes into Kafka headers with the usual names, so
//! `kcat -J` and other tools can read a DLQ record without parsing its body.

use serde::{Deserialize, Serialize};

pub const ENVELOPE_VERSION: u32 = 1;

/// Header names. The `kafka_dlt-*` names follow Spring Kafka's dead-letter
/// convention, which most Kafka tooling already knows.
pub mod header {
    pub const ORIGINAL_TOPIC: &str = "kafka_dlt-original-topic";
    pub const ORIGINAL_PARTITION: &str = "kafka_dlt-original-partition";
    pub const ORIGINAL_OFFSET: &str = "kafka_dlt-original-offset";
    pub const ORIGINAL_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
    pub const ORIGINAL_GROUP: &str = "kafka_dlt-original-consumer-group";
    pub const EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";
    pub const ENVELOPE_VERSION: &str = "courier-envelope-version";
    pub const EVENT_ID: &str = "courier-event-id";
    pub const ATTEMPTS: &str = "courier-dlq-retries";
    pub const REASON: &str = "courier-reason";
    pub const ERROR_CLASS: &str = "courier-error-class";
    pub const NOT_BEFORE: &str = "courier-not-before";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub consumer_group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// `transient`, `permanent`, `systemic` or `poison`.
    pub class: String,
    /// Bounded reason code (`http_503`, `timeout`, `malformed_json`, ...).
    pub reason: String,
    pub status: Option<u16>,
    /// Human-readable detail. Never contains secrets: it is built from status
    /// codes and decode errors, not from request headers.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    #[serde(with = "b64_opt")]
    pub key: Option<Vec<u8>>,
    #[serde(with = "b64")]
    pub payload: Vec<u8>,
    /// How many times this event went (back) into the DLQ after its first entry.
    /// Only ever incremented, by the writer side, see [`Envelope::retried`].
    pub dlq_retries: u32,
    pub first_dlq_at_ms: i64,
    pub not_before_ms: i64,
    pub last_error: ErrorInfo,
    pub origin: Origin,
}

#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("envelope is not valid JSON of the expected shape: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("envelope version {0} is newer than this Courier understands ({ENVELOPE_VERSION})")]
    UnknownVersion(u32),
}

impl Envelope {
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising this struct cannot fail: every field is a plain value.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let env: Envelope = serde_json::from_slice(bytes)?;
        if env.version > ENVELOPE_VERSION {
            return Err(EnvelopeError::UnknownVersion(env.version));
        }
        Ok(env)
    }

    /// The envelope for one more DLQ round: `dlq_retries + 1`, new error and
    /// `not_before`; everything that identifies the event is kept.
    pub fn retried(&self, error: ErrorInfo, not_before_ms: i64) -> Envelope {
        Envelope {
            dlq_retries: self.dlq_retries.saturating_add(1),
            last_error: error,
            not_before_ms,
            ..self.clone()
        }
    }

    /// Headers mirroring the envelope's context.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (header::ORIGINAL_TOPIC, self.origin.topic.clone()),
            (
                header::ORIGINAL_PARTITION,
                self.origin.partition.to_string(),
            ),
            (header::ORIGINAL_OFFSET, self.origin.offset.to_string()),
            (header::ORIGINAL_GROUP, self.origin.consumer_group.clone()),
            (header::EXCEPTION_MESSAGE, self.last_error.message.clone()),
            (header::ENVELOPE_VERSION, self.version.to_string()),
            (header::ATTEMPTS, self.dlq_retries.to_string()),
            (header::REASON, self.last_error.reason.clone()),
            (header::ERROR_CLASS, self.last_error.class.clone()),
            (header::NOT_BEFORE, self.not_before_ms.to_string()),
        ];
        if let Some(ts) = self.origin.timestamp_ms {
            h.push((header::ORIGINAL_TIMESTAMP, ts.to_string()));
        }
        if let Some(id) = &self.event_id {
            h.push((header::EVENT_ID, id.clone()));
        }
        h
    }
}

mod b64 {
    use base64::{engine::general_purpose::STANDARD, Engine};
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s).map_err(serde::de::Error::custom)
    }
}

mod b64_opt {
    use base64::{engine::general_purpose::STANDARD, Engine};
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&STANDARD.encode(v)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => STANDARD
                .decode(s)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub fn sample() -> Envelope {
        Envelope {
            version: ENVELOPE_VERSION,
            event_id: Some("e-1".into()),
            event_type: Some("profile.updated".into()),
            key: Some(b"k\x00\xff".to_vec()),
            payload: b"\xff\xfe not utf8".to_vec(),
            dlq_retries: 0,
            first_dlq_at_ms: 1_000,
            not_before_ms: 2_000,
            last_error: ErrorInfo {
                class: "transient".into(),
                reason: "http_503".into(),
                status: Some(503),
                message: "API answered 503".into(),
            },
            origin: Origin {
                topic: "events".into(),
                partition: 3,
                offset: 42,
                timestamp_ms: Some(999),
                consumer_group: "courier".into(),
            },
        }
    }

    #[test]
    fn round_trip_keeps_bytes() {
        let e = sample();
        let back = Envelope::from_bytes(&e.to_bytes()).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn headers_mirror_context() {
        let e = sample();
        let h: std::collections::HashMap<_, _> = e.headers().into_iter().collect();
        assert_eq!(h[header::ORIGINAL_TOPIC], "events");
        assert_eq!(h[header::ORIGINAL_PARTITION], "3");
        assert_eq!(h[header::ORIGINAL_OFFSET], "42");
        assert_eq!(h[header::ATTEMPTS], "0");
        assert_eq!(h[header::REASON], "http_503");
        assert_eq!(h[header::EVENT_ID], "e-1");
    }

    #[test]
    fn newer_version_is_refused() {
        let mut e = sample();
        e.version = ENVELOPE_VERSION + 1;
        assert!(matches!(
            Envelope::from_bytes(&e.to_bytes()),
            Err(EnvelopeError::UnknownVersion(_))
        ));
        assert!(Envelope::from_bytes(b"{}").is_err());
    }

    #[test]
    fn retries_only_grow() {
        let mut e = sample();
        for i in 1..=5 {
            let err = e.last_error.clone();
            e = e.retried(err, 10 + i);
            assert_eq!(e.dlq_retries, i as u32);
            assert_eq!(e.first_dlq_at_ms, 1_000);
            assert_eq!(e.origin.offset, 42);
        }
    }

    proptest! {
        #[test]
        fn round_trip_any_bytes(key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
                                payload in proptest::collection::vec(any::<u8>(), 0..512),
                                retries in any::<u32>()) {
            let mut e = sample();
            e.key = key;
            e.payload = payload;
            e.dlq_retries = retries;
            prop_assert_eq!(Envelope::from_bytes(&e.to_bytes()).unwrap(), e);
        }
    }
}
