//! Batch delivery's decisions (`delivery::batch` carries them out): how the
//! items of a batch become one request body, what a batch answer says about
//! each item, and how a batch refused as a whole is split until the item at
//! fault is alone. Pure: bodies, answers and the split are values.
//!
//! **Bodies** (`api.batch.format`): `json_array` (`[a,b,…]`, `application/json`),
//! `ndjson` (one item per line, `application/x-ndjson`), `cloudevents_batch`
//! (`[a,b,…]`, `application/cloudevents-batch+json`, the CloudEvents HTTP
//! binding's batched mode) and `template`: a JSON text with exactly one
//! `$items` where the array goes (`{"events": $items}`). Nothing else in a
//! template is interpreted.
//!
//! **Per-item results** (`api.batch.results`, a JSON pointer to an array in the
//! answer): element `i` is the result of item `i` — or, with `result_id`, the
//! element whose id is the item's event id. Its status (`result_status`, a JSON
//! pointer within the element; a number or a numeric string) goes through the
//! status policy as if the item had been sent alone. An item the answer does not
//! mention gets [`MISSING_RESULT_STATUS`] (transient: sent again).
//!
//! **Bisection**: a batch answered as a whole with a "split" status (400, 413,
//! 422 by default) is sent again as two halves, each half the same way, down to
//! single items, whose answer is then their own. An item is in one request per
//! level of the split, so a bad item costs at most `2·⌈log₂ n⌉` extra requests
//! (its half and the half's sibling at each level) and a done item is never
//! sent again by the split: only halves of a batch refused as a whole are.
//!
//! # Invariant I34: batches
//!
//! *Enforced in* `src/core/batch/` (bodies, per-item results, `whole_answer`, `halves`,
//! `split_bound`), carried out by `src/delivery/batch.rs` (forming) and
//! `src/delivery/batch/bisect.rs` (going out). An event's call joins its group's batch and waits
//! for its own answer, which it then treats as if it had been sent alone: the attempt loop,
//! the status policy, the DLQ and the parking lot are the single-event ones, so each event of
//! a batch is done, retried, dead-lettered or parked on its own (its `last_error` names the
//! batch answer and its position). A batch answered as a whole with a split status is sent
//! again in halves (recursively, down to single events): only a batch nobody was answered
//! done for is split, so no event is sent again after it was answered done, and one bad event
//! costs at most `2·⌈log₂ n⌉` extra requests. Before each send, events whose wait ended (their
//! partition handed over: the waiting task dropped its answer channel) are left out — when the
//! batch is formed and again once it has its rate slot, however long that took (a batch with
//! nobody left is not sent: `Limits::call_not_made`). The
//! Idempotency-Key of a batch is derived from its ids in order (`core::batch::idempotency_key`).
//!
//! How `delivery` carries it out (first tries without a task, ordered runs) is said in
//! `delivery`'s docs.
//!
//! *Tested by* `core::batch` unit tests and the bisection property test (one bad event in a
//! batch of 1–300: isolated alone, every other event answered by exactly one request, extra
//! requests within the bound); `delivery::tests::batched` (over a fake batch API: per-item
//! results by id, a poison event, a 413 — each also started as the dispatcher starts them,
//! every first try inline —, a handover before the batch leaves, a handover while
//! the batch waits for its rate slot, and for inline first tries a handover while the batch
//! forms and while it waits for its request slot — each seen failing with its mechanism removed);
//! `delivery::tests::ordered` (a run in one batch; the rest resent from a 503; a 400 parked
//! alone; out of tries dead-lettered; bisected halves in order; a run admitted into a half-open
//! probe slot never has two events on the wire — seen failing on 45109fa, its rest batched
//! again at once took a second slot); `tests/batch.rs` against a
//! real broker (every format, per-item results, a poison event, a 413, key order — no batch
//! holds two events of a key without `ordered`, and with it
//! `ordered_runs_share_batches_and_keep_each_keys_last_writes_in_order`: 30 keys, every 37th
//! event answered 503 once in its batch; the stand-in checks each key's last writes (seen
//! failing with a failed run member retried behind the others: 30 of 30 keys), and `a_revoke_mid_batch_sends_nothing_of_the_revoked_partitions`: instance
//! A holds every event in a batch lingering 10 s when B joins the group; A's stand-in receives
//! none of the partitions handed to B, and the audit over both stand-ins loses nothing —
//! seen failing with both checks removed: A sent 1,176 events of B's partitions). With
//! batching the adaptive concurrency limit counts requests (`core::concurrency`, "What the limit holds").

mod items;
mod resend;
mod results;
mod split_rate;

pub(crate) use items::{id_rank_parts, place, unique_id_runs, Placement};
pub(crate) use resend::{accepted_any, resend_at_once};

pub(crate) use results::{any_item_status, ItemResult, NoResult, Unreadable};
pub use results::{item_results, ResultsSpec};
use sha2::{Digest, Sha256};
pub(crate) use split_rate::{SplitReport, SplitWindow};

/// How a route's events are batched (`[api.batch]`, parsed by `config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSpec {
    /// Events per request at most (at least 2: 1 is no batching).
    pub max_events: usize,
    /// Bytes of the encoded body at most; a larger single event goes alone.
    pub max_bytes: usize,
    /// The longest an event waits for its batch.
    pub linger: std::time::Duration,
    pub format: BatchFormat,
    pub results: Option<ResultsSpec>,
    /// Statuses that split a batch answered as a whole.
    pub split: Vec<u16>,
    /// The API applies a batch's items in order (`ordered = true`): a key's
    /// waiting events go out together as a run (`core::ordering`), in offset
    /// order, and are sent again from the first one that failed transiently.
    pub ordered: bool,
    /// The most bytes of a 2xx answer read for its per-item results, per
    /// event of the batch ([`answer_cap`]).
    pub answer_bytes_per_event: usize,
    /// The route's name (`api.routes[i].name`, else its index; [`UNROUTED`]
    /// for the events no route matches): its label in metrics and on
    /// `/status`, never a value an event chose.
    pub route: String,
}

/// The name of the batching of events no route matches (`[api.batch]`).
pub const UNROUTED: &str = "(default)";

/// The most of a batch answer ever read whole (per-item results).
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// What a batch answer may hold beyond `answer_bytes_per_event` per event:
/// the answer's own wrapping (its status line aside).
pub const ANSWER_SLACK_BYTES: usize = 64 * 1024;

/// The most of a 2xx answer to a batch of `events` read whole for its
/// per-item results: `answer_bytes_per_event` per event plus
/// [`ANSWER_SLACK_BYTES`], at most [`MAX_ANSWER_BYTES`]. A longer answer
/// gives every event "no result" (`Unreadable::TooLarge`, sent again): the
/// memory an answer can take is the batch's size, not 8 MiB per request in
/// flight.
pub(crate) fn answer_cap(spec: &BatchSpec, events: usize) -> usize {
    events
        .saturating_mul(spec.answer_bytes_per_event)
        .saturating_add(ANSWER_SLACK_BYTES)
        .min(MAX_ANSWER_BYTES)
}

/// The status an item's answer carries when its batch's answer holds no
/// result for it ([`NoResult`]): 502 (transient: sent again; at least once).
pub(crate) const MISSING_RESULT_STATUS: u16 = 502;

/// `api.batch.format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchFormat {
    JsonArray,
    Ndjson,
    CloudEventsBatch,
    /// The text before and after `$items`.
    Template {
        before: String,
        after: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("must hold $items exactly once (where the JSON array of the items goes)")]
    Placeholder,
    #[error("is not JSON once $items is replaced by an array: {0}")]
    NotJson(String),
    #[error("must hold $items where a JSON value goes (not inside a string or as a name)")]
    NotAValue,
}

/// Whether `v` holds `needle` as a value (itself, a member's value or an
/// element, at any depth).
fn holds_value(v: &serde_json::Value, needle: &serde_json::Value) -> bool {
    if v == needle {
        return true;
    }
    match v {
        serde_json::Value::Array(a) => a.iter().any(|e| holds_value(e, needle)),
        serde_json::Value::Object(o) => o.values().any(|e| holds_value(e, needle)),
        _ => false,
    }
}

impl BatchFormat {
    /// A template: `$items` exactly once, where a JSON value goes (not in a
    /// string, not as a member's name), and JSON around it.
    pub fn template(text: &str) -> Result<BatchFormat, TemplateError> {
        let mut parts = text.split("$items");
        let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(TemplateError::Placeholder);
        };
        // A sample array holding a string: inside a string or a name it
        // breaks the JSON, and it must then be found whole as a value.
        const SAMPLE: &str = r#"[7183,"courier-items"]"#;
        let sample = format!("{before}{SAMPLE}{after}");
        let v = serde_json::from_str::<serde_json::Value>(&sample)
            .map_err(|e| TemplateError::NotJson(e.to_string()))?;
        let items = serde_json::from_str::<serde_json::Value>(SAMPLE)
            .map_err(|e| TemplateError::NotJson(e.to_string()))?;
        if !holds_value(&v, &items) {
            return Err(TemplateError::NotAValue);
        }
        Ok(BatchFormat::Template {
            before: before.to_string(),
            after: after.to_string(),
        })
    }

    pub fn content_type(&self) -> &'static str {
        match self {
            BatchFormat::JsonArray | BatchFormat::Template { .. } => "application/json",
            BatchFormat::Ndjson => "application/x-ndjson",
            BatchFormat::CloudEventsBatch => "application/cloudevents-batch+json",
        }
    }

    /// The bytes `items` add beyond their own: brackets, separators, the
    /// template's text.
    pub(crate) fn overhead(&self, items: usize) -> usize {
        let seps = items.saturating_sub(1);
        match self {
            BatchFormat::JsonArray | BatchFormat::CloudEventsBatch => 2 + seps,
            BatchFormat::Ndjson => items,
            BatchFormat::Template { before, after } => before.len() + after.len() + 2 + seps,
        }
    }

    /// The request body of `items` (each a JSON text; ndjson: each on one line).
    /// `capacity`: the body's length if known (the items' bytes plus
    /// [`BatchFormat::overhead`]), so that it is allocated once.
    pub fn encode<'a>(
        &self,
        items: impl IntoIterator<Item = &'a [u8]>,
        capacity: usize,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity);
        let array = |out: &mut Vec<u8>, items: &mut dyn Iterator<Item = &'a [u8]>| {
            out.push(b'[');
            for (i, it) in items.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(it);
            }
            out.push(b']');
        };
        let mut items = items.into_iter();
        match self {
            BatchFormat::JsonArray | BatchFormat::CloudEventsBatch => array(&mut out, &mut items),
            BatchFormat::Ndjson => {
                for it in items {
                    out.extend_from_slice(it);
                    out.push(b'\n');
                }
            }
            BatchFormat::Template { before, after } => {
                out.extend_from_slice(before.as_bytes());
                array(&mut out, &mut items);
                out.extend_from_slice(after.as_bytes());
            }
        }
        out
    }
}

/// The `Idempotency-Key` of a batch: derived from its items' event ids in
/// order, so the same batch sent again has the same key (`batch-` and 32 hex
/// digits of SHA-256 over the ids, each followed by a newline).
pub fn idempotency_key<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.as_bytes());
        h.update(b"\n");
    }
    let d = h.finalize();
    let mut out = String::with_capacity(38);
    out.push_str("batch-");
    for b in &d[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// What to do with a batch's answer as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WholeAnswer {
    /// Each item's outcome is the answer's (or its per-item result).
    PerItem,
    /// Refused as a whole with a split status: send the two halves (a single
    /// item's answer is its own: `PerItem`).
    Split,
}

/// A batch of `len` items answered `status` with no per-item results.
pub(crate) fn whole_answer(status: u16, len: usize, split: &[u16]) -> WholeAnswer {
    if len > 1 && split.contains(&status) {
        WholeAnswer::Split
    } else {
        WholeAnswer::PerItem
    }
}

/// The two halves of a batch of `len` items: `0..mid` and `mid..len`.
pub(crate) fn halves(len: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let mid = len / 2;
    (0..mid, mid..len)
}

/// The most extra requests bisection spends to isolate one bad item in a
/// batch of `n`: `2·⌈log₂ n⌉`.
pub fn split_bound(n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        2 * (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// After a 413, the item count the route's batches are held to for a while:
/// half of what was refused, at least 1.
pub(crate) fn shrunk(refused_items: usize) -> usize {
    (refused_items / 2).max(1)
}

/// A JSON-array batch of at most `max_events`, without per-item results: the
/// unit tests' spec.
#[cfg(test)]
pub(crate) fn test_spec(max_events: usize) -> BatchSpec {
    BatchSpec {
        max_events,
        max_bytes: 1 << 20,
        linger: std::time::Duration::from_millis(10),
        format: BatchFormat::JsonArray,
        results: None,
        split: vec![400],
        ordered: false,
        answer_bytes_per_event: 4096,
        route: UNROUTED.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_format_encodes_its_body() {
        let items: Vec<&[u8]> = vec![br#"{"id":"a"}"#, br#"{"id":"b"}"#];
        assert_eq!(
            BatchFormat::JsonArray.encode(items.iter().copied(), 0),
            br#"[{"id":"a"},{"id":"b"}]"#
        );
        assert_eq!(
            BatchFormat::Ndjson.encode(items.iter().copied(), 0),
            b"{\"id\":\"a\"}\n{\"id\":\"b\"}\n"
        );
        let t = BatchFormat::template(r#"{"events": $items, "n": 1}"#).expect("template");
        let body = t.encode(items.iter().copied(), 0);
        assert_eq!(body, br#"{"events": [{"id":"a"},{"id":"b"}], "n": 1}"#);
        for f in [
            BatchFormat::JsonArray,
            BatchFormat::Ndjson,
            BatchFormat::CloudEventsBatch,
            t,
        ] {
            let body = f.encode(items.iter().copied(), 0);
            let items_len: usize = items.iter().map(|i| i.len()).sum();
            assert_eq!(body.len(), items_len + f.overhead(items.len()), "{f:?}");
        }
    }

    #[test]
    fn a_template_needs_one_placeholder_and_json() {
        assert_eq!(BatchFormat::template("{}"), Err(TemplateError::Placeholder));
        assert_eq!(
            BatchFormat::template("[$items, $items]"),
            Err(TemplateError::Placeholder)
        );
        assert!(matches!(
            BatchFormat::template("{\"a\": $items"),
            Err(TemplateError::NotJson(_))
        ));
        // Inside a string, or as a name: refused (they passed before, and
        // gave malformed bodies).
        assert!(BatchFormat::template(r#"{"events":"$items"}"#).is_err());
        assert!(BatchFormat::template(r#"{"$items":1}"#).is_err());
        assert!(BatchFormat::template(r#"{"a":"x $items y"}"#).is_err());
        assert!(BatchFormat::template(r#"{"a":{"b":[$items]}}"#).is_ok());
        assert!(BatchFormat::template("$items").is_ok());
    }

    #[test]
    fn the_key_is_stable_and_depends_on_the_ids_in_order() {
        let a = idempotency_key(["x", "y"]);
        assert_eq!(a, idempotency_key(["x", "y"]));
        assert_ne!(a, idempotency_key(["y", "x"]));
        assert_ne!(a, idempotency_key(["xy"]));
        assert_eq!(a.len(), 38);
        assert!(a.starts_with("batch-"));
        // The API stand-in derives the key on its own (courier-standins'
        // `sink::batch`), pinned to the same vector.
        assert_eq!(
            idempotency_key(["ev-1", "ev-2"]),
            "batch-69c7792cb44aabcaf76caa472c5d7cac"
        );
    }

    #[test]
    fn an_answer_is_read_within_its_batchs_size() {
        let spec = test_spec(10_000);
        assert_eq!(answer_cap(&spec, 1), 4096 + ANSWER_SLACK_BYTES);
        assert_eq!(answer_cap(&spec, 50), 50 * 4096 + ANSWER_SLACK_BYTES);
        assert_eq!(answer_cap(&spec, 10_000), MAX_ANSWER_BYTES);
        let huge = BatchSpec {
            answer_bytes_per_event: usize::MAX,
            ..spec
        };
        assert_eq!(answer_cap(&huge, 2), MAX_ANSWER_BYTES);
    }

    #[test]
    fn only_a_refused_batch_of_several_is_split() {
        let split = [400, 413, 422];
        assert_eq!(whole_answer(400, 10, &split), WholeAnswer::Split);
        assert_eq!(whole_answer(400, 1, &split), WholeAnswer::PerItem);
        assert_eq!(whole_answer(503, 10, &split), WholeAnswer::PerItem);
        assert_eq!(whole_answer(200, 10, &split), WholeAnswer::PerItem);
        assert_eq!(split_bound(1), 0);
        assert_eq!(split_bound(2), 2);
        assert_eq!(split_bound(100), 14);
        assert_eq!(split_bound(128), 14);
        assert_eq!(split_bound(129), 16);
        assert_eq!(shrunk(100), 50);
        assert_eq!(shrunk(1), 1);
    }

    /// Bisection as `delivery::batch` runs it, over a model API that refuses a
    /// batch as a whole when it holds a bad item.
    fn bisect(items: &[bool], sent: &mut Vec<Vec<usize>>, range: std::ops::Range<usize>) {
        sent.push(range.clone().collect());
        let bad = items[range.clone()].iter().any(|b| *b);
        if bad && whole_answer(400, range.len(), &[400]) == WholeAnswer::Split {
            let (a, b) = halves(range.len());
            bisect(items, sent, range.start + a.start..range.start + a.end);
            bisect(items, sent, range.start + b.start..range.start + b.end);
        }
    }

    proptest! {
        /// One bad item in a batch of n: isolated alone, every other item ends
        /// in exactly one request answered for it (never sent again once done),
        /// and the extra requests stay within the bound.
        #[test]
        fn bisection_isolates_a_bad_item_within_its_bound(n in 1usize..300, bad in 0usize..300) {
            let bad = bad % n;
            let mut items = vec![false; n];
            items[bad] = true;
            let mut sent = Vec::new();
            bisect(&items, &mut sent, 0..n);
            prop_assert!(sent.len() - 1 <= split_bound(n), "{} extra > {}", sent.len() - 1, split_bound(n));
            prop_assert!(sent.iter().any(|r| r == &vec![bad]), "the bad item ends alone");
            // The requests that were answered (not split further).
            for i in 0..n {
                let answered = sent
                    .iter()
                    .filter(|r| r.contains(&i))
                    .filter(|r| r.len() == 1 || !r.iter().any(|j| items[*j]))
                    .count();
                prop_assert_eq!(answered, 1, "item {} answered once", i);
            }
        }
    }
}
