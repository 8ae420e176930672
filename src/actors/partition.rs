//! Partition actor: one per assigned partition pair (main p, DLQ p). It owns the
//! partition's I/O and carries out what its [`PartitionMachine`] decides
//! (`core::partition`: trackers, ordering lanes, backlog, DLQ drain, degraded-mode
//! FSM, store scheduling, drain): pause/resume and `store_offsets` on the consumer,
//! jobs to the delivery pool, timers, metrics and readiness counts. It also
//! decodes records as the machine begins them ([`Decoder`]).
//!
//! What it guarantees: it stores only what the machine's [`Effect::Store`] carries,
//! a tracker watermark. What it relies on: records of each topic arrive in offset
//! order and belong to this generation (the consumer actor fences records across
//! seeks and rebalances).

use crate::actors::delivery::DeliveryMsg;
use crate::core::envelope::Envelope;
use crate::core::event::{decode, DecodeOptions};
use crate::core::fsm::Mode;
use crate::core::offsets::NextOffset;
use crate::core::partition::{
    Begun, Effect, Input, Intake, Kind, Note, Now, Outcome, PartitionMachine, Report, Settings,
    Timer,
};
use crate::delivery::token::{CompletionToken, Inbox};
use crate::delivery::{Item, Job, Work};
use crate::health::Verdict;
use crate::kafka::{KafkaConsumer, Record};
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::core::partition::{Positions, Src};

pub enum PartitionMsg {
    Records(Vec<Record>),
    /// Completion tokens left outcomes in the inbox (see `delivery::token::Inbox`).
    Completed,
    /// Stop dispatching, wait (bounded) for in-flight work, reply with the stored
    /// main watermark. Used on revoke and shutdown.
    Drain(RpcReplyPort<Option<i64>>),
    /// The health verdict changed.
    Health(Verdict),
    /// The consumer's periodic lag check.
    Positions(Positions),
    /// A timer the machine asked for.
    Timer(Timer),
}

/// State that outlives one incarnation of the actor (the consumer actor reads it
/// to recover after a crash).
#[derive(Debug)]
pub struct PartitionShared {
    /// Last stored watermark per side, -1 when none.
    pub stored: [AtomicI64; 2],
    /// Events this partition counts in `Readiness::held` (given back when the
    /// actor stops or crashes).
    pub held: AtomicI64,
    /// Records routed to this partition's actor and not yet taken in (its share of
    /// `Pipeline::buffered`, given back when the actor stops or crashes).
    pub buffered: AtomicI64,
}

impl Default for PartitionShared {
    fn default() -> Self {
        PartitionShared {
            stored: [AtomicI64::new(-1), AtomicI64::new(-1)],
            held: AtomicI64::new(0),
            buffered: AtomicI64::new(0),
        }
    }
}

impl PartitionShared {
    /// Gives back the records routed to the actor that it never took in.
    pub fn release_buffered(&self, total: &AtomicI64) {
        let n = self.buffered.swap(0, Ordering::SeqCst);
        total.fetch_sub(n, Ordering::SeqCst);
    }

    /// Gives this partition's held events back to the readiness count.
    pub fn release_held(&self, ready: &crate::metrics::Readiness) {
        let n = self.held.swap(0, Ordering::SeqCst);
        ready.held.fetch_sub(n, Ordering::Relaxed);
    }

    pub fn stored(&self, src: Src) -> Option<i64> {
        let v = self.stored[src.index()].load(Ordering::SeqCst);
        (v >= 0).then_some(v)
    }
}

pub struct PartitionArgs {
    pub pipeline: Arc<Pipeline>,
    pub ready: Arc<crate::metrics::Readiness>,
    pub consumer: Arc<KafkaConsumer>,
    pub partition: i32,
    pub generation: u64,
    /// Known start positions (after a seek); otherwise learnt from the first record.
    pub start: [Option<NextOffset>; 2],
    pub shared: Arc<PartitionShared>,
}

/// Decodes records as the machine begins them: CloudEvents on main p, envelopes
/// on DLQ p; bad input becomes `Work::Park` with its reason.
pub struct Decoder {
    pipeline: Arc<Pipeline>,
    partition: i32,
    topics: [Arc<str>; 2],
    options: DecodeOptions,
    consumed: [metrics::Counter; 2],
}

impl Intake for Decoder {
    type Raw = Record;
    type Item = Item;

    fn position(r: &Record) -> (Src, i64) {
        (if r.dlq { Src::Dlq } else { Src::Main }, r.offset)
    }

    fn begin(&mut self, src: Src, r: Record) -> Begun<Item> {
        self.consumed[src.index()].increment(1);
        let park = |reason: &str, message: String| Work::Park {
            reason: reason.into(),
            message,
        };
        let work = match (src, r.payload.as_deref()) {
            (Src::Main, _) => match decode(r.payload.as_ref(), &self.options) {
                Ok(ev) => {
                    self.crash_hook(&ev.id);
                    Work::Deliver(ev)
                }
                Err(e) => {
                    tracing::info!(partition = self.partition, offset = r.offset, reason = e.reason(), error = %e, "bad input, parking");
                    park(e.reason(), e.to_string())
                }
            },
            (Src::Dlq, Some(bytes)) => match Envelope::from_bytes(bytes) {
                Ok(env) => Work::FromDlq(Box::new(env)),
                Err(e) => park("unreadable_envelope", e.to_string()),
            },
            (Src::Dlq, None) => park("unreadable_envelope", "DLQ record without a value".into()),
        };
        let kind = match &work {
            Work::Deliver(_) => Kind::Ordered,
            Work::FromDlq(env) => Kind::Queued {
                not_before_ms: env.not_before_ms,
            },
            Work::Park { .. } => Kind::Immediate,
        };
        let item = Item {
            topic: self.topics[src.index()].clone(),
            partition: self.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
            key: r.key,
            payload: r.payload,
            work,
        };
        Begun { item, kind }
    }

    fn key(item: &Item) -> Option<&[u8]> {
        item.key.as_deref()
    }

    fn park_internal(old: &Item, times: u32) -> Item {
        Item {
            topic: old.topic.clone(),
            partition: old.partition,
            offset: old.offset,
            timestamp_ms: old.timestamp_ms,
            key: old.key.clone(),
            payload: old.payload.clone(),
            work: Work::Park {
                reason: "internal_error".into(),
                message: format!("delivery work vanished {times} times without an outcome"),
            },
        }
    }
}

impl Decoder {
    /// Test fault hook (`testing.crash_on_event_id`): panics once per process, or
    /// every time with `testing.crash_repeatedly`.
    fn crash_hook(&self, id: &str) {
        let cfg = &self.pipeline.config.testing;
        if cfg.crash_on_event_id.as_deref() != Some(id) {
            return;
        }
        let first = !self.pipeline.crash_hook_fired.swap(true, Ordering::SeqCst);
        if first || cfg.crash_repeatedly {
            panic!("test fault hook: partition actor crashes on event {id}");
        }
    }
}

/// The partition's metric handles, registered once: building a labelled key per
/// record showed in the profile.
struct Gauges {
    watermark: metrics::Gauge,
    paused: metrics::Gauge,
    dlq_lag: metrics::Gauge,
    lag: metrics::Gauge,
    mode: [(Mode, metrics::Gauge); 3],
}

impl Gauges {
    fn new(partition: i32) -> Gauges {
        let label = partition.to_string();
        let g = |name: &'static str| metrics::gauge!(name, "partition" => label.clone());
        let mode = |mode: Mode| {
            let g = metrics::gauge!(m::PARTITION_MODE, "partition" => label.clone(), "mode" => mode.as_str());
            (mode, g)
        };
        Gauges {
            watermark: g(m::COMMIT_WATERMARK),
            paused: g(m::PARTITION_PAUSED),
            dlq_lag: g(m::DLQ_LAG),
            lag: g(m::CONSUMER_LAG),
            mode: [mode(Mode::Normal), mode(Mode::Paused), mode(Mode::DrainDlq)],
        }
    }

    /// The partition is no longer ours: its per-partition gauges go to 0 so a
    /// revoked partition does not keep showing as paused or lagging here (the
    /// exporter cannot delete a series; dashboards take `max by (partition)`).
    fn clear(&self) {
        for (_, g) in &self.mode {
            g.set(0.0);
        }
        self.paused.set(0.0);
        self.dlq_lag.set(0.0);
        self.lag.set(0.0);
    }
}

pub struct PartitionState {
    a: PartitionArgs,
    machine: PartitionMachine<Decoder>,
    /// The drain request to answer.
    draining: Option<RpcReplyPort<Option<i64>>>,
    /// Where this incarnation's completion tokens leave their outcomes.
    inbox: Arc<Inbox>,
    /// The delivery pool's queue (see `actors::delivery`), refreshed when a send fails.
    queue: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
    gauges: Gauges,
}

pub struct PartitionActor;

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
            min_pause: Duration::from_millis(cfg.degraded.min_pause_ms),
            drain_timeout: Duration::from_millis(cfg.pipeline.drain_timeout_ms),
            start: a.start,
            stored: Src::BOTH.map(|src| a.shared.stored(src).map(NextOffset::at)),
        };
        let decoder = Decoder {
            pipeline: a.pipeline.clone(),
            partition: a.partition,
            topics: topics.map(Arc::from),
            options: cfg.pipeline.decode_options(),
            consumed: topics.map(|t| metrics::counter!(m::CONSUMED, "topic" => t.to_string())),
        };
        let verdict = a.pipeline.health.verdict();
        let mut s = PartitionState {
            machine: PartitionMachine::new(settings, decoder),
            draining: None,
            queue: None,
            inbox: Arc::new(Inbox::new(myself.clone())),
            gauges: Gauges::new(a.partition),
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
        s.a.shared.release_held(&s.a.ready);
        s.a.shared.release_buffered(&s.a.pipeline.buffered);
        s.gauges.clear();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let input = match msg {
            PartitionMsg::Records(records) => Input::Records(records),
            PartitionMsg::Completed => Input::Reports(
                s.inbox
                    .take()
                    .into_iter()
                    .map(|c| Report {
                        generation: c.generation,
                        src: c.src,
                        offset: c.offset,
                        outcome: match c.outcome {
                            Some(_) => Outcome::Done,
                            None => Outcome::Errored,
                        },
                    })
                    .collect(),
            ),
            PartitionMsg::Drain(reply) => {
                s.draining = Some(reply);
                Input::Drain
            }
            PartitionMsg::Health(v) => Input::Verdict {
                api_unavailable: v.api_unavailable,
            },
            PartitionMsg::Positions(p) => Input::Positions(p),
            PartitionMsg::Timer(t) => Input::Timer(t),
        };
        s.run(&myself, input);
        Ok(())
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
    }

    fn apply(&mut self, myself: &ActorRef<PartitionMsg>, e: Effect<Item>) -> Option<Input<Record>> {
        let partition = self.a.partition;
        match e {
            Effect::Dispatch { src, offset, item } => {
                let token =
                    CompletionToken::new(self.inbox.clone(), self.a.generation, src, offset);
                self.send(Job { item, token });
            }
            Effect::SetReading { src, on } => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(&self.machine.intake().topics[src.index()], partition);
                let r = if on {
                    self.a.consumer.resume(&tpl)
                } else {
                    self.a.consumer.pause(&tpl)
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
            Effect::Store { src, offset } => {
                let mut tpl = TopicPartitionList::new();
                let topic = &self.machine.intake().topics[src.index()];
                let r = tpl
                    .add_partition_offset(topic, partition, Offset::Offset(offset.get()))
                    .and_then(|()| self.a.consumer.store_offsets(&tpl));
                match r {
                    Ok(()) => {
                        self.a.shared.stored[src.index()].store(offset.get(), Ordering::SeqCst);
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
            Effect::Schedule { after, timer } => {
                myself.send_after(after, move || PartitionMsg::Timer(timer));
            }
            Effect::Drained => {
                if let Some(reply) = self.draining.take() {
                    let _ = reply.send(self.a.shared.stored(Src::Main));
                }
            }
            Effect::TakenIn(n) => {
                // Records leave the shared fetch budget: the poll thread may fetch again.
                self.a.shared.buffered.fetch_sub(n as i64, Ordering::SeqCst);
                self.a
                    .pipeline
                    .buffered
                    .fetch_sub(n as i64, Ordering::SeqCst);
            }
            Effect::Begun(n) => {
                self.a.ready.begun(n);
                self.a.shared.held.fetch_add(n as i64, Ordering::Relaxed);
            }
            Effect::Finished(n) => {
                for _ in 0..n {
                    self.a.ready.finished();
                }
                self.a.shared.held.fetch_sub(n as i64, Ordering::Relaxed);
            }
            Effect::Mode { mode, change } => {
                if let Some(c) = change {
                    tracing::info!(
                        partition,
                        from = c.from.as_str(),
                        to = c.to.as_str(),
                        "partition mode"
                    );
                    metrics::counter!(m::MODE_TRANSITIONS, "to" => c.to.as_str()).increment(1);
                }
                for (shown, g) in &self.gauges.mode {
                    g.set(if *shown == mode { 1.0 } else { 0.0 });
                }
            }
            Effect::Lag { dlq, main } => {
                self.gauges.dlq_lag.set(dlq as f64);
                if let Some(lag) = main {
                    self.gauges.lag.set(lag as f64);
                }
            }
            Effect::Note(note) => log(partition, note),
        }
        None
    }

    /// Sends a job to the delivery pool. If the pool is missing or gone, the job is
    /// dropped here and its token reports errored: the machine dispatches it again
    /// after a back-off.
    fn send(&mut self, job: Job) {
        if !matches!(job.item.work, Work::Deliver(_)) {
            if let Some(pool) = self.a.pipeline.delivery() {
                let _ = pool.send_message(DeliveryMsg::Run(job));
            }
            return;
        }
        let job = match &self.queue {
            Some(q) => match q.send(job) {
                Ok(()) => return,
                Err(failed) => failed.0,
            },
            None => job,
        };
        // Not known yet, or the pool was re-spawned: take its current queue.
        self.queue = self.a.pipeline.delivery_queue();
        if let Some(q) = &self.queue {
            let _ = q.send(job);
        }
    }
}

fn log(partition: i32, note: Note) {
    match note {
        Note::OutOfOrder { src, error } => {
            tracing::warn!(partition, ?src, error = %error, "record out of order, dropped")
        }
        Note::RefusedCompletion { src, error } => {
            tracing::error!(partition, ?src, error = %error, "impossible completion refused")
        }
        Note::ParkingErrored { src, offset, times } => tracing::error!(
            partition,
            ?src,
            offset,
            "work for this event vanished {times} times; parking it"
        ),
        Note::DrainDeadline { in_flight } => tracing::warn!(
            partition,
            in_flight,
            "drain deadline passed; unfinished events will be redelivered"
        ),
    }
}
