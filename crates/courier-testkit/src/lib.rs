//! Helpers for tests, drills and the bench: run a Courier process (or any child
//! process: [`ChildGuard`]), pick a free port, read metrics ([`prom`]), run the real
//! servers the auth tests talk to (an OAuth2 server: [`hydra`]; a webhook receiver
//! that verifies signatures: [`webhooks`]). One of each: the tests (`tests/common`),
//! `courier-drill` and the bench (`benches/e2e/`) use these.
//!
//! Courier itself does not use this module. The integration tests (`tests/common`)
//! and `courier-drill` start Courier the same way — `courier run --config
//! <dir>/<name>.toml`, output to `<dir>/<name>.log`, brokers, Redis and a free
//! metrics port given through `COURIER__*` variables — and stop it with SIGTERM
//! (graceful) or SIGKILL (no shutdown path at all); this is that code, once.
//!
//! Spawning needs a Tokio runtime (the child is a `tokio::process::Child`, awaited
//! rather than polled). A [`CourierProcess`] that is dropped kills its process.

pub mod child;
pub mod hydra;
pub mod prom;
pub mod schema_registry;
mod service;
pub mod webhooks;

pub use child::ChildGuard;
pub use prom::metric_sum;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// The log filter both the tests and the drills use unless told otherwise.
pub const DEFAULT_RUST_LOG: &str = "info,librdkafka=warn,rdkafka=warn";

/// Whether a bench binary was started by `cargo bench` (which passes `--bench`).
/// `cargo test --all-targets` also runs bench targets — unoptimised and with the
/// test harness's flags (`--test-threads=2`) — so a benchmark that needs minutes
/// and the real services says it is skipped and exits successfully instead.
pub fn asked_as_benchmark(name: &str) -> bool {
    if std::env::args().any(|a| a == "--bench") {
        return true;
    }
    println!("{name}: a benchmark; run it with `cargo bench --bench {name}` (skipped)");
    false
}

/// The `courier` binary a benchmark measures: `E2E_COURIER_BIN` when it is
/// set (an A/B against another build, with the same bench executable), else
/// `built` (the bench's own `CARGO_BIN_EXE_courier`).
pub fn measured_courier(built: &str) -> String {
    std::env::var("E2E_COURIER_BIN").unwrap_or_else(|_| built.to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("{what} {}: {source}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no free local port: {0}")]
    Port(#[source] std::io::Error),
    #[error("spawning {}: {source}", binary.display())]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sending SIGTERM to {name} (pid {pid}): {reason}")]
    Signal {
        name: String,
        pid: u32,
        reason: String,
    },
    #[error("waiting for {name} to exit: {source}")]
    Wait {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{name} did not exit within {timeout:?} (killed); log: {}", log.display())]
    ExitTimeout {
        name: String,
        timeout: Duration,
        log: PathBuf,
    },
    #[error("scraping {url}: {source}")]
    Scrape {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A request to a helper service (hydra, the webhook receiver) failed.
    #[error("{what} ({url}): {source}")]
    Http {
        what: &'static str,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A helper service answered with an unexpected status (`body`: the start of
    /// its answer).
    #[error("{what} ({url}): answered {status}: {body}")]
    Status {
        what: &'static str,
        url: String,
        status: u16,
        body: String,
    },
    /// A helper service's answer is not what its API promises.
    #[error("{what}: unexpected answer: {reason}")]
    Answer { what: &'static str, reason: String },
    /// A helper process exited before it was ready.
    #[error("{name} exited while starting (exit code {code:?}); log: {}", log.display())]
    Exited {
        name: String,
        code: Option<i32>,
        log: PathBuf,
    },
    /// A helper process did not become ready in time (it was killed).
    #[error("{name} did not answer {url} within {timeout:?}; log: {}", log.display())]
    NotReady {
        name: String,
        url: String,
        timeout: Duration,
        log: PathBuf,
    },
}

/// `text` without its terminal colour codes (CSI sequences: ESC [ parameters, a
/// final letter), as Courier's logs carry them.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A free TCP port on 127.0.0.1 (bound, read, released: the caller binds it next).
pub fn free_port() -> Result<u16, TestkitError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(TestkitError::Port)
}

/// How to start one Courier process.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `courier` binary.
    pub binary: PathBuf,
    /// Names the config file and the log file in `dir`; unique per process.
    pub name: String,
    /// Where `<name>.toml` and `<name>.log` go (created if missing).
    pub dir: PathBuf,
    /// The config file's contents.
    pub toml: String,
    /// `COURIER__KAFKA__BROKERS`.
    pub brokers: String,
    /// `COURIER__REDIS__URL`.
    pub redis_url: String,
    /// `RUST_LOG` (see [`DEFAULT_RUST_LOG`]).
    pub rust_log: String,
    /// More environment variables, set last (so they override the ones above).
    pub env: Vec<(String, String)>,
    /// Deadline of one `/metrics` scrape; `None`: none.
    pub scrape_timeout: Option<Duration>,
}

impl Launch {
    /// A launch with no extra environment, [`DEFAULT_RUST_LOG`] and no scrape deadline.
    pub fn new(
        binary: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        name: impl Into<String>,
        toml: impl Into<String>,
        brokers: impl Into<String>,
        redis_url: impl Into<String>,
    ) -> Launch {
        Launch {
            binary: binary.into(),
            name: name.into(),
            dir: dir.into(),
            toml: toml.into(),
            brokers: brokers.into(),
            redis_url: redis_url.into(),
            rust_log: DEFAULT_RUST_LOG.into(),
            env: Vec::new(),
            scrape_timeout: None,
        }
    }
}

/// A running `courier run` child process.
pub struct CourierProcess {
    child: ChildGuard,
    /// The config file it was started with.
    pub config: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// `/metrics`, `/healthz` and `/readyz` on 127.0.0.1.
    pub metrics_port: u16,
    scrape_timeout: Option<Duration>,
}

fn file_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TestkitError {
    let path = path.to_path_buf();
    move |source| TestkitError::File { what, path, source }
}

impl CourierProcess {
    /// Writes the config, creates the log file, picks a free metrics port and
    /// spawns `courier run --config <dir>/<name>.toml`. Must be called within a
    /// Tokio runtime.
    pub fn start(l: &Launch) -> Result<CourierProcess, TestkitError> {
        std::fs::create_dir_all(&l.dir).map_err(file_err("creating", &l.dir))?;
        let config = l.dir.join(format!("{}.toml", l.name));
        std::fs::write(&config, &l.toml).map_err(file_err("writing", &config))?;
        let log = l.dir.join(format!("{}.log", l.name));
        let metrics_port = free_port()?;
        let mut cmd = Command::new(&l.binary);
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .env("COURIER__KAFKA__BROKERS", &l.brokers)
            .env("COURIER__REDIS__URL", &l.redis_url)
            .env(
                "COURIER__METRICS__LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("RUST_LOG", &l.rust_log)
            // Several instances share this host: none takes a static member id
            // from it (`kafka.instance_id`) unless the launch sets one.
            .env_remove("POD_NAME")
            .env_remove("HOSTNAME")
            .envs(l.env.iter().map(|(k, v)| (k, v)));
        Ok(CourierProcess {
            child: ChildGuard::spawn(&l.name, cmd, &log)?,
            config,
            log,
            metrics_port,
            scrape_timeout: l.scrape_timeout,
        })
    }

    pub fn name(&self) -> &str {
        self.child.name()
    }

    /// Whether the process may still run: started, and not yet stopped, killed or
    /// seen exited through this handle.
    pub fn is_live(&self) -> bool {
        self.child.is_live()
    }

    /// The process id while the process is [live](Self::is_live).
    pub fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// See [`ChildGuard::exited`].
    pub fn exited(&mut self) -> Option<Option<i32>> {
        self.child.exited()
    }

    /// SIGKILL: no shutdown path runs. Returns once the process is gone.
    pub async fn kill(&mut self) {
        self.child.kill().await
    }

    /// SIGTERM, then waits for the graceful exit; see [`ChildGuard::wait_exit`]
    /// for the result. `Ok(None)` if the process is not live.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<Option<i32>, TestkitError> {
        self.child.terminate("-TERM", timeout).await
    }

    /// See [`ChildGuard::wait_exit`].
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>, TestkitError> {
        self.child.wait_exit(timeout).await
    }

    /// The whole log so far.
    pub fn log_text(&self) -> Result<String, TestkitError> {
        std::fs::read_to_string(&self.log).map_err(file_err("reading", &self.log))
    }

    /// The `/metrics` page.
    pub async fn metrics_text(&self) -> Result<String, TestkitError> {
        metrics_page(self.metrics_port, self.scrape_timeout).await
    }

    /// The sum of all series of `name` on the `/metrics` page (see [`metric_sum`]).
    pub async fn metric(&self, name: &str) -> Result<f64, TestkitError> {
        Ok(metric_sum(&self.metrics_text().await?, name))
    }
}

/// The `/metrics` page of the Courier whose metrics listener is 127.0.0.1:`port`,
/// within `timeout` if one is given.
pub async fn metrics_page(port: u16, timeout: Option<Duration>) -> Result<String, TestkitError> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let scrape_err = |source| TestkitError::Scrape {
        url: url.clone(),
        source,
    };
    let mut client = reqwest::Client::builder();
    if let Some(t) = timeout {
        client = client.timeout(t);
    }
    let client = client.build().map_err(scrape_err)?;
    let resp = client.get(&url).send().await.map_err(scrape_err)?;
    resp.text().await.map_err(scrape_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_that_cannot_start_is_an_error() {
        let dir = std::env::temp_dir().join(format!("courier-testkit-{}", std::process::id()));
        let l = Launch::new(dir.join("no-such-binary"), &dir, "x", "", "b", "r");
        let e = CourierProcess::start(&l).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("spawning")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
