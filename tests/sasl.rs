//! Courier against the broker's SASL/SCRAM-SHA-256 listener: the password comes
//! from the environment, authentication works (and a wrong password is refused at
//! start), the password never appears in the logs. Ends with the audit, then runs
//! `courier dlq inspect` and `courier dlq replay` over SASL (and with a wrong and
//! a missing password).

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

fn var(k: &str) -> String {
    std::env::var(k)
        .unwrap_or_else(|_| panic!("{k} is not set: run the tests through scripts/test.sh"))
}

fn sasl_toml(n: &Names, api: &str) -> String {
    base_toml(n, api)
        + &format!(
            "\n[kafka.properties]\n\"security.protocol\" = \"sasl_plaintext\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-256\"\n\"sasl.username\" = \"{}\"\n",
            var("COURIER_TEST_SASL_USER")
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_and_produces_over_sasl_scram() {
    let s = services();
    let sasl_brokers = var("COURIER_TEST_SASL_BROKERS");
    let password = var("COURIER_TEST_SASL_PASSWORD");
    let n = Names::new("sasl", 2);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let spec = Spec {
        count: 2_000,
        keys: 2_000,
        id_prefix: "sasl".into(),
        poison_every: Some(100),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = sasl_toml(&n, &api.url());

    // A wrong password is refused at start, with a clear error.
    let mut bad = Courier::start_with_env(
        &format!("{}-badpw", n.topic),
        &s,
        &toml,
        &[
            ("COURIER__KAFKA__BROKERS", sasl_brokers.as_str()),
            ("COURIER__KAFKA__SASL_PASSWORD_ENV", "TEST_SASL_PW"),
            ("TEST_SASL_PW", "not-the-password"),
        ],
    );
    let code = bad.wait_exit(Duration::from_secs(60)).await;
    assert_ne!(code, Some(0), "a wrong SASL password must not start");
    assert!(
        bad.log_text().to_lowercase().contains("auth"),
        "the log says authentication failed"
    );

    // The right one works: everything consumed (and parked) over SASL.
    let mut c = Courier::start_with_env(
        &n.topic,
        &s,
        &toml,
        &[
            ("COURIER__KAFKA__BROKERS", sasl_brokers.as_str()),
            ("COURIER__KAFKA__SASL_PASSWORD_ENV", "TEST_SASL_PW"),
            ("TEST_SASL_PW", password.as_str()),
            ("RUST_LOG", "debug,librdkafka=debug,hyper=info,h2=info"),
        ],
    );
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        !log.contains(&password),
        "the SASL password appears in the log"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("sasl", &rep);
    assert_eq!(
        rep.parked, 20,
        "parking-lot writes went through the SASL producer"
    );

    // The operator commands connect with the same Kafka config: properties and
    // the password from the environment.
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();
    let cli = |args: &[&str], pw: Option<&str>| {
        let mut env = vec![
            ("COURIER__KAFKA__BROKERS", sasl_brokers.as_str()),
            ("COURIER__KAFKA__SASL_PASSWORD_ENV", "TEST_SASL_PW"),
        ];
        env.extend(pw.map(|pw| ("TEST_SASL_PW", pw)));
        let (code, out, err) = courier_cli_env(&s, &cfg, args, &env);
        assert!(
            !out.contains(&password) && !err.contains(&password),
            "the SASL password appears in the output of {args:?}"
        );
        (code, out, err)
    };
    let (code, out, err) = cli(&["dlq", "inspect", "--parking", "--json"], Some(&password));
    assert_eq!(code, 0, "dlq inspect over SASL: {out}{err}");
    let summary: serde_json::Value =
        serde_json::from_str(&out).expect("inspect --json prints JSON");
    assert_eq!(summary["total"], 20, "{out}");

    let (code, out, err) = cli(
        &["dlq", "replay", "--yes", "--rate", "1000"],
        Some(&password),
    );
    assert_eq!(code, 0, "dlq replay over SASL: {out}{err}");
    assert!(out.contains("replayed 20 events"), "{out}{err}");
    let (code, out, err) = cli(&["dlq", "replay", "--dry-run"], Some(&password));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("0 to replay") && out.contains("20 already replayed"),
        "the replay log was written over SASL: {out}{err}"
    );

    // A wrong or missing password is a clear error.
    let (code, out, err) = cli(
        &["dlq", "inspect", "--parking", "--json"],
        Some("not-the-password"),
    );
    assert_ne!(code, 0, "a wrong SASL password must fail: {out}");
    assert!(
        err.contains("authentication failed"),
        "the error names the failed authentication: {err}"
    );
    let (code, out, err) = cli(&["dlq", "inspect", "--parking"], None);
    assert_ne!(code, 0, "a missing SASL password must fail: {out}");
    assert!(
        err.contains("kafka.sasl_password_env") && err.contains("TEST_SASL_PW"),
        "the error names the missing variable: {err}"
    );
}
