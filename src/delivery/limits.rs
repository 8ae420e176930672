//! The limits on calls toward the API, at the edge: the adaptive concurrency
//! limit ([`crate::core::concurrency`]) fed by every call's outcome, the gate
//! that keeps what it limits at that limit, and the group-wide rate limit
//! ([`super::ratelimit`]), which every call waits for first.
//!
//! What the limit holds ([`LimitOn`]): without batching, the pool's permits
//! (one per event in delivery: an event is a request); with batching
//! (`[api.batch]` on any route), requests in flight — each call takes a
//! request slot first, a batch of many events one; `pipeline.concurrency` of
//! them, or fewer while the adaptive limit says so — while the pool's permits
//! are enough to fill every request (`concurrency × max_events`: the limit
//! learns from requests, and a limit on events would starve batches of 100).
//!
//! Every API call — main path and DLQ drain — goes through [`Limits::before_call`]
//! and [`Limits::after_call`]: the drain's calls are calls to the same API, so
//! their 429s and RTTs teach the limiter as much as the main path's. The drain
//! does not take the pool's permits (it has its own, smaller limit and pace).

use super::ratelimit::RateLimiter;
use crate::core::answer::Load;
use crate::core::concurrency::{Aimd, AimdConfig, Sample};
use crate::metrics as m;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// The longest a request slot answered back-pressure is held before reuse.
const MAX_BACK_PRESSURE_HOLD: Duration = Duration::from_secs(1);

/// What the adaptive concurrency limit holds at the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitOn {
    /// The pool's permits, one per event in delivery (no batching).
    EventPermits,
    /// Requests in flight, one slot per call however many events it carries
    /// (batching); the pool's permits stay fixed.
    Requests,
}

/// The concurrency limit and what feeds it.
pub(crate) struct Limits {
    /// `None`: fixed at `pipeline.concurrency`.
    adaptive: Option<Mutex<Aimd>>,
    epoch: Instant,
    /// Calls in flight now, and those waiting for their rate slot.
    calls: Calls,
    /// What the limit holds ([`PermitGate`]). [`LimitOn::EventPermits`]: the
    /// pool's permits — an event holds one from its dispatch to its outcome,
    /// also while it writes to the DLQ (not through its back-offs:
    /// [`Limits::back_pressure_hold`]), and the limit
    /// is in use when they are all held, whether or not each holder is in a
    /// call at that moment. [`LimitOn::Requests`]: the request slots.
    pool: Arc<Semaphore>,
    /// With [`LimitOn::Requests`]: the request slots (adaptive, or fixed at `max`).
    requests: Option<RequestSlots>,
    /// Waits begun so far (a test's handle on "waiting").
    #[cfg(test)]
    pub(super) waits: TestWaits,
    limit: watch::Sender<usize>,
    gauge: metrics::Gauge,
    rate: Option<Arc<RateLimiter>>,
}

/// The calls the limit counts.
#[derive(Default)]
struct Calls {
    /// In flight now (main path and drain).
    in_flight: AtomicUsize,
    /// Waiting for their rate slot now: their events hold permits, but the
    /// rate, not the concurrency limit, holds them back.
    waiting_for_rate: AtomicUsize,
}

/// Waits begun so far, for the tests: for the rate limit, and for a request
/// or rate slot.
#[cfg(test)]
#[derive(Default)]
pub(super) struct TestWaits {
    pub(super) rate: AtomicUsize,
    pub(super) slot: AtomicUsize,
}

/// Counts one call waiting for its rate slot while it lives (a wait dropped
/// on a handover included).
struct RateWait<'a>(&'a AtomicUsize);

impl<'a> RateWait<'a> {
    fn new(n: &'a AtomicUsize) -> RateWait<'a> {
        n.fetch_add(1, Relaxed);
        RateWait(n)
    }
}

impl Drop for RateWait<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The request slots of [`LimitOn::Requests`]: the gate every call takes
/// its slot through, and the fixed limit the pool's permits follow instead
/// of the adaptive one.
struct RequestSlots {
    gate: tokio::sync::Mutex<PermitGate>,
    pool_limit: watch::Sender<usize>,
}

/// A call in flight, with its request slot (if the limit is on requests);
/// hand it back to [`Limits::after_call`] or [`Limits::call_not_made`].
pub(crate) struct Call {
    started: Instant,
    slot: Option<OwnedSemaphorePermit>,
}

impl Limits {
    /// `max`: calls in flight at most (`pipeline.concurrency`); `pool`: the
    /// pool's permits, `events` of them (`max` without batching);
    /// [`Limits::gate`] keeps them at the limit when it is on
    /// [`LimitOn::EventPermits`], at `events` when it is on requests.
    /// `destination`: whose limit it is (the gauge's label).
    pub(crate) fn new(
        max: usize,
        events: usize,
        adaptive: bool,
        rate: Option<Arc<RateLimiter>>,
        pool: Arc<Semaphore>,
        on: LimitOn,
        destination: &str,
    ) -> Limits {
        let adaptive = adaptive.then(|| Mutex::new(Aimd::new(AimdConfig::new(max))));
        let start = adaptive
            .as_ref()
            .map_or(max, |a| a.lock().unwrap_or_else(|e| e.into_inner()).limit());
        let limit = watch::channel(start).0;
        // On requests the slots are the limit, adaptive or fixed at `max`:
        // with batching `pipeline.concurrency` bounds requests in flight
        // either way (the pool's permits, `events`, fill them).
        let (pool, requests) = match on {
            LimitOn::Requests => {
                let slots = Arc::new(Semaphore::new(start));
                let gate = PermitGate::new(slots.clone(), start, limit.subscribe());
                let requests = RequestSlots {
                    gate: tokio::sync::Mutex::new(gate),
                    pool_limit: watch::channel(events).0,
                };
                (slots, Some(requests))
            }
            LimitOn::EventPermits => (pool, None),
        };
        let gauge =
            metrics::gauge!(m::API_CONCURRENCY_LIMIT, "destination" => destination.to_string());
        gauge.set(start as f64);
        if rate.is_none() {
            // No rate limit: the series exist at 0 (dashboards, `increase()`).
            metrics::gauge!(m::API_RATE_LIMIT, "scope" => "group", "destination" => destination.to_string())
                .set(0.0);
        }
        for result in ["granted", "denied"] {
            for source in ["redis", "local_fallback"] {
                // `increment(0)`: born at 0, never reset by a re-spawned pool.
                metrics::counter!(m::API_RATE_PERMITS, "result" => result, "source" => source)
                    .increment(0);
            }
        }
        Limits {
            adaptive,
            epoch: Instant::now(),
            calls: Calls::default(),
            pool,
            requests,
            #[cfg(test)]
            waits: TestWaits::default(),
            limit,
            gauge,
            rate,
        }
    }

    /// The current limit on calls in flight.
    pub(crate) fn current(&self) -> usize {
        *self.limit.borrow()
    }

    /// Whether a call may wait before it is made: for a rate slot
    /// (`api.rate_limit_per_sec`) or a request slot ([`LimitOn::Requests`]).
    pub(crate) fn calls_wait(&self) -> bool {
        self.rate.is_some() || self.requests.is_some()
    }

    /// Waits for a request slot (if the limit is on requests) and `weight`
    /// rate slots (if there is a rate limit: one, or a batch's n events with
    /// `api.rate_limit_unit = "events"`), then counts the call as in flight.
    pub(crate) async fn before_call(&self, weight: usize) -> Call {
        let slot = if self.requests.is_none() && self.rate.is_none() {
            None
        } else {
            // Boxed: the waits' futures (the Redis rate limiter's above all,
            // ~7 KB) would otherwise be part of every event's delivery future,
            // allocated and moved per event even where no limit waits.
            Box::pin(self.wait_for_slots(weight)).await
        };
        self.calls.in_flight.fetch_add(1, Relaxed);
        Call {
            started: Instant::now(),
            slot,
        }
    }

    /// The waits of [`Limits::before_call`]: the request slot (if
    /// the limit is on requests), then `weight` rate slots (if any).
    async fn wait_for_slots(&self, weight: usize) -> Option<OwnedSemaphorePermit> {
        #[cfg(test)]
        self.waits.slot.fetch_add(1, Relaxed);
        let slot = match &self.requests {
            Some(r) => r.gate.lock().await.acquire().await,
            None => None,
        };
        if let Some(rate) = &self.rate {
            #[cfg(test)]
            self.waits.rate.fetch_add(1, Relaxed);
            let _waiting = RateWait::new(&self.calls.waiting_for_rate);
            for _ in 0..weight.max(1) {
                rate.acquire().await;
            }
        }
        slot
    }

    /// A call counted by [`Limits::before_call`] that was not made
    /// after all (everyone it was for stopped waiting): no longer in flight,
    /// and nothing to learn from it.
    pub(crate) fn call_not_made(&self, call: Call) {
        drop(call);
        self.calls.in_flight.fetch_sub(1, Relaxed);
    }

    /// Feeds what the call's answer says of the API's capacity (`load`, read
    /// once by `core::answer::read`) to the limiter, and a back-pressure
    /// answer's `Retry-After` to the rate limiter, which pauses the whole
    /// group. A batch whose answer refused some items with 429 or 503 is
    /// one back-pressure sample, however many items it refused.
    pub(crate) fn after_call(&self, call: Call, load: Load, retry_after: Option<Duration>) {
        self.after_call_at(Instant::now(), call, load, retry_after);
    }

    fn after_call_at(&self, now: Instant, call: Call, load: Load, retry_after: Option<Duration>) {
        let Call { started, slot } = call;
        let calls = self.calls.in_flight.fetch_sub(1, Relaxed);
        if let (Some(rate), Load::BackPressure, Some(after)) = (&self.rate, load, retry_after) {
            rate.pause_group(after);
        }
        let Some(aimd) = &self.adaptive else { return };
        let rtt = now.saturating_duration_since(started);
        let sample = match load {
            Load::Answered => Sample::Answered(rtt),
            Load::BackPressure => Sample::BackPressure(rtt),
            Load::Nothing => Sample::Ignore,
        };
        if let (true, Some(slot)) = (matches!(sample, Sample::BackPressure(_)), slot) {
            // A request slot answered back-pressure is held for about one
            // round trip before it is reused: a 429 comes back at once, and
            // reused at once it met the full API again and again before the
            // window closed and the limit came down (a burst of 429s at each
            // probe). An event's permit is held into its back-off the same
            // way (`LimitOn::EventPermits`, `back_pressure_hold`).
            let hold = aimd
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .baseline()
                .unwrap_or(rtt)
                .min(MAX_BACK_PRESSURE_HOLD);
            tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                drop(slot);
            });
        }
        // The limit is in use when the calls reach it, or when every permit
        // of the pool is held by work the limit holds back (events between
        // tries hold theirs: counting only calls, a few events in back-off
        // kept the limit from ever looking reached, and it never grew again —
        // issue 23's 403 tenant). Events waiting for a rate slot are held back
        // by the rate: they do not make the limit grow. (On requests, `pool`
        // is the request slots, taken before the rate wait.)
        let held = self
            .current()
            .saturating_sub(self.pool.available_permits())
            .saturating_sub(self.calls.waiting_for_rate.load(Relaxed));
        let in_use = calls.max(held);
        let now = now.saturating_duration_since(self.epoch);
        let mut aimd = aimd.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(change) = aimd.observe(now, sample, in_use) {
            let limit = aimd.limit();
            drop(aimd);
            tracing::debug!(limit, change = change.as_str(), "API concurrency limit");
            self.gauge.set(limit as f64);
            self.limit.send_replace(limit);
        }
    }

    /// How long an event answered back-pressure (429, 503, a timeout) keeps
    /// its permit into its back-off before it gives it back: about one round
    /// trip, as a request slot is held after back-pressure. Given back at
    /// once, the permit went to the next event, which met the full API at
    /// once: a 429 per permit per few milliseconds (tests/limits.rs saw ~8 %
    /// of its requests answered 429). Zero without the adaptive limit or
    /// after another failure.
    pub(crate) fn back_pressure_hold(&self, load: Load) -> Duration {
        match &self.adaptive {
            Some(aimd) if load == Load::BackPressure => aimd
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .baseline()
                .unwrap_or(MAX_BACK_PRESSURE_HOLD)
                .min(MAX_BACK_PRESSURE_HOLD),
            _ => Duration::ZERO,
        }
    }

    /// Whether an answer with `status` is back-pressure that the adaptive
    /// limit deals with, and so not news for the breaker: a 429 says the API is
    /// up and wants fewer calls (with a fixed concurrency, a 429 still counts
    /// as a failed call, as before).
    pub(crate) fn absorbs(&self, status: u16) -> bool {
        status == 429 && self.adaptive.is_some()
    }

    /// The gate the pool's dispatcher takes permits through: at the limit
    /// ([`LimitOn::EventPermits`]), or fixed at `capacity` when the limit is
    /// on requests.
    pub(crate) fn gate(&self, permits: Arc<Semaphore>, capacity: usize) -> PermitGate {
        let limit = self
            .requests
            .as_ref()
            .map_or(&self.limit, |r| &r.pool_limit)
            .subscribe();
        PermitGate::new(permits, capacity, limit)
    }
}

mod gate;
#[cfg(test)]
mod tests;

pub(crate) use gate::PermitGate;
