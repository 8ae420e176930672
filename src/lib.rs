//! Courier: Kafka → decode/validate → enrich → HTTP POST with an idempotency key →
//! commit only what is finished. See `docs/ARCHITECTURE.md`.

pub mod core;
