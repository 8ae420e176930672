//! The live status page (`/status`, `/status.json`) against the real broker,
//! Redis and the API stand-in, rendered by a real headless browser (Debian's
//! Chromium; `scripts/test.sh` installs it): rows follow rebalances, and during an
//! API outage the page shows the partitions paused, the breaker open with its
//! reason, the marker this instance set and the errors by reason. The screenshot
//! is kept under `target/` as a test artifact. Ends with the no-loss audit.

mod common;

use common::*;
use courier::status_page::Snapshot;
use courier_standins::loadgen::{self, Spec};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[degraded]` for this test: `FAST`, except that the breaker stays open (and the
/// marker alive) for 30 s, long enough to render the page twice during the outage
/// whatever the machine's load.
fn degraded() -> String {
    let d = FAST
        .replace("marker_ttl = \"3s\"", "marker_ttl = \"30s\"")
        .replace("breaker_open = \"1s 500ms\"", "breaker_open = \"30s\"");
    assert!(
        d.contains("marker_ttl = \"30s\"") && d.contains("breaker_open = \"30s\""),
        "FAST changed: adapt this test's [degraded] section"
    );
    d
}

async fn status_json(port: u16) -> Option<Snapshot> {
    let url = format!("http://127.0.0.1:{port}/status.json");
    let body = reqwest::get(&url).await.ok()?.text().await.ok()?;
    serde_json::from_str(&body).ok()
}

fn status(c: &Courier) -> Option<Snapshot> {
    block(status_json(c.metrics_port))
}

/// Waits until instance `c`'s `/status.json` satisfies `cond`.
async fn wait_status(c: &Courier, timeout: Duration, what: &str, cond: impl Fn(&Snapshot) -> bool) {
    wait_until(timeout, what, || status(c).is_some_and(|st| cond(&st))).await;
}

fn partitions(s: &Option<Snapshot>) -> BTreeSet<i32> {
    s.iter()
        .flat_map(|s| s.partitions.iter().map(|p| p.partition))
        .collect()
}

/// Runs Chromium headless on `url` with a fresh profile; `mode` is `--dump-dom`
/// or `--screenshot=<path>` (plus its window size). Returns stdout.
async fn chromium(url: &str, mode: &[String], scratch: &Path) -> String {
    let profile = scratch.join(format!("profile-{:x}", rand::random::<u32>()));
    let run = tokio::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("chromium did not finish within 90 s")
        .unwrap_or_else(|e| {
            panic!("cannot run chromium ({e}): install Debian's `chromium` (scripts/test.sh does)")
        });
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium {mode:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

/// Partition rows in the rendered DOM: (partition, mode, numeric cells).
fn dom_partitions(dom: &str) -> Vec<(i32, String, Vec<String>)> {
    dom.split("<tr class=\"partition\"")
        .skip(1)
        .map(|row| {
            let row = &row[..row.find("</tr>").unwrap_or(row.len())];
            let p = between(row, "data-partition=\"", "\"")
                .and_then(|p| p.parse().ok())
                .unwrap_or(-1);
            let mode = between(row, "data-mode=\"", "\"").unwrap_or("").to_string();
            let cells = row
                .split("<td class=\"num\">")
                .skip(1)
                .filter_map(|c| c.split("</td>").next())
                .map(str::to_string)
                .collect();
            (p, mode, cells)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_a_browser_during_an_outage() {
    let s = services();
    let n = Names::new("status", 4);
    n.create(&s, true).await;
    let api = api_with_latency(40).await;
    let toml =
        toml_with(&n, &api.url(), &degraded()).replace("concurrency = 256", "concurrency = 16");
    let all: BTreeSet<i32> = (0..n.partitions).collect();

    // Rows follow the assignment: a second member takes some partitions (their
    // rows leave the first instance's page) and gives them back when it stops.
    let mut a = Courier::start(&format!("{}-a", n.topic), &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "instance a shows every partition",
        || partitions(&status(&a)) == all,
    )
    .await;
    let mut b = Courier::start(&format!("{}-b", n.topic), &s, &toml);
    wait_until(
        Duration::from_secs(60),
        "the partitions are split between a and b, each page showing only its own",
        || {
            let (pa, pb) = (partitions(&status(&a)), partitions(&status(&b)));
            !pa.is_empty()
                && !pb.is_empty()
                && pa.is_disjoint(&pb)
                && pa.union(&pb).copied().collect::<BTreeSet<_>>() == all
        },
    )
    .await;
    println!(
        "[status] split: a {:?}, b {:?}",
        partitions(&status(&a)),
        partitions(&status(&b))
    );
    b.terminate(Duration::from_secs(30)).await;
    wait_until(
        Duration::from_secs(60),
        "instance a shows every partition again",
        || partitions(&status(&a)) == all,
    )
    .await;

    // Load, then the outage.
    let spec = Spec {
        count: 4_000,
        keys: 1_000,
        id_prefix: "status".into(),
        ..Spec::default()
    };
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    wait_until(Duration::from_secs(60), "a delivers", || {
        api.delivered_count() > 300
    })
    .await;
    api.update_behaviour(|b| b.down_status = Some(503));
    wait_status(
        &a,
        Duration::from_secs(30),
        "the breaker is open and every partition paused (status.json)",
        |st| {
            st.health.breaker.state == "open"
                && st.partitions.len() == all.len()
                && st.partitions.iter().all(|p| p.mode == "paused")
        },
    )
    .await;
    let json = status(&a).expect("status.json");
    println!(
        "[status] status.json during the outage:\n{}",
        serde_json::to_string_pretty(&json).unwrap()
    );

    // The browser's view.
    let url = format!("http://127.0.0.1:{}/status", a.metrics_port);
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page");
    std::fs::create_dir_all(&artifacts).expect("artifact dir");
    let dom = chromium(&url, &["--dump-dom".into()], &artifacts).await;
    std::fs::write(artifacts.join("outage.html"), &dom).expect("write the DOM");
    let shot = artifacts.join("outage.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &url,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,900".into(),
        ],
        &artifacts,
    )
    .await;

    assert!(
        dom.contains("data-api-unavailable=\"true\">API unavailable: partitions paused"),
        "the verdict: {dom}"
    );
    assert_eq!(
        between(&dom, "id=\"breaker-state\"", "</span>").map(|t| t.ends_with(">open")),
        Some(true),
        "the breaker shows open: {dom}"
    );
    let transition = between(&dom, "id=\"breaker-transition\">", "</td>").expect("transition");
    let reason = between(transition, "<span class=\"reason\">", "</span>").expect("reason");
    assert!(
        transition.starts_with("closed → open") || transition.starts_with("half_open → open"),
        "the last breaker transition leads to open: {transition}"
    );
    assert!(
        ["failure_rate", "consecutive_failures", "probe_failed"].contains(&reason),
        "the breaker opened on the API's failures, not {reason}"
    );
    let rows = dom_partitions(&dom);
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<BTreeSet<_>>(),
        all,
        "a row per partition"
    );
    assert!(
        rows.iter().all(|r| r.1 == "paused"),
        "every partition paused: {rows:?}"
    );
    // Cells: partition, watermark, lag, held, dispatched, DLQ lag.
    let lag: i64 = rows
        .iter()
        .filter_map(|r| r.2.get(2)?.parse::<i64>().ok())
        .sum();
    assert!(lag > 0, "the backlog shows as lag: {rows:?}");
    assert!(
        dom.contains("data-source=\"breaker+marker\""),
        "Redis is up: the verdict rests on breaker and marker"
    );
    assert!(
        dom.contains("id=\"marker-state\" class=\"badge s-present\" data-state=\"present\""),
        "the marker is set: {dom}"
    );
    assert!(
        dom.contains("data-class=\"transient\" data-reason=\"http_503\""),
        "the 503s are listed among the errors: {dom}"
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot ({} bytes)",
        png.len()
    );
    println!("[status] DOM: {}", artifacts.join("outage.html").display());
    println!("[status] screenshot: {}", shot.display());

    // The API is back: the page follows, and nothing was lost.
    api.update_behaviour(|b| b.down_status = None);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    wait_status(
        &a,
        Duration::from_secs(60),
        "the breaker closed again after its probes and every partition is normal",
        |st| {
            let last = st.health.breaker.last.as_ref();
            st.health.breaker.state == "closed"
                && last.is_some_and(|t| t.reason == "probes_succeeded")
                && st.partitions.iter().all(|p| p.mode == "normal")
        },
    )
    .await;
    a.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("status", &rep);
}
