//! What a record or an answer may not grow, on batched routes (issue 54),
//! against a real broker, the API stand-in and a running Courier, each
//! ending with the audit:
//!
//! - a batched route with `{key}` in its URL and 4,000 keys: batches still
//!   group by the rendered URL, but metrics and `/status` rows are labelled
//!   by the route's name, never by a rendered value — no label and no
//!   `/status` row per key;
//! - an API answering every batch with 6 MiB (its results and padding): the
//!   answers are read within the batch's cap, not 8 MiB per request in
//!   flight, and the process's peak RSS stays bounded.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::faults::BatchFaults;
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

async fn stand_in(behaviour: Behaviour) -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().expect("addr"), behaviour)
        .await
        .expect("stand-in")
}

/// `/status.json`, if it can be read now.
async fn status(c: &Courier) -> Option<courier::status_page::Snapshot> {
    let url = format!("http://127.0.0.1:{}/status.json", c.metrics_port);
    let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
    serde_json::from_str(&text).ok()
}

/// `/metrics`, as text ("" if it cannot be read now).
async fn metrics_text(c: &Courier) -> String {
    let url = format!("http://127.0.0.1:{}/metrics", c.metrics_port);
    match reqwest::get(&url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Issue 54 item 12: a route whose URL takes `{key}` sends each key's
/// events to its own URL (a group each), and every group's split window
/// reported under its rendered URL — one `courier_batch_split_singles_ratio`
/// series and one `/status` row per key, never pruned. Batches linger 10 s,
/// so each key's one batch of a wave is answered after a window (10 s) has
/// passed; after the waves that end a window, `/metrics` and `/status` hold
/// one series and one row, the route's name, and no key anywhere (on
/// 45109fa: 4,000 rows and 4,000 series after the first wave).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_key_in_its_url_adds_no_label_or_row_per_key() {
    let s = services();
    let n = Names::new("bb-keyed", 3);
    n.create(&s, true).await;
    let api = stand_in(Behaviour::default()).await;
    let toml = toml_with(&n, &format!("http://{}/events", api.addr()), FAST).replace(
        "[pipeline]\n",
        &format!(
            "[api.batch]\nmax_events = 50\nlinger = \"10s\"\n\n\
             [[api.routes]]\nname = \"keyed\"\ntype = \"*\"\nurl = \"http://{}/batch/{{key}}\"\n\n\
             [pipeline]\n",
            api.addr()
        ),
    );
    let mut c = Courier::start("bb-keyed", &s, &toml);
    let keys = 4_000;
    let mut produced = courier_standins::audit::Produced::default();
    let mut waves = 0;
    // A wave of one event per key, delivered, until a window has ended (a
    // row on /status).
    let st = loop {
        assert!(
            waves < 4,
            "no batch_splits row on /status after {waves} waves"
        );
        let sp = Spec {
            count: keys,
            keys,
            id_prefix: format!("bbk{waves}-"),
            ..Spec::default()
        };
        let p = loadgen::produce(&s.brokers, &n.topic, &sp)
            .await
            .expect("produce");
        produced.ids.extend(p.ids);
        produced.offsets.extend(p.offsets);
        waves += 1;
        wait_all_reached(Duration::from_secs(120), &produced, &[&api]).await;
        let st = status(&c).await.expect("/status.json");
        if !st.batch_splits.is_empty() {
            break st;
        }
    };
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    let text = metrics_text(&c).await;
    c.terminate(Duration::from_secs(30)).await;
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("courier_batch_split_singles_ratio{"))
        .collect();
    println!(
        "[keyed route] {waves} waves; /status rows {}, split-ratio series {}",
        st.batch_splits.len(),
        series.len()
    );
    let rows: Vec<&str> = st.batch_splits.iter().map(|b| b.route.as_str()).collect();
    assert_eq!(
        rows.len(),
        1,
        "one /status row: {:?}",
        &rows[..rows.len().min(5)]
    );
    assert_eq!(rows, ["keyed"], "the route's name");
    assert_eq!(
        series.len(),
        1,
        "one series: {:?}",
        &series[..series.len().min(5)]
    );
    assert!(series[0].contains("route=\"keyed\""), "{}", series[0]);
    let keyed: Vec<&str> = text.lines().filter(|l| l.contains("key-")).collect();
    assert!(
        keyed.is_empty(),
        "no metric names a key: {:?}",
        &keyed[..keyed.len().min(5)]
    );
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("keyed route", &rep);
    assert_eq!(rep.delivered, produced.ids.len(), "{rep}");
    api.shutdown();
}

/// Issue 54 item 14: a batch answer was read whole up to 8 MiB, whatever the
/// batch's size, uncharged — with `pipeline.concurrency` counting requests
/// that is 8 MiB per request in flight. An API answering every batch of 50
/// with 6 MiB (results, then padding, sent slowly: the 40 batches' answers
/// are read at once): the answers are read within the batch's cap
/// (`api.batch.answer_bytes_per_event` × events + 64 KiB; past it every
/// event has "no result", `no_result_too_large`, and is sent again), and the
/// process's peak RSS (`VmHWM`) stays under 200 MB. Nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_batch_answers_are_read_within_the_batchs_cap() {
    let s = services();
    let n = Names::new("bb-huge", 3);
    n.create(&s, true).await;
    let api = stand_in(Behaviour {
        batch_faults: BatchFaults {
            answer_padding: 6 << 20,
            ..BatchFaults::default()
        },
        ..Behaviour::default()
    })
    .await;
    let sp = Spec {
        count: 2_000,
        keys: 2_000,
        id_prefix: "bbh".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &sp)
        .await
        .expect("produce");
    // Every batch in flight at once (256 requests), and time to read a
    // whole answer on a busy machine.
    let toml = toml_with(&n, &format!("http://{}/batch", api.addr()), FAST)
        .replace(
            "retry_budget = \"500ms\"\n",
            "retry_budget = \"500ms\"\nrequest_timeout = \"30s\"\nadaptive_concurrency = false\n",
        )
        .replace(
            "[pipeline]\n",
            "[api.batch]\nmax_events = 50\nlinger = \"20ms\"\nresults = \"/items\"\nresult_id = \"/id\"\n\n[pipeline]\n",
        );
    let mut c = Courier::start("bb-huge", &s, &toml);
    wait_all_reached(Duration::from_secs(120), &produced, &[&api]).await;
    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    let peak = c.peak_rss().expect("the process runs");
    let too_large = c
        .metric("courier_batch_results_unreadable_total{reason=\"too_large\"")
        .await;
    c.terminate(Duration::from_secs(30)).await;
    println!(
        "[huge answers] peak RSS {} MiB; answers over the cap {too_large}",
        peak >> 20
    );
    assert!(peak < 200 << 20, "peak RSS {} MiB", peak >> 20);
    assert!(too_large > 0.0, "the answers over the cap are counted");
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("huge answers", &rep);
    api.shutdown();
}
