//! Decoding and validation of input events: CloudEvents 1.0, structured JSON mode.
//!
//! Runs before any work is scheduled for a message, so a deterministic error
//! (bad bytes, bad schema) never burns retry budget: it goes straight to the
//! parking lot with the reason this module names.

use bytes::Bytes;
use serde::de;
use std::borrow::Cow;

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
    pub(crate) entity_version: Option<i64>,
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
    #[error("the id must be 1 to {MAX_ID_BYTES} visible ASCII characters (it is sent as the Idempotency-Key header)")]
    InvalidId,
    #[error("JSON nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("a JSON number is out of the range of a 64-bit float: {0}")]
    NumberOutOfRange(String),
    #[error("a JSON string has a broken escape or is not valid Unicode: {0}")]
    InvalidString(String),
}

/// The longest event id accepted (it travels as the `Idempotency-Key` header).
pub(crate) const MAX_ID_BYTES: usize = 256;

/// The deepest nesting accepted anywhere in an event. serde_json refuses deeper
/// documents when it builds a tree (its recursion limit is 128), so an event that
/// could not be turned back into a tree — for enrichment, for a `data`-only
/// body — is refused here, before any work is scheduled.
pub const MAX_DEPTH: usize = 100;

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
            DecodeError::InvalidId => "invalid_id",
            DecodeError::TooDeep => "too_deep",
            DecodeError::NumberOutOfRange(_) => "number_out_of_range",
            DecodeError::InvalidString(_) => "invalid_string",
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
    // SIMD validation (`simdutf8::basic`: valid or not, no position) for
    // every body; the position only for an invalid one. The parser then reads
    // the validated `&str` (serde_json's `StrRead` does not check each string's
    // UTF-8 again, as its `SliceRead` does: 2 % of a batched event's CPU).
    let Ok(text) = simdutf8::basic::from_utf8(bytes) else {
        let valid_up_to = std::str::from_utf8(bytes)
            .err()
            .map_or(0, |e| e.valid_up_to());
        return Err(DecodeError::InvalidUtf8(valid_up_to));
    };
    let attrs = parse_attributes(text, &opts.entity_version_attribute)?;
    let specversion = required_str(&attrs.specversion, "specversion")?;
    if specversion != "1.0" {
        return Err(DecodeError::UnsupportedSpecVersion(quoted(specversion)));
    }
    let id = required_str(&attrs.id, "id")?;
    if !valid_id(id) {
        return Err(DecodeError::InvalidId);
    }
    let id = id.to_string();
    let source = required_str(&attrs.source, "source")?.to_string();
    let event_type = required_str(&attrs.event_type, "type")?.to_string();
    let subject = optional_str(&attrs.subject, "subject")?;
    let time = optional_str(&attrs.time, "time")?;
    let entity_version = match attrs.entity_version {
        None | Some(Attr::Null) => None,
        Some(Attr::Int(n)) => Some(n),
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

/// Record-chosen text as a decode error carries it (the error is logged for
/// every such record and becomes the parked envelope's message): cut and
/// escaped ([`crate::core::text::excerpt`]).
pub(crate) fn quoted(s: &str) -> String {
    crate::core::text::excerpt(s, crate::core::text::LOG_TEXT_MAX)
}

/// An id fit for a header value and a log line: visible ASCII, bounded.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES && id.bytes().all(|b| b.is_ascii_graphic())
}

fn required_str<'a>(
    attr: &'a Option<Attr<'_>>,
    name: &'static str,
) -> Result<&'a str, DecodeError> {
    match attr {
        None | Some(Attr::Null) => Err(DecodeError::MissingAttribute(name)),
        Some(Attr::Str(s)) if s.is_empty() => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a non-empty string",
        }),
        Some(Attr::Str(s)) => Ok(s),
        Some(_) => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a string",
        }),
    }
}

fn optional_str(
    attr: &Option<Attr<'_>>,
    name: &'static str,
) -> Result<Option<String>, DecodeError> {
    match attr {
        None | Some(Attr::Null) => Ok(None),
        Some(Attr::Str(s)) => Ok(Some(s.to_string())),
        Some(_) => Err(DecodeError::WrongType {
            attribute: name.to_string(),
            expected: "a string",
        }),
    }
}

/// Why a request body could not be built from an event (a permanent failure of
/// that event: it is parked, never sent as something else).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("the event is not a JSON object")]
    NotAnObject,
    #[error("the event cannot be re-encoded with the added attribute: {0}")]
    Reencode(String),
}

/// The event's JSON object with one more top-level attribute `name` = `value`
/// (enrichment). The original bytes are kept as they are — numbers beyond i64,
/// escapes and attribute order included — and the attribute is appended before
/// the closing brace. Only when the event already has an attribute of that name
/// is the object rebuilt as a tree, so the added value replaces the old one
/// instead of appearing twice. Never falls back to an empty object.
pub(crate) fn with_attribute(
    raw: &[u8],
    name: &str,
    value: &serde_json::Value,
) -> Result<Bytes, BodyError> {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace());
    let end = raw.iter().rposition(|b| !b.is_ascii_whitespace());
    let (Some(start), Some(end)) = (start, end) else {
        return Err(BodyError::NotAnObject);
    };
    if raw[start] != b'{' || raw[end] != b'}' || start >= end {
        return Err(BodyError::NotAnObject);
    }
    let has_name = top_level_has(raw, name).map_err(|e| BodyError::Reencode(e.to_string()))?;
    let enc = |e: serde_json::Error| BodyError::Reencode(e.to_string());
    if has_name {
        let mut obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(raw).map_err(enc)?;
        obj.insert(name.to_string(), value.clone());
        return serde_json::to_vec(&obj).map(Bytes::from).map_err(enc);
    }
    let value = serde_json::to_vec(value).map_err(enc)?;
    append_member(raw, name, &value)
}

/// Appends `"name": value_json` to the JSON object `raw` (whose top-level keys
/// the caller knows not to include `name`), before its closing brace. `value_json`
/// must be one valid JSON value; it is copied as it is.
pub(crate) fn append_member(raw: &[u8], name: &str, value_json: &[u8]) -> Result<Bytes, BodyError> {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace());
    let end = raw.iter().rposition(|b| !b.is_ascii_whitespace());
    let (Some(start), Some(end)) = (start, end) else {
        return Err(BodyError::NotAnObject);
    };
    if raw[start] != b'{' || raw[end] != b'}' || start >= end {
        return Err(BodyError::NotAnObject);
    }
    let empty = raw[start + 1..end].iter().all(u8::is_ascii_whitespace);
    let name = serde_json::to_vec(name).map_err(|e| BodyError::Reencode(e.to_string()))?;
    let mut out = Vec::with_capacity(end + name.len() + value_json.len() + 3);
    out.extend_from_slice(&raw[..end]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(&name);
    out.push(b':');
    out.extend_from_slice(value_json.trim_ascii());
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// Checks that `bytes` is one JSON document a parser accepts — syntax, numbers
/// in range, valid strings, nesting within [`MAX_DEPTH`] counting from `depth`
/// (1 for a whole event, 2 for a value that will sit inside one) — without
/// building it.
pub(crate) fn check_json(bytes: &[u8], depth: usize) -> Result<(), DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de::DeserializeSeed::deserialize(Depth(depth), &mut de)
        .and_then(|_| de.end())
        .map_err(json_error)
}

/// Whether the JSON object `raw` has a top-level attribute `name` (keys compared
/// after unescaping).
fn top_level_has(raw: &[u8], name: &str) -> Result<bool, serde_json::Error> {
    struct Has<'n>(&'n str);
    impl<'de> de::Visitor<'de> for Has<'_> {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut found = false;
            while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                found |= k == self.0;
                map.next_value::<de::IgnoredAny>()?;
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    de::Deserializer::deserialize_map(&mut de, Has(name))
}

// Parsing without a `serde_json::Value`: the whole document is still parsed (so
// any syntax error anywhere, `data` included, is `malformed_json`), but only the
// attributes Courier reads are kept, borrowed from the input where they have no
// escapes. Building a full tree per event, `data` included, was ~3–7 % of the CPU
// and 8 % of the allocations in the profile. Semantics match the tree: a
// duplicated attribute keeps its last value, as `serde_json::Map` does
// (`tests/fuzz_codecs.rs` checks this decoder against a reference model).

/// An attribute's value, reduced to what validation distinguishes.
#[derive(Debug)]
enum Attr<'a> {
    Null,
    Str(Cow<'a, str>),
    /// An integer that fits an `i64`.
    Int(i64),
    /// Anything else (bool, float, large integer, array, object).
    Other,
}

#[derive(Default)]
struct Attributes<'a> {
    specversion: Option<Attr<'a>>,
    id: Option<Attr<'a>>,
    source: Option<Attr<'a>>,
    event_type: Option<Attr<'a>>,
    subject: Option<Attr<'a>>,
    time: Option<Attr<'a>>,
    entity_version: Option<Attr<'a>>,
}

fn parse_attributes<'a>(
    text: &'a str,
    entity_version_attribute: &str,
) -> Result<Attributes<'a>, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de::Deserializer::deserialize_any(
        &mut de,
        TopLevel {
            entity_version_attribute,
        },
    )
    .and_then(|attrs| de.end().map(|()| attrs))
    .map_err(json_error)?;
    parsed.ok_or(DecodeError::NotAnObject)
}

/// A serde_json error as a decode error. Depth is checked by [`Checked`] (the
/// message it raises is ours); the rest are serde_json's own messages.
fn json_error(e: serde_json::Error) -> DecodeError {
    // serde_json's messages may quote the input: capped like any record text.
    let msg = quoted(&e.to_string());
    if msg.starts_with(TOO_DEEP) || msg.starts_with("recursion limit exceeded") {
        DecodeError::TooDeep
    } else if msg.starts_with("number out of range") {
        DecodeError::NumberOutOfRange(msg)
    } else if msg.contains("surrogate")
        || msg.contains("hex escape")
        || msg.starts_with("invalid unicode code point")
    {
        DecodeError::InvalidString(msg)
    } else {
        DecodeError::MalformedJson(msg)
    }
}

const TOO_DEEP: &str = "courier: nested too deep";

/// A JSON value that is checked, not kept: every number is parsed (so one out of
/// the f64 range is refused, as a tree would refuse it), every string unescaped
/// (so a lone surrogate is refused), and nesting is bounded by [`MAX_DEPTH`].
/// serde_json's `IgnoredAny` skips values without any of these checks, which let
/// `1e400`, `"\ud800"` and 200 levels of `[` through the decoder and then broke
/// the request body built from a tree.
struct Checked;

/// The seed carrying the depth of the value being checked.
#[derive(Clone, Copy)]
struct Depth(usize);

impl<'de> de::DeserializeSeed<'de> for Depth {
    type Value = Checked;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Checked, D::Error> {
        if self.0 > MAX_DEPTH {
            return Err(de::Error::custom(TOO_DEEP));
        }
        d.deserialize_any(CheckVisitor(self.0))
    }
}

struct CheckVisitor(usize);

impl<'de> de::Visitor<'de> for CheckVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element_seed(Depth(self.0 + 1))?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key_seed(Depth(self.0 + 1))?.is_some() {
            map.next_value_seed(Depth(self.0 + 1))?;
        }
        Ok(Checked)
    }
}

/// The document: `Some(attributes)` for an object, `None` for any other JSON value.
struct TopLevel<'n> {
    entity_version_attribute: &'n str,
}

impl<'de> de::Visitor<'de> for TopLevel<'_> {
    type Value = Option<Attributes<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut a = Attributes::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let slot = match key.as_ref() {
                "specversion" => &mut a.specversion,
                "id" => &mut a.id,
                "source" => &mut a.source,
                "type" => &mut a.event_type,
                "subject" => &mut a.subject,
                "time" => &mut a.time,
                k if k == self.entity_version_attribute => &mut a.entity_version,
                _ => {
                    map.next_value_seed(Depth(2))?;
                    continue;
                }
            };
            *slot = Some(map.next_value::<Attr<'de>>()?);
        }
        Ok(Some(a))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element_seed(Depth(2))?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// An object key, borrowed unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> de::Deserialize<'de> for Attr<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Attr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Attr<'de>, E> {
                Ok(Attr::Null)
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Attr<'de>, E> {
                Ok(Attr::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Attr<'de>, E> {
                Ok(Attr::Str(Cow::Owned(s.to_string())))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Attr<'de>, E> {
                Ok(Attr::Int(n))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Attr<'de>, E> {
                Ok(i64::try_from(n).map_or(Attr::Other, Attr::Int))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Attr<'de>, E> {
                Ok(Attr::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Attr<'de>, E> {
                Ok(Attr::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Attr<'de>, A::Error> {
                while seq.next_element_seed(Depth(3))?.is_some() {}
                Ok(Attr::Other)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Attr<'de>, A::Error> {
                while map.next_key_seed(Depth(3))?.is_some() {
                    map.next_value_seed(Depth(3))?;
                }
                Ok(Attr::Other)
            }
        }
        d.deserialize_any(V)
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

    /// Record-chosen text in a decode error (logged at every such record, and
    /// the parked envelope's message) is cut and its control characters escaped.
    #[test]
    fn attacker_text_in_decode_errors_is_capped() {
        let opts = DecodeOptions {
            max_event_bytes: 4 << 20,
            entity_version_attribute: "entityversion".into(),
        };
        let huge = format!("1.1\\n\\u001b[31mforged line{}", "x".repeat(1 << 20));
        let ev = format!(r#"{{"specversion":"{huge}","id":"e1","source":"/s","type":"t"}}"#);
        let e = decode(Some(&Bytes::from(ev)), &opts).unwrap_err();
        assert_eq!(e.reason(), "unsupported_specversion");
        let shown = e.to_string();
        assert!(shown.len() < 400, "{} bytes", shown.len());
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("1.1\\n"), "{shown}");
        // serde_json's own messages quote the input too.
        let bad = format!(
            r#"{{"specversion":"1.0","id":"{}\u12"}}"#,
            "y".repeat(1 << 20)
        );
        let e = decode(Some(&Bytes::from(bad)), &opts).unwrap_err();
        assert!(
            e.to_string().len() < 400,
            "{}: {} bytes",
            e.reason(),
            e.to_string().len()
        );
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

    /// The cases where a streaming decoder could part ways with a JSON tree.
    #[test]
    fn agrees_with_a_json_tree_on_edge_cases() {
        let base = r#""specversion":"1.0","source":"/s","type":"t""#;
        let ok = |doc: String| dec(doc.as_bytes()).map(|e| (e.id, e.entity_version));
        // A duplicated attribute keeps its last value, as serde_json::Map does.
        assert_eq!(
            ok(format!(r#"{{{base},"id":"a","id":"b"}}"#)),
            Ok(("b".into(), None))
        );
        assert_eq!(
            ok(format!(r#"{{{base},"id":5,"id":"b"}}"#)),
            Ok(("b".into(), None))
        );
        assert_eq!(
            ok(format!(r#"{{{base},"id":"b","id":null}}"#))
                .unwrap_err()
                .reason(),
            "missing_attribute"
        );
        // Escapes in keys and values are decoded before matching.
        assert_eq!(
            ok(format!(r#"{{{base},"\u0069d":"a\"b","entityversion":-7}}"#)),
            Ok(("a\"b".into(), Some(-7)))
        );
        // Integers: i64 only; a large u64 or a float is the wrong type.
        for v in [
            "18446744073709551615",
            "1.0",
            "1e2",
            "true",
            "[1]",
            "{\"a\":1}",
        ] {
            let doc = format!(r#"{{{base},"id":"a","entityversion":{v}}}"#);
            assert_eq!(
                dec(doc.as_bytes()).unwrap_err().reason(),
                "wrong_type",
                "{v}"
            );
        }
        assert_eq!(
            ok(format!(
                r#"{{{base},"id":"a","entityversion":9223372036854775807}}"#
            )),
            Ok(("a".into(), Some(i64::MAX)))
        );
        // A syntax error anywhere (inside `data`, after the object) is malformed.
        for doc in [
            format!(r#"{{{base},"id":"a","data":{{"x":[1,}}}}"#),
            format!(r#"{{{base},"id":"a"}} x"#),
            format!(r#"{{{base},"id":"a""#),
        ] {
            assert_eq!(
                dec(doc.as_bytes()).unwrap_err().reason(),
                "malformed_json",
                "{doc}"
            );
        }
        for doc in ["\"s\"", "null", "12", "true", "[{}]"] {
            assert_eq!(
                dec(doc.as_bytes()).unwrap_err().reason(),
                "not_an_object",
                "{doc}"
            );
        }
        // Whitespace around the document is fine.
        assert!(ok(format!(" \n{{{base},\"id\":\"a\"}}\n ")).is_ok());
    }

    /// The id travels as the `Idempotency-Key` header: it must be visible ASCII
    /// and at most 256 bytes, or the event is parked `invalid_id` at decode.
    #[test]
    fn ids_that_cannot_be_a_header_are_parked() {
        let doc = |id: &str| {
            let id = serde_json::to_string(id).unwrap();
            format!(r#"{{"specversion":"1.0","id":{id},"source":"/s","type":"t"}}"#)
        };
        let long_opts = DecodeOptions {
            max_event_bytes: 4096,
            ..opts()
        };
        let dec_long = |d: String| decode(Some(&Bytes::from(d)), &long_opts);
        for bad in ["a b", "a\nb", "tab\there", "caf\u{e9}", "\u{0}", "x\u{7f}"] {
            assert_eq!(
                dec_long(doc(bad)).unwrap_err().reason(),
                "invalid_id",
                "{bad:?}"
            );
        }
        assert_eq!(
            dec_long(doc(&"a".repeat(257))).unwrap_err().reason(),
            "invalid_id"
        );
        assert_eq!(dec_long(doc(&"a".repeat(256))).unwrap().id.len(), 256);
        assert!(dec_long(doc("order-1:2/3~!@#$%^&*()_+={}[]|;'<>,.?")).is_ok());
    }

    /// What a full JSON parse refuses is refused at decode, with its own reason,
    /// even deep inside `data` (where only validation, not a tree, is built).
    #[test]
    fn values_a_json_parser_refuses_are_parked_with_their_reason() {
        let base = r#""specversion":"1.0","id":"a","source":"/s","type":"t""#;
        let big = DecodeOptions {
            max_event_bytes: 1 << 20,
            ..opts()
        };
        let reason = |doc: String| {
            decode(Some(&Bytes::from(doc.clone())), &big)
                .map(|_| ())
                .map_err(|e| e.reason())
                .err()
                .unwrap_or_else(|| panic!("accepted: {doc:.120}"))
        };
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(reason(format!(r#"{{{base},"data":{deep}}}"#)), "too_deep");
        let deep_obj = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
        assert_eq!(
            reason(format!(r#"{{{base},"data":{deep_obj}}}"#)),
            "too_deep"
        );
        for n in ["1e400", "-1e400", "1E999999"] {
            assert_eq!(
                reason(format!(r#"{{{base},"data":{{"x":[{n}]}}}}"#)),
                "number_out_of_range",
                "{n}"
            );
        }
        for s in [r#""\ud800""#, r#""x\udc00y""#, r#""\ud800\u0041""#] {
            assert_eq!(
                reason(format!(r#"{{{base},"data":{{"k":{s}}}}}"#)),
                "invalid_string",
                "{s}"
            );
            assert_eq!(
                reason(format!(r#"{{{base},"data":{{{s}:1}}}}"#)),
                "invalid_string",
                "key {s}"
            );
        }
        // A raw control character inside a string is a syntax error.
        assert_eq!(
            reason(format!("{{{base},\"data\":\"a\u{1}b\"}}")),
            "malformed_json"
        );
        // Large but finite numbers and valid surrogate pairs are fine.
        let ok = format!(
            r#"{{{base},"data":{{"n":1e300,"i":123456789012345678901234567890,"s":"\ud83d\ude00"}}}}"#
        );
        assert!(decode(Some(&Bytes::from(ok)), &big).is_ok());
        // The document may be MAX_DEPTH levels deep (the event object is level 1,
        // `data` level 2, so `data` holds at most MAX_DEPTH - 2 nested arrays).
        let nested = |k: usize| format!("{}1{}", "[".repeat(k), "]".repeat(k));
        let fine = format!(r#"{{{base},"data":{}}}"#, nested(MAX_DEPTH - 2));
        assert!(decode(Some(&Bytes::from(fine)), &big).is_ok());
        let deep = format!(r#"{{{base},"data":{}}}"#, nested(MAX_DEPTH - 1));
        assert_eq!(reason(deep), "too_deep");
    }

    #[test]
    fn enrichment_is_appended_without_touching_the_original_bytes() {
        let v = serde_json::json!({"tier": "gold"});
        let raw = br#" {"id":"a","n":123456789012345678901234567890,"s":"\u00e9"} "#;
        let out = with_attribute(raw, "enrichment", &v).unwrap();
        assert_eq!(
            &out[..],
            &br#" {"id":"a","n":123456789012345678901234567890,"s":"\u00e9","enrichment":{"tier":"gold"}}"#[..]
        );
        assert_eq!(
            &with_attribute(b"{ }", "e", &v).unwrap()[..],
            &br#"{ "e":{"tier":"gold"}}"#[..]
        );
        // The attribute exists already: replaced, not duplicated.
        let out = with_attribute(br#"{"a":1,"e":"old"}"#, "e", &v).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, serde_json::json!({"a": 1, "e": {"tier": "gold"}}));
        let out = with_attribute(br#"{"a":1,"\u0065":"old"}"#, "e", &v).unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()["e"],
            v
        );
        // Never an empty object in place of the event.
        for bad in [&b""[..], b"  ", b"[1]", b"\"x\"", b"{", b"}"] {
            assert_eq!(
                with_attribute(bad, "e", &v),
                Err(BodyError::NotAnObject),
                "{bad:?}"
            );
        }
        assert!(matches!(
            with_attribute(br#"{"a":1e400,"e":1}"#, "e", &v),
            Err(BodyError::Reencode(_))
        ));
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder: they decode or get a reason.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = dec(&bytes);
        }
    }
}
