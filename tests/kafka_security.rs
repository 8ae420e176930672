//! Courier on the broker's TLS listeners (`scripts/services.sh` makes the
//! certificates): SSL with a client certificate whose key is encrypted (the
//! passphrase from the environment), SASL_SSL with SCRAM-SHA-256 and PLAIN,
//! and SASL_SSL with OAUTHBEARER through OIDC client credentials.
//!
//! OAUTHBEARER: an in-test token endpoint checks the client id and secret
//! (HTTP Basic, `grant_type=client_credentials`) and issues an unsecured JWT,
//! which the broker's default OAUTHBEARER validator accepts. So Courier's own
//! OIDC path runs — librdkafka fetches the token with curl, with the client
//! secret from the variable `kafka.oauth_client_secret_env` names — and a wrong
//! secret is refused by the endpoint. librdkafka's
//! `enable.sasl.oauthbearer.unsecure.jwt` would have skipped all of that (it
//! makes the token locally), and a signed-JWT validator on the broker would
//! need a JWKS endpoint in the broker's config for no gain in what is tested.
//!
//! Every run produces through the plaintext listener, lets Courier consume,
//! park (the parking-lot producer runs on the secured listener too) and deliver
//! over the secured one, and ends with the audit; secrets never reach the log.

mod common;

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use base64::Engine;
use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn var(k: &str) -> String {
    std::env::var(k)
        .unwrap_or_else(|_| panic!("{k} is not set: run the tests through scripts/test.sh"))
}

/// `[kafka.properties]` lines (TOML) for one listener.
fn properties(pairs: &[(&str, &str)]) -> String {
    let mut t = String::from("\n[kafka.properties]\n");
    for (k, v) in pairs {
        t += &format!("\"{k}\" = \"{v}\"\n");
    }
    t
}

/// Produces 400 events (every 50th bad input) through the plaintext listener,
/// runs Courier against `brokers` with `extra` config and `env`, waits until
/// the group committed everything, and audits. Returns the Courier log.
async fn deliver_over(name: &str, brokers: &str, extra: &str, env: &[(&str, &str)]) -> String {
    let s = services();
    let n = Names::new(name, 2);
    n.create(&s, true).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    let spec = Spec {
        count: 400,
        keys: 400,
        id_prefix: name.into(),
        poison_every: Some(50),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = base_toml(&n, &api.url()) + extra;
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("COURIER__KAFKA__BROKERS", brokers));
    env.push(("RUST_LOG", "debug,librdkafka=debug,hyper=info,h2=info"));
    let mut c = Courier::start_with_env(&n.topic, &s, &toml, &env);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss(name, &rep);
    assert_eq!(rep.delivered, 392, "{name}: every valid event delivered");
    assert_eq!(rep.parked, 8, "{name}: bad input parked over {brokers}");
    c.log_text()
}

/// Starts Courier expecting it to fail at start; returns its log.
async fn refused_at_start(name: &str, brokers: &str, extra: &str, env: &[(&str, &str)]) -> String {
    let s = services();
    let n = Names::new(name, 1);
    n.create(&s, true).await;
    let toml = base_toml(&n, "http://127.0.0.1:9/unused") + extra;
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("COURIER__KAFKA__BROKERS", brokers));
    let mut c = Courier::start_with_env(&n.topic, &s, &toml, &env);
    let code = c.wait_exit(Duration::from_secs(90)).await;
    let log = c.log_text();
    assert_eq!(code, Some(2), "{name} must be refused at start: {log}");
    log
}

fn tls_client_properties(key: &str) -> String {
    properties(&[
        ("security.protocol", "ssl"),
        ("ssl.ca.location", &var("COURIER_TEST_TLS_CA")),
        (
            "ssl.certificate.location",
            &var("COURIER_TEST_TLS_CLIENT_CERT"),
        ),
        ("ssl.key.location", key),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_with_a_client_certificate() {
    let brokers = var("COURIER_TEST_SSL_BROKERS");
    let key_pw = var("COURIER_TEST_TLS_CLIENT_KEY_PASSWORD");
    let toml_extra = tls_client_properties(&var("COURIER_TEST_TLS_CLIENT_KEY"));
    // `[kafka]` is already in the base config: the field goes in through the
    // environment, the properties through the file.
    let env_field = ("COURIER__KAFKA__SSL_KEY_PASSWORD_ENV", "TEST_KEY_PW");

    let log = deliver_over(
        "kssl",
        &brokers,
        &toml_extra,
        &[env_field, ("TEST_KEY_PW", key_pw.as_str())],
    )
    .await;
    assert!(
        !log.contains(&key_pw),
        "the key's passphrase appears in the log"
    );

    // The wrong passphrase: the key cannot be read, refused at start.
    let log = refused_at_start(
        "kssl-badpw",
        &brokers,
        &toml_extra,
        &[env_field, ("TEST_KEY_PW", "not-the-passphrase")],
    )
    .await;
    assert!(
        log.contains("ssl.key.location"),
        "the error names the key that could not be read: {log}"
    );

    // The broker requires a client certificate: without one, no connection.
    let no_cert = properties(&[
        ("security.protocol", "ssl"),
        ("ssl.ca.location", &var("COURIER_TEST_TLS_CA")),
    ]);
    refused_at_start("kssl-nocert", &brokers, &no_cert, &[]).await;

    // A CA that did not sign the broker's certificate: no connection either.
    let wrong_ca = properties(&[
        ("security.protocol", "ssl"),
        ("ssl.ca.location", &var("COURIER_TEST_TLS_OTHER_CA")),
        (
            "ssl.certificate.location",
            &var("COURIER_TEST_TLS_CLIENT_CERT"),
        ),
        ("ssl.key.location", &var("COURIER_TEST_TLS_CLIENT_KEY")),
    ]);
    let log = refused_at_start(
        "kssl-wrongca",
        &brokers,
        &wrong_ca,
        &[env_field, ("TEST_KEY_PW", key_pw.as_str())],
    )
    .await;
    assert!(
        log.contains("certificate verify failed"),
        "the log says the broker's certificate was not trusted: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_with_scram_and_plain() {
    let brokers = var("COURIER_TEST_SASL_SSL_BROKERS");
    let user = var("COURIER_TEST_SASL_USER");
    let ca = var("COURIER_TEST_TLS_CA");
    for (name, mechanism, password) in [
        ("kscram", "SCRAM-SHA-256", var("COURIER_TEST_SASL_PASSWORD")),
        ("kplain", "PLAIN", var("COURIER_TEST_SASL_PLAIN_PASSWORD")),
    ] {
        let extra = properties(&[
            ("security.protocol", "sasl_ssl"),
            ("ssl.ca.location", &ca),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", &user),
        ]);
        let env_field = ("COURIER__KAFKA__SASL_PASSWORD_ENV", "TEST_SASL_PW");
        let log = deliver_over(
            name,
            &brokers,
            &extra,
            &[env_field, ("TEST_SASL_PW", password.as_str())],
        )
        .await;
        assert!(
            !log.contains(&password),
            "{mechanism}: the password appears in the log"
        );
    }
}

/// The token endpoint: client credentials checked, an unsecured JWT issued.
#[derive(Clone)]
struct TokenEndpoint {
    client_id: String,
    secret: String,
    issued: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

fn b64url(v: &serde_json::Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

impl TokenEndpoint {
    async fn token(&self, headers: HeaderMap, body: String) -> axum::response::Response {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", self.client_id, self.secret))
        );
        let authorized = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == expected);
        if !authorized || !body.contains("grant_type=client_credentials") {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return (StatusCode::UNAUTHORIZED, "{\"error\":\"invalid_client\"}").into_response();
        }
        self.issued.fetch_add(1, Ordering::SeqCst);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let jwt = format!(
            "{}.{}.",
            b64url(&serde_json::json!({"alg": "none"})),
            b64url(&serde_json::json!({"sub": self.client_id, "iat": now, "exp": now + 3600}))
        );
        axum::Json(serde_json::json!({
            "access_token": jwt,
            "token_type": "bearer",
            "expires_in": 3600,
        }))
        .into_response()
    }

    async fn start(client_id: &str, secret: &str) -> (TokenEndpoint, String) {
        let ep = TokenEndpoint {
            client_id: client_id.into(),
            secret: secret.into(),
            issued: Arc::default(),
            refused: Arc::default(),
        };
        let state = ep.clone();
        let app = axum::Router::new().route(
            "/oauth2/token",
            axum::routing::post(move |h: HeaderMap, b: String| {
                let state = state.clone();
                async move { state.token(h, b).await }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (ep, url)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_with_oauthbearer_oidc_client_credentials() {
    const SECRET: &str = "oidc-client-secret-7c1e-SECRET";
    let brokers = var("COURIER_TEST_SASL_SSL_BROKERS");
    let (endpoint, url) = TokenEndpoint::start("courier-client", SECRET).await;
    let extra = properties(&[
        ("security.protocol", "sasl_ssl"),
        ("ssl.ca.location", &var("COURIER_TEST_TLS_CA")),
        ("sasl.mechanisms", "OAUTHBEARER"),
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", "courier-client"),
        ("sasl.oauthbearer.token.endpoint.url", &url),
    ]);
    let env_field = (
        "COURIER__KAFKA__OAUTH_CLIENT_SECRET_ENV",
        "TEST_OIDC_SECRET",
    );

    let log = deliver_over(
        "koidc",
        &brokers,
        &extra,
        &[env_field, ("TEST_OIDC_SECRET", SECRET)],
    )
    .await;
    assert!(
        !log.contains(SECRET),
        "the client secret appears in the log"
    );
    let issued = endpoint.issued.load(Ordering::SeqCst);
    assert!(issued >= 1, "Courier fetched its token from the endpoint");
    assert_eq!(endpoint.refused.load(Ordering::SeqCst), 0);

    // A wrong client secret: the endpoint refuses it, no token, no start.
    let log = refused_at_start(
        "koidc-badsecret",
        &brokers,
        &extra,
        &[env_field, ("TEST_OIDC_SECRET", "not-the-secret")],
    )
    .await;
    assert!(
        endpoint.refused.load(Ordering::SeqCst) >= 1,
        "the endpoint saw the wrong secret"
    );
    assert!(
        !log.contains("not-the-secret"),
        "the client secret appears in the log"
    );
}

/// `check-config` names a missing secret variable; the OIDC settings are
/// checked as a whole.
#[test]
fn check_config_names_missing_kafka_secrets() {
    let s = services();
    let dir = log_dir();
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            "ssl_key_password_env = \"KT_MISSING_KEY_PW\"",
            "",
            &["kafka.ssl_key_password_env", "KT_MISSING_KEY_PW"],
        ),
        (
            "oauth_client_secret_env = \"KT_MISSING_OIDC\"",
            "\"sasl.oauthbearer.method\" = \"oidc\"\n\"sasl.oauthbearer.client.id\" = \"c\"\n\"sasl.oauthbearer.token.endpoint.url\" = \"https://idp.example/token\"\n",
            &["kafka.oauth_client_secret_env", "KT_MISSING_OIDC"],
        ),
        (
            "",
            "\"sasl.oauthbearer.method\" = \"oidc\"\n\"sasl.oauthbearer.client.id\" = \"c\"\n\"sasl.oauthbearer.token.endpoint.url\" = \"https://idp.example/token\"\n",
            &["kafka.oauth_client_secret_env", "required"],
        ),
    ];
    for (i, (field, props, expect)) in cases.iter().enumerate() {
        let cfg = dir.join(format!("kafka-secrets-{}-{i}.toml", std::process::id()));
        std::fs::write(
            &cfg,
            format!("[kafka]\n{field}\n[kafka.properties]\n{props}"),
        )
        .unwrap();
        let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
        assert_eq!(code, 2, "check-config must fail: {out}");
        for e in *expect {
            assert!(out.contains(e), "the error names {e}: {out}");
        }
    }
}
