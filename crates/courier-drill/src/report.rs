//! The drill's results: one row per scenario, printed as a table and written as JSON.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A scenario-specific expectation and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    pub fn new(name: &str, ok: bool, detail: impl Into<String>) -> Check {
        let c = Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        };
        eprintln!(
            "[drill]   check {}: {} — {}",
            c.name,
            if c.ok { "ok" } else { "FAILED" },
            c.detail
        );
        c
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    /// No loss, every check held, no error.
    pub ok: bool,
    pub error: Option<String>,
    pub duration_s: f64,
    pub rate_per_s: u64,
    pub produced: usize,
    pub delivered: usize,
    pub in_dlq: usize,
    pub parked: usize,
    pub parked_by_reason: BTreeMap<String, usize>,
    pub lost: usize,
    pub lost_sample: Vec<String>,
    /// Events the scenario deleted before the group read them (`hostile`):
    /// not delivered, not lost.
    pub deleted_unread: usize,
    /// Σ `courier_events_deleted_unread_total` over every instance (`hostile`).
    pub deleted_unread_reported: Option<f64>,
    pub duplicates: u64,
    pub duplicate_pct: f64,
    /// p99 of `courier_event_age_seconds` (Kafka timestamp → API acceptance), merged
    /// over every instance and incarnation; interpolated within a histogram bucket.
    pub p99_latency_s: Option<f64>,
    pub p50_latency_s: Option<f64>,
    /// Seconds with at least one instance reporting `courier_api_unavailable = 1`.
    pub paused_s: f64,
    /// Σ over instances of those seconds.
    pub paused_instance_s: f64,
    /// Time from the end of the faults until committed offsets reached the ends.
    pub settle_s: f64,
    pub checks: Vec<Check>,
    /// Courier instances that exited on their own, with their exit codes.
    pub unexpected_exits: Vec<(String, Option<i32>)>,
    pub log_dir: String,
}

#[derive(Debug, Serialize)]
pub struct DrillReport {
    pub short: bool,
    pub ok: bool,
    pub total_produced: usize,
    pub total_lost: usize,
    pub duration_s: f64,
    pub command: String,
    pub scenarios: Vec<ScenarioReport>,
}

fn secs(v: Option<f64>) -> String {
    match v {
        Some(v) if v < 1.0 => format!("{:.0}ms", v * 1000.0),
        Some(v) => format!("{v:.1}s"),
        None => "-".into(),
    }
}

pub fn table(r: &DrillReport) -> String {
    let mut out = String::new();
    // The name column as wide as the longest name (`destination-outage`).
    let w = r
        .scenarios
        .iter()
        .map(|s| s.scenario.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let _ = writeln!(
        out,
        "{:<w$} {:>4} {:>8} {:>9} {:>6} {:>7} {:>5} {:>6} {:>6} {:>7} {:>7} {:>7}",
        "scenario",
        "ok",
        "produced",
        "delivered",
        "in-dlq",
        "parked",
        "LOST",
        "dups",
        "dup%",
        "p99",
        "paused",
        "time"
    );
    for s in &r.scenarios {
        let _ = writeln!(
            out,
            "{:<w$} {:>4} {:>8} {:>9} {:>6} {:>7} {:>5} {:>6} {:>6.2} {:>7} {:>7} {:>7}",
            s.scenario,
            if s.ok { "yes" } else { "NO" },
            s.produced,
            s.delivered,
            s.in_dlq,
            s.parked,
            s.lost,
            s.duplicates,
            s.duplicate_pct,
            secs(s.p99_latency_s),
            format!("{:.1}s", s.paused_s),
            format!("{:.0}s", s.duration_s),
        );
        if s.deleted_unread > 0 || s.deleted_unread_reported.is_some() {
            let _ = writeln!(
                out,
                "{:<w$}   deleted unread: {} (Courier reported {})",
                "",
                s.deleted_unread,
                s.deleted_unread_reported
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into())
            );
        }
        if !s.parked_by_reason.is_empty() {
            let reasons: Vec<String> = s
                .parked_by_reason
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(out, "{:<w$}   parked: {}", "", reasons.join(" "));
        }
        for c in s.checks.iter().filter(|c| !c.ok) {
            let _ = writeln!(out, "{:<w$}   FAILED {}: {}", "", c.name, c.detail);
        }
        for (name, code) in &s.unexpected_exits {
            let _ = writeln!(
                out,
                "{:<w$}   instance {name} exited on its own (code {code:?})",
                ""
            );
        }
        if let Some(e) = &s.error {
            let _ = writeln!(out, "{:<w$}   ERROR: {e}", "");
        }
    }
    let _ = writeln!(
        out,
        "total: {} produced, {} lost, {:.0}s — {}",
        r.total_produced,
        r.total_lost,
        r.duration_s,
        if r.ok { "PASS" } else { "FAIL" }
    );
    out
}
