//! A record written by confluent-kafka's Python `JSONSerializer` against a real
//! registry (Apicurio Registry 2.6.13; `fixtures/make.py`), its schema with a
//! reference to another subject, and records that break it.

use super::*;
use crate::core::schema::fixtures;
use serde_json::json;

fn invoice() -> JsonSchema {
    let (text, refs) = fixtures::load().schema_of("invoice");
    assert_eq!(refs.len(), 1, "money.json");
    JsonSchema::compile(&text, &refs).unwrap()
}

fn invalid(s: &JsonSchema, v: serde_json::Value) -> String {
    match s.check(&v) {
        Err(JsonSchemaError::Invalid(m)) => m,
        other => panic!("{v} should be invalid: {other:?}"),
    }
}

#[test]
fn the_serializers_record_is_valid() {
    let f = fixtures::load();
    assert_eq!(f.kind_of("invoice"), "JSON");
    let record = f.record("invoice");
    let doc: serde_json::Value =
        serde_json::from_slice(&record[crate::core::schema::frame::HEADER_BYTES..]).unwrap();
    assert_eq!(doc["total"]["currency"], "EUR");
    invoice().check(&doc).unwrap();
}

#[test]
fn violations_say_where_and_what() {
    let s = invoice();
    // A keyword of the schema itself.
    let m = invalid(&s, json!({"id": "i-1", "qty": 0}));
    assert!(m.contains("at /qty") && m.contains("minimum"), "{m}");
    // Through `definitions` (a local $ref).
    let m = invalid(
        &s,
        json!({"id": "i-1", "qty": 1, "lines": [{"sku": "a"}, {}]}),
    );
    assert!(m.contains("at /lines/1") && m.contains("sku"), "{m}");
    // Through the reference to another subject (money.json).
    let m = invalid(
        &s,
        json!({"id": "i-1", "qty": 1, "total": {"currency": "EURO", "units": 1}}),
    );
    assert!(m.contains("at /total/currency"), "{m}");
    // A required property missing: at the root.
    let m = invalid(&s, json!({"qty": 1}));
    assert!(m.contains("at /:") && m.contains("\"id\""), "{m}");
}

#[test]
fn a_message_names_a_few_violations_and_never_the_whole_record() {
    let s = JsonSchema::compile(r#"{"type": "array", "items": {"type": "string"}}"#, &[]).unwrap();
    let m = invalid(&s, json!([1, 2, 3, 4, 5, 6]));
    assert!(m.contains("at /0") && m.contains("at /2"), "{m}");
    assert!(!m.contains("at /3") && m.ends_with("and 3 more"), "{m}");
    let big = "x".repeat(100_000);
    let s = JsonSchema::compile(r#"{"type": "array"}"#, &[]).unwrap();
    let m = invalid(&s, json!({ "a": big }));
    assert!(m.len() < 1_000, "{} bytes", m.len());
}

#[test]
fn without_dollar_schema_draft_7_is_assumed() {
    // Draft 7: keywords beside a `$ref` are ignored (2020-12 applies them).
    let s = JsonSchema::compile(
        r##"{"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s", "minLength": 5}"##,
        &[],
    )
    .unwrap();
    assert!(s.check(&json!("ab")).is_ok());
    assert!(s.check(&json!(1)).is_err());
    // A 2020-12 schema says so, and is read as one.
    let s = JsonSchema::compile(
        r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [{"type": "string"}]}"#,
        &[],
    )
    .unwrap();
    assert!(s.check(&json!([1])).is_err());
}

#[test]
fn a_ref_outside_the_references_does_not_compile_and_fetches_nothing() {
    for r in [
        "https://127.0.0.1:1/x.json",
        "file:///etc/passwd",
        "other.json",
    ] {
        let text = format!(r#"{{"properties": {{"a": {{"$ref": "{r}"}}}}}}"#);
        match JsonSchema::compile(&text, &[]) {
            Err(JsonSchemaError::Schema(_)) => {}
            other => panic!("{r}: {other:?}"),
        }
    }
    assert!(matches!(
        JsonSchema::compile("{not json", &[]),
        Err(JsonSchemaError::Schema(_))
    ));
    assert!(matches!(
        JsonSchema::compile(r#"{"type": 12}"#, &[]),
        Err(JsonSchemaError::Schema(_))
    ));
}

#[test]
fn a_catastrophic_pattern_is_bounded() {
    let s = JsonSchema::compile(r#"{"type": "string", "pattern": "^(a+)+$"}"#, &[]).unwrap();
    let hostile = format!("{}!", "a".repeat(5_000));
    let start = std::time::Instant::now();
    let _ = s.check(&json!(hostile));
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}
