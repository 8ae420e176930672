//! `courier dlq replay` on 10,000 parked events, as a script or a CI job sees it
//! (stderr not a terminal): plain progress lines while it writes, a summary at
//! the end, and on Ctrl-C (SIGINT) a clean stop with a summary of what was
//! written; run again, it replays the rest (the replay log makes it continue).
//! Ends with the audit: every event delivered, none lost.

mod common;

use common::*;
use courier_standins::loadgen::{self, Spec};
use courier_standins::sink::{Behaviour, SinkHandle};
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const EVENTS: usize = 10_000;

/// `replay: read …, matched …, written N/10000, …`: N.
fn written(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("replay: ")?;
    let w = rest.split(", ").find_map(|p| p.strip_prefix("written "))?;
    w.split('/').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_shows_progress_and_stops_cleanly_on_ctrl_c() {
    let s = services();
    let n = Names::new("progress", 3);
    n.create(&s, true).await;
    let spec = Spec {
        count: EVENTS,
        keys: EVENTS,
        id_prefix: "progress".into(),
        ..Spec::default()
    };
    // The API refuses every event with 400 (a bug on its side): all parked.
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_rate: 1.0,
            fail_status: 400,
            ..Behaviour::default()
        },
    )
    .await
    .unwrap();
    let produced = loadgen::produce(&s.brokers, &n.topic, &spec).await.unwrap();
    // No park-flood guard: 10,000 refusals in a row are the point here.
    let degraded =
        "dlq_backoff_base = \"1h\"\ndlq_backoff_cap = \"1h\"\nflood_parked_per_sec = 0.0";
    let toml = toml_with(&n, &api.url(), degraded);
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(180)).await;
    assert_eq!(topic_size(&s, &n.parking), EVENTS as i64, "all parked");
    let cfg = log_dir().join(format!("{}-cli.toml", n.topic));
    std::fs::write(&cfg, &toml).unwrap();
    api.set_behaviour(Behaviour::default());

    // Ctrl-C while it writes: the event being written is finished, no other
    // begins, and the summary says how many were replayed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["dlq", "replay", "--yes", "--rate", "400", "--config"])
        .arg(&cfg)
        .env("COURIER__KAFKA__BROKERS", &s.brokers)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run courier dlq replay");
    let pid = child.id();
    let stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut interrupted = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !interrupted && written(&line).is_some_and(|w| w > 0) {
                // The first progress line that counts a written event.
                let _ = Command::new("kill")
                    .args(["-INT", &pid.to_string()])
                    .status();
                interrupted = true;
            }
            lines.push(line);
        }
        lines
    });
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .expect("replay ends");
    let progress = reader.join().expect("stderr read");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let both = format!("{stdout}\n--- stderr ---\n{}", progress.join("\n"));
    assert_eq!(out.status.code(), Some(130), "interrupted: {both}");
    assert!(
        progress.iter().any(|l| written(l).is_some()),
        "plain progress lines on stderr: {both}"
    );
    let first: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("replayed ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("a summary of what was written: {both}"));
    assert!(first > 0 && first < EVENTS, "{first} of {EVENTS}: {both}");
    assert!(
        stdout.contains(&format!(
            "interrupted (Ctrl-C) after {first} of {EVENTS} events"
        )),
        "{both}"
    );

    // Again: it continues where it stopped, with progress lines and a summary.
    let (code, stdout, stderr) =
        courier_cli_env(&s, &cfg, &["dlq", "replay", "--yes", "--rate", "2000"], &[]);
    let both = format!("{stdout}\n--- stderr ---\n{stderr}");
    assert_eq!(code, 0, "{both}");
    assert!(
        stdout.contains(&format!("{} to replay", EVENTS - first))
            && stdout.contains(&format!("{first} already replayed")),
        "{both}"
    );
    assert!(
        stdout.contains(&format!("replayed {} events", EVENTS - first)),
        "{both}"
    );
    let lines: Vec<u64> = stderr.lines().filter_map(written).collect();
    assert!(!lines.is_empty(), "progress lines: {both}");
    assert_eq!(
        lines.last(),
        Some(&((EVENTS - first) as u64)),
        "the last line counts every event written: {both}"
    );

    n.wait_committed_to_end(&s, Duration::from_secs(120)).await;
    wait_until(Duration::from_secs(60), "replayed events delivered", || {
        api.audit().delivered.len() == EVENTS
    })
    .await;
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("replay-progress", &rep);
}
