//! Issue 42 item 6: one route answering 401 to everything must not make the
//! OAuth2 token a storm. Against the real OAuth2 server (ory/hydra; tokens of
//! 30 s) and two API stand-ins that accept a token while hydra's introspection
//! says it is active: the default route (`api.url`) and a tenant's route
//! (`[[api.routes]]`, one event in 100). For 30 s both answer 200; then the
//! tenant's stand-in answers 401 to every token for 60 s. Over those 60 s:
//!
//! - token requests (hydra's own count) ≤ 2 × (60 s / N) + the lifetime's
//!   refreshes, N being `api.oauth2.unauthorized_refresh_interval` at its
//!   default (10 s);
//! - the default route's throughput ≥ 0.9 × its throughput in the first 30 s.
//!   Both routes' answers take 50 ms and 8 calls are in flight at most, so the
//!   pace is the API's (≈ 160 calls/s), not the CPU's: the two windows compare
//!   on a loaded machine too.
//!
//! Then the tenant's stand-in accepts tokens again, the backlog drains, and the
//! audit: lost 0; the tenant's events of the 401 window parked `http_401`.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::loadgen;
use courier_standins::sink::{Behaviour, SinkHandle};
use courier_testkit::hydra::{AuthMethod, Hydra, OAuthClient};
use rdkafka::producer::FutureRecord;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLIENT_SECRET: &str = "client-secret-3b9e-SECRET";
/// `api.oauth2.unauthorized_refresh_interval`'s default, which the test keeps.
const N: Duration = Duration::from_secs(10);

fn hydra_bin() -> PathBuf {
    PathBuf::from(std::env::var("COURIER_TEST_HYDRA").expect(
        "COURIER_TEST_HYDRA must name an ory/hydra binary: run \
         `export COURIER_TEST_HYDRA=$(bash scripts/hydra.sh)` (scripts/test.sh does)",
    ))
}

async fn stand_in(behaviour: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().expect("addr"), behaviour)
        .await
        .expect("stand-in")
}

/// `count` events, each its own key; every `every`-th (from `every / 2` on) is
/// of type `tenant.b` (id `tb-<i>`), the others `profile.updated` (`oa-<i>`).
async fn produce_mixed(brokers: &str, topic: &str, count: usize, every: usize) -> Produced {
    let p = loadgen::producer(brokers).expect("producer");
    let mut out = Produced::default();
    let mut pending = Vec::new();
    for i in 0..count {
        let (id, ty) = if i % every == every / 2 {
            (format!("tb-{i}"), "tenant.b")
        } else {
            (format!("oa-{i}"), "profile.updated")
        };
        let value = loadgen::event_json(&id, ty, &id, i, 300);
        let fut = p
            .send_result(FutureRecord::to(topic).key(&id).payload(&value))
            .map_err(|(e, _)| e)
            .expect("enqueue");
        pending.push((id, fut));
        if pending.len() == 5_000 || i + 1 == count {
            for (id, f) in pending.drain(..) {
                let d = f
                    .await
                    .expect("delivery future")
                    .map_err(|(e, _)| e)
                    .expect("produced");
                out.ids.push(id);
                out.offsets.push((d.partition, d.offset));
            }
        }
    }
    out
}

fn config(
    n: &Names,
    api: &SinkHandle,
    tenant: &SinkHandle,
    hydra: &Hydra,
    secret: &Path,
) -> String {
    let toml = toml_with(
        n,
        &api.url(),
        "poll_interval = \"100ms\"\nbreaker_open = \"500ms\"\nmin_pause = \"200ms\"",
    )
    .replace("concurrency = 256", "concurrency = 8");
    let toml = toml.replace(
        "[pipeline]\n",
        &format!(
            "[api.oauth2]\ntoken_url = \"{}\"\nclient_id = \"courier\"\nclient_secret_file = \"{}\"\nscope = \"events\"\n\n[pipeline]\n",
            hydra.token_url(),
            secret.display()
        ),
    );
    format!(
        "{toml}\n[[api.routes]]\ntype = \"tenant.b\"\nurl = \"http://{}/routes/tenant-b/{{id}}\"\n",
        tenant.addr()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_answering_401_makes_no_token_storm_and_the_others_flow() {
    let s = services();
    let dir = log_dir().join(unique("oauth2-401-route"));
    std::fs::create_dir_all(&dir).expect("dir");
    let lifetime = Duration::from_secs(30);
    let mut hydra = Hydra::start(&hydra_bin(), &dir).await.expect("hydra");
    hydra
        .create(&OAuthClient {
            scope: Some("events".into()),
            ..OAuthClient::new("courier", CLIENT_SECRET, lifetime, AuthMethod::Basic)
        })
        .await
        .expect("client");
    secret_volume(&dir, "client-secret", 1, CLIENT_SECRET);
    let healthy = Behaviour {
        latency_ms: 50,
        introspect_url: Some(hydra.introspect_url()),
        ..Behaviour::default()
    };
    let api = stand_in(healthy.clone()).await;
    let tenant = stand_in(healthy.clone()).await;
    let n = Names::new("oauth2-401-route", 2);
    n.create(&s, true).await;
    // ≈ 160 calls/s for 90 s is ≈ 14,400 events: a backlog that outlasts both
    // windows (checked below), drained at the end without the latency.
    let count = 24_000;
    let every = 100;
    let produced = produce_mixed(&s.brokers, &n.topic, count, every).await;
    let toml = config(&n, &api, &tenant, &hydra, &dir.join("client-secret"));
    let mut c = Courier::start("oauth2-401-route", &s, &toml);
    wait_until(Duration::from_secs(60), "deliveries under way", || {
        api.delivered_count() >= 200 && tenant.delivered_count() >= 2
    })
    .await;

    // Window 1: both routes answer 200.
    let window = Duration::from_secs(30);
    let (t1, a1, k1) = (
        Instant::now(),
        api.delivered_count(),
        hydra.token_requests().await.expect("hydra count"),
    );
    tokio::time::sleep(window).await;
    let (t2, a2, k2) = (
        Instant::now(),
        api.delivered_count(),
        hydra.token_requests().await.expect("hydra count"),
    );
    // Window 2: the tenant's API refuses every token (no token it knows).
    tenant.update_behaviour(|b| b.required_token = Some("no-token-is-this-one".into()));
    let refused_before = tenant.audit().failures_total;
    tokio::time::sleep(2 * window).await;
    let (t3, a3, k3) = (
        Instant::now(),
        api.delivered_count(),
        hydra.token_requests().await.expect("hydra count"),
    );
    let refused = tenant.audit().failures_total - refused_before;
    tenant.set_behaviour(healthy.clone());
    let rate1 = (a2 - a1) as f64 / (t2 - t1).as_secs_f64();
    let rate2 = (a3 - a2) as f64 / (t3 - t2).as_secs_f64();
    let secs = (t3 - t2).as_secs_f64();
    let lifetime_refreshes = (secs / (0.8 * lifetime.as_secs_f64())).ceil() + 1.0;
    let bound = 2.0 * secs / N.as_secs_f64() + lifetime_refreshes;
    let storm_tokens = k3 - k2;
    println!(
        "[oauth2-401-route] window 1 ({:.1} s, both 200): {} delivered on the default route ({rate1:.1}/s), {} token requests; \
         window 2 ({secs:.1} s, the tenant 401): {} delivered ({rate2:.1}/s, ratio {:.3}), {storm_tokens} token requests \
         (bound {bound:.1}), {refused} answered 401",
        (t2 - t1).as_secs_f64(),
        a2 - a1,
        k2 - k1,
        a3 - a2,
        rate2 / rate1
    );
    let good = produced.ids.iter().filter(|i| i.starts_with("oa-")).count() as u64;
    assert!(
        a3 < good,
        "the backlog ran out during the windows ({a3} of {good} delivered): the rates compare nothing"
    );
    assert!(refused > 0, "the tenant's route answered 401");
    assert!(
        storm_tokens as f64 <= bound,
        "one route answering 401 made {storm_tokens} token requests in {secs:.1} s (at most {bound:.1})"
    );
    assert!(
        rate2 >= 0.9 * rate1,
        "the other route's throughput fell from {rate1:.1}/s to {rate2:.1}/s while one route answered 401"
    );

    // The rest of the backlog without the latency, then the audit.
    api.update_behaviour(|b| b.latency_ms = 0);
    tenant.update_behaviour(|b| b.latency_ms = 0);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    // The tenant's events held past `degraded.destination_hold` went to the
    // DLQ (`destination_unavailable`); they drain beside the main topic.
    n.wait_dlq_drained(&s, Duration::from_secs(180)).await;
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    let log = c.log_text();
    assert!(
        !log.contains(CLIENT_SECRET),
        "the client secret is in the log"
    );
    assert!(!log.contains("ory_at_"), "a token is in the log");
    let rep = n.audit_all(&s, &produced, &[&api, &tenant]);
    assert_no_loss("oauth2-401-route", &rep);
    assert_eq!(rep.in_dlq, 0, "{rep}");
    assert_eq!(
        rep.parked_by_reason.keys().collect::<Vec<_>>(),
        if rep.parked > 0 {
            vec!["http_401"]
        } else {
            vec![]
        },
        "only the tenant's refused events are parked, for their 401: {rep}"
    );
    for e in envelopes(&s, &n.parking) {
        let id = e.event_id.clone().unwrap_or_default();
        assert!(id.starts_with("tb-"), "{id} parked: {:?}", e.last_error);
    }
    println!("[oauth2-401-route] duplicates {}", rep.duplicates);
    hydra.stop().await.expect("hydra stops");
    api.shutdown();
    tenant.shutdown();
}
