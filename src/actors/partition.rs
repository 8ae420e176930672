//! Partition actor: one per assigned partition. Owns the offset tracker (the commit
//! watermark), the ordering lanes and the events held until their outcome is
//! durable; dispatches work to the delivery pool and stores the watermark whenever
//! it advances.
//!
//! What it guarantees: it stores only [`OffsetTracker::watermark`], so no stored
//! offset passes an event whose outcome is not durable. What it relies on: records
//! arrive in offset order and belong to this generation (the consumer actor fences
//! records across seeks and rebalances).

use crate::actors::delivery::DeliveryMsg;
use crate::core::event::{decode, DecodeOptions};
use crate::core::offsets::{NextOffset, OffsetTracker};
use crate::core::ordering::Scheduler;
use crate::delivery::token::{CompletionToken, Finished};
use crate::delivery::{Item, Job, Work};
use crate::kafka::{KafkaConsumer, Record};
use crate::metrics as m;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A job that errored this many times (its task vanished without an outcome) is
/// parked with reason `internal_error` instead of being retried forever.
const MAX_ERRORED: u32 = 20;

pub enum PartitionMsg {
    Records(Vec<Record>),
    /// From a completion token. `outcome: None` means the work vanished (errored).
    Finished {
        generation: u64,
        offset: i64,
        outcome: Option<Finished>,
    },
    Redispatch(i64),
    /// Stop dispatching, wait (bounded) for in-flight work, reply with the stored
    /// watermark. Used on revoke and shutdown.
    Drain(RpcReplyPort<Option<i64>>),
    DrainTimeout,
}

/// State that outlives one incarnation of the actor (the consumer actor reads it
/// to recover after a crash).
#[derive(Debug)]
pub struct PartitionShared {
    /// Last stored watermark, -1 when none.
    pub stored: AtomicI64,
}

impl Default for PartitionShared {
    fn default() -> Self {
        PartitionShared {
            stored: AtomicI64::new(-1),
        }
    }
}

impl PartitionShared {
    pub fn stored(&self) -> Option<i64> {
        let v = self.stored.load(Ordering::SeqCst);
        (v >= 0).then_some(v)
    }
}

pub struct PartitionArgs {
    pub pipeline: Arc<Pipeline>,
    pub consumer: Arc<KafkaConsumer>,
    pub partition: i32,
    pub generation: u64,
    /// Known start position (after a seek); otherwise learnt from the first record.
    pub start: Option<NextOffset>,
    pub shared: Arc<PartitionShared>,
}

struct Held {
    item: Arc<Item>,
    errored: u32,
}

pub struct PartitionState {
    a: PartitionArgs,
    topic: String,
    decode: DecodeOptions,
    limit: usize,
    tracker: OffsetTracker,
    lanes: Scheduler,
    held: HashMap<i64, Held>,
    dispatched: usize,
    paused: bool,
    stored: Option<NextOffset>,
    draining: Option<RpcReplyPort<Option<i64>>>,
    label: String,
}

pub struct PartitionActor;

impl Actor for PartitionActor {
    type Msg = PartitionMsg;
    type State = PartitionState;
    type Arguments = PartitionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        a: PartitionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cfg = &a.pipeline.config;
        let tracker = match a.start {
            Some(s) => OffsetTracker::starting_at(a.generation, s),
            None => OffsetTracker::new(a.generation),
        };
        Ok(PartitionState {
            topic: cfg.kafka.topic.clone(),
            decode: cfg.pipeline.decode_options(),
            limit: cfg.pipeline.max_in_flight_per_partition,
            tracker,
            lanes: Scheduler::new(cfg.pipeline.ordering),
            held: HashMap::new(),
            dispatched: 0,
            paused: false,
            stored: a.shared.stored().map(NextOffset::at),
            draining: None,
            label: a.partition.to_string(),
            a,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PartitionMsg::Records(records) => s.on_records(&myself, records),
            PartitionMsg::Finished {
                generation,
                offset,
                outcome,
            } => s.on_finished(&myself, generation, offset, outcome),
            PartitionMsg::Redispatch(offset) => {
                if s.draining.is_none() && s.held.contains_key(&offset) {
                    s.dispatch(&myself, offset);
                }
            }
            PartitionMsg::Drain(reply) => {
                s.draining = Some(reply);
                s.store();
                if s.dispatched == 0 {
                    s.reply_drained();
                } else {
                    let wait = Duration::from_millis(s.a.pipeline.config.pipeline.drain_timeout_ms);
                    myself.send_after(wait, || PartitionMsg::DrainTimeout);
                }
            }
            PartitionMsg::DrainTimeout => {
                if s.draining.is_some() {
                    tracing::warn!(
                        partition = s.a.partition,
                        in_flight = s.dispatched,
                        "drain deadline passed; unfinished events will be redelivered"
                    );
                    s.reply_drained();
                }
            }
        }
        Ok(())
    }
}

impl PartitionState {
    fn on_records(&mut self, myself: &ActorRef<PartitionMsg>, records: Vec<Record>) {
        if self.draining.is_some() {
            // Not begun, not stored: the next owner reads them again.
            return;
        }
        metrics::counter!(m::CONSUMED, "topic" => self.topic.clone())
            .increment(records.len() as u64);
        for r in records {
            if let Err(e) = self.tracker.begin(r.offset) {
                // An offset at or below one already begun is in flight or done;
                // dropping it is safe (the watermark cannot pass it).
                tracing::warn!(partition = self.a.partition, error = %e, "record out of order, dropped");
                continue;
            }
            let work = match decode(r.payload.as_ref(), &self.decode) {
                Ok(ev) => {
                    self.crash_hook(&ev.id);
                    Work::Deliver(ev)
                }
                Err(e) => {
                    tracing::info!(partition = self.a.partition, offset = r.offset, reason = e.reason(), error = %e, "bad input, parking");
                    Work::Park {
                        reason: e.reason().to_string(),
                        message: e.to_string(),
                    }
                }
            };
            let ordered = matches!(work, Work::Deliver(_));
            let item = Arc::new(Item {
                topic: self.topic.clone(),
                partition: self.a.partition,
                offset: r.offset,
                timestamp_ms: r.timestamp_ms,
                key: r.key,
                payload: r.payload,
                work,
            });
            // Bad input takes no place in the key order: it is parked at once.
            let now = !ordered || self.lanes.admit(item.key.as_deref(), r.offset);
            self.held.insert(r.offset, Held { item, errored: 0 });
            if now {
                self.dispatch(myself, r.offset);
            }
        }
        if !self.paused && self.held.len() >= self.limit {
            self.set_paused(true);
        }
        self.store();
    }

    fn on_finished(
        &mut self,
        myself: &ActorRef<PartitionMsg>,
        generation: u64,
        offset: i64,
        outcome: Option<Finished>,
    ) {
        if generation != self.a.generation {
            return; // A late report from an older incarnation: fenced off.
        }
        self.dispatched = self.dispatched.saturating_sub(1);
        match outcome {
            None => self.on_errored(myself, offset),
            Some(_) => {
                if let Err(e) = self.tracker.complete(generation, offset) {
                    tracing::error!(partition = self.a.partition, error = %e, "impossible completion refused");
                    return;
                }
                if let Some(held) = self.held.remove(&offset) {
                    if matches!(held.item.work, Work::Deliver(_)) {
                        if let Some(next) = self.lanes.finish(held.item.key.as_deref(), offset) {
                            if self.draining.is_none() {
                                self.dispatch(myself, next);
                            }
                        }
                    }
                }
                self.store();
                if self.paused && self.held.len() <= self.limit / 2 {
                    self.set_paused(false);
                }
            }
        }
        if self.draining.is_some() && self.dispatched == 0 {
            self.reply_drained();
        }
    }

    fn on_errored(&mut self, myself: &ActorRef<PartitionMsg>, offset: i64) {
        let Some(held) = self.held.get_mut(&offset) else {
            return;
        };
        held.errored += 1;
        let n = held.errored;
        if n >= MAX_ERRORED {
            tracing::error!(
                partition = self.a.partition,
                offset,
                "work for this event vanished {n} times; parking it"
            );
            let old = held.item.clone();
            held.item = Arc::new(Item {
                topic: old.topic.clone(),
                partition: old.partition,
                offset: old.offset,
                timestamp_ms: old.timestamp_ms,
                key: old.key.clone(),
                payload: old.payload.clone(),
                work: Work::Park {
                    reason: "internal_error".into(),
                    message: format!("delivery work vanished {n} times without an outcome"),
                },
            });
        }
        if self.draining.is_none() {
            let delay = crate::core::backoff::persistent_delay(
                n,
                Duration::from_millis(100),
                Duration::from_secs(5),
            );
            myself.send_after(delay, move || PartitionMsg::Redispatch(offset));
        }
    }

    fn dispatch(&mut self, myself: &ActorRef<PartitionMsg>, offset: i64) {
        let Some(held) = self.held.get(&offset) else {
            return;
        };
        self.dispatched += 1;
        let job = Job {
            item: held.item.clone(),
            token: CompletionToken::new(myself.clone(), self.a.generation, offset),
        };
        // If the pool is missing or gone, the job is dropped here and its token
        // reports errored: the event is re-dispatched after a backoff.
        if let Some(pool) = self.a.pipeline.delivery() {
            let _ = pool.send_message(DeliveryMsg::Run(job));
        }
    }

    /// Stores the watermark if it advanced. librdkafka's auto-commit then commits it.
    fn store(&mut self) {
        let Some(wm) = self.tracker.watermark() else {
            return;
        };
        if self.stored.is_some_and(|s| s >= wm) {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&self.topic, self.a.partition, Offset::Offset(wm.get()))
            .is_err()
        {
            return;
        }
        match self.a.consumer.store_offsets(&tpl) {
            Ok(()) => {
                self.stored = Some(wm);
                self.a.shared.stored.store(wm.get(), Ordering::SeqCst);
                metrics::gauge!(m::COMMIT_WATERMARK, "partition" => self.label.clone())
                    .set(wm.get() as f64);
            }
            // Expected while a rebalance takes the partition away.
            Err(e) => tracing::debug!(partition = self.a.partition, error = %e, "store_offsets"),
        }
    }

    fn set_paused(&mut self, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, self.a.partition);
        let r = if pause {
            self.a.consumer.pause(&tpl)
        } else {
            self.a.consumer.resume(&tpl)
        };
        match r {
            Ok(()) => {
                self.paused = pause;
                metrics::gauge!(m::PARTITION_PAUSED, "partition" => self.label.clone())
                    .set(if pause { 1.0 } else { 0.0 });
            }
            Err(e) => {
                tracing::warn!(partition = self.a.partition, error = %e, pause, "pause/resume failed")
            }
        }
    }

    fn reply_drained(&mut self) {
        self.store();
        if let Some(reply) = self.draining.take() {
            let _ = reply.send(self.stored.map(NextOffset::get));
        }
    }

    /// Test fault hook (`testing.crash_on_event_id`): panics once per process, or
    /// every time with `testing.crash_repeatedly`.
    fn crash_hook(&self, id: &str) {
        let cfg = &self.a.pipeline.config.testing;
        if cfg.crash_on_event_id.as_deref() != Some(id) {
            return;
        }
        let first = !self
            .a
            .pipeline
            .crash_hook_fired
            .swap(true, Ordering::SeqCst);
        if first || cfg.crash_repeatedly {
            panic!("test fault hook: partition actor crashes on event {id}");
        }
    }
}
