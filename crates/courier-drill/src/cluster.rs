//! The cluster a drill runs against: the real services (from `services.env`), the
//! API stand-in in-process, Courier instances as child processes, the load
//! generator in the background and a monitor scraping every instance's `/metrics`.

use anyhow::{bail, Context as _};
use courier::kafka::admin::{committed_offsets, end_offsets};
use courier_standins::admin::create_topics;
use courier_standins::audit::Produced;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::{CourierProcess, Launch, DEFAULT_RUST_LOG};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::process::Command;
use tokio::task::JoinHandle;

use crate::metrics::Scrape;

/// The bearer token Courier sends (through `api.token_env`) and the stand-in expects.
pub const TOKEN: &str = "drill-token";
pub const TOKEN_ENV: &str = "COURIER_DRILL_TOKEN";

/// The real services, as `scripts/services.sh up` describes them in `services.env`.
#[derive(Debug, Clone)]
pub struct Services {
    pub brokers: String,
    pub proxied_brokers: String,
    /// Where the broker's PROXIED listener itself listens (Toxiproxy's upstream).
    pub proxied_upstream: String,
    pub redis_url: String,
    pub script: PathBuf,
}

fn parse_env_file(path: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

impl Services {
    /// Reads the services from the environment, else from `$COURIER_STATE/services.env`;
    /// when neither has them, runs `services.sh up` first.
    pub async fn load(script: &Path) -> anyhow::Result<Services> {
        let state =
            std::env::var("COURIER_STATE").unwrap_or_else(|_| "/tmp/courier-services".into());
        let env_file = Path::new(&state).join("services.env");
        if std::env::var("COURIER_TEST_BROKERS").is_err() && !env_file.exists() {
            eprintln!(
                "[drill] no services.env: starting the services with {} up",
                script.display()
            );
            run_script(script, "up").await?;
        }
        let file = parse_env_file(&env_file);
        let get = |k: &str| std::env::var(k).ok().or_else(|| file.get(k).cloned());
        let brokers = get("COURIER_TEST_BROKERS").with_context(|| {
            format!(
                "COURIER_TEST_BROKERS is not set and not in {}",
                env_file.display()
            )
        })?;
        let redis_url = get("COURIER_TEST_REDIS_URL").with_context(|| {
            format!(
                "COURIER_TEST_REDIS_URL is not set and not in {}",
                env_file.display()
            )
        })?;
        let proxied_brokers =
            get("COURIER_TEST_PROXIED_BROKERS").unwrap_or_else(|| "127.0.0.1:19096".into());
        let proxied_port = get("COURIER_KAFKA_PROXIED_PORT").unwrap_or_else(|| "19095".into());
        Ok(Services {
            brokers,
            proxied_brokers,
            proxied_upstream: format!("127.0.0.1:{proxied_port}"),
            redis_url,
            script: script.to_path_buf(),
        })
    }

    /// Runs a `scripts/services.sh` subcommand (e.g. `redis-stop`).
    pub async fn ctl(&self, cmd: &str) -> anyhow::Result<()> {
        run_script(&self.script, cmd).await
    }
}

pub async fn run_script(script: &Path, cmd: &str) -> anyhow::Result<()> {
    eprintln!("[drill] {} {cmd}", script.display());
    // A broker with many partitions on a busy machine can take over a minute to start.
    let ready_timeout =
        std::env::var("COURIER_KAFKA_READY_TIMEOUT").unwrap_or_else(|_| "180".into());
    let st = Command::new("bash")
        .arg(script)
        .arg(cmd)
        .env("COURIER_KAFKA_READY_TIMEOUT", ready_timeout)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .await
        .with_context(|| format!("running {} {cmd}", script.display()))?;
    if !st.success() {
        bail!("{} {cmd} failed ({st})", script.display());
    }
    Ok(())
}

/// Topics and group of one scenario.
#[derive(Debug, Clone)]
pub struct Names {
    pub topic: String,
    pub dlq: String,
    pub parking: String,
    pub group: String,
    pub partitions: i32,
}

impl Names {
    pub fn new(scenario: &str, partitions: i32) -> Names {
        let n: u32 = rand::random();
        let base = format!("drill-{scenario}-{}-{n:08x}", std::process::id());
        Names {
            dlq: format!("{base}.dlq"),
            parking: format!("{base}.parking"),
            group: format!("{base}-group"),
            topic: base,
            partitions,
        }
    }
}

impl Names {
    /// Deletes the scenario's topics (kept when something was lost, for a post-mortem).
    pub async fn delete(&self, brokers: &str) -> anyhow::Result<()> {
        use rdkafka::admin::{AdminClient, AdminOptions};
        use rdkafka::client::DefaultClientContext;
        let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()?;
        admin
            .delete_topics(
                &[&self.topic, &self.dlq, &self.parking],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await?;
        Ok(())
    }
}

/// Settings of the cluster under test.
#[derive(Debug, Clone)]
pub struct ClusterCfg {
    pub courier: PathBuf,
    pub instances: usize,
    pub partitions: i32,
    pub concurrency: usize,
    pub log_dir: PathBuf,
    /// Normal API latency (ms); jitter is the same again.
    pub api_latency_ms: u64,
}

/// Quick degraded-mode timings (as in tests/degraded.rs), so a drill's outage,
/// pause, drain and resume all fit in seconds.
const DEGRADED: &str = "marker_ttl = \"3s\"
poll_interval = \"100ms\"
breaker_min_calls = 10
breaker_open = \"1s 500ms\"
min_pause = \"500ms\"
drain_rate_per_sec = 200.0
drain_concurrency = 8
dlq_backoff_base = \"300ms\"
dlq_backoff_cap = \"2s\"
lag_check_interval = \"250ms\"";

pub fn courier_toml(n: &Names, api_url: &str, concurrency: usize) -> String {
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
{DEGRADED}

[api]
url = "{api_url}"
token_env = "{TOKEN_ENV}"
retry_base = "20ms"
retry_max_delay = "100ms"
retry_budget = "500ms"

[pipeline]
concurrency = {concurrency}
drain_timeout = "3s"
shutdown_grace = "5s"
"#,
        topic = n.topic,
        dlq = n.dlq,
        parking = n.parking,
        group = n.group,
    )
}

/// One Courier process (one incarnation of an instance slot).
pub struct Instance {
    pub slot: usize,
    pub incarnation: u64,
    pub name: String,
    pub metrics_port: u16,
    pub log: PathBuf,
    proc: CourierProcess,
}

impl Instance {
    /// Exit code if the process has exited on its own (`Some(None)`: by a signal).
    pub fn exited(&mut self) -> Option<Option<i32>> {
        self.proc.exited()
    }

    /// Started and not yet stopped, killed or seen exited.
    pub fn is_live(&self) -> bool {
        self.proc.is_live()
    }

    /// SIGKILL: no shutdown path runs.
    pub async fn kill(&mut self) {
        self.proc.kill().await;
    }

    /// SIGTERM, then waits for the graceful exit (SIGKILL after `timeout`).
    /// Returns the exit code, `None` when it had to be killed or died by a signal.
    pub async fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        match self.proc.terminate(timeout).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("[drill] {e}");
                self.proc.kill().await;
                None
            }
        }
    }

    pub async fn scrape(&self) -> Option<Scrape> {
        crate::metrics::scrape(self.metrics_port).await
    }

    /// The last lines of the log that mention a problem, for a report.
    pub fn log_tail(&self, lines: usize) -> Vec<String> {
        let text = self.proc.log_text().unwrap_or_default();
        let bad: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN") || l.contains("panicked"))
            .collect();
        bad[bad.len().saturating_sub(lines)..]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

/// Live instances by incarnation id → metrics port, shared with the monitor.
type Registry = Arc<Mutex<HashMap<u64, u16>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the monitor saw over a run.
#[derive(Debug, Default)]
pub struct Observed {
    /// The last scrape of every incarnation (counters die with the process).
    pub last: HashMap<u64, Scrape>,
    /// Seconds during which at least one instance reported `courier_api_unavailable = 1`.
    pub paused_s: f64,
    /// Σ over instances of seconds with `courier_api_unavailable = 1`.
    pub paused_instance_s: f64,
}

/// A running scenario's cluster.
pub struct Cluster {
    pub svc: Services,
    pub cfg: ClusterCfg,
    pub names: Names,
    pub sink: SinkHandle,
    /// The stand-ins' behaviour when healthy ([`Cluster::baseline`]): the
    /// drill's [`baseline`], or a scenario's own (set before the faults).
    pub healthy: Behaviour,
    /// Further API stand-ins, other destinations' (`destination-outage`): the
    /// audit counts an event delivered when any stand-in received it.
    pub extra_sinks: Vec<SinkHandle>,
    pub instances: Vec<Instance>,
    pub toml: String,
    /// Instance slots that reach Kafka through the proxy (partition-one).
    pub proxied_slots: Vec<usize>,
    /// Slots run as static members (`POD_NAME` = `<scenario>-i<slot>`, the same
    /// for every incarnation of the slot): crash-cost.
    pub static_ids: bool,
    /// Unexpected exits seen (instance name, exit code), findings for the report.
    pub unexpected_exits: Vec<(String, Option<i32>)>,
    registry: Registry,
    observed: Arc<Mutex<Observed>>,
    monitor: JoinHandle<()>,
    next_incarnation: u64,
    scenario: String,
}

impl Cluster {
    pub fn baseline(&self) -> Behaviour {
        self.healthy.clone()
    }

    /// What the stand-ins received, merged: [`Cluster::sink`]'s books with the
    /// deliveries of every other stand-in added (an event reached the API when
    /// any of them received it; received by two, it counts as a duplicate).
    pub fn api_audit(&self) -> courier_standins::sink::Audit {
        let mut api = self.sink.audit();
        for sink in &self.extra_sinks {
            for (id, n) in sink.audit().delivered {
                *api.delivered.entry(id).or_default() += n;
            }
        }
        api
    }

    /// Every stand-in back to the baseline behaviour (the end of a scenario's faults).
    pub fn heal_sinks(&self) {
        for sink in std::iter::once(&self.sink).chain(&self.extra_sinks) {
            sink.set_behaviour(self.baseline());
        }
    }

    /// The scenario's name (the load's id prefix is `drill-<name>`).
    pub fn scenario(&self) -> &str {
        &self.scenario
    }

    /// Creates the topics and starts the stand-in and the monitor (no instances yet).
    pub async fn new(scenario: &str, svc: Services, cfg: ClusterCfg) -> anyhow::Result<Cluster> {
        let names = Names::new(scenario, cfg.partitions);
        create_topics(
            &svc.brokers,
            &[
                (names.topic.as_str(), names.partitions),
                (names.dlq.as_str(), names.partitions),
                (names.parking.as_str(), 1),
            ],
        )
        .await
        .context("creating the drill's topics")?;
        let healthy = baseline(cfg.api_latency_ms);
        let sink = SinkHandle::start("127.0.0.1:0".parse()?, healthy.clone())
            .await
            .context("starting the API stand-in")?;
        let toml = courier_toml(&names, &sink.url(), cfg.concurrency);
        std::fs::create_dir_all(&cfg.log_dir)
            .with_context(|| format!("creating {}", cfg.log_dir.display()))?;
        let registry: Registry = Arc::default();
        let observed: Arc<Mutex<Observed>> = Arc::default();
        let monitor = tokio::spawn(monitor(registry.clone(), observed.clone()));
        Ok(Cluster {
            svc,
            cfg,
            names,
            sink,
            healthy,
            extra_sinks: Vec::new(),
            instances: Vec::new(),
            toml,
            proxied_slots: Vec::new(),
            static_ids: false,
            unexpected_exits: Vec::new(),
            registry,
            observed,
            monitor,
            next_incarnation: 0,
            scenario: scenario.to_string(),
        })
    }

    /// Starts a new incarnation of instance `slot` (replacing the vector entry).
    pub fn spawn(&mut self, slot: usize) -> anyhow::Result<()> {
        let incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        // One config file per incarnation (`<name>.toml`): rewriting a shared one
        // races with a starting instance reading it.
        let name = format!("{}-i{slot}-{incarnation}", self.scenario);
        let brokers = if self.proxied_slots.contains(&slot) {
            &self.svc.proxied_brokers
        } else {
            &self.svc.brokers
        };
        let mut launch = Launch::new(
            &self.cfg.courier,
            &self.cfg.log_dir,
            &name,
            &self.toml,
            brokers,
            &self.svc.redis_url,
        );
        launch.rust_log =
            std::env::var("COURIER_DRILL_RUST_LOG").unwrap_or_else(|_| DEFAULT_RUST_LOG.into());
        launch.env = vec![(TOKEN_ENV.into(), TOKEN.into())];
        if self.static_ids {
            let id = format!("{}-{}-i{slot}", self.names.topic, self.scenario);
            launch.env.push(("POD_NAME".into(), id));
        }
        launch.scrape_timeout = Some(crate::metrics::SCRAPE_TIMEOUT);
        let proc = CourierProcess::start(&launch)
            .with_context(|| format!("starting Courier instance {name}"))?;
        lock(&self.registry).insert(incarnation, proc.metrics_port);
        let inst = Instance {
            slot,
            incarnation,
            name,
            metrics_port: proc.metrics_port,
            log: proc.log.clone(),
            proc,
        };
        if slot < self.instances.len() {
            self.instances[slot] = inst;
        } else {
            self.instances.push(inst);
        }
        Ok(())
    }

    /// Starts every slot and waits until the group owns all partitions.
    pub async fn start_all(&mut self) -> anyhow::Result<()> {
        for slot in 0..self.cfg.instances {
            self.spawn(slot)?;
        }
        self.wait_joined(None, Duration::from_secs(90)).await
    }

    fn forget(&self, incarnation: u64) {
        lock(&self.registry).remove(&incarnation);
    }

    pub async fn kill(&mut self, slot: usize) {
        let inc = self.instances[slot].incarnation;
        self.instances[slot].kill().await;
        self.forget(inc);
    }

    pub async fn terminate(&mut self, slot: usize, timeout: Duration) -> Option<i32> {
        let inc = self.instances[slot].incarnation;
        let code = self.instances[slot].terminate(timeout).await;
        self.forget(inc);
        code
    }

    /// Records instances that exited on their own and restarts them (what an
    /// orchestrator would do).
    pub fn reap(&mut self) -> anyhow::Result<()> {
        for slot in 0..self.instances.len() {
            if let Some(code) = self.instances[slot].exited() {
                let inst = &self.instances[slot];
                eprintln!(
                    "[drill] FINDING: {} exited on its own (code {code:?}); log: {}",
                    inst.name,
                    inst.log.display()
                );
                self.unexpected_exits.push((inst.name.clone(), code));
                let inc = inst.incarnation;
                self.forget(inc);
                self.spawn(slot)?;
            }
        }
        Ok(())
    }

    /// Waits until every live instance reports an assignment and together they own
    /// every partition; with `slot`, that instance must own at least one.
    pub async fn wait_joined(
        &mut self,
        slot: Option<usize>,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + timeout;
        loop {
            self.reap()?;
            let mut total = 0.0;
            let mut each = true;
            let mut mine = slot.is_none();
            for inst in &self.instances {
                if !inst.is_live() {
                    continue;
                }
                let a = inst.scrape().await.map(|s| s.assigned).unwrap_or(0.0);
                total += a;
                each &= a > 0.0 || self.cfg.partitions < self.cfg.instances as i32;
                if Some(inst.slot) == slot && a > 0.0 {
                    mine = true;
                }
            }
            if total as i32 == self.cfg.partitions && each && mine {
                return Ok(());
            }
            if Instant::now() > until {
                bail!(
                    "instances did not join within {timeout:?} (assigned {total} of {} partitions); logs in {}",
                    self.cfg.partitions,
                    self.cfg.log_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every live instance's scrape.
    pub async fn scrape_all(&self) -> Vec<Scrape> {
        let mut out = Vec::new();
        for inst in &self.instances {
            if inst.is_live() {
                if let Some(s) = inst.scrape().await {
                    out.push(s);
                }
            }
        }
        out
    }

    /// Waits until every live instance reports `courier_api_unavailable == want`.
    pub async fn wait_all_unavailable(&self, want: bool, timeout: Duration) -> Option<Duration> {
        let v = if want { 1.0 } else { 0.0 };
        self.wait_all(timeout, |s| s.api_unavailable == v).await
    }

    /// Waits until every live instance reports
    /// `courier_api_unavailable{destination="<destination>"} == want` (a
    /// series it does not have yet is not an answer).
    pub async fn wait_destination_unavailable(
        &self,
        destination: &str,
        want: bool,
        timeout: Duration,
    ) -> Option<Duration> {
        let v = if want { 1.0 } else { 0.0 };
        self.wait_all(timeout, |s| {
            s.unavailable_by_destination.get(destination) == Some(&v)
        })
        .await
    }

    /// Waits until every live instance answers a scrape and `cond` holds for each.
    async fn wait_all(
        &self,
        timeout: Duration,
        cond: impl Fn(&Scrape) -> bool,
    ) -> Option<Duration> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            let s = self.scrape_all().await;
            if s.len() == self.instances.iter().filter(|i| i.is_live()).count()
                && s.iter().all(&cond)
            {
                return Some(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Records in the DLQ topic (all partitions).
    pub fn dlq_size(&self) -> i64 {
        tokio::task::block_in_place(|| {
            end_offsets(&self.svc.brokers, &self.names.dlq, self.names.partitions)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        })
    }

    /// Whether the group committed the main topic to its end and the DLQ to its end.
    pub fn settled(&self) -> anyhow::Result<bool> {
        let n = &self.names;
        let b = &self.svc.brokers;
        let ends = end_offsets(b, &n.topic, n.partitions)?;
        let committed = committed_offsets(b, &n.group, &n.topic, n.partitions)?;
        if committed != ends {
            return Ok(false);
        }
        let dlq_ends = end_offsets(b, &n.dlq, n.partitions)?;
        let dlq_committed = committed_offsets(b, &n.group, &n.dlq, n.partitions)?;
        Ok(dlq_committed
            .iter()
            .zip(&dlq_ends)
            .all(|(c, e)| (*c).max(0) == *e))
    }

    /// Waits (restarting instances that died on their own) until [`Cluster::settled`].
    pub async fn wait_settled(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        loop {
            self.reap()?;
            if tokio::task::block_in_place(|| self.settled()).unwrap_or(false) {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "not settled after {timeout:?}: committed offsets of the main topic or the DLQ did not reach their ends"
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stops every instance (SIGTERM); returns instances that did not exit with 0.
    pub async fn stop_all(&mut self) -> Vec<(String, Option<i32>)> {
        let mut bad = Vec::new();
        for slot in 0..self.instances.len() {
            if !self.instances[slot].is_live() {
                continue;
            }
            let name = self.instances[slot].name.clone();
            let code = self.terminate(slot, Duration::from_secs(30)).await;
            if code != Some(0) {
                bad.push((name, code));
            }
        }
        bad
    }

    /// Σ `courier_events_deleted_unread_total` over every incarnation so far: the
    /// live ones scraped now, the others as the monitor last saw them.
    pub async fn deleted_unread_reported(&self) -> f64 {
        let mut last: HashMap<u64, f64> = lock(&self.observed)
            .last
            .iter()
            .map(|(k, s)| (*k, s.deleted_unread))
            .collect();
        for inst in &self.instances {
            if inst.is_live() {
                if let Some(s) = inst.scrape().await {
                    last.insert(inst.incarnation, s.deleted_unread);
                }
            }
        }
        last.values().sum::<f64>() + 0.0
    }

    /// Stops the monitor and returns what it saw.
    pub async fn finish(mut self) -> Observed {
        // One last scrape has been taken by the monitor at most 500 ms ago; the
        // instances are stopped by now, so nothing is lost but that tail.
        self.monitor.abort();
        let _ = (&mut self.monitor).await;
        std::mem::take(&mut *lock(&self.observed))
    }
}

impl Drop for Cluster {
    /// Also on an early return: the instances die with their `CourierProcess`.
    fn drop(&mut self) {
        self.monitor.abort();
        self.sink.shutdown();
        for s in &self.extra_sinks {
            s.shutdown();
        }
    }
}

pub fn baseline(latency_ms: u64) -> Behaviour {
    Behaviour {
        latency_ms,
        latency_jitter_ms: latency_ms,
        required_token: Some(TOKEN.into()),
        ..Behaviour::default()
    }
}

/// Scrapes every live instance every 500 ms: keeps each incarnation's last
/// scrape and integrates the time spent paused.
async fn monitor(registry: Registry, observed: Arc<Mutex<Observed>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        let live: Vec<(u64, u16)> = lock(&registry).iter().map(|(k, v)| (*k, *v)).collect();
        let mut scrapes = Vec::new();
        for (inc, port) in live {
            if let Some(s) = crate::metrics::scrape(port).await {
                scrapes.push((inc, s));
            }
        }
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        let mut o = lock(&observed);
        let paused = scrapes
            .iter()
            .filter(|(_, s)| s.api_unavailable >= 1.0)
            .count();
        if paused > 0 {
            o.paused_s += dt;
        }
        o.paused_instance_s += dt * paused as f64;
        for (inc, s) in scrapes {
            o.last.insert(inc, s);
        }
    }
}

/// The load: `count` events at `rate` per second, in chunks, in the background.
/// Its events are of the load generator's default type, or of several types
/// (`LoadShape::event_types`), one per chunk (see [`type_of_chunk`]).
pub struct Load {
    pub poison: Arc<AtomicBool>,
    ctl: Arc<LoadCtl>,
    task: JoinHandle<anyhow::Result<Produced>>,
}

/// What a scenario can do to the running load (the hostile drill).
#[derive(Default)]
struct LoadCtl {
    /// Produce nothing while set (between chunks).
    hold: AtomicBool,
    /// Set by the load while it holds: no chunk is on its way.
    held: AtomicBool,
    /// Take a new producer before the next chunk (the topic was recreated).
    renew: AtomicBool,
    /// End early: the load stops before its next chunk.
    stop: AtomicBool,
    /// Valid events acknowledged so far (the index of the next one in `Produced::ids`).
    acked: AtomicUsize,
    /// The registry schema id the chunks' Avro records are framed for; 0:
    /// CloudEvents JSON.
    schema_id: std::sync::atomic::AtomicU32,
}

/// What a load produces besides its count and rate (`Load::start`).
#[derive(Debug, Clone)]
pub struct LoadShape {
    /// Empty: every event of the load generator's default type.
    pub event_types: Vec<String>,
    /// Keys the events cycle through (`Spec::keys`).
    pub keys: usize,
    /// Avro records framed for this registry schema id (`Spec::avro_schema_id`),
    /// changed on the way with [`Load::set_schema_id`]; `None`: CloudEvents JSON.
    pub avro_schema_id: Option<u32>,
}

impl Default for LoadShape {
    fn default() -> Self {
        LoadShape {
            event_types: Vec::new(),
            keys: LOAD_KEYS,
            avro_schema_id: None,
        }
    }
}

impl Load {
    /// `count` events at `rate` per second, of `shape`.
    pub fn start(
        brokers: &str,
        topic: &str,
        id_prefix: &str,
        count: usize,
        rate: u64,
        shape: LoadShape,
    ) -> Load {
        let poison = Arc::new(AtomicBool::new(false));
        let ctl = Arc::new(LoadCtl::default());
        ctl.schema_id
            .store(shape.avro_schema_id.unwrap_or(0), Ordering::SeqCst);
        let shape = Shape {
            id_prefix: id_prefix.to_string(),
            count,
            rate: rate.max(1),
            event_types: shape.event_types,
            keys: shape.keys.max(1),
        };
        let task = tokio::spawn(produce_load(
            brokers.to_string(),
            topic.to_string(),
            shape,
            poison.clone(),
            ctl.clone(),
        ));
        Load { poison, ctl, task }
    }

    /// Holds the load between two chunks and returns once nothing is on its
    /// way, with the number of valid events acknowledged until then.
    pub async fn hold(&self, timeout: Duration) -> anyhow::Result<usize> {
        self.ctl.hold.store(true, Ordering::SeqCst);
        let until = Instant::now() + timeout;
        while !self.ctl.held.load(Ordering::SeqCst) && !self.task.is_finished() {
            if Instant::now() > until {
                bail!("the load did not come to a halt within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(self.ctl.acked.load(Ordering::SeqCst))
    }

    /// Lets a held load go on; with `renew`, on a new producer (its old one knew
    /// a topic that no longer exists).
    pub fn resume(&self, renew: bool) {
        self.ctl.renew.store(renew, Ordering::SeqCst);
        self.ctl.hold.store(false, Ordering::SeqCst);
    }

    /// Frames the next chunks' Avro records for `id` (a new schema the
    /// producer registered); only for a load started with an Avro schema id.
    pub fn set_schema_id(&self, id: u32) {
        self.ctl.schema_id.store(id, Ordering::SeqCst);
    }

    /// Valid events acknowledged so far.
    pub fn acked(&self) -> usize {
        self.ctl.acked.load(Ordering::SeqCst)
    }

    /// Ends the load before its next chunk (the scenario has what it needs).
    pub fn stop(&self) {
        self.ctl.stop.store(true, Ordering::SeqCst);
    }

    pub async fn wait(self) -> anyhow::Result<Produced> {
        self.task.await.context("the load task panicked")?
    }
}

/// How long the drill's load producer waits for an acknowledgement before it
/// sends the chunk again with a new producer, and how many times it does.
const LOAD_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);
const LOAD_ATTEMPTS: u32 = 5;

/// Every `POISON_EVERY`-th record is bad input while the poison flag is up (5 %).
pub const POISON_EVERY: usize = 20;

/// Events of the load per key before the keys repeat (`Spec::keys`).
const LOAD_KEYS: usize = 2_000;

/// Which of `types` types the `chunk_no`-th chunk of a load has: the sum of
/// `chunk_no`'s digits in base `types` (with two types, the Thue–Morse
/// sequence). Every `types` consecutive chunks from a multiple of `types` hold
/// one chunk of each type, so each type has its share of the rate at any
/// moment; and a key does not keep one type forever. Plain alternation would
/// do that: the keys repeat every 2,000 events, an even number of chunks at
/// the default rates, so a key would fall in a chunk of the same type round
/// after round.
fn type_of_chunk(chunk_no: usize, types: usize) -> usize {
    if types < 2 {
        return 0;
    }
    let (mut sum, mut n) = (0, chunk_no);
    while n > 0 {
        sum += n % types;
        n /= types;
    }
    sum % types
}

/// What a load produces (`Load::start`'s arguments).
struct Shape {
    id_prefix: String,
    count: usize,
    rate: u64,
    /// Empty: the load generator's default type.
    event_types: Vec<String>,
    keys: usize,
}

async fn produce_load(
    brokers: String,
    topic: String,
    shape: Shape,
    poison: Arc<AtomicBool>,
    ctl: Arc<LoadCtl>,
) -> anyhow::Result<Produced> {
    let Shape {
        id_prefix,
        count,
        rate,
        event_types,
        keys,
    } = shape;
    let mut producer = loadgen::producer_with_timeout(&brokers, LOAD_MESSAGE_TIMEOUT)?;
    // Chunks are a multiple of POISON_EVERY so that poison is exactly 1 in 20.
    let chunk = ((rate as usize / 10).div_ceil(POISON_EVERY) * POISON_EVERY).max(POISON_EVERY);
    let period = Duration::from_secs_f64(chunk as f64 / rate as f64);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = Produced::default();
    let mut sent = 0usize;
    while sent < count && !ctl.stop.load(Ordering::SeqCst) {
        while ctl.hold.load(Ordering::SeqCst) && !ctl.stop.load(Ordering::SeqCst) {
            ctl.held.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ctl.held.store(false, Ordering::SeqCst);
        if ctl.renew.swap(false, Ordering::SeqCst) {
            producer = loadgen::producer_with_timeout(&brokers, LOAD_MESSAGE_TIMEOUT)?;
        }
        tick.tick().await;
        let n = chunk.min(count - sent);
        let schema_id = ctl.schema_id.load(Ordering::SeqCst);
        let mut spec = Spec {
            count: n,
            keys,
            id_prefix: id_prefix.clone(),
            poison_every: poison.load(Ordering::Relaxed).then_some(POISON_EVERY),
            avro_schema_id: (schema_id != 0).then_some(schema_id),
            ..Spec::default()
        };
        if !event_types.is_empty() {
            let t = type_of_chunk(sent / chunk, event_types.len());
            spec.event_type = event_types[t].clone();
        }
        // A chunk holds only a few bad records: rotate the kinds from chunk to chunk
        // so that every kind of bad input occurs.
        let kinds = spec.poison_kinds.len();
        spec.poison_kinds.rotate_left((sent / chunk) % kinds);
        let mut attempt = 0;
        let p = loop {
            match loadgen::produce_with(&producer, &topic, &spec, sent).await {
                Ok(p) => break p,
                // An idempotent producer can stay stuck after the broker was
                // killed (the kafka-restart drill in CI: nothing acknowledged
                // for 3.5 min after the broker was back, while Courier's
                // consumers were): a new producer sends the chunk again, as a
                // real producer's retry would. Events of the chunk that had
                // landed are then in the topic twice (counted as duplicates).
                Err(e) if attempt < LOAD_ATTEMPTS => {
                    attempt += 1;
                    eprintln!(
                        "[drill] producing the load: {e}; sending the chunk again with a new \
                         producer ({attempt} of {LOAD_ATTEMPTS})"
                    );
                    producer = loadgen::producer_with_timeout(&brokers, LOAD_MESSAGE_TIMEOUT)?;
                }
                Err(e) => return Err(e).context("producing the load"),
            }
        };
        out.ids.extend(p.ids);
        out.offsets.extend(p.offsets);
        out.poison.extend(p.poison);
        ctl.acked.store(out.ids.len(), Ordering::SeqCst);
        sent += n;
    }
    ctl.held.store(true, Ordering::SeqCst);
    Ok(out)
}

/// Deletes and creates `topic` again with `partitions` (an operator purging a
/// topic). The creation is retried while the broker still finishes the deletion.
pub async fn recreate_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let t0 = Instant::now();
    for r in admin.delete_topics(&[topic], &opts).await? {
        r.map_err(|(t, e)| anyhow::anyhow!("deleting topic {t}: {e}"))?;
    }
    // Created again only once the broker has finished the deletion (before, the
    // creation is refused as TopicAlreadyExists).
    loop {
        let new = rdkafka::admin::NewTopic::new(
            topic,
            partitions,
            rdkafka::admin::TopicReplication::Fixed(1),
        );
        let res = admin.create_topics(&[new], &opts).await?;
        match res.into_iter().next() {
            Some(Ok(_)) => break,
            Some(Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)))
                if t0.elapsed() < timeout =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(Err((t, e))) => bail!("creating {t} again: {e}"),
            None => bail!("creating {topic} again: no result"),
        }
    }
    // Waits for the new partitions' leaders.
    create_topics(brokers, &[(topic, partitions)])
        .await
        .with_context(|| format!("waiting for the new {topic}"))?;
    Ok(t0.elapsed())
}

/// `kafka-delete-records`: deletes every record of `topic` below each
/// `(partition, offset)`; returns each partition's new log start.
pub async fn delete_records(
    brokers: &str,
    topic: &str,
    below: &[(i32, i64)],
) -> anyhow::Result<Vec<(i32, i64)>> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::{Offset, TopicPartitionList};
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for (p, o) in below {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))?;
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let got = admin.delete_records(&tpl, &opts).await?;
    got.elements()
        .iter()
        .map(|e| {
            e.error().map_err(|err| {
                anyhow::anyhow!("delete-records {topic}/{}: {err}", e.partition())
            })?;
            match e.offset() {
                Offset::Offset(o) => Ok((e.partition(), o)),
                other => bail!(
                    "delete-records {topic}/{}: log start {other:?}",
                    e.partition()
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two types: half the chunks each, one of each in every aligned pair, and
    /// at the CI rate (chunks of 40, 2,000 keys: 50 chunks a round) every key
    /// gets both types within a few rounds.
    #[test]
    fn chunk_types_share_the_rate_and_the_keys() {
        let pairs_balanced = (0..1000)
            .step_by(2)
            .all(|c| type_of_chunk(c, 2) + type_of_chunk(c + 1, 2) == 1);
        assert!(pairs_balanced);
        let (chunk, rounds) = (40, 6);
        let per_round = LOAD_KEYS / chunk;
        for first in 0..per_round {
            let seen: std::collections::BTreeSet<usize> = (0..rounds)
                .map(|r| type_of_chunk(first + r * per_round, 2))
                .collect();
            assert_eq!(seen.len(), 2, "the keys of chunk {first} of a round");
        }
        assert_eq!(type_of_chunk(7, 1), 0);
        let three: Vec<usize> = (0..9).map(|c| type_of_chunk(c, 3)).collect();
        assert_eq!(three, [0, 1, 2, 1, 2, 0, 2, 0, 1]);
    }
}
