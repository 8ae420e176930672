//! The partition machine's [`Intake`]: decodes records as they are begun.

use super::Src;
use crate::core::classify::FailureReason;
use crate::core::destination::DestinationId;
use crate::core::envelope::Envelope;
use crate::core::event::DecodeOptions;
use crate::core::input::{decode_record, BodyType, InputFormat, JsonInput, RecordIn};
use crate::core::ordering::RunGroup;
use crate::core::partition::{Begun, Intake, Kind};
use crate::core::schema::{decode_framed, JsonOptions};
use crate::delivery::{Item, Keys, Work};
use crate::kafka::Record;
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use std::sync::Arc;

/// Decodes records as the machine begins them: the configured input format
/// (`core::input`) on main p, envelopes on DLQ p; bad input becomes
/// `Work::Park` with its reason.
pub(crate) struct Decoder {
    /// For the test fault hook (`testing.crash_on_event_id`).
    #[cfg(feature = "test-hooks")]
    pipeline: Arc<Pipeline>,
    partition: i32,
    topics: [Arc<str>; 2],
    options: DecodeOptions,
    format: InputFormat,
    json: JsonInput,
    consumed: [metrics::Counter; 2],
    /// Registry formats: the schemas the gate fetched (`schemas::SchemaGate`).
    schemas: Option<super::schemas::Known>,
    json_options: JsonOptions,
    /// How far ahead a DLQ envelope's first entry may plausibly be: twice the
    /// DLQ backoff cap, plus a minute of clock skew between instances.
    max_wait_ms: i64,
    /// `degraded.dlq_backoff_cap`: the longest a DLQ record waits for its round.
    backoff_cap_ms: i64,
    /// With a route that sends ordered runs (`ordered = true`): the routes,
    /// the batching of events no route matches, and the longest run
    /// (`pipeline.concurrency`: a run takes a permit per event).
    runs: Option<Runs>,
    /// With more than one destination: the routes that choose each event's
    /// (`core::destination`); with one, every event goes to it.
    destinations: Option<crate::core::mapping::Routes>,
}

struct Runs {
    routes: crate::core::mapping::Routes,
    default: Option<Arc<crate::core::batch::BatchSpec>>,
    cap: usize,
}

impl Intake for Decoder {
    type Raw = Record;
    type Item = Item;

    fn position(r: &Record) -> (Src, i64) {
        (r.src, r.offset)
    }

    fn begin(&mut self, src: Src, r: Record) -> Begun<Item> {
        self.consumed[src.index()].increment(1);
        count_names_not_utf8(r.headers.as_deref());
        let park = |reason: &'static str, message: String| Work::Park {
            reason: FailureReason::Input(reason),
            message,
        };
        let (mut entity_key, mut body_type) = (None, BodyType::default());
        let work = match (src, r.payload.as_deref()) {
            (Src::Main, _) => match self.decode(&r) {
                Ok(d) => {
                    self.crash_hook(&d.event.id);
                    // The body's entity key, when it differs from the record's.
                    entity_key = d.key.filter(|k| Some(k) != r.key.as_ref());
                    body_type = d.body_type;
                    Work::Deliver(d.event)
                }
                Err((reason, e)) => {
                    tracing::info!(partition = self.partition, offset = r.offset, reason, error = %e, "bad input, parking");
                    park(reason, e)
                }
            },
            // A forged or corrupted envelope (absurd retries, negative
            // coordinates) is parked `invalid_envelope` instead of blocking the
            // drain at the head of DLQ p; a `not_before` past this Courier's
            // backoff cap waits the cap.
            (Src::Dlq, Some(bytes)) => match Envelope::from_bytes(bytes).and_then(|env| {
                let now = now_ms();
                env.check(now, self.max_wait_ms)
                    .map(|()| env.wait_capped(now, self.backoff_cap_ms))
            }) {
                Ok(env) => Work::FromDlq(Box::new(env)),
                Err(e) => {
                    tracing::warn!(partition = self.partition, offset = r.offset, reason = e.reason(), error = %e, "DLQ record is not a usable envelope, parking");
                    park(e.reason(), e.to_string())
                }
            },
            (Src::Dlq, None) => Work::Park {
                reason: FailureReason::UnreadableEnvelope,
                message: "DLQ record without a value".into(),
            },
        };
        let kind = match &work {
            Work::Deliver(_) => Kind::Ordered,
            Work::FromDlq(env) => Kind::Queued {
                not_before_ms: env.not_before_ms,
            },
            Work::Park { .. } => Kind::Immediate,
        };
        let destination = match (&self.destinations, &work) {
            (Some(routes), Work::Deliver(ev)) => routes.destination(&ev.event_type),
            (Some(routes), Work::FromDlq(env)) => env
                .event_type
                .as_deref()
                .map_or(DestinationId::DEFAULT, |t| routes.destination(t)),
            _ => DestinationId::DEFAULT,
        };
        let item = Item {
            topic: self.topics[src.index()].clone(),
            partition: self.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
            keys: Keys {
                record: r.key,
                entity: entity_key,
            },
            payload: r.payload,
            headers: r.headers,
            body_type,
            destination,
            work,
        };
        Begun { item, kind }
    }

    fn key(item: &Item) -> Option<&[u8]> {
        item.entity_key()
    }

    fn destination(item: &Item) -> DestinationId {
        item.destination
    }

    fn origin(item: &Item) -> Option<i64> {
        match &item.work {
            // DLQ p is paired with main p: an envelope of another
            // partition is not one this partition wrote.
            Work::FromDlq(env) if env.origin.partition == item.partition => Some(env.origin.offset),
            _ => None,
        }
    }

    fn run_group(&self, item: &Item) -> Option<RunGroup> {
        let (Some(runs), Work::Deliver(ev)) = (&self.runs, &item.work) else {
            return None;
        };
        runs.routes
            .run_group(&ev.event_type, runs.default.as_deref(), runs.cap)
    }

    fn size(r: &Record) -> usize {
        r.size()
    }

    fn park_internal(old: &Item, times: u32) -> Item {
        Item {
            topic: old.topic.clone(),
            partition: old.partition,
            offset: old.offset,
            timestamp_ms: old.timestamp_ms,
            keys: old.keys.clone(),
            payload: old.payload.clone(),
            headers: old.headers.clone(),
            body_type: old.body_type,
            destination: old.destination,
            work: Work::Park {
                reason: FailureReason::InternalError,
                message: format!("delivery work vanished {times} times without an outcome"),
            },
        }
    }
}

impl Decoder {
    pub(crate) fn new(pipeline: Arc<Pipeline>, partition: i32, topics: [&str; 2]) -> Decoder {
        let cap = i64::try_from(pipeline.config.degraded.dlq_backoff_cap_ms()).unwrap_or(i64::MAX);
        let api = &pipeline.config.api;
        // Checked when the configuration was read.
        let runs = match (api.routes(), api.batch_spec()) {
            (Ok(routes), Ok(default)) if routes.any_ordered(default.as_deref()) => Some(Runs {
                routes,
                default,
                cap: pipeline.config.pipeline.concurrency.max(1),
            }),
            _ => None,
        };
        let destinations = api.routes().ok().filter(|r| r.destinations().len() > 1);
        Decoder {
            runs,
            destinations,
            max_wait_ms: cap.saturating_mul(2).saturating_add(60_000),
            backoff_cap_ms: cap,
            options: pipeline.config.pipeline.decode_options(),
            format: pipeline.config.input.format,
            json: pipeline.config.input.json(),
            schemas: None,
            json_options: pipeline.config.input.json_options(),
            consumed: topics.map(|t| metrics::counter!(m::CONSUMED, "topic" => t.to_string())),
            topics: topics.map(Arc::from),
            #[cfg(feature = "test-hooks")]
            pipeline,
            partition,
        }
    }

    /// Registry formats: where the gate leaves the schemas.
    pub(crate) fn use_schemas(&mut self, known: super::schemas::Known) {
        self.schemas = Some(known);
    }

    /// A main-topic record in the configured input format, or why it is
    /// parked (reason, message).
    fn decode(&self, r: &Record) -> Result<crate::core::input::Decoded, (&'static str, String)> {
        let rec = RecordIn {
            value: r.payload.as_ref(),
            headers: r.headers.as_deref().unwrap_or_default(),
            topic: &self.topics[Src::Main.index()],
            partition: self.partition,
            offset: r.offset,
        };
        if !self.format.uses_registry() {
            return decode_record(&rec, self.format, &self.json, &self.options)
                .map_err(|e| (e.reason(), e.to_string()));
        }
        let known = self.schemas.as_ref().and_then(|k| k.lock().ok());
        decode_framed(
            &rec,
            self.format,
            |id| known.as_ref().and_then(|k| k.get(&id)).map(|s| &**s),
            &self.json,
            &self.options,
            self.json_options,
        )
    }

    /// The topic of one side.
    pub(crate) fn topic(&self, src: Src) -> &str {
        &self.topics[src.index()]
    }

    /// Test fault hook (`testing.crash_on_event_id`): panics once per process, or
    /// every time with `testing.crash_repeatedly`. Only in a build with the cargo
    /// feature `test-hooks` (a release build refuses the `[testing]` section).
    #[cfg(not(feature = "test-hooks"))]
    fn crash_hook(&self, _id: &str) {}

    #[cfg(feature = "test-hooks")]
    fn crash_hook(&self, id: &str) {
        /// Set once the hook fired: "once" is per process.
        static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let cfg = &self.pipeline.config.testing;
        if cfg.crash_on_event_id.as_deref() != Some(id) {
            return;
        }
        let first = !FIRED.swap(true, std::sync::atomic::Ordering::SeqCst);
        if first || cfg.crash_repeatedly {
            panic!("test fault hook: partition actor crashes on event {id}");
        }
    }
}

/// Counts header names that are not UTF-8 (`courier_header_names_not_utf8_total`):
/// kept as bytes, never forwarded nor read as attributes (`core::input::HeaderName`).
fn count_names_not_utf8(headers: Option<&[crate::core::input::Header]>) {
    let bad = headers
        .unwrap_or_default()
        .iter()
        .filter(|(name, _)| name.as_str().is_none())
        .count();
    if bad > 0 {
        metrics::counter!(m::HEADER_NAMES_NOT_UTF8).increment(bad as u64);
    }
}
