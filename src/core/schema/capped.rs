//! The buffer the registry formats write their JSON into: it stops at a byte
//! limit (`pipeline.max_event_bytes`), so a small record cannot become a huge
//! document (Protobuf's empty sub-messages, Avro's arrays of `null`).

/// The buffer refused to grow past its limit (the limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Over(pub usize);

/// A buffer that refuses to grow past `max` bytes (`over` once it refused).
pub(super) struct Limited {
    pub buf: Vec<u8>,
    pub max: usize,
    pub over: bool,
}

impl Limited {
    /// An empty buffer of at most `max` bytes, `hint` of them reserved (never
    /// more than `max`).
    pub(super) fn new(max: usize, hint: usize) -> Limited {
        Limited {
            buf: Vec::with_capacity(hint.min(max)),
            max,
            over: false,
        }
    }

    /// The bytes it can still take.
    pub(super) fn room(&self) -> usize {
        self.max.saturating_sub(self.buf.len())
    }

    /// Appends `b` whole, or nothing when it would pass the limit.
    pub(super) fn put(&mut self, b: &[u8]) -> Result<(), Over> {
        if b.len() > self.room() {
            self.over = true;
            return Err(Over(self.max));
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }
}

impl std::io::Write for Limited {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.put(b)
            .map_err(|_| std::io::Error::other("the JSON is larger than max_event_bytes"))?;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn stops_at_the_limit_and_keeps_what_fit() {
        let mut l = Limited::new(5, 100);
        assert!(l.buf.capacity() <= 100);
        assert_eq!(l.put(b"abc"), Ok(()));
        assert_eq!(l.room(), 2);
        assert_eq!(l.put(b"def"), Err(Over(5)));
        assert!(l.over);
        assert_eq!(l.buf, b"abc");
        assert!(l.write_all(b"de").is_ok());
        assert!(l.write_all(b"f").is_err());
        assert_eq!(l.buf, b"abcde");
        assert_eq!(l.room(), 0);
    }
}
