//! The health verdict shared by every task of one instance: the local circuit
//! breaker (fed by every API call), the DLQ flood guard, and the merged verdict
//! `api_unavailable = marker_alive || breaker_open` that the health actor
//! publishes (the Redis marker half lives in `actors::health`).
//!
//! # Invariant I36: the breaker hears calls
//!
//! One observation per call, on every path (an event alone, a batch, an ordered run, a DLQ
//! round): `ApiHealth::gate` / `admit_now` return an `Admission`; hearing it consumes it
//! (`delivery::hear::Ears`: `core::classify::heard_status` says what the answer means —
//! delivered, an outcome, a systemic hypothesis, or nothing about the API, e.g. a 429 the
//! adaptive limit absorbs). Dropped unheard (a handover after admission, a batch whose events
//! all left, back-pressure), it frees its half-open slot (`Breaker::release`, only in the
//! epoch it was admitted in: every change of state, the end of optimism and a time-out start a
//! new epoch). A cautious half-open period's probes unanswered for `breaker_open` (at least
//! 1 s) free their slots (`Breaker::probes_lapsed`). With batching the batch is the call: the
//! events do not pass the gate, their batch does (`batch::bisect::admitted`), and a batch
//! admitted into a half-open probe slot sends one event, the others batched again (an ordered
//! run's after the probe's answer: `delivery::batch::bisect`). Per-item
//! results go to each event's attempt loop only: 429/503 items are one back-pressure sample
//! for the adaptive limit (`Limits::after_call`); events refused inside a 2xx answer are
//! not counted by the DLQ and parking flood guards (`Answer::per_item`).
//!
//! *Tested by* `api_health::every_admission_settles_its_slot` (any sequence of admissions,
//! answers and drops: with no call alive a half-open breaker has a free slot — seen failing
//! with the guard's release removed), `a_probe_dropped_unheard_frees_its_slot`,
//! `breaker::a_released_probe_frees_its_slot_once_and_only_in_its_epoch`,
//! `half_open_admits_exactly_the_probes` (the time-out), and `tests/fail_closed.rs`:
//! `half_accepted_batches_never_open_the_breaker` (3,000 events, half of each batch not
//! listed: all delivered within 60 s, no transition; on 3595d1c it timed out) and
//! `a_probe_answered_429_does_not_stall_the_breaker` (503 10 s, 429 all then 30 % for 20 s:
//! all delivered within 60 s of the recovery; on 3595d1c it stalled).

use crate::config::DegradedConfig;
use crate::core::breaker::{Breaker, BreakerStateKind, GateQueue, Transition};
use crate::core::systemic::{judge, Judgement};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthVerdict {
    pub api_unavailable: bool,
    pub breaker_open: bool,
    pub marker: bool,
    /// `false` while Redis cannot be reached: the verdict rests on the breaker alone.
    pub redis_ok: bool,
}

pub(crate) use crate::core::classify::CallOutcome;

/// One destination (`core::destination`): its name and its health — its own
/// breaker, gate and verdict.
pub struct Destination {
    pub name: String,
    pub health: Arc<ApiHealth>,
}

/// Per-second counter for the flood guard.
#[derive(Debug, Default)]
struct RateCounter {
    second: u64,
    count: u64,
}

/// The breaker, the calls waiting at its gate and where its half-open period
/// began, under one lock.
struct Gate {
    breaker: Breaker,
    queue: GateQueue,
    /// While half-open: the last call number sent before the period began
    /// (answers to those calls are stragglers, not probes).
    half_open_from: Option<u64>,
}

pub struct ApiHealth {
    gate: Mutex<Gate>,
    /// Wakes the calls waiting at the gate: on every transition, and when the
    /// longest waiting one leaves (the next one's turn).
    gate_wake: tokio::sync::Notify,
    /// Calls sent so far (each call's number is taken just before it is sent).
    calls: AtomicU64,
    /// The highest number of a call that was delivered (2xx/409).
    last_success: AtomicU64,
    verdict: watch::Sender<HealthVerdict>,
    flood: Mutex<RateCounter>,
    flood_limit: f64,
    park_flood: Mutex<RateCounter>,
    park_flood_limit: f64,
    started: Instant,
    /// The breaker's last transition and its wall-clock time (ms), for `/status`.
    last: Mutex<Option<(Transition, i64)>>,
    /// The breaker is away from `closed` because of a systemic failure (a
    /// certificate, the credentials): see [`ApiHealth::systemic_outage`].
    systemic: std::sync::atomic::AtomicBool,
}

impl ApiHealth {
    pub fn new(cfg: &DegradedConfig) -> ApiHealth {
        ApiHealth {
            gate: Mutex::new(Gate {
                breaker: Breaker::new(cfg.breaker()),
                queue: GateQueue::default(),
                half_open_from: None,
            }),
            gate_wake: tokio::sync::Notify::new(),
            calls: AtomicU64::new(0),
            last_success: AtomicU64::new(0),
            verdict: watch::Sender::new(HealthVerdict::default()),
            flood: Mutex::new(RateCounter::default()),
            flood_limit: cfg.flood_dlq_per_sec,
            park_flood: Mutex::new(RateCounter::default()),
            park_flood_limit: cfg.flood_parked_per_sec,
            started: Instant::now(),
            last: Mutex::new(None),
            systemic: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the breaker is open or half-open because of a systemic failure.
    /// During such an outage any failure of a call is taken as the same outage
    /// (e.g. a TLS 1.3 server that refuses the client certificate may close a
    /// connection that a request already used: `connection_closed`, not the
    /// alert): the event waits at the gate rather than going to the DLQ.
    pub fn systemic_outage(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.systemic.load(Relaxed)
            && self.breaker_state(Instant::now()) != BreakerStateKind::Closed
    }

    /// The breaker's last transition and when it happened (wall-clock ms).
    pub fn last_transition(&self) -> Option<(Transition, i64)> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `t` as the last transition and wakes the calls waiting at the
    /// gate. Called with the gate's lock held, so transitions are kept in the
    /// order they happened.
    fn noted(&self, g: &mut Gate, t: Option<Transition>) -> Option<Transition> {
        if let Some(t) = t {
            g.half_open_from =
                (t.to == BreakerStateKind::HalfOpen).then(|| self.calls.load(Ordering::SeqCst));
            self.gate_wake.notify_waiters();
            if t.to == BreakerStateKind::Closed {
                self.systemic
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            let wall_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((t, wall_ms));
        }
        t
    }

    fn gate_lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of a call about to be sent (1, 2, …): what
    /// `core::systemic` compares answers by.
    pub fn call_number(&self) -> u64 {
        self.calls.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The highest number of a call that was delivered.
    pub fn last_success(&self) -> u64 {
        self.last_success.load(Ordering::SeqCst)
    }

    /// Call `seq` was delivered: the API is up, and every systemic answer to a
    /// call sent before it is refuted.
    pub fn delivered(&self, seq: u64) -> Option<Transition> {
        self.last_success.fetch_max(seq, Ordering::SeqCst);
        self.record(CallOutcome::Up)
    }

    /// A systemic answer (`reason`: the breaker's label) to call `seq`, which
    /// the event's own hypothesis could not set aside: refuted by a later
    /// delivered call (the breaker hears "up"), a straggler of a half-open
    /// period (nothing), or evidence (the breaker suspects, or confirms).
    /// `suspect`: the event was refused systemic before (its answer in a
    /// half-open period repeats what was known: `Breaker::systemic_repeat`).
    pub fn systemic(
        &self,
        seq: u64,
        reason: &'static str,
        suspect: bool,
    ) -> (Judgement, Option<Transition>) {
        let now = Instant::now();
        let mut g = self.gate_lock();
        let advanced = g.breaker.advance(now);
        self.noted(&mut g, advanced);
        let half_open_from = if g.breaker.state(now) == BreakerStateKind::HalfOpen {
            g.half_open_from
        } else {
            None
        };
        let j = judge(seq, self.last_success(), half_open_from);
        let t = match j {
            Judgement::Refuted => g.breaker.record(now, true),
            Judgement::Straggler => None,
            Judgement::Evidence => {
                self.systemic.store(true, Ordering::Relaxed);
                if suspect {
                    g.breaker.systemic_repeat(now, reason, false)
                } else {
                    g.breaker.systemic(now, reason, false)
                }
            }
        };
        (j, self.noted(&mut g, t))
    }

    pub fn verdict(&self) -> HealthVerdict {
        *self.verdict.borrow()
    }

    /// The verdict as it changes: each partition actor watches it
    /// (`actors::partition::verdict`), the health actor publishes it.
    pub fn watch(&self) -> watch::Receiver<HealthVerdict> {
        self.verdict.subscribe()
    }

    /// Publishes a new verdict; `true` if it changed.
    pub fn publish(&self, v: HealthVerdict) -> bool {
        self.verdict.send_if_modified(|cur| {
            if *cur == v {
                false
            } else {
                *cur = v;
                true
            }
        })
    }

    pub fn breaker_is_open(&self, now: Instant) -> bool {
        self.gate_lock().breaker.is_open(now)
    }

    pub fn breaker_state(&self, now: Instant) -> BreakerStateKind {
        self.gate_lock().breaker.state(now)
    }

    /// Waits until the breaker admits a call. While it is open, nothing is sent
    /// (the events wait, their partitions pause); half-open admits a few
    /// probes, in the order the calls came to wait (`GateQueue`: a call that
    /// comes back after a refusal waits behind the others, so the probes
    /// rotate over the waiting events). Dropping the future (a cancelled
    /// wait) leaves the queue.
    /// An event refused systemic before (`suspect`) waits behind every fresh
    /// waiter and takes at most a share of the probe slots
    /// (`Breaker::allow_suspect`).
    pub async fn gate(self: &Arc<Self>, suspect: bool) -> Admission {
        let ticket = self.gate_lock().queue.join(suspect);
        let _leave = Waiting {
            health: self,
            ticket,
        };
        loop {
            let woken = self.gate_wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            {
                let now = Instant::now();
                let mut g = self.gate_lock();
                let advanced = g.breaker.advance(now);
                self.noted(&mut g, advanced);
                let g = &mut *g;
                if g.queue.admit(ticket, &mut g.breaker, now) {
                    // Half-open: the next waiter's turn (it re-checks when
                    // woken). Closed: the transition woke every waiter already
                    // (waking them all again per admission would be quadratic).
                    let probe = g.breaker.state(now) == BreakerStateKind::HalfOpen;
                    if probe {
                        self.gate_wake.notify_waiters();
                    }
                    return self.admission(&g.breaker, probe, suspect);
                }
            }
            // Woken by a transition or a turn; the time-driven step (open →
            // half-open) by the re-check.
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// How many calls wait at the gate (the delivery shell's tests).
    #[cfg(test)]
    pub(crate) fn waiting_at_gate(&self) -> usize {
        self.gate_lock().queue.len()
    }

    /// Whether the breaker admits a call now without waiting (closed; or a
    /// half-open probe slot while no call waits at the gate — else the call
    /// queues behind them); [`ApiHealth::gate`] waits until it is admitted.
    /// `suspect`: as for [`ApiHealth::gate`].
    pub fn admit_now(self: &Arc<Self>, suspect: bool) -> Option<Admission> {
        let now = Instant::now();
        let mut g = self.gate_lock();
        let advanced = g.breaker.advance(now);
        self.noted(&mut g, advanced);
        let g = &mut *g;
        if !g.queue.admit_newcomer(suspect, &mut g.breaker, now) {
            return None;
        }
        let probe = g.breaker.state(now) == BreakerStateKind::HalfOpen;
        Some(self.admission(&g.breaker, probe, suspect))
    }

    fn admission(self: &Arc<Self>, breaker: &Breaker, probe: bool, suspect: bool) -> Admission {
        Admission {
            health: self.clone(),
            epoch: breaker.epoch(),
            probe,
            slot: probe && breaker.probing(),
            suspect,
        }
    }

    /// An admitted call that will not be answered: its half-open slot, if
    /// it took one, goes to the next waiter ([`Breaker::release`]).
    fn release(&self, epoch: u64, suspect: bool) {
        let mut g = self.gate_lock();
        let advanced = g.breaker.advance(Instant::now());
        self.noted(&mut g, advanced);
        g.breaker.release(epoch, suspect);
        drop(g);
        self.gate_wake.notify_waiters();
    }

    /// Records a call's outcome; returns the transition if the breaker moved.
    /// A systemic outcome here has no call number to be judged by (see
    /// [`ApiHealth::systemic`]): it is evidence.
    pub fn record(&self, outcome: CallOutcome) -> Option<Transition> {
        let now = Instant::now();
        let mut g = self.gate_lock();
        let t = match outcome {
            CallOutcome::Up => g.breaker.record(now, true),
            CallOutcome::Failed => g.breaker.record(now, false),
            CallOutcome::Systemic(reason) => {
                self.systemic.store(true, Ordering::Relaxed);
                g.breaker.systemic(now, reason, false)
            }
        };
        self.noted(&mut g, t)
    }

    /// Counts a DLQ write for the flood guard; trips the breaker (and returns the
    /// transition) when writes exceed the configured rate.
    pub fn dlq_written(&self) -> Option<Transition> {
        self.dlq_written_at(Instant::now())
    }

    fn dlq_written_at(&self, now: Instant) -> Option<Transition> {
        self.count_flood(&self.flood, self.flood_limit, now, "dlq_flood")
    }

    /// Counts an event parked because of the API's answer (a permanent status:
    /// not bad input) for the parking flood guard; trips the breaker
    /// (`park_flood`) when such parkings exceed the configured rate — a wrong
    /// path or a changed contract parks every event, and that is the API's
    /// problem, not the events'.
    pub fn parked_by_api(&self) -> Option<Transition> {
        self.parked_by_api_at(Instant::now())
    }

    fn parked_by_api_at(&self, now: Instant) -> Option<Transition> {
        self.count_flood(&self.park_flood, self.park_flood_limit, now, "park_flood")
    }

    fn count_flood(
        &self,
        counter: &Mutex<RateCounter>,
        limit: f64,
        now: Instant,
        reason: &'static str,
    ) -> Option<Transition> {
        if limit <= 0.0 {
            return None;
        }
        let second = now.duration_since(self.started).as_secs();
        let over = {
            let mut f = counter.lock().unwrap_or_else(|e| e.into_inner());
            if f.second != second {
                f.second = second;
                f.count = 0;
            }
            f.count += 1;
            f.count as f64 > limit
        };
        if over {
            let mut g = self.gate_lock();
            let t = g.breaker.trip(now, reason);
            self.noted(&mut g, t)
        } else {
            None
        }
    }
}

/// A call the breaker admitted ([`ApiHealth::gate`], [`ApiHealth::admit_now`]).
/// The breaker hears of it exactly once: what its answer said (one of the
/// methods, which consume it), or — dropped unheard: no answer, a call not
/// made, an answer that says nothing about the API (back-pressure) — that
/// its half-open slot, if it took one, is free again. No path can forget to
/// report a probe and leave the breaker half-open for ever.
#[must_use = "an admitted call must be heard (or dropped: no answer)"]
pub struct Admission {
    health: Arc<ApiHealth>,
    epoch: u64,
    /// Admitted while half-open: a probe, whose slot waits for its answer.
    probe: bool,
    /// It took one of the few probe slots (half-open, not optimistic).
    slot: bool,
    suspect: bool,
}

impl Admission {
    /// The call was delivered (call `seq`): the API is up.
    pub fn delivered(mut self, seq: u64) -> Option<Transition> {
        self.probe = false; // Heard: nothing to release when dropped.
        self.health.delivered(seq)
    }

    /// What the call said about the API (not systemic: see
    /// [`Admission::systemic`]).
    pub fn record(mut self, outcome: CallOutcome) -> Option<Transition> {
        self.probe = false;
        self.health.record(outcome)
    }

    /// A systemic answer to call `seq` ([`ApiHealth::systemic`]).
    pub fn systemic(mut self, seq: u64, reason: &'static str) -> (Judgement, Option<Transition>) {
        self.probe = false;
        self.health.systemic(seq, reason, self.suspect)
    }

    /// Whether it was admitted as a suspect.
    pub fn suspect(&self) -> bool {
        self.suspect
    }

    /// Whether it took one of the few half-open probe slots: a probe should
    /// put little at stake (a batch sends one event as its probe).
    pub fn is_probe_slot(&self) -> bool {
        self.slot
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.probe {
            self.health.release(self.epoch, self.suspect);
        }
    }
}

/// A call waiting at the gate: leaves the queue however the wait ends.
struct Waiting<'a> {
    health: &'a ApiHealth,
    ticket: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut g = self.health.gate_lock();
        let head = g.queue.is_head(self.ticket);
        g.queue.leave(self.ticket);
        if head {
            self.health.gate_wake.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DegradedConfig {
        DegradedConfig {
            flood_dlq_per_sec: 5.0,
            ..DegradedConfig::default()
        }
    }

    #[test]
    fn a_systemic_trip_is_an_outage_until_the_breaker_closes() {
        let h = Arc::new(ApiHealth::new(&DegradedConfig {
            breaker_open: Duration::from_millis(1),
            breaker_half_open_probes: 1,
            ..cfg()
        }));
        assert!(!h.systemic_outage());
        h.record(CallOutcome::Failed);
        assert!(!h.systemic_outage(), "a transient failure is not systemic");
        h.record(CallOutcome::Systemic("tls_client_cert"));
        assert!(h.systemic_outage());
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.systemic_outage(), "half-open still counts");
        // The probe succeeds: closed, the outage is over.
        let probe = h.admit_now(false).expect("a half-open probe is admitted");
        probe.record(CallOutcome::Up);
        assert_eq!(h.breaker_state(Instant::now()), BreakerStateKind::Closed);
        assert!(!h.systemic_outage());
    }

    #[test]
    fn a_systemic_answer_is_suspected_and_a_probe_confirms_it() {
        let h = Arc::new(ApiHealth::new(&DegradedConfig {
            breaker_half_open_probes: 1,
            breaker_open: Duration::from_millis(200),
            ..cfg()
        }));
        assert_eq!(h.record(CallOutcome::Up), None);
        let first = h.call_number();
        let (j, t) = h.systemic(first, "tls_untrusted", false);
        assert_eq!(j, Judgement::Evidence);
        let t = t.expect("401/403 and TLS failures are suspected at once");
        assert_eq!(t.to, BreakerStateKind::HalfOpen);
        assert_eq!(t.reason.as_str(), "tls_untrusted");
        assert!(
            !h.breaker_is_open(Instant::now()),
            "no partition pauses yet"
        );
        // A call sent before the suspicion is answered the same: a straggler.
        assert_eq!(
            h.systemic(first, "tls_untrusted", false).0,
            Judgement::Straggler
        );
        // The probe is refused too, once the period is `breaker_open` old
        // (younger, other events' calls could still refute it): open, with
        // the reason.
        std::thread::sleep(Duration::from_millis(250));
        let admitted = h.admit_now(false).expect("a probe");
        let probe = h.call_number();
        let (j, t) = admitted.systemic(probe, "tls_untrusted");
        assert_eq!(j, Judgement::Evidence);
        let t = t.expect("confirmed");
        assert_eq!(
            (t.to, t.reason.as_str()),
            (BreakerStateKind::Open, "tls_untrusted")
        );
        assert!(h.breaker_is_open(Instant::now()));
        let (last, at_ms) = h
            .last_transition()
            .expect("the transition is kept for /status");
        assert_eq!((last, at_ms > 0), (t, true));
    }

    #[test]
    fn a_later_delivered_call_refutes_a_systemic_answer() {
        let h = Arc::new(ApiHealth::new(&DegradedConfig {
            breaker_half_open_probes: 1,
            ..cfg()
        }));
        let refused = h.call_number();
        let later = h.call_number();
        assert_eq!(h.delivered(later), None);
        assert_eq!(h.last_success(), later);
        // The refusal of a call sent before a delivered one: the API is up.
        assert_eq!(
            h.systemic(refused, "http_403", false),
            (Judgement::Refuted, None)
        );
        assert_eq!(h.breaker_state(Instant::now()), BreakerStateKind::Closed);
        // A refusal of a call sent after it is evidence; a later delivered probe
        // closes the breaker again.
        let next = h.call_number();
        assert_eq!(h.systemic(next, "http_403", false).0, Judgement::Evidence);
        let admitted = h.admit_now(false).expect("a probe");
        let probe = h.call_number();
        let t = admitted.delivered(probe).expect("the probe closes it");
        assert_eq!(t.to, BreakerStateKind::Closed);
    }

    /// Waiters at the gate take the half-open probe slots in turn: a waiter
    /// refused again comes back behind the others (across partitions and keys:
    /// the gate knows only the order of arrival).
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn probes_rotate_over_the_waiters_at_the_gate() {
        let h = std::sync::Arc::new(ApiHealth::new(&DegradedConfig {
            breaker_half_open_probes: 1,
            breaker_open: Duration::from_secs(5),
            ..cfg()
        }));
        // An event is refused: suspected, optimistic (no fresh call waits).
        let seq = h.call_number();
        h.systemic(seq, "http_403", false);
        let fresh = h.admit_now(false).expect("optimistic: a fresh call goes");
        // That call is refused too: the optimism ends (one probe), and the
        // probe slots count; "a" waits first, then "b" and "c".
        let seq = h.call_number();
        fresh.systemic(seq, "http_403");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(&'static str, Admission)>();
        for name in ["a", "b", "c"] {
            let (h, tx) = (h.clone(), tx.clone());
            tokio::spawn(async move {
                let admitted = h.gate(false).await;
                let _ = tx.send((name, admitted));
            });
            tokio::task::yield_now().await;
        }
        assert!(
            h.admit_now(false).is_none(),
            "a newcomer queues behind the waiters"
        );
        let (first, a) = rx.recv().await.expect("a probe");
        assert_eq!(first, "a", "the first to wait probes");
        assert!(rx.try_recv().is_err(), "one probe slot");
        // "a" is refused again: open; it waits again, behind "b" and "c".
        let probe = h.call_number();
        a.systemic(probe, "http_403");
        {
            let (h, tx) = (h.clone(), tx.clone());
            tokio::spawn(async move {
                let admitted = h.gate(false).await;
                let _ = tx.send(("a again", admitted));
            });
        }
        // After the open interval, "b" probes (not "a").
        let (second, b) = rx.recv().await.expect("a probe");
        assert_eq!(second, "b");
        assert!(rx.try_recv().is_err());
        // "b" is delivered: closed, the others are admitted at once.
        let b_call = h.call_number();
        b.delivered(b_call);
        let mut rest = vec![
            rx.recv().await.expect("admitted").0,
            rx.recv().await.expect("admitted").0,
        ];
        rest.sort_unstable();
        assert_eq!(rest, ["a again", "c"]);
        assert!(h.admit_now(false).is_some());
    }

    #[test]
    fn a_dlq_flood_trips_the_breaker() {
        let h = ApiHealth::new(&cfg());
        let t0 = h.started;
        // Five writes in one second are within the limit; a new second starts over.
        for i in 0..5 {
            assert_eq!(h.dlq_written_at(t0 + Duration::from_millis(100 * i)), None);
        }
        for i in 0..5 {
            assert_eq!(
                h.dlq_written_at(t0 + Duration::from_millis(1_000 + 100 * i)),
                None
            );
        }
        // The sixth write within the same second is a flood.
        let t = h
            .dlq_written_at(t0 + Duration::from_millis(1_900))
            .expect("over the flood limit");
        assert_eq!(t.reason.as_str(), "dlq_flood");
        assert_eq!(
            h.last_transition().map(|(t, _)| t.reason.as_str()),
            Some("dlq_flood")
        );
        assert!(h.breaker_is_open(t0 + Duration::from_millis(1_901)));
    }

    #[test]
    fn a_parking_flood_trips_the_breaker_on_its_own_count() {
        let h = ApiHealth::new(&DegradedConfig {
            flood_parked_per_sec: 3.0,
            ..cfg()
        });
        let t0 = h.started;
        // DLQ writes do not count toward the parking guard, nor the reverse.
        for i in 0..3 {
            assert_eq!(h.parked_by_api_at(t0 + Duration::from_millis(10 * i)), None);
            assert_eq!(h.dlq_written_at(t0 + Duration::from_millis(10 * i)), None);
        }
        let t = h
            .parked_by_api_at(t0 + Duration::from_millis(500))
            .expect("the fourth parking in one second is a flood");
        assert_eq!(t.reason.as_str(), "park_flood");
        assert_eq!(t.to, BreakerStateKind::Open);
        let off = ApiHealth::new(&DegradedConfig {
            flood_parked_per_sec: 0.0,
            ..cfg()
        });
        for _ in 0..10_000 {
            assert_eq!(off.parked_by_api(), None);
        }
    }

    #[test]
    fn flood_guard_can_be_off() {
        let h = ApiHealth::new(&DegradedConfig {
            flood_dlq_per_sec: 0.0,
            ..DegradedConfig::default()
        });
        for _ in 0..10_000 {
            assert_eq!(h.dlq_written(), None);
        }
    }

    #[test]
    fn verdict_changes_are_reported_once() {
        let h = ApiHealth::new(&cfg());
        let v = HealthVerdict {
            api_unavailable: true,
            breaker_open: true,
            marker: false,
            redis_ok: true,
        };
        assert!(h.publish(v));
        assert!(!h.publish(v));
        assert_eq!(h.verdict(), v);
    }

    #[test]
    fn a_probe_dropped_unheard_frees_its_slot() {
        let h = Arc::new(ApiHealth::new(&DegradedConfig {
            breaker_open: Duration::from_millis(1),
            breaker_half_open_probes: 1,
            ..cfg()
        }));
        h.record(CallOutcome::Systemic("http_503"));
        std::thread::sleep(Duration::from_millis(5));
        let probe = h.admit_now(false).expect("the one probe");
        assert!(h.admit_now(false).is_none(), "one slot, taken");
        // Its answer never comes (a 429 the limit absorbs, a batch whose
        // events were all handed over, a path that forgot it): dropped.
        drop(probe);
        let probe = h.admit_now(false).expect("the slot is free again");
        let seq = h.call_number();
        assert_eq!(
            probe.delivered(seq).map(|t| t.to),
            Some(BreakerStateKind::Closed)
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Admit,
        /// Hears the admission at this index (mod the live ones) as...
        Delivered(usize),
        Failed(usize),
        Systemic(usize),
        Dropped(usize),
        Trip,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => Just(Op::Admit),
            2 => any::<usize>().prop_map(Op::Delivered),
            2 => any::<usize>().prop_map(Op::Failed),
            1 => any::<usize>().prop_map(Op::Systemic),
            3 => any::<usize>().prop_map(Op::Dropped),
            1 => Just(Op::Trip),
        ]
    }

    proptest::proptest! {
        /// Whatever calls are admitted and however each ends — heard as
        /// delivered, failed or systemic, or dropped unheard — once none is
        /// alive, a half-open breaker has a probe slot free: no admitted
        /// call can leave it half-open with every slot taken for ever.
        #[test]
        fn every_admission_settles_its_slot(ops in proptest::collection::vec(op(), 1..200), probes in 1u32..4) {
            let h = Arc::new(ApiHealth::new(&DegradedConfig {
                breaker_open: Duration::from_secs(3600),
                breaker_half_open_probes: probes,
                ..cfg()
            }));
            // Half-open at once (a systemic suspicion, then its optimism
            // spent), so every admission below is a probe.
            h.record(CallOutcome::Systemic("http_401"));
            let mut live: Vec<Admission> = Vec::new();
            for op in ops {
                let pick = |live: &mut Vec<Admission>, i: usize| {
                    (!live.is_empty()).then(|| live.swap_remove(i % live.len()))
                };
                match op {
                    Op::Admit => live.extend(h.admit_now(false)),
                    Op::Delivered(i) => {
                        if let Some(a) = pick(&mut live, i) {
                            let seq = h.call_number();
                            a.delivered(seq);
                        }
                    }
                    Op::Failed(i) => {
                        if let Some(a) = pick(&mut live, i) {
                            a.record(CallOutcome::Failed);
                        }
                    }
                    Op::Systemic(i) => {
                        if let Some(a) = pick(&mut live, i) {
                            let seq = h.call_number();
                            a.systemic(seq, "http_401");
                        }
                    }
                    Op::Dropped(i) => drop(pick(&mut live, i)),
                    Op::Trip => {
                        h.record(CallOutcome::Systemic("http_401"));
                    }
                }
                let now = Instant::now();
                let g = h.gate_lock();
                if live.is_empty() && g.breaker.state(now) == BreakerStateKind::HalfOpen {
                    proptest::prop_assert!(
                        g.breaker.admits_traffic(now),
                        "half-open, no call alive, and no slot free"
                    );
                }
            }
        }
    }
}
