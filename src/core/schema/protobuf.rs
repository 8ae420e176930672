//! Protobuf records (Confluent-framed: the message-index list, then the
//! message) to JSON text, by the canonical proto3 JSON mapping.
//!
//! The registry serves a schema as `.proto` source (what Confluent's registry
//! answers) or as a base64 `FileDescriptorProto` (what Apicurio keeps when
//! confluent-kafka's Python `ProtobufSerializer` registered it); its
//! `references` are the files it imports, by import path. Compiled once per id
//! with `protox` (the well-known types, `google/protobuf/*.proto`, ship with
//! it: the serializers register no reference for them); a record is decoded
//! with `prost-reflect` and written as JSON by its `serde` mapping:
//!
//! | Protobuf | JSON |
//! |---|---|
//! | field names | lowerCamelCase (`order_id` → `"orderId"`; a `json_name` option wins) |
//! | string, bool | the same JSON value |
//! | int32, sint32, sfixed32, uint32, fixed32 | a number |
//! | int64, sint64, sfixed64, uint64, fixed64 | a string of the digits (`"9007199254740993"`): a double would round them |
//! | float, double | a number; NaN and ±infinity as `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | bytes | a base64 string (standard alphabet, padded) |
//! | enum | its value's name (`"SHIPPED"`); a number the schema does not name as the number |
//! | message | an object |
//! | repeated / map | an array / an object (keys as strings) |
//! | oneof | the member that is set, under its own name; the others absent |
//! | google.protobuf.Timestamp | RFC 3339 UTC (`"2025-12-02T09:51:12.345Z"`) |
//! | google.protobuf.Duration | `"1.5s"` |
//! | wrappers (`Int64Value`, …), `Struct`, `Value`, `FieldMask`, `Any`, `Empty` | their canonical forms |
//!
//! A field without presence (a proto3 scalar, a repeated field, a map) is
//! written at its default when the record does not carry it (`0`, `""`,
//! `false`, `[]`, `{}`, the enum's first name) — the mapping's "emit default
//! values" option — so every event of a type has the same fields and an
//! `input.id` pointer to an id of `0` finds it. A field with presence (a
//! message, `optional`, a oneof member) is written only when set.
//!
//! Bounded on hostile bytes: `prost` refuses messages nested deeper than 100,
//! every length is checked against the bytes left, the values the bytes
//! decode to are counted first and a record of more than [`max_values`] is
//! refused before it is decoded (`values`: a packed `repeated bool` is one
//! value a wire byte, ~56 bytes each decoded), and the JSON is written into
//! a buffer that stops at `max_event_bytes` (`too_large` both), so a record
//! of empty sub-messages cannot blow up into a huge document.

use super::capped::Limited;
use super::frame;
use super::Referenced;
use base64::Engine;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use std::collections::HashMap;
use std::sync::Arc;

/// The name the compiled root file gets (no reference can import it).
const ROOT: &str = "courier-registry-schema.proto";

/// A writer's schema as fetched, compiled, with its imports.
#[derive(Debug)]
pub struct ProtoSchema {
    pool: DescriptorPool,
    /// The name of the root file in `pool`.
    root: String,
    /// The length of the texts it was compiled from (what a cache charges).
    text_len: usize,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProtoError {
    #[error("the Protobuf schema does not compile: {0}")]
    Schema(String),
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
    #[error("the message-index list {0:?} names no message of the schema")]
    NoSuchMessage(Vec<i64>),
    #[error("the record does not decode as {message}: {error}")]
    Decode { message: String, error: String },
    #[error("the record's {message} cannot be written as JSON: {error}")]
    Json { message: String, error: String },
    #[error("the record's JSON is larger than max_event_bytes ({0})")]
    TooLarge(usize),
    /// More values than [`max_values`] allows, counted before decoding.
    #[error("the record holds more than {0} values (fields, list elements, map entries): one per 4 bytes of max_event_bytes")]
    TooManyValues(usize),
}

/// The most values (field occurrences, list elements, map entries) a record
/// of at most `max_bytes` of JSON may decode to: one per 4 bytes. Decoded,
/// a value takes ~56 bytes, so a record being decoded holds at most ~14 ×
/// `max_bytes`; and that many values are at least half of `max_bytes` as
/// JSON (2 bytes the smallest, `0,`).
pub(crate) fn max_values(max_bytes: usize) -> usize {
    max_bytes / 4
}

impl ProtoSchema {
    /// Compiles a schema (the registry's `schema` text: `.proto` source or a
    /// base64 `FileDescriptorProto`) and the files it imports (`references`:
    /// by import path, each `.proto` source or base64 descriptor too).
    pub(crate) fn compile(
        text: &str,
        references: &[Referenced],
    ) -> Result<ProtoSchema, ProtoError> {
        // The texts by import path, shared; each parsed only when the
        // compiler opens it (a file listed under many names, or never
        // imported, is not parsed for each).
        let texts: HashMap<String, Arc<str>> = references
            .iter()
            .map(|r| (r.name.clone(), Arc::clone(&r.schema)))
            .collect();
        if texts.contains_key(ROOT) {
            return Err(ProtoError::Schema(format!(
                "a reference is named {ROOT}, the name Courier gives the schema itself"
            )));
        }
        let root = file(ROOT, text).map_err(|e| ProtoError::Schema(e.to_string()))?;
        let files = Files { texts, root };
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(files);
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler
            .open_file(ROOT)
            .map_err(|e| ProtoError::Schema(e.to_string()))?;
        Ok(ProtoSchema {
            pool: compiler.descriptor_pool(),
            root: ROOT.to_string(),
            text_len: text.len() + references.iter().map(|r| r.schema.len()).sum::<usize>(),
        })
    }

    /// The length of the texts it was compiled from.
    pub(crate) fn text_len(&self) -> usize {
        self.text_len
    }

    /// The message type a message-index list names: `[0]` the file's first
    /// message, `[1, 0]` the first message nested in its second (map entries
    /// count, as they are nested types of the descriptor).
    pub(crate) fn message(&self, indexes: &[i64]) -> Result<MessageDescriptor, ProtoError> {
        let none = || ProtoError::NoSuchMessage(indexes.to_vec());
        let file = self.pool.get_file_by_name(&self.root).ok_or_else(none)?;
        let (first, rest) = indexes.split_first().ok_or_else(none)?;
        let nth = |i: i64| usize::try_from(i).map_err(|_| none());
        let mut message = file.messages().nth(nth(*first)?).ok_or_else(none)?;
        for i in rest {
            let child = message.child_messages().nth(nth(*i)?).ok_or_else(none)?;
            message = child;
        }
        Ok(message)
    }

    /// Decodes one record body (after the 5-byte header: the message-index
    /// list, then the message) to JSON text of at most `max_bytes`.
    pub(crate) fn to_json(&self, body: &[u8], max_bytes: usize) -> Result<Vec<u8>, ProtoError> {
        let (indexes, bytes) = frame::message_indexes(body)?;
        let desc = self.message(&indexes)?;
        // Counted on the wire bytes before they are decoded (`values`).
        let limit = max_values(max_bytes);
        if values::more_than(&desc, bytes, limit) {
            return Err(ProtoError::TooManyValues(limit));
        }
        let message =
            DynamicMessage::decode(desc.clone(), bytes).map_err(|e| ProtoError::Decode {
                message: desc.full_name().to_string(),
                error: e.to_string(),
            })?;
        let mut out = Limited::new(max_bytes, bytes.len() * 2 + 16);
        let options = SerializeOptions::new().skip_default_fields(false);
        let mut ser = serde_json::Serializer::new(&mut out);
        match message.serialize_with_options(&mut ser, &options) {
            Ok(()) => Ok(out.buf),
            Err(_) if out.over => Err(ProtoError::TooLarge(max_bytes)),
            Err(e) => Err(ProtoError::Json {
                message: desc.full_name().to_string(),
                error: e.to_string(),
            }),
        }
    }
}

/// One file as the registry served it: base64 of a `FileDescriptorProto`
/// (its name set to the import path, as the serializers do), else source.
fn file(name: &str, text: &str) -> Result<protox::file::File, protox::Error> {
    let trimmed = text.trim();
    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(trimmed) {
        if let Ok(mut descriptor) = prost_types::FileDescriptorProto::decode(bytes.as_slice()) {
            descriptor.name = Some(name.to_string());
            return Ok(protox::file::File::from_file_descriptor_proto(descriptor));
        }
    }
    protox::file::File::from_source(name, text)
}

/// The registry's files by import path (parsed as the compiler opens them),
/// and the schema itself, parsed.
struct Files {
    texts: HashMap<String, Arc<str>>,
    root: protox::file::File,
}

impl protox::file::FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == ROOT {
            return Ok(self.root.clone());
        }
        let text = self
            .texts
            .get(name)
            .ok_or_else(|| protox::Error::file_not_found(name))?;
        file(name, text)
    }
}

#[path = "protobuf/values.rs"]
mod values;

#[cfg(test)]
#[path = "protobuf/tests.rs"]
mod tests;
