//! This instance's side of the rate limit: its stock of permits and where
//! they come from, and its fallback while Redis does not answer.

use super::Source;
use crate::core::ratelimit::Gcra;
use std::time::Instant;

pub(super) struct Local {
    pub(super) stock: u64,
    pub(super) expires: Instant,
    pub(super) source: Source,
    pub(super) live: u64,
    pub(super) fallback: Fallback,
    /// Whether the first batch has waited for the connection (once only).
    pub(super) waited_for_connect: bool,
    /// Whether Redis ever answered (then `live` is its count).
    pub(super) reached_redis: bool,
    pub(super) rejoin: Option<Rejoin>,
}

/// This instance's own limit while Redis does not answer: a share of the
/// group's rate.
pub(super) struct Fallback {
    /// The next try of Redis while on the fallback.
    pub(super) retry_at: Instant,
    /// The fallback's GCRA and its TAT (µs since `epoch`).
    pub(super) gcra: Gcra,
    pub(super) tat: u64,
    /// The fraction of the rate the GCRA was built for.
    pub(super) fraction: f64,
}

/// Back on Redis after a fallback, while the instances this one knew may still
/// be on theirs: Redis's TAT counts only the permits of those back, the others
/// still spend their local shares. Until Redis counts as many live instances
/// as before (or [`super::REJOIN_MAX`]), every permit needs both Redis's grant and
/// the local share's, so the group never goes above its limit on the way back.
/// (Without this, the tests saw 541 and 709 requests in the seconds Redis
/// came back at 500/s.)
pub(super) struct Rejoin {
    pub(super) expect_live: u64,
    pub(super) until: Instant,
}
