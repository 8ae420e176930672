//! The group-wide rate limit's arithmetic (pure: time is an input): GCRA, the
//! generic cell rate algorithm, which keeps one number per limit — the
//! theoretical arrival time (TAT) of the next permit — and grants permits in
//! batches. The Redis script (`delivery::ratelimit::ACQUIRE_LUA`) is this same
//! function, run inside Redis on Redis's clock so that every instance shares
//! one TAT; the local fallback runs it in process at the instance's share.
//!
//! Over any span of length w, the permits granted are at most
//! `burst + w × rate` (property tested below).

/// A rate and its burst, in microseconds per permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Microseconds between permits at the steady rate (T).
    pub interval_us: u64,
    /// How far ahead of now the TAT may run (τ = (burst − 1) × T): `burst`
    /// permits at once after an idle spell, never more.
    pub tolerance_us: u64,
}

/// The result of asking for up to `n` permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    pub granted: u64,
    /// When none was granted: microseconds until one can be.
    pub wait_us: u64,
    /// The TAT to store.
    pub tat_us: u64,
}

impl Gcra {
    /// `rate` permits per second (≥ 1) with `burst` at once (≥ 1).
    pub fn new(rate: f64, burst: u64) -> Gcra {
        let interval_us = (1_000_000.0 / rate.max(1e-3)).round().max(1.0) as u64;
        Gcra {
            interval_us,
            tolerance_us: interval_us * burst.max(1).saturating_sub(1),
        }
    }

    /// Up to `n` permits at `now_us`, given the stored `tat_us` (0 when there
    /// is none). `resume`: the caller was on its local fallback (Redis was
    /// unreachable), during which the group spent its own shares; no burst is
    /// granted on the way back, only the steady rate.
    pub fn take(&self, tat_us: u64, now_us: u64, n: u64, resume: bool) -> Take {
        let (t, tau) = (self.interval_us, self.tolerance_us);
        let mut tat = tat_us.max(now_us);
        if resume {
            tat = tat.max(now_us + tau);
        }
        let ahead = tat - now_us;
        if ahead > tau {
            return Take {
                granted: 0,
                wait_us: ahead - tau,
                tat_us: tat,
            };
        }
        let granted = ((tau - ahead) / t + 1).min(n.max(1));
        Take {
            granted,
            wait_us: 0,
            tat_us: tat + granted * t,
        }
    }
}

/// This instance's share of the group's rate while Redis cannot be reached:
/// the rate divided by the instances last seen alive (at least one), and the
/// burst likewise (at least one permit).
pub fn fallback_share(rate: u64, burst: u64, live: u64) -> (f64, u64) {
    let live = live.max(1);
    (rate as f64 / live as f64, (burst / live).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_after_idle_then_the_steady_rate() {
        let g = Gcra::new(100.0, 5);
        let t = g.take(0, 1_000_000, 10, false);
        assert_eq!(t.granted, 5);
        let t2 = g.take(t.tat_us, 1_000_000, 10, false);
        assert_eq!(t2.granted, 0);
        assert_eq!(t2.wait_us, 10_000);
        let t3 = g.take(t.tat_us, 1_010_000, 10, false);
        assert_eq!(t3.granted, 1);
    }

    #[test]
    fn resuming_grants_no_burst() {
        let g = Gcra::new(100.0, 5);
        let t = g.take(0, 1_000_000, 10, true);
        assert_eq!(t.granted, 1, "only the steady rate on the way back");
    }

    proptest! {
        /// Whatever the arrival pattern and batch sizes, and with some calls
        /// marked as resuming: in every window of length w, at most
        /// burst + w × rate permits are granted.
        #[test]
        fn never_more_than_burst_plus_rate(
            rate in 1u64..2_000,
            burst in 1u64..50,
            asks in proptest::collection::vec((0u64..20_000, 1u64..40, any::<bool>()), 1..300),
        ) {
            let g = Gcra::new(rate as f64, burst);
            let mut tat = 0;
            let mut now = 1_000_000u64;
            let mut grants: Vec<(u64, u64)> = vec![];
            for (dt, n, resume) in asks {
                now += dt;
                let t = g.take(tat, now, n, resume);
                tat = t.tat_us;
                if t.granted > 0 {
                    grants.push((now, t.granted));
                }
                prop_assert!(t.granted <= n);
            }
            for w_us in [1_000u64, 50_000, 1_000_000] {
                for (i, &(start, _)) in grants.iter().enumerate() {
                    let in_window: u64 = grants[i..]
                        .iter()
                        .take_while(|(at, _)| *at < start + w_us)
                        .map(|(_, k)| k)
                        .sum();
                    let bound = burst as f64 + w_us as f64 * rate as f64 / 1e6 + 1.0;
                    prop_assert!(in_window as f64 <= bound, "{in_window} in {w_us} µs (bound {bound})");
                }
            }
        }
    }

    #[test]
    fn fallback_shares() {
        assert_eq!(fallback_share(500, 10, 3), (500.0 / 3.0, 3));
        assert_eq!(fallback_share(500, 1, 3), (500.0 / 3.0, 1));
        assert_eq!(fallback_share(500, 10, 0), (500.0, 10));
    }
}
