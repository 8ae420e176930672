//! Reference 2, the classic loop: consume one event, POST it, commit synchronously,
//! one at a time. Its rate is about 1 / (API round trip + commit round trip),
//! whatever the hardware: the thing Courier exists to beat.

use crate::procs::{cpu_seconds, Pid};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct ClassicResult {
    pub latency_ms: u64,
    pub events: u64,
    pub failures: u64,
    pub secs: f64,
    pub events_per_s: f64,
    pub cpu_us_per_event: Option<f64>,
}

pub(crate) struct Classic<'a> {
    pub brokers: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    pub url: &'a str,
    pub max_events: u64,
    pub max: Duration,
    pub ticks: f64,
    pub transport: crate::ceiling::Transport,
}

impl Classic<'_> {
    /// Runs on the calling (blocking) thread; HTTP calls go through `rt`.
    /// Timed from the first consumed event (group join excluded) to the last commit.
    pub(crate) fn run(&self, rt: &tokio::runtime::Handle) -> anyhow::Result<ClassicResult> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers)
            .set("group.id", self.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()?;
        consumer.subscribe(&[self.topic])?;
        let client = crate::ceiling::client(self.url, 1, &self.transport)?;
        let join_deadline = Instant::now() + Duration::from_secs(60);
        let mut started: Option<(Instant, Option<f64>)> = None;
        let (mut events, mut failures) = (0u64, 0u64);
        let mut last = Instant::now();
        loop {
            if let Some((t0, _)) = started {
                if events + failures >= self.max_events || t0.elapsed() >= self.max {
                    break;
                }
            } else if Instant::now() > join_deadline {
                anyhow::bail!("classic loop: no event within 60 s of subscribing");
            }
            let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let msg = msg?;
            if started.is_none() {
                started = Some((Instant::now(), cpu_seconds(Pid::SelfProcess, self.ticks)));
            }
            let body = msg.payload().map(<[u8]>::to_vec).unwrap_or_default();
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("id")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            let ok = rt.block_on(async {
                client
                    .post(&id, bytes::Bytes::from(body), None)
                    .await
                    .is_ok_and(|a| (200..300).contains(&a.status))
            });
            consumer.commit_message(&msg, CommitMode::Sync)?;
            last = Instant::now();
            if ok {
                events += 1;
            } else {
                failures += 1;
            }
        }
        let (t0, cpu0) = started.unwrap_or((last, None));
        let secs = last.duration_since(t0).as_secs_f64().max(1e-9);
        let cpu = cpu_seconds(Pid::SelfProcess, self.ticks)
            .zip(cpu0)
            .map(|(b, a)| b - a);
        let done = events + failures;
        Ok(ClassicResult {
            latency_ms: 0,
            events,
            failures,
            secs,
            events_per_s: done as f64 / secs,
            cpu_us_per_event: cpu.filter(|_| done > 0).map(|c| c * 1e6 / done as f64),
        })
    }
}
