//! What a 401 from the API does to the cached OAuth2 token (`auth::oauth2`
//! carries it out). Pure: the clock and the jitter are inputs.
//!
//! A 401 is a claim about the token that other calls can refute: one route or
//! tenant refusing every call says nothing about the token the other routes
//! accept. Dropping the shared token at each 401 made one refused route a
//! storm — a token request per IdP round trip, every healthy call waiting for
//! it. So:
//!
//! - a 401 to a token that is no longer the cached one sends again with the
//!   cached one (another call refreshed it already); a 401 while a fetch is in
//!   flight joins that fetch;
//! - a 401 whose `WWW-Authenticate` names an error that is not about the
//!   token (RFC 6750 §3.1: `invalid_request`, `insufficient_scope`) stands: a
//!   new token would be refused the same way;
//! - at most one refresh per `interval` (`api.oauth2.unauthorized_refresh_interval`,
//!   N) is caused by 401s: after each, no other before `interval × (1 + u/2)`,
//!   `u` uniform in `[0, 1)` (replicas drift apart). The quiet time is kept
//!   apart from everything else: neither a delivered call nor a token fetched
//!   for its lifetime ends it;
//! - a token younger than `interval` that a call was accepted with (answered
//!   2xx) is not dropped by a 401: the other calls refute it. (If the token
//!   really was revoked within `interval` of its issue, it is refreshed at the
//!   first 401 after it turns `interval` old.)
//! - a 401 to a token in the last fifth of its lifetime (at least its last
//!   second) is its expiry, seen a little early by an API whose clock or
//!   `exp` rounding differs from ours: the lifetime's refresh is brought
//!   forward (once per token: the new one is young), outside the quiet time.
//!
//! The token is never dropped by a 401: a refresh replaces it when the new one
//! arrives, so the calls the 401 does not concern keep sending meanwhile; the
//! refused call waits for the refresh and is sent once more with the new token.
//!
//! Over any window `W`, 401s cause at most `W / N + 1` token requests.

pub(crate) use super::challenge::{challenge, Challenge};
use std::time::{Duration, Instant};

/// `api.oauth2.unauthorized_refresh_interval`'s default.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// A token is expiring in its last fifth, and at least in its last second
/// (`exp` is in whole seconds).
const EXPIRING: Duration = Duration::from_secs(1);

/// The token source's state when a 401 comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Case {
    /// The refused request carried the cached token (not an older one, and a
    /// token is cached).
    pub used_cached: bool,
    /// A fetch is in flight.
    pub fetching: bool,
    /// When the cached token was asked for.
    pub issued: Option<Instant>,
    /// When the cached token expires (in our reckoning).
    pub expires: Option<Instant>,
    /// A call with the cached token was answered 2xx.
    pub accepted: bool,
    /// No refresh caused by a 401 before this (the last one's quiet time).
    pub quiet_until: Option<Instant>,
    /// After a failed fetch: no new fetch before this.
    pub retry_at: Option<Instant>,
    pub challenge: Challenge,
}

/// What the refused call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Another token is cached (or none, and one is fetched as for any call):
    /// send again with it.
    Resend,
    /// Wait for the fetch in flight, then send again with its token.
    Join,
    /// Refresh the token now, wait for it, and send again with the new one.
    /// `quiet_until`: no other refresh for a 401 before it; `None`: the
    /// token's own refresh, brought forward (it is expiring).
    Refresh { quiet_until: Option<Instant> },
    /// The 401 stands: the call's answer is the 401.
    Keep(Kept),
}

/// Why a 401 leaves the token as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// The challenge is about the request or the resource.
    NotTheToken,
    /// Within the quiet time of the last refresh a 401 caused.
    Quiet,
    /// The last fetch failed: its back-off runs.
    BackingOff,
    /// A token younger than the interval, accepted by other calls.
    Refuted,
}

impl Kept {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kept::NotTheToken => "not_the_token",
            Kept::Quiet => "quiet",
            Kept::BackingOff => "backing_off",
            Kept::Refuted => "refuted",
        }
    }
}

/// The quiet time after a refresh a 401 caused at `now`; `jitter` in `[0, 1)`.
pub(crate) fn quiet_until(now: Instant, interval: Duration, jitter: f64) -> Instant {
    let gap = interval.mul_f64(1.0 + 0.5 * jitter.clamp(0.0, 1.0));
    now.checked_add(gap).unwrap_or(now)
}

/// What a 401 to a call does, at `now`, with `interval` (N) and `jitter` in
/// `[0, 1)` (for the quiet time of a refresh).
pub(crate) fn step(c: &Case, now: Instant, interval: Duration, jitter: f64) -> Step {
    if !c.used_cached {
        return Step::Resend;
    }
    if c.challenge == Challenge::NotTheToken {
        return Step::Keep(Kept::NotTheToken);
    }
    if c.fetching {
        return Step::Join;
    }
    if c.retry_at.is_some_and(|r| now < r) {
        return Step::Keep(Kept::BackingOff);
    }
    if let (Some(issued), Some(expires)) = (c.issued, c.expires) {
        let last = expires
            .saturating_duration_since(issued)
            .div_f64(5.0)
            .max(EXPIRING);
        if now.checked_add(last).is_none_or(|t| t >= expires) {
            return Step::Refresh { quiet_until: None };
        }
    }
    if c.quiet_until.is_some_and(|q| now < q) {
        return Step::Keep(Kept::Quiet);
    }
    let young = c
        .issued
        .is_some_and(|at| now.saturating_duration_since(at) < interval);
    if young && c.accepted {
        return Step::Keep(Kept::Refuted);
    }
    Step::Refresh {
        quiet_until: Some(quiet_until(now, interval, jitter)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    fn case(t0: Instant) -> Case {
        Case {
            used_cached: true,
            fetching: false,
            issued: Some(t0),
            expires: Some(t0 + Duration::from_secs(3600)),
            accepted: false,
            quiet_until: None,
            retry_at: None,
            challenge: Challenge::Unknown,
        }
    }

    const N: Duration = Duration::from_secs(10);

    #[test]
    fn a_401_to_an_old_token_resends_and_one_during_a_fetch_joins_it() {
        let t0 = Instant::now();
        let old = Case {
            used_cached: false,
            ..case(t0)
        };
        assert_eq!(step(&old, t0, N, 0.0), Step::Resend);
        let fetching = Case {
            fetching: true,
            ..case(t0)
        };
        assert_eq!(step(&fetching, t0, N, 0.0), Step::Join);
    }

    #[test]
    fn one_refresh_per_interval_whatever_succeeds_meanwhile() {
        let t0 = Instant::now();
        // An old token, never refuted: the first 401 refreshes.
        let c = Case {
            issued: Some(t0),
            ..case(t0)
        };
        let now = at(t0, 60_000);
        let Step::Refresh {
            quiet_until: Some(quiet_until),
        } = step(&c, now, N, 0.5)
        else {
            panic!("the first 401 refreshes")
        };
        assert_eq!(quiet_until, now + N.mul_f64(1.25));
        // The new token is accepted by other calls, a lifetime refresh may
        // even replace it: the quiet time stands.
        for (issued, accepted) in [(now, true), (at(now, 5_000), false), (now, false)] {
            let c = Case {
                issued: Some(issued),
                expires: Some(issued + Duration::from_secs(300)),
                accepted,
                quiet_until: Some(quiet_until),
                ..case(t0)
            };
            assert_eq!(step(&c, at(now, 12_000), N, 0.0), Step::Keep(Kept::Quiet));
            // After it, a token not refuted is refreshed again.
            let after = quiet_until + Duration::from_millis(1);
            if !accepted || after.duration_since(issued) >= N {
                assert!(matches!(step(&c, after, N, 0.0), Step::Refresh { .. }));
            }
        }
    }

    #[test]
    fn a_young_token_other_calls_accept_is_kept_an_unrefuted_one_is_not() {
        let t0 = Instant::now();
        let young = Case {
            issued: Some(at(t0, 1_000)),
            accepted: true,
            ..case(t0)
        };
        assert_eq!(
            step(&young, at(t0, 5_000), N, 0.0),
            Step::Keep(Kept::Refuted)
        );
        // Once it is N old, a 401 refreshes it (revoked after all?).
        assert!(matches!(
            step(&young, at(t0, 11_000), N, 0.0),
            Step::Refresh { .. }
        ));
        // Never accepted: refreshed at once (revoked, or issued bad).
        let unrefuted = Case {
            accepted: false,
            ..young
        };
        assert!(matches!(
            step(&unrefuted, at(t0, 2_000), N, 0.0),
            Step::Refresh { .. }
        ));
        // `invalid_token` from a token others accept: still refuted while young.
        let says_invalid = Case {
            challenge: Challenge::InvalidToken,
            ..young
        };
        assert_eq!(
            step(&says_invalid, at(t0, 5_000), N, 0.0),
            Step::Keep(Kept::Refuted)
        );
    }

    #[test]
    fn a_challenge_about_the_request_or_a_failing_endpoint_keeps_the_token() {
        let t0 = Instant::now();
        let scope = Case {
            challenge: Challenge::NotTheToken,
            ..case(t0)
        };
        assert_eq!(
            step(&scope, at(t0, 60_000), N, 0.0),
            Step::Keep(Kept::NotTheToken)
        );
        let failing = Case {
            retry_at: Some(at(t0, 61_000)),
            ..case(t0)
        };
        assert_eq!(
            step(&failing, at(t0, 60_000), N, 0.0),
            Step::Keep(Kept::BackingOff)
        );
        assert!(matches!(
            step(&failing, at(t0, 61_000), N, 0.0),
            Step::Refresh { .. }
        ));
    }

    #[test]
    fn a_401_to_an_expiring_token_brings_its_refresh_forward_even_when_quiet() {
        let t0 = Instant::now();
        let quiet = Some(at(t0, 600_000));
        // Tokens of 3 s: the last second is expiring (an `exp` in whole
        // seconds can end it up to a second before our reckoning).
        let short = Case {
            expires: Some(at(t0, 3_000)),
            accepted: true,
            quiet_until: quiet,
            ..case(t0)
        };
        assert_eq!(step(&short, at(t0, 1_900), N, 0.0), Step::Keep(Kept::Quiet));
        assert_eq!(
            step(&short, at(t0, 2_000), N, 0.0),
            Step::Refresh { quiet_until: None }
        );
        // Tokens of 5 min: the last minute.
        let long = Case {
            expires: Some(at(t0, 300_000)),
            ..short
        };
        assert_eq!(
            step(&long, at(t0, 239_000), N, 0.0),
            Step::Keep(Kept::Quiet)
        );
        assert_eq!(
            step(&long, at(t0, 240_000), N, 0.0),
            Step::Refresh { quiet_until: None }
        );
        // Not while the last fetch's back-off runs.
        let failing = Case {
            retry_at: Some(at(t0, 250_000)),
            ..long
        };
        assert_eq!(
            step(&failing, at(t0, 245_000), N, 0.0),
            Step::Keep(Kept::BackingOff)
        );
    }

    proptest! {
        /// Whatever the 401s (when, with what challenge), the successes and
        /// the lifetime refreshes in between, the refreshes 401s cause are at
        /// least N apart (over a window W, at most W / N + 1), and one brought
        /// forward comes only in a token's last fifth (once per token).
        #[test]
        fn refreshes_caused_by_401s_are_at_least_n_apart(
            events in proptest::collection::vec(
                (0u64..2_000, 0u8..4, any::<bool>(), 0.0f64..1.0), 1..400),
            interval_ms in 1_000u64..30_000,
            lifetime_ms in 3_000u64..600_000,
        ) {
            let t0 = Instant::now();
            let n = Duration::from_millis(interval_ms);
            let lifetime = Duration::from_millis(lifetime_ms);
            let mut now = t0;
            let mut c = Case { issued: Some(t0), expires: Some(t0 + lifetime), ..case(t0) };
            let mut refreshes: Vec<Instant> = Vec::new();
            for (gap, kind, flag, jitter) in events {
                now += Duration::from_millis(gap);
                let renewed = |c: &mut Case| {
                    c.issued = Some(now);
                    c.expires = Some(now + lifetime);
                    c.accepted = false;
                };
                match kind {
                    // A call answered 2xx with the cached token.
                    0 => c.accepted = true,
                    // The lifetime's refresh replaced the token.
                    1 => renewed(&mut c),
                    // A 401 (with or without `invalid_token`).
                    _ => {
                        c.challenge = if flag { Challenge::InvalidToken } else { Challenge::Unknown };
                        match step(&c, now, n, jitter) {
                            Step::Refresh { quiet_until: Some(q) } => {
                                prop_assert!(q >= now + n);
                                refreshes.push(now);
                                c.quiet_until = Some(q);
                                renewed(&mut c);
                            }
                            Step::Refresh { quiet_until: None } => {
                                let left = c.expires.expect("a token").saturating_duration_since(now);
                                prop_assert!(left <= lifetime.div_f64(5.0).max(EXPIRING));
                                renewed(&mut c);
                            }
                            _ => {}
                        }
                    }
                }
            }
            for w in refreshes.windows(2) {
                prop_assert!(w[1] - w[0] >= n, "{:?} apart", w[1] - w[0]);
            }
        }
    }
}
