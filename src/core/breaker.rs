//! The local circuit breaker (Resilience4j's model), with an injected clock.
//!
//! ```text
//!            failure rate ≥ threshold            open_for elapsed
//!   Closed ─────────────────────────────▶ Open ──────────────────▶ HalfOpen
//!     ▲      (over a sliding time window,   ▲                        │  │
//!     │       once min_calls were seen)     └──── a probe fails ─────┘  │
//!     └──────────────── all half_open_probes succeed ───────────────────┘
//! ```
//!
//! `trip` forces `Open` from any state: the DLQ and parking flood guards are
//! verdicts about the API, not about one call, so they do not wait for the failure
//! rate to build up. A systemic answer (401/403, TLS) is a hypothesis instead
//! (`core::systemic`): [`Breaker::systemic`] makes a closed breaker half-open at
//! once — *optimistic* at first (every fresh call admitted, until
//! `half_open_probes` of them were refused too or `open_for` passed), then with
//! probe slots — one delivered call refutes it, and it opens only once fresh
//! calls were refused and the period is `open_for` old. [`GateQueue`] orders the
//! waiting calls so the probes rotate.
//!
//! # What the pipeline reads
//!
//! - [`Breaker::is_open`] is the breaker's share of `api_unavailable` (degraded mode: `core::fsm`):
//!   true only while `Open` and its interval has not elapsed. It is *false* in
//!   `HalfOpen`, because the partitions must un-pause for the probes to exist at all;
//!   if `HalfOpen` counted as unavailable, nothing would ever be sent and the breaker
//!   could never close.
//! - [`Breaker::allow`] gates each call. In `HalfOpen` it admits exactly
//!   `half_open_probes` calls; the rest are refused and should wait (not fail, not go
//!   to the DLQ) until the probes have settled the state.
//! - [`Breaker::admits_traffic`] answers "would `allow` say yes now?" without taking a
//!   probe slot, for a dispatcher that wants to hold work back instead of asking.
//!
//! # Outcomes are not tied to permits
//!
//! As in Resilience4j, `record` takes an outcome, not a permit, so an outcome of a
//! call admitted before a transition can arrive after it. Outcomes arriving while
//! `Open` are ignored (the verdict is already made). In `HalfOpen` an outcome counts
//! as a probe only while some admitted probe has not reported yet, so a straggler can
//! never settle a half-open period that admitted nobody.
//!
//! Pure: no clock is read here; every method takes `now`.

use std::time::{Duration, Instant};

/// The shortest a cautious half-open period's probes wait for their answers
/// before their slots are freed (`open_for` when longer).
pub const MIN_PROBE_WAIT: Duration = Duration::from_secs(1);

/// Outcomes are aggregated into this many buckets spanning the window, as
/// Resilience4j aggregates per epoch second: memory stays constant whatever the
/// call rate and the window length.
const BUCKETS: usize = 10;

#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// Sliding time window of call outcomes that the failure rate is computed over.
    pub window: Duration,
    /// No verdict below this many calls in the window: two failures out of three
    /// calls say nothing about the API.
    pub min_calls: u32,
    /// Opens when `failures / calls >= failure_rate` (and `calls >= min_calls`).
    /// In `(0, 1]`.
    pub failure_rate: f64,
    /// How long `Open` refuses every call before probing.
    pub open_for: Duration,
    /// Calls admitted in `HalfOpen`; all must succeed to close.
    pub half_open_probes: u32,
    /// Opens after this many failures in a row, whatever the window says (0 = off).
    /// At high throughput the window holds thousands of recent successes, so the
    /// rate alone reacts to a sudden, total outage only after as many failures;
    /// a run of failures with no success between them is the faster, surer sign.
    pub consecutive_failures: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(10),
            min_calls: 20,
            failure_rate: 0.5,
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
            consecutive_failures: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BreakerConfigError {
    #[error("breaker window must be positive")]
    ZeroWindow,
    #[error("breaker min_calls must be at least 1")]
    ZeroMinCalls,
    #[error("breaker failure_rate must be in (0, 1], got {0}")]
    FailureRate(f64),
    #[error("breaker half_open_probes must be at least 1")]
    ZeroProbes,
}

impl BreakerConfig {
    /// Checks the config at load time. A rate of 0 would open on successes alone,
    /// zero probes would leave `HalfOpen` forever.
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        if self.window.is_zero() {
            return Err(BreakerConfigError::ZeroWindow);
        }
        if self.min_calls == 0 {
            return Err(BreakerConfigError::ZeroMinCalls);
        }
        if !(self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            return Err(BreakerConfigError::FailureRate(self.failure_rate));
        }
        if self.half_open_probes == 0 {
            return Err(BreakerConfigError::ZeroProbes);
        }
        Ok(())
    }
}

/// The stored state. `Open` past its `until` is still stored as `Open` until a
/// mutating call ([`Breaker::allow`] or [`Breaker::advance`]) moves it; the read-only
/// methods already report it as `HalfOpen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open { until: Instant },
    HalfOpen { admitted: u32, succeeded: u32 },
}

/// The state without its data, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerStateKind {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerStateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerStateKind::Closed => "closed",
            BreakerStateKind::Open => "open",
            BreakerStateKind::HalfOpen => "half_open",
        }
    }
    /// A gauge value: 0 closed, 1 half-open, 2 open (the usual encoding).
    pub fn as_gauge(self) -> f64 {
        match self {
            BreakerStateKind::Closed => 0.0,
            BreakerStateKind::HalfOpen => 1.0,
            BreakerStateKind::Open => 2.0,
        }
    }
}

/// Why the state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionReason {
    /// Closed → Open: the failure rate over the window reached the threshold.
    FailureRate,
    /// Closed → Open: `consecutive_failures` failures in a row.
    ConsecutiveFailures,
    /// Open → HalfOpen: `open_for` elapsed.
    OpenElapsed,
    /// HalfOpen → Closed: every probe succeeded.
    ProbesSucceeded,
    /// HalfOpen → Closed: a probe of a suspected systemic failure succeeded
    /// (the API does not refuse every call).
    Refuted,
    /// HalfOpen → Open: a probe failed.
    ProbeFailed,
    /// Any → Open by [`Breaker::trip`], with the caller's reason (`"systemic"`,
    /// `"dlq_flood"`, ...).
    Forced(&'static str),
}

impl TransitionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionReason::FailureRate => "failure_rate",
            TransitionReason::ConsecutiveFailures => "consecutive_failures",
            TransitionReason::OpenElapsed => "open_elapsed",
            TransitionReason::ProbesSucceeded => "probes_succeeded",
            TransitionReason::Refuted => "refuted",
            TransitionReason::ProbeFailed => "probe_failed",
            TransitionReason::Forced(r) => r,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: BreakerStateKind,
    pub to: BreakerStateKind,
    pub reason: TransitionReason,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    calls: u32,
    failures: u32,
}

/// Outcomes of the last `window`, in [`BUCKETS`] buckets of `window / BUCKETS`.
///
/// An outcome older than `window` is always expired; because buckets expire whole,
/// one may expire up to one bucket width early. Epochs count bucket widths since the
/// origin, set one window before the first recorded outcome, and the highest epoch
/// seen acts as the present: an outcome time-stamped slightly in the past (outcomes
/// reach the actor out of order) still lands in its bucket, and one older than the
/// window is dropped rather than counted in, or corrupting, a newer bucket.
#[derive(Debug, Clone)]
struct Window {
    span: Duration,
    width_nanos: u128,
    origin: Option<Instant>,
    high: u64,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    fn new(window: Duration) -> Self {
        Window {
            span: window,
            width_nanos: (window.as_nanos() / BUCKETS as u128).max(1),
            origin: None,
            high: 0,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn epoch(&self, now: Instant) -> u64 {
        match self.origin {
            None => 0,
            Some(o) => {
                let e = now.saturating_duration_since(o).as_nanos() / self.width_nanos;
                u64::try_from(e).unwrap_or(u64::MAX)
            }
        }
    }

    fn record(&mut self, now: Instant, success: bool) {
        let span = self.span;
        let origin = *self
            .origin
            .get_or_insert_with(|| now.checked_sub(span).unwrap_or(now));
        if now < origin {
            return; // more than a window before the first outcome seen
        }
        let e = self.epoch(now);
        self.high = self.high.max(e);
        if e.saturating_add(BUCKETS as u64) <= self.high {
            return; // older than the window
        }
        let b = &mut self.buckets[(e % BUCKETS as u64) as usize];
        if b.epoch != e {
            // The slot holds an expired epoch (a newer one in this slot would be at
            // least a full window ahead of `e`, which was refused above).
            *b = Bucket {
                epoch: e,
                calls: 0,
                failures: 0,
            };
        }
        b.calls = b.calls.saturating_add(1);
        if !success {
            b.failures = b.failures.saturating_add(1);
        }
    }

    /// `(calls, failures)` within the window ending at `now`.
    fn totals(&self, now: Instant) -> (u32, u32) {
        let present = self.epoch(now).max(self.high);
        self.buckets
            .iter()
            .filter(|b| b.epoch.saturating_add(BUCKETS as u64) > present)
            .fold((0u32, 0u32), |(c, f), b| {
                (c.saturating_add(b.calls), f.saturating_add(b.failures))
            })
    }

    fn clear(&mut self) {
        self.buckets = [Bucket::default(); BUCKETS];
        self.origin = None;
        self.high = 0;
    }
}

#[derive(Debug, Clone)]
pub struct Breaker {
    cfg: BreakerConfig,
    state: BreakerState,
    window: Window,
    /// Failures since the last success (Closed only).
    streak: u32,
    /// The half-open period began with a systemic answer ([`Breaker::systemic`]):
    /// one probe's success refutes it; it is confirmed (open, with the answer's
    /// reason) once every probe slot was used and every probe failed.
    suspected: bool,
    /// Probes of a suspected period that failed so far.
    suspect_failed: u32,
    /// A suspected period is *optimistic* until `half_open_probes` calls of
    /// events not refused before were refused too, or it is `open_for` old:
    /// every fresh call is admitted (the others' calls are the test, and one
    /// tenant's refusal costs nobody a wait); then it is *cautious*, the
    /// probe slots of any half-open period.
    optimistic: bool,
    /// When the current half-open period began (`None` outside one).
    half_open_since: Option<Instant>,
    /// Probe slots of this half-open period taken by *suspects* (events that
    /// were refused systemic before: [`Breaker::allow_suspect`]).
    suspects_admitted: u32,
    /// Suspects' probes of this period refused again
    /// ([`Breaker::systemic_repeat`]): the slot is settled, the answer is
    /// neutral (it repeats what was known).
    repeats: u32,
    /// Counts the periods whose admissions are counted afresh (every change
    /// of state, the end of optimism, slots freed by time): an admission
    /// released after its period ended frees nothing ([`Breaker::release`]).
    epoch: u64,
    /// When the oldest probe of a cautious half-open period still waiting
    /// for its answer was admitted, or the last outcome heard since, if
    /// later: `open_for` after it, its unanswered slots are freed.
    probes_since: Option<Instant>,
}

impl Breaker {
    /// A closed breaker. The config is used as given (call
    /// [`BreakerConfig::validate`] at load time); degenerate values do not panic:
    /// zero probes are treated as one.
    pub fn new(cfg: BreakerConfig) -> Self {
        Breaker {
            window: Window::new(cfg.window),
            cfg,
            state: BreakerState::Closed,
            streak: 0,
            suspected: false,
            suspect_failed: 0,
            optimistic: false,
            half_open_since: None,
            suspects_admitted: 0,
            repeats: 0,
            epoch: 0,
            probes_since: None,
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// The stored state (see [`BreakerState`] for the lazy Open → HalfOpen step).
    pub fn raw_state(&self) -> BreakerState {
        self.state
    }

    fn probes(&self) -> u32 {
        self.cfg.half_open_probes.max(1)
    }

    /// The state as of `now`, for metrics: an `Open` whose interval has elapsed is
    /// reported as `HalfOpen`.
    pub fn state(&self, now: Instant) -> BreakerStateKind {
        match self.state {
            BreakerState::Closed => BreakerStateKind::Closed,
            BreakerState::Open { until } if now < until => BreakerStateKind::Open,
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => BreakerStateKind::HalfOpen,
        }
    }

    /// True while `Open` and the open interval has not elapsed: the breaker's input
    /// to `api_unavailable`. False in `HalfOpen` (see the module docs for why).
    pub fn is_open(&self, now: Instant) -> bool {
        self.state(now) == BreakerStateKind::Open
    }

    /// Whether [`Breaker::allow`] would admit a call at `now`, without taking a
    /// probe slot.
    pub fn admits_traffic(&self, now: Instant) -> bool {
        match self.state {
            BreakerState::Closed => true,
            BreakerState::Open { until } => now >= until,
            BreakerState::HalfOpen { admitted, .. } => {
                self.optimistic || admitted < self.probes() || self.probes_lapsed(now)
            }
        }
    }

    /// Applies the time-driven transition (Open → HalfOpen once `open_for` has
    /// elapsed) and reports it. [`Breaker::allow`] does this itself; call it
    /// directly to log or count the transition when it happens.
    pub fn advance(&mut self, now: Instant) -> Option<Transition> {
        match self.state {
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                };
                self.new_period(now);
                Some(Transition {
                    from: BreakerStateKind::Open,
                    to: BreakerStateKind::HalfOpen,
                    reason: TransitionReason::OpenElapsed,
                })
            }
            BreakerState::HalfOpen { .. } if self.optimistic && self.lapsed(now) => {
                // Nothing refuted it for `open_for`: the probes decide now.
                self.be_cautious();
                None
            }
            BreakerState::HalfOpen { .. } if self.probes_lapsed(now) => {
                // A cautious period ends by time too: probes unanswered for
                // `open_for` (an answer no path reported) free their slots,
                // so the next waiters probe instead of waiting for ever.
                if let BreakerState::HalfOpen {
                    admitted,
                    succeeded,
                } = &mut self.state
                {
                    *admitted = *succeeded + self.repeats;
                }
                self.suspects_admitted = 0;
                self.epoch += 1;
                self.probes_since = None;
                None
            }
            _ => None,
        }
    }

    /// Whether a cautious half-open period's probes have waited for their
    /// answers for `open_for` (at least [`MIN_PROBE_WAIT`]) since the first
    /// of them was admitted or the last answer was heard.
    fn probes_lapsed(&self, now: Instant) -> bool {
        let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = self.state
        else {
            return false;
        };
        !self.optimistic
            && admitted > succeeded + self.repeats
            && self
                .probes_since
                .is_some_and(|since| now >= since + self.cfg.open_for.max(MIN_PROBE_WAIT))
    }

    /// Whether calls are admitted one probe slot each now (half-open, and not
    /// in a suspected period's optimism, which admits every fresh call).
    pub fn probing(&self) -> bool {
        matches!(self.state, BreakerState::HalfOpen { .. }) && !self.optimistic
    }

    /// The epoch an admission made now belongs to (see [`Breaker::release`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// An admitted call that will never be answered (dropped before its
    /// request, or its answer lost on the way): its half-open slot is freed
    /// for the next waiter, if it was admitted in this `epoch` and its slot
    /// is still waiting for an answer. Says nothing about the API. `suspect`:
    /// it was admitted as a suspect ([`Breaker::allow_suspect`]).
    pub fn release(&mut self, epoch: u64, suspect: bool) {
        if epoch != self.epoch {
            return;
        }
        if let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = &mut self.state
        {
            if *admitted > *succeeded + self.repeats {
                *admitted -= 1;
                if suspect {
                    self.suspects_admitted = self.suspects_admitted.saturating_sub(1);
                }
            }
        }
    }

    /// Whether the half-open period is `open_for` old.
    fn lapsed(&self, now: Instant) -> bool {
        self.half_open_since
            .is_none_or(|since| now >= since + self.cfg.open_for)
    }

    /// The suspected period's optimism ends: from here its probe slots are
    /// counted afresh (the calls admitted optimistically are not probes; one
    /// of them delivered still refutes it, through a probe's slot).
    fn be_cautious(&mut self) {
        self.optimistic = false;
        self.epoch += 1;
        self.probes_since = None;
        self.state = BreakerState::HalfOpen {
            admitted: 0,
            succeeded: 0,
        };
        self.suspects_admitted = 0;
        self.repeats = 0;
    }

    /// A fresh call of a suspected period was refused (or failed): evidence.
    /// Optimistic, it counts, and `half_open_probes` of them end the optimism;
    /// cautious, its slot goes to the next waiter, so calls of other events
    /// keep testing the hypothesis.
    fn suspect_evidence(&mut self) {
        self.suspect_failed += 1;
        if self.optimistic {
            if self.suspect_failed >= self.probes() {
                self.be_cautious();
            }
        } else if let BreakerState::HalfOpen { admitted, .. } = &mut self.state {
            *admitted = admitted.saturating_sub(1);
        }
    }

    /// Asks to make one call at `now`. Closed: yes. Open: no, until the interval has
    /// elapsed; then HalfOpen. HalfOpen: yes for the first `half_open_probes` calls
    /// of the period, then no until the probes have settled the state.
    pub fn allow(&mut self, now: Instant) -> bool {
        self.advance(now);
        let probes = self.probes();
        match &mut self.state {
            BreakerState::Closed => true,
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if self.optimistic {
                    *admitted = admitted.saturating_add(1);
                    true
                } else if *admitted < probes {
                    if *admitted <= *succeeded + self.repeats {
                        // The first probe waiting for its answer.
                        self.probes_since = Some(now);
                    }
                    *admitted += 1;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Records the outcome of a call that finished at `now`; returns the transition
    /// if the outcome changed the state.
    pub fn record(&mut self, now: Instant, success: bool) -> Option<Transition> {
        let probes = self.probes();
        match &mut self.state {
            BreakerState::Closed => {
                self.window.record(now, success);
                self.streak = if success {
                    0
                } else {
                    self.streak.saturating_add(1)
                };
                if self.cfg.consecutive_failures > 0 && self.streak >= self.cfg.consecutive_failures
                {
                    return Some(self.open(
                        now,
                        BreakerStateKind::Closed,
                        TransitionReason::ConsecutiveFailures,
                    ));
                }
                let (calls, failures) = self.window.totals(now);
                let over = calls >= self.cfg.min_calls.max(1)
                    && failures > 0
                    && f64::from(failures) >= self.cfg.failure_rate * f64::from(calls);
                if over {
                    return Some(self.open(
                        now,
                        BreakerStateKind::Closed,
                        TransitionReason::FailureRate,
                    ));
                }
                None
            }
            // Stragglers from calls admitted before the trip: the verdict is made.
            BreakerState::Open { .. } => None,
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if *succeeded + self.repeats >= *admitted {
                    return None; // no probe is waiting for an outcome
                }
                if self.probes_since.is_some() {
                    self.probes_since = Some(now);
                }
                if self.suspected {
                    if success {
                        return Some(self.close(TransitionReason::Refuted));
                    }
                    self.suspect_evidence();
                    return self.confirmed(now).then(|| {
                        self.open(
                            now,
                            BreakerStateKind::HalfOpen,
                            TransitionReason::ProbeFailed,
                        )
                    });
                }
                if !success {
                    return Some(self.open(
                        now,
                        BreakerStateKind::HalfOpen,
                        TransitionReason::ProbeFailed,
                    ));
                }
                *succeeded += 1;
                // Every slot settled: the suspects' refusals repeat what was
                // known, the successes say the API is up.
                if *succeeded + self.repeats >= probes {
                    return Some(self.close(TransitionReason::ProbesSucceeded));
                }
                None
            }
        }
    }

    /// Forces `Open` for `open_for` from `now`, whatever the state. Tripping an
    /// already open breaker extends it (never shortens it) and reports nothing, so a
    /// systemic condition that persists keeps the breaker open without flooding the
    /// log with transitions.
    pub fn trip(&mut self, now: Instant, reason: &'static str) -> Option<Transition> {
        let from = self.state(now);
        match self.state {
            BreakerState::Open { until } if now < until => {
                self.state = BreakerState::Open {
                    until: until.max(now + self.cfg.open_for),
                };
                None
            }
            _ => Some(self.open(now, from, TransitionReason::Forced(reason))),
        }
    }

    /// A systemic answer (401, 403, TLS, …) that nothing refuted
    /// (`core::systemic::judge`). Closed: the hypothesis "the API refuses every
    /// call" is *suspected* — half-open at once, with the reason, instead of
    /// every partition pausing for `open_for` on one event's word. The period
    /// is optimistic first: every fresh call goes and tests it, until
    /// `half_open_probes` of them were refused too or it is `open_for` old;
    /// then the next `half_open_probes` calls do (other events', if any wait:
    /// see [`GateQueue`]). One delivered call refutes it (closed, `refuted`),
    /// and it is confirmed (open, with the answer's reason) only once
    /// `half_open_probes` fresh calls were refused and it is `open_for` old —
    /// so one more refused event among the calls does not pause everyone.
    /// Half-open after an open interval: a probe's systemic answer reopens it
    /// (`probe_failed`). A `straggler` (a call sent before the period) is
    /// ignored. Open: extended, as [`Breaker::trip`].
    pub fn systemic(
        &mut self,
        now: Instant,
        reason: &'static str,
        straggler: bool,
    ) -> Option<Transition> {
        match self.state(now) {
            BreakerStateKind::Closed => {
                self.state = BreakerState::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                };
                self.new_period(now);
                self.suspected = true;
                self.optimistic = true;
                self.streak = 0;
                Some(Transition {
                    from: BreakerStateKind::Closed,
                    to: BreakerStateKind::HalfOpen,
                    reason: TransitionReason::Forced(reason),
                })
            }
            BreakerStateKind::Open => self.trip(now, reason),
            BreakerStateKind::HalfOpen if straggler => None,
            BreakerStateKind::HalfOpen if self.suspected => {
                let (admitted, succeeded) = match self.state {
                    BreakerState::HalfOpen {
                        admitted,
                        succeeded,
                    } => (admitted, succeeded),
                    _ => (0, 0),
                };
                if succeeded + self.repeats >= admitted {
                    return None; // not a probe's answer
                }
                self.suspect_evidence();
                self.confirmed(now).then(|| {
                    self.open(
                        now,
                        BreakerStateKind::HalfOpen,
                        TransitionReason::Forced(reason),
                    )
                })
            }
            BreakerStateKind::HalfOpen => Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::ProbeFailed,
            )),
        }
    }

    /// A suspect's systemic answer (its event was refused systemic before, and
    /// nothing refuted that yet): in a half-open period it repeats what was
    /// known, so it settles the suspect's probe slot without a verdict — one
    /// refused event, or a burst of them from one tenant, cannot hold the
    /// breaker open, and whether the API refuses every call is left to the
    /// other probes ([`Breaker::allow_suspect`] keeps a slot for a fresh event
    /// until the period is `open_for` old). The period is settled once every
    /// slot was used: closed if a probe was delivered, else open (`reason` in
    /// a suspected period, `probe_failed` after an open interval). Closed or
    /// open: as [`Breaker::systemic`].
    pub fn systemic_repeat(
        &mut self,
        now: Instant,
        reason: &'static str,
        straggler: bool,
    ) -> Option<Transition> {
        if self.state(now) != BreakerStateKind::HalfOpen || straggler {
            return self.systemic(now, reason, straggler);
        }
        self.advance(now);
        let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = self.state
        else {
            return None;
        };
        if succeeded + self.repeats >= admitted {
            return None; // not a probe's answer
        }
        self.repeats += 1;
        if self.confirmed(now) || (self.suspected && self.lapsed(now)) {
            // Suspected for `open_for`, nothing delivered since (it would be
            // closed), and refused again, whoever probed: confirmed.
            return Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::Forced(reason),
            ));
        }
        if admitted < self.probes() || succeeded + self.repeats < admitted {
            return None;
        }
        if succeeded > 0 {
            return Some(self.close(TransitionReason::ProbesSucceeded));
        }
        if !self.suspected {
            // After an open interval: nothing was delivered, as before.
            return Some(self.open(
                now,
                BreakerStateKind::HalfOpen,
                TransitionReason::ProbeFailed,
            ));
        }
        // Only suspects probed a young suspected period, and they said what
        // was known: no verdict — the breaker stays half-open (no partition
        // pauses, no marker is written on the suspects' word) and a new
        // period begins.
        self.state = BreakerState::HalfOpen {
            admitted: 0,
            succeeded: 0,
        };
        let (failed, suspected) = (self.suspect_failed, self.suspected);
        self.new_period(now);
        if suspected {
            self.suspect_failed = failed;
        }
        None
    }

    /// A suspected period is confirmed once `half_open_probes` calls of
    /// events not refused before were refused too, and it is `open_for` old:
    /// a burst of one tenant's refused events, however many, cannot confirm
    /// it while the calls of other events keep being delivered.
    fn confirmed(&self, now: Instant) -> bool {
        self.suspected
            && self.suspect_failed >= self.probes()
            && self
                .half_open_since
                .is_none_or(|since| now >= since + self.cfg.open_for)
    }

    /// Asks for a probe slot for a *suspect* (an event refused systemic
    /// before). Closed: yes; open: no. Half-open: while slots are free, and
    /// suspects hold fewer than `half_open_probes - 1` of them — at least one
    /// is kept for an event that was not refused, so the period tests the API
    /// rather than the suspects — unless the period is `open_for` old (no such
    /// event came: the suspects alone may end it).
    pub fn allow_suspect(&mut self, now: Instant) -> bool {
        self.advance(now);
        if let BreakerState::HalfOpen { .. } = self.state {
            let lapsed = self
                .half_open_since
                .is_none_or(|since| now >= since + self.cfg.open_for);
            if self.suspects_admitted + 1 >= self.probes() && !lapsed {
                return false;
            }
            let ok = self.allow(now);
            if ok {
                self.suspects_admitted += 1;
            }
            return ok;
        }
        self.allow(now)
    }

    fn new_period(&mut self, now: Instant) {
        self.epoch += 1;
        self.probes_since = None;
        self.half_open_since = Some(now);
        self.suspects_admitted = 0;
        self.repeats = 0;
        self.suspect_failed = 0;
    }

    fn close(&mut self, reason: TransitionReason) -> Transition {
        self.epoch += 1;
        self.probes_since = None;
        self.state = BreakerState::Closed;
        self.suspected = false;
        self.optimistic = false;
        self.half_open_since = None;
        self.window.clear();
        Transition {
            from: BreakerStateKind::HalfOpen,
            to: BreakerStateKind::Closed,
            reason,
        }
    }

    fn open(
        &mut self,
        now: Instant,
        from: BreakerStateKind,
        reason: TransitionReason,
    ) -> Transition {
        self.epoch += 1;
        self.probes_since = None;
        self.suspected = false;
        self.optimistic = false;
        self.suspect_failed = 0;
        self.half_open_since = None;
        self.state = BreakerState::Open {
            until: now + self.cfg.open_for,
        };
        self.window.clear();
        self.streak = 0;
        Transition {
            from,
            to: BreakerStateKind::Open,
            reason,
        }
    }
}

/// The order in which calls waiting at a breaker that is not closed take its
/// half-open probe slots: first come, first served, and a waiter that comes
/// back (its call was refused: it just probed and failed, or its systemic
/// answer tripped the breaker) joins behind everyone already waiting. So the
/// probes rotate over the waiting events, across partitions and keys, and one
/// event answered systemic cannot be the probe again and again while others
/// wait. *Suspects* (events refused systemic before) go after every fresh
/// waiter and take slots only through [`Breaker::allow_suspect`], so a period
/// tests the API with events that were not refused, when there are any.
/// While the breaker is closed every waiter is admitted at once.
#[derive(Debug, Default, Clone)]
pub struct GateQueue {
    next: u64,
    /// Ticket → whether its holder is a suspect.
    waiting: std::collections::BTreeMap<u64, bool>,
}

impl GateQueue {
    /// A ticket behind every waiter; `suspect`: the event was refused
    /// systemic before.
    pub fn join(&mut self, suspect: bool) -> u64 {
        self.next += 1;
        self.waiting.insert(self.next, suspect);
        self.next
    }

    /// The waiter leaves (admitted, or its wait was cancelled).
    pub fn leave(&mut self, ticket: u64) {
        self.waiting.remove(&ticket);
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    fn first_of(&self, suspect: bool) -> Option<u64> {
        self.waiting
            .iter()
            .find(|(_, s)| **s == suspect)
            .map(|(t, _)| *t)
    }

    /// Whether `ticket` may take a probe slot now: it is the longest waiting
    /// fresh event, or, while no fresh event waits, the longest waiting
    /// suspect.
    pub fn is_head(&self, ticket: u64) -> bool {
        match self.waiting.get(&ticket) {
            Some(false) => self.first_of(false) == Some(ticket),
            Some(true) => self.first_of(false).is_none() && self.first_of(true) == Some(ticket),
            None => false,
        }
    }

    /// Asks to admit the waiter holding `ticket` at `now`: closed, every waiter;
    /// half-open, only the head, while probe slots are free (a suspect: while
    /// [`Breaker::allow_suspect`] says so); it then leaves the queue. `false`:
    /// keep waiting.
    pub fn admit(&mut self, ticket: u64, breaker: &mut Breaker, now: Instant) -> bool {
        breaker.advance(now);
        let suspect = self.waiting.get(&ticket).copied().unwrap_or(false);
        let ok = match breaker.raw_state() {
            BreakerState::Closed => breaker.allow(now),
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen { .. } if suspect => {
                self.is_head(ticket) && breaker.allow_suspect(now)
            }
            BreakerState::HalfOpen { .. } => self.is_head(ticket) && breaker.allow(now),
        };
        if ok {
            self.leave(ticket);
        }
        ok
    }

    /// Asks to admit a newcomer that would not wait (the fast path): closed,
    /// yes; half-open only while nobody it must queue behind waits (a fresh
    /// event: no fresh waiter; a suspect: nobody).
    pub fn admit_newcomer(&self, suspect: bool, breaker: &mut Breaker, now: Instant) -> bool {
        breaker.advance(now);
        match breaker.raw_state() {
            BreakerState::Closed => breaker.allow(now),
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen { .. } if suspect => {
                self.is_empty() && breaker.allow_suspect(now)
            }
            BreakerState::HalfOpen { .. } => self.first_of(false).is_none() && breaker.allow(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
