//! Records written by confluent-kafka's Python `ProtobufSerializer` against a
//! real registry (Apicurio Registry 2.6.13; `fixtures/make.py` says how), and
//! hostile bytes.

use super::*;
use crate::core::schema::fixtures::{self, Fixtures};
use proptest::prelude::*;

const MAX: usize = 1 << 20;

const ORDER_PROTO: &str = include_str!("../fixtures/order.proto");
const COMMON_PROTO: &str = include_str!("../fixtures/common.proto");

/// The schema of the fixtures' Protobuf records as the registry served it
/// (a base64 FileDescriptorProto, its reference too).
fn served(f: &Fixtures) -> ProtoSchema {
    let (text, refs) = f.schema_of("order");
    ProtoSchema::compile(&text, &refs).unwrap()
}

/// The same schema as `.proto` source (what a Confluent registry serves).
fn source() -> ProtoSchema {
    ProtoSchema::compile(
        ORDER_PROTO,
        &[Referenced {
            name: "common.proto".into(),
            schema: COMMON_PROTO.into(),
        }],
    )
    .unwrap()
}

fn json(s: &ProtoSchema, record: &[u8]) -> serde_json::Value {
    let body = &record[frame::HEADER_BYTES..];
    serde_json::from_slice(&s.to_json(body, MAX).unwrap()).unwrap()
}

#[test]
fn every_field_type_by_the_canonical_mapping() {
    let f = fixtures::load();
    let expected = serde_json::json!({
        "id": "o-1",
        "status": "SHIPPED",
        "big": "9007199254740993",
        "ubig": "18446744073709551615",
        "small": -5,
        "neg": -7,
        "price": 12.5,
        "ratio": 0.25,
        "paid": true,
        "blob": "AP8=",
        "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
        "counts": {"x": 1},
        "email": "a@b.c",
        "at": "2025-12-02T09:51:12.345Z",
        "total": {"currency": "EUR", "units": "42"},
        "tags": ["a", "b"],
        "note": ""
    });
    // From the registry's base64 descriptor and from the .proto source alike.
    assert_eq!(json(&served(&f), &f.record("order")), expected);
    assert_eq!(json(&source(), &f.record("order")), expected);
}

#[test]
fn fields_without_presence_are_written_at_their_defaults() {
    let f = fixtures::load();
    // Every field at its default: the serializer wrote no bytes at all.
    let record = f.record("order_empty");
    assert_eq!(&record[frame::HEADER_BYTES..], &[0]);
    assert_eq!(
        json(&served(&f), &record),
        serde_json::json!({
            "id": "", "status": "STATUS_UNSPECIFIED", "big": "0", "ubig": "0",
            "small": 0, "neg": 0, "price": 0.0, "ratio": 0.0, "paid": false,
            "blob": "", "lines": [], "counts": {}, "tags": []
        })
    );
}

#[test]
fn the_message_index_list_selects_the_type() {
    let f = fixtures::load();
    let s = served(&f);
    // [1]: the file's second message.
    assert_eq!(
        json(&s, &f.record("refund")),
        serde_json::json!({"orderId": "o-1", "reason": {"text": "late", "code": 3, "id": ""}})
    );
    // [1, 0]: the first message nested in the second (the serializer wrote
    // count 2, then 1 and 0, zig-zag).
    let reason = f.record("reason");
    assert_eq!(
        &reason[frame::HEADER_BYTES..frame::HEADER_BYTES + 3],
        &[4, 2, 0]
    );
    assert_eq!(
        json(&s, &reason),
        serde_json::json!({"text": "late", "code": -3, "id": "r-1"})
    );
    assert_eq!(s.message(&[0]).unwrap().full_name(), "shop.Order");
    assert_eq!(s.message(&[0, 0]).unwrap().full_name(), "shop.Order.Line");
    // Map entries are nested types of the descriptor: they count.
    assert_eq!(
        s.message(&[0, 1]).unwrap().full_name(),
        "shop.Order.CountsEntry"
    );
    for missing in [&[2][..], &[0, 2], &[1, 1], &[-1], &[0, -1], &[], &[1, 0, 0]] {
        assert!(
            matches!(s.message(missing), Err(ProtoError::NoSuchMessage(_))),
            "{missing:?}"
        );
    }
    // A record naming a message the schema does not have.
    assert!(matches!(
        s.to_json(&[2, 6, 0x0a, 0], MAX),
        Err(ProtoError::NoSuchMessage(v)) if v == vec![3]
    ));
}

#[test]
fn schemas_that_do_not_compile_are_named() {
    // An import the registry gave no reference for.
    let e = ProtoSchema::compile(ORDER_PROTO, &[]).unwrap_err();
    assert!(e.to_string().contains("common.proto"), "{e}");
    // Not Protobuf at all.
    let e = ProtoSchema::compile("{\"type\": \"record\"}", &[]).unwrap_err();
    assert!(matches!(e, ProtoError::Schema(_)), "{e}");
    // A type that is not defined.
    let e = ProtoSchema::compile("syntax = \"proto3\"; message A { B b = 1; }", &[]).unwrap_err();
    assert!(e.to_string().contains('B'), "{e}");
    // A reference may not take the root's name.
    let r = Referenced {
        name: ROOT.into(),
        schema: COMMON_PROTO.into(),
    };
    assert!(ProtoSchema::compile(ORDER_PROTO, &[r]).is_err());
}

#[test]
fn well_known_types_need_no_reference() {
    let s = ProtoSchema::compile(
        r#"syntax = "proto3";
        import "google/protobuf/duration.proto";
        import "google/protobuf/wrappers.proto";
        import "google/protobuf/struct.proto";
        message W {
          google.protobuf.Duration d = 1;
          google.protobuf.Int64Value n = 2;
          google.protobuf.Struct s = 3;
          google.protobuf.StringValue absent = 4;
        }"#,
        &[],
    )
    .unwrap();
    // d = 1.5 s; n = 7; s = {"k": true}.
    let bytes = [
        0x0a, 0x08, 0x08, 0x01, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01, // d
        0x12, 0x02, 0x08, 0x07, // n
        0x1a, 0x09, 0x0a, 0x07, 0x0a, 0x01, b'k', 0x12, 0x02, 0x20, 0x01, // s
    ];
    let mut body = vec![0];
    body.extend_from_slice(&bytes);
    let out: serde_json::Value = serde_json::from_slice(&s.to_json(&body, MAX).unwrap()).unwrap();
    assert_eq!(
        out,
        serde_json::json!({"d": "1.500s", "n": "7", "s": {"k": true}})
    );
}

#[test]
fn broken_bytes_are_refused_not_panicked_on() {
    let f = fixtures::load();
    let s = served(&f);
    let record = f.record("order");
    let body = &record[frame::HEADER_BYTES..];
    // Every truncation of a real record: an error (or, where the cut falls
    // between fields, a shorter message), never a panic.
    let mut refused = 0;
    for n in 0..body.len() {
        if s.to_json(&body[..n], MAX).is_err() {
            refused += 1;
        }
    }
    assert!(refused > body.len() / 2, "{refused} of {}", body.len());
    // A string field (1) whose length says 2^60 bytes.
    let huge = [
        0, 0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10,
    ];
    assert!(matches!(
        s.to_json(&huge, MAX),
        Err(ProtoError::Decode { .. })
    ));
    // A varint that never ends.
    assert!(matches!(
        s.to_json(
            &[0, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            MAX
        ),
        Err(ProtoError::Decode { .. })
    ));
    // Field number 0, a wire type 7.
    assert!(s.to_json(&[0, 0x00, 0x01], MAX).is_err());
    assert!(s.to_json(&[0, 0x0f], MAX).is_err());
    // A string that is not UTF-8.
    assert!(s.to_json(&[0, 0x0a, 0x02, 0xff, 0xfe], MAX).is_err());
    // A message-index list of absurd length.
    assert!(matches!(
        s.to_json(&[0xfe, 0xff, 0xff, 0xff, 0x0f], MAX),
        Err(ProtoError::Frame(frame::FrameError::TooManyIndexes(_)))
    ));
    // A Timestamp past year 9999: it has no RFC 3339 form.
    let far = [0, 0x7a, 0x07, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f];
    assert!(matches!(
        s.to_json(&far, MAX),
        Err(ProtoError::Json { .. }) | Err(ProtoError::Decode { .. })
    ));
}

#[test]
fn nesting_is_bounded() {
    let s = ProtoSchema::compile(
        "syntax = \"proto3\"; message Node { Node child = 1; string name = 2; }",
        &[],
    )
    .unwrap();
    // `depth` Nodes, each the child of the one before.
    let nested = |depth: usize| {
        let mut m: Vec<u8> = Vec::new();
        for _ in 0..depth {
            let mut outer = vec![0x0a];
            let mut len = m.len();
            loop {
                let b = (len & 0x7f) as u8;
                len >>= 7;
                if len == 0 {
                    outer.push(b);
                    break;
                }
                outer.push(b | 0x80);
            }
            outer.extend_from_slice(&m);
            m = outer;
        }
        let mut body = vec![0];
        body.extend_from_slice(&m);
        body
    };
    assert!(s.to_json(&nested(20), MAX).is_ok());
    // prost's recursion limit (100): refused, not a stack overflow.
    assert!(matches!(
        s.to_json(&nested(10_000), MAX),
        Err(ProtoError::Decode { .. })
    ));
}

#[test]
fn the_json_is_bounded_by_max_event_bytes() {
    let f = fixtures::load();
    let s = served(&f);
    // 1000 empty lines (2 bytes each) grow to 1000 objects of every field.
    let mut body = vec![0];
    for _ in 0..1000 {
        body.extend_from_slice(&[0x5a, 0x00]);
    }
    assert!(s.to_json(&body, MAX).is_ok());
    assert!(matches!(
        s.to_json(&body, 4096),
        Err(ProtoError::TooLarge(4096))
    ));
}

const COUNTED_PROTO: &str = r#"syntax = "proto3";
import "google/protobuf/any.proto";
message M {
  repeated bool flags = 1;
  repeated uint64 n = 2;
  repeated fixed32 f = 3;
  M child = 4;
  map<string, int32> m = 5;
  string s = 6;
  google.protobuf.Any any = 7;
}"#;

/// A varint.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Field `number` (wire type 2) holding `bytes`.
fn len_field(number: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = varint(number << 3 | 2);
    out.extend(varint(bytes.len() as u64));
    out.extend_from_slice(bytes);
    out
}

/// The values `bytes` (a message of `M`) decode to, as the count sees it:
/// the smallest limit it is not more than.
fn counted(s: &ProtoSchema, bytes: &[u8]) -> usize {
    let desc = s.message(&[0]).unwrap();
    let n = (0..1_000_000)
        .find(|&limit| !values::more_than(&desc, bytes, limit))
        .unwrap();
    assert!(values::more_than(&desc, bytes, n.saturating_sub(1)) || n == 0);
    n
}

/// Issue 54, item 15: the count of values over the wire bytes.
#[test]
fn the_values_of_a_record_are_counted_on_its_wire_bytes() {
    let s = ProtoSchema::compile(COUNTED_PROTO, &[]).unwrap();
    // A packed list: its tag and each element.
    let flags = len_field(1, &[1; 300]);
    assert_eq!(counted(&s, &flags), 301);
    // Varints end at a byte below 0x80; fixed32 are 4 bytes.
    let n: Vec<u8> = [1u64, 300, u64::MAX]
        .iter()
        .flat_map(|v| varint(*v))
        .collect();
    assert_eq!(counted(&s, &len_field(2, &n)), 4);
    assert_eq!(counted(&s, &len_field(3, &[0; 40])), 11);
    // Unpacked elements: a tag each.
    let unpacked: Vec<u8> = (0..50).flat_map(|_| [0x08, 0x01]).collect();
    assert_eq!(counted(&s, &unpacked), 50);
    // A string is one value, however long.
    assert_eq!(counted(&s, &len_field(6, &[b'x'; 10_000])), 1);
    // A sub-message's values count; so do a map's entries (key and value).
    let child = len_field(4, &flags);
    assert_eq!(counted(&s, &child), 302);
    let entry = [len_field(1, b"k"), vec![0x10, 0x05]].concat();
    let map: Vec<u8> = (0..10).flat_map(|_| len_field(5, &entry)).collect();
    assert_eq!(counted(&s, &map), 30);
    // Unknown fields are kept by the decoder: a tag each.
    let unknown: Vec<u8> = (0..70).flat_map(|_| [0xf8, 0x01, 0x01]).collect();
    assert_eq!(counted(&s, &unknown), 70);
    // An Any is decoded with the type its URL names.
    let any = [len_field(1, b"type.googleapis.com/M"), len_field(2, &flags)].concat();
    assert_eq!(counted(&s, &len_field(7, &any)), 1 + 2 + 301);
    // Bytes the count cannot read: no refusal (the decoder says what is wrong).
    assert_eq!(counted(&s, &[0x0a, 0x80]), 1);
    assert_eq!(counted(&s, &[0x0a, 0x05, 1, 1]), 1);
}

/// Issue 54, item 15: more values than one per 4 bytes of max_event_bytes is
/// refused before decoding (`too_large`). Seen failing on 45109fa: the
/// million packed bools were decoded (~56 MB) before the JSON cap refused
/// them (`TooLarge`, not `TooManyValues`), and 300,000 unknown fields
/// (12 MB decoded, a JSON of a few bytes) were delivered.
#[test]
fn a_record_of_more_values_than_allowed_is_refused_before_decoding() {
    let s = ProtoSchema::compile(COUNTED_PROTO, &[]).unwrap();
    let body = |m: &[u8]| [&[0u8][..], m].concat();
    let bools = body(&len_field(1, &vec![1; 1 << 20]));
    assert!(matches!(
        s.to_json(&bools, MAX),
        Err(ProtoError::TooManyValues(n)) if n == MAX / 4
    ));
    let unknown: Vec<u8> = (0..300_000).flat_map(|_| [0xf8, 0x01, 0x01]).collect();
    assert!(matches!(
        s.to_json(&body(&unknown), MAX),
        Err(ProtoError::TooManyValues(_))
    ));
    // At the limit: decoded.
    let fits = body(&len_field(1, &vec![1; MAX / 16 - 1]));
    assert!(s.to_json(&fits, MAX).is_ok());
    // 1,023 fixed32 zeros (and the list's tag): 2 KB of JSON.
    let fits = body(&len_field(3, &vec![0; 4 * 1023]));
    assert!(s.to_json(&fits, 4 * 1024).is_ok());
    let over = body(&len_field(3, &vec![0; 4 * 1024]));
    assert!(matches!(
        s.to_json(&over, 4 * 1024),
        Err(ProtoError::TooManyValues(1024))
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let f = fixtures::load();
        let s = served(&f);
        if let Ok(out) = s.to_json(&body, MAX) {
            // Whatever decodes is JSON.
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
        }
    }

    #[test]
    fn real_records_with_a_byte_changed_never_panic(at in 0usize..200, to in any::<u8>()) {
        let f = fixtures::load();
        let s = served(&f);
        let mut record = f.record("order");
        let i = frame::HEADER_BYTES + at % (record.len() - frame::HEADER_BYTES);
        record[i] = to;
        let _ = s.to_json(&record[frame::HEADER_BYTES..], MAX);
    }
}
