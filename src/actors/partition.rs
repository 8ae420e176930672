//! Partition actor: one per assigned partition pair (main p, DLQ p). Owns the two
//! offset trackers (the commit watermarks), the ordering lanes, the events held
//! until their outcome is durable, and the partition's degraded-mode FSM; dispatches
//! work to the delivery pool and stores each watermark whenever it advances.
//!
//! What it guarantees: it stores only [`OffsetTracker::watermark`], so no stored
//! offset passes an event whose outcome is not durable. What it relies on: records
//! of each topic arrive in offset order and belong to this generation (the consumer
//! actor fences records across seeks and rebalances).

use crate::actors::delivery::DeliveryMsg;
use crate::core::envelope::Envelope;
use crate::core::event::{decode, DecodeOptions};
use crate::core::fsm::{Mode, PartitionFsm};
use crate::core::offsets::{NextOffset, OffsetTracker};
use crate::core::ordering::Scheduler;
use crate::delivery::token::{Completion, CompletionToken, Inbox};
use crate::delivery::{Item, Job, Work};
use crate::health::Verdict;
use crate::kafka::{KafkaConsumer, Record};
use crate::metrics as m;
use crate::runtime::{now_ms, Pipeline};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job that errored this many times (its task vanished without an outcome) is
/// parked with reason `internal_error` instead of being retried forever.
const MAX_ERRORED: u32 = 20;

/// Which topic of the pair an offset belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Src {
    Main,
    Dlq,
}

pub enum PartitionMsg {
    Records(Vec<Record>),
    /// Completion tokens left outcomes in the inbox (see `delivery::token::Inbox`).
    Completed,
    Redispatch(Src, i64),
    /// Stop dispatching, wait (bounded) for in-flight work, reply with the stored
    /// main watermark. Used on revoke and shutdown.
    Drain(RpcReplyPort<Option<i64>>),
    DrainTimeout,
    /// The health verdict changed.
    Health(Verdict),
    /// The consumer's periodic lag check.
    Positions(Positions),
    /// Re-evaluate the FSM (a dwell ended or a DLQ event became due).
    Wake,
    /// Store the watermarks that advanced since the last store.
    Store,
}

/// What the consumer's lag check found for one partition pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct Positions {
    /// End offset of main p (None: not known).
    pub main_high: Option<i64>,
    /// End offset of DLQ p.
    pub dlq_high: i64,
    /// Where reading DLQ p starts when nothing was read (committed or earliest).
    pub dlq_start: i64,
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
}

impl PartitionShared {
    pub fn stored(&self, src: Src) -> Option<i64> {
        let v = self.stored[src as usize].load(Ordering::SeqCst);
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

struct Held {
    item: Arc<Item>,
    errored: u32,
}

/// How long an advanced watermark may wait before it is stored. Storing costs a
/// librdkafka call (and a lock) per store; per completion that showed in the
/// profile. Auto-commit runs every `auto_commit_interval_ms` anyway, and a later
/// store only ever means re-reading a little more after a crash.
const STORE_DELAY: Duration = Duration::from_millis(10);

/// The partition's metric handles, registered once: building a labelled key per
/// record showed in the profile.
struct Gauges {
    consumed: [metrics::Counter; 2],
    watermark: metrics::Gauge,
    paused: metrics::Gauge,
    dlq_lag: metrics::Gauge,
    lag: metrics::Gauge,
    mode: [(Mode, metrics::Gauge); 3],
}

impl Gauges {
    fn new(partition: i32, topics: [&str; 2]) -> Gauges {
        let label = partition.to_string();
        let mode = |mode: Mode| {
            let g = metrics::gauge!(m::PARTITION_MODE, "partition" => label.clone(), "mode" => mode.as_str());
            (mode, g)
        };
        Gauges {
            consumed: topics.map(|t| metrics::counter!(m::CONSUMED, "topic" => t.to_string())),
            watermark: metrics::gauge!(m::COMMIT_WATERMARK, "partition" => label.clone()),
            paused: metrics::gauge!(m::PARTITION_PAUSED, "partition" => label.clone()),
            dlq_lag: metrics::gauge!(m::DLQ_LAG, "partition" => label.clone()),
            lag: metrics::gauge!(m::CONSUMER_LAG, "partition" => label.clone()),
            mode: [mode(Mode::Normal), mode(Mode::Paused), mode(Mode::DrainDlq)],
        }
    }

    fn show_mode(&self, current: Mode) {
        for (mode, g) in &self.mode {
            g.set(if *mode == current { 1.0 } else { 0.0 });
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

/// One topic of the pair.
struct Side {
    topic: Arc<str>,
    tracker: OffsetTracker,
    stored: Option<NextOffset>,
    /// What is currently applied to the consumer (None: not yet applied).
    reading: Option<bool>,
}

pub struct PartitionState {
    a: PartitionArgs,
    sides: [Side; 2],
    decode: DecodeOptions,
    limit: usize,
    lanes: Scheduler,
    held: HashMap<(Src, i64), Held>,
    /// Main records taken from the consumer but not begun because the partition
    /// holds `limit` events: still part of the fetch budget (`buffered`).
    /// Backpressure works through that budget rather than librdkafka's pause,
    /// which throws the partition's prefetched records away and restarts fetching
    /// only at the fetcher's next wake-up (up to ~1 s: the benchmark saw the whole
    /// pipeline idle 0.3–0.4 s of every second). Only a partition whose backlog
    /// takes half the budget (a stuck key, a stalled API) is paused there.
    backlog: VecDeque<Record>,
    backlog_cap: usize,
    /// Begun DLQ offsets waiting for the drain, in order.
    dlq_queue: VecDeque<i64>,
    dispatched: usize,
    main_held: usize,
    main_full: bool,
    fsm: PartitionFsm,
    verdict: Verdict,
    dlq_high: Option<i64>,
    dlq_start: Option<i64>,
    wake_at: Option<Instant>,
    draining: Option<RpcReplyPort<Option<i64>>>,
    /// A `Store` message is on its way.
    store_scheduled: bool,
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
        let side = |src: Src, topic: &str| Side {
            topic: Arc::from(topic),
            tracker: match a.start[src as usize] {
                Some(s) => OffsetTracker::starting_at(a.generation, s),
                None => OffsetTracker::new(a.generation),
            },
            stored: a.shared.stored(src).map(NextOffset::at),
            reading: None,
        };
        let sides = [
            side(Src::Main, &cfg.kafka.topic),
            side(Src::Dlq, &a.pipeline.dlq_topic),
        ];
        let gauges = Gauges::new(a.partition, [&cfg.kafka.topic, &a.pipeline.dlq_topic]);
        let mut s = PartitionState {
            sides,
            decode: cfg.pipeline.decode_options(),
            limit: cfg.pipeline.max_in_flight_per_partition,
            lanes: Scheduler::new(cfg.pipeline.ordering),
            held: HashMap::new(),
            dlq_queue: VecDeque::new(),
            backlog: VecDeque::new(),
            backlog_cap: (cfg.pipeline.max_buffered / 2).max(1),
            dispatched: 0,
            main_held: 0,
            main_full: false,
            fsm: PartitionFsm::new(cfg.degraded.min_pause),
            verdict: a.pipeline.health.verdict(),
            dlq_high: None,
            dlq_start: None,
            wake_at: None,
            draining: None,
            store_scheduled: false,
            queue: None,
            inbox: Arc::new(Inbox::new(myself.clone())),
            gauges,
            a,
        };
        // Pauses do not survive rebalances reliably: apply the FSM's reading state
        // explicitly for this new assignment.
        s.evaluate(&myself);
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
        match msg {
            PartitionMsg::Records(records) => s.on_records(&myself, records),
            PartitionMsg::Completed => s.on_completed(&myself),
            PartitionMsg::Redispatch(src, offset) => {
                if s.draining.is_none() && s.held.contains_key(&(src, offset)) {
                    s.dispatch(src, offset);
                }
            }
            PartitionMsg::Drain(reply) => {
                s.draining = Some(reply);
                // Not begun, not stored: the next owner reads them again.
                let waiting = std::mem::take(&mut s.backlog);
                s.taken_in(waiting.len());
                s.store_all();
                if s.dispatched == 0 {
                    s.reply_drained();
                } else {
                    let wait = s.a.pipeline.config.pipeline.drain_timeout;
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
            PartitionMsg::Health(v) => {
                s.verdict = v;
                s.evaluate(&myself);
            }
            PartitionMsg::Positions(p) => {
                s.dlq_high = Some(p.dlq_high);
                s.dlq_start = Some(p.dlq_start);
                let next = s.dlq_next().unwrap_or(p.dlq_start);
                s.gauges.dlq_lag.set((p.dlq_high - next).max(0) as f64);
                if let (Some(high), Some(wm)) = (p.main_high, s.sides[Src::Main as usize].stored) {
                    s.gauges.lag.set((high - wm.get()).max(0) as f64);
                }
                s.evaluate(&myself);
            }
            PartitionMsg::Wake => {
                s.wake_at = None;
                s.evaluate(&myself);
            }
            PartitionMsg::Store => {
                s.store_scheduled = false;
                s.store_all();
            }
        }
        Ok(())
    }
}

impl PartitionState {
    fn side(&mut self, src: Src) -> &mut Side {
        &mut self.sides[src as usize]
    }

    fn on_records(&mut self, myself: &ActorRef<PartitionMsg>, records: Vec<Record>) {
        if self.draining.is_some() {
            // Not begun, not stored: the next owner reads them again.
            self.taken_in(records.len());
            return;
        }
        let mut taken = 0;
        for r in records {
            // Main records wait in the backlog while the partition holds its limit
            // (and behind those already waiting, to keep offset order).
            if !r.dlq && (!self.backlog.is_empty() || self.main_held >= self.limit) {
                self.backlog.push_back(r);
                continue;
            }
            taken += 1;
            self.begin(r);
        }
        self.taken_in(taken);
        self.evaluate(myself);
        self.store_all();
    }

    /// Records leave the shared fetch budget (`pipeline.max_buffered`) once begun
    /// or dropped: the poll thread may fetch again.
    fn taken_in(&self, n: usize) {
        let n = n as i64;
        self.a.shared.buffered.fetch_sub(n, Ordering::SeqCst);
        self.a.pipeline.buffered.fetch_sub(n, Ordering::SeqCst);
    }

    /// Begins backlog records while the partition has room.
    fn fill(&mut self) {
        let mut n = 0;
        while self.main_held < self.limit && self.draining.is_none() {
            let Some(r) = self.backlog.pop_front() else {
                break;
            };
            n += 1;
            self.begin(r);
        }
        self.taken_in(n);
    }

    /// Takes one record in: tracker, decode, held, and dispatch if its key is free.
    fn begin(&mut self, r: Record) {
        let src = if r.dlq { Src::Dlq } else { Src::Main };
        if let Err(e) = self.side(src).tracker.begin(r.offset) {
            // An offset at or below one already begun is in flight or done;
            // dropping it is safe (the watermark cannot pass it).
            tracing::warn!(partition = self.a.partition, ?src, error = %e, "record out of order, dropped");
            return;
        }
        let topic = self.sides[src as usize].topic.clone();
        self.gauges.consumed[src as usize].increment(1);
        let work = match src {
            Src::Main => self.decode_main(&r),
            Src::Dlq => match r.payload.as_deref().map(Envelope::from_bytes) {
                Some(Ok(env)) => Work::FromDlq(Box::new(env)),
                Some(Err(e)) => Work::Park {
                    reason: "unreadable_envelope".into(),
                    message: e.to_string(),
                },
                None => Work::Park {
                    reason: "unreadable_envelope".into(),
                    message: "DLQ record without a value".into(),
                },
            },
        };
        let ordered = matches!(work, Work::Deliver(_));
        let queued = matches!(work, Work::FromDlq(_));
        let item = Arc::new(Item {
            topic,
            partition: self.a.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
            key: r.key,
            payload: r.payload,
            work,
        });
        let key_free = !ordered || self.lanes.admit(item.key.as_deref(), r.offset);
        self.held.insert((src, r.offset), Held { item, errored: 0 });
        self.a.ready.begun(1);
        self.a.shared.held.fetch_add(1, Ordering::Relaxed);
        if src == Src::Main {
            self.main_held += 1;
        }
        if queued {
            self.dlq_queue.push_back(r.offset);
        } else if key_free {
            self.dispatch(src, r.offset);
        }
    }

    fn decode_main(&self, r: &Record) -> Work {
        match decode(r.payload.as_ref(), &self.decode) {
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
        }
    }

    /// Takes every outcome the tokens left in the inbox, then re-evaluates once.
    fn on_completed(&mut self, myself: &ActorRef<PartitionMsg>) {
        let mut advanced = false;
        for c in self.inbox.take() {
            advanced |= self.on_finished(myself, c);
        }
        if advanced {
            self.fill();
            self.schedule_store(myself);
            self.evaluate(myself);
        }
        if self.draining.is_some() && self.dispatched == 0 {
            self.reply_drained();
        }
    }

    /// One outcome; true when an offset completed.
    fn on_finished(&mut self, myself: &ActorRef<PartitionMsg>, c: Completion) -> bool {
        let Completion {
            generation,
            src,
            offset,
            outcome,
        } = c;
        if generation != self.a.generation {
            return false; // A late report from an older incarnation: fenced off.
        }
        self.dispatched = self.dispatched.saturating_sub(1);
        match outcome {
            None => {
                self.on_errored(myself, src, offset);
                false
            }
            Some(_) => {
                if let Err(e) = self.side(src).tracker.complete(generation, offset) {
                    tracing::error!(partition = self.a.partition, ?src, error = %e, "impossible completion refused");
                    return false;
                }
                if let Some(held) = self.held.remove(&(src, offset)) {
                    self.a.ready.finished();
                    self.a.shared.held.fetch_sub(1, Ordering::Relaxed);
                    if src == Src::Main {
                        self.main_held -= 1;
                    }
                    if matches!(held.item.work, Work::Deliver(_)) {
                        if let Some(next) = self.lanes.finish(held.item.key.as_deref(), offset) {
                            if self.draining.is_none() {
                                self.dispatch(Src::Main, next);
                            }
                        }
                    }
                }
                true
            }
        }
    }

    fn on_errored(&mut self, myself: &ActorRef<PartitionMsg>, src: Src, offset: i64) {
        let Some(held) = self.held.get_mut(&(src, offset)) else {
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
            myself.send_after(delay, move || PartitionMsg::Redispatch(src, offset));
        }
    }

    fn dispatch(&mut self, src: Src, offset: i64) {
        let Some(held) = self.held.get(&(src, offset)) else {
            return;
        };
        self.dispatched += 1;
        let job = Job {
            item: held.item.clone(),
            token: CompletionToken::new(self.inbox.clone(), self.a.generation, src, offset),
        };
        // If the pool is missing or gone, the job is dropped here and its token
        // reports errored: the event is re-dispatched after a backoff.
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

    /// The next DLQ offset this partition would read.
    fn dlq_next(&self) -> Option<i64> {
        self.sides[Src::Dlq as usize]
            .tracker
            .highest_begun()
            .map(|h| h + 1)
            .or(self.dlq_start)
    }

    fn not_before(&self, offset: i64) -> Option<i64> {
        match &self.held.get(&(Src::Dlq, offset))?.item.work {
            Work::FromDlq(env) => Some(env.not_before_ms),
            _ => None,
        }
    }

    /// DLQ partition p has something to drain now: a due event at the head of the
    /// queue, or unread records (whose head may turn out not to be due yet), or a
    /// lag not known yet.
    fn dlq_has_unread(&self, now_ms: i64) -> bool {
        match self.dlq_queue.front() {
            Some(&off) => self.not_before(off).is_none_or(|t| t <= now_ms),
            None => match (self.dlq_high, self.dlq_next()) {
                (Some(high), Some(next)) => high > next,
                // Lag not known yet (a new assignment): assume there is a backlog,
                // so main p is not read before DLQ p was looked at.
                _ => true,
            },
        }
    }

    /// Runs the FSM and applies its reading state; dispatches due DLQ events
    /// while draining; schedules the next wake-up.
    fn evaluate(&mut self, myself: &ActorRef<PartitionMsg>) {
        let now = Instant::now();
        let wall = now_ms();
        let first = self.sides[Src::Main as usize].reading.is_none();
        let change = self
            .fsm
            .update(now, self.verdict.api_unavailable, self.dlq_has_unread(wall));
        if let Some(change) = change {
            tracing::info!(
                partition = self.a.partition,
                from = change.from.as_str(),
                to = change.to.as_str(),
                "partition mode"
            );
            metrics::counter!(m::MODE_TRANSITIONS, "to" => change.to.as_str()).increment(1);
        }
        if change.is_some() || first {
            // Also on the first evaluation, so a partition that starts paused shows.
            self.gauges.show_mode(self.fsm.mode());
        }
        let reading = self.fsm.reading();
        // A backlog hogging the fetch budget pauses the partition in librdkafka
        // (see `backlog`), with hysteresis: resume at half.
        if self.backlog.len() >= self.backlog_cap {
            self.main_full = true;
        } else if self.backlog.len() <= self.backlog_cap / 2 {
            self.main_full = false;
        }
        let main_on = reading.main && !self.main_full;
        self.apply(Src::Main, main_on);
        self.apply(Src::Dlq, reading.dlq);
        // Drain: dispatch due events in order, at most `limit` at a time.
        let mut next_due: Option<i64> = None;
        if self.fsm.mode() == Mode::DrainDlq && self.draining.is_none() {
            while let Some(&off) = self.dlq_queue.front() {
                if self.dispatched >= self.limit {
                    break;
                }
                match self.not_before(off) {
                    Some(t) if t > wall => {
                        next_due = Some(t);
                        break;
                    }
                    _ => {
                        self.dlq_queue.pop_front();
                        self.dispatch(Src::Dlq, off);
                    }
                }
            }
        } else if let Some(&off) = self.dlq_queue.front() {
            next_due = self.not_before(off).filter(|t| *t > wall);
        }
        let mut wake: Option<Instant> = self.fsm.dwell_until(now);
        if let Some(t) = next_due {
            let at = now + Duration::from_millis((t - wall).max(0) as u64);
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if let Some(at) = wake {
            if self.wake_at.is_none_or(|w| at < w) {
                self.wake_at = Some(at);
                myself.send_after(
                    at.saturating_duration_since(now) + Duration::from_millis(1),
                    || PartitionMsg::Wake,
                );
            }
        }
    }

    fn apply(&mut self, src: Src, on: bool) {
        if self.sides[src as usize].reading == Some(on) {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.sides[src as usize].topic, self.a.partition);
        let r = if on {
            self.a.consumer.resume(&tpl)
        } else {
            self.a.consumer.pause(&tpl)
        };
        match r {
            Ok(()) => {
                self.side(src).reading = Some(on);
                if src == Src::Main {
                    self.gauges.paused.set(if on { 0.0 } else { 1.0 });
                }
            }
            // The DLQ partition may not be assigned (topic created later): nothing to apply.
            Err(e) => {
                tracing::debug!(partition = self.a.partition, ?src, error = %e, on, "pause/resume")
            }
        }
    }

    /// Stores the advanced watermarks soon (see [`STORE_DELAY`]), once for many
    /// completions.
    fn schedule_store(&mut self, myself: &ActorRef<PartitionMsg>) {
        if !self.store_scheduled {
            self.store_scheduled = true;
            myself.send_after(STORE_DELAY, || PartitionMsg::Store);
        }
    }

    fn store_all(&mut self) {
        self.store(Src::Main);
        self.store(Src::Dlq);
    }

    /// Stores the watermark if it advanced. librdkafka's auto-commit then commits it.
    fn store(&mut self, src: Src) {
        let partition = self.a.partition;
        let side = &mut self.sides[src as usize];
        let Some(wm) = side.tracker.watermark() else {
            return;
        };
        if side.stored.is_some_and(|s| s >= wm) {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&side.topic, partition, Offset::Offset(wm.get()))
            .is_err()
        {
            return;
        }
        match self.a.consumer.store_offsets(&tpl) {
            Ok(()) => {
                side.stored = Some(wm);
                self.a.shared.stored[src as usize].store(wm.get(), Ordering::SeqCst);
                if src == Src::Main {
                    self.gauges.watermark.set(wm.get() as f64);
                }
            }
            // Expected while a rebalance takes the partition away.
            Err(e) => tracing::debug!(partition, ?src, error = %e, "store_offsets"),
        }
    }

    fn reply_drained(&mut self) {
        self.store_all();
        if let Some(reply) = self.draining.take() {
            let _ = reply.send(self.sides[Src::Main as usize].stored.map(NextOffset::get));
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
