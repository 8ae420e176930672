//! Where partitions stand: end offsets and watermarks, a topic's snapshot, and
//! a group's committed positions.

use super::reader::{failure, reader, Reader};
use super::{AdminError, Connection};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

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

pub(super) fn snapshot_with(
    c: &Reader,
    topic: &str,
) -> Result<BTreeMap<i32, (i64, i64)>, AdminError> {
    let mut out = all_watermarks(c, topic)?;
    out.retain(|_, (lo, hi)| hi > lo);
    Ok(out)
}
