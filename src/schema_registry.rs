//! The schema registry client (`[input.schema_registry]`): writers' schemas by
//! id (`GET {url}/schemas/ids/{id}`, the Confluent API that Apicurio's
//! `ccompat`, Redpanda and Karapace serve too), references resolved (by
//! subject and version, transitively), parsed or compiled once for
//! `input.format` (`core::schema::Resolved::compile`: Avro, Protobuf, JSON
//! Schema) and cached within `cache_max_bytes`. One fetch per id however many
//! partitions wait for it (moka's `try_get_with` coalesces them); a failure is
//! not cached, so the next wait asks again.
//!
//! What an answer means: 200 → the schema; 404 → the id is unknown (the
//! record is parked `unknown_schema`, and the id asked again for the next
//! record that names it); anything else (no connection, a timeout, 5xx, 401,
//! an answer that is not a schema) → [`FetchError::Unavailable`], systemic:
//! the partition waits and asks again, it never parks for it.

use crate::config::schema_registry::{RegistryAuth, SchemaRegistryConfig};
use crate::core::input::InputFormat;
pub use crate::core::schema::Resolved;
use crate::core::schema::{expected_kind, schema_kind, Referenced};
use std::sync::Arc;
use std::time::Duration;

/// `courier_schema_registry_fetches_total{result}`: fetches by outcome
/// (`ok`, `unknown`, `unavailable`).
pub const FETCHES: &str = "courier_schema_registry_fetches_total";
/// `courier_schema_registry_waiting_partitions`: partitions waiting for a schema.
pub const WAITING: &str = "courier_schema_registry_waiting_partitions";

#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// Systemic: the registry did not answer usefully.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
    #[error("schema id {0} not found")]
    NotFound(u32),
}

#[derive(serde::Deserialize)]
struct SchemaAnswer {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
}

#[derive(serde::Deserialize)]
struct Reference {
    /// What the referencing schema calls it (a Protobuf import path, a JSON
    /// Schema `$ref`, an Avro type name).
    #[serde(default)]
    name: String,
    subject: String,
    version: i64,
}

/// The deepest chain of references followed.
const MAX_REFERENCE_DEPTH: usize = 16;

pub struct SchemaRegistry {
    http: Result<reqwest::Client, String>,
    base: String,
    auth: RegistryAuth,
    /// What schemas are compiled for (`input.format`); others are `Other`.
    format: InputFormat,
    /// The most bytes of schema text one id may bring, its references
    /// included (`cache_max_bytes`).
    max_answer_bytes: usize,
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
    pub fn new(cfg: &SchemaRegistryConfig, format: InputFormat) -> SchemaRegistry {
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
            cache: moka::future::Cache::builder()
                .max_capacity(budget)
                .weigher(|_, v: &Arc<Resolved>| weight(v))
                .build(),
        }
    }

    /// The schema a registry-framed `value` names, for reading one record
    /// outside the partition's gate (the DLQ drain, `courier dlq inspect`).
    /// `Ok(None)`: unframed, or an id the registry does not know (decoding then
    /// parks it with the main path's reason); `Err`: the registry cannot be
    /// asked now.
    pub async fn schema_of(&self, value: &[u8]) -> Result<Option<Arc<Resolved>>, String> {
        let Some(id) = crate::core::schema::schema_id(value) else {
            return Ok(None);
        };
        match self.get(id).await {
            Ok(s) => Ok(Some(s)),
            Err(FetchError::NotFound(_)) => Ok(None),
            Err(FetchError::Unavailable(why)) => Err(why),
        }
    }

    /// The schema with this id: cached, or fetched once for every waiter.
    pub async fn get(&self, id: u32) -> Result<Arc<Resolved>, FetchError> {
        match self.cache.try_get_with(id, self.fetch(id)).await {
            Ok(r) => Ok(r),
            Err(e) => match &*e {
                FetchError::NotFound(_) => Ok(Arc::new(Resolved::Unknown)),
                other => Err(other.clone()),
            },
        }
    }

    async fn fetch(&self, id: u32) -> Result<Arc<Resolved>, FetchError> {
        let r = self.fetch_uncounted(id).await;
        let result = match &r {
            Ok(_) => "ok",
            Err(FetchError::NotFound(_)) => "unknown",
            Err(FetchError::Unavailable(_)) => "unavailable",
        };
        metrics::counter!(FETCHES, "result" => result).increment(1);
        r
    }

    async fn fetch_uncounted(&self, id: u32) -> Result<Arc<Resolved>, FetchError> {
        let answer: SchemaAnswer = match self
            .get_json(&format!("{}/schemas/ids/{id}", self.base))
            .await?
        {
            Some(a) => a,
            None => return Err(FetchError::NotFound(id)),
        };
        let kind = schema_kind(answer.schema_type.as_deref());
        if expected_kind(self.format) != Some(kind.as_str()) {
            // Its references are not fetched: it is not read.
            return Ok(Arc::new(Resolved::Other(kind)));
        }
        let mut references = Vec::new();
        self.references(&answer.references, &mut references, 0)
            .await?;
        // Compiling is CPU work (a large .proto, a JSON Schema with many
        // patterns): off the async workers.
        let format = self.format;
        let resolved = tokio::task::spawn_blocking(move || {
            Resolved::compile(format, &kind, &answer.schema, &references)
        })
        .await
        .map_err(|e| FetchError::Unavailable(format!("compiling the schema: {e}")))?;
        Ok(Arc::new(resolved))
    }

    /// Referenced schemas by name, dependencies first.
    async fn references(
        &self,
        refs: &[Reference],
        out: &mut Vec<Referenced>,
        depth: usize,
    ) -> Result<(), FetchError> {
        if depth > MAX_REFERENCE_DEPTH {
            return Err(FetchError::Unavailable(
                "schema references nested too deep".into(),
            ));
        }
        for r in refs {
            let url = format!(
                "{}/subjects/{}/versions/{}",
                self.base,
                encode_segment(&r.subject),
                r.version
            );
            let Some(v): Option<SchemaAnswer> = self.get_json(&url).await? else {
                return Err(FetchError::Unavailable(format!(
                    "referenced subject {} version {} not found",
                    r.subject, r.version
                )));
            };
            Box::pin(self.references(&v.references, out, depth + 1)).await?;
            let total: usize = out.iter().map(|o| o.schema.len()).sum();
            if total.saturating_add(v.schema.len()) > self.max_answer_bytes {
                return Err(FetchError::Unavailable(format!(
                    "the schema's references pass input.schema_registry.cache_max_bytes ({} bytes)",
                    self.max_answer_bytes
                )));
            }
            if !out.iter().any(|o| o.name == r.name && o.schema == v.schema) {
                out.push(Referenced {
                    name: r.name.clone(),
                    schema: v.schema,
                });
            }
        }
        Ok(())
    }

    /// An answer's body, at most `max_answer_bytes`: a schema larger than the
    /// whole cache could not be kept, and a registry must not make Courier
    /// allocate without bound.
    async fn read_bounded(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, FetchError> {
        let too_big = || {
            FetchError::Unavailable(format!(
                "an answer larger than input.schema_registry.cache_max_bytes ({} bytes)",
                self.max_answer_bytes
            ))
        };
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_answer_bytes as u64)
        {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| FetchError::Unavailable(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > self.max_answer_bytes {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// `Ok(None)` on 404.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<Option<T>, FetchError> {
        let http = self
            .http
            .as_ref()
            .map_err(|e| FetchError::Unavailable(e.clone()))?;
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
            .map_err(|e| FetchError::Unavailable(e.without_url().to_string()))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(FetchError::Unavailable(format!("HTTP {status}")));
        }
        let body = self.read_bounded(resp).await?;
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| FetchError::Unavailable(format!("an answer that is not a schema: {e}")))
    }
}

fn weight(v: &Resolved) -> u32 {
    u32::try_from(v.weight()).unwrap_or(u32::MAX)
}

/// A subject name as one path segment.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
mod tests {
    use super::*;

    #[test]
    fn subjects_are_one_segment() {
        assert_eq!(encode_segment("orders-value"), "orders-value");
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn credentials_never_in_debug() {
        let mut cfg = SchemaRegistryConfig {
            url: "http://127.0.0.1:1".into(),
            ..Default::default()
        };
        cfg.username = Some("u".into());
        cfg.password_env = Some("COURIER_SR_UNIT_PW".into());
        // SAFETY of the test: a variable only this test reads.
        unsafe { std::env::set_var("COURIER_SR_UNIT_PW", "s3cret-pw") };
        let r = SchemaRegistry::new(&cfg, InputFormat::Avro);
        assert!(matches!(r.auth, RegistryAuth::Basic { .. }));
        assert!(!format!("{r:?}").contains("s3cret-pw"));
    }

    #[tokio::test]
    async fn an_unreachable_registry_is_unavailable_and_not_cached() {
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = SchemaRegistry::new(
            &SchemaRegistryConfig {
                url: format!("http://127.0.0.1:{port}"),
                ..Default::default()
            },
            InputFormat::Protobuf,
        );
        assert!(matches!(r.get(1).await, Err(FetchError::Unavailable(_))));
        assert!(r.cache.get(&1).await.is_none());
    }

    /// A registry on a local port that answers every request with `body`
    /// (`Content-Length` left out when `chunked`).
    async fn answering(body: Vec<u8>, chunked: bool) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let head = if chunked {
                        "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string()
                    } else {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                    };
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(&body).await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_cache_is_unavailable_and_read_no_further() {
        let limit = 64 * 1024;
        let schema = format!(
            "syntax = \"proto3\"; message A {{ string s = 1; }} // {}",
            "x".repeat(limit)
        );
        let body =
            serde_json::to_vec(&serde_json::json!({"schema": schema, "schemaType": "PROTOBUF"}))
                .unwrap();
        for chunked in [false, true] {
            let r = SchemaRegistry::new(
                &SchemaRegistryConfig {
                    url: answering(body.clone(), chunked).await,
                    cache_max_bytes: limit,
                    ..Default::default()
                },
                InputFormat::Protobuf,
            );
            match r.get(1).await {
                Err(FetchError::Unavailable(e)) => assert!(e.contains("cache_max_bytes"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
        // Within the limit: compiled for input.format.
        let small = serde_json::to_vec(&serde_json::json!({
            "schema": "syntax = \"proto3\"; message A { string s = 1; }",
            "schemaType": "PROTOBUF"
        }))
        .unwrap();
        let url = answering(small, false).await;
        let cfg = SchemaRegistryConfig {
            url,
            ..Default::default()
        };
        let r = SchemaRegistry::new(&cfg, InputFormat::Protobuf);
        assert!(matches!(&*r.get(1).await.unwrap(), Resolved::Protobuf(_)));
        let r = SchemaRegistry::new(&cfg, InputFormat::Avro);
        assert!(matches!(&*r.get(1).await.unwrap(), Resolved::Other(k) if k == "PROTOBUF"));
    }
}
