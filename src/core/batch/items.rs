//! What goes into a batch: an item's body as the format needs it, and which
//! items may share a request.
//!
//! **ndjson** is split into items by line readers, and common ones break
//! lines at more than `\n`: `\r`, and in Unicode-aware readers U+0085,
//! U+2028 and U+2029. A JSON text can hold `\r` and `\n` only as whitespace
//! between tokens, and the three others raw inside strings: [`batch_item`]
//! drops that whitespace and writes those characters as `\u` escapes, so
//! each item is exactly one line for every reader (one item cannot become
//! two, and positional results cannot shift).
//!
//! **Ids**: with results matched by id (`api.batch.result_id`), two items of
//! one request with the same id could not be told apart — ids are unique per
//! CloudEvents *source*, not globally — so such items never share a request:
//! they go in parts by occurrence rank, sent at once ([`id_rank_parts`]), or
//! for an ordered run in consecutive runs sent one after the other
//! ([`unique_id_runs`]).

use super::{BatchFormat, BatchSpec};
use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

/// An item's body as a batch of `format` holds it, or `None` if it cannot be
/// batched (not JSON: it is sent alone, as itself). `known_json`: the body is
/// a JSON text already (a decoded event, or Courier's rendering of one).
pub(crate) fn batch_item<'a>(
    format: &BatchFormat,
    body: &'a [u8],
    known_json: bool,
) -> Option<Cow<'a, [u8]>> {
    if !known_json && serde_json::from_slice::<&serde_json::value::RawValue>(body).is_err() {
        return None;
    }
    if !matches!(format, BatchFormat::Ndjson) {
        return Some(Cow::Borrowed(body));
    }
    Some(one_line(body))
}

/// Where an event goes on a batched route.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placement<'a> {
    /// Into a batch, as this item.
    Item(Cow<'a, [u8]>),
    /// Alone, as itself: its body is not JSON, and a 2xx to it proves it
    /// done (the route has no per-item results).
    Alone,
    /// Nowhere: its body is not JSON and the route has per-item results,
    /// where only an event's result in a batch proves it done — a request
    /// of its own would be delivered by a bare 2xx (fail closed: parked).
    Refused,
}

/// Where an event with `body` goes on a route batched as `spec`
/// (`known_json`: [`batch_item`]).
pub(crate) fn place<'a>(spec: &BatchSpec, body: &'a [u8], known_json: bool) -> Placement<'a> {
    match batch_item(&spec.format, body, known_json) {
        Some(item) => Placement::Item(item),
        None if spec.results.is_some() => Placement::Refused,
        None => Placement::Alone,
    }
}

/// A JSON text on one line for every line reader (module docs).
fn one_line(body: &[u8]) -> Cow<'_, [u8]> {
    let breaks = |b: &[u8]| {
        b.iter().any(|&c| c == b'\n' || c == b'\r')
            || memchr::memmem::find(b, "\u{2028}".as_bytes()).is_some()
            || memchr::memmem::find(b, "\u{2029}".as_bytes()).is_some()
            || memchr::memmem::find(b, "\u{85}".as_bytes()).is_some()
    };
    if !breaks(body) {
        return Cow::Borrowed(body);
    }
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            } else if let Some((len, esc)) = line_break_at(&body[i..]) {
                out.extend_from_slice(esc);
                i += len;
                continue;
            }
            out.push(c);
        } else {
            match c {
                b'\n' | b'\r' => {}
                b'"' => {
                    in_string = true;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// A Unicode line break at the start of `b` (inside a JSON string): its
/// length in bytes and its escape.
fn line_break_at(b: &[u8]) -> Option<(usize, &'static [u8])> {
    match b {
        [0xE2, 0x80, 0xA8, ..] => Some((3, b"\\u2028")),
        [0xE2, 0x80, 0xA9, ..] => Some((3, b"\\u2029")),
        [0xC2, 0x85, ..] => Some((2, b"\\u0085")),
        _ => None,
    }
}

/// The items `ids` (in order) cut into consecutive runs in which no id is
/// repeated: the requests they go in when results are matched by id. One
/// run, `0..n`, when every id differs (the usual case).
pub(crate) fn unique_id_runs(ids: &[&str]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut seen: HashSet<&str> = HashSet::with_capacity(ids.len());
    let mut start = 0;
    for (i, id) in ids.iter().enumerate() {
        if !seen.insert(id) {
            runs.push(start..i);
            start = i;
            seen.clear();
            seen.insert(id);
        }
    }
    if start < ids.len() || ids.is_empty() {
        runs.push(start..ids.len());
    }
    runs
}

/// The items `ids` (in order) grouped by occurrence rank: part `k` holds,
/// in order, each item that is the `k + 1`-th of its id — so no id repeats
/// within a part, and one id repeated `r` times makes `r` parts however
/// the repeats are spread. The requests they go in, all at once, when
/// results are matched by id and order between them does not matter (no
/// ordered run: [`unique_id_runs`] keeps a run's offset order instead).
pub(crate) fn id_rank_parts(ids: &[&str]) -> Vec<Vec<usize>> {
    let mut rank: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(ids.len());
    let mut parts: Vec<Vec<usize>> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let r = rank.entry(id).or_insert(0);
        if parts.len() <= *r {
            parts.push(Vec::new());
        }
        parts[*r].push(i);
        *r += 1;
    }
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_is_batched() {
        assert!(batch_item(&BatchFormat::JsonArray, b"{\"a\":\n1}", false).is_some());
        assert!(batch_item(&BatchFormat::JsonArray, b"not json", false).is_none());
        assert!(batch_item(&BatchFormat::JsonArray, b"{\"a\":1} trailing", false).is_none());
        // Known to be JSON: kept as it is, but for ndjson's line.
        assert_eq!(
            batch_item(&BatchFormat::JsonArray, b"{\"a\":\n1}", true).as_deref(),
            Some(&b"{\"a\":\n1}"[..])
        );
    }

    #[test]
    fn a_body_that_is_not_json_goes_alone_only_without_per_item_results() {
        let mut spec = crate::core::batch::test_spec(10);
        assert_eq!(place(&spec, b"hello", false), Placement::Alone);
        assert_eq!(
            place(&spec, b"{}", false),
            Placement::Item(Cow::Borrowed(&b"{}"[..]))
        );
        spec.results = Some(super::super::ResultsSpec::default());
        assert_eq!(place(&spec, b"hello", false), Placement::Refused);
        assert_eq!(place(&spec, b"", false), Placement::Refused);
        assert!(matches!(place(&spec, b"[1]", false), Placement::Item(_)));
    }

    #[test]
    fn an_ndjson_item_is_one_line_for_every_reader() {
        let raw = "{\"a\":\r\n 1,\n\"s\":\"x\u{2028}y\u{2029}z\u{85}w\\\"\u{2028}\"}";
        let line = batch_item(&BatchFormat::Ndjson, raw.as_bytes(), false).expect("json");
        let text = std::str::from_utf8(&line).expect("utf-8");
        assert!(
            !text.contains(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}']),
            "{text:?}"
        );
        // The same JSON value.
        let a: serde_json::Value = serde_json::from_str(raw).expect("raw");
        let b: serde_json::Value = serde_json::from_str(text).expect("line");
        assert_eq!(a, b);
        // Nothing to do: borrowed as it is.
        assert!(matches!(
            batch_item(&BatchFormat::Ndjson, b"{\"a\":\"\\n\"}", true),
            Some(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn repeated_ids_go_in_parts_by_their_rank() {
        assert_eq!(id_rank_parts(&["a", "b", "c"]), vec![vec![0, 1, 2]]);
        assert_eq!(
            id_rank_parts(&["a", "b", "a", "c", "a", "d"]),
            vec![vec![0, 1, 3, 5], vec![2], vec![4]]
        );
        assert_eq!(
            id_rank_parts(&["a", "b", "b", "a"]),
            vec![vec![0, 1], vec![2, 3]]
        );
        assert_eq!(id_rank_parts(&[]), vec![Vec::<usize>::new()]);
    }

    #[test]
    fn repeated_ids_start_a_new_run() {
        assert_eq!(unique_id_runs(&["a", "b", "c"]), vec![0..3]);
        assert_eq!(
            unique_id_runs(&["a", "b", "a", "c", "a"]),
            vec![0..2, 2..4, 4..5]
        );
        assert_eq!(unique_id_runs(&["a", "a"]), vec![0..1, 1..2]);
        assert_eq!(unique_id_runs(&[]), vec![0..0]);
    }
}
