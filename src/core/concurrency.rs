//! Adaptive concurrency: how many API calls may be in flight, decided from what
//! the API's answers say (pure: time is an input, no I/O).
//!
//! The algorithm is AIMD over round-trip windows, after Vector's Adaptive
//! Request Concurrency, with a slow start in front (docs/ARCHITECTURE.md says
//! why AIMD and not a gradient):
//!
//! - Every call's outcome is a [`Sample`]: an answer with its RTT, or a
//!   back-pressure signal (429, 503, a timeout), or nothing worth learning from.
//! - Samples are gathered in windows about one RTT long. When a window closes:
//!   - back-pressure in it, or its mean RTT above the baseline by more than the
//!     tolerance → the limit is multiplied by `decrease_ratio` (once per window,
//!     however many 429s it saw), and slow start ends;
//!   - otherwise, if the limit was reached in the window (a limit that was not
//!     used says nothing about a higher one) → slow start doubles it, then
//!     additive increase adds 1.
//! - The baseline is an exponentially weighted mean of the windows' RTTs, fed
//!   only by windows without back-pressure.
//! - The limit stays within `1..=max` (`pipeline.concurrency`).

use std::time::Duration;

/// What one call said about the API's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// An answer that was not back-pressure (2xx, or a 4xx that is the event's),
    /// after this round trip.
    Answered(Duration),
    /// 429, 503 or a timeout: the API (or something before it) is saturated.
    BackPressure,
    /// Nothing to learn (a refused connection, a request that was not built):
    /// the breaker deals with outages.
    Ignore,
}

/// The limiter's tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AimdConfig {
    /// Upper bound (`pipeline.concurrency`).
    pub max: usize,
    /// Where the limit starts (slow start grows it from there).
    pub initial: usize,
    /// Multiplier on back-pressure or a rising RTT.
    pub decrease_ratio: f64,
    /// A window's mean RTT above `baseline × (1 + rtt_tolerance)` is "rising".
    pub rtt_tolerance: f64,
    /// How slowly the baseline follows window RTTs above it: a window of
    /// length d moves it by d / `baseline_horizon` of the gap.
    pub baseline_horizon: Duration,
    /// Weight of a window's mean RTT below the baseline (it follows a faster
    /// API quickly).
    pub baseline_down_weight: f64,
    /// A rise smaller than this is never "rising" (scheduling noise on a
    /// fast API).
    pub rtt_floor: Duration,
    /// After this many windows in a row with a rising RTT the API is taken to
    /// be slower for good: their mean becomes the baseline.
    pub rebase_after: u32,
    /// Clean windows spent just below the limit that last met back-pressure
    /// before probing it again (each probe of a hard capacity costs a 429 or
    /// two; this spaces them out).
    pub plateau_windows: u32,
    /// Windows last about one baseline RTT, within these bounds.
    pub min_window: Duration,
    pub max_window: Duration,
}

impl AimdConfig {
    pub fn new(max: usize) -> AimdConfig {
        let max = max.max(1);
        AimdConfig {
            max,
            initial: 8.min(max),
            decrease_ratio: 0.9,
            rtt_tolerance: 0.5,
            baseline_horizon: Duration::from_secs(30),
            baseline_down_weight: 0.5,
            rtt_floor: Duration::from_millis(2),
            rebase_after: 8,
            plateau_windows: 16,
            min_window: Duration::from_millis(10),
            max_window: Duration::from_secs(1),
        }
    }
}

/// Why the limit moved (for a debug log line and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    SlowStart,
    Increase,
    BackPressure,
    RttRising,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::SlowStart => "slow_start",
            Change::Increase => "increase",
            Change::BackPressure => "back_pressure",
            Change::RttRising => "rtt_rising",
        }
    }
}

/// The AIMD limiter. `now` is any monotonic clock's reading (the caller's).
#[derive(Debug, Clone)]
pub struct Aimd {
    cfg: AimdConfig,
    limit: usize,
    slow_start: bool,
    /// EWMA of the windows' mean RTTs (seconds); `None` before the first window.
    baseline: Option<f64>,
    window_start: Option<Duration>,
    rtt_sum: f64,
    rtt_count: u32,
    back_pressure: bool,
    /// Highest in-flight count seen in this window.
    peak_in_flight: usize,
    /// Windows in a row whose RTT was rising.
    rising_run: u32,
    /// The limit at which back-pressure (or a rising RTT) was last met.
    ceiling: Option<usize>,
    /// Clean windows spent just below `ceiling`.
    plateau: u32,
    /// The limit before an outage cut it: slow start back up to it.
    recover_to: Option<usize>,
}

impl Aimd {
    pub fn new(cfg: AimdConfig) -> Aimd {
        Aimd {
            limit: cfg.initial.clamp(1, cfg.max.max(1)),
            cfg,
            slow_start: true,
            baseline: None,
            window_start: None,
            rtt_sum: 0.0,
            rtt_count: 0,
            back_pressure: false,
            peak_in_flight: 0,
            rising_run: 0,
            ceiling: None,
            plateau: 0,
            recover_to: None,
        }
    }

    /// The current limit on calls in flight (`1..=max`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The baseline RTT, once there is one.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline.map(Duration::from_secs_f64)
    }

    fn window_len(&self) -> Duration {
        let b = self.baseline().unwrap_or(self.cfg.min_window);
        b.clamp(self.cfg.min_window, self.cfg.max_window)
    }

    /// Takes one call's outcome; `in_flight` is the number of calls in flight
    /// when it ended (itself included). Returns the change when the window
    /// closed and the limit moved.
    pub fn observe(&mut self, now: Duration, sample: Sample, in_flight: usize) -> Option<Change> {
        let start = *self.window_start.get_or_insert(now);
        self.peak_in_flight = self.peak_in_flight.max(in_flight);
        match sample {
            Sample::Answered(rtt) => {
                self.rtt_sum += rtt.as_secs_f64();
                self.rtt_count += 1;
            }
            Sample::BackPressure => self.back_pressure = true,
            Sample::Ignore => {}
        }
        if now.saturating_sub(start) < self.window_len() {
            return None;
        }
        self.close_window(now)
    }

    fn close_window(&mut self, now: Duration) -> Option<Change> {
        let mean = (self.rtt_count > 0).then(|| self.rtt_sum / f64::from(self.rtt_count));
        let reached = self.peak_in_flight >= self.limit;
        let length = self
            .window_start
            .map_or(0.0, |s| now.saturating_sub(s).as_secs_f64());
        let back_pressure = self.back_pressure;
        self.window_start = Some(now);
        self.rtt_sum = 0.0;
        self.rtt_count = 0;
        self.back_pressure = false;
        self.peak_in_flight = 0;

        let rising = match (mean, self.baseline) {
            (Some(m), Some(b)) => {
                m > b * (1.0 + self.cfg.rtt_tolerance) && m > b + self.cfg.rtt_floor.as_secs_f64()
            }
            _ => false,
        };
        self.rising_run = if rising { self.rising_run + 1 } else { 0 };
        if self.rising_run >= self.cfg.rebase_after {
            self.baseline = mean;
            self.rising_run = 0;
        }
        // The baseline follows the RTT down quickly and up slowly, and not at
        // all from windows that saw back-pressure or a rising RTT: a queueing API
        // must not drag its own reference up with it.
        if !back_pressure && !rising {
            if let Some(m) = mean {
                self.baseline = Some(match self.baseline {
                    None => m,
                    Some(b) if m < b => b + self.cfg.baseline_down_weight * (m - b),
                    Some(b) => {
                        let w = (length / self.cfg.baseline_horizon.as_secs_f64()).min(1.0);
                        b + w * (m - b)
                    }
                });
            }
        }
        let before = self.limit;
        // Back-pressure and not one answer: an outage (everything 503 or timing
        // out), not the API's capacity. The limit is cut all the same, but the
        // level before it is kept, to come back to quickly once it answers.
        let outage = back_pressure && mean.is_none();
        let change = if back_pressure || rising {
            self.slow_start = false;
            if outage {
                self.recover_to.get_or_insert(self.limit);
            } else {
                self.recover_to = None;
                self.ceiling = Some(self.limit);
                self.plateau = 0;
            }
            let cut = (self.limit as f64 * self.cfg.decrease_ratio).floor() as usize;
            self.limit = cut.max(1);
            if back_pressure {
                Change::BackPressure
            } else {
                Change::RttRising
            }
        } else if reached && mean.is_some() {
            if let Some(level) = self.recover_to {
                self.limit = self.limit.saturating_mul(2).min(level).min(self.cfg.max);
                if self.limit >= level {
                    self.recover_to = None;
                }
                Change::SlowStart
            } else if self.slow_start {
                self.limit = self.limit.saturating_mul(2).min(self.cfg.max);
                Change::SlowStart
            } else if self.ceiling.is_some_and(|c| self.limit + 1 >= c) {
                // Just below where the API pushed back: wait a while before
                // probing it again.
                self.plateau += 1;
                if self.plateau < self.cfg.plateau_windows {
                    return None;
                }
                self.plateau = 0;
                self.ceiling = None;
                self.limit = (self.limit + 1).min(self.cfg.max);
                Change::Increase
            } else {
                self.limit = (self.limit + 1).min(self.cfg.max);
                Change::Increase
            }
        } else {
            return None;
        };
        (self.limit != before).then_some(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A simulated API: at most `capacity` calls at once, each taking `rtt`
    /// (plus `queue_rtt` per call above `knee`, modelling a server that queues);
    /// calls above capacity are answered 429 at once. The client keeps
    /// `limit` calls in flight; time advances in steps of `step`.
    struct SimApi {
        capacity: usize,
        rtt: Duration,
        knee: usize,
        queue_rtt: Duration,
        /// From..until: every call answered 503 at once.
        down: Option<(Duration, Duration)>,
    }

    struct Run {
        limits: Vec<usize>,
        answered: u64,
        rejected: u64,
        /// 429s after the first `settle` of the run.
        rejected_late: u64,
        calls_late: u64,
    }

    fn simulate(api: &SimApi, cfg: AimdConfig, duration: Duration, settle: Duration) -> Run {
        let mut aimd = Aimd::new(cfg);
        let step = Duration::from_millis(1);
        let mut now = Duration::ZERO;
        // The client's slots in use, as (end, answered by the server). A call
        // answered 429 holds its slot for one RTT more (the retry's backoff).
        let mut slots: Vec<(Duration, bool)> = Vec::new();
        let mut run = Run {
            limits: vec![],
            answered: 0,
            rejected: 0,
            rejected_late: 0,
            calls_late: 0,
        };
        let rtt_at = |n: usize| api.rtt + api.queue_rtt * n.saturating_sub(api.knee) as u32;
        while now < duration {
            let before = slots.len();
            let mut served_ended = 0;
            slots.retain(|&(end, served)| {
                let keep = end > now;
                served_ended += usize::from(!keep && served);
                keep
            });
            let after = slots.len();
            for i in 0..served_ended {
                let on_server = slots.iter().filter(|s| s.1).count() + served_ended - i;
                aimd.observe(
                    now,
                    Sample::Answered(rtt_at(on_server)),
                    after + before - after - i,
                );
                run.answered += 1;
            }
            while slots.len() < aimd.limit() {
                let late = now >= settle;
                run.calls_late += u64::from(late);
                let on_server = slots.iter().filter(|s| s.1).count();
                let down = api
                    .down
                    .is_some_and(|(from, until)| now >= from && now < until);
                if down || on_server >= api.capacity {
                    run.rejected += 1;
                    run.rejected_late += u64::from(late);
                    slots.push((now + api.rtt, false));
                    aimd.observe(now, Sample::BackPressure, slots.len());
                    continue;
                }
                slots.push((now + rtt_at(on_server + 1), true));
            }
            run.limits.push(aimd.limit());
            now += step;
        }
        run
    }

    #[test]
    fn converges_near_a_hidden_capacity_of_200() {
        let api = SimApi {
            capacity: 200,
            rtt: Duration::from_millis(20),
            knee: usize::MAX,
            queue_rtt: Duration::ZERO,
            down: None,
        };
        let r = simulate(
            &api,
            AimdConfig::new(2048),
            Duration::from_secs(20),
            Duration::from_secs(5),
        );
        let tail = &r.limits[r.limits.len() - 10_000..];
        let mean = tail.iter().sum::<usize>() as f64 / tail.len() as f64;
        assert!(
            (170.0..=205.0).contains(&mean),
            "mean limit over the last 10 s: {mean}"
        );
        let share = r.rejected_late as f64 / r.calls_late as f64;
        assert!(share < 0.01, "429 share after 5 s: {share}");
        assert!(r.answered > 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the capacity, the RTT and the bound: the limit stays within
        /// 1..=max, ends near min(capacity, max), and 429s are rare once settled.
        #[test]
        fn converges_and_stays_within_bounds(
            capacity in 1usize..400,
            rtt_ms in 2u64..60,
            max in 1usize..1024,
        ) {
            let api = SimApi {
                capacity,
                rtt: Duration::from_millis(rtt_ms),
                knee: usize::MAX,
                queue_rtt: Duration::ZERO,
                down: None,
            };
            let r = simulate(&api, AimdConfig::new(max), Duration::from_secs(30), Duration::from_secs(15));
            prop_assert!(r.limits.iter().all(|&l| (1..=max).contains(&l)));
            let target = capacity.min(max) as f64;
            let tail = &r.limits[r.limits.len() - 5_000..];
            let mean = tail.iter().sum::<usize>() as f64 / tail.len() as f64;
            // Near the target: the AIMD saw-tooth sits between 0.9 × and 1 × it,
            // minus one step of the cut for small targets.
            prop_assert!(mean <= target + 1.0, "mean {mean} above target {target}");
            prop_assert!(mean >= (target * 0.8 - 1.0).max(1.0), "mean {mean} far below target {target}");
            // A tiny capacity pays for each probe above it with a sizeable share
            // of its few calls; the case is K = 200.
            if r.calls_late > 0 && capacity >= 20 {
                let share = r.rejected_late as f64 / r.calls_late as f64;
                prop_assert!(share < 0.01, "429 share {share}");
            }
        }

        /// A server that queues beyond `knee` (RTT grows with load) without ever
        /// answering 429: the limit stops near the knee instead of growing to max.
        #[test]
        fn backs_off_on_rising_rtt(knee in 10usize..200, rtt_ms in 5u64..40) {
            let api = SimApi {
                capacity: usize::MAX,
                rtt: Duration::from_millis(rtt_ms),
                knee,
                queue_rtt: Duration::from_millis(rtt_ms) / 10,
                down: None,
            };
            let r = simulate(&api, AimdConfig::new(2048), Duration::from_secs(30), Duration::from_secs(15));
            let tail = &r.limits[r.limits.len() - 5_000..];
            let max_tail = *tail.iter().max().unwrap_or(&0);
            // RTT 50 % above the baseline is reached at knee + 5 calls; the
            // baseline creeps up a little under load, so allow 3 × the knee.
            prop_assert!(max_tail <= knee * 3 + 20, "limit {max_tail} far above the knee {knee}");
            prop_assert!(r.rejected == 0);
        }

        /// Any sequence of samples: the limit stays within 1..=max.
        #[test]
        fn never_leaves_its_bounds(
            max in 1usize..300,
            samples in proptest::collection::vec((0u8..3, 0u64..100, 0usize..400, 0u64..50), 1..400),
        ) {
            let mut a = Aimd::new(AimdConfig::new(max));
            let mut now = Duration::ZERO;
            for (kind, rtt, in_flight, dt) in samples {
                now += Duration::from_millis(dt);
                let s = match kind {
                    0 => Sample::Answered(Duration::from_millis(rtt)),
                    1 => Sample::BackPressure,
                    _ => Sample::Ignore,
                };
                a.observe(now, s, in_flight);
                prop_assert!((1..=max).contains(&a.limit()));
            }
        }
    }

    /// An outage (every call 503) cuts the limit; once the API answers again,
    /// slow start takes it back to its level before the outage within a few
    /// windows, instead of +1 per window.
    #[test]
    fn after_an_outage_the_limit_comes_back_quickly() {
        let api = SimApi {
            capacity: 200,
            rtt: Duration::from_millis(20),
            knee: usize::MAX,
            queue_rtt: Duration::ZERO,
            down: Some((Duration::from_secs(10), Duration::from_secs(15))),
        };
        let r = simulate(
            &api,
            AimdConfig::new(2048),
            Duration::from_secs(17),
            Duration::from_secs(17),
        );
        let before = r.limits[9_999];
        let during = *r.limits[10_000..15_000].iter().min().unwrap_or(&0);
        let after = r.limits[15_500];
        assert!(
            during < before / 4,
            "cut during the outage: {before} → {during}"
        );
        assert!(
            after as f64 >= before as f64 * 0.9,
            "back within 0.5 s: {before} before, {after} after"
        );
    }

    #[test]
    fn grows_while_rtt_is_flat_and_the_limit_is_used() {
        let mut a = Aimd::new(AimdConfig::new(1000));
        let start = a.limit();
        let mut now = Duration::ZERO;
        for _ in 0..200 {
            now += Duration::from_millis(5);
            a.observe(now, Sample::Answered(Duration::from_millis(20)), a.limit());
        }
        assert!(a.limit() > start * 4, "grew from {start} to {}", a.limit());
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut a = Aimd::new(AimdConfig::new(1000));
        let start = a.limit();
        let mut now = Duration::ZERO;
        for _ in 0..200 {
            now += Duration::from_millis(5);
            a.observe(now, Sample::Answered(Duration::from_millis(20)), 1);
        }
        assert_eq!(a.limit(), start);
    }

    #[test]
    fn back_pressure_cuts_once_per_window() {
        let mut a = Aimd::new(AimdConfig {
            initial: 100,
            ..AimdConfig::new(1000)
        });
        let mut now = Duration::ZERO;
        // Establish a baseline window.
        a.observe(now, Sample::Answered(Duration::from_millis(20)), 1);
        now += Duration::from_millis(20);
        a.observe(now, Sample::Answered(Duration::from_millis(20)), 1);
        assert_eq!(a.limit(), 100);
        // 50 rejections within one window: one cut.
        for _ in 0..50 {
            a.observe(now, Sample::BackPressure, 100);
        }
        now += Duration::from_millis(25);
        assert_eq!(
            a.observe(now, Sample::BackPressure, 100),
            Some(Change::BackPressure)
        );
        assert_eq!(a.limit(), 90);
    }

    /// An API that became slower for good (not from load): the limit is cut for
    /// a few windows, then the slower RTT becomes the baseline and it grows again.
    #[test]
    fn a_permanently_slower_api_becomes_the_new_baseline() {
        let mut a = Aimd::new(AimdConfig::new(1000));
        let mut now = Duration::ZERO;
        let mut feed = |a: &mut Aimd, rtt_ms: u64, ms: u64| {
            for _ in 0..ms {
                now += Duration::from_millis(1);
                a.observe(
                    now,
                    Sample::Answered(Duration::from_millis(rtt_ms)),
                    a.limit(),
                );
            }
        };
        feed(&mut a, 20, 2_000);
        let before = a.limit();
        feed(&mut a, 80, 200);
        assert!(
            a.limit() < before,
            "cut on the rise: {} → {}",
            before,
            a.limit()
        );
        let low = a.limit();
        feed(&mut a, 80, 5_000);
        assert!(a.limit() > low, "grows again: {low} → {}", a.limit());
        assert!(a.baseline() >= Some(Duration::from_millis(60)));
    }

    #[test]
    fn never_below_one() {
        let mut a = Aimd::new(AimdConfig::new(4));
        let mut now = Duration::ZERO;
        for _ in 0..100 {
            now += Duration::from_millis(50);
            a.observe(now, Sample::BackPressure, 4);
        }
        assert_eq!(a.limit(), 1);
    }
}
