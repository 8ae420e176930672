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
//! - `Breaker::admits_traffic` (tests only) answers "would `allow` say yes now?"
//!   without taking a probe slot.
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
//!
//! # Parts
//!
//! | file | holds |
//! |---|---|
//! | `config.rs` | [`BreakerConfig`] and its load-time check ([`BreakerConfigError`]) |
//! | `state.rs` | the states ([`BreakerState`], [`BreakerStateKind`]) and the [`Transition`]s reported, with their [`TransitionReason`] |
//! | `window.rs` | the bucketed sliding window of outcomes the failure rate is read from |
//! | `machine.rs` | [`Breaker`]: admission (`allow`), outcomes (`record`), the time-driven steps (`advance`), `trip`, `release` |
//! | `systemic.rs` | the suspicion of a systemic answer: [`Breaker::systemic`], [`Breaker::systemic_repeat`], [`Breaker::allow_suspect`] |
//! | `gate.rs` | [`GateQueue`]: the order in which waiting calls take the probe slots |
//! | `tests.rs` | what the parts' tests share, and the proptest over all of [`Breaker`]'s methods |

mod config;
mod gate;
mod machine;
mod state;
mod systemic;
mod window;

pub(crate) use config::BreakerConfig;
pub(crate) use gate::GateQueue;
pub(crate) use machine::Breaker;
pub(crate) use state::{BreakerState, BreakerStateKind, Transition, TransitionReason};

#[cfg(test)]
mod tests;
