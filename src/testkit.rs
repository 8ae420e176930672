//! Helpers for tests and drills: run a Courier process and read its metrics.
//!
//! Courier itself does not use this module. The integration tests (`tests/common`)
//! and `courier-drill` start Courier the same way — `courier run --config
//! <dir>/<name>.toml`, output to `<dir>/<name>.log`, brokers, Redis and a free
//! metrics port given through `COURIER__*` variables — and stop it with SIGTERM
//! (graceful) or SIGKILL (no shutdown path at all); this is that code, once.
//!
//! Spawning needs a Tokio runtime (the child is a `tokio::process::Child`, awaited
//! rather than polled). A [`CourierProcess`] that is dropped kills its process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// The log filter both the tests and the drills use unless told otherwise.
pub const DEFAULT_RUST_LOG: &str = "info,librdkafka=warn,rdkafka=warn";

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
    /// `None` once the process was reaped (stopped, killed, or seen exited).
    child: Option<Child>,
    name: String,
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
        let out = std::fs::File::create(&log).map_err(file_err("creating", &log))?;
        let err = out.try_clone().map_err(file_err("opening", &log))?;
        let metrics_port = free_port()?;
        let child = Command::new(&l.binary)
            .arg("run")
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
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| TestkitError::Spawn {
                binary: l.binary.clone(),
                source,
            })?;
        Ok(CourierProcess {
            child: Some(child),
            name: l.name.clone(),
            config,
            log,
            metrics_port,
            scrape_timeout: l.scrape_timeout,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the process may still run: started, and not yet stopped, killed or
    /// seen exited through this handle.
    pub fn is_live(&self) -> bool {
        self.child.is_some()
    }

    /// The process id while the process is [live](Self::is_live).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// `Some(code)` if the process has exited on its own (the code is `None` when a
    /// signal ended it); it is then reaped and no longer live. `None` while it runs.
    pub fn exited(&mut self) -> Option<Option<i32>> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => {
                self.child = None;
                Some(st.code())
            }
            _ => None,
        }
    }

    /// SIGKILL: no shutdown path runs. Returns once the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Fails only if the process was already reaped, and `wait` then
            // returns at once.
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }

    /// SIGTERM, then waits for the graceful exit; see [`Self::wait_exit`] for the
    /// result. `Ok(None)` if the process is not live.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<Option<i32>, TestkitError> {
        let Some(pid) = self.pid() else {
            return Ok(None);
        };
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .output()
            .await;
        let reason = match sent {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Some(format!("running kill: {e}")),
        };
        if let Some(reason) = reason {
            return Err(TestkitError::Signal {
                name: self.name.clone(),
                pid,
                reason,
            });
        }
        self.wait_exit(timeout).await
    }

    /// Waits for the process to exit and returns its exit code (`None` when a
    /// signal ended it). After `timeout` it is killed (SIGKILL) and
    /// [`TestkitError::ExitTimeout`] returned. `Ok(None)` if the process is not live.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>, TestkitError> {
        let Some(mut c) = self.child.take() else {
            return Ok(None);
        };
        match tokio::time::timeout(timeout, c.wait()).await {
            Ok(Ok(st)) => Ok(st.code()),
            Ok(Err(source)) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                Err(TestkitError::Wait {
                    name: self.name.clone(),
                    source,
                })
            }
            Err(_) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                Err(TestkitError::ExitTimeout {
                    name: self.name.clone(),
                    timeout,
                    log: self.log.clone(),
                })
            }
        }
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

/// The sum of all samples of `name` in a Prometheus text page. `name` is a metric
/// name (its series with any labels, but not `name_other`), or a metric name with
/// labels the series must have, e.g. `x_total{result="miss"` (the closing brace is
/// optional): other labels (the exporter's `group` and `main_topic` on every series)
/// and the order of the labels do not matter.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    let (metric, wanted) = match name.split_once('{') {
        Some((m, labels)) => (m, labels_of(labels.trim_end_matches('}'))),
        None => (name, Vec::new()),
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(metric)?;
            let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
                r.split_once("} ")?
            } else {
                ("", rest.strip_prefix(' ')?)
            };
            let have = labels_of(labels);
            wanted
                .iter()
                .all(|w| have.contains(w))
                .then(|| value.split_whitespace().next()?.parse::<f64>().ok())?
        })
        .sum()
}

/// `a="x",b="y"` as `[("a", "x"), ("b", "y")]` (values without escaped quotes, as
/// Courier's bounded label values are).
fn labels_of(s: &str) -> Vec<(&str, &str)> {
    s.split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.trim_start_matches(','), v.trim_end_matches('"')))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_series_of_a_metric() {
        let text = "# HELP x_total x\n# TYPE x_total counter\n\
x_total{result=\"hit\"} 3\nx_total{result=\"miss\"} 4\nx_total_other 100\nx_total 1\n";
        assert_eq!(metric_sum(text, "x_total"), 8.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\""), 4.0);
        assert_eq!(metric_sum(text, "y_total"), 0.0);
    }

    #[test]
    fn label_filters_ignore_other_labels_and_their_order() {
        // The exporter puts its global labels (group, main_topic) first.
        let text = "x_total{group=\"g\",main_topic=\"t\",result=\"hit\"} 3\n\
x_total{group=\"g\",main_topic=\"t\",result=\"miss\"} 4\n\
x_total{group=\"g\",main_topic=\"t\",result=\"miss_other\"} 100\n";
        assert_eq!(metric_sum(text, "x_total"), 107.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\""), 4.0);
        assert_eq!(metric_sum(text, "x_total{result=\"miss\"}"), 4.0);
        assert_eq!(
            metric_sum(text, "x_total{main_topic=\"t\",result=\"hit\""),
            3.0
        );
        assert_eq!(metric_sum(text, "x_total{result=\"none\""), 0.0);
    }

    #[tokio::test]
    async fn a_process_that_cannot_start_is_an_error() {
        let dir = std::env::temp_dir().join(format!("courier-testkit-{}", std::process::id()));
        let l = Launch::new(dir.join("no-such-binary"), &dir, "x", "", "b", "r");
        let e = CourierProcess::start(&l).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("spawning")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
