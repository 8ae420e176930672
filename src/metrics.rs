//! Metric names (prefix `courier_`) and the HTTP listener serving `/metrics`,
//! `/healthz` and `/readyz`. Every series carries `group` and `main_topic` (the
//! deployment's identity). Other labels stay within bounded sets: topic, partition,
//! outcome, class, reason, actor — never event ids or keys.
//!
//! # Health endpoints and observability
//!
//! - `/healthz` (liveness, `core::liveness`): fails once the instance has been *stuck* for
//!   `metrics.wedged_after` (events held, none finished, the API judged available) — a
//!   consumer that will not recover by itself; the orchestrator restarts it and the next
//!   owner re-reads from the committed watermark. Paused for an outage, idle, or without
//!   partitions is never wedged. Tested in `tests/pipeline.rs::readyz_reports_assignment_and_stuck_work`.
//!   `courier healthcheck` (`main.rs`; the image's `HEALTHCHECK`, no curl in the image) asks
//!   it on the config's `metrics.listen` (loopback for an unspecified address) with one
//!   HTTP/1.1 request on a std socket within 2 s: exit 0 on 200, 1 otherwise (`--ready`:
//!   `/readyz`). Tested in `tests/ops.rs` (a running instance, then nothing listening).
//!
//! - `/readyz` (`metrics::Readiness`): assigned, and not stuck — events held (partition actors
//!   count begun/finished events; a stopped or crashed actor gives its count back) with no
//!   completion for `metrics.stuck_after` while the API is judged available.
//! - `/status` (HTML) and `/status.json`: the board of `crate::status_page` (its module doc).
//! - Metric names and help texts: `metrics::ALL`; dashboards and alert rules may only use
//!   those (`tests/dashboards_lint.rs`), and every panel query is evaluated against a real
//!   Prometheus in `tests/observability.rs`.
//! - Every series carries the deployment's identity as exporter-wide labels, set once when
//!   the recorder is installed (`metrics::install(group, main_topic)`): `group` =
//!   `kafka.group_id`, `main_topic` = `kafka.topic` (not `topic`, which
//!   `courier_consumed_total` uses for main vs DLQ). Alerts aggregate `by (group, main_topic)`
//!   and never depend on the scrape job's name. `courier_assigned_partitions` exists from the
//!   start (0 until the first assignment).
//! - Rare failures have series from the start, so their panels show 0 rather than "no data"
//!   and the first occurrence is a visible increase: `courier_delivery_errors_total` for every
//!   transport and TLS reason (`metrics::register_known_series`), and the DLQ writer's
//!   refused / unacknowledged writes per DLQ and parking topic (`increment(0)` at its start,
//!   so a restarted writer never resets them).

use axum::{extract::State, http::StatusCode, routing::get, Router};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

mod names;
pub use names::*;

/// Delivery latency buckets (seconds): fine enough that p50/p99 read within ~25 %
/// anywhere from 1 ms to 1 s. Samples go to a lock-free queue and are bucketed at
/// scrape time, so more buckets cost nothing per event.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// End-to-end event age buckets (seconds), up to an hour.
/// Events per batch request.
pub(crate) const BATCH_BUCKETS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

pub(crate) const AGE_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
];

/// Label on every series: the consumer group (`kafka.group_id`).
pub(crate) const GROUP_LABEL: &str = "group";
/// Label on every series: the main topic (`kafka.topic`). Not `topic`: that label
/// already tells the main topic from the DLQ on `courier_consumed_total`.
pub(crate) const MAIN_TOPIC_LABEL: &str = "main_topic";

/// The exporter's configuration: histogram buckets, and the deployment's identity
/// (consumer group, main topic) as labels on every series, so the series of two
/// deployments scraped by one Prometheus never merge (partition 0 of one group is not
/// partition 0 of another) and alerts can aggregate per group.
fn builder(group: &str, main_topic: &str) -> Option<PrometheusBuilder> {
    Some(
        PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(DELIVERY_LATENCY.into()), LATENCY_BUCKETS)
            .ok()?
            .set_buckets_for_metric(Matcher::Full(EVENT_AGE.into()), AGE_BUCKETS)
            .ok()?
            .set_buckets_for_metric(Matcher::Full(BATCH_EVENTS.into()), BATCH_BUCKETS)
            .ok()?
            .add_global_label(GROUP_LABEL, group)
            .add_global_label(MAIN_TOPIC_LABEL, main_topic),
    )
}

/// Installs the global Prometheus recorder (once per process), labelling every series
/// with the consumer group and the main topic.
pub fn install(group: &str, main_topic: &str) -> Option<PrometheusHandle> {
    let handle = builder(group, main_topic)?.install_recorder().ok()?;
    describe();
    register_known_series();
    Some(handle)
}

/// Creates the counters whose label sets are known in advance at 0, so the first
/// real event is a visible increase (`rate()`/`increase()` cannot see a series
/// that is born at 1).
pub(crate) fn register_known_series() {
    for reason in [
        "max_retries",
        "expired",
        "stale",
        "unreadable_envelope",
        "enrichment_missing",
    ] {
        metrics::counter!(DLQ_DROPPED, "reason" => reason).absolute(0);
    }
    for actor in [
        "consumer",
        "delivery_pool",
        "dlq_writer",
        "health",
        "partition",
    ] {
        metrics::counter!(ACTOR_RESTARTS, "actor" => actor).absolute(0);
    }
    for result in ["match", "mismatch", "expired", "query_failed"] {
        metrics::counter!(RECONCILIATION, "result" => result).absolute(0);
    }
    for result in ["hit", "miss"] {
        metrics::counter!(ENRICH_CACHE, "result" => result).absolute(0);
    }
    // Connection and TLS failures are rare: at 0 from the start, the dashboard's
    // panel has a series to show and the first one is a visible increase.
    for t in crate::core::classify::TransportFailure::ALL {
        metrics::counter!(DELIVERY_ERRORS, "class" => t.class().as_str(), "reason" => t.as_str())
            .absolute(0);
    }
    for kind in ["auto", "explicit", "coalesced"] {
        metrics::counter!(OFFSET_COMMITS, "kind" => kind).absolute(0);
    }
    metrics::counter!(OFFSETS_SKIPPED).absolute(0);
    metrics::counter!(HEADER_NAMES_NOT_UTF8).absolute(0);
    for reason in ["http_401", "http_403"] {
        metrics::counter!(SYSTEMIC_DEMOTED, "reason" => reason).absolute(0);
    }
    metrics::counter!(POSITIONS_PASSED).absolute(0);
    metrics::counter!(DLQ_REWINDS).absolute(0);
    metrics::counter!(REVOKED_WORK).absolute(0);
    metrics::counter!(DLQ_REDELIVERED).absolute(0);
    metrics::counter!(DELIVERED).absolute(0);
    metrics::gauge!(API_UNAVAILABLE).set(0.0);
    // Present from the start (0 until the first assignment): alerts tell an idle
    // standby from a missing instance by it, and `absent()` by its absence.
    metrics::gauge!(ASSIGNED_PARTITIONS).set(0.0);
}

/// Registers help texts (they appear as `# HELP` lines on `/metrics`).
pub(crate) fn describe() {
    for (name, help) in ALL {
        if name.ends_with("_total") {
            metrics::describe_counter!(*name, *help);
        } else if *name == DELIVERY_LATENCY || *name == EVENT_AGE {
            metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help);
        } else if *name == BATCH_EVENTS {
            metrics::describe_histogram!(*name, metrics::Unit::Count, *help);
        } else {
            metrics::describe_gauge!(*name, *help);
        }
    }
}

/// Readiness as seen by `/readyz`: the instance has an assignment and is making
/// progress. It is *stuck* when events are held but none finished for
/// `metrics.stuck_after` while the API is judged available (a paused pipeline
/// during an outage is waiting, not stuck).
pub struct Readiness {
    pub assigned: AtomicBool,
    /// Events begun and not finished, all partitions.
    pub held: AtomicI64,
    /// Wall-clock ms of the last finished event (or of the start).
    pub(crate) last_progress_ms: AtomicI64,
    pub api_unavailable: AtomicBool,
    pub(crate) stuck_after_ms: i64,
    /// `/healthz` fails after this long stuck (0: never).
    pub(crate) wedged_after_ms: i64,
}

impl Readiness {
    pub(crate) fn new(
        stuck_after: std::time::Duration,
        wedged_after: std::time::Duration,
    ) -> Readiness {
        Readiness {
            assigned: AtomicBool::new(false),
            held: AtomicI64::new(0),
            last_progress_ms: AtomicI64::new(crate::clock::now_ms()),
            api_unavailable: AtomicBool::new(false),
            stuck_after_ms: i64::try_from(stuck_after.as_millis()).unwrap_or(i64::MAX),
            wedged_after_ms: i64::try_from(wedged_after.as_millis()).unwrap_or(i64::MAX),
        }
    }

    pub(crate) fn begun(&self, n: usize) {
        self.held.fetch_add(n as i64, Ordering::Relaxed);
    }

    pub(crate) fn finished(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
        self.last_progress_ms
            .store(crate::clock::now_ms(), Ordering::Relaxed);
    }

    fn progress(&self, now_ms: i64) -> crate::core::liveness::Progress {
        crate::core::liveness::Progress {
            assigned: self.assigned.load(Ordering::SeqCst),
            held: self.held.load(Ordering::Relaxed),
            idle_ms: now_ms - self.last_progress_ms.load(Ordering::Relaxed),
            api_unavailable: self.api_unavailable.load(Ordering::Relaxed),
        }
    }

    /// `Err(reason)` when not ready (`/readyz`).
    pub(crate) fn check(&self, now_ms: i64) -> Result<(), &'static str> {
        self.progress(now_ms)
            .ready(self.stuck_after_ms)
            .map_err(|e| e.as_str())
    }

    /// `Err(reason)` when wedged (`/healthz`): see `core::liveness`.
    pub(crate) fn live(&self, now_ms: i64) -> Result<(), String> {
        self.progress(now_ms)
            .live(self.wedged_after_ms)
            .map_err(|w| {
                format!(
                    "wedged: events held, none finished for {}s with the API available",
                    w.idle_ms / 1000
                )
            })
    }
}

#[derive(Clone)]
struct HttpState {
    handle: Option<PrometheusHandle>,
    ready: Arc<Readiness>,
}

/// Serves `/metrics`, `/healthz`, `/readyz`, and `/status` (`/status.json`) from
/// `status`, until the task is dropped.
pub(crate) async fn serve(
    listen: SocketAddr,
    handle: Option<PrometheusHandle>,
    ready: Arc<Readiness>,
    status: Arc<crate::status_page::StatusBoard>,
) -> std::io::Result<()> {
    if let Some(h) = handle.clone() {
        // Histogram memory grows unless upkeep runs.
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tick.tick().await;
                h.run_upkeep();
            }
        });
    }
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState {
            handle,
            ready: ready.clone(),
        })
        .merge(crate::status_page::http::routes(status, probes(ready)));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "metrics and health listener up");
    axum::serve(listener, app).await
}

/// `/readyz` and `/healthz` as the status page shows them.
fn probes(ready: Arc<Readiness>) -> crate::status_page::http::ProbeFn {
    use crate::status_page::{http::Probes, Probe};
    Arc::new(move || {
        let now_ms = crate::clock::now_ms();
        Probes {
            now_ms,
            ready: Probe::of(ready.check(now_ms)),
            live: Probe::of(ready.live(now_ms)),
        }
    })
}

async fn metrics(State(s): State<HttpState>) -> (StatusCode, String) {
    if let Some(a) = allocator_stats() {
        metrics::gauge!(MEMORY_ALLOCATED).set(a.allocated as f64);
        metrics::gauge!(MEMORY_RESIDENT).set(a.resident as f64);
        if let Some(n) = a.allocations {
            metrics::counter!(MEMORY_ALLOCATIONS).absolute(n);
        }
    }
    match s.handle {
        Some(h) => (StatusCode::OK, h.render()),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no recorder".into()),
    }
}

/// What the allocator reports (jemalloc, the `courier` binary's global
/// allocator).
struct AllocatorStats {
    allocated: u64,
    resident: u64,
    /// Allocations made since start, small and large, over all arenas.
    allocations: Option<u64>,
}

/// The allocator's statistics, when jemalloc is the global allocator (the
/// `courier` binary); `None` elsewhere (jemalloc then reports nothing).
/// Read through jemalloc's `mallctl` (`tikv-jemalloc-sys`; the `-ctl`
/// wrapper brought the unmaintained `paste`).
#[cfg(all(unix, not(target_env = "musl")))]
fn allocator_stats() -> Option<AllocatorStats> {
    // The statistics are a snapshot refreshed by advancing the epoch.
    jemalloc::write_u64(c"epoch", 1)?;
    let allocated = jemalloc::read::<usize>(c"stats.allocated")? as u64;
    let resident = jemalloc::read::<usize>(c"stats.resident")? as u64;
    // `MALLCTL_ARENAS_ALL` (4096) sums every arena.
    let count = |name: &std::ffi::CStr| jemalloc::read::<u64>(name);
    let allocations = count(c"stats.arenas.4096.small.nmalloc")
        .zip(count(c"stats.arenas.4096.large.nmalloc"))
        .map(|(small, large)| small + large);
    (allocated > 0).then_some(AllocatorStats {
        allocated,
        resident,
        allocations,
    })
}

/// jemalloc's `mallctl` for the few values the statistics read.
#[cfg(all(unix, not(target_env = "musl")))]
mod jemalloc {
    use std::ffi::{c_void, CStr};

    /// A value of type `T` under `name`: only for names jemalloc documents as
    /// that C type (`size_t` → `usize`, `uint64_t` → `u64`); `None` when
    /// jemalloc refuses (an unknown name, statistics not built in).
    pub(super) fn read<T: Copy + Default>(name: &CStr) -> Option<T> {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `name` is NUL-terminated; `value` is `len` writable bytes,
        // and jemalloc writes at most `len` (it fails with EINVAL on a size
        // that does not match the name's type). No new value is written.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                std::ptr::from_mut(&mut value).cast::<c_void>(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0 && len == std::mem::size_of::<T>()).then_some(value)
    }

    /// Writes a `uint64_t` under `name` (`epoch`).
    pub(super) fn write_u64(name: &CStr, mut v: u64) -> Option<()> {
        // SAFETY: `name` is NUL-terminated; `v` is the 8 bytes jemalloc reads
        // for a `uint64_t` name; nothing is read back.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::from_mut(&mut v).cast::<c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
        (rc == 0).then_some(())
    }
}

#[cfg(not(all(unix, not(target_env = "musl"))))]
fn allocator_stats() -> Option<AllocatorStats> {
    None
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, String) {
    match s.ready.live(crate::clock::now_ms()) {
        Ok(()) => (StatusCode::OK, "ok".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    match s.ready.check(crate::clock::now_ms()) {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_carries_the_group_and_the_main_topic() {
        let recorder = builder("orders-courier", "orders")
            .unwrap()
            .build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(CONSUMED, "topic" => "orders.dlq").increment(2);
            metrics::gauge!(COMMIT_WATERMARK, "partition" => "0").set(7.0);
            metrics::histogram!(DELIVERY_LATENCY).record(0.004);
        });
        let text = handle.render();
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("courier_")).collect();
        assert!(series.len() > 3, "{text}");
        for line in &series {
            assert!(
                line.contains("group=\"orders-courier\"") && line.contains("main_topic=\"orders\""),
                "no group/main_topic label: {line}"
            );
        }
        // The metric's own `topic` label keeps its value (main vs DLQ).
        assert!(
            series
                .iter()
                .any(|l| l.starts_with(CONSUMED) && l.contains("topic=\"orders.dlq\"")),
            "{text}"
        );
    }

    #[test]
    fn readiness_needs_an_assignment_and_progress() {
        let r = Readiness::new(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(3),
        );
        let t0 = r.last_progress_ms.load(Ordering::Relaxed);
        assert_eq!(r.check(t0), Err("not assigned"));
        r.assigned.store(true, Ordering::SeqCst);
        assert_eq!(r.check(t0 + 5_000), Ok(()), "idle without work is fine");
        r.begun(3);
        assert_eq!(r.check(t0 + 500), Ok(()));
        assert!(
            r.check(t0 + 5_000).is_err(),
            "work held, nothing finished: stuck"
        );
        r.api_unavailable.store(true, Ordering::Relaxed);
        assert_eq!(
            r.check(t0 + 5_000),
            Ok(()),
            "paused for an outage is not stuck"
        );
        r.api_unavailable.store(false, Ordering::Relaxed);
        r.finished();
        let t1 = r.last_progress_ms.load(Ordering::Relaxed);
        assert_eq!(r.check(t1 + 500), Ok(()));
    }
}
