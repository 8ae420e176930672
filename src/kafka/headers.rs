//! Record headers as bytes, through librdkafka's own accessors (rdkafka's
//! `Headers` API panics on a name that is not UTF-8): read from a consumed
//! message, and written into a producer's header list (replay).

/// A consumed message's headers, read as bytes through librdkafka's own
/// accessor (rdkafka's `Headers` API turns each name into a `&str` with
/// `to_str().unwrap()`, which panics on a name that is not UTF-8); `None`
/// without any. A name is read up to its first NUL (librdkafka hands names over
/// as C strings), unless librdkafka's header record says it is longer
/// ([`full_name`]).
pub fn record_headers(
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Option<Box<[crate::core::input::Header]>> {
    use rdkafka::bindings as rd;
    let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `m.ptr()` is the live message `m` borrows; librdkafka parses its
    // headers on first use and returns a pointer the message owns, valid while
    // `m` lives (this function's borrow).
    let err = unsafe { rd::rd_kafka_message_headers(m.ptr(), &mut hdrs) };
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
        return None;
    }
    // SAFETY: `hdrs` is the message's header list, alive while `m` is (above).
    unsafe { read_header_list(hdrs) }
}

/// The headers of a librdkafka header list, copied out as bytes.
///
/// # Safety
/// `hdrs` must be a valid header list that outlives the call.
unsafe fn read_header_list(
    hdrs: *const rdkafka::bindings::rd_kafka_headers_t,
) -> Option<Box<[crate::core::input::Header]>> {
    use rdkafka::bindings as rd;
    // SAFETY: `hdrs` is valid (the caller's promise).
    let n = unsafe { rd::rd_kafka_header_cnt(hdrs) };
    if n == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for idx in 0..n {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size: usize = 0;
        // SAFETY: `idx` < the count; librdkafka writes pointers into its own
        // header list (a NUL-terminated name, `size` value bytes or NULL).
        let err =
            unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: as above; both are copied before `m` can go away.
        let name = unsafe { full_name(name, value, size) };
        let value = (!value.is_null()).then(|| {
            // SAFETY: `value` points at `size` bytes of the header list.
            bytes::Bytes::copy_from_slice(unsafe {
                std::slice::from_raw_parts(value.cast::<u8>(), size)
            })
        });
        out.push((crate::core::input::HeaderName::new(name), value));
    }
    Some(out.into_boxed_slice())
}

/// The layout of librdkafka's header record (`rd_kafka_header_t`,
/// `src/rdkafka_header.h`, unchanged since headers came in 0.11.4): the
/// serialized size, the value's length, the name's length, the value's
/// pointer, then the name's bytes (NUL-terminated), the value after them.
#[repr(C)]
struct HeaderRecord {
    ser_size: usize,
    value_size: usize,
    name_size: usize,
    value: *const std::ffi::c_char,
    name: [std::ffi::c_char; 1],
}

/// A header's whole name. `rd_kafka_header_get_all` gives it as a C
/// string, which a NUL inside the name (a Kafka header key may hold one)
/// would cut: `ce_id\0x` would read as `ce_id`, a second `ce_id` that
/// overrides the first. The name's length is read from the header record
/// `name` sits in ([`HeaderRecord`]), used only when the record agrees with
/// what `rd_kafka_header_get_all` said (the value's pointer and length, a
/// length at least the C string's, the value right after the name); else
/// the C string.
///
/// # Safety
/// `name`, `value` and `size` are what `rd_kafka_header_get_all` gave for
/// one header of a list that outlives the call.
unsafe fn full_name<'a>(
    name: *const std::ffi::c_char,
    value: *const std::ffi::c_void,
    size: usize,
) -> &'a [u8] {
    // SAFETY: `name` is a NUL-terminated string of the list (the caller's
    // promise).
    let c = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    let offset = std::mem::offset_of!(HeaderRecord, name);
    // SAFETY: librdkafka hands out `&hdr->rkhdr_name[0]`, so the record
    // starts `offset` bytes before it, inside the same allocation.
    let record = unsafe { name.byte_sub(offset) }.cast::<HeaderRecord>();
    // SAFETY: as above: the record's fields precede the name in its
    // allocation, and are read unaligned-safe as plain integers/pointers.
    let (name_size, value_size, value_ptr) = unsafe {
        (
            std::ptr::addr_of!((*record).name_size).read_unaligned(),
            std::ptr::addr_of!((*record).value_size).read_unaligned(),
            std::ptr::addr_of!((*record).value).read_unaligned(),
        )
    };
    let agrees = value_ptr.cast::<std::ffi::c_void>() == value
        && (value.is_null() || value_size == size)
        && name_size >= c.len()
        && (value.is_null() || value.cast::<u8>() == name.cast::<u8>().wrapping_add(name_size + 1));
    if agrees && name_size > c.len() {
        // SAFETY: the record agrees: `name_size` bytes of name were copied
        // into it (`rd_kafka_header_add`), followed by a NUL.
        unsafe { std::slice::from_raw_parts(name.cast::<u8>(), name_size) }
    } else {
        c
    }
}

/// Adds a header whose name is given as bytes (rdkafka's `OwnedHeaders::insert`
/// takes a `&str`): replay writes a name that is not UTF-8 back exactly as the
/// origin record had it.
pub(crate) fn insert_header_bytes(
    headers: rdkafka::message::OwnedHeaders,
    name: &[u8],
    value: Option<&[u8]>,
) -> rdkafka::message::OwnedHeaders {
    use rdkafka::bindings as rd;
    // rdkafka's `BorrowedHeaders` is a zero-sized view whose address is the
    // native header list (`BorrowedHeaders::from_native_ptr` casts the pointer
    // to the reference): this is the list `headers` owns.
    let raw = std::ptr::from_ref(headers.as_borrowed())
        .cast_mut()
        .cast::<rd::rd_kafka_headers_t>();
    let (vptr, vlen) = match value {
        Some(v) => (v.as_ptr().cast::<std::ffi::c_void>(), v.len() as isize),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `raw` is the writable list `headers` owns (created by
    // `rd_kafka_headers_new`), alive for this call; librdkafka copies the name
    // (`name.len()` bytes) and the value into its own allocation. It fails only
    // on a read-only list, which an `OwnedHeaders` never is.
    let _ = unsafe {
        rd::rd_kafka_header_add(
            raw,
            name.as_ptr().cast::<std::ffi::c_char>(),
            name.len() as isize,
            vptr,
            vlen,
        )
    };
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::input::HeaderName;

    /// A name that is not UTF-8 is written and read back as its bytes (rdkafka's
    /// own accessors panic on it), next to ordinary ones and a null value.
    #[test]
    fn header_names_travel_as_bytes() {
        let h = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "ce_id",
            value: Some("e-1"),
        });
        let h = insert_header_bytes(h, b"\xff\xfe", Some(b"x"));
        let h = insert_header_bytes(h, b"n", None);
        let raw =
            std::ptr::from_ref(h.as_borrowed()).cast::<rdkafka::bindings::rd_kafka_headers_t>();
        // SAFETY: `h` owns the list and outlives the call.
        let read = unsafe { read_header_list(raw) }.unwrap();
        assert_eq!(
            read.to_vec(),
            vec![
                (
                    HeaderName::from("ce_id"),
                    Some(bytes::Bytes::from_static(b"e-1"))
                ),
                (
                    HeaderName::new(b"\xff\xfe"),
                    Some(bytes::Bytes::from_static(b"x"))
                ),
                (HeaderName::from("n"), None),
            ]
        );
        assert_eq!(read[1].0.as_str(), None);
    }

    /// Issue 54, item 16: a name with a NUL in it is read whole, not as a
    /// second header of the name before the NUL (which would override it).
    /// Seen failing on 45109fa: `ce_id\0x` was read as `ce_id`.
    #[test]
    fn a_name_with_a_nul_is_read_whole() {
        let h = rdkafka::message::OwnedHeaders::new();
        let h = insert_header_bytes(h, b"ce_id", Some(b"e-1"));
        let h = insert_header_bytes(h, b"ce_id\0x", Some(b"forged"));
        let h = insert_header_bytes(h, b"ce_type\0", None);
        let h = insert_header_bytes(h, b"\0", Some(b""));
        let raw =
            std::ptr::from_ref(h.as_borrowed()).cast::<rdkafka::bindings::rd_kafka_headers_t>();
        // SAFETY: `h` owns the list and outlives the call.
        let read = unsafe { read_header_list(raw) }.unwrap();
        let names: Vec<&[u8]> = read.iter().map(|(n, _)| n.as_bytes()).collect();
        assert_eq!(names, [&b"ce_id"[..], b"ce_id\0x", b"ce_type\0", b"\0"]);
        assert_eq!(read[1].1.as_deref(), Some(&b"forged"[..]));
        assert_eq!(read[2].1, None);
    }
}
