//! The no-loss audit that every test, drill and demo run ends with: each produced
//! event either reached the API, or sits durably in the parking lot (with a reason)
//! or in the DLQ, or was dropped by a filter (`[[filters]]`: the run names the
//! events its filters drop, [`audit_filtered`]). Anything else is lost.
//! Duplicate deliveries are counted.
//!
//! An envelope is matched to a produced event by its `event_id`, or, when it
//! has none (a record Courier could not decode, e.g. an Avro record whose
//! schema the registry did not know: parked `unknown_schema`), by its origin
//! (main-topic partition and offset).

use crate::admin::{read_all, AdminError, Cluster};
use crate::sink::Audit;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// The fields of a DLQ or parking-lot envelope the audit reads. Read from the
/// envelope's JSON (docs/guide/src/concepts.md, "DLQ / parking-lot records") on
/// their own, not with Courier's `core::envelope::Envelope`: the audit checks what
/// Courier wrote, so it does not share the code that writes it.
#[derive(serde::Deserialize)]
struct EnvelopeFields {
    event_id: Option<String>,
    last_error: LastError,
    origin: Origin,
}

#[derive(serde::Deserialize)]
struct LastError {
    reason: String,
}

#[derive(serde::Deserialize)]
struct Origin {
    partition: i32,
    offset: i64,
}

fn envelope(payload: Option<&[u8]>) -> Option<EnvelopeFields> {
    serde_json::from_slice(payload?).ok()
}

/// What a producer wrote, as the audit needs to know it.
#[derive(Debug, Default, Clone)]
pub struct Produced {
    /// Ids of valid events.
    pub ids: Vec<String>,
    /// Main-topic (partition, offset) of each valid event, aligned with `ids`.
    pub offsets: Vec<(i32, i64)>,
    /// Main-topic (partition, offset) of bad input that has no usable id.
    pub poison: Vec<(i32, i64)>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct AuditReport {
    pub produced: usize,
    pub delivered: usize,
    pub in_dlq: usize,
    pub parked: usize,
    pub parked_by_reason: BTreeMap<String, usize>,
    /// Events a filter dropped: named by the run as filtered, and found
    /// neither at the API, nor in the parking lot or the DLQ.
    pub filtered: usize,
    pub lost: Vec<String>,
    pub duplicates: u64,
}

impl AuditReport {
    pub fn lost_count(&self) -> usize {
        self.lost.len()
    }
    pub fn duplicate_pct(&self) -> f64 {
        if self.delivered == 0 {
            0.0
        } else {
            100.0 * self.duplicates as f64 / self.delivered as f64
        }
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rows: Vec<(String, String)> = vec![
            ("produced".into(), self.produced.to_string()),
            ("delivered".into(), self.delivered.to_string()),
            ("in DLQ".into(), self.in_dlq.to_string()),
            ("parked".into(), self.parked.to_string()),
        ];
        for (r, n) in &self.parked_by_reason {
            rows.push((format!("  {r}"), n.to_string()));
        }
        if self.filtered > 0 {
            rows.push(("filtered".into(), self.filtered.to_string()));
        }
        rows.push(("LOST".into(), self.lost.len().to_string()));
        rows.push(("duplicates".into(), self.duplicates.to_string()));
        // Columns as wide as their content: reason names are never cut.
        let w0 = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let w1 = rows.iter().map(|(_, v)| v.len()).max().unwrap_or(0).max(8);
        let line = |l: &str, m: &str, r: &str| {
            format!("{l}{}{m}{}{r}", "─".repeat(w0 + 2), "─".repeat(w1 + 2))
        };
        writeln!(f, "{}", line("┌", "┬", "┐"))?;
        for (k, v) in &rows {
            write!(f, "│ {k:<w0$} │ {v:>w1$} │")?;
            if k == "duplicates" {
                write!(f, "  ({:.2}% of delivered)", self.duplicate_pct())?;
            }
            writeln!(f)?;
        }
        write!(f, "{}", line("└", "┴", "┘"))
    }
}

/// Reads the DLQ and the parking lot (through `cluster`: a broker list, or the
/// whole Kafka config on a secured cluster) and checks every produced event
/// against them and against what the API stand-in received.
pub fn audit(
    cluster: &(impl Cluster + ?Sized),
    dlq_topic: &str,
    parking_topic: &str,
    produced: &Produced,
    api: &Audit,
) -> Result<AuditReport, AdminError> {
    audit_filtered(
        cluster,
        dlq_topic,
        parking_topic,
        produced,
        api,
        &HashSet::new(),
    )
}

/// [`audit`] for a run with `[[filters]]`: `filtered` holds the ids its
/// filters drop (what the run's filter expressions say of its events). Such
/// an event found nowhere is counted `filtered`, not lost; one found at the
/// API, parked or in the DLQ is counted there (a filter that should have
/// dropped it did not: the run's own assertions see it in `filtered`).
pub fn audit_filtered(
    cluster: &(impl Cluster + ?Sized),
    dlq_topic: &str,
    parking_topic: &str,
    produced: &Produced,
    api: &Audit,
    filtered: &HashSet<String>,
) -> Result<AuditReport, AdminError> {
    let mut parked_ids: HashMap<String, String> = HashMap::new();
    let mut parked_origin: HashMap<(i32, i64), String> = HashMap::new();
    for r in read_all(cluster, parking_topic)? {
        if let Some(env) = envelope(r.payload.as_deref()) {
            let reason = env.last_error.reason;
            if let Some(id) = env.event_id {
                parked_ids.insert(id, reason.clone());
            }
            parked_origin.insert((env.origin.partition, env.origin.offset), reason);
        }
    }
    let mut dlq_ids: HashSet<String> = HashSet::new();
    let mut dlq_origin: HashSet<(i32, i64)> = HashSet::new();
    for r in read_all(cluster, dlq_topic)? {
        if let Some(env) = envelope(r.payload.as_deref()) {
            match env.event_id {
                Some(id) => {
                    dlq_ids.insert(id);
                }
                None => {
                    dlq_origin.insert((env.origin.partition, env.origin.offset));
                }
            }
        }
    }
    let mut rep = AuditReport {
        produced: produced.ids.len() + produced.poison.len(),
        ..Default::default()
    };
    for (i, id) in produced.ids.iter().enumerate() {
        let origin = produced.offsets.get(i);
        if let Some(&n) = api.delivered.get(id) {
            rep.delivered += 1;
            rep.duplicates += u64::from(n.saturating_sub(1));
        } else if let Some(reason) = parked_ids.get(id).or_else(|| parked_origin.get(origin?)) {
            rep.parked += 1;
            *rep.parked_by_reason.entry(reason.clone()).or_default() += 1;
        } else if dlq_ids.contains(id) || origin.is_some_and(|o| dlq_origin.contains(o)) {
            rep.in_dlq += 1;
        } else if filtered.contains(id) {
            rep.filtered += 1;
        } else {
            rep.lost.push(id.clone());
        }
    }
    for (p, o) in &produced.poison {
        if let Some(reason) = parked_origin.get(&(*p, *o)) {
            rep.parked += 1;
            *rep.parked_by_reason.entry(reason.clone()).or_default() += 1;
        } else {
            rep.lost.push(format!("poison@{p}/{o}"));
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_fits_its_content() {
        let rep = AuditReport {
            produced: 20_000,
            delivered: 19_913,
            in_dlq: 7,
            parked: 80,
            parked_by_reason: [
                ("invalid_utf8".to_string(), 40),
                ("unsupported_specversion".to_string(), 40),
            ]
            .into_iter()
            .collect(),
            filtered: 0,
            lost: Vec::new(),
            duplicates: 0,
        };
        let t = rep.to_string();
        assert!(t.contains("│   invalid_utf8            │"), "{t}");
        assert!(t.contains("  unsupported_specversion │"), "{t}");
        // Every line has the same width.
        let widths: Vec<usize> = t
            .lines()
            .map(|l| l.split("  (").next().unwrap_or(l).chars().count())
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{t}");
    }
}
