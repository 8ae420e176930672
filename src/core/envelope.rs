//! The DLQ / parking-lot envelope (versioned) and the headers that mirror it.
//!
//! The original key and payload travel as bytes, unchanged (base64 in the JSON
//! body). The same context also goes into Kafka headers with the usual names, so
//! `kcat -J` and other tools can read a DLQ record without parsing its body.
//!
//! # Invariant I10: decoding
//!
//! *Enforced in* `src/core/event.rs`, `src/core/envelope.rs` (`Envelope::check`). Decoding
//! refuses what a JSON parser would refuse (depth, number range, broken strings) and ids
//! unfit for a header, so a body is never rebuilt differently from what was checked; a DLQ
//! record that Courier could not have written is parked `invalid_envelope` instead of
//! blocking the drain. A `not_before` past this Courier's `degraded.dlq_backoff_cap` is
//! not refused but waits the cap (`Envelope::wait_capped`): records written before an
//! operator lowered the cap are retried, not parked.
//!
//! *Tested by:* Unit tests; `tests/fuzz_codecs.rs` (properties comparing reasons, not only
//! ok/error); `tests/dlq.rs::forged_envelopes_never_block_the_drain`;
//! `tests/schema_registry.rs::dead_lettered_avro_events_are_redelivered_also_after_a_registry_outage`
//! (a second Courier with a shorter cap).

use crate::core::classify::{ErrorClass, FailureReason};
use serde::{Deserialize, Serialize};

/// The version written for an envelope that carries its payload. Version 2 (see
/// [`ENVELOPE_VERSION_REFERENCE`]) is written only when the payload had to be left
/// out, so a Courier of the previous release, which knows version 1 only, parks
/// such a record as unreadable instead of redelivering an empty payload.
pub(crate) const ENVELOPE_VERSION: u32 = 2;
pub const ENVELOPE_VERSION_PAYLOAD: u32 = 1;
pub(crate) const ENVELOPE_VERSION_REFERENCE: u32 = 2;

/// Error messages and header values longer than this are cut (on a character
/// boundary, marked with `…`).
pub(crate) const MAX_TEXT_BYTES: usize = 1024;

/// More DLQ rounds than any real event can have had: even at one round per
/// second (the backoff's floor is far above that) it is more than a day.
pub const MAX_PLAUSIBLE_DLQ_RETRIES: u32 = 100_000;

/// Control characters replaced by a space and the text cut to `max` bytes: what
/// goes into a header value, a log line or `last_error.message` comes from the
/// network or from input and must not carry line breaks or escape sequences.
pub(crate) fn clean_text(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max.saturating_sub('…'.len_utf8()) {
            out.push('…');
            return out;
        }
        out.push(c);
    }
    out
}

/// Header names. The `kafka_dlt-*` names follow Spring Kafka's dead-letter
/// convention, which most Kafka tooling already knows.
pub(crate) mod header {
    pub(crate) const ORIGINAL_TOPIC: &str = "kafka_dlt-original-topic";
    pub(crate) const ORIGINAL_PARTITION: &str = "kafka_dlt-original-partition";
    pub(crate) const ORIGINAL_OFFSET: &str = "kafka_dlt-original-offset";
    pub(crate) const ORIGINAL_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
    pub(crate) const ORIGINAL_GROUP: &str = "kafka_dlt-original-consumer-group";
    pub(crate) const EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";
    pub(crate) const ENVELOPE_VERSION: &str = "courier-envelope-version";
    pub(crate) const EVENT_ID: &str = "courier-event-id";
    pub(crate) const ATTEMPTS: &str = "courier-dlq-retries";
    pub(crate) const REASON: &str = "courier-reason";
    pub(crate) const ERROR_CLASS: &str = "courier-error-class";
    pub(crate) const NOT_BEFORE: &str = "courier-not-before";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub consumer_group: String,
}

/// Why an event is in the DLQ or the parking lot. Strings on the wire (so any
/// tool can read them), produced only by [`ErrorInfo::new`] from the typed
/// class and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// `transient`, `permanent`, `systemic`, `poison` (bad input) or `dropped`
    /// (given up on by the DLQ retry policy): [`ErrorClass`].
    pub class: String,
    /// Bounded reason code (`http_503`, `timeout`, `malformed_json`, ...): [`FailureReason`].
    pub reason: String,
    pub status: Option<u16>,
    /// Human-readable detail, control characters replaced and cut to
    /// [`MAX_TEXT_BYTES`]. Never contains secrets: it is built from status
    /// codes, the start of the API's answer and decode errors, not from request
    /// headers.
    pub message: String,
}

impl ErrorInfo {
    /// The one way Courier builds a `last_error`.
    pub(crate) fn new(
        class: ErrorClass,
        reason: FailureReason,
        status: Option<u16>,
        message: &str,
    ) -> ErrorInfo {
        ErrorInfo {
            class: class.as_str().into(),
            reason: reason.as_str().into(),
            status,
            message: clean_text(message, MAX_TEXT_BYTES),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    #[serde(with = "b64_opt")]
    pub key: Option<Vec<u8>>,
    /// The entity key read from the body (`input.key`), when it differs from
    /// the record's `key`: the key the event's order is kept by, so the DLQ
    /// drain redelivers an entity's events one at a time and its later
    /// events wait behind them. Absent in envelopes written before it
    /// existed (the drain then reads it from the payload again).
    #[serde(default, with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub entity_key: Option<Vec<u8>>,
    /// The route (`[[api.routes]]` `name`, or its index) the event was
    /// going to: its DLQ redelivery goes there again, whatever the routes'
    /// order or `when` say now. Absent for `api.url` (no route), and in
    /// envelopes written before it existed (their route is chosen again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The original bytes; empty when `omitted` says the payload was left out.
    #[serde(with = "b64")]
    pub payload: Vec<u8>,
    /// Set when the record would not fit the topic's `max.message.bytes` with the
    /// payload in it: the payload stays in the origin topic at `origin`, and this
    /// says how to recognise it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<Omitted>,
    /// The origin record's headers, when it had any: a binary-mode CloudEvent
    /// carries its attributes there, so redelivery and replay need them with
    /// the payload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origin_headers: Vec<OriginHeader>,
    /// How many times this event went (back) into the DLQ after its first entry.
    /// Only ever incremented, by the writer side, see [`Envelope::retried`].
    pub dlq_retries: u32,
    pub first_dlq_at_ms: i64,
    pub not_before_ms: i64,
    pub last_error: ErrorInfo,
    pub origin: Origin,
}

/// One header of the origin record (the value as bytes, base64 in the JSON).
/// A name that is not UTF-8 (Kafka does not check) is kept exactly too: `name`
/// then holds it made readable (each bad byte a U+FFFD, what any JSON tool and
/// an older Courier see), and `name_bytes` the bytes themselves (base64), which
/// redelivery and replay use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginHeader {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "b64_opt")]
    pub(crate) name_bytes: Option<Vec<u8>>,
    #[serde(with = "b64_opt")]
    pub value: Option<Vec<u8>>,
}

impl OriginHeader {
    /// The headers of a record, for an envelope.
    pub(crate) fn from_record(headers: Option<&[crate::core::input::Header]>) -> Vec<OriginHeader> {
        headers
            .unwrap_or_default()
            .iter()
            .map(|(name, value)| {
                let (name, name_bytes) = match name.as_str() {
                    Some(s) => (s.to_string(), None),
                    None => (
                        String::from_utf8_lossy(name.as_bytes()).into_owned(),
                        Some(name.as_bytes().to_vec()),
                    ),
                };
                OriginHeader {
                    name,
                    name_bytes,
                    value: value.as_ref().map(|v| v.to_vec()),
                }
            })
            .collect()
    }

    /// Back into record headers (decoding reads them as the record had them).
    pub(crate) fn to_record(headers: &[OriginHeader]) -> Vec<crate::core::input::Header> {
        headers
            .iter()
            .map(|h| {
                (
                    h.name_of(),
                    h.value.as_ref().map(|v| bytes::Bytes::copy_from_slice(v)),
                )
            })
            .collect()
    }

    /// The name exactly as the origin record had it.
    pub fn name_of(&self) -> crate::core::input::HeaderName {
        match &self.name_bytes {
            Some(b) => crate::core::input::HeaderName::new(b),
            None => self.name.as_str().into(),
        }
    }
}

/// What was left out of an envelope that carries a reference instead of bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omitted {
    /// Always true: `payload_omitted` in the JSON, for whoever greps for it.
    pub payload_omitted: bool,
    pub payload_bytes: u64,
    /// SHA-256 of the payload, lowercase hex.
    pub(crate) payload_sha256: String,
    /// The key was left out too (it alone would not fit).
    #[serde(default)]
    pub(crate) key_omitted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// serde_json's message, which may quote the record: cut and escaped
    /// ([`crate::core::text::excerpt`]), as it is logged for every such record.
    #[error("envelope is not valid JSON of the expected shape: {0}")]
    Malformed(String),
    #[error("envelope version {0} is newer than this Courier understands ({ENVELOPE_VERSION})")]
    UnknownVersion(u32),
    #[error("envelope is not one Courier could have written: {0}")]
    Implausible(String),
}

impl EnvelopeError {
    /// The parking-lot reason for a DLQ record that cannot be taken as an envelope.
    pub fn reason(&self) -> &'static str {
        match self {
            EnvelopeError::Malformed(_) | EnvelopeError::UnknownVersion(_) => "unreadable_envelope",
            EnvelopeError::Implausible(_) => "invalid_envelope",
        }
    }
}

impl Envelope {
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising this struct cannot fail: every field is a plain value.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let env: Envelope = serde_json::from_slice(bytes)
            .map_err(|e| EnvelopeError::Malformed(crate::core::event::quoted(&e.to_string())))?;
        if env.version > ENVELOPE_VERSION {
            return Err(EnvelopeError::UnknownVersion(env.version));
        }
        Ok(env)
    }

    /// Whether a DLQ record read back could have been written by Courier: a forged
    /// or corrupted one (negative coordinates, absurd round counts, a first entry
    /// in the future) would otherwise sit at the head of its DLQ partition and
    /// block the drain, or overflow the arithmetic on it. `now_ms` and
    /// `max_wait_ms` (the DLQ backoff cap plus clock skew) come from the caller.
    /// A `not_before` far ahead is not refused: [`Self::wait_capped`] bounds it
    /// (a Courier with a longer `dlq_backoff_cap` wrote it, before the operator
    /// lowered it).
    pub fn check(&self, now_ms: i64, max_wait_ms: i64) -> Result<(), EnvelopeError> {
        let bad = |why: String| Err(EnvelopeError::Implausible(why));
        if self.version == 0 {
            return bad("version 0".into());
        }
        if self.origin.partition < 0 || self.origin.offset < 0 {
            return bad(format!(
                "origin partition {} offset {}",
                self.origin.partition, self.origin.offset
            ));
        }
        if self.dlq_retries > MAX_PLAUSIBLE_DLQ_RETRIES {
            return bad(format!("{} DLQ rounds", self.dlq_retries));
        }
        let horizon = now_ms.saturating_add(max_wait_ms.max(0));
        if self.first_dlq_at_ms < 0 || self.first_dlq_at_ms > horizon {
            return bad(format!("first_dlq_at {} ms", self.first_dlq_at_ms));
        }
        if let Some(id) = &self.event_id {
            if !crate::core::event::valid_id(id) {
                return bad("event id not fit for a header".into());
            }
        }
        if self.omitted.is_none() && self.version > ENVELOPE_VERSION_PAYLOAD {
            return bad("a version-2 envelope without its payload reference".into());
        }
        Ok(())
    }

    /// The envelope with its `not_before` at most `cap_ms` after `now_ms`: a
    /// record written while `degraded.dlq_backoff_cap` was longer (or forged years
    /// ahead) waits no longer than this Courier's cap, and is neither parked for
    /// it nor left blocking its DLQ partition.
    pub(crate) fn wait_capped(mut self, now_ms: i64, cap_ms: i64) -> Envelope {
        self.not_before_ms = self.not_before_ms.min(now_ms.saturating_add(cap_ms.max(0)));
        self
    }

    /// The envelope as it will be written to a topic that takes records of at
    /// most `max_bytes`: unchanged when it fits, otherwise with the payload (and
    /// if still needed, the key) replaced by a reference to the origin record.
    /// `None`: not even the reference fits (`max_bytes` is absurdly small).
    pub(crate) fn fitted(self, max_bytes: usize) -> Option<Envelope> {
        let capped = self.capped();
        if capped.record_bytes() <= max_bytes {
            return Some(capped);
        }
        let mut r = capped;
        if r.omitted.is_none() {
            r.omitted = Some(Omitted {
                payload_omitted: true,
                payload_bytes: r.payload.len() as u64,
                payload_sha256: sha256_hex(&r.payload),
                key_omitted: false,
            });
        }
        r.payload = Vec::new();
        r.version = ENVELOPE_VERSION_REFERENCE;
        if r.record_bytes() <= max_bytes {
            return Some(r);
        }
        if let Some(o) = &mut r.omitted {
            o.key_omitted = true;
        }
        r.key = None;
        // Replay reads the origin record back, headers included.
        r.origin_headers.clear();
        (r.record_bytes() <= max_bytes).then_some(r)
    }

    /// The attributes copied from the event, capped: its `type` (which only
    /// the topic's limit bounds: the reference envelope of an event with a
    /// megabyte type would not fit either) and its id (valid ids are at most
    /// [`crate::core::event::MAX_ID_BYTES`]; anything else is cleaned and cut
    /// there) — at [`MAX_TEXT_BYTES`], control characters replaced, as the
    /// headers are. [`Envelope::largest_for`] assumes these bounds.
    pub(crate) fn capped(mut self) -> Envelope {
        if let Some(t) = &mut self.event_type {
            if t.len() > MAX_TEXT_BYTES || t.chars().any(char::is_control) {
                *t = clean_text(t, MAX_TEXT_BYTES);
            }
        }
        if let Some(id) = &mut self.event_id {
            if !crate::core::event::valid_id(id) {
                *id = clean_text(id, crate::core::event::MAX_ID_BYTES);
            }
        }
        self
    }

    /// An envelope as large as one for an event of `payload_bytes` can get
    /// (the longest id, a long error message, every header): for checking at
    /// start that such an event fits a topic with its payload.
    pub(crate) fn largest_for(payload_bytes: usize) -> Envelope {
        let text = "x".repeat(MAX_TEXT_BYTES);
        Envelope {
            version: ENVELOPE_VERSION_PAYLOAD,
            event_id: Some("i".repeat(crate::core::event::MAX_ID_BYTES)),
            event_type: Some(text.clone()),
            key: None,
            entity_key: None,
            route: Some("r".repeat(64)),
            payload: vec![0xff; payload_bytes],
            omitted: None,
            origin_headers: Vec::new(),
            dlq_retries: MAX_PLAUSIBLE_DLQ_RETRIES,
            first_dlq_at_ms: i64::MAX,
            not_before_ms: i64::MAX,
            last_error: ErrorInfo {
                class: "transient".into(),
                reason: "x".repeat(64),
                status: Some(599),
                message: text,
            },
            origin: Origin {
                topic: "t".repeat(249),
                partition: i32::MAX,
                offset: i64::MAX,
                timestamp_ms: Some(i64::MAX),
                consumer_group: "g".repeat(255),
            },
        }
    }

    /// What the record costs against `max.message.bytes`: key, value, headers
    /// and the record batch's own overhead (generous: 512 bytes).
    pub(crate) fn record_bytes(&self) -> usize {
        const BATCH_OVERHEAD: usize = 512;
        let headers: usize = self
            .headers()
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum();
        self.key.as_ref().map_or(0, Vec::len) + self.to_bytes().len() + headers + BATCH_OVERHEAD
    }

    /// The envelope for one more DLQ round: `dlq_retries + 1`, new error and
    /// `not_before`; everything that identifies the event is kept.
    pub(crate) fn retried(&self, error: ErrorInfo, not_before_ms: i64) -> Envelope {
        Envelope {
            dlq_retries: self.dlq_retries.saturating_add(1),
            last_error: error,
            not_before_ms,
            ..self.clone()
        }
    }

    /// Headers mirroring the envelope's context, each value cleaned and capped at
    /// [`MAX_TEXT_BYTES`].
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = self.raw_headers();
        for (_, v) in &mut h {
            if v.len() > MAX_TEXT_BYTES || v.chars().any(char::is_control) {
                *v = clean_text(v, MAX_TEXT_BYTES);
            }
        }
        h
    }

    fn raw_headers(&self) -> Vec<(&'static str, String)> {
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

/// SHA-256 of `bytes`, lowercase hex (the payload reference's checksum).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

mod b64 {
    use base64::{engine::general_purpose::STANDARD, Engine};
    use serde::{Deserialize, Deserializer, Serializer};
    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s).map_err(serde::de::Error::custom)
    }
}

mod b64_opt {
    use base64::{engine::general_purpose::STANDARD, Engine};
    use serde::{Deserialize, Deserializer, Serializer};
    pub(crate) fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&STANDARD.encode(v)),
            None => s.serialize_none(),
        }
    }
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
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

    pub(crate) fn sample() -> Envelope {
        Envelope {
            version: ENVELOPE_VERSION_PAYLOAD,
            event_id: Some("e-1".into()),
            event_type: Some("profile.updated".into()),
            key: Some(b"k\x00\xff".to_vec()),
            entity_key: None,
            route: None,
            payload: b"\xff\xfe not utf8".to_vec(),
            omitted: None,
            origin_headers: vec![OriginHeader {
                name: "ce_id".into(),
                name_bytes: None,
                value: Some(b"e-1".to_vec()),
            }],
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

    /// The event's `type` (any length: the topic limit is the only bound on
    /// it) is copied capped: even the reference envelope used to exceed the
    /// topic's limit with a 2 MB type, and the event could not be parked.
    #[test]
    fn copied_attributes_are_capped() {
        let mut e = sample();
        e.event_type = Some(format!("t\n{}", "y".repeat(2 << 20)));
        e.payload = vec![7; 3 << 20];
        let limit = 1_048_576;
        let f = e
            .clone()
            .fitted(limit)
            .expect("the envelope fits once capped");
        assert!(f.record_bytes() <= limit);
        let ty = f.event_type.as_deref().unwrap_or_default();
        assert!(ty.len() <= MAX_TEXT_BYTES, "{}", ty.len());
        assert!(ty.starts_with("t ") && ty.ends_with('…'), "{}", &ty[..8]);
        // A small one is copied as it is, payload and all.
        let small = sample().fitted(limit).unwrap();
        assert_eq!(small, sample());
        // A DLQ record quoting megabytes: the error stays short.
        let forged = format!(r#"{{"version":"{}"}}"#, "v".repeat(1 << 20));
        let err = Envelope::from_bytes(forged.as_bytes()).unwrap_err();
        assert_eq!(err.reason(), "unreadable_envelope");
        assert!(err.to_string().len() < 400, "{}", err.to_string().len());
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

    /// A forged or corrupted DLQ record is refused with `invalid_envelope` (and
    /// so parked) instead of blocking the drain or overflowing arithmetic.
    #[test]
    fn forged_envelopes_are_implausible() {
        let now = 1_700_000_000_000;
        let wait = 120_000;
        let mut ok = sample();
        ok.first_dlq_at_ms = now - 5_000;
        ok.not_before_ms = now + 60_000;
        assert!(ok.check(now, wait).is_ok());
        type Forge = Box<dyn Fn(&mut Envelope)>;
        let forged: Vec<(&str, Forge)> = vec![
            ("u32::MAX retries", Box::new(|e| e.dlq_retries = u32::MAX)),
            ("negative offset", Box::new(|e| e.origin.offset = -1)),
            (
                "negative partition",
                Box::new(|e| e.origin.partition = i32::MIN),
            ),
            (
                "future first entry",
                Box::new(|e| e.first_dlq_at_ms = i64::MAX),
            ),
            (
                "negative first entry",
                Box::new(|e| e.first_dlq_at_ms = i64::MIN),
            ),
            (
                "id with a newline",
                Box::new(|e| e.event_id = Some("a\nb".into())),
            ),
            ("version 0", Box::new(|e| e.version = 0)),
            ("v2 without reference", Box::new(|e| e.version = 2)),
        ];
        for (what, forge) in forged {
            let mut e = ok.clone();
            forge(&mut e);
            // It parses (the shape is right) but is not plausible.
            let parsed = Envelope::from_bytes(&e.to_bytes()).unwrap();
            let err = parsed.check(now, wait).unwrap_err();
            assert_eq!(err.reason(), "invalid_envelope", "{what}");
        }
        // A past not_before (an old DLQ record) is fine.
        ok.not_before_ms = 0;
        assert!(ok.check(now, wait).is_ok());
    }

    /// A `not_before` past the cap — written under a longer `dlq_backoff_cap`,
    /// or forged in the year 9999 — is plausible, and waits at most the cap.
    #[test]
    fn a_wait_past_the_cap_is_capped_not_refused() {
        let (now, cap) = (1_700_000_000_000, 2_000);
        let mut e = sample();
        e.first_dlq_at_ms = now - 5_000;
        for far in [now + 3_600_000, 253_402_300_799_000, i64::MAX] {
            e.not_before_ms = far;
            assert!(e.check(now, cap * 2 + 60_000).is_ok(), "{far}");
            assert_eq!(e.clone().wait_capped(now, cap).not_before_ms, now + cap);
        }
        for near in [0, now, now + cap] {
            e.not_before_ms = near;
            assert_eq!(e.clone().wait_capped(now, cap).not_before_ms, near);
        }
    }

    #[test]
    fn an_envelope_too_large_for_the_topic_carries_a_reference() {
        let mut e = sample();
        e.payload = vec![b'x'; 900_000];
        let limit = 1_000_000;
        assert!(e.record_bytes() > limit, "base64 makes 900 KB about 1.2 MB");
        let r = e.clone().fitted(limit).unwrap();
        assert!(r.record_bytes() <= limit);
        assert!(r.payload.is_empty());
        assert_eq!(r.version, ENVELOPE_VERSION_REFERENCE);
        let o = r.omitted.clone().unwrap();
        assert!(o.payload_omitted && !o.key_omitted);
        assert_eq!(o.payload_bytes, 900_000);
        assert_eq!(o.payload_sha256, sha256_hex(&e.payload));
        assert_eq!(r.key, e.key);
        assert_eq!(r.origin, e.origin);
        // The reference round-trips and is a plausible envelope.
        let back = Envelope::from_bytes(&r.to_bytes()).unwrap();
        assert_eq!(back, r);
        assert!(back.check(r.not_before_ms, 0).is_ok());
        assert!(String::from_utf8(r.to_bytes())
            .unwrap()
            .contains("\"payload_omitted\":true"));
        // A small one is left alone.
        let small = sample();
        assert_eq!(small.clone().fitted(limit), Some(small));
        // A huge key goes too; nothing fits below the envelope's own size.
        let mut k = e.clone();
        k.key = Some(vec![b'k'; 2_000_000]);
        let r = k.fitted(limit).unwrap();
        assert!(r.key.is_none() && r.omitted.as_ref().unwrap().key_omitted);
        assert_eq!(sample().fitted(100), None);
    }

    #[test]
    fn header_values_are_cleaned_and_capped() {
        let mut e = sample();
        e.last_error.message = format!("line1\r\nline2\x1b[31m{}", "é".repeat(2_000));
        let h: std::collections::HashMap<_, _> = e.headers().into_iter().collect();
        let m = &h[header::EXCEPTION_MESSAGE];
        assert!(m.len() <= MAX_TEXT_BYTES, "{}", m.len());
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert!(m.starts_with("line1  line2 [31m") && m.ends_with('…'));
        assert_eq!(clean_text("short", 10), "short");
        assert_eq!(clean_text("abcdefghijkl", 8), "abcde…");
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
        /// Any header names and values (Kafka checks neither for UTF-8) come
        /// out of an envelope exactly as the origin record had them; a name
        /// that is text is written as text alone.
        #[test]
        fn origin_headers_round_trip_any_bytes(
            headers in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12))),
                0..6)
        ) {
            let record: Vec<crate::core::input::Header> = headers
                .iter()
                .map(|(n, v)| (crate::core::input::HeaderName::new(n), v.clone().map(bytes::Bytes::from)))
                .collect();
            let mut e = sample();
            e.origin_headers = OriginHeader::from_record(Some(&record));
            for h in &e.origin_headers {
                prop_assert_eq!(h.name_bytes.is_some(), std::str::from_utf8(h.name_of().as_bytes()).is_err());
            }
            let back = Envelope::from_bytes(&e.to_bytes()).unwrap();
            prop_assert_eq!(OriginHeader::to_record(&back.origin_headers), record);
        }

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
