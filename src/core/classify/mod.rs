//! Error classification: what an API answer or a transport failure means for the event.
//!
//! - `Delivered`: 2xx, and 409 (the API already has this idempotency key).
//! - `Transient`: timeouts, DNS and connection errors, 408, 429, 5xx — retry,
//!   then DLQ.
//! - `Permanent`: the event itself is wrong (400, 404, 422 and other 4xx) —
//!   never retried, parked at once.
//! - `Systemic`: the API or our credentials are wrong, not the event (401, 403,
//!   answers Courier cannot act on, 1xx/3xx, and every TLS failure: untrusted,
//!   expired or wrong-host certificates, a refused client certificate). The
//!   breaker trips at once and the event waits at its gate: the pipeline pauses
//!   instead of filling the DLQ.
//!
//! # Invariant I11: error classes
//!
//! *Enforced in* `src/core/classify/mod.rs`, `src/core/envelope.rs` (`ErrorInfo::new`). A
//! `last_error` is built only from the typed class (`ErrorClass`: transient, permanent,
//! systemic, poison, dropped) and reason (`FailureReason`), its message cleaned and cut;
//! `outcome_of` is the one mapping from a failure class to what the breaker hears (permanent:
//! the API is up; systemic: trip with the reason). `courier_in_flight` is held by a guard
//! (`InFlight`), so no exit path leaves it raised.
//!
//! *Tested by:* Unit tests (every reason distinct, `http_NNN` for 100–999); every e2e test
//! reading envelopes (`tests/api_errors.rs`, `tests/dlq.rs`, `tests/policy.rs`).
//!
//! # Errors and their classes
//!
//! A failed try has a class (`core::classify::FailureClass`) and a reason code. An answer's
//! reason is `http_<status>` (`classify_status`). A call without an answer gets a
//! `core::classify::TransportFailure`, which `delivery::http::classify` finds by walking the
//! reqwest error's `source()` chain (through hyper-util's and tokio-rustls' layers; an
//! `io::Error` that wraps another error is opened with `get_ref`, since its `source()` skips
//! the wrapped error) down to the most specific error:
//!
//! | reason | found as | class |
//! |---|---|---|
//! | `tls_untrusted` | `rustls::Error::InvalidCertificate(UnknownIssuer / BadSignature / wrong purpose / …)` | systemic |
//! | `tls_expired`, `tls_not_yet_valid` | `InvalidCertificate(Expired…)`, `(NotValidYet…)` | systemic |
//! | `tls_hostname` | `InvalidCertificate(NotValidForName…)` | systemic |
//! | `tls_revoked` | `InvalidCertificate(Revoked)` | systemic |
//! | `tls_client_cert` | a certificate alert *received* from the server (`CertificateRequired`, `BadCertificate`, `UnknownCA`, …): the API refused our client certificate or wanted one | systemic |
//! | `tls_handshake` | any other rustls error (no common version or cipher, not TLS on that port, …) | systemic |
//! | `connect_refused` | `io::ErrorKind::ConnectionRefused` | transient |
//! | `connect_timeout` / `timeout` | `TimedOut`, or reqwest's timeout, while connecting / after | transient |
//! | `connection_closed` | reset, aborted, broken pipe, EOF, or hyper's incomplete message | transient |
//! | `dns` | hyper-util's `dns error` | transient |
//! | `protocol` | hyper's parse errors (the answer was not HTTP) | transient |
//! | `connect`, `transport` | anything else, while connecting / after | transient |
//! | `auth_token_unavailable`, `auth_token_refused` | no OAuth2 token to send: the token endpoint unreachable or answering no token / refusing the client (`auth::AuthFailure`, I33) | systemic |
//!
//! TLS failures are systemic because they are about the API's or Courier's certificate,
//! the same for every event, and stay until someone replaces a certificate or changes the
//! config: filling the DLQ would only move every event there. So they take the path 401/403
//! take: `CallOutcome::Systemic(reason)` trips the breaker at once (its transition carries
//! the reason, e.g. `reason="tls_untrusted"`), the event's task waits at `ApiHealth::gate`
//! without using up a try, the partitions pause, and half-open probes find out when the
//! certificate is fixed (`tests/tls_api.rs` swaps the stand-in's certificate while Courier
//! runs). DNS errors and refused connections stay transient: they are what an API restart or
//! a failover looks like.
//!
//! Every failed try is counted in `courier_delivery_errors_total{class, reason}` (main path
//! and DLQ drain). `core::classify::FailureLog` (pure, time as input) decides which get a log
//! line: the first of each reason at once, then one per reason every 10 s with `left_out`,
//! the number not logged in between — so the first TLS failure is named in the log at once
//! (WARN, with `detail` and `hint`: what to do), not only the breaker's `probe_failed`.
//! Transient and permanent failures are logged at INFO. The `detail` is the innermost error's
//! text (`invalid peer certificate: UnknownIssuer`, `Connection refused (os error 111)`):
//! reqwest's own message is skipped because it holds the URL, and nothing from a response body
//! goes into a log line or a metric label. The DLQ envelope's `last_error` carries the class,
//! the reason and a message with the tries and that detail, or for an answer the first
//! `api.error_body_bytes` of its body (control characters replaced): the envelope goes to
//! topics only operators read. Classes (`ErrorClass`: transient, permanent, systemic, poison,
//! dropped) and reasons (`FailureReason`: `http_<status>`, the transport failures, the decoder's
//! reasons, …) are enums in `core::classify`; `ErrorInfo::new` is the one constructor of a
//! `last_error`, and `core::classify::outcome_of` the one mapping from a failure class to what
//! the breaker hears.
//!
//! What a status means is `core::status_policy`: `[api.status]` rules over the defaults, as a
//! table of 500 verdicts built at start (the narrowest rule wins; same-width overlaps are
//! refused by `check-config`). A 4xx/5xx a rule makes systemic trips the breaker with its own
//! reason (`http_404`). The parking flood guard (`ApiHealth::parked_by_api`) counts events parked
//! because of a permanent *answer* (not bad input, not a request unbuildable here) per second;
//! above `degraded.flood_parked_per_sec` it trips the breaker with `park_flood`.

mod failure_log;
mod transport;

pub(crate) use failure_log::FailureLog;
pub use transport::TransportFailure;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StatusVerdict {
    Delivered,
    Failed(FailureClass),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FailureClass {
    Transient,
    Permanent,
    Systemic,
}

impl FailureClass {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "transient",
            FailureClass::Permanent => "permanent",
            FailureClass::Systemic => "systemic",
        }
    }
    /// Whether an in-place retry can help.
    #[cfg(test)]
    pub(crate) fn is_retryable(self) -> bool {
        !matches!(self, FailureClass::Permanent)
    }
}

/// The class an event's failure is recorded under in the DLQ / parking-lot
/// envelope (`last_error.class`): the three classes of a failed call, plus
/// `poison` (bad input, parked before any call) and `dropped` (a DLQ event its
/// retry policy gave up on, or one that cannot be redelivered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ErrorClass {
    Transient,
    Permanent,
    Systemic,
    Poison,
    Dropped,
}

impl ErrorClass {
    #[cfg(test)]
    pub(crate) const ALL: [ErrorClass; 5] = [
        ErrorClass::Transient,
        ErrorClass::Permanent,
        ErrorClass::Systemic,
        ErrorClass::Poison,
        ErrorClass::Dropped,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Systemic => "systemic",
            ErrorClass::Poison => "poison",
            ErrorClass::Dropped => "dropped",
        }
    }
}

impl From<FailureClass> for ErrorClass {
    fn from(c: FailureClass) -> ErrorClass {
        match c {
            FailureClass::Transient => ErrorClass::Transient,
            FailureClass::Permanent => ErrorClass::Permanent,
            FailureClass::Systemic => ErrorClass::Systemic,
        }
    }
}

/// Why an event failed: the bounded reason code of `last_error.reason`, of
/// `courier_delivery_errors_total{reason}`, `courier_parked_total{reason}` and
/// the log lines. Produced only from this type, so the set stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The API answered this status (`http_NNN`).
    Http(u16),
    /// No answer: what failed on the way.
    Transport(TransportFailure),
    /// Bad input, named by the decoder's typed errors
    /// (`DecodeError::reason`, `EnvelopeError::reason`).
    Input(&'static str),
    /// The enrichment lookup timed out.
    EnrichmentTimeout,
    /// The enrichment database could not be asked.
    EnrichmentUnavailable,
    /// No enrichment row for the event's key (`on_missing = "park"`).
    EnrichmentMissing,
    /// The request's body could not be built: the enriched body, a
    /// `data_base64` that is not base64, or a body that is not JSON on a
    /// route with per-item results (`core::batch::place`).
    BodyUnbuildable,
    /// The DLQ refused the record for good (`dlq_<refusal>`).
    DlqRefused(Refusal),
    /// The DLQ retry policy's verdict (`dlq_policy::reason`).
    DlqPolicy(&'static str),
    /// A DLQ record whose event cannot be read back.
    UnreadableEnvelope,
    /// The schema registry could not be asked for a DLQ record's schema (the
    /// drain's decoding): *systemic*, the record goes back to the DLQ.
    SchemaRegistryUnavailable,
    /// The delivery work vanished without an outcome, repeatedly.
    InternalError,
    /// The event's batch answer holds no result it can rely on (transient:
    /// sent again).
    NoResult(crate::core::batch::NoResult),
    /// Its destination was down longer than `degraded.destination_hold`:
    /// diverted to the DLQ without a try (`core::partition::outage`).
    DestinationUnavailable,
    /// An earlier event of its key to the same destination is in the DLQ:
    /// it follows it there, without a try (`core::partition::outage`).
    KeyInDlq,
    /// A filter's or a route's expression gave no answer for the event
    /// (`core::expr`: failed, over its bound, not a bool).
    ExpressionFailed,
}

/// A write the broker or the producer will never accept as it is (the DLQ
/// writer's verdict; as a reason, `dlq_<refusal>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `MSG_SIZE_TOO_LARGE`, `RECORD_LIST_TOO_LARGE`, `INVALID_MSG_SIZE`.
    TooLarge,
    /// `TOPIC_AUTHORIZATION_FAILED`.
    NotAuthorized,
    /// `UNKNOWN_TOPIC_OR_PART` (the caller retries it for a grace period first:
    /// a topic being created, a partition being moved).
    UnknownTopic,
    /// `INVALID_RECORD`, `INVALID_MSG`, `POLICY_VIOLATION`.
    InvalidRecord,
}

impl Refusal {
    pub(crate) const ALL: [Refusal; 4] = [
        Refusal::TooLarge,
        Refusal::NotAuthorized,
        Refusal::UnknownTopic,
        Refusal::InvalidRecord,
    ];

    /// The label of `courier_produce_refused_total{reason}`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::NotAuthorized => "not_authorized",
            Refusal::UnknownTopic => "unknown_topic",
            Refusal::InvalidRecord => "invalid_record",
        }
    }
}

/// `http_NNN` for every status an HTTP stack can parse (100-999), built once.
fn http_reason(status: u16) -> &'static str {
    static TABLE: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (100u16..=999)
            .map(|s| &*Box::leak(format!("http_{s}").into_boxed_str()))
            .collect()
    });
    match status {
        100..=999 => table[usize::from(status - 100)],
        _ => "http_invalid",
    }
}

impl FailureReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FailureReason::Http(s) => http_reason(s),
            FailureReason::Transport(t) => t.as_str(),
            FailureReason::Input(r) | FailureReason::DlqPolicy(r) => r,
            FailureReason::EnrichmentTimeout => "enrichment_timeout",
            FailureReason::EnrichmentUnavailable => "enrichment_unavailable",
            FailureReason::EnrichmentMissing => "enrichment_missing",
            FailureReason::BodyUnbuildable => "body_unbuildable",
            FailureReason::DlqRefused(r) => match r {
                Refusal::TooLarge => "dlq_too_large",
                Refusal::NotAuthorized => "dlq_not_authorized",
                Refusal::UnknownTopic => "dlq_unknown_topic",
                Refusal::InvalidRecord => "dlq_invalid_record",
            },
            FailureReason::UnreadableEnvelope => "unreadable_envelope",
            FailureReason::SchemaRegistryUnavailable => "schema_registry_unavailable",
            FailureReason::InternalError => "internal_error",
            FailureReason::NoResult(n) => n.as_str(),
            FailureReason::DestinationUnavailable => "destination_unavailable",
            FailureReason::KeyInDlq => "key_in_dlq",
            FailureReason::ExpressionFailed => "expression_failed",
        }
    }

    /// Whether the failed call reached the API (a request that could not be
    /// built here, or a failure before any call, did not).
    pub(crate) fn reached_the_api(self) -> bool {
        match self {
            FailureReason::Http(_) => true,
            FailureReason::Transport(t) => t.reached_the_api(),
            _ => false,
        }
    }

    /// The reason a systemic failure trips the breaker with (a bounded set of
    /// label values on `courier_breaker_transitions_total`).
    pub(crate) fn breaker_reason(self) -> &'static str {
        match self {
            // 401/403 by default; any 4xx/5xx `[api.status]` makes systemic.
            FailureReason::Http(400..=599) => self.as_str(),
            // 1xx/3xx: answers Courier cannot act on.
            FailureReason::Http(_) => "systemic",
            other => other.as_str(),
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one API call told us about the API (not about the event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The API answered (2xx, 409, or a 4xx about the event itself).
    Up,
    /// Timeout, connection error, 408, 429, 5xx.
    Failed,
    /// 401/403, TLS failures and the like: credentials, certificates or the API
    /// itself. Trips at once; the breaker's transition carries the reason
    /// (`http_401`, `tls_untrusted`, ...).
    Systemic(&'static str),
}

/// What a failed call says about the API (not the event): a permanent failure
/// is the event's, so the API is up; a systemic one trips the breaker with its
/// reason.
pub(crate) fn outcome_of(class: FailureClass, reason: FailureReason) -> CallOutcome {
    match class {
        FailureClass::Permanent => CallOutcome::Up,
        FailureClass::Systemic => CallOutcome::Systemic(reason.breaker_reason()),
        FailureClass::Transient => CallOutcome::Failed,
    }
}

/// What the breaker hears of one call's answer: one observation per call,
/// whatever the answer says of each event in it (per-item results are the
/// events' business: a 2xx batch answer proves the API up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Delivered (2xx, 409, any status the policy calls delivered): up, and
    /// it refutes systemic answers to calls sent before it.
    Delivered,
    /// What the answer says about the API.
    Outcome(CallOutcome),
    /// A systemic answer: a hypothesis, judged against later calls
    /// (`core::systemic`) with this breaker reason.
    Systemic(&'static str),
    /// Nothing about the API: back-pressure the adaptive limit answers (a
    /// 429 with the limit on), or a request that could not be built. A
    /// half-open slot it took is freed.
    Nothing,
}

/// What the breaker hears of an answer with `status`, which the status
/// policy judged `verdict`. `back_pressure`: the adaptive limit deals with
/// this status (`delivery::limits::Limits::absorbs`).
pub(crate) fn heard_status(status: u16, verdict: StatusVerdict, back_pressure: bool) -> Heard {
    if back_pressure {
        return Heard::Nothing;
    }
    match verdict {
        StatusVerdict::Delivered => Heard::Delivered,
        StatusVerdict::Failed(FailureClass::Systemic) => {
            Heard::Systemic(FailureReason::Http(status).breaker_reason())
        }
        StatusVerdict::Failed(c) => Heard::Outcome(outcome_of(c, FailureReason::Http(status))),
    }
}

/// What the breaker hears of a call that got no answer.
pub(crate) fn heard_transport(kind: TransportFailure) -> Heard {
    let reason = FailureReason::Transport(kind);
    match kind.class() {
        _ if !kind.reached_the_api() => Heard::Nothing,
        FailureClass::Systemic => Heard::Systemic(reason.breaker_reason()),
        c => Heard::Outcome(outcome_of(c, reason)),
    }
}

pub(crate) fn classify_status(status: u16) -> StatusVerdict {
    use FailureClass::*;
    match status {
        200..=299 | 409 => StatusVerdict::Delivered,
        408 | 429 | 500..=599 => StatusVerdict::Failed(Transient),
        401 | 403 => StatusVerdict::Failed(Systemic),
        400..=499 => StatusVerdict::Failed(Permanent),
        _ => StatusVerdict::Failed(Systemic),
    }
}

/// What to do about a failing answer, for the log line; `None` when the
/// status says it all.
pub(crate) fn status_hint(status: u16) -> Option<&'static str> {
    match status {
        401 => Some(
            "the API refused the credentials: check the token in the variable api.token_env names",
        ),
        403 => Some("the API forbids this client: check the token's permissions"),
        300..=399 => Some(
            "the API redirects, and Courier does not follow: point api.url at the final address",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureClass::*;

    #[test]
    fn every_status_has_one_class() {
        for s in 100u16..600 {
            let v = classify_status(s);
            let expected = match s {
                200..=299 | 409 => StatusVerdict::Delivered,
                408 | 429 | 500..=599 => StatusVerdict::Failed(Transient),
                401 | 403 => StatusVerdict::Failed(Systemic),
                400 | 402 | 404..=407 | 410..=428 | 430..=499 => StatusVerdict::Failed(Permanent),
                _ => StatusVerdict::Failed(Systemic),
            };
            assert_eq!(v, expected, "status {s}");
        }
    }

    #[test]
    fn named_cases() {
        assert_eq!(classify_status(200), StatusVerdict::Delivered);
        assert_eq!(classify_status(409), StatusVerdict::Delivered);
        assert_eq!(classify_status(503), StatusVerdict::Failed(Transient));
        assert_eq!(classify_status(429), StatusVerdict::Failed(Transient));
        assert_eq!(classify_status(422), StatusVerdict::Failed(Permanent));
        assert_eq!(classify_status(404), StatusVerdict::Failed(Permanent));
        assert_eq!(classify_status(401), StatusVerdict::Failed(Systemic));
        assert!(!Permanent.is_retryable());
        assert!(Transient.is_retryable());
        assert_eq!(TransportFailure::Timeout.class(), Transient);
        assert_eq!(TransportFailure::TlsUntrusted.class(), Systemic);
    }

    #[test]
    fn reasons_are_distinct_and_only_tls_and_auth_are_systemic() {
        let names: std::collections::HashSet<_> =
            TransportFailure::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names.len(), TransportFailure::ALL.len());
        for t in TransportFailure::ALL {
            assert_eq!(
                t.class() == Systemic,
                t.as_str().starts_with("tls_") || t.as_str().starts_with("auth_token_"),
                "{t:?}"
            );
            assert_eq!(t.is_auth(), t.as_str().starts_with("auth_token_"), "{t:?}");
            assert!(!t.hint().is_empty());
        }
    }

    #[test]
    fn reasons_name_what_they_carry() {
        assert_eq!(FailureReason::Http(404).as_str(), "http_404");
        assert_eq!(FailureReason::Http(100).as_str(), "http_100");
        assert_eq!(FailureReason::Http(999).as_str(), "http_999");
        assert_eq!(FailureReason::Http(0).as_str(), "http_invalid");
        assert_eq!(FailureReason::Http(1000).as_str(), "http_invalid");
        assert_eq!(
            FailureReason::Transport(TransportFailure::Timeout).as_str(),
            "timeout"
        );
        assert_eq!(
            FailureReason::DlqRefused(Refusal::TooLarge).as_str(),
            "dlq_too_large"
        );
        // The breaker hears 4xx/5xx by name, 1xx/3xx as one label.
        assert_eq!(FailureReason::Http(401).breaker_reason(), "http_401");
        assert_eq!(FailureReason::Http(404).breaker_reason(), "http_404");
        assert_eq!(FailureReason::Http(302).breaker_reason(), "systemic");
        assert!(!FailureReason::Transport(TransportFailure::Request).reached_the_api());
        assert!(FailureReason::Http(500).reached_the_api());
        assert!(!FailureReason::EnrichmentTimeout.reached_the_api());
        let classes: std::collections::HashSet<_> =
            ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(classes.len(), 5);
    }

    #[test]
    fn the_breaker_hears_the_api_not_the_event() {
        let r = FailureReason::Http(503);
        assert_eq!(
            outcome_of(Permanent, FailureReason::Http(422)),
            CallOutcome::Up
        );
        assert_eq!(outcome_of(Transient, r), CallOutcome::Failed);
        assert_eq!(
            outcome_of(Systemic, FailureReason::Http(403)),
            CallOutcome::Systemic("http_403")
        );
        assert_eq!(
            outcome_of(
                Systemic,
                FailureReason::Transport(TransportFailure::TlsExpired)
            ),
            CallOutcome::Systemic("tls_expired")
        );
    }

    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    proptest! {
        /// For any sequence of failures: the first of each reason is logged, lines
        /// of one reason are at least `every` apart, and every failure is either
        /// logged or counted in the next line's `left_out`.
        #[test]
        fn failure_log_reports_first_then_at_most_one_per_interval(
            steps in proptest::collection::vec((0usize..4, 0u64..3_000), 1..300)
        ) {
            let every = Duration::from_secs(10);
            let reasons = ["tls_untrusted", "dns", "http_503", "timeout"];
            let t0 = Instant::now();
            let mut log = FailureLog::new(every);
            let mut now = t0;
            let mut last: [Option<Instant>; 4] = [None; 4];
            let mut total = [0u64; 4];
            let mut accounted = [0u64; 4];
            for (r, dt) in steps {
                now += Duration::from_millis(dt);
                total[r] += 1;
                match log.observe(reasons[r], now) {
                    Some(l) => {
                        prop_assert_eq!(l.first, last[r].is_none());
                        if let Some(prev) = last[r] {
                            prop_assert!(now - prev >= every);
                        }
                        last[r] = Some(now);
                        accounted[r] += 1 + l.left_out;
                    }
                    None => prop_assert!(last[r].is_some_and(|p| now - p < every)),
                }
            }
            // What is not yet accounted for is what the next line would report.
            for r in 0..4 {
                let pending = log.seen.get(reasons[r]).map_or(0, |s| s.left_out);
                prop_assert_eq!(accounted[r] + pending, total[r]);
            }
        }
    }
}
