//! Record headers as bytes, through librdkafka's own accessors (rdkafka's
//! `Headers` API panics on a name that is not UTF-8): read from a consumed
//! message, and written into a producer's header list (replay).

/// A consumed message's headers, read as bytes through librdkafka's own
/// accessor (rdkafka's `Headers` API turns each name into a `&str` with
/// `to_str().unwrap()`, which panics on a name that is not UTF-8); `None`
/// without any. A name is read up to its first NUL (librdkafka hands names over
/// as C strings).
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
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
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
}
