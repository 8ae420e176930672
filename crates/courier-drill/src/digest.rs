//! What a failed scenario leaves in CI's output: a digest of each instance's log
//! and of the broker's, printed to stderr. CI keeps a failed run's output but not
//! the files the drill wrote, so without it a flaky scenario is a number with no
//! evidence (the `kafka-restart` failure of 2026-12-03: 4,189 of 5,100 events not
//! delivered within the settle timeout, and nothing left to read why).
//!
//! Per log: WARN and ERROR lines grouped by their text with digits blanked (count,
//! first and last time), then the last group-membership lines (assignments,
//! revokes, session time-outs, joins) as they are.

use std::collections::HashMap;
use std::path::Path;

/// Distinct WARN/ERROR texts shown per log, most frequent first.
const TOP: usize = 15;
/// Group-membership lines shown per log, the last ones.
const MEMBERSHIP: usize = 12;
/// Characters of a line kept.
const WIDTH: usize = 300;

/// Prints the digest of every instance log of `scenario` in `log_dir`, and of
/// the broker's log under the services' state directory.
pub fn print(scenario: &str, log_dir: &Path) {
    let mut logs: Vec<_> = std::fs::read_dir(log_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "log")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{scenario}-i")))
        })
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("[drill] ── digest of {} ──", log.display());
        for line in digest(&text, &["WARN", "ERROR"], is_membership) {
            eprintln!("[drill]   {line}");
        }
    }
    let state = std::env::var("COURIER_STATE").unwrap_or_else(|_| "/tmp/courier-services".into());
    let broker = Path::new(&state).join("kafka/kafka.log");
    if let Ok(text) = std::fs::read_to_string(&broker) {
        eprintln!("[drill] ── digest of {} ──", broker.display());
        for line in digest(&text, &["WARN", "ERROR"], is_broker_milestone) {
            eprintln!("[drill]   {line}");
        }
    }
}

fn is_membership(line: &str) -> bool {
    [
        "partitions assigned",
        "partitions revoked",
        "SESSTMOUT",
        "MAXPOLL",
        "JOIN", // REJOIN too
        "consumer started",
        "first assignment",
        "exiting",
        "fatal",
    ]
    .iter()
    .any(|m| line.contains(m))
}

fn is_broker_milestone(line: &str) -> bool {
    [
        "Transition from",
        "started (kafka",
        "Preparing to rebalance",
        "Stabilized group",
    ]
    .iter()
    .any(|m| line.contains(m))
}

/// The digest's lines: grouped WARN/ERROR texts, then the last lines `keep`
/// picks.
fn digest(text: &str, levels: &[&str], keep: fn(&str) -> bool) -> Vec<String> {
    struct Seen {
        count: usize,
        first: String,
        last: String,
        order: usize,
    }
    let mut groups: HashMap<String, Seen> = HashMap::new();
    let mut kept: Vec<String> = Vec::new();
    for raw in text.lines() {
        let line = courier_testkit::strip_ansi(raw);
        // `2026-…Z` (Courier) or `[2026-12-03 14:28:12,084]` (the broker).
        let time = match line.strip_prefix('[').and_then(|r| r.split_once(']')) {
            Some((t, _)) => format!("[{t}]"),
            None => line.split_whitespace().next().unwrap_or("").to_string(),
        };
        if levels.iter().any(|l| line.contains(&format!(" {l} "))) {
            // Numbers blanked (a run of digits is one `#`): the same message
            // with other offsets, ports or durations is one group.
            let mut shape = String::new();
            for c in line.get(time.len()..).unwrap_or("").trim_start().chars() {
                if !c.is_ascii_digit() {
                    shape.push(c);
                } else if !shape.ends_with('#') {
                    shape.push('#');
                }
                if shape.len() >= WIDTH {
                    break;
                }
            }
            let n = groups.len();
            let g = groups.entry(shape).or_insert_with(|| Seen {
                count: 0,
                first: time.clone(),
                last: time.clone(),
                order: n,
            });
            g.count += 1;
            g.last = time;
        }
        if keep(&line) {
            kept.push(line.chars().take(WIDTH).collect());
        }
    }
    let mut top: Vec<_> = groups.into_iter().collect();
    top.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.1.order.cmp(&b.1.order)));
    let mut out: Vec<String> = top
        .iter()
        .take(TOP)
        .map(|(shape, s)| format!("{:>6} × {} … {} {shape}", s.count, s.first, s.last))
        .collect();
    if top.len() > TOP {
        out.push(format!("({} more distinct warnings)", top.len() - TOP));
    }
    let from = kept.len().saturating_sub(MEMBERSHIP);
    out.extend(kept.drain(from..));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_warnings_by_shape_and_keeps_the_last_membership_lines() {
        let log = "\u{1b}[2m2026-12-03T14:22:54.3Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m kafka: refused after 12ms\n\
                   2026-12-03T14:22:55.1Z  WARN kafka: refused after 0ms\n\
                   2026-12-03T14:22:56.0Z  INFO courier::kafka: partitions assigned partitions=[0]\n\
                   2026-12-03T14:22:57.0Z ERROR x: boom\n";
        let d = digest(log, &["WARN", "ERROR"], is_membership);
        assert_eq!(d.len(), 3, "{d:#?}");
        assert!(
            d[0].starts_with("     2 × 2026-12-03T14:22:54.3Z … 2026-12-03T14:22:55.1Z"),
            "{}",
            d[0]
        );
        assert!(d[0].ends_with("WARN kafka: refused after #ms"), "{}", d[0]);
        assert!(d[1].contains("ERROR x: boom"), "{}", d[1]);
        assert!(d[2].contains("partitions assigned"), "{}", d[2]);
    }
}
