//! The record as it travels from the poll thread to a partition actor, and
//! what it costs against the byte budgets.

/// One message, owned, as it travels from the poll thread to a partition actor.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub partition: i32,
    pub offset: i64,
    /// The side it was read from: the main topic, or the DLQ topic (partition p
    /// of the DLQ pairs with partition p of the main topic).
    pub src: crate::core::partition::Src,
    pub key: Option<Vec<u8>>,
    pub payload: Option<bytes::Bytes>,
    pub timestamp_ms: Option<i64>,
    /// The record's headers, in order; `None` (nothing allocated) without any.
    pub headers: Option<Box<[crate::core::input::Header]>>,
}

pub(crate) use crate::core::byte_budget::RECORD_OVERHEAD;

/// What each header costs besides its name and value bytes: its slot in the
/// record's header slice (`size_of::<Header>()`: 48 bytes, the name's box and
/// the value's `Bytes`) and the two heap blocks its name and value are copied
/// into (jemalloc's smallest size class is 8 bytes, so even a 1-byte name or
/// value takes 8; bytes up to the next class are charged as the 8). Derived
/// from the types and the allocator's size classes, not from a profile: a
/// record of 350,000 one-byte headers (~1 MB on the wire) holds ~22 MB, which
/// this charges (the names' and values' bytes on top of 64 per header).
pub(crate) const HEADER_OVERHEAD: usize = std::mem::size_of::<crate::core::input::Header>() + 2 * 8;

impl Record {
    /// The bytes it holds (value, key, header names and values, plus
    /// [`HEADER_OVERHEAD`] per header and [`RECORD_OVERHEAD`]): what it costs
    /// against the byte budgets.
    pub(crate) fn size(&self) -> usize {
        let headers = self.headers.as_deref().map_or(0, |h| {
            h.iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()) + HEADER_OVERHEAD)
                .sum()
        });
        self.payload.as_ref().map_or(0, |p| p.len())
            + self.key.as_ref().map_or(0, Vec::len)
            + headers
            + RECORD_OVERHEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::input::HeaderName;

    /// A record of ~350,000 one-byte headers (about 1 MB on the wire) is
    /// charged at least what its headers hold on the heap: each header's slot in
    /// the slice and the smallest heap blocks of its name and value. Before the
    /// per-header charge it was charged ~0.7 MB for ~22 MB held.
    #[test]
    fn a_record_is_charged_for_each_header() {
        let n = 350_000;
        let headers: Vec<crate::core::input::Header> = (0..n)
            .map(|i| {
                (
                    HeaderName::new(&[b'a' + (i % 26) as u8]),
                    Some(bytes::Bytes::from_static(b"v")),
                )
            })
            .collect();
        let r = Record {
            partition: 0,
            offset: 0,
            src: crate::core::partition::Src::Main,
            key: None,
            payload: Some(bytes::Bytes::from(vec![0u8; 1024])),
            timestamp_ms: None,
            headers: Some(headers.into_boxed_slice()),
        };
        // The slice, and per header two blocks of jemalloc's smallest class (8).
        let held = n * (std::mem::size_of::<crate::core::input::Header>() + 8 + 8);
        assert!(
            r.size() >= held,
            "charged {} for {held} bytes of headers held",
            r.size()
        );
        // Without headers the charge is what it was.
        let bare = Record { headers: None, ..r };
        assert_eq!(bare.size(), 1024 + RECORD_OVERHEAD);
    }
}
