//! `decode_framed` for Protobuf and JSON Schema: what is delivered, and each
//! parking reason.

use super::*;
use crate::core::input::IdFallback;
use bytes::Bytes;

fn json_input() -> JsonInput {
    JsonInput {
        id: "/id".into(),
        id_fallback: IdFallback::Park,
        event_type: "/type".into(),
        default_type: "event".into(),
        key: String::new(),
    }
}

fn opts(max: usize) -> DecodeOptions {
    DecodeOptions {
        max_event_bytes: max,
        ..DecodeOptions::default()
    }
}

/// What the fetcher makes of the registry's answer for a fixture's id.
fn resolved(format: InputFormat, record: &str) -> Resolved {
    let f = fixtures::load();
    let (text, refs) = f.schema_of(record);
    Resolved::compile(format, &f.kind_of(record), &text, &refs)
}

fn decode(
    format: InputFormat,
    value: &[u8],
    schema: Option<&Resolved>,
    max: usize,
) -> Result<Decoded, Parked> {
    let value = Bytes::copy_from_slice(value);
    let r = RecordIn {
        value: Some(&value),
        headers: &[],
        topic: "orders",
        partition: 0,
        offset: 7,
    };
    decode_framed(
        &r,
        format,
        |_| schema,
        &json_input(),
        &opts(max),
        JsonOptions::default(),
    )
}

fn reason(r: Result<Decoded, Parked>) -> &'static str {
    match r {
        Ok(d) => panic!("delivered {:?}", d.event.id),
        Err((reason, _)) => reason,
    }
}

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = frame::header(id).to_vec();
    v.extend_from_slice(body);
    v
}

#[test]
fn a_protobuf_record_is_delivered_as_its_json() {
    let f = fixtures::load();
    let s = resolved(InputFormat::Protobuf, "order");
    assert!(matches!(s, Resolved::Protobuf(_)));
    let d = decode(InputFormat::Protobuf, &f.record("order"), Some(&s), 1 << 20).unwrap();
    assert_eq!(d.event.id, "o-1");
    assert_eq!(d.event.event_type, "event");
    let body: serde_json::Value = serde_json::from_slice(&d.event.raw).unwrap();
    assert_eq!(body["big"], "9007199254740993");
    assert_eq!(body["at"], "2025-12-02T09:51:12.345Z");
}

#[test]
fn a_json_schema_record_is_delivered_byte_for_byte() {
    let f = fixtures::load();
    let s = resolved(InputFormat::JsonSchema, "invoice");
    assert!(matches!(s, Resolved::JsonSchema(_)));
    let record = f.record("invoice");
    let d = decode(InputFormat::JsonSchema, &record, Some(&s), 1 << 20).unwrap();
    assert_eq!(d.event.id, "i-1");
    assert_eq!(&d.event.raw[..], &record[frame::HEADER_BYTES..]);
}

#[test]
fn protobuf_parking_reasons() {
    let f = fixtures::load();
    let s = resolved(InputFormat::Protobuf, "order");
    let p = InputFormat::Protobuf;
    let record = f.record("order");
    let id = schema_id(&record).unwrap();
    // Bytes that do not decode.
    assert_eq!(
        reason(decode(p, &framed(id, &[0, 0x0a, 0x7f]), Some(&s), 1 << 20)),
        "malformed_protobuf"
    );
    // A broken message-index list.
    assert_eq!(
        reason(decode(p, &framed(id, &[]), Some(&s), 1 << 20)),
        "malformed_protobuf"
    );
    assert_eq!(
        reason(decode(p, &framed(id, &[8, 0, 0, 0, 0]), Some(&s), 1 << 20)),
        "malformed_protobuf"
    );
    // The id has no schema; or was not asked for (issue 54, item 11).
    assert_eq!(reason(decode(p, &record, None, 1 << 20)), "unknown_schema");
    let Err((_, m)) = decode(p, &record, None, 1 << 20) else {
        panic!()
    };
    assert!(m.contains("not asked of the schema registry"), "{m}");
    assert_eq!(
        reason(decode(p, &record, Some(&Resolved::Unknown), 1 << 20)),
        "unknown_schema"
    );
    // Not framed.
    assert_eq!(
        reason(decode(p, b"{\"id\":1}", Some(&s), 1 << 20)),
        "not_registry_framed"
    );
    // The JSON would pass max_event_bytes (the record itself does not).
    assert_eq!(
        reason(decode(p, &record, Some(&s), record.len() + 10)),
        "too_large"
    );
    // The decoded message has no id: read as `json` reads it.
    let (reason_, message) = decode(p, &f.record("refund"), Some(&s), 1 << 20).unwrap_err();
    assert_eq!(reason_, "missing_attribute", "{message}");
    // A nested message type ([1, 0]) with its own id.
    let d = decode(p, &f.record("reason"), Some(&s), 1 << 20).unwrap();
    assert_eq!(d.event.id, "r-1");
    // A schema that does not compile.
    let broken = Resolved::compile(p, "PROTOBUF", "syntax = \"proto3\"; message {", &[]);
    let (reason_, message) = decode(p, &record, Some(&broken), 1 << 20).unwrap_err();
    assert_eq!(reason_, "malformed_protobuf");
    assert!(
        message.contains(&format!("schema id {id}")) && message.contains("does not compile"),
        "{message}"
    );
}

#[test]
fn json_schema_parking_reasons() {
    let s = resolved(InputFormat::JsonSchema, "invoice");
    let j = InputFormat::JsonSchema;
    let id = schema_id(&fixtures::load().record("invoice")).unwrap();
    // Against the schema: the message says which part.
    let (reason_, message) = decode(
        j,
        &framed(id, br#"{"id":"i-2","qty":0}"#),
        Some(&s),
        1 << 20,
    )
    .unwrap_err();
    assert_eq!(reason_, "schema_invalid");
    assert!(
        message.contains(&format!("schema id {id}")) && message.contains("/qty"),
        "{message}"
    );
    assert!(
        !message.contains("i-2"),
        "the record is not quoted: {message}"
    );
    // Not JSON: as `json` refuses it.
    assert_eq!(
        reason(decode(j, &framed(id, b"{\"id\":"), Some(&s), 1 << 20)),
        "malformed_json"
    );
    assert_eq!(
        reason(decode(j, &framed(id, &[0xff, 0xfe]), Some(&s), 1 << 20)),
        "invalid_utf8"
    );
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert_eq!(
        reason(decode(j, &framed(id, deep.as_bytes()), Some(&s), 1 << 20)),
        "too_deep"
    );
    // A schema that does not compile.
    let broken = Resolved::compile(j, "JSON", r#"{"$ref": "elsewhere.json"}"#, &[]);
    assert_eq!(
        reason(decode(j, &framed(id, b"{}"), Some(&broken), 1 << 20)),
        "malformed_json_schema"
    );
}

#[test]
fn a_schema_of_another_type_is_wrong_schema_type() {
    let f = fixtures::load();
    // The fetcher compiles only what input.format reads.
    let avro_format = resolved(InputFormat::Avro, "order");
    assert!(matches!(&avro_format, Resolved::Other(k) if k == "PROTOBUF"));
    let (reason_, message) = decode(
        InputFormat::Avro,
        &f.record("order"),
        Some(&avro_format),
        1 << 20,
    )
    .unwrap_err();
    assert_eq!(reason_, "wrong_schema_type");
    assert!(
        message.contains("PROTOBUF") && message.contains("\"avro\""),
        "{message}"
    );
    assert!(matches!(
        resolved(InputFormat::Protobuf, "invoice"),
        Resolved::Other(k) if k == "JSON"
    ));
    assert!(matches!(
        Resolved::compile(InputFormat::JsonSchema, "AVRO", "\"string\"", &[]),
        Resolved::Other(k) if k == "AVRO"
    ));
    // A compiled schema of another format (never made by the fetcher, but
    // the decoder does not trust that).
    let proto = resolved(InputFormat::Protobuf, "order");
    assert_eq!(
        reason(decode(
            InputFormat::JsonSchema,
            &f.record("order"),
            Some(&proto),
            1 << 20
        )),
        "wrong_schema_type"
    );
}

#[test]
fn kinds_and_weights() {
    assert_eq!(schema_kind(None), "AVRO");
    assert_eq!(schema_kind(Some("protobuf")), "PROTOBUF");
    assert_eq!(expected_kind(InputFormat::JsonSchema), Some("JSON"));
    assert_eq!(expected_kind(InputFormat::Json), None);
    let s = resolved(InputFormat::Protobuf, "order");
    assert!(s.weight() > 1000, "{}", s.weight());
    assert_eq!(Resolved::Unknown.weight(), ENTRY_BYTES);
}
