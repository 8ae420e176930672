//! Shared test infrastructure: the real services started by `scripts/services.sh`
//! (read from the environment it writes), unique topic names, Courier as a child
//! process, and condition waits with deadlines.
#![allow(dead_code)]

pub(crate) mod schema;
pub(crate) mod tenant;

use courier::kafka::admin::{committed_positions, end_offsets, CommittedPosition};
use courier_standins::admin::create_topics;
use courier_standins::audit::{audit, AuditReport, Produced};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::{CourierProcess, Launch, DEFAULT_RUST_LOG};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) struct Services {
    pub brokers: String,
    pub pg_url: String,
    pub redis_url: String,
    pub script: String,
}

/// The real services. Tests need `scripts/services.sh up` first (the README's test
/// command does it); without them a test fails loudly rather than passing vacuously.
pub(crate) fn services() -> Services {
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: run the tests through scripts/test.sh (it starts Kafka, Redis and PostgreSQL)")
        })
    };
    Services {
        brokers: get("COURIER_TEST_BROKERS"),
        pg_url: get("COURIER_TEST_PG_URL"),
        redis_url: get("COURIER_TEST_REDIS_URL"),
        script: get("COURIER_TEST_SERVICES"),
    }
}

/// A Redis of the test's own (plain TCP, no persistence) for a test that
/// stops and starts Redis: the other tests of its binary run beside it on the
/// shared Redis and never see it go (a client connecting to the shared one
/// while a test had stopped it could wait for ever). Its port lies below the
/// kernel's ephemeral range, so no outgoing connection takes it while it is
/// stopped. Killed when dropped.
pub(crate) struct OwnRedis {
    port: u16,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    /// Starts it on a free port and waits until it answers.
    pub(crate) fn start() -> OwnRedis {
        let port = (0..200)
            .map(|_| 20_000 + rand::random::<u16>() % 10_000)
            .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
            .expect("a free port for a Redis of the test's own");
        let mut r = OwnRedis { port, child: None };
        r.start_again();
        r
    }

    /// The shared services, with this Redis.
    pub(crate) fn services(&self, s: &Services) -> Services {
        Services {
            brokers: s.brokers.clone(),
            pg_url: s.pg_url.clone(),
            redis_url: format!("redis://127.0.0.1:{}", self.port),
            script: s.script.clone(),
        }
    }

    /// Stops it (SIGKILL: Courier sees its connections drop).
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on its port (empty) and waits until it answers PING.
    pub(crate) fn start_again(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/services.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.pings() {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} does not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pings(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Services {
    /// Runs a `scripts/services.sh` subcommand (e.g. `pg-stop`).
    pub(crate) fn ctl(&self, cmd: &str) {
        let st = Command::new("bash")
            .arg(&self.script)
            .arg(cmd)
            .status()
            .expect("services.sh");
        assert!(st.success(), "services.sh {cmd} failed");
    }
}

pub(crate) fn unique(prefix: &str) -> String {
    let n: u64 = rand::random();
    format!("{prefix}-{}-{:x}", std::process::id(), n & 0xffff_ffff)
}

/// A test's topics and group.
#[derive(Clone)]
pub(crate) struct Names {
    pub topic: String,
    pub dlq: String,
    pub parking: String,
    pub group: String,
    pub partitions: i32,
}

impl Names {
    pub(crate) fn new(prefix: &str, partitions: i32) -> Names {
        let base = unique(prefix);
        Names {
            dlq: format!("{base}.dlq"),
            parking: format!("{base}.parking"),
            group: format!("{base}-group"),
            topic: base,
            partitions,
        }
    }

    pub(crate) async fn create(&self, s: &Services, with_dlq: bool) {
        let mut t = vec![
            (self.topic.as_str(), self.partitions),
            (self.parking.as_str(), 1),
        ];
        if with_dlq {
            t.push((self.dlq.as_str(), self.partitions));
        }
        create_topics(&s.brokers, &t).await.expect("create topics");
    }

    /// The group's committed offsets. Retries transient coordinator errors (a
    /// coordinator moving or loading after a broker restart) for a few seconds.
    pub(crate) fn committed(&self, s: &Services) -> Vec<i64> {
        self.committed_positions(s)
            .into_iter()
            .map(|c| c.offset)
            .collect()
    }

    /// The group's committed positions (offsets and their metadata), asking
    /// again on transient coordinator errors like [`Names::committed`].
    pub(crate) fn committed_positions(&self, s: &Services) -> Vec<CommittedPosition> {
        let mut tries = 0;
        loop {
            match committed_positions(&s.brokers, &self.group, &self.topic, self.partitions) {
                Ok(v) => return v,
                Err(e) if tries < 20 => {
                    tries += 1;
                    eprintln!("committed offsets: {e}; asking again");
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => panic!("committed offsets: {e}"),
            }
        }
    }

    pub(crate) fn ends(&self, s: &Services) -> Vec<i64> {
        end_offsets(&s.brokers, &self.topic, self.partitions).expect("end offsets")
    }

    pub(crate) fn audit(
        &self,
        s: &Services,
        produced: &Produced,
        sink: &SinkHandle,
    ) -> AuditReport {
        self.audit_all(s, produced, &[sink])
    }

    /// [`Names::audit_all`] for a run with `[[filters]]`: `filtered`, the
    /// ids its filters drop, are counted `filtered` where found nowhere else.
    pub(crate) fn audit_filtered(
        &self,
        s: &Services,
        produced: &Produced,
        sinks: &[&SinkHandle],
        filtered: &std::collections::HashSet<String>,
    ) -> AuditReport {
        let (first, others) = sinks.split_first().expect("at least one stand-in");
        let mut api = first.audit();
        for sink in others {
            for (id, n) in sink.audit().delivered {
                *api.delivered.entry(id).or_default() += n;
            }
        }
        courier_standins::audit::audit_filtered(
            &s.brokers,
            &self.dlq,
            &self.parking,
            produced,
            &api,
            filtered,
        )
        .expect("audit")
    }

    /// [`Names::audit`] over several stand-ins (one API behind several
    /// instances): an event reached the API if any of them received it; one
    /// received by two counts as a duplicate.
    pub(crate) fn audit_all(
        &self,
        s: &Services,
        produced: &Produced,
        sinks: &[&SinkHandle],
    ) -> AuditReport {
        let (first, others) = sinks.split_first().expect("at least one stand-in");
        let mut api = first.audit();
        for sink in others {
            for (id, n) in sink.audit().delivered {
                *api.delivered.entry(id).or_default() += n;
            }
        }
        audit(&s.brokers, &self.dlq, &self.parking, produced, &api).expect("audit")
    }

    /// Waits until the group has read and committed DLQ p to its end in
    /// every partition (a DLQ partition never written to counts as drained):
    /// with several destinations the main topic can reach its end while the
    /// DLQ still drains beside it (`drain_alongside`).
    pub(crate) async fn wait_dlq_drained(&self, s: &Services, timeout: Duration) {
        let drained = || {
            let ends = end_offsets(&s.brokers, &self.dlq, self.partitions).expect("DLQ ends");
            let committed =
                committed_positions(&s.brokers, &self.group, &self.dlq, self.partitions)
                    .map(|v| v.into_iter().map(|c| c.offset).collect::<Vec<_>>())
                    .unwrap_or_default();
            ends.iter()
                .enumerate()
                .all(|(p, &end)| end == 0 || committed.get(p).is_some_and(|&c| c == end))
        };
        wait_until(timeout, "the DLQ is drained and committed", drained).await;
    }

    /// Waits until the group's committed offsets equal the topic's end offsets.
    pub(crate) async fn wait_committed_to_end(&self, s: &Services, timeout: Duration) {
        let ends = self.ends(s);
        wait_for_eq(
            timeout,
            "committed offsets reach the end offsets",
            &ends,
            || self.committed(s),
        )
        .await;
    }
}

/// Polls `cond` until it holds, failing the test after `timeout`. The wait is on
/// an observable condition, never a fixed sleep standing in for one.
pub(crate) async fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    loop {
        if cond() {
            return;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `value` until it equals `expected`, failing the test after `timeout`
/// with the last value seen: what a wait on offsets or counts needs to explain
/// itself.
pub(crate) async fn wait_for_eq<T: PartialEq + std::fmt::Debug>(
    timeout: Duration,
    what: &str,
    expected: &T,
    mut value: impl FnMut() -> T,
) {
    let until = Instant::now() + timeout;
    loop {
        let v = value();
        if &v == expected {
            return;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting until {what}: last {v:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn free_port() -> u16 {
    courier_testkit::free_port().expect("free port")
}

/// A Courier instance as a child process ([`courier_testkit::CourierProcess`]),
/// configured by a generated TOML file plus `COURIER__*` environment overrides.
/// Dropping it kills the process.
pub(crate) struct Courier {
    proc: CourierProcess,
    pub log: PathBuf,
    pub metrics_port: u16,
}

/// The lines of the log at `path` about the group and its commits (assignments,
/// revokes, drains, commits, warnings and errors), without colour codes: what
/// a failed rebalance or crash test prints to explain itself.
pub(crate) fn group_log_excerpt(path: &std::path::Path) -> String {
    const ABOUT: [&str; 8] = [
        "assigned",
        "revoked",
        "drain",
        "commit",
        "rebalance",
        "WARN",
        "ERROR",
        "member",
    ];
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = format!("--- {}\n", path.display());
    // The one involuntary loss a test cannot bound: say it first.
    if text.contains("SESSTMOUT") {
        out.push_str(
            "NOTE: this member's session timed out on the client (the coordinator answered \
             nothing for kafka.session_timeout): its assignment was lost, and what it had \
             finished since its last commit that landed is delivered again\n",
        );
    }
    for line in text.lines() {
        let plain = strip_ansi(line);
        if ABOUT.iter().any(|w| plain.contains(w)) {
            out.push_str(&plain);
            out.push('\n');
        }
    }
    out
}

pub(crate) use courier_testkit::strip_ansi;

pub(crate) fn log_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("courier-logs");
    std::fs::create_dir_all(&d).expect("log dir");
    d
}

impl Courier {
    /// `toml` is the test's own config (topics, API URL, limits); brokers and the
    /// metrics port are given through the environment.
    pub(crate) fn start(name: &str, s: &Services, toml: &str) -> Courier {
        Self::start_with_env(name, s, toml, &[])
    }

    /// Like [`Courier::start`], with extra environment variables (secrets).
    pub(crate) fn start_with_env(
        name: &str,
        s: &Services,
        toml: &str,
        env: &[(&str, &str)],
    ) -> Courier {
        let mut launch = Launch::new(
            env!("CARGO_BIN_EXE_courier"),
            log_dir(),
            name,
            toml,
            &s.brokers,
            &s.redis_url,
        );
        launch.rust_log =
            std::env::var("COURIER_TEST_RUST_LOG").unwrap_or_else(|_| DEFAULT_RUST_LOG.into());
        launch.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let proc = CourierProcess::start(&launch).expect("start courier");
        Courier {
            log: proc.log.clone(),
            metrics_port: proc.metrics_port,
            proc,
        }
    }

    /// SIGKILL: no shutdown path runs at all.
    pub(crate) async fn kill(&mut self) {
        self.proc.kill().await;
    }

    /// SIGTERM and wait for the graceful shutdown; returns the exit code.
    pub(crate) async fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        self.proc
            .terminate(timeout)
            .await
            .unwrap_or_else(|e| panic!("courier: {e}"))
    }

    /// Waits for the process to exit on its own; returns the exit code.
    pub(crate) async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        self.proc
            .wait_exit(timeout)
            .await
            .unwrap_or_else(|e| panic!("courier: {e}"))
    }

    pub(crate) fn log_text(&self) -> String {
        self.proc.log_text().unwrap_or_default()
    }

    /// Its process id; `None` once it has exited.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// The process's peak resident set (`VmHWM` in /proc/<pid>/status), in
    /// bytes; `None` once it has exited.
    pub(crate) fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.proc.pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// Scrapes `/metrics` and returns the sum of all series of `name` (which may
    /// include the start of a label set, e.g. `x_total{result="miss"`); 0 when
    /// the page cannot be read.
    pub(crate) async fn metric(&self, name: &str) -> f64 {
        self.proc.metric(name).await.unwrap_or(0.0)
    }
}

/// Runs a `courier` command (e.g. `dlq inspect`) with `--config cfg` against the
/// test broker; `env` is set last (another broker list, a SASL password).
/// Returns the exit code, stdout and stderr.
pub(crate) fn courier_cli_env(
    s: &Services,
    cfg: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .arg("--config")
        .arg(cfg)
        .env("COURIER__KAFKA__BROKERS", &s.brokers)
        .envs(env.iter().copied())
        .output()
        .expect("run courier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Like [`courier_cli_env`] without extra environment; stdout and stderr together.
pub(crate) fn courier_cli(s: &Services, cfg: &std::path::Path, args: &[&str]) -> (i32, String) {
    let (code, out, err) = courier_cli_env(s, cfg, args, &[]);
    (code, out + &err)
}

/// `[degraded]` settings that make outages, pauses and drains quick enough to test.
pub(crate) const FAST: &str = "marker_ttl = \"3s\"
poll_interval = \"100ms\"
breaker_min_calls = 10
breaker_open = \"1s 500ms\"
min_pause = \"500ms\"
drain_rate_per_sec = 20.0
drain_concurrency = 4
dlq_backoff_base = \"300ms\"
dlq_backoff_cap = \"2s\"
lag_check_interval = \"250ms\"";

/// The config every test starts from: its topics, the API stand-in, quick retries
/// and frequent auto-commits so the tests finish fast. DLQ entries wait an hour
/// before a drain (tests of the drain use [`toml_with`]).
pub(crate) fn base_toml(n: &Names, api_url: &str) -> String {
    toml_with(
        n,
        api_url,
        "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"",
    )
}

/// Like [`base_toml`] with the given lines as the `[degraded]` section.
pub(crate) fn toml_with(n: &Names, api_url: &str, degraded: &str) -> String {
    format!(
        r#"
[kafka]
topic = "{topic}"
dlq_topic = "{dlq}"
parking_topic = "{parking}"
group_id = "{group}"
auto_commit_interval = "200ms"
session_timeout = "10s"

[degraded]
{degraded}

[api]
url = "{api_url}"
retry_base = "20ms"
retry_max_delay = "100ms"
retry_budget = "500ms"

[pipeline]
concurrency = 256
drain_timeout = "3s"
shutdown_grace = "5s"
"#,
        topic = n.topic,
        dlq = n.dlq,
        parking = n.parking,
        group = n.group,
        degraded = degraded,
    )
}

/// Waits until every produced event reached one of the stand-ins `sinks`
/// (several APIs behind routes, or one API behind several instances).
pub(crate) async fn wait_all_reached(
    timeout: Duration,
    produced: &Produced,
    sinks: &[&SinkHandle],
) {
    wait_until(timeout, "every event reached an API", || {
        let audits: Vec<_> = sinks.iter().map(|s| s.audit()).collect();
        produced
            .ids
            .iter()
            .all(|id| audits.iter().any(|a| a.delivered.contains_key(id)))
    })
    .await;
}

/// A URL's origin, as Courier names a destination no route names
/// (`[[api.routes]]` without `destination`).
pub(crate) fn origin(url: &str) -> String {
    let rest = url.find("://").map_or(0, |i| i + 3);
    let end = url[rest..].find('/').map_or(url.len(), |i| rest + i);
    url[..end].to_ascii_lowercase()
}

/// Prints the audit and asserts nothing was lost.
pub(crate) fn assert_no_loss(name: &str, rep: &AuditReport) {
    println!("[{name}] audit:\n{rep}");
    assert!(
        rep.lost.is_empty(),
        "[{name}] lost {} events, e.g. {:?}",
        rep.lost.len(),
        &rep.lost[..rep.lost.len().min(10)]
    );
}

/// Sum of end offsets of a topic.
pub(crate) fn topic_size(s: &Services, topic: &str) -> i64 {
    // Every partition the broker lists (a count given by the caller could miss
    // some: a 1-partition parking lot asked for 2 answered an error, read as 0).
    courier::kafka::admin::watermarks(&s.brokers, topic)
        .unwrap_or_else(|e| panic!("the end offsets of {topic}: {e}"))
        .values()
        .map(|(_, hi)| hi)
        .sum()
}

/// Envelopes in a topic (DLQ or parking lot).
pub(crate) fn envelopes(s: &Services, topic: &str) -> Vec<courier::core::envelope::Envelope> {
    courier_standins::admin::read_all(&s.brokers, topic)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| courier::core::envelope::Envelope::from_bytes(r.payload.as_deref()?).ok())
        .collect()
}

/// A fresh PostgreSQL table `<prefix>_<topic>` (`key text`, `doc jsonb`) holding
/// `rows`, for enrichment; returns its name.
pub(crate) async fn pg_table(
    s: &Services,
    n: &Names,
    prefix: &str,
    rows: &[(String, serde_json::Value)],
) -> String {
    let table = format!("{prefix}_{}", n.topic.replace('-', "_"));
    let (db, conn) = tokio_postgres::connect(&s.pg_url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    db.batch_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, doc jsonb NOT NULL)"
    ))
    .await
    .expect("create table");
    let insert = format!("INSERT INTO {table} (key, doc) VALUES ($1, $2)");
    for (key, doc) in rows {
        db.execute(&insert, &[key, doc]).await.expect("insert row");
    }
    table
}

/// The API stand-in on a free local port, answering every request after `ms`.
pub(crate) async fn api_with_latency(ms: u64) -> SinkHandle {
    SinkHandle::start(
        "127.0.0.1:0".parse().expect("a socket address"),
        Behaviour {
            latency_ms: ms,
            ..Behaviour::default()
        },
    )
    .await
    .expect("start the API stand-in")
}

/// Runs a future to completion from inside a sync closure (the wait helper's
/// condition is sync; the test runtime is multi-threaded).
pub(crate) fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// A Kubernetes Secret volume in `dir`: `dir/<name>` → `..data/<name>`, and
/// `..data` → a timestamped directory, replaced atomically (a rename of a new
/// symlink over `..data`), as the kubelet does.
pub(crate) fn secret_volume(dir: &std::path::Path, name: &str, generation: u32, value: &str) {
    let ts = dir.join(format!("..2026_12_02_05_00_{generation:02}.{generation}"));
    std::fs::create_dir_all(&ts).expect("secret dir");
    std::fs::write(ts.join(name), format!("{value}\n")).expect("secret");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(ts.file_name().expect("name"), &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    let link = dir.join(name);
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink(format!("..data/{name}"), &link).expect("link");
    }
}
