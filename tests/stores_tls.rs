//! TLS to the stores, against real servers with the certificates
//! `scripts/services.sh` makes:
//! - Redis: a Redis of the test's own with a TLS port, a plain port and a
//!   password. Over `rediss://` with `redis.tls_ca_file`, the health marker works
//!   (set when the API goes down, read back, the group paused, then everything
//!   delivered); the same URL pointed at the plain port, or with a CA that did not
//!   sign the server's certificate, never connects — a `rediss://` URL really
//!   negotiates TLS, it is never downgraded.
//! - PostgreSQL (`ssl = on`): enrichment with `sslmode=verify-full` and
//!   `enrichment.tls_ca_file`, every connection of Courier's pool encrypted (seen
//!   from the server, `pg_stat_ssl`); `sslmode=require` against a PostgreSQL
//!   without TLS, `verify-full` with the wrong CA and `verify-full` under a host
//!   name the certificate lacks, refused at start (`verify-ca` under that name
//!   starts: it checks the chain only).
//! - Without `sslmode`, a PostgreSQL that is not on loopback is verified
//!   (`verify-full`): under a name its certificate lacks, or without TLS, refused.
//! - `check-config` names a missing Redis or PostgreSQL password variable, refuses a
//!   secret put in a `*_env` field without echoing it, and plain `redis://` with a
//!   password to a host other than loopback.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::ChildGuard;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const REDIS_PW: &str = "redis-tls-pw-5e6f-SECRET";

fn var(k: &str) -> String {
    std::env::var(k)
        .unwrap_or_else(|_| panic!("{k} is not set: run the tests through scripts/test.sh"))
}

/// A Redis of the test's own: a plain port, a TLS port, a password.
struct TlsRedis {
    _child: ChildGuard,
    plain: u16,
    tls: u16,
}

impl TlsRedis {
    async fn start() -> TlsRedis {
        let (plain, tls) = (free_port(), free_port());
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--port", &plain.to_string(), "--tls-port", &tls.to_string()])
            .args(["--tls-cert-file", &var("COURIER_TEST_TLS_SERVER_CERT")])
            .args(["--tls-key-file", &var("COURIER_TEST_TLS_SERVER_KEY")])
            .args(["--tls-ca-cert-file", &var("COURIER_TEST_TLS_CA")])
            .args(["--tls-auth-clients", "no", "--requirepass", REDIS_PW]);
        let log = log_dir().join(format!("redis-tls-{tls}.log"));
        let child = ChildGuard::spawn("redis-server", cmd, &log)
            .expect("redis-server (installed by scripts/services.sh)");
        let r = TlsRedis {
            _child: child,
            plain,
            tls,
        };
        wait_until(Duration::from_secs(10), "the TLS Redis answers", || {
            r.cli(&["ping"]).as_deref() == Some("PONG")
        })
        .await;
        r
    }

    /// `redis-cli` over TLS with the password; `None` when it fails.
    fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.tls.to_string()])
            .args(["--tls", "--cacert", &var("COURIER_TEST_TLS_CA")])
            .args(["--no-auth-warning", "-a", REDIS_PW])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

fn redis_env<'a>(url: &'a str, ca: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("COURIER__REDIS__URL", url),
        ("COURIER__REDIS__TLS_CA_FILE", ca),
        ("COURIER__REDIS__PASSWORD_ENV", "TEST_REDIS_PW"),
        ("TEST_REDIS_PW", REDIS_PW),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_marker_over_rediss() {
    let s = services();
    let redis = TlsRedis::start().await;
    let n = Names::new("rediss", 2);
    n.create(&s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            down_status: Some(503),
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let spec = Spec {
        count: 300,
        keys: 300,
        id_prefix: "rediss".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let toml = toml_with(&n, &api.url(), FAST).replace("concurrency = 256", "concurrency = 16");
    let url = format!("rediss://127.0.0.1:{}", redis.tls);
    let ca = var("COURIER_TEST_TLS_CA");
    let mut env = redis_env(&url, &ca);
    env.push((
        "RUST_LOG",
        "debug,librdkafka=info,rdkafka=info,hyper=info,h2=info",
    ));
    let mut c = Courier::start_with_env(&n.topic, &s, &toml, &env);

    // The API is down: the breaker opens, the marker is set over TLS and read
    // back (the verdict's marker half), and it is in Redis.
    let key = format!("courier:{}:api-down", n.group);
    wait_until(
        Duration::from_secs(60),
        "the marker is set in Redis and seen by Courier over rediss://",
        || {
            block(c.metric("courier_health_source{source=\"redis\"")) == 1.0
                && block(c.metric("courier_marker_alive")) == 1.0
                && redis.cli(&["exists", &key]).as_deref() == Some("1")
        },
    )
    .await;

    // The API is back: the marker expires, the DLQ drains, everything arrives.
    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    wait_until(
        Duration::from_secs(90),
        "every event reached the API",
        || api.delivered_count() >= 300,
    )
    .await;
    c.terminate(Duration::from_secs(30)).await;
    let log = c.log_text();
    assert!(
        !log.contains(REDIS_PW),
        "the Redis password appears in the log"
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("rediss", &rep);
    assert_eq!(rep.delivered, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_never_falls_back_to_plain_text() {
    let s = services();
    let redis = TlsRedis::start().await;
    let n = Names::new("rediss-refused", 1);
    n.create(&s, true).await;
    let toml = base_toml(&n, "http://127.0.0.1:9/unused");
    let ca = var("COURIER_TEST_TLS_CA");
    let other_ca = var("COURIER_TEST_TLS_OTHER_CA");
    let to_plain = format!("rediss://127.0.0.1:{}", redis.plain);
    let to_tls = format!("rediss://127.0.0.1:{}", redis.tls);
    // `rediss://` at the plain port: the TLS handshake fails, nothing is sent
    // in plain text. With a CA that did not sign the server's certificate: the
    // certificate is refused.
    let cases = [
        ("plain-port", redis_env(&to_plain, &ca)),
        ("wrong-ca", redis_env(&to_tls, &other_ca)),
    ];
    let mut running = Vec::new();
    for (what, env) in &cases {
        let c = Courier::start_with_env(&format!("{}-{what}", n.topic), &s, &toml, env);
        running.push((what, c));
    }
    for (what, c) in &mut running {
        wait_until(
            Duration::from_secs(60),
            &format!("{what}: the failed Redis connection is logged"),
            || c.log_text().contains("Redis connection failed"),
        )
        .await;
        assert_eq!(
            c.metric("courier_health_source{source=\"redis\"").await,
            0.0,
            "{what}: Courier must not be connected to Redis"
        );
        assert_eq!(
            c.metric("courier_health_source{source=\"breaker\"").await,
            1.0,
            "{what}: the verdict rests on the local breaker"
        );
        c.terminate(Duration::from_secs(30)).await;
        let log = c.log_text();
        println!(
            "[rediss-refused] {what}: {}",
            log.lines()
                .find(|l| l.contains("Redis connection failed"))
                .unwrap_or_default()
        );
        assert!(!log.contains("Redis reachable"), "{what}: {log}");
        if **what == "wrong-ca" {
            assert!(
                log.contains("UnknownIssuer"),
                "{what}: the log names the untrusted certificate: {log}"
            );
        }
        assert!(
            !log.contains(REDIS_PW),
            "the Redis password appears in the log"
        );
    }
}

/// A PostgreSQL of the test's own, without TLS (the services' one has it).
struct PlainPg {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PlainPg {
    async fn start() -> PlainPg {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL (installed by scripts/services.sh)")
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .expect("a PostgreSQL server under /usr/lib/postgresql");
        let dir = std::env::temp_dir().join(format!("courier-plain-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let pg = PlainPg { dir, bin, port };
        let as_pg = |args: &[&str]| {
            let st = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("runuser");
            assert!(st.success(), "{args:?} failed");
        };
        let st = Command::new("chown")
            .args(["postgres:postgres", pg.dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
        let data = pg.dir.join("data");
        as_pg(&[
            pg.bin.join("initdb").to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-N",
        ]);
        as_pg(&[
            pg.bin.join("pg_ctl").to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-w",
            "-o",
            &format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c ssl=off -c fsync=off",
                pg.dir.display()
            ),
            "start",
        ]);
        pg
    }
}

impl Drop for PlainPg {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", self.dir.join("data").to_str().unwrap_or_default()])
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn enrichment_toml(url: &str, table: &str, ca: Option<&str>) -> String {
    let mut t = format!(
        "\n[enrichment]\nenabled = true\nurl = \"{url}\"\nquery = \"SELECT doc FROM {table} WHERE key = $1\"\nquery_timeout = \"2s\"\npool_size = 4\n"
    );
    if let Some(ca) = ca {
        t += &format!("tls_ca_file = \"{ca}\"\n");
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrichment_over_postgres_tls() {
    let s = services();
    let n = Names::new("pgtls", 2);
    n.create(&s, true).await;
    let rows: Vec<_> = (0..20)
        .map(|k| {
            (
                format!("key-{k}"),
                serde_json::json!({"tier": format!("t-{k}")}),
            )
        })
        .collect();
    let table = pg_table(&s, &n, "profiles", &rows).await;
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    api.set_record_bodies(true);
    let spec = Spec {
        count: 300,
        keys: 20,
        id_prefix: "pgtls".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    let url = s
        .pg_url
        .replace("courier:courier@", "courier@")
        .replace("127.0.0.1", "localhost")
        + "?sslmode=verify-full";
    let toml = base_toml(&n, &api.url())
        + &enrichment_toml(&url, &table, Some(&var("COURIER_TEST_TLS_CA")));
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;

    // Seen from the server: Courier's connections (application_name) are
    // encrypted, and there is at least one.
    let (db, conn) = tokio_postgres::connect(&s.pg_url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    let rows = db
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'courier'",
            &[],
        )
        .await
        .unwrap();
    let ssl: Vec<bool> = rows.iter().map(|r| r.get(0)).collect();
    println!("[pgtls] Courier's connections, encrypted: {ssl:?}");
    assert!(
        !ssl.is_empty() && ssl.iter().all(|s| *s),
        "every connection of Courier's pool uses TLS: {ssl:?}"
    );
    c.terminate(Duration::from_secs(30)).await;

    let audit = api.audit();
    for seq in 0..300 {
        let id = loadgen::event_id("pgtls", seq);
        assert_eq!(
            audit.bodies_sample[&id]["enrichment"]["tier"],
            format!("t-{}", seq % 20),
            "the enrichment of {id}"
        );
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("pgtls", &rep);
    assert_eq!(rep.delivered, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_that_cannot_be_had_is_refused_at_start() {
    let s = services();
    let plain = PlainPg::start().await;
    let n = Names::new("pgtls-refused", 1);
    n.create(&s, true).await;
    let base = base_toml(&n, "http://127.0.0.1:9/unused");
    let cases = [
        (
            "require-without-tls",
            format!(
                "postgres://postgres@127.0.0.1:{}/postgres?sslmode=require",
                plain.port
            ),
            None,
            "server does not support TLS",
        ),
        (
            "verify-full-wrong-ca",
            s.pg_url.replace("courier:courier@", "courier@") + "?sslmode=verify-full",
            Some(var("COURIER_TEST_TLS_OTHER_CA")),
            "UnknownIssuer",
        ),
        (
            // Reached at 127.0.0.1, but named otherwise: the certificate is not
            // valid for that name.
            "verify-full-wrong-host",
            wrong_host_url(&s, "verify-full"),
            Some(var("COURIER_TEST_TLS_CA")),
            "certificate not valid for name",
        ),
        (
            // No sslmode to a host that is not loopback: verify-full, not
            // libpq's prefer (which checked no name and fell back to plain
            // text: both of these used to start).
            "default-wrong-host",
            wrong_host_url(&s, "verify-full").replace("&sslmode=verify-full", ""),
            Some(var("COURIER_TEST_TLS_CA")),
            "certificate not valid for name",
        ),
        (
            "default-without-tls",
            format!(
                "postgres://postgres@db-name.invalid:{}/postgres?hostaddr=127.0.0.1",
                plain.port
            ),
            None,
            "server does not support TLS",
        ),
    ];
    for (what, url, ca, expect) in cases {
        let toml = base.clone() + &enrichment_toml(&url, "t", ca.as_deref());
        let mut c = Courier::start(&format!("{}-{what}", n.topic), &s, &toml);
        let code = c.wait_exit(Duration::from_secs(60)).await;
        let log = c.log_text();
        assert_eq!(code, Some(2), "{what}: refused at start: {log}");
        assert!(
            log.contains("enrichment.url") && log.contains(expect),
            "{what}: the error names the field and says `{expect}`: {log}"
        );
    }

    // verify-ca checks the chain, not the name: the same host starts.
    let toml = base.clone()
        + &enrichment_toml(
            &wrong_host_url(&s, "verify-ca"),
            "t",
            Some(&var("COURIER_TEST_TLS_CA")),
        );
    let mut c = Courier::start(&format!("{}-verify-ca", n.topic), &s, &toml);
    // Started: past the check (which would have exited with 2), consuming.
    wait_until(
        Duration::from_secs(60),
        "verify-ca connects whatever the host name",
        || {
            let log = c.log_text();
            log.contains("PostgreSQL reachable") && log.contains("partitions assigned")
        },
    )
    .await;
    c.terminate(Duration::from_secs(30)).await;

    // The same URL without TLS demands works against that server: the refusal
    // above is about TLS, not about reaching it.
    let ok_url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=prefer",
        plain.port
    );
    let (db, conn) = tokio_postgres::connect(&ok_url, tokio_postgres::NoTls)
        .await
        .expect("the plain PostgreSQL answers");
    tokio::spawn(conn);
    db.simple_query("SELECT 1").await.unwrap();
}

/// The services' PostgreSQL under a name its certificate does not carry
/// (`hostaddr` says where it really is).
fn wrong_host_url(s: &Services, mode: &str) -> String {
    let port = s.pg_url.rsplit(':').next().unwrap_or_default();
    let port = port.split('/').next().unwrap_or_default();
    format!(
        "postgres://courier@wrong-name.invalid:{port}/courier?hostaddr=127.0.0.1&sslmode={mode}"
    )
}

#[test]
fn check_config_names_missing_store_passwords() {
    let s = services();
    for (toml, field, name) in [
        (
            "[redis]\npassword_env = \"ST_MISSING_REDIS_PW\"\n",
            "redis.password_env",
            "ST_MISSING_REDIS_PW",
        ),
        (
            "[enrichment]\nenabled = true\nquery = \"SELECT doc FROM t WHERE key = $1\"\npassword_env = \"ST_MISSING_PG_PW\"\n",
            "enrichment.password_env",
            "ST_MISSING_PG_PW",
        ),
    ] {
        let cfg = log_dir().join(format!("stores-{}-{name}.toml", std::process::id()));
        std::fs::write(&cfg, toml).unwrap();
        let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
        assert_eq!(code, 2, "check-config must fail: {out}");
        assert!(
            out.contains(field) && out.contains(name),
            "the error names {field} and {name}: {out}"
        );
    }
    // A secret put where its variable's name belongs is refused and never
    // echoed (it used to come back as "environment variable <it> is not
    // set"); plain redis:// with a password to another host is refused.
    let secret = "hunter2-Pa55/w0rd==";
    for (toml, field) in [
        (
            format!("[redis]\npassword_env = \"{secret}\"\n"),
            "redis.password_env",
        ),
        (
            format!("[api]\ntoken_env = \"{secret}\"\n"),
            "api.token_env",
        ),
        (
            "[redis]\nurl = \"redis://redis.example.com:6379\"\npassword_env = \"REDIS_PW\"\n"
                .to_string(),
            "redis.url",
        ),
    ] {
        let cfg = log_dir().join(format!("stores-{}-{field}.toml", std::process::id()));
        std::fs::write(&cfg, toml).unwrap();
        let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
        assert_eq!(code, 2, "check-config must fail: {out}");
        assert!(out.contains(field), "the error names {field}: {out}");
        assert!(!out.contains("hunter2"), "the secret is echoed: {out}");
    }
}
