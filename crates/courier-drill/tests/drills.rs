//! The chaos drills' CI version: `courier-drill --short --scenario all` against the
//! real services (scripts/services.sh), every scenario ending in the no-loss audit.
//! Toxiproxy is installed on demand by scripts/toxiproxy.sh; when it cannot be, the
//! partition scenario fails and so does this test (never skipped silently).
//! `hostile` (issue 23: a 403 tenant, a non-UTF-8 header name, the topic
//! recreated, events deleted unread) runs last.
//!
//! The drill runs the `courier` binary beside its own (`target/<profile>/courier`):
//! this test lives in the drill's crate, which cannot name another package's
//! binary. `cargo test --workspace` (scripts/test.sh) builds both in the same run;
//! `cargo test -p courier-drill` alone needs `cargo build --bin courier` first.

use std::process::Command;

#[test]
fn short_drill_sequence_loses_nothing() {
    assert!(
        std::env::var("COURIER_TEST_BROKERS").is_ok(),
        "COURIER_TEST_BROKERS is not set: run the tests through scripts/test.sh (it starts Kafka, Redis and PostgreSQL)"
    );
    let json = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("drill-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let drill = std::path::Path::new(env!("CARGO_BIN_EXE_courier-drill"));
    let courier = drill.with_file_name(format!("courier{}", std::env::consts::EXE_SUFFIX));
    assert!(
        courier.is_file(),
        "no Courier binary at {}: build it first (`cargo build --bin courier --features test-hooks`) or run `cargo test --workspace`",
        courier.display()
    );
    let status = Command::new(drill)
        .args(["--short", "--scenario", "all", "--json"])
        .arg(&json)
        .arg("--courier")
        .arg(&courier)
        .status()
        .expect("run courier-drill");
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "no drill summary at {} ({e}); drill exit {status}",
            json.display()
        )
    });
    let report: serde_json::Value = serde_json::from_str(&text).expect("drill summary is JSON");
    let scenarios = report["scenarios"].as_array().expect("scenarios");
    let names: Vec<&str> = scenarios
        .iter()
        .filter_map(|s| s["scenario"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "api-outage",
            "api-flap",
            "api-401",
            "redis",
            "kafka-restart",
            "kill-instances",
            "partition-one",
            "rolling-restart",
            "poison-storm",
            "crash-cost",
            "partial-api",
            "destination-outage",
            "order",
            "hostile"
        ],
        "every scenario ran, in order"
    );
    for s in scenarios {
        let name = s["scenario"].as_str().unwrap_or("?");
        assert_eq!(s["lost"], 0, "[{name}] lost events: {}", s["lost_sample"]);
        assert!(
            s["produced"].as_u64().unwrap_or(0) > 0,
            "[{name}] produced nothing"
        );
        assert_eq!(
            s["ok"], true,
            "[{name}] failed: error {}, checks {}",
            s["error"], s["checks"]
        );
    }
    assert_eq!(report["total_lost"], 0);
    assert!(status.success(), "courier-drill exited with {status}");
}
