//! The partition machine's [`Intake`]: each polled record decoded before
//! the machine takes it in ([`Polled`]).

use super::choose::Decision;
use super::Src;
use crate::core::classify::FailureReason;
use crate::core::destination::DestinationId;
use crate::core::envelope::Envelope;
use crate::core::event::DecodeOptions;
use crate::core::input::{decode_record, BodyType, InputFormat, JsonInput, RecordIn};
use crate::core::mapping::Target;
use crate::core::ordering::RunGroup;
use crate::core::partition::{Begun, Intake, Kind};
use crate::core::schema::{decode_framed, JsonOptions};
use crate::delivery::{Item, Keys, Work};
use crate::kafka::Record;
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use std::sync::Arc;

/// Decodes records before the machine takes them in: the configured input format
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
    /// Registry formats: the schemas the gate fetched (`schemas::SchemaGate`).
    schemas: Option<super::schemas::Known>,
    json_options: JsonOptions,
    /// How far ahead a DLQ envelope's first entry may plausibly be: twice the
    /// DLQ backoff cap, plus a minute of clock skew between instances.
    max_wait_ms: i64,
    /// `degraded.dlq_backoff_cap`: the longest a DLQ record waits for its round.
    backoff_cap_ms: i64,
    /// With a route that sends ordered runs (`ordered = true`): the
    /// batching of events no route matches, and the longest run
    /// (`pipeline.concurrency`: a run takes a permit per event).
    runs: Option<Runs>,
    /// The routes and filters (compiled once, `Pipeline`): what chooses each
    /// event's route and destination, and drops events (`super::choose`).
    choice: super::choose::Chooser,
}

struct Runs {
    default: Option<Arc<crate::core::batch::BatchSpec>>,
    cap: usize,
}

/// A polled record, decoded before the machine takes it in: its place, the
/// bytes it held as polled (what the budgets count), and its job.
#[derive(Debug)]
pub(crate) struct Polled {
    src: Src,
    offset: i64,
    size: usize,
    begun: Begun<Item>,
}

impl Intake for Decoder {
    type Raw = Polled;
    type Item = Item;

    fn position(d: &Polled) -> (Src, i64) {
        (d.src, d.offset)
    }

    fn begin(d: Polled) -> Begun<Item> {
        d.begun
    }

    fn key(item: &Item) -> Option<&[u8]> {
        item.entity_key()
    }

    fn destination(item: &Item) -> DestinationId {
        item.target.destination
    }

    fn origin(item: &Item) -> Option<i64> {
        match &item.work {
            // DLQ p is paired with main p: an envelope of another
            // partition has no place in this one's order.
            Work::FromDlq(env) if env.origin.partition == item.partition => Some(env.origin.offset),
            _ => None,
        }
    }

    fn size(d: &Polled) -> usize {
        d.size
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
            target: old.target,
            work: Work::Park {
                reason: FailureReason::InternalError,
                message: format!("delivery work vanished {times} times without an outcome"),
            },
        }
    }
}

impl Decoder {
    /// Decodes a polled record, before the machine takes it in: every
    /// record the consumer hands over (one the machine drops or hands back
    /// is decoded again when it is read again).
    pub(crate) fn decode(&self, r: Record) -> Polled {
        let (src, offset, size) = (r.src, r.offset, r.size());
        count_names_not_utf8(r.headers.as_deref());
        let park = |reason: &'static str, message: String| Work::Park {
            reason: FailureReason::Input(reason),
            message,
        };
        let (mut entity_key, mut body_type) = (None, BodyType::default());
        let mut target = Target::DEFAULT;
        let work = match (src, r.payload.as_deref()) {
            (Src::Main, _) => match self.decode_main(&r) {
                Ok(d) => {
                    self.crash_hook(&d.event.id);
                    // The body's entity key, when it differs from the record's.
                    entity_key = d.key.filter(|k| Some(k) != r.key.as_ref());
                    body_type = d.body_type;
                    let record = super::choose::Record {
                        key: entity_key.as_deref().or(r.key.as_deref()),
                        record_key: r.key.as_deref(),
                        headers: r.headers.as_deref().unwrap_or_default(),
                        topic: &self.topics[Src::Main.index()],
                        partition: self.partition,
                        offset: r.offset,
                    };
                    match self.choice.decide(&d.event, body_type, record) {
                        Decision::Deliver(t) => {
                            target = t;
                            Work::Deliver(d.event)
                        }
                        Decision::Filtered(filter) => Work::Filtered { filter },
                        Decision::Park(message) => Work::Park {
                            reason: FailureReason::ExpressionFailed,
                            message,
                        },
                    }
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
                Ok(env) => {
                    // Drained by the key its event is ordered by: the entity
                    // key, when the body names one (as on main p).
                    entity_key = self
                        .entity_key_of(&env)
                        .filter(|k| Some(k) != r.key.as_ref());
                    // Redelivered where it was going: its recorded route.
                    match self.dlq_target(&env, entity_key.as_deref(), r.offset) {
                        Ok(t) => {
                            target = t;
                            Work::FromDlq(Box::new(env))
                        }
                        Err(message) => Work::Park {
                            reason: FailureReason::ExpressionFailed,
                            message,
                        },
                    }
                }
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
            // Nothing to order: parked, or done without a request.
            Work::Park { .. } | Work::Filtered { .. } => Kind::Immediate,
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
            target,
            work,
        };
        let run = self.run_group(&item);
        Polled {
            src,
            offset,
            size,
            begun: Begun { item, kind, run },
        }
    }

    /// The run group of an event whose route sends ordered runs.
    fn run_group(&self, item: &Item) -> Option<RunGroup> {
        let (Some(runs), Work::Deliver(_)) = (&self.runs, &item.work) else {
            return None;
        };
        self.choice
            .routes()
            .run_group(item.target.route, runs.default.as_deref(), runs.cap)
    }
    pub(crate) fn new(pipeline: Arc<Pipeline>, partition: i32, topics: [&str; 2]) -> Decoder {
        let cap = i64::try_from(pipeline.config.degraded.dlq_backoff_cap_ms()).unwrap_or(i64::MAX);
        let api = &pipeline.config.api;
        // Checked when the configuration was read.
        let runs = match api.batch_spec() {
            Ok(default) if pipeline.routes.any_ordered(default.as_deref()) => Some(Runs {
                default,
                cap: pipeline.config.pipeline.concurrency.max(1),
            }),
            _ => None,
        };
        Decoder {
            runs,
            choice: super::choose::Chooser::new(&pipeline),
            max_wait_ms: cap.saturating_mul(2).saturating_add(60_000),
            backoff_cap_ms: cap,
            options: pipeline.config.pipeline.decode_options(),
            format: pipeline.config.input.format,
            json: pipeline.config.input.json(),
            schemas: None,
            json_options: pipeline.config.input.json_options(),
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
    fn decode_main(
        &self,
        r: &Record,
    ) -> Result<crate::core::input::Decoded, (&'static str, String)> {
        self.decode_in(&RecordIn {
            value: r.payload.as_ref(),
            headers: r.headers.as_deref().unwrap_or_default(),
            topic: &self.topics[Src::Main.index()],
            partition: self.partition,
            offset: r.offset,
        })
    }

    /// The entity key of a DLQ envelope's event (`input.key`): the one it
    /// records, or, in an envelope written before envelopes recorded it,
    /// the one its payload names (read as main p's records are).
    fn entity_key_of(&self, env: &Envelope) -> Option<Vec<u8>> {
        if self.json.key.is_empty() {
            return None;
        }
        if env.entity_key.is_some() || env.payload.is_empty() {
            return env.entity_key.clone();
        }
        let headers = crate::core::envelope::OriginHeader::to_record(&env.origin_headers);
        self.decode_original(env, &headers).and_then(|d| d.key)
    }

    /// An envelope's original record (its payload and origin headers, at
    /// its origin offset) decoded as main p's records are; `None` when it
    /// does not decode.
    fn decode_original(
        &self,
        env: &Envelope,
        headers: &[crate::core::input::Header],
    ) -> Option<crate::core::input::Decoded> {
        let value = bytes::Bytes::copy_from_slice(&env.payload);
        let rec = RecordIn {
            value: Some(&value),
            headers,
            topic: &self.topics[Src::Main.index()],
            partition: self.partition,
            offset: env.origin.offset,
        };
        self.decode_in(&rec).ok()
    }

    /// Where a DLQ record goes: the route its envelope records; chosen
    /// again (from its payload, read as main p's records are) when the
    /// envelope records none (`api.url`, or written before envelopes
    /// recorded it) or names one the routes no longer have (logged and
    /// counted). `Err`: a `when` failed and parks it.
    fn dlq_target(&self, env: &Envelope, entity: Option<&[u8]>, at: i64) -> Result<Target, String> {
        let routes = self.choice.routes();
        if let Some(name) = env.route.as_deref() {
            if let Some(i) = routes.by_name(name) {
                return Ok(self.choice.target(Some(i)));
            }
            tracing::warn!(
                partition = self.partition,
                dlq_offset = at,
                route = name,
                "a DLQ event's route no longer exists: its route is chosen again from the current routes"
            );
            metrics::counter!(m::ROUTE_REPICKED).increment(1);
        }
        let Some(event_type) = env.event_type.as_deref() else {
            return Ok(Target::DEFAULT);
        };
        if !routes.any_when() || env.payload.is_empty() {
            return Ok(self.choice.by_type(event_type));
        }
        let headers = crate::core::envelope::OriginHeader::to_record(&env.origin_headers);
        let Some(d) = self.decode_original(env, &headers) else {
            return Ok(self.choice.by_type(event_type));
        };
        let record = super::choose::Record {
            key: entity.or(env.key.as_deref()),
            record_key: env.key.as_deref(),
            headers: &headers,
            topic: &self.topics[Src::Main.index()],
            partition: env.origin.partition,
            offset: env.origin.offset,
        };
        self.choice.route_again(&d.event, d.body_type, record)
    }

    fn decode_in(
        &self,
        rec: &RecordIn<'_>,
    ) -> Result<crate::core::input::Decoded, (&'static str, String)> {
        if !self.format.uses_registry() {
            return decode_record(rec, self.format, &self.json, &self.options)
                .map_err(|e| (e.reason(), e.to_string()));
        }
        let known = self.schemas.as_ref().and_then(|k| k.lock().ok());
        decode_framed(
            rec,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::status_page::{BoardInfo, StatusBoard};

    fn decoder() -> Decoder {
        let toml = "[input]\nformat = \"json\"\nid = \"/id\"\nkey = \"/k\"\n";
        let config = Config::from_toml(toml).expect("the test's config parses");
        let board = Arc::new(StatusBoard::new(
            BoardInfo::new(&config, "test".into()),
            now_ms(),
        ));
        let pipeline = Arc::new(Pipeline::new(config, board).expect("valid"));
        Decoder::new(pipeline, 0, ["events", "events.dlq"])
    }

    fn record(src: Src, offset: i64, key: Option<&[u8]>, payload: Vec<u8>) -> Record {
        Record {
            partition: 0,
            offset,
            src,
            key: key.map(<[u8]>::to_vec),
            payload: Some(bytes::Bytes::from(payload)),
            timestamp_ms: None,
            headers: None,
        }
    }

    /// The DLQ drain orders an event by the key main p ordered it by: the
    /// entity key from the body (`input.key`), not the DLQ record's Kafka
    /// key (seen failing: a record without a key was drained keyless, so
    /// an entity's envelopes went out concurrently).
    #[test]
    fn a_dlq_record_is_keyed_by_its_events_entity_key() {
        let d = decoder();
        let body = br#"{"id":"e-1","type":"t","k":"entity-7"}"#.to_vec();
        let main = d.decode(record(Src::Main, 5, None, body.clone())).begun;
        assert_eq!(Decoder::key(&main.item), Some(&b"entity-7"[..]));
        let mut env = crate::core::envelope::tests::sample();
        env.key = None;
        env.payload = body;
        env.origin.partition = 0;
        env.origin.offset = 5;
        env.not_before_ms = now_ms();
        env.first_dlq_at_ms = now_ms();
        // Written by this version: the envelope records the entity key.
        env.entity_key = main.item.keys.entity.clone();
        let dlq = d.decode(record(Src::Dlq, 0, None, env.to_bytes())).begun;
        assert!(
            matches!(dlq.item.work, Work::FromDlq(_)),
            "{:?}",
            dlq.item.work
        );
        assert_eq!(Decoder::key(&dlq.item), Some(&b"entity-7"[..]));
        // An envelope of an earlier version: read from its payload.
        env.entity_key = None;
        let old = d.decode(record(Src::Dlq, 1, None, env.to_bytes())).begun;
        assert_eq!(Decoder::key(&old.item), Some(&b"entity-7"[..]));
    }
}

#[cfg(test)]
mod route_tests {
    use super::*;
    use crate::config::Config;
    use crate::core::mapping::RouteIndex;
    use crate::status_page::{BoardInfo, StatusBoard};

    const ROUTES: &str = r#"
[api]
url = "http://127.0.0.1:9/default"

[[api.routes]]
name = "big"
type = "order.*"
when = 'event.data.amount > 1000'
url = "http://127.0.0.1:9/big"

[[api.routes]]
name = "careful"
type = "order.*"
when = 'event.data.qty > 0'
on_error = "skip"
url = "http://127.0.0.1:9/careful"

[[api.routes]]
name = "all"
type = "order.*"
url = "http://127.0.0.1:9/all"
"#;

    fn decoder() -> Decoder {
        let config = Config::from_toml(ROUTES).expect("the test's config parses");
        let board = Arc::new(StatusBoard::new(
            BoardInfo::new(&config, "test".into()),
            now_ms(),
        ));
        let pipeline = Arc::new(Pipeline::new(config, board).expect("valid"));
        Decoder::new(pipeline, 0, ["events", "events.dlq"])
    }

    fn body(id: &str, data: &str) -> Vec<u8> {
        format!(r#"{{"specversion":"1.0","id":"{id}","type":"order.created","source":"/t","data":{data}}}"#)
            .into_bytes()
    }

    fn record(src: Src, offset: i64, payload: Vec<u8>) -> Record {
        Record {
            partition: 0,
            offset,
            src,
            key: None,
            payload: Some(bytes::Bytes::from(payload)),
            timestamp_ms: None,
            headers: None,
        }
    }

    fn route_of(item: &Item) -> Option<u16> {
        item.target.route.map(|RouteIndex(i)| i)
    }

    /// The first route whose type and `when` match; a failing `when` parks
    /// (`on_error = "park"`) or is passed over (`"skip"`).
    #[test]
    fn the_first_route_whose_type_and_when_match() {
        let d = decoder();
        let big = d
            .decode(record(Src::Main, 0, body("a", r#"{"amount":5000}"#)))
            .begun;
        assert_eq!(route_of(&big.item), Some(0));
        let careful = d
            .decode(record(Src::Main, 1, body("b", r#"{"amount":5,"qty":1}"#)))
            .begun;
        assert_eq!(route_of(&careful.item), Some(1));
        // `careful` fails (no qty) and skips: the next route.
        let all = d
            .decode(record(Src::Main, 2, body("c", r#"{"amount":5}"#)))
            .begun;
        assert_eq!(route_of(&all.item), Some(2));
        // `big` fails (no amount) and parks.
        let parked = d
            .decode(record(Src::Main, 3, body("d", r#"{"qty":1}"#)))
            .begun;
        match &parked.item.work {
            Work::Park { reason, message } => {
                assert_eq!(*reason, FailureReason::ExpressionFailed);
                assert!(message.contains("route `big`"), "{message}");
            }
            w => panic!("{w:?}"),
        }
        assert_eq!(parked.kind, Kind::Immediate);
    }

    /// A DLQ record goes to the route its envelope records, whatever its
    /// event would choose now; a recorded route that is gone, or none, is
    /// chosen again from the event.
    #[test]
    fn a_dlq_record_goes_to_its_recorded_route() {
        let d = decoder();
        let envelope = |route: Option<&str>, data: &str| {
            let mut env = crate::core::envelope::tests::sample();
            env.event_type = Some("order.created".into());
            env.payload = body("e", data);
            env.origin_headers = Vec::new();
            env.origin.partition = 0;
            env.not_before_ms = now_ms();
            env.first_dlq_at_ms = now_ms();
            env.route = route.map(String::from);
            env.to_bytes()
        };
        let kept = d
            .decode(record(
                Src::Dlq,
                0,
                envelope(Some("all"), r#"{"amount":5000}"#),
            ))
            .begun;
        assert!(matches!(kept.item.work, Work::FromDlq(_)));
        assert_eq!(route_of(&kept.item), Some(2));
        let gone = d
            .decode(record(
                Src::Dlq,
                1,
                envelope(Some("gone"), r#"{"amount":5000}"#),
            ))
            .begun;
        assert_eq!(route_of(&gone.item), Some(0));
        let older = d
            .decode(record(
                Src::Dlq,
                2,
                envelope(None, r#"{"amount":5,"qty":2}"#),
            ))
            .begun;
        assert_eq!(route_of(&older.item), Some(1));
    }
}
