//! Operator tools against the real broker: `courier dlq inspect` and
//! `courier dlq replay` (filters, dry run, idempotence), ending with the audit;
//! `courier healthcheck` (the image's HEALTHCHECK) against the running instance
//! and against nothing; `courier check-config --online` against the broker.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_replay_parked_events() {
    let s = services();
    let n = Names::new("ops", 3);
    n.create(&s, true).await;
    let spec = Spec {
        count: 1_000,
        keys: 1_000,
        id_prefix: "ops".into(),
        poison_every: Some(100),
        ..Spec::default()
    };
    // 20 events the API refuses with 400 (a bug on its side, say): parked at once.
    let refused: Vec<String> = (0..20)
        .map(|i| loadgen::event_id("ops", i * 37 + 4))
        .collect();
    let fail_ids: HashMap<String, FailRule> = refused
        .iter()
        .map(|id| {
            (
                id.clone(),
                FailRule {
                    status: 400,
                    times: None,
                    retry_after_s: None,
                },
            )
        })
        .collect();
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_ids,
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url());
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();

    // The image's HEALTHCHECK: `courier healthcheck` asks the instance's own
    // listener (metrics.listen, here given through the environment as to the
    // instance itself).
    let listen = format!("127.0.0.1:{}", c.metrics_port);
    let env = [("COURIER__METRICS__LISTEN", listen.as_str())];
    let (code, out, err) = courier_cli_env(&s, &cfg, &["healthcheck"], &env);
    assert_eq!(code, 0, "healthcheck of a running instance: {out}{err}");
    assert!(out.contains("/healthz answered 200"), "{out}");
    let (code, out, err) = courier_cli_env(&s, &cfg, &["healthcheck", "--ready"], &env);
    assert_eq!(
        code, 0,
        "healthcheck --ready of an assigned instance: {out}{err}"
    );

    // Inspect the parking lot.
    let (code, out) = courier_cli(&s, &cfg, &["dlq", "inspect", "--parking", "--json"]);
    assert_eq!(code, 0, "{out}");
    let summary: serde_json::Value =
        serde_json::from_str(&out).expect("inspect --json prints JSON");
    assert_eq!(summary["total"], 30);
    assert_eq!(summary["by_reason"]["http_400"], 20);
    let poison: u64 = [
        "invalid_utf8",
        "malformed_json",
        "missing_attribute",
        "wrong_type",
    ]
    .iter()
    .map(|r| summary["by_reason"][r].as_u64().unwrap_or(0))
    .sum();
    assert_eq!(poison, 10);

    // The API is fixed. A dry run selects exactly the refused events and writes nothing.
    api.set_behaviour(Behaviour::default());
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &["dlq", "replay", "--reason", "http_400", "--dry-run"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("20 to replay"), "{out}");
    assert!(refused
        .iter()
        .all(|id| !api.audit().delivered.contains_key(id)));

    // Replay for real: only the selected events reach the API, once each.
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &[
            "dlq", "replay", "--reason", "http_400", "--yes", "--rate", "500",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("replayed 20 events"), "{out}");
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    wait_until(Duration::from_secs(30), "replayed events delivered", || {
        let a = api.audit();
        refused.iter().all(|id| a.delivered.contains_key(id))
    })
    .await;

    // A rate that is not a rate is refused before anything is read or written.
    for bad in ["inf", "0", "-5", "NaN"] {
        let rate = format!("--rate={bad}");
        let (code, out) = courier_cli(
            &s,
            &cfg,
            &["dlq", "replay", "--reason", "http_400", "--yes", &rate],
        );
        assert_eq!(code, 2, "--rate {bad}: {out}");
        assert!(out.contains("is not a rate"), "--rate {bad}: {out}");
    }

    // Running it again replays nothing.
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &["dlq", "replay", "--reason", "http_400", "--yes"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("0 to replay") && out.contains("20 already replayed"),
        "{out}"
    );
    c.terminate(Duration::from_secs(30)).await;
    // Nothing listens there any more: unhealthy (1), within the deadline.
    let (code, out, err) = courier_cli_env(&s, &cfg, &["healthcheck"], &env);
    assert_eq!(code, 1, "healthcheck of a stopped instance: {out}{err}");
    assert!(err.contains("cannot connect"), "{err}");

    let a = api.audit();
    for id in &refused {
        assert_eq!(a.delivered.get(id), Some(&1), "{id} delivered exactly once");
    }
    assert_eq!(
        a.delivered.len(),
        990,
        "all valid events delivered; no poison replayed"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("ops", &rep);
}

/// `courier check-config --online` asks the broker what start-up would refuse
/// (issue 59 item 6): a missing DLQ topic, a DLQ with fewer partitions than the
/// main topic and an unreadable Kafka CA file are each named, exit 2; with
/// everything in place it says ok, exit 0. Before: `--online` did not exist, and
/// `check-config` said "config ok" of a missing `ssl.ca.location`. Also: a
/// `kafka.group_id` left at its default is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_online_names_what_start_would_refuse() {
    let s = services();
    let n = Names::new("online", 3);
    let short_dlq = format!("{}.dlq-short", n.topic);
    courier_standins::admin::create_topics(
        &s.brokers,
        &[
            (n.topic.as_str(), 3),
            (n.parking.as_str(), 1),
            (short_dlq.as_str(), 2),
        ],
    )
    .await
    .expect("create topics");
    let dir = log_dir();
    let online = |name: &str, toml: &str, env: &[(&str, &str)]| {
        let cfg = dir.join(format!("{}-{name}.toml", n.topic));
        std::fs::write(&cfg, toml).expect("write the config");
        let mut env = env.to_vec();
        env.push(("COURIER__REDIS__URL", s.redis_url.as_str()));
        let (code, out, err) = courier_cli_env(&s, &cfg, &["check-config", "--online"], &env);
        println!("[check-config --online] {name}: exit {code}\n{out}{err}");
        (code, out + &err)
    };
    let api = "http://127.0.0.1:9/events";

    // The DLQ does not exist (Names' `.dlq` was not created).
    let (code, out) = online("missing-dlq", &base_toml(&n, api), &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("DLQ topic `{}` does not exist", n.dlq)),
        "{out}"
    );

    // The DLQ has 2 partitions, the main topic 3.
    let mut short = n.clone();
    short.dlq = short_dlq.clone();
    let (code, out) = online("short-dlq", &base_toml(&short, api), &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "DLQ topic `{short_dlq}` has 2 partitions but `{}` has 3",
            n.topic
        )),
        "{out}"
    );

    // Everything in place.
    n.create(&s, true).await;
    let (code, out) = online("in-place", &base_toml(&n, api), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("online ok\n"), "{out}");
    assert!(
        out.contains("online ok kafka: `") && out.contains("online ok redis: answered PING"),
        "{out}"
    );
    assert!(
        !out.contains("kafka.group_id is left at its default"),
        "{out}"
    );

    // A CA file librdkafka could not read: named before anything is asked.
    let missing_ca = dir.join(format!("{}-no-such-ca.pem", n.topic));
    let toml = format!(
        "{}\n[kafka.properties]\n\"security.protocol\" = \"ssl\"\n\"ssl.ca.location\" = \"{}\"\n",
        base_toml(&n, api),
        missing_ca.display()
    );
    let (code, out) = online("unreadable-ca", &toml, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("kafka.properties.ssl.ca.location")
            && out.contains(&missing_ca.display().to_string()),
        "{out}"
    );

    // The default group: a warning, not a refusal.
    let (code, out) = online(
        "default-group",
        &base_toml(&n, api),
        &[("COURIER__KAFKA__GROUP_ID", "courier")],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("warning: kafka.group_id is left at its default, \"courier\""),
        "{out}"
    );
}
