//! `[api.batch]` (and `batch` per `[[api.routes]]` entry): many events per
//! request. `max_events = 1` (the default) is one request per event, exactly
//! as without the section.

use super::{invalid, ConfigError};
use crate::core::batch::{BatchFormat, BatchSpec, ResultsSpec};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `api.batch.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchFormatName {
    #[default]
    JsonArray,
    Ndjson,
    CloudeventsBatch,
    Template,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Events per request at most; 1: no batching.
    pub max_events: usize,
    /// Bytes of the encoded body at most (an event larger than this is sent alone).
    pub max_bytes: usize,
    /// The longest an event waits for its batch to fill.
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
    /// The request body: `json_array` (`[e1,e2,…]`, `application/json`), `ndjson`
    /// (one event per line, `application/x-ndjson`), `cloudevents_batch`
    /// (`application/cloudevents-batch+json`) or `template` (see `template`).
    pub format: BatchFormatName,
    /// With `format = "template"`: JSON with `$items` where the array goes.
    pub template: Option<String>,
    /// A JSON pointer to the array of per-item results in the answer (e.g.
    /// `"/items"`); none: a 2xx means every item is done.
    pub results: Option<String>,
    /// A JSON pointer, within a result, to its status.
    pub result_status: String,
    /// A JSON pointer, within a result, to its event id; none: by position.
    pub result_id: Option<String>,
    /// Statuses that answer a batch as a whole by splitting it in halves
    /// (down to single events, which are classified as usual).
    pub split: Vec<u16>,
    /// The API applies a batch's items in order: consecutive events of one
    /// key (of the partition with `pipeline.ordering = "partition"`) may
    /// share a batch, in offset order (`core::ordering`'s runs).
    pub ordered: bool,
    /// With `results`: the most of a 2xx answer read for its per-item
    /// results, in bytes per event of the batch (plus 64 KiB, at most 8 MiB
    /// in all). A longer answer gives every event of the batch "no result"
    /// (`no_result_too_large`: sent again). What the answers of the requests
    /// in flight can hold is then the batches' size, not 8 MiB each.
    pub answer_bytes_per_event: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_events: 1,
            max_bytes: 1_048_576,
            linger: Duration::from_millis(20),
            format: BatchFormatName::JsonArray,
            template: None,
            results: None,
            result_status: "/status".into(),
            result_id: None,
            split: vec![400, 413, 422],
            ordered: false,
            answer_bytes_per_event: 4096,
        }
    }
}

/// A route's `batch`: any field of `[api.batch]`, over it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchOverride {
    /// Over `api.batch.max_events`.
    pub max_events: Option<usize>,
    /// Over `api.batch.max_bytes`.
    pub max_bytes: Option<usize>,
    /// Over `api.batch.linger`.
    #[serde(with = "humantime_serde")]
    pub linger: Option<Duration>,
    /// Over `api.batch.format`.
    pub format: Option<BatchFormatName>,
    /// Over `api.batch.template`.
    pub template: Option<String>,
    /// Over `api.batch.results`.
    pub results: Option<String>,
    /// Over `api.batch.result_status`.
    pub result_status: Option<String>,
    /// Over `api.batch.result_id`.
    pub result_id: Option<String>,
    /// Over `api.batch.split`.
    pub split: Option<Vec<u16>>,
    /// Over `api.batch.ordered`.
    pub ordered: Option<bool>,
    /// Over `api.batch.answer_bytes_per_event`.
    pub answer_bytes_per_event: Option<usize>,
}

/// Whether a JSON pointer is well-formed (RFC 6901: empty, or `/…`).
fn pointer_ok(p: &str) -> bool {
    p.is_empty() || p.starts_with('/')
}

impl BatchConfig {
    /// This section with a route's fields over it.
    pub(crate) fn with(&self, o: &BatchOverride) -> BatchConfig {
        BatchConfig {
            max_events: o.max_events.unwrap_or(self.max_events),
            max_bytes: o.max_bytes.unwrap_or(self.max_bytes),
            linger: o.linger.unwrap_or(self.linger),
            format: o.format.unwrap_or(self.format),
            template: o.template.clone().or_else(|| self.template.clone()),
            results: o.results.clone().or_else(|| self.results.clone()),
            result_status: o
                .result_status
                .clone()
                .unwrap_or_else(|| self.result_status.clone()),
            result_id: o.result_id.clone().or_else(|| self.result_id.clone()),
            split: o.split.clone().unwrap_or_else(|| self.split.clone()),
            ordered: o.ordered.unwrap_or(self.ordered),
            answer_bytes_per_event: o
                .answer_bytes_per_event
                .unwrap_or(self.answer_bytes_per_event),
        }
    }

    /// The spec, checked; `None`: no batching (`max_events = 1`). `field` names
    /// the section in errors (`api.batch`, `api.routes[2].batch`).
    pub(crate) fn spec(&self, field: &str) -> Result<Option<BatchSpec>, ConfigError> {
        let f = |name: &str| format!("{field}.{name}");
        if self.max_events == 0 {
            return Err(invalid(
                &f("max_events"),
                "must be at least 1 (1: one event per request)",
            ));
        }
        if self.max_events > 10_000 {
            return Err(invalid(&f("max_events"), "must be at most 10000"));
        }
        if self.max_bytes < 1024 {
            return Err(invalid(&f("max_bytes"), "must be at least 1024"));
        }
        if self.linger > Duration::from_secs(10) {
            return Err(invalid(
                &f("linger"),
                "must be at most 10s (events wait this long for their batch)",
            ));
        }
        let format = match (self.format, &self.template) {
            (BatchFormatName::Template, Some(t)) => {
                BatchFormat::template(t).map_err(|e| invalid(&f("template"), e.to_string()))?
            }
            (BatchFormatName::Template, None) => {
                return Err(invalid(
                    &f("template"),
                    "is required with format = \"template\"",
                ))
            }
            (_, Some(_)) => {
                return Err(invalid(
                    &f("template"),
                    "is set but format is not \"template\"",
                ))
            }
            (BatchFormatName::JsonArray, None) => BatchFormat::JsonArray,
            (BatchFormatName::Ndjson, None) => BatchFormat::Ndjson,
            (BatchFormatName::CloudeventsBatch, None) => BatchFormat::CloudEventsBatch,
        };
        for (name, p) in [
            ("results", self.results.as_deref()),
            ("result_status", Some(self.result_status.as_str())),
            ("result_id", self.result_id.as_deref()),
        ] {
            if let Some(p) = p {
                if !pointer_ok(p) {
                    return Err(invalid(
                        &f(name),
                        "must be a JSON pointer (empty, or starting with /)",
                    ));
                }
            }
        }
        if self.result_id.is_some() && self.results.is_none() {
            return Err(invalid(
                &f("result_id"),
                "needs results (the pointer to the results array)",
            ));
        }
        if !(256..=crate::core::batch::MAX_ANSWER_BYTES).contains(&self.answer_bytes_per_event) {
            return Err(invalid(
                &f("answer_bytes_per_event"),
                "must be at least 256 and at most 8388608 (8 MiB)",
            ));
        }
        if let Some(s) = self.split.iter().find(|s| !(400..=599).contains(*s)) {
            return Err(invalid(
                &f("split"),
                format!("{s} is not a 4xx or 5xx status"),
            ));
        }
        if self.max_events == 1 {
            if self.ordered {
                return Err(invalid(
                    &f("ordered"),
                    "needs max_events of at least 2 (it lets events of one key share a batch)",
                ));
            }
            return Ok(None);
        }
        Ok(Some(BatchSpec {
            max_events: self.max_events,
            max_bytes: self.max_bytes,
            linger: self.linger,
            format,
            results: self.results.as_ref().map(|r| ResultsSpec {
                results: r.clone(),
                status: self.result_status.clone(),
                id: self.result_id.clone(),
            }),
            split: self.split.clone(),
            ordered: self.ordered,
            answer_bytes_per_event: self.answer_bytes_per_event,
            route: crate::core::batch::UNROUTED.to_string(),
        }))
    }
}

/// `api.rate_limit_unit`: what `api.rate_limit_per_sec` counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RateLimitUnit {
    /// Requests (a batch is one).
    #[default]
    Requests,
    /// Events (a batch of n takes n).
    Events,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<Option<BatchSpec>, ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn one_event_per_request_is_no_batching() {
        assert_eq!(BatchConfig::default().spec("api.batch").expect("ok"), None);
    }

    #[test]
    fn a_route_overrides_field_by_field() {
        let base = BatchConfig {
            max_events: 100,
            results: Some("/items".into()),
            ..BatchConfig::default()
        };
        let o = BatchOverride {
            max_events: Some(10),
            format: Some(BatchFormatName::Ndjson),
            ..BatchOverride::default()
        };
        let spec = base
            .with(&o)
            .spec("api.routes[0].batch")
            .expect("ok")
            .expect("batched");
        assert_eq!(spec.max_events, 10);
        assert_eq!(spec.format, BatchFormat::Ndjson);
        assert_eq!(spec.results.expect("results").results, "/items");
    }

    #[test]
    fn bad_batch_settings_name_their_field() {
        let c = |f: fn(&mut BatchConfig)| {
            let mut b = BatchConfig {
                max_events: 10,
                ..BatchConfig::default()
            };
            f(&mut b);
            field(b.spec("api.batch"))
        };
        assert_eq!(c(|b| b.max_events = 0), "api.batch.max_events");
        assert_eq!(c(|b| b.max_bytes = 10), "api.batch.max_bytes");
        assert_eq!(
            c(|b| b.format = BatchFormatName::Template),
            "api.batch.template"
        );
        assert_eq!(c(|b| b.template = Some("{}".into())), "api.batch.template");
        assert_eq!(
            c(|b| {
                b.format = BatchFormatName::Template;
                b.template = Some("{\"e\": items}".into())
            }),
            "api.batch.template"
        );
        assert_eq!(c(|b| b.results = Some("items".into())), "api.batch.results");
        assert_eq!(
            c(|b| b.result_id = Some("/id".into())),
            "api.batch.result_id"
        );
        assert_eq!(c(|b| b.split = vec![200]), "api.batch.split");
        assert_eq!(
            c(|b| b.linger = Duration::from_secs(60)),
            "api.batch.linger"
        );
    }
}
