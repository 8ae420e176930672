//! Kafka helpers for the tests, benches, drills and the audit: create topics,
//! change their configs, delete records, add partitions, and read a whole topic
//! back. Courier's own helpers (`courier::kafka::admin`: end offsets, committed
//! offsets, scans, topic settings) are the ones the service and its operator
//! commands use; these are only ever used to set up and check a run, and are
//! written without Courier (this crate does not depend on it).
//!
//! Each helper takes a [`Cluster`]: a broker list (plaintext, `bootstrap.servers`
//! only) or a whole librdkafka configuration ([`Configured`]).

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("{0}: refused ({1})")]
    Refused(String, String),
    #[error("timed out: {0}")]
    Timeout(String),
}

/// Where a helper connects: the librdkafka configuration its clients start from.
pub trait Cluster {
    fn client_config(&self) -> ClientConfig;
}

/// A broker list: `bootstrap.servers` only (plaintext listeners).
impl<T: AsRef<str> + ?Sized> Cluster for T {
    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.as_ref());
        c
    }
}

/// A whole configuration, used as it is: a secured cluster's, e.g. built with
/// `courier::kafka::client_base` from Courier's `[kafka]` config.
#[derive(Debug, Clone)]
pub struct Configured(pub ClientConfig);

impl Cluster for Configured {
    fn client_config(&self) -> ClientConfig {
        self.0.clone()
    }
}

/// How long an admin request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn admin(
    cluster: &(impl Cluster + ?Sized),
) -> Result<AdminClient<DefaultClientContext>, AdminError> {
    Ok(cluster.client_config().create()?)
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT))
}

/// The first refusal among an admin request's per-resource results, if any
/// (`ignore`: a code that is not a refusal, e.g. "already exists").
fn refused(
    results: Vec<Result<String, (String, RDKafkaErrorCode)>>,
    ignore: Option<RDKafkaErrorCode>,
) -> Result<(), AdminError> {
    match results
        .into_iter()
        .filter_map(Result::err)
        .find(|(_, code)| Some(*code) != ignore)
    {
        Some((name, code)) => Err(AdminError::Refused(name, code.to_string())),
        None => Ok(()),
    }
}

/// Creates topics (replication 1; one that exists is left as it is) and waits
/// until their metadata shows every partition with a leader.
pub async fn create_topics(
    cluster: &(impl Cluster + ?Sized),
    topics: &[(&str, i32)],
) -> Result<(), AdminError> {
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(n, p)| NewTopic::new(n, *p, TopicReplication::Fixed(1)))
        .collect();
    let results = admin(cluster)?.create_topics(&new, &options()).await?;
    refused(results, Some(RDKafkaErrorCode::TopicAlreadyExists))?;
    let config = cluster.client_config();
    let wanted: Vec<(String, usize)> = topics
        .iter()
        .map(|(n, p)| (n.to_string(), usize::try_from(*p).unwrap_or(0)))
        .collect();
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = config.create()?;
        let until = Instant::now() + REQUEST_TIMEOUT;
        for (name, partitions) in wanted {
            while !leaders_known(&c, &name, partitions)? {
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

/// Whether the metadata shows `topic` with `partitions` partitions, each led.
fn leaders_known(c: &BaseConsumer, topic: &str, partitions: usize) -> Result<bool, AdminError> {
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(5))?;
    Ok(md.topics().iter().any(|t| {
        t.name() == topic
            && t.error().is_none()
            && t.partitions().len() == partitions
            && t.partitions().iter().all(|p| p.leader() >= 0)
    }))
}

/// Sets topic configs (AlterConfigs, which resets the topic's other overrides:
/// IncrementalAlterConfigs is not in rdkafka 0.39).
pub async fn alter_topic_config(
    cluster: &(impl Cluster + ?Sized),
    topic: &str,
    settings: &[(&str, &str)],
) -> Result<(), AdminError> {
    let alter = settings.iter().fold(
        AlterConfig::new(ResourceSpecifier::Topic(topic)),
        |a, (k, v)| a.set(k, v),
    );
    let results = admin(cluster)?.alter_configs([&alter], &options()).await?;
    let results = results
        .into_iter()
        .map(|r| {
            r.map(|_| topic.to_string())
                .map_err(|(_, code)| (topic.to_string(), code))
        })
        .collect();
    refused(results, None)
}

/// Deletes the records of `topic`/`partition` below `before` (DeleteRecords,
/// what `kafka-delete-records.sh` does): the log then starts at `before`.
pub async fn delete_records(
    cluster: &(impl Cluster + ?Sized),
    topic: &str,
    partition: i32,
    before: i64,
) -> Result<(), AdminError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(before))?;
    let answer = admin(cluster)?.delete_records(&tpl, &options()).await?;
    for e in answer.elements() {
        e.error()?;
    }
    Ok(())
}

/// Grows `topic` to `total` partitions (CreatePartitions).
pub async fn add_partitions(
    cluster: &(impl Cluster + ?Sized),
    topic: &str,
    total: usize,
) -> Result<(), AdminError> {
    let new = NewPartitions::new(topic, total);
    let results = admin(cluster)?
        .create_partitions([&new], &options())
        .await?;
    refused(results, None)
}

/// Reads every record of `topic` up to its end offsets as they are now (a
/// snapshot), into memory. Blocking.
pub fn read_all(
    cluster: &(impl Cluster + ?Sized),
    topic: &str,
) -> Result<Vec<ReadRecord>, AdminError> {
    let mut config = cluster.client_config();
    config
        .set("group.id", "courier-standins-reader")
        .set("enable.auto.commit", "false");
    let c: BaseConsumer = config.create()?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let mut ends = BTreeMap::new();
    let mut start = TopicPartitionList::new();
    let found = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none());
    for p in found.map(|t| t.partitions()).unwrap_or_default() {
        let (lo, hi) = c.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
        if hi > lo {
            start.add_partition_offset(topic, p.id(), Offset::Offset(lo))?;
            ends.insert(p.id(), hi);
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return Ok(out);
    }
    c.assign(&start)?;
    // Gives up when no record it still expects arrives for this long.
    let stall = Duration::from_secs(60);
    let mut progress = Instant::now();
    while !ends.is_empty() {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let Some(&end) = ends.get(&m.partition()) else {
                    continue;
                };
                progress = Instant::now();
                if m.offset() < end {
                    out.push(read_record(&m));
                }
                if m.offset() + 1 >= end {
                    ends.remove(&m.partition());
                }
            }
            Some(Err(e)) => return Err(e.into()),
            None if progress.elapsed() > stall => {
                return Err(AdminError::Timeout(format!(
                    "reading {topic}: {} partitions unfinished",
                    ends.len()
                )))
            }
            None => {
                // The last offsets of a partition may be a transaction's control
                // marker, which no poll returns: done once the position is past.
                let at = c.position()?;
                ends.retain(
                    |p, end| match at.find_partition(topic, *p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o < *end,
                        _ => true,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// One record read back from a topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    /// `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// Names and values as text, each byte that is not UTF-8 a U+FFFD.
    pub headers: BTreeMap<String, String>,
}

fn read_record(m: &BorrowedMessage<'_>) -> ReadRecord {
    ReadRecord {
        partition: m.partition(),
        offset: m.offset(),
        payload: m.payload().map(<[u8]>::to_vec),
        headers: headers_as_text(m),
    }
}

/// A message's headers, read as bytes through librdkafka's C accessor (rdkafka's
/// `Headers` API panics on a name that is not UTF-8, which the hostile-input
/// tests write) and made text.
fn headers_as_text(m: &BorrowedMessage<'_>) -> BTreeMap<String, String> {
    use rdkafka::bindings as rd;
    const OK: rd::rd_kafka_resp_err_t = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
    let mut out = BTreeMap::new();
    let mut list: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `m.ptr()` is the live message `m` borrows; the header list it
    // hands back belongs to the message and lives as long as `m`.
    if unsafe { rd::rd_kafka_message_headers(m.ptr(), &mut list) } != OK || list.is_null() {
        return out;
    }
    // librdkafka answers an index past the last header with an error.
    for idx in 0.. {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut len: usize = 0;
        // SAFETY: `list` is the message's header list (above); librdkafka
        // points `name` and `value` into it.
        if unsafe { rd::rd_kafka_header_get_all(list, idx, &mut name, &mut value, &mut len) } != OK
        {
            break;
        }
        if name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name, and `len` bytes at `value` (or none),
        // both copied out before `m` can go away.
        let (name, value) = unsafe {
            let value: &[u8] = match value.is_null() {
                true => &[],
                false => std::slice::from_raw_parts(value.cast::<u8>(), len),
            };
            (std::ffi::CStr::from_ptr(name).to_bytes(), value)
        };
        out.insert(
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        );
    }
    out
}
