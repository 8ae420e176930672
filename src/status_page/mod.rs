//! The live status page's data: a board the actors publish their state to, read
//! by `/status` (HTML, [`page`]) and `/status.json` ([`Snapshot`]) on the metrics
//! listener ([`http`]).
//!
//! The board is created in `app::start` and handed down through the `Pipeline`;
//! each piece of state is published by whoever owns it, per evaluation and never
//! per record:
//!
//! - a partition actor registers its row when it starts and removes it in
//!   `post_stop` (a revoked partition disappears; a crashed actor's row is
//!   replaced by its successor's), and updates it with atomic stores after each
//!   input it handles;
//! - the health actor publishes the breaker, the marker and the verdict at every
//!   evaluation; the marker's transitions are decided in `core::status_page`;
//! - delivery errors are counted where `courier_delivery_errors_total` is
//!   (lock-free slots, see [`ErrorTally`]) and sampled every [`ERROR_STEP`] into
//!   a sliding window ([`crate::core::status_page::ErrorWindow`]).
//!
//! # How each part is published
//!
//! - A partition actor's row goes away in `post_stop` only if no later
//!   incarnation replaced it (the generation decides); a crashed actor, whose
//!   `post_stop` does not run, is replaced by its successor's row. After each
//!   input it stores mode, lag, DLQ lag, watermark, held and dispatched counts.
//! - The health actor publishes the breaker state and its last transition
//!   (kept by `api_health::ApiHealth::last_transition` wherever the breaker
//!   moves: a recorded outcome, a trip, or the open → half-open step at the
//!   gate); the marker's transitions and their reasons (`set_by_this_instance`,
//!   `set_by_another_instance`, `expired`, `redis_unreachable`,
//!   `redis_reachable`) and the verdict's source are decided in
//!   `core::status_page`.
//! - The error window gives the last 5 minutes, never missing an error of the
//!   window; the span it covers is shown.
//!
//! The HTML is formatted from the same `Snapshot` the JSON serialises
//! (`page::render`, pure, unit-tested); `tests/status_page.rs` renders it in
//! headless Chromium during an outage. The build's git commit comes from
//! `build.rs` (`git rev-parse`, or `COURIER_GIT_COMMIT` set for the build; none
//! without git).

pub(crate) mod http;
pub(crate) mod page;

use crate::config::Config;
use crate::core::breaker::{BreakerStateKind, Transition};
use crate::core::fsm::Mode;
use crate::core::status_page::{
    marker_change, ErrorKey, ErrorWindow, HealthSource, MarkerChange, MarkerState,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// The window of "recent errors".
pub(crate) const ERROR_WINDOW: Duration = Duration::from_secs(300);
/// How often the error counts are sampled into the window.
pub(crate) const ERROR_STEP: Duration = Duration::from_secs(10);

/// The build: `CARGO_PKG_VERSION`, and the git commit when the build could see
/// one (`build.rs`; `COURIER_GIT_COMMIT` set at build time wins).
pub(crate) fn build_commit() -> Option<&'static str> {
    option_env!("COURIER_GIT_COMMIT").filter(|c| !c.is_empty())
}

/// What does not change while the process runs.
#[derive(Debug, Clone)]
pub(crate) struct BoardInfo {
    pub instance: String,
    pub group: String,
    pub topics: Topics,
}

impl BoardInfo {
    pub(crate) fn new(config: &Config, instance: String) -> BoardInfo {
        BoardInfo {
            instance,
            group: config.kafka.group_id.clone(),
            topics: Topics {
                main: config.kafka.topic.clone(),
                dlq: config.kafka.dlq_topic(),
                parking: config.kafka.parking_topic(),
            },
        }
    }
}

/// What the health actor saw at one evaluation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HealthReport {
    pub breaker: BreakerStateKind,
    /// The breaker's last transition and when it happened (wall-clock ms).
    pub(crate) breaker_last: Option<(Transition, i64)>,
    pub(crate) redis_ok: bool,
    pub marker: bool,
    /// This evaluation's `SET NX` created the marker.
    pub(crate) set_here: bool,
    pub api_unavailable: bool,
}

#[derive(Debug, Clone, Copy)]
struct HealthView {
    report: Option<HealthReport>,
    at_ms: i64,
    marker: MarkerState,
    marker_last: Option<(MarkerChange, i64)>,
}

/// One partition's row, updated by its actor with atomic stores.
#[derive(Debug)]
pub struct PartitionRow {
    generation: u64,
    mode: AtomicU8,
    /// -1: not known (yet).
    watermark: AtomicI64,
    lag: AtomicI64,
    dlq_lag: AtomicI64,
    held: AtomicI64,
    dispatched: AtomicI64,
}

const MODES: [Mode; 4] = Mode::ALL;

fn known(v: &AtomicI64) -> Option<i64> {
    let v = v.load(Ordering::Relaxed);
    (v >= 0).then_some(v)
}

impl PartitionRow {
    fn new(generation: u64) -> PartitionRow {
        PartitionRow {
            generation,
            // A partition machine starts paused.
            mode: AtomicU8::new(1),
            watermark: AtomicI64::new(-1),
            lag: AtomicI64::new(-1),
            dlq_lag: AtomicI64::new(-1),
            held: AtomicI64::new(0),
            dispatched: AtomicI64::new(0),
        }
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        let i = MODES.iter().position(|m| *m == mode).unwrap_or(1);
        self.mode.store(i as u8, Ordering::Relaxed);
    }

    pub(crate) fn set_lag(&self, dlq: i64, main: Option<i64>) {
        self.dlq_lag.store(dlq, Ordering::Relaxed);
        if let Some(lag) = main {
            self.lag.store(lag, Ordering::Relaxed);
        }
    }

    /// The stored main watermark, events in flight (held: begun, not finished)
    /// and jobs dispatched to the delivery pool and not answered (queued for a
    /// permit or being delivered).
    pub(crate) fn set_progress(&self, watermark: Option<i64>, held: i64, dispatched: usize) {
        self.watermark
            .store(watermark.unwrap_or(-1), Ordering::Relaxed);
        self.held.store(held, Ordering::Relaxed);
        self.dispatched.store(
            i64::try_from(dispatched).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    fn snapshot(&self, partition: i32) -> PartitionSnapshot {
        let mode = MODES[usize::from(self.mode.load(Ordering::Relaxed)).min(MODES.len() - 1)];
        PartitionSnapshot {
            partition,
            mode: mode.as_str().into(),
            watermark: known(&self.watermark),
            lag: known(&self.lag),
            held: self.held.load(Ordering::Relaxed),
            dispatched: self.dispatched.load(Ordering::Relaxed),
            dlq_lag: known(&self.dlq_lag),
        }
    }
}

/// Delivery errors by class and reason, counted without a lock: a fixed set of
/// slots, each claimed once by the first error of its reason (the only moment
/// that may wait, on the slot's `OnceLock`). Reasons beyond the slots are counted
/// together as `other`. Reasons are a bounded set (transport failures and HTTP
/// statuses), so the slots suffice in practice.
pub struct ErrorTally {
    slots: [Slot; TALLY_SLOTS],
    overflow: AtomicU64,
}

const TALLY_SLOTS: usize = 48;

#[derive(Default)]
struct Slot {
    key: OnceLock<(&'static str, Box<str>)>,
    count: AtomicU64,
}

impl Default for ErrorTally {
    fn default() -> Self {
        ErrorTally {
            slots: std::array::from_fn(|_| Slot::default()),
            overflow: AtomicU64::new(0),
        }
    }
}

impl ErrorTally {
    pub(crate) fn record(&self, class: &'static str, reason: &str) {
        for slot in &self.slots {
            let (c, r) = slot.key.get_or_init(|| (class, reason.into()));
            if *c == class && **r == *reason {
                slot.count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.overflow.fetch_add(1, Ordering::Relaxed);
    }

    /// The cumulative counts.
    pub(crate) fn counts(&self) -> BTreeMap<ErrorKey, u64> {
        let mut m: BTreeMap<ErrorKey, u64> = self
            .slots
            .iter()
            .filter_map(|s| {
                let (c, r) = s.key.get()?;
                Some((
                    (c.to_string(), r.to_string()),
                    s.count.load(Ordering::Relaxed),
                ))
            })
            .collect();
        let other = self.overflow.load(Ordering::Relaxed);
        if other > 0 {
            m.insert(("other".into(), "other".into()), other);
        }
        m
    }
}

/// The live state behind `/status`.
pub struct StatusBoard {
    info: BoardInfo,
    started_ms: i64,
    partitions: Mutex<BTreeMap<i32, Arc<PartitionRow>>>,
    /// Each destination's view, in the order first published (the default
    /// destination's first: the health actor evaluates it first).
    health: Mutex<Vec<(String, HealthView)>>,
    pub errors: ErrorTally,
    window: Mutex<ErrorWindow>,
    credential: Mutex<Option<CredentialSnapshot>>,
    /// Per batched route (its name: `api.routes[i].name`, its index, or
    /// `(default)`; bounded by the config): the last 10 s window's share
    /// of events answered alone after splits.
    batch_splits: Mutex<BTreeMap<String, BatchSplitSnapshot>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl StatusBoard {
    pub(crate) fn new(info: BoardInfo, now_ms: i64) -> StatusBoard {
        StatusBoard {
            info,
            started_ms: now_ms,
            partitions: Mutex::new(BTreeMap::new()),
            health: Mutex::new(Vec::new()),
            errors: ErrorTally::default(),
            window: Mutex::new(ErrorWindow::new(
                millis(ERROR_WINDOW),
                millis(ERROR_STEP),
                now_ms,
            )),
            credential: Mutex::new(None),
            batch_splits: Mutex::new(BTreeMap::new()),
        }
    }

    /// A batched route's last window of splits (`core::batch::SplitWindow`):
    /// `route` is its name from the config, never a rendered URL.
    pub(crate) fn batch_splits(&self, r: crate::core::batch::SplitReport, route: &str) {
        lock(&self.batch_splits).insert(
            route.to_string(),
            BatchSplitSnapshot {
                route: route.to_string(),
                events: r.events,
                alone_after_split: r.split_singles,
                mostly_singles: r.mostly_singles(),
            },
        );
    }

    pub(crate) fn instance(&self) -> &str {
        &self.info.instance
    }

    /// Registers the row of a partition actor incarnation (replacing a previous
    /// incarnation's).
    pub(crate) fn partition(&self, partition: i32, generation: u64) -> Arc<PartitionRow> {
        let row = Arc::new(PartitionRow::new(generation));
        lock(&self.partitions).insert(partition, row.clone());
        row
    }

    /// Removes the row, unless a later incarnation already replaced it.
    pub(crate) fn remove_partition(&self, partition: i32, generation: u64) {
        let mut rows = lock(&self.partitions);
        if rows
            .get(&partition)
            .is_some_and(|r| r.generation == generation)
        {
            rows.remove(&partition);
        }
    }

    /// The health actor's evaluation of `destination` at `now_ms`.
    pub(crate) fn publish_health(&self, destination: &str, r: HealthReport, now_ms: i64) {
        let mut all = lock(&self.health);
        let i = match all.iter().position(|(n, _)| n == destination) {
            Some(i) => i,
            None => {
                all.push((
                    destination.to_string(),
                    HealthView {
                        report: None,
                        at_ms: now_ms,
                        marker: MarkerState::Unknown,
                        marker_last: None,
                    },
                ));
                all.len() - 1
            }
        };
        let h = &mut all[i].1;
        let seen = MarkerState::seen(r.redis_ok, r.marker);
        if let Some(c) = marker_change(h.marker, seen, r.set_here) {
            h.marker_last = Some((c, now_ms));
        }
        h.marker = seen;
        h.report = Some(r);
        h.at_ms = now_ms;
    }

    /// The API credential's state (`auth`): what kind, until when the token is
    /// valid, the last refresh and the last failure's reason — never a secret.
    pub(crate) fn publish_credential(&self, c: CredentialSnapshot) {
        *lock(&self.credential) = Some(c);
    }

    /// Takes a sample of the error counts for the window (kept once per step).
    pub(crate) fn sample_errors(&self, now_ms: i64) {
        let counts = self.errors.counts();
        lock(&self.window).sample(now_ms, &counts);
    }

    pub(crate) fn snapshot(&self, now_ms: i64, ready: Probe, live: Probe) -> Snapshot {
        let partitions = lock(&self.partitions)
            .iter()
            .map(|(p, row)| row.snapshot(*p))
            .collect();
        let counts = self.errors.counts();
        let (rows, span_ms, window_ms) = {
            let mut w = lock(&self.window);
            w.sample(now_ms, &counts);
            let (rows, span) = w.recent(now_ms, &counts);
            (rows, span, w.window_ms())
        };
        let views = lock(&self.health).clone();
        let unknown = HealthView {
            report: None,
            at_ms: now_ms,
            marker: MarkerState::Unknown,
            marker_last: None,
        };
        let health = health_snapshot(views.first().map_or(&unknown, |(_, h)| h));
        let destinations = if views.len() > 1 {
            views
                .iter()
                .map(|(name, h)| DestinationSnapshot {
                    name: name.clone(),
                    health: health_snapshot(h),
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut by_reason: Vec<ErrorRow> = rows
            .into_iter()
            .map(|r| ErrorRow {
                class: r.key.0,
                reason: r.key.1,
                recent: r.recent,
                total: r.total,
            })
            .collect();
        by_reason.sort_by(|a, b| b.recent.cmp(&a.recent).then(b.total.cmp(&a.total)));
        Snapshot {
            instance: self.info.instance.clone(),
            group: self.info.group.clone(),
            topics: self.info.topics.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            commit: build_commit().map(str::to_string),
            started_at_ms: self.started_ms,
            now_ms,
            uptime_s: u64::try_from((now_ms - self.started_ms) / 1000).unwrap_or(0),
            ready,
            live,
            health,
            destinations,
            credential: lock(&self.credential).clone(),
            batch_splits: lock(&self.batch_splits).values().cloned().collect(),
            partitions,
            errors: ErrorsSnapshot {
                window_s: u64::try_from(window_ms / 1000).unwrap_or(0),
                span_s: u64::try_from(span_ms / 1000).unwrap_or(0),
                by_reason,
            },
        }
    }
}

/// One destination's health on the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationSnapshot {
    pub name: String,
    pub health: HealthSnapshot,
}

/// What the page shows of one destination's last evaluation.
fn health_snapshot(h: &HealthView) -> HealthSnapshot {
    let breaker = match h.report {
        Some(r) => StateSnapshot {
            state: r.breaker.as_str().into(),
            last: r.breaker_last.map(|(t, at_ms)| TransitionSnapshot {
                from: t.from.as_str().into(),
                to: t.to.as_str().into(),
                reason: t.reason.as_str().into(),
                at_ms,
            }),
        },
        None => StateSnapshot {
            state: "unknown".into(),
            last: None,
        },
    };
    let marker = StateSnapshot {
        state: h.marker.as_str().into(),
        last: h.marker_last.map(|(c, at_ms)| TransitionSnapshot {
            from: c.from.as_str().into(),
            to: c.to.as_str().into(),
            reason: c.reason.as_str().into(),
            at_ms,
        }),
    };
    HealthSnapshot {
        api_unavailable: h.report.is_some_and(|r| r.api_unavailable),
        source: h
            .report
            .map_or("unknown", |r| HealthSource::of(r.redis_ok).as_str())
            .into(),
        evaluated_at_ms: h.report.map(|_| h.at_ms),
        breaker,
        marker,
    }
}

/// `/status.json`: everything the page shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub instance: String,
    pub group: String,
    pub topics: Topics,
    pub version: String,
    pub commit: Option<String>,
    pub(crate) started_at_ms: i64,
    pub now_ms: i64,
    pub(crate) uptime_s: u64,
    /// `/readyz`.
    pub ready: Probe,
    /// `/healthz`.
    pub live: Probe,
    /// The default destination's health (the only one's, with one).
    pub health: HealthSnapshot,
    /// With more than one destination (`core::destination`): each one's.
    #[serde(default)]
    pub destinations: Vec<DestinationSnapshot>,
    /// The API credential (`None`: no bearer token configured).
    #[serde(default)]
    pub credential: Option<CredentialSnapshot>,
    /// Batched routes whose batches were split in the last window.
    #[serde(default)]
    pub batch_splits: Vec<BatchSplitSnapshot>,
    pub partitions: Vec<PartitionSnapshot>,
    pub errors: ErrorsSnapshot,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topics {
    pub main: String,
    pub dlq: String,
    pub parking: String,
}

/// A probe's result: `ok`, or not with the reason its endpoint answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub ok: bool,
    pub reason: Option<String>,
}

impl Probe {
    pub(crate) fn of<E: ToString>(r: Result<(), E>) -> Probe {
        match r {
            Ok(()) => Probe {
                ok: true,
                reason: None,
            },
            Err(e) => Probe {
                ok: false,
                reason: Some(e.to_string()),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSnapshot {
    pub api_unavailable: bool,
    /// `breaker+marker`, `breaker_only` (Redis unreachable), or `unknown` before
    /// the first evaluation.
    pub source: String,
    pub(crate) evaluated_at_ms: Option<i64>,
    pub breaker: StateSnapshot,
    pub marker: StateSnapshot,
}

/// A batched route's splits over the last 10 s window, on `/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSplitSnapshot {
    /// The route's name (`api.routes[i].name`, else its index; `(default)`
    /// for the events no route matches).
    pub route: String,
    /// Events answered in the window.
    pub events: u64,
    /// Of them, events answered alone after their batch was split.
    pub alone_after_split: u64,
    /// Most of them: the endpoint may take single events only.
    pub mostly_singles: bool,
}

/// The API credential's state on `/status` (never the token or a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialSnapshot {
    /// `oauth2`, `token_file` or `token_env`.
    pub kind: String,
    /// An OAuth2 token's expiry (Unix ms).
    pub valid_until_ms: Option<i64>,
    /// The last token fetched (Unix ms).
    pub last_refresh_ms: Option<i64>,
    /// The last failed fetch's reason (`auth_token_unavailable`,
    /// `auth_token_refused`) while no fetch has succeeded since.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSnapshot {
    pub state: String,
    pub last: Option<TransitionSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionSnapshot {
    pub from: String,
    pub to: String,
    pub reason: String,
    pub(crate) at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSnapshot {
    pub partition: i32,
    /// `normal`, `paused` or `drain_dlq`.
    pub mode: String,
    /// The stored commit watermark (next offset to commit) of main p.
    pub watermark: Option<i64>,
    /// Records of main p not yet finished (end offset minus watermark).
    pub lag: Option<i64>,
    /// Events in flight: begun and not finished (main and DLQ).
    pub held: i64,
    /// Jobs handed to the delivery pool and not answered (waiting for a permit,
    /// or being delivered); while paused, the rest of `held` waits in the partition.
    pub dispatched: i64,
    /// Unread records of DLQ p.
    pub(crate) dlq_lag: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorsSnapshot {
    pub(crate) window_s: u64,
    /// What `recent` covers: the window, or less while the process is younger.
    pub(crate) span_s: u64,
    pub by_reason: Vec<ErrorRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRow {
    pub class: String,
    pub reason: String,
    pub(crate) recent: u64,
    pub total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::breaker::TransitionReason;

    pub(crate) fn board() -> StatusBoard {
        let info = BoardInfo {
            instance: "host-1".into(),
            group: "g".into(),
            topics: Topics {
                main: "t".into(),
                dlq: "t.dlq".into(),
                parking: "t.parking".into(),
            },
        };
        StatusBoard::new(info, 1_000)
    }

    fn ok() -> Probe {
        Probe::of(Ok::<(), String>(()))
    }

    #[test]
    fn a_revoked_partition_disappears_and_a_successor_is_not_removed() {
        let b = board();
        let r0 = b.partition(0, 1);
        let _r1 = b.partition(1, 2);
        r0.set_mode(Mode::DrainDlq);
        r0.set_lag(4, Some(10));
        r0.set_progress(Some(42), 3, 2);
        let s = b.snapshot(2_000, ok(), ok());
        assert_eq!(s.partitions.len(), 2);
        let p0 = &s.partitions[0];
        assert_eq!(
            (p0.mode.as_str(), p0.watermark, p0.lag, p0.dlq_lag),
            ("drain_dlq", Some(42), Some(10), Some(4))
        );
        assert_eq!((p0.held, p0.dispatched), (3, 2));
        assert_eq!(s.partitions[1].mode, "paused", "a new row starts paused");
        assert_eq!(s.partitions[1].watermark, None);
        // Partition 1 revoked: its row goes.
        b.remove_partition(1, 2);
        // Partition 0's actor crashed and was replaced (generation 3) before the
        // old incarnation's stop came through: the new row stays.
        let _r0b = b.partition(0, 3);
        b.remove_partition(0, 1);
        let s = b.snapshot(3_000, ok(), ok());
        assert_eq!(
            s.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
            vec![0]
        );
    }

    #[test]
    fn health_and_marker_transitions_are_kept() {
        let b = board();
        let s = b.snapshot(1_500, ok(), ok());
        assert_eq!(
            (s.health.source.as_str(), s.health.breaker.state.as_str()),
            ("unknown", "unknown")
        );
        let t = Transition {
            from: BreakerStateKind::Closed,
            to: BreakerStateKind::Open,
            reason: TransitionReason::ConsecutiveFailures,
        };
        let report = HealthReport {
            breaker: BreakerStateKind::Open,
            breaker_last: Some((t, 1_900)),
            redis_ok: true,
            marker: true,
            set_here: true,
            api_unavailable: true,
        };
        b.publish_health(
            "http://api",
            HealthReport {
                marker: false,
                set_here: false,
                ..report
            },
            1_800,
        );
        b.publish_health("http://api", report, 2_000);
        // The next evaluation renews nothing: the transition stays the one seen.
        b.publish_health(
            "http://api",
            HealthReport {
                set_here: false,
                ..report
            },
            2_100,
        );
        let s = b.snapshot(2_200, ok(), Probe::of(Err("wedged")));
        assert_eq!(s.health.source, "breaker+marker");
        assert!(s.health.api_unavailable);
        let bl = s.health.breaker.last.clone().expect("breaker transition");
        assert_eq!(
            (
                bl.from.as_str(),
                bl.to.as_str(),
                bl.reason.as_str(),
                bl.at_ms
            ),
            ("closed", "open", "consecutive_failures", 1_900)
        );
        let ml = s.health.marker.last.clone().expect("marker transition");
        assert_eq!(
            (
                ml.from.as_str(),
                ml.to.as_str(),
                ml.reason.as_str(),
                ml.at_ms
            ),
            ("absent", "present", "set_by_this_instance", 2_000)
        );
        assert_eq!(s.live.reason.as_deref(), Some("wedged"));
        b.publish_health(
            "http://api",
            HealthReport {
                redis_ok: false,
                marker: false,
                ..report
            },
            2_300,
        );
        let s = b.snapshot(2_400, ok(), ok());
        assert_eq!(s.health.source, "breaker_only");
        assert_eq!(s.health.marker.state, "unreachable");
    }

    #[test]
    fn errors_are_tallied_by_class_and_reason() {
        let b = board();
        for _ in 0..3 {
            b.errors.record("transient", "http_503");
        }
        b.errors.record("transient", "timeout");
        b.errors.record("systemic", "http_401");
        for i in 0..TALLY_SLOTS + 2 {
            b.errors.record("transient", &format!("r{i}"));
        }
        let c = b.errors.counts();
        assert_eq!(c[&("transient".into(), "http_503".into())], 3);
        assert_eq!(c[&("systemic".into(), "http_401".into())], 1);
        assert_eq!(c[&("other".into(), "other".into())], 5, "beyond the slots");
        let s = b.snapshot(5_000, ok(), ok());
        let top: Vec<_> = s
            .errors
            .by_reason
            .iter()
            .take(2)
            .map(|e| (e.reason.as_str(), e.recent))
            .collect();
        assert_eq!(
            top,
            vec![("other", 5), ("http_503", 3)],
            "most frequent first"
        );
        assert_eq!(s.errors.span_s, 4);
    }

    #[test]
    fn the_tally_counts_every_error_under_concurrency() {
        let t = Arc::new(ErrorTally::default());
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for n in 0..10_000 {
                        t.record("transient", ["a", "b", "c"][(n + i) % 3]);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().expect("thread");
        }
        let c = t.counts();
        assert_eq!(c.len(), 3, "one slot per reason: {c:?}");
        assert_eq!(c.values().sum::<u64>(), 40_000);
    }
}
