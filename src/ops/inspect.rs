//! `courier dlq inspect`: what sits in the DLQ or the parking lot — counts by
//! reason, by event type and by age, the oldest and newest, and samples.

use crate::core::envelope::Envelope;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Age buckets, by time since the event first entered the DLQ / parking lot.
pub const AGE_BUCKETS: &[(&str, i64)] = &[
    ("< 1m", 60_000),
    ("< 1h", 3_600_000),
    ("< 1d", 86_400_000),
    ("< 7d", 7 * 86_400_000),
];
pub const AGE_OLDER: &str = ">= 7d";

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub topic: String,
    pub total: usize,
    /// Records that are not Courier envelopes (counted, not interpreted).
    pub unreadable: usize,
    /// Envelopes that carry a reference to the origin record instead of the
    /// payload (it did not fit the topic's `max.message.bytes`).
    pub payload_omitted: usize,
    pub by_reason: BTreeMap<String, usize>,
    pub by_type: BTreeMap<String, usize>,
    pub by_age: BTreeMap<String, usize>,
    pub oldest_ms: Option<i64>,
    pub newest_ms: Option<i64>,
    pub samples: Vec<Envelope>,
}

pub fn age_bucket(age_ms: i64) -> &'static str {
    AGE_BUCKETS
        .iter()
        .find(|(_, limit)| age_ms < *limit)
        .map(|(name, _)| *name)
        .unwrap_or(AGE_OLDER)
}

/// Summarises raw record values (`None` = tombstone) read from one topic.
pub fn summarize<'a>(
    topic: &str,
    values: impl IntoIterator<Item = Option<&'a [u8]>>,
    now_ms: i64,
    max_samples: usize,
) -> Summary {
    let mut s = Summarizer::new(topic, now_ms, max_samples);
    for v in values {
        s.add(v);
    }
    s.finish()
}

/// A summary built one record at a time (the records are not kept).
pub struct Summarizer {
    s: Summary,
    now_ms: i64,
    max_samples: usize,
}

impl Summarizer {
    pub fn new(topic: &str, now_ms: i64, max_samples: usize) -> Summarizer {
        Summarizer {
            s: Summary {
                topic: topic.to_string(),
                ..Summary::default()
            },
            now_ms,
            max_samples,
        }
    }

    pub fn finish(self) -> Summary {
        self.s
    }

    /// One record's value (`None` = tombstone).
    pub fn add(&mut self, v: Option<&[u8]>) {
        let (s, now_ms, max_samples) = (&mut self.s, self.now_ms, self.max_samples);
        s.total += 1;
        let Some(env) = v.and_then(|b| Envelope::from_bytes(b).ok()) else {
            s.unreadable += 1;
            return;
        };
        if env.omitted.is_some() {
            s.payload_omitted += 1;
        }
        *s.by_reason
            .entry(env.last_error.reason.clone())
            .or_default() += 1;
        let ty = env
            .event_type
            .clone()
            .unwrap_or_else(|| "(undecodable)".into());
        *s.by_type.entry(ty).or_default() += 1;
        let at = env.first_dlq_at_ms;
        *s.by_age
            .entry(age_bucket(now_ms - at).to_string())
            .or_default() += 1;
        s.oldest_ms = Some(s.oldest_ms.map_or(at, |o| o.min(at)));
        s.newest_ms = Some(s.newest_ms.map_or(at, |o| o.max(at)));
        if s.samples.len() < max_samples {
            s.samples.push(env);
        }
    }
}

fn ago(now_ms: i64, at: Option<i64>) -> String {
    match at {
        None => "-".into(),
        Some(t) => format!("{:.1}s ago", (now_ms - t).max(0) as f64 / 1000.0),
    }
}

/// Human table.
pub struct Table<'a>(pub &'a Summary, pub i64);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, now) = (self.0, self.1);
        writeln!(
            f,
            "{}: {} records ({} unreadable, {} with the payload omitted)",
            s.topic, s.total, s.unreadable, s.payload_omitted
        )?;
        writeln!(
            f,
            "oldest: {}   newest: {}",
            ago(now, s.oldest_ms),
            ago(now, s.newest_ms)
        )?;
        for (title, map) in [
            ("reason", &s.by_reason),
            ("event type", &s.by_type),
            ("age", &s.by_age),
        ] {
            writeln!(f, "\nby {title}:")?;
            for (k, n) in map {
                writeln!(f, "  {k:<32} {n:>8}")?;
            }
        }
        if !s.samples.is_empty() {
            writeln!(f, "\nsamples:")?;
            for e in &s.samples {
                writeln!(
                    f,
                    "  {} {}/{}@{} retries={} reason={} ({})",
                    e.event_id.as_deref().unwrap_or("(no id)"),
                    e.origin.topic,
                    e.origin.partition,
                    e.origin.offset,
                    e.dlq_retries,
                    e.last_error.reason,
                    e.last_error.message
                )?;
                if let Some(o) = &e.omitted {
                    writeln!(
                        f,
                        "    payload omitted: {} bytes, sha256 {}; it stays in {}/{}@{}{}",
                        o.payload_bytes,
                        o.payload_sha256,
                        e.origin.topic,
                        e.origin.partition,
                        e.origin.offset,
                        if o.key_omitted {
                            " (key omitted too)"
                        } else {
                            ""
                        }
                    )?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::envelope::tests::sample;

    #[test]
    fn summary_counts_by_reason_type_and_age() {
        let now = 100 * 86_400_000;
        let mut a = sample();
        a.first_dlq_at_ms = now - 30_000;
        let mut b = sample();
        b.first_dlq_at_ms = now - 2 * 3_600_000;
        b.last_error.reason = "malformed_json".into();
        b.event_type = None;
        let mut c = sample();
        c.first_dlq_at_ms = now - 10 * 86_400_000;
        let (ab, bb, cb) = (a.to_bytes(), b.to_bytes(), c.to_bytes());
        let values: Vec<Option<&[u8]>> = vec![Some(&ab), Some(&bb), Some(&cb), Some(b"junk"), None];
        let s = summarize("t.dlq", values, now, 2);
        assert_eq!(s.total, 5);
        assert_eq!(s.unreadable, 2);
        assert_eq!(s.by_reason["http_503"], 2);
        assert_eq!(s.by_reason["malformed_json"], 1);
        assert_eq!(s.by_type["profile.updated"], 2);
        assert_eq!(s.by_type["(undecodable)"], 1);
        assert_eq!(s.by_age["< 1m"], 1);
        assert_eq!(s.by_age["< 1d"], 1);
        assert_eq!(s.by_age[">= 7d"], 1);
        assert_eq!(s.oldest_ms, Some(now - 10 * 86_400_000));
        assert_eq!(s.newest_ms, Some(now - 30_000));
        assert_eq!(s.samples.len(), 2);
        let text = Table(&s, now).to_string();
        assert!(text.contains("http_503"));
    }

    #[test]
    fn buckets() {
        assert_eq!(age_bucket(0), "< 1m");
        assert_eq!(age_bucket(60_000), "< 1h");
        assert_eq!(age_bucket(8 * 86_400_000), ">= 7d");
    }
}
