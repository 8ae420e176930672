//! Consumer actor: owns the Kafka consumer and the poll thread, routes records to
//! partition actors, and handles rebalances, partition-actor crashes and shutdown.
//!
//! Crash recovery of a partition actor: its in-flight set is gone, so the partition
//! is sought back to the last stored watermark and re-read from there. Records of
//! the old read position that were already polled are fenced off (dropped) until
//! the first record of the new read position arrives.

use crate::actors::delivery_pool::PoolHandles;
use crate::actors::partition::{
    PartitionActor, PartitionArgs, PartitionMsg, PartitionShared, Positions, SoonCommits, Src,
};
use crate::api_health::HealthVerdict;
use crate::core::completed::{self, Completed};
use crate::core::offsets::NextOffset;
use crate::kafka::detached::Detached;
use crate::kafka::poller::Poller;
use crate::kafka::{consumer_config, CourierContext, KafkaConsumer, PollSink, Record};
use crate::metrics::{self as m, Readiness};
use crate::runtime::Pipeline;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub enum ConsumerMsg {
    Records(Vec<Record>),
    Assigned(Vec<i32>),
    /// Sent from inside the revoke callback, which waits on `ack`.
    Revoked {
        partitions: Vec<i32>,
        ack: std::sync::mpsc::SyncSender<()>,
    },
    /// Graceful shutdown: stop fetching, drain within the grace period, commit, close.
    Shutdown(RpcReplyPort<()>),
    /// The health verdict changed: fan out to the partition actors.
    Health(HealthVerdict),
    /// Time to look at DLQ lag.
    LagTick,
    /// Result of a lag check, per partition.
    Lag(LagAnswer),
    /// librdkafka moved a partition's position after a fetch at `at` was out
    /// of range (`kafka::client_log`).
    OffsetReset {
        dlq: bool,
        partition: i32,
        at: i64,
    },
    /// The Kafka client failed fatally (the poll thread stopped).
    ClientFatal(String),
}

pub struct ConsumerArgs {
    pub pipeline: Arc<Pipeline>,
    pub ready: Arc<Readiness>,
    /// Given to each partition actor: where its jobs go.
    pub delivery: PoolHandles,
}

/// The poll thread's events arrive in the consumer's mailbox.
impl PollSink for ActorRef<ConsumerMsg> {
    fn records(&self, records: Vec<Record>) -> bool {
        self.send_message(ConsumerMsg::Records(records)).is_ok()
    }
    fn assigned(&self, partitions: Vec<i32>) -> bool {
        self.send_message(ConsumerMsg::Assigned(partitions)).is_ok()
    }
    fn revoked(&self, partitions: Vec<i32>, ack: std::sync::mpsc::SyncSender<()>) -> bool {
        self.send_message(ConsumerMsg::Revoked { partitions, ack })
            .is_ok()
    }
    fn auto_committed(&self) {
        metrics::counter!(crate::metrics::OFFSET_COMMITS, "kind" => "auto").increment(1);
    }
    fn client_fatal(&self, reason: String) {
        let _ = self.send_message(ConsumerMsg::ClientFatal(reason));
    }
    fn offset_reset(&self, dlq: bool, partition: i32, at: i64) {
        let _ = self.send_message(ConsumerMsg::OffsetReset { dlq, partition, at });
    }
}

struct Part {
    actor: ActorRef<PartitionMsg>,
    shared: Arc<PartitionShared>,
    /// Per side (main, DLQ): first and last offset handed to the current actor.
    first_forwarded: [Option<i64>; 2],
    last_forwarded: [Option<i64>; 2],
    /// After a seek: drop records above this offset until one at or below arrives.
    fence: [Option<i64>; 2],
}

pub struct ConsumerState {
    pipeline: Arc<Pipeline>,
    ready: Arc<Readiness>,
    delivery: PoolHandles,
    consumer: Option<Arc<KafkaConsumer>>,
    /// Commits before auto-commit of all partitions, coalesced.
    commits: Arc<SoonCommits>,
    poller: Option<Poller>,
    closing: Arc<AtomicBool>,
    parts: HashMap<i32, Part>,
    generation: u64,
    /// Offset lookups for the lag check run on a client of their own: on the group
    /// consumer's connection each `ListOffsets` waits behind a long-poll `Fetch`
    /// (up to `fetch.wait.max.ms`), which made the first check after an assignment
    /// take ~12 s while every partition waited in `drain_dlq` (docs/BENCHMARKS.md).
    lag_client: Arc<Detached<BaseConsumer>>,
    /// A lag check is running (until its `Lag` message arrives): ticks skip
    /// instead of piling up behind it.
    lag_running: bool,
    /// Partitions were assigned while a check was running: check again when it ends.
    lag_again: bool,
    /// When a lag check last read the topics' ids (at most once a second).
    ids_read_at: Option<std::time::Instant>,
    /// The brokers' `offset.metadata.max.bytes` (read at start).
    metadata_max: usize,
    /// The topics' ids (main, DLQ) at the last assignment: each commit's
    /// metadata is bound to them (`core::completed`).
    topic_ids: [Option<Arc<str>>; 2],
    /// When this consumer subscribed, until its first assignment: the wait is
    /// `courier_takeover_seconds` (about a second for a restarted static member,
    /// up to `session.timeout.ms` when the group must first expire a dead one).
    subscribed_at: Option<std::time::Instant>,
}

pub struct ConsumerActor;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
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
fn check_pairs(main: &str, main_n: usize, dlq: &str, dlq_n: usize) -> Result<(), StartupError> {
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

fn partition_count<C: rdkafka::consumer::ConsumerContext>(
    c: &BaseConsumer<C>,
    topic: &str,
) -> Result<Option<usize>, StartupError> {
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| StartupError::Metadata(topic.to_string(), e.to_string()))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len())
        .filter(|n| *n > 0))
}

impl Actor for ConsumerActor {
    type Msg = ConsumerMsg;
    type State = ConsumerState;
    type Arguments = ConsumerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConsumerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
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
        );
        let consumer: KafkaConsumer = Detached::new(
            crate::kafka::cap_decompression(
                consumer_config(&cfg.kafka),
                &cfg.kafka,
                cfg.pipeline.max_buffered_bytes,
            )
            .create_with_context(ctx)?,
        );
        let consumer = Arc::new(consumer);
        let (c2, topic, dlq, parking) = (
            consumer.clone(),
            cfg.kafka.topic.clone(),
            p.dlq_topic.clone(),
            p.parking_topic.clone(),
        );
        let (main_n, dlq_n, parking_n) = tokio::task::spawn_blocking(move || {
            Ok::<_, StartupError>((
                partition_count(&c2, &topic)?,
                partition_count(&c2, &dlq)?,
                partition_count(&c2, &parking)?,
            ))
        })
        .await??;
        // Every topic must exist: Courier creates none (a DLQ the broker
        // auto-created would get its default partition count, and a write to a
        // missing topic would hold its event's offset until someone noticed).
        let missing = |role, topic: &str| StartupError::MissingTopic {
            role,
            topic: topic.to_string(),
        };
        let Some(main_n) = main_n else {
            return Err(missing("main", &cfg.kafka.topic).into());
        };
        let Some(dlq_n) = dlq_n else {
            return Err(missing("DLQ", &p.dlq_topic).into());
        };
        if parking_n.is_none() {
            return Err(missing("parking", &p.parking_topic).into());
        }
        check_pairs(&cfg.kafka.topic, main_n, &p.dlq_topic, dlq_n)?;
        // Main p and DLQ p are read by the same member (range assignment).
        consumer.subscribe(&[cfg.kafka.topic.as_str(), p.dlq_topic.as_str()])?;
        let subscribed_at = Some(std::time::Instant::now());
        myself.send_interval(cfg.degraded.lag_check_interval, || ConsumerMsg::LagTick);
        let mut lag_cfg = consumer_config(&cfg.kafka);
        lag_cfg.set("enable.auto.commit", "false");
        // It never joins the group: it must not claim this process's member id.
        lag_cfg.remove("group.instance.id");
        let lag_client: BaseConsumer = lag_cfg.create()?;
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
                tracing::warn!(assumed = n, "cannot read offset.metadata.max.bytes from the brokers: assuming Kafka's default");
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
        Ok(ConsumerState {
            pipeline: args.pipeline,
            ready: args.ready,
            delivery: args.delivery,
            consumer: Some(consumer),
            commits: SoonCommits::new(),
            poller: Some(poller),
            closing,
            parts: HashMap::new(),
            generation: 0,
            subscribed_at,
            lag_client: Arc::new(Detached::new(lag_client)),
            lag_running: false,
            lag_again: false,
            ids_read_at: None,
            metadata_max,
            topic_ids: [None, None],
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ConsumerMsg::Records(records) => s.route(records),
            ConsumerMsg::Assigned(partitions) => {
                let mut new = Vec::with_capacity(partitions.len());
                for p in partitions {
                    if s.parts.contains_key(&p) {
                        // Only an incremental assignment (refused in the config)
                        // names a partition already owned: replacing its actor
                        // would lose its in-flight set, and the new actor's
                        // watermark would pass the old one's unfinished events.
                        tracing::warn!(
                            partition = p,
                            "assigned a partition already owned: keeping its actor"
                        );
                        continue;
                    }
                    new.push(p);
                }
                // Partitions added to the main topic or the DLQ while running
                // (the group rebalances when they appear): the `range` assignor
                // would then pair main p with a DLQ p elsewhere, or with none.
                // Nothing is started on such an assignment: the process exits
                // for a restart, which refuses to start until the counts match.
                if let Err(e) = s.check_partition_counts().await {
                    tracing::error!(error = %e, "partition counts changed while running: refusing this assignment and exiting");
                    s.pipeline.fatal(e.to_string());
                    return Ok(());
                }
                // Records of the new assignment wait in this mailbox meanwhile.
                let mut skips = s.committed_metadata(&new).await;
                for p in new {
                    let c = skips.remove(&p).unwrap_or_default();
                    s.spawn_partition(
                        &myself,
                        p,
                        [None, None],
                        Arc::new(PartitionShared::default()),
                        c,
                    )
                    .await?;
                }
                s.ready.assigned.store(true, Ordering::SeqCst);
                metrics::gauge!(m::ASSIGNED_PARTITIONS).set(s.parts.len() as f64);
                if let Some(at) = s.subscribed_at.filter(|_| !s.parts.is_empty()) {
                    s.subscribed_at = None;
                    let waited = at.elapsed();
                    metrics::gauge!(m::TAKEOVER).set(waited.as_secs_f64());
                    tracing::info!(
                        waited_ms = waited.as_millis() as u64,
                        partitions = s.parts.len(),
                        "first assignment"
                    );
                }
                s.pipeline.assignment.set_assigned(s.parts.len());
                // New partitions read DLQ p before main p until their DLQ lag is
                // known: look it up now rather than at the next tick.
                s.check_lag(&myself, true);
            }
            ConsumerMsg::Revoked { partitions, ack } => {
                let deadline =
                    s.pipeline.config.pipeline.drain_timeout + Duration::from_millis(1_000);
                s.drain(&partitions, deadline).await;
                metrics::gauge!(m::ASSIGNED_PARTITIONS).set(s.parts.len() as f64);
                s.pipeline.assignment.set_assigned(s.parts.len());
                if s.parts.is_empty() {
                    s.ready.assigned.store(false, Ordering::SeqCst);
                }
                let _ = ack.send(());
            }
            ConsumerMsg::Health(v) => {
                s.ready
                    .api_unavailable
                    .store(v.api_unavailable, Ordering::Relaxed);
                for part in s.parts.values() {
                    let _ = part.actor.send_message(PartitionMsg::Health(v));
                }
            }
            ConsumerMsg::LagTick => s.check_lag(&myself, false),
            ConsumerMsg::OffsetReset { dlq, partition, at } => {
                if let Some(part) = s.parts.get(&partition) {
                    let src = if dlq { Src::Dlq } else { Src::Main };
                    let _ = part
                        .actor
                        .send_message(PartitionMsg::OffsetReset { src, at });
                }
            }
            ConsumerMsg::Lag(lags) => {
                s.lag_running = false;
                if std::mem::take(&mut s.lag_again) {
                    s.check_lag(&myself, false);
                }
                let read_ids = lags.logs.iter().any(Option::is_some);
                for (p, positions) in lags.positions {
                    if let Some(part) = s.parts.get(&p) {
                        if read_ids {
                            let _ = part
                                .actor
                                .send_message(PartitionMsg::Logs(lags.logs.clone()));
                        }
                        let _ = part.actor.send_message(PartitionMsg::Positions(positions));
                    }
                }
            }
            // Nothing here can repair it (a new consumer in this process could
            // fence the one that took the id); the process ends non-zero and
            // the graceful shutdown drains what is on the wire.
            ConsumerMsg::ClientFatal(reason) => s.pipeline.fatal(reason),
            ConsumerMsg::Shutdown(reply) => {
                s.shutdown().await;
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            let Some(p) = s.partition_of(&cell) else {
                return Ok(());
            };
            tracing::error!(partition = p, error = %err, "partition actor crashed; re-reading the partition from its watermark");
            if let Err(e) = s.pipeline.record_restart("partition") {
                s.pipeline
                    .fatal(format!("partition actors crash too often: {e}"));
                return Ok(());
            }
            s.recover(&myself, p).await?;
        }
        Ok(())
    }
}

impl ConsumerState {
    fn consumer(&self) -> Result<&Arc<KafkaConsumer>, ActorProcessingErr> {
        self.consumer
            .as_ref()
            .ok_or_else(|| "consumer closed".into())
    }

    fn partition_of(&self, cell: &ActorCell) -> Option<i32> {
        self.parts
            .iter()
            .find(|(_, part)| part.actor.get_id() == cell.get_id())
            .map(|(p, _)| *p)
    }

    async fn spawn_partition(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        p: i32,
        start: [Option<NextOffset>; 2],
        shared: Arc<PartitionShared>,
        committed: Committed,
    ) -> Result<(), ActorProcessingErr> {
        self.generation += 1;
        let args = PartitionArgs {
            ready: self.ready.clone(),
            pipeline: self.pipeline.clone(),
            delivery: self.delivery.clone(),
            consumer: Some(self.consumer()?.clone()),
            commits: self.commits.clone(),
            partition: p,
            generation: self.generation,
            start,
            shared: shared.clone(),
            skip: committed.skip,
            logs: self.topic_ids.clone(),
            metadata_max_bytes: self.metadata_max,
            read_from_start: committed.other_log,
            verify: committed.verify,
        };
        let (actor, _) = Actor::spawn_linked(None, PartitionActor, args, myself.get_cell()).await?;
        self.parts.insert(
            p,
            Part {
                actor,
                shared,
                first_forwarded: start.map(|s| s.map(NextOffset::get)),
                last_forwarded: [None, None],
                fence: [None, None],
            },
        );
        Ok(())
    }

    /// Splits a batch by partition (keeping order) and hands each part over.
    fn route(&mut self, records: Vec<Record>) {
        // Dropped records were never going to be taken in by an actor.
        let (mut dropped, mut dropped_bytes) = (0, 0);
        let mut by_part: HashMap<i32, Vec<Record>> = HashMap::new();
        for r in records {
            let Some(part) = self.parts.get_mut(&r.partition) else {
                // Not ours (any more): not stored, so re-read by the owner.
                dropped += 1;
                dropped_bytes += r.size();
                continue;
            };
            let side = if r.dlq { Src::Dlq } else { Src::Main } as usize;
            if let Some(f) = part.fence[side] {
                if r.offset > f {
                    // Polled before the seek: the re-read brings it again.
                    dropped += 1;
                    dropped_bytes += r.size();
                    continue;
                }
                part.fence[side] = None;
            }
            part.first_forwarded[side].get_or_insert(r.offset);
            part.last_forwarded[side] = Some(r.offset);
            by_part.entry(r.partition).or_default().push(r);
        }
        for (p, recs) in by_part {
            let bytes = recs.iter().map(Record::size).sum();
            match self.parts.get(&p) {
                Some(part) => {
                    part.shared.buffered.add(recs.len(), bytes);
                    // If the actor just died, the records are lost with it;
                    // recovery seeks back to the watermark, which is below them.
                    let _ = part.actor.send_message(PartitionMsg::Records(recs));
                }
                None => {
                    dropped += recs.len();
                    dropped_bytes += bytes;
                }
            }
        }
        self.pipeline.buffered.sub(dropped, dropped_bytes);
    }

    async fn recover(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        p: i32,
    ) -> Result<(), ActorProcessingErr> {
        let Some(old) = self.parts.remove(&p) else {
            return Ok(());
        };
        // A crashed actor's post_stop did not run: give its counts back here.
        old.shared.release_held(&self.ready);
        old.shared.release_buffered(&self.pipeline.buffered);
        let consumer = self.consumer()?.clone();
        let topics = [
            self.pipeline.config.kafka.topic.clone(),
            self.pipeline.dlq_topic.clone(),
        ];
        let mut starts = [None, None];
        let mut fences = [None, None];
        let mut skip = [None, None];
        for src in [Src::Main, Src::Dlq] {
            let i = src as usize;
            // What the crashed incarnation stored names the offsets it had
            // finished above its watermark: the re-read skips them.
            if let (Some((at, meta)), Some(log)) =
                (old.shared.stored_with_metadata(src), &self.topic_ids[i])
            {
                skip[i] = completed::decode(log, at, &meta);
            }
            let start = old.shared.stored(src).or(old.first_forwarded[i]);
            starts[i] = start.map(NextOffset::at);
            if let (Some(s), Some(last)) = (start, old.last_forwarded[i]) {
                if s <= last {
                    // Unfinished work was lost with the actor: read again from the watermark.
                    let mut tpl = rdkafka::TopicPartitionList::new();
                    tpl.add_partition(&topics[i], p);
                    let _ = consumer.resume(&tpl);
                    let c = consumer.clone();
                    let t = topics[i].clone();
                    tokio::task::spawn_blocking(move || {
                        c.seek(&t, p, Offset::Offset(s), Duration::from_secs(10))
                    })
                    .await??;
                    fences[i] = Some(last);
                    tracing::info!(partition = p, topic = %topics[i], from = s, "partition sought back to its watermark");
                }
            }
        }
        // Not the metadata read at assignment (stale by now: this owner
        // finished and stored more since) but the crashed incarnation's last.
        let named: u64 = skip.iter().flatten().map(Completed::len).sum();
        tracing::info!(
            partition = p,
            named,
            "re-read skips the offsets the crashed actor's last stored metadata names done"
        );
        let committed = Committed {
            skip,
            ..Committed::default()
        };
        self.spawn_partition(myself, p, starts, old.shared, committed)
            .await?;
        if let Some(part) = self.parts.get_mut(&p) {
            part.fence = fences;
            part.last_forwarded = old.last_forwarded;
        }
        Ok(())
    }

    /// Reads, off the runtime, the group's committed offsets of `partitions` (main
    /// and DLQ) and decodes their metadata: the offsets an earlier owner finished
    /// above its committed position, and whether the position was made for
    /// another log. A failed lookup skips nothing (the earlier owner's finished
    /// work is then delivered again).
    async fn committed_metadata(&mut self, partitions: &[i32]) -> HashMap<i32, Committed> {
        if partitions.is_empty() {
            return HashMap::new();
        }
        let c = self.lag_client.clone();
        let topics = [
            self.pipeline.config.kafka.topic.clone(),
            self.pipeline.dlq_topic.clone(),
        ];
        // The topics' ids now: metadata made for another incarnation of a
        // topic (deleted and recreated under its name) names offsets of a log
        // that is gone, and is not trusted.
        let (c2, t2) = (c.clone(), topics.clone());
        let ids = tokio::task::spawn_blocking(move || {
            let names = [t2[0].as_str(), t2[1].as_str()];
            let mut ids = crate::kafka::identity::topic_ids(&c2, &names, Duration::from_secs(10));
            t2.map(|t| ids.remove(&t).map(Arc::<str>::from))
        })
        .await
        .unwrap_or_default();
        if ids[0].is_none() {
            tracing::warn!(topic = %topics[0], "cannot read the topic's id at the assignment: the committed metadata cannot be tied to this log, so the finished work it names is delivered again, and a position made for a log is not stored over until a lag check reads the id (another id: the partition is read from its log's start)");
        }
        self.topic_ids = ids.clone();
        let parts = partitions.to_vec();
        let lookup = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::new();
            for t in &topics {
                for p in &parts {
                    tpl.add_partition(t, *p);
                }
            }
            let committed = c.committed_offsets(tpl, Duration::from_secs(10))?;
            let mut out: HashMap<i32, Committed> = HashMap::new();
            let mut positions = Vec::new();
            for (i, t) in topics.iter().enumerate() {
                // The log start of each partition: where a committed position
                // below it lost events (deleted-unread accounting).
                let starts = list_offsets(&c, t, &parts, Offset::Beginning);
                if starts.is_none() {
                    tracing::warn!(topic = %t, partitions = ?parts, "cannot read the log start offsets: events deleted unread are not checked at this assignment");
                }
                for e in committed.elements_for_topic(t) {
                    if let Offset::Offset(at) = e.offset() {
                        let judged = completed::assess(at, e.metadata(), ids[i].as_deref());
                        let start = starts.as_ref().and_then(|s| s.get(&e.partition()));
                        if let Some(&start) = start {
                            positions.push((i, e.partition(), at, start, judged.skip.clone()));
                        }
                        if judged.other_log {
                            tracing::warn!(topic = %t, partition = e.partition(), committed = at, "the committed position was made for another log (its metadata names another topic id: the topic was recreated): the partition is read from its log's start");
                        }
                        let entry = out.entry(e.partition()).or_default();
                        entry.skip[i] = judged.skip;
                        entry.other_log[i] = judged.other_log;
                        entry.verify[i] = judged.verify.map(Arc::from);
                    }
                }
            }
            Ok::<_, rdkafka::error::KafkaError>((out, positions))
        });
        match lookup.await {
            Ok(Ok((out, positions))) => {
                let topics = [&self.pipeline.config.kafka.topic, &self.pipeline.dlq_topic];
                for t in topics {
                    for p in partitions {
                        self.pipeline.deleted_unread_series(t, *p);
                    }
                }
                for (i, p, committed, start, done) in positions {
                    self.pipeline
                        .deleted_unread(topics[i], p, committed, start, done.as_ref());
                }
                let named: u64 = out
                    .values()
                    .flat_map(|c| c.skip.iter().flatten())
                    .map(Completed::len)
                    .sum();
                tracing::info!(partitions = ?partitions, named, "committed metadata read: offsets done above the committed positions are skipped");
                out
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the committed offsets' metadata: the previous owner's finished work above its watermark is delivered again");
                HashMap::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "committed metadata lookup failed");
                HashMap::new()
            }
        }
    }

    /// Looks up, off the runtime, each assigned partition's end offsets and the
    /// group's committed DLQ position (where reading starts when nothing was read).
    /// While one check runs, a tick is skipped; an assignment (`again_if_busy`)
    /// asks for one more run after it, since the running check predates it.
    fn check_lag(&mut self, myself: &ActorRef<ConsumerMsg>, again_if_busy: bool) {
        if self.parts.is_empty() {
            return;
        }
        if self.lag_running {
            self.lag_again |= again_if_busy;
            return;
        }
        self.lag_running = true;
        let c = self.lag_client.clone();
        let dlq = self.pipeline.dlq_topic.clone();
        let main = self.pipeline.config.kafka.topic.clone();
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        let read = self.dlq_read(&parts);
        let ids = self
            .ids_read_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if ids {
            self.ids_read_at = Some(std::time::Instant::now());
        }
        let me = myself.clone();
        tokio::spawn(async move {
            let lookup = tokio::task::spawn_blocking(move || {
                lag_lookup(&c, &main, &dlq, &parts, &read, ids)
            });
            // Always answer, even if the lookup panicked: the answer ends the check.
            let _ = me.send_message(ConsumerMsg::Lag(lookup.await.unwrap_or_default()));
        });
    }

    /// How far each partition's DLQ side was read: the group consumer's
    /// position (librdkafka moves it past control records, which are never
    /// handed over) and the last DLQ offset handed to the partition actor.
    fn dlq_read(&self, parts: &[i32]) -> HashMap<i32, DlqRead> {
        let dlq = &self.pipeline.dlq_topic;
        let position = self.consumer.as_ref().and_then(|c| c.position().ok());
        parts
            .iter()
            .map(|p| {
                let at = position
                    .as_ref()
                    .and_then(|t| t.find_partition(dlq, *p))
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    });
                let last = self
                    .parts
                    .get(p)
                    .and_then(|part| part.last_forwarded[Src::Dlq as usize]);
                (
                    *p,
                    DlqRead {
                        position: at,
                        last_forwarded: last,
                    },
                )
            })
            .collect()
    }

    /// The main topic and the DLQ still have as many partitions as each other
    /// (when both are in the metadata).
    async fn check_partition_counts(&self) -> Result<(), StartupError> {
        let c = self.lag_client.clone();
        let main = self.pipeline.config.kafka.topic.clone();
        let dlq = self.pipeline.dlq_topic.clone();
        tokio::task::spawn_blocking(move || {
            let main_n = partition_count(&c, &main)?;
            let dlq_n = partition_count(&c, &dlq)?;
            match (main_n, dlq_n) {
                (Some(m), Some(d)) => check_pairs(&main, m, &dlq, d),
                // A topic being deleted and created again (a purge) has no
                // partitions for a moment: its next assignment is checked.
                _ => {
                    tracing::warn!(main = %main, dlq = %dlq, main_partitions = ?main_n, dlq_partitions = ?dlq_n, "a topic of the pair has no partitions in the metadata (deleted, or being created): partition counts checked again at the next assignment");
                    Ok(())
                }
            }
        })
        .await
        .map_err(|e| StartupError::Metadata("main and DLQ".into(), e.to_string()))?
    }

    /// Drains the given partitions concurrently (bounded) and stops their actors.
    async fn drain(&mut self, partitions: &[i32], deadline: Duration) {
        let mut waits = Vec::new();
        for p in partitions {
            if let Some(part) = self.parts.remove(p) {
                let (tx, rx) = ractor::concurrency::oneshot();
                let _ = part.actor.send_message(PartitionMsg::Drain(tx.into()));
                waits.push((*p, part.actor, rx));
            }
        }
        let until = tokio::time::Instant::now() + deadline;
        for (p, actor, rx) in waits {
            match tokio::time::timeout_at(until, rx).await {
                Ok(Ok(stored)) => tracing::info!(partition = p, ?stored, "partition drained"),
                _ => tracing::warn!(partition = p, "partition did not drain in time"),
            }
            actor.stop(Some("revoked".into()));
        }
    }

    /// Graceful shutdown: stop fetching, drain the partitions within
    /// `pipeline.shutdown_grace`, then the final commit, the group leave and
    /// the consumer's close on a thread of their own ([`finish`]), waited
    /// for until [`close_deadline`]. librdkafka's close has no time limit
    /// of its own; one that does not end (it has hung around deleted
    /// topics) is left behind on that thread, which the process does not
    /// wait for at exit.
    async fn shutdown(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        let Some(consumer) = self.consumer.take() else {
            return;
        };
        let grace = self.pipeline.config.pipeline.shutdown_grace;
        let grace_end = tokio::time::Instant::now() + grace;
        // Stop fetching; the poll thread keeps running so the group sees us alive.
        if let Ok(assignment) = consumer.assignment() {
            let _ = consumer.pause(&assignment);
        }
        let partitions: Vec<i32> = self.parts.keys().copied().collect();
        self.drain(&partitions, grace).await;
        let until = close_deadline(grace_end, tokio::time::Instant::now());
        let kafka = &self.pipeline.config.kafka;
        // A dynamic member leaves as it closes; a static one only if asked.
        let leave = kafka.leave_on_shutdown && kafka.instance_id().is_some();
        let poller = self.poller.take();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let committed = Arc::new(AtomicBool::new(false));
        let by = std::time::Instant::now()
            + until.saturating_duration_since(tokio::time::Instant::now());
        let done = committed.clone();
        let spawned = std::thread::Builder::new()
            .name("courier-shutdown".into())
            .spawn(move || {
                finish(consumer, poller, leave, by, &done);
                let _ = tx.send(());
            });
        match spawned {
            Ok(_) => {
                if tokio::time::timeout_at(until, rx).await.is_err() {
                    if committed.load(Ordering::SeqCst) {
                        tracing::warn!("the Kafka consumer's close did not finish within pipeline.shutdown_grace: exiting without it (the final commit was made; the group reassigns the partitions after kafka.session_timeout)");
                    } else {
                        tracing::warn!("the final commit did not finish within pipeline.shutdown_grace: exiting without it (what finished since the last commit that landed is delivered again; the group reassigns the partitions after kafka.session_timeout)");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the shutdown thread: no final commit; the group reassigns the partitions after kafka.session_timeout")
            }
        }
        self.ready.assigned.store(false, Ordering::SeqCst);
    }
}

/// What the shutdown needs after waiting for the final commit and the
/// close: stopping the actors and the runtime, flushing the log.
pub const EXIT_MARGIN: Duration = Duration::from_secs(1);
/// The least time the final commit and the close are given after the
/// drain, even when the drain took the whole grace.
pub const CLOSE_AT_LEAST: Duration = Duration::from_secs(2);

/// Until when the shutdown waits for the final commit and the close: the
/// end of `pipeline.shutdown_grace` less [`EXIT_MARGIN`] (with nothing in
/// flight the process exits within the grace), and at least
/// [`CLOSE_AT_LEAST`] after `now` (the drain's end).
pub fn close_deadline(
    grace_end: tokio::time::Instant,
    now: tokio::time::Instant,
) -> tokio::time::Instant {
    let by_grace = grace_end.checked_sub(EXIT_MARGIN).unwrap_or(grace_end);
    by_grace.max(now + CLOSE_AT_LEAST)
}

/// The end of a graceful shutdown, off the runtime (every step blocks in
/// librdkafka): stops the poll thread, commits what is stored, leaves the
/// group if asked (a static member), and closes the consumer — its revoke
/// callback commits again and, for a dynamic member, the close sends
/// LeaveGroup. Nothing waits for this thread past `by`.
/// `committed`: set once the final commit was answered.
fn finish(
    consumer: Arc<KafkaConsumer>,
    mut poller: Option<Poller>,
    leave: bool,
    by: std::time::Instant,
    committed: &AtomicBool,
) {
    if let Some(p) = poller.as_mut() {
        p.stop_and_join();
    }
    // A consumer that failed fatally sends nothing any more: no commit,
    // no LeaveGroup (the group has already moved its partitions).
    if let Some((code, _)) = consumer.client().fatal_error() {
        tracing::warn!(?code, "no final commit: the Kafka consumer failed fatally; the partitions' new owners deliver again what finished since the last commit that landed");
        return;
    }
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!("final commit done"),
        Err(e) => {
            tracing::info!(error = %e, "final commit (nothing new to commit is fine)")
        }
    }
    committed.store(true, Ordering::SeqCst);
    if leave {
        let within = by
            .saturating_duration_since(std::time::Instant::now())
            .min(Duration::from_secs(5));
        if crate::kafka::leave_group(&consumer, within) {
            tracing::info!("left the consumer group: the other members take the partitions now");
        } else {
            tracing::warn!("could not leave the consumer group in time: the partitions move after kafka.session_timeout");
        }
    }
    // The close (rdkafka's drop: the revoke callback, LeaveGroup for a
    // dynamic member) runs here once this thread holds the last handle: a
    // partition actor's state or a lookup still holding one lets go within
    // moments. Past `by` the last holder's drop runs it, on a thread of its
    // own (`kafka::detached`).
    let mut consumer = consumer;
    loop {
        match Arc::try_unwrap(consumer) {
            Ok(last) => {
                drop(last.into_inner());
                tracing::debug!("the Kafka consumer is closed");
                return;
            }
            Err(shared) if std::time::Instant::now() < by => {
                consumer = shared;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => {
                tracing::warn!("the Kafka consumer is still in use at the end of pipeline.shutdown_grace: its close is left to its last user");
                return;
            }
        }
    }
}

/// How far the group consumer read a DLQ partition (see `ConsumerState::dlq_read`).
#[derive(Debug, Clone, Copy, Default)]
struct DlqRead {
    position: Option<i64>,
    last_forwarded: Option<i64>,
}

/// The start or end offsets of `parts` of `topic` in one `ListOffsets`:
/// `offsets_for_times` with the special timestamps -1 (latest) and -2
/// (earliest). `None` when the lookup failed.
fn list_offsets(
    c: &BaseConsumer,
    topic: &str,
    parts: &[i32],
    at: Offset,
) -> Option<HashMap<i32, i64>> {
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, *p, at).ok()?;
    }
    let answer = c.offsets_for_times(tpl, Duration::from_secs(5)).ok()?;
    Some(
        answer
            .elements_for_topic(topic)
            .iter()
            .filter(|e| e.error().is_ok())
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect(),
    )
}

/// What the committed offsets of a partition pair say (main, DLQ).
#[derive(Debug, Default)]
struct Committed {
    /// The offsets an earlier owner finished above the committed position.
    skip: [Option<Completed>; 2],
    /// The position was made for another log (see `Settings::read_from_start`).
    other_log: [bool; 2],
    /// The log the position was made for, to check once the topic's id is
    /// read (see `Settings::verify`).
    verify: [Option<Arc<str>>; 2],
}

/// What one lag check found.
#[derive(Debug, Default)]
pub struct LagAnswer {
    /// Per partition pair.
    positions: Vec<(i32, Positions)>,
    /// The topics' ids (main, DLQ) now (`None`: not read): a changed id is a
    /// topic recreated under the partitions' positions.
    logs: [Option<Arc<str>>; 2],
}

/// One batched `ListOffsets` per topic and kind (not one per partition), plus one
/// `OffsetFetch`, and one `DescribeTopics` for the topics' ids.
fn lag_lookup(
    c: &BaseConsumer,
    main: &str,
    dlq: &str,
    parts: &[i32],
    read: &HashMap<i32, DlqRead>,
    read_ids: bool,
) -> LagAnswer {
    let main_highs = list_offsets(c, main, parts, Offset::End).unwrap_or_default();
    // The ids only when the brokers answered: a DescribeTopics while none is
    // up makes librdkafka reconnect without its backoff (measured: ~30,000
    // refused connections per instance in a broker restart, against ~500).
    let logs = if read_ids && !main_highs.is_empty() {
        let mut ids = crate::kafka::identity::topic_ids(c, &[main, dlq], Duration::from_secs(5));
        [main, dlq].map(|t| ids.remove(t).map(Arc::<str>::from))
    } else {
        [None, None]
    };
    let highs = list_offsets(c, dlq, parts, Offset::End).unwrap_or_default();
    let lows = list_offsets(c, dlq, parts, Offset::Beginning).unwrap_or_default();
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition(dlq, *p);
    }
    let committed = c.committed_offsets(tpl, Duration::from_secs(5)).ok();
    let positions = parts
        .iter()
        .map(|p| {
            let main_high = main_highs.get(p).copied();
            let (Some(&high), Some(&low)) = (highs.get(p), lows.get(p)) else {
                // No DLQ partition to look at (e.g. the topic does not exist yet):
                // nothing to drain there.
                let none = Positions {
                    main_high,
                    dlq_high: 0,
                    dlq_start: 0,
                };
                return (*p, none);
            };
            let committed = committed
                .as_ref()
                .and_then(|t| t.find_partition(dlq, *p))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
            let positions = dlq_positions(main_high, low, high, committed, read.get(p));
            (*p, positions)
        })
        .collect();
    LagAnswer { positions, logs }
}

/// What a partition is told about its DLQ side: "unread" must mean records a
/// fetch can still return. Reading starts at the committed position, raised to
/// the log start (envelopes deleted by retention or `delete-records` can never
/// be read: a start below them would keep the partition draining forever). And
/// when the consumer has read to the end (its position, which librdkafka moves
/// past control records, is at the end offset) the end reported is what was
/// handed over: a transaction marker (or an aborted batch) at the end takes
/// offsets that no record will ever fill.
fn dlq_positions(
    main_high: Option<i64>,
    low: i64,
    high: i64,
    committed: Option<i64>,
    read: Option<&DlqRead>,
) -> Positions {
    let start = committed.unwrap_or(low).max(low).min(high);
    let read = read.copied().unwrap_or_default();
    let handed = read.last_forwarded.map(|l| l + 1);
    let read_to = read.position.max(handed).unwrap_or(start);
    let dlq_high = if read_to.max(start) >= high {
        // Not raised to `start`: what was handed over before the log start
        // moved up is what the partition compares with (its next offset).
        handed.unwrap_or(start).min(high)
    } else {
        high
    };
    Positions {
        main_high,
        dlq_high,
        dlq_start: start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final commit and the close are waited for until a second before
    /// the grace ends (with nothing in flight the process exits within it),
    /// and for at least two seconds after a drain that took the whole grace.
    #[test]
    fn the_close_is_waited_for_within_the_grace_or_two_seconds_after_the_drain() {
        let t0 = tokio::time::Instant::now();
        let s = Duration::from_secs;
        let grace_end = t0 + s(15);
        assert_eq!(close_deadline(grace_end, t0), t0 + s(14));
        assert_eq!(close_deadline(grace_end, t0 + s(12)), t0 + s(14));
        assert_eq!(close_deadline(grace_end, t0 + s(15)), t0 + s(17));
        // A grace shorter than the margins.
        assert_eq!(close_deadline(t0 + s(1), t0), t0 + s(2));
    }

    fn read(position: Option<i64>, last_forwarded: Option<i64>) -> DlqRead {
        DlqRead {
            position,
            last_forwarded,
        }
    }

    /// What the partition machine would conclude (`dlq_has_unread` with
    /// nothing begun, or with `begun` the highest begun offset).
    fn unread(p: &Positions, begun: Option<i64>) -> bool {
        p.dlq_high > begun.map_or(p.dlq_start, |b| b + 1)
    }

    #[test]
    fn the_dlq_start_is_raised_to_the_log_start() {
        // Committed 5, everything up to 8 deleted (the DLQ purged to its end).
        let p = dlq_positions(None, 8, 8, Some(5), None);
        assert_eq!((p.dlq_start, p.dlq_high), (8, 8));
        assert!(!unread(&p, None), "nothing can be read: not unread");
        // Purged up to 8 of 10: two envelopes left to read.
        let p = dlq_positions(None, 8, 10, Some(5), None);
        assert_eq!(p.dlq_start, 8);
        assert!(unread(&p, None));
        // Nothing committed: from the log start.
        let p = dlq_positions(None, 3, 10, None, None);
        assert_eq!(p.dlq_start, 3);
    }

    #[test]
    fn a_control_marker_at_the_end_is_not_unread() {
        // An aborted record (0) and its marker (1): the consumer's position
        // passed both, nothing was handed over.
        let p = dlq_positions(None, 0, 2, None, Some(&read(Some(2), None)));
        assert!(!unread(&p, None), "{p:?}");
        // A committed transaction: record 4 read and begun, marker at 5.
        let p = dlq_positions(None, 0, 6, Some(4), Some(&read(Some(6), Some(4))));
        assert_eq!(p.dlq_high, 5);
        assert!(!unread(&p, Some(4)));
        // Before the position passed the marker: still unread (looked at again
        // at the next lag check).
        let p = dlq_positions(None, 0, 6, Some(4), Some(&read(Some(5), Some(4))));
        assert!(unread(&p, Some(4)));
        // Records not handed over yet are unread whatever the position says.
        let p = dlq_positions(None, 0, 10, Some(4), Some(&read(None, Some(4))));
        assert!(unread(&p, Some(4)));
    }

    #[test]
    fn a_log_start_moved_past_what_was_read_leaves_nothing_unread() {
        // Read and begun up to 2, then the log was purged to 10 (= its end).
        let p = dlq_positions(None, 10, 10, Some(0), Some(&read(Some(3), Some(2))));
        assert!(!unread(&p, Some(2)), "{p:?}");
    }
}
