//! The consumer actor and its partition actors over fakes of the Kafka seams
//! (`actors::fakes`): no broker. The test drives the consumer through its
//! messages (what the poll thread and the rebalance callbacks would send),
//! plays the delivery pool (it holds the jobs and finishes them, or drops
//! them as the pool drops cancelled work), and looks at what was asked of
//! Kafka.

use super::{ConsumerMsg, ConsumerState, Kafka};
use crate::actors::delivery_pool::PoolHandles;
use crate::actors::fakes::{FakeBroker, FakeIo, IoCall};
use crate::config::Config;
use crate::core::completed;
use crate::core::partition::Src;
use crate::delivery::token::Finished;
use crate::delivery::{Job, Queued};
use crate::handle::Binding;
use crate::kafka::seams::{BrokerView, PartitionIo};
use crate::kafka::Record;
use crate::metrics::Readiness;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const MAIN_ID: &str = "q6AUPnmAS0yMtYhZ7I9-Ag";
const DLQ_ID: &str = "v4g9i7bSQhKgX0PRVSvhWg";
const WITHIN: Duration = Duration::from_secs(5);

/// The consumer actor without its start: its state is built over fakes.
struct Harness;

impl Actor for Harness {
    type Msg = ConsumerMsg;
    type State = ConsumerState;
    type Arguments = ConsumerState;

    async fn pre_start(
        &self,
        _myself: ActorRef<ConsumerMsg>,
        s: ConsumerState,
    ) -> Result<ConsumerState, ActorProcessingErr> {
        Ok(s)
    }

    async fn handle(
        &self,
        myself: ActorRef<ConsumerMsg>,
        msg: ConsumerMsg,
        s: &mut ConsumerState,
    ) -> Result<(), ActorProcessingErr> {
        s.handle(&myself, msg).await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ConsumerMsg>,
        evt: SupervisionEvent,
        s: &mut ConsumerState,
    ) -> Result<(), ActorProcessingErr> {
        s.supervise(&myself, evt).await
    }
}

/// The delivery pool actor's mailbox, played by the test: the jobs that take
/// no API permit (parking-lot writes, DLQ redeliveries) go to a channel.
struct PoolStub;

impl Actor for PoolStub {
    type Msg = crate::actors::delivery_pool::DeliveryMsg;
    type State = mpsc::UnboundedSender<Job>;
    type Arguments = mpsc::UnboundedSender<Job>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let crate::actors::delivery_pool::DeliveryMsg::Run(job) = msg {
            let _ = tx.send(job);
        }
        Ok(())
    }
}

/// A consumer over fakes, the jobs its partitions dispatch, and the fakes.
struct World {
    consumer: ActorRef<ConsumerMsg>,
    io: Arc<FakeIo>,
    broker: Arc<FakeBroker>,
    pipeline: Arc<Pipeline>,
    /// The delivery pool's queue: the jobs in flight.
    jobs: mpsc::UnboundedReceiver<Queued>,
    _queue: Binding<mpsc::UnboundedSender<Queued>>,
    /// The jobs sent to the delivery pool actor (no API permit).
    pooled: mpsc::UnboundedReceiver<Job>,
    _pool: Binding<ActorRef<crate::actors::delivery_pool::DeliveryMsg>>,
    main: String,
    dlq: String,
}

impl World {
    /// One partition pair, empty logs, nothing committed; `broker` adjusts
    /// the brokers' answers before the consumer starts.
    async fn new(broker: impl FnOnce(&FakeBroker, &str, &str)) -> World {
        World::with_config(Config::default(), broker).await
    }

    /// [`World::new`] with this configuration.
    async fn with_config(config: Config, broker: impl FnOnce(&FakeBroker, &str, &str)) -> World {
        let status = Arc::new(crate::status_page::StatusBoard::new(
            crate::status_page::BoardInfo::new(&config, "test".into()),
            crate::runtime::now_ms(),
        ));
        let pipeline = Arc::new(Pipeline::new(config, status).expect("valid"));
        let (main, dlq) = (
            pipeline.config.kafka.topic.clone(),
            pipeline.dlq_topic.clone(),
        );
        let fake = FakeBroker::with_topics(&[(&main, MAIN_ID), (&dlq, DLQ_ID)], 1);
        broker(&fake, &main, &dlq);
        let (io, broker) = (Arc::new(FakeIo::default()), Arc::new(fake));
        let (tx, jobs) = mpsc::unbounded_channel();
        let queue = Binding::default();
        queue.bind(tx);
        let (to_pool, pooled) = mpsc::unbounded_channel();
        let (stub, _) = Actor::spawn(None, PoolStub, to_pool)
            .await
            .expect("the pool's stand-in starts");
        let pool = Binding::default();
        pool.bind(stub);
        let delivery = PoolHandles {
            pool: pool.handle(),
            queue: queue.handle(),
        };
        let ready = Arc::new(Readiness::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
        ));
        let kafka = Kafka {
            io: io.clone() as Arc<dyn PartitionIo>,
            broker: broker.clone() as Arc<dyn BrokerView>,
            client: None,
            metadata_max: completed::DEFAULT_MAX_METADATA_BYTES,
            subscribed_at: std::time::Instant::now(),
        };
        let closing = Arc::new(AtomicBool::new(false));
        let state = ConsumerState::new(pipeline.clone(), ready, delivery, kafka, closing);
        let (consumer, _) = Actor::spawn(None, Harness, state)
            .await
            .expect("the harness starts");
        World {
            consumer,
            io,
            broker,
            pipeline,
            jobs,
            _queue: queue,
            pooled,
            _pool: pool,
            main,
            dlq,
        }
    }

    fn send(&self, msg: ConsumerMsg) {
        self.consumer
            .send_message(msg)
            .unwrap_or_else(|_| panic!("the consumer is gone"));
    }

    /// Records of partition 0 from the poll thread (which counts them
    /// buffered before it hands them over).
    fn records(&self, src: Src, offsets: impl IntoIterator<Item = i64>) {
        let records: Vec<Record> = offsets.into_iter().map(|o| record(src, o)).collect();
        let bytes = records.iter().map(Record::size).sum();
        self.pipeline.buffered.add(records.len(), bytes);
        self.send(ConsumerMsg::Records(records));
    }

    /// Partition 0 is assigned; returns once its first lag check let main
    /// p be read (nothing unread in DLQ p).
    async fn assign(&self) {
        self.send(ConsumerMsg::Assigned(vec![0]));
        until("main p is read once the DLQ's lag is known", || {
            self.io.reading(&self.main, 0) == Some(true)
        })
        .await;
    }

    /// The next `n` jobs dispatched, by offset.
    async fn jobs(&mut self, n: usize) -> BTreeMap<i64, Job> {
        let mut got = BTreeMap::new();
        while got.len() < n {
            let queued = tokio::time::timeout(WITHIN, self.jobs.recv())
                .await
                .unwrap_or_else(|_| panic!("{n} jobs expected, {} came", got.len()))
                .expect("the queue is open");
            let jobs = match queued {
                Queued::One(j) => vec![j],
                Queued::Run(js) => js,
            };
            for j in jobs {
                got.insert(j.token.offset(), j);
            }
        }
        got
    }

    /// Jobs dispatched within a short while (none expected, usually).
    async fn more_jobs(&mut self) -> Vec<i64> {
        let mut got = Vec::new();
        while let Ok(Some(q)) =
            tokio::time::timeout(Duration::from_millis(300), self.jobs.recv()).await
        {
            match q {
                Queued::One(j) => got.push(j.token.offset()),
                Queued::Run(js) => got.extend(js.iter().map(|j| j.token.offset())),
            }
        }
        got
    }
}

/// A CloudEvent of partition 0 at `offset`.
fn record(src: Src, offset: i64) -> Record {
    let body = format!(r#"{{"specversion":"1.0","id":"e-{offset}","source":"s","type":"t"}}"#);
    Record {
        partition: 0,
        offset,
        src,
        // A key of its own: no ordering lane holds it behind another.
        key: Some(format!("k-{offset}").into_bytes()),
        payload: Some(bytes::Bytes::from(body)),
        timestamp_ms: None,
        headers: None,
    }
}

/// Finishes the jobs at `offsets` (delivered), taking them out of `jobs`.
fn finish(jobs: &mut BTreeMap<i64, Job>, offsets: &[i64]) {
    for o in offsets {
        let job = jobs.remove(o).unwrap_or_else(|| panic!("no job at {o}"));
        job.token.finish(Finished::Delivered);
    }
}

/// Waits (at most [`WITHIN`]) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let end = tokio::time::Instant::now() + WITHIN;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < end,
            "not seen in time: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The offsets a metadata string names done above `at` (main p's log).
fn named_done(at: i64, metadata: &str) -> Vec<i64> {
    let done = completed::decode(MAIN_ID, at, metadata).expect("Courier's metadata for main p");
    (at..at + 100).filter(|o| done.contains(*o)).collect()
}

/// Rebalance: partition 0 is assigned, events 0..6 are dispatched, 0, 1, 3
/// and 5 finish; then it is revoked while 2 and 4 are in flight. The drain
/// waits for what is on the wire (2 finishes), ends what is queued (4 is
/// dropped by the pool, cancelled), and stores the watermark 4 with 5
/// named done (what the revoke callback then commits) — never a position
/// past an unfinished event. The revoke is acknowledged only then, and
/// later records of the partition are no longer the consumer's.
#[tokio::test]
async fn a_revoke_with_events_in_flight_stores_only_what_finished() {
    let mut w = World::new(|_, _, _| {}).await;
    w.assign().await;
    w.records(Src::Main, 0..6);
    let mut jobs = w.jobs(6).await;
    finish(&mut jobs, &[0, 1, 3, 5]);
    until("the watermark 2 is stored", || {
        w.io.stores(&w.main, 0).last().map(|s| s.0) == Some(2)
    })
    .await;

    let (ack, acked) = std::sync::mpsc::sync_channel(1);
    w.send(ConsumerMsg::Revoked {
        partitions: vec![0],
        ack,
    });
    let acked = tokio::task::spawn_blocking(move || acked.recv_timeout(WITHIN));
    // The pool: 2 was on the wire and finishes; 4 was queued and is dropped.
    tokio::time::sleep(Duration::from_millis(50)).await;
    finish(&mut jobs, &[2]);
    drop(jobs.remove(&4));
    acked
        .await
        .expect("the wait ends")
        .expect("the revoke is acknowledged once drained");

    // What the revoke callback then commits (`commit_consumer_state`).
    let stores = w.io.stores(&w.main, 0);
    let (at, metadata) = stores.last().expect("the drain stores main p");
    assert_eq!(
        *at, 4,
        "the drain stores the watermark: 2 finished, 4 did not ({stores:?})"
    );
    assert_eq!(named_done(4, metadata), vec![5]);
    assert!(stores.iter().all(|s| s.0 <= 4), "stored past 4: {stores:?}");

    // Not the consumer's partition any more: nothing is dispatched.
    w.records(Src::Main, 6..8);
    assert_eq!(w.more_jobs().await, Vec::<i64>::new());
    assert_eq!(
        w.pipeline.buffered.get().0,
        0,
        "dropped records are given back"
    );
}

/// Crash recovery: events 0..10 are in flight; 0, 1, 2, 4 and 6 finish, so
/// the watermark 3 is stored with 4 and 6 named done. The actor crashes
/// (at its next store). The consumer seeks main p back to 3, fences off a
/// record polled before the seek (10), and the new actor delivers again
/// only what was not done: 3, 5, 7, 8, 9 — not 4 and 6.
#[tokio::test]
async fn a_crashed_partition_is_read_again_skipping_what_its_metadata_names_done() {
    let mut w = World::new(|_, _, _| {}).await;
    w.assign().await;
    w.records(Src::Main, 0..10);
    let mut jobs = w.jobs(10).await;
    finish(&mut jobs, &[0, 1, 2, 4, 6]);
    until("the watermark 3 is stored", || {
        w.io.stores(&w.main, 0).last().map(|s| s.0) == Some(3)
    })
    .await;
    let (_, metadata) = w.io.stores(&w.main, 0).pop().expect("stored");
    assert_eq!(named_done(3, &metadata), vec![4, 6]);

    w.io.crash_next_store();
    finish(&mut jobs, &[3]);
    until("main p is sought back to its watermark", || {
        w.io.calls().contains(&IoCall::Seek(w.main.clone(), 0, 3))
    })
    .await;
    // The crashed incarnation's jobs are gone with it.
    drop(jobs);
    // Polled before the seek: above the fence, dropped. Then the re-read.
    w.records(Src::Main, [10]);
    w.records(Src::Main, 3..10);
    // Held (in flight) while the test looks for more.
    let again = w.jobs(5).await;
    assert_eq!(
        again.keys().copied().collect::<Vec<_>>(),
        vec![3, 5, 7, 8, 9]
    );
    assert_eq!(w.more_jobs().await, Vec::<i64>::new(), "4 and 6 were done");
}

/// Lag at idle behind transaction markers. DLQ p holds only an aborted
/// record and its marker (offsets 0 and 1, end 2): the consumer's position
/// passed both and nothing was handed over, so nothing there is unread and
/// main p is read. Main p then idles at 3 behind a commit marker (end 4):
/// two lag checks in a row see it, a probe finds nothing to deliver, and
/// the position 4 is stored.
#[tokio::test]
async fn lag_at_idle_behind_transaction_markers_is_no_lag() {
    let mut w = World::new(|b, main, dlq| {
        b.set_log(dlq, 0, 0, 2);
        b.set_log(main, 0, 0, 4);
        b.clean.store(true, Ordering::SeqCst);
    })
    .await;
    w.io.set_position(&w.dlq, 0, 2);
    w.assign().await;

    w.records(Src::Main, 0..3);
    let mut jobs = w.jobs(3).await;
    finish(&mut jobs, &[0, 1, 2]);
    until("the watermark 3 is stored", || {
        w.io.stores(&w.main, 0).last().map(|s| s.0) == Some(3)
    })
    .await;
    let end = tokio::time::Instant::now() + WITHIN;
    while w.broker.probes().is_empty() {
        assert!(tokio::time::Instant::now() < end, "no probe of main p");
        w.send(ConsumerMsg::LagTick);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(w.broker.probes()[0], (w.main.clone(), 0, 3, 4));
    until("the position moves past the marker to 4", || {
        w.io.stores(&w.main, 0).last().map(|s| s.0) == Some(4)
    })
    .await;
    assert_eq!(w.io.reading(&w.main, 0), Some(true));
}

/// The health verdict reaches the partition actor on its watch channel,
/// straight from `ApiHealth` (no message through the consumer): the API
/// declared unavailable pauses main p.
#[tokio::test]
async fn the_verdict_reaches_the_partition_on_its_watch_channel() {
    let w = World::new(|_, _, _| {}).await;
    w.assign().await;
    let down = crate::api_health::HealthVerdict {
        api_unavailable: true,
        breaker_open: true,
        marker: false,
        redis_ok: true,
    };
    assert!(w
        .pipeline
        .health(crate::core::destination::DestinationId::DEFAULT)
        .publish(down));
    until("main p is paused while the API is unavailable", || {
        w.io.reading(&w.main, 0) == Some(false)
    })
    .await;
}

/// An envelope in DLQ p at `offset`, due in ten minutes.
fn envelope(offset: i64) -> Record {
    let now = crate::runtime::now_ms();
    let mut env = crate::core::envelope::tests::sample();
    env.event_id = Some(format!("d-{offset}"));
    env.key = Some(format!("d-{offset}").into_bytes());
    env.payload = br#"{"specversion":"1.0","id":"d","source":"s","type":"t"}"#.to_vec();
    env.origin.partition = 0;
    env.origin.offset = 1_000 + offset;
    env.first_dlq_at_ms = now;
    env.not_before_ms = now + 600_000;
    Record {
        partition: 0,
        offset,
        src: Src::Dlq,
        key: env.key.clone(),
        payload: Some(bytes::Bytes::from(env.to_bytes())),
        timestamp_ms: None,
        headers: None,
    }
}

/// I41 through the actors: envelopes read back from DLQ p and not due hold
/// at most half of the in-flight budget. Past it the partition actor seeks
/// DLQ p back to the first envelope it handed back and pauses it; the
/// envelopes polled before that seek are dropped (out of the fetch budget);
/// main p's records are begun and dispatched meanwhile. (Seen failing with
/// the half not enforced: no seek back, the last envelopes kept waiting.)
#[tokio::test]
async fn dlq_records_past_their_half_are_sought_back_and_main_p_flows() {
    let mut config = Config::default();
    config.pipeline.max_in_flight_bytes = 40_000;
    let mut w = World::with_config(config, |_, _, _| {}).await;
    // DLQ p empty at the assignment: what it holds later, this partition
    // wrote (a new owner reads an earlier owner's DLQ p to its end first).
    w.assign().await;
    w.broker.set_log(&w.dlq, 0, 0, 25);
    let dlq: Vec<Record> = (0..20).map(envelope).collect();
    let each = dlq[0].size();
    let half: usize = 40_000 / 2;
    let begun = half.div_ceil(each) as i64;
    w.pipeline
        .buffered
        .add(dlq.len(), dlq.iter().map(Record::size).sum());
    w.send(ConsumerMsg::Records(dlq));
    until(
        "DLQ p is sought back to the first envelope handed back",
        || {
            w.io.calls()
                .contains(&IoCall::Seek(w.dlq.clone(), 0, begun))
        },
    )
    .await;
    assert_eq!(w.io.reading(&w.dlq, 0), Some(false), "and paused");
    // Polled before the seek: dropped, nothing of the fetch budget kept.
    let late: Vec<Record> = (20..25).map(envelope).collect();
    w.pipeline
        .buffered
        .add(late.len(), late.iter().map(Record::size).sum());
    w.send(ConsumerMsg::Records(late));
    until("the fetch budget is empty", || {
        w.pipeline.buffered.get().0 == 0
    })
    .await;
    // Main p is read, its records begin.
    until("main p is read", || w.io.reading(&w.main, 0) == Some(true)).await;
    w.records(Src::Main, 0..5);
    let jobs = w.jobs(5).await;
    assert_eq!(
        jobs.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(w.more_jobs().await.is_empty(), "no envelope is due");
    let seeks =
        w.io.calls()
            .into_iter()
            .filter(|c| matches!(c, IoCall::Seek(..)))
            .count();
    assert_eq!(seeks, 1, "one seek back");
}

/// The partition actor decodes each record before its machine takes it in:
/// a record that is not a CloudEvent is dispatched as a parking job with
/// its reason, between two events dispatched for delivery, and the three
/// are committed alike once done (the watermark passes all of them).
#[tokio::test]
async fn records_are_decoded_by_the_actor_and_bad_input_goes_to_the_parking_lot() {
    use crate::core::classify::FailureReason;
    use crate::delivery::Work;
    let mut w = World::new(|_, _, _| {}).await;
    w.assign().await;
    let mut bad = record(Src::Main, 1);
    bad.payload = Some(bytes::Bytes::from_static(b"not json {"));
    let records = vec![record(Src::Main, 0), bad, record(Src::Main, 2)];
    let bytes = records.iter().map(Record::size).sum();
    w.pipeline.buffered.add(records.len(), bytes);
    w.send(ConsumerMsg::Records(records));
    let mut jobs = w.jobs(2).await;
    for (offset, job) in &jobs {
        match &job.item.work {
            Work::Deliver(ev) => assert_eq!(ev.id, format!("e-{offset}")),
            work => panic!("offset {offset}: {work:?}"),
        }
    }
    assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), [0, 2]);
    // The bad record: a parking-lot write, for the pool actor.
    let parked = tokio::time::timeout(WITHIN, w.pooled.recv())
        .await
        .expect("a job for the pool actor")
        .expect("its channel is open");
    assert_eq!(parked.token.offset(), 1);
    match &parked.item.work {
        Work::Park { reason, .. } => {
            assert!(matches!(reason, FailureReason::Input(_)), "{reason:?}")
        }
        work => panic!("offset 1: {work:?}"),
    }
    jobs.insert(1, parked);
    finish(&mut jobs, &[0, 1, 2]);
    until("the watermark 3 is stored", || {
        w.io.stores(&w.main, 0).last().map(|s| s.0) == Some(3)
    })
    .await;
    assert_eq!(
        w.pipeline.buffered.get().0,
        0,
        "the records left the fetch budget"
    );
}
