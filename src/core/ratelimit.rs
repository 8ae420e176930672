//! The group-wide rate limit's arithmetic (pure: time is an input): GCRA, the
//! generic cell rate algorithm, which keeps one number per limit — the
//! theoretical arrival time (TAT) of the next permit — and grants permits in
//! batches. The Redis script (`delivery::ratelimit::ACQUIRE_LUA`) is this same
//! function, run inside Redis on Redis's clock so that every instance shares
//! one TAT; the local fallback runs it in process at the instance's share.
//!
//! Over any span of length w, the permits granted are at most
//! `burst + w × rate` (property tested below).

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

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

/// This instance's main partitions and the topic's, as the consumer actor
/// last saw them: a handle it updates on every assignment and revocation,
/// and the rate limiter reads when it falls back (no I/O: two numbers).
#[derive(Debug, Default)]
pub struct Assignment {
    assigned: AtomicU32,
    total: AtomicU32,
}

impl Assignment {
    pub fn set_total(&self, total: usize) {
        self.total
            .store(u32::try_from(total).unwrap_or(u32::MAX), Relaxed);
    }

    pub fn set_assigned(&self, assigned: usize) {
        self.assigned
            .store(u32::try_from(assigned).unwrap_or(u32::MAX), Relaxed);
    }

    /// `(assigned, total)`; total 0 until the consumer has started.
    pub fn get(&self) -> (u32, u32) {
        (self.assigned.load(Relaxed), self.total.load(Relaxed))
    }
}

/// What an instance on its local fallback knows about how many share the
/// group's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareBasis {
    /// The instances Redis last counted alive (this one included).
    Live(u64),
    /// Redis never answered: this instance's main partitions of the topic's.
    /// The consumer group already divides the work by partitions, so the
    /// shares of all members add up to the whole rate (without Redis, this is
    /// the only count of the group an instance has).
    Partitions { assigned: u32, total: u32 },
}

impl ShareBasis {
    /// The basis for an instance that has (`live: Some`) or has not reached
    /// Redis, holding `assigned` of the topic's `total` partitions (`total`
    /// 0: not known yet).
    pub fn of(live: Option<u64>, assigned: u32, total: u32) -> ShareBasis {
        match live {
            Some(n) => ShareBasis::Live(n),
            None => ShareBasis::Partitions { assigned, total },
        }
    }

    /// The fraction of the group's rate that is this instance's, in `0..=1`.
    /// Partitions not known yet (`total` 0): the whole rate, as a lone
    /// instance; none assigned: nothing (no partition, no call; a floor of
    /// one permit a second in [`fallback_share`] keeps it from stalling).
    pub fn fraction(self) -> f64 {
        match self {
            ShareBasis::Live(n) => 1.0 / n.max(1) as f64,
            ShareBasis::Partitions { total: 0, .. } => 1.0,
            ShareBasis::Partitions { assigned, total } => {
                f64::from(assigned.min(total)) / f64::from(total)
            }
        }
    }
}

/// This instance's share of the group's rate while Redis cannot be reached:
/// the rate times its [`ShareBasis::fraction`] (at least one permit a
/// second), and the burst likewise (at least one permit).
pub fn fallback_share(rate: u64, burst: u64, basis: ShareBasis) -> (f64, u64) {
    let f = basis.fraction();
    let share = (rate as f64 * f).max(1.0_f64.min(rate as f64));
    let burst = ((burst as f64 * f).floor() as u64).max(1);
    (share, burst)
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

    /// The case proptest found: a rate below one per member is floored at 1/s
    /// for each (never a stall), so the shares may add up to more than the rate.
    #[test]
    fn a_rate_below_one_per_member_is_floored_per_member() {
        let share = |assigned| fallback_share(1, 10, ShareBasis::of(None, assigned, 8)).0;
        assert_eq!(share(1), 1.0);
        assert_eq!(share(7), 1.0);
    }

    #[test]
    fn fallback_shares() {
        let live = |n| ShareBasis::Live(n);
        assert_eq!(fallback_share(500, 10, live(3)), (500.0 / 3.0, 3));
        assert_eq!(fallback_share(500, 1, live(3)), (500.0 / 3.0, 1));
        assert_eq!(fallback_share(500, 10, live(0)), (500.0, 10));
    }

    /// An instance that never reached Redis does not take the whole rate: its
    /// share is its part of the topic's partitions (before, it was the whole
    /// rate whatever it held: two such instances sent twice the limit).
    #[test]
    fn without_redis_the_share_follows_the_partitions() {
        let never = |assigned, total| ShareBasis::of(None, assigned, total);
        assert_eq!(fallback_share(600, 12, never(4, 12)), (200.0, 4));
        assert_eq!(fallback_share(600, 12, never(12, 12)), (600.0, 12));
        // Not known yet: a lone instance's whole rate.
        assert_eq!(fallback_share(600, 12, never(0, 0)), (600.0, 12));
        // No partition: the floor, never a stall.
        assert_eq!(fallback_share(600, 12, never(0, 12)), (1.0, 1));
        // Once Redis has counted the live instances, that count rules.
        assert_eq!(
            fallback_share(600, 12, ShareBasis::of(Some(2), 4, 12)),
            (300.0, 6)
        );
    }

    proptest! {
        /// However the partitions are spread over the members, their shares
        /// add up to at most the rate, plus at most 1/s for each member whose
        /// part is under the floor (`min(1, rate)`/s: never a stall) — members
        /// with no partition, or with a part of a rate below 1/s per member
        /// (rate = 1, 8 partitions split 1 + 7: two members at the floor, 2/s).
        #[test]
        fn partition_shares_add_up_to_the_rate(
            rate in 1u64..5_000,
            total in 1u32..64,
            cuts in proptest::collection::vec(0u32..64, 0..8),
        ) {
            let mut cuts: Vec<u32> = cuts.into_iter().map(|c| c % (total + 1)).collect();
            cuts.push(0);
            cuts.push(total);
            cuts.sort_unstable();
            let mut sum = 0.0;
            let mut floored = 0.0;
            for w in cuts.windows(2) {
                let assigned = w[1] - w[0];
                let (share, _) = fallback_share(rate, 10, ShareBasis::of(None, assigned, total));
                sum += share;
                if (rate as f64) * f64::from(assigned) / f64::from(total) < 1.0 {
                    floored += 1.0;
                }
            }
            prop_assert!(sum <= rate as f64 + floored + 1e-6, "{sum} > {rate} + {floored}");
        }
    }
}
