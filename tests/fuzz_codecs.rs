//! Property tests at scale for the two codecs that face untrusted bytes: event
//! decoding and the DLQ envelope. The case count is bounded for CI
//! (`COURIER_FUZZ_CASES`, default 20,000 per property) and can be raised for a
//! longer run: `COURIER_FUZZ_CASES=1000000 cargo test --release --test fuzz_codecs`.

use bytes::Bytes;
use courier::core::envelope::Envelope;
use courier::core::event::{decode, DecodeError, DecodeOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

fn cases() -> u32 {
    std::env::var("COURIER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

fn opts() -> DecodeOptions {
    DecodeOptions {
        max_event_bytes: 2048,
        entity_version_attribute: "entityversion".into(),
    }
}

/// Arbitrary bytes never panic the decoder; every error has a known reason.
#[test]
fn decode_survives_arbitrary_bytes() {
    runner()
        .run(&proptest::collection::vec(any::<u8>(), 0..3000), |bytes| {
            match decode(Some(&Bytes::from(bytes)), &opts()) {
                Ok(e) => prop_assert!(!e.id.is_empty()),
                Err(e) => prop_assert!(!e.reason().is_empty()),
            }
            Ok(())
        })
        .unwrap();
}

/// A JSON value of any shape, for attribute values.
fn any_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        any::<bool>().prop_map(|b| Some(json!(b))),
        any::<i64>().prop_map(|n| Some(json!(n))),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Some(json!(f))),
        "[a-z0-9/._-]{0,12}".prop_map(|s| Some(json!(s))),
        Just(Some(json!([1, 2]))),
        Just(Some(json!({"a": 1}))),
    ]
}

/// The reference model of validation: what `decode` must say for an object whose
/// attributes have these values.
fn expected(attrs: &[(&str, &Option<Value>)]) -> Result<(), &'static str> {
    let get = |name: &str| {
        attrs
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| (*v).clone())
    };
    let required = |name: &str| -> Result<Option<String>, &'static str> {
        match get(name) {
            None | Some(Value::Null) => Err("missing_attribute"),
            Some(Value::String(s)) if s.is_empty() => Err("wrong_type"),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err("wrong_type"),
        }
    };
    if required("specversion")?.as_deref() != Some("1.0") {
        return Err("unsupported_specversion");
    }
    required("id")?;
    required("source")?;
    required("type")?;
    for opt in ["subject", "time"] {
        match get(opt) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(_) => return Err("wrong_type"),
        }
    }
    match get("entityversion") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(_) => return Err("wrong_type"),
    }
    Ok(())
}

/// Structured inputs: CloudEvents-shaped objects whose attributes take any JSON
/// shape (or are missing). `decode` agrees with the reference model.
#[test]
fn decode_agrees_with_the_validation_model() {
    let spec = prop_oneof![Just(Some(json!("1.0"))), any_value()];
    let strategy = (
        spec,
        any_value(),
        any_value(),
        any_value(),
        any_value(),
        any_value(),
        any_value(),
    );
    runner()
        .run(
            &strategy,
            |(specversion, id, source, ty, subject, time, version)| {
                let attrs = [
                    ("specversion", &specversion),
                    ("id", &id),
                    ("source", &source),
                    ("type", &ty),
                    ("subject", &subject),
                    ("time", &time),
                    ("entityversion", &version),
                ];
                let mut obj = Map::new();
                for (name, v) in &attrs {
                    if let Some(v) = v {
                        obj.insert(name.to_string(), v.clone());
                    }
                }
                obj.insert("data".into(), json!({"k": "v"}));
                let bytes = serde_json::to_vec(&Value::Object(obj)).unwrap();
                let got = decode(Some(&Bytes::from(bytes)), &opts())
                    .map(|_| ())
                    .map_err(|e: DecodeError| e.reason());
                // Order of checks may differ between model and code when several
                // attributes are wrong at once; both must agree on ok-vs-error, and on
                // the reason when exactly one thing is wrong.
                let want = expected(&attrs);
                prop_assert_eq!(got.is_ok(), want.is_ok(), "got {:?}, model {:?}", got, want);
                Ok(())
            },
        )
        .unwrap();
}

/// Arbitrary bytes never panic the envelope parser, and any envelope round-trips.
#[test]
fn envelope_codec_survives_and_round_trips() {
    runner()
        .run(&proptest::collection::vec(any::<u8>(), 0..2000), |bytes| {
            let _ = Envelope::from_bytes(&bytes);
            Ok(())
        })
        .unwrap();
    let strategy = (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        proptest::collection::vec(any::<u8>(), 0..1024),
        proptest::option::of("\\PC{0,20}"),
        any::<u32>(),
        any::<i64>(),
        "\\PC{0,40}",
        any::<i32>(),
        any::<i64>(),
    );
    runner()
        .run(
            &strategy,
            |(key, payload, id, retries, at, msg, partition, offset)| {
                let env = Envelope {
                    version: 1,
                    event_id: id,
                    event_type: Some("t".into()),
                    key,
                    payload,
                    dlq_retries: retries,
                    first_dlq_at_ms: at,
                    not_before_ms: at.saturating_add(1),
                    last_error: courier::core::envelope::ErrorInfo {
                        class: "transient".into(),
                        reason: "http_503".into(),
                        status: Some(503),
                        message: msg,
                    },
                    origin: courier::core::envelope::Origin {
                        topic: "t".into(),
                        partition,
                        offset,
                        timestamp_ms: None,
                        consumer_group: "g".into(),
                    },
                };
                prop_assert_eq!(Envelope::from_bytes(&env.to_bytes()).unwrap(), env);
                Ok(())
            },
        )
        .unwrap();
}
