//! The batch endpoint: `POST /batch` and `POST /batch/*` (any path under it),
//! for Courier's `[api.batch]`.
//!
//! **Bodies.** What a request holds is read from its `Content-Type` and shape:
//!
//! | body                                             | read as                        |
//! |--------------------------------------------------|--------------------------------|
//! | `Content-Type: application/x-ndjson` (or `application/ndjson`, `application/jsonl`) | one event object per line (`ndjson`), blank lines skipped |
//! | a JSON array (`json_array`, `application/cloudevents-batch+json`) | one event object per element |
//! | a JSON object, `Idempotency-Key` starting `batch-`, an array at [`Behaviour::batch_items_pointer`](super::Behaviour::batch_items_pointer) (default `/events`: `{"events": [...]}`, the `template` format) | one event object per element |
//! | any other JSON object                            | a single event, as on `/events` (a batch of one: its id is the `Idempotency-Key`) |
//!
//! A batch body's `Idempotency-Key` must start with `batch-` (400 otherwise);
//! one that is not the key Courier derives from the item ids
//! (`derived_key`) is still answered, and counted in
//! `Audit::batch_key_mismatches`. A JSON array or ndjson body **without** an
//! `Idempotency-Key` is a keyless batch (what a generic batching client sends,
//! e.g. Benthos' `http_client` with `archive: json_array`): its items are booked
//! by their ids like any other, and the request is counted in
//! `Audit::batch_keyless`. A single event or a template object still needs its key. Every item needs a string `"id"`; an empty
//! batch, a malformed one or a bad item is a 400 for the whole request
//! (`bad_requests`, nothing booked per item).
//!
//! **Books.** Each item is booked exactly like a delivery to `/events`
//! (attempt, answer, `delivered`, `order`, `per_second`, the per-key order
//! check); the request itself in `batch_requests`, `batch_items`,
//! `per_second_batches`. Order: validate, book every item's attempt, 413 if
//! the body is above `batch_max_bytes`, take a capacity slot (429 for all if
//! none), sleep the latency once, then decide with the behaviour as it is
//! now: 401 for all if the credentials fail, `down_status` for all, 400 for
//! all if an item's id is in `batch_poison_ids`, else each item on its own
//! (`fail_ids` rule → `fail_keys` rule → `fail_rate` → 200, as on
//! `/events`), then the per-item faults' `item_mix`, then, with
//! `keep_key_order`, every item after a failed item of its key answered 503
//! (`order::fail_followers`).
//!
//! **Answers.** Refused as a whole (401, 413, 429, `down_status`, poison 400):
//! the plain status (with `fail_body`). A single event: its own status, as on
//! `/events`. A batch body decided per item: **200** if every item succeeded,
//! else **207**, both with the body
//!
//! ```json
//! {"items": [{"id": "ev-1", "status": 200}, {"id": "ev-2", "status": 503}]}
//! ```
//!
//! one element per item in the batch's order (reversed with
//! `batch_results_reversed`), so Courier reads it with `results = "/items"`,
//! `result_status = "/status"` and, to match by id, `result_id = "/id"`. A
//! failing item's `Retry-After` (its `fail_ids` rule's) is sent as the
//! answer's, the largest when several have one. With `batch_whole_status` the
//! answer is plain: 200 when every item succeeded, else the first failing
//! item's status, and every item is booked as failed with it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::faults::{self, WholeFault};
use super::order::{self, Mark};
use super::{
    decide, event_of_value, latency, parse_delivery, parse_event, respond, Answer, CapacitySlot,
    Delivered, InFlight, Shared, IDEMPOTENCY_KEY, REDELIVERY,
};

/// The prefix of every batch body's `Idempotency-Key`.
const KEY_PREFIX: &str = "batch-";

/// The batch endpoint's part of the books.
#[derive(Debug, Default)]
pub(super) struct BatchBook {
    pub requests: u64,
    pub items: u64,
    pub singles: u64,
    pub max_items: u64,
    pub refused_413: u64,
    pub refused_whole: u64,
    pub key_mismatches: u64,
    pub keyless: u64,
    pub per_second: Vec<u64>,
    /// Items whose key an earlier item of the same batch has.
    pub same_key_items: u64,
    /// Items held back behind a failed item of their key (`keep_key_order`).
    pub held_back: u64,
}

/// The answer body of a batch decided per item.
#[derive(Debug, Serialize)]
pub struct BatchResults<'a> {
    pub items: Vec<ItemResult<'a>>,
}

/// One item's result: its event id and status.
#[derive(Debug, Serialize)]
pub struct ItemResult<'a> {
    pub id: &'a str,
    pub status: u16,
}

/// What a request to the batch endpoint holds.
struct Parsed {
    items: Vec<Delivered>,
    /// A batch body (else a single event, answered as on `/events`).
    batch: bool,
    /// A batch body sent without an `Idempotency-Key` (module docs).
    keyless: bool,
}

/// Reads a request: a batch body or a single event (module docs). The error
/// is the reason sent with the 400.
fn parse(
    headers: &HeaderMap,
    body: &[u8],
    pointer: &str,
    keep_body: bool,
) -> Result<Parsed, &'static str> {
    let key = headers.get(IDEMPOTENCY_KEY);
    let batch_key = key.is_some_and(|k| k.as_bytes().starts_with(KEY_PREFIX.as_bytes()));
    let items = if is_ndjson(headers) {
        body.split(|&b| b == b'\n')
            .filter(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
            .map(|line| parse_event(line, keep_body))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => {
                let raw: Vec<&RawValue> =
                    serde_json::from_slice(body).map_err(|_| "batch body is not a JSON array\n")?;
                raw.iter()
                    .map(|item| parse_event(item.get().as_bytes(), keep_body))
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(b'{') if batch_key => {
                let mut value: Value =
                    serde_json::from_slice(body).map_err(|_| "body is not valid JSON\n")?;
                match value.pointer_mut(pointer).map(Value::take) {
                    Some(Value::Array(items)) => items
                        .into_iter()
                        .map(|item| {
                            let mut event = event_of_value(item)?;
                            if !keep_body {
                                event.body = None;
                            }
                            Ok(event)
                        })
                        .collect::<Result<Vec<_>, &'static str>>()?,
                    _ => return Err("batch body has no array of events at the items pointer\n"),
                }
            }
            _ => {
                key.ok_or("missing Idempotency-Key header\n")?;
                let event = parse_delivery(headers, body, keep_body)?;
                return Ok(Parsed {
                    items: vec![event],
                    batch: false,
                    keyless: false,
                });
            }
        }
    };
    if items.is_empty() {
        return Err("batch body holds no events\n");
    }
    if key.is_some() && !batch_key {
        return Err("a batch's Idempotency-Key must start with \"batch-\"\n");
    }
    Ok(Parsed {
        items,
        batch: true,
        keyless: key.is_none(),
    })
}

/// Whether the request says its body is newline-delimited JSON.
fn is_ndjson(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    [
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
    ]
    .iter()
    .any(|t| essence.eq_ignore_ascii_case(t))
}

/// Handles `POST /batch` and `POST /batch/*` (module docs).
pub(super) async fn post_batch(
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
    let pointer = shared.behaviour().batch_items_pointer.clone();
    let Parsed {
        items,
        batch,
        keyless,
    } = match parse(&headers, &body, &pointer, keep_body) {
        Ok(parsed) => parsed,
        Err(reason) => {
            shared.record_bad_request(received);
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    for item in &items {
        shared.sample_request(&item.id, "POST", &uri, &headers, &body);
    }
    let redelivery = headers.contains_key(REDELIVERY);
    let expected_key =
        (batch && !keyless).then(|| derived_key(items.iter().map(|i| i.id.as_str())));
    let key_matches = expected_key.is_none_or(|k| {
        headers
            .get(IDEMPOTENCY_KEY)
            .is_some_and(|v| v.as_bytes() == k.as_bytes())
    });
    let mut ids = Vec::with_capacity(items.len());
    let mut marks = Vec::with_capacity(items.len());
    let (attempts, generation) = {
        let mut book = shared.book();
        let attempts: Vec<u32> = items
            .into_iter()
            .map(|item| {
                let attempt = book.attempt(&item.id, received, item.body);
                if redelivery {
                    book.count_redelivery(received);
                }
                ids.push(item.id);
                marks.push(item.mark);
                attempt
            })
            .collect();
        book.count_batch(received, ids.len() as u64, batch, key_matches);
        if !redelivery {
            book.batch.same_key_items += same_key_items(&marks);
        }
        if keyless {
            book.batch.keyless += 1;
        }
        (attempts, book.generation)
    };
    let whole = |status: StatusCode| -> Vec<StatusCode> { vec![status; ids.len()] };

    if batch {
        if let Some(max) = shared.behaviour().batch_max_bytes {
            if body.len() > max {
                shared.book().batch.refused_413 += 1;
                let answer = Answer::fail(413, None);
                shared.book_answers(generation, redelivery, &ids, &whole(answer.status), &marks);
                return respond(&shared.behaviour(), &answer);
            }
        }
    }
    let Some(_slot) = CapacitySlot::take(&shared, received) else {
        shared.book_answers(
            generation,
            redelivery,
            &ids,
            &whole(StatusCode::TOO_MANY_REQUESTS),
            &marks,
        );
        return StatusCode::TOO_MANY_REQUESTS.into_response();
    };
    let delay = latency(&shared.behaviour());
    if !delay.is_zero() {
        // The simulated API latency itself, once for the whole request.
        tokio::time::sleep(delay).await;
    }

    // Decided with the behaviour as it is now (an outage starting during the
    // latency applies), as on `/events`.
    let behaviour = shared.behaviour();
    let refused = if !shared.authorized(&behaviour, &headers).await {
        Some(Answer::fail(401, None))
    } else if let Some(status) = behaviour.down_status {
        Some(Answer::fail(status, None))
    } else if ids.iter().any(|id| behaviour.batch_poison_ids.contains(id)) {
        shared.book().batch.refused_whole += 1;
        Some(Answer::fail(400, None))
    } else {
        None
    };
    if let Some(answer) = refused {
        shared.book_answers(generation, redelivery, &ids, &whole(answer.status), &marks);
        return respond(&behaviour, &answer);
    }

    if batch {
        if let Some(fault) = behaviour.batch_faults.draw_whole() {
            let booked = match fault {
                WholeFault::Status(s) => crate::sink::status_code(s),
                WholeFault::Html | WholeFault::Cut => faults::NOT_STORED,
            };
            shared.book_answers(generation, redelivery, &ids, &whole(booked), &marks);
            let results: Vec<ItemResult<'_>> = ids
                .iter()
                .map(|id| ItemResult { id, status: 200 })
                .collect();
            let body = serde_json::to_vec(&BatchResults { items: results }).unwrap_or_default();
            return faults::whole_answer(fault, &body);
        }
    }
    let answers: Vec<Answer> = ids
        .iter()
        .zip(&attempts)
        .zip(&marks)
        .map(|((id, &attempt), mark)| {
            decide(
                &behaviour,
                id,
                mark.as_ref().map(|m| m.key.as_str()),
                attempt,
            )
        })
        .collect();
    if !batch {
        let answer = &answers[0];
        shared.book_answers(generation, redelivery, &ids, &[answer.status], &marks);
        return respond(&behaviour, answer);
    }
    let first_failure = answers.iter().find(|a| !a.status.is_success());
    if behaviour.batch_whole_status {
        let answer = first_failure.map_or(Answer::OK, |a| Answer {
            status: a.status,
            retry_after_s: a.retry_after_s,
        });
        shared.book_answers(generation, redelivery, &ids, &whole(answer.status), &marks);
        return respond(&behaviour, &answer);
    }
    let mut statuses: Vec<StatusCode> = answers.iter().map(|a| a.status).collect();
    faults::mix_items(&behaviour.batch_faults, &mut statuses);
    if behaviour.keep_key_order {
        let held = order::fail_followers(&marks, &mut statuses);
        if held > 0 {
            shared.book().batch.held_back += held;
        }
    }
    let listed = faults::list_results(&behaviour.batch_faults, &mut statuses);
    shared.book_answers(generation, redelivery, &ids, &statuses, &marks);
    // A faulty API answers 200 however its items went (module docs).
    let status = match first_failure {
        Some(_) if !behaviour.batch_faults.any() => StatusCode::MULTI_STATUS,
        _ => StatusCode::OK,
    };
    let mut results: Vec<ItemResult<'_>> = listed
        .into_iter()
        .map(|(i, status)| ItemResult {
            id: &ids[i],
            status,
        })
        .collect();
    if behaviour.batch_results_reversed {
        results.reverse();
    }
    let padding = behaviour.batch_faults.answer_padding;
    if padding > 0 {
        let results = serde_json::to_vec(&results).unwrap_or_default();
        return faults::padded_answer(status, results, padding);
    }
    let mut response = (status, Json(BatchResults { items: results })).into_response();
    let retry_after = answers
        .iter()
        .filter(|a| !a.status.is_success())
        .filter_map(|a| a.retry_after_s)
        .max();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, seconds.into());
    }
    response
}

impl super::Book {
    /// Counts a well-formed request to the batch endpoint of `items` events.
    fn count_batch(&mut self, received: Instant, items: u64, batch: bool, key_matches: bool) {
        let b = &mut self.batch;
        b.requests += 1;
        b.items += items;
        b.max_items = b.max_items.max(items);
        if !batch {
            b.singles += 1;
        }
        if !key_matches {
            b.key_mismatches += 1;
        }
        let second = received.saturating_duration_since(self.epoch).as_secs() as usize;
        if b.per_second.len() <= second {
            b.per_second.resize(second + 1, 0);
        }
        b.per_second[second] += 1;
    }
}

/// Items of one request whose key (the load generator's mark) an earlier
/// item of the request has: `ordered = true` runs; without them, `key` mode
/// sends a key's events one at a time.
fn same_key_items(marks: &[Option<Mark>]) -> u64 {
    let mut seen = std::collections::HashSet::with_capacity(marks.len());
    marks
        .iter()
        .flatten()
        .filter(|m| !seen.insert(m.key.as_str()))
        .count() as u64
}

impl Shared {
    /// Books each item's answer (`ids`, `statuses` and `marks` side by side).
    fn book_answers(
        &self,
        generation: u64,
        redelivery: bool,
        ids: &[String],
        statuses: &[StatusCode],
        marks: &[Option<Mark>],
    ) {
        self.record_answers(
            generation,
            redelivery,
            ids.iter()
                .zip(statuses)
                .zip(marks)
                .map(|((id, &s), m)| (id.clone(), s, m.as_ref())),
        );
    }
}

/// The `Idempotency-Key` Courier derives for a batch, by its documented rule:
/// `batch-` and the first 16 bytes, in hex, of SHA-256 over the item ids in
/// order, each followed by a newline. Written again here rather than taken
/// from Courier (`core::batch::idempotency_key`): the stand-in checks what
/// Courier sends, so it must not share the code it checks.
fn derived_key<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    use sha2::{Digest, Sha256};
    let digest = ids
        .fold(Sha256::new(), |h, id| h.chain_update(id).chain_update("\n"))
        .finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{KEY_PREFIX}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(key: &str, ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(IDEMPOTENCY_KEY, HeaderValue::from_str(key).expect("key"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).expect("ct"));
        h
    }

    /// The same vector pins Courier's side (`core::batch` tests).
    #[test]
    fn the_derived_key_follows_the_documented_rule() {
        let key = derived_key(["ev-1", "ev-2"].into_iter());
        assert_eq!(key, "batch-69c7792cb44aabcaf76caa472c5d7cac");
    }

    fn ids(p: &Parsed) -> Vec<&str> {
        p.items.iter().map(|i| i.id.as_str()).collect()
    }

    #[test]
    fn reads_every_shape() {
        let json = headers("batch-1", "application/json");
        let p = parse(&json, br#"[{"id":"a"},{"id":"b"}]"#, "/events", false).expect("array");
        assert_eq!((ids(&p), p.batch), (vec!["a", "b"], true));
        let nd = headers("batch-1", "application/x-ndjson; charset=utf-8");
        let p = parse(&nd, b"{\"id\":\"a\"}\n\n{\"id\":\"b\"}\n", "/events", false).expect("nd");
        assert_eq!(ids(&p), ["a", "b"]);
        let p = parse(&json, br#"{"events":[{"id":"a"}]}"#, "/events", true).expect("tpl");
        assert_eq!((ids(&p), p.batch), (vec!["a"], true));
        assert!(p.items[0].body.is_some());
        let p = parse(&json, br#"{"d":{"e":[{"id":"a"}]}}"#, "/d/e", false).expect("ptr");
        assert_eq!(ids(&p), ["a"]);
        let one = headers("a", "application/cloudevents+json");
        let p = parse(&one, br#"{"id":"a","events":[]}"#, "/events", false).expect("one");
        assert_eq!((ids(&p), p.batch), (vec!["a"], false));
    }

    #[test]
    fn refuses_what_is_not_a_batch() {
        let json = headers("batch-1", "application/json");
        for body in [
            &b"[]"[..],
            b"[1,2]",
            br#"[["a"]]"#,
            br#"[{"id":"a"},{"no":"id"}]"#,
            br#"{"events":{"id":"a"}}"#,
            b"[{",
        ] {
            assert!(parse(&json, body, "/events", false).is_err(), "{body:?}");
        }
        let wrong_key = headers("a", "application/json");
        let err = parse(&wrong_key, br#"[{"id":"a"}]"#, "/events", false).err();
        assert_eq!(
            err,
            Some("a batch's Idempotency-Key must start with \"batch-\"\n")
        );
        let single_mismatch = headers("b", "application/json");
        assert!(parse(&single_mismatch, br#"{"id":"a"}"#, "/events", false).is_err());
        let mut none = HeaderMap::new();
        none.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(parse(&none, br#"{"id":"a"}"#, "/events", false).is_err());
        assert!(parse(&none, br#"{"events":[{"id":"a"}]}"#, "/events", false).is_err());
    }

    #[test]
    fn a_keyless_array_is_a_batch() {
        let mut none = HeaderMap::new();
        none.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let p = parse(&none, br#"[{"id":"a"},{"id":"b"}]"#, "/events", false).expect("array");
        assert_eq!((ids(&p), p.batch, p.keyless), (vec!["a", "b"], true, true));
        none.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        let p = parse(&none, b"{\"id\":\"a\"}\n", "/events", false).expect("ndjson");
        assert_eq!((ids(&p), p.keyless), (vec!["a"], true));
        assert!(parse(&none, b"[]", "/events", false).is_err());
        let keyed = headers("batch-1", "application/json");
        let p = parse(&keyed, br#"[{"id":"a"}]"#, "/events", false).expect("keyed");
        assert!(!p.keyless);
    }
}
