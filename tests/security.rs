//! Secrets: the API token and the Redis password come from the environment, are
//! used (the API checks the token, Redis requires the password), and never appear
//! in the logs or on `/metrics` — even at debug level. Revoked credentials (401)
//! are systemic: the pipeline pauses instead of flooding the DLQ.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::ChildGuard;
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "tok-9f8e7d6c5b4a-SECRET";
const REDIS_PW: &str = "redis-pw-1a2b3c4d-SECRET";

/// A Redis of the test's own, with `requirepass` (killed when dropped).
fn redis_with_password(port: u16) -> ChildGuard {
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .args(["--requirepass", REDIS_PW]);
    let log = log_dir().join(format!("redis-{port}.log"));
    ChildGuard::spawn("redis-server", cmd, &log)
        .expect("redis-server (installed by scripts/services.sh)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_used_and_never_logged() {
    let s = services();
    let port = free_port();
    let _redis = redis_with_password(port);
    let n = Names::new("secrets", 2);
    n.create(&s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 5,
            required_token: Some(TOKEN.into()),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let spec = Spec {
        count: 3_000,
        keys: 3_000,
        id_prefix: "sec".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = toml_with(
        &n,
        &api.url(),
        "poll_interval = \"100ms\"\nbreaker_open = \"1s\"\nmin_pause = \"200ms\"",
    )
    .replace("concurrency = 256", "concurrency = 16")
        + &format!(
            "\n[redis]\nurl = \"redis://127.0.0.1:{port}\"\npassword_env = \"TEST_REDIS_PW\"\n"
        );
    let toml = toml.replace("[api]\n", "[api]\ntoken_env = \"TEST_API_TOKEN\"\n");
    let mut c = Courier::start_with_env(
        &n.topic,
        &s,
        &toml,
        &[
            ("TEST_API_TOKEN", TOKEN),
            ("TEST_REDIS_PW", REDIS_PW),
            (
                "RUST_LOG",
                "debug,librdkafka=info,rdkafka=info,hyper=info,h2=info",
            ),
        ],
    );
    wait_until(
        Duration::from_secs(60),
        "deliveries with the token, health from Redis with the password",
        || {
            api.delivered_count() >= 500
                && block(c.metric("courier_health_source{source=\"redis\"")) == 1.0
        },
    )
    .await;

    // Credentials revoked: 401 is systemic — pause, do not flood the DLQ.
    api.update_behaviour(|b| b.required_token = Some("rotated".into()));
    wait_until(
        Duration::from_secs(10),
        "the pipeline pauses on 401",
        || block(c.metric("courier_api_unavailable")) == 1.0,
    )
    .await;
    let delivered_before = api.delivered_count();
    let dlq_at_pause = topic_size(&s, &n.dlq);
    // Stay revoked for a few open intervals of the breaker.
    let t0 = std::time::Instant::now();
    wait_until(
        Duration::from_secs(20),
        "several probes were refused",
        || {
            t0.elapsed() > Duration::from_secs(3)
                && block(c.metric("courier_breaker_transitions_total{to=\"open\"")) >= 3.0
        },
    )
    .await;
    let dlq = topic_size(&s, &n.dlq);
    println!("[secrets] 401s: DLQ {dlq_at_pause} records at the pause, {dlq} after the probes; backlog {}", 3_000 - delivered_before);
    assert!(
        dlq <= 16 + 10,
        "no flood into the DLQ on 401 ({dlq} records)"
    );
    api.update_behaviour(|b| b.required_token = Some(TOKEN.into()));
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;

    let metrics_text = reqwest::get(format!("http://127.0.0.1:{}/metrics", c.metrics_port))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        log.len() > 10_000,
        "debug logging was on ({} bytes)",
        log.len()
    );
    for secret in [TOKEN, REDIS_PW] {
        assert!(!log.contains(secret), "a secret appears in the log");
        assert!(
            !metrics_text.contains(secret),
            "a secret appears on /metrics"
        );
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("secrets", &rep);
}
