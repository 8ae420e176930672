//! Records written through a Schema Registry (`input.format = "avro"`,
//! `"protobuf"`, `"json_schema"`): the Confluent wire format (`frame`), the
//! mapping of Avro values (`avro`) and Protobuf messages (`protobuf`) to JSON,
//! and the JSON Schema check (`json_schema`). Pure: the registry's answers are
//! inputs (`schema_registry` fetches them, [`Resolved::compile`] makes them
//! usable); what comes out is JSON text, read from there on exactly as
//! `input.format = "json"` reads a record. `registry` says what the
//! registry's answers mean and resolves references within a byte budget;
//! `unknown_ids` decides when a partition asks for an id it does not know.

pub(crate) mod avro;
mod avro_names;
mod capped;
pub mod frame;
pub(crate) mod json_schema;
pub(crate) mod protobuf;
pub(crate) mod registry;
pub(crate) mod unknown_ids;

pub(crate) use avro::{AvroSchema, DecimalMode, JsonOptions, TimestampMode};
pub(crate) use json_schema::JsonSchema;
pub(crate) use protobuf::ProtoSchema;
pub(crate) use registry::RegistryRefusal;

use super::event::{self, DecodeError, DecodeOptions};
use super::input::{decode_json_from, Decoded, InputFormat, JsonInput, RecordIn};

/// A schema id as the registry answered it (`schema_registry` fetches it).
#[derive(Debug)]
pub enum Resolved {
    Avro(Box<AvroSchema>),
    Protobuf(Box<ProtoSchema>),
    JsonSchema(Box<JsonSchema>),
    /// A schema of another type (`schemaType`) than `input.format` reads,
    /// named for the parking message.
    Other(String),
    /// The registry does not know the id (404).
    Unknown,
    /// The registry's answer can never be read as a schema: the records
    /// naming the id are parked with this reason and message.
    Refused(RegistryRefusal, String),
    /// The registry's schema does not parse or compile (parked
    /// `malformed_avro`, `malformed_protobuf` or `malformed_json_schema`).
    Broken(String),
}

/// What keeping one answer costs beyond its texts, measured (a counting
/// allocator, 100,000 refusals): 317 bytes in the registry's cache (moka's
/// entry, its order and timer nodes, the shared answer) and 100 in a
/// partition's (its map entry and its place in the order), rounded up.
pub(crate) const ENTRY_BYTES: usize = 512;

/// A schema another one references, as the registry served it: the name it is
/// referenced by (a Protobuf import path, a JSON Schema `$ref`; Avro uses the
/// names inside the texts) and its text, shared by every name it is listed
/// under (never copied per name: `registry::Resolution`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Referenced {
    pub name: String,
    pub schema: std::sync::Arc<str>,
}

/// The registry's `schemaType` (absent: Avro), upper-cased.
pub(crate) fn schema_kind(schema_type: Option<&str>) -> String {
    schema_type.unwrap_or("AVRO").to_ascii_uppercase()
}

/// The `schemaType` `format` reads.
pub(crate) fn expected_kind(format: InputFormat) -> Option<&'static str> {
    match format {
        InputFormat::Avro => Some("AVRO"),
        InputFormat::Protobuf => Some("PROTOBUF"),
        InputFormat::JsonSchema => Some("JSON"),
        InputFormat::CloudEvents | InputFormat::Json => None,
    }
}

impl Resolved {
    /// What the registry's answer for an id is to `format`: its schema
    /// (`text`, of `kind`, with the `references` it names, dependencies
    /// first) parsed or compiled, or the kind `format` does not read.
    pub(crate) fn compile(
        format: InputFormat,
        kind: &str,
        text: &str,
        references: &[Referenced],
    ) -> Resolved {
        if expected_kind(format) != Some(kind) {
            return Resolved::Other(kind.to_string());
        }
        let broken = |e: String| Resolved::Broken(e);
        match format {
            InputFormat::Avro => {
                // Avro names its types inside the texts: a text listed under
                // several names is read once.
                let mut read = std::collections::HashSet::new();
                let texts: Vec<&str> = references
                    .iter()
                    .filter(|r| read.insert(std::sync::Arc::as_ptr(&r.schema).cast::<u8>()))
                    .map(|r| &*r.schema)
                    .collect();
                // Names the Avro library would panic on, refused first.
                let mut named = std::iter::once(text).chain(texts.iter().copied());
                if let Err(e) = named.try_for_each(avro_names::check) {
                    return broken(e);
                }
                match AvroSchema::parse(text, &texts) {
                    Ok(s) => Resolved::Avro(Box::new(s)),
                    Err(e) => broken(e.to_string()),
                }
            }
            InputFormat::Protobuf => match ProtoSchema::compile(text, references) {
                Ok(s) => Resolved::Protobuf(Box::new(s)),
                Err(e) => broken(e.to_string()),
            },
            InputFormat::JsonSchema => match JsonSchema::compile(text, references) {
                Ok(s) => Resolved::JsonSchema(Box::new(s)),
                Err(e) => broken(e.to_string()),
            },
            InputFormat::CloudEvents | InputFormat::Json => Resolved::Other(kind.to_string()),
        }
    }

    /// Bytes a cache charges for it: the parsed or compiled form is a few
    /// times its texts; the texts' length stands for it. Every entry also
    /// weighs [`ENTRY_BYTES`], what keeping it costs whatever it holds: a
    /// refusal is mostly that.
    pub(crate) fn weight(&self) -> usize {
        let n = match self {
            Resolved::Avro(s) => s.text_len().saturating_mul(4),
            Resolved::Protobuf(s) => s.text_len().saturating_mul(8),
            Resolved::JsonSchema(s) => s.text_len().saturating_mul(8),
            Resolved::Other(k) => k.len(),
            Resolved::Broken(e) | Resolved::Refused(_, e) => e.len(),
            Resolved::Unknown => 0,
        };
        n.saturating_add(ENTRY_BYTES)
    }

    /// An answer that parks the records naming the id: kept a bounded time
    /// only (`input.schema_registry.negative_cache_ttl`), then asked again.
    /// A schema that does not compile is the registry's schema, kept like one.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self, Resolved::Unknown | Resolved::Refused(..))
    }
}

/// Why a registry-framed record is parked: the reason and the message.
pub(crate) type Parked = (&'static str, String);

/// Decodes one registry-framed record of `format`: its header, its body with
/// the schema `lookup` gives for its id (`None`: not asked for, parked
/// `unknown_schema`), then the JSON as `input.format = "json"` reads it.
pub(crate) fn decode_framed<'s>(
    r: &RecordIn<'_>,
    format: InputFormat,
    lookup: impl FnOnce(u32) -> Option<&'s Resolved>,
    json: &JsonInput,
    opts: &DecodeOptions,
    json_options: JsonOptions,
) -> Result<Decoded, Parked> {
    let bad = |e: DecodeError| (e.reason(), e.to_string());
    let value = match r.value {
        Some(v) if !v.is_empty() => v,
        _ => return Err(bad(DecodeError::Empty)),
    };
    if value.len() > opts.max_event_bytes {
        return Err(bad(DecodeError::TooLarge {
            size: value.len(),
            max: opts.max_event_bytes,
        }));
    }
    let text = framed_bytes(value, format, lookup, json_options, opts.max_event_bytes)?;
    decode_json_from(r, &text, json, opts).map_err(bad)
}

/// The JSON (UTF-8 text) a registry-framed `value` of `format` is read as, with
/// the schema `lookup` gives for its id: what [`decode_framed`] then reads as
/// `input.format = "json"` reads a record, and what `courier dlq inspect`
/// shows. Avro and Protobuf decoded to JSON (at most `max_bytes`),
/// JSON Schema records checked and kept as written.
pub(crate) fn framed_json<'s>(
    value: &[u8],
    format: InputFormat,
    lookup: impl FnOnce(u32) -> Option<&'s Resolved>,
    json_options: JsonOptions,
    max_bytes: usize,
) -> Result<Vec<u8>, Parked> {
    let value = bytes::Bytes::copy_from_slice(value);
    framed_bytes(&value, format, lookup, json_options, max_bytes).map(|b| b.to_vec())
}

/// [`framed_json`] without copying: a JSON Schema record's body is a slice of
/// `value`.
fn framed_bytes<'s>(
    value: &bytes::Bytes,
    format: InputFormat,
    lookup: impl FnOnce(u32) -> Option<&'s Resolved>,
    json_options: JsonOptions,
    max_bytes: usize,
) -> Result<bytes::Bytes, Parked> {
    let bad = |e: DecodeError| (e.reason(), e.to_string());
    let schema_bad = |e: SchemaError| (e.reason(), e.to_string());
    let framed = frame::parse(value).map_err(|e| schema_bad(e.into()))?;
    let id = framed.schema_id;
    let wrong = |kind: &str| {
        schema_bad(SchemaError::WrongKind {
            id,
            kind: kind.to_string(),
            format,
        })
    };
    match (format, lookup(id)) {
        (_, None) => Err(schema_bad(SchemaError::NotAsked(id))),
        (_, Some(Resolved::Unknown)) => Err(schema_bad(SchemaError::UnknownSchema(id))),
        (_, Some(Resolved::Refused(refusal, detail))) => Err(schema_bad(SchemaError::Refused {
            id,
            refusal: *refusal,
            detail: detail.clone(),
        })),
        (_, Some(Resolved::Other(kind))) => Err(wrong(kind)),
        (_, Some(Resolved::Broken(e))) => Err(schema_bad(SchemaError::Broken {
            id,
            format,
            error: e.clone(),
        })),
        (InputFormat::Avro, Some(Resolved::Avro(s))) => s
            .to_json(framed.body, json_options, max_bytes)
            .map(bytes::Bytes::from)
            .map_err(|error| schema_bad(SchemaError::Avro { id, error })),
        (InputFormat::Protobuf, Some(Resolved::Protobuf(s))) => s
            .to_json(framed.body, max_bytes)
            .map(bytes::Bytes::from)
            .map_err(|error| schema_bad(SchemaError::Protobuf { id, error })),
        (InputFormat::JsonSchema, Some(Resolved::JsonSchema(s))) => {
            let body = value.slice(frame::HEADER_BYTES..);
            let doc = parse_json(&body).map_err(bad)?;
            s.check(&doc)
                .map_err(|error| schema_bad(SchemaError::JsonSchema { id, error }))?;
            Ok(body)
        }
        (_, Some(Resolved::Avro(_))) => Err(wrong("AVRO")),
        (_, Some(Resolved::Protobuf(_))) => Err(wrong("PROTOBUF")),
        (_, Some(Resolved::JsonSchema(_))) => Err(wrong("JSON")),
    }
}

/// A JSON Schema record's body as a JSON value, refused as `input.format =
/// "json"` refuses a value (`invalid_utf8`, `malformed_json`, `too_deep`, …).
fn parse_json(body: &[u8]) -> Result<serde_json::Value, DecodeError> {
    std::str::from_utf8(body).map_err(|e| DecodeError::InvalidUtf8(e.valid_up_to()))?;
    event::check_json(body, 1)?;
    serde_json::from_slice(body)
        .map_err(|e| DecodeError::MalformedJson(event::quoted(&e.to_string())))
}

/// The schema id a record's value names, when it is framed.
pub(crate) fn schema_id(value: &[u8]) -> Option<u32> {
    frame::parse(value).ok().map(|f| f.schema_id)
}

/// Why a registry-framed record cannot be read, by parking reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    #[error(transparent)]
    NotFramed(#[from] frame::FrameError),
    #[error("schema id {0} is not known to the schema registry")]
    UnknownSchema(u32),
    /// No answer for the id at hand: not asked for (`unknown_ids`), or a
    /// refusal no longer kept.
    #[error(
        "schema id {0} was not asked of the schema registry, or its refusal was not kept: the \
         registry refused this partition more than {burst} schema ids at once, or more than one \
         every {every} s since (replay these records from the parking lot once it knows the id)",
        burst = unknown_ids::BURST,
        every = unknown_ids::INTERVAL.as_secs()
    )]
    NotAsked(u32),
    /// The registry's answer for the id can never be read as a schema.
    #[error("schema id {id}: {detail}")]
    Refused {
        id: u32,
        refusal: RegistryRefusal,
        detail: String,
    },
    #[error("schema id {id} is a {kind} schema; input.format = \"{}\" reads {} schemas", format.name(), expected_kind(*format).unwrap_or("no registry"))]
    WrongKind {
        id: u32,
        kind: String,
        format: InputFormat,
    },
    #[error("schema id {id}: {error}")]
    Broken {
        id: u32,
        format: InputFormat,
        error: String,
    },
    #[error("schema id {id}: {error}")]
    Avro { id: u32, error: avro::AvroError },
    #[error("schema id {id}: {error}")]
    Protobuf {
        id: u32,
        error: protobuf::ProtoError,
    },
    #[error("schema id {id}: {error}")]
    JsonSchema {
        id: u32,
        error: json_schema::JsonSchemaError,
    },
}

impl SchemaError {
    /// The parking reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SchemaError::NotFramed(_) => "not_registry_framed",
            SchemaError::UnknownSchema(_) | SchemaError::NotAsked(_) => "unknown_schema",
            SchemaError::Refused { refusal, .. } => refusal.as_str(),
            SchemaError::WrongKind { .. } => "wrong_schema_type",
            SchemaError::Broken { format, .. } => match format {
                InputFormat::Protobuf => "malformed_protobuf",
                InputFormat::JsonSchema => "malformed_json_schema",
                InputFormat::Avro | InputFormat::CloudEvents | InputFormat::Json => {
                    "malformed_avro"
                }
            },
            SchemaError::Avro {
                error: avro::AvroError::TooLarge(_),
                ..
            } => "too_large",
            SchemaError::Avro {
                error: avro::AvroError::Decimal { .. },
                ..
            } => "decimal_out_of_range",
            SchemaError::Avro { .. } => "malformed_avro",
            SchemaError::Protobuf {
                error: protobuf::ProtoError::TooLarge(_) | protobuf::ProtoError::TooManyValues(_),
                ..
            } => "too_large",
            SchemaError::Protobuf { .. } => "malformed_protobuf",
            SchemaError::JsonSchema {
                error: json_schema::JsonSchemaError::Schema(_),
                ..
            } => "malformed_json_schema",
            SchemaError::JsonSchema { .. } => "schema_invalid",
        }
    }
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
