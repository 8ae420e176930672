//! The poll thread: librdkafka's polling stays off the async actors' threads
//! (rebalance callbacks run inside `poll` and block). It forwards one ordered stream
//! of batches and rebalance events into the consumer actor, and it never stops
//! polling while Courier runs, even with every partition paused, so the group
//! membership survives.

use super::{KafkaConsumer, Record};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const MAX_BATCH: usize = 512;

pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Poller {
    pub fn start(consumer: Arc<KafkaConsumer>, max_buffered: usize) -> std::io::Result<Poller> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("courier-poll".into())
            .spawn(move || poll_loop(consumer, stop2, max_buffered as i64))?;
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

fn poll_loop(consumer: Arc<KafkaConsumer>, stop: Arc<AtomicBool>, max_buffered: i64) {
    let ctx = consumer.context().clone();
    let dlq_topic = ctx.dlq_topic.clone();
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::SeqCst) {
        // Backpressure: while the actors have not taken in what was handed to them,
        // fetch nothing more. They take records in without waiting for deliveries
        // (those are bounded by the per-partition limits), so this wait is short;
        // it is capped anyway so rebalance callbacks and group heartbeats keep
        // being served by `poll`.
        if ctx.buffered.load(Ordering::SeqCst) >= max_buffered && waited < Duration::from_secs(1) {
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
                let n = ctx.push(Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    dlq: m.topic() == dlq_topic,
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(bytes::Bytes::copy_from_slice),
                    timestamp_ms: m.timestamp().to_millis(),
                });
                if n >= MAX_BATCH && !ctx.flush() {
                    return;
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "consumer poll error");
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
