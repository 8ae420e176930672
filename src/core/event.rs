//! Decoding and validation of input events: CloudEvents 1.0, structured JSON mode.
//!
//! Runs before any work is scheduled for a message, so a deterministic error
//! (bad bytes, bad schema) never burns retry budget: it goes straight to the
//! parking lot with the reason this module names.

use bytes::Bytes;
use serde_json::{Map, Value};

/// Limits and names that decoding depends on.
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    pub max_event_bytes: usize,
    /// Name of the integer extension attribute carrying the entity version.
    pub entity_version_attribute: String,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_event_bytes: 1024 * 1024,
            entity_version_attribute: "entityversion".to_string(),
        }
    }
}

/// A decoded, valid event. The original bytes are kept: without enrichment they
/// are what Courier posts, unchanged.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub source: String,
    pub event_type: String,
    pub subject: Option<String>,
    pub time: Option<String>,
    pub entity_version: Option<i64>,
    pub raw: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event is empty (no value)")]
    Empty,
    #[error("event is {size} bytes, over the maximum of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("event is not valid UTF-8 at byte {0}")]
    InvalidUtf8(usize),
    #[error("event is not valid JSON: {0}")]
    MalformedJson(String),
    #[error("event is not a JSON object")]
    NotAnObject,
    #[error("required attribute `{0}` is missing")]
    MissingAttribute(&'static str),
    #[error("attribute `{attribute}` must be {expected}")]
    WrongType {
        attribute: String,
        expected: &'static str,
    },
    #[error("specversion `{0}` is not supported (only 1.0)")]
    UnsupportedSpecVersion(String),
}

impl DecodeError {
    /// Stable, bounded reason code (used in metrics labels and parking-lot records).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Empty => "empty",
            DecodeError::TooLarge { .. } => "too_large",
            DecodeError::InvalidUtf8(_) => "invalid_utf8",
            DecodeError::MalformedJson(_) => "malformed_json",
            DecodeError::NotAnObject => "not_an_object",
            DecodeError::MissingAttribute(_) => "missing_attribute",
            DecodeError::WrongType { .. } => "wrong_type",
            DecodeError::UnsupportedSpecVersion(_) => "unsupported_specversion",
        }
    }
}

/// Decodes and validates one Kafka message value.
pub fn decode(value: Option<&Bytes>, opts: &DecodeOptions) -> Result<Event, DecodeError> {
    let raw = value.ok_or(DecodeError::Empty)?;
    let bytes: &[u8] = raw;
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if bytes.len() > opts.max_event_bytes {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            max: opts.max_event_bytes,
        });
    }
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(DecodeError::InvalidUtf8(e.valid_up_to()));
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::MalformedJson(e.to_string()))?;
    let obj = match value {
        Value::Object(obj) => obj,
        _ => return Err(DecodeError::NotAnObject),
    };
    let specversion = required_str(&obj, "specversion")?;
    if specversion != "1.0" {
        return Err(DecodeError::UnsupportedSpecVersion(specversion.to_string()));
    }
    let id = required_str(&obj, "id")?.to_string();
    let source = required_str(&obj, "source")?.to_string();
    let event_type = required_str(&obj, "type")?.to_string();
    let subject = optional_str(&obj, "subject")?;
    let time = optional_str(&obj, "time")?;
    let entity_version = match obj.get(opts.entity_version_attribute.as_str()) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
        Some(_) => {
            return Err(DecodeError::WrongType {
                attribute: opts.entity_version_attribute.clone(),
                expected: "an integer",
            })
        }
    };
    Ok(Event {
        id,
        source,
        event_type,
        subject,
        time,
        entity_version,
        raw: raw.clone(),
    })
}

fn required_str<'a>(
    obj: &'a Map<String, Value>,
    name: &'static str,
) -> Result<&'a str, DecodeError> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(DecodeError::MissingAttribute(name)),
        Some(Value::String(s)) if s.is_empty() => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a non-empty string",
        }),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a string",
        }),
    }
}

fn optional_str(
    obj: &Map<String, Value>,
    name: &'static str,
) -> Result<Option<String>, DecodeError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a string",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn opts() -> DecodeOptions {
        DecodeOptions {
            max_event_bytes: 256,
            entity_version_attribute: "entityversion".into(),
        }
    }

    fn dec(s: &[u8]) -> Result<Event, DecodeError> {
        decode(Some(&Bytes::copy_from_slice(s)), &opts())
    }

    #[test]
    fn valid_event() {
        let e = dec(br#"{"specversion":"1.0","id":"e1","source":"/s","type":"t","subject":"x","entityversion":3,"data":{"a":1}}"#).unwrap();
        assert_eq!(e.id, "e1");
        assert_eq!(e.event_type, "t");
        assert_eq!(e.subject.as_deref(), Some("x"));
        assert_eq!(e.entity_version, Some(3));
    }

    #[test]
    fn each_poison_kind_has_its_reason() {
        let cases: Vec<(&[u8], &str)> = vec![
            (b"", "empty"),
            (&[0xff, 0xfe, 0x00], "invalid_utf8"),
            (b"{not json", "malformed_json"),
            (b"[1,2]", "not_an_object"),
            (
                br#"{"specversion":"1.0","source":"/s","type":"t"}"#,
                "missing_attribute",
            ),
            (
                br#"{"specversion":"1.0","id":5,"source":"/s","type":"t"}"#,
                "wrong_type",
            ),
            (
                br#"{"specversion":"1.0","id":"","source":"/s","type":"t"}"#,
                "wrong_type",
            ),
            (
                br#"{"specversion":"1.0","id":"a","source":"/s","type":"t","entityversion":"3"}"#,
                "wrong_type",
            ),
            (
                br#"{"specversion":"1.0","id":"a","source":"/s","type":"t","time":7}"#,
                "wrong_type",
            ),
            (
                br#"{"specversion":"0.3","id":"a","source":"/s","type":"t"}"#,
                "unsupported_specversion",
            ),
        ];
        for (bytes, reason) in cases {
            let err = dec(bytes).unwrap_err();
            assert_eq!(err.reason(), reason, "{:?}", String::from_utf8_lossy(bytes));
        }
        let big = vec![b' '; 300];
        assert_eq!(dec(&big).unwrap_err().reason(), "too_large");
        assert_eq!(decode(None, &opts()).unwrap_err().reason(), "empty");
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder: they decode or get a reason.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = dec(&bytes);
        }
    }
}
