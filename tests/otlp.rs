//! OTLP export of delivery spans against a real OpenTelemetry Collector (built
//! from the Go module proxy by scripts/otelcol.sh; `COURIER_TEST_OTELCOL` names
//! the binary, scripts/test.sh sets it). An event with a W3C `traceparent`
//! attribute gets a `deliver` span that is a child of it, exported to the
//! collector (its debug exporter prints the spans); the API receives a
//! `traceparent` naming Courier's span as its parent, in the same trace. Ends
//! with the audit: lost 0.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::sink::{Behaviour, SinkHandle};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// The collector, killed when dropped.
struct Collector {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start(port: u16) -> Collector {
        let bin = std::env::var("COURIER_TEST_OTELCOL").expect(
            "COURIER_TEST_OTELCOL must name an OpenTelemetry Collector: run \
             `export COURIER_TEST_OTELCOL=$(bash scripts/otelcol.sh)` (scripts/test.sh does)",
        );
        let dir = log_dir();
        let name = unique("otelcol");
        let cfg = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &cfg,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  debug:\n    verbosity: detailed\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [debug]\n"
            ),
        )
        .expect("collector config");
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("collector log");
        let child = Command::new(bin)
            .arg("--config")
            .arg(&cfg)
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the collector");
        Collector { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The spans the debug exporter printed, each as its `Key : value` lines.
    fn spans(&self) -> Vec<HashMap<String, String>> {
        self.log()
            .split("Span #")
            .skip(1)
            .map(|block| {
                block
                    .lines()
                    .filter_map(|l| {
                        let (k, v) = l.split_once(" : ")?;
                        Some((k.trim().to_string(), v.trim().to_string()))
                    })
                    .collect()
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_spans_are_children_of_the_events_trace_and_reach_a_collector() {
    let s = services();
    let port = free_port();
    let collector = Collector::start(port);
    wait_until(Duration::from_secs(60), "the collector listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;

    let n = Names::new("otlp", 1);
    n.create(&s, true).await;
    let p = courier_standins::loadgen::producer(&s.brokers).expect("producer");
    let mut produced = Produced::default();
    for i in 0..5 {
        let id = format!("otlp-{i}");
        let trace = if i == 0 {
            format!(r#","traceparent":"00-{TRACE_ID}-{PARENT_ID}-01""#)
        } else {
            String::new()
        };
        let value = format!(
            r#"{{"specversion":"1.0","id":"{id}","source":"/t","type":"t"{trace},"data":{{}}}}"#
        );
        let d = p
            .send(
                FutureRecord::to(&n.topic).key(&id).payload(&value),
                Timeout::After(Duration::from_secs(30)),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        produced.ids.push(id);
        produced.offsets.push((d.partition, d.offset));
    }
    let api = SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .unwrap();
    api.set_record_requests(true);
    let toml = base_toml(&n, &api.url())
        + &format!("\n[tracing]\notlp_endpoint = \"http://127.0.0.1:{port}/v1/traces\"\n");
    let mut c = Courier::start(&n.topic, &s, &toml);
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    wait_until(Duration::from_secs(30), "every event delivered", || {
        api.delivered_count() >= 5
    })
    .await;
    // Stopping flushes the exporter's last batch.
    assert_eq!(c.terminate(Duration::from_secs(30)).await, Some(0));
    wait_until(
        Duration::from_secs(30),
        "the collector printed five deliver spans",
        || {
            collector
                .spans()
                .iter()
                .filter(|s| s.get("Name").map(String::as_str) == Some("deliver"))
                .count()
                >= 5
        },
    )
    .await;

    let spans = collector.spans();
    let child = spans
        .iter()
        .find(|s| s.get("Trace ID").map(String::as_str) == Some(TRACE_ID))
        .unwrap_or_else(|| panic!("a span in the event's trace: {spans:?}"));
    assert_eq!(child["Name"], "deliver");
    assert_eq!(child["Parent ID"], PARENT_ID, "a child of the event's span");
    // The API's parent is Courier's span, in the same trace.
    let a = api.audit();
    let sent = &a.requests_sample["otlp-0"].headers["traceparent"];
    assert_eq!(sent, &format!("00-{TRACE_ID}-{}-01", child["ID"]));
    // Events without a context start their own traces, and the API hears of them.
    for i in 1..5 {
        let tp = &a.requests_sample[&format!("otlp-{i}")].headers["traceparent"];
        assert!(!tp.contains(TRACE_ID), "{tp}");
        let trace_id = &tp[3..35];
        let span = spans
            .iter()
            .find(|s| s.get("Trace ID") == Some(&trace_id.to_string()))
            .unwrap_or_else(|| panic!("otlp-{i}'s span exported: {tp}"));
        assert_eq!(span.get("Parent ID").map(String::as_str).unwrap_or(""), "");
    }
    let rep = n.audit(&s, &produced, &api);
    assert_no_loss("otlp", &rep);
    assert_eq!(rep.delivered, 5, "{rep}");
}
