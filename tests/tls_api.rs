//! HTTPS and mTLS to the API, against the API stand-in serving TLS with
//! certificates made here (`rcgen`): delivery with a private CA (HTTP/2 by ALPN),
//! client certificates required and given, and certificate failures that are
//! named (`tls_untrusted`, `tls_expired`, `tls_hostname`, `tls_client_cert`) in
//! the log, in `courier_delivery_errors_total{reason}`, and that pause the
//! pipeline (breaker open) without writing a single DLQ record. Every test that
//! moves events ends with the no-loss audit. `check-config` refuses missing and
//! non-PEM files and plain HTTP to a host other than loopback.

#[path = "common/certs.rs"]
mod certs;
mod common;

use certs::{Ca, Validity, LOOPBACK};
use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle, SinkTls};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn cert_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("tls-certs")
        .join(unique(name));
    std::fs::create_dir_all(&d).expect("certificate dir");
    d
}

fn sink_tls(server: &certs::Pem, client_ca: Option<&Ca>) -> SinkTls {
    SinkTls {
        cert_pem: server.cert.clone().into_bytes(),
        key_pem: server.key.clone().into_bytes(),
        client_ca_pem: client_ca.map(|c| c.pem.cert.clone().into_bytes()),
    }
}

async fn https_sink(tls: &SinkTls) -> SinkHandle {
    SinkHandle::start_tls(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            latency_ms: 2,
            ..Behaviour::default()
        },
        tls,
    )
    .await
    .expect("HTTPS stand-in")
}

async fn produce(
    s: &Services,
    n: &Names,
    count: usize,
    prefix: &str,
) -> courier_standins::audit::Produced {
    let spec = Spec {
        count,
        keys: count,
        id_prefix: prefix.into(),
        ..Spec::default()
    };
    loadgen::produce(&s.brokers, &n.topic, &spec)
        .await
        .expect("produce")
}

/// Quick pauses and probes (see `common::FAST`); DLQ records would wait an hour.
fn config(n: &Names, url: &str, api: &str, tls: &str) -> String {
    toml_with(
        n,
        url,
        &FAST
            .replace("dlq_backoff_base = \"300ms\"", "dlq_backoff_base = \"1h\"")
            .replace("dlq_backoff_cap = \"2s\"", "dlq_backoff_cap = \"1h\""),
    )
    .replace("[api]\n", &format!("[api]\n{api}"))
        + &if tls.is_empty() {
            String::new()
        } else {
            format!("\n[api.tls]\n{tls}")
        }
}

fn ca_line(ca: &Ca) -> String {
    format!("ca_file = \"{}\"\n", ca.pem.cert_file.display())
}

/// Courier's log without colour codes.
fn plain_log(c: &Courier) -> String {
    strip_ansi(&c.log_text())
}

/// Waits until Courier's log has the line naming `reason` (Courier's own, with
/// what to do), and returns it.
async fn reason_logged(c: &Courier, reason: &str) -> String {
    let needle =
        format!("API call failed: the pipeline pauses until it works again reason={reason} ");
    wait_until(
        Duration::from_secs(30),
        &format!("the log names {reason}"),
        || plain_log(c).contains(&needle),
    )
    .await;
    let line = plain_log(c)
        .lines()
        .find(|l| l.contains(&needle))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(line.contains("hint="), "the line says what to do: {line}");
    line
}

/// The pipeline paused on a systemic failure: the breaker opened (with that
/// reason first), the failure was counted with its reason, and nothing was
/// delivered or dead-lettered.
async fn paused_without_dlq(c: &Courier, s: &Services, n: &Names, reason: &str, api: &SinkHandle) {
    wait_until(
        Duration::from_secs(30),
        &format!("delivery errors counted as {reason}"),
        || {
            block(c.metric(&format!(
                "courier_delivery_errors_total{{class=\"systemic\",reason=\"{reason}\""
            ))) >= 1.0
        },
    )
    .await;
    // A few open intervals: the half-open probes fail too, and still nothing
    // reaches the DLQ.
    wait_until(
        Duration::from_secs(30),
        "the breaker opened three times",
        || block(c.metric("courier_breaker_transitions_total{to=\"open\"")) >= 3.0,
    )
    .await;
    assert_eq!(api.delivered_count(), 0, "nothing gets through");
    assert_eq!(topic_size(s, &n.dlq), 0, "no DLQ record for {reason}");
    assert_eq!(topic_size(s, &n.parking), 0, "nothing parked for {reason}");
}

/// The time in ms since the epoch at the start of a log line (RFC 3339).
fn log_time_ms(line: &str) -> Option<i64> {
    let stamp = line.split_whitespace().next()?;
    let t = humantime::parse_rfc3339_weak(stamp.trim_end_matches('Z')).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_over_https_with_a_private_ca_and_http2() {
    let s = services();
    let dir = cert_dir("https");
    let ca = Ca::new(&dir, "private");
    let server = ca.server("server", LOOPBACK, Validity::Current);
    let api = https_sink(&sink_tls(&server, None)).await;
    assert!(api.url().starts_with("https://127.0.0.1:"));
    let n = Names::new("tls-https", 3);
    n.create(&s, true).await;
    let produced = produce(&s, &n, 2_000, "https").await;

    let toml = config(&n, &api.url(), "http2 = true\n", &ca_line(&ca));
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;

    let audit = api.audit();
    println!(
        "[https] {} requests, {} over HTTP/2",
        audit.requests_total, audit.http2_requests
    );
    assert!(audit.requests_total >= 2_000);
    assert_eq!(
        audit.http2_requests, audit.requests_total,
        "api.http2 = true: HTTP/2 negotiated by ALPN"
    );
    assert_eq!(topic_size(&s, &n.dlq), 0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("https", &rep);
    assert_eq!(rep.delivered, 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_required_by_the_api_and_given() {
    let s = services();
    let dir = cert_dir("mtls");
    let ca = Ca::new(&dir, "private");
    let server = ca.server("server", LOOPBACK, Validity::Current);
    let client = ca.client("client", "courier");
    let api = https_sink(&sink_tls(&server, Some(&ca))).await;
    let n = Names::new("tls-mtls", 2);
    n.create(&s, true).await;
    let produced = produce(&s, &n, 1_000, "mtls").await;

    // Without a client certificate the API refuses the handshake: named, paused.
    let mut c = Courier::start(
        &format!("{}-nocert", n.topic),
        &s,
        &config(&n, &api.url(), "", &ca_line(&ca)),
    );
    let line = reason_logged(&c, "tls_client_cert").await;
    println!("[mtls] without a client certificate: {line}");
    paused_without_dlq(&c, &s, &n, "tls_client_cert", &api).await;
    c.terminate(Duration::from_secs(30)).await;

    let tls = format!(
        "{}cert_file = \"{}\"\nkey_file = \"{}\"\n",
        ca_line(&ca),
        client.cert_file.display(),
        client.key_file.display()
    );
    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), "", &tls));
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;
    let audit = api.audit();
    assert_eq!(audit.http2_requests, 0, "HTTP/1.1 unless api.http2 = true");
    assert_eq!(topic_size(&s, &n.dlq), 0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("mtls", &rep);
    assert_eq!(rep.delivered, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificate_pauses_without_dlq_until_the_ca_is_fixed() {
    let s = services();
    let dir = cert_dir("untrusted");
    let ca = Ca::new(&dir, "private");
    let other = Ca::new(&dir, "other");
    let server = ca.server("server", LOOPBACK, Validity::Current);
    let api = https_sink(&sink_tls(&server, None)).await;
    let n = Names::new("tls-untrusted", 2);
    n.create(&s, true).await;
    let produced = produce(&s, &n, 1_000, "untrusted").await;

    // 1. No CA configured: the platform's roots do not know the private CA.
    let mut c = Courier::start(
        &format!("{}-noca", n.topic),
        &s,
        &config(&n, &api.url(), "", ""),
    );
    let line = reason_logged(&c, "tls_untrusted").await;
    // Courier can log the refusal before the stand-in has recorded the
    // handshake it saw fail (the alert reaches the server after the client
    // gave up): wait for the record, do not race it.
    wait_until(
        Duration::from_secs(30),
        "the stand-in saw the refused handshake",
        || api.audit().tls_first_failure_unix_ms > 0,
    )
    .await;
    let first_refusal = api.audit().tls_first_failure_unix_ms;
    let logged = log_time_ms(&line).expect("a time stamp on the log line");
    println!(
        "[untrusted] logged {} ms after the first refused handshake: {line}",
        logged - first_refusal
    );
    // Named on its first occurrence, not after the breaker's probes (which
    // come `breaker_open` = 1.5 s later); generous for a loaded machine.
    assert!(
        logged - first_refusal < 1_500,
        "the reason is logged at the first failure ({} ms after it)",
        logged - first_refusal
    );
    paused_without_dlq(&c, &s, &n, "tls_untrusted", &api).await;
    c.terminate(Duration::from_secs(30)).await;

    // 2. The wrong CA file: still untrusted.
    let mut c = Courier::start(
        &format!("{}-wrongca", n.topic),
        &s,
        &config(&n, &api.url(), "", &ca_line(&other)),
    );
    reason_logged(&c, "tls_untrusted").await;
    paused_without_dlq(&c, &s, &n, "tls_untrusted", &api).await;
    c.terminate(Duration::from_secs(30)).await;

    // 3. The CA fixed, Courier restarted: everything is delivered.
    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), "", &ca_line(&ca)));
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;
    assert_eq!(topic_size(&s, &n.dlq), 0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("untrusted", &rep);
    assert_eq!(rep.delivered, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_wrong_host_certificates_are_named_then_recovered() {
    let s = services();
    let dir = cert_dir("expired");
    let ca = Ca::new(&dir, "private");
    let expired = ca.server("expired", LOOPBACK, Validity::Expired);
    let wrong_host = ca.server("wrong-host", &["api.example.com"], Validity::Current);
    let good = ca.server("good", LOOPBACK, Validity::Current);
    let api = https_sink(&sink_tls(&expired, None)).await;
    let n = Names::new("tls-expired", 2);
    n.create(&s, true).await;
    let produced = produce(&s, &n, 1_000, "expired").await;

    let mut c = Courier::start(&n.topic, &s, &config(&n, &api.url(), "", &ca_line(&ca)));
    let line = reason_logged(&c, "tls_expired").await;
    println!("[expired] {line}");
    paused_without_dlq(&c, &s, &n, "tls_expired", &api).await;

    // The next probes meet a certificate for another host: a new reason, named
    // when it first occurs although the breaker was already open.
    api.set_tls_cert(wrong_host.cert.as_bytes(), wrong_host.key.as_bytes())
        .expect("swap the certificate");
    let line = reason_logged(&c, "tls_hostname").await;
    println!("[wrong host] {line}");
    paused_without_dlq(&c, &s, &n, "tls_hostname", &api).await;

    // A good certificate: the probes succeed and everything is delivered,
    // without a restart.
    api.set_tls_cert(good.cert.as_bytes(), good.key.as_bytes())
        .expect("swap the certificate");
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    c.terminate(Duration::from_secs(30)).await;
    assert_eq!(topic_size(&s, &n.dlq), 0);
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("expired", &rep);
    assert_eq!(rep.delivered, 1_000);
}

/// Runs `courier <cmd> --config <toml>` with no services; exit code and output.
fn courier_with(cmd: &str, dir: &Path, name: &str, toml: &str) -> (i32, String) {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, toml).expect("write config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg(cmd)
        .arg("--config")
        .arg(&cfg)
        .env("COURIER__METRICS__LISTEN", "")
        .env("COURIER__KAFKA__BROKERS", "127.0.0.1:1")
        .output()
        .expect("run courier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn check_config_names_bad_tls_files_and_plaintext() {
    let dir = cert_dir("check");
    let ca = Ca::new(&dir, "private");
    let client = ca.client("client", "courier");
    let other = ca.client("other", "someone-else");
    let not_pem = dir.join("not-pem.txt");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let encrypted = dir.join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let https = "[api]\nurl = \"https://api.example.com/v1/events\"\n";
    let tls = |lines: &str| format!("{https}[api.tls]\n{lines}");
    let p = |path: &Path| path.display().to_string();

    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "missing CA file",
            tls(&format!("ca_file = \"{}\"\n", p(&dir.join("nope.pem")))),
            "api.tls.ca_file",
            "does not exist",
        ),
        (
            "CA file not PEM",
            tls(&format!("ca_file = \"{}\"\n", p(&not_pem))),
            "api.tls.ca_file",
            "not a PEM certificate file",
        ),
        (
            "CA file unreadable (a directory)",
            tls(&format!("ca_file = \"{}\"\n", p(&dir))),
            "api.tls.ca_file",
            "cannot be read",
        ),
        (
            "certificate without key",
            tls(&format!("cert_file = \"{}\"\n", p(&client.cert_file))),
            "api.tls.key_file",
            "cert_file and key_file",
        ),
        (
            "client certificate not PEM",
            tls(&format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                p(&not_pem),
                p(&client.key_file)
            )),
            "api.tls.cert_file",
            "not a PEM certificate file",
        ),
        (
            "key not PEM",
            tls(&format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                p(&client.cert_file),
                p(&not_pem)
            )),
            "api.tls.key_file",
            "not a PEM private key file",
        ),
        (
            "key of another certificate",
            tls(&format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                p(&client.cert_file),
                p(&other.key_file)
            )),
            "api.tls.key_file",
            "does not belong to the certificate",
        ),
        (
            "encrypted key",
            tls(&format!(
                "cert_file = \"{}\"\nkey_file = \"{}\"\n",
                p(&client.cert_file),
                p(&encrypted)
            )),
            "api.tls.key_file",
            "encrypted",
        ),
        (
            "plain HTTP to another host",
            "[api]\nurl = \"http://10.1.2.3:8080/events\"\n".into(),
            "api.url",
            "allow_plaintext",
        ),
        (
            "TLS settings with plain HTTP",
            format!(
                "[api]\nurl = \"http://127.0.0.1:8080/events\"\n[api.tls]\nca_file = \"{}\"\n",
                p(&ca.pem.cert_file)
            ),
            "api.tls.ca_file",
            "https",
        ),
    ];
    for (i, (what, toml, field, says)) in cases.iter().enumerate() {
        let (code, out) = courier_with("check-config", &dir, &format!("bad-{i}"), toml);
        println!("[check-config] {what}: exit {code}: {}", out.trim());
        assert_eq!(code, 2, "{what}: refused");
        assert!(
            out.contains(&format!("`{field}`")) && out.contains(says),
            "{what}: names `{field}` and says `{says}`: {out}"
        );
    }
    // `run` refuses the same before connecting to anything.
    for (i, (what, toml, field, _)) in cases
        .iter()
        .enumerate()
        .filter(|(i, _)| [0, 6, 8].contains(i))
    {
        let (code, out) = courier_with("run", &dir, &format!("run-{i}"), toml);
        assert_eq!(code, 2, "run: {what}: refused: {out}");
        assert!(
            out.contains(&format!("`{field}`")),
            "run: {what}: names {field}: {out}"
        );
    }

    let good: Vec<(&str, String)> = vec![
        (
            "https with a CA and a client certificate",
            tls(&format!(
                "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
                p(&ca.pem.cert_file),
                p(&client.cert_file),
                p(&client.key_file)
            )),
        ),
        (
            "plain HTTP to another host, allowed",
            "[api]\nurl = \"http://10.1.2.3:8080/events\"\nallow_plaintext = true\n".into(),
        ),
        (
            "plain HTTP to loopback",
            "[api]\nurl = \"http://localhost:8080/events\"\n".into(),
        ),
    ];
    for (i, (what, toml)) in good.iter().enumerate() {
        let (code, out) = courier_with("check-config", &dir, &format!("good-{i}"), toml);
        assert_eq!(code, 0, "{what}: accepted: {out}");
        assert!(out.contains("config ok"), "{what}: {out}");
    }
}
