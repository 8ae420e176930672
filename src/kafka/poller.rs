//! The poll thread: librdkafka's polling stays off the async actors' threads
//! (rebalance callbacks run inside `poll` and block). It forwards one ordered stream
//! of batches and rebalance events into the consumer actor, and it never stops
//! polling while Courier runs, even with every partition paused, so the group
//! membership survives.
//!
//! # Invariant I25: poll-thread panic
//!
//! *Enforced in* `src/kafka/poller.rs`, `src/runtime.rs` (`fatal_on_panic`) (no idle zombie
//! after a panic). The poll loop runs under `catch_unwind`: a panic there is reported like a
//! fatal client error (`PollSink::client_fatal`), the process drains and exits 70 (with its
//! final commit: the client itself is fine). Tasks nothing watches (the status sampler, the
//! budget gauges, the metrics listener, the delivery dispatcher, each DLQ write) run under
//! `runtime::fatal_on_panic`: a panic declares the pipeline fatal. Not wrapped, because
//! something already handles their panic: supervised actors (ractor catches it, the
//! supervisor restarts within `supervision.max_restarts`), delivery tasks (the dropped
//! completion token makes the partition redo the work, then park it `internal_error`), the
//! lag check (answers even if its lookup panicked). A panic inside a librdkafka callback
//! (rebalance, commit) aborts the process (Rust does not unwind out of `extern "C"`):
//! non-zero, without the drain.
//!
//! *Tested by:* `tests/pipeline.rs::a_panic_in_the_poll_thread_ends_the_process` (hook
//! `testing.poll_panic_on_key`: exit 70, a restart delivers the rest, lost 0; seen failing
//! before: still running after 60 s); `runtime::tests::a_panicking_task_is_fatal`.
//!
//! # Invariant I26: fatal client error
//!
//! *Enforced in* `src/kafka/poller.rs`, `src/actors/consumer/mod.rs` (no idle zombie). A fatal
//! Kafka client error (a fenced static member: another process with its instance id, or its
//! own commits arriving after a client-side session timeout) ends the poll thread and
//! declares the pipeline fatal (`PollSink::client_fatal`); `courier run` drains what is on
//! the wire and exits 70 without the refused final commit and LeaveGroup, so the orchestrator
//! restarts it rather than a process that looks healthy and never fetches again. So does a
//! consumer stuck outside its group with no fatal error (`core::group_watch`: librdkafka's
//! join state not `steady` for longer than any rebalance takes, at least 10 minutes, while a
//! broker answers; read from its statistics in `kafka::context`).
//!
//! *Tested by:* `tests/crash_cost.rs::a_fenced_member_exits_for_a_restart` (a twin joins with
//! the same id; seen failing before: still running 60 s after the fence); the group watch by
//! `core::group_watch`'s unit tests and, against the real broker, that librdkafka's own
//! statistics of a member read as settled (`kafka::context`'s tests). A consumer stuck that
//! way was seen once (docs/DRILLS.md) and not reproduced: its exit is not tested end to end.

use super::{KafkaConsumer, Record};
use crate::core::partition::Src;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MAX_BATCH: usize = 512;
/// The longest the poll thread waits for room before it polls again (group
/// callbacks and heartbeats are served inside `poll`).
const MAX_WAIT: Duration = Duration::from_secs(1);
/// The longest one wait for room lasts before the stop flag is read again.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The fetch budget's use: records handed from the poll thread to the actors
/// and not yet taken in by a partition actor (begun, handed back or dropped),
/// and their bytes ([`Record::size`]). The poll thread fetches nothing more
/// while either is at its limit ([`Buffered::wait_for_room`]); one record
/// larger than the whole byte budget is still fetched when nothing else is
/// buffered.
#[derive(Debug, Default)]
pub struct Buffered {
    records: AtomicI64,
    bytes: AtomicI64,
    /// The poll thread waits for room (set before it checks, so a decrease
    /// after its check always finds it set and wakes it) ...
    waiting: AtomicBool,
    /// ... until records and bytes are both below these ([`low_water`]).
    wake_below: (AtomicI64, AtomicI64),
    room: Mutex<()>,
    freed: Condvar,
}

/// Where a full buffer wakes the poll thread: a quarter below `limit` (at
/// least one below it), so one wake-up makes room for many records, not for
/// one record at a time.
fn low_water(limit: usize) -> i64 {
    let limit = limit.min(i64::MAX as usize) as i64;
    limit - (limit / 4).max(1)
}

impl Buffered {
    pub(crate) fn add(&self, records: usize, bytes: usize) {
        self.records.fetch_add(records as i64, Ordering::SeqCst);
        self.bytes.fetch_add(bytes as i64, Ordering::SeqCst);
    }

    pub(crate) fn sub(&self, records: usize, bytes: usize) {
        self.records.fetch_sub(records as i64, Ordering::SeqCst);
        self.bytes.fetch_sub(bytes as i64, Ordering::SeqCst);
        self.wake();
    }

    /// Nothing buffered (a new consumer: what the previous one handed over died
    /// with it and its partition actors).
    pub(crate) fn reset(&self) {
        self.records.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
        self.wake();
    }

    /// Wakes the poll thread if it waits and the buffer went below its low
    /// water marks (a lock only then).
    pub(crate) fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) && self.below_low_water() {
            let _room = self.room.lock().unwrap_or_else(|e| e.into_inner());
            self.freed.notify_all();
        }
    }

    fn below_low_water(&self) -> bool {
        let (records, bytes) = self.get();
        records < self.wake_below.0.load(Ordering::SeqCst)
            && bytes < self.wake_below.1.load(Ordering::SeqCst)
    }

    /// Waits until the buffer is below the low water marks of both limits,
    /// as [`Buffered::wake`] says, or for at most `timeout` (the poll thread
    /// must call `poll` again now and then, for the group's callbacks).
    /// `true`: woken to room; `false`: the wait reached `timeout` (the caller
    /// looks again).
    fn wait_for_room(&self, max_records: usize, max_bytes: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut room = self.room.lock().unwrap_or_else(|e| e.into_inner());
        self.wake_below
            .0
            .store(low_water(max_records), Ordering::SeqCst);
        self.wake_below
            .1
            .store(low_water(max_bytes), Ordering::SeqCst);
        self.waiting.store(true, Ordering::SeqCst);
        let woken = loop {
            if self.below_low_water() {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let (guard, waited) = match self.freed.wait_timeout(room, left) {
                Ok(r) => r,
                Err(e) => e.into_inner(),
            };
            room = guard;
            if waited.timed_out() {
                break false;
            }
        };
        self.waiting.store(false, Ordering::SeqCst);
        woken
    }

    /// Records and bytes buffered now.
    pub(crate) fn get(&self) -> (i64, i64) {
        (
            self.records.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
        )
    }

    /// Gives back everything counted here (a partition actor's share, when it
    /// stops or crashes) from `total` as well.
    pub(crate) fn release_into(&self, total: &Buffered) {
        let records = self.records.swap(0, Ordering::SeqCst);
        let bytes = self.bytes.swap(0, Ordering::SeqCst);
        total.records.fetch_sub(records, Ordering::SeqCst);
        total.bytes.fetch_sub(bytes, Ordering::SeqCst);
        total.wake();
    }

    fn full(&self, max_records: usize, max_bytes: usize) -> bool {
        let (records, bytes) = self.get();
        records >= max_records as i64 || bytes >= max_bytes as i64
    }
}

pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Poller {
    /// Polls until stopped, holding at most `max_records` records and
    /// `max_bytes` bytes that the actors have not taken in.
    pub(crate) fn start(
        consumer: Arc<KafkaConsumer>,
        max_records: usize,
        max_bytes: usize,
    ) -> std::io::Result<Poller> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("courier-poll".into())
            .spawn(move || {
                let ctx = consumer.context().clone();
                // A panic here (a bug, or a library's on hostile input) would
                // end the thread silently: nothing fetches again while the
                // process looks healthy. It is reported as fatal instead, like
                // a fatal client error: the process drains what it holds and
                // exits non-zero, and its orchestrator starts it afresh.
                let run = std::panic::AssertUnwindSafe(|| {
                    poll_loop(consumer, stop2, max_records, max_bytes)
                });
                if let Err(panic) = std::panic::catch_unwind(run) {
                    let what = panic_message(&*panic);
                    ctx.flush();
                    ctx.actor
                        .client_fatal(format!("the poll thread panicked: {what}"));
                }
            })?;
        Ok(Poller {
            stop,
            handle: Some(handle),
        })
    }

    /// Asks the thread to stop and waits for it (blocking: call off the runtime).
    pub(crate) fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn poll_loop(
    consumer: Arc<KafkaConsumer>,
    stop: Arc<AtomicBool>,
    max_records: usize,
    max_bytes: usize,
) {
    let ctx = consumer.context().clone();
    let dlq_topic = ctx.dlq_topic.clone();
    let mut waited = Duration::ZERO;
    let mut refused_at: Option<std::time::Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        // Backpressure: while the actors have not taken in what was handed to them,
        // fetch nothing more, until they take some in (`Buffered::wake`). They
        // take records in without waiting for deliveries (those are bounded by
        // the per-partition limits), so this wait is short; it is capped anyway
        // so rebalance callbacks and group heartbeats keep being served by
        // `poll`, and a stop is seen within it.
        if ctx.buffered.full(max_records, max_bytes) && waited < MAX_WAIT {
            if !ctx.flush() {
                return;
            }
            let since = Instant::now();
            let cap = (MAX_WAIT - waited).min(STOP_CHECK);
            ctx.buffered.wait_for_room(max_records, max_bytes, cap);
            waited += since.elapsed();
            continue;
        }
        waited = Duration::ZERO;
        // Block briefly only when there is nothing to hand over.
        let timeout = if ctx.has_pending() {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        match consumer.poll(timeout) {
            Some(Ok(m)) => {
                let headers = super::record_headers(&m);
                let record = Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    src: if m.topic() == dlq_topic {
                        Src::Dlq
                    } else {
                        Src::Main
                    },
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(bytes::Bytes::copy_from_slice),
                    timestamp_ms: m.timestamp().to_millis(),
                    headers,
                };
                panic_hook(&record);
                let n = ctx.push(record);
                if n >= MAX_BATCH {
                    handover_hook(&ctx);
                    if !ctx.flush() {
                        return;
                    }
                }
            }
            Some(Err(e)) => {
                // librdkafka raises a fatal error as a poll error too. The
                // consumer is dead then (it neither fetches nor commits again,
                // and owns nothing the group knows of): polling on would leave
                // a process that looks healthy and does nothing. Reported, so
                // the process ends and its orchestrator starts it afresh.
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    ctx.flush();
                    ctx.actor.client_fatal(format!(
                        "the Kafka consumer failed fatally ({code:?}): {reason}"
                    ));
                    return;
                }
                if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::BadCompression)
                {
                    // Retried at every fetch: one line per 30 s.
                    if refused_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(30)) {
                        refused_at = Some(std::time::Instant::now());
                        tracing::error!(error = %e, "a fetched batch does not decompress within receive.message.max.bytes (pipeline.max_buffered_bytes, or [kafka.properties]), or is corrupt: its partition does not move until the limit is raised above the batch's size; the \"kafka client error\" line names its offset");
                    }
                } else {
                    tracing::warn!(error = %e, "consumer poll error");
                }
                if !ctx.flush() {
                    return;
                }
            }
            None => {
                handover_hook(&ctx);
                if !ctx.flush() {
                    return;
                }
            }
        }
    }
    ctx.flush();
}

/// What a caught panic says (its payload is a `&str` or a `String` when raised
/// by `panic!`).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// Test fault hook (`testing.poll_panic_on_key`): the poll thread panics (once
/// per process) on reading a record with this key. Set at start from the
/// config; only in a build with the cargo feature `test-hooks`.
#[cfg(feature = "test-hooks")]
pub(crate) static PANIC_ON_KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

#[cfg(feature = "test-hooks")]
fn panic_hook(r: &Record) {
    static FIRED: AtomicBool = AtomicBool::new(false);
    if let (Some(want), Some(key)) = (PANIC_ON_KEY.get(), r.key.as_deref()) {
        if want.as_slice() == key && !FIRED.swap(true, Ordering::SeqCst) {
            panic!(
                "test fault hook: the poll thread panics on the record at offset {}",
                r.offset
            );
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn panic_hook(_r: &Record) {}

/// Test fault hook (`testing.dlq_handover_delay`): the poll thread waits this
/// long before it hands over polled records among which is one of the DLQ
/// topic. Set at start from the config; only in a build with the cargo
/// feature `test-hooks`.
#[cfg(feature = "test-hooks")]
pub(crate) static DLQ_HANDOVER_DELAY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

#[cfg(feature = "test-hooks")]
fn handover_hook(ctx: &super::CourierContext) {
    if let Some(delay) = DLQ_HANDOVER_DELAY.get() {
        let dlq = {
            let p = ctx.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.iter().any(|r| r.src == Src::Dlq)
        };
        if dlq {
            std::thread::sleep(*delay);
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn handover_hook(_ctx: &super::CourierContext) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `take_in` on another thread once `b`'s poll thread waits for room.
    fn once_waiting(b: &Arc<Buffered>, take_in: impl FnOnce(&Buffered) + Send + 'static) {
        let b = b.clone();
        std::thread::spawn(move || {
            while !b.waiting.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            take_in(&b);
        });
    }

    /// A full buffer's wait ends when the actors take records in, not at its
    /// cap: without the wake, this wait would end only after a minute, timed
    /// out (`false`).
    #[test]
    fn a_wait_for_room_ends_when_records_are_taken_in() {
        let b = Arc::new(Buffered::default());
        b.add(10, 1_000);
        // Below the limit (10) but not below its low water mark (8): no wake.
        once_waiting(&b, |b| {
            b.sub(1, 100);
            b.sub(2, 200);
        });
        assert!(b.wait_for_room(10, 1_000_000, Duration::from_secs(60)));
        assert_eq!(b.get(), (7, 700));
        assert!(!b.waiting.load(Ordering::SeqCst));
    }

    /// A wake-up makes room for many records: the low water mark is a quarter
    /// below the limit, at least one.
    #[test]
    fn the_low_water_mark_is_a_quarter_below_the_limit() {
        assert_eq!(low_water(8_192), 6_144);
        assert_eq!(low_water(3), 2);
        assert_eq!(low_water(1), 0);
        assert_eq!(low_water(usize::MAX), i64::MAX - i64::MAX / 4);
    }

    /// The same when a stopped partition actor gives its share back.
    #[test]
    fn a_partitions_share_given_back_ends_the_wait() {
        let total = Arc::new(Buffered::default());
        let share = Arc::new(Buffered::default());
        total.add(8, 800);
        share.add(3, 300);
        once_waiting(&total, move |t| share.release_into(t));
        assert!(total.wait_for_room(1_000, 800, Duration::from_secs(60)));
        assert_eq!(
            total.get(),
            (5, 500),
            "below the bytes' low water mark, 600"
        );
    }

    /// Nothing taken in: the wait ends at its cap, timed out, so the poll
    /// thread polls again (group callbacks) and reads its stop flag.
    #[test]
    fn a_wait_for_room_ends_at_its_cap_when_nothing_is_taken_in() {
        let b = Buffered::default();
        b.add(10, 1_000);
        assert!(!b.wait_for_room(10, 1_000_000, Duration::from_millis(20)));
        assert!(b.full(10, 1_000_000));
    }
}
