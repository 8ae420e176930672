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
//! | big-decimal | its digits, as for decimal (a negative scale appends zeros: `1` at scale −3 is `1000`) |
//! | uuid | its string |
//! | date | `input.timestamps = "rfc3339"` (default): `"2026-12-02"`; `"epoch"`: days since 1970-01-01 |
//! | timestamp-millis / -micros / -nanos | RFC 3339 UTC with 3 / 6 / 9 fraction digits (`"2026-12-02T10:11:12.345Z"`); `"epoch"`: the number as written |
//! | local-timestamp-* | the same without the `Z`; `"epoch"`: the number |
//! | time-millis / -micros | `"10:11:12.345"` / `"10:11:12.345678"`; `"epoch"`: the number |
//! | duration | `{"months": m, "days": d, "millis": ms}` |
//!
//! Years outside 0000–9999 are written as in JavaScript's `toISOString`
//! (`+010000-01-01…`, `-000001-…`): RFC 3339 has no such years.
//!
//! Bounded on hostile bytes, like Protobuf: nesting stops at
//! [`MAX_DEPTH`](crate::core::event::MAX_DEPTH) levels; every length and
//! block count is checked before anything is read or allocated (items that
//! take bytes against the bytes left, items of no width — `null`, empty
//! records — against the room left in the output, so all the blocks of a
//! record together are bounded); a decimal is written with at most 1,000
//! digits, its scale from −999 to 999, checked before it is converted
//! (`decimal`; beyond them parked `decimal_out_of_range`); and the JSON is
//! written into a buffer that stops at `max_event_bytes` (`too_large`).

mod calendar;
mod decimal;
mod text;

pub(crate) use calendar::civil_from_days;

use super::capped::{Limited, Over};
use apache_avro::schema::{Name, Schema};
use calendar::{push_date, push_time_of_day, push_timestamp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use text::{push_base64, push_display, push_float, push_str};

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
pub(crate) struct JsonOptions {
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
pub(crate) enum AvroError {
    #[error("the Avro schema does not parse: {0}")]
    Schema(String),
    #[error("the record does not decode with its Avro schema: {0}")]
    Decode(String),
    #[error("{0} bytes are left after the record decoded with its Avro schema")]
    Trailing(usize),
    #[error("a decoded value does not match its schema")]
    Mismatch,
    #[error("the record's JSON is larger than max_event_bytes ({0})")]
    TooLarge(usize),
    #[error(
        "a {kind} {problem}: decimals are written with at most {} digits, scales -{} to {}",
        decimal::MAX_DIGITS,
        decimal::MAX_SCALE,
        decimal::MAX_SCALE
    )]
    Decimal { kind: &'static str, problem: String },
}

impl AvroSchema {
    /// Parses a schema (the registry's `schema` text) and the schemas it
    /// references (their texts, dependencies first).
    pub(crate) fn parse(text: &str, references: &[&str]) -> Result<AvroSchema, AvroError> {
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
            text_len: text.len() + references.iter().map(|r| r.len()).sum::<usize>(),
        })
    }

    /// The length of the texts it was parsed from.
    pub(crate) fn text_len(&self) -> usize {
        self.text_len
    }

    /// Decodes one record body (after the 5-byte header) to JSON text of at
    /// most `max_bytes`. The Avro binary is read here, straight into JSON,
    /// with the schema: nesting is bounded (a recursive schema cannot exhaust
    /// the stack, as the crate's own recursive reader can), lengths and counts
    /// are checked before anything is allocated (against the bytes left, or
    /// for items that take no bytes, against the room left in the output),
    /// decimals are held to their limits (`decimal`), and the output stops at
    /// `max_bytes` (`TooLarge`).
    pub(crate) fn to_json(
        &self,
        body: &[u8],
        opts: JsonOptions,
        max_bytes: usize,
    ) -> Result<Vec<u8>, AvroError> {
        let mut input = body;
        let mut out = Limited::new(max_bytes, body.len().saturating_mul(2).saturating_add(16));
        self.read(&mut input, &self.schema, &mut out, opts, 0)?;
        if !input.is_empty() {
            return Err(AvroError::Trailing(input.len()));
        }
        Ok(out.buf)
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
        out: &mut Limited,
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
            Schema::Null => out.put(b"null")?,
            Schema::Boolean => match take(input, 1)? {
                [0] => out.put(b"false")?,
                [1] => out.put(b"true")?,
                _ => {
                    return Err(AvroError::Decode(
                        "a boolean that is neither 0 nor 1".into(),
                    ))
                }
            },
            Schema::Int => push_display(out, int(input)?)?,
            Schema::Long => push_display(out, long(input)?)?,
            Schema::Float => {
                let b = take(input, 4)?;
                let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                push_float(out, f64::from(f), f.to_string())?;
            }
            Schema::Double => {
                let b = take(input, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                let f = f64::from_le_bytes(a);
                push_float(out, f, f.to_string())?;
            }
            Schema::Bytes => push_base64(out, length_prefixed(input)?)?,
            Schema::String | Schema::Uuid => push_str(out, utf8(length_prefixed(input)?)?)?,
            Schema::Fixed(f) => push_base64(out, take(input, f.size)?)?,
            Schema::Enum(e) => {
                let i = index(input)?;
                let symbol = e
                    .symbols
                    .get(i)
                    .ok_or_else(|| AvroError::Decode(format!("enum index {i} past its symbols")))?;
                push_str(out, symbol)?;
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
                out.put(b"{")?;
                for (i, f) in r.fields.iter().enumerate() {
                    if i > 0 {
                        out.put(b",")?;
                    }
                    push_str(out, &f.name)?;
                    out.put(b":")?;
                    self.read(input, &f.schema, out, opts, depth + 1)?;
                }
                out.put(b"}")?;
            }
            Schema::Array(a) => {
                out.put(b"[")?;
                let mut first = true;
                while let Some(n) = self.block(input, &a.items, out)? {
                    for _ in 0..n {
                        if !first {
                            out.put(b",")?;
                        }
                        first = false;
                        self.read(input, &a.items, out, opts, depth + 1)?;
                    }
                }
                out.put(b"]")?;
            }
            Schema::Map(m) => self.read_map(input, &m.types, out, opts, depth)?,
            Schema::Decimal(d) => {
                let raw = match self.resolve(&d.inner)? {
                    Schema::Fixed(f) => take(input, f.size)?,
                    _ => length_prefixed(input)?,
                };
                let scale = i64::try_from(d.scale).unwrap_or(i64::MAX);
                decimal::write(out, "decimal", raw, scale, opts.decimal)?;
            }
            Schema::BigDecimal => {
                // bytes holding the unscaled value (length-prefixed) and the scale.
                let mut inner = length_prefixed(input)?;
                let unscaled = length_prefixed(&mut inner)?;
                let scale = long(&mut inner)?;
                decimal::write(out, "big-decimal", unscaled, scale, opts.decimal)?;
            }
            Schema::Date if epoch => push_display(out, int(input)?)?,
            Schema::Date => {
                let (y, m, day) = civil_from_days(i64::from(int(input)?));
                out.put(b"\"")?;
                push_date(out, y, m, day)?;
                out.put(b"\"")?;
            }
            Schema::TimeMillis if epoch => push_display(out, int(input)?)?,
            Schema::TimeMillis => push_time_of_day(out, i64::from(int(input)?), 1_000, 3)?,
            Schema::TimeMicros if epoch => push_display(out, long(input)?)?,
            Schema::TimeMicros => push_time_of_day(out, long(input)?, 1_000_000, 6)?,
            Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos
                if epoch =>
            {
                push_display(out, long(input)?)?
            }
            Schema::TimestampMillis => push_timestamp(out, long(input)?, 1_000, 3, true)?,
            Schema::TimestampMicros => push_timestamp(out, long(input)?, 1_000_000, 6, true)?,
            Schema::TimestampNanos => push_timestamp(out, long(input)?, 1_000_000_000, 9, true)?,
            Schema::LocalTimestampMillis => push_timestamp(out, long(input)?, 1_000, 3, false)?,
            Schema::LocalTimestampMicros => push_timestamp(out, long(input)?, 1_000_000, 6, false)?,
            Schema::LocalTimestampNanos => {
                push_timestamp(out, long(input)?, 1_000_000_000, 9, false)?
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
                )?;
            }
            Schema::Ref { .. } => return Err(AvroError::Mismatch),
        }
        Ok(())
    }

    /// A map, its entries sorted by key (the wire order is the writer's hash
    /// order): each `"key":value` is written where it falls, then the
    /// entries are put in order (the copy is inside the same limit).
    fn read_map(
        &self,
        input: &mut &[u8],
        values: &Schema,
        out: &mut Limited,
        opts: JsonOptions,
        depth: usize,
    ) -> Result<(), AvroError> {
        out.put(b"{")?;
        let start = out.buf.len();
        let mut entries: Vec<(&str, std::ops::Range<usize>)> = Vec::new();
        while let Some(n) = self.block(input, &Schema::String, out)? {
            for _ in 0..n {
                let k = utf8(length_prefixed(input)?)?;
                let from = out.buf.len() - start;
                push_str(out, k)?;
                out.put(b":")?;
                self.read(input, values, out, opts, depth + 1)?;
                entries.push((k, from..out.buf.len() - start));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let written = out.buf.split_off(start);
        for (i, (_, at)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.put(b",")?;
            }
            out.put(&written[at])?;
        }
        Ok(out.put(b"}")?)
    }

    /// The item count of the next block of an array or map (`None`: the end).
    /// A negative count is followed by the block's size in bytes. A count is
    /// refused before its items are read when they could not fit: items that
    /// take bytes in the bytes left of the record, items of no width (`null`,
    /// empty records) in the room left in the output (each writes at least two
    /// bytes and a comma), so the counts of all the blocks of a record are
    /// bounded together by `max_event_bytes`.
    fn block(
        &self,
        input: &mut &[u8],
        item: &Schema,
        out: &Limited,
    ) -> Result<Option<u64>, AvroError> {
        let n = long(input)?;
        if n == 0 {
            return Ok(None);
        }
        if n < 0 {
            let _size = long(input)?;
        }
        let n = n.unsigned_abs();
        if self.zero_width(item, 0) {
            if n.saturating_mul(3) > (out.room() as u64).saturating_add(1) {
                return Err(AvroError::TooLarge(out.max));
            }
        } else if n > input.len() as u64 {
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

impl From<Over> for AvroError {
    fn from(o: Over) -> AvroError {
        AvroError::TooLarge(o.0)
    }
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod tests;
