//! Authenticating like real APIs (issue 26), against real servers:
//!
//! - OAuth2 client credentials against ory/hydra (built from the Go module proxy
//!   by scripts/hydra.sh; `COURIER_TEST_HYDRA` names the binary, scripts/test.sh
//!   sets it), with tokens that expire every 3 s; the API stand-in accepts a
//!   token only while hydra's introspection endpoint says it is active. Every
//!   event delivered, none parked for auth, about one token per lifetime; the
//!   token endpoint down for 10 s → paused, then everything delivered; a wrong
//!   client secret → systemic `auth_token_refused`, nothing parked, and the
//!   rotated secret file then lets everything through.
//! - A bearer token file swapped as a Kubernetes Secret volume swaps it, while
//!   the stand-in accepts only the new token from that moment: at most the calls
//!   on the wire answered 401, none parked, all delivered.
//!
//! Each ends with the audit: lost 0, duplicates counted.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::hydra::{AuthMethod, Hydra, OAuthClient};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLIENT_SECRET: &str = "client-secret-7c1d-SECRET";

fn hydra_bin() -> PathBuf {
    PathBuf::from(std::env::var("COURIER_TEST_HYDRA").expect(
        "COURIER_TEST_HYDRA must name an ory/hydra binary: run \
         `export COURIER_TEST_HYDRA=$(bash scripts/hydra.sh)` (scripts/test.sh does)",
    ))
}

/// The OAuth2 client Courier is: `courier`, allowed the scope `events`.
fn client(secret: &str, lifetime: Duration) -> OAuthClient {
    OAuthClient {
        scope: Some("events".into()),
        ..OAuthClient::new("courier", secret, lifetime, AuthMethod::Basic)
    }
}

fn secrets_dir(name: &str) -> PathBuf {
    let d = log_dir().join(unique(name));
    std::fs::create_dir_all(&d).expect("secrets dir");
    d
}

fn oauth2_toml(n: &Names, api: &str, hydra: &Hydra, secret_file: &Path) -> String {
    let toml = toml_with(
        n,
        api,
        "poll_interval = \"100ms\"\nbreaker_open = \"500ms\"\nmin_pause = \"200ms\"",
    )
    .replace("concurrency = 256", "concurrency = 16");
    toml.replace(
        "[pipeline]\n",
        &format!(
            "[api.oauth2]\ntoken_url = \"{}\"\nclient_id = \"courier\"\nclient_secret_file = \"{}\"\nscope = \"events\"\n\n[pipeline]\n",
            hydra.token_url(),
            secret_file.display()
        ),
    )
}

async fn stand_in(behaviour: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().expect("addr"), behaviour)
        .await
        .expect("stand-in")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_tokens_that_expire_every_few_seconds_deliver_everything() {
    let s = services();
    let dir = secrets_dir("oauth2");
    let lifetime = Duration::from_secs(3);
    let mut hydra = Hydra::start(&hydra_bin(), &dir).await.expect("hydra");
    hydra
        .create(&client(CLIENT_SECRET, lifetime))
        .await
        .expect("client");
    secret_volume(&dir, "client-secret", 1, CLIENT_SECRET);
    let api = stand_in(Behaviour {
        latency_ms: 20,
        introspect_url: Some(hydra.introspect_url()),
        ..Behaviour::default()
    })
    .await;
    let n = Names::new("oauth2", 2);
    n.create(&s, true).await;
    // 16 calls in flight of 20 ms: about 800 events/s, so 9,000 take ≈ 11 s,
    // several token lifetimes.
    let spec = Spec {
        count: 9_000,
        keys: 9_000,
        id_prefix: "oa".into(),
        ..Spec::default()
    };
    let mut produced = loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce");
    let toml = oauth2_toml(&n, &api.url(), &hydra, &dir.join("client-secret"));
    let mut c = Courier::start("oauth2", &s, &toml);
    let t0 = Instant::now();
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let run = t0.elapsed();
    let tokens = c
        .metric("courier_auth_token_requests_total{outcome=\"ok\"")
        .await;
    let expected = run.as_secs_f64() / lifetime.as_secs_f64();
    println!(
        "[oauth2] {} events in {run:?}: {tokens} tokens fetched (run / lifetime = {expected:.1}); 401s answered: {}",
        spec.count,
        api.audit().failures_total
    );
    assert!(
        tokens >= 2.0 && tokens <= 2.0 * expected + 2.0,
        "one token per lifetime, not one per call: {tokens} tokens in {run:?}"
    );

    // The token endpoint down for 10 s: calls pause once the cached token
    // expires, then everything is delivered.
    let more = Spec {
        count: 3_000,
        keys: 3_000,
        id_prefix: "ob".into(),
        ..Spec::default()
    };
    hydra.stop().await.expect("hydra stops");
    let down = Instant::now();
    let p2 = loadgen::produce(&s.brokers, &n.topic, &more)
        .await
        .expect("produce");
    produced.ids.extend(p2.ids);
    produced.offsets.extend(p2.offsets);
    wait_until(
        Duration::from_secs(20),
        "the group pauses without a token",
        || block(c.metric("courier_api_unavailable")) == 1.0,
    )
    .await;
    // The outage lasts its 10 s (the scenario, not a wait for a condition).
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(down.elapsed())).await;
    assert!(
        block(c.metric("courier_auth_token_requests_total{outcome=\"auth_token_unavailable\""))
            >= 1.0,
        "the failed fetches are counted as auth_token_unavailable"
    );
    hydra.restart().await.expect("hydra back");
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let transitions = reqwest::get(format!("http://127.0.0.1:{}/metrics", c.metrics_port))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    assert!(
        transitions.contains("reason=\"auth_token_unavailable\""),
        "the breaker opened for auth_token_unavailable"
    );
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        !log.contains(CLIENT_SECRET),
        "the client secret is in the log"
    );
    assert!(!log.contains("ory_at_"), "a token is in the log");
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("oauth2", &rep);
    assert_eq!(rep.parked, 0, "nothing parked for auth: {rep}");
    assert_eq!(rep.in_dlq, 0, "nothing dead-lettered for auth: {rep}");
    println!("[oauth2] duplicates {}", rep.duplicates);
    api.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_secret_pauses_until_the_rotated_secret_works() {
    let s = services();
    let dir = secrets_dir("oauth2-refused");
    let mut hydra = Hydra::start(&hydra_bin(), &dir).await.expect("hydra");
    hydra
        .create(&client(CLIENT_SECRET, Duration::from_secs(60)))
        .await
        .expect("client");
    let wrong = "wrong-secret-0000-SECRET";
    secret_volume(&dir, "client-secret", 1, wrong);
    let api = stand_in(Behaviour {
        introspect_url: Some(hydra.introspect_url()),
        ..Behaviour::default()
    })
    .await;
    let n = Names::new("oauth2-refused", 2);
    n.create(&s, true).await;
    let spec = Spec {
        count: 2_000,
        keys: 2_000,
        id_prefix: "or".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce");
    let toml = oauth2_toml(&n, &api.url(), &hydra, &dir.join("client-secret"));
    let mut c = Courier::start("oauth2-refused", &s, &toml);
    wait_until(
        Duration::from_secs(30),
        "the refused credentials pause the group",
        || {
            block(c.metric("courier_auth_token_requests_total{outcome=\"auth_token_refused\""))
                >= 2.0
                && block(c.metric("courier_api_unavailable")) == 1.0
        },
    )
    .await;
    assert_eq!(
        api.delivered_count(),
        0,
        "nothing can be delivered without a token"
    );
    assert_eq!(topic_size(&s, &n.parking), 0, "nothing parked");
    assert_eq!(topic_size(&s, &n.dlq), 0, "nothing dead-lettered");
    let status = reqwest::get(format!("http://127.0.0.1:{}/status.json", c.metrics_port))
        .await
        .expect("status")
        .text()
        .await
        .expect("status body");
    assert!(
        status.contains("\"last_error\":\"auth_token_refused\""),
        "/status shows the token's last error: {status}"
    );
    assert!(!status.contains(wrong) && !status.contains(CLIENT_SECRET));

    // The operator fixes the Secret: the next fetch uses the new file.
    secret_volume(&dir, "client-secret", 2, CLIENT_SECRET);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    let refused = log
        .lines()
        .filter(|l| l.contains("auth_token_refused") && l.contains("gave no token"))
        .count();
    assert_eq!(
        refused, 1,
        "the refusal is logged once (with the endpoint's error)"
    );
    assert!(
        log.contains("invalid_client"),
        "the endpoint's error field is logged"
    );
    assert!(
        !log.contains(wrong) && !log.contains(CLIENT_SECRET),
        "a secret is in the log"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("oauth2-refused", &rep);
    assert_eq!(
        rep.parked + rep.in_dlq,
        0,
        "nothing parked or dead-lettered: {rep}"
    );
    println!("[oauth2-refused] duplicates {}", rep.duplicates);
    hydra.stop().await.expect("hydra stops");
    api.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_swapped_like_a_secret_volume_is_used_without_a_restart() {
    let s = services();
    let dir = secrets_dir("token-file");
    let (old, new) = ("token-old-5e5e-SECRET", "token-new-a1a1-SECRET");
    secret_volume(&dir, "api-token", 1, old);
    let concurrency = 16;
    let api = stand_in(Behaviour {
        latency_ms: 20,
        required_token: Some(old.into()),
        ..Behaviour::default()
    })
    .await;
    let n = Names::new("token-file", 2);
    n.create(&s, true).await;
    let spec = Spec {
        count: 6_000,
        keys: 6_000,
        id_prefix: "tf".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce");
    let toml = toml_with(
        &n,
        &api.url(),
        "poll_interval = \"100ms\"\nbreaker_open = \"500ms\"\nmin_pause = \"200ms\"",
    )
    .replace("concurrency = 256", &format!("concurrency = {concurrency}"))
    .replace(
        "[api]\n",
        &format!(
            "[api]\ntoken_file = \"{}\"\n",
            dir.join("api-token").display()
        ),
    );
    let mut c = Courier::start("token-file", &s, &toml);
    wait_until(Duration::from_secs(60), "deliveries under way", || {
        api.delivered_count() >= 1_000
    })
    .await;
    // The rotation: the Secret's new value lands in the volume, and from this
    // moment the API accepts only the new token.
    secret_volume(&dir, "api-token", 2, new);
    api.update_behaviour(|b| b.required_token = Some(new.into()));
    let at_swap = api.delivered_count();
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let refused = api.audit().failures_total;
    let retried = c
        .metric("courier_auth_retries_total{outcome=\"delivered\"")
        .await;
    println!(
        "[token-file] swapped at {at_swap} delivered: {refused} answered 401, {retried} sent again with the new token"
    );
    assert!(
        refused <= concurrency as u64,
        "at most the calls on the wire are refused ({refused} 401s)"
    );
    assert!(
        c.metric("courier_secret_reloads_total{field=\"api.token_file\"")
            .await
            >= 1.0,
        "the swap was seen"
    );
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        !log.contains(old) && !log.contains(new),
        "a token is in the log"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("token-file", &rep);
    assert_eq!(
        rep.parked + rep.in_dlq,
        0,
        "nothing parked or dead-lettered: {rep}"
    );
    println!("[token-file] duplicates {}", rep.duplicates);
    api.shutdown();
}

/// `check-config` refuses what would fail at run time — a malformed signing
/// secret, a plain-http token URL to another host, two sources for one secret —
/// names the field, shows no secret, and says where each credential comes from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_validates_the_credentials_without_showing_them() {
    let s = services();
    let dir = secrets_dir("auth-check");
    let leaked = "sk_live_not_a_whsec_SECRET";
    secret_volume(&dir, "signing-secret", 1, leaked);
    secret_volume(&dir, "api-token", 1, "token-9c9c-SECRET");
    let n = Names::new("auth-check", 1);
    let base = base_toml(&n, "http://127.0.0.1:9/events");
    let cases = [
        (
            "a malformed signing secret",
            format!(
                "[api.signing]\nsecret_file = \"{}\"\n",
                dir.join("signing-secret").display()
            ),
            "api.signing.secret_file",
        ),
        (
            "a plain-http token URL to another host",
            "[api.oauth2]\ntoken_url = \"http://idp.example.com/token\"\nclient_id = \"c\"\nclient_secret_env = \"X\"\n".to_string(),
            "api.oauth2.token_url",
        ),
        (
            "the token from two sources",
            "[api.oauth2]\ntoken_url = \"https://idp.example.com/token\"\nclient_id = \"c\"\nclient_secret_env = \"X\"\n".to_string(),
            "api.token_file",
        ),
    ];
    for (i, (what, section, field)) in cases.iter().enumerate() {
        let mut toml = base.replace("[pipeline]\n", &format!("{section}\n[pipeline]\n"));
        if *field == "api.token_file" {
            toml = toml.replace(
                "[api]\n",
                &format!(
                    "[api]\ntoken_file = \"{}\"\n",
                    dir.join("api-token").display()
                ),
            );
        }
        let cfg = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&cfg, &toml).expect("config");
        let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
        println!("[check-config] {what}: exit {code}: {}", out.trim());
        assert_ne!(code, 0, "{what} is refused");
        assert!(out.contains(field), "{what}: names {field}: {out}");
        assert!(
            !out.contains(leaked) && !out.contains("token-9c9c"),
            "{what}: no secret shown"
        );
    }
    let good = base.replace(
        "[api]\n",
        &format!(
            "[api]\ntoken_file = \"{}\"\n",
            dir.join("api-token").display()
        ),
    );
    let cfg = dir.join("good.toml");
    std::fs::write(&cfg, good).expect("config");
    let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("API credentials: bearer token from api.token_file"),
        "{out}"
    );
    assert!(!out.contains("token-9c9c"), "no secret shown: {out}");
}
