//! Input formats: what a Kafka record may look like, and how it becomes an
//! [`Event`]. Chosen per pipeline by `input.format`:
//!
//! - `cloudevents`: CloudEvents 1.0 in either content mode of the Kafka protocol
//!   binding, detected per record. *Structured* (the record value is the event,
//!   `core::event::decode`) unless the record has a `ce_specversion` header; then
//!   *binary*: the attributes are `ce_*` headers, `content-type` is the data's
//!   content type and the value is the data. A binary event is posted to the API
//!   in structured form (`application/cloudevents+json`, `data` as JSON when the
//!   content type is JSON, `data_base64` otherwise), so the API sees one shape.
//! - `json`: any JSON object. Its id, type and key are read with JSON pointers
//!   (RFC 6901, e.g. `/order/id`); without an id, the record's coordinates
//!   `<topic>-<partition>-<offset>` can stand in as the idempotency key (when the
//!   config says so: they are stable for a record, but a producer's retry that
//!   wrote the event twice gets two ids). Posted unchanged as `application/json`.
//!
//! Every format applies the same checks as structured CloudEvents: size, UTF-8,
//! JSON a parser accepts (depth, number range, escapes), an id fit for a header.

use super::event::{self, valid_id, DecodeError, DecodeOptions, Event};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// `input.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    #[default]
    CloudEvents,
    Json,
    /// Avro in the Confluent wire format, schemas from `[input.schema_registry]`
    /// (`core::schema`), decoded to JSON and then read as `json`.
    Avro,
    /// Protobuf in the Confluent wire format (the message-index list, then the
    /// message), schemas from `[input.schema_registry]` compiled in Rust
    /// (`core::schema::protobuf`), decoded to canonical proto3 JSON and read as `json`.
    Protobuf,
    /// JSON text in the Confluent wire format, checked against its JSON Schema
    /// from `[input.schema_registry]` (`core::schema::json_schema`), read as `json`.
    #[serde(rename = "json_schema")]
    JsonSchema,
}

impl InputFormat {
    /// Whether records are framed by a schema registry.
    pub(crate) fn uses_registry(self) -> bool {
        matches!(
            self,
            InputFormat::Avro | InputFormat::Protobuf | InputFormat::JsonSchema
        )
    }

    /// Whether the event is a plain JSON object read with `input.id`/`type`/`key`.
    pub(crate) fn is_plain_json(self) -> bool {
        self == InputFormat::Json || self.uses_registry()
    }

    /// The name in config.
    pub(crate) fn name(self) -> &'static str {
        match self {
            InputFormat::CloudEvents => "cloudevents",
            InputFormat::Json => "json",
            InputFormat::Avro => "avro",
            InputFormat::Protobuf => "protobuf",
            InputFormat::JsonSchema => "json_schema",
        }
    }
}

/// What to do with a `json` event whose id pointer finds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IdFallback {
    /// Park it (`missing_attribute`).
    #[default]
    Park,
    /// Use `<topic>-<partition>-<offset>`.
    Coordinates,
}

/// How `json` events are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonInput {
    /// JSON pointer to the id (a string or an integer). Empty: no pointer.
    pub id: String,
    pub id_fallback: IdFallback,
    /// JSON pointer to the type (a string); when empty or absent, `default_type`.
    pub event_type: String,
    pub default_type: String,
    /// JSON pointer to the entity key (a string or an integer), used instead of
    /// the Kafka key for ordering and enrichment. Empty: the Kafka key.
    pub key: String,
}

/// The body type posted to the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyType {
    #[default]
    CloudEventsJson,
    Json,
}

impl BodyType {
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            BodyType::CloudEventsJson => "application/cloudevents+json",
            BodyType::Json => "application/json",
        }
    }
}

/// One Kafka record header: its name and value (a value may be absent).
pub(crate) type Header = (HeaderName, Option<Bytes>);

/// A Kafka header's name as the bytes the record carries. The protocol says
/// UTF-8, but neither the broker nor librdkafka checks: a producer can send any
/// bytes (`kcat -H $'\xff=x'`), so a name is kept as bytes and compared as
/// bytes. A name that is not UTF-8 can never equal a configured one (those are
/// HTTP tokens), so it is never forwarded to the API nor read as an attribute;
/// it still travels with its record into an envelope and out again by replay
/// (`envelope::OriginHeader`). librdkafka hands names over NUL-terminated: a
/// name is read up to its first NUL byte.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct HeaderName(Box<[u8]>);

impl HeaderName {
    pub(crate) fn new(bytes: &[u8]) -> HeaderName {
        HeaderName(bytes.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as text; `None` when it is not UTF-8.
    pub(crate) fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// Whether it is `name`, ignoring ASCII case (HTTP-derived names such as
    /// `content-type` come in any case). Never true for a name that is not
    /// UTF-8 when `name` is text: ASCII case folding changes ASCII bytes only.
    pub fn eq_ignore_ascii_case(&self, name: &str) -> bool {
        self.0.eq_ignore_ascii_case(name.as_bytes())
    }

    /// The rest of the name after `prefix`, when it starts with it and the rest is text.
    pub(crate) fn strip_prefix(&self, prefix: &str) -> Option<&str> {
        let rest = self.0.strip_prefix(prefix.as_bytes())?;
        std::str::from_utf8(rest).ok()
    }

    /// Bytes the name holds on the heap (for a record's memory charge).
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for HeaderName {
    fn from(s: &str) -> HeaderName {
        HeaderName::new(s.as_bytes())
    }
}

impl From<String> for HeaderName {
    fn from(s: String) -> HeaderName {
        HeaderName(s.into_bytes().into_boxed_slice())
    }
}

impl From<&[u8]> for HeaderName {
    fn from(b: &[u8]) -> HeaderName {
        HeaderName::new(b)
    }
}

/// Text as the name is, bytes that are not UTF-8 escaped (`\xff`).
impl std::fmt::Debug for HeaderName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

/// One Kafka record, as decoding sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordIn<'a> {
    pub value: Option<&'a Bytes>,
    /// Header names and values, in record order.
    pub headers: &'a [Header],
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

impl RecordIn<'_> {
    /// The last value of a header (names compared without case: HTTP-derived
    /// names such as `content-type` come in any case).
    fn header(&self, name: &str) -> Option<Option<&Bytes>> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// A decoded event and, for formats that name it, its entity key.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    pub event: Event,
    pub(crate) body_type: BodyType,
    /// The entity key from the body (`json` with `input.key`); `None`: the record's key.
    pub key: Option<Vec<u8>>,
}

/// Decodes one record in the configured format.
pub(crate) fn decode_record(
    r: &RecordIn<'_>,
    format: InputFormat,
    json: &JsonInput,
    opts: &DecodeOptions,
) -> Result<Decoded, DecodeError> {
    match format {
        InputFormat::CloudEvents if r.header("ce_specversion").is_some() => Ok(Decoded {
            event: binary_cloudevent(r, opts)?,
            body_type: BodyType::CloudEventsJson,
            key: None,
        }),
        InputFormat::CloudEvents => Ok(Decoded {
            event: event::decode(r.value, opts)?,
            body_type: BodyType::CloudEventsJson,
            key: None,
        }),
        InputFormat::Json => json_event(r, json, opts),
        // Decoded where the schema is at hand (`decode_json_from`); a caller
        // without it cannot read the record.
        InputFormat::Avro | InputFormat::Protobuf | InputFormat::JsonSchema => {
            Err(DecodeError::WrongType {
                attribute: "value".into(),
                expected: "decoded with its registry schema (not available here)",
            })
        }
    }
}

/// A registry-framed record whose value was decoded to `json` (JSON text):
/// read exactly as `input.format = "json"` reads a record's value.
pub(crate) fn decode_json_from(
    r: &RecordIn<'_>,
    json: &Bytes,
    cfg: &JsonInput,
    opts: &DecodeOptions,
) -> Result<Decoded, DecodeError> {
    json_event(
        &RecordIn {
            value: Some(json),
            ..*r
        },
        cfg,
        opts,
    )
}

/// The checks every format shares: present, not too large, UTF-8, a JSON
/// document a parser accepts (when `json`).
fn checked_bytes<'a>(
    value: Option<&'a Bytes>,
    opts: &DecodeOptions,
) -> Result<&'a Bytes, DecodeError> {
    let raw = value.ok_or(DecodeError::Empty)?;
    if raw.is_empty() {
        return Err(DecodeError::Empty);
    }
    if raw.len() > opts.max_event_bytes {
        return Err(DecodeError::TooLarge {
            size: raw.len(),
            max: opts.max_event_bytes,
        });
    }
    Ok(raw)
}

fn header_str<'a>(
    r: &'a RecordIn<'_>,
    name: &'static str,
    attribute: &'static str,
) -> Result<Option<&'a str>, DecodeError> {
    match r.header(name) {
        None | Some(None) => Ok(None),
        Some(Some(v)) => std::str::from_utf8(v)
            .map(Some)
            .map_err(|_| DecodeError::WrongType {
                attribute: attribute.to_string(),
                expected: "a UTF-8 string",
            }),
    }
}

fn required_header<'a>(
    r: &'a RecordIn<'_>,
    name: &'static str,
    attribute: &'static str,
) -> Result<&'a str, DecodeError> {
    match header_str(r, name, attribute)? {
        None => Err(DecodeError::MissingAttribute(attribute)),
        Some("") => Err(DecodeError::WrongType {
            attribute: attribute.to_string(),
            expected: "a non-empty string",
        }),
        Some(s) => Ok(s),
    }
}

/// Whether a content type says JSON (`application/json`, `text/json`, `…+json`).
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence == "text/json" || essence.ends_with("+json")
}

/// A binary-mode CloudEvent, turned into the structured form it is posted in.
fn binary_cloudevent(r: &RecordIn<'_>, opts: &DecodeOptions) -> Result<Event, DecodeError> {
    let specversion = required_header(r, "ce_specversion", "specversion")?;
    if specversion != "1.0" {
        return Err(DecodeError::UnsupportedSpecVersion(event::quoted(
            specversion,
        )));
    }
    let id = required_header(r, "ce_id", "id")?;
    if !valid_id(id) {
        return Err(DecodeError::InvalidId);
    }
    let source = required_header(r, "ce_source", "source")?;
    let event_type = required_header(r, "ce_type", "type")?;
    let subject = header_str(r, "ce_subject", "subject")?;
    let time = header_str(r, "ce_time", "time")?;
    let content_type = header_str(r, "content-type", "datacontenttype")?;
    let version_header = format!("ce_{}", opts.entity_version_attribute);
    let entity_version = match r
        .headers
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(&version_header))
    {
        None | Some((_, None)) => None,
        Some((_, Some(v))) => Some(
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| DecodeError::WrongType {
                    attribute: opts.entity_version_attribute.clone(),
                    expected: "an integer",
                })?,
        ),
    };
    let mut doc = serde_json::Map::new();
    // Extensions first (every other `ce_` header), so the standard attributes
    // below win if a producer sent both spellings.
    for (name, value) in r.headers {
        let Some(ext) = name.strip_prefix("ce_") else {
            continue;
        };
        // Attribute names are lowercase letters and digits; `data` and
        // `data_base64` are the body, never attributes.
        if ext.is_empty()
            || ext == "data"
            || !ext
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            continue;
        }
        if let Some(v) = value {
            let v = std::str::from_utf8(v).map_err(|_| DecodeError::WrongType {
                attribute: ext.to_string(),
                expected: "a UTF-8 string",
            })?;
            doc.insert(ext.to_string(), serde_json::Value::String(v.to_string()));
        }
    }
    let mut put = |k: &str, v: Option<&str>| {
        if let Some(v) = v {
            doc.insert(k.to_string(), serde_json::Value::String(v.to_string()));
        }
    };
    put("specversion", Some(specversion));
    put("id", Some(id));
    put("source", Some(source));
    put("type", Some(event_type));
    put("subject", subject);
    put("time", time);
    put("datacontenttype", content_type);
    if let Some(v) = entity_version {
        doc.insert(opts.entity_version_attribute.clone(), v.into());
    }
    let mut json_data = None;
    match r.value {
        None => {}
        Some(data) if data.len() > opts.max_event_bytes => {
            return Err(DecodeError::TooLarge {
                size: data.len(),
                max: opts.max_event_bytes,
            })
        }
        Some(data) if content_type.is_none_or(is_json) => {
            // JSON data goes in as JSON, byte for byte; it must be a document a
            // parser accepts, at the depth it will have inside the event.
            std::str::from_utf8(data).map_err(|e| DecodeError::InvalidUtf8(e.valid_up_to()))?;
            event::check_json(data, 2)?;
            json_data = Some(data);
        }
        Some(data) => {
            doc.insert(
                "data_base64".into(),
                base64::engine::general_purpose::STANDARD
                    .encode(data)
                    .into(),
            );
        }
    }
    let attrs = serde_json::to_vec(&doc)
        .map_err(|e| DecodeError::MalformedJson(event::quoted(&e.to_string())))?;
    let raw = match json_data {
        // `doc` has no `data` key (`ce_data` is not an attribute of the binding).
        Some(data) => event::append_member(&attrs, "data", data)
            .map_err(|e| DecodeError::MalformedJson(event::quoted(&e.to_string())))?
            .to_vec(),
        None => attrs,
    };
    if raw.len() > opts.max_event_bytes {
        return Err(DecodeError::TooLarge {
            size: raw.len(),
            max: opts.max_event_bytes,
        });
    }
    Ok(Event {
        id: id.to_string(),
        source: source.to_string(),
        event_type: event_type.to_string(),
        subject: subject.map(str::to_string),
        time: time.map(str::to_string),
        entity_version,
        raw: Bytes::from(raw),
    })
}

/// A string or an integer at `pointer`, as text.
fn scalar_at(doc: &serde_json::Value, pointer: &str) -> Option<String> {
    match doc.pointer(pointer)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// A plain JSON event.
fn json_event(
    r: &RecordIn<'_>,
    cfg: &JsonInput,
    opts: &DecodeOptions,
) -> Result<Decoded, DecodeError> {
    let raw = checked_bytes(r.value, opts)?;
    std::str::from_utf8(raw).map_err(|e| DecodeError::InvalidUtf8(e.valid_up_to()))?;
    event::check_json(raw, 1)?;
    let doc: serde_json::Value = serde_json::from_slice(raw)
        .map_err(|e| DecodeError::MalformedJson(event::quoted(&e.to_string())))?;
    if !doc.is_object() {
        return Err(DecodeError::NotAnObject);
    }
    let id = match (!cfg.id.is_empty())
        .then(|| scalar_at(&doc, &cfg.id))
        .flatten()
    {
        Some(id) => id,
        None => match cfg.id_fallback {
            IdFallback::Coordinates => format!("{}-{}-{}", r.topic, r.partition, r.offset),
            IdFallback::Park => return Err(DecodeError::MissingAttribute("id")),
        },
    };
    if !valid_id(&id) {
        return Err(DecodeError::InvalidId);
    }
    let event_type = (!cfg.event_type.is_empty())
        .then(|| scalar_at(&doc, &cfg.event_type))
        .flatten()
        .unwrap_or_else(|| cfg.default_type.clone());
    let key = (!cfg.key.is_empty())
        .then(|| scalar_at(&doc, &cfg.key))
        .flatten()
        .map(String::into_bytes);
    Ok(Decoded {
        event: Event {
            id,
            source: r.topic.to_string(),
            event_type,
            subject: None,
            time: None,
            entity_version: None,
            raw: raw.clone(),
        },
        body_type: BodyType::Json,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> DecodeOptions {
        DecodeOptions {
            max_event_bytes: 4096,
            entity_version_attribute: "entityversion".into(),
        }
    }

    fn json_cfg() -> JsonInput {
        JsonInput {
            id: "/order/id".into(),
            id_fallback: IdFallback::Park,
            event_type: "/kind".into(),
            default_type: "order".into(),
            key: "/order/customer".into(),
        }
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<Header> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), Some(Bytes::copy_from_slice(v.as_bytes()))))
            .collect()
    }

    fn rec<'a>(value: Option<&'a Bytes>, headers: &'a [Header]) -> RecordIn<'a> {
        RecordIn {
            value,
            headers,
            topic: "orders",
            partition: 3,
            offset: 42,
        }
    }

    fn ce(r: &RecordIn<'_>) -> Result<Decoded, DecodeError> {
        decode_record(r, InputFormat::CloudEvents, &json_cfg(), &opts())
    }

    fn js(r: &RecordIn<'_>) -> Result<Decoded, DecodeError> {
        decode_record(r, InputFormat::Json, &json_cfg(), &opts())
    }

    const BINARY: &[(&str, &str)] = &[
        ("ce_specversion", "1.0"),
        ("ce_id", "e-1"),
        ("ce_source", "/orders"),
        ("ce_type", "order.paid"),
        ("ce_subject", "o-9"),
        ("ce_entityversion", "7"),
        (
            "ce_traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("content-type", "application/json; charset=utf-8"),
    ];

    /// A header name that is not UTF-8 (Kafka does not check) is neither an
    /// attribute nor the same as any text name: the event decodes as without it.
    #[test]
    fn a_header_name_that_is_not_utf8_is_no_attribute() {
        let data = Bytes::from_static(b"{}");
        let plain = ce(&rec(Some(&data), &h(BINARY))).unwrap();
        for bad in [
            &b"\xff"[..],
            b"ce_\xff",
            b"ce_id\xff",
            b"ce_\xc3\x28x",
            b"content-type\xff",
        ] {
            let mut headers = h(BINARY);
            headers.push((HeaderName::new(bad), Some(Bytes::from_static(b"x"))));
            let d = ce(&rec(Some(&data), &headers)).unwrap();
            assert_eq!(d.event.raw, plain.event.raw, "{bad:?}");
            let name = &headers.last().unwrap().0;
            assert_eq!(name.as_str(), None);
            assert!(!name.eq_ignore_ascii_case("ce_id") && !name.eq_ignore_ascii_case(""));
        }
        // Case is ignored for text names only as ASCII.
        assert!(HeaderName::from("Content-Type").eq_ignore_ascii_case("content-type"));
        assert_eq!(format!("{:?}", HeaderName::new(b"a\xffb")), "\"a\\xffb\"");
    }

    #[test]
    fn binary_mode_becomes_a_structured_event() {
        let headers = h(BINARY);
        let data =
            Bytes::from_static(br#"{"amount": 12.5, "big": 123456789012345678901234567890}"#);
        let d = ce(&rec(Some(&data), &headers)).unwrap();
        assert_eq!(d.event.id, "e-1");
        assert_eq!(d.event.event_type, "order.paid");
        assert_eq!(d.event.subject.as_deref(), Some("o-9"));
        assert_eq!(d.event.entity_version, Some(7));
        assert_eq!(d.body_type, BodyType::CloudEventsJson);
        // The structured form decodes as a structured event, with the same data.
        let again = event::decode(Some(&d.event.raw), &opts()).unwrap();
        assert_eq!(again.id, "e-1");
        assert_eq!(again.entity_version, Some(7));
        let v: serde_json::Value = serde_json::from_slice(&d.event.raw).unwrap();
        assert_eq!(v["data"]["amount"], 12.5);
        assert_eq!(v["datacontenttype"], "application/json; charset=utf-8");
        assert_eq!(v["traceparent"], BINARY[6].1);
        // A `ce_data` header is not an attribute: the data is the record value.
        let mut with_data_header = headers.clone();
        with_data_header.push(("ce_data".into(), Some(Bytes::from_static(b"\"x\""))));
        let d2 = ce(&rec(Some(&data), &with_data_header)).unwrap();
        let v2: serde_json::Value = serde_json::from_slice(&d2.event.raw).unwrap();
        assert_eq!(v2["data"]["amount"], 12.5);
        assert_eq!(
            String::from_utf8_lossy(&d2.event.raw)
                .matches("\"data\"")
                .count(),
            1
        );
        // The data's numbers are kept as written (no f64 round trip).
        assert!(String::from_utf8_lossy(&d.event.raw).contains("123456789012345678901234567890"));
    }

    #[test]
    fn binary_mode_with_non_json_data_uses_data_base64() {
        let mut headers = h(&BINARY[..4]);
        headers.push((
            "content-type".into(),
            Some(Bytes::from_static(b"application/octet-stream")),
        ));
        let data = Bytes::from_static(&[0, 159, 146, 150]);
        let d = ce(&rec(Some(&data), &headers)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&d.event.raw).unwrap();
        assert_eq!(v["data_base64"], "AJ+Slg==");
        assert!(v.get("data").is_none());
        // No value at all: an event without data.
        let d = ce(&rec(None, &headers)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&d.event.raw).unwrap();
        assert!(v.get("data").is_none() && v.get("data_base64").is_none());
    }

    /// A binary-mode `ce_specversion` header of any length and bytes: the
    /// error (logged, and the parked envelope's message) stays short and
    /// printable.
    #[test]
    fn binary_mode_attacker_text_is_capped() {
        let data = Bytes::from_static(b"{}");
        let mut hs: Vec<Header> = h(BINARY)
            .into_iter()
            .filter(|(k, _)| k.as_bytes() != b"ce_specversion")
            .collect();
        let huge = format!("9.9\r\nFORGED{}", "z".repeat(1 << 20));
        hs.push(("ce_specversion".into(), Some(Bytes::from(huge))));
        let e = ce(&rec(Some(&data), &hs)).map(|_| ()).unwrap_err();
        assert_eq!(e.reason(), "unsupported_specversion");
        let shown = e.to_string();
        assert!(shown.len() < 400, "{} bytes", shown.len());
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }

    #[test]
    fn binary_mode_is_validated_like_structured_mode() {
        let data = Bytes::from_static(b"{}");
        let reason = |hs: Vec<Header>, value: Option<&Bytes>| {
            ce(&rec(value, &hs)).map(|_| ()).map_err(|e| e.reason())
        };
        let without = |name: &str| {
            h(&BINARY
                .iter()
                .copied()
                .filter(|(k, _)| *k != name)
                .collect::<Vec<_>>())
        };
        let with = |name: &str, v: &str| {
            let mut hs = without(name);
            hs.push((name.into(), Some(Bytes::copy_from_slice(v.as_bytes()))));
            hs
        };
        assert_eq!(
            reason(without("ce_id"), Some(&data)),
            Err("missing_attribute")
        );
        assert_eq!(
            reason(without("ce_type"), Some(&data)),
            Err("missing_attribute")
        );
        assert_eq!(
            reason(with("ce_specversion", "0.3"), Some(&data)),
            Err("unsupported_specversion")
        );
        assert_eq!(reason(with("ce_id", "a b"), Some(&data)), Err("invalid_id"));
        assert_eq!(reason(with("ce_id", ""), Some(&data)), Err("wrong_type"));
        assert_eq!(
            reason(with("ce_entityversion", "x"), Some(&data)),
            Err("wrong_type")
        );
        let mut bad_utf8 = without("ce_source");
        bad_utf8.push(("ce_source".into(), Some(Bytes::from_static(&[0xff]))));
        assert_eq!(reason(bad_utf8, Some(&data)), Err("wrong_type"));
        let deep = Bytes::from(format!("{}1{}", "[".repeat(200), "]".repeat(200)));
        assert_eq!(reason(h(BINARY), Some(&deep)), Err("too_deep"));
        let huge = Bytes::from_static(b"[1e400]");
        assert_eq!(reason(h(BINARY), Some(&huge)), Err("number_out_of_range"));
        let broken = Bytes::from_static(b"{not json");
        assert_eq!(reason(h(BINARY), Some(&broken)), Err("malformed_json"));
        let big = Bytes::from(vec![b'1'; 5000]);
        assert_eq!(reason(h(BINARY), Some(&big)), Err("too_large"));
    }

    #[test]
    fn structured_mode_when_there_is_no_ce_specversion_header() {
        let hs = h(&[("content-type", "application/cloudevents+json")]);
        let v = Bytes::from_static(br#"{"specversion":"1.0","id":"s","source":"/s","type":"t"}"#);
        let d = ce(&rec(Some(&v), &hs)).unwrap();
        assert_eq!(d.event.id, "s");
        assert_eq!(d.event.raw, v);
    }

    #[test]
    fn plain_json_with_pointers() {
        let v = Bytes::from_static(
            br#"{"order":{"id":981,"customer":"c-7"},"kind":"order.created","n":1}"#,
        );
        let d = js(&rec(Some(&v), &[])).unwrap();
        assert_eq!(d.event.id, "981");
        assert_eq!(d.event.event_type, "order.created");
        assert_eq!(d.key.as_deref(), Some(&b"c-7"[..]));
        assert_eq!(d.body_type, BodyType::Json);
        assert_eq!(d.event.raw, v, "posted unchanged");
        // No type at the pointer: the default type.
        let v = Bytes::from_static(br#"{"order":{"id":"x"}}"#);
        let d = js(&rec(Some(&v), &[])).unwrap();
        assert_eq!(d.event.event_type, "order");
        assert_eq!(d.key, None);
    }

    #[test]
    fn plain_json_id_fallback_and_refusals() {
        let v = Bytes::from_static(br#"{"other":1}"#);
        let r = rec(Some(&v), &[]);
        assert_eq!(js(&r).unwrap_err().reason(), "missing_attribute");
        let mut cfg = json_cfg();
        cfg.id_fallback = IdFallback::Coordinates;
        let d = decode_record(&r, InputFormat::Json, &cfg, &opts()).unwrap();
        assert_eq!(d.event.id, "orders-3-42");
        let reason = |v: &'static [u8]| {
            let b = Bytes::from_static(v);
            js(&rec(Some(&b), &[])).map(|_| ()).map_err(|e| e.reason())
        };
        assert_eq!(reason(br#"[1]"#), Err("not_an_object"));
        assert_eq!(reason(br#"{"order":{"id":"a b"}}"#), Err("invalid_id"));
        assert_eq!(reason(br#"{"order":{"id":1.5}}"#), Err("missing_attribute"));
        assert_eq!(
            reason(br#"{"order":{"id":"x"},"n":1e999}"#),
            Err("number_out_of_range")
        );
        assert_eq!(reason(b"\xff"), Err("invalid_utf8"));
        assert_eq!(reason(b""), Err("empty"));
    }
}
