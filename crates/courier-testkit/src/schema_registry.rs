//! A real schema registry for the tests, and a producer that writes through it
//! with confluent-kafka's own serializers.
//!
//! The registry is Apicurio Registry 2.6.13.Final from Maven Central
//! (`scripts/apicurio.sh` fetches it and prints its runner jar), spoken to through
//! its Confluent-compatible API (`/apis/ccompat/v7`), the API confluent-kafka's
//! serializers and Courier use. Each [`Registry`] is its own process on its own
//! port, its state in an H2 file in its directory, so a test may stop it and start
//! it again with the schemas it had. The records' bytes are real:
//! `src/schema_producer.py` registers and frames them with
//! `confluent_kafka.schema_registry.avro.AvroSerializer` (PyPI
//! `confluent-kafka[avro,schemaregistry]`, `scripts/pyschema.sh`).

use super::service::wait_ready;
use super::{file_err, free_port, ChildGuard, TestkitError};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The producer's script.
pub const PRODUCER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/schema_producer.py");

/// The path of the Confluent-compatible API under the registry's root.
pub const CCOMPAT: &str = "/apis/ccompat/v7";

/// A JVM on a loaded 2-core machine takes 10-30 s to start the registry.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A running Apicurio Registry; its state survives [`Registry::stop`] and
/// [`Registry::start_again`] (an H2 database file in its directory). Dropping it
/// kills it.
pub struct Registry {
    child: Option<ChildGuard>,
    jar: PathBuf,
    dir: PathBuf,
    port: u16,
    http: reqwest::Client,
}

impl Registry {
    /// Starts the registry's runner `jar` (`scripts/apicurio.sh` prints it) on a
    /// free port, state and log in `dir`.
    pub async fn start(jar: &Path, dir: &Path) -> Result<Registry, TestkitError> {
        std::fs::create_dir_all(dir).map_err(file_err("creating", dir))?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| TestkitError::Http {
                what: "building an HTTP client for the registry",
                url: String::new(),
                source,
            })?;
        let mut r = Registry {
            child: None,
            jar: jar.to_path_buf(),
            dir: dir.to_path_buf(),
            port: free_port()?,
            http,
        };
        r.start_again().await?;
        Ok(r)
    }

    /// Starts a stopped registry again on the same port, with its state.
    pub async fn start_again(&mut self) -> Result<(), TestkitError> {
        if self.child.is_some() {
            return Ok(());
        }
        let mut cmd = Command::new("java");
        cmd.arg("-Xmx512m")
            .arg(format!("-Dquarkus.http.port={}", self.port))
            .arg("-Dquarkus.http.host=127.0.0.1")
            .arg("-jar")
            .arg(&self.jar)
            .current_dir(&self.dir)
            .env(
                "REGISTRY_DATASOURCE_URL",
                format!("jdbc:h2:file:{}", self.dir.join("registry_db").display()),
            );
        let log = self.dir.join(format!("schema-registry-{}.log", self.port));
        let mut child = ChildGuard::spawn("schema registry (Apicurio)", cmd, &log)?;
        wait_ready(
            &mut child,
            &self.http,
            &format!("{}/subjects", self.url()),
            START_TIMEOUT,
        )
        .await?;
        self.child = Some(child);
        Ok(())
    }

    /// Stops it (SIGTERM, so its database is written out; killed if it does not
    /// exit): connections are refused until [`Self::start_again`].
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if !matches!(c.terminate("-TERM", STOP_TIMEOUT).await, Ok(Some(_))) {
                c.kill().await;
            }
        }
    }

    /// The root of its Confluent-compatible API: what `input.schema_registry.url`
    /// and the serializers' `url` are given.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{CCOMPAT}", self.port)
    }

    /// How many `GET /schemas/ids/{id}` it answered with a schema (2xx) since this
    /// run of it started, whatever the id: the registry's own request metrics
    /// (`/metrics`, Micrometer's `rest_requests_seconds_count`).
    pub async fn schema_fetches(&self) -> Result<u64, TestkitError> {
        self.id_fetches("2xx").await
    }

    /// `GET /schemas/ids/{id}` answered with a status of `group` (`2xx`, `4xx`).
    async fn id_fetches(&self, group: &str) -> Result<u64, TestkitError> {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let what = "reading the registry's metrics";
        let body = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?
            .text()
            .await
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?;
        let n = super::metric_sum(
            &body,
            &format!(
                "rest_requests_seconds_count{{method=\"GET\",path=\"{CCOMPAT}/schemas/ids/{{id}}\",status_code_group=\"{group}\""
            ),
        );
        Ok(n as u64)
    }
}

/// The root of Apicurio's own API (v2) under the registry's root: it stores
/// and deletes what its Confluent-compatible API refuses to.
const NATIVE: &str = "/apis/registry/v2/groups/default/artifacts";

impl Registry {
    /// Registers `schema` (`kind`: `AVRO`, `PROTOBUF`, `JSON`) under `subject`
    /// through the Confluent-compatible API, naming `references` (name,
    /// subject, version); its id.
    pub async fn register(
        &self,
        subject: &str,
        kind: &str,
        schema: &str,
        references: &[(&str, &str, i64)],
    ) -> Result<u32, TestkitError> {
        let refs: Vec<_> = references
            .iter()
            .map(|(name, subject, version)| {
                serde_json::json!({"name": name, "subject": subject, "version": version})
            })
            .collect();
        let body = serde_json::json!({"schema": schema, "schemaType": kind, "references": refs});
        let url = format!("{}/subjects/{subject}/versions", self.url());
        let answer = self
            .send(
                "registering a schema",
                self.http
                    .post(&url)
                    .header("content-type", "application/vnd.schemaregistry.v1+json")
                    .body(body.to_string()),
                &url,
            )
            .await?;
        id_in(&answer, "id")
    }

    /// Stores `content` as artifact `artifact` of `kind` through Apicurio's own
    /// API, which does not check it as the Confluent-compatible API does (a
    /// schema the Avro library cannot read is stored); the id the
    /// Confluent-compatible API serves it under (its content id).
    pub async fn store_unchecked(
        &self,
        artifact: &str,
        kind: &str,
        content: &str,
    ) -> Result<u32, TestkitError> {
        let url = format!("http://127.0.0.1:{}{NATIVE}", self.port);
        let answer = self
            .send(
                "storing an artifact",
                self.http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("X-Registry-ArtifactType", kind)
                    .header("X-Registry-ArtifactId", artifact)
                    .body(content.to_string()),
                &url,
            )
            .await?;
        id_in(&answer, "contentId")
    }

    /// Deletes `subject` through Apicurio's own API, also when other schemas
    /// reference it (the Confluent-compatible API refuses that): their
    /// references then lead nowhere (404).
    pub async fn delete_referenced(&self, subject: &str) -> Result<(), TestkitError> {
        let url = format!("http://127.0.0.1:{}{NATIVE}/{subject}", self.port);
        self.send("deleting an artifact", self.http.delete(&url), &url)
            .await
            .map(|_| ())
    }

    /// Sends `req`; the answer's body, a 2xx's only.
    async fn send(
        &self,
        what: &'static str,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<String, TestkitError> {
        let http = |source| TestkitError::Http {
            what,
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(http)?;
        let status = resp.status();
        let body = resp.text().await.map_err(http)?;
        if !status.is_success() {
            return Err(TestkitError::Status {
                what,
                url: url.to_string(),
                status: status.as_u16(),
                body: body.chars().take(300).collect(),
            });
        }
        Ok(body)
    }

    /// How many `GET /schemas/ids/{id}` it answered with a 4xx since this run
    /// of it started (an id it does not know), as its request metrics count them.
    pub async fn schema_fetches_refused(&self) -> Result<u64, TestkitError> {
        self.id_fetches("4xx").await
    }
}

/// The integer `key` of a JSON answer.
fn id_in(answer: &str, key: &str) -> Result<u32, TestkitError> {
    let v: serde_json::Value = serde_json::from_str(answer).map_err(|e| TestkitError::Answer {
        what: "the registry's answer",
        reason: format!("{e}: {answer}"),
    })?;
    v[key]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| TestkitError::Answer {
            what: "the registry's answer",
            reason: format!("no `{key}` in {answer}"),
        })
}

/// Where one produced record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub partition: i32,
    pub offset: i64,
    pub schema_id: u32,
}

/// Runs `src/schema_producer.py` with `spec` (see the script) and returns
/// where each record landed, in the order written. Its output goes to `log`.
pub async fn produce(
    python: &Path,
    spec: &serde_json::Value,
    log: &Path,
) -> Result<Vec<Written>, TestkitError> {
    let mut child = Command::new(python)
        .arg(PRODUCER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).map_err(file_err("creating", log))?)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| TestkitError::Spawn {
            binary: python.to_path_buf(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(spec.to_string().as_bytes())
            .await
            .map_err(file_err("writing to the producer", log))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|source| TestkitError::Wait {
            name: "schema producer".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(TestkitError::Exited {
            name: "schema producer".into(),
            code: out.status.code(),
            log: log.to_path_buf(),
        });
    }
    let bad = |reason: String| TestkitError::Answer {
        what: "the schema producer's output",
        reason,
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).map_err(|e| bad(format!("{e}: {l}")))?;
            let n = |k: &str| v[k].as_i64().ok_or_else(|| bad(format!("no `{k}` in {l}")));
            Ok(Written {
                partition: n("partition")? as i32,
                offset: n("offset")?,
                schema_id: n("schema_id")? as u32,
            })
        })
        .collect()
}

/// A registry that answers slowly: a TCP proxy in front of a [`Registry`] that
/// holds each answer for [`SlowProxy::set_delay`] before passing it on (the
/// requests go through at once). A fault a real registry does not make on demand.
pub struct SlowProxy {
    port: u16,
    delay: tokio::sync::watch::Sender<Duration>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    /// Listens on a free port and forwards to `registry`, without delay at first.
    pub async fn start(registry: &Registry) -> Result<SlowProxy, TestkitError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(TestkitError::Port)?;
        let port = listener.local_addr().map_err(TestkitError::Port)?.port();
        let upstream = format!("127.0.0.1:{}", registry.port);
        let (delay, rx) = tokio::sync::watch::channel(Duration::ZERO);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, rx) = (upstream.clone(), rx.clone());
                tokio::spawn(async move {
                    if let Ok(server) = tokio::net::TcpStream::connect(&upstream).await {
                        forward(client, server, rx).await;
                    }
                });
            }
        });
        Ok(SlowProxy { port, delay, task })
    }

    /// How long each answer is held from now on.
    pub fn set_delay(&self, d: Duration) {
        self.delay.send_replace(d);
    }

    /// The Confluent-compatible API's root through the proxy.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{CCOMPAT}", self.port)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Client → server as it comes; server → client each read held for the
/// delay current when it arrived. Ends when either side closes.
async fn forward(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    delay: tokio::sync::watch::Receiver<Duration>,
) {
    use tokio::io::AsyncReadExt;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let d = *delay.borrow();
            tokio::time::sleep(d).await;
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
