use super::excerpt::*;
use super::failure::*;
use super::*;
use rustls::{AlertDescription, CertificateError};
use std::error::Error as StdError;
use std::fmt;
use std::io;

/// A request the HTTP stack refuses to build (here: a header value with a
/// line break) is the event's fault: permanent, and not the API's business.
#[test]
fn a_request_that_cannot_be_built_is_permanent_and_not_the_apis() {
    let err = reqwest::Client::new()
        .post("http://127.0.0.1:1/events")
        .header("Idempotency-Key", "a\nb")
        .build()
        .expect_err("a line break in a header value");
    let t = classify_reqwest(&err);
    assert_eq!(t.kind, TransportFailure::Request);
    assert_eq!(
        t.kind.class(),
        crate::core::classify::FailureClass::Permanent
    );
    assert!(!t.kind.reached_the_api());
    assert!(t.detail.is_empty(), "no URL in the detail: {}", t.detail);
}

/// An error with a source, like hyper-util's and reqwest's layers.
#[derive(Debug)]
struct Layer(&'static str, Box<dyn StdError + Send + Sync>);
impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
impl StdError for Layer {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.1)
    }
}

fn wrapped_tls(e: rustls::Error) -> Layer {
    // tokio-rustls reports rustls errors as `io::Error(InvalidData, e)`.
    Layer(
        "client error (Connect)",
        Box::new(io::Error::new(io::ErrorKind::InvalidData, e)),
    )
}

fn kind(e: &(dyn StdError + 'static), connecting: bool, timed_out: bool) -> TransportFailure {
    classify(e, connecting, timed_out).0
}

#[test]
fn secrets_are_redacted_from_excerpts_and_never_cut_into_a_prefix() {
    let tok = b"tok-SECRET-123456".to_vec();
    let secrets = vec![tok.clone()];
    let e =
        redacted_excerpt(b"denied: Bearer tok-SECRET-123456 (echo)", 64, &secrets).expect("text");
    assert_eq!(e, "denied: Bearer [redacted] (echo)");
    // A secret straddling the cut is redacted whole, not left as a prefix.
    let body = b"0123456789tok-SECRET-123456 and more";
    let e = redacted_excerpt(body, 14, &secrets).expect("text");
    assert_eq!(e, "0123456789[redacted]");
    // Several, and the bytes after a redaction never bring a prefix back
    // (the caller read max + the longest secret).
    let mut body = tok.repeat(3);
    body.extend_from_slice(b"tok-SEC");
    let e = redacted_excerpt(&body, tok.len() * 3 + 2, &secrets).expect("text");
    assert_eq!(e, "[redacted][redacted][redacted]to");
    assert!(!e.contains("SEC"));
    // Nothing to redact: as body_excerpt.
    assert_eq!(
        redacted_excerpt(b"plain", 3, &secrets),
        body_excerpt(b"plain", 3)
    );
    assert_eq!(redacted_excerpt(b"plain", 3, &[]), Some("pla".into()));
    // JSON-escaped forms are secrets too.
    assert_eq!(
        secret_forms("a/b"),
        vec![b"a/b".to_vec(), b"a\\/b".to_vec()]
    );
    assert!(secret_header("X-Api-Key") && secret_header("x-auth-token"));
    assert!(!secret_header("X-Source"));
}

#[test]
fn body_excerpts_are_cut_and_cleaned() {
    assert_eq!(body_excerpt(b"", 256), None);
    assert_eq!(body_excerpt(b"  \n", 256), None);
    assert_eq!(
        body_excerpt(b"{\"error\":\"no route\"}\r\n\x1b[31m", 256).as_deref(),
        Some("{\"error\":\"no route\"}   [31m")
    );
    assert_eq!(body_excerpt(b"abcdef", 3).as_deref(), Some("abc"));
    // A cut inside a character leaves a replacement character, not an error.
    let e = body_excerpt("ééé".as_bytes(), 3).expect("text");
    assert!(e.starts_with('é') && e.len() <= 5, "{e}");
}

#[test]
fn certificate_problems_have_their_own_reasons() {
    let cases = [
        (CertificateError::UnknownIssuer, "tls_untrusted"),
        (CertificateError::BadSignature, "tls_untrusted"),
        (CertificateError::Expired, "tls_expired"),
        (CertificateError::NotValidYet, "tls_not_yet_valid"),
        (CertificateError::NotValidForName, "tls_hostname"),
        (CertificateError::Revoked, "tls_revoked"),
        (CertificateError::BadEncoding, "tls_handshake"),
    ];
    for (c, reason) in cases {
        let e = wrapped_tls(rustls::Error::InvalidCertificate(c.clone()));
        let (k, detail) = classify(&e, true, false);
        assert_eq!(k.as_str(), reason, "{c:?}");
        assert!(detail.contains("certificate"), "{detail}");
        assert_eq!(k.class(), crate::core::classify::FailureClass::Systemic);
    }
}

#[test]
fn alerts_about_our_certificate_are_client_cert_failures() {
    for a in [
        AlertDescription::CertificateRequired,
        AlertDescription::BadCertificate,
        AlertDescription::UnknownCA,
    ] {
        let e = wrapped_tls(rustls::Error::AlertReceived(a));
        assert_eq!(
            kind(&e, false, false),
            TransportFailure::TlsClientCert,
            "{a:?}"
        );
    }
    let e = wrapped_tls(rustls::Error::AlertReceived(
        AlertDescription::ProtocolVersion,
    ));
    assert_eq!(kind(&e, true, false), TransportFailure::TlsHandshake);
    let e = wrapped_tls(rustls::Error::General("no CA certificates".into()));
    assert_eq!(kind(&e, true, false), TransportFailure::TlsHandshake);
}

#[test]
fn io_errors_name_the_connection_failure() {
    let io_layer = |k: io::ErrorKind| {
        Layer(
            "client error (Connect)",
            Box::new(Layer("tcp connect error", Box::new(io::Error::from(k)))),
        )
    };
    use io::ErrorKind as K;
    use TransportFailure as T;
    for (io_kind, connecting, timed_out, expected) in [
        (K::ConnectionRefused, true, false, T::ConnectRefused),
        (K::TimedOut, true, true, T::ConnectTimeout),
        (K::TimedOut, false, true, T::Timeout),
        (K::ConnectionReset, false, false, T::ConnectionClosed),
        (K::UnexpectedEof, false, false, T::ConnectionClosed),
    ] {
        let e = io_layer(io_kind);
        assert_eq!(kind(&e, connecting, timed_out), expected, "{io_kind:?}");
    }
    // reqwest's own timeout error carries no io::Error.
    let t = Layer("operation timed out", Box::new(io::Error::other("x")));
    assert_eq!(kind(&t, true, true), TransportFailure::ConnectTimeout);
    assert_eq!(kind(&t, false, true), TransportFailure::Timeout);
    let dns = Layer(
        "client error (Connect)",
        Box::new(Layer(
            "dns error",
            Box::new(io::Error::other("failed to lookup address information")),
        )),
    );
    let (k, detail) = classify(&dns, true, false);
    assert_eq!(k, TransportFailure::Dns);
    assert_eq!(detail, "failed to lookup address information");
    let other = Layer("client error (Connect)", Box::new(io::Error::other("?")));
    assert_eq!(kind(&other, true, false), TransportFailure::Connect);
    assert_eq!(kind(&other, false, false), TransportFailure::Other);
}

/// A per-item result's text goes into an envelope the way an answer's body
/// does: cut to `api.error_body_bytes`, every secret redacted, and nothing
/// with `error_body_bytes = 0` (before, the batch path put 200 characters of
/// the raw result into `last_error` whatever the setting).
#[test]
fn per_item_text_is_cut_and_redacted_like_a_body() {
    let mut cfg = crate::config::ApiConfig {
        url: "http://127.0.0.1:1/events".into(),
        error_body_bytes: 40,
        ..crate::config::ApiConfig::default()
    };
    cfg.headers
        .insert("X-Api-Key".into(), "key-0123456789".into());
    let client = ApiClient::new(&cfg, std::sync::Arc::new(Auth::none()), 4).expect("client");
    let element = br#"{"id":"e-1","status":400,"error":"bad key-0123456789 for tenant"}"#;
    let text = Api::excerpt(&client, element).expect("an excerpt");
    assert!(!text.contains("key-0123456789"), "{text}");
    assert!(text.contains("[redacted]"), "{text}");
    assert!(text.len() <= 40 + "[redacted]".len(), "{text}");
    cfg.error_body_bytes = 0;
    let client = ApiClient::new(&cfg, std::sync::Arc::new(Auth::none()), 4).expect("client");
    assert_eq!(Api::excerpt(&client, element), None);
}
