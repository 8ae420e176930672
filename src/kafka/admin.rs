//! Admin and inspection helpers used by the demo, the tests, the drills and the
//! operator commands: create topics, read end offsets and committed offsets, and
//! read a whole topic (e.g. the DLQ or the parking lot) as it stands now.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("creating topic {0}: {1}")]
    Create(String, String),
    #[error("timed out: {0}")]
    Timeout(String),
}

fn base(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// Creates topics (replication 1) and waits until their metadata is visible.
pub async fn create_topics(brokers: &str, topics: &[(&str, i32)]) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = base(brokers).create()?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(n, p)| NewTopic::new(n, *p, TopicReplication::Fixed(1)))
        .collect();
    let results = admin
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for r in results {
        if let Err((name, code)) = r {
            if code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists {
                return Err(AdminError::Create(name, code.to_string()));
            }
        }
    }
    let b = brokers.to_string();
    let names: Vec<(String, usize)> = topics
        .iter()
        .map(|(n, p)| (n.to_string(), *p as usize))
        .collect();
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = base(&b).create()?;
        let until = Instant::now() + Duration::from_secs(30);
        for (name, n) in names {
            loop {
                let md = c.fetch_metadata(Some(&name), Duration::from_secs(5))?;
                let ok = md.topics().iter().any(|t| {
                    t.name() == name
                        && t.error().is_none()
                        && t.partitions().len() == n
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                });
                if ok {
                    break;
                }
                if Instant::now() > until {
                    return Err(AdminError::Timeout(format!("metadata of {name}")));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| AdminError::Timeout(e.to_string()))?
}

/// High watermarks (end offsets) of every partition of `topic`.
pub fn end_offsets(brokers: &str, topic: &str, partitions: i32) -> Result<Vec<i64>, AdminError> {
    let c: BaseConsumer = base(brokers).create()?;
    (0..partitions)
        .map(|p| Ok(c.fetch_watermarks(topic, p, Duration::from_secs(10))?.1))
        .collect()
}

/// Committed offsets of `group` for every partition of `topic` (-1 = none).
pub fn committed_offsets(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>, AdminError> {
    let mut cfg = base(brokers);
    cfg.set("group.id", group)
        .set("enable.auto.commit", "false");
    let c: BaseConsumer = cfg.create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10))?;
    Ok((0..partitions)
        .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        })
        .collect())
}

/// One record read back from a topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: BTreeMap<String, String>,
}

/// Reads every record of `topic` up to its current end offsets (a snapshot).
pub fn read_all(brokers: &str, topic: &str) -> Result<Vec<ReadRecord>, AdminError> {
    let mut cfg = base(brokers);
    cfg.set("group.id", "courier-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let c: BaseConsumer = cfg.create()?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let Some(t) = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
    else {
        return Ok(Vec::new());
    };
    let mut tpl = TopicPartitionList::new();
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    for p in t.partitions() {
        let (lo, hi) = c.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
        if hi > lo {
            tpl.add_partition_offset(topic, p.id(), Offset::Offset(lo))?;
            remaining.insert(p.id(), hi);
        }
    }
    if remaining.is_empty() {
        return Ok(Vec::new());
    }
    c.assign(&tpl)?;
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() {
        if Instant::now() > until {
            return Err(AdminError::Timeout(format!("reading {topic}")));
        }
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let p = m.partition();
                if let Some(&hi) = remaining.get(&p) {
                    if m.offset() < hi {
                        let mut headers = BTreeMap::new();
                        if let Some(h) = m.headers() {
                            for hdr in h.iter() {
                                let v = hdr.value.map(|v| String::from_utf8_lossy(v).into_owned());
                                headers.insert(hdr.key.to_string(), v.unwrap_or_default());
                            }
                        }
                        out.push(ReadRecord {
                            partition: p,
                            offset: m.offset(),
                            key: m.key().map(<[u8]>::to_vec),
                            payload: m.payload().map(<[u8]>::to_vec),
                            headers,
                        });
                    }
                    if m.offset() + 1 >= hi {
                        remaining.remove(&p);
                    }
                }
            }
            Some(Err(e)) => return Err(e.into()),
            None => {}
        }
    }
    Ok(out)
}
