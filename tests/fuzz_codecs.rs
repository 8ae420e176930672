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

/// One thing wrong with an otherwise valid event (or nothing), and the reason
/// `decode` must give for it.
#[derive(Debug, Clone)]
enum Fault {
    None,
    /// `data` nested this deep (arrays), at depth 2 in the document.
    Nested(usize),
    /// A number in `data` with this exponent (beyond ±308 overflows an f64).
    Exponent(i32),
    /// A string in `data` with this (possibly broken) escape sequence.
    Escape(&'static str),
    /// A raw control character inside a string in `data`.
    RawControl(u8),
    /// The id is this string.
    Id(String),
    /// `data` padded so the event is `max_event_bytes + delta` bytes long.
    Size(i64),
}

fn fault() -> impl Strategy<Value = Fault> {
    let max = courier::core::event::MAX_DEPTH;
    prop_oneof![
        Just(Fault::None),
        (0..max + 20).prop_map(Fault::Nested),
        (-400i32..400).prop_map(Fault::Exponent),
        prop_oneof![
            Just("\\ud800"),
            Just("\\udfff"),
            Just("\\ud800\\u0041"),
            Just("\\ud83d\\ude00"),
            Just("\\u00e9"),
            Just("\\n"),
            Just("\\u12"),
            Just("\\x41"),
        ]
        .prop_map(Fault::Escape),
        (0u8..0x20).prop_map(Fault::RawControl),
        prop_oneof![
            "[!-~]{1,300}",
            "[ -~]{0,20}",
            "\\PC{1,20}",
            "[a-z]{0,5}[\\x00-\\x1f\\x7f][a-z]{0,5}",
        ]
        .prop_map(Fault::Id),
        (-40i64..40).prop_map(Fault::Size),
    ]
}

/// The event text for a fault, and the reason the model expects (None: valid).
fn faulty_event(fault: &Fault, max: usize) -> (Vec<u8>, Option<&'static str>) {
    let head = |id: &str| {
        format!(
            r#"{{"specversion":"1.0","id":{},"source":"/s","type":"t","data":"#,
            serde_json::to_string(id).unwrap()
        )
    };
    let doc = |data: String| format!("{}{data}}}", head("a")).into_bytes();
    match fault {
        Fault::None => (doc("{}".into()), None),
        Fault::Nested(k) => {
            let ok = *k + 2 <= courier::core::event::MAX_DEPTH;
            let data = format!("{}0{}", "[".repeat(*k), "]".repeat(*k));
            let d = doc(data);
            let want = if d.len() > max {
                Some("too_large")
            } else if ok {
                None
            } else {
                Some("too_deep")
            };
            (d, want)
        }
        Fault::Exponent(e) => {
            let finite = format!("1.5e{e}").parse::<f64>().is_ok_and(f64::is_finite);
            (
                doc(format!("[1.5e{e}]")),
                (!finite).then_some("number_out_of_range"),
            )
        }
        Fault::Escape(esc) => {
            let want = match *esc {
                "\\ud83d\\ude00" | "\\u00e9" | "\\n" => None,
                // Not an escape, or \u without four hex digits: a syntax error.
                "\\x41" | "\\u12" => Some("malformed_json"),
                // A surrogate without its pair: valid syntax, not a string.
                _ => Some("invalid_string"),
            };
            (doc(format!("{{\"k\":\"a{esc}b\"}}")), want)
        }
        Fault::RawControl(c) => {
            let mut d = doc("\"a_b\"".into());
            let at = d.iter().rposition(|b| *b == b'_').unwrap();
            d[at] = *c;
            (d, Some("malformed_json"))
        }
        Fault::Id(id) => {
            let valid =
                id.len() <= 256 && !id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic());
            let d = format!("{}{{}}}}", head(id)).into_bytes();
            let want = if d.len() > max {
                Some("too_large")
            } else if id.is_empty() {
                Some("wrong_type")
            } else if valid {
                None
            } else {
                Some("invalid_id")
            };
            (d, want)
        }
        Fault::Size(delta) => {
            let bare = doc("\"\"".into()).len() as i64;
            let pad = (max as i64 + delta - bare).max(0) as usize;
            let d = doc(format!("\"{}\"", "x".repeat(pad)));
            let want = (d.len() > max).then_some("too_large");
            (d, want)
        }
    }
}

/// Hostile but well-formed-looking inputs: deep nesting, huge numbers, broken
/// escapes, control characters, ids unfit for a header, sizes at the limit.
/// `decode` gives exactly the reason the model names — not only ok-vs-error.
#[test]
fn decode_names_the_one_thing_wrong() {
    let o = opts();
    runner()
        .run(&fault(), |f| {
            let (bytes, want) = faulty_event(&f, o.max_event_bytes);
            let got = decode(Some(&Bytes::from(bytes.clone())), &o)
                .map(|_| ())
                .map_err(|e| e.reason());
            prop_assert_eq!(
                got,
                want.map_or(Ok(()), Err),
                "{:?}: {}",
                f,
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            );
            Ok(())
        })
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
                    entity_key: None,
                    route: None,
                    payload,
                    omitted: None,
                    origin_headers: Vec::new(),
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

/// Any combination of DLQ-envelope fields read back from a topic: `check` says
/// `invalid_envelope` exactly when the reference model finds the record
/// implausible, and never panics on extreme values.
#[test]
fn envelope_check_agrees_with_the_model() {
    use courier::core::envelope::MAX_PLAUSIBLE_DLQ_RETRIES;
    let now: i64 = 1_700_000_000_000;
    let wait: i64 = 120_000;
    let near = |spread: i64| prop_oneof![any::<i64>(), (now - spread..now + 2 * spread)];
    let strategy = (
        prop_oneof![
            any::<u32>(),
            0u32..10,
            Just(MAX_PLAUSIBLE_DLQ_RETRIES),
            Just(MAX_PLAUSIBLE_DLQ_RETRIES + 1)
        ],
        near(wait),
        near(wait),
        prop_oneof![any::<i32>(), 0i32..12],
        prop_oneof![any::<i64>(), 0i64..1000],
    );
    runner()
        .run(&strategy, |(retries, not_before, first, partition, offset)| {
            let mut env = Envelope::from_bytes(
                br#"{"version":1,"event_id":"e","event_type":"t","key":null,"payload":"",
                    "dlq_retries":0,"first_dlq_at_ms":0,"not_before_ms":0,
                    "last_error":{"class":"transient","reason":"timeout","status":null,"message":""},
                    "origin":{"topic":"t","partition":0,"offset":0,"timestamp_ms":null,"consumer_group":"g"}}"#,
            )
            .unwrap();
            env.dlq_retries = retries;
            env.not_before_ms = not_before;
            env.first_dlq_at_ms = first;
            env.origin.partition = partition;
            env.origin.offset = offset;
            let plausible = partition >= 0
                && offset >= 0
                && retries <= MAX_PLAUSIBLE_DLQ_RETRIES
                && (0..=now + wait).contains(&first);
            let got = env.check(now, wait).map_err(|e| e.reason());
            prop_assert_eq!(got, if plausible { Ok(()) } else { Err("invalid_envelope") });
            Ok(())
        })
        .unwrap();
}
