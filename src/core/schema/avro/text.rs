//! JSON text of Avro values, written into the capped buffer: each refuses
//! (`TooLarge`) rather than pass `max_event_bytes`.

use super::AvroError;
use crate::core::schema::capped::Limited;
use base64::Engine;

pub(super) fn push_display(out: &mut Limited, v: impl std::fmt::Display) -> Result<(), AvroError> {
    use std::io::Write;
    write!(out, "{v}").map_err(|_| AvroError::TooLarge(out.max))
}

/// A JSON string (serde_json's escaping).
pub(super) fn push_str(out: &mut Limited, s: &str) -> Result<(), AvroError> {
    // Writing a string fails only when the buffer refuses it.
    serde_json::to_writer(&mut *out, s).map_err(|_| AvroError::TooLarge(out.max))
}

/// Base64 (standard alphabet, padded) in a JSON string, refused before it is
/// encoded when it cannot fit.
pub(super) fn push_base64(out: &mut Limited, b: &[u8]) -> Result<(), AvroError> {
    let len = b.len().div_ceil(3).saturating_mul(4).saturating_add(2);
    if len > out.room() {
        out.over = true;
        return Err(AvroError::TooLarge(out.max));
    }
    out.put(b"\"")?;
    out.put(
        base64::engine::general_purpose::STANDARD
            .encode(b)
            .as_bytes(),
    )?;
    Ok(out.put(b"\"")?)
}

/// A float as a JSON number (`text`: Rust's `Display` of it); NaN and
/// ±infinity, which JSON cannot hold, as strings.
pub(super) fn push_float(out: &mut Limited, f: f64, text: String) -> Result<(), AvroError> {
    if f.is_nan() {
        out.put(b"\"NaN\"")?;
    } else if f.is_infinite() {
        out.put(if f > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        })?;
    } else {
        out.put(text.as_bytes())?;
        if !text.contains(['.', 'e', 'E']) {
            // `1` from Rust's float Display is valid JSON; keep it a float's text.
            out.put(b".0")?;
        }
    }
    Ok(())
}
