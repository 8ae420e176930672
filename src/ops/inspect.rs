//! `courier dlq inspect`: what sits in the DLQ or the parking lot — counts by
//! reason, by event type and by age, the oldest and newest, and samples.

use crate::core::envelope::Envelope;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Age buckets, by time since the event first entered the DLQ / parking lot.
pub(crate) const AGE_BUCKETS: &[(&str, i64)] = &[
    ("< 1m", 60_000),
    ("< 1h", 3_600_000),
    ("< 1d", 86_400_000),
    ("< 7d", 7 * 86_400_000),
];
pub(crate) const AGE_OLDER: &str = ">= 7d";

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
    pub(crate) by_type: BTreeMap<String, usize>,
    /// By destination (`[[api.routes]]`: the API the event goes to, by its
    /// type), when the configuration is given ([`Summarizer::with_routes`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) by_destination: BTreeMap<String, usize>,
    pub(crate) by_age: BTreeMap<String, usize>,
    pub(crate) oldest_ms: Option<i64>,
    pub(crate) newest_ms: Option<i64>,
    pub samples: Vec<Envelope>,
    /// With a registry format (`input.format = "avro"`): each sample's payload
    /// decoded with the schema it names, in the order of `samples` (empty for
    /// other formats, whose payloads are the JSON already).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decoded: Vec<DecodedPayload>,
    /// Records deleted (retention, delete-records) before they were handled:
    /// see [`deleted_unread`].
    pub deleted: Vec<Deleted>,
}

/// A sample's payload as the registry format reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodedPayload {
    /// The JSON the event is read as (and delivered from).
    Json(serde_json::Value),
    /// Why it cannot be read now (the parking reason, or the registry's outage).
    Unreadable { reason: String, message: String },
    /// The envelope carries a reference instead of the payload.
    Omitted,
}

/// Each of `samples`' payloads decoded as `input` reads them through its
/// schema registry (one fetch per schema id). Empty unless `input.format` is a
/// registry format.
pub async fn decode_samples(
    input: &crate::config::InputConfig,
    samples: &[Envelope],
    max_event_bytes: usize,
) -> Vec<DecodedPayload> {
    use crate::schema_registry::SchemaRegistry;
    if !input.format.uses_registry() {
        return Vec::new();
    }
    let registry = SchemaRegistry::new(&input.schema_registry, input.format);
    let mut out = Vec::with_capacity(samples.len());
    for e in samples {
        if e.omitted.is_some() {
            out.push(DecodedPayload::Omitted);
            continue;
        }
        let view = match registry.schema_of(&e.payload).await {
            Err(why) => DecodedPayload::Unreadable {
                reason: "schema_registry_unavailable".into(),
                message: why,
            },
            Ok(schema) => match crate::core::schema::framed_json(
                &e.payload,
                input.format,
                |_| schema.as_deref(),
                input.json_options(),
                max_event_bytes,
            ) {
                Ok(text) => match serde_json::from_slice(&text) {
                    Ok(v) => DecodedPayload::Json(v),
                    Err(err) => DecodedPayload::Unreadable {
                        reason: "malformed_json".into(),
                        message: err.to_string(),
                    },
                },
                Err((reason, message)) => DecodedPayload::Unreadable {
                    reason: reason.into(),
                    message,
                },
            },
        };
        out.push(view);
    }
    out
}

/// Reads what [`deleted_unread`] needs for `topic` (its log starts, the
/// committed positions of `group` when Courier consumes it, the replay log) and
/// reports each range as the consumer does: an ERROR "events deleted unread"
/// with topic, partition, from, to and count.
pub fn deleted_report(
    kafka: &crate::config::KafkaConfig,
    topic: &str,
    group: Option<&str>,
) -> Result<Vec<Deleted>, crate::kafka::admin::AdminError> {
    let marks = crate::kafka::admin::watermarks(kafka, topic)?;
    let starts: BTreeMap<i32, i64> = marks.iter().map(|(p, (lo, _))| (*p, *lo)).collect();
    let mut committed = BTreeMap::new();
    if let (Some(group), Some(n)) = (group, marks.keys().max()) {
        let positions = crate::kafka::admin::committed_offsets(kafka, group, topic, n + 1)?;
        committed.extend(
            positions
                .into_iter()
                .enumerate()
                .map(|(p, c)| (p as i32, c)),
        );
    }
    let replayed = crate::ops::replay::replayed_before(kafka, topic)?;
    let deleted = deleted_unread(&starts, &committed, &replayed);
    for d in &deleted {
        tracing::error!(
            topic,
            partition = d.partition,
            from = d.from,
            to = d.to,
            count = d.count,
            "events deleted unread: the log now starts past records that were never handled (retention or delete-records)"
        );
    }
    Ok(deleted)
}

/// Records of one partition deleted before they were handled: the offsets
/// `[from, to)` (`to` is the log start now), of which `count` were neither read
/// by the group (the DLQ: below its committed position) nor replayed (the
/// parking lot: listed in the replay log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    pub partition: i32,
    pub from: i64,
    pub to: i64,
    pub count: u64,
}

/// Deleted-unread accounting for the DLQ and the parking lot, as the consumer
/// does it for what it reads (`core::deleted`): per partition, the offsets
/// between where handling stands and the log start. Where handling stands is
/// the group's committed position when it has one (the DLQ, which Courier
/// consumes), else the start of the topic (the parking lot, which nothing
/// consumes), less the offsets the replay log names replayed. Pure.
pub(crate) fn deleted_unread(
    starts: &BTreeMap<i32, i64>,
    committed: &BTreeMap<i32, i64>,
    replayed: &std::collections::HashSet<String>,
) -> Vec<Deleted> {
    let mut out = Vec::new();
    for (&p, &start) in starts {
        let from = committed.get(&p).copied().filter(|c| *c >= 0).unwrap_or(0);
        let Some(g) = crate::core::deleted::gap(from, start, None) else {
            continue;
        };
        let done = replayed
            .iter()
            .filter_map(|k| {
                let (kp, ko) = k.split_once('/')?;
                Some((kp.parse::<i32>().ok()?, ko.parse::<i64>().ok()?))
            })
            .filter(|&(kp, ko)| kp == p && g.from <= ko && ko < g.to)
            .count() as u64;
        let count = g.count.saturating_sub(done);
        if count > 0 {
            out.push(Deleted {
                partition: p,
                from: g.from,
                to: g.to,
                count,
            });
        }
    }
    out
}

pub(crate) fn age_bucket(age_ms: i64) -> &'static str {
    AGE_BUCKETS
        .iter()
        .find(|(_, limit)| age_ms < *limit)
        .map(|(name, _)| *name)
        .unwrap_or(AGE_OLDER)
}

/// Summarises raw record values (`None` = tombstone) read from one topic.
#[cfg(test)]
pub(crate) fn summarize<'a>(
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
    routes: Option<crate::core::mapping::Routes>,
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
            routes: None,
        }
    }

    /// Counts the envelopes by destination too: the one `api`'s routes send
    /// their event type to (a configuration that does not parse adds nothing).
    pub fn with_routes(mut self, api: &crate::config::ApiConfig) -> Summarizer {
        self.routes = api.routes().ok();
        self
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
        if let Some(routes) = &self.routes {
            let d = routes.destination(&ty);
            let name = routes.destinations().names().get(d.index());
            let name = name.map_or("?", String::as_str).to_string();
            *s.by_destination.entry(name).or_default() += 1;
        }
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

/// The first bytes of a binary payload in hex (the registry header first).
fn hex_start(b: &[u8]) -> String {
    const SHOWN: usize = 32;
    let hex: String = b.iter().take(SHOWN).map(|x| format!("{x:02x}")).collect();
    if b.len() > SHOWN {
        format!("{hex}…")
    } else {
        hex
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
            ("destination", &s.by_destination),
            ("age", &s.by_age),
        ] {
            if map.is_empty() && title == "destination" {
                continue;
            }
            writeln!(f, "\nby {title}:")?;
            for (k, n) in map {
                writeln!(f, "  {k:<32} {n:>8}")?;
            }
        }
        for d in &s.deleted {
            writeln!(
                f,
                "\nevents deleted unread: {}[{}] offsets {}..{}: {} records gone (retention or delete-records) before they were handled",
                s.topic, d.partition, d.from, d.to, d.count
            )?;
        }
        if !s.samples.is_empty() {
            writeln!(f, "\nsamples:")?;
            for (i, e) in s.samples.iter().enumerate() {
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
                let decoded = match s.decoded.get(i) {
                    Some(DecodedPayload::Json(v)) => Some(v.to_string()),
                    Some(DecodedPayload::Unreadable { reason, message }) => {
                        Some(format!("none, {reason}: {message}"))
                    }
                    Some(DecodedPayload::Omitted) | None => None,
                };
                if let Some(decoded) = decoded {
                    let (n, start) = (e.payload.len(), hex_start(&e.payload));
                    writeln!(f, "    payload: {n} bytes {start}")?;
                    writeln!(f, "    decoded: {decoded}")?;
                }
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
    fn deleted_unread_counts_what_was_neither_read_nor_replayed() {
        let starts = BTreeMap::from([(0, 10), (1, 0), (2, 5)]);
        // DLQ-like: partition 0 committed at 4.
        let committed = BTreeMap::from([(0, 4)]);
        let replayed: std::collections::HashSet<String> =
            ["2/1", "2/3", "2/7", "0/5"].map(String::from).into();
        let d = deleted_unread(&starts, &committed, &replayed);
        assert_eq!(
            d,
            vec![
                Deleted {
                    partition: 0,
                    from: 4,
                    to: 10,
                    count: 5
                },
                Deleted {
                    partition: 2,
                    from: 0,
                    to: 5,
                    count: 3
                },
            ],
            "0: 4..10 less 5 (replayed); 1: nothing deleted; 2: 0..5 less 1 and 3"
        );
    }

    #[test]
    fn summary_counts_by_destination_with_the_routes() {
        let cfg = crate::config::Config::from_toml(
            "[api]\nurl = \"http://127.0.0.1:9000/e\"\n[[api.routes]]\ntype = \"b.*\"\nurl = \"http://127.0.0.1:9001/b\"\ndestination = \"search\"\n",
        )
        .expect("valid");
        let mut a = sample();
        a.event_type = Some("b.indexed".into());
        let mut b = sample();
        b.event_type = Some("a.created".into());
        let (ab, bb) = (a.to_bytes(), b.to_bytes());
        let mut s = Summarizer::new("t.dlq", 0, 0).with_routes(&cfg.api);
        for v in [&ab, &ab, &bb] {
            s.add(Some(v));
        }
        let s = s.finish();
        assert_eq!(s.by_destination["search"], 2);
        assert_eq!(s.by_destination["http://127.0.0.1:9000"], 1);
        let table = Table(&s, 0).to_string();
        assert!(table.contains("by destination:"), "{table}");
        let without = summarize("t.dlq", [Some(&ab[..])], 0, 0);
        assert!(without.by_destination.is_empty());
    }

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
