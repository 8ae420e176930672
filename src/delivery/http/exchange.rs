//! What one request carries ([`Outgoing`]) and what came back: an
//! [`Answer`] (reduced to what classification and the envelope need) or a
//! [`TransportError`].

use crate::core::batch::{NoResult, Unreadable};
use crate::core::classify::TransportFailure;
use crate::core::mapping::Method;
use std::time::Duration;

/// An HTTP answer, reduced to what classification and the envelope need.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// For a non-2xx answer: the start of its body (`api.error_body_bytes`,
    /// control characters replaced), for the envelope's `last_error.message`
    /// only — never a log line or a metric label.
    pub body: Option<String>,
    /// The whole body (at most `Outgoing::read_answer` bytes) when the
    /// request asked for it (a batch's per-item results), or why it could
    /// not be read whole.
    pub full: Option<Result<bytes::Bytes, Unreadable>>,
    /// An event's answer out of its batch's that holds no result for it
    /// (its status is then `core::batch::MISSING_RESULT_STATUS`): why.
    pub no_result: Option<NoResult>,
    /// An event's own result inside a batch answer that proves the API up
    /// (a 2xx): a failure it says is the event's, not a verdict on the API
    /// (the DLQ and parking flood guards do not count it).
    pub per_item: bool,
}

impl Answer {
    /// An answer with `status` alone.
    pub fn of(status: u16) -> Answer {
        Answer {
            status,
            retry_after: None,
            body: None,
            full: None,
            no_result: None,
            per_item: false,
        }
    }
}

/// The most of an answer ever read whole (`Outgoing::read_answer`).
pub const MAX_READ_ANSWER_BYTES: usize = crate::core::batch::MAX_ANSWER_BYTES;

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
    /// How the route's events are batched (`None`: one request each); for
    /// the delivery stages, not the client.
    pub batch: Option<std::sync::Arc<crate::core::batch::BatchSpec>>,
    /// Read a 2xx answer whole into `Answer::full` (a batch's per-item
    /// results), at most this many bytes (`core::batch::answer_cap`, within
    /// [`MAX_READ_ANSWER_BYTES`]); `None`: not read.
    pub read_answer: Option<usize>,
}
