//! The limits' gate and calls, without an API.

use super::*;
use crate::core::answer::Load;

#[tokio::test]
async fn the_gate_follows_the_limit_down_and_up() {
    let sem = Arc::new(Semaphore::new(10));
    let (tx, rx) = watch::channel(10usize);
    let mut gate = PermitGate::new(sem.clone(), 10, rx);
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(gate.acquire().await.expect("permit"));
    }
    // Down to 4 while 6 are held: no new permit until two come back and
    // are retired, and one more is released.
    tx.send_replace(4);
    let next = tokio::time::timeout(Duration::from_millis(50), gate.acquire()).await;
    assert!(next.is_err(), "no permit above the limit");
    // Three come back: two are retired (capacity 4), one is free.
    held.truncate(3);
    let p = tokio::time::timeout(Duration::from_secs(5), gate.acquire())
        .await
        .expect("a permit once below the limit")
        .expect("open");
    held.push(p);
    assert_eq!(held.len(), 4);
    assert_eq!(sem.available_permits(), 0);
    // Up to 8: four more at once.
    tx.send_replace(8);
    for _ in 0..4 {
        let p = tokio::time::timeout(Duration::from_secs(5), gate.acquire())
            .await
            .expect("permit after growth")
            .expect("open");
        held.push(p);
    }
    let next = tokio::time::timeout(Duration::from_millis(50), gate.acquire()).await;
    assert!(next.is_err(), "8 is the limit");
}

/// Events that hold the pool's permits between their tries (a back-off)
/// make the limit binding though few calls are in flight: it grows.
#[tokio::test]
async fn permits_held_between_tries_count_as_the_limit_in_use() {
    let pool = Arc::new(Semaphore::new(64));
    let limits = Limits::new(
        64,
        64,
        true,
        None,
        pool.clone(),
        LimitOn::EventPermits,
        "test",
    );
    let mut gate = limits.gate(pool, 64);
    let start = limits.current();
    // Every permit is held: one event calls, the others wait out a back-off.
    let mut held = Vec::new();
    for _ in 0..start {
        held.push(gate.acquire().await.expect("permit"));
    }
    let t0 = limits.epoch;
    for i in 0..40u64 {
        let sent = t0 + Duration::from_millis(20 * i);
        limits.calls.in_flight.fetch_add(1, Relaxed);
        let call = Call {
            started: sent,
            slot: None,
        };
        limits.after_call_at(sent + Duration::from_millis(5), call, Load::Answered, None);
    }
    assert!(
        limits.current() > start,
        "the limit grew from {start} (now {})",
        limits.current()
    );
}

/// Events waiting for their rate slot hold permits too, but the rate holds
/// them back, not the limit: it does not grow for them.
#[tokio::test]
async fn permits_held_by_rate_waits_do_not_make_the_limit_grow() {
    let pool = Arc::new(Semaphore::new(64));
    let limits = Limits::new(
        64,
        64,
        true,
        None,
        pool.clone(),
        LimitOn::EventPermits,
        "test",
    );
    let mut gate = limits.gate(pool, 64);
    let start = limits.current();
    let mut held = Vec::new();
    for _ in 0..start {
        held.push(gate.acquire().await.expect("permit"));
    }
    // All but the calling one wait for a rate slot.
    let waits: Vec<RateWait<'_>> = (1..start)
        .map(|_| RateWait::new(&limits.calls.waiting_for_rate))
        .collect();
    let t0 = limits.epoch;
    for i in 0..40u64 {
        let sent = t0 + Duration::from_millis(20 * i);
        limits.calls.in_flight.fetch_add(1, Relaxed);
        limits.after_call_at(
            sent + Duration::from_millis(5),
            Call {
                started: sent,
                slot: None,
            },
            Load::Answered,
            None,
        );
    }
    assert_eq!(limits.current(), start, "the limit stayed");
    drop(waits);
    assert_eq!(limits.calls.waiting_for_rate.load(Relaxed), 0);
}

/// With batching the limit holds requests: every call takes a request
/// slot (the limit's start, 8, at once; the ninth waits for one back),
/// while the pool's permits stay at `pipeline.concurrency` events.
#[tokio::test]
async fn on_requests_calls_take_slots_and_the_pool_stays_fixed() {
    let pool = Arc::new(Semaphore::new(64));
    let limits = Limits::new(64, 64, true, None, pool.clone(), LimitOn::Requests, "test");
    let start = limits.current();
    assert!(start < 64, "slow start begins below the bound: {start}");
    let mut gate = limits.gate(pool.clone(), 64);
    let mut events = Vec::new();
    for _ in 0..64 {
        let p = tokio::time::timeout(Duration::from_secs(5), gate.acquire())
            .await
            .expect("every event permit, whatever the limit")
            .expect("open");
        events.push(p);
    }
    let mut calls = Vec::new();
    for _ in 0..start {
        calls.push(limits.before_call(1).await);
    }
    let ninth = tokio::time::timeout(Duration::from_millis(50), limits.before_call(1)).await;
    assert!(ninth.is_err(), "no call above the limit on requests");
    limits.call_not_made(calls.pop().expect("a call"));
    let ninth = tokio::time::timeout(Duration::from_secs(5), limits.before_call(1))
        .await
        .expect("a slot once one came back");
    calls.push(ninth);
    assert_eq!(limits.calls.in_flight.load(Relaxed), start);
    assert_eq!(
        pool.available_permits(),
        0,
        "the events' permits are all held"
    );
}

/// Without batching no call takes a request slot: the pool's permits are
/// what the limit holds.
#[tokio::test]
async fn on_event_permits_calls_take_no_slot() {
    let pool = Arc::new(Semaphore::new(64));
    let limits = Limits::new(64, 64, true, None, pool, LimitOn::EventPermits, "test");
    assert!(!limits.calls_wait());
    let mut calls = Vec::new();
    for _ in 0..64 {
        let call = tokio::time::timeout(Duration::from_secs(5), limits.before_call(1))
            .await
            .expect("no wait before a call");
        calls.push(call);
    }
    assert_eq!(limits.calls.in_flight.load(Relaxed), 64);
}

/// With batching and a fixed limit (`api.adaptive_concurrency = false`),
/// `pipeline.concurrency` still bounds requests in flight: the request slots
/// are fixed at it, whatever the pool's permits (`concurrency × max_events`)
/// allow. Before, a fixed limit left requests unbounded but by events.
#[tokio::test(start_paused = true)]
async fn a_fixed_limit_on_requests_holds_requests_too() {
    let pool = Arc::new(Semaphore::new(20));
    let limits = Limits::new(2, 20, false, None, pool, LimitOn::Requests, "test");
    assert_eq!(limits.current(), 2);
    let first = limits.before_call(1).await;
    let _second = limits.before_call(1).await;
    let third = tokio::time::timeout(Duration::from_secs(1), limits.before_call(1)).await;
    assert!(third.is_err(), "no third request in flight");
    limits.call_not_made(first);
    tokio::time::timeout(Duration::from_secs(1), limits.before_call(1))
        .await
        .expect("a slot once one came back");
}
