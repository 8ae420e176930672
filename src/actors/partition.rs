//! Partition actor: one per assigned partition pair (main p, DLQ p). It owns the
//! partition's I/O and carries out what its [`PartitionMachine`] decides
//! (`core::partition`: trackers, ordering lanes, backlog, DLQ drain, degraded-mode
//! FSM, store scheduling, drain): pause/resume and stores on the group consumer
//! (through the [`PartitionIo`] seam; lookups through [`BrokerView`]),
//! jobs to the delivery pool, timers, metrics and readiness counts. It also
//! decodes records as the machine begins them ([`Decoder`]).
//!
//! What it guarantees: it stores only what the machine's [`Effect::Store`] carries,
//! a tracker watermark. What it relies on: records of each topic arrive in offset
//! order and belong to this generation (the consumer actor fences records across
//! seeks and rebalances).

mod commits;
mod decode;
mod observe;
mod schemas;
mod shared;
mod verdict;

use crate::actors::delivery_pool::{DeliveryMsg, PoolHandles};
use crate::api_health::HealthVerdict;
use crate::core::offsets::NextOffset;
use crate::core::partition::{
    Commit, Effect, Input, Note, Now, Pace, PartitionMachine, Settings, SideStart, Timer,
};
use crate::delivery::token::{CompletionToken, Inbox};
use crate::delivery::{Item, Job, Queued, Work};
use crate::kafka::seams::{BrokerView, CommitAt, KafkaIoError, LogEnd, PartitionIo};
use crate::kafka::Record;
use crate::runtime::{now_ms, Pipeline};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::Arc;
use std::time::Instant;

pub(crate) use crate::core::partition::{Positions, Src};
pub(crate) use commits::SoonCommits;
pub(crate) use decode::Decoder;
use observe::Gauges;
pub(crate) use shared::PartitionShared;

pub enum PartitionMsg {
    Records(Vec<Record>),
    /// Completion tokens left outcomes in the inbox (see `delivery::token::Inbox`).
    Completed,
    /// Stop dispatching, wait (bounded) for in-flight work, reply with the stored
    /// main watermark. Used on revoke and shutdown.
    Handover(RpcReplyPort<Option<i64>>),
    /// The health verdict changed (watched by [`verdict::Watch`]).
    Health(HealthVerdict),
    /// The consumer's periodic lag check.
    Positions(Positions),
    /// A timer the machine asked for.
    Timer(Timer),
    /// A schema a waiting record names is at hand (`schemas::SchemaGate`).
    Schema {
        id: u32,
        schema: Arc<crate::schema_registry::Resolved>,
    },
    /// The topics' ids (main, DLQ) at the consumer's lag check.
    Logs([Option<Arc<str>>; 2]),
    /// librdkafka moved the side's position after a fetch at `at` was out of range.
    OffsetReset {
        src: Src,
        at: i64,
    },
    /// The answer to `Effect::ReadFromStart`.
    ReadingFrom {
        src: Src,
        start: Option<i64>,
    },
    /// A probe found nothing to deliver in `[from, to)` (see `Effect::Probe`).
    Probed {
        src: Src,
        from: NextOffset,
        to: NextOffset,
    },
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
    /// The drain request to answer.
    draining: Option<RpcReplyPort<Option<i64>>>,
    /// Where this incarnation's completion tokens leave their outcomes.
    inbox: Arc<Inbox>,
    /// The delivery pool's queue (see `actors::delivery_pool`), refreshed when a send fails.
    queue: Option<tokio::sync::mpsc::UnboundedSender<Queued>>,
    gauges: Gauges,
    /// Registry formats: records wait here for their schemas.
    gate: Option<schemas::SchemaGate>,
    /// Hands the health verdict's changes to this actor.
    _verdicts: verdict::Watch,
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
                // 0 (off): never due.
                after: match cfg.kafka.commit_after {
                    None => crate::core::partition::commit_after(cfg.pipeline.concurrency),
                    Some(0) => usize::MAX,
                    Some(n) => n,
                },
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
        let (verdict, verdicts) = verdict::Watch::start(a.pipeline.health.watch(), myself.clone());
        let mut s = PartitionState {
            machine: PartitionMachine::new(settings, decoder),
            draining: None,
            queue: None,
            inbox: Arc::new(Inbox::new(myself.clone())),
            gate,
            _verdicts: verdicts,
            gauges: Gauges::new(
                a.partition,
                a.pipeline.status.partition(a.partition, a.generation),
            ),
            a,
        };
        // Pauses do not survive rebalances reliably: the first evaluation applies
        // the FSM's reading to both topics explicitly.
        s.run(
            &myself,
            Input::Verdict {
                api_unavailable: verdict.api_unavailable,
            },
        );
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
            .status
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
                None => Input::Records(records),
                Some(g) => {
                    let (now, fetch) = g.admit(records);
                    if let Some(id) = fetch {
                        g.fetch(id, myself.clone());
                        s.set_main_reading(false);
                    }
                    Input::Records(now)
                }
            },
            PartitionMsg::Schema { id, schema } => {
                let Some(g) = s.gate.as_mut() else {
                    return Ok(());
                };
                let (now, fetch) = g.resolved(id, schema);
                match fetch {
                    Some(id) => g.fetch(id, myself.clone()),
                    None if g.machine_reading => s.set_main_reading(true),
                    None => {}
                }
                Input::Records(now)
            }
            PartitionMsg::Completed => {
                Input::Reports(s.inbox.take().into_iter().map(|c| c.report()).collect())
            }
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
            PartitionMsg::Health(v) => Input::Verdict {
                api_unavailable: v.api_unavailable,
            },
            PartitionMsg::Positions(p) => Input::Positions(p),
            PartitionMsg::Logs(logs) => Input::Logs(logs),
            PartitionMsg::OffsetReset { src, at } => Input::OffsetReset { src, at },
            PartitionMsg::ReadingFrom { src, start } => Input::ReadingFrom { src, start },
            PartitionMsg::Timer(t) => Input::Timer(t),
            PartitionMsg::Probed { src, from, to } => Input::Probed { src, from, to },
        };
        s.run(&myself, input);
        Ok(())
    }
}

impl Drop for PartitionState {
    /// However the actor ends (stopped after a revoke, crashed), its queued and
    /// retrying work is abandoned: the partition is re-read by its next owner.
    fn drop(&mut self) {
        self.inbox.close();
    }
}

impl PartitionState {
    /// Feeds one input to the machine and carries out its effects; an effect that
    /// failed goes back in as an input.
    fn run(&mut self, myself: &ActorRef<PartitionMsg>, input: Input<Record>) {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let now = Now {
                mono: Instant::now(),
                wall_ms: now_ms(),
            };
            for effect in self.machine.handle(input, now) {
                inputs.extend(self.apply(myself, effect));
            }
        }
        self.gauges.row.set_progress(
            self.a.shared.stored(Src::Main),
            self.a.shared.held(),
            self.machine.in_flight(),
        );
    }

    fn apply(&mut self, myself: &ActorRef<PartitionMsg>, e: Effect<Item>) -> Option<Input<Record>> {
        let partition = self.a.partition;
        match e {
            Effect::Dispatch { src, offset, item } => {
                let token =
                    CompletionToken::new(self.inbox.clone(), self.a.generation, src, offset);
                self.send(Job { item, token });
            }
            Effect::DispatchRun { src, run } => {
                let jobs = run
                    .into_iter()
                    .map(|(offset, item)| Job {
                        item,
                        token: CompletionToken::new(
                            self.inbox.clone(),
                            self.a.generation,
                            src,
                            offset,
                        ),
                    })
                    .collect();
                self.enqueue(Queued::Run(jobs));
            }
            Effect::SetReading { src, on } => {
                if let Some(g) = self.gate.as_mut().filter(|_| src == Src::Main) {
                    g.machine_reading = on;
                    if on && g.is_waiting() {
                        // Resumed when the schema is at hand.
                        return None;
                    }
                }
                let topic = self.machine.intake().topic(src);
                let Some(io) = self.a.io.as_ref() else {
                    return None; // Stopped.
                };
                let r = if on {
                    io.resume(topic, partition)
                } else {
                    io.pause(topic, partition)
                };
                match r {
                    Ok(()) if src == Src::Main => {
                        self.gauges.paused.set(if on { 0.0 } else { 1.0 })
                    }
                    Ok(()) => {}
                    // The DLQ partition may not be assigned (topic created later).
                    Err(e) => {
                        tracing::debug!(partition, ?src, error = %e, on, "pause/resume");
                        return Some(Input::ReadingFailed { src });
                    }
                }
            }
            Effect::Store {
                src,
                offset,
                metadata,
                commit,
            } => {
                let topic = self.machine.intake().topic(src);
                // librdkafka (≥ 2.1) keeps a stored offset's metadata and its
                // auto-commit sends it; but it commits a partition only when
                // the stored position passed the committed one, so metadata
                // that changed alone is committed here (`Commit::Soon`).
                let Some(io) = self.a.io.as_ref() else {
                    return None; // Stopped: the next owner starts from what was stored.
                };
                let mut r = io.store(topic, partition, offset.get(), &metadata);
                if r.is_ok() {
                    match commit {
                        Commit::No => {}
                        // With the other partitions' (`commits`).
                        Commit::Soon => {
                            self.a
                                .commits
                                .ask(io, topic, partition, offset.get(), metadata.clone())
                        }
                        Commit::Now => {
                            self.a.commits.forget(topic, partition);
                            metrics::counter!(crate::metrics::OFFSET_COMMITS, "kind" => "explicit")
                                .increment(1);
                            r = io.commit(&[CommitAt {
                                topic,
                                partition,
                                offset: offset.get(),
                                metadata: &metadata,
                            }]);
                        }
                    }
                }
                match r {
                    Ok(()) => {
                        self.a.shared.set_stored(src, offset, &metadata);
                        if src == Src::Main {
                            self.gauges.watermark.set(offset.get() as f64);
                        }
                    }
                    // Expected while a rebalance takes the partition away.
                    Err(e) => {
                        tracing::debug!(partition, ?src, error = %e, "store_offsets");
                        return Some(Input::StoreFailed { src, offset });
                    }
                }
            }
            Effect::ForgetWaitingCommits => {
                for src in Src::BOTH {
                    let topic = self.machine.intake().topic(src);
                    self.a.commits.forget(topic, partition);
                }
            }
            Effect::Schedule { after, timer } => {
                myself.send_after(after, move || PartitionMsg::Timer(timer));
            }
            Effect::HandedOver => {
                self.inbox.close();
                if let Some(reply) = self.draining.take() {
                    let _ = reply.send(self.a.shared.stored(Src::Main));
                }
            }
            Effect::TakenIn { records, bytes } => {
                self.a
                    .shared
                    .taken_in(records, bytes, &self.a.pipeline.buffered)
            }
            Effect::AwaitBudget => {
                let me = myself.clone();
                self.a.pipeline.in_flight.wait(Box::new(move || {
                    let _ = me.send_message(PartitionMsg::Timer(Timer::Budget));
                }));
            }
            Effect::Begun(n) => self.a.shared.begun(n, &self.a.ready),
            Effect::Skipped(n) => {
                metrics::counter!(crate::metrics::OFFSETS_SKIPPED).increment(n as u64)
            }
            Effect::Finished(n) => self.a.shared.finished(n, &self.a.ready),
            Effect::Mode { mode, change } => self.gauges.show_mode(partition, mode, change),
            Effect::Lag { dlq, main } => self.gauges.show_lag(dlq, main),
            Effect::Probe { src, from, to } => self.probe(myself, src, from, to),
            Effect::ReadFromStart { src } => self.read_from_start(myself, src),
            Effect::Note(Note::PositionReset {
                src,
                from,
                to,
                seen_end,
            }) => self.position_reset(src, from, to, seen_end),
            Effect::Note(Note::DeletedUnread {
                src,
                from,
                to,
                done,
            }) => {
                let topic = self.machine.intake().topic(src);
                self.a
                    .pipeline
                    .deleted_unread(topic, partition, from, to, done.as_ref());
            }
            Effect::Note(note) => observe::log(partition, note),
        }
        None
    }

    /// Seeks one side, off the runtime, to its log's start (the topic was
    /// replaced under the position) and answers `Input::ReadingFrom`.
    fn read_from_start(&self, myself: &ActorRef<PartitionMsg>, src: Src) {
        let topic = self.machine.intake().topic(src).to_string();
        let Some(io) = self.a.io.clone() else {
            return; // Stopped.
        };
        let broker = self.a.broker.clone();
        let (partition, me) = (self.a.partition, myself.clone());
        tokio::task::spawn_blocking(move || {
            let timeout = std::time::Duration::from_secs(5);
            let start = broker
                .offsets(&topic, &[partition], LogEnd::Start)
                .and_then(|starts| starts.get(&partition).copied())
                .ok_or_else(|| KafkaIoError::Refused("the log start could not be read".into()))
                .and_then(|low| {
                    io.seek(&topic, partition, low, timeout)?;
                    Ok(low)
                });
            let start = match start {
                Ok(low) => {
                    tracing::info!(partition, %topic, start = low, "the recreated topic is read from its start");
                    Some(low)
                }
                Err(e) => {
                    tracing::warn!(partition, %topic, error = %e, "cannot seek to the recreated topic's start: asked again at the next lag check");
                    None
                }
            };
            let _ = me.send_message(PartitionMsg::ReadingFrom { src, start });
        });
    }

    /// Reads `[from, to)` of one side off the runtime, on a reader of its own
    /// (`read_committed`, no group): if nothing there is to be delivered, the
    /// machine may move the side's position to `to`.
    fn probe(&self, myself: &ActorRef<PartitionMsg>, src: Src, from: NextOffset, to: NextOffset) {
        let topic = self.machine.intake().topic(src).to_string();
        let broker = self.a.broker.clone();
        let (partition, me) = (self.a.partition, myself.clone());
        tokio::task::spawn_blocking(move || {
            if broker.nothing_to_deliver(&topic, partition, from.get(), to.get()) {
                metrics::counter!(crate::metrics::POSITIONS_PASSED).increment(1);
                tracing::debug!(partition, %topic, %from, %to, "nothing to deliver below the end (transaction markers): the position moves to the end");
                let _ = me.send_message(PartitionMsg::Probed { src, from, to });
            }
        });
    }

    /// The read position of a side moved back without a seek of Courier's
    /// (the machine started a new incarnation at `to`): a WARN line and
    /// `courier_position_resets_total{topic,reason}`, once it is known
    /// whether the topic is another one now (its id changed: recreated).
    /// Then the old log's records Courier never read are gone: an ERROR line
    /// and `courier_events_deleted_unread_total` with what the last lag
    /// check saw of them (a lower bound: records written after it are not
    /// known).
    fn position_reset(&self, src: Src, from: i64, to: i64, seen_end: Option<i64>) {
        let topic = self.machine.intake().topic(src).to_string();
        let before = self.a.logs[src.index()].clone();
        if self.a.io.is_none() {
            return; // Stopped.
        }
        let broker = self.a.broker.clone();
        let partition = self.a.partition;
        let pipeline = self.a.pipeline.clone();
        tokio::task::spawn_blocking(move || {
            let now = broker
                .topic_ids(&[topic.as_str()], std::time::Duration::from_secs(5))
                .remove(&topic);
            let recreated = matches!((&before, &now), (Some(b), Some(n)) if **b != **n);
            let reason = if recreated {
                "topic_recreated"
            } else {
                "offset_reset"
            };
            tracing::warn!(
                %topic,
                partition,
                old_position = from,
                new_position = to,
                reason,
                old_topic_id = before.as_deref().unwrap_or("unknown"),
                topic_id = now.as_deref().unwrap_or("unknown"),
                "read position moved back (an offset reset, a recreated topic or a truncation): the partition starts afresh at the new position (nothing dropped; the old position and its metadata are not committed onto the new log)"
            );
            metrics::counter!(crate::metrics::POSITION_RESETS, "topic" => topic.clone(), "reason" => reason)
                .increment(1);
            if recreated {
                // A new log: what the old one lost is counted afresh, here the
                // old log's records past Courier's position (at least this many:
                // the end the last lag check saw).
                pipeline.forget_deleted_unread(&topic, partition);
                if let Some(end) = seen_end.filter(|end| *end > from) {
                    pipeline.deleted_unread(&topic, partition, from, end, None);
                }
            }
        });
    }

    /// Pauses or resumes main p for the schema gate (the machine's own wish is
    /// `SchemaGate::machine_reading`, applied when the wait ends).
    fn set_main_reading(&self, on: bool) {
        let topic = self.machine.intake().topic(Src::Main);
        let Some(io) = self.a.io.as_ref() else {
            return; // Stopped.
        };
        let r = if on {
            io.resume(topic, self.a.partition)
        } else {
            io.pause(topic, self.a.partition)
        };
        match r {
            Ok(()) => self.gauges.paused.set(if on { 0.0 } else { 1.0 }),
            Err(e) => {
                tracing::debug!(partition = self.a.partition, error = %e, on, "schema wait: pause/resume")
            }
        }
    }

    /// Sends a job to the delivery pool. If the pool is missing or gone, the job is
    /// dropped here and its token reports errored: the machine dispatches it again
    /// after a back-off.
    fn send(&mut self, job: Job) {
        if !matches!(job.item.work, Work::Deliver(_)) {
            if let Some(pool) = self.a.delivery.pool.current() {
                let _ = pool.send_message(DeliveryMsg::Run(job));
            }
            return;
        }
        self.enqueue(Queued::One(job));
    }

    /// Puts deliveries on the pool's queue (see [`PartitionActor::send`]).
    fn enqueue(&mut self, queued: Queued) {
        let queued = match &self.queue {
            Some(q) => match q.send(queued) {
                Ok(()) => return,
                Err(failed) => failed.0,
            },
            None => queued,
        };
        // Not known yet, or the pool was re-spawned: take its current queue.
        self.queue = self.a.delivery.queue.current();
        if let Some(q) = &self.queue {
            let _ = q.send(queued);
        }
    }
}
