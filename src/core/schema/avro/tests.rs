//! Each Avro type to its JSON, with bytes written by the apache-avro crate's
//! own encoder from the same schema.

use super::calendar::{push_date, push_timestamp};
use super::decimal::unscaled_digits;
use super::text::push_float;
use super::*;
use apache_avro::types::Value as V;
use apache_avro::{Days, Decimal, Duration, Millis, Months};

const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "n", "type": "null"},
    {"name": "ok", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "b", "type": "bytes"},
    {"name": "s", "type": "string"},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "e", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
    {"name": "u1", "type": ["null", "string"]},
    {"name": "u2", "type": ["null", "long"]},
    {"name": "a", "type": {"type": "array", "items": "int"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "child", "type": {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]}},
    {"name": "again", "type": "Line"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "tiny", "type": {"type": "fixed", "name": "Dec", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}},
    {"name": "when", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}
  ]
}"#;

/// The output limit of the tests that are not about it (the default
/// `max_event_bytes`).
const MAX: usize = 1 << 20;

/// 2026-12-02T10:11:12.345Z in milliseconds.
const TS_MS: i64 = 1_796_206_272_345;

fn record() -> V {
    let f = |n: &str, v: V| (n.to_string(), v);
    V::Record(vec![
        f("n", V::Null),
        f("ok", V::Boolean(true)),
        f("i", V::Int(-7)),
        f("l", V::Long(9_007_199_254_740_993)),
        f("f", V::Float(1.5)),
        f("d", V::Double(-0.25)),
        f("b", V::Bytes(vec![0, 1, 2, 0xff])),
        f("s", V::String("é \"q\"\n".into())),
        f("fx", V::Fixed(4, b"abcd".to_vec())),
        f("e", V::Enum(1, "GREEN".into())),
        f("u1", V::Union(1, Box::new(V::String("x".into())))),
        f("u2", V::Union(0, Box::new(V::Null))),
        f("a", V::Array(vec![V::Int(1), V::Int(2)])),
        f(
            "m",
            V::Map(
                [
                    ("z".to_string(), V::String("1".into())),
                    ("a".to_string(), V::String("2".into())),
                ]
                .into(),
            ),
        ),
        f("child", V::Record(vec![f("sku", V::String("A-1".into()))])),
        f("again", V::Record(vec![f("sku", V::String("B-2".into()))])),
        // -1234 unscaled (two's complement 0xfb2e), scale 2: -12.34.
        f("price", V::Decimal(Decimal::from(vec![0xfb, 0x2e]))),
        // 5 unscaled in 8 bytes, scale 4: 0.0005.
        f(
            "tiny",
            V::Decimal(Decimal::from(vec![0, 0, 0, 0, 0, 0, 0, 5])),
        ),
        f("day", V::Date(20_789)),
        f("tm", V::TimeMillis(36_672_345)),
        f("tu", V::TimeMicros(36_672_345_678)),
        f("tsm", V::TimestampMillis(TS_MS)),
        f("tsu", V::TimestampMicros(TS_MS * 1000 + 678)),
        f("ltm", V::LocalTimestampMillis(TS_MS)),
        f(
            "dur",
            V::Duration(Duration::new(Months::new(1), Days::new(2), Millis::new(3))),
        ),
        f("when", V::Union(1, Box::new(V::TimestampMillis(-1)))),
    ])
}

fn encoded() -> (AvroSchema, Vec<u8>) {
    let schema = Schema::parse_str(SCHEMA).unwrap();
    let bytes = apache_avro::to_avro_datum(&schema, record()).unwrap();
    (AvroSchema::parse(SCHEMA, &[]).unwrap(), bytes)
}

fn json(opts: JsonOptions) -> serde_json::Value {
    let (schema, bytes) = encoded();
    let text = schema.to_json(&bytes, opts, MAX).unwrap();
    serde_json::from_slice(&text).unwrap()
}

#[test]
fn every_type_by_the_documented_mapping() {
    let j = json(JsonOptions::default());
    let expect = serde_json::json!({
        "n": null, "ok": true, "i": -7, "l": 9_007_199_254_740_993_i64, "f": 1.5, "d": -0.25,
        "b": "AAEC/w==", "s": "é \"q\"\n", "fx": "YWJjZA==", "e": "GREEN",
        "u1": "x", "u2": null, "a": [1, 2], "m": {"a": "2", "z": "1"},
        "child": {"sku": "A-1"}, "again": {"sku": "B-2"},
        "price": "-12.34", "tiny": "0.0005",
        "day": "2026-12-02", "tm": "10:11:12.345", "tu": "10:11:12.345678",
        "tsm": "2026-12-02T10:11:12.345Z", "tsu": "2026-12-02T10:11:12.345678Z",
        "ltm": "2026-12-02T10:11:12.345",
        "dur": {"months": 1, "days": 2, "millis": 3},
        "when": "1969-12-31T23:59:59.999Z",
    });
    assert_eq!(j, expect);
}

#[test]
fn fields_keep_schema_order_and_text_is_exact() {
    let (schema, bytes) = encoded();
    let text =
        String::from_utf8(schema.to_json(&bytes, JsonOptions::default(), MAX).unwrap()).unwrap();
    assert!(
        text.starts_with(r#"{"n":null,"ok":true,"i":-7,"l":9007199254740993,"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#""when":"1969-12-31T23:59:59.999Z"}"#),
        "{text}"
    );
}

#[test]
fn epoch_and_number_modes() {
    let j = json(JsonOptions {
        decimal: DecimalMode::Number,
        timestamps: TimestampMode::Epoch,
    });
    assert_eq!(j["price"], serde_json::json!(-12.34));
    assert_eq!(j["day"], 20_789);
    assert_eq!(j["tm"], 36_672_345);
    assert_eq!(j["tsm"], TS_MS);
    assert_eq!(j["tsu"], TS_MS * 1000 + 678);
    assert_eq!(j["when"], -1);
    let (schema, bytes) = encoded();
    let text = String::from_utf8(
        schema
            .to_json(
                &bytes,
                JsonOptions {
                    decimal: DecimalMode::Number,
                    timestamps: TimestampMode::Epoch,
                },
                MAX,
            )
            .unwrap(),
    )
    .unwrap();
    // The digits as they are, not a float's rounding.
    assert!(text.contains(r#""price":-12.34,"tiny":0.0005,"#), "{text}");
}

#[test]
fn decimals_keep_every_digit() {
    // 2^127 - 1 and -2^127 as 16-byte two's complement.
    let mut max = vec![0xff; 16];
    max[0] = 0x7f;
    assert_eq!(
        unscaled_digits(&max),
        "170141183460469231731687303715884105727"
    );
    let mut min = vec![0; 16];
    min[0] = 0x80;
    assert_eq!(
        unscaled_digits(&min),
        "-170141183460469231731687303715884105728"
    );
    assert_eq!(unscaled_digits(&[0xff]), "-1");
    assert_eq!(unscaled_digits(&[0x00, 0x00]), "0");
    assert_eq!(unscaled_digits(&[]), "0");
    assert_eq!(unscaled_digits(&[0x3b, 0x9a, 0xca, 0x00]), "1000000000");
    assert_eq!(decimal::placed("-5", 3), "-0.005");
    assert_eq!(decimal::placed("12300", 2), "123.00");
    assert_eq!(decimal::placed("7", 0), "7");
    assert_eq!(decimal::placed("-7", -3), "-7000");
    assert_eq!(decimal::placed("0", -3), "0");
    assert_eq!(decimal::placed("0", 2), "0.00");
}

#[test]
fn calendar_dates_across_eras() {
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(-1), (1969, 12, 31));
    assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    assert_eq!(civil_from_days(-719_468), (0, 3, 1));
    assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    let mut out = Limited::new(MAX, 0);
    push_date(&mut out, 10_000, 1, 1).unwrap();
    push_date(&mut out, -1, 1, 1).unwrap();
    assert_eq!(
        String::from_utf8(out.buf).unwrap(),
        "+010000-01-01-000001-01-01"
    );
    // Extreme timestamps do not overflow.
    let mut out = Limited::new(MAX, 0);
    push_timestamp(&mut out, i64::MIN, 1_000_000_000, 9, true).unwrap();
    push_timestamp(&mut out, i64::MAX, 1, 0, true).unwrap();
    assert!(!out.buf.is_empty());
}

#[test]
fn floats_that_json_cannot_hold_are_strings() {
    let mut out = Limited::new(MAX, 0);
    push_float(&mut out, f64::NAN, "NaN".into()).unwrap();
    push_float(&mut out, f64::INFINITY, "inf".into()).unwrap();
    push_float(&mut out, f64::NEG_INFINITY, "-inf".into()).unwrap();
    push_float(&mut out, 2.0, 2.0f64.to_string()).unwrap();
    assert_eq!(
        String::from_utf8(out.buf).unwrap(),
        r#""NaN""Infinity""-Infinity"2.0"#
    );
}

#[test]
fn bytes_that_do_not_decode_are_refused() {
    let (schema, bytes) = encoded();
    // Cut short.
    assert!(matches!(
        schema.to_json(&bytes[..bytes.len() - 3], JsonOptions::default(), MAX),
        Err(AvroError::Decode(_))
    ));
    // Left over.
    let mut more = bytes.clone();
    more.push(0);
    assert!(matches!(
        schema.to_json(&more, JsonOptions::default(), MAX),
        Err(AvroError::Trailing(1))
    ));
    // An enum index past its symbols.
    let e = AvroSchema::parse(r#"{"type":"enum","name":"E","symbols":["A"]}"#, &[]).unwrap();
    assert!(e.to_json(&[0x08], JsonOptions::default(), MAX).is_err());
    // A string length far past the record.
    let s = AvroSchema::parse(r#""string""#, &[]).unwrap();
    assert!(s
        .to_json(&[0xfe, 0xff, 0xff, 0xff, 0x0f], JsonOptions::default(), MAX)
        .is_err());
    assert!(matches!(
        AvroSchema::parse("{not a schema", &[]),
        Err(AvroError::Schema(_))
    ));
}

#[test]
fn references_resolve() {
    let line = r#"{"type":"record","name":"Line","namespace":"shop","fields":[{"name":"sku","type":"string"}]}"#;
    let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"line","type":"shop.Line"}]}"#;
    let (parsed, list) = Schema::parse_str_with_list(order, [line]).unwrap();
    let value = V::Record(vec![(
        "line".into(),
        V::Record(vec![("sku".into(), V::String("A".into()))]),
    )]);
    let bytes = apache_avro::to_avro_datum_schemata(&parsed, list.iter().collect(), value).unwrap();
    let schema = AvroSchema::parse(order, &[line]).unwrap();
    assert_eq!(
        schema.to_json(&bytes, JsonOptions::default(), MAX).unwrap(),
        br#"{"line":{"sku":"A"}}"#
    );
}

#[test]
fn a_recursive_schema_is_bounded() {
    let s = r#"{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}"#;
    let schema = AvroSchema::parse(s, &[]).unwrap();
    // 300 levels of `next`: union branch 1 (zig-zag 2) each, then null (branch 0).
    let mut bytes = vec![2u8; 300];
    bytes.push(0);
    assert!(schema.to_json(&bytes, JsonOptions::default(), MAX).is_err());
    assert_eq!(
        schema
            .to_json(&[2, 0], JsonOptions::default(), MAX)
            .unwrap(),
        br#"{"next":{"next":null}}"#
    );
}
