//! Partition actor: one per assigned partition pair (main p, DLQ p). It owns the
//! partition's I/O and carries out what its [`PartitionMachine`] decides
//! (`core::partition`: trackers, ordering lanes, backlog, DLQ drain, degraded-mode
//! FSM, store scheduling, drain): pause/resume and stores on the group consumer
//! (through the [`PartitionIo`] seam; lookups through [`BrokerView`]),
//! jobs to the delivery pool, timers, metrics and readiness counts. It also
//! decodes each record before the machine takes it in ([`Decoder`]).
//!
//! What it guarantees: it stores only what the machine's [`Effect::Store`] carries,
//! a tracker watermark. What it relies on: records of each topic arrive in offset
//! order and belong to this generation (the consumer actor fences records across
//! seeks and rebalances).
//!
//! # Parts
//!
//! This file holds the actor: its messages, arguments and state, its start
//! (the machine's settings) and the translation of messages into inputs.
//! Beside it, in `partition/`:
//!
//! * `apply` — the effect interpreter: runs an input through the machine and
//!   carries out its effects (consumer, delivery pool, timers, metrics);
//! * `lookups` — what an effect starts off the runtime: a seek to a log's
//!   start, a probe, a position reset's log lines and metrics;
//! * `decode` — records decoded before the machine takes them in ([`Decoder`]);
//! * `schemas` — registry formats: records wait for their schemas;
//! * `commits` — the partitions' explicit commits, coalesced;
//! * `observe` — gauges and the machine's notes as log lines;
//! * `shared` — the counts shared with the consumer actor;
//! * `verdict` — the health verdict's changes, handed to the actor.

mod apply;
mod choose;
mod commits;
mod decode;
mod lookups;
mod observe;
mod schemas;
mod shared;
mod verdict;

use crate::actors::delivery_pool::PoolHandles;
use crate::core::destination::DestSet;
use crate::core::offsets::NextOffset;
#[cfg(doc)]
use crate::core::partition::Effect;
use crate::core::partition::{Input, Pace, PartitionMachine, Settings, SideStart};
use crate::delivery::token::Inbox;
use crate::delivery::Queued;
use crate::kafka::seams::{BrokerView, PartitionIo};
use crate::kafka::Record;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::Arc;

pub(crate) use crate::core::partition::{Positions, Src};
pub(crate) use commits::SoonCommits;
pub(crate) use decode::{Decoder, Polled};
use observe::Gauges;
pub(crate) use shared::PartitionShared;

pub(crate) enum PartitionMsg {
    /// Records from the consumer actor: through the schema gate, if any.
    Records(Vec<Record>),
    /// Completion tokens left outcomes in the inbox (see `delivery::token::Inbox`).
    Completed,
    /// Stop dispatching, wait (bounded) for in-flight work, reply with the stored
    /// main watermark. Used on revoke and shutdown.
    Handover(RpcReplyPort<Option<i64>>),
    /// A destination's verdict changed (watched by [`verdict::Watch`]).
    Health {
        id: crate::core::destination::DestinationId,
        unavailable: bool,
    },
    /// A schema a waiting record names is at hand (`schemas::SchemaGate`).
    Schema {
        id: u32,
        schema: Arc<crate::schema_registry::Resolved>,
    },
    /// An input for the machine as it is: the consumer's lag check
    /// (`Positions`, `Logs`), an offset reset, a timer it asked for, the
    /// answers of the work its effects started (`ReadingFrom`, `Probed`,
    /// `DlqRewound`).
    Input(Input<Polled>),
}

pub(crate) struct PartitionArgs {
    pub pipeline: Arc<Pipeline>,
    /// The current delivery pool (it may be re-spawned while this actor lives).
    pub delivery: PoolHandles,
    pub ready: Arc<crate::metrics::Readiness>,
    /// The group consumer; `None` once the actor stopped (`post_stop`): a
    /// stopped actor's state travels to the consumer actor in ractor's
    /// termination event, and the consumer's last handle must not wait
    /// there (the shutdown closes the consumer when it holds the last one).
    pub io: Option<Arc<dyn PartitionIo>>,
    /// Lookups outside the group: a log's start, topic ids, probes.
    pub broker: Arc<dyn BrokerView>,
    /// The consumer's commits before auto-commit, coalesced (shared by its partitions).
    pub commits: Arc<SoonCommits>,
    pub partition: i32,
    pub generation: u64,
    /// Known start positions (after a seek); otherwise learnt from the first record.
    pub start: [Option<NextOffset>; 2],
    pub shared: Arc<PartitionShared>,
    /// Per side: what the committed offset's metadata names done (read at
    /// assignment, see `core::completed`).
    pub skip: [Option<crate::core::completed::Completed>; 2],
    /// Per side: the topic's id at assignment (what each store's metadata is
    /// bound to); `None`: not known.
    pub logs: [Option<Arc<str>>; 2],
    /// The brokers' `offset.metadata.max.bytes`.
    pub metadata_max_bytes: usize,
    /// Per side: the committed position was made for another log (see
    /// `core::partition::SideStart::read_from_start`).
    pub read_from_start: [bool; 2],
    /// Per side: the log the committed position was made for, when the
    /// topic's id could not be read at assignment (see
    /// `core::partition::SideStart::verify`).
    pub verify: [Option<Arc<str>>; 2],
}

pub(crate) struct PartitionState {
    a: PartitionArgs,
    machine: PartitionMachine<Decoder>,
    /// Decodes each record before the machine takes it in.
    decoder: Decoder,
    /// The drain request to answer.
    draining: Option<RpcReplyPort<Option<i64>>>,
    /// Where this incarnation's completion tokens leave their outcomes.
    inbox: Arc<Inbox>,
    /// The delivery pool's queue (see `actors::delivery_pool`), refreshed when a send fails.
    queue: Option<tokio::sync::mpsc::UnboundedSender<Queued>>,
    gauges: Gauges,
    /// Registry formats: records wait here for their schemas.
    gate: Option<schemas::SchemaGate>,
    /// Hands the destinations' verdict changes to this actor.
    _verdicts: verdict::Watch,
    /// The destinations down now.
    down: DestSet,
}

pub(crate) struct PartitionActor;

/// Completion tokens wake the actor through its mailbox.
impl crate::delivery::token::Wake for ActorRef<PartitionMsg> {
    fn wake(&self) {
        let _ = self.send_message(PartitionMsg::Completed);
    }
}

impl Actor for PartitionActor {
    type Msg = PartitionMsg;
    type State = PartitionState;
    type Arguments = PartitionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        a: PartitionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cfg = &a.pipeline.config;
        let topics = [cfg.kafka.topic.as_str(), a.pipeline.dlq_topic.as_str()];
        let settings = Settings {
            generation: a.generation,
            ordering: cfg.pipeline.ordering,
            limit: cfg.pipeline.max_in_flight_per_partition,
            backlog_cap: cfg.pipeline.max_buffered / 2,
            backlog_bytes_cap: cfg.pipeline.max_buffered_bytes / 2,
            budget: a.pipeline.in_flight.clone(),
            min_pause: cfg.degraded.min_pause,
            // Checked when the configuration was read.
            destinations: a.pipeline.routes.reachable(),
            destination_hold: cfg.degraded.destination_hold,
            drain_timeout: cfg.pipeline.drain_timeout,
            sides: Src::BOTH.map(|src| {
                let i = src.index();
                SideStart {
                    start: a.start[i],
                    stored: a.shared.stored(src).map(NextOffset::at),
                    skip: a.skip[i].clone(),
                    log: a.logs[i].clone(),
                    read_from_start: a.read_from_start[i],
                    verify: a.verify[i].clone(),
                }
            }),
            pace: Pace {
                metadata_max_bytes: a.metadata_max_bytes,
                interval: cfg.kafka.auto_commit_interval,
                after: crate::core::partition::commit_after_setting(
                    cfg.kafka.commit_after,
                    cfg.pipeline.concurrency,
                ),
                floor: crate::core::partition::COMMIT_FLOOR,
            },
        };
        let gate = a
            .pipeline
            .registry
            .clone()
            .map(|r| schemas::SchemaGate::new(r, a.partition));
        let mut decoder = Decoder::new(a.pipeline.clone(), a.partition, topics);
        if let Some(g) = &gate {
            decoder.use_schemas(g.known.clone());
        }
        let (down, watch) = verdict::Watch::start(&a.pipeline, myself.clone());
        let mut s = PartitionState {
            machine: PartitionMachine::new(settings),
            decoder,
            draining: None,
            queue: None,
            inbox: Arc::new(Inbox::new(myself.clone())),
            gate,
            _verdicts: watch,
            down,
            gauges: Gauges::new(
                a.partition,
                a.pipeline.board.partition(a.partition, a.generation),
                topics,
            ),
            a,
        };
        // Pauses do not survive rebalances reliably: the first evaluation applies
        // the FSM's reading to both topics explicitly.
        s.run(&myself, Input::Verdict { down });
        Ok(s)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        s.a.io = None;
        s.a.shared.release_held(&s.a.ready);
        s.a.shared.release_buffered(&s.a.pipeline.buffered);
        s.gauges.clear();
        s.a.pipeline
            .board
            .remove_partition(s.a.partition, s.a.generation);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let input = match msg {
            PartitionMsg::Records(records) => match s.gate.as_mut() {
                None => s.decoded(records),
                Some(g) => {
                    let (now, fetch) = g.admit(records);
                    if let Some(id) = fetch {
                        g.fetch(id, myself.clone());
                    }
                    let changed = g.wait_changed();
                    s.schema_wait(&myself, changed);
                    s.decoded(now)
                }
            },
            PartitionMsg::Schema { id, schema } => {
                let Some(g) = s.gate.as_mut() else {
                    return Ok(());
                };
                let (now, fetch) = g.resolved(id, schema);
                if let Some(id) = fetch {
                    g.fetch(id, myself.clone());
                }
                let changed = g.wait_changed();
                s.schema_wait(&myself, changed);
                s.decoded(now)
            }
            PartitionMsg::Completed => Input::Reports(s.inbox.take()),
            PartitionMsg::Handover(reply) => {
                s.draining = Some(reply);
                if let Some(g) = s.gate.as_mut() {
                    g.close();
                }
                // Only requests already on the wire are waited for: queued jobs,
                // in-place retries and drain slots end now (errored, not
                // redispatched while draining), before they take a permit.
                s.inbox.cancel();
                Input::Handover
            }
            PartitionMsg::Health { id, unavailable } => {
                if unavailable {
                    s.down.insert(id);
                } else {
                    s.down.remove(id);
                }
                Input::Verdict { down: s.down }
            }
            PartitionMsg::Input(input) => input,
        };
        s.run(&myself, input);
        Ok(())
    }
}

impl PartitionState {
    /// Records as the machine takes them in: decoded here, in offset
    /// order, before `handle` (the machine calls nothing of the shell's).
    fn decoded(&self, records: Vec<Record>) -> Input<Polled> {
        Input::Records(
            records
                .into_iter()
                .map(|r| self.decoder.decode(r))
                .collect(),
        )
    }
}

impl Drop for PartitionState {
    /// However the actor ends (stopped after a revoke, crashed), its queued and
    /// retrying work is abandoned: the partition is re-read by its next owner.
    fn drop(&mut self) {
        self.inbox.close();
    }
}
