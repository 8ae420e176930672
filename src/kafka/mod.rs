//! Kafka plumbing: client configuration, the consumer context (rebalance
//! callbacks) and the poll thread. No pipeline logic lives here.
//!
//! # Invariant I4: auto-store off
//!
//! *Enforced in* `src/kafka/mod.rs` (consumer config). `enable.auto.offset.store=false`:
//! librdkafka's auto-commit only commits what Courier stored. Courier refuses
//! `kafka.properties` that override this.
//!
//! *Tested by:* `config` unit tests; every e2e test compares committed offsets with end
//! offsets.
//!
//! # Invariant I6: rebalance order
//!
//! *Enforced in* `src/kafka/mod.rs` (`CourierContext`). Polled-but-unforwarded records are
//! handed to the actor *before* a rebalance is reported, so a record of the old assignment
//! never reaches a partition actor of the new one (its tracker would otherwise start past
//! unread offsets).
//!
//! *Tested by:* `tests/pipeline.rs::instance_joins_and_leaves_mid_run`.
//!
//! # Invariant I21: co-location
//!
//! *Enforced in* `src/kafka/mod.rs`, `src/config/kafka.rs` (co-location). Main p and DLQ p
//! are read by the same member: the classic protocol with the eager `range` assignor over two
//! topics of equal partition counts (checked at start and at every assignment: partitions
//! added to either topic while running end the process, exit 70, and a restart refuses to
//! start until the counts match — see I31, `actors::consumer`) assigns equal indices of
//! co-subscribed topics together. `partition.assignment.strategy`, `group.protocol`,
//! `group.remote.assignor` and `group.instance.id` in `[kafka.properties]` are refused
//! (`check-config` names the key); an assignment naming a partition already owned keeps its
//! actor (an incremental assignor would otherwise replace it, and the new actor's watermark
//! would pass the old one's unfinished events). Static membership (`kafka.instance_id`) keeps
//! the protocol and the assignor: a rejoining static member gets its previous assignment
//! back.
//!
//! *Tested by:* `config::kafka` unit tests (each refused key); `tests/crash_cost.rs` (static
//! members: three instances own two partition pairs each).
//!
//! # Invariant I24: hostile headers
//!
//! *Enforced in* `src/kafka/mod.rs` (`record_headers`), `src/core/input.rs` (`HeaderName`),
//! `src/core/envelope.rs` (`OriginHeader`) (hostile headers). Header names and values are
//! read as bytes through librdkafka's own accessor (rdkafka's `Headers` API unwraps
//! `to_str()` and panicked the poll thread on a name that is not UTF-8). A name that is not
//! UTF-8 is compared as bytes, so it never equals a configured name: it is never forwarded to
//! the API (`api.forward_headers`) nor read as a CloudEvents attribute; the record is
//! delivered. It travels in the envelope as `name` (made readable, U+FFFD) plus `name_bytes`
//! (base64, exact), and replay writes the exact bytes back. Counted:
//! `courier_header_names_not_utf8_total`. A record is charged 64 bytes per header besides the
//! bytes (`HEADER_OVERHEAD`: the slot and two minimal jemalloc blocks).
//!
//! *Tested by:* `tests/input.rs::a_header_name_that_is_not_utf8_stops_nothing` (kcat `-H
//! $'\xff=x'` among 1,000 events, through the DLQ; seen failing before: the poll thread
//! panicked, commits never reached the end); `core::envelope` proptest (any name and value
//! bytes round-trip); `kafka::tests` (bytes written and read back; 350,000 one-byte headers
//! charged ≥ the 22 MB held, 0.7 MB before).
//!
//! # Group membership: static members, the classic protocol, KIP-848
//!
//! A killed instance used to leave its partitions unread until the broker's session timeout
//! (45 s) expired. With `kafka.instance_id` (static membership, KIP-345; by default the pod
//! name, then the host name) the restarted process rejoins under the same id and the broker
//! hands it its previous assignment at once, without a rebalance of the other members:
//! measured 0.4–1.2 s from SIGKILL to the restarted instance's first delivery (3 instances,
//! 6 partitions, 20 ms API; docs/DRILLS.md).
//!
//! Static members do not send LeaveGroup when they close (KIP-345; librdkafka skips it on
//! termination): a SIGTERM'd or scaled-down member's partitions would wait for the session
//! timeout. So on a graceful shutdown Courier unsubscribes after its final commit — which does
//! send LeaveGroup for a static member — and waits (≤ 5 s) until librdkafka has sent it
//! (its member id is cleared), then closes: the other members take the partitions at once.
//! `tests/crash_cost.rs::a_sigtermed_static_member_hands_its_partitions_over_at_once`: with a
//! 60 s session timeout the remaining member owns every partition within seconds of the
//! SIGTERM (with `leave_on_shutdown = false` it still did not after 25 s).
//! `kafka.leave_on_shutdown = false` keeps the member for a StatefulSet whose pods come back
//! under the same name within the session timeout. Two live processes with the same id
//! fence each other (the older gets a fatal "fenced" error, logged with the cause); the
//! test harness removes `POD_NAME`/`HOSTNAME` from its children for that reason. A member
//! can also fence itself: after a client-side session timeout (the coordinator answered
//! nothing for `session_timeout`, seen once in CI), librdkafka 2.12 still sends the commits
//! queued before it without a member id, and the broker answers those with the same fatal
//! error (librdkafka PR #5585 fixes the auto-commit side; no rdkafka-sys release has it
//! yet). Either way the consumer never fetches again: the poll thread reports the fatal
//! error (`PollSink::client_fatal`), the pipeline is declared fatal and `courier run` exits
//! 70 after draining what is on the wire, with no final commit or LeaveGroup (both would be
//! refused). Before, the process polled a dead consumer and looked healthy.
//! `tests/crash_cost.rs::a_fenced_member_exits_for_a_restart` (a twin joins with the same id;
//! seen failing before the change: still running after 60 s).
//!
//! The consumer group protocol of KIP-848 (`group.protocol=consumer`, Kafka 4.x, librdkafka
//! ≥ 2.4) was **measured and is not used** (it stays refused in `[kafka.properties]`).
//! `scripts/kip848-takeover.py` runs the same two experiments with librdkafka (2.16, from
//! confluent-kafka's wheel) on each protocol against the test broker (Kafka 4.4): two members
//! read 12 partitions fed at ~200 records/s; member A is SIGKILLed and restarted 1 s later;
//! then a third member joins. "Longest unread" is the longest stretch any partition went
//! without a record being read (2026-12-01, two runs each):
//!
//! | protocol | member ids | crash: kill → A reads again | crash: longest unread | join: longest unread |
//! |---|---|---|---|---|
//! | classic, eager `range` (Courier's) | static | 1.18–1.21 s | 1.22–1.26 s | 1.41–1.42 s |
//! | KIP-848 (`consumer`) | static | never within 120 s: the restarted member is fenced with a fatal `UNRELEASED_INSTANCE_ID` until the broker expires the dead one | — | — |
//! | KIP-848 (`consumer`) | dynamic | 6.15–6.17 s | 46.8–46.9 s (the dead member's partitions wait out the 45 s session) | 3.98–4.26 s |
//!
//! So KIP-848 is worse on both counts here: a SIGKILLed static member cannot come back
//! under its id until its session expires (and librdkafka treats that as fatal), without
//! static ids the dead member's partitions stay unread for the session timeout, and moving
//! partitions to a new member takes several heartbeats (its incremental handover keeps the
//! partitions that do not move flowing, but the ones that move wait longer than the classic
//! protocol's whole stop-the-world rebalance). Besides, (a) its assignment is computed by the
//! broker, so the co-location of main p and DLQ p would no longer be something Courier
//! configures, and (b) the consumer actor assumes eager assignments (every `Assigned` follows
//! the revoke of everything). Classic with static membership it is.
//!
//! Each instance reports how long its consumer waited from subscribing to its first
//! assignment in `courier_takeover_seconds` (dashboard row "Connections and rebalances"):
//! about a second for a restarted static member, close to `session.timeout.ms` when a dead
//! member had to be expired first — the number to look at after a node failure.

pub mod admin;
pub mod client_log;
pub mod detached;
pub mod identity;
pub mod poller;
pub mod seams;

use crate::config::KafkaConfig;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The group consumer. Its teardown (close, destroy) runs on a thread of its
/// own, whoever drops the last handle ([`detached::Detached`]).
pub type KafkaConsumer = detached::Detached<BaseConsumer<CourierContext>>;

/// One message, owned, as it travels from the poll thread to a partition actor.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    /// From the DLQ topic (partition p of the DLQ pairs with partition p of the main topic).
    pub dlq: bool,
    pub key: Option<Vec<u8>>,
    pub payload: Option<bytes::Bytes>,
    pub timestamp_ms: Option<i64>,
    /// The record's headers, in order; `None` (nothing allocated) without any.
    pub headers: Option<Box<[crate::core::input::Header]>>,
}

/// What a record costs against the byte budgets besides its value, key and
/// headers: Courier's own state for it (the record, then the decoded event with
/// its strings, the held-events map and ordering lane entries, the delivery
/// queue entry, the completion token). Measured: with 512-byte events the heap
/// held ~2.5–3 KB per event begun (docs/BENCHMARKS.md, "Memory and partitions").
pub const RECORD_OVERHEAD: usize = 2048;

/// What each header costs besides its name and value bytes: its slot in the
/// record's header slice (`size_of::<Header>()`: 48 bytes, the name's box and
/// the value's `Bytes`) and the two heap blocks its name and value are copied
/// into (jemalloc's smallest size class is 8 bytes, so even a 1-byte name or
/// value takes 8; bytes up to the next class are charged as the 8). Derived
/// from the types and the allocator's size classes, not from a profile: a
/// record of 350,000 one-byte headers (~1 MB on the wire) holds ~22 MB, which
/// this charges (the names' and values' bytes on top of 64 per header).
pub const HEADER_OVERHEAD: usize = std::mem::size_of::<crate::core::input::Header>() + 2 * 8;

impl Record {
    /// The bytes it holds (value, key, header names and values, plus
    /// [`HEADER_OVERHEAD`] per header and [`RECORD_OVERHEAD`]): what it costs
    /// against the byte budgets.
    pub fn size(&self) -> usize {
        let headers = self.headers.as_deref().map_or(0, |h| {
            h.iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()) + HEADER_OVERHEAD)
                .sum()
        });
        self.payload.as_ref().map_or(0, |p| p.len())
            + self.key.as_ref().map_or(0, Vec::len)
            + headers
            + RECORD_OVERHEAD
    }
}

/// A consumed message's headers, read as bytes through librdkafka's own
/// accessor (rdkafka's `Headers` API turns each name into a `&str` with
/// `to_str().unwrap()`, which panics on a name that is not UTF-8); `None`
/// without any. A name is read up to its first NUL (librdkafka hands names over
/// as C strings).
pub fn record_headers(
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Option<Box<[crate::core::input::Header]>> {
    use rdkafka::bindings as rd;
    let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `m.ptr()` is the live message `m` borrows; librdkafka parses its
    // headers on first use and returns a pointer the message owns, valid while
    // `m` lives (this function's borrow).
    let err = unsafe { rd::rd_kafka_message_headers(m.ptr(), &mut hdrs) };
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
        return None;
    }
    // SAFETY: `hdrs` is the message's header list, alive while `m` is (above).
    unsafe { read_header_list(hdrs) }
}

/// The headers of a librdkafka header list, copied out as bytes.
///
/// # Safety
/// `hdrs` must be a valid header list that outlives the call.
unsafe fn read_header_list(
    hdrs: *const rdkafka::bindings::rd_kafka_headers_t,
) -> Option<Box<[crate::core::input::Header]>> {
    use rdkafka::bindings as rd;
    // SAFETY: `hdrs` is valid (the caller's promise).
    let n = unsafe { rd::rd_kafka_header_cnt(hdrs) };
    if n == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for idx in 0..n {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size: usize = 0;
        // SAFETY: `idx` < the count; librdkafka writes pointers into its own
        // header list (a NUL-terminated name, `size` value bytes or NULL).
        let err =
            unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: as above; both are copied before `m` can go away.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| {
            // SAFETY: `value` points at `size` bytes of the header list.
            bytes::Bytes::copy_from_slice(unsafe {
                std::slice::from_raw_parts(value.cast::<u8>(), size)
            })
        });
        out.push((crate::core::input::HeaderName::new(name), value));
    }
    Some(out.into_boxed_slice())
}

/// Adds a header whose name is given as bytes (rdkafka's `OwnedHeaders::insert`
/// takes a `&str`): replay writes a name that is not UTF-8 back exactly as the
/// origin record had it.
pub fn insert_header_bytes(
    headers: rdkafka::message::OwnedHeaders,
    name: &[u8],
    value: Option<&[u8]>,
) -> rdkafka::message::OwnedHeaders {
    use rdkafka::bindings as rd;
    // rdkafka's `BorrowedHeaders` is a zero-sized view whose address is the
    // native header list (`BorrowedHeaders::from_native_ptr` casts the pointer
    // to the reference): this is the list `headers` owns.
    let raw = std::ptr::from_ref(headers.as_borrowed())
        .cast_mut()
        .cast::<rd::rd_kafka_headers_t>();
    let (vptr, vlen) = match value {
        Some(v) => (v.as_ptr().cast::<std::ffi::c_void>(), v.len() as isize),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `raw` is the writable list `headers` owns (created by
    // `rd_kafka_headers_new`), alive for this call; librdkafka copies the name
    // (`name.len()` bytes) and the value into its own allocation. It fails only
    // on a read-only list, which an `OwnedHeaders` never is.
    let _ = unsafe {
        rd::rd_kafka_header_add(
            raw,
            name.as_ptr().cast::<std::ffi::c_char>(),
            name.len() as isize,
            vptr,
            vlen,
        )
    };
    headers
}

/// Consumer configuration. `enable.auto.offset.store=false` is what makes auto
/// commit safe: librdkafka only ever commits offsets Courier stored, and Courier
/// only stores watermarks (see `core::offsets`).
pub fn consumer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("group.id", &k.group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set(
            "auto.commit.interval.ms",
            crate::config::millis(k.auto_commit_interval).to_string(),
        )
        .set("auto.offset.reset", "earliest")
        // librdkafka's default, set so it shows: records of aborted transactions
        // are never delivered (`[kafka.properties]` may not change it).
        .set("isolation.level", "read_committed")
        .set(
            "session.timeout.ms",
            crate::config::millis(k.session_timeout).to_string(),
        )
        .set(
            "max.poll.interval.ms",
            crate::config::millis(k.max_poll_interval).to_string(),
        )
        // Main p and DLQ p must land on the same member: `range` assigns equal
        // indices of co-subscribed topics together.
        .set("partition.assignment.strategy", "range")
        .set("enable.partition.eof", "false")
        // Notice a DLQ topic created after start within seconds, not minutes.
        .set("topic.metadata.refresh.interval.ms", "10000")
        // A bounded prefetch (librdkafka's defaults are 64 MB and 100,000 messages
        // per partition): everything polled becomes pipeline memory, and the
        // pipeline's own limits, not the prefetch, should bound it. Under a backlog
        // this queue sits full (the poll thread stops while `pipeline.max_buffered`
        // records wait), so it is pure memory: 4 MB is ~0.2 s of work at 35,000
        // events/s and measured as fast as 16 MB (docs/BENCHMARKS.md). With a
        // bounded queue the fetcher hits its thresholds often, and librdkafka then
        // postpones the partition's next fetch by `fetch.queue.backoff.ms` (1 s by
        // default), which caps throughput at about one queue per second: keep that
        // short.
        .set("queued.max.messages.kbytes", "4096")
        .set("queued.min.messages", "2000")
        .set("fetch.queue.backoff.ms", "20")
        // The queue limits above apply to the consumer's one queue (librdkafka
        // 2.12 checks them against the forwarded queue, whatever the number of
        // partitions), but each fetch response may overshoot them: it carries up
        // to `max.partition.fetch.bytes` (1 MB) per partition, capped by
        // `fetch.max.bytes` (50 MB by default). Capped here, the prefetch stays
        // flat in the number of assigned partitions (docs/BENCHMARKS.md).
        .set("fetch.max.bytes", "8388608");
    // Static membership (`kafka.instance_id`): a restarted process with the same
    // id gets its partitions back at once (KIP-345).
    if let Some(id) = k.instance_id() {
        c.set("group.instance.id", id);
    }
    with_user_settings(c, k)
}

/// Caps what one fetched batch may decompress to, from the fetch budget
/// (`pipeline.max_buffered_bytes`), through `receive.message.max.bytes`.
/// librdkafka's fetch sizes (`fetch.max.bytes`, `max.partition.fetch.bytes`)
/// and `queued.max.messages.kbytes` are checked before a fetch and count a
/// batch as the broker sends it, compressed: a zstd batch of 10 KB can hold
/// 40 MB, decompressed whole into librdkafka's queue before any of Courier's
/// budgets sees a record. librdkafka decompresses zstd into a buffer of at
/// most `receive.message.max.bytes` and refuses a larger batch (a
/// `BadCompression` error, retried at each fetch: its partition waits, logged
/// as an ERROR, until the limit is raised). When the frame does not say its
/// size (librdkafka's own producer's do not) it starts at twice the compressed
/// size and triples the buffer per try, so a batch of B bytes may need a
/// buffer of up to 3B: the cap is three times the budget, so every batch
/// within the budget is read, none larger than three times it is, and one
/// batch never holds more than that (default 48 MB, librdkafka's own default
/// is 100 MB). Never below `fetch.max.bytes` + 512, which librdkafka requires.
/// lz4, gzip and snappy batches librdkafka decompresses whole, whatever their
/// size: no setting bounds those. A `receive.message.max.bytes` set in
/// `[kafka.properties]` wins.
pub fn cap_decompression(
    mut c: ClientConfig,
    k: &KafkaConfig,
    max_buffered_bytes: usize,
) -> ClientConfig {
    if k.properties.contains_key("receive.message.max.bytes") {
        return c;
    }
    let fetch = c
        .get("fetch.max.bytes")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(52_428_800);
    let cap = max_buffered_bytes
        .saturating_mul(3)
        .max(fetch.saturating_add(512))
        .min(i32::MAX as usize);
    c.set("receive.message.max.bytes", cap.to_string());
    c
}

/// `[kafka.properties]` last, so they override Courier's defaults, then the
/// secrets from the environment.
fn with_user_settings(mut c: ClientConfig, k: &KafkaConfig) -> ClientConfig {
    for (key, v) in &k.properties {
        c.set(key, v);
    }
    set_secrets(&mut c, k);
    c
}

/// The SASL password, the OIDC client secret and the TLS key's passphrase come
/// from the environment, never from the file (`KafkaConfig::secret_properties`).
/// librdkafka treats these properties as sensitive and never prints them. A
/// missing variable was reported at start (`Config::check_secrets`); here it
/// leaves the property unset, and librdkafka's own error says what is missing.
fn set_secrets(c: &mut ClientConfig, k: &KafkaConfig) {
    for (property, value) in k.secret_properties().unwrap_or_default() {
        c.set(property, value);
    }
}

/// What any client of the cluster needs and nothing role-specific: the brokers,
/// `[kafka.properties]` (TLS, SASL, …) and the SASL password from the environment,
/// as [`consumer_config`] passes them. The operator commands' admin clients and
/// readers start from it (`kafka::admin`).
pub fn client_base(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers);
    with_user_settings(c, k)
}

/// Idempotent producer (acks=all, safe retries) for DLQ and parking-lot writes.
pub fn producer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", k.producer_compression.as_str())
        // A write that cannot be acknowledged within this time is reported as
        // failed and retried by Courier; the event's offset waits meanwhile.
        .set(
            "message.timeout.ms",
            crate::config::millis(k.producer_timeout).to_string(),
        );
    for (key, v) in &k.properties {
        // Consumer-only properties would make the producer refuse to start.
        if !key.starts_with("fetch.")
            && !key.starts_with("max.poll")
            && !key.starts_with("session.")
        {
            c.set(key, v);
        }
    }
    // Never has the broker create a topic it writes to (set after
    // `[kafka.properties]`, so it cannot be turned on): a missing DLQ would be
    // created with the broker's default partition count, pairing main p with
    // the wrong DLQ partition or none. Missing topics are refused at start.
    c.set("allow.auto.create.topics", "false");
    set_secrets(&mut c, k);
    c
}

/// Where the poll thread hands records and rebalances, in order (the consumer
/// actor's mailbox: see `actors::consumer`). Each returns `false` when the
/// receiver is gone.
pub trait PollSink: Send + Sync {
    fn records(&self, records: Vec<Record>) -> bool;
    fn assigned(&self, partitions: Vec<i32>) -> bool;
    /// Called from inside the revoke callback, which then waits on `ack`.
    fn revoked(&self, partitions: Vec<i32>, ack: std::sync::mpsc::SyncSender<()>) -> bool;
    /// An auto-commit request was answered (for the commit count); called on
    /// the poll thread, so it must not block.
    fn auto_committed(&self) {}
    /// The client hit a fatal error (librdkafka: e.g. a static member fenced by
    /// another with its `group.instance.id`): this consumer never fetches or
    /// commits again; or the poll thread panicked (the client itself is fine:
    /// the shutdown still commits). Called once, from the poll thread, which
    /// then stops.
    fn client_fatal(&self, reason: String);
    /// librdkafka moved a partition's position after its fetch at `at` was
    /// out of range (`dlq`: of the DLQ topic). Called from librdkafka's
    /// threads, in no order with the records: must not block.
    fn offset_reset(&self, dlq: bool, partition: i32, at: i64);
}

/// Rebalance callbacks run on the poll thread, inside `poll()`. On revoke they hand
/// the partitions to the consumer actor and wait (bounded) for it to drain and store,
/// then commit synchronously: the last moment the partitions are ours.
pub struct CourierContext {
    pub topic: String,
    pub dlq_topic: String,
    pub actor: Box<dyn PollSink>,
    pub revoke_wait: Duration,
    /// Set during shutdown: the actor is busy closing and must not be waited for.
    pub closing: Arc<AtomicBool>,
    /// Records polled but not yet handed to the actor. They live here, not in the
    /// poll loop, so a rebalance callback can hand them over *before* it reports the
    /// rebalance: a record of the old assignment must never reach a partition actor
    /// of the new one (it would make its tracker start past unread offsets).
    pub pending: Mutex<Vec<Record>>,
    /// Records handed to the actors and not yet taken in by a partition actor,
    /// and their bytes (shared with the actors, see `Pipeline::buffered`). The
    /// poll thread stops fetching while it is over `pipeline.max_buffered` or
    /// `pipeline.max_buffered_bytes`: actor mailboxes are unbounded, so this is
    /// what keeps a large backlog out of memory.
    pub buffered: Arc<poller::Buffered>,
    /// When a failed auto-commit was last logged (ms since the epoch).
    commit_warned_ms: AtomicI64,
}

impl CourierContext {
    pub fn new(
        topic: String,
        dlq_topic: String,
        actor: impl PollSink + 'static,
        revoke_wait: Duration,
        closing: Arc<AtomicBool>,
        buffered: Arc<poller::Buffered>,
    ) -> Self {
        CourierContext {
            topic,
            dlq_topic,
            actor: Box::new(actor),
            revoke_wait,
            closing,
            pending: Mutex::new(Vec::new()),
            buffered,
            commit_warned_ms: AtomicI64::new(0),
        }
    }

    /// Hands pending records to the actor; `false` when the actor is gone.
    pub fn flush(&self) -> bool {
        let records = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.is_empty() {
                return true;
            }
            std::mem::take(&mut *p)
        };
        let bytes = records.iter().map(Record::size).sum();
        self.buffered.add(records.len(), bytes);
        self.actor.records(records)
    }

    /// Adds a polled record; returns the number pending.
    pub fn push(&self, r: Record) -> usize {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push(r);
        p.len()
    }

    pub fn has_pending(&self) -> bool {
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl ClientContext for CourierContext {
    /// librdkafka's log lines (called from its threads: must not block). An
    /// offset reset after a failed fetch is handed to the actor too: the
    /// records between the position and the new one were deleted unread.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        client_log::emit(level, fac, message);
        if let Some(r) = client_log::offset_reset(fac, message) {
            let dlq = r.topic == self.dlq_topic;
            if dlq || r.topic == self.topic {
                self.actor.offset_reset(dlq, r.partition, r.at);
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if reason.to_ascii_lowercase().contains("fenced") {
            tracing::error!(%error, reason, "fenced: another process joined the group with this kafka.instance_id (give each instance its own, e.g. the pod name), or this one's commits arrived after its session had timed out");
        } else {
            tracing::warn!(%error, reason, "kafka client error");
        }
    }
}

impl CourierContext {
    /// Commit failures repeat at every commit interval while their cause
    /// lasts (the coordinator away): one line per 10 s says so.
    fn commit_warning_due(&self) -> bool {
        let now = crate::clock::now_ms();
        let last = self.commit_warned_ms.load(Ordering::Relaxed);
        now - last >= 10_000
            && self
                .commit_warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Partition indices of the main topic and the DLQ (pairs share an index).
    fn partitions_of(&self, tpl: &rdkafka::TopicPartitionList) -> Vec<i32> {
        let mut v: Vec<i32> = tpl
            .elements()
            .iter()
            .filter(|e| e.topic() == self.topic || e.topic() == self.dlq_topic)
            .map(|e| e.partition())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl ConsumerContext for CourierContext {
    /// Reports auto-commits (librdkafka reports only those here: Courier's
    /// explicit commits are asynchronous without a callback and are counted
    /// where they are made); one with nothing to commit sends no request.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &rdkafka::TopicPartitionList,
    ) {
        match result {
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Ok(()) => {
                self.actor.auto_committed();
                // The request landed, but the broker may refuse partitions one
                // by one (metadata too large, a partition not the group's):
                // those positions did not move, and nothing else says so.
                let refused: Vec<(String, i32, String)> = offsets
                    .elements()
                    .iter()
                    .filter_map(|e| {
                        e.error()
                            .err()
                            .map(|err| (e.topic().to_string(), e.partition(), err.to_string()))
                    })
                    .collect();
                if let Some((topic, partition, error)) = refused.first() {
                    if self.commit_warning_due() {
                        tracing::warn!(
                            %topic,
                            partition,
                            %error,
                            refused = refused.len(),
                            "offset commit refused for some partitions: work finished since their last commit that landed is delivered again if they move before one does"
                        );
                    }
                }
            }
            Err(e) => {
                self.actor.auto_committed();
                if self.commit_warning_due() {
                    tracing::warn!(error = %e, "offset commit failed: work finished since the last commit that landed is delivered again if the partition moves before one does");
                }
            }
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.flush();
            let partitions = self.partitions_of(tpl);
            tracing::info!(?partitions, "partitions revoked: draining");
            if self.closing.load(Ordering::SeqCst) {
                stuck_close_hook();
            }
            if !self.closing.load(Ordering::SeqCst) && !partitions.is_empty() {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                if self.actor.revoked(partitions.clone(), tx)
                    && rx.recv_timeout(self.revoke_wait).is_err()
                {
                    tracing::warn!("revoke drain did not finish in time; in-flight events will be redelivered to the new owner");
                }
            }
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) => {}
                // Nothing new was stored since the last commit.
                Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, ?partitions, "commit on revoke failed: the new owners deliver again what finished since the last commit that landed")
                }
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                self.flush();
                let partitions = self.partitions_of(tpl);
                tracing::info!(?partitions, "partitions assigned");
                self.actor.assigned(partitions);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::error!(error = %e, "rebalance error"),
        }
    }
}

/// Test fault hook (environment `COURIER_TEST_HOOK_STUCK_CLOSE=1`, only in
/// a build with the cargo feature `test-hooks`): the revoke callback of the
/// consumer's close never returns, as a librdkafka close that never ends
/// (the shutdown of issue 42, finding 5, after a topic recreation). A
/// fault a real broker cannot be made to produce on demand.
#[cfg(feature = "test-hooks")]
fn stuck_close_hook() {
    if std::env::var_os("COURIER_TEST_HOOK_STUCK_CLOSE").is_some_and(|v| v == "1") {
        tracing::warn!("test fault hook: the consumer's close never ends");
        loop {
            std::thread::park();
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn stuck_close_hook() {}

/// Leaves the consumer group now, waiting (up to `within`, polling) until the
/// LeaveGroup request is on its way. Closing the consumer does not do it for a
/// static member (KIP-345: librdkafka sends no LeaveGroup on termination), but
/// unsubscribing does: then the other members take the partitions at once
/// instead of after `session.timeout.ms`. Call it after the final commit, with
/// no other thread polling. Returns whether the member left in time.
pub fn leave_group(c: &KafkaConsumer, within: Duration) -> bool {
    c.unsubscribe();
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        // Serves the revoke callback (which commits) and the group's events.
        let _ = c.poll(Duration::from_millis(50));
        if !has_member_id(c) {
            return true;
        }
    }
    false
}

/// Whether the consumer holds a group member id: librdkafka clears it as it
/// sends LeaveGroup (`rd_kafka_cgrp_leave`).
fn has_member_id(c: &KafkaConsumer) -> bool {
    let rk = c.client().native_ptr();
    // SAFETY: `rk` is the live handle `c` borrows; `rd_kafka_memberid` returns
    // a copy of the id (or NULL), which is freed here with `rd_kafka_mem_free`.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(rk);
        if id.is_null() {
            return false;
        }
        let empty = *id == 0;
        rdkafka::bindings::rd_kafka_mem_free(rk, id.cast());
        !empty
    }
}

/// What this build's librdkafka can do (`builtin.features`: codecs, TLS, SASL
/// mechanisms, `http`/`oidc` for OAUTHBEARER token fetching).
pub fn builtin_features() -> KafkaResult<Vec<String>> {
    let features = ClientConfig::new()
        .create_native_config()?
        .get("builtin.features")?;
    Ok(features.split(',').map(str::to_string).collect())
}

/// What a deployment may need of librdkafka: every codec a producer may have
/// written with, TLS, the SASL mechanisms Courier documents, OIDC.
pub const REQUIRED_FEATURES: [&str; 10] = [
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "ssl",
    "sasl_plain",
    "sasl_scram",
    "sasl_oauthbearer",
    "http",
    "oidc",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::input::HeaderName;

    /// A name that is not UTF-8 is written and read back as its bytes (rdkafka's
    /// own accessors panic on it), next to ordinary ones and a null value.
    #[test]
    fn header_names_travel_as_bytes() {
        let h = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "ce_id",
            value: Some("e-1"),
        });
        let h = insert_header_bytes(h, b"\xff\xfe", Some(b"x"));
        let h = insert_header_bytes(h, b"n", None);
        let raw =
            std::ptr::from_ref(h.as_borrowed()).cast::<rdkafka::bindings::rd_kafka_headers_t>();
        // SAFETY: `h` owns the list and outlives the call.
        let read = unsafe { read_header_list(raw) }.unwrap();
        assert_eq!(
            read.to_vec(),
            vec![
                (
                    HeaderName::from("ce_id"),
                    Some(bytes::Bytes::from_static(b"e-1"))
                ),
                (
                    HeaderName::new(b"\xff\xfe"),
                    Some(bytes::Bytes::from_static(b"x"))
                ),
                (HeaderName::from("n"), None),
            ]
        );
        assert_eq!(read[1].0.as_str(), None);
    }

    /// A record of ~350,000 one-byte headers (about 1 MB on the wire) is
    /// charged at least what its headers hold on the heap: each header's slot in
    /// the slice and the smallest heap blocks of its name and value. Before the
    /// per-header charge it was charged ~0.7 MB for ~22 MB held.
    /// A batch may decompress to three times the fetch budget and no further;
    /// the limit never falls below what librdkafka requires, and the user's
    /// own wins.
    #[test]
    fn decompression_is_capped_at_the_fetch_budget() {
        let k = KafkaConfig::default();
        let get = |c: &ClientConfig| c.get("receive.message.max.bytes").map(str::to_string);
        let c = cap_decompression(consumer_config(&k), &k, 16 << 20);
        assert_eq!(get(&c), Some((48u64 << 20).to_string()));
        let c = cap_decompression(consumer_config(&k), &k, 1 << 20);
        assert_eq!(
            get(&c),
            Some((8_388_608 + 512).to_string()),
            "fetch.max.bytes + 512 at least"
        );
        let mut own = KafkaConfig::default();
        own.properties
            .insert("receive.message.max.bytes".into(), "99999999".into());
        let c = cap_decompression(consumer_config(&own), &own, 16 << 20);
        assert_eq!(get(&c).as_deref(), Some("99999999"));
        // librdkafka takes each of them.
        for budget in [1 << 20, 16 << 20] {
            let c = cap_decompression(consumer_config(&k), &k, budget);
            assert!(c.create_native_config().is_ok());
        }
    }

    #[test]
    fn a_record_is_charged_for_each_header() {
        let n = 350_000;
        let headers: Vec<crate::core::input::Header> = (0..n)
            .map(|i| {
                (
                    HeaderName::new(&[b'a' + (i % 26) as u8]),
                    Some(bytes::Bytes::from_static(b"v")),
                )
            })
            .collect();
        let r = Record {
            partition: 0,
            offset: 0,
            dlq: false,
            key: None,
            payload: Some(bytes::Bytes::from(vec![0u8; 1024])),
            timestamp_ms: None,
            headers: Some(headers.into_boxed_slice()),
        };
        // The slice, and per header two blocks of jemalloc's smallest class (8).
        let held = n * (std::mem::size_of::<crate::core::input::Header>() + 8 + 8);
        assert!(
            r.size() >= held,
            "charged {} for {held} bytes of headers held",
            r.size()
        );
        // Without headers the charge is what it was.
        let bare = Record { headers: None, ..r };
        assert_eq!(bare.size(), 1024 + RECORD_OVERHEAD);
    }

    /// The producer never asks the broker to create a topic, whatever
    /// `[kafka.properties]` says.
    #[test]
    fn the_producer_never_auto_creates_topics() {
        let mut k = KafkaConfig::default();
        k.properties
            .insert("allow.auto.create.topics".into(), "true".into());
        let c = producer_config(&k);
        assert_eq!(c.get("allow.auto.create.topics"), Some("false"));
    }

    /// Without `zstd`, a topic written with zstd (the default of many producers)
    /// delivers nothing; without `oidc`, OAUTHBEARER cannot fetch its token.
    #[test]
    fn librdkafka_is_built_with_every_codec_and_mechanism() {
        let have = builtin_features().unwrap();
        let missing: Vec<_> = REQUIRED_FEATURES
            .iter()
            .filter(|f| !have.iter().any(|h| h == *f))
            .collect();
        assert!(
            missing.is_empty(),
            "missing {missing:?}; built with {have:?}"
        );
    }
}
