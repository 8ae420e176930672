//! The actor tree (ractor). Actors own I/O and stay thin: every decision worth
//! testing lives in `crate::core` — the partition actor, for one, only carries out
//! the effects of its `core::partition::PartitionMachine`. What they ask of Kafka
//! goes through the seams of `kafka::seams` (`PartitionIo`, `BrokerView`), which
//! `fakes` stands in for in the actors' unit tests.
//!
//! ```text
//! Supervisor                       src/actors/supervisor.rs
//! ├── Health                       src/actors/health.rs       Redis marker + local breaker → verdict
//! ├── DlqWriter                    src/actors/dlq_writer.rs   idempotent producer (DLQ + parking lot)
//! ├── DeliveryPool                 src/actors/delivery_pool.rs queue → permit → task (global semaphore)
//! └── Consumer                     src/actors/consumer/       rdkafka consumer, poll thread, rebalances
//!     └── Partition(p)             src/actors/partition.rs    carries out src/core/partition (the decisions)
//! ```
//!
//! - The **supervisor** overrides ractor's default (which stops on the first child failure):
//!   it re-spawns a failed child from the configuration it keeps, counts
//!   `courier_actor_restarts_total`, and after `supervision.max_restarts` within
//!   `supervision.window` declares the pipeline fatal; `courier run` then exits with code 70.
//!   A fatal Kafka client error (a fenced static member) does the same.
//! - A **partition actor** is spawned per assigned partition and generation. It decides
//!   nothing itself: `core::partition::PartitionMachine` (pure: no I/O, no clock reads, no
//!   actor or rdkafka types) holds the pair's state — both offset trackers, the ordering
//!   lanes, the held events, the backlog, the DLQ queue, the degraded-mode FSM, the drain —
//!   and turns each `Input` (records, a batch of job reports, the health verdict, a lag
//!   check, a timer, a drain request, a failed store or pause, each with the current
//!   monotonic and wall-clock time) into `Effect`s (dispatch a job, pause/resume a topic,
//!   store a position, schedule a timer, answer the drain, budget and readiness counts,
//!   gauges, log lines). The actor carries them out: `pause`/`resume`/`store` on its
//!   `kafka::seams::PartitionIo`, jobs to the delivery pool, `send_after` timers, metrics; a store or
//!   pause that fails goes back in as an input. The machine is generic over the record and
//!   the job's payload (`Intake`): the actor's `Decoder` decodes each record before `handle`, the
//!   tests use plain data. Reports carry the generation; a late one from an older
//!   incarnation is ignored (its actor reference is dead anyway).
//! - The **delivery pool** owns the deliverer and a queue of deliveries, which partition
//!   actors send to directly (`PoolHandles::queue`); a dispatcher task takes one of the
//!   `pipeline.concurrency` permits of the global semaphore and only then spawns the job's
//!   task, which holds the permit while it enriches and calls the API (and its in-place
//!   retries). Waiting jobs are queue entries, not tasks. Parking-lot writes and DLQ
//!   redeliveries (own semaphore and pacer) start at once.
//! - The **DLQ writer** hands each write to a task and replies only after the broker's
//!   acknowledgement. A fatal producer error fails the actor so the supervisor re-creates
//!   the producer.

pub(crate) mod consumer;
pub(crate) mod delivery_pool;
pub(crate) mod dlq_writer;
#[cfg(test)]
pub(crate) mod fakes;
pub(crate) mod health;
pub(crate) mod partition;
pub(crate) mod supervisor;
