//! The health verdict shared by every task of one instance: the local circuit
//! breaker (fed by every API call), the DLQ flood guard, and the merged verdict
//! `api_unavailable = marker_alive || breaker_open` that the health actor
//! publishes (the Redis marker half lives in `actors::health`).

use crate::config::DegradedConfig;
use crate::core::breaker::{Breaker, BreakerStateKind, Transition};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What the health actor (`actors::health`) takes: defined here, below the
/// delivery tasks that send `Tripped`.
pub enum HealthMsg {
    Tick,
    /// The local breaker just opened: act now, not at the next tick.
    Tripped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    pub api_unavailable: bool,
    pub breaker_open: bool,
    pub marker: bool,
    /// `false` while Redis cannot be reached: the verdict rests on the breaker alone.
    pub redis_ok: bool,
}

pub use crate::core::classify::CallOutcome;

/// Per-second counter for the flood guard.
#[derive(Debug, Default)]
struct RateCounter {
    second: u64,
    count: u64,
}

pub struct Health {
    breaker: Mutex<Breaker>,
    verdict: watch::Sender<Verdict>,
    flood: Mutex<RateCounter>,
    flood_limit: f64,
    park_flood: Mutex<RateCounter>,
    park_flood_limit: f64,
    started: Instant,
    /// The breaker's last transition and its wall-clock time (ms), for `/status`.
    last: Mutex<Option<(Transition, i64)>>,
    /// The breaker is away from `closed` because of a systemic failure (a
    /// certificate, the credentials): see [`Health::systemic_outage`].
    systemic: std::sync::atomic::AtomicBool,
}

impl Health {
    pub fn new(cfg: &DegradedConfig) -> Health {
        Health {
            breaker: Mutex::new(Breaker::new(cfg.breaker())),
            verdict: watch::Sender::new(Verdict::default()),
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

    /// Keeps `t` as the last transition. Called with the breaker's lock held, so
    /// transitions are kept in the order they happened.
    fn noted(&self, t: Option<Transition>) -> Option<Transition> {
        if let Some(t) = t {
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

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn verdict(&self) -> Verdict {
        *self.verdict.borrow()
    }

    /// Publishes a new verdict; `true` if it changed.
    pub fn publish(&self, v: Verdict) -> bool {
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
        self.breaker().is_open(now)
    }

    pub fn breaker_state(&self, now: Instant) -> BreakerStateKind {
        self.breaker().state(now)
    }

    /// Waits until the breaker admits a call. While it is open, nothing is sent
    /// (the events wait, their partitions pause); half-open admits a few probes.
    pub async fn gate(&self) {
        loop {
            if self.admit_now() {
                return;
            }
            // The breaker changes state with time (open → half-open), so a short
            // re-check is what waiting on it means.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the breaker admits a call now (a half-open breaker counts the
    /// admission as its probe); [`Health::gate`] waits until it does.
    pub fn admit_now(&self) -> bool {
        let now = Instant::now();
        let mut b = self.breaker();
        self.noted(b.advance(now));
        b.allow(now)
    }

    /// Records a call's outcome; returns the transition if the breaker moved.
    pub fn record(&self, outcome: CallOutcome) -> Option<Transition> {
        let now = Instant::now();
        let mut b = self.breaker();
        let t = match outcome {
            CallOutcome::Up => b.record(now, true),
            CallOutcome::Failed => b.record(now, false),
            CallOutcome::Systemic(reason) => {
                self.systemic
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                // Report whichever moved the breaker (a half-open probe failing, or
                // the trip itself); tripping an already open breaker reports nothing.
                let recorded = b.record(now, false);
                b.trip(now, reason).or(recorded)
            }
        };
        self.noted(t)
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
            let mut b = self.breaker();
            let t = b.trip(now, reason);
            self.noted(t)
        } else {
            None
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
        let h = Health::new(&DegradedConfig {
            breaker_open: Duration::from_millis(1),
            breaker_half_open_probes: 1,
            ..cfg()
        });
        assert!(!h.systemic_outage());
        h.record(CallOutcome::Failed);
        assert!(!h.systemic_outage(), "a transient failure is not systemic");
        h.record(CallOutcome::Systemic("tls_client_cert"));
        assert!(h.systemic_outage());
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.systemic_outage(), "half-open still counts");
        // The probe succeeds: closed, the outage is over.
        {
            let mut b = h.breaker();
            b.advance(Instant::now());
            assert!(b.allow(Instant::now()), "a half-open probe is admitted");
        }
        h.record(CallOutcome::Up);
        assert_eq!(h.breaker_state(Instant::now()), BreakerStateKind::Closed);
        assert!(!h.systemic_outage());
    }

    #[test]
    fn systemic_answers_trip_at_once() {
        let h = Health::new(&cfg());
        assert_eq!(h.record(CallOutcome::Up), None);
        let t = h
            .record(CallOutcome::Systemic("tls_untrusted"))
            .expect("401/403 and TLS failures open the breaker");
        assert_eq!(t.to, BreakerStateKind::Open);
        assert_eq!(t.reason.as_str(), "tls_untrusted");
        assert!(h.breaker_is_open(Instant::now()));
        let (last, at_ms) = h
            .last_transition()
            .expect("the transition is kept for /status");
        assert_eq!((last, at_ms > 0), (t, true));
    }

    #[test]
    fn a_dlq_flood_trips_the_breaker() {
        let h = Health::new(&cfg());
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
        let h = Health::new(&DegradedConfig {
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
        let off = Health::new(&DegradedConfig {
            flood_parked_per_sec: 0.0,
            ..cfg()
        });
        for _ in 0..10_000 {
            assert_eq!(off.parked_by_api(), None);
        }
    }

    #[test]
    fn flood_guard_can_be_off() {
        let h = Health::new(&DegradedConfig {
            flood_dlq_per_sec: 0.0,
            ..DegradedConfig::default()
        });
        for _ in 0..10_000 {
            assert_eq!(h.dlq_written(), None);
        }
    }

    #[test]
    fn verdict_changes_are_reported_once() {
        let h = Health::new(&cfg());
        let v = Verdict {
            api_unavailable: true,
            breaker_open: true,
            marker: false,
            redis_ok: true,
        };
        assert!(h.publish(v));
        assert!(!h.publish(v));
        assert_eq!(h.verdict(), v);
    }
}
