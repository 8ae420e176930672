//! Consumer actor: owns the Kafka consumer and the poll thread, routes records to
//! partition actors, and handles rebalances, partition-actor crashes and shutdown.
//!
//! Polling runs on a dedicated thread (`kafka::poller`), never on the async runtime:
//! rebalance callbacks run inside `poll()` and block. The thread forwards batches, and
//! the callbacks forward `Assigned`/`Revoked` (with a one-shot acknowledgement the
//! revoke callback waits on), all through this actor's mailbox, in order.
//!
//! It reaches Kafka through two seams (`kafka::seams`): the group consumer's
//! [`PartitionIo`] (pause, resume, store, commit, seek — shared with its
//! partition actors) and a [`BrokerView`] on a client outside the group
//! (offsets, committed offsets, topic ids, partition counts). Its unit tests
//! (`tests.rs`) run it over fakes of both (`actors::fakes`), no broker.
//!
//! The parts, one file each:
//!
//! * `mod.rs` — the messages, the state, the actor shell (each message goes to
//!   one of the files below) and the spawning of partition actors.
//! * `start.rs` — the start: the clients, the topics' existence and partition
//!   counts, the subscription, the poll thread.
//! * `route.rs` — records to partition actors, fenced after a seek.
//! * `rebalance.rs` — assignments (the partition counts checked again, new
//!   partition actors) and revocations (drained, then stopped).
//! * `recovery.rs` — what earlier work left behind: the committed offsets'
//!   metadata read at an assignment, and a crashed partition actor's
//!   partition read again from its watermark (the decision:
//!   `core::completed::after_crash`).
//! * `lag.rs` — the periodic lag check, on the [`BrokerView`]: end offsets,
//!   the DLQ's committed position, and what "unread" means behind
//!   transaction markers.
//! * `shutdown.rs` — the graceful shutdown: drain, final commit, close.
//!
//! The health verdict does not pass through here: partition actors watch it
//! themselves (`actors::partition::verdict`).

mod lag;
mod rebalance;
mod recovery;
mod route;
mod shutdown;
mod start;
pub(crate) use start::{check_topics, Topics};
#[cfg(test)]
mod tests;

use crate::actors::delivery_pool::PoolHandles;
use crate::actors::partition::{
    PartitionActor, PartitionArgs, PartitionMsg, PartitionShared, SoonCommits, Src,
};
use crate::core::offsets::NextOffset;
use crate::core::partition::Input;
use crate::kafka::poller::Poller;
use crate::kafka::seams::{BrokerView, PartitionIo};
use crate::kafka::{KafkaConsumer, PollSink, Record};
use crate::metrics::Readiness;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub(crate) use lag::LagAnswer;
use recovery::Committed;

pub(crate) enum ConsumerMsg {
    Records(Vec<Record>),
    Assigned(Vec<i32>),
    /// Sent from inside the revoke callback, which waits on `ack`.
    Revoked {
        partitions: Vec<i32>,
        ack: std::sync::mpsc::SyncSender<()>,
    },
    /// Graceful shutdown: stop fetching, drain within the grace period, commit, close.
    Shutdown(RpcReplyPort<()>),
    /// Time to look at DLQ lag.
    LagTick,
    /// Result of a lag check, per partition.
    Lag(LagAnswer),
    /// librdkafka moved a partition's position after a fetch at `at` was out
    /// of range (`kafka::client_log`).
    OffsetReset {
        src: Src,
        partition: i32,
        at: i64,
    },
    /// The Kafka client failed fatally (the poll thread stopped).
    ClientFatal(String),
}

pub(crate) struct ConsumerArgs {
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
    fn offset_reset(&self, src: Src, partition: i32, at: i64) {
        let _ = self.send_message(ConsumerMsg::OffsetReset { src, partition, at });
    }
}

/// One owned partition pair: its actor and what the consumer handed it.
struct Part {
    actor: ActorRef<PartitionMsg>,
    shared: Arc<PartitionShared>,
    /// Per side (main, DLQ): first and last offset handed to the current actor.
    first_forwarded: [Option<i64>; 2],
    last_forwarded: [Option<i64>; 2],
    /// After a seek: drop records above this offset until one at or below arrives.
    fence: [Option<i64>; 2],
}

/// The real group consumer's own handle and its poll thread: what the
/// shutdown needs besides the [`PartitionIo`] seam (the final commit, the
/// group leave, the close). `None` over fakes.
pub(crate) struct Client {
    consumer: Arc<KafkaConsumer>,
    poller: Option<Poller>,
}

/// How the consumer reaches Kafka.
pub(crate) struct Kafka {
    /// The group consumer's hand on its partitions (shared with the
    /// partition actors).
    pub io: Arc<dyn PartitionIo>,
    /// Lookups on a client outside the group.
    pub broker: Arc<dyn BrokerView>,
    pub client: Option<Client>,
    /// The brokers' `offset.metadata.max.bytes`.
    pub metadata_max: usize,
    /// When the consumer subscribed.
    pub subscribed_at: std::time::Instant,
}

pub(crate) struct ConsumerState {
    pipeline: Arc<Pipeline>,
    ready: Arc<Readiness>,
    delivery: PoolHandles,
    /// `None` once closed (the shutdown).
    io: Option<Arc<dyn PartitionIo>>,
    broker: Arc<dyn BrokerView>,
    client: Option<Client>,
    /// Commits before auto-commit of all partitions, coalesced.
    commits: Arc<SoonCommits>,
    closing: Arc<AtomicBool>,
    parts: HashMap<i32, Part>,
    generation: u64,
    lag: lag::Checks,
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

pub(crate) struct ConsumerActor;

impl Actor for ConsumerActor {
    type Msg = ConsumerMsg;
    type State = ConsumerState;
    type Arguments = ConsumerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConsumerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        start::start(myself, args).await
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        s.handle(&myself, msg).await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        s.supervise(&myself, evt).await
    }
}

impl ConsumerState {
    /// A consumer over `kafka`, subscribed but assigned nothing yet.
    pub(crate) fn new(
        pipeline: Arc<Pipeline>,
        ready: Arc<Readiness>,
        delivery: PoolHandles,
        kafka: Kafka,
        closing: Arc<AtomicBool>,
    ) -> ConsumerState {
        ConsumerState {
            pipeline,
            ready,
            delivery,
            io: Some(kafka.io),
            broker: kafka.broker,
            client: kafka.client,
            commits: SoonCommits::new(),
            closing,
            parts: HashMap::new(),
            generation: 0,
            lag: lag::Checks::default(),
            metadata_max: kafka.metadata_max,
            topic_ids: [None, None],
            subscribed_at: Some(kafka.subscribed_at),
        }
    }

    /// One message: each kind is carried out by the file named for its job.
    pub(crate) async fn handle(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        msg: ConsumerMsg,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ConsumerMsg::Records(records) => self.route(records),
            ConsumerMsg::Assigned(partitions) => self.assigned(myself, partitions).await?,
            ConsumerMsg::Revoked { partitions, ack } => {
                self.revoked(&partitions).await;
                let _ = ack.send(());
            }
            ConsumerMsg::LagTick => self.check_lag(myself, false),
            ConsumerMsg::Lag(answer) => self.lag_answered(myself, answer),
            ConsumerMsg::OffsetReset { src, partition, at } => {
                if let Some(part) = self.parts.get(&partition) {
                    let _ = part
                        .actor
                        .send_message(PartitionMsg::Input(Input::OffsetReset { src, at }));
                }
            }
            // Nothing here can repair it (a new consumer in this process could
            // fence the one that took the id); the process ends non-zero and
            // the graceful shutdown drains what is on the wire.
            ConsumerMsg::ClientFatal(reason) => self.pipeline.fatal(reason),
            ConsumerMsg::Shutdown(reply) => {
                self.shutdown().await;
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    /// A partition actor failed: its partition is read again from its watermark.
    pub(crate) async fn supervise(
        &mut self,
        myself: &ActorRef<ConsumerMsg>,
        evt: SupervisionEvent,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            let Some(p) = self.partition_of(&cell) else {
                return Ok(());
            };
            tracing::error!(partition = p, error = %err, "partition actor crashed; re-reading the partition from its watermark");
            if let Err(e) = self.pipeline.record_restart("partition") {
                self.pipeline
                    .fatal(format!("partition actors crash too often: {e}"));
                return Ok(());
            }
            self.recover(myself, p).await?;
        }
        Ok(())
    }

    fn io(&self) -> Result<&Arc<dyn PartitionIo>, ActorProcessingErr> {
        self.io.as_ref().ok_or_else(|| "consumer closed".into())
    }

    fn partition_of(&self, cell: &ActorCell) -> Option<i32> {
        self.parts
            .iter()
            .find(|(_, part)| part.actor.get_id() == cell.get_id())
            .map(|(p, _)| *p)
    }

    /// The main topic and the DLQ, in `Src` order.
    fn topics(&self) -> [String; 2] {
        [
            self.pipeline.config.kafka.topic.clone(),
            self.pipeline.dlq_topic.clone(),
        ]
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
            io: Some(self.io()?.clone()),
            broker: self.broker.clone(),
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
}
