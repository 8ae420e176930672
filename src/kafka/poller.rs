//! The poll thread: librdkafka's polling stays off the async actors' threads
//! (rebalance callbacks run inside `poll` and block). It forwards one ordered stream
//! of batches and rebalance events into the consumer actor, and it never stops
//! polling while Courier runs, even with every partition paused, so the group
//! membership survives.

use super::{KafkaConsumer, Record};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const MAX_BATCH: usize = 512;

/// The fetch budget's use: records handed from the poll thread to the actors
/// and not yet taken in by a partition actor (begun, handed back or dropped),
/// and their bytes ([`Record::size`]). The poll thread fetches nothing more
/// while either is at its limit; one record larger than the whole byte budget
/// is still fetched when nothing else is buffered.
#[derive(Debug, Default)]
pub struct Buffered {
    records: AtomicI64,
    bytes: AtomicI64,
}

impl Buffered {
    pub fn add(&self, records: usize, bytes: usize) {
        self.records.fetch_add(records as i64, Ordering::SeqCst);
        self.bytes.fetch_add(bytes as i64, Ordering::SeqCst);
    }

    pub fn sub(&self, records: usize, bytes: usize) {
        self.records.fetch_sub(records as i64, Ordering::SeqCst);
        self.bytes.fetch_sub(bytes as i64, Ordering::SeqCst);
    }

    /// Nothing buffered (a new consumer: what the previous one handed over died
    /// with it and its partition actors).
    pub fn reset(&self) {
        self.records.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
    }

    /// Records and bytes buffered now.
    pub fn get(&self) -> (i64, i64) {
        (
            self.records.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
        )
    }

    /// Gives back everything counted here (a partition actor's share, when it
    /// stops or crashes) from `total` as well.
    pub fn release_into(&self, total: &Buffered) {
        let records = self.records.swap(0, Ordering::SeqCst);
        let bytes = self.bytes.swap(0, Ordering::SeqCst);
        total.records.fetch_sub(records, Ordering::SeqCst);
        total.bytes.fetch_sub(bytes, Ordering::SeqCst);
    }

    fn full(&self, max_records: usize, max_bytes: usize) -> bool {
        let (records, bytes) = self.get();
        records >= max_records as i64 || bytes >= max_bytes as i64
    }
}

pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Poller {
    /// Polls until stopped, holding at most `max_records` records and
    /// `max_bytes` bytes that the actors have not taken in.
    pub fn start(
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
    pub fn stop_and_join(&mut self) {
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
        // fetch nothing more. They take records in without waiting for deliveries
        // (those are bounded by the per-partition limits), so this wait is short;
        // it is capped anyway so rebalance callbacks and group heartbeats keep
        // being served by `poll`.
        if ctx.buffered.full(max_records, max_bytes) && waited < Duration::from_secs(1) {
            if !ctx.flush() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
            waited += Duration::from_millis(2);
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
                    dlq: m.topic() == dlq_topic,
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(bytes::Bytes::copy_from_slice),
                    timestamp_ms: m.timestamp().to_millis(),
                    headers,
                };
                panic_hook(&record);
                let n = ctx.push(record);
                if n >= MAX_BATCH && !ctx.flush() {
                    return;
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
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
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
pub static PANIC_ON_KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

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
