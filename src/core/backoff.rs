//! In-place retry policy: exponential backoff with jitter, bounded in tries and in
//! total time, honouring `Retry-After`. Pure: the caller passes elapsed time and a
//! random number, so every decision is testable without sleeping.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InPlaceRetry {
    /// Total tries including the first one.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// No retry is started that would begin after this much time since the first try.
    pub total_budget: Duration,
}

impl Default for InPlaceRetry {
    fn default() -> Self {
        InPlaceRetry {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            total_budget: Duration::from_secs(2),
        }
    }
}

impl InPlaceRetry {
    /// Delay before the next try, or `None` to give up.
    ///
    /// - `attempts_done`: tries made so far (≥ 1).
    /// - `elapsed`: time since the first try started.
    /// - `retry_after`: the server's `Retry-After`, if any; it is a floor for the
    ///   delay, and if honouring it would exceed the budget, Courier gives up.
    /// - `jitter`: a number in `[0, 1)`; the delay is drawn from `[d/2, d)`
    ///   ("equal jitter"), so retries of many events spread out but never collapse to 0.
    pub(crate) fn next_delay(
        &self,
        attempts_done: u32,
        elapsed: Duration,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Option<Duration> {
        if attempts_done >= self.max_attempts {
            return None;
        }
        let exp = attempts_done.saturating_sub(1).min(30);
        let d = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let jitter = jitter.clamp(0.0, 1.0);
        let mut delay = d / 2 + d.mul_f64(jitter / 2.0);
        if let Some(ra) = retry_after {
            delay = delay.max(ra);
        }
        // Saturating: a server's `Retry-After` can be any size.
        if elapsed.saturating_add(delay) > self.total_budget {
            return None;
        }
        Some(delay)
    }
}

/// Backoff for work that must eventually succeed (e.g. a DLQ write that the offset
/// waits for): exponential, capped, never gives up.
pub(crate) fn persistent_delay(attempts_done: u32, base: Duration, cap: Duration) -> Duration {
    let exp = attempts_done.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << exp).min(cap)
}

/// The longest `Retry-After` taken at its word. A server may send any number; a
/// wait beyond the in-place budget sends the event to the DLQ anyway, so a cap
/// only keeps the arithmetic (and the DLQ's `not_before`) sane.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses `Retry-After` (RFC 9110 §10.2.3) in both forms: delta-seconds, or an
/// HTTP-date, which is turned into a wait from `now` (a date in the past means no
/// wait). Clamped to [`MAX_RETRY_AFTER`]; anything else (negative, fractional,
/// garbage) is ignored.
pub(crate) fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits, possibly more than a u64 holds: that is just "very long".
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p() -> InPlaceRetry {
        InPlaceRetry {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            total_budget: Duration::from_secs(2),
        }
    }

    #[test]
    fn exponential_then_capped() {
        let p = p();
        let z = Duration::ZERO;
        assert_eq!(
            p.next_delay(1, z, None, 0.0),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            p.next_delay(2, z, None, 0.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            p.next_delay(3, z, None, 0.0),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            p.next_delay(3, z, None, 0.999),
            Some(Duration::from_micros(399_800))
        );
        assert_eq!(p.next_delay(4, z, None, 0.0), None, "attempts exhausted");
        let mut q = p.clone();
        q.max_attempts = 10;
        assert_eq!(
            q.next_delay(8, z, None, 0.0),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn retry_after_in_both_forms_clamped_and_never_overflowing() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // A date in the past: no wait.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        // Huge values are clamped, whatever their form.
        for huge in [
            "18446744073709551615",
            "99999999999999999999999999999",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert_eq!(
                parse_retry_after(huge, now),
                Some(MAX_RETRY_AFTER),
                "{huge}"
            );
        }
        for bad in ["", "-1", "1.5", "soon", "12 s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
        // The policy never overflows on any wait: it gives up in place.
        let p = p();
        for ra in [
            MAX_RETRY_AFTER,
            Duration::MAX,
            Duration::from_secs(u64::MAX),
        ] {
            assert_eq!(p.next_delay(1, Duration::from_secs(1), Some(ra), 0.5), None);
        }
    }

    #[test]
    fn budget_and_retry_after() {
        let p = p();
        assert_eq!(
            p.next_delay(1, Duration::from_millis(1990), None, 0.0),
            None
        );
        assert_eq!(
            p.next_delay(1, Duration::ZERO, Some(Duration::from_secs(1)), 0.0),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            p.next_delay(1, Duration::ZERO, Some(Duration::from_secs(3)), 0.0),
            None
        );
    }

    #[test]
    fn persistent_is_capped() {
        let b = Duration::from_millis(100);
        let c = Duration::from_secs(5);
        assert_eq!(persistent_delay(1, b, c), b);
        assert_eq!(persistent_delay(3, b, c), Duration::from_millis(400));
        assert_eq!(persistent_delay(1000, b, c), c);
    }

    proptest! {
        #[test]
        fn never_exceeds_budget_or_tries(
            attempts in 1u32..10, elapsed_ms in 0u64..3000, ra in proptest::option::of(0u64..4), j in 0.0f64..1.0
        ) {
            let p = p();
            let elapsed = Duration::from_millis(elapsed_ms);
            if let Some(d) = p.next_delay(attempts, elapsed, ra.map(Duration::from_secs), j) {
                prop_assert!(attempts < p.max_attempts);
                prop_assert!(elapsed + d <= p.total_budget);
                prop_assert!(d > Duration::ZERO);
                if let Some(ra) = ra { prop_assert!(d >= Duration::from_secs(ra)); }
            }
        }
    }
}
