//! The Confluent Schema Registry wire format: byte 0 is the magic byte `0`,
//! bytes 1–4 the schema id (big-endian, unsigned), then the encoded record.
//! Protobuf records put the message-index list first: a zig-zag varint count,
//! then that many zig-zag varint indexes (the path of the message type among
//! the schema's nested messages); the one byte `0` stands for `[0]`, the first
//! message of the file.

/// The magic byte of the wire format.
pub(crate) const MAGIC: u8 = 0;

/// Bytes before the encoded record: the magic byte and the schema id.
pub(crate) const HEADER_BYTES: usize = 5;

/// The most message indexes accepted (a message nested this deep is absurd;
/// a corrupted count must not allocate).
pub(crate) const MAX_INDEXES: usize = 64;

/// A framed record: its schema id and what follows the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Framed<'a> {
    pub schema_id: u32,
    pub body: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("the record is {0} bytes: too short for the 5-byte Schema Registry header (magic byte 0, schema id)")]
    TooShort(usize),
    #[error("the record does not start with the Schema Registry magic byte 0 (it starts with 0x{0:02x})")]
    NoMagic(u8),
    #[error("the Protobuf message-index list is cut short or not a varint list")]
    BadIndexes,
    #[error("the Protobuf message-index list names {0} indexes (at most {MAX_INDEXES})")]
    TooManyIndexes(u64),
}

/// Splits a record into its schema id and body.
pub(crate) fn parse(value: &[u8]) -> Result<Framed<'_>, FrameError> {
    match value {
        [MAGIC, a, b, c, d, body @ ..] => Ok(Framed {
            schema_id: u32::from_be_bytes([*a, *b, *c, *d]),
            body,
        }),
        [first, ..] if *first != MAGIC => Err(FrameError::NoMagic(*first)),
        _ => Err(FrameError::TooShort(value.len())),
    }
}

/// Writes the header for `schema_id` (tests, the load generator).
pub fn header(schema_id: u32) -> [u8; HEADER_BYTES] {
    let id = schema_id.to_be_bytes();
    [MAGIC, id[0], id[1], id[2], id[3]]
}

/// One varint (little-endian base-128, at most 10 bytes) and the rest.
fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut v: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &bytes[i + 1..]));
        }
    }
    None
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The Protobuf message-index list at the start of a body, and the message
/// bytes after it. An empty list (the single byte `0`) is `[0]`.
pub(crate) fn message_indexes(body: &[u8]) -> Result<(Vec<i64>, &[u8]), FrameError> {
    let (count, mut rest) = varint(body).ok_or(FrameError::BadIndexes)?;
    let count = zigzag(count);
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let n = u64::try_from(count).map_err(|_| FrameError::BadIndexes)?;
    if n > MAX_INDEXES as u64 {
        return Err(FrameError::TooManyIndexes(n));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (v, r) = varint(rest).ok_or(FrameError::BadIndexes)?;
        out.push(zigzag(v));
        rest = r;
    }
    Ok((out, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_body_split() {
        let mut v = header(0x0102_0304).to_vec();
        v.extend_from_slice(b"body");
        let f = parse(&v).unwrap();
        assert_eq!(f.schema_id, 0x0102_0304);
        assert_eq!(f.body, b"body");
        // The id is unsigned: the high bit is not a sign.
        assert_eq!(parse(&header(u32::MAX)).unwrap().schema_id, u32::MAX);
        // A header alone is an empty body, framed.
        assert_eq!(parse(&header(7)).unwrap().body, b"");
    }

    #[test]
    fn unframed_records_are_refused_by_kind() {
        assert_eq!(parse(b"{\"id\":1}"), Err(FrameError::NoMagic(b'{')));
        assert_eq!(parse(&[0, 0, 0, 1]), Err(FrameError::TooShort(4)));
        assert_eq!(parse(&[]), Err(FrameError::TooShort(0)));
        assert_eq!(parse(&[1, 0, 0, 0, 1, 2]), Err(FrameError::NoMagic(1)));
    }

    #[test]
    fn message_indexes_as_confluent_writes_them() {
        // The first message: the single byte 0.
        assert_eq!(message_indexes(&[0, 0x0a]).unwrap(), (vec![0], &[0x0a][..]));
        // [1]: count 1 (zig-zag 2), index 1 (zig-zag 2).
        assert_eq!(message_indexes(&[2, 2, 9]).unwrap(), (vec![1], &[9][..]));
        // [0, 2]: count 2 (4), 0 (0), 2 (4).
        assert_eq!(message_indexes(&[4, 0, 4]).unwrap(), (vec![0, 2], &[][..]));
        // An index of 200 takes two varint bytes (zig-zag 400 = 0x90 0x03).
        assert_eq!(message_indexes(&[2, 0x90, 0x03]).unwrap().0, vec![200]);
    }

    #[test]
    fn broken_index_lists_are_refused() {
        assert_eq!(message_indexes(&[]), Err(FrameError::BadIndexes));
        assert_eq!(message_indexes(&[4, 0]), Err(FrameError::BadIndexes));
        assert_eq!(message_indexes(&[0x80]), Err(FrameError::BadIndexes));
        // A negative count.
        assert_eq!(message_indexes(&[1]), Err(FrameError::BadIndexes));
        // A count far past any nesting.
        assert_eq!(
            message_indexes(&[0xfe, 0x0f]),
            Err(FrameError::TooManyIndexes(1023))
        );
    }
}
