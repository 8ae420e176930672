//! What is kept of an answer's body: read only as far as needed (the
//! connection is kept when the whole body is small), and the excerpt the
//! envelope carries, with the secrets taken out (the configured credential
//! headers, by name, and each secret as sent and JSON-escaped).
//!
//! # Invariant I15: answer bodies are read bounded and redacted
//!
//!
//! *Enforced in* `src/delivery/http.rs` (`read_body`, `redacted_excerpt`). An answer's body
//! is read in chunks: a body whose `Content-Length` is at most 64 KB to its end (the
//! connection is reused), any other only as far as the excerpt needs
//! (`api.error_body_bytes` + the longest secret), then the connection is dropped. The bearer token and
//! credential-named `api.headers` values (as sent and JSON-escaped) are replaced by
//! `[redacted]` before the cut, and a secret straddling the cut is redacted whole.
//!
//! *Tested by:* `delivery::http` unit test; `tests/api_errors.rs`: a 500 announcing 100 MB
//! that sends 256 KB and stalls answers at once with its excerpt (before: the request
//! timeout, no excerpt); a 403 echoing the request headers keeps neither token nor key
//! (before: both).

/// At most this much of an answer's body is read to keep its connection for
/// the next call: a body whose `Content-Length` says it fits is read to its end
/// (a 2xx of unknown length up to it); any other is read only as far as the
/// excerpt needs, and its connection is dropped.
pub(super) const REUSE_BODY_BYTES: u64 = 64 * 1024;

/// The start of a non-2xx answer's body, for the envelope: at most `max` bytes
/// once every `secrets` value in it is replaced by `[redacted]`. `body` holds
/// what was read of it: at least `max + longest secret` bytes when the body is
/// longer, so a secret that begins within the first `max` bytes is whole in it
/// and redacted, never cut into a prefix that would stay.
pub fn redacted_excerpt(body: &[u8], max: usize, secrets: &[Vec<u8>]) -> Option<String> {
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let mut from = 0;
        while let Some(i) = find(&body[from..], secret) {
            hits.push((from + i, from + i + secret.len()));
            from += i + secret.len();
        }
    }
    hits.sort_unstable();
    // The cut, moved past any secret that straddles it.
    let mut cut = body.len().min(max);
    for &(a, b) in &hits {
        if a < cut && b > cut {
            cut = b.min(body.len());
        }
    }
    let mut out = Vec::with_capacity(cut);
    let mut at = 0;
    for &(a, b) in &hits {
        if a >= cut {
            break;
        }
        if a < at {
            // Overlapping secrets: the overlap is already redacted.
            at = at.max(b);
            continue;
        }
        out.extend_from_slice(&body[at..a]);
        out.extend_from_slice(b"[redacted]");
        at = b;
    }
    if at < cut {
        out.extend_from_slice(&body[at..cut]);
    }
    body_excerpt(&out, usize::MAX)
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads an answer's body, stopping once `keep` bytes are in hand unless the
/// whole body is small enough to keep the connection ([`REUSE_BODY_BYTES`]);
/// an error while reading ends it: for an answer whose status is what counts
/// (an event alone, an excerpt). A body that must be read whole (per-item
/// results) is read by [`read_whole`].
pub(super) async fn read_body(mut resp: reqwest::Response, keep: usize, success: bool) -> Vec<u8> {
    let small = resp.content_length().is_some_and(|n| n <= REUSE_BODY_BYTES);
    let limit = if small || success {
        REUSE_BODY_BYTES as usize
    } else {
        keep
    };
    let mut kept = Vec::new();
    let mut read = 0usize;
    while read < limit {
        match resp.chunk().await {
            Ok(Some(c)) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&c[..c.len().min(room)]);
                read = read.saturating_add(c.len());
            }
            Ok(None) | Err(_) => break,
        }
    }
    kept
}

/// Reads an answer's whole body, at most `cap` bytes: the bytes, or why it
/// could not be read whole — a read error (a reset, a timeout mid-body) is an
/// error, not the end of the body, and a body over the cap is not read on
/// (its connection is dropped).
pub(super) async fn read_whole(
    mut resp: reqwest::Response,
    cap: usize,
) -> Result<bytes::Bytes, crate::core::batch::Unreadable> {
    use crate::core::batch::Unreadable;
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(cap).unwrap_or(u64::MAX))
    {
        return Err(Unreadable::TooLarge);
    }
    let mut kept: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                let len = kept.len() + c.len();
                if len > cap {
                    return Err(Unreadable::TooLarge);
                }
                // Grown by doubling, but never past the cap: a body just
                // under it holds the cap, not twice it.
                if len > kept.capacity() {
                    let grown = (kept.capacity() * 2).max(len).min(cap);
                    kept.reserve_exact(grown - kept.len());
                }
                kept.extend_from_slice(&c);
            }
            Ok(None) => return Ok(bytes::Bytes::from(kept)),
            Err(_) => return Err(Unreadable::ReadFailed),
        }
    }
}

/// The first `max` bytes of an answer's body as text, control characters
/// replaced; `None` when empty.
pub fn body_excerpt(body: &[u8], max: usize) -> Option<String> {
    let cut = &body[..body.len().min(max)];
    let text = String::from_utf8_lossy(cut);
    let text = crate::core::envelope::clean_text(text.trim(), usize::MAX);
    (!text.is_empty()).then_some(text)
}

/// Whether a configured header's name says its value is a credential.
pub(super) fn secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "auth",
        "token",
        "key",
        "secret",
        "cookie",
        "signature",
        "password",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// A secret as it may come back in an answer: as sent, and JSON-escaped.
pub(super) fn secret_forms(value: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![value.as_bytes().to_vec()];
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('/', "\\/");
    if escaped != value {
        forms.push(escaped.into_bytes());
    }
    forms
}
