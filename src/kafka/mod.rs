//! Kafka plumbing: client configuration, the consumer context (rebalance
//! callbacks) and the poll thread. No pipeline logic lives here.
//!
//! # Parts
//!
//! Each in its own file, with its unit tests beside it; what other modules use
//! is re-exported here (`kafka::Record`, `kafka::consumer_config`, …):
//!
//! * `record.rs` — [`Record`], one message as it travels from the poll thread to
//!   a partition actor, and what it costs against the byte budgets
//!   (`RECORD_OVERHEAD`, `HEADER_OVERHEAD`).
//! * `headers.rs` — headers as bytes through librdkafka's own accessors:
//!   [`record_headers`] (read) and [`insert_header_bytes`] (write, for replay).
//! * `client_config.rs` — the client settings: [`consumer_config`],
//!   [`producer_config`], [`client_base`], [`cap_decompression`].
//! * `context.rs` — [`CourierContext`], the group consumer's context (rebalance
//!   and commit callbacks, librdkafka's logs and errors), and [`PollSink`], where
//!   it and the poll thread hand records and rebalances.
//! * `group.rs` — [`leave_group`]: a static member's LeaveGroup on shutdown.
//! * `features.rs` (tests only) — `builtin_features` and `REQUIRED_FEATURES`:
//!   what this build's librdkafka can do, and must.
//!
//! And the modules: `admin` (admin and inspection helpers) and `identity` (topic
//! ids), public; `client_log` (librdkafka's log lines), `detached` (teardown off
//! the caller's thread), `poller` (the poll thread), `seams` (the traits the
//! actors reach Kafka through), for the crate only.
//!
//! # Invariant I4: auto-store off
//!
//! *Enforced in* `src/kafka/client_config.rs` (consumer config).
//! `enable.auto.offset.store=false`: librdkafka's auto-commit only commits what Courier
//! stored. Courier refuses `kafka.properties` that override this.
//!
//! *Tested by:* `config` unit tests; every e2e test compares committed offsets with end
//! offsets.
//!
//! # Invariant I6: rebalance order
//!
//! *Enforced in* `src/kafka/context.rs` (`CourierContext`). Polled-but-unforwarded records are
//! handed to the actor *before* a rebalance is reported, so a record of the old assignment
//! never reaches a partition actor of the new one (its tracker would otherwise start past
//! unread offsets).
//!
//! *Tested by:* `tests/pipeline.rs::instance_joins_and_leaves_mid_run`.
//!
//! # Invariant I21: co-location
//!
//! *Enforced in* `src/kafka/client_config.rs`, `src/config/kafka.rs` (co-location). Main p and
//! DLQ p are read by the same member: the classic protocol with the eager `range` assignor
//! over two topics of equal partition counts (checked at start and at every assignment:
//! partitions added to either topic while running end the process, exit 70, and a restart
//! refuses to start until the counts match — see I31, `actors::consumer`) assigns equal
//! indices of co-subscribed topics together. `partition.assignment.strategy`,
//! `group.protocol`, `group.remote.assignor` and `group.instance.id` in `[kafka.properties]`
//! are refused (`check-config` names the key); an assignment naming a partition already owned
//! keeps its actor (an incremental assignor would otherwise replace it, and the new actor's
//! watermark would pass the old one's unfinished events). Static membership
//! (`kafka.instance_id`) keeps the protocol and the assignor: a rejoining static member gets
//! its previous assignment back.
//!
//! *Tested by:* `config::kafka` unit tests (each refused key); `tests/crash_cost.rs` (static
//! members: three instances own two partition pairs each).
//!
//! # Invariant I24: hostile headers
//!
//! *Enforced in* `src/kafka/headers.rs` (`record_headers`), `src/core/input.rs`
//! (`HeaderName`), `src/core/envelope.rs` (`OriginHeader`) (hostile headers). Header names and
//! values are read as bytes through librdkafka's own accessor (rdkafka's `Headers` API unwraps
//! `to_str()` and panicked the poll thread on a name that is not UTF-8). A name that is not
//! UTF-8 is compared as bytes, so it never equals a configured name: it is never forwarded to
//! the API (`api.forward_headers`) nor read as a CloudEvents attribute; the record is
//! delivered. It travels in the envelope as `name` (made readable, U+FFFD) plus `name_bytes`
//! (base64, exact), and replay writes the exact bytes back. Counted:
//! `courier_header_names_not_utf8_total`. A record is charged 64 bytes per header besides the
//! bytes (`HEADER_OVERHEAD`, `src/kafka/record.rs`: the slot and two minimal jemalloc blocks).
//!
//! *Tested by:* `tests/input.rs::a_header_name_that_is_not_utf8_stops_nothing` (kcat `-H
//! $'\xff=x'` among 1,000 events, through the DLQ; seen failing before: the poll thread
//! panicked, commits never reached the end); `core::envelope` proptest (any name and value
//! bytes round-trip); `kafka::headers::tests` (bytes written and read back),
//! `kafka::record::tests` (350,000 one-byte headers charged ≥ the 22 MB held, 0.7 MB before).
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
pub(crate) mod client_log;
pub(crate) mod detached;
pub mod identity;
pub(crate) mod poller;
pub(crate) mod seams;

mod client_config;
mod context;

/// The test broker's address, for this module's real-broker tests.
#[cfg(test)]
fn test_brokers() -> String {
    std::env::var("COURIER_TEST_BROKERS").expect(
        "COURIER_TEST_BROKERS is not set: run the tests through scripts/test.sh (it starts Kafka)",
    )
}
#[cfg(test)]
mod features;
mod group;
mod headers;
mod record;

pub use client_config::producer_config;

pub(crate) use client_config::{cap_decompression, client_base, consumer_config};
pub(crate) use context::{CourierContext, PollSink};
pub(crate) use group::leave_group;
pub(crate) use headers::insert_header_bytes;
pub use headers::record_headers;
pub(crate) use record::Record;

use rdkafka::consumer::BaseConsumer;

/// The group consumer. Its teardown (close, destroy) runs on a thread of its
/// own, whoever drops the last handle ([`detached::Detached`]).
pub(crate) type KafkaConsumer = detached::Detached<BaseConsumer<CourierContext>>;
