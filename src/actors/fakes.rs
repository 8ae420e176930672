//! Fakes of the Kafka seams (`kafka::seams`) for the actors' unit tests: no
//! broker, every call recorded, every answer set by the test. In the manner
//! of Quickwit's actor test mailboxes: the test drives an actor through its
//! messages and looks at what it asked of the outside.

use crate::kafka::seams::{BrokerView, CommitAt, Committed, KafkaIoError, LogEnd, PartitionIo};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What a partition actor or the consumer asked of the group consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IoCall {
    Pause(String, i32),
    Resume(String, i32),
    Store {
        topic: String,
        partition: i32,
        offset: i64,
        metadata: String,
    },
    Commit(Vec<(String, i32, i64, String)>),
    Seek(String, i32, i64),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A group consumer that records what it is asked.
#[derive(Default)]
pub(crate) struct FakeIo {
    calls: Mutex<Vec<IoCall>>,
    /// topic → partition → read position.
    positions: Mutex<HashMap<String, HashMap<i32, i64>>>,
    /// The next store panics (a partition actor crashing mid-work).
    crash_next_store: AtomicBool,
}

impl FakeIo {
    pub(crate) fn calls(&self) -> Vec<IoCall> {
        lock(&self.calls).clone()
    }

    pub(crate) fn set_position(&self, topic: &str, partition: i32, at: i64) {
        lock(&self.positions)
            .entry(topic.to_string())
            .or_default()
            .insert(partition, at);
    }

    pub(crate) fn crash_next_store(&self) {
        self.crash_next_store.store(true, Ordering::SeqCst);
    }

    /// The stores of one partition of `topic`, in order: (offset, metadata).
    pub(crate) fn stores(&self, topic: &str, partition: i32) -> Vec<(i64, String)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                IoCall::Store {
                    topic: t,
                    partition: p,
                    offset,
                    metadata,
                } if t == topic && p == partition => Some((offset, metadata)),
                _ => None,
            })
            .collect()
    }

    /// Whether fetching `topic`/`partition` was last resumed (`Some(true)`),
    /// paused (`Some(false)`), or never touched.
    pub(crate) fn reading(&self, topic: &str, partition: i32) -> Option<bool> {
        self.calls().into_iter().rev().find_map(|c| match c {
            IoCall::Pause(t, p) if t == topic && p == partition => Some(false),
            IoCall::Resume(t, p) if t == topic && p == partition => Some(true),
            _ => None,
        })
    }

    fn record(&self, c: IoCall) {
        lock(&self.calls).push(c);
    }
}

impl PartitionIo for FakeIo {
    fn pause(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError> {
        self.record(IoCall::Pause(topic.into(), partition));
        Ok(())
    }

    fn resume(&self, topic: &str, partition: i32) -> Result<(), KafkaIoError> {
        self.record(IoCall::Resume(topic.into(), partition));
        Ok(())
    }

    fn store(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> Result<(), KafkaIoError> {
        if self.crash_next_store.swap(false, Ordering::SeqCst) {
            panic!("FakeIo: the partition actor crashes at this store (the test asked)");
        }
        self.record(IoCall::Store {
            topic: topic.into(),
            partition,
            offset,
            metadata: metadata.into(),
        });
        Ok(())
    }

    fn commit(&self, at: &[CommitAt<'_>]) -> Result<(), KafkaIoError> {
        let at = at
            .iter()
            .map(|c| (c.topic.into(), c.partition, c.offset, c.metadata.into()))
            .collect();
        self.record(IoCall::Commit(at));
        Ok(())
    }

    fn seek(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        _timeout: Duration,
    ) -> Result<(), KafkaIoError> {
        self.record(IoCall::Seek(topic.into(), partition, offset));
        Ok(())
    }

    fn positions(&self, topic: &str) -> HashMap<i32, i64> {
        lock(&self.positions)
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }
}

/// Brokers whose answers the test sets.
#[derive(Default)]
pub(crate) struct FakeBroker {
    /// topic → partition count (missing: no such topic).
    pub counts: Mutex<HashMap<String, usize>>,
    /// (topic, partition) → (log start, end offset).
    pub logs: Mutex<HashMap<(String, i32), (i64, i64)>>,
    pub committed: Mutex<Vec<Committed>>,
    /// topic → id.
    pub ids: Mutex<HashMap<String, String>>,
    /// What a probe finds: nothing to deliver.
    pub clean: AtomicBool,
    /// The probes asked: (topic, partition, from, to).
    pub probes: Mutex<Vec<(String, i32, i64, i64)>>,
}

impl FakeBroker {
    /// `partitions` partitions of each topic, each log `[0, 0)`, with ids.
    pub(crate) fn with_topics(topics: &[(&str, &str)], partitions: usize) -> FakeBroker {
        let b = FakeBroker::default();
        for (t, id) in topics {
            lock(&b.counts).insert(t.to_string(), partitions);
            lock(&b.ids).insert(t.to_string(), id.to_string());
            for p in 0..partitions as i32 {
                lock(&b.logs).insert((t.to_string(), p), (0, 0));
            }
        }
        b
    }

    pub(crate) fn set_log(&self, topic: &str, partition: i32, start: i64, end: i64) {
        lock(&self.logs).insert((topic.to_string(), partition), (start, end));
    }

    pub(crate) fn probes(&self) -> Vec<(String, i32, i64, i64)> {
        lock(&self.probes).clone()
    }
}

impl BrokerView for FakeBroker {
    fn partition_count(&self, topic: &str) -> Result<Option<usize>, KafkaIoError> {
        Ok(lock(&self.counts).get(topic).copied())
    }

    fn offsets(&self, topic: &str, partitions: &[i32], at: LogEnd) -> Option<HashMap<i32, i64>> {
        let logs = lock(&self.logs);
        Some(
            partitions
                .iter()
                .filter_map(|p| {
                    let (start, end) = logs.get(&(topic.to_string(), *p))?;
                    Some((*p, if at == LogEnd::Start { *start } else { *end }))
                })
                .collect(),
        )
    }

    fn committed(
        &self,
        topics: &[&str],
        partitions: &[i32],
        _timeout: Duration,
    ) -> Result<Vec<Committed>, KafkaIoError> {
        Ok(lock(&self.committed)
            .iter()
            .filter(|c| topics.contains(&c.topic.as_str()) && partitions.contains(&c.partition))
            .cloned()
            .collect())
    }

    fn topic_ids(&self, topics: &[&str], _timeout: Duration) -> HashMap<String, String> {
        let ids = lock(&self.ids);
        topics
            .iter()
            .filter_map(|t| Some((t.to_string(), ids.get(*t)?.clone())))
            .collect()
    }

    fn nothing_to_deliver(&self, topic: &str, partition: i32, from: i64, to: i64) -> bool {
        lock(&self.probes).push((topic.to_string(), partition, from, to));
        self.clean.load(Ordering::SeqCst)
    }
}
