//! Avro records (Confluent-framed, the writer's schema from the registry) to
//! JSON text, written straight from the decoded value and its schema (fields
//! in schema order):
//!
//! | Avro | JSON |
//! |---|---|
//! | null, boolean, int, long, string | the same JSON value |
//! | float, double | a number; NaN and ±infinity as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | bytes, fixed | a base64 string (standard alphabet, padded) |
//! | enum | its symbol, a string |
//! | union | the branch's plain value (no `{"type": value}` wrapper) |
//! | record | an object, fields in schema order |
//! | array / map | an array / an object |
//! | decimal (bytes or fixed) | `input.decimal = "string"` (default): a string with every digit, e.g. `"-12.30"`; `"number"`: the same digits as a JSON number |
//! | big-decimal | its digits, as for decimal |
//! | uuid | its string |
//! | date | `input.timestamps = "rfc3339"` (default): `"2026-12-02"`; `"epoch"`: days since 1970-01-01 |
//! | timestamp-millis / -micros / -nanos | RFC 3339 UTC with 3 / 6 / 9 fraction digits (`"2026-12-02T10:11:12.345Z"`); `"epoch"`: the number as written |
//! | local-timestamp-* | the same without the `Z`; `"epoch"`: the number |
//! | time-millis / -micros | `"10:11:12.345"` / `"10:11:12.345678"`; `"epoch"`: the number |
//! | duration | `{"months": m, "days": d, "millis": ms}` |
//!
//! Years outside 0000–9999 are written as in JavaScript's `toISOString`
//! (`+010000-01-01…`, `-000001-…`): RFC 3339 has no such years.

use apache_avro::schema::{Name, Schema};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `input.decimal`: how an Avro `decimal` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DecimalMode {
    /// A JSON string keeping every digit.
    #[default]
    String,
    /// A JSON number with the same digits (a reader parsing it as a double may round).
    Number,
}

/// `input.timestamps`: how dates, times and timestamps are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TimestampMode {
    #[default]
    Rfc3339,
    /// The number the record carries (days, millis, micros, nanos).
    Epoch,
}

/// How registry-framed records are written as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JsonOptions {
    pub decimal: DecimalMode,
    pub timestamps: TimestampMode,
}

/// A writer's schema as fetched, parsed, with its references and named types.
#[derive(Debug)]
pub struct AvroSchema {
    schema: Schema,
    /// Every named type (record, enum, fixed) by its full name, for `Ref`s.
    names: HashMap<Name, Schema>,
    /// The length of the texts it was parsed from (what a cache charges).
    text_len: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum AvroError {
    #[error("the Avro schema does not parse: {0}")]
    Schema(String),
    #[error("the record does not decode with its Avro schema: {0}")]
    Decode(String),
    #[error("{0} bytes are left after the record decoded with its Avro schema")]
    Trailing(usize),
    #[error("a decoded value does not match its schema")]
    Mismatch,
}

impl AvroSchema {
    /// Parses a schema (the registry's `schema` text) and the schemas it
    /// references (their texts, dependencies first).
    pub fn parse(text: &str, references: &[String]) -> Result<AvroSchema, AvroError> {
        let (schema, schemata) = if references.is_empty() {
            (Schema::parse_str(text), Vec::new())
        } else {
            match Schema::parse_str_with_list(text, references) {
                Ok((s, list)) => (Ok(s), list),
                Err(e) => (Err(e), Vec::new()),
            }
        };
        let schema = schema.map_err(|e| AvroError::Schema(e.to_string()))?;
        let mut names = HashMap::new();
        for s in std::iter::once(&schema).chain(&schemata) {
            collect_names(s, &mut names);
        }
        Ok(AvroSchema {
            schema,
            names,
            text_len: text.len() + references.iter().map(String::len).sum::<usize>(),
        })
    }

    /// The length of the texts it was parsed from.
    pub fn text_len(&self) -> usize {
        self.text_len
    }

    /// Decodes one record body (after the 5-byte header) to JSON text. The
    /// Avro binary is read here, straight into JSON, with the schema: nesting
    /// is bounded (a recursive schema cannot exhaust the stack, as the
    /// crate's own recursive reader can), lengths and counts are checked
    /// against the bytes left before anything is allocated.
    pub fn to_json(&self, body: &[u8], opts: JsonOptions) -> Result<Vec<u8>, AvroError> {
        let mut input = body;
        let mut out = Vec::with_capacity(body.len() * 2 + 16);
        self.read(&mut input, &self.schema, &mut out, opts, 0)?;
        if !input.is_empty() {
            return Err(AvroError::Trailing(input.len()));
        }
        Ok(out)
    }

    fn resolve<'s>(&'s self, schema: &'s Schema) -> Result<&'s Schema, AvroError> {
        match schema {
            Schema::Ref { name } => self.names.get(name).ok_or(AvroError::Mismatch),
            s => Ok(s),
        }
    }

    fn read(
        &self,
        input: &mut &[u8],
        schema: &Schema,
        out: &mut Vec<u8>,
        opts: JsonOptions,
        depth: usize,
    ) -> Result<(), AvroError> {
        // The JSON check after this refuses deeper documents anyway.
        if depth > crate::core::event::MAX_DEPTH {
            return Err(AvroError::Decode(format!(
                "nested deeper than {} levels",
                crate::core::event::MAX_DEPTH
            )));
        }
        let schema = self.resolve(schema)?;
        let epoch = opts.timestamps == TimestampMode::Epoch;
        match schema {
            Schema::Null => out.extend_from_slice(b"null"),
            Schema::Boolean => match take(input, 1)? {
                [0] => out.extend_from_slice(b"false"),
                [1] => out.extend_from_slice(b"true"),
                _ => {
                    return Err(AvroError::Decode(
                        "a boolean that is neither 0 nor 1".into(),
                    ))
                }
            },
            Schema::Int => push_display(out, int(input)?),
            Schema::Long => push_display(out, long(input)?),
            Schema::Float => {
                let b = take(input, 4)?;
                let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                push_float(out, f64::from(f), f.to_string());
            }
            Schema::Double => {
                let b = take(input, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                let f = f64::from_le_bytes(a);
                push_float(out, f, f.to_string());
            }
            Schema::Bytes => push_base64(out, length_prefixed(input)?),
            Schema::String | Schema::Uuid => push_str(out, utf8(length_prefixed(input)?)?),
            Schema::Fixed(f) => push_base64(out, take(input, f.size)?),
            Schema::Enum(e) => {
                let i = index(input)?;
                let symbol = e
                    .symbols
                    .get(i)
                    .ok_or_else(|| AvroError::Decode(format!("enum index {i} past its symbols")))?;
                push_str(out, symbol);
            }
            Schema::Union(u) => {
                let i = index(input)?;
                let branch = u
                    .variants()
                    .get(i)
                    .ok_or_else(|| AvroError::Decode(format!("union branch {i} past its types")))?;
                self.read(input, branch, out, opts, depth + 1)?;
            }
            Schema::Record(r) => {
                out.push(b'{');
                for (i, f) in r.fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    push_str(out, &f.name);
                    out.push(b':');
                    self.read(input, &f.schema, out, opts, depth + 1)?;
                }
                out.push(b'}');
            }
            Schema::Array(a) => {
                out.push(b'[');
                let mut first = true;
                while let Some(n) = self.block(input, &a.items)? {
                    for _ in 0..n {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        self.read(input, &a.items, out, opts, depth + 1)?;
                    }
                }
                out.push(b']');
            }
            Schema::Map(m) => {
                // Sorted by key: the wire order is the writer's hash order.
                let mut entries: Vec<(&str, Vec<u8>)> = Vec::new();
                while let Some(n) = self.block(input, &Schema::String)? {
                    for _ in 0..n {
                        let k = utf8(length_prefixed(input)?)?;
                        let mut v = Vec::new();
                        self.read(input, &m.types, &mut v, opts, depth + 1)?;
                        entries.push((k, v));
                    }
                }
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    push_str(out, k);
                    out.push(b':');
                    out.extend_from_slice(v);
                }
                out.push(b'}');
            }
            Schema::Decimal(d) => {
                let raw = match self.resolve(&d.inner)? {
                    Schema::Fixed(f) => take(input, f.size)?,
                    _ => length_prefixed(input)?,
                };
                push_decimal(out, &unscaled_digits(raw), d.scale, opts.decimal);
            }
            Schema::BigDecimal => {
                // bytes holding the unscaled value (length-prefixed) and the scale.
                let mut inner = length_prefixed(input)?;
                let digits = unscaled_digits(length_prefixed(&mut inner)?);
                let scale = usize::try_from(long(&mut inner)?)
                    .map_err(|_| AvroError::Decode("a negative big-decimal scale".into()))?;
                push_decimal(out, &digits, scale, opts.decimal);
            }
            Schema::Date if epoch => push_display(out, int(input)?),
            Schema::Date => {
                let (y, m, day) = civil_from_days(i64::from(int(input)?));
                out.push(b'"');
                push_date(out, y, m, day);
                out.push(b'"');
            }
            Schema::TimeMillis if epoch => push_display(out, int(input)?),
            Schema::TimeMillis => push_time_of_day(out, i64::from(int(input)?), 1_000, 3),
            Schema::TimeMicros if epoch => push_display(out, long(input)?),
            Schema::TimeMicros => push_time_of_day(out, long(input)?, 1_000_000, 6),
            Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos
                if epoch =>
            {
                push_display(out, long(input)?)
            }
            Schema::TimestampMillis => push_timestamp(out, long(input)?, 1_000, 3, true),
            Schema::TimestampMicros => push_timestamp(out, long(input)?, 1_000_000, 6, true),
            Schema::TimestampNanos => push_timestamp(out, long(input)?, 1_000_000_000, 9, true),
            Schema::LocalTimestampMillis => push_timestamp(out, long(input)?, 1_000, 3, false),
            Schema::LocalTimestampMicros => push_timestamp(out, long(input)?, 1_000_000, 6, false),
            Schema::LocalTimestampNanos => {
                push_timestamp(out, long(input)?, 1_000_000_000, 9, false)
            }
            Schema::Duration => {
                let b = take(input, 12)?;
                let u = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                push_display(
                    out,
                    format_args!(
                        "{{\"months\":{},\"days\":{},\"millis\":{}}}",
                        u(0),
                        u(4),
                        u(8)
                    ),
                );
            }
            Schema::Ref { .. } => return Err(AvroError::Mismatch),
        }
        Ok(())
    }

    /// The item count of the next block of an array or map (`None`: the end).
    /// A negative count is followed by the block's size in bytes. A count is
    /// refused when its items could not fit in the bytes left (items of no
    /// width, such as `null`, at most [`MAX_EMPTY_ITEMS`] a block).
    fn block(&self, input: &mut &[u8], item: &Schema) -> Result<Option<u64>, AvroError> {
        let n = long(input)?;
        if n == 0 {
            return Ok(None);
        }
        if n < 0 {
            let _size = long(input)?;
        }
        let n = n.unsigned_abs();
        let fits = if self.zero_width(item, 0) {
            n <= MAX_EMPTY_ITEMS
        } else {
            n <= input.len() as u64
        };
        if !fits {
            return Err(AvroError::Decode(format!(
                "a block of {n} items in {} bytes",
                input.len()
            )));
        }
        Ok(Some(n))
    }

    /// Whether a value of `schema` can take no bytes.
    fn zero_width(&self, schema: &Schema, depth: usize) -> bool {
        if depth > 8 {
            return false;
        }
        match self.resolve(schema) {
            Ok(Schema::Null) => true,
            Ok(Schema::Fixed(f)) => f.size == 0,
            Ok(Schema::Record(r)) => r
                .fields
                .iter()
                .all(|f| self.zero_width(&f.schema, depth + 1)),
            _ => false,
        }
    }
}

/// The most items of no width (`null`, empty records) one block may count.
const MAX_EMPTY_ITEMS: u64 = 1024;

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], AvroError> {
    if input.len() < n {
        return Err(AvroError::Decode(format!(
            "needs {n} bytes, {} are left",
            input.len()
        )));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

/// A zig-zag varint (at most 10 bytes).
fn long(input: &mut &[u8]) -> Result<i64, AvroError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *input
            .get(i)
            .ok_or_else(|| AvroError::Decode("a varint cut short".into()))?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *input = &input[i + 1..];
            return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    Err(AvroError::Decode("a varint longer than 10 bytes".into()))
}

fn int(input: &mut &[u8]) -> Result<i32, AvroError> {
    i32::try_from(long(input)?).map_err(|_| AvroError::Decode("an int out of range".into()))
}

fn index(input: &mut &[u8]) -> Result<usize, AvroError> {
    usize::try_from(long(input)?).map_err(|_| AvroError::Decode("a negative index".into()))
}

fn length_prefixed<'a>(input: &mut &'a [u8]) -> Result<&'a [u8], AvroError> {
    let n = index(input)?;
    take(input, n)
}

fn utf8(b: &[u8]) -> Result<&str, AvroError> {
    std::str::from_utf8(b)
        .map_err(|e| AvroError::Decode(format!("a string that is not UTF-8: {e}")))
}

fn push_base64(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(b)
            .as_bytes(),
    );
    out.push(b'"');
}

/// Every named type in a schema, by full name.
fn collect_names(schema: &Schema, names: &mut HashMap<Name, Schema>) {
    match schema {
        Schema::Record(r) if names.insert(r.name.clone(), schema.clone()).is_none() => {
            for f in &r.fields {
                collect_names(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.clone(), schema.clone());
        }
        Schema::Fixed(f) => {
            names.insert(f.name.clone(), schema.clone());
        }
        Schema::Decimal(d) => collect_names(&d.inner, names),
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => {
            for v in u.variants() {
                collect_names(v, names);
            }
        }
        _ => {}
    }
}

fn push_display(out: &mut Vec<u8>, v: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "{v}");
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaping; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn push_float(out: &mut Vec<u8>, f: f64, text: String) {
    if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else if text.contains(['.', 'e', 'E']) {
        out.extend_from_slice(text.as_bytes());
    } else {
        // `1` from Rust's float Display is valid JSON; keep it a float's text.
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b".0");
    }
}

/// The decimal digits of a big-endian two's-complement integer, with a `-`
/// when negative.
pub fn unscaled_digits(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "0".into();
    }
    let negative = bytes[0] & 0x80 != 0;
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
    // Repeated division by 10^9 of the big-endian magnitude.
    let mut chunks: Vec<u32> = Vec::new();
    let mut num: Vec<u8> = mag.into_iter().skip_while(|b| *b == 0).collect();
    while !num.is_empty() {
        let mut rem: u64 = 0;
        let mut next = Vec::with_capacity(num.len());
        for b in &num {
            let cur = (rem << 8) | u64::from(*b);
            let q = cur / 1_000_000_000;
            rem = cur % 1_000_000_000;
            if !next.is_empty() || q != 0 {
                next.push(q as u8);
            }
        }
        chunks.push(rem as u32);
        num = next;
    }
    let mut s = String::new();
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

/// Places the decimal point `scale` digits from the right of `digits`.
fn push_decimal(out: &mut Vec<u8>, digits: &str, scale: usize, mode: DecimalMode) {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", digits),
    };
    let text = if scale == 0 {
        format!("{sign}{digits}")
    } else if digits.len() > scale {
        let (int, frac) = digits.split_at(digits.len() - scale);
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
    };
    match mode {
        DecimalMode::String => push_str(out, &text),
        DecimalMode::Number => out.extend_from_slice(text.as_bytes()),
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

fn push_date(out: &mut Vec<u8>, y: i64, m: u32, d: u32) {
    use std::io::Write;
    let _ = if (0..=9999).contains(&y) {
        write!(out, "{y:04}-{m:02}-{d:02}")
    } else if y < 0 {
        write!(out, "-{:06}-{m:02}-{d:02}", y.unsigned_abs())
    } else {
        write!(out, "+{y:06}-{m:02}-{d:02}")
    };
}

fn push_clock(out: &mut Vec<u8>, second_of_day: i64, frac: i64, digits: usize) {
    use std::io::Write;
    let (h, mi, s) = (
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
    );
    let _ = write!(out, "{h:02}:{mi:02}:{s:02}.{frac:0digits$}");
}

fn push_time_of_day(out: &mut Vec<u8>, t: i64, per_second: i64, digits: usize) {
    out.push(b'"');
    push_clock(
        out,
        t.div_euclid(per_second).rem_euclid(86_400),
        t.rem_euclid(per_second),
        digits,
    );
    out.push(b'"');
}

fn push_timestamp(out: &mut Vec<u8>, t: i64, per_second: i64, digits: usize, utc: bool) {
    let secs = t.div_euclid(per_second);
    let frac = t.rem_euclid(per_second);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    out.push(b'"');
    push_date(out, y, m, d);
    out.push(b'T');
    push_clock(out, secs.rem_euclid(86_400), frac, digits);
    if utc {
        out.push(b'Z');
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests;
