//! The names in an Avro schema's text checked before the Avro library parses
//! it: `apache-avro` 0.21 unwraps its own check of a named type's `name` and
//! `aliases` (and of a type named by reference), so a registry serving
//! `{"type": "record", "name": "", …}` made it panic. Here such a schema is
//! refused with an error instead, as the library refuses other bad schemas.
//! Only the schema's structure is walked (types, fields, items, values);
//! defaults and custom attributes are data, not names.

use apache_avro::schema::{Alias, Name};
use serde_json::Value;

/// The primitive and complex type keywords: a `type` string that is none of
/// these names a type.
const KEYWORDS: [&str; 14] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string", "record", "error",
    "enum", "fixed", "array", "map",
];

/// `Err`: a name the Avro library would not accept (and would panic on).
/// Text that is not JSON is left to the library's own error.
pub(super) fn check(text: &str) -> Result<(), String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => walk(&v),
        Err(_) => Ok(()),
    }
}

fn name(what: &str, s: &str) -> Result<(), String> {
    Name::new(s)
        .map(|_| ())
        .map_err(|_| format!("the Avro schema names a {what} `{s}`, which is not an Avro name"))
}

fn walk(v: &Value) -> Result<(), String> {
    match v {
        Value::String(s) if !KEYWORDS.contains(&s.as_str()) => name("type", s),
        Value::Array(union) => union.iter().try_for_each(walk),
        Value::Object(o) => {
            if let Some(Value::String(s)) = o.get("name") {
                name("type or field", s)?;
            }
            if let Some(Value::Array(aliases)) = o.get("aliases") {
                for a in aliases {
                    if let Value::String(a) = a {
                        Alias::new(a).map_err(|_| {
                            format!(
                                "the Avro schema names an alias `{a}`, which is not an Avro name"
                            )
                        })?;
                    }
                }
            }
            for key in ["type", "items", "values"] {
                if let Some(t) = o.get(key) {
                    walk(t)?;
                }
            }
            if let Some(Value::Array(fields)) = o.get("fields") {
                fields.iter().try_for_each(walk)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_library_panics_on_are_refused() {
        for bad in [
            r#"{"type": "record", "name": "", "fields": []}"#,
            r#"{"type": "record", "name": "a.", "fields": []}"#,
            r#"{"type": "record", "name": "r", "aliases": [""], "fields": []}"#,
            r#"["null", {"type": "record", "name": "r", "fields": [{"name": "f", "type": {"type": "enum", "name": ".", "symbols": ["A"]}}]}]"#,
            r#"{"type": "array", "items": {"type": "fixed", "name": "", "size": 1}}"#,
            r#"{"type": "map", "values": "a..b"}"#,
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        for good in [
            r#"{"type": "record", "name": "shop.Order", "aliases": ["Old"], "fields": [
                {"name": "a", "type": "string", "default": {"name": ""}},
                {"name": "b", "type": ["null", "shop.Line"], "x-attr": {"name": ""}}]}"#,
            r#""string""#,
            "not json: the library says why",
        ] {
            assert!(check(good).is_ok(), "{good}");
        }
    }
}
