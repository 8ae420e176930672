//! Courier: Kafka → decode/validate → enrich → HTTP POST with an idempotency key →
//! commit only what is finished. See `docs/ARCHITECTURE.md`.

pub mod actors;
pub mod app;
pub mod audit;
pub mod clock;
pub mod config;
pub mod core;
pub mod delivery;
pub mod demo;
pub mod handle;
pub mod health;
pub mod kafka;
pub mod loadgen;
pub mod metrics;
pub mod ops;
pub mod otel;
pub mod redis_conn;
pub mod runtime;
pub mod sink;
pub mod status_page;
pub mod store_tls;
pub mod testkit;
pub mod tls;
