//! Issue 42: Schema Registry answers a real registry does not give on demand
//! (400, 422, JSON that is not a schema, 429, an HTML page answered 200), from
//! a registry stand-in in this file, against the real broker: the permanent
//! ones park the records naming the id (`bad_schema`) while the others flow,
//! the others make the partition wait, parking nothing. Ends with the audit:
//! lost 0. The answers a real registry gives: `tests/schema_registry_refusals.rs`.

mod common;

use common::schema::*;
use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::Behaviour;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The schema of the events (a record of an id and a number).
const EVENT: &str = r#"{"type": "record", "name": "Event", "namespace": "t",
  "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}"#;

/// A registry stand-in for answers a real registry does not give on demand:
/// each id answered by `answer(id, nth request for it)`; requests counted by id.
struct StandIn {
    url: String,
    asked: Arc<Mutex<HashMap<u32, usize>>>,
}

type Answer = dyn Fn(u32, usize) -> (u16, &'static str, String) + Send + Sync;

impl StandIn {
    async fn start(answer: Arc<Answer>) -> StandIn {
        use axum::extract::Path;
        let asked: Arc<Mutex<HashMap<u32, usize>>> = Arc::default();
        let seen = asked.clone();
        let app = axum::Router::new().route(
            "/schemas/ids/{id}",
            axum::routing::get(move |Path(id): Path<u32>| {
                let (answer, seen) = (answer.clone(), seen.clone());
                async move {
                    let nth = {
                        let mut m = seen.lock().unwrap();
                        let k = m.entry(id).or_default();
                        *k += 1;
                        *k
                    };
                    let (status, content_type, body) = answer(id, nth);
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [("content-type", content_type)],
                        body,
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        StandIn { url, asked }
    }

    fn asked(&self, id: u32) -> usize {
        self.asked.lock().unwrap().get(&id).copied().unwrap_or(0)
    }
}

/// 400, 422 and JSON that is not a schema park the records naming those ids
/// `bad_schema` (each id asked once); 429, then an HTML page answered 200,
/// make the partition wait (nothing parked, the records behind it held) until
/// the schema is served, then everything else is delivered. Committed to the
/// end, lost 0.
///
/// Seen failing before the fix: the partition waited for the 400 for good
/// (the events behind it were never delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_registry_answers_park_or_wait_as_they_mean() {
    const GOOD: u32 = 1;
    const REFUSED: [u32; 3] = [2, 3, 4];
    const LIMITED: u32 = 5;
    let s = services();
    let n = Names::new("sr-odd", 1);
    n.create(&s, true).await;
    // What the rate-limited id is answered: 0 → 429, 1 → an HTML page, 2 → its schema.
    let phase = Arc::new(AtomicU32::new(0));
    let schema = serde_json::json!({"schema": EVENT}).to_string();
    let json = "application/json";
    let answer: Arc<Answer> = {
        let phase = phase.clone();
        Arc::new(move |id, _| match id {
            GOOD => (200, json, schema.clone()),
            2 => (
                400,
                json,
                r#"{"error_code": 40002, "message": "bad"}"#.into(),
            ),
            3 => (
                422,
                json,
                r#"{"error_code": 42202, "message": "no"}"#.into(),
            ),
            4 => (200, json, r#"{"answer": "not a schema"}"#.into()),
            LIMITED => match phase.load(Ordering::SeqCst) {
                0 => (429, json, r#"{"error_code": 42901}"#.into()),
                1 => (200, "text/html", "<html>maintenance</html>".into()),
                _ => (200, json, schema.clone()),
            },
            _ => (404, json, r#"{"error_code": 40403}"#.into()),
        })
    };
    let registry = StandIn::start(answer).await;
    let api = api(Behaviour::default()).await;
    let mut produced = Produced::default();
    let event = |id: String, j: usize| {
        let body = [avro_strings(&[&id]), vec![(j as u8 % 60) << 1]].concat();
        (Some(id), framed(GOOD, &body))
    };
    let mut records: Vec<(Option<String>, Vec<u8>)> = Vec::new();
    let count = AtomicUsize::new(0);
    let events = |records: &mut Vec<_>, k: usize| {
        for _ in 0..k {
            let j = count.fetch_add(1, Ordering::SeqCst);
            records.push(event(format!("ev-{j}"), j));
        }
    };
    events(&mut records, 5);
    for id in REFUSED {
        records.push((None, framed(id, b"\x02x\x00")));
        records.push((None, framed(id, b"\x02y\x00")));
        events(&mut records, 5);
    }
    let limited: Vec<String> = (0..3).map(|k| format!("limited-{k}")).collect();
    for id in &limited {
        records.push((
            Some(id.clone()),
            framed(LIMITED, &[avro_strings(&[id]), vec![0]].concat()),
        ));
    }
    let behind_limited = count.load(Ordering::SeqCst);
    events(&mut records, 5);
    write_to(&s, &n, 0, &records, &mut produced).await;

    let toml = registry_config(&n, &api.url(), &registry.url, "avro");
    let mut c = Courier::start(&n.topic, &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "the events before the rate-limited id are delivered, the refused parked",
        || {
            let a = api.audit();
            (0..behind_limited).all(|j| a.delivered.contains_key(&format!("ev-{j}")))
                && topic_size(&s, &n.parking) == 6
        },
    )
    .await;
    for p in [1, 2] {
        let seen = registry.asked(LIMITED);
        wait_until(
            Duration::from_secs(30),
            "the partition asks again for the rate-limited id",
            || registry.asked(LIMITED) >= seen + 2,
        )
        .await;
        // Observed while it waits: nothing behind it delivered or parked.
        let a = api.audit();
        assert!(
            limited.iter().all(|id| !a.delivered.contains_key(id)),
            "the partition waits"
        );
        assert_eq!(
            c.metric("courier_schema_registry_waiting_partitions").await,
            1.0
        );
        assert_eq!(topic_size(&s, &n.parking), 6, "nothing more parked");
        phase.store(p, Ordering::SeqCst);
    }
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(
        parked_reasons(&s, &n),
        HashMap::from([("bad_schema".to_string(), 6)])
    );
    for id in REFUSED {
        assert_eq!(registry.asked(id), 1, "id {id} is asked once");
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("odd answers", &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
}
