//! The API stand-in as a child process (`courier sink`), shared by the e2e and
//! batch benchmarks (`benches/batch/main.rs` includes this file).

use crate::certs;
use crate::procs::{cpu_seconds, Pid};
use courier_testkit::{free_port, ChildGuard};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The API stand-in as a child process (`courier sink`), so its CPU is never
/// counted as the bench client's. Latency is changed per phase over HTTP.
pub(crate) struct Sink {
    pub guard: ChildGuard,
    pub base: String,
    http: reqwest::Client,
}

impl Sink {
    /// With `tls` (certificate and key files), it serves HTTPS.
    pub(crate) async fn start(
        bin: &str,
        log_dir: &Path,
        http: reqwest::Client,
        tls: Option<&certs::Pem>,
    ) -> anyhow::Result<Sink> {
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.args(["sink", "--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn");
        if let Some(t) = tls {
            cmd.arg("--tls-cert")
                .arg(&t.cert_file)
                .arg("--tls-key")
                .arg(&t.key_file);
        }
        let guard = ChildGuard::spawn("sink", cmd, &log_dir.join("sink.log"))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let sink = Sink {
            guard,
            base: format!("{scheme}://127.0.0.1:{port}"),
            http,
        };
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            let up = sink
                .http
                .get(format!("{}/healthz", sink.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return Ok(sink);
            }
            anyhow::ensure!(Instant::now() < until, "the sink did not come up in 15 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("{}/events", self.base)
    }

    /// Sets the latency and clears the books (they grow with every request),
    /// with room for `expect` events: books that grow mid-run stall every
    /// request while they do (`courier_standins::sink`, `POST /reset`).
    pub(crate) async fn prepare(&mut self, latency_ms: u64, expect: usize) -> anyhow::Result<()> {
        if let Some(st) = self.guard.exited() {
            anyhow::bail!("the sink exited (code {st:?})");
        }
        self.http
            .put(format!("{}/behaviour", self.base))
            .body(format!("{{\"latency_ms\":{latency_ms}}}"))
            .send()
            .await?
            .error_for_status()?;
        self.http
            .post(format!("{}/reset?expect={expect}", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// The totals of the stand-in's books since the last `prepare`
    /// (`GET /audit/delivered`: no per-id maps, cheap to poll). Used by the
    /// batch benchmark only.
    #[allow(dead_code)]
    pub(crate) async fn delivered(&self) -> anyhow::Result<courier_standins::sink::DeliveredCount> {
        let body = self
            .http
            .get(format!("{}/audit/delivered", self.base))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// The stand-in's books since the last `prepare`. Used by the e2e
    /// benchmark only.
    #[allow(dead_code)]
    pub(crate) async fn audit(&self) -> anyhow::Result<courier_standins::sink::Audit> {
        let body = self
            .http
            .get(format!("{}/audit", self.base))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(serde_json::from_slice(&body)?)
    }

    pub(crate) fn cpu(&self, ticks: f64) -> Option<f64> {
        cpu_seconds(Pid::Of(self.guard.pid()?), ticks)
    }
}
