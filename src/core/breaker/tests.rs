//! What the parts' tests share (a small config, durations, an opened
//! breaker) and the proptest over the whole breaker's methods at random.

use super::*;
use proptest::prelude::*;
use std::time::{Duration, Instant};

pub(super) fn cfg() -> BreakerConfig {
    BreakerConfig {
        window: Duration::from_secs(10),
        min_calls: 4,
        failure_rate: 0.5,
        open_for: Duration::from_secs(5),
        half_open_probes: 2,
        consecutive_failures: 0,
    }
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A breaker tripped open at `t0` by the failure rate.
pub(super) fn opened(t0: Instant) -> Breaker {
    let mut b = Breaker::new(cfg());
    for _ in 0..3 {
        assert_eq!(b.record(t0, false), None);
    }
    let t = b.record(t0, false).expect("opens on the 4th failure");
    assert_eq!(t.reason, TransitionReason::FailureRate);
    b
}

#[derive(Debug, Clone)]
enum Op {
    Wait(u64),
    Allow,
    Record(bool),
    Trip,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..3_000).prop_map(Op::Wait),
        4 => Just(Op::Allow),
        4 => any::<bool>().prop_map(Op::Record),
        1 => Just(Op::Trip),
    ]
}

proptest! {
    /// Never more than `half_open_probes` admissions in one half-open period,
    /// none while open, and `admits_traffic` agrees with `allow`.
    #[test]
    fn probes_are_bounded_and_open_admits_nothing(
        ops in proptest::collection::vec(op(), 1..300),
        probes in 1u32..5,
        min_calls in 1u32..6,
    ) {
        let cfg = BreakerConfig {
            window: secs(4),
            min_calls,
            failure_rate: 0.5,
            open_for: secs(2),
            half_open_probes: probes,
            consecutive_failures: 0,
        };
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = Breaker::new(cfg);
        let mut admitted_in_period = 0u32;
        let mut epoch = b.epoch();
        for op in ops {
            let mut transition = None;
            match op {
                Op::Wait(d) => now += ms(d),
                Op::Allow => {
                    let before = b.state(now);
                    let peek = b.admits_traffic(now);
                    let ok = b.allow(now);
                    prop_assert_eq!(ok, peek);
                    if before == BreakerStateKind::Open {
                        prop_assert!(!ok, "admitted while open");
                    }
                    if b.epoch() != epoch {
                        // Slots freed by time, or a new period.
                        epoch = b.epoch();
                        admitted_in_period = 0;
                    }
                    if ok && b.state(now) == BreakerStateKind::HalfOpen {
                        admitted_in_period += 1;
                        prop_assert!(admitted_in_period <= probes);
                    }
                }
                Op::Record(ok) => transition = b.record(now, ok),
                Op::Trip => transition = b.trip(now, "test"),
            }
            if let Some(t) = transition {
                prop_assert_ne!(t.from, t.to);
            }
            if b.epoch() != epoch {
                epoch = b.epoch();
                admitted_in_period = 0;
            }
            prop_assert_eq!(b.is_open(now), b.state(now) == BreakerStateKind::Open);
            if b.is_open(now) {
                prop_assert!(!b.admits_traffic(now));
            }
        }
    }
}
