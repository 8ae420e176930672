//! What failed when a call got no HTTP answer: the error's `source()` chain,
//! walked down to rustls, hyper and I/O errors, named as a [`TransportFailure`]
//! with a short detail that holds neither the URL nor anything the API sent.

use super::TransportError;
use crate::core::classify::TransportFailure;
use std::error::Error as StdError;

pub(super) fn classify_reqwest(e: &reqwest::Error) -> TransportError {
    if e.is_builder() {
        // Built here, never sent: nothing about the API (the text may hold the
        // URL, so only the kind is kept).
        return TransportError::new(TransportFailure::Request, String::new());
    }
    // Start below reqwest's own error: its text holds the URL.
    let (kind, detail) = match e.source() {
        Some(src) => classify(src, e.is_connect(), e.is_timeout()),
        None => (fallback(e.is_connect(), e.is_timeout()), String::new()),
    };
    TransportError::new(kind, detail)
}

pub(super) fn fallback(connecting: bool, timed_out: bool) -> TransportFailure {
    match (connecting, timed_out) {
        (true, true) => TransportFailure::ConnectTimeout,
        (false, true) => TransportFailure::Timeout,
        (true, false) => TransportFailure::Connect,
        (false, false) => TransportFailure::Other,
    }
}

/// The errors of a chain, innermost last. An `io::Error` wrapping another error
/// reports that error's *source* as its own, so the wrapped error itself is
/// taken from `get_ref`.
pub(super) fn chain<'a>(err: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = Vec::new();
    let mut cur = Some(err);
    while let Some(e) = cur {
        out.push(e);
        if out.len() > 16 {
            break;
        }
        cur = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    out
}

/// What failed, from an error chain (`connecting` / `timed_out`: what the
/// client itself says about the error), and the innermost error's text.
pub fn classify(
    err: &(dyn StdError + 'static),
    connecting: bool,
    timed_out: bool,
) -> (TransportFailure, String) {
    let chain = chain(err);
    let detail = chain.last().map(|e| e.to_string()).unwrap_or_default();
    // The most specific finding wins: TLS, then I/O, then HTTP.
    for e in &chain {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return (tls_failure(t), t.to_string());
        }
    }
    for e in &chain {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(kind) = io_failure(io.kind(), connecting) {
                return (kind, detail);
            }
        }
    }
    if timed_out {
        return (fallback(connecting, true), detail);
    }
    for e in &chain {
        // hyper-util's connector reports a failed lookup as "dns error".
        if e.to_string() == "dns error" {
            return (TransportFailure::Dns, detail);
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                return (TransportFailure::ConnectionClosed, detail);
            }
            if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
                return (TransportFailure::Protocol, detail);
            }
        }
    }
    (fallback(connecting, false), detail)
}

pub(super) fn io_failure(kind: std::io::ErrorKind, connecting: bool) -> Option<TransportFailure> {
    use std::io::ErrorKind::*;
    Some(match kind {
        ConnectionRefused => TransportFailure::ConnectRefused,
        TimedOut if connecting => TransportFailure::ConnectTimeout,
        TimedOut => TransportFailure::Timeout,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
            TransportFailure::ConnectionClosed
        }
        _ => return None,
    })
}

/// A rustls error, as seen by a client: a certificate the client refused, an
/// alert the server sent (about our certificate), or another handshake failure.
pub fn tls_failure(e: &rustls::Error) -> TransportFailure {
    use rustls::{AlertDescription as A, CertificateError as C};
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => TransportFailure::TlsExpired,
            C::NotValidYet | C::NotValidYetContext { .. } => TransportFailure::TlsNotYetValid,
            C::NotValidForName | C::NotValidForNameContext { .. } => TransportFailure::TlsHostname,
            C::Revoked => TransportFailure::TlsRevoked,
            C::BadEncoding => TransportFailure::TlsHandshake,
            // Unknown issuer, bad signature, wrong purpose, unknown revocation
            // status, ...: the chain does not vouch for this server.
            _ => TransportFailure::TlsUntrusted,
        },
        // The server refused the handshake over our certificate (or its absence).
        rustls::Error::AlertReceived(
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired
            | A::AccessDenied,
        ) => TransportFailure::TlsClientCert,
        _ => TransportFailure::TlsHandshake,
    }
}

/// `e` and its sources, joined, for an error Courier reports at start.
pub(super) fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}
