//! When to ask the OAuth2 token endpoint for an access token (`auth::oauth2`
//! carries it out): use the cached token, use it and refresh it in the
//! background, fetch one and wait for it, or wait out the back-off after a
//! failed fetch. Pure: the clock and the jitter are inputs.
//!
//! A token is refreshed ahead of its expiry by a margin of 10–20 % of its
//! lifetime (jittered, so the instances of a group do not all ask at once; at
//! most [`MAX_MARGIN`]); a failed fetch is retried after 1 s, doubling up to
//! [`MAX_BACKOFF`]. One fetch is in flight for the whole process.
//!
//! A token's lifetime is the endpoint's `expires_in` clamped to
//! [`MIN_LIFETIME`]..=[`MAX_LIFETIME`] ([`DEFAULT_LIFETIME`] without one): an
//! `expires_in` of 2^63 s is a day, not an overflow. What a 401 from the API
//! does to the cached token is [`unauthorized`]'s decision.

pub(crate) mod challenge;
pub(crate) mod unauthorized;

use std::time::{Duration, Instant};

/// The most a token is refreshed ahead of its expiry.
pub(crate) const MAX_MARGIN: Duration = Duration::from_secs(300);
/// A token answer without `expires_in` is used for this long.
pub(crate) const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The shortest lifetime a token is used for (`expires_in: 0` included): a
/// lifetime under a second would have every call fetch anew.
pub(crate) const MIN_LIFETIME: Duration = Duration::from_secs(1);
/// The longest lifetime a token is used for: a token that claims more is
/// refreshed after a day anyway (and an `expires_in` near 2^63 s cannot
/// overflow a clock).
pub(crate) const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// The longest wait between two failed fetches.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The times of the cached token and of the last failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TokenTimes {
    /// The cached token: when to refresh it, and when it expires.
    pub token: Option<(Instant, Instant)>,
    /// After a failed fetch: no new fetch before this.
    pub retry_at: Option<Instant>,
    /// A fetch is in flight.
    pub fetching: bool,
}

/// What a caller that needs a token does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenStep {
    /// Send with the cached token.
    Use,
    /// Send with the cached token, and start a refresh in the background.
    UseAndRefresh,
    /// No usable token: fetch one (or join the fetch in flight) and wait.
    Fetch,
    /// No usable token, and the last fetch failed: wait until this, then fetch.
    WaitUntil(Instant),
}

pub(crate) fn step(t: &TokenTimes, now: Instant) -> TokenStep {
    let backing_off = t.retry_at.is_some_and(|r| now < r);
    match t.token {
        Some((refresh_at, expires_at)) if now < expires_at => {
            if now >= refresh_at && !t.fetching && !backing_off {
                TokenStep::UseAndRefresh
            } else {
                TokenStep::Use
            }
        }
        _ => match t.retry_at {
            Some(r) if now < r && !t.fetching => TokenStep::WaitUntil(r),
            _ => TokenStep::Fetch,
        },
    }
}

/// The lifetime a token answer's `expires_in` gives, clamped.
pub(crate) fn lifetime(expires_in: Option<Duration>) -> Duration {
    expires_in
        .unwrap_or(DEFAULT_LIFETIME)
        .clamp(MIN_LIFETIME, MAX_LIFETIME)
}

/// When a token fetched at `asked` (the request's start) with `lifetime`
/// (clamped as [`lifetime`] does) expires.
pub(crate) fn expires_at(asked: Instant, lifetime: Duration) -> Instant {
    let lifetime = lifetime.clamp(MIN_LIFETIME, MAX_LIFETIME);
    asked.checked_add(lifetime).unwrap_or(asked)
}

/// When a token fetched at `asked` (the request's start) with `lifetime`
/// (clamped as [`lifetime`] does) is refreshed; `jitter` in `[0, 1)`.
pub(crate) fn refresh_at(asked: Instant, lifetime: Duration, jitter: f64) -> Instant {
    let lifetime = lifetime.clamp(MIN_LIFETIME, MAX_LIFETIME);
    let share = 0.10 + 0.10 * jitter.clamp(0.0, 1.0);
    let margin = lifetime.mul_f64(share).min(MAX_MARGIN);
    asked
        .checked_add(lifetime.saturating_sub(margin))
        .unwrap_or(asked)
}

/// The wait after the `failures`-th failed fetch in a row (from 1).
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn no_token_fetches_and_a_failure_waits_out_its_backoff() {
        let t0 = Instant::now();
        assert_eq!(step(&TokenTimes::default(), t0), TokenStep::Fetch);
        let failed = TokenTimes {
            retry_at: Some(at(t0, 1000)),
            ..TokenTimes::default()
        };
        assert_eq!(step(&failed, t0), TokenStep::WaitUntil(at(t0, 1000)));
        assert_eq!(step(&failed, at(t0, 1000)), TokenStep::Fetch);
        // A fetch already in flight is joined, not waited for twice.
        let joined = TokenTimes {
            fetching: true,
            ..failed
        };
        assert_eq!(step(&joined, t0), TokenStep::Fetch);
    }

    #[test]
    fn a_token_is_used_then_refreshed_once_ahead_of_its_expiry() {
        let t0 = Instant::now();
        let t = TokenTimes {
            token: Some((at(t0, 800), at(t0, 1000))),
            ..TokenTimes::default()
        };
        assert_eq!(step(&t, at(t0, 799)), TokenStep::Use);
        assert_eq!(step(&t, at(t0, 800)), TokenStep::UseAndRefresh);
        let fetching = TokenTimes {
            fetching: true,
            ..t
        };
        assert_eq!(step(&fetching, at(t0, 900)), TokenStep::Use);
        // A failed refresh keeps using the token until it expires.
        let failed = TokenTimes {
            retry_at: Some(at(t0, 950)),
            ..t
        };
        assert_eq!(step(&failed, at(t0, 900)), TokenStep::Use);
        assert_eq!(step(&failed, at(t0, 960)), TokenStep::UseAndRefresh);
        assert_eq!(step(&t, at(t0, 1000)), TokenStep::Fetch);
    }

    /// An `expires_in` of 2^63 s (the `oauth2` crate reads it as a u64)
    /// overflowed `Instant + Duration` and panicked the refresh task.
    #[test]
    fn a_refresh_time_from_an_expires_in_near_2_pow_63_does_not_panic() {
        let t0 = Instant::now();
        for secs in [1u64 << 63, u64::MAX, 1 << 40] {
            let r = refresh_at(t0, Duration::from_secs(secs), 0.5);
            assert!(r > t0 && r <= t0 + Duration::from_secs(24 * 3600), "{secs}");
        }
    }

    #[test]
    fn a_lifetime_is_clamped_to_a_second_and_a_day() {
        let t0 = Instant::now();
        let huge = Duration::from_secs(1 << 63);
        assert_eq!(lifetime(Some(huge)), MAX_LIFETIME);
        assert_eq!(lifetime(Some(Duration::ZERO)), MIN_LIFETIME);
        assert_eq!(lifetime(None), DEFAULT_LIFETIME);
        assert_eq!(
            lifetime(Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(expires_at(t0, huge), t0 + MAX_LIFETIME);
        assert!(refresh_at(t0, huge, 0.0) < expires_at(t0, huge));
    }

    #[test]
    fn the_backoff_doubles_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(6), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    proptest! {
        /// The refresh comes after 80 % of the lifetime (or the capped margin)
        /// and before the expiry — of the lifetime as clamped (under a second:
        /// a second; seen failing with 1 ms, compared unclamped).
        #[test]
        fn a_refresh_is_ahead_of_the_expiry_within_its_margin(
            lifetime_ms in 1u64..10_000_000, jitter in 0.0f64..1.0,
        ) {
            let t0 = Instant::now();
            let asked = Duration::from_millis(lifetime_ms);
            let r = refresh_at(t0, asked, jitter);
            let expiry = expires_at(t0, asked);
            let lifetime = expiry - t0;
            prop_assert!(r <= expiry);
            let margin = expiry - r;
            prop_assert!(margin <= MAX_MARGIN);
            prop_assert!(margin <= lifetime.mul_f64(0.2) + Duration::from_nanos(1));
            prop_assert!(margin >= lifetime.mul_f64(0.1).min(MAX_MARGIN) - Duration::from_nanos(1));
        }

        /// Whatever the state, a caller is never told to use a token past its
        /// expiry, and never told to fetch during a back-off nobody is fetching in.
        #[test]
        fn a_step_never_uses_an_expired_token(
            refresh in 0u64..2000, life in 0u64..2000, retry in proptest::option::of(0u64..3000),
            has_token: bool, fetching: bool, now in 0u64..4000,
        ) {
            let t0 = Instant::now();
            let t = TokenTimes {
                token: has_token.then(|| (at(t0, refresh.min(life)), at(t0, life))),
                retry_at: retry.map(|r| at(t0, r)),
                fetching,
            };
            let now = at(t0, now);
            match step(&t, now) {
                TokenStep::Use | TokenStep::UseAndRefresh => {
                    prop_assert!(t.token.is_some_and(|(_, e)| now < e))
                }
                TokenStep::Fetch => prop_assert!(fetching || t.retry_at.is_none_or(|r| now >= r)),
                TokenStep::WaitUntil(r) => prop_assert!(r > now && !fetching),
            }
        }
    }
}
