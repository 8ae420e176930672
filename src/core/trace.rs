//! Trace context: the CloudEvents distributed-tracing extension (`traceparent`,
//! `tracestate` attributes) or Kafka headers of those names, forwarded to the API
//! as W3C Trace Context headers. A malformed `traceparent` is not forwarded (nor
//! its `tracestate`). Courier does not record spans of its own into the trace, so
//! it forwards the context unchanged, as the W3C recommendation asks of a
//! participant that does not record — except that a later version's
//! `traceparent` is forwarded as its version-00 form (its first 55 characters,
//! the version set to `00`): the tail of fields Courier does not know is
//! attacker-sized text it has no reason to pass on.
//!
//! Cost: the event's JSON is only parsed for the attributes when its bytes
//! contain `"traceparent"`; without a trace context nothing is done per event.

use crate::core::input::Header;
use serde::Deserialize;

/// A validated W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// The most of `tracestate` forwarded (W3C: at least 512 characters must be
/// propagated; 32 members of at most 256 bytes each is the ceiling).
pub(crate) const MAX_TRACESTATE: usize = 512;

/// Whether `v` is a `traceparent` a W3C participant may forward: version 00
/// exactly `00-<32 hex>-<16 hex>-<2 hex>`; a later version at least that prefix
/// (followed by `-` and more); lowercase hex; version `ff` and all-zero ids refused.
pub(crate) fn valid_traceparent(v: &str) -> bool {
    let b = v.as_bytes();
    let hex = |s: &[u8]| {
        s.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    if b.len() < 55 || !hex(&b[0..2]) || &b[0..2] == b"ff" {
        return false;
    }
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return false;
    }
    let (trace_id, parent_id, flags) = (&b[3..35], &b[36..52], &b[53..55]);
    if !hex(trace_id) || !hex(parent_id) || !hex(flags) {
        return false;
    }
    if trace_id.iter().all(|&c| c == b'0') || parent_id.iter().all(|&c| c == b'0') {
        return false;
    }
    match &b[0..2] {
        b"00" => b.len() == 55,
        _ => b.len() == 55 || b[55] == b'-',
    }
}

/// `tracestate` kept when it is printable ASCII and not too long.
fn valid_tracestate(v: &str) -> bool {
    !v.is_empty() && v.len() <= MAX_TRACESTATE && v.bytes().all(|c| (0x20..0x7f).contains(&c))
}

/// The form a valid `traceparent` is forwarded in: version 00, the 55
/// characters of `00-<trace-id>-<parent-id>-<flags>`. A later version's tail
/// (W3C: fields this version does not know, "parse the first 55 characters")
/// is never forwarded: it could carry control bytes or megabytes into the
/// API's request.
fn forwarded(tp: &str) -> String {
    format!("00{}", &tp[2..55])
}

fn context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceContext> {
    let tp = traceparent?.trim();
    if !valid_traceparent(tp) {
        return None;
    }
    Some(TraceContext {
        traceparent: forwarded(tp),
        tracestate: tracestate
            .map(str::trim)
            .filter(|s| valid_tracestate(s))
            .map(str::to_string),
    })
}

/// The last value of a header, as text.
fn header<'a>(headers: &'a [Header], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| std::str::from_utf8(v.as_deref()?).ok())
}

/// The trace context of an event: the CloudEvents attributes in its body (a
/// binary-mode event's are in the body Courier built from its `ce_` headers),
/// else the Kafka headers `traceparent` / `tracestate`.
pub(crate) fn extract(body: &[u8], headers: Option<&[Header]>) -> Option<TraceContext> {
    // Most events carry none: a SIMD search first, a parse only when found
    // (`windows().any()` here cost ~1.2 % of the CPU per event).
    if memchr::memmem::find(body, b"\"traceparent\"").is_some() {
        #[derive(Deserialize)]
        struct Attrs {
            traceparent: Option<String>,
            tracestate: Option<String>,
        }
        if let Ok(a) = serde_json::from_slice::<Attrs>(body) {
            if a.traceparent.is_some() {
                return context(a.traceparent.as_deref(), a.tracestate.as_deref());
            }
        }
    }
    let h = headers?;
    context(header(h, "traceparent"), header(h, "tracestate"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_validation() {
        assert!(valid_traceparent(TP));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(!valid_traceparent(bad), "{bad}");
        }
        // A later version may carry more fields.
        assert!(valid_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abc"
        ));
    }

    /// A later version may carry more fields, but what is forwarded is its
    /// version-00 form: 55 characters, whatever the tail (control bytes,
    /// megabytes).
    #[test]
    fn later_version_is_forwarded_as_its_version_00_prefix() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for tail in [
            String::new(),
            "-abc".to_string(),
            "-\r\nX-Injected: 1".to_string(),
            format!("-{}", "f".repeat(1 << 20)),
        ] {
            let tp = format!("cc-{id}{tail}");
            let headers: Vec<Header> = vec![("traceparent".into(), Some(Bytes::from(tp)))];
            let c = extract(b"{}", Some(&headers)).expect("a later version is forwarded");
            assert_eq!(c.traceparent, format!("00-{id}"));
            let body = serde_json::json!({"id": "1", "traceparent": format!("01-{id}{tail}")});
            let c = extract(body.to_string().as_bytes(), None).expect("from the attributes");
            assert_eq!(c.traceparent, format!("00-{id}"));
        }
    }

    #[test]
    fn from_attributes_or_headers() {
        let body = format!(r#"{{"id":"1","traceparent":"{TP}","tracestate":"a=1"}}"#);
        let c = extract(body.as_bytes(), None).expect("from the attributes");
        assert_eq!(c.traceparent, TP);
        assert_eq!(c.tracestate.as_deref(), Some("a=1"));
        let headers: Vec<Header> = vec![
            ("traceparent".into(), Some(Bytes::from(TP))),
            ("tracestate".into(), Some(Bytes::from("b=2\n"))),
        ];
        let c = extract(br#"{"id":"1"}"#, Some(&headers)).expect("from the headers");
        assert_eq!(c.tracestate.as_deref(), Some("b=2"));
        // A malformed one is not forwarded, and neither is its tracestate.
        let bad = r#"{"id":"1","traceparent":"00-xyz","tracestate":"a=1"}"#;
        assert_eq!(extract(bad.as_bytes(), Some(&headers)), None);
        assert_eq!(extract(br#"{"id":"1"}"#, None), None);
        let ctl: Vec<Header> = vec![
            ("traceparent".into(), Some(Bytes::from(TP))),
            ("tracestate".into(), Some(Bytes::from("a=\u{1}"))),
        ];
        assert_eq!(
            extract(b"{}", Some(&ctl)).and_then(|c| c.tracestate),
            None,
            "control characters: tracestate dropped"
        );
    }
}
