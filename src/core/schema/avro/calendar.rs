//! Avro dates, times and timestamps as RFC 3339 text.

use super::AvroError;
use crate::core::schema::capped::Limited;
use std::io::Write;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `"2026-12-02"` (years outside 0000–9999 as JavaScript's `toISOString`
/// writes them: `+010000`, `-000001`).
pub(super) fn push_date(out: &mut Limited, y: i64, m: u32, d: u32) -> Result<(), AvroError> {
    if (0..=9999).contains(&y) {
        write!(out, "{y:04}-{m:02}-{d:02}")
    } else if y < 0 {
        write!(out, "-{:06}-{m:02}-{d:02}", y.unsigned_abs())
    } else {
        write!(out, "+{y:06}-{m:02}-{d:02}")
    }
    .map_err(|_| AvroError::TooLarge(out.max))
}

fn push_clock(
    out: &mut Limited,
    second_of_day: i64,
    frac: i64,
    digits: usize,
) -> Result<(), AvroError> {
    let (h, mi, s) = (
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
    );
    write!(out, "{h:02}:{mi:02}:{s:02}.{frac:0digits$}").map_err(|_| AvroError::TooLarge(out.max))
}

/// `"10:11:12.345"` of a time of day counted in `per_second` units.
pub(super) fn push_time_of_day(
    out: &mut Limited,
    t: i64,
    per_second: i64,
    digits: usize,
) -> Result<(), AvroError> {
    out.put(b"\"")?;
    push_clock(
        out,
        t.div_euclid(per_second).rem_euclid(86_400),
        t.rem_euclid(per_second),
        digits,
    )?;
    Ok(out.put(b"\"")?)
}

/// `"2026-12-02T10:11:12.345Z"` (`utc`: with the `Z`) of a time since the
/// epoch counted in `per_second` units.
pub(super) fn push_timestamp(
    out: &mut Limited,
    t: i64,
    per_second: i64,
    digits: usize,
    utc: bool,
) -> Result<(), AvroError> {
    let secs = t.div_euclid(per_second);
    let frac = t.rem_euclid(per_second);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    out.put(b"\"")?;
    push_date(out, y, m, d)?;
    out.put(b"T")?;
    push_clock(out, secs.rem_euclid(86_400), frac, digits)?;
    if utc {
        out.put(b"Z")?;
    }
    Ok(out.put(b"\"")?)
}
