//! Text a record (or a peer) chose, on its way into a log line or an error
//! message: an attribute value, a parser's message quoting the input. Cut to a
//! bound and with control and bidirectional-formatting characters escaped, so
//! one record can neither write megabytes into every log line nor forge a line
//! (`\n`), a terminal escape (`\x1b[`) or reorder what a reader sees (U+202E).
//!
//! # Invariant I28: record text
//!
//! *Enforced in* `src/core/trace.rs`, `src/core/text.rs`, `src/core/event.rs`,
//! `src/core/input.rs`, `src/core/envelope.rs` (record text). What a record chose leaves
//! Courier bounded: a later-version `traceparent` is forwarded as its 55-character version-00
//! form; text a record put in a decode or envelope error (an unsupported `specversion`,
//! serde_json's quotes) is cut to 256 bytes with control and bidi characters escaped
//! (`core::text::excerpt`) before any log line or parked message carries it; the envelope
//! copies the event's `type` cut to 1 KB (and any unfit id cleaned), so even the reference
//! envelope fits the topic. Peers' text goes the same way: a schema registry's subjects
//! (`core::schema::registry`) and what a JSON Schema's checker quotes of a record
//! (`core::schema::json_schema`), a token endpoint's error (`auth::oauth2`).
//!
//! *Tested by:* Unit tests in each module (a 1 MB `specversion`, a megabyte `traceparent`
//! tail, a 2 MB `type`), `core::text` proptest.

/// The most bytes of record-chosen text a log line or error message carries.
pub(crate) const LOG_TEXT_MAX: usize = 256;

/// Characters that do not show as themselves: C0/C1 controls, and the Unicode
/// formatting characters that reorder or hide text.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// `s` with unsafe characters escaped (`\n`, `\u{1b}`) and cut to at most
/// `max` bytes (escapes included; a cut ends with `…`).
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    // Whole pieces only (an escape is never cut in two), until past `max`.
    let mut cut_at = None;
    let room = max.saturating_sub('…'.len_utf8());
    for c in s.chars() {
        let before = out.len();
        if is_unsafe(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
        if out.len() > room && cut_at.is_none() {
            cut_at = Some(before);
        }
        if out.len() > max {
            out.truncate(cut_at.unwrap_or(before));
            out.push('…');
            return out;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_clean_text_is_unchanged() {
        assert_eq!(excerpt("order.created", 256), "order.created");
        assert_eq!(excerpt("", 256), "");
        assert_eq!(excerpt("ünïcödé", 256), "ünïcödé");
    }

    #[test]
    fn controls_are_escaped_and_long_text_cut() {
        assert_eq!(excerpt("a\nb\x1b[31mc", 256), "a\\nb\\u{1b}[31mc");
        assert_eq!(excerpt("x\u{202E}y", 256), "x\\u{202e}y");
        let long = "v".repeat(1_000_000);
        let e = excerpt(&long, 64);
        assert!(e.len() <= 64 && e.ends_with('…'), "{}", e.len());
        assert!(excerpt(&long, LOG_TEXT_MAX).len() <= LOG_TEXT_MAX);
        // Exactly at the bound: not cut.
        assert_eq!(excerpt(&"v".repeat(64), 64), "v".repeat(64));
    }

    proptest! {
        /// Whatever the input: at most `max` bytes, no control or reordering
        /// character, and a prefix of the input when nothing needed escaping.
        #[test]
        fn bounded_and_printable(s in "\\PC{0,80}|[\\x00-\\x1f\\u{202a}-\\u{202e}a-z]{0,80}", max in 4usize..100) {
            let e = excerpt(&s, max);
            prop_assert!(e.len() <= max);
            prop_assert!(!e.chars().any(is_unsafe));
            if !s.chars().any(is_unsafe) {
                let kept = e.strip_suffix('…').unwrap_or(&e);
                prop_assert!(s.starts_with(kept));
            }
        }
    }
}
