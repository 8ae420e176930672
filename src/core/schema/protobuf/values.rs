//! How many values a Protobuf record's bytes decode to, counted over the
//! wire bytes with the message's descriptor before `prost-reflect` builds
//! them (issue 54, item 15): its decoded form takes ~56 bytes a value
//! (a packed `repeated bool` is one value a byte), whatever the JSON later
//! written from it is capped at, so a record is refused on its count first.
//!
//! Counted: every field occurrence (a tag: known, an extension or unknown —
//! `prost-reflect` keeps unknown fields too), and every element of a packed
//! list; sub-messages, map entries and groups are walked with their own
//! descriptors, and a `google.protobuf.Any` with the type its URL names (its
//! JSON decodes it). The walk stops as soon as the count passes the limit.
//! Bytes the walk cannot read (a bad varint, a length past the end, nesting
//! past prost's 100 levels) end it early without a refusal: the decoder then
//! says what is wrong with them.

use prost_reflect::{Kind, MessageDescriptor};

/// prost's recursion limit.
const MAX_DEPTH: usize = 100;

const ANY: &str = "google.protobuf.Any";

/// Whether `bytes`, a message of type `desc`, decode to more than `limit`
/// values.
pub(super) fn more_than(desc: &MessageDescriptor, bytes: &[u8], limit: usize) -> bool {
    let mut walk = Walk { count: 0, limit };
    matches!(walk.message(Some(desc), bytes, 0, None), Err(Stop::Over))
}

enum Stop {
    /// Past the limit.
    Over,
    /// Bytes the walk cannot read: the decoder's to refuse.
    Unreadable,
}

struct Walk {
    count: usize,
    limit: usize,
}

/// One varint and the rest.
fn varint(bytes: &[u8]) -> Result<(u64, &[u8]), Stop> {
    let mut v: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v, &bytes[i + 1..]));
        }
    }
    Err(Stop::Unreadable)
}

/// `n` bytes and the rest.
fn take(bytes: &[u8], n: u64) -> Result<(&[u8], &[u8]), Stop> {
    let n = usize::try_from(n).map_err(|_| Stop::Unreadable)?;
    if n > bytes.len() {
        return Err(Stop::Unreadable);
    }
    Ok(bytes.split_at(n))
}

/// The elements of a packed list of `kind` in `bytes`; `None`: not a kind
/// that packs.
fn packed(kind: &Kind, bytes: &[u8]) -> Option<usize> {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => Some(bytes.len() / 8),
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => Some(bytes.len() / 4),
        Kind::Int32
        | Kind::Int64
        | Kind::Uint32
        | Kind::Uint64
        | Kind::Sint32
        | Kind::Sint64
        | Kind::Bool
        | Kind::Enum(_) => Some(bytes.iter().filter(|b| **b & 0x80 == 0).count()),
        Kind::String | Kind::Bytes | Kind::Message(_) => None,
    }
}

impl Walk {
    fn add(&mut self, n: usize) -> Result<(), Stop> {
        self.count = self.count.saturating_add(n);
        if self.count > self.limit {
            return Err(Stop::Over);
        }
        Ok(())
    }

    /// The fields of a message of type `desc` (`None`: unknown) in `buf`, up
    /// to the end of `buf` or, for a group, its end tag; what follows.
    fn message<'a>(
        &mut self,
        desc: Option<&MessageDescriptor>,
        mut buf: &'a [u8],
        depth: usize,
        group: Option<u32>,
    ) -> Result<&'a [u8], Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Unreadable);
        }
        let is_any = desc.is_some_and(|d| d.full_name() == ANY);
        let (mut type_url, mut value) = (None, None);
        loop {
            if buf.is_empty() {
                if group.is_some() {
                    return Err(Stop::Unreadable);
                }
                break;
            }
            let (key, rest) = varint(buf)?;
            buf = rest;
            let number = u32::try_from(key >> 3).map_err(|_| Stop::Unreadable)?;
            let wire_type = key & 7;
            if wire_type == 4 {
                return match group {
                    Some(g) if g == number => Ok(buf),
                    _ => Err(Stop::Unreadable),
                };
            }
            self.add(1)?;
            let field = desc.and_then(|d| {
                d.get_field(number)
                    .map(|f| (f.kind(), f.is_list()))
                    .or_else(|| d.get_extension(number).map(|e| (e.kind(), e.is_list())))
            });
            match wire_type {
                0 => buf = varint(buf)?.1,
                1 => buf = take(buf, 8)?.1,
                5 => buf = take(buf, 4)?.1,
                2 => {
                    let (len, rest) = varint(buf)?;
                    let (inner, rest) = take(rest, len)?;
                    buf = rest;
                    match &field {
                        Some((Kind::Message(m), _)) => {
                            self.message(Some(m), inner, depth + 1, None)?;
                        }
                        Some((kind, true)) => {
                            if let Some(n) = packed(kind, inner) {
                                self.add(n)?;
                            }
                        }
                        _ => {}
                    }
                    if is_any && number == 1 {
                        type_url = Some(inner);
                    } else if is_any && number == 2 {
                        value = Some(inner);
                    }
                }
                3 => {
                    let inner = match &field {
                        Some((Kind::Message(m), _)) => Some(m),
                        _ => None,
                    };
                    buf = self.message(inner, buf, depth + 1, Some(number))?;
                }
                _ => return Err(Stop::Unreadable),
            }
        }
        // An `Any`'s JSON decodes the message it holds.
        if let (Some(d), Some(url), Some(value)) = (desc, type_url, value) {
            let name = std::str::from_utf8(url)
                .ok()
                .and_then(|u| u.rsplit('/').next());
            if let Some(inner) = name.and_then(|n| d.parent_pool().get_message_by_name(n)) {
                self.message(Some(&inner), value, depth + 1, None)?;
            }
        }
        Ok(buf)
    }
}
