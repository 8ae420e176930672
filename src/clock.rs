//! The wall clock, read at the edges (`core` takes time as an input).

/// When something happened, on both clocks: read once and shared by
/// everyone it concerns (a batch's answer is heard at one moment for all its
/// events, so its events do not read the clocks one by one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) instant: std::time::Instant,
    /// [`now_ms`] at the same moment.
    pub(crate) ms: i64,
}

impl Stamp {
    pub(crate) fn now() -> Stamp {
        Stamp {
            instant: std::time::Instant::now(),
            ms: now_ms(),
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
