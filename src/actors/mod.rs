//! The actor tree (ractor). Actors own I/O and stay thin: every decision worth
//! testing lives in `crate::core` — the partition actor, for one, only carries out
//! the effects of its `core::partition::PartitionMachine`.
//!
//! ```text
//! Supervisor
//! ├── Health        Redis marker + local breaker → one verdict
//! ├── DlqWriter      idempotent producer for DLQ and parking lot
//! ├── DeliveryPool   spawns enrich + HTTP tasks under a global concurrency limit
//! └── Consumer       rdkafka consumer, poll thread, rebalances
//!     └── Partition(p)  one per assigned partition pair: interprets core::partition
//! ```

pub mod consumer;
pub mod delivery_pool;
pub mod dlq_writer;
#[cfg(test)]
pub(crate) mod fakes;
pub mod health;
pub mod partition;
pub mod supervisor;
