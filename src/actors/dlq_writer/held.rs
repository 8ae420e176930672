//! What the writer must know of the DLQ and parking topics at its start:
//! their `max.message.bytes`, and that neither compacts.

use super::DEFAULT_MAX_MESSAGE_BYTES;
use std::collections::BTreeMap;

/// What the writer must know of the DLQ and parking topics, read at its start
/// in one DescribeConfigs.
pub(crate) struct HeldTopics {
    /// `max.message.bytes` of each; the default for a topic whose config
    /// cannot be read (it may not exist yet, or the principal may not be
    /// allowed DescribeConfigs), with a warning.
    pub limits: BTreeMap<String, usize>,
    /// `cleanup.policy` of each, where known.
    cleanup_policies: BTreeMap<String, String>,
}

/// A DLQ or parking lot that compacts: it would keep only the latest record of
/// each key.
#[derive(Debug, thiserror::Error)]
#[error("{role} topic `{topic}` has cleanup.policy={policy}: compaction keeps only the latest record of each key, so an event whose key comes again would be deleted before it is retried or inspected, and one without a key cannot be written; set cleanup.policy=delete")]
pub(crate) struct CompactedTopic {
    role: &'static str,
    topic: String,
    policy: String,
}

/// The DLQ and the parking lot keep every record until its retention: a
/// compacted one would delete all but the latest event of each key, unread.
/// `policy` is the topic's `cleanup.policy` (`None`: not known).
fn check_cleanup_policy(
    role: &'static str,
    topic: &str,
    policy: Option<&str>,
) -> Result<(), CompactedTopic> {
    match policy {
        Some(p)
            if p.split(',')
                .any(|x| x.trim().eq_ignore_ascii_case("compact")) =>
        {
            Err(CompactedTopic {
                role,
                topic: topic.to_string(),
                policy: p.trim().to_string(),
            })
        }
        _ => Ok(()),
    }
}

impl HeldTopics {
    pub(crate) async fn read(cfg: &crate::config::KafkaConfig) -> HeldTopics {
        let topics = [cfg.dlq_topic(), cfg.parking_topic()];
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let keys = ["max.message.bytes", "cleanup.policy"];
        let got = match crate::kafka::admin::topic_settings(cfg, &names, &keys).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read max.message.bytes and cleanup.policy of the DLQ and parking topics; assuming {DEFAULT_MAX_MESSAGE_BYTES} bytes, and a compacted topic is not refused");
                BTreeMap::new()
            }
        };
        let mut limits = BTreeMap::new();
        let mut cleanup_policies = BTreeMap::new();
        for t in names {
            let of = got.get(t);
            let limit = of
                .and_then(|m| m.get("max.message.bytes"))
                .and_then(|v| v.parse::<usize>().ok());
            limits.insert(
                t.to_string(),
                limit.unwrap_or_else(|| {
                    tracing::warn!(
                        topic = t,
                        "max.message.bytes unknown; assuming {DEFAULT_MAX_MESSAGE_BYTES}"
                    );
                    DEFAULT_MAX_MESSAGE_BYTES
                }),
            );
            if let Some(p) = of.and_then(|m| m.get("cleanup.policy")) {
                cleanup_policies.insert(t.to_string(), p.clone());
            }
        }
        HeldTopics {
            limits,
            cleanup_policies,
        }
    }

    /// The topics whose `cleanup.policy` could not be read (DescribeConfigs
    /// refused or not answered): a compacted one among them is not refused.
    pub(crate) fn policies_unknown(&self) -> Vec<&str> {
        self.limits
            .keys()
            .filter(|t| !self.cleanup_policies.contains_key(*t))
            .map(String::as_str)
            .collect()
    }

    /// A compacted DLQ or parking lot is refused (at start: the writer does
    /// not start).
    pub(crate) fn refuse_compacted(
        &self,
        cfg: &crate::config::KafkaConfig,
    ) -> Result<(), CompactedTopic> {
        for (role, topic) in [("DLQ", cfg.dlq_topic()), ("parking", cfg.parking_topic())] {
            let policy = self.cleanup_policies.get(&topic).map(String::as_str);
            check_cleanup_policy(role, &topic, policy)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compacted_dlq_or_parking_lot_is_refused() {
        for ok in [None, Some("delete"), Some(" Delete ")] {
            assert!(check_cleanup_policy("DLQ", "d", ok).is_ok(), "{ok:?}");
        }
        for bad in ["compact", "compact,delete", "delete, compact", "COMPACT"] {
            let e = check_cleanup_policy("parking", "p", Some(bad)).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("parking topic `p` has cleanup.policy={bad}:")),
                "{e}"
            );
        }
    }
}
