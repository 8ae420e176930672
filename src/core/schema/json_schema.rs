//! JSON Schema records (Confluent-framed: the header, then the JSON text as
//! the producer wrote it): checked against the writer's schema, then read as
//! `input.format = "json"` reads a record, byte for byte.
//!
//! The schema (`schemaType: "JSON"`) is compiled once per id with the
//! `jsonschema` crate: its draft from `$schema` (Draft 7 without one, as
//! Confluent's serializers assume), `format` asserted as that draft says. Its
//! `references` are served to `$ref`s by their names (`"$ref":
//! "money.json"` finds the reference named `money.json`); nothing else is
//! fetched — a `$ref` to anything the registry did not give is a schema that
//! does not compile (no file or network access from a schema's text).
//! Patterns run with the crate's bounded-backtracking engine.

use super::Referenced;
use crate::core::text::{excerpt, LOG_TEXT_MAX};
use jsonschema::Validator;
use std::collections::HashMap;
use std::sync::Arc;

/// The base URI of a schema without `$id` (the crate's default), against which
/// a reference's relative name resolves.
const BASE: &str = "json-schema:///";

/// At most this many of a record's violations are named in its parking message.
const MAX_NAMED: usize = 3;
/// Each named violation's text is cut to this many bytes, control and
/// bidirectional characters escaped (`core::text::excerpt`: the crate's
/// messages quote the offending value, which may be the whole record).
const MAX_MESSAGE_BYTES: usize = 200;

/// A writer's JSON Schema, compiled.
pub struct JsonSchema {
    validator: Validator,
    /// The length of the texts it was compiled from (what a cache charges).
    text_len: usize,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchema")
            .field("text_len", &self.text_len)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum JsonSchemaError {
    #[error("the JSON Schema does not compile: {0}")]
    Schema(String),
    /// The record's violations, each where it is and what failed.
    #[error("the record does not match its JSON Schema: {0}")]
    Invalid(String),
}

/// The references' texts by the names a `$ref` may use, shared; each parsed
/// only when a `$ref` reaches it (a text listed under many names is not
/// parsed for each).
struct References(HashMap<String, Arc<str>>);

impl jsonschema::Retrieve for References {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>> {
        let uri = uri.as_str();
        let name = uri.strip_prefix(BASE).unwrap_or(uri);
        let shown = || excerpt(uri, LOG_TEXT_MAX);
        let text = self
            .0
            .get(uri)
            .or_else(|| self.0.get(name))
            .ok_or_else(|| format!("`{}` is not among the schema's references", shown()))?;
        serde_json::from_str(text)
            .map_err(|e| format!("the reference {} is not JSON: {e}", shown()).into())
    }
}

impl JsonSchema {
    /// Compiles a schema (the registry's `schema` text) with the schemas it
    /// references (`references`: by the name a `$ref` uses).
    pub(crate) fn compile(
        text: &str,
        references: &[Referenced],
    ) -> Result<JsonSchema, JsonSchemaError> {
        let bad = |e: String| JsonSchemaError::Schema(e);
        let schema: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("it is not JSON: {e}")))?;
        let refs = references
            .iter()
            .map(|r| (r.name.clone(), Arc::clone(&r.schema)))
            .collect();
        let mut options = jsonschema::options().with_retriever(References(refs));
        if schema.get("$schema").is_none() {
            options = options.with_draft(jsonschema::Draft::Draft7);
        }
        let validator = options
            .build(&schema)
            .map_err(|e| bad(excerpt(&e.to_string(), MAX_MESSAGE_BYTES)))?;
        Ok(JsonSchema {
            validator,
            text_len: text.len() + references.iter().map(|r| r.schema.len()).sum::<usize>(),
        })
    }

    /// The length of the texts it was compiled from.
    pub(crate) fn text_len(&self) -> usize {
        self.text_len
    }

    /// Checks a record's JSON value against the schema; the violations named
    /// by where they are (a JSON pointer into the record) and what failed.
    pub(crate) fn check(&self, value: &serde_json::Value) -> Result<(), JsonSchemaError> {
        let mut errors = self.validator.iter_errors(value);
        let mut named = Vec::new();
        let mut more = 0usize;
        for e in errors.by_ref() {
            if named.len() < MAX_NAMED {
                // The path names the record's own keys: cut and escaped too.
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                named.push(format!(
                    "at {}: {} (schema {})",
                    excerpt(&at, LOG_TEXT_MAX),
                    excerpt(&e.to_string(), MAX_MESSAGE_BYTES),
                    excerpt(&e.schema_path().to_string(), LOG_TEXT_MAX)
                ));
            } else {
                more += 1;
            }
        }
        if named.is_empty() {
            return Ok(());
        }
        let mut message = named.join("; ");
        if more > 0 {
            message.push_str(&format!("; and {more} more"));
        }
        Err(JsonSchemaError::Invalid(message))
    }
}

#[cfg(test)]
#[path = "json_schema/tests.rs"]
mod tests;
