//! Stage 6, the failure report: what one failed try said ([`Failure`]), how it
//! is counted and logged, and what the breaker hears of the calls.

use super::enrich::EnrichError;
use super::hear::{Answered, Ears};
use super::http::{self, TransportError};
use crate::core::answer::{Load, Verdict};
use crate::core::classify::{FailureClass, FailureLog, FailureReason};
use crate::core::envelope::ErrorInfo;
use crate::metrics as m;
use crate::runtime::Pipeline;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most one log line per failure reason per this interval (after the first).
pub(super) const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

/// What one failed try said: for `courier_delivery_errors_total`, the log line
/// and the envelope's `last_error`.
pub(super) struct Failure {
    pub(super) class: FailureClass,
    pub(super) reason: FailureReason,
    pub(super) status: Option<u16>,
    pub(super) retry_after: Option<Duration>,
    /// The innermost error's text for a failure without an answer (no URL, no
    /// secret, nothing the API sent).
    pub(super) detail: Option<String>,
    pub(super) hint: Option<&'static str>,
    /// The start of the API's answer (non-2xx): the envelope's message only.
    pub(super) body: Option<String>,
    /// The event's own result inside a 2xx batch answer (`Answer::per_item`):
    /// not counted by the flood guards.
    pub(super) per_item: bool,
    /// What the answer said of the API's capacity (`core::answer::Load`):
    /// back-pressure keeps the event's permit for a round trip.
    pub(super) load: Load,
}

impl Failure {
    /// The failure an answer means for the event (`None`: delivered), as
    /// it was read, once ([`super::hear::Ears::read`]).
    pub(super) fn in_answer(answered: Answered) -> Option<Failure> {
        let (answer, reading) = answered.into_parts();
        match reading.event {
            Verdict::Delivered => None,
            Verdict::Failed { class, reason } => {
                Some(Failure::of_answer(class, reason, reading.load, answer))
            }
        }
    }

    /// A failed try whose answer `core::answer::read` judged `class` for
    /// `reason`.
    fn of_answer(
        class: FailureClass,
        reason: FailureReason,
        load: Load,
        answer: Result<http::Answer, TransportError>,
    ) -> Failure {
        match answer {
            Ok(a) => Failure {
                class,
                reason,
                status: Some(a.status),
                retry_after: a.retry_after,
                detail: None,
                hint: match reason {
                    FailureReason::NoResult(_) => Some("the batch answer holds no result for this event (api.batch.results): it is sent again"),
                    _ => crate::core::classify::status_hint(a.status),
                },
                body: a.body,
                per_item: a.per_item,
                load,
            },
            Err(t) => Failure {
                class,
                reason,
                status: None,
                retry_after: None,
                detail: Some(t.detail),
                hint: Some(t.kind.hint()),
                body: None,
                per_item: false,
                load,
            },
        }
    }

    pub(super) fn enrichment(e: EnrichError) -> Failure {
        let reason = match e {
            EnrichError::Timeout => FailureReason::EnrichmentTimeout,
            _ => FailureReason::EnrichmentUnavailable,
        };
        Failure {
            class: FailureClass::Transient,
            reason,
            status: None,
            retry_after: None,
            detail: Some(e.to_string()),
            hint: None,
            body: None,
            per_item: false,
            load: Load::Nothing,
        }
    }

    /// The schema registry could not be asked for a DLQ record's schema
    /// (`detail`): systemic, and not the API's (the breaker never hears of it).
    pub(super) fn registry_unavailable(detail: String) -> Failure {
        Failure {
            class: FailureClass::Systemic,
            reason: FailureReason::SchemaRegistryUnavailable,
            status: None,
            retry_after: None,
            detail: Some(detail),
            hint: Some("the schema registry (input.schema_registry.url) does not answer: the record stays in the DLQ until it does"),
            body: None,
            per_item: false,
            load: Load::Nothing,
        }
    }

    /// The envelope's `last_error` for this failure, with `message`.
    pub(super) fn error(&self, message: &str) -> ErrorInfo {
        ErrorInfo::new(self.class.into(), self.reason, self.status, message)
    }

    /// `last_error.message`: what the API answered, or what failed and why.
    pub(super) fn message(&self, what: &str) -> String {
        match (self.status, &self.detail) {
            (Some(s), _) => {
                let m = format!("API answered {s} {what}");
                match &self.body {
                    Some(b) => format!("{}: {b}", m.trim_end()),
                    None => m,
                }
            }
            (None, Some(d)) if !d.is_empty() => format!("{} {what}: {d}", self.reason),
            (None, _) => format!("{} {what}", self.reason),
        }
    }
}

/// What failed tries are told to: `courier_delivery_errors_total`, the
/// status page's recent errors, the log (rate-limited per reason) and the
/// breaker.
pub(super) struct Reports {
    pipeline: Arc<Pipeline>,
    ears: Arc<Ears>,
    /// Which failed calls get a log line (the first of each reason, then one
    /// per reason every [`FAILURE_LOG_EVERY`]).
    failure_log: std::sync::Mutex<FailureLog>,
}

impl Reports {
    pub(super) fn new(pipeline: Arc<Pipeline>, ears: Arc<Ears>) -> Reports {
        Reports {
            pipeline,
            ears,
            failure_log: std::sync::Mutex::new(FailureLog::new(FAILURE_LOG_EVERY)),
        }
    }

    /// Counts a failed try in `courier_delivery_errors_total{class, reason}` and
    /// logs it on the first occurrence of its reason (then once per
    /// [`FAILURE_LOG_EVERY`], with the count left out): systemic failures at WARN,
    /// since someone must act, the others at INFO.
    pub(super) fn report(&self, f: &Failure) {
        let reason = f.reason.as_str();
        metrics::counter!(m::DELIVERY_ERRORS, "class" => f.class.as_str(), "reason" => reason, "destination" => self.ears.destination().to_string())
            .increment(1);
        self.pipeline.board.errors.record(f.class.as_str(), reason);
        let log = self
            .failure_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(reason, Instant::now());
        let Some(l) = log else { return };
        let (detail, hint, status) = (f.detail.as_deref(), f.hint, f.status);
        // tracing fixes an event's level where it is written: one line, two levels.
        macro_rules! failure_line {
            ($level:ident, $message:literal) => {
                tracing::$level!(
                    // Display, as before: `reason=tls_expired` (operators grep for it).
                    reason = %reason,
                    class = f.class.as_str(),
                    status,
                    detail,
                    hint,
                    first = l.first,
                    left_out = l.left_out,
                    $message
                )
            };
        }
        if f.class == FailureClass::Systemic {
            failure_line!(
                warn,
                "API call failed: the pipeline pauses until it works again"
            );
        } else {
            failure_line!(info, "API call failed");
        }
    }

    pub(super) fn on_transition(&self, t: crate::core::breaker::Transition) {
        self.ears.on_transition(t);
    }

    /// The parking flood guard: an event parked because of the API's answer (a
    /// permanent status, not bad input nor a request unbuildable here) counts;
    /// too many per second trip the breaker (`park_flood`).
    pub(super) fn parked_after(&self, f: &Failure) {
        if matches!(f.reason, FailureReason::Http(_)) && !f.per_item {
            if let Some(t) = self.ears.health().parked_by_api() {
                self.on_transition(t);
            }
        }
    }
}
