//! The consumer's start: the group consumer and the lookup client, the
//! checks that the topics exist and pair up, the subscription, the lag
//! ticks and the poll thread.
//!
//! # Invariant I31: topics and pairs
//!
//! *Enforced in* this file (`check_topics`, which `courier check-config --online` runs
//! too: `app::preflight`), `rebalance.rs` (`assigned`), `lag.rs` (`lag_lookup`,
//! `dlq_positions`) and `src/kafka/client_config.rs` (`producer_config`). A missing main, DLQ or
//! parking topic is refused at start, naming it (one the broker will not describe to this
//! principal is named as that, `kafka::seams::Broker::partition_count`); the producer never auto-creates topics
//! (`allow.auto.create.topics=false`, set after `[kafka.properties]`). The partition
//! counts of the main topic and the DLQ are compared at start and at every assignment
//! (partitions added while running make the group rebalance): a mismatch starts no
//! partition, declares the pipeline fatal (exit 70), and the restart refuses to start
//! until they match — main p is never paired with another member's DLQ p or with none.
//! A DLQ or parking lot whose `cleanup.policy` compacts is refused at start
//! (`actors/dlq_writer/held.rs`, read with `max.message.bytes` in one DescribeConfigs):
//! compaction would delete every event of a key but the latest before it is retried or
//! inspected. "DLQ p has unread records" means records a fetch can still return: the
//! start is max(committed, log start), and once the group consumer's position (moved
//! past control records by librdkafka) reaches the end, the end reported is what was
//! handed over, so a purged DLQ or a transaction marker at its end does not hold main p
//! in `drain_dlq`.
//!
//! *Tested by:* `lag.rs`'s unit tests (`dlq_positions`) and `consumer/tests.rs`
//! (`lag_at_idle_behind_transaction_markers_is_no_lag`, over fakes: seen failing with
//! `dlq_positions` reporting the end offset); `tests/dlq.rs`:
//! `a_missing_dlq_or_parking_topic_is_refused_at_start`; `tests/ops.rs`:
//! `check_config_online_names_what_start_would_refuse` (the same checks, before a
//! start); `kafka::seams` unit `a_topic_not_authorized_is_not_a_missing_topic`;
//! `a_compacted_dlq_or_parking_topic_is_refused_at_start` (seen failing: the process ran
//! on), `partitions_added_while_running_are_refused` (`create_partitions` on a running
//! Courier's main topic: exit 70, audit lost 0, the restart refused),
//! `a_transaction_marker_at_the_dlq_end_is_not_unread` (an aborted transaction in the
//! DLQ: all 50 events delivered), the purged DLQ of the deleted-unread test; each seen
//! failing before the fix.

use super::{Client, ConsumerArgs, ConsumerMsg, ConsumerState, Kafka};
use crate::core::completed;
use crate::kafka::detached::Detached;
use crate::kafka::poller::Poller;
use crate::kafka::seams::{Broker, BrokerView, PartitionIo};
use crate::kafka::{consumer_config, CourierContext, KafkaConsumer};
use ractor::{ActorProcessingErr, ActorRef};
use rdkafka::consumer::Consumer;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StartupError {
    #[error("{role} topic `{topic}` does not exist: create it (Courier does not create topics, and its producer never has the broker create one)")]
    MissingTopic { role: &'static str, topic: String },
    #[error("DLQ topic `{dlq}` has {dlq_n} partitions but `{main}` has {main_n}: they must be equal (main p and DLQ p are processed together); add partitions to the one with fewer")]
    PartitionMismatch {
        main: String,
        main_n: usize,
        dlq: String,
        dlq_n: usize,
    },
    #[error("cannot read metadata of `{0}`: {1}")]
    Metadata(String, String),
}

/// Main p and DLQ p are one pair: the topics must have as many partitions.
pub(super) fn check_pairs(
    main: &str,
    main_n: usize,
    dlq: &str,
    dlq_n: usize,
) -> Result<(), StartupError> {
    if main_n == dlq_n {
        return Ok(());
    }
    Err(StartupError::PartitionMismatch {
        main: main.to_string(),
        main_n,
        dlq: dlq.to_string(),
        dlq_n,
    })
}

/// A topic's partition count (`None`: no such topic). Blocking.
pub(super) fn partition_count(
    b: &dyn BrokerView,
    topic: &str,
) -> Result<Option<usize>, StartupError> {
    b.partition_count(topic)
        .map_err(|e| StartupError::Metadata(topic.to_string(), e.to_string()))
}

/// The three topics of a deployment, by name.
pub(crate) struct Topics {
    pub main: String,
    pub dlq: String,
    pub parking: String,
}

impl Topics {
    fn of(p: &crate::runtime::Pipeline) -> Topics {
        Topics {
            main: p.config.kafka.topic.clone(),
            dlq: p.dlq_topic.clone(),
            parking: p.parking_topic.clone(),
        }
    }
}

/// The partition counts of the three topics, once they passed [`check_topics`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopicCounts {
    pub main: usize,
    pub dlq: usize,
    pub parking: usize,
}

/// What the consumer checks of the topics before it subscribes (and `courier
/// check-config --online` before anything starts): every topic exists —
/// Courier creates none (a DLQ the broker auto-created would get its default
/// partition count, and a write to a missing topic would hold its event's
/// offset until someone noticed) — and main p pairs with DLQ p. Blocking.
pub(crate) fn check_topics(b: &dyn BrokerView, t: &Topics) -> Result<TopicCounts, StartupError> {
    let missing = |role, topic: &str| StartupError::MissingTopic {
        role,
        topic: topic.to_string(),
    };
    let main = partition_count(b, &t.main)?.ok_or_else(|| missing("main", &t.main))?;
    let dlq = partition_count(b, &t.dlq)?.ok_or_else(|| missing("DLQ", &t.dlq))?;
    let parking = partition_count(b, &t.parking)?.ok_or_else(|| missing("parking", &t.parking))?;
    check_pairs(&t.main, main, &t.dlq, dlq)?;
    Ok(TopicCounts { main, dlq, parking })
}

/// The consumer actor's `pre_start`.
pub(super) async fn start(
    myself: ActorRef<ConsumerMsg>,
    args: ConsumerArgs,
) -> Result<ConsumerState, ActorProcessingErr> {
    let p = &args.pipeline;
    let cfg = &p.config;
    let closing = Arc::new(AtomicBool::new(false));
    let revoke_wait = cfg.pipeline.drain_timeout + Duration::from_millis(2_000);
    let ctx = CourierContext::new(
        cfg.kafka.topic.clone(),
        p.dlq_topic.clone(),
        myself.clone(),
        revoke_wait,
        closing.clone(),
        p.buffered.clone(),
    )
    .watching_the_group(crate::core::group_watch::limit(
        cfg.kafka.max_poll_interval,
        cfg.kafka.session_timeout,
    ));
    // Statistics every 10 s (unless `[kafka.properties]` sets it), on the
    // group consumer alone (a client nobody polls would queue them up): the
    // group watch reads the group's join state in them (`core::group_watch`).
    let mut settings = consumer_config(&cfg.kafka);
    if settings.get("statistics.interval.ms").is_none() {
        settings.set("statistics.interval.ms", "10000");
    }
    let consumer: KafkaConsumer = Detached::new(
        crate::kafka::cap_decompression(settings, &cfg.kafka, cfg.pipeline.max_buffered_bytes)
            .create_with_context(ctx)?,
    );
    let consumer = Arc::new(consumer);
    // Lag checks and assignment lookups on a client of their own (see
    // `kafka::seams::Broker`).
    let broker: Arc<dyn BrokerView> = Arc::new(Broker::new(consumer_config(&cfg.kafka))?);
    let (b, topics) = (broker.clone(), Topics::of(p));
    let main_n = tokio::task::spawn_blocking(move || check_topics(&*b, &topics))
        .await??
        .main;
    // Main p and DLQ p are read by the same member (range assignment).
    consumer.subscribe(&[cfg.kafka.topic.as_str(), p.dlq_topic.as_str()])?;
    let subscribed_at = std::time::Instant::now();
    myself.send_interval(cfg.degraded.lag_check_interval, || ConsumerMsg::LagTick);
    let metadata_max = match crate::kafka::identity::metadata_max_bytes(
        &crate::kafka::client_base(&cfg.kafka),
        Duration::from_secs(10),
    )
    .await
    {
        Some(n) => {
            tracing::info!(
                offset_metadata_max_bytes = n,
                "commit metadata limit read from the brokers"
            );
            n
        }
        None => {
            let n = completed::DEFAULT_MAX_METADATA_BYTES;
            tracing::warn!(
                assumed = n,
                "cannot read offset.metadata.max.bytes from the brokers: assuming Kafka's default"
            );
            n
        }
    };
    let poller = Poller::start(
        consumer.clone(),
        cfg.pipeline.max_buffered,
        cfg.pipeline.max_buffered_bytes,
    )?;
    tracing::info!(topic = %cfg.kafka.topic, group = %cfg.kafka.group_id, partitions = main_n, "consumer started");
    args.pipeline.assignment.set_total(main_n);
    let io: Arc<dyn PartitionIo> = consumer.clone();
    let kafka = Kafka {
        io,
        broker,
        client: Some(Client {
            consumer,
            poller: Some(poller),
        }),
        metadata_max,
        subscribed_at,
    };
    Ok(ConsumerState::new(
        args.pipeline,
        args.ready,
        args.delivery,
        kafka,
        closing,
    ))
}
