//! Issue 54 item 13: what the partition remembers of the keys that wait
//! behind their envelopes in the DLQ, measured in a running Courier (peak
//! RSS from `/proc`); and, with envelopes due in an hour and small budgets,
//! that main p is read to its end meanwhile (I41). Its own binary: it
//! writes ~500 MB through the broker (keys, and their envelopes), and the
//! tests of `destinations.rs` measure delivery rates.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::loadgen;
use courier_standins::sink::{Behaviour, SinkHandle};
use std::time::Duration;

/// Issue 54 item 13: while a destination's events wait behind their keys'
/// envelopes in the DLQ, the partition remembers each key followed. It kept a
/// copy of every key, uncapped and outside the byte budget: events with
/// distinct 16 KiB Kafka keys, each refused by the API on its own (a 503 item
/// in a 2xx batch answer: the breaker stays closed) and dead-lettered, made
/// it hold 16 KiB more per event. Now it keeps a 64-bit hash per key, capped
/// and charged. The running process's peak RSS (`VmHWM`) with 10,000 such
/// events is compared with 5,000 (what is in flight, bounded by the byte
/// budgets, is the same in both): the 5,000 more keys followed (78 MiB)
/// add less than half their size. The envelopes read back from the DLQ are
/// due in an hour, and the budgets are small (8 MiB in flight, 4 MiB
/// fetched: a few hundred of these records): DLQ records hold at most half
/// of the in-flight budget, those beyond it are handed back
/// (`core::partition::rewind`), and main p is read to its end meanwhile
/// (before that mend, held envelopes filled both budgets and main p stopped
/// being read until they were due: this test stalled with the main
/// watermarks at a third). Every event sits in the DLQ with its reason:
/// nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_followed_in_the_dlq_are_not_copied() {
    const KEY_BYTES: usize = 16 << 10;
    let s = services();
    let fewer = dead_letter_every_event(&s, "dest-keys-5k", 5_000, KEY_BYTES).await;
    let more = dead_letter_every_event(&s, "dest-keys-10k", 10_000, KEY_BYTES).await;
    let keys_added = (5_000 * KEY_BYTES) as u64;
    println!(
        "[follow memory] peak RSS {} MiB with 5,000 events, {} MiB with 10,000 \
         (16 KiB keys, {} MiB more keys followed)",
        fewer >> 20,
        more >> 20,
        keys_added >> 20
    );
    assert!(
        more.saturating_sub(fewer) < keys_added / 2,
        "peak RSS {} MiB against {} MiB: a copy of every key followed ({} MiB more)?",
        more >> 20,
        fewer >> 20,
        keys_added >> 20
    );
}

/// Produces `events` events with distinct keys of `key_bytes` bytes, runs
/// Courier against an API that refuses each one as a 503 item of a 2xx batch
/// answer until the main topic is committed to its end, audits (every event
/// in the DLQ, none lost) and returns the process's peak RSS.
async fn dead_letter_every_event(s: &Services, name: &str, events: usize, key_bytes: usize) -> u64 {
    use rdkafka::producer::FutureRecord;
    let n = Names::new(name, 4);
    n.create(s, true).await;
    let api = SinkHandle::start(
        "127.0.0.1:0".parse().unwrap(),
        Behaviour {
            fail_rate: 1.0,
            fail_status: 503,
            ..Behaviour::default()
        },
    )
    .await
    .expect("sink");
    let producer = loadgen::producer(&s.brokers).expect("producer");
    let mut produced = Produced::default();
    let mut sends = Vec::with_capacity(250);
    for i in 0..events {
        let id = format!("{name}-{i}");
        let key = format!("{i:08}-{}", "k".repeat(key_bytes - 9));
        let payload = loadgen::event_json(&id, "b.thing", &format!("k{i}"), i, 0);
        produced.ids.push(id);
        let rec = FutureRecord::to(&n.topic).key(&key).payload(&payload);
        sends.push(producer.send_result(rec).expect("queued"));
        if sends.len() == 250 || i == events - 1 {
            for d in sends.drain(..) {
                let d = d.await.expect("delivered").map_err(|(e, _)| e);
                let d = d.expect("produced");
                produced.offsets.push((d.partition, d.offset));
            }
        }
    }
    // Envelopes due in an hour: the DLQ is not drained meanwhile (with one
    // destination it would go first, at `drain_rate_per_sec`).
    let toml = base_toml(&n, &format!("http://{}/batch", api.addr())).replace(
        "[pipeline]\n",
        "[api.batch]\nmax_events = 50\nlinger = \"20ms\"\nresults = \"/items\"\nresult_id = \"/id\"\n\n\
         [pipeline]\nmax_in_flight_bytes = 8388608\nmax_buffered_bytes = 4194304\n",
    );
    let mut c = Courier::start(name, s, &toml);
    n.wait_committed_to_end(s, Duration::from_secs(600)).await;
    let peak = c.peak_rss().expect("the process runs");
    c.terminate(Duration::from_secs(30)).await;
    let rep = n.audit(s, &produced, &api);
    assert_no_loss(name, &rep);
    assert_eq!(rep.in_dlq, events, "every event in the DLQ: {rep}");
    api.shutdown();
    peak
}
