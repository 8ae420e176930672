//! A webhook receiver that verifies Standard Webhooks signatures with the
//! specification's reference library (PyPI `standardwebhooks`, an implementation
//! independent of Courier's): `src/webhook_receiver.py` run by the Python of
//! `scripts/pytools.sh`'s venv. It answers 200 to a request that one of the
//! accepted secrets verifies and 401 to any other, and counts both
//! ([`Receiver::stats`]). The accepted secrets can change while it runs
//! ([`Receiver::set_secrets`]: a rotation on the receiving side).

use super::service::{excerpt, json_answer, wait_ready};
use super::{file_err, free_port, ChildGuard, TestkitError};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

/// The receiver's script.
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/webhook_receiver.py");

/// How long the receiver may take to answer after it is spawned.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of one control request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the receiver has seen since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests that an accepted secret verified (answered 200).
    pub verified: u64,
    /// Requests that none did (answered 401).
    pub rejected: u64,
    /// Verified requests per `webhook-id`.
    pub ids: BTreeMap<String, u64>,
    /// The first rejections' reasons (path, `webhook-id` and the library's error).
    pub rejections: Vec<String>,
}

impl Stats {
    /// Parses `GET /_control/stats`'s JSON.
    fn from_json(v: &serde_json::Value) -> Result<Stats, TestkitError> {
        let bad = |reason: &str| TestkitError::Answer {
            what: "the webhook receiver's stats",
            reason: reason.to_string(),
        };
        let count = |key: &str| {
            v.get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| bad(&format!("no count `{key}`")))
        };
        let mut ids = BTreeMap::new();
        for (id, n) in v
            .get("ids")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| bad("no object `ids`"))?
        {
            let n = n
                .as_u64()
                .ok_or_else(|| bad("a count in `ids` is no number"))?;
            ids.insert(id.clone(), n);
        }
        let rejections = v
            .get("rejections")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("no list `rejections`"))?
            .iter()
            .map(|r| r.to_string())
            .collect();
        Ok(Stats {
            verified: count("verified")?,
            rejected: count("rejected")?,
            ids,
            rejections,
        })
    }
}

/// A running receiver; dropping it kills the process.
pub struct Receiver {
    _child: ChildGuard,
    port: u16,
    http: reqwest::Client,
}

impl Receiver {
    /// Starts the receiver with `python` (one with `standardwebhooks`: see
    /// `scripts/pytools.sh`) on a free port, its output in
    /// `dir/webhook-receiver.log`, waits until it answers, and makes it accept
    /// `secrets` (`whsec_...`). Must be called within a Tokio runtime.
    pub async fn start(
        python: &Path,
        dir: &Path,
        secrets: &[&str],
    ) -> Result<Receiver, TestkitError> {
        std::fs::create_dir_all(dir).map_err(file_err("creating", dir))?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| TestkitError::Http {
                what: "building an HTTP client for the webhook receiver",
                url: String::new(),
                source,
            })?;
        let port = free_port()?;
        let mut cmd = Command::new(python);
        cmd.arg(SCRIPT).arg(port.to_string());
        let log = dir.join("webhook-receiver.log");
        let mut child = ChildGuard::spawn("webhook receiver", cmd, &log)?;
        let stats = format!("http://127.0.0.1:{port}/_control/stats");
        wait_ready(&mut child, &http, &stats, START_TIMEOUT).await?;
        let receiver = Receiver {
            _child: child,
            port,
            http,
        };
        receiver.set_secrets(secrets).await?;
        Ok(receiver)
    }

    /// Where to send webhooks: `http://127.0.0.1:<port>/` (any path but `/_control/`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The secrets accepted from now on (any one verifying a request is enough).
    pub async fn set_secrets(&self, secrets: &[&str]) -> Result<(), TestkitError> {
        let url = format!("{}_control/secrets", self.url());
        let what = "setting the webhook receiver's secrets";
        let resp = self
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(serde_json::Value::from(secrets.to_vec()).to_string())
            .send()
            .await
            .map_err(|source| TestkitError::Http {
                what,
                url: url.clone(),
                source,
            })?;
        let status = resp.status().as_u16();
        if status != 204 {
            // The answer names the error's type only, never a secret.
            let body = resp.text().await.unwrap_or_default();
            return Err(TestkitError::Status {
                what,
                url,
                status,
                body: excerpt(&body),
            });
        }
        Ok(())
    }

    /// What it has verified and rejected so far.
    pub async fn stats(&self) -> Result<Stats, TestkitError> {
        let url = format!("{}_control/stats", self.url());
        let what = "reading the webhook receiver's stats";
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
        Stats::from_json(&json_answer(what, &url, resp, 200).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_parsed_and_a_malformed_answer_is_an_error() {
        let v = serde_json::json!({
            "verified": 3, "rejected": 1, "ids": {"a": 2, "b": 1},
            "rejections": [{"path": "/", "webhook_id": "c", "reason": "x"}],
        });
        let s = Stats::from_json(&v).unwrap();
        assert_eq!((s.verified, s.rejected), (3, 1));
        assert_eq!(s.ids.get("a"), Some(&2));
        assert_eq!(s.rejections.len(), 1);
        assert!(Stats::from_json(&serde_json::json!({"verified": 1})).is_err());
    }
}
