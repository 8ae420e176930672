//! `[input]`: what the records of the main topic look like (`core::input`).

use super::schema_registry::SchemaRegistryConfig;
use super::{invalid, ConfigError};
use crate::core::input::{IdFallback, InputFormat, JsonInput};
use crate::core::schema::{DecimalMode, JsonOptions, TimestampMode};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InputConfig {
    /// `cloudevents` (structured or binary mode, detected per record), `json`, or
    /// `avro`, `protobuf`, `json_schema` (Confluent-framed, schemas from
    /// `[input.schema_registry]`, decoded to JSON or checked against their JSON
    /// Schema, and read as `json`).
    pub format: InputFormat,
    /// `json`: JSON pointer (RFC 6901) to the event id, a string or an integer.
    pub id: String,
    /// `json`: what to do when `id` finds nothing: `park` (`missing_attribute`) or
    /// `coordinates` (`<topic>-<partition>-<offset>` as the idempotency key).
    pub id_fallback: IdFallback,
    /// `json`: JSON pointer to the event type (a string); empty or absent:
    /// `default_type`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// `json`: the type of events without one.
    pub default_type: String,
    /// `json`: JSON pointer to the entity key, used instead of the Kafka key for
    /// ordering lanes and enrichment; empty: the Kafka key.
    pub key: String,
    /// `avro`: an Avro `decimal` as a `string` keeping every digit, or a `number`.
    pub decimal: DecimalMode,
    /// `avro`: dates, times and timestamps as `rfc3339` text or the `epoch` number.
    pub timestamps: TimestampMode,
    /// `avro`, `protobuf`, `json_schema`: the schema registry.
    pub schema_registry: SchemaRegistryConfig,
}

impl Default for InputConfig {
    fn default() -> Self {
        InputConfig {
            format: InputFormat::CloudEvents,
            id: "/id".into(),
            id_fallback: IdFallback::Park,
            event_type: "/type".into(),
            default_type: "event".into(),
            key: String::new(),
            decimal: DecimalMode::default(),
            timestamps: TimestampMode::default(),
            schema_registry: SchemaRegistryConfig::default(),
        }
    }
}

impl InputConfig {
    /// How `json` records are read.
    pub(crate) fn json(&self) -> JsonInput {
        JsonInput {
            id: self.id.clone(),
            id_fallback: self.id_fallback,
            event_type: self.event_type.clone(),
            default_type: self.default_type.clone(),
            key: self.key.clone(),
        }
    }

    /// How registry-framed records are written as JSON.
    pub(crate) fn json_options(&self) -> JsonOptions {
        JsonOptions {
            decimal: self.decimal,
            timestamps: self.timestamps,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.format.uses_registry() {
            self.schema_registry.validate(self.format.name())?;
        }
        for (field, pointer) in [
            ("input.id", &self.id),
            ("input.type", &self.event_type),
            ("input.key", &self.key),
        ] {
            if !pointer.is_empty() && !pointer.starts_with('/') {
                return Err(invalid(
                    field,
                    format!("`{pointer}` is not a JSON pointer: empty, or starting with `/` (e.g. `/order/id`)"),
                ));
            }
            // RFC 6901: `~` only as `~0` (a `~`) or `~1` (a `/`).
            let mut rest = pointer.split('~').skip(1);
            if rest.any(|after| !after.starts_with(['0', '1'])) {
                return Err(invalid(
                    field,
                    format!("`{pointer}`: in a JSON pointer `~` is written `~0` and `/` inside a name `~1`"),
                ));
            }
        }
        if self.format.is_plain_json() {
            if self.id.is_empty() && self.id_fallback == IdFallback::Park {
                return Err(invalid(
                    "input.id",
                    "is empty and input.id_fallback = \"park\": every event would be parked; give a pointer or set id_fallback = \"coordinates\"",
                ));
            }
            if self.default_type.is_empty() {
                return Err(invalid(
                    "input.default_type",
                    "must not be empty: it is the type of events without one",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};
    use crate::core::input::{IdFallback, InputFormat};

    fn field_of(toml: &str) -> String {
        match Config::from_toml(toml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn json_input_with_pointers() {
        let c = Config::from_toml(
            "[input]\nformat = \"json\"\nid = \"/order/id\"\ntype = \"/kind\"\nkey = \"/order/customer\"\nid_fallback = \"coordinates\"",
        )
        .unwrap();
        assert_eq!(c.input.format, InputFormat::Json);
        let j = c.input.json();
        assert_eq!(
            (j.id.as_str(), j.event_type.as_str(), j.key.as_str()),
            ("/order/id", "/kind", "/order/customer")
        );
        assert_eq!(j.id_fallback, IdFallback::Coordinates);
        assert_eq!(
            Config::from_toml("").unwrap().input.format,
            InputFormat::CloudEvents
        );
    }

    #[test]
    fn invalid_pointers_and_formats_are_refused() {
        assert_eq!(field_of("[input]\nid = \"order.id\""), "input.id");
        assert_eq!(field_of("[input]\ntype = \"kind\""), "input.type");
        assert_eq!(field_of("[input]\nkey = \"~/x\""), "input.key");
        assert_eq!(field_of("[input]\nkey = \"/a~2b\""), "input.key");
        assert!(Config::from_toml("[input]\nkey = \"/a~1b/c~0\"").is_ok());
        assert_eq!(field_of("[input]\nformat = \"xml\""), "input.format");
        assert_eq!(
            field_of("[input]\nid_fallback = \"guess\""),
            "input.id_fallback"
        );
        assert_eq!(
            field_of("[input]\nformat = \"json\"\nid = \"\""),
            "input.id"
        );
        assert_eq!(
            field_of("[input]\nformat = \"json\"\ndefault_type = \"\""),
            "input.default_type"
        );
        // An empty pointer is "none" (the Kafka key, the default type).
        assert!(Config::from_toml("[input]\nformat = \"json\"\nkey = \"\"\ntype = \"\"").is_ok());
    }
}
