//! Issue 42: Avro decoding is bounded like Protobuf's. Each of the first
//! three was seen failing before the bounds: the scale of 2^40 aborted the
//! test process ("memory allocation of 1099511627775 bytes failed", in
//! `push_decimal`), the 1 MiB decimal was still converting when `timeout 60`
//! killed it, the array of null grew its output to 2 GiB and aborted under
//! `ulimit -v 2000000` ("memory allocation of 2147502080 bytes failed").

use super::*;
use apache_avro::types::Value as V;

/// The default `max_event_bytes`.
const MAX: usize = 1 << 20;

/// A zig-zag varint.
fn varint(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// `bytes` as Avro writes them: the length, then the bytes.
fn prefixed(b: &[u8]) -> Vec<u8> {
    let mut out = varint(b.len() as i64);
    out.extend_from_slice(b);
    out
}

/// A big-decimal's bytes: the unscaled value (length-prefixed), then the scale.
fn big_decimal(unscaled: &[u8], scale: i64) -> Vec<u8> {
    let mut inner = prefixed(unscaled);
    inner.extend(varint(scale));
    prefixed(&inner)
}

const BIG: &str = r#"{"type":"bytes","logicalType":"big-decimal"}"#;

fn reason(error: AvroError) -> &'static str {
    crate::core::schema::SchemaError::Avro { id: 1, error }.reason()
}

#[test]
fn a_big_decimal_with_a_scale_of_2_40_is_parked_before_a_digit_is_written() {
    let s = AvroSchema::parse(
        r#"{"type":"record","name":"O","fields":[{"name":"id","type":"string"},
            {"name":"amount","type":{"type":"bytes","logicalType":"big-decimal"}}]}"#,
        &[],
    )
    .unwrap();
    let mut body = prefixed(b"ord-1");
    body.extend(big_decimal(&[1], 1 << 40));
    let err = s.to_json(&body, JsonOptions::default(), MAX).unwrap_err();
    assert!(
        matches!(
            err,
            AvroError::Decimal {
                kind: "big-decimal",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "a big-decimal has a scale of 1099511627776: decimals are written with at most \
         1000 digits, scales -999 to 999"
    );
    assert_eq!(reason(err), "decimal_out_of_range");
    // Either sign, and a `decimal` whose schema says so.
    let b = AvroSchema::parse(BIG, &[]).unwrap();
    for scale in [-(1 << 40), i64::MIN, i64::MAX, 1000, -1000] {
        assert!(matches!(
            b.to_json(&big_decimal(&[1], scale), JsonOptions::default(), MAX),
            Err(AvroError::Decimal { .. })
        ));
    }
    let d = AvroSchema::parse(
        r#"{"type":"bytes","logicalType":"decimal","precision":1099511627776,"scale":1099511627776}"#,
        &[],
    )
    .unwrap();
    assert!(matches!(
        d.to_json(&prefixed(&[1]), JsonOptions::default(), MAX),
        Err(AvroError::Decimal {
            kind: "decimal",
            ..
        })
    ));
}

#[test]
fn a_one_mib_decimal_is_parked_before_it_is_converted() {
    let s = AvroSchema::parse(
        r#"{"type":"bytes","logicalType":"decimal","precision":4000000,"scale":2}"#,
        &[],
    )
    .unwrap();
    let mut unscaled = vec![0x5au8; 1 << 20];
    unscaled[0] = 0x7f;
    let err = s
        .to_json(&prefixed(&unscaled), JsonOptions::default(), 4 << 20)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a decimal has an unscaled value of 1048576 bytes (more than 1000 digits): decimals \
         are written with at most 1000 digits, scales -999 to 999"
    );
    assert_eq!(reason(err), "decimal_out_of_range");
    // A 1 MiB fixed holding a small number (its sign extended) is that number.
    let f = AvroSchema::parse(
        r#"{"type":"fixed","name":"F","size":1048576,"logicalType":"decimal","precision":9,"scale":2}"#,
        &[],
    )
    .unwrap();
    let mut minus_two = vec![0xffu8; 1 << 20];
    minus_two[(1 << 20) - 1] = 0xfe;
    assert_eq!(
        f.to_json(&minus_two, JsonOptions::default(), MAX).unwrap(),
        br#""-0.02""#
    );
}

/// The big-decimal `text` (digits, a `-`, an exponent) as apache-avro
/// encodes it.
fn encoded_big(text: &str) -> Vec<u8> {
    let v: apache_avro::BigDecimal = text.parse().unwrap();
    apache_avro::to_avro_datum(&Schema::BigDecimal, V::BigDecimal(v)).unwrap()
}

#[test]
fn decimals_of_up_to_1000_digits_are_written_and_longer_ones_parked() {
    let b = AvroSchema::parse(BIG, &[]).unwrap();
    let out = |text: &str, mode: DecimalMode| {
        let opts = JsonOptions {
            decimal: mode,
            ..JsonOptions::default()
        };
        b.to_json(&encoded_big(text), opts, MAX)
    };
    let nines = "9".repeat(1000);
    // 10^1000 - 1 and 10^1000 take 416 bytes each: the digits decide.
    assert_eq!(out(&nines, DecimalMode::Number).unwrap(), nines.as_bytes());
    let ten_1000 = format!("1{}", "0".repeat(1000));
    assert!(matches!(
        out(&ten_1000, DecimalMode::Number),
        Err(AvroError::Decimal { .. })
    ));
    assert_eq!(
        out(&format!("-{nines}"), DecimalMode::String).unwrap(),
        format!("\"-{nines}\"").as_bytes()
    );
    // Scale 999: a 1 is 0.000…1, 1,000 digits; 10 at scale 999 as well.
    let tiny = format!("0.{}1", "0".repeat(998));
    assert_eq!(out("1E-999", DecimalMode::Number).unwrap(), tiny.as_bytes());
    // Scale −999: a 1 is 1 and 999 zeros; 10 is 1,001 digits.
    let huge = format!("1{}", "0".repeat(999));
    assert_eq!(out("1E+999", DecimalMode::Number).unwrap(), huge.as_bytes());
    assert!(matches!(
        b.to_json(&big_decimal(&[10], -999), JsonOptions::default(), MAX),
        Err(AvroError::Decimal { .. })
    ));
    // 999 digits placed at scale 999: 0. and 999 digits, 1,000 digits.
    let frac = "7".repeat(999);
    assert_eq!(
        out(&format!("0.{frac}"), DecimalMode::Number).unwrap(),
        format!("0.{frac}").as_bytes()
    );
    // Zero at a negative scale is 0, not 000.
    assert_eq!(
        b.to_json(&big_decimal(&[0], -3), JsonOptions::default(), MAX)
            .unwrap(),
        br#""0""#
    );
}

proptest::proptest! {
    /// Random decimals (up to 1,000 digits, either sign, scales −999 to
    /// 999 within the 1,000 digits) written by apache-avro come out as
    /// bigdecimal's plain text of them.
    #[test]
    fn decimals_are_their_plain_text(
        digits in "[1-9][0-9]{0,999}",
        negative in proptest::bool::ANY,
        scale in -999i64..=999,
    ) {
        let placed = if scale >= 0 {
            digits.len().max(scale as usize + 1)
        } else {
            digits.len() + scale.unsigned_abs() as usize
        };
        proptest::prop_assume!(placed <= 1000);
        let text = format!("{}{digits}E{}", if negative { "-" } else { "" }, -scale);
        let want: apache_avro::BigDecimal = text.parse().unwrap();
        let b = AvroSchema::parse(BIG, &[]).unwrap();
        let opts = JsonOptions { decimal: DecimalMode::Number, ..JsonOptions::default() };
        let got = b.to_json(&encoded_big(&text), opts, MAX).unwrap();
        proptest::prop_assert_eq!(String::from_utf8(got).unwrap(), want.to_plain_string());
    }
}

#[test]
fn an_array_of_null_blocks_stops_at_max_event_bytes() {
    let s = AvroSchema::parse(r#"{"type":"array","items":"null"}"#, &[]).unwrap();
    // 1 MiB of blocks of 1,024 nulls (2 bytes each), then the end: 2.6 GB of
    // JSON unbounded.
    let mut body = Vec::new();
    while body.len() < (1 << 20) - 1 {
        body.extend(varint(1024));
    }
    body.push(0);
    let err = s.to_json(&body, JsonOptions::default(), MAX).unwrap_err();
    assert!(matches!(err, AvroError::TooLarge(MAX)), "{err:?}");
    assert_eq!(reason(err), "too_large");
    // One block counting more than could fit is refused before an item is
    // written; as many as fit are written, in one block or many.
    for n in [1i64 << 62, (MAX as i64 + 2) / 3 + 1, -(1 << 40)] {
        let mut block = varint(n);
        if n < 0 {
            block.extend(varint(0));
        }
        block.push(0);
        assert!(matches!(
            s.to_json(&block, JsonOptions::default(), MAX),
            Err(AvroError::TooLarge(MAX))
        ));
    }
    let mut body = varint(5000);
    body.push(0);
    let text = s.to_json(&body, JsonOptions::default(), MAX).unwrap();
    assert_eq!(text.len(), 2 + 5000 * 5 - 1);
    let mut blocks = Vec::new();
    for _ in 0..3 {
        blocks.extend(varint(2));
    }
    blocks.push(0);
    assert_eq!(
        s.to_json(&blocks, JsonOptions::default(), 40).unwrap(),
        b"[null,null,null,null,null,null]"
    );
    assert!(matches!(
        s.to_json(&blocks, JsonOptions::default(), 30),
        Err(AvroError::TooLarge(30))
    ));
    // Empty records nested in arrays are bounded the same way.
    let e = AvroSchema::parse(
        r#"{"type":"array","items":{"type":"array","items":{"type":"record","name":"E","fields":[]}}}"#,
        &[],
    )
    .unwrap();
    let mut nested = Vec::new();
    while nested.len() < (1 << 20) - 8 {
        nested.extend(varint(1));
        nested.extend(varint(1000));
        nested.extend(varint(0));
    }
    nested.push(0);
    assert!(matches!(
        e.to_json(&nested, JsonOptions::default(), MAX),
        Err(AvroError::TooLarge(MAX))
    ));
}

#[test]
fn every_kind_of_output_stops_at_the_limit() {
    let max = 64 * 1024;
    let too_large = |schema: &str, body: &[u8]| {
        let s = AvroSchema::parse(schema, &[]).unwrap();
        let r = s.to_json(body, JsonOptions::default(), max);
        assert!(
            matches!(r, Err(AvroError::TooLarge(m)) if m == max),
            "{schema}: {r:?}"
        );
    };
    // Escapes: 40,000 control characters are 240,000 bytes of JSON.
    too_large(r#""string""#, &prefixed(&[1u8; 40_000]));
    // Base64 of 60,000 bytes is 80,000.
    too_large(r#""bytes""#, &prefixed(&[0u8; 60_000]));
    // Map entries, however they are ordered.
    let mut map = varint(2);
    for k in [b"b", b"a"] {
        map.extend(prefixed(k));
        map.extend(prefixed(&[b'x'; 40_000]));
    }
    map.push(0);
    too_large(r#"{"type":"map","values":"string"}"#, &map);
    // Under the limit, the same map is written in key order.
    let s = AvroSchema::parse(r#"{"type":"map","values":"string"}"#, &[]).unwrap();
    let text = s.to_json(&map, JsonOptions::default(), 80_100).unwrap();
    assert!(text.starts_with(br#"{"a":"xxx"#));
    assert_eq!(text.len(), 2 * (4 + 40_002) + 3);
}

const HOSTILE: &str = r#"{"type":"record","name":"H","fields":[
  {"name":"a","type":{"type":"array","items":["null","string",{"type":"record","name":"E","fields":[]}]}},
  {"name":"m","type":{"type":"map","values":{"type":"array","items":"null"}}},
  {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"b","type":{"type":"bytes","logicalType":"big-decimal"}},
  {"name":"e","type":{"type":"array","items":"E"}}
]}"#;

proptest::proptest! {
    /// Whatever the bytes, the decoder answers within the limit: JSON of at
    /// most `max` bytes, or an error.
    #[test]
    fn arbitrary_bytes_stay_within_the_limit(
        body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        max in 0usize..2000,
    ) {
        let s = AvroSchema::parse(HOSTILE, &[]).unwrap();
        if let Ok(out) = s.to_json(&body, JsonOptions::default(), max) {
            proptest::prop_assert!(out.len() <= max);
            proptest::prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
        }
    }
}
