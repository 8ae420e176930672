//! Topics: create one Courier owns, read their configs; and the detour around
//! a controller the cluster does not have. (Creating topics for a test, changing
//! their configs, deleting records, adding partitions: courier-standins' `admin`.)

use super::{AdminError, Connection};
use rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::types::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// Creates `topic` with the cluster's default replication factor (and its other
/// topic defaults) unless it exists. For topics Courier itself owns, such as the
/// replay log; a principal not allowed to create topics gets an error that says
/// to create it.
pub(crate) async fn ensure_topic(
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
pub(crate) async fn topic_settings(
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

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::BaseConsumer;
    use rdkafka::error::KafkaError;
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
