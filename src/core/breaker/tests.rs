//! The breaker's and the gate's tests: the state machine as a whole.

use super::*;
use std::time::{Duration, Instant};

#[test]
fn a_systemic_answer_is_suspected_then_confirmed_or_refuted_by_the_probes() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    // Closed: half-open at once with the reason, no `open_for` pause.
    let t = b.systemic(t0, "http_403", false).expect("suspected");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            BreakerStateKind::Closed,
            BreakerStateKind::HalfOpen,
            TransitionReason::Forced("http_403")
        )
    );
    assert!(!b.is_open(t0), "a suspicion pauses no partition");
    // A straggler's systemic answer changes nothing.
    assert_eq!(b.systemic(t0, "http_403", true), None);
    // Optimistic: every fresh call goes (the others' calls test it); one
    // refused (another refused event), one delivered: refuted, closed.
    assert!(b.admits_traffic(t0));
    assert!((0..100).all(|_| b.allow(t0)), "no fresh call waits");
    assert_eq!(b.systemic(t0, "http_403", false), None);
    assert_eq!(
        b.record(t0, true).map(|t| t.reason),
        Some(TransitionReason::Refuted)
    );
    assert_eq!(b.state(t0), BreakerStateKind::Closed);
    // Suspected again, and every fresh call is refused: the optimism ends
    // at `half_open_probes` refusals, then the probe slots count (a
    // refused slot goes to the next waiter); confirmed (open with the
    // reason) once the period is `open_for` old.
    b.systemic(t0, "http_401", false).expect("suspected");
    assert!(b.allow(t0) && b.allow(t0) && b.allow(t0));
    assert_eq!(b.systemic(t0, "http_401", false), None, "one refusal");
    assert!(b.allow(t0), "still optimistic");
    assert_eq!(b.systemic(t0, "http_401", false), None, "two: cautious");
    assert!(b.allow(t0) && b.allow(t0));
    assert!(!b.allow(t0), "two probes");
    assert_eq!(b.systemic(t0, "http_401", false), None);
    assert!(b.allow(t0), "the refused probe's slot is free again");
    assert_eq!(
        b.systemic(t0, "http_401", false),
        None,
        "refused, but the period is young: others may still refute it"
    );
    let t0 = t0 + secs(5);
    assert!(b.allow(t0));
    let t = b.systemic(t0, "http_401", false).expect("confirmed");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            BreakerStateKind::HalfOpen,
            BreakerStateKind::Open,
            TransitionReason::Forced("http_401")
        )
    );
    assert!(b.is_open(t0 + ms(4_999)));
    // Open: a systemic answer extends it.
    assert_eq!(b.systemic(t0 + secs(3), "http_401", false), None);
    assert!(b.is_open(t0 + ms(7_999)));
    // The next half-open period is not a suspicion: a refused probe is
    // `probe_failed`, as for any failed probe.
    let later = t0 + secs(9);
    assert!(b.allow(later));
    let t = b.systemic(later, "http_401", false).expect("reopened");
    assert_eq!(t.reason, TransitionReason::ProbeFailed);
}

#[test]
fn an_optimistic_suspicion_lapses_into_probes() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    b.systemic(t0, "http_403", false).expect("suspected");
    assert!((0..10).all(|_| b.allow(t0 + ms(4_999))));
    // Nothing refuted it for `open_for`: the probes decide, as after any
    // open interval, but a delivered one still refutes it.
    let later = t0 + secs(5);
    assert!(b.allow(later) && b.allow(later));
    assert!(!b.allow(later), "two probes");
    assert!(!b.admits_traffic(later));
    assert_eq!(
        b.record(later, true).map(|t| t.reason),
        Some(TransitionReason::Refuted)
    );
}

#[test]
fn suspects_keep_a_slot_for_a_fresh_event_and_their_refusals_are_neutral() {
    let t0 = Instant::now();
    let mut c = cfg();
    c.half_open_probes = 3;
    let mut b = Breaker::new(c);
    b.systemic(t0, "http_403", false).expect("suspected");
    // Suspects take two of the three slots; the third is kept.
    assert!(b.allow_suspect(t0) && b.allow_suspect(t0));
    assert!(!b.allow_suspect(t0), "one slot is kept for a fresh event");
    // Their refusals repeat what was known: no verdict.
    assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
    assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
    assert_eq!(b.state(t0), BreakerStateKind::HalfOpen);
    // A fresh event probes and is delivered: refuted.
    assert!(b.allow(t0));
    assert_eq!(
        b.record(t0, true).map(|t| t.reason),
        Some(TransitionReason::Refuted)
    );
    // Suspected again with only suspects waiting: once the period is
    // `open_for` old they take the last slot too, and the period ends
    // (confirmed: nothing was delivered).
    b.systemic(t0, "http_403", false).expect("suspected");
    assert!(b.allow_suspect(t0) && b.allow_suspect(t0));
    assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
    assert_eq!(b.systemic_repeat(t0, "http_403", false), None);
    let later = t0 + secs(5);
    assert!(b.allow_suspect(later), "the kept slot lapses");
    let t = b
        .systemic_repeat(later, "http_403", false)
        .expect("confirmed");
    assert_eq!(
        (t.to, t.reason),
        (BreakerStateKind::Open, TransitionReason::Forced("http_403"))
    );
}

#[test]
fn probes_rotate_over_the_waiters() {
    let t0 = Instant::now();
    let mut c = cfg();
    c.half_open_probes = 1;
    let mut b = Breaker::new(c);
    let mut q = GateQueue::default();
    // Event A (partition 0, key a) was refused: the breaker suspects, A waits.
    b.systemic(t0, "http_403", false);
    let a = q.join(false);
    // B (partition 1) and C (partition 0, key c) arrive and wait behind A.
    let bb = q.join(false);
    let cc = q.join(false);
    assert!(!q.admit_newcomer(false, &mut b, t0), "a newcomer queues");
    assert!(!q.admit(bb, &mut b, t0), "not B's turn");
    assert!(q.admit(a, &mut b, t0), "A probes");
    // A is refused again (a probe's systemic answer): open; A comes back
    // behind B and C.
    b.systemic(t0, "http_403", false);
    let a2 = q.join(false);
    let t1 = t0 + secs(5);
    assert!(!q.admit(a2, &mut b, t1), "A just probed and failed");
    assert!(!q.admit(cc, &mut b, t1), "C after B");
    assert!(q.admit(bb, &mut b, t1), "B's turn");
    // B's probe succeeds: closed, everyone is admitted at once.
    assert_eq!(
        b.record(t1, true).map(|t| t.to),
        Some(BreakerStateKind::Closed)
    );
    assert!(q.admit(a2, &mut b, t1));
    assert!(q.admit(cc, &mut b, t1));
    assert!(q.is_empty());
    assert!(q.admit_newcomer(false, &mut b, t1));
}

/// A model of one instance's gate: `tenant` events the API refuses
/// (each on its own key, all at the gate at once, as a burst), and a
/// stream of other events, `others_ok`: delivered or refused too (an API
/// that refuses everything). Each step (10 ms) some other events arrive;
/// every waiter asks for admission in a random order; the admitted calls
/// are numbered and answered in a random order, through
/// `core::systemic` as the shell does (`judge`, `EventHypothesis`).
/// Returns (tenant events demoted, steps until the last was, others
/// delivered, whether the breaker was ever closed after the first
/// refusal, final state).
fn simulate(
    tenant: usize,
    others_ok: bool,
    order: &[u8],
    steps: usize,
    budget: u32,
) -> (usize, usize, usize, bool, BreakerStateKind) {
    use crate::core::systemic::{judge, EventHypothesis, Judgement, SystemicStep};
    let mut c = cfg();
    c.half_open_probes = 3;
    c.open_for = ms(1_500);
    let mut b = Breaker::new(c);
    let mut q = GateQueue::default();
    // (ticket, is_tenant, hypothesis)
    let mut waiting: Vec<(u64, bool, EventHypothesis)> = (0..tenant)
        .map(|_| (q.join(false), true, EventHypothesis::default()))
        .collect();
    let (mut seq, mut last_success, mut half_open_from) = (0u64, 0u64, None::<u64>);
    let (mut demoted, mut last_demoted, mut delivered) = (0, 0, 0);
    let mut closed_after_refusal = false;
    let mut refused_once = false;
    let t0 = Instant::now();
    let mut r = order.iter().cycle();
    for step in 0..steps {
        let now = t0 + ms(10 * step as u64);
        let before = b.state(now);
        if b.advance(now).is_some() {
            half_open_from = Some(seq);
        }
        for _ in 0..(1 + *r.next().unwrap_or(&0) % 2) {
            waiting.push((q.join(false), false, EventHypothesis::default()));
        }
        // Every waiter asks, in a random rotation.
        let k = usize::from(*r.next().unwrap_or(&0)) % waiting.len().max(1);
        waiting.rotate_left(k);
        let mut calls = Vec::new();
        let mut still = Vec::new();
        for (t, tenant, h) in waiting.drain(..) {
            if q.admit(t, &mut b, now) {
                seq += 1;
                calls.push((seq, tenant, h));
            } else {
                still.push((t, tenant, h));
            }
        }
        waiting = still;
        if calls.len() > 1 {
            let k = usize::from(*r.next().unwrap_or(&0)) % calls.len();
            calls.rotate_left(k);
        }
        for (s, tenant, mut h) in calls {
            let t = if !tenant && others_ok {
                delivered += 1;
                last_success = last_success.max(s);
                b.record(now, true)
            } else {
                refused_once = true;
                let suspect = h.suspect();
                match h.answered(s, last_success, budget) {
                    SystemicStep::Wait => {
                        let from = (b.state(now) == BreakerStateKind::HalfOpen)
                            .then_some(half_open_from)
                            .flatten();
                        let t = match judge(s, last_success, from) {
                            Judgement::Refuted => b.record(now, true),
                            Judgement::Straggler => None,
                            Judgement::Evidence if suspect => {
                                b.systemic_repeat(now, "http_403", false)
                            }
                            Judgement::Evidence => b.systemic(now, "http_403", false),
                        };
                        let ticket = q.join(true);
                        waiting.push((ticket, tenant, h));
                        t
                    }
                    SystemicStep::Retry { .. } => {
                        let ticket = q.join(true);
                        waiting.push((ticket, tenant, h));
                        b.record(now, true)
                    }
                    SystemicStep::Demote { .. } => {
                        demoted += 1;
                        last_demoted = step;
                        b.record(now, true)
                    }
                }
            };
            if let Some(t) = t {
                if t.to == BreakerStateKind::HalfOpen {
                    half_open_from = Some(seq);
                }
            }
        }
        if refused_once
            && before != BreakerStateKind::Closed
            && b.state(now) == BreakerStateKind::Closed
        {
            closed_after_refusal = true;
        }
    }
    let end = t0 + ms(10 * steps as u64);
    (
        demoted,
        last_demoted,
        delivered,
        closed_after_refusal,
        b.state(end),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// One tenant's refused burst among other events that are delivered:
    /// whatever the order of arrivals, admissions and answers, every one
    /// of its events is demoted (the others' deliveries refute it) within
    /// a bounded time, the others flow, and the breaker ends closed.
    #[test]
    fn a_refused_tenant_is_demoted_while_the_others_flow(
        tenant in 1usize..20,
        order in proptest::collection::vec(any::<u8>(), 1..64),
        budget in 1u32..4,
    ) {
        let (demoted, last, delivered, _, state) = simulate(tenant, true, &order, 1_000, budget);
        prop_assert_eq!(demoted, tenant);
        prop_assert!(last < 600, "demoted by step {last} (6 s)");
        prop_assert!(delivered > 0);
        prop_assert_eq!(state, BreakerStateKind::Closed);
    }

    /// An API that refuses every call: nothing is ever demoted, nothing
    /// delivered, and the breaker never closes (the group pauses; the
    /// events wait).
    #[test]
    fn refusing_everything_demotes_nothing_and_never_closes(
        tenant in 1usize..20,
        order in proptest::collection::vec(any::<u8>(), 1..64),
        budget in 1u32..4,
    ) {
        let (demoted, _, delivered, closed, state) = simulate(tenant, false, &order, 1_000, budget);
        prop_assert_eq!(demoted, 0);
        prop_assert_eq!(delivered, 0);
        prop_assert!(!closed);
        prop_assert_ne!(state, BreakerStateKind::Closed);
    }
}

proptest! {
    /// However waiters come, leave and are refused, a waiter that keeps
    /// waiting is admitted before anyone who joined after it, and after at
    /// most as many half-open admissions as there were waiters ahead of it.
    #[test]
    fn no_waiter_is_passed_over(
        ops in proptest::collection::vec(0u8..4, 1..200),
    ) {
        let t0 = Instant::now();
        let mut c = cfg();
        c.half_open_probes = 1;
        c.open_for = Duration::ZERO;
        let mut b = Breaker::new(c);
        b.systemic(t0, "http_403", false);
        let mut q = GateQueue::default();
        let mut waiting: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                0 | 1 => waiting.push(q.join(false)),
                2 if !waiting.is_empty() => {
                    // The longest waiting leaves without being admitted.
                    let t = waiting.remove(0);
                    q.leave(t);
                }
                _ => {
                    // Every waiter asks, youngest first; exactly the oldest gets it.
                    let mut admitted = None;
                    for &t in waiting.iter().rev() {
                        if q.admit(t, &mut b, t0) {
                            prop_assert!(admitted.is_none());
                            admitted = Some(t);
                        }
                    }
                    if let Some(t) = admitted {
                        prop_assert_eq!(Some(&t), waiting.first());
                        waiting.remove(0);
                        // Its probe is refused: back to the end.
                        b.systemic(t0, "http_403", false);
                        waiting.push(q.join(false));
                    }
                }
            }
            prop_assert_eq!(q.len(), waiting.len());
        }
    }
}

#[test]
fn a_run_of_failures_opens_despite_a_window_full_of_successes() {
    let t0 = Instant::now();
    let cfg = BreakerConfig {
        consecutive_failures: 5,
        ..BreakerConfig::default()
    };
    let mut b = Breaker::new(cfg);
    for i in 0..1000 {
        assert_eq!(b.record(t0 + Duration::from_millis(i), true), None);
    }
    for i in 0..4 {
        assert_eq!(b.record(t0 + Duration::from_millis(1000 + i), false), None);
    }
    // A success in between resets the run.
    assert_eq!(b.record(t0 + Duration::from_millis(1004), true), None);
    for i in 0..4 {
        assert_eq!(b.record(t0 + Duration::from_millis(1005 + i), false), None);
    }
    let t = b.record(t0 + Duration::from_millis(1010), false).unwrap();
    assert_eq!(t.to, BreakerStateKind::Open);
    assert_eq!(t.reason, TransitionReason::ConsecutiveFailures);
    assert!(b.is_open(t0 + Duration::from_millis(1011)));
}
use proptest::prelude::*;

fn cfg() -> BreakerConfig {
    BreakerConfig {
        window: Duration::from_secs(10),
        min_calls: 4,
        failure_rate: 0.5,
        open_for: Duration::from_secs(5),
        half_open_probes: 2,
        consecutive_failures: 0,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A breaker tripped open at `t0` by the failure rate.
fn opened(t0: Instant) -> Breaker {
    let mut b = Breaker::new(cfg());
    for _ in 0..3 {
        assert_eq!(b.record(t0, false), None);
    }
    let t = b.record(t0, false).expect("opens on the 4th failure");
    assert_eq!(t.reason, TransitionReason::FailureRate);
    b
}

#[test]
fn default_config_is_valid() {
    let d = BreakerConfig::default();
    assert_eq!(d.validate(), Ok(()));
    assert_eq!(d.window, secs(10));
    assert_eq!(d.min_calls, 20);
    assert_eq!(d.half_open_probes, 3);
}

#[test]
fn validate_refuses_degenerate_configs() {
    let bad = |f: fn(&mut BreakerConfig)| {
        let mut c = cfg();
        f(&mut c);
        c.validate().unwrap_err()
    };
    assert_eq!(
        bad(|c| c.window = Duration::ZERO),
        BreakerConfigError::ZeroWindow
    );
    assert_eq!(bad(|c| c.min_calls = 0), BreakerConfigError::ZeroMinCalls);
    assert_eq!(
        bad(|c| c.failure_rate = 0.0),
        BreakerConfigError::FailureRate(0.0)
    );
    assert_eq!(
        bad(|c| c.failure_rate = 1.5),
        BreakerConfigError::FailureRate(1.5)
    );
    assert!(matches!(
        bad(|c| c.failure_rate = f64::NAN),
        BreakerConfigError::FailureRate(_)
    ));
    assert_eq!(
        bad(|c| c.half_open_probes = 0),
        BreakerConfigError::ZeroProbes
    );
    let mut ok = cfg();
    ok.failure_rate = 1.0;
    assert_eq!(ok.validate(), Ok(()));
}

#[test]
fn closed_admits_everything() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    for i in 0..100 {
        assert!(b.allow(t0 + ms(i)));
        assert_eq!(b.record(t0 + ms(i), true), None);
    }
    assert_eq!(b.state(t0), BreakerStateKind::Closed);
    assert!(!b.is_open(t0));
    assert!(b.admits_traffic(t0));
}

#[test]
fn opens_by_rate_only_after_min_calls() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    // 3 failures: 100 % but below min_calls.
    for _ in 0..3 {
        assert_eq!(b.record(t0, false), None);
    }
    assert_eq!(b.state(t0), BreakerStateKind::Closed);
    // 4th call, 4/4 failed: open.
    let t = b.record(t0 + ms(1), false).unwrap();
    assert_eq!(
        t,
        Transition {
            from: BreakerStateKind::Closed,
            to: BreakerStateKind::Open,
            reason: TransitionReason::FailureRate,
        }
    );
    assert!(b.is_open(t0 + ms(1)));
    assert_eq!(
        b.raw_state(),
        BreakerState::Open {
            until: t0 + ms(1) + secs(5)
        }
    );
}

#[test]
fn below_the_rate_stays_closed_and_the_rate_is_inclusive() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    // 1 of 4 failed (25 %), then 2 of 5 (40 %): closed.
    for ok in [true, true, true, false, false] {
        assert_eq!(b.record(t0, ok), None);
    }
    assert_eq!(b.state(t0), BreakerStateKind::Closed);
    // 3 of 6 = 50 %: the threshold itself opens.
    assert_eq!(
        b.record(t0, false).map(|t| t.to),
        Some(BreakerStateKind::Open)
    );
}

#[test]
fn old_failures_expire_from_the_window() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    for _ in 0..3 {
        b.record(t0, false);
    }
    // 10 s later the three failures are out of the window: one more failure is
    // 1 call, below min_calls, so no verdict.
    assert_eq!(b.record(t0 + secs(10), false), None);
    assert_eq!(b.record(t0 + secs(10), false), None);
    assert_eq!(b.record(t0 + secs(10), false), None);
    assert_eq!(b.state(t0 + secs(10)), BreakerStateKind::Closed);
    // Within the window they still count: 4 failures → open.
    assert!(b.record(t0 + secs(11), false).is_some());
}

#[test]
fn outcomes_inside_the_window_are_kept() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    for i in 0..3 {
        b.record(t0 + secs(i), false);
    }
    // 8.9 s after the first failure: all still in the window.
    assert!(b.record(t0 + ms(8_900), false).is_some());
}

#[test]
fn an_outcome_stamped_before_the_window_is_ignored() {
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg());
    b.record(t0 + secs(30), true);
    // Stamped 30 s earlier than what was already seen: outside the window.
    for _ in 0..10 {
        assert_eq!(b.record(t0, false), None);
    }
    assert_eq!(b.window.totals(t0 + secs(30)), (1, 0));
    // Slightly late outcomes still count (two: a third would open it).
    for _ in 0..2 {
        assert_eq!(b.record(t0 + secs(29), false), None);
    }
    assert_eq!(b.window.totals(t0 + secs(30)), (3, 2));
}

#[test]
fn open_rejects_until_the_interval_elapses() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    for off in [0, 1, 1_000, 4_999] {
        assert!(b.is_open(t0 + ms(off)));
        assert!(!b.admits_traffic(t0 + ms(off)));
        assert!(!b.allow(t0 + ms(off)), "offset {off}");
    }
    // Late outcomes while open change nothing.
    assert_eq!(b.record(t0 + ms(100), true), None);
    assert_eq!(b.record(t0 + ms(100), false), None);
    assert_eq!(b.state(t0 + ms(4_999)), BreakerStateKind::Open);
    // At `until`: reported half-open before anything mutates it.
    assert_eq!(b.state(t0 + secs(5)), BreakerStateKind::HalfOpen);
    assert!(!b.is_open(t0 + secs(5)));
    assert!(b.admits_traffic(t0 + secs(5)));
}

#[test]
fn advance_reports_open_to_half_open_once() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    assert_eq!(b.advance(t0 + ms(4_999)), None);
    assert_eq!(
        b.advance(t0 + secs(5)),
        Some(Transition {
            from: BreakerStateKind::Open,
            to: BreakerStateKind::HalfOpen,
            reason: TransitionReason::OpenElapsed,
        })
    );
    assert_eq!(b.advance(t0 + secs(6)), None);
    assert_eq!(
        b.raw_state(),
        BreakerState::HalfOpen {
            admitted: 0,
            succeeded: 0
        }
    );
}

#[test]
fn half_open_admits_exactly_the_probes() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    let t = t0 + secs(5);
    assert!(b.allow(t));
    assert!(b.admits_traffic(t));
    assert!(b.allow(t));
    assert!(!b.admits_traffic(t));
    for i in 0..5 {
        assert!(!b.allow(t + secs(i)), "third call refused");
    }
    assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
    assert!(!b.is_open(t), "half-open is not 'unavailable'");
    // No answer for `open_for`: the period ends by time as an optimistic
    // one does; the unanswered slots go to the next calls.
    let later = t + secs(5);
    assert!(b.admits_traffic(later));
    assert!(b.allow(later));
    assert!(b.allow(later));
    assert!(!b.allow(later), "two fresh probes");
    assert!(b.record(later, true).is_none());
    assert_eq!(
        b.record(later, true).map(|t| t.to),
        Some(BreakerStateKind::Closed)
    );
}

#[test]
fn a_released_probe_frees_its_slot_once_and_only_in_its_epoch() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    let t = t0 + secs(5);
    assert!(b.allow(t));
    let epoch = b.epoch();
    assert!(b.allow(t));
    assert!(!b.allow(t));
    b.release(epoch, false);
    assert!(b.allow(t), "the released slot is taken again");
    assert!(!b.allow(t));
    // Heard: a probe delivered, the other released — its slot only.
    assert!(b.record(t, true).is_none());
    b.release(epoch, false);
    b.release(epoch, false);
    assert!(b.allow(t), "one slot free again");
    assert!(!b.allow(t), "the delivered probe's slot stays settled");
    // The last probe answered: closed; a release of the old epoch
    // changes nothing.
    assert_eq!(
        b.record(t, true).map(|t| t.to),
        Some(BreakerStateKind::Closed)
    );
    b.release(epoch, false);
    assert_eq!(b.state(t), BreakerStateKind::Closed);
    // A release after the period ended by a reopening frees nothing of
    // the next period.
    let mut b = opened(t0);
    assert!(b.allow(t));
    let old = b.epoch();
    assert!(b.record(t, false).is_some(), "the probe failed: open");
    let t2 = t + secs(5);
    assert!(b.allow(t2));
    assert!(b.allow(t2));
    assert!(!b.allow(t2));
    b.release(old, false);
    assert!(!b.allow(t2), "an old epoch's release frees no new slot");
}

#[test]
fn half_open_closes_when_every_probe_succeeds() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    let t = t0 + secs(5);
    assert!(b.allow(t));
    assert!(b.allow(t));
    assert_eq!(b.record(t, true), None, "one of two probes is not enough");
    assert!(!b.allow(t), "the settled probe does not free a slot");
    assert_eq!(
        b.record(t, true),
        Some(Transition {
            from: BreakerStateKind::HalfOpen,
            to: BreakerStateKind::Closed,
            reason: TransitionReason::ProbesSucceeded,
        })
    );
    assert_eq!(b.state(t), BreakerStateKind::Closed);
    assert!(b.allow(t));
    // The window was cleared: the failures that opened it are gone.
    assert_eq!(b.window.totals(t), (0, 0));
    for _ in 0..3 {
        assert_eq!(b.record(t, false), None);
    }
}

#[test]
fn half_open_reopens_on_a_failed_probe() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    let t = t0 + secs(5);
    assert!(b.allow(t));
    assert!(b.allow(t));
    assert_eq!(b.record(t, true), None);
    assert_eq!(
        b.record(t + ms(10), false),
        Some(Transition {
            from: BreakerStateKind::HalfOpen,
            to: BreakerStateKind::Open,
            reason: TransitionReason::ProbeFailed,
        })
    );
    assert!(b.is_open(t + ms(10)));
    assert!(!b.allow(t + ms(10) + ms(4_999)));
    // A new half-open period with fresh probe slots.
    assert!(b.allow(t + ms(10) + secs(5)));
    assert!(b.allow(t + ms(10) + secs(5)));
    assert!(!b.allow(t + ms(10) + secs(5)));
}

#[test]
fn half_open_ignores_outcomes_without_a_waiting_probe() {
    let t0 = Instant::now();
    let mut b = opened(t0);
    let t = t0 + secs(5);
    b.advance(t);
    // Stragglers from before the trip, no probe admitted yet.
    assert_eq!(b.record(t, false), None);
    assert_eq!(b.record(t, true), None);
    assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
    assert!(b.allow(t));
    assert_eq!(b.record(t, true), None);
    // One probe admitted, one reported: a further outcome is not a probe's.
    assert_eq!(b.record(t, false), None);
    assert_eq!(b.state(t), BreakerStateKind::HalfOpen);
}

#[test]
fn trip_forces_open_from_every_state() {
    let t0 = Instant::now();
    // Closed.
    let mut b = Breaker::new(cfg());
    assert_eq!(
        b.trip(t0, "systemic"),
        Some(Transition {
            from: BreakerStateKind::Closed,
            to: BreakerStateKind::Open,
            reason: TransitionReason::Forced("systemic"),
        })
    );
    assert!(b.is_open(t0));
    assert!(!b.allow(t0 + ms(4_999)));
    // HalfOpen (with probes in flight).
    let mut b = opened(t0);
    assert!(b.allow(t0 + secs(5)));
    let t = b.trip(t0 + secs(6), "dlq_flood").unwrap();
    assert_eq!(t.from, BreakerStateKind::HalfOpen);
    assert_eq!(t.reason.as_str(), "dlq_flood");
    assert!(b.is_open(t0 + secs(10)));
    assert!(!b.is_open(t0 + secs(11)));
    // Lazily half-open (Open past `until`, not yet advanced).
    let mut b = opened(t0);
    let t = b.trip(t0 + secs(7), "systemic").unwrap();
    assert_eq!(t.from, BreakerStateKind::HalfOpen);
    assert!(b.is_open(t0 + secs(11)));
    // Open: extended, not reported.
    let mut b = opened(t0);
    assert_eq!(b.trip(t0 + secs(3), "systemic"), None);
    assert!(b.is_open(t0 + secs(7)));
    assert!(!b.is_open(t0 + secs(8)));
    // ... and never shortened.
    let mut c = cfg();
    c.open_for = secs(5);
    let mut b = Breaker::new(c);
    b.trip(t0 + secs(3), "systemic");
    assert_eq!(b.trip(t0, "systemic"), None);
    assert!(b.is_open(t0 + ms(7_999)));
}

#[test]
fn names_for_metrics() {
    assert_eq!(BreakerStateKind::Closed.as_str(), "closed");
    assert_eq!(BreakerStateKind::Open.as_str(), "open");
    assert_eq!(BreakerStateKind::HalfOpen.as_str(), "half_open");
    assert_eq!(BreakerStateKind::Closed.as_gauge(), 0.0);
    assert_eq!(BreakerStateKind::HalfOpen.as_gauge(), 1.0);
    assert_eq!(BreakerStateKind::Open.as_gauge(), 2.0);
    assert_eq!(TransitionReason::FailureRate.as_str(), "failure_rate");
    assert_eq!(TransitionReason::OpenElapsed.as_str(), "open_elapsed");
    assert_eq!(
        TransitionReason::ProbesSucceeded.as_str(),
        "probes_succeeded"
    );
    assert_eq!(TransitionReason::Refuted.as_str(), "refuted");
    assert_eq!(TransitionReason::ProbeFailed.as_str(), "probe_failed");
}

#[test]
fn degenerate_configs_do_not_panic() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        window: Duration::ZERO,
        min_calls: 0,
        failure_rate: 0.0,
        open_for: Duration::ZERO,
        half_open_probes: 0,
        consecutive_failures: 0,
    });
    assert_eq!(b.record(t0, true), None, "no failure, no verdict");
    assert!(b.record(t0, false).is_some());
    // open_for 0: half-open at once, one probe.
    assert!(b.allow(t0));
    assert!(!b.allow(t0));
    assert!(b.record(t0, true).is_some());
    assert_eq!(b.state(t0), BreakerStateKind::Closed);
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
