//! The group consumer's context: where the poll thread hands records and
//! rebalances ([`PollSink`]), and the rebalance and commit callbacks that run
//! inside `poll()` ([`CourierContext`], I6).

use super::{client_log, poller, Record};
use crate::core::group_watch::{GroupWatch, Observed};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientContext;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the poll thread hands records and rebalances, in order (the consumer
/// actor's mailbox: see `actors::consumer`). Each returns `false` when the
/// receiver is gone.
pub(crate) trait PollSink: Send + Sync {
    fn records(&self, records: Vec<Record>) -> bool;
    fn assigned(&self, partitions: Vec<i32>) -> bool;
    /// Called from inside the revoke callback, which then waits on `ack`.
    fn revoked(&self, partitions: Vec<i32>, ack: std::sync::mpsc::SyncSender<()>) -> bool;
    /// An auto-commit request was answered (for the commit count); called on
    /// the poll thread, so it must not block.
    fn auto_committed(&self) {}
    /// The client hit a fatal error (librdkafka: e.g. a static member fenced by
    /// another with its `group.instance.id`): this consumer never fetches or
    /// commits again; or the poll thread panicked (the client itself is fine:
    /// the shutdown still commits). Called once, from the poll thread, which
    /// then stops.
    fn client_fatal(&self, reason: String);
    /// librdkafka moved a partition's position after its fetch at `at` was
    /// out of range (`dlq`: of the DLQ topic). Called from librdkafka's
    /// threads, in no order with the records: must not block.
    fn offset_reset(&self, src: crate::core::partition::Src, partition: i32, at: i64);
}

/// Rebalance callbacks run on the poll thread, inside `poll()`. On revoke they hand
/// the partitions to the consumer actor and wait (bounded) for it to drain and store,
/// then commit synchronously: the last moment the partitions are ours.
pub(crate) struct CourierContext {
    pub topic: String,
    pub dlq_topic: String,
    pub actor: Box<dyn PollSink>,
    pub revoke_wait: Duration,
    /// Set during shutdown: the actor is busy closing and must not be waited for.
    pub closing: Arc<AtomicBool>,
    /// Records polled but not yet handed to the actor. They live here, not in the
    /// poll loop, so a rebalance callback can hand them over *before* it reports the
    /// rebalance: a record of the old assignment must never reach a partition actor
    /// of the new one (it would make its tracker start past unread offsets).
    pub pending: Mutex<Vec<Record>>,
    /// Records handed to the actors and not yet taken in by a partition actor,
    /// and their bytes (shared with the actors, see `Pipeline::buffered`). The
    /// poll thread stops fetching while it is over `pipeline.max_buffered` or
    /// `pipeline.max_buffered_bytes`: actor mailboxes are unbounded, so this is
    /// what keeps a large backlog out of memory.
    pub buffered: Arc<poller::Buffered>,
    /// When a failed auto-commit was last logged (ms since the epoch).
    commit_warned_ms: AtomicI64,
    /// Whether the consumer is stuck outside its group, from librdkafka's
    /// statistics (`core::group_watch`); `None`: not watched.
    group_watch: Option<Mutex<GroupWatch>>,
}

impl CourierContext {
    pub(crate) fn new(
        topic: String,
        dlq_topic: String,
        actor: impl PollSink + 'static,
        revoke_wait: Duration,
        closing: Arc<AtomicBool>,
        buffered: Arc<poller::Buffered>,
    ) -> Self {
        CourierContext {
            topic,
            dlq_topic,
            actor: Box::new(actor),
            revoke_wait,
            closing,
            pending: Mutex::new(Vec::new()),
            buffered,
            commit_warned_ms: AtomicI64::new(0),
            group_watch: None,
        }
    }

    /// Watches the group membership in librdkafka's statistics (which
    /// `statistics.interval.ms` makes it report): outside a settled group
    /// for longer than `limit` with a broker up, the consumer is declared
    /// dead like one with a fatal error (`core::group_watch`, I26).
    pub(crate) fn watching_the_group(mut self, limit: Duration) -> Self {
        self.group_watch = Some(Mutex::new(GroupWatch::new(limit)));
        self
    }

    /// Hands pending records to the actor; `false` when the actor is gone.
    pub(crate) fn flush(&self) -> bool {
        let records = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.is_empty() {
                return true;
            }
            std::mem::take(&mut *p)
        };
        let bytes = records.iter().map(Record::size).sum();
        self.buffered.add(records.len(), bytes);
        self.actor.records(records)
    }

    /// Adds a polled record; returns the number pending.
    pub(crate) fn push(&self, r: Record) -> usize {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push(r);
        p.len()
    }

    /// The offset of the first record still pending here (polled, not
    /// handed to the actor) of each of `topic`'s partitions.
    pub(crate) fn first_pending(&self, topic: &str) -> HashMap<i32, i64> {
        let src = if topic == self.dlq_topic {
            crate::core::partition::Src::Dlq
        } else {
            crate::core::partition::Src::Main
        };
        let mut first = HashMap::new();
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for r in p.iter().filter(|r| r.src == src) {
            first.entry(r.partition).or_insert(r.offset);
        }
        first
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl ClientContext for CourierContext {
    /// librdkafka's log lines (called from its threads: must not block). An
    /// offset reset after a failed fetch is handed to the actor too: the
    /// records between the position and the new one were deleted unread.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        client_log::emit(level, fac, message);
        if let Some(r) = client_log::offset_reset(fac, message) {
            use crate::core::partition::Src;
            let src = if r.topic == self.dlq_topic {
                Some(Src::Dlq)
            } else {
                (r.topic == self.topic).then_some(Src::Main)
            };
            if let Some(src) = src {
                self.actor.offset_reset(src, r.partition, r.at);
            }
        }
    }

    /// librdkafka's statistics (on the poll thread, every
    /// `statistics.interval.ms`): only the group's state and the brokers'
    /// are read, for the group watch.
    fn stats_raw(&self, statistics: &[u8]) {
        let Some(watch) = &self.group_watch else {
            return;
        };
        let Some(observed) = group_observed(statistics) else {
            return;
        };
        let stuck = watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(std::time::Instant::now(), observed);
        if let Some(stuck) = stuck {
            self.actor.client_fatal(format!(
                "the Kafka consumer has not been a settled member of its group for {}s while a broker answers (librdkafka's join state is not steady): it is declared dead, and a restart joins afresh",
                stuck.as_secs()
            ));
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if reason.to_ascii_lowercase().contains("fenced") {
            tracing::error!(%error, reason, "fenced: another process joined the group with this kafka.instance_id (give each instance its own, e.g. the pod name), or this one's commits arrived after its session had timed out");
        } else {
            tracing::warn!(%error, reason, "kafka client error");
        }
    }
}

/// The group's state and the brokers' in librdkafka's statistics JSON
/// (`cgrp.join_state`; `brokers.*.state` of real brokers, `nodeid` ≥ 0).
/// `None`: no group in them (not a group consumer), or unreadable.
fn group_observed(statistics: &[u8]) -> Option<Observed> {
    #[derive(serde::Deserialize)]
    struct Stats {
        cgrp: Option<Cgrp>,
        #[serde(default)]
        brokers: HashMap<String, Broker>,
    }
    #[derive(serde::Deserialize)]
    struct Cgrp {
        join_state: String,
    }
    #[derive(serde::Deserialize)]
    struct Broker {
        state: String,
        nodeid: i64,
    }
    let stats: Stats = serde_json::from_slice(statistics).ok()?;
    let cgrp = stats.cgrp?;
    Some(Observed {
        settled: cgrp.join_state == "steady",
        broker_up: stats
            .brokers
            .values()
            .any(|b| b.nodeid >= 0 && b.state == "UP"),
    })
}

impl CourierContext {
    /// Commit failures repeat at every commit interval while their cause
    /// lasts (the coordinator away): one line per 10 s says so.
    fn commit_warning_due(&self) -> bool {
        let now = crate::clock::now_ms();
        let last = self.commit_warned_ms.load(Ordering::Relaxed);
        now - last >= 10_000
            && self
                .commit_warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Partition indices of the main topic and the DLQ (pairs share an index).
    fn partitions_of(&self, tpl: &rdkafka::TopicPartitionList) -> Vec<i32> {
        let mut v: Vec<i32> = tpl
            .elements()
            .iter()
            .filter(|e| e.topic() == self.topic || e.topic() == self.dlq_topic)
            .map(|e| e.partition())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl ConsumerContext for CourierContext {
    /// Reports auto-commits (librdkafka reports only those here: Courier's
    /// explicit commits are asynchronous without a callback and are counted
    /// where they are made); one with nothing to commit sends no request.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &rdkafka::TopicPartitionList,
    ) {
        match result {
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Ok(()) => {
                self.actor.auto_committed();
                // The request landed, but the broker may refuse partitions one
                // by one (metadata too large, a partition not the group's):
                // those positions did not move, and nothing else says so.
                let refused: Vec<(String, i32, String)> = offsets
                    .elements()
                    .iter()
                    .filter_map(|e| {
                        e.error()
                            .err()
                            .map(|err| (e.topic().to_string(), e.partition(), err.to_string()))
                    })
                    .collect();
                if let Some((topic, partition, error)) = refused.first() {
                    if self.commit_warning_due() {
                        tracing::warn!(
                            %topic,
                            partition,
                            %error,
                            refused = refused.len(),
                            "offset commit refused for some partitions: work finished since their last commit that landed is delivered again if they move before one does"
                        );
                    }
                }
            }
            Err(e) => {
                self.actor.auto_committed();
                if self.commit_warning_due() {
                    tracing::warn!(error = %e, "offset commit failed: work finished since the last commit that landed is delivered again if the partition moves before one does");
                }
            }
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.flush();
            let partitions = self.partitions_of(tpl);
            tracing::info!(?partitions, "partitions revoked: draining");
            if self.closing.load(Ordering::SeqCst) {
                stuck_close_hook();
            }
            if !self.closing.load(Ordering::SeqCst) && !partitions.is_empty() {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                if self.actor.revoked(partitions.clone(), tx)
                    && rx.recv_timeout(self.revoke_wait).is_err()
                {
                    tracing::warn!("revoke drain did not finish in time; in-flight events will be redelivered to the new owner");
                }
            }
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) => {}
                // Nothing new was stored since the last commit.
                Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, ?partitions, "commit on revoke failed: the new owners deliver again what finished since the last commit that landed")
                }
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                self.flush();
                let partitions = self.partitions_of(tpl);
                tracing::info!(?partitions, "partitions assigned");
                self.actor.assigned(partitions);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::error!(error = %e, "rebalance error"),
        }
    }
}

/// Test fault hook (environment `COURIER_TEST_HOOK_STUCK_CLOSE=1`, only in
/// a build with the cargo feature `test-hooks`): the revoke callback of the
/// consumer's close never returns, as a librdkafka close that never ends
/// (the shutdown of issue 42, finding 5, after a topic recreation). A
/// fault a real broker cannot be made to produce on demand.
#[cfg(feature = "test-hooks")]
fn stuck_close_hook() {
    if std::env::var_os("COURIER_TEST_HOOK_STUCK_CLOSE").is_some_and(|v| v == "1") {
        tracing::warn!("test fault hook: the consumer's close never ends");
        loop {
            std::thread::park();
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn stuck_close_hook() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of librdkafka 2.12's statistics the watch reads (trimmed
    /// from a real report: a bootstrap entry, a real broker, the group).
    const STATS: &str = r#"{"name":"rdkafka#consumer-1","type":"consumer","ts":1,
        "brokers":{"127.0.0.1:9092/bootstrap":{"name":"127.0.0.1:9092/bootstrap","nodeid":-1,"state":"UP"},
                   "127.0.0.1:9092/1":{"name":"127.0.0.1:9092/1","nodeid":1,"state":"UP","rtt":{"avg":1}}},
        "topics":{},
        "cgrp":{"state":"up","stateage":1,"join_state":"steady","rebalance_age":1,"rebalance_cnt":1,"assignment_size":2}}"#;

    #[test]
    fn the_group_and_the_brokers_are_read_from_the_statistics() {
        assert_eq!(
            group_observed(STATS.as_bytes()),
            Some(Observed {
                settled: true,
                broker_up: true
            })
        );
        let joining = STATS
            .replace(r#""join_state":"steady""#, r#""join_state":"wait-join""#)
            .replace(r#""nodeid":1,"state":"UP""#, r#""nodeid":1,"state":"DOWN""#);
        assert_eq!(
            group_observed(joining.as_bytes()),
            Some(Observed {
                settled: false,
                broker_up: false
            }),
            "a bootstrap connection is no broker"
        );
        assert_eq!(group_observed(br#"{"brokers":{}}"#), None, "no group");
        assert_eq!(group_observed(b"not json"), None);
    }

    /// librdkafka's own statistics say what the watch reads: a consumer that
    /// joined its group reports itself settled, its broker up (field names
    /// and values as librdkafka 2.12 writes them). Against the real broker.
    #[tokio::test]
    async fn a_member_of_its_group_reads_as_settled_in_real_statistics() {
        for protocol in ["classic", "consumer"] {
            settles_in_statistics(protocol).await;
        }
    }

    /// A member of a group of `protocol` (KIP-848's `consumer` too) reads as
    /// settled in librdkafka's statistics.
    async fn settles_in_statistics(protocol: &str) {
        use rdkafka::config::ClientConfig;
        struct Keep(Mutex<Option<Vec<u8>>>);
        impl ClientContext for Keep {
            fn stats_raw(&self, statistics: &[u8]) {
                *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(statistics.to_vec());
            }
        }
        impl ConsumerContext for Keep {}
        let brokers = crate::kafka::test_brokers();
        let topic = format!("group-watch-{protocol}-{}", std::process::id());
        // A consumer whose topic does not exist never joins (`init`):
        // Courier refuses to start without its topics (I31).
        courier_standins::admin::create_topics(&brokers, &[(topic.as_str(), 1)])
            .await
            .expect("create the topic");
        let consumer: BaseConsumer<Keep> = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", format!("{topic}-group"))
            .set("statistics.interval.ms", "100")
            .set("group.protocol", protocol)
            .create_with_context(Keep(Mutex::new(None)))
            .expect("consumer");
        consumer.subscribe(&[&topic]).expect("subscribe");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let _ = consumer.poll(Duration::from_millis(100));
            let stats = consumer
                .context()
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let observed = stats.as_deref().and_then(group_observed);
            if observed
                == Some(Observed {
                    settled: true,
                    broker_up: true,
                })
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{protocol}: never settled in the statistics: {observed:?} {}",
                String::from_utf8_lossy(stats.as_deref().unwrap_or_default())
                    .split("\"cgrp\"")
                    .nth(1)
                    .unwrap_or("")
            );
        }
    }
}
