//! A schema registry for the tests, and a producer that writes through it
//! with confluent-kafka's own serializers.
//!
//! The registry is `src/schema_registry_standin.py`, a stand-in serving the
//! subset of the Confluent REST API that confluent-kafka's serializers and
//! Courier use: no real registry can run here (Apicurio Registry's
//! `apicurio-registry-app` is on Maven Central, but its own modules
//! `apicurio-registry-schema-util-provider` and
//! `apicurio-registry-config-index-deployment` are not, for 3.3.3, 3.3.2 or
//! 2.6.13.Final, so it neither runs nor builds from there; Confluent's
//! registry is not on Maven Central; Karapace is not on PyPI). The records'
//! bytes are real: `src/schema_producer.py` registers and frames them with
//! `confluent_kafka.schema_registry.avro.AvroSerializer` (PyPI
//! `confluent-kafka[avro,schemaregistry]`, `scripts/pyschema.sh`).

use super::service::{json_answer, wait_ready};
use super::{file_err, free_port, ChildGuard, TestkitError};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The stand-in registry's script.
pub const REGISTRY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/schema_registry_standin.py"
);
/// The producer's script.
pub const PRODUCER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/schema_producer.py");

const START_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A running stand-in registry; its state survives [`Registry::stop`] and
/// [`Registry::start_again`] (a file in its directory). Dropping it kills it.
pub struct Registry {
    child: Option<ChildGuard>,
    python: PathBuf,
    dir: PathBuf,
    port: u16,
    http: reqwest::Client,
}

impl Registry {
    /// Starts it with `python` on a free port, state and log in `dir`.
    pub async fn start(python: &Path, dir: &Path) -> Result<Registry, TestkitError> {
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
            python: python.to_path_buf(),
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
        let mut cmd = Command::new(&self.python);
        cmd.arg(REGISTRY)
            .arg(self.port.to_string())
            .arg(self.dir.join("registry-state.json"));
        let log = self.dir.join(format!("schema-registry-{}.log", self.port));
        let mut child = ChildGuard::spawn("schema registry", cmd, &log)?;
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

    /// Kills it: connections are refused until [`Self::start_again`].
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How often each schema id was asked for (`GET /schemas/ids/{id}`) since
    /// this run of the registry started.
    pub async fn fetches(&self, id: u32) -> Result<u64, TestkitError> {
        let url = format!("{}/_control/stats", self.url());
        let what = "reading the registry's stats";
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?;
        let v = json_answer(what, &url, resp, 200).await?;
        Ok(v["ids_fetched"][id.to_string()].as_u64().unwrap_or(0))
    }
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
