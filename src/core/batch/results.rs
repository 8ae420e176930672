//! Per-item results (`api.batch.results`): what a 2xx batch answer says about
//! each item — and, failing closed, when it says nothing an item can rely on.
//!
//! With `results` configured, only a readable list of results proves an item
//! done. An answer whose body could not be read whole (a read error, over
//! the read cap), is not JSON (a proxy's HTML page) or has no array at the
//! pointer gives *every* item "no result" ([`Unreadable`]); an item the list
//! does not mention, whose element has no status, that is listed twice with
//! two different statuses, or whose id another item of the batch shares
//! (matching by id cannot tell them apart) gets "no result" too
//! ([`NoResult`]). "No result" is transient: the item is sent again.
//!
//! The body is walked, not built into a tree: the pointer's path is followed
//! through borrowed raw JSON (`serde_json::value::RawValue`), elements are
//! visited one by one, and only what an item needs — its status and, for a
//! failure's `last_error`, its element's text (a slice of the body) — is
//! kept. A body of 8 MiB of `[0,0,…]` costs a pass over it, not a tree.
//!
//! # Invariant I37: answers fail closed
//!
//! With `api.batch.results` an event is done only when a readable result says so. A 2xx
//! batch body is read whole within its batch's cap (`core::batch::answer_cap`:
//! `answer_bytes_per_event` per event plus 64 KiB, at most 8 MiB; `delivery::http::read_whole`,
//! its buffer never grown past the cap: a read error is an
//! error, not the end of the body) and walked through borrowed raw JSON
//! (`core::batch::results`: the pointer's path followed member by member, elements visited
//! one by one; no tree). An answer that cannot be read (`Unreadable`: read failed, too large,
//! not JSON, no array) gives every event `no_result_*`; an event not listed, without a
//! readable status, listed twice with different statuses, or sharing its id with another of
//! the batch gets its own `NoResult`. All are transient (`FailureReason::NoResult`), sent
//! again — at once, without spending a try, when the answer accepted others of the request
//! (at most `FREE_RESENDS` times per try, never a run's event: `core::batch::resend`). With
//! `result_id`, events sharing an id never share a request: parts by occurrence rank, sent
//! at once (`core::batch::id_rank_parts`; an ordered run's in consecutive runs one after the
//! other, `unique_id_runs`). A batch of one is a batch (format, key, results); a body
//! no batch can hold (not JSON) is parked on a route with results, never sent alone
//! (`core::batch::place`). ndjson
//! items are made one line for every reader (`core::batch::place`); a template's
//! `$items` must stand where a value goes.
//!
//! *Tested by* `core::batch::{results,items}` unit tests; `tests/fail_closed.rs`: HTML 200s
//! and cut bodies, an id listed twice (201 and 503), a batch of one — each seen failing on
//! 3595d1c (events lost, or single-event bodies sent) —, a route whose batches all end
//! alone after splits (parked `http_400`, said on `/status` and in the log), and the
//! half-accepting API with the default tries (`a_half_accepting_api_gets_every_event_with_
//! the_default_tries`: none parked — on 45109fa 2 of 3,000 parked `max_retries`);
//! `tests/batch_bounds.rs::huge_batch_answers_are_read_within_the_batchs_cap` (40 batches
//! answered 6 MiB each at once: peak RSS 375 MiB on 45109fa, 96 MiB with the cap, debug build);
//! `delivery::tests::batch_answers::an_event_left_out_of_an_answer_that_accepted_others_keeps_its_try`
//! (seen failing with the resend removed), `a_body_that_is_not_json_is_parked_on_a_route_with_results`
//! (seen failing on 45109fa: sent alone and delivered by a bare 200),
//! `a_repeated_id_makes_parts_by_rank_sent_at_once` (seen failing on 45109fa: three
//! sequential pieces); the drill's
//! `partial-api` scenario.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// Where per-item results are in a batch answer (`api.batch.results`,
/// `result_status`, `result_id`: JSON pointers).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultsSpec {
    pub results: String,
    pub status: String,
    /// `None`: matched by position.
    pub id: Option<String>,
}

/// Why a 2xx batch answer gives no item a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreadable {
    /// Reading the body failed before its end (a reset, a timeout).
    ReadFailed,
    /// The body is larger than the read cap.
    TooLarge,
    /// The body is not JSON (e.g. an HTML page from a proxy).
    NotJson,
    /// No array at the results pointer.
    NoResultsArray,
}

impl Unreadable {
    /// The label of `courier_batch_results_unreadable_total{reason}`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unreadable::ReadFailed => "read_failed",
            Unreadable::TooLarge => "too_large",
            Unreadable::NotJson => "not_json",
            Unreadable::NoResultsArray => "no_results_array",
        }
    }
}

/// Why an item has no result it can rely on (it is sent again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoResult {
    /// The answer as a whole could not be read.
    Unreadable(Unreadable),
    /// The results do not list it.
    NotListed,
    /// Its element has no status Courier can read.
    NoStatus,
    /// It is listed more than once, with different statuses.
    Conflicting,
    /// Another item of the batch has the same id (matching by id).
    SharedId,
}

impl NoResult {
    /// The failure reason an item without a result carries
    /// (`courier_delivery_errors_total{reason}`, `last_error.reason`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NoResult::Unreadable(Unreadable::ReadFailed) => "no_result_read_failed",
            NoResult::Unreadable(Unreadable::TooLarge) => "no_result_too_large",
            NoResult::Unreadable(Unreadable::NotJson) => "no_result_not_json",
            NoResult::Unreadable(Unreadable::NoResultsArray) => "no_result_no_array",
            NoResult::NotListed => "no_result_not_listed",
            NoResult::NoStatus => "no_result_no_status",
            NoResult::Conflicting => "no_result_conflicting",
            NoResult::SharedId => "no_result_shared_id",
        }
    }

    /// What `last_error.message` says of it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            NoResult::Unreadable(Unreadable::ReadFailed) => {
                "the answer's body could not be read to its end"
            }
            NoResult::Unreadable(Unreadable::TooLarge) => "the answer's body is over the read cap",
            NoResult::Unreadable(Unreadable::NotJson) => "the answer's body is not JSON",
            NoResult::Unreadable(Unreadable::NoResultsArray) => {
                "the answer has no results array at api.batch.results"
            }
            NoResult::NotListed => "the results do not list it",
            NoResult::NoStatus => "its result has no readable status",
            NoResult::Conflicting => "the results list it twice with different statuses",
            NoResult::SharedId => "another event of its batch has the same id",
        }
    }
}

/// One item's result in a batch answer: borrowed from the answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemResult<'a> {
    /// Listed with `status` at `position` of the results (`element`: its JSON).
    Listed {
        status: u16,
        position: usize,
        element: &'a str,
    },
    /// Nothing it can rely on.
    Missing(NoResult),
}

impl ItemResult<'_> {
    /// The status the item's answer carries: its result's, or for no
    /// result [`super::MISSING_RESULT_STATUS`] (sent again).
    pub fn status(&self) -> u16 {
        match self {
            ItemResult::Listed { status, .. } => *status,
            ItemResult::Missing(_) => super::MISSING_RESULT_STATUS,
        }
    }
}

/// Each item's result in a 2xx batch answer's `body`, for items with `ids`
/// (in the batch's order); `Err`: the answer gives no item a result.
pub fn item_results<'a>(
    spec: &ResultsSpec,
    body: &'a [u8],
    ids: &[&str],
) -> Result<Vec<ItemResult<'a>>, Unreadable> {
    let text = std::str::from_utf8(body).map_err(|_| Unreadable::NotJson)?;
    let root: &RawValue = serde_json::from_str(text).map_err(|_| Unreadable::NotJson)?;
    let array = at(root, &spec.results)
        .filter(|a| a.get().starts_with('['))
        .ok_or(Unreadable::NoResultsArray)?;
    let n = ids.len();
    let mut out = vec![ItemResult::Missing(NoResult::NotListed); n];
    match &spec.id {
        None => {
            each_element(array, |position, element| {
                if position < n {
                    out[position] = listed(spec, position, element);
                }
                position + 1 < n
            })
            .map_err(|_| Unreadable::NoResultsArray)?;
        }
        Some(id_pointer) => {
            let mut index: HashMap<&str, usize> = HashMap::with_capacity(n);
            let mut shared = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                if let Some(first) = index.insert(id, i) {
                    shared.push(first);
                    shared.push(i);
                }
            }
            each_element(array, |position, element| {
                let Some(i) = id_of(element, id_pointer).and_then(|id| index.get(&*id).copied())
                else {
                    return true;
                };
                let this = listed(spec, position, element);
                out[i] = match (out[i], this) {
                    (ItemResult::Missing(NoResult::NotListed), this) => this,
                    (ItemResult::Missing(NoResult::Conflicting), _) => {
                        ItemResult::Missing(NoResult::Conflicting)
                    }
                    (
                        ItemResult::Listed { status: a, .. },
                        ItemResult::Listed { status: b, .. },
                    ) if a == b => out[i],
                    _ => ItemResult::Missing(NoResult::Conflicting),
                };
                true
            })
            .map_err(|_| Unreadable::NoResultsArray)?;
            for i in shared {
                out[i] = ItemResult::Missing(NoResult::SharedId);
            }
        }
    }
    Ok(out)
}

/// Whether a batch answer's `body` lists any result with one of `statuses`
/// (e.g. 429 and 503: back-pressure for the adaptive limit). Unreadable:
/// no.
pub(crate) fn any_item_status(spec: &ResultsSpec, body: &[u8], statuses: &[u16]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let Some(array) = serde_json::from_str::<&RawValue>(text)
        .ok()
        .and_then(|root| at(root, &spec.results))
    else {
        return false;
    };
    let mut found = false;
    let _ = each_element(array, |_, element| {
        found = at(element, &spec.status)
            .and_then(status_of)
            .is_some_and(|s| statuses.contains(&s));
        !found
    });
    found
}

/// An element's result: its status (a number, or a numeric string, 100-599).
fn listed<'a>(spec: &ResultsSpec, position: usize, element: &'a RawValue) -> ItemResult<'a> {
    match at(element, &spec.status).and_then(status_of) {
        Some(status) => ItemResult::Listed {
            status,
            position,
            element: element.get(),
        },
        None => ItemResult::Missing(NoResult::NoStatus),
    }
}

fn status_of(raw: &RawValue) -> Option<u16> {
    let n: u64 = match serde_json::from_str::<StrOrNum<'_>>(raw.get()).ok()? {
        StrOrNum::Num(n) => n,
        StrOrNum::Str(s) => s.trim().parse().ok()?,
    };
    u16::try_from(n).ok().filter(|n| (100..=599).contains(n))
}

/// An element's id: a string, or a number as written (an API echoing an id
/// `"42"` as `42` still matches).
fn id_of<'a>(element: &'a RawValue, pointer: &str) -> Option<Cow<'a, str>> {
    let raw = at(element, pointer)?;
    let text = raw.get();
    if text.starts_with('"') {
        serde_json::from_str::<Cow<'a, str>>(text).ok()
    } else if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        Some(Cow::Borrowed(text))
    } else {
        None
    }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StrOrNum<'a> {
    Num(u64),
    #[serde(borrow)]
    Str(Cow<'a, str>),
}

/// The raw JSON at `pointer` (RFC 6901) in `raw`, found without building a
/// tree: each step reads one object member or array element.
pub(crate) fn at<'a>(raw: &'a RawValue, pointer: &str) -> Option<&'a RawValue> {
    if pointer.is_empty() {
        return Some(raw);
    }
    let rest = pointer.strip_prefix('/')?;
    let mut cur = raw;
    for token in rest.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        cur = child(cur, &token)?;
    }
    Some(cur)
}

/// An object's member named `token`, or an array's element at index `token`.
fn child<'a>(raw: &'a RawValue, token: &str) -> Option<&'a RawValue> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_any(Child { token }).ok().flatten()
}

struct Child<'t> {
    token: &'t str,
}

impl<'de> Visitor<'de> for Child<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object or array")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if found.is_none() && key == self.token {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let Ok(index) = self.token.parse::<usize>() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(None);
        };
        let mut found = None;
        let mut i = 0usize;
        loop {
            if i == index {
                match seq.next_element::<&'de RawValue>()? {
                    Some(v) => found = Some(v),
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Calls `f(position, element)` for each element of the array `raw`, in
/// order, while it returns `true` (the rest is skipped unread into memory).
fn each_element<'a>(
    raw: &'a RawValue,
    f: impl FnMut(usize, &'a RawValue) -> bool,
) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_seq(Elements { f })
}

struct Elements<F> {
    f: F,
}

impl<'de, F: FnMut(usize, &'de RawValue) -> bool> Visitor<'de> for Elements<F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<S: SeqAccess<'de>>(mut self, mut seq: S) -> Result<(), S::Error> {
        let mut position = 0usize;
        let mut more = true;
        while more {
            match seq.next_element::<&'de RawValue>()? {
                Some(e) => more = (self.f)(position, e),
                None => return Ok(()),
            }
            position += 1;
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(results: &str, status: &str, id: Option<&str>) -> ResultsSpec {
        ResultsSpec {
            results: results.into(),
            status: status.into(),
            id: id.map(Into::into),
        }
    }

    fn statuses(r: &[ItemResult<'_>]) -> Vec<Result<u16, NoResult>> {
        r.iter()
            .map(|r| match r {
                ItemResult::Listed { status, .. } => Ok(*status),
                ItemResult::Missing(m) => Err(*m),
            })
            .collect()
    }

    #[test]
    fn results_by_position_and_by_id() {
        // Elasticsearch's bulk answer.
        let es = br#"{"errors":true,"items":[{"index":{"_id":"a","status":201}},{"index":{"_id":"b","status":400,"error":{"type":"mapper_parsing_exception"}}}]}"#;
        let s = spec("/items", "/index/status", None);
        let r = item_results(&s, es, &["a", "b", "c"]).expect("results");
        assert_eq!(
            statuses(&r),
            vec![Ok(201), Ok(400), Err(NoResult::NotListed)]
        );
        let ItemResult::Listed {
            position, element, ..
        } = r[1]
        else {
            panic!("listed")
        };
        assert_eq!(position, 1);
        assert!(element.contains("mapper_parsing"));
        let by_id = spec("/items", "/index/status", Some("/index/_id"));
        let r = item_results(&by_id, es, &["b", "a"]).expect("results");
        assert_eq!(statuses(&r), vec![Ok(400), Ok(201)]);
        // A string status.
        let s = spec("/r", "/s", None);
        let r = item_results(&s, br#"{"r":[{"s":"503"}]}"#, &["a"]).expect("r");
        assert_eq!(statuses(&r), vec![Ok(503)]);
    }

    #[test]
    fn an_answer_that_cannot_be_read_gives_no_item_a_result() {
        let s = spec("/items", "/status", None);
        let ids = ["a"];
        assert_eq!(
            item_results(&s, b"<!DOCTYPE html><html></html>", &ids),
            Err(Unreadable::NotJson)
        );
        assert_eq!(
            item_results(&s, br#"{"items":[{"status":200}"#, &ids),
            Err(Unreadable::NotJson),
            "cut mid-body"
        );
        assert_eq!(
            item_results(&s, br#"{"ok":true}"#, &ids),
            Err(Unreadable::NoResultsArray)
        );
        assert_eq!(
            item_results(&s, br#"{"items":{"status":200}}"#, &ids),
            Err(Unreadable::NoResultsArray)
        );
        assert_eq!(
            item_results(&s, b"\xff\xfe", &ids),
            Err(Unreadable::NotJson)
        );
    }

    #[test]
    fn conflicting_and_shared_ids_are_no_result() {
        let s = spec("/items", "/status", Some("/id"));
        let body = br#"{"items":[{"id":"a","status":201},{"id":"a","status":503},{"id":"b","status":200},{"id":"b","status":200}]}"#;
        let r = item_results(&s, body, &["a", "b"]).expect("results");
        assert_eq!(
            statuses(&r),
            vec![Err(NoResult::Conflicting), Ok(200)],
            "a twice with two statuses: no result; b twice alike: its status"
        );
        let body = br#"{"items":[{"id":"x","status":200}]}"#;
        let r = item_results(&s, body, &["x", "y", "x"]).expect("results");
        assert_eq!(
            statuses(&r),
            vec![
                Err(NoResult::SharedId),
                Err(NoResult::NotListed),
                Err(NoResult::SharedId)
            ]
        );
    }

    #[test]
    fn ids_echoed_as_numbers_match() {
        let s = spec("/items", "/status", Some("/id"));
        let body = br#"{"items":[{"id":42,"status":201},{"id":"7","status":400}]}"#;
        let r = item_results(&s, body, &["7", "42"]).expect("results");
        assert_eq!(statuses(&r), vec![Ok(400), Ok(201)]);
    }

    #[test]
    fn statuses_outside_http_are_no_status() {
        let s = spec("/items", "/status", None);
        let body = br#"{"items":[{"status":99},{"status":"x"},{},{"status":70000}]}"#;
        let r = item_results(&s, body, &["a", "b", "c", "d"]).expect("results");
        assert!(statuses(&r).iter().all(|r| *r == Err(NoResult::NoStatus)));
    }

    #[test]
    fn pointers_walk_objects_and_arrays_with_escapes() {
        let root: &RawValue =
            serde_json::from_str(r#"{"a/b":{"c~d":[1,{"e":"f"}]},"g":2}"#).expect("json");
        assert_eq!(at(root, "/a~1b/c~0d/1/e").map(RawValue::get), Some("\"f\""));
        assert_eq!(at(root, "/g").map(RawValue::get), Some("2"));
        assert!(at(root, "/a~1b/c~0d/9").is_none());
        assert!(at(root, "/missing").is_none());
        assert!(at(root, "/g/x").is_none());
        assert_eq!(at(root, "").map(RawValue::get), Some(root.get()));
    }

    #[test]
    fn a_huge_results_array_is_walked_not_kept() {
        // 8 MiB of zeros: a pass over it, one result kept.
        let mut body = Vec::with_capacity(8 << 20);
        body.extend_from_slice(b"{\"items\":[");
        for _ in 0..(4 << 20) - 8 {
            body.extend_from_slice(b"0,");
        }
        body.extend_from_slice(b"0]}");
        let s = spec("/items", "/status", None);
        let r = item_results(&s, &body, &["a"]).expect("results");
        assert_eq!(statuses(&r), vec![Err(NoResult::NoStatus)]);
        let by_id = spec("/items", "/status", Some("/id"));
        let r = item_results(&by_id, &body, &["a"]).expect("results");
        assert_eq!(statuses(&r), vec![Err(NoResult::NotListed)]);
    }
}
