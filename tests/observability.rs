//! The dashboards and alert rules in `dashboards/` against a real Prometheus scraping a
//! real Courier (real Kafka, Redis, PostgreSQL; the API stand-in):
//!
//! - `promtool check rules` accepts `dashboards/alerts.yml`, and `promtool test rules`
//!   passes the rule unit tests in `dashboards/alerts_test.yml`;
//! - under load, an API outage makes the outage alert (`CourierApiUnavailable`) and the
//!   DLQ alert (`CourierDlqGrowing`) fire in Prometheus;
//! - after the run, every panel query of every dashboard, with the template variables
//!   substituted as Grafana would, evaluates without error and returns data;
//! - the run loses nothing (the audit).
//!
//! The scenario makes Courier emit every series the dashboards show: poison input (parking
//! lot), an outage (breaker, marker, paused partitions, DLQ, drain), an event the API
//! always refuses (DLQ retries, then dropped with `max_retries`), `deadline`-policy events
//! checked against a PostgreSQL source of truth (reconciliation `match`, dropped `stale`),
//! enrichment from PostgreSQL (cache hits and misses) and one injected partition-actor
//! crash (actor restarts).
//!
//! To keep the test short, Prometheus loads a temporary copy of `alerts.yml` in which
//! every `for:` is shortened to a few seconds (scrape and rule evaluation every second);
//! the committed file keeps its realistic durations.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use courier_testkit::ChildGuard;
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `for:` of every alert in the temporary copy Prometheus loads.
const TEST_FOR: &str = "3s";

/// Grafana's values for the variables the dashboards use: "All" is `.*` (the variables'
/// `allValue`), `$__rate_interval` at least four scrape intervals (1 s here).
const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("${group}", ".*"),
    ("$group", ".*"),
    ("${instance}", ".*"),
    ("$instance", ".*"),
    ("${partition}", ".*"),
    ("$partition", ".*"),
    ("$__rate_interval", "1m"),
    ("$__interval", "5s"),
    ("$__range", "5m"),
];

fn env_path(k: &str) -> PathBuf {
    let v = std::env::var(k).unwrap_or_else(|_| {
        panic!("{k} is not set: run `scripts/services.sh up` (it installs Prometheus) and source its services.env")
    });
    let p = PathBuf::from(v);
    assert!(p.is_file(), "{k}={} does not exist", p.display());
    p
}

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

/// (dashboard file, panel title, expr) of every panel query of every dashboard.
fn dashboard_exprs() -> Vec<(String, String, String)> {
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(nested) = p.get("panels") {
                panels(nested, out);
            }
        }
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let dash: Value =
            serde_json::from_str(&std::fs::read_to_string(&f).expect("read")).expect("json");
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let mut all = Vec::new();
        panels(&dash["panels"], &mut all);
        for p in all {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push((
                    name.clone(),
                    p["title"].as_str().unwrap_or("?").to_string(),
                    t["expr"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    }
    out
}

fn substitute(expr: &str) -> String {
    let mut e = expr.to_string();
    for (var, value) in SUBSTITUTIONS {
        e = e.replace(var, value);
    }
    e
}

/// `alerts.yml` with every `for:` replaced by [`TEST_FOR`].
fn shortened_rules(yaml: &str) -> String {
    yaml.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("for:") {
                format!("{}for: {TEST_FOR}", &l[..l.len() - t.len()])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `alerts.yml` without the rules' `annotations:` blocks.
fn without_annotations(yaml: &str) -> String {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut skip_deeper_than: Option<usize> = None;
    for l in yaml.lines() {
        if let Some(base) = skip_deeper_than {
            if l.trim().is_empty() || indent(l) > base {
                continue;
            }
            skip_deeper_than = None;
        }
        if l.trim() == "annotations:" {
            skip_deeper_than = Some(indent(l));
            continue;
        }
        out.push(l);
    }
    out.join("\n") + "\n"
}

fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Prometheus server of the test's own, killed (and its data removed) on drop.
struct Prometheus {
    /// `None` only while being dropped.
    child: Option<ChildGuard>,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    http: reqwest::Client,
}

impl Prometheus {
    fn start(bin: &Path, name: &str, scrape_port: u16, rules: &str) -> Prometheus {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prometheus-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let rules_path = dir.join("alerts.yml");
        std::fs::write(&rules_path, rules).expect("write rules");
        let config = format!(
            "global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: courier
    static_configs:
      - targets: ['127.0.0.1:{scrape_port}']
",
            rules = rules_path.display()
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let log = log_dir().join(format!("{name}-prometheus.log"));
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        let child = ChildGuard::spawn("prometheus", cmd, &log).expect("spawn prometheus");
        Prometheus {
            child: Some(child),
            port,
            dir,
            log,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("http client"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn get_json(&self, path: &str) -> Result<Value, String> {
        let resp = self
            .http
            .get(self.url(path))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let text = resp.text().await.map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        if v["status"] != "success" {
            return Err(format!(
                "{}: {}",
                v["errorType"].as_str().unwrap_or("error"),
                v["error"].as_str().unwrap_or(&text)
            ));
        }
        Ok(v["data"].clone())
    }

    /// An instant query: the result's series (a scalar counts as one).
    async fn query(&self, q: &str) -> Result<Vec<Value>, String> {
        let data = self
            .get_json(&format!("/api/v1/query?query={}", urlencode(q)))
            .await?;
        match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => {
                Ok(data["result"].as_array().cloned().unwrap_or_default())
            }
            _ => Ok(vec![data["result"].clone()]),
        }
    }

    /// Sum of an instant query's values (0 when empty or failing).
    async fn value(&self, q: &str) -> f64 {
        self.query(q)
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
            .sum()
    }

    /// Names of the alerts firing now.
    async fn firing(&self) -> BTreeSet<String> {
        self.query("ALERTS{alertstate=\"firing\"}")
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["metric"]["alertname"].as_str().map(String::from))
            .collect()
    }

    async fn wait_ready(&mut self, timeout: Duration) {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(r) = self.http.get(self.url("/-/ready")).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            if let Some(code) = self.child.as_mut().and_then(ChildGuard::exited) {
                panic!(
                    "prometheus exited (code {code:?}):\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < until,
                "prometheus not ready after {timeout:?}; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        drop(self.child.take()); // killed and reaped before its directory goes
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls Prometheus until `cond` holds for the value of `q`.
async fn wait_prom(p: &Prometheus, timeout: Duration, q: &str, cond: impl Fn(f64) -> bool) {
    let until = Instant::now() + timeout;
    loop {
        let v = p.value(q).await;
        if cond(v) {
            return;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting on `{q}` (last value {v})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn promtool(args: &[&str]) {
    let bin = env_path("COURIER_TEST_PROMTOOL");
    let out = Command::new(&bin)
        .args(args)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("[obs] promtool {}:\n{}", args.join(" "), text.trim_end());
    assert!(
        out.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
}

fn cloud_event(id: &str, ty: &str, version: i64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "specversion": "1.0", "id": id, "source": "/orders", "type": ty,
        "entityversion": version, "data": {"id": id}
    }))
    .unwrap()
}

/// What one panel query returned.
struct Evaluated {
    file: String,
    panel: String,
    expr: String,
    outcome: Result<Vec<Value>, String>,
}

async fn evaluate_panels(p: &Prometheus) -> Vec<Evaluated> {
    let mut out = Vec::new();
    for (file, panel, expr) in dashboard_exprs() {
        let q = substitute(&expr);
        let outcome = if q.contains('$') {
            Err(format!("unsubstituted variable in `{q}`"))
        } else {
            p.query(&q).await
        };
        out.push(Evaluated {
            file,
            panel,
            expr,
            outcome,
        });
    }
    out
}

fn failures(results: &[Evaluated]) -> Vec<String> {
    results
        .iter()
        .filter_map(|r| match &r.outcome {
            Err(e) => Some(format!(
                "{} \"{}\": ERROR {e}\n    {}",
                r.file, r.panel, r.expr
            )),
            Ok(v) if v.is_empty() => {
                Some(format!("{} \"{}\": EMPTY\n    {}", r.file, r.panel, r.expr))
            }
            Ok(_) => None,
        })
        .collect()
}

fn summary(v: &[Value]) -> String {
    let mut parts: Vec<String> = v
        .iter()
        .take(6)
        .map(|s| {
            let labels: Vec<String> = s["metric"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.as_str() != "__name__")
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("?")))
                .collect();
            let value = s["value"][1].as_str().unwrap_or("?");
            if labels.is_empty() {
                value.to_string()
            } else {
                format!("{{{}}} {value}", labels.join(","))
            }
        })
        .collect();
    if v.len() > 6 {
        parts.push(format!("… ({} series)", v.len()));
    }
    parts.join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_and_alerts_against_real_prometheus() {
    let t0 = Instant::now();
    let prometheus_bin = env_path("COURIER_TEST_PROMETHEUS");
    let alerts_path = dashboards_dir().join("alerts.yml");
    let alerts_yaml = std::fs::read_to_string(&alerts_path).expect("dashboards/alerts.yml");
    // Alerts and recording rules (the freshness objective).
    let alert_count =
        alerts_yaml.matches("- alert:").count() + alerts_yaml.matches("- record:").count();

    // (a) The rules as committed are valid, and their unit tests pass (run against a
    // copy without annotations: promtool compares those verbatim, the tests are about
    // when each alert fires).
    promtool(&["check", "rules", alerts_path.to_str().unwrap()]);
    let unit = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("alert-unit-tests"));
    std::fs::create_dir_all(&unit).expect("tmp dir");
    std::fs::write(unit.join("alerts.yml"), without_annotations(&alerts_yaml)).unwrap();
    std::fs::copy(
        dashboards_dir().join("alerts_test.yml"),
        unit.join("alerts_test.yml"),
    )
    .expect("dashboards/alerts_test.yml");
    promtool(&[
        "test",
        "rules",
        unit.join("alerts_test.yml").to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(&unit);

    let s = services();
    let n = Names::new("obs", 4);
    n.create(&s, true).await;

    // PostgreSQL: enrichment documents for some keys, and the source of truth of the
    // `deadline` policy.
    let suffix = n.topic.replace('-', "_");
    let (profiles, versions) = (format!("profiles_{suffix}"), format!("versions_{suffix}"));
    let (db, conn) = tokio_postgres::connect(&s.pg_url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    db.batch_execute(&format!(
        "CREATE TABLE {profiles} (key text PRIMARY KEY, doc jsonb NOT NULL);
         CREATE TABLE {versions} (key text PRIMARY KEY, version bigint NOT NULL);
         INSERT INTO {versions} VALUES ('k-match', 1), ('k-stale', 2);"
    ))
    .await
    .unwrap();
    for k in 0..100 {
        let doc = serde_json::json!({"tier": format!("gold-{k}")});
        db.execute(
            &format!("INSERT INTO {profiles} (key, doc) VALUES ($1, $2)"),
            &[&format!("key-{k}"), &doc],
        )
        .await
        .unwrap();
    }

    // The API stand-in: 10 ms per call; one event always refused (DLQ retries, then
    // dropped), two deadline-policy events refused on the main path only (so they reach
    // the DLQ and the drain consults the source of truth).
    let doomed = loadgen::event_id("obs", 777);
    let crash_on = loadgen::event_id("obs", 5_000);
    let mut fail_ids = HashMap::new();
    fail_ids.insert(
        doomed.clone(),
        FailRule {
            status: 503,
            times: None,
            retry_after_s: None,
        },
    );
    for id in ["obs-dl-match", "obs-dl-stale"] {
        fail_ids.insert(
            id.to_string(),
            FailRule {
                status: 503,
                times: Some(3),
                retry_after_s: None,
            },
        );
    }
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 10,
            fail_ids,
            ..Behaviour::default()
        },
    )
    .await
    .expect("sink");

    let pg = s.pg_url.replace("courier:courier@", "courier@");
    let toml = toml_with(&n, &api.url(), FAST).replace("concurrency = 256", "concurrency = 32")
        + &format!(
            r#"
[enrichment]
enabled = true
url = "{pg}"
query = "SELECT doc FROM {profiles} WHERE key = $1"
query_timeout = "500ms"

[retry]
default = {{ kind = "counter", max_retries = 2 }}
source_query = "SELECT version FROM {versions} WHERE key = $1"

[retry.types."order.paid"]
kind = "deadline"
deadline = "10m"

[testing]
crash_on_event_id = "{crash_on}"
"#
        );
    let mut c = Courier::start(&n.topic, &s, &toml);

    // Prometheus scrapes Courier and evaluates the rules (with short `for:`).
    let mut prom = Prometheus::start(
        &prometheus_bin,
        &n.topic,
        c.metrics_port,
        &shortened_rules(&alerts_yaml),
    );
    prom.wait_ready(Duration::from_secs(30)).await;
    wait_prom(
        &prom,
        Duration::from_secs(60),
        "sum(courier_assigned_partitions{job=\"courier\"})",
        |v| v == n.partitions as f64,
    )
    .await;
    println!(
        "[obs] Courier assigned, Prometheus scraping it ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );

    // Load: 20,000 records, 1 in 500 bad input, plus the two deadline-policy events.
    let producer = loadgen::producer(&s.brokers).unwrap();
    let spec = Spec {
        count: 20_000,
        keys: 2_000,
        id_prefix: "obs".into(),
        poison_every: Some(500),
        ..Spec::default()
    };
    let mut produced: Produced = loadgen::produce_with(&producer, &n.topic, &spec, 0)
        .await
        .unwrap();
    for (id, key, version) in [
        ("obs-dl-match", "k-match", 1i64),
        ("obs-dl-stale", "k-stale", 1),
    ] {
        let payload = cloud_event(id, "order.paid", version);
        let d = producer
            .send(
                FutureRecord::to(&n.topic).key(key).payload(&payload),
                Timeout::Never,
            )
            .await
            .expect("produce");
        produced.ids.push(id.to_string());
        produced.offsets.push((d.partition, d.offset));
    }
    wait_until(Duration::from_secs(60), "delivery under way", || {
        api.delivered_count() > 3_000
    })
    .await;

    // (b) The outage, held until Prometheus fires the outage alert and a DLQ alert.
    let outage = Instant::now();
    api.update_behaviour(|b| b.down_status = Some(503));
    let mut seen: BTreeMap<String, Duration> = BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        for a in prom.firing().await {
            seen.entry(a).or_insert_with(|| outage.elapsed());
        }
        if seen.contains_key("CourierApiUnavailable") && seen.contains_key("CourierDlqGrowing") {
            break;
        }
        assert!(
            Instant::now() < until,
            "the outage alerts did not fire within 120 s (firing so far: {seen:?}); Prometheus log: {}, Courier log: {}",
            prom.log.display(),
            c.log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let outage_len = outage.elapsed();
    api.update_behaviour(|b| b.down_status = None);
    println!(
        "[obs] API down for {:.1} s; alerts firing during the outage (seconds after its start): {}",
        outage_len.as_secs_f64(),
        seen.iter()
            .map(|(a, t)| format!("{a} {:.1}", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // How the outage looked to Prometheus (1 s samples): does the gauge hold?
    let samples = prom
        .query(&format!(
            "courier_api_unavailable[{}s]",
            outage_len.as_secs() + 5
        ))
        .await
        .unwrap_or_default();
    let series: String = samples
        .first()
        .and_then(|s| s["values"].as_array())
        .map(|v| {
            v.iter()
                .map(|p| p[1].as_str().unwrap_or("?").to_string())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default();
    println!("[obs] courier_api_unavailable, 1 s samples around the outage: {series}");

    // Recovery: the outcome of every special event, then everything committed and the
    // DLQ drained.
    wait_until(
        Duration::from_secs(120),
        "the always-refused event and the stale one are parked, the matching one delivered",
        || {
            let parked = envelopes(&s, &n.parking);
            let reason = |id: &str| {
                parked
                    .iter()
                    .find(|e| e.event_id.as_deref() == Some(id))
                    .map(|e| e.last_error.reason.clone())
            };
            reason(&doomed).as_deref() == Some("max_retries")
                && reason("obs-dl-stale").as_deref() == Some("stale")
                && api.audit().delivered.contains_key("obs-dl-match")
        },
    )
    .await;
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    wait_until(Duration::from_secs(120), "the DLQ is drained", || {
        let ends = courier::kafka::admin::end_offsets(&s.brokers, &n.dlq, n.partitions).unwrap();
        let committed =
            courier::kafka::admin::committed_offsets(&s.brokers, &n.group, &n.dlq, n.partitions)
                .unwrap();
        committed.iter().zip(&ends).all(|(c, e)| (*c).max(0) == *e)
    })
    .await;
    // Prometheus has scraped the final state: the stored watermarks are the end offsets,
    // and its counters match Courier's own.
    let end_sum: i64 = n.ends(&s).iter().sum();
    wait_prom(
        &prom,
        Duration::from_secs(30),
        "sum(courier_commit_watermark{job=\"courier\"})",
        |v| v == end_sum as f64,
    )
    .await;
    let dropped = c.metric("courier_dlq_dropped_total").await;
    let parked = c.metric("courier_parked_total").await;
    let restarts = c.metric("courier_actor_restarts_total").await;
    assert!(dropped >= 2.0, "max_retries and stale drops ({dropped})");
    assert_eq!(restarts, 1.0, "one injected crash");
    wait_prom(
        &prom,
        Duration::from_secs(30),
        "sum(courier_parked_total)",
        |v| v == parked,
    )
    .await;

    // (c) Every panel query, as Grafana would send it, returns data. Polled briefly:
    // a series first scraped a moment ago may still lack the samples rate() needs.
    let until = Instant::now() + Duration::from_secs(20);
    let results = loop {
        let r = evaluate_panels(&prom).await;
        if failures(&r).is_empty() || Instant::now() > until {
            break r;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    println!("[obs] {} panel queries:", results.len());
    for r in &results {
        let shown = match &r.outcome {
            Ok(v) if v.is_empty() => "EMPTY".to_string(),
            Ok(v) => summary(v),
            Err(e) => format!("ERROR {e}"),
        };
        println!("  {:<36} {}", r.panel, shown);
    }
    let bad = failures(&results);
    assert!(
        bad.is_empty(),
        "{} panel queries failed or returned nothing:\n{}",
        bad.len(),
        bad.join("\n")
    );

    // The "time range" stats count counters born inside the range (Courier creates a
    // labelled counter at its first increment, so plain increase() misses that step).
    let stat = |title: &str| {
        results
            .iter()
            .find(|r| r.panel == title)
            .and_then(|r| r.outcome.as_ref().ok())
            .map(|v| {
                v.iter()
                    .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
                    .sum::<f64>()
            })
            .unwrap_or(f64::NAN)
    };
    let naive = prom
        .value("sum(increase(courier_dlq_dropped_total[5m]))")
        .await;
    println!(
        "[obs] DLQ dropped: Courier {dropped}, dashboard stat {}, plain increase() would show {naive:.2}",
        stat("DLQ dropped (time range)")
    );
    assert_eq!(stat("DLQ dropped (time range)"), dropped);
    assert_eq!(stat("Parked (time range)"), parked);
    assert_eq!(stat("Actor restarts (time range)"), restarts);

    // Every rule loaded and evaluates cleanly; which alerts fired over the whole run.
    let rules = prom.get_json("/api/v1/rules").await.expect("rules");
    let mut loaded = 0;
    let mut unhealthy = Vec::new();
    for g in rules["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            loaded += 1;
            if r["health"] != "ok" {
                unhealthy.push(format!("{}: {} {}", r["name"], r["health"], r["lastError"]));
            }
        }
    }
    assert_eq!(loaded, alert_count, "every rule of alerts.yml is loaded");
    assert!(unhealthy.is_empty(), "rules failing: {unhealthy:?}");
    let fired: BTreeSet<String> = prom
        .query("max_over_time(ALERTS{alertstate=\"firing\"}[1h])")
        .await
        .expect("ALERTS")
        .iter()
        .filter_map(|s| s["metric"]["alertname"].as_str().map(String::from))
        .collect();
    println!("[obs] alerts that fired during the run: {fired:?}");
    for a in [
        "CourierApiUnavailable",
        "CourierBreakerOpenTooLong",
        "CourierDlqGrowing",
        "CourierDlqDropped",
        "CourierActorRestarts",
    ] {
        assert!(fired.contains(a), "{a} did not fire (fired: {fired:?})");
    }
    for a in [
        "CourierRedisUnreachable",
        "CourierInstanceDown",
        "CourierDlqWriteFailing",
    ] {
        assert!(
            !fired.contains(a),
            "{a} fired although nothing in this run warrants it"
        );
    }

    c.terminate(Duration::from_secs(30)).await;
    drop(prom);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("observability", &rep);
    assert_eq!(rep.parked_by_reason.get("max_retries"), Some(&1));
    assert_eq!(rep.parked_by_reason.get("stale"), Some(&1));
    println!(
        "[obs] duplicates: {}; test time {:.1} s",
        rep.duplicates,
        t0.elapsed().as_secs_f64()
    );
}
