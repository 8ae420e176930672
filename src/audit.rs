//! The no-loss audit that every test, drill and demo run ends with: each produced
//! event either reached the API, or sits durably in the parking lot (with a reason)
//! or in the DLQ. Anything else is lost. Duplicate deliveries are counted.

use crate::core::envelope::Envelope;
use crate::kafka::admin::{read_all, AdminError, Connection};
use crate::sink::Audit;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

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
        writeln!(f, "┌──────────────┬──────────┐")?;
        writeln!(f, "│ produced     │ {:>8} │", self.produced)?;
        writeln!(f, "│ delivered    │ {:>8} │", self.delivered)?;
        writeln!(f, "│ in DLQ       │ {:>8} │", self.in_dlq)?;
        writeln!(f, "│ parked       │ {:>8} │", self.parked)?;
        for (r, n) in &self.parked_by_reason {
            writeln!(f, "│   {:<10} │ {:>8} │", truncate(r, 10), n)?;
        }
        writeln!(f, "│ LOST         │ {:>8} │", self.lost.len())?;
        writeln!(
            f,
            "│ duplicates   │ {:>8} │  ({:.2}% of delivered)",
            self.duplicates,
            self.duplicate_pct()
        )?;
        write!(f, "└──────────────┴──────────┘")
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Reads the DLQ and the parking lot (through `cluster`: a broker list, or the
/// whole Kafka config on a secured cluster) and checks every produced event
/// against them and against what the API stand-in received.
pub fn audit(
    cluster: &(impl Connection + ?Sized),
    dlq_topic: &str,
    parking_topic: &str,
    produced: &Produced,
    api: &Audit,
) -> Result<AuditReport, AdminError> {
    let mut parked_ids: HashMap<String, String> = HashMap::new();
    let mut parked_origin: HashMap<(i32, i64), String> = HashMap::new();
    for r in read_all(cluster, parking_topic)? {
        if let Some(env) = r
            .payload
            .as_deref()
            .and_then(|p| Envelope::from_bytes(p).ok())
        {
            let reason = env.last_error.reason.clone();
            if let Some(id) = env.event_id {
                parked_ids.insert(id, reason.clone());
            }
            parked_origin.insert((env.origin.partition, env.origin.offset), reason);
        }
    }
    let mut dlq_ids: HashSet<String> = HashSet::new();
    for r in read_all(cluster, dlq_topic)? {
        if let Some(env) = r
            .payload
            .as_deref()
            .and_then(|p| Envelope::from_bytes(p).ok())
        {
            if let Some(id) = env.event_id {
                dlq_ids.insert(id);
            }
        }
    }
    let mut rep = AuditReport {
        produced: produced.ids.len() + produced.poison.len(),
        ..Default::default()
    };
    for id in &produced.ids {
        if let Some(&n) = api.delivered.get(id) {
            rep.delivered += 1;
            rep.duplicates += u64::from(n.saturating_sub(1));
        } else if let Some(reason) = parked_ids.get(id) {
            rep.parked += 1;
            *rep.parked_by_reason.entry(reason.clone()).or_default() += 1;
        } else if dlq_ids.contains(id) {
            rep.in_dlq += 1;
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
