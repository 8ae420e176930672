//! Reading records back: a whole topic as it stands now, streamed by [`scan`],
//! or one record ([`fetch_one`]).

use super::offsets::snapshot_with;
use super::reader::{failure, reader};
use super::{AdminError, Connection};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One record read back from a topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: BTreeMap<String, String>,
}

/// How long a scan may go without receiving a record it still expects before it
/// gives up (it has no total deadline: a large topic takes as long as it takes).
const SCAN_STALL: Duration = Duration::from_secs(60);

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
    for (name, value) in crate::kafka::record_headers(m).unwrap_or_default().iter() {
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
pub(crate) enum FetchError {
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
pub(crate) fn fetch_one(
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
