//! What the actors ask of Kafka, as two traits: the seams between the actors
//! and librdkafka. The real clients implement them here; the actors' unit
//! tests implement them with fakes (`actors::fakes`), so rebalances, crash
//! recovery and lag checks are tested without a broker.
//!
//! * [`PartitionIo`]: the group consumer's hand on its partitions — pause,
//!   resume, store, commit, seek, read positions. Implemented by
//!   [`KafkaConsumer`](super::KafkaConsumer). Partition actors call it once
//!   per batch of completions (a store), so the actors hold it as
//!   `Arc<dyn PartitionIo>`: one indirect call, no allocation of its own.
//! * [`BrokerView`]: what the brokers say, asked on a client outside the
//!   group — offsets, committed offsets, topic ids, partition counts, and
//!   whether a range holds anything to deliver. Implemented by [`Broker`].
//!
//! Blocking calls (a network round trip) are marked; callers run them off
//! the runtime (`spawn_blocking`).

use super::detached::Detached;
use super::identity;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::Duration;

/// A Kafka call that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KafkaIoError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Refused before reaching librdkafka (a fake's refusal, in tests).
    #[error("{0}")]
    Refused(String),
    /// The broker will not describe a topic to this principal (an ACL to grant,
    /// not a topic to create).
    #[error("not authorized to describe topic `{0}` ({1}): grant this principal Describe on it (and Read, Write as docs/guide/src/requirements.md lists)")]
    NotAuthorized(String, rdkafka::types::RDKafkaErrorCode),
}

/// One position to commit, with its metadata (`core::completed`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitAt<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub metadata: &'a str,
}

/// The group consumer's hand on the partitions it owns.
pub(crate) trait PartitionIo: Send + Sync + 'static {
    /// Stops fetching the partition.
    fn pause(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError>;
    /// Fetches the partition again.
    fn resume(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError>;
    /// Stores `offset` (the next offset to read) with `metadata` for the next
    /// commit (auto-commit, or [`PartitionIo::commit`]).
    fn store(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> Result<(), KafkaIoError>;
    /// Commits these positions in one asynchronous request.
    fn commit(&self, at: &[CommitAt<'_>]) -> Result<(), KafkaIoError>;
    /// Moves the read position of the partition to `offset`. Blocking.
    fn seek(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> Result<(), KafkaIoError>;
    /// The consumer's read positions of `topic`'s assigned partitions (past
    /// control records: librdkafka moves it over them), but not past a
    /// record polled and not yet handed to the consumer actor: what is
    /// before a position has reached the actor, or will before anything it
    /// sends after reading the positions. Empty when unknown.
    fn positions(&self, topic: &str) -> HashMap<i32, i64>;
}

/// Which end of a log [`BrokerView::offsets`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogEnd {
    /// The log start (the first offset still there).
    Start,
    /// The end offset (the next offset to be written).
    End,
}

/// A group's committed position of one partition, with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// What the brokers say, asked outside the group. Every call is blocking.
pub(crate) trait BrokerView: Send + Sync + 'static {
    /// The topic's partition count; `None` when the topic does not exist
    /// (or has no partitions in the metadata).
    fn partition_count(&self, topic: &str) -> Result<Option<usize>, KafkaIoError>;
    /// The start or end offsets of `partitions` of `topic` in one request;
    /// `None` when the lookup failed (partitions it failed for are left out).
    fn offsets(&self, topic: &str, partitions: &[i32], at: LogEnd) -> Option<HashMap<i32, i64>>;
    /// The group's committed positions of `partitions` of each of `topics`
    /// (those with none are left out), in one request.
    fn committed(
        &self,
        topics: &[&str],
        partitions: &[i32],
        timeout: Duration,
    ) -> Result<Vec<Committed>, KafkaIoError>;
    /// The topics' ids (topic → id; topics it could not read are left out).
    fn topic_ids(&self, topics: &[&str], timeout: Duration) -> HashMap<String, String>;
    /// Whether `[from, to)` of the partition holds nothing to deliver (only
    /// transaction markers or aborted records): read with `read_committed`
    /// on a reader of its own. `false` when it cannot tell.
    fn nothing_to_deliver(&self, topic: &str, partition: i32, from: i64, to: i64) -> bool;
}

/// The offset a `Offset` names, if it is one.
fn offset_of(o: Offset) -> Option<i64> {
    match o {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

impl PartitionIo for super::KafkaConsumer {
    fn pause(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError> {
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition(topic, partition);
        Ok(Consumer::pause(&**self, &tpl)?)
    }

    fn resume(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError> {
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition(topic, partition);
        Ok(Consumer::resume(&**self, &tpl)?)
    }

    fn store(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> Result<(), KafkaIoError> {
        let mut tpl = TopicPartitionList::with_capacity(1);
        let mut e = tpl.add_partition(topic, partition);
        e.set_offset(Offset::Offset(offset))?;
        e.set_metadata(metadata);
        Ok(self.store_offsets(&tpl)?)
    }

    fn commit(&self, at: &[CommitAt<'_>]) -> Result<(), KafkaIoError> {
        let mut tpl = TopicPartitionList::with_capacity(at.len());
        for c in at {
            let mut e = tpl.add_partition(c.topic, c.partition);
            e.set_offset(Offset::Offset(c.offset))?;
            e.set_metadata(c.metadata);
        }
        Ok(Consumer::commit(&**self, &tpl, CommitMode::Async)?)
    }

    fn seek(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> Result<(), KafkaIoError> {
        Ok(Consumer::seek(
            &**self,
            topic,
            partition,
            Offset::Offset(offset),
            timeout,
        )?)
    }

    fn positions(&self, topic: &str) -> HashMap<i32, i64> {
        let Ok(tpl) = self.position() else {
            return HashMap::new();
        };
        // Read after the positions: a record polled before them is pending
        // here still, or handed to the actor already (ahead, in its mailbox,
        // of whatever it sends after this). Only the moment between
        // librdkafka's poll and the push into `pending` is not seen.
        let pending = self.context().first_pending(topic);
        tpl.elements_for_topic(topic)
            .iter()
            .filter_map(|e| {
                let at = offset_of(e.offset())?;
                let first = pending.get(&e.partition()).map_or(at, |&p| p.min(at));
                Some((e.partition(), first))
            })
            .collect()
    }
}

/// The real [`BrokerView`]: a consumer that never joins the group (lag
/// checks, assignment lookups), and the settings of the readers it starts
/// for [`BrokerView::nothing_to_deliver`].
///
/// A client of its own: on the group consumer's connection each
/// `ListOffsets` waits behind a long-poll `Fetch` (up to
/// `fetch.wait.max.ms`), which made the first lag check after an
/// assignment take ~12 s (docs/BENCHMARKS.md).
pub(crate) struct Broker {
    client: Detached<BaseConsumer>,
    readers: ClientConfig,
}

impl Broker {
    /// `settings`: the group consumer's; the client and its readers take them
    /// without auto-commit and without the static member id (they never join
    /// the group: they must not claim this process's member id).
    pub(crate) fn new(mut settings: ClientConfig) -> Result<Broker, KafkaError> {
        settings.set("enable.auto.commit", "false");
        settings.remove("group.instance.id");
        // Never polled for events: statistics would pile up in its queue.
        settings.remove("statistics.interval.ms");
        Ok(Broker {
            client: Detached::new(settings.create()?),
            readers: settings,
        })
    }
}

impl BrokerView for Broker {
    fn partition_count(&self, topic: &str) -> Result<Option<usize>, KafkaIoError> {
        use rdkafka::types::RDKafkaErrorCode;
        let md = self
            .client
            .fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        match t.error().map(RDKafkaErrorCode::from) {
            None => Ok(Some(t.partitions().len()).filter(|n| *n > 0)),
            // Not "missing": the broker answers so whether the topic exists or not.
            Some(
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed),
            ) => Err(KafkaIoError::NotAuthorized(topic.to_string(), code)),
            Some(_) => Ok(None),
        }
    }

    /// `offsets_for_times` with the special timestamps -1 (latest) and -2
    /// (earliest): one `ListOffsets`.
    fn offsets(&self, topic: &str, partitions: &[i32], at: LogEnd) -> Option<HashMap<i32, i64>> {
        let at = match at {
            LogEnd::Start => Offset::Beginning,
            LogEnd::End => Offset::End,
        };
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for p in partitions {
            tpl.add_partition_offset(topic, *p, at).ok()?;
        }
        let answer = self
            .client
            .offsets_for_times(tpl, Duration::from_secs(5))
            .ok()?;
        Some(
            answer
                .elements_for_topic(topic)
                .iter()
                .filter(|e| e.error().is_ok())
                .filter_map(|e| Some((e.partition(), offset_of(e.offset())?)))
                .collect(),
        )
    }

    fn committed(
        &self,
        topics: &[&str],
        partitions: &[i32],
        timeout: Duration,
    ) -> Result<Vec<Committed>, KafkaIoError> {
        let mut tpl = TopicPartitionList::with_capacity(topics.len() * partitions.len());
        for t in topics {
            for p in partitions {
                tpl.add_partition(t, *p);
            }
        }
        let answer = self.client.committed_offsets(tpl, timeout)?;
        Ok(answer
            .elements()
            .iter()
            .filter_map(|e| {
                Some(Committed {
                    topic: e.topic().to_string(),
                    partition: e.partition(),
                    offset: offset_of(e.offset())?,
                    metadata: e.metadata().to_string(),
                })
            })
            .collect())
    }

    fn topic_ids(&self, topics: &[&str], timeout: Duration) -> HashMap<String, String> {
        identity::topic_ids(&self.client, topics, timeout)
    }

    fn nothing_to_deliver(&self, topic: &str, partition: i32, from: i64, to: i64) -> bool {
        let Ok(reader) = self.readers.create::<BaseConsumer>() else {
            return false;
        };
        // Its close and destroy on a thread of their own.
        let reader = Detached::new(reader);
        identity::nothing_to_deliver(&reader, topic, partition, from, to, Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr;
    use rdkafka::Message as _;

    /// A sink that takes everything and keeps nothing.
    struct Nowhere;

    impl crate::kafka::PollSink for Nowhere {
        fn records(&self, _: Vec<crate::kafka::Record>) -> bool {
            true
        }
        fn assigned(&self, _: Vec<i32>) -> bool {
            true
        }
        fn revoked(&self, _: Vec<i32>, _: std::sync::mpsc::SyncSender<()>) -> bool {
            true
        }
        fn client_fatal(&self, _: String) {}
        fn offset_reset(&self, _: crate::core::partition::Src, _: i32, _: i64) {}
    }

    /// A record polled and still pending in the poll thread is not behind
    /// the position the lag check reads: otherwise a DLQ partition read to
    /// its end while its last records are on their way looks drained to its
    /// partition, which then frees the keys behind them
    /// (`actors::consumer::lag`; seen failing: the position was 3 with the
    /// three records pending). Against the real broker.
    #[tokio::test]
    async fn a_record_pending_in_the_poll_thread_is_not_behind_the_position() {
        let brokers = crate::kafka::test_brokers();
        let topic = format!("seams-pending-{}", std::process::id());
        courier_standins::admin::create_topics(&brokers, &[(topic.as_str(), 1)])
            .await
            .expect("create the topic");
        let spec = courier_standins::loadgen::Spec {
            count: 3,
            ..Default::default()
        };
        courier_standins::loadgen::produce(&brokers, &topic, &spec)
            .await
            .expect("produce");
        let ctx = crate::kafka::CourierContext::new(
            "main".into(),
            topic.clone(),
            Nowhere,
            Duration::from_secs(1),
            Default::default(),
            Default::default(),
        );
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &brokers)
            .set("group.id", format!("{topic}-group"))
            .set("enable.auto.commit", "false");
        let consumer: super::super::KafkaConsumer =
            Detached::new(cfg.create_with_context(ctx).expect("consumer"));
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .expect("offset");
        consumer.assign(&tpl).expect("assign");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut polled = 0;
        while polled < 3 {
            assert!(std::time::Instant::now() < deadline, "the records came");
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m.expect("a record");
                consumer.context().push(crate::kafka::Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    src: crate::core::partition::Src::Dlq,
                    key: None,
                    payload: None,
                    timestamp_ms: None,
                    headers: None,
                });
                polled += 1;
            }
        }
        assert_eq!(
            consumer.positions(&topic).get(&0),
            Some(&0),
            "all three pending: none of them is read yet"
        );
        assert!(consumer.context().flush());
        assert_eq!(
            consumer.positions(&topic).get(&0),
            Some(&3),
            "handed over: read"
        );
    }

    /// A topic the principal may not describe is named as such, not as a
    /// missing one (issue 59: the start said "does not exist: create it").
    #[test]
    fn a_topic_not_authorized_is_not_a_missing_topic() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("open", 2, 1).expect("topic");
        mock.create_topic("closed", 2, 1).expect("topic");
        mock.topic_error(
            "closed",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        )
        .expect("topic error");
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "seams-test");
        let b = Broker::new(cfg).expect("client");
        assert_eq!(b.partition_count("open").ok().flatten(), Some(2));
        assert_eq!(b.partition_count("absent").ok().flatten(), None);
        let e = b.partition_count("closed").expect_err("not authorized");
        assert!(
            e.to_string()
                .starts_with("not authorized to describe topic `closed`"),
            "{e}"
        );
    }
}
