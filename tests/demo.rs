//! `courier demo` as a newcomer runs it (`cargo run -- demo`, the README's first
//! command): its first events reach the API within 2 s of the pipeline's start,
//! its log tells only the story, and it ends with the audit at lost 0.
//!
//! The time is the demo's own: it prints a progress line every 0.5 s from the
//! moment the pipeline is asked to start, so "within 2 s" is "at most 4 lines
//! before the first one that counts a delivery" — not a wall-clock bound on a
//! busy machine.

use std::process::Command;

/// The `delivered` count of a progress line (`  1.5s  delivered   255  committed …`).
fn delivered(line: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    let t = words.next()?;
    t.strip_suffix('s')?.parse::<f64>().ok()?;
    (words.next()? == "delivered").then_some(())?;
    words.next()?.parse().ok()
}

#[test]
fn the_demo_delivers_within_two_seconds_and_loses_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg("demo")
        // The demo's own log filter, as a newcomer gets it.
        .env_remove("RUST_LOG")
        .output()
        .expect("courier demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = courier_testkit::strip_ansi(&String::from_utf8_lossy(&out.stderr));
    let both = format!("{stdout}\n--- stderr ---\n{stderr}");
    assert!(out.status.success(), "the demo failed: {both}");
    assert!(
        stdout.contains("lost = 0: every event reached the API"),
        "{both}"
    );

    let progress: Vec<u64> = stdout.lines().filter_map(delivered).collect();
    let before = progress.iter().take_while(|d| **d == 0).count();
    assert!(before < progress.len(), "nothing delivered: {both}");
    assert!(
        before <= 4,
        "{before} progress lines (one per 0.5 s) before the first delivery: {both}"
    );

    // The log: the story (the breaker, the health verdict), not what the
    // embedded cluster cannot answer.
    let noise: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot read") || l.contains("timed out") || l.contains("unknown"))
        .collect();
    assert!(
        noise.is_empty(),
        "log lines the story does not need: {noise:#?}"
    );
    assert!(
        stderr.contains("circuit breaker"),
        "the breaker's story is in the log: {both}"
    );
}
