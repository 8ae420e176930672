//! A delivery, from the request to the answer: reading the event and its
//! `Idempotency-Key`, booking the attempt, the simulated latency, deciding
//! the answer (`down_status` → `fail_ids` → `fail_keys` → `fail_rate` → 200) and booking
//! it: `POST /events` and the mapped `/routes/*`. The batch endpoint
//! ([`batch`](super::batch)) reuses these steps per item.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::Rng as _;
use serde::Deserialize;
use serde_json::Value;

use super::book::{CapacitySlot, InFlight, Shared};
use super::{order, probe, Behaviour, RequestSample, IDEMPOTENCY_KEY};

/// One event of a delivery, as the stand-in reads it.
pub(super) struct Delivered {
    pub(super) id: String,
    /// The full body, only while bodies are recorded.
    pub(super) body: Option<Value>,
    /// Its key and sequence number, for the per-key order check.
    pub(super) mark: Option<order::Mark>,
}

/// Reads one event's JSON text (and the full body when `keep_body`). The
/// error is the reason sent with the 400.
pub(super) fn parse_event(text: &[u8], keep_body: bool) -> Result<Delivered, &'static str> {
    // serde would also accept a JSON array as a struct; only objects are events.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("body must be a JSON object with a string \"id\"\n");
    }
    if keep_body {
        let value: Value = serde_json::from_slice(text).map_err(|_| "body is not valid JSON\n")?;
        event_of_value(value)
    } else {
        let probe: probe::EventProbe = serde_json::from_slice(text)
            .map_err(|_| "body must be a JSON object with a string \"id\"\n")?;
        Ok(Delivered {
            id: probe.id.clone(),
            body: None,
            mark: probe.mark(),
        })
    }
}

/// Reads one event from its parsed JSON (kept as its body).
pub(super) fn event_of_value(value: Value) -> Result<Delivered, &'static str> {
    if !value.is_object() {
        return Err("body must be a JSON object with a string \"id\"\n");
    }
    let probe =
        probe::EventProbe::deserialize(&value).map_err(|_| "body must have a string \"id\"\n")?;
    Ok(Delivered {
        id: probe.id.clone(),
        mark: probe.mark(),
        body: Some(value),
    })
}

/// Extracts the event (and the full body when `keep_body`), checking the
/// idempotency key. The error is the reason sent with the 400.
pub(super) fn parse_delivery(
    headers: &HeaderMap,
    body: &[u8],
    keep_body: bool,
) -> Result<Delivered, &'static str> {
    let event = parse_event(body, keep_body)?;
    match headers.get(IDEMPOTENCY_KEY) {
        Some(key) if key.as_bytes() == event.id.as_bytes() => Ok(event),
        Some(_) => Err("Idempotency-Key differs from the event id\n"),
        None => Err("missing Idempotency-Key header\n"),
    }
}

/// The answer to one delivery.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) retry_after_s: Option<u64>,
}

impl Answer {
    pub(super) const OK: Answer = Answer {
        status: StatusCode::OK,
        retry_after_s: None,
    };

    pub(super) fn fail(status: u16, retry_after_s: Option<u64>) -> Answer {
        Answer {
            status: status_code(status),
            retry_after_s,
        }
    }
}

/// `down_status → fail_ids → fail_keys → fail_rate → 200`, for the
/// `attempt`-th request for `id`, of entity `key` (its order mark's).
pub(super) fn decide(behaviour: &Behaviour, id: &str, key: Option<&str>, attempt: u32) -> Answer {
    if let Some(status) = behaviour.down_status {
        return Answer::fail(status, None);
    }
    let rule = behaviour
        .fail_ids
        .get(id)
        .or_else(|| key.and_then(|k| behaviour.fail_keys.get(k)));
    if let Some(rule) = rule {
        return match rule.times {
            Some(n) if attempt > n => Answer::OK,
            _ => Answer::fail(rule.status, rule.retry_after_s),
        };
    }
    if behaviour.fail_rate > 0.0 && rand::random::<f64>() < behaviour.fail_rate {
        return Answer::fail(behaviour.fail_status, None);
    }
    Answer::OK
}

/// A configured status as a final HTTP status; anything that cannot be one
/// (1xx, ≥ 600, garbage) becomes 500 rather than a protocol error.
pub(super) fn status_code(code: u16) -> StatusCode {
    if valid_status(code) {
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

pub(super) fn valid_status(code: u16) -> bool {
    (200..=599).contains(&code)
}

pub(super) fn latency(behaviour: &Behaviour) -> Duration {
    let jitter = match behaviour.latency_jitter_ms {
        0 => 0,
        j => rand::rng().random_range(0..=j),
    };
    Duration::from_millis(behaviour.latency_ms.saturating_add(jitter))
}

pub(super) async fn post_event(
    State(shared): State<Arc<Shared>>,
    version: axum::http::Version,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&shared);
    let received = Instant::now();
    if version == axum::http::Version::HTTP_2 {
        shared.http2_requests.fetch_add(1, Relaxed);
    }

    let keep_body = shared.record_bodies.load(Relaxed);
    let event = match parse_delivery(&headers, &body, keep_body) {
        Ok(parsed) => parsed,
        Err(reason) => {
            shared.record_bad_request(received);
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    shared.sample_request(&event.id, "POST", &uri, &headers, &body);
    answer_delivery(&shared, &headers, event, received).await
}

impl Shared {
    /// Keeps the request as the id's last one, while recording is on.
    pub(super) fn sample_request(
        &self,
        id: &str,
        method: &str,
        uri: &axum::http::Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) {
        if self.record_requests.load(Relaxed) {
            let sample = request_sample(method, uri, headers, body);
            self.book().requests_sample.insert(id.to_owned(), sample);
        }
    }
}

/// A mapped delivery (`/routes/...` with POST, PUT or PATCH): any body; the id
/// is the `Idempotency-Key` (400 without one).
pub(super) async fn routed_event(
    State(shared): State<Arc<Shared>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&shared);
    let received = Instant::now();
    let Some(id) = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        shared.record_bad_request(received);
        return (StatusCode::BAD_REQUEST, "missing Idempotency-Key header\n").into_response();
    };
    shared.sample_request(&id, method.as_str(), &uri, &headers, &body);
    let event = Delivered {
        id,
        body: None,
        mark: None,
    };
    answer_delivery(&shared, &headers, event, received).await
}

pub(super) fn request_sample(
    method: &str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> RequestSample {
    RequestSample {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string()),
        headers: headers
            .iter()
            .filter(|(n, _)| *n != header::AUTHORIZATION)
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(body).into_owned(),
    }
}

/// Books a well-formed delivery, waits the simulated latency and answers it.
pub(super) async fn answer_delivery(
    shared: &Shared,
    headers: &HeaderMap,
    event: Delivered,
    received: Instant,
) -> Response {
    let Delivered { id, body, mark } = event;
    let (attempt, generation) = shared.record_attempt(&id, received, body);
    let redelivery = headers.contains_key(REDELIVERY);
    if redelivery {
        shared.book().count_redelivery(received);
    }

    let Some(_slot) = CapacitySlot::take(shared, received) else {
        shared.record_answer(
            id,
            generation,
            StatusCode::TOO_MANY_REQUESTS,
            None,
            redelivery,
        );
        return StatusCode::TOO_MANY_REQUESTS.into_response();
    };
    let delay = latency(&shared.behaviour());
    if !delay.is_zero() {
        // The simulated API latency itself.
        tokio::time::sleep(delay).await;
    }

    // Decide with the behaviour as it is now, so a change made during the latency
    // (an outage starting) applies to the requests already waiting.
    let behaviour = shared.behaviour();
    let answer = if shared.authorized(&behaviour, headers).await {
        decide(
            &behaviour,
            &id,
            mark.as_ref().map(|m| m.key.as_str()),
            attempt,
        )
    } else {
        Answer::fail(401, None)
    };
    shared.record_answer(id, generation, answer.status, mark.as_ref(), redelivery);
    respond(&behaviour, &answer)
}

/// Header marking a DLQ redelivery.
pub(super) const REDELIVERY: &str = "courier-redelivery";

impl Shared {
    /// Whether the request's credentials pass `required_token` /
    /// `introspect_url` (true when neither is set).
    pub(super) async fn authorized(&self, behaviour: &Behaviour, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match (&behaviour.required_token, &behaviour.introspect_url) {
            (Some(t), _) => bearer == Some(t.as_str()),
            (None, Some(url)) => match bearer {
                Some(token) => self.introspector.accepts(url, token).await,
                None => false,
            },
            (None, None) => true,
        }
    }
}

/// The response for `answer` alone: its status, `fail_body` on a failure,
/// `Retry-After` when the answer has one.
pub(super) fn respond(behaviour: &Behaviour, answer: &Answer) -> Response {
    let mut response = match &behaviour.fail_body {
        Some(b) if !answer.status.is_success() => (answer.status, b.clone()).into_response(),
        _ => answer.status.into_response(),
    };
    if let Some(seconds) = answer.retry_after_s {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
