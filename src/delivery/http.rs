//! The HTTP client for the external API: one POST per event, with the event id as
//! `Idempotency-Key`, a per-request timeout and a bounded connection setup time.
//!
//! Over `https://` it speaks TLS with rustls: the platform's root certificates,
//! or `api.tls.ca_file` instead of them (`ca_mode = "replace"`, the default) or
//! in addition (`"add"`); a client certificate for mTLS from `api.tls.cert_file`
//! and `key_file`; HTTP/2 offered in ALPN only with `api.http2 = true`.
//!
//! A failed call says what failed: [`classify`] walks the error's `source()`
//! chain down to rustls, hyper and I/O errors and names a [`TransportFailure`]
//! (`tls_untrusted`, `dns`, `connect_refused`, ...), with a short detail that
//! holds neither the URL nor anything the API sent.

use crate::config::{ApiConfig, CaMode};
use crate::core::backoff::parse_retry_after;
use crate::core::classify::TransportFailure;
use crate::core::mapping::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use std::error::Error as StdError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid header `{0}`")]
    Header(String),
    #[error(transparent)]
    Tls(#[from] crate::config::ConfigError),
    #[error("cannot build the HTTP client: {}", error_chain(.0))]
    Build(#[from] reqwest::Error),
}

/// An HTTP answer, reduced to what classification and the envelope need.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// For a non-2xx answer: the start of its body (`api.error_body_bytes`,
    /// control characters replaced), for the envelope's `last_error.message`
    /// only — never a log line or a metric label.
    pub body: Option<String>,
}

/// At most this much of an answer's body is read to keep its connection for
/// the next call: a body whose `Content-Length` says it fits is read to its end
/// (a 2xx of unknown length up to it); any other is read only as far as the
/// excerpt needs, and its connection is dropped.
const REUSE_BODY_BYTES: u64 = 64 * 1024;

/// The start of a non-2xx answer's body, for the envelope: at most `max` bytes
/// once every `secrets` value in it is replaced by `[redacted]`. `body` holds
/// what was read of it: at least `max + longest secret` bytes when the body is
/// longer, so a secret that begins within the first `max` bytes is whole in it
/// and redacted, never cut into a prefix that would stay.
pub fn redacted_excerpt(body: &[u8], max: usize, secrets: &[Vec<u8>]) -> Option<String> {
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let mut from = 0;
        while let Some(i) = find(&body[from..], secret) {
            hits.push((from + i, from + i + secret.len()));
            from += i + secret.len();
        }
    }
    hits.sort_unstable();
    // The cut, moved past any secret that straddles it.
    let mut cut = body.len().min(max);
    for &(a, b) in &hits {
        if a < cut && b > cut {
            cut = b.min(body.len());
        }
    }
    let mut out = Vec::with_capacity(cut);
    let mut at = 0;
    for &(a, b) in &hits {
        if a >= cut {
            break;
        }
        if a < at {
            // Overlapping secrets: the overlap is already redacted.
            at = at.max(b);
            continue;
        }
        out.extend_from_slice(&body[at..a]);
        out.extend_from_slice(b"[redacted]");
        at = b;
    }
    if at < cut {
        out.extend_from_slice(&body[at..cut]);
    }
    body_excerpt(&out, usize::MAX)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads an answer's body, stopping once `keep` bytes are in hand unless the
/// whole body is small enough to keep the connection ([`REUSE_BODY_BYTES`]);
/// an error while reading ends it (the status is what counts).
async fn read_body(mut resp: reqwest::Response, keep: usize, success: bool) -> Vec<u8> {
    let small = resp.content_length().is_some_and(|n| n <= REUSE_BODY_BYTES);
    let limit = if small || success {
        REUSE_BODY_BYTES as usize
    } else {
        keep
    };
    let mut kept = Vec::new();
    let mut read = 0usize;
    while read < limit {
        match resp.chunk().await {
            Ok(Some(c)) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&c[..c.len().min(room)]);
                read = read.saturating_add(c.len());
            }
            Ok(None) | Err(_) => break,
        }
    }
    kept
}

/// The first `max` bytes of an answer's body as text, control characters
/// replaced; `None` when empty.
pub fn body_excerpt(body: &[u8], max: usize) -> Option<String> {
    let cut = &body[..body.len().min(max)];
    let text = String::from_utf8_lossy(cut);
    let text = crate::core::envelope::clean_text(text.trim(), usize::MAX);
    (!text.is_empty()).then_some(text)
}

/// A call that got no HTTP answer: what failed, and the innermost error's text
/// (no URL, no secret, nothing from a response body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    pub kind: TransportFailure,
    pub detail: String,
}

impl TransportError {
    pub fn new(kind: TransportFailure, detail: impl Into<String>) -> TransportError {
        TransportError {
            kind,
            detail: detail.into(),
        }
    }
}

/// What one request carries beyond the event id and the body: the route's URL
/// and method, the Content-Type, and extra headers (the route's, forwarded Kafka
/// headers, the trace context). The default is today's request: POST to `api.url`.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// `None`: `api.url`.
    pub url: Option<String>,
    pub method: Method,
    /// `None`: `application/cloudevents+json`.
    pub content_type: Option<std::borrow::Cow<'static, str>>,
    pub headers: Vec<(String, bytes::Bytes)>,
}

#[derive(Clone)]
pub struct ApiClient {
    client: reqwest::Client,
    url: reqwest::Url,
    error_body_bytes: usize,
    /// Values redacted from an answer's body before it goes into an envelope:
    /// the token, and configured header values whose names say credential.
    secrets: Vec<Vec<u8>>,
}

/// Whether a configured header's name says its value is a credential.
fn secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "auth",
        "token",
        "key",
        "secret",
        "cookie",
        "signature",
        "password",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// A secret as it may come back in an answer: as sent, and JSON-escaped.
fn secret_forms(value: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![value.as_bytes().to_vec()];
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('/', "\\/");
    if escaped != value {
        forms.push(escaped.into_bytes());
    }
    forms
}

impl ApiClient {
    /// `token` comes from the environment; it goes into a sensitive header value,
    /// which reqwest and Courier's logs never print. The TLS files are read here.
    pub fn new(
        cfg: &ApiConfig,
        token: Option<&str>,
        max_conns: usize,
    ) -> Result<ApiClient, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/cloudevents+json"),
        );
        for (k, v) in &cfg.headers {
            let name =
                HeaderName::from_bytes(k.as_bytes()).map_err(|_| ClientError::Header(k.clone()))?;
            let value = HeaderValue::from_str(v).map_err(|_| ClientError::Header(k.clone()))?;
            headers.insert(name, value);
        }
        if let Some(t) = token {
            let mut value = HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| ClientError::Header("authorization".into()))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let url = reqwest::Url::parse(&cfg.url).map_err(|_| ClientError::Header("url".into()))?;
        let mut b = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(cfg.request_timeout)
            .connect_timeout(cfg.connect_timeout)
            .pool_max_idle_per_host(cfg.pool_max_idle_per_host.max(max_conns))
            .tcp_nodelay(true)
            // Courier retries by itself (with the breaker and the DLQ in the loop),
            // and a redirected POST is not a delivery: an API answering 3xx is
            // misconfigured, and the 3xx is classified and reported as such.
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            // An https API redirecting nowhere else: never fall back to http.
            .https_only(url.scheme() == "https");
        if cfg.http2_prior_knowledge {
            b = b.http2_prior_knowledge();
        } else if !cfg.http2 {
            // ALPN offers only http/1.1 over TLS (and no h2c upgrade over http).
            b = b.http1_only();
        }
        if url.scheme() == "https" {
            b = tls(b, cfg)?;
        }
        let mut secrets: Vec<Vec<u8>> = token.map(secret_forms).unwrap_or_default();
        for (k, v) in &cfg.headers {
            if secret_header(k) && !v.is_empty() {
                secrets.extend(secret_forms(v));
            }
        }
        Ok(ApiClient {
            client: b.build()?,
            url,
            error_body_bytes: cfg.error_body_bytes,
            secrets,
        })
    }

    /// `redelivery`: the DLQ round (sent as `Courier-Redelivery`), for drains.
    pub async fn post(
        &self,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> Result<Answer, TransportError> {
        self.send(&Outgoing::default(), event_id, body, redelivery)
            .await
    }

    /// One request as `out` says. A URL, header name or value the HTTP stack
    /// refuses fails as `request_unbuildable` (the event's fault).
    pub async fn send(
        &self,
        out: &Outgoing,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> Result<Answer, TransportError> {
        let url = match &out.url {
            None => self.url.clone(),
            Some(u) => reqwest::Url::parse(u)
                .map_err(|_| TransportError::new(TransportFailure::Request, String::new()))?,
        };
        let method = match out.method {
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
        };
        let mut req = self
            .client
            .request(method, url)
            .header("Idempotency-Key", event_id)
            .body(body);
        if let Some(ct) = &out.content_type {
            req = req.header(CONTENT_TYPE, ct.as_ref());
        }
        for (name, value) in &out.headers {
            req = req.header(name.as_str(), value.as_ref());
        }
        if let Some(n) = redelivery {
            req = req.header("Courier-Redelivery", n.to_string());
        }
        let resp = req.send().await.map_err(|e| classify_reqwest(&e))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        // Read a small body to its end, so the connection goes back to the
        // pool; of any other, only what the excerpt needs (the cap plus the
        // longest secret, so a secret is redacted whole).
        let success = (200..300).contains(&status);
        let keep = if success || self.error_body_bytes == 0 {
            0
        } else {
            let longest = self.secrets.iter().map(Vec::len).max().unwrap_or(0);
            self.error_body_bytes.saturating_add(longest)
        };
        let read = read_body(resp, keep, success).await;
        let body = if keep > 0 {
            redacted_excerpt(&read, self.error_body_bytes, &self.secrets)
        } else {
            None
        };
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}

/// Roots and client identity from `[api.tls]`.
fn tls(b: reqwest::ClientBuilder, cfg: &ApiConfig) -> Result<reqwest::ClientBuilder, ClientError> {
    let files = cfg.tls.load()?;
    let roots = files
        .roots
        .iter()
        .map(|c| reqwest::Certificate::from_der(c.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut b = if roots.is_empty() {
        // The platform's roots (rustls-platform-verifier).
        b
    } else {
        match cfg.tls.ca_mode {
            CaMode::Replace => b.tls_certs_only(roots),
            CaMode::Add => b.tls_certs_merge(roots),
        }
    };
    if let Some(pem) = files.identity_pem() {
        b = b.identity(reqwest::Identity::from_pem(&pem)?);
    }
    Ok(b)
}

fn classify_reqwest(e: &reqwest::Error) -> TransportError {
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

fn fallback(connecting: bool, timed_out: bool) -> TransportFailure {
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
fn chain<'a>(err: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
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

fn io_failure(kind: std::io::ErrorKind, connecting: bool) -> Option<TransportFailure> {
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
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription, CertificateError};
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
        let e = redacted_excerpt(b"denied: Bearer tok-SECRET-123456 (echo)", 64, &secrets)
            .expect("text");
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
}
