//! The schema registry client (`[input.schema_registry]`): writers' schemas by
//! id (`GET {url}/schemas/ids/{id}`, the Confluent API that Apicurio's
//! `ccompat`, Redpanda and Karapace serve too), references resolved (by
//! subject and version, transitively, each once per resolution:
//! `core::schema::registry::Resolution`), parsed or compiled once for
//! `input.format` (`core::schema::Resolved::compile`: Avro, Protobuf, JSON
//! Schema) and cached within `cache_max_bytes`. One fetch per id however many
//! partitions wait for it (moka's `try_get_with` coalesces them).
//!
//! What an answer means is `core::schema::registry`'s to say: a schema; an
//! answer that says nothing of the schema (no connection, a timeout, 5xx, 401,
//! 403, 408, 429, a body that is not JSON) → [`FetchError::Unavailable`],
//! systemic: the partition waits and asks again, nothing is parked for it and
//! nothing is cached; an answer that can never become a schema (404, another
//! 4xx, JSON that is not a schema, a reference that 404s, references nested
//! too deep or past `cache_max_bytes`, a schema its compiler crashed on) →
//! [`Resolved::Unknown`] or [`Resolved::Refused`]: the records naming the id
//! are parked with its reason, and the answer is cached for
//! `negative_cache_ttl` (one request per id per period, however many records
//! name it), then asked again.
//!
//! # Invariant I35: schema registry
//!
//! `input.format = "avro"`, `"protobuf"`, `"json_schema"`: the partition actor's `SchemaGate` (`actors::partition::schemas`)
//! reads each main-topic record's schema id (`core::schema::frame`) before the machine sees the
//! record. A record whose schema this partition has not resolved waits there, with every main
//! record after it (offset order), main p is paused and the schema is fetched in a task of its
//! own (`schema_registry::SchemaRegistry::get`: moka's `try_get_with`, so all partitions waiting
//! for one id share one request; answers cached within `cache_max_bytes`, failures not cached).
//! No answer, a timeout, 5xx or 401 is systemic: the task asks again with a back-off (250 ms
//! doubling to 5 s) until the registry answers; nothing is parked and the waiting records were
//! never begun, so no store passes them (I1) and a drain drops them unbegun for the next owner.
//! A 404 is asked again after 0.5 s and 1 s (`core::schema::registry::ask_again`: a follower
//! registry may lag its leader), then resolves the id as unknown: its records are parked
//! `unknown_schema`. Ids the registry keeps refusing are asked for at a bounded rate per
//! partition (`core::schema::unknown_ids`); past it, their records are parked without a fetch.
//! What one answer may make Courier hold is bounded before it is compiled
//! (`core::schema::registry::Resolution`: every list of references, text and named entry
//! charged to `cache_max_bytes`, references capped, texts shared). The fetcher makes
//! the answer usable once per id, off the async workers (`core::schema::Resolved::compile`,
//! pure): a schema whose `schemaType` is not the one `input.format` reads resolves as `Other`
//! (parked `wrong_schema_type`, its references never fetched); an Avro schema is parsed
//! (`apache-avro`), a Protobuf schema compiled with `protox` (its `references` are the
//! imported files, by import path; `google/protobuf/*.proto` ship with it; the text may be
//! `.proto` source or a base64 `FileDescriptorProto`, as Apicurio keeps what confluent-kafka's
//! Python serializer registers) into a `prost-reflect` descriptor pool, a JSON Schema compiled
//! with `jsonschema` (references served to `$ref`s by name from memory; nothing fetched or read
//! from disk). A schema that does not compile resolves as `Broken` (parked `malformed_avro` /
//! `malformed_protobuf` / `malformed_json_schema`), cached like the others. The machine's
//! decoding stays synchronous and pure (`core::schema::decode_framed`: the header, then Avro →
//! JSON (`core::schema::avro`), Protobuf → JSON (`core::schema::protobuf`: the message-index
//! list picks the message type, `prost-reflect` decodes it and writes the canonical proto3 JSON
//! into a buffer bounded by `max_event_bytes`; prost's recursion limit bounds nesting), or a JSON
//! Schema check of the JSON as written (`core::schema::json_schema`: violations named by
//! instance path, at most three, each cut to 200 bytes and escaped, parked `schema_invalid`), then the
//! `json` reading of `core::input`). The actor's mailbox stays
//! open while a partition waits (completions, timers, drains), and every other partition goes
//! on. The DLQ drain (`delivery::drain::decode_envelope`) asks the same registry cache for a
//! DLQ record's schema; a registry that does not answer is a systemic round
//! (`schema_registry_unavailable`: back to the DLQ, no retry used, the breaker not told, never
//! parked). `courier dlq replay` writes the original bytes, so a replayed record passes this
//! gate again; `courier dlq inspect` decodes its samples with `core::schema::framed_json`.
//!
//! *Tested by:* `core::schema` unit tests; `actors::partition::schemas` unit tests;
//! `tests/schema_memory.rs` (a running Courier's peak RSS under a registry answer naming
//! 60,000 references, 40,000 records naming random ids, Protobuf records of 900,000 values);
//! `tests/schema_registry.rs` against Apicurio Registry (`scripts/apicurio.sh`) with records
//! from confluent-kafka's serializers: every field type delivered as documented, a new version
//! mid-topic, bad records parked by reason, one fetch per id, the registry down 10 s, and the
//! DLQ drain / inspect / replay of Avro events; `tests/schema_formats.rs` against Apicurio with
//! records from confluent-kafka's `ProtobufSerializer` and `JSONSerializer`: Protobuf messages
//! (every field type, an imported file, a well-known type, a nested message index `[1, 0]`)
//! delivered as canonical proto3 JSON, JSON Schema records (a schema referencing another
//! subject) delivered as written, and the records that cannot be read parked by reason
//! (`malformed_protobuf`, `schema_invalid` naming the failing part, `malformed_json`,
//! `unknown_schema`, `not_registry_framed`, `wrong_schema_type`). The `core::schema` tests
//! decode bytes those serializers wrote against Apicurio (`core/schema/fixtures/make.py`).

use crate::config::schema_registry::{RegistryAuth, SchemaRegistryConfig};
use crate::core::input::InputFormat;
use crate::core::schema::registry::{self as decide, Asked, Failure, Resolution, SchemaAnswer};
pub(crate) use crate::core::schema::Resolved;
use crate::core::schema::{expected_kind, schema_kind, RegistryRefusal};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `courier_schema_registry_fetches_total{result}`: fetches by outcome
/// (`ok`, `unknown`, `refused`, `unavailable`), and ids a partition did not
/// ask for (`not_asked`: `core::schema::unknown_ids`).
pub(crate) const FETCHES: &str = "courier_schema_registry_fetches_total";
/// `courier_schema_registry_waiting_partitions`: partitions waiting for a schema.
pub(crate) const WAITING: &str = "courier_schema_registry_waiting_partitions";

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum FetchError {
    /// Systemic: the registry did not answer usefully.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
}

/// How long the cache keeps an answer: a schema while the budget allows, an
/// answer that parks records `negative` long.
struct Ttl {
    negative: Duration,
}

impl moka::Expiry<u32, Arc<Resolved>> for Ttl {
    fn expire_after_create(
        &self,
        _id: &u32,
        value: &Arc<Resolved>,
        _now: Instant,
    ) -> Option<Duration> {
        value.is_refusal().then_some(self.negative)
    }
}

pub struct SchemaRegistry {
    http: Result<reqwest::Client, String>,
    base: String,
    auth: RegistryAuth,
    /// What schemas are compiled for (`input.format`); others are `Other`.
    format: InputFormat,
    /// The most bytes of schema text one id may bring, its references
    /// included (`cache_max_bytes`).
    max_answer_bytes: usize,
    /// How long an answer that parks records is kept (`negative_cache_ttl`).
    negative_ttl: Duration,
    cache: moka::future::Cache<u32, Arc<Resolved>>,
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("base", &self.base)
            .field("auth", &self.auth)
            .field("format", &self.format)
            .finish()
    }
}

impl SchemaRegistry {
    /// Never fails: a client that cannot be built (a CA file that went away
    /// since the config was checked) makes every fetch `Unavailable`, said in
    /// the log, and the partitions wait. Schemas are compiled for `format`.
    pub(crate) fn new(cfg: &SchemaRegistryConfig, format: InputFormat) -> SchemaRegistry {
        let auth = cfg.auth().unwrap_or_else(|e| {
            tracing::error!(error = %e, "schema registry credentials");
            RegistryAuth::None
        });
        let http = build_client(cfg);
        if let Err(e) = &http {
            tracing::error!(error = %e, "schema registry client");
        }
        let budget = cfg.cache_max_bytes as u64;
        SchemaRegistry {
            http,
            base: cfg.url.trim_end_matches('/').to_string(),
            auth,
            format,
            max_answer_bytes: cfg.cache_max_bytes,
            negative_ttl: cfg.negative_cache_ttl,
            cache: moka::future::Cache::builder()
                .max_capacity(budget)
                .weigher(|_, v: &Arc<Resolved>| weight(v))
                .expire_after(Ttl {
                    negative: cfg.negative_cache_ttl,
                })
                .build(),
        }
    }

    /// The bytes of schemas kept (`cache_max_bytes`): the cache's, and each
    /// partition's (`actors::partition::schemas`).
    pub(crate) fn cache_max_bytes(&self) -> usize {
        self.max_answer_bytes
    }

    /// How long an answer that parks records is kept (`negative_cache_ttl`).
    pub(crate) fn negative_ttl(&self) -> Duration {
        self.negative_ttl
    }

    /// Whether the cache holds an answer for `id` (asking costs no round
    /// trip).
    pub(crate) fn is_cached(&self, id: u32) -> bool {
        self.cache.contains_key(&id)
    }

    /// An answer in the cache, as if fetched (the gate's tests).
    #[cfg(test)]
    pub(crate) async fn cache_answer(&self, id: u32, answer: Arc<Resolved>) {
        self.cache.insert(id, answer).await;
    }

    /// The schema a registry-framed `value` names, for reading one record
    /// outside the partition's gate (the DLQ drain, `courier dlq inspect`).
    /// `Ok(None)`: unframed (decoding then parks it with the main path's
    /// reason); `Ok(Some)`: the registry's answer, a refusal too (parked with
    /// its reason); `Err`: the registry cannot be asked now.
    pub(crate) async fn schema_of(&self, value: &[u8]) -> Result<Option<Arc<Resolved>>, String> {
        let Some(id) = crate::core::schema::schema_id(value) else {
            return Ok(None);
        };
        match self.get(id).await {
            Ok(s) => Ok(Some(s)),
            Err(FetchError::Unavailable(why)) => Err(why),
        }
    }

    /// The schema with this id, or the answer that parks its records: cached,
    /// or fetched once for every waiter.
    pub(crate) async fn get(&self, id: u32) -> Result<Arc<Resolved>, FetchError> {
        self.cache
            .try_get_with(id, self.fetch(id))
            .await
            .map_err(|e| (*e).clone())
    }

    async fn fetch(&self, id: u32) -> Result<Arc<Resolved>, FetchError> {
        let mut answers = 0;
        let fetched = loop {
            match self.fetch_uncounted(id).await {
                Err(Failure::Refused(RegistryRefusal::UnknownSchema, why)) => {
                    answers += 1;
                    match decide::ask_again(answers) {
                        Some(delay) => tokio::time::sleep(delay).await,
                        None => break Err(Failure::Refused(RegistryRefusal::UnknownSchema, why)),
                    }
                }
                other => break other,
            }
        };
        let (result, out) = match fetched {
            Ok(r) => ("ok", Ok(Arc::new(r))),
            Err(Failure::Refused(RegistryRefusal::UnknownSchema, _)) => {
                ("unknown", Ok(Arc::new(Resolved::Unknown)))
            }
            Err(Failure::Refused(refusal, detail)) => {
                tracing::warn!(schema_id = id, reason = refusal.as_str(), %detail, "schema registry: the records naming this schema id are parked");
                ("refused", Ok(Arc::new(Resolved::Refused(refusal, detail))))
            }
            Err(Failure::Wait(why)) => ("unavailable", Err(FetchError::Unavailable(why))),
        };
        metrics::counter!(FETCHES, "result" => result).increment(1);
        out
    }

    async fn fetch_uncounted(&self, id: u32) -> Result<Resolved, Failure> {
        let asked = Asked::Id(id);
        let answer = self
            .get_answer(&format!("{}/schemas/ids/{id}", self.base), &asked)
            .await?;
        let kind = schema_kind(answer.schema_type.as_deref());
        if expected_kind(self.format) != Some(kind.as_str()) {
            // Its references are not fetched: it is not read.
            return Ok(Resolved::Other(kind));
        }
        let mut resolution = Resolution::new(
            answer.schema.len(),
            answer.references,
            self.max_answer_bytes,
        )?;
        while let Some((asked, segment)) = resolution.need()? {
            let Asked::Reference { version, .. } = &asked else {
                break;
            };
            let url = format!("{}/subjects/{segment}/versions/{version}", self.base);
            let v = self.get_answer(&url, &asked).await?;
            resolution.fetched(&asked, v)?;
        }
        let references = resolution.finish();
        let (format, text) = (self.format, answer.schema);
        compile_off_thread(move || Resolved::compile(format, &kind, &text, &references)).await
    }

    /// An answer's body, at most `max_answer_bytes`: a schema larger than the
    /// whole cache could not be kept, and a registry must not make Courier
    /// allocate without bound.
    async fn read_bounded(
        &self,
        mut resp: reqwest::Response,
        asked: &Asked,
    ) -> Result<Vec<u8>, Failure> {
        let too_big = || decide::too_large(asked, self.max_answer_bytes);
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_answer_bytes as u64)
        {
            return Err(too_big());
        }
        let mut body = Vec::new();
        // A read error is no answer, never the end of the body.
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| Failure::Wait(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > self.max_answer_bytes {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The registry's answer for `asked`, or what its absence means.
    async fn get_answer(&self, url: &str, asked: &Asked) -> Result<SchemaAnswer, Failure> {
        let http = self.http.as_ref().map_err(|e| Failure::Wait(e.clone()))?;
        let mut req = http.get(url).header(
            "accept",
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        req = match &self.auth {
            RegistryAuth::None => req,
            RegistryAuth::Basic { username, password } => req.basic_auth(username, Some(password)),
            RegistryAuth::Bearer(t) => req.bearer_auth(t),
        };
        // reqwest's errors name the URL, never the credentials.
        let resp = req
            .send()
            .await
            .map_err(|e| Failure::Wait(e.without_url().to_string()))?;
        decide::status(resp.status().as_u16(), asked)?;
        let body = self.read_bounded(resp, asked).await?;
        decide::answer(&body, asked)
    }
}

/// Compiles off the async workers (a large .proto, a JSON Schema with many
/// patterns is CPU work). A compiler that panics on the registry's text (a
/// bug of its library) is that schema's refusal, never an outage: waiting
/// would crash it again at every ask.
async fn compile_off_thread(
    compile: impl FnOnce() -> Resolved + Send + 'static,
) -> Result<Resolved, Failure> {
    match tokio::task::spawn_blocking(compile).await {
        Ok(r) => Ok(r),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let what = crate::core::text::excerpt(&what, 200);
            Err(Failure::Refused(
                RegistryRefusal::BadSchema,
                format!("the schema library crashed on the registry's schema: {what}"),
            ))
        }
        // The runtime is shutting down.
        Err(e) => Err(Failure::Wait(format!("compiling the schema: {e}"))),
    }
}

fn weight(v: &Resolved) -> u32 {
    u32::try_from(v.weight()).unwrap_or(u32::MAX)
}

fn build_client(cfg: &SchemaRegistryConfig) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .timeout(cfg.request_timeout)
        .connect_timeout(cfg.request_timeout.min(Duration::from_secs(5)))
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .https_only(cfg.url.starts_with("https://"));
    if let Some(ca) = &cfg.tls.ca_file {
        let certs = crate::tls::load_certs("input.schema_registry.tls.ca_file", ca)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|c| reqwest::Certificate::from_der(c.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        b = b.tls_certs_merge(certs);
    }
    b.build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
