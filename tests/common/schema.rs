//! What the schema-registry tests share (`tests/schema_registry.rs`,
//! `tests/schema_formats.rs`, `benches/schema_cpu.rs`): the tools they run (the
//! Python with confluent-kafka's serializers, Apicurio Registry), the API
//! stand-in keeping bodies, the config of a registry format, raw records,
//! registering a schema, and the check of the delivered bodies.

use super::{base_toml, envelopes, Names, Services};
use courier_standins::audit::Produced;
use courier_standins::sink::{Behaviour, SinkHandle};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The Python with confluent-kafka (`scripts/pyschema.sh` prints it).
pub(crate) fn python() -> PathBuf {
    match std::env::var("COURIER_TEST_PYSCHEMA") {
        Ok(p) => PathBuf::from(p),
        Err(_) => script_output("scripts/pyschema.sh"),
    }
}

/// Apicurio Registry's runner jar (`scripts/apicurio.sh` fetches it and prints it).
pub(crate) fn apicurio() -> PathBuf {
    match std::env::var("COURIER_TEST_APICURIO") {
        Ok(p) => PathBuf::from(p),
        Err(_) => script_output("scripts/apicurio.sh"),
    }
}

/// What a tool script of `scripts/` prints (the path of the tool it made ready).
pub(crate) fn script_output(script: &str) -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(format!("{}/{script}", env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap_or_else(|e| panic!("{script} runs: {e}"));
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A real registry of its own for `n`'s test (Apicurio; its state and log in
/// the test's log directory).
pub(crate) async fn registry_for(n: &Names) -> courier_testkit::schema_registry::Registry {
    let dir = super::log_dir().join(format!("{}-registry", n.topic));
    courier_testkit::schema_registry::Registry::start(&apicurio(), &dir)
        .await
        .expect("registry starts")
}

/// The API stand-in with behaviour `b`, keeping the bodies it is sent.
pub(crate) async fn api(b: Behaviour) -> SinkHandle {
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), b)
        .await
        .unwrap();
    api.set_record_bodies(true);
    api
}

/// `toml` reading `format` (`avro`, `protobuf`, `json_schema`) through `registry`:
/// ids at `/id`, every event of type `order`.
pub(crate) fn with_registry(toml: String, registry: &str, format: &str) -> String {
    toml + &format!(
        r#"
[input]
format = "{format}"
id = "/id"
type = ""
default_type = "order"

[input.schema_registry]
url = "{registry}"
request_timeout = "2s"
"#
    )
}

/// [`base_toml`] reading `format` through `registry`.
pub(crate) fn registry_config(n: &Names, api_url: &str, registry: &str, format: &str) -> String {
    with_registry(base_toml(n, api_url), registry, format)
}

/// Raw records (bad input) straight through rdkafka, to partition 0.
pub(crate) async fn write_raw(
    s: &Services,
    n: &Names,
    values: &[Vec<u8>],
    produced: &mut Produced,
) {
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    for v in values {
        let rec: FutureRecord<'_, (), Vec<u8>> = FutureRecord::to(&n.topic).payload(v).partition(0);
        let d = producer
            .send(rec, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        produced.poison.push((d.partition, d.offset));
    }
}

/// `body` framed as a registry's serializer frames it: magic byte 0, the
/// schema id (big-endian), the body.
pub(crate) fn framed(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&schema_id.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// The Avro binary of a record whose fields are all strings (each a
/// zig-zag length, then its bytes).
pub(crate) fn avro_strings(fields: &[&str]) -> Vec<u8> {
    let mut v = Vec::new();
    for f in fields {
        let mut n = (f.len() as u64) << 1;
        while n >= 0x80 {
            v.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        v.push(n as u8);
        v.extend_from_slice(f.as_bytes());
    }
    v
}

/// Raw records to `partition`, straight through rdkafka: those with an id are
/// events (`produced.ids`), keyed by their id, the others bad input
/// (`produced.poison`), keyed `k`. (One key for all made an event that went
/// to the DLQ hold back every later one: I39.)
pub(crate) async fn write_to(
    s: &Services,
    n: &Names,
    partition: i32,
    records: &[(Option<String>, Vec<u8>)],
    produced: &mut Produced,
) {
    let producer = courier_standins::loadgen::producer(&s.brokers).unwrap();
    for (id, v) in records {
        let rec: FutureRecord<'_, str, Vec<u8>> = FutureRecord::to(&n.topic)
            .payload(v)
            .key(id.as_deref().unwrap_or("k"))
            .partition(partition);
        let d = producer
            .send(rec, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        match id {
            Some(id) => {
                produced.ids.push(id.clone());
                produced.offsets.push((d.partition, d.offset));
            }
            None => produced.poison.push((d.partition, d.offset)),
        }
    }
}

/// The parking lot's reasons, counted.
pub(crate) fn parked_reasons(s: &Services, n: &Names) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for e in envelopes(s, &n.parking) {
        *out.entry(e.last_error.reason).or_default() += 1;
    }
    out
}

/// Registers `schema` (`kind`: `AVRO`, `PROTOBUF`, `JSON`) under `subject` by the
/// registry's REST API; its id.
pub(crate) async fn register(registry: &str, subject: &str, kind: &str, schema: &str) -> u32 {
    let resp = reqwest::Client::new()
        .post(format!("{registry}/subjects/{subject}/versions"))
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .body(serde_json::json!({"schema": schema, "schemaType": kind}).to_string())
        .send()
        .await
        .expect("the registry answers");
    let text = resp.text().await.expect("an answer");
    let v: serde_json::Value = serde_json::from_str(&text).expect("a JSON answer");
    v["id"].as_u64().unwrap_or_else(|| panic!("no id in {v}")) as u32
}

/// Every expected body was delivered, exactly as expected.
pub(crate) fn check_bodies(api: &SinkHandle, expect: &HashMap<String, serde_json::Value>) {
    let audit = api.audit();
    for (id, want) in expect {
        let got = audit
            .bodies_sample
            .get(id)
            .unwrap_or_else(|| panic!("{id} was not delivered"));
        assert_eq!(got, want, "the body of {id}");
    }
}

/// Runs Courier on `toml` until every produced event is delivered and the
/// offsets are committed to the end, stops it (exit 0), and returns the audit,
/// asserted lossless under `name`.
pub(crate) async fn run_to_the_end(
    s: &Services,
    n: &Names,
    api: &SinkHandle,
    toml: &str,
    produced: &Produced,
    name: &str,
) -> courier_standins::audit::AuditReport {
    let mut c = super::Courier::start(&n.topic, s, toml);
    n.wait_committed_to_end(s, Duration::from_secs(90)).await;
    super::wait_until(Duration::from_secs(60), "every event is delivered", || {
        let a = api.audit();
        produced.ids.iter().all(|id| a.delivered.contains_key(id))
    })
    .await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let rep = n.audit(s, produced, api);
    super::assert_no_loss(name, &rep);
    rep
}
