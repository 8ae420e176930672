//! Admin and inspection helpers used by the demo, the tests, the drills and the
//! operator commands: create topics, read end offsets and committed offsets, and
//! read a whole topic (e.g. the DLQ or the parking lot) as it stands now.
//!
//! Each helper takes a [`Connection`]: a broker list (plaintext, `bootstrap.servers`
//! only: the tests, the drills, the demo) or the whole [`KafkaConfig`] (TLS and
//! SASL from `[kafka.properties]`, the SASL password from the environment: the
//! operator commands).

use crate::config::KafkaConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("kafka: authentication failed ({0}); check sasl.username, sasl.mechanisms and the password in the variable kafka.sasl_password_env names")]
    Auth(String),
    #[error("creating topic {0}: {1}")]
    Create(String, String),
    #[error("timed out: {0}")]
    Timeout(String),
}

/// Where the helpers connect, and how: the librdkafka configuration every client
/// they create starts from.
pub trait Connection {
    fn client_config(&self) -> ClientConfig;
}

/// A broker list: `bootstrap.servers` only (plaintext listeners: tests, drills, demo).
impl Connection for str {
    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self);
        c
    }
}

/// A broker list, as for `str`.
impl Connection for String {
    fn client_config(&self) -> ClientConfig {
        self.as_str().client_config()
    }
}

/// The whole Kafka config, as the pipeline's own clients use it
/// ([`crate::kafka::client_base`]): `[kafka.properties]` and the SASL password
/// from the environment.
impl Connection for KafkaConfig {
    fn client_config(&self) -> ClientConfig {
        crate::kafka::client_base(self)
    }
}

/// A ready-made configuration, used as it is.
impl Connection for ClientConfig {
    fn client_config(&self) -> ClientConfig {
        self.clone()
    }
}

/// The readers' client context: remembers an authentication failure librdkafka
/// reports (with its reason), so a helper that cannot reach a broker says why
/// rather than only that it timed out.
#[derive(Default)]
struct ReaderContext {
    auth_failure: Mutex<Option<String>>,
}

impl ReaderContext {
    fn auth_failure(&self) -> Option<String> {
        self.auth_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            *self.auth_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        }
        tracing::warn!(%error, reason, "kafka client error");
    }
}

impl ConsumerContext for ReaderContext {}

type Reader = BaseConsumer<ReaderContext>;

fn reader(cfg: &ClientConfig) -> Result<Reader, AdminError> {
    Ok(cfg.create_with_context(ReaderContext::default())?)
}

/// Turns a failure of `c` into an error, naming an authentication failure if
/// librdkafka reported one. Its reports are events on the consumer's queue,
/// served by `poll`: this serves the ones already queued (a poll that serves a
/// log event returns nothing, like one that finds the queue empty, hence the
/// bounded count). It runs only on the way out with an error.
fn failure(c: &Reader, e: KafkaError) -> AdminError {
    for _ in 0..1_000 {
        if c.context().auth_failure().is_some() {
            break;
        }
        let _ = c.poll(Duration::ZERO);
    }
    match c.context().auth_failure() {
        Some(reason) => AdminError::Auth(reason),
        None => AdminError::Kafka(e),
    }
}

/// Creates topics (replication 1) and waits until their metadata is visible.
pub async fn create_topics(
    cluster: &(impl Connection + ?Sized),
    topics: &[(&str, i32)],
) -> Result<(), AdminError> {
    let base = cluster.client_config();
    let admin: AdminClient<DefaultClientContext> = base.create()?;
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
    let names: Vec<(String, usize)> = topics
        .iter()
        .map(|(n, p)| (n.to_string(), *p as usize))
        .collect();
    tokio::task::spawn_blocking(move || {
        let c = reader(&base)?;
        let until = Instant::now() + Duration::from_secs(30);
        for (name, n) in names {
            loop {
                let md = c
                    .fetch_metadata(Some(&name), Duration::from_secs(5))
                    .map_err(|e| failure(&c, e))?;
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

/// Creates `topic` with the cluster's default replication factor (and its other
/// topic defaults) unless it exists. For topics Courier itself owns, such as the
/// replay log; a principal not allowed to create topics gets an error that says
/// to create it.
pub async fn ensure_topic(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    partitions: i32,
) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
    // -1: the broker's `default.replication.factor` (KIP-464).
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for r in results {
        if let Err((name, code)) = r {
            if code != RDKafkaErrorCode::TopicAlreadyExists {
                return Err(AdminError::Create(
                    name,
                    format!("{code}; create it yourself (with your cluster's replication) or allow this principal to create topics"),
                ));
            }
        }
    }
    Ok(())
}

/// One setting (`retention.ms`, `max.message.bytes`, …) of each topic, as the
/// broker applies it (DescribeConfigs: the topic's own value or the broker's
/// default). A topic that does not exist, or whose config cannot be read, is
/// missing from the result.
pub async fn topic_setting(
    cluster: &(impl Connection + ?Sized),
    topics: &[&str],
    key: &str,
) -> Result<BTreeMap<String, String>, AdminError> {
    Ok(topic_settings(cluster, topics, &[key])
        .await?
        .into_iter()
        .filter_map(|(t, mut m)| Some((t, m.remove(key)?)))
        .collect())
}

/// Several settings of each topic in one DescribeConfigs: topic → key → value,
/// as [`topic_setting`] reads one.
pub async fn topic_settings(
    cluster: &(impl Connection + ?Sized),
    topics: &[&str],
    keys: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, AdminError> {
    let timeout = Duration::from_secs(10);
    let mut cfg = cluster.client_config();
    // Its one metadata request (`controller_detour`) must not create a topic.
    cfg.set("allow.auto.create.topics", "false");
    let admin: std::sync::Arc<AdminClient<DefaultClientContext>> =
        std::sync::Arc::new(cfg.create()?);
    let mut options = AdminOptions::new().request_timeout(Some(timeout));
    if let Some(first) = topics.first() {
        let (a, t) = (admin.clone(), first.to_string());
        let detour = tokio::task::spawn_blocking(move || controller_detour(a.inner(), &t, timeout))
            .await
            .ok()
            .flatten();
        if let Some(broker) = detour {
            options = options.broker_id(broker);
        }
    }
    let specs: Vec<ResourceSpecifier> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = admin.describe_configs(specs.iter(), &options).await?;
    let mut out = BTreeMap::new();
    for r in results.into_iter().flatten() {
        let OwnedResourceSpecifier::Topic(name) = &r.specifier else {
            continue;
        };
        let values: BTreeMap<String, String> = keys
            .iter()
            .filter_map(|k| Some((k.to_string(), r.get(k)?.value.clone()?)))
            .collect();
        if !values.is_empty() {
            out.insert(name.clone(), values);
        }
    }
    Ok(out)
}

/// How long [`controller_detour`] waits for the cluster's metadata.
const DETOUR_METADATA_WAIT: Duration = Duration::from_secs(2);

/// The broker to send an admin request to that librdkafka would send to the
/// controller (DescribeConfigs of topics, DescribeTopics), when the controller
/// the cluster names is none of its brokers: librdkafka's mock cluster (`courier
/// demo`) names controller 0 beside brokers 1..n, and a request waiting for
/// that controller waits out its whole timeout. Sent to a broker that exists,
/// it is answered at once: the mock's topic ids, or "unsupported" for the
/// configs it does not keep.
///
/// `None` — librdkafka's own routing, unchanged — for a real cluster (its
/// controller, or the broker a KRaft cluster names in its place, is one of
/// its brokers), and whenever the metadata (one request for `topic`, at most
/// `timeout` and 2 s) or the controller's id is not known. Blocking.
pub(crate) fn controller_detour<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
) -> Option<i32> {
    let wait = timeout.min(DETOUR_METADATA_WAIT);
    let md = client.fetch_metadata(Some(topic), wait).ok()?;
    let brokers: Vec<i32> = md.brokers().iter().map(|b| b.id()).collect();
    // SAFETY: a live client handle. The metadata just read named the
    // controller (Metadata v1+), so this returns at once; -1 when not known.
    let controller = unsafe { rdkafka::bindings::rd_kafka_controllerid(client.native_ptr(), 0) };
    if controller < 0 || brokers.contains(&controller) {
        return None;
    }
    brokers.first().copied()
}

/// Sets topic configs (IncrementalAlterConfigs is not in rdkafka 0.39:
/// AlterConfigs, which resets the topic's other overrides). For tests and drills.
pub async fn alter_topic_config(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    settings: &[(&str, &str)],
) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
    let mut alter = rdkafka::admin::AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in settings {
        alter = alter.set(k, v);
    }
    let results = admin
        .alter_configs(
            [&alter],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    for r in results {
        if let Err((_, code)) = r {
            return Err(AdminError::Create(topic.to_string(), code.to_string()));
        }
    }
    Ok(())
}

/// Deletes the records of `topic`/`partition` below `before` (DeleteRecords,
/// what `kafka-delete-records.sh` does): the log then starts at `before`.
/// For tests and drills.
pub async fn delete_records(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    partition: i32,
    before: i64,
) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(before))?;
    let answer = admin
        .delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for e in answer.elements() {
        e.error()?;
    }
    Ok(())
}

/// Grows `topic` to `total` partitions (CreatePartitions). For tests and drills.
pub async fn add_partitions(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    total: usize,
) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
    let new = rdkafka::admin::NewPartitions::new(topic, total);
    let results = admin
        .create_partitions(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for r in results {
        if let Err((name, code)) = r {
            return Err(AdminError::Create(name, code.to_string()));
        }
    }
    Ok(())
}

/// High watermarks (end offsets) of every partition of `topic`.
pub fn end_offsets(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>, AdminError> {
    let c = reader(&cluster.client_config())?;
    (0..partitions)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(10))
                .map(|(_, hi)| hi)
                .map_err(|e| failure(&c, e))
        })
        .collect()
}

/// Committed offsets of `group` for every partition of `topic` (-1 = none).
pub fn committed_offsets(
    cluster: &(impl Connection + ?Sized),
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>, AdminError> {
    Ok(committed_positions(cluster, group, topic, partitions)?
        .into_iter()
        .map(|c| c.offset)
        .collect())
}

/// A group's committed position in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedPosition {
    /// The next offset to read; -1 when the group committed nothing.
    pub offset: i64,
    /// The commit's metadata (Courier's: the offsets done above `offset`,
    /// see [`crate::core::completed`]); empty when there is none.
    pub metadata: String,
}

/// The committed position (offset and metadata) of `group` for every
/// partition of `topic`.
pub fn committed_positions(
    cluster: &(impl Connection + ?Sized),
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<CommittedPosition>, AdminError> {
    let mut cfg = cluster.client_config();
    cfg.set("group.id", group)
        .set("enable.auto.commit", "false");
    let c = reader(&cfg)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .map_err(|e| failure(&c, e))?;
    Ok((0..partitions)
        .map(|p| {
            let e = got.find_partition(topic, p);
            CommittedPosition {
                offset: match e.as_ref().map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o,
                    _ => -1,
                },
                metadata: e.map(|e| e.metadata().to_string()).unwrap_or_default(),
            }
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

/// Reads every record of `topic` up to its current end offsets (a snapshot),
/// into memory: for the tests, the audit and small topics. The operator commands
/// stream with [`scan`] instead.
pub fn read_all(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
) -> Result<Vec<ReadRecord>, AdminError> {
    let mut out = Vec::new();
    scan(cluster, topic, |r| {
        out.push(r);
        std::ops::ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// How long a scan may go without receiving a record it still expects before it
/// gives up (it has no total deadline: a large topic takes as long as it takes).
const SCAN_STALL: Duration = Duration::from_secs(60);

/// End offsets of every partition of `topic` that has records, with their start
/// (low watermark): the snapshot a scan reads. Empty when the topic does not exist.
pub fn snapshot(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let c = reader(&cluster.client_config())?;
    snapshot_with(&c, topic)
}

/// Start and end offsets (low and high watermarks) of every partition of
/// `topic`, empty ones included. Empty when the topic does not exist.
pub fn watermarks(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let c = reader(&cluster.client_config())?;
    all_watermarks(&c, topic)
}

/// Low and high watermarks of every partition of `topic` (empty when the
/// topic does not exist).
fn all_watermarks(c: &Reader, topic: &str) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| failure(c, e))?;
    let Some(t) = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
    else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for p in t.partitions() {
        let w = c
            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
            .map_err(|e| failure(c, e))?;
        out.insert(p.id(), w);
    }
    Ok(out)
}

fn snapshot_with(c: &Reader, topic: &str) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let mut out = all_watermarks(c, topic)?;
    out.retain(|_, (lo, hi)| hi > lo);
    Ok(out)
}

/// Streams the records of `topic` up to its end offsets as they are now, one at
/// a time, to `each` (which may stop the scan). Memory stays flat whatever the
/// topic's size. Gives up only when no expected record arrives for a minute.
pub fn scan(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    mut each: impl FnMut(ReadRecord) -> std::ops::ControlFlow<()>,
) -> Result<(), AdminError> {
    let mut cfg = cluster.client_config();
    cfg.set("group.id", "courier-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let c = reader(&cfg)?;
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for (p, (lo, hi)) in snapshot_with(&c, topic)? {
        tpl.add_partition_offset(topic, p, Offset::Offset(lo))?;
        remaining.insert(p, hi);
    }
    if remaining.is_empty() {
        return Ok(());
    }
    c.assign(&tpl)?;
    let mut last_progress = Instant::now();
    while !remaining.is_empty() {
        if last_progress.elapsed() > SCAN_STALL {
            return Err(AdminError::Timeout(format!(
                "reading {topic}: no record for {}s with {} partitions unfinished",
                SCAN_STALL.as_secs(),
                remaining.len()
            )));
        }
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let p = m.partition();
                let Some(&hi) = remaining.get(&p) else {
                    continue;
                };
                last_progress = Instant::now();
                if m.offset() + 1 >= hi {
                    remaining.remove(&p);
                }
                if m.offset() < hi {
                    let r = read_record(&m);
                    if each(r).is_break() {
                        return Ok(());
                    }
                    // `each` may take its time (a rate-limited replay): that is
                    // not the broker stalling.
                    last_progress = Instant::now();
                }
            }
            Some(Err(e)) => return Err(failure(&c, e)),
            None => {
                // Nothing more to read: the partitions whose last offsets are
                // a transaction's control marker (or an aborted batch), which no
                // poll returns, are done once the position passed them.
                if let Ok(at) = c.position() {
                    remaining.retain(|p, hi| {
                        !matches!(at.find_partition(topic, *p).map(|e| e.offset()),
                            Some(Offset::Offset(o)) if o >= *hi)
                    });
                }
            }
        }
    }
    Ok(())
}

fn read_record(m: &rdkafka::message::BorrowedMessage<'_>) -> ReadRecord {
    // Read as bytes (rdkafka's `Headers` API panics on a name that is not
    // UTF-8); shown as text, each bad byte a U+FFFD.
    let mut headers = BTreeMap::new();
    for (name, value) in super::record_headers(m).unwrap_or_default().iter() {
        let v = value.as_deref().map(String::from_utf8_lossy);
        headers.insert(
            String::from_utf8_lossy(name.as_bytes()).into_owned(),
            v.unwrap_or_default().into_owned(),
        );
    }
    ReadRecord {
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().map(<[u8]>::to_vec),
        headers,
    }
}

/// Why one record could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{topic}/{partition}@{offset} is gone: the partition now starts at offset {start} (retention or compaction removed it)")]
    Gone {
        topic: String,
        partition: i32,
        offset: i64,
        start: i64,
    },
    #[error("{topic}/{partition}@{offset} does not exist (the partition ends at {end})")]
    Beyond {
        topic: String,
        partition: i32,
        offset: i64,
        end: i64,
    },
    #[error(transparent)]
    Admin(#[from] AdminError),
}

/// Reads the one record at `topic`/`partition`@`offset` (e.g. the origin of a
/// DLQ envelope that carries a reference instead of its payload).
pub fn fetch_one(
    cluster: &(impl Connection + ?Sized),
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<ReadRecord, FetchError> {
    let mut cfg = cluster.client_config();
    cfg.set("group.id", "courier-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let c = reader(&cfg)?;
    let (lo, hi) = c
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .map_err(|e| failure(&c, e))?;
    let coords = || (topic.to_string(), partition, offset);
    if offset < lo {
        let (topic, partition, offset) = coords();
        return Err(FetchError::Gone {
            topic,
            partition,
            offset,
            start: lo,
        });
    }
    if offset >= hi {
        let (topic, partition, offset) = coords();
        return Err(FetchError::Beyond {
            topic,
            partition,
            offset,
            end: hi,
        });
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
        .map_err(AdminError::Kafka)?;
    c.assign(&tpl).map_err(AdminError::Kafka)?;
    let until = Instant::now() + SCAN_STALL;
    while Instant::now() < until {
        match c.poll(Duration::from_millis(200)) {
            // A compacted topic may have no record at exactly `offset`: the next
            // one read is past it.
            Some(Ok(m)) if m.offset() == offset => return Ok(read_record(&m)),
            Some(Ok(m)) if m.offset() > offset => {
                let (topic, partition, offset) = coords();
                return Err(FetchError::Gone {
                    topic,
                    partition,
                    offset,
                    start: m.offset(),
                });
            }
            Some(Ok(_)) | None => {}
            Some(Err(e)) => return Err(failure(&c, e).into()),
        }
    }
    Err(AdminError::Timeout(format!("reading {topic}/{partition}@{offset}")).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;

    /// librdkafka's mock cluster (`courier demo`) names a controller it does
    /// not have: what is asked of the controller must still be answered, at
    /// once, not after the request's timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_mock_cluster_answers_what_goes_to_the_controller() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let brokers = mock.bootstrap_servers();
        mock.create_topic("mocked", 2, 1).expect("topic");

        // DescribeConfigs: the mock keeps no topic configs and says so.
        let e = topic_setting(&brokers, &["mocked"], "retention.ms")
            .await
            .expect_err("the mock cluster has no DescribeConfigs");
        let code = match &e {
            AdminError::Kafka(KafkaError::AdminOp(code)) => Some(*code),
            _ => None,
        };
        assert_eq!(
            code,
            Some(RDKafkaErrorCode::UnsupportedFeature),
            "answered, not timed out: {e}"
        );

        // DescribeTopics: the mock's topic id.
        let c: BaseConsumer = brokers.client_config().create().expect("consumer");
        let ids = tokio::task::spawn_blocking(move || {
            crate::kafka::identity::topic_ids(&c, &["mocked"], Duration::from_secs(10))
        })
        .await
        .expect("lookup");
        assert!(ids.contains_key("mocked"), "the mock's topic id: {ids:?}");
    }
}
