//! Records written through a Schema Registry (`input.format = "avro"`): the
//! Confluent wire format (`frame`) and the mapping of Avro values to JSON
//! (`avro`). Pure: the registry's answers are inputs (`schema_registry` fetches
//! them); what comes out is JSON text, read from there on exactly as
//! `input.format = "json"` reads a record.

pub mod avro;
pub mod frame;

pub use avro::{AvroSchema, DecimalMode, JsonOptions, TimestampMode};

use super::event::{DecodeError, DecodeOptions};
use super::input::{decode_json_from, Decoded, JsonInput, RecordIn};

/// A schema id as the registry answered it (`schema_registry` fetches it).
#[derive(Debug)]
pub enum Resolved {
    Avro(Box<AvroSchema>),
    /// A schema of another type (`schemaType`), named for the parking message.
    Other(String),
    /// The registry does not know the id (404).
    Unknown,
    /// The registry's Avro schema does not parse (parked `malformed_avro`).
    Broken(String),
}

/// Why a registry-framed record is parked: the reason and the message.
pub type Parked = (&'static str, String);

/// Decodes one registry-framed record: its header, its body with the schema
/// `lookup` gives for its id (`None`: not fetched, parked `unknown_schema`),
/// then the JSON as `input.format = "json"` reads it.
pub(crate) fn decode_framed<'s>(
    r: &RecordIn<'_>,
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
    let text = framed_json(value, lookup, json_options)?;
    decode_json_from(r, &bytes::Bytes::from(text), json, opts).map_err(bad)
}

/// The JSON (UTF-8 text) a registry-framed `value` decodes to with the schema `lookup`
/// gives for its id: what [`decode_framed`] then reads as `input.format =
/// "json"` reads a record, and what `courier dlq inspect` shows.
pub fn framed_json<'s>(
    value: &[u8],
    lookup: impl FnOnce(u32) -> Option<&'s Resolved>,
    json_options: JsonOptions,
) -> Result<Vec<u8>, Parked> {
    let schema_bad = |e: SchemaError| (e.reason(), e.to_string());
    let framed = frame::parse(value).map_err(|e| schema_bad(e.into()))?;
    let id = framed.schema_id;
    match lookup(id) {
        None | Some(Resolved::Unknown) => Err(schema_bad(SchemaError::UnknownSchema(id))),
        Some(Resolved::Other(kind)) => Err(schema_bad(SchemaError::WrongKind {
            id,
            kind: kind.clone(),
        })),
        Some(Resolved::Broken(e)) => Err(schema_bad(SchemaError::Avro {
            id,
            error: avro::AvroError::Schema(e.clone()),
        })),
        Some(Resolved::Avro(s)) => s
            .to_json(framed.body, json_options)
            .map_err(|error| schema_bad(SchemaError::Avro { id, error })),
    }
}

/// The schema id a record's value names, when it is framed.
pub fn schema_id(value: &[u8]) -> Option<u32> {
    frame::parse(value).ok().map(|f| f.schema_id)
}

/// Why a registry-framed record cannot be read, by parking reason.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    NotFramed(#[from] frame::FrameError),
    #[error("schema id {0} is not known to the schema registry")]
    UnknownSchema(u32),
    #[error("schema id {id} is a {kind} schema; input.format reads Avro")]
    WrongKind { id: u32, kind: String },
    #[error("schema id {id}: {error}")]
    Avro { id: u32, error: avro::AvroError },
}

impl SchemaError {
    /// The parking reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SchemaError::NotFramed(_) => "not_registry_framed",
            SchemaError::UnknownSchema(_) => "unknown_schema",
            SchemaError::WrongKind { .. } => "wrong_schema_type",
            SchemaError::Avro { .. } => "malformed_avro",
        }
    }
}
