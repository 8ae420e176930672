//! The results: derived ratios, the targets, a Markdown table and JSON.

use crate::ceiling::CeilingResult;
use crate::classic::ClassicResult;
use crate::{CellResult, Opts};
use std::fmt::Write as _;

#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Machine {
    pub nproc: String,
    pub free_g: String,
    pub date: String,
    pub kernel: String,
    pub cpu_model: String,
    pub loadavg: Option<f64>,
    /// `git describe --always --dirty` of the measured tree.
    pub git: String,
}

pub(crate) struct Report {
    pub machine: Machine,
    pub options: Opts,
    pub wall_secs: f64,
    pub cells: Vec<CellResult>,
    pub classic: Vec<ClassicResult>,
    pub drains: Vec<crate::drain::DrainResult>,
}

/// Ratios of one cell, each against a baseline measured in the same run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Derived {
    pub courier_events_per_s: Option<f64>,
    pub ceiling_req_per_s: Option<f64>,
    /// Courier events/s ÷ HTTP-ceiling requests/s.
    pub ratio_to_ceiling: Option<f64>,
    /// C_eff / L in events/s (None at L = 0).
    pub c_over_l: Option<f64>,
    pub ratio_to_c_over_l: Option<f64>,
    /// C_eff/L is below the machine's HTTP capacity at this concurrency (the L = 0
    /// ceiling of the same run), so the API's latency, not the CPU, is the bound.
    pub latency_bound: Option<bool>,
    pub courier_cpu_us_per_event: Option<f64>,
    pub bare_cpu_us_per_req: Option<f64>,
    /// Courier CPU/event ÷ bare-client CPU/request.
    pub cpu_ratio: Option<f64>,
    /// |before − after| ÷ mean of the two ceiling measurements: how much the
    /// machine's capacity moved during the cell.
    pub ceiling_spread: Option<f64>,
}

/// The mean of a ceiling figure over the measurements before and after Courier.
fn mean(c: &CellResult, f: impl Fn(&CeilingResult) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = [&c.ceiling, &c.ceiling_after]
        .into_iter()
        .flatten()
        .filter_map(f)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// One cell measured several times (`--repeat`): its ratios to the ceiling in
/// run order, their median and how many reached 0.8.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Repeated {
    pub cell: String,
    pub ratios: Vec<f64>,
    pub median: f64,
    pub at_least_0_8: usize,
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Target {
    pub target: &'static str,
    /// "met", "not met" or "not measured".
    pub status: &'static str,
    pub detail: String,
}

impl Report {
    /// The L = 0 HTTP ceiling of the run at this effective concurrency.
    fn capacity(&self, c_eff: usize) -> Option<f64> {
        self.cells
            .iter()
            .filter(|c| c.latency_ms == 0 && c.effective_concurrency == c_eff)
            .filter_map(|c| mean(c, |x| Some(x.req_per_s)))
            .reduce(f64::max)
    }

    pub(crate) fn derived(&self, c: &CellResult) -> Derived {
        let courier = c.courier.as_ref().map(|x| x.events_per_s);
        let ceiling = mean(c, |x| Some(x.req_per_s));
        let c_over_l = (c.latency_ms > 0)
            .then(|| c.effective_concurrency as f64 * 1000.0 / c.latency_ms as f64);
        let latency_bound = c_over_l.and_then(|cl| match self.capacity(c.effective_concurrency) {
            Some(cap) => Some(cl < cap),
            // No L = 0 cell at this concurrency: the bare client reaching C/L at this
            // latency says the same.
            None => ceiling.map(|x| x >= 0.9 * cl),
        });
        let courier_cpu = c.courier.as_ref().and_then(|x| x.cpu_us_per_event);
        let bare_cpu = mean(c, |x| x.cpu_us_per_req);
        let spread = match (&c.ceiling, &c.ceiling_after) {
            (Some(a), Some(b)) if a.req_per_s + b.req_per_s > 0.0 => {
                Some((a.req_per_s - b.req_per_s).abs() * 2.0 / (a.req_per_s + b.req_per_s))
            }
            _ => None,
        };
        Derived {
            courier_events_per_s: courier,
            ceiling_req_per_s: ceiling,
            ratio_to_ceiling: ratio(courier, ceiling),
            c_over_l,
            ratio_to_c_over_l: ratio(courier, c_over_l),
            latency_bound,
            courier_cpu_us_per_event: courier_cpu,
            bare_cpu_us_per_req: bare_cpu,
            cpu_ratio: ratio(courier_cpu, bare_cpu),
            ceiling_spread: spread,
        }
    }

    fn label(c: &CellResult) -> String {
        format!("L={} C={} {}", c.latency_ms, c.concurrency, c.ordering)
    }

    /// The cells measured more than once, in the order first seen.
    pub(crate) fn repeated(&self) -> Vec<Repeated> {
        let mut out: Vec<(String, Vec<f64>)> = Vec::new();
        for c in &self.cells {
            let label = format!("{} ({} events)", Self::label(c), c.events);
            let Some(r) = self.derived(c).ratio_to_ceiling else {
                continue;
            };
            match out.iter_mut().find(|(l, _)| *l == label) {
                Some((_, v)) => v.push(r),
                None => out.push((label, vec![r])),
            }
        }
        out.into_iter()
            .filter(|(_, v)| v.len() > 1)
            .filter_map(|(cell, ratios)| {
                Some(Repeated {
                    median: median(&ratios)?,
                    at_least_0_8: ratios.iter().filter(|&&r| r >= 0.8).count(),
                    cell,
                    ratios,
                })
            })
            .collect()
    }

    pub(crate) fn targets(&self) -> Vec<Target> {
        let mut out = Vec::new();
        let judged = |ok: usize, bad: &[String], total: usize| match (total, bad.is_empty()) {
            (0, _) => ("not measured", String::new()),
            (_, true) => ("met", format!("{ok}/{total} cells")),
            (_, false) => (
                "not met",
                format!("{ok}/{total} cells; below: {}", bad.join("; ")),
            ),
        };

        // 1. ≥ 0.8 × the HTTP ceiling at every cell.
        let mut bad = Vec::new();
        let mut total = 0;
        for c in &self.cells {
            if let Some(r) = self.derived(c).ratio_to_ceiling {
                total += 1;
                if r < 0.8 {
                    bad.push(format!("{} ({r:.2})", Self::label(c)));
                }
            }
        }
        let (status, detail) = judged(total - bad.len(), &bad, total);
        out.push(Target {
            target: "events/s ≥ 0.8 × HTTP ceiling at every cell",
            status,
            detail,
        });

        // 2. ≥ 0.9 × C/L where C/L is below the ceiling.
        let mut bad = Vec::new();
        let mut total = 0;
        for c in &self.cells {
            let d = self.derived(c);
            if let (Some(true), Some(r)) = (d.latency_bound, d.ratio_to_c_over_l) {
                total += 1;
                if r < 0.9 {
                    bad.push(format!(
                        "{} ({r:.2}; the bare client reached {:.2})",
                        Self::label(c),
                        ratio(d.ceiling_req_per_s, d.c_over_l).unwrap_or(f64::NAN)
                    ));
                }
            }
        }
        let (status, detail) = judged(total - bad.len(), &bad, total);
        out.push(Target {
            target: "events/s ≥ 0.9 × C/L where C/L is below the ceiling",
            status,
            detail,
        });

        // 3. ≥ 20,000 events/s at L = 50 ms, C = 2,048.
        let cells: Vec<&CellResult> = self
            .cells
            .iter()
            .filter(|c| c.latency_ms == 50 && c.concurrency == 2048 && c.ordering != "partition")
            .filter(|c| c.courier.is_some())
            .collect();
        let (status, detail) = if cells.is_empty() {
            ("not measured", String::new())
        } else {
            let parts: Vec<String> = cells
                .iter()
                .map(|c| {
                    let d = self.derived(c);
                    format!(
                        "{} ({} events): {:.0} events/s = {:.2} × ceiling ({:.0} req/s), {:.2} × C/L",
                        Self::label(c),
                        c.events,
                        d.courier_events_per_s.unwrap_or(0.0),
                        d.ratio_to_ceiling.unwrap_or(f64::NAN),
                        d.ceiling_req_per_s.unwrap_or(f64::NAN),
                        d.ratio_to_c_over_l.unwrap_or(f64::NAN),
                    )
                })
                .collect();
            let ok = cells.iter().all(|c| {
                c.courier
                    .as_ref()
                    .is_some_and(|x| x.events_per_s >= 20_000.0)
            });
            (if ok { "met" } else { "not met" }, parts.join("; "))
        };
        out.push(Target {
            target: "≥ 20,000 events/s at L = 50 ms, C = 2,048",
            status,
            detail,
        });

        // 4. Courier CPU/event ≤ 1.5 × bare client CPU/request at L = 0.
        let mut bad = Vec::new();
        let mut total = 0;
        let mut seen = Vec::new();
        for c in self.cells.iter().filter(|c| c.latency_ms == 0) {
            if let Some(r) = self.derived(c).cpu_ratio {
                total += 1;
                seen.push(format!("{} {r:.2}", Self::label(c)));
                if r > 1.5 {
                    bad.push(format!("{} ({r:.2})", Self::label(c)));
                }
            }
        }
        let (status, mut detail) = judged(total - bad.len(), &bad, total);
        if !seen.is_empty() {
            detail = format!("{detail} [ratios: {}]", seen.join(", "));
        }
        out.push(Target {
            target: "Courier CPU/event ≤ 1.5 × bare client CPU/request at L = 0",
            status,
            detail,
        });

        // 5. RSS ≤ 150 MB with 2,048 in flight and a 1M backlog.
        let cells: Vec<&CellResult> = self
            .cells
            .iter()
            .filter(|c| c.effective_concurrency >= 2048 && c.events >= 1_000_000)
            .filter(|c| c.courier.as_ref().is_some_and(|x| x.peak_rss_mb.is_some()))
            .collect();
        let (status, detail) = if cells.is_empty() {
            (
                "not measured",
                "needs the memory cell (--memory-cell, --memory-events 1000000)".into(),
            )
        } else {
            let peak = |c: &CellResult| {
                c.courier
                    .as_ref()
                    .and_then(|x| x.peak_rss_mb)
                    .unwrap_or(0.0)
            };
            let parts: Vec<String> = cells
                .iter()
                .map(|c| format!("{}: {:.0} MB", Self::label(c), peak(c)))
                .collect();
            let ok = cells.iter().all(|c| peak(c) <= 150.0);
            (if ok { "met" } else { "not met" }, parts.join("; "))
        };
        out.push(Target {
            target: "peak RSS ≤ 150 MB with 2,048 in flight and a 1M backlog",
            status,
            detail,
        });

        // 6. The drain rate limit holds within 5 % of its setting.
        let measured: Vec<_> = self
            .drains
            .iter()
            .filter_map(|d| Some((d, d.steady_ratio?)))
            .collect();
        let (status, detail) = if measured.is_empty() {
            (
                "not measured",
                "needs the drain-rate check (not --no-drain)".into(),
            )
        } else {
            let ok = measured
                .iter()
                .all(|(d, r)| (r - 1.0).abs() <= 0.05 && d.lost == 0);
            let parts: Vec<String> = measured
                .iter()
                .map(|(d, r)| {
                    format!(
                        "{}/s: steady {:.1}/s = {r:.3} × setting, peak second {:.3} ×, lost {}",
                        d.rate_setting,
                        d.steady_rate.unwrap_or(f64::NAN),
                        d.peak_ratio.unwrap_or(f64::NAN),
                        d.lost
                    )
                })
                .collect();
            (if ok { "met" } else { "not met" }, parts.join("; "))
        };
        out.push(Target {
            target: "drain rate within 5 % of degraded.drain_rate_per_sec",
            status,
            detail,
        });
        out
    }

    pub(crate) fn markdown(&self) -> String {
        let f = |v: Option<f64>, digits: usize| match v {
            Some(v) if v.is_finite() => format!("{v:.digits$}"),
            _ => "–".into(),
        };
        let mut s = String::new();
        let m = &self.machine;
        let _ = writeln!(
            s,
            "Run {} of `{}` on {} CPUs ({}; {}), load average at start {}, {:.0} s wall time.\n",
            m.date,
            m.git,
            m.nproc,
            m.cpu_model,
            m.kernel,
            f(m.loadavg, 2),
            self.wall_secs
        );
        let _ = writeln!(
            s,
            "| L ms | C | ordering | events | Courier ev/s | ceiling req/s | × ceiling | C/L | × C/L | bare × C/L | Courier CPU µs/ev | bare CPU µs/req | CPU × | peak RSS MB | Courier p50 / p99 / mean ms | bare p50 / p99 / mean ms | ceiling spread | load |"
        );
        let _ = writeln!(
            s,
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in &self.cells {
            let d = self.derived(c);
            let cr = c.courier.as_ref();
            let ce = c.ceiling.as_ref();
            let c_col = if c.effective_concurrency != c.concurrency {
                format!("{} (eff. {})", c.concurrency, c.effective_concurrency)
            } else {
                c.concurrency.to_string()
            };
            let cl = match (d.c_over_l, d.latency_bound) {
                (Some(v), Some(false)) => format!("{v:.0}*"),
                (Some(v), _) => format!("{v:.0}"),
                (None, _) => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {} | {} |",
                c.latency_ms,
                c_col,
                c.ordering,
                c.events,
                f(d.courier_events_per_s, 0),
                f(d.ceiling_req_per_s, 0),
                f(d.ratio_to_ceiling, 2),
                cl,
                f(d.ratio_to_c_over_l, 2),
                f(ratio(d.ceiling_req_per_s, d.c_over_l), 2),
                f(d.courier_cpu_us_per_event, 1),
                f(d.bare_cpu_us_per_req, 1),
                f(d.cpu_ratio, 2),
                f(cr.and_then(|x| x.peak_rss_mb), 0),
                f(cr.and_then(|x| x.p50_ms), 1),
                f(cr.and_then(|x| x.p99_ms), 1),
                f(cr.and_then(|x| x.mean_ms), 1),
                f(ce.and_then(|x| x.p50_ms_exact), 1),
                f(ce.and_then(|x| x.p99_ms_exact), 1),
                f(ce.and_then(|x| x.mean_ms), 1),
                d.ceiling_spread
                    .map_or_else(|| "–".to_string(), |x| format!("{:.0}%", x * 100.0)),
                f(c.loadavg_before, 1),
            );
            if let Some(e) = &c.error {
                let _ = writeln!(s, "| | | | | **failed**: {e} |{}", " |".repeat(13));
            }
        }
        let _ = writeln!(
            s,
            "\n`*`: C/L above the machine's HTTP capacity at this concurrency (the L = 0 ceiling of this run; without one, the bare client below 0.9 × C/L), so the CPU, not the API latency, bounds this cell."
        );
        for c in &self.cells {
            if !c.earlier_attempts.is_empty() {
                let _ = writeln!(
                    s,
                    "\n{}: measured {} more time(s); discarded: {}.",
                    Self::label(c),
                    c.earlier_attempts.len(),
                    c.earlier_attempts.join(" / ")
                );
            }
            if let Some(d) = c.courier.as_ref().filter(|x| !x.disturbed.is_empty()) {
                let _ = writeln!(
                    s,
                    "\n{}: **still disturbed** in the kept measurement: {}.",
                    Self::label(c),
                    d.disturbed.join("; ")
                );
            }
        }
        if !self.classic.is_empty() {
            let _ = writeln!(
                s,
                "\nClassic loop (consume one, POST, commit synchronously):\n\n| L ms | events | events/s | 1000/L | bench CPU µs/ev | best Courier ev/s at this L | Courier ÷ classic |\n|---:|---:|---:|---:|---:|---:|---:|"
            );
            for k in &self.classic {
                let best = self
                    .cells
                    .iter()
                    .filter(|c| c.latency_ms == k.latency_ms)
                    .filter_map(|c| c.courier.as_ref().map(|x| x.events_per_s))
                    .reduce(f64::max);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    k.latency_ms,
                    k.events,
                    f(Some(k.events_per_s), 0),
                    if k.latency_ms > 0 {
                        format!("{:.0}", 1000.0 / k.latency_ms as f64)
                    } else {
                        "–".into()
                    },
                    f(k.cpu_us_per_event, 0),
                    f(best, 0),
                    f(ratio(best, Some(k.events_per_s)), 0),
                );
            }
        }
        if !self.drains.is_empty() {
            let _ = writeln!(
                s,
                "\nDrain rate (DLQ preloaded with due envelopes, empty main topic, API at 10 ms):\n\n| setting /s | envelopes | redelivered | lost | steady /s | steady ÷ setting | peak second | peak ÷ setting |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
            );
            for d in &self.drains {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    d.rate_setting,
                    d.envelopes,
                    d.delivered,
                    d.lost,
                    f(d.steady_rate, 1),
                    f(d.steady_ratio, 3),
                    d.peak_second,
                    f(d.peak_ratio, 3),
                );
            }
        }
        let repeated = self.repeated();
        if !repeated.is_empty() {
            let _ = writeln!(
                s,
                "\nRepeated cells (`--repeat`), × ceiling in run order:\n\n| cell | × ceiling | median | runs ≥ 0.8 |\n|---|---|---:|---:|"
            );
            for r in &repeated {
                let runs: Vec<String> = r.ratios.iter().map(|x| format!("{x:.2}")).collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.2} | {} of {} |",
                    r.cell,
                    runs.join(", "),
                    r.median,
                    r.at_least_0_8,
                    r.ratios.len()
                );
            }
        }
        let _ = writeln!(s, "\nTargets:\n");
        for t in self.targets() {
            let _ = writeln!(s, "- **{}**: {}. {}", t.target, t.status, t.detail);
        }
        s
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let cells: Vec<serde_json::Value> = self
            .cells
            .iter()
            .map(|c| serde_json::json!({ "cell": c, "derived": self.derived(c) }))
            .collect();
        serde_json::json!({
            "machine": self.machine,
            "options": self.options,
            "wall_secs": self.wall_secs,
            "cells": cells,
            "classic": self.classic,
            "drains": self.drains,
            "repeated": self.repeated(),
            "targets": self.targets(),
        })
    }
}
