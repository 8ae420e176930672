//! Avro decimals (`decimal`, `big-decimal`) to JSON text, within limits.
//!
//! A decimal is written with at most [`MAX_DIGITS`] digits, Jackson's default
//! limit on a number's length (`StreamReadConstraints`): an unscaled value of
//! at most 1,000 digits, a scale from −999 to 999 (Java's `BigDecimal`
//! allows any 32-bit scale; a negative one appends zeros: `1` at scale −3 is
//! `1000`), and the text as placed (`0.001` has four digits) at most 1,000
//! digits. The scale is checked before anything is written, the unscaled
//! value's length before it is converted, so a record cannot make the
//! decoder write 2^40 zeros or convert a megabyte-long number: the work is
//! one pass over the value's bytes (to strip its sign extension) and then a
//! conversion of at most [`MAX_UNSCALED_BYTES`] bytes.

use super::text::push_str;
use super::{AvroError, DecimalMode};
use crate::core::schema::capped::Limited;

/// The most digits a decimal is written with.
pub(crate) const MAX_DIGITS: usize = 1000;

/// The largest scale, either sign: a scale of ±1,000 writes at least 1,001
/// digits for any value but zero.
pub(crate) const MAX_SCALE: u64 = 999;

/// The longest two's-complement unscaled value (its sign extension stripped)
/// that can hold [`MAX_DIGITS`] digits: 10^1000 < 2^3322, and 416 bytes hold
/// 3,327 bits of magnitude. A longer one has more than 1,000 digits.
pub(super) const MAX_UNSCALED_BYTES: usize = 416;

/// Writes the decimal `unscaled` × 10^−`scale` (`unscaled`: big-endian two's
/// complement, as Avro writes it) of a `kind` (`"decimal"`, `"big-decimal"`)
/// into `out`, or refuses it past the limits.
pub(super) fn write(
    out: &mut Limited,
    kind: &'static str,
    unscaled: &[u8],
    scale: i64,
    mode: DecimalMode,
) -> Result<(), AvroError> {
    let refuse = |problem: String| AvroError::Decimal { kind, problem };
    if scale.unsigned_abs() > MAX_SCALE {
        return Err(refuse(format!("has a scale of {scale}")));
    }
    let unscaled = minimal(unscaled);
    if unscaled.len() > MAX_UNSCALED_BYTES {
        return Err(refuse(format!(
            "has an unscaled value of {} bytes (more than {MAX_DIGITS} digits)",
            unscaled.len()
        )));
    }
    let text = placed(&unscaled_digits(unscaled), scale);
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    if digits > MAX_DIGITS {
        return Err(refuse(format!(
            "of {digits} digits at scale {scale} (more than {MAX_DIGITS})"
        )));
    }
    match mode {
        DecimalMode::String => push_str(out, &text),
        DecimalMode::Number => Ok(out.put(text.as_bytes())?),
    }
}

/// `bytes` without the leading bytes that only extend its sign (`00` before a
/// byte under 0x80, `ff` before one from 0x80): the same number.
fn minimal(mut bytes: &[u8]) -> &[u8] {
    while let [first, second, ..] = bytes {
        let extends =
            (*first == 0x00 && second & 0x80 == 0) || (*first == 0xff && second & 0x80 != 0);
        if !extends {
            break;
        }
        bytes = &bytes[1..];
    }
    bytes
}

/// The decimal digits of a big-endian two's-complement integer, with a `-`
/// when negative. Repeated division by 10^9 of 32-bit limbs: quadratic in the
/// length, so [`write`] calls it only on values of at most
/// [`MAX_UNSCALED_BYTES`] bytes (at most 104 limbs, 112 divisions of them).
pub(crate) fn unscaled_digits(bytes: &[u8]) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude: two's complement negated when negative.
    let mut mag: Vec<u8> = bytes.to_vec();
    if negative {
        for b in mag.iter_mut() {
            *b = !*b;
        }
        for b in mag.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    // Big-endian 32-bit limbs, the first one holding the bytes left over.
    let head = mag.len() % 4;
    let mut limbs: Vec<u32> = Vec::with_capacity(mag.len() / 4 + 1);
    if head > 0 {
        limbs.push(mag[..head].iter().fold(0, |a, b| (a << 8) | u32::from(*b)));
    }
    limbs.extend(
        mag[head..]
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])),
    );
    let mut chunks: Vec<u32> = Vec::new();
    let mut start = limbs.iter().position(|l| *l != 0).unwrap_or(limbs.len());
    while start < limbs.len() {
        let mut rem: u64 = 0;
        for l in &mut limbs[start..] {
            let cur = (rem << 32) | u64::from(*l);
            *l = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while start < limbs.len() && limbs[start] == 0 {
            start += 1;
        }
    }
    let mut s = String::with_capacity(chunks.len() * 9 + 1);
    if negative {
        s.push('-');
    }
    match chunks.split_last() {
        None => s.push('0'),
        Some((top, rest)) => {
            s.push_str(&top.to_string());
            for c in rest.iter().rev() {
                s.push_str(&format!("{c:09}"));
            }
        }
    }
    s
}

/// `digits` (a `-` first when negative) with the decimal point `scale` digits
/// from the right (a negative scale appends zeros).
pub(super) fn placed(digits: &str, scale: i64) -> String {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", digits),
    };
    let shift = usize::try_from(scale.unsigned_abs()).unwrap_or(usize::MAX);
    if scale == 0 || (scale < 0 && digits == "0") {
        format!("{sign}{digits}")
    } else if scale < 0 {
        format!("{sign}{digits}{}", "0".repeat(shift))
    } else if digits.len() > shift {
        let (int, frac) = digits.split_at(digits.len() - shift);
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat(shift - digits.len()))
    }
}
