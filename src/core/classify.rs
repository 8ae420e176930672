//! Error classification: what an API answer or a transport failure means for the event.
//!
//! - `Delivered`: 2xx, and 409 (the API already has this idempotency key).
//! - `Transient`: timeouts, connection errors, 408, 429, 5xx — retry, then DLQ.
//! - `Permanent`: the event itself is wrong (400, 404, 422 and other 4xx) —
//!   never retried, parked at once.
//! - `Systemic`: the API or our credentials are wrong, not the event (401, 403,
//!   and answers Courier cannot act on, 1xx/3xx). Retried like transient failures;
//!   the degraded mode treats it as a signal to pause rather than fill the DLQ.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Delivered,
    Failed(FailureClass),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    Transient,
    Permanent,
    Systemic,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "transient",
            FailureClass::Permanent => "permanent",
            FailureClass::Systemic => "systemic",
        }
    }
    /// Whether an in-place retry can help.
    pub fn is_retryable(self) -> bool {
        !matches!(self, FailureClass::Permanent)
    }
}

pub fn classify_status(status: u16) -> Verdict {
    use FailureClass::*;
    match status {
        200..=299 | 409 => Verdict::Delivered,
        408 | 429 | 500..=599 => Verdict::Failed(Transient),
        401 | 403 => Verdict::Failed(Systemic),
        400..=499 => Verdict::Failed(Permanent),
        _ => Verdict::Failed(Systemic),
    }
}

/// Failures that happen before an HTTP status exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportFailure {
    Timeout,
    Connect,
    Other,
}

impl TransportFailure {
    pub fn class(self) -> FailureClass {
        FailureClass::Transient
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TransportFailure::Timeout => "timeout",
            TransportFailure::Connect => "connect",
            TransportFailure::Other => "transport",
        }
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
                200..=299 | 409 => Verdict::Delivered,
                408 | 429 | 500..=599 => Verdict::Failed(Transient),
                401 | 403 => Verdict::Failed(Systemic),
                400 | 402 | 404..=407 | 410..=428 | 430..=499 => Verdict::Failed(Permanent),
                _ => Verdict::Failed(Systemic),
            };
            assert_eq!(v, expected, "status {s}");
        }
    }

    #[test]
    fn named_cases() {
        assert_eq!(classify_status(200), Verdict::Delivered);
        assert_eq!(classify_status(409), Verdict::Delivered);
        assert_eq!(classify_status(503), Verdict::Failed(Transient));
        assert_eq!(classify_status(429), Verdict::Failed(Transient));
        assert_eq!(classify_status(422), Verdict::Failed(Permanent));
        assert_eq!(classify_status(404), Verdict::Failed(Permanent));
        assert_eq!(classify_status(401), Verdict::Failed(Systemic));
        assert!(!Permanent.is_retryable());
        assert!(Transient.is_retryable());
        assert_eq!(TransportFailure::Timeout.class(), Transient);
    }
}
