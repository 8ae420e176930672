//! Courier: Kafka → decode/validate → enrich → HTTP POST with an idempotency key →
//! commit only what is finished. See `docs/ARCHITECTURE.md`.
//!
//! # Layout
//!
//! The modules form layers: each uses only the layers above it in this list, and
//! `core` uses nothing else of Courier (`tests/layers.rs` checks it; the layer
//! numbers are ARCHITECTURE.md's "Layers"). Decisions are pure and live in `core`;
//! everything below it is the shell that carries them out.
//!
//! * **Decisions** (0): `core` — input → effects, time as an input, no I/O: offsets,
//!   the partition machine, the breaker, error classes, envelopes, policies.
//!   Its own layout is at the top of [`core`].
//!
//! * **Leaves** (1): `clock` (the wall clock, read at the edges), `handle`
//!   (stable handles to peers that restart), `tls` (PEM files, the API client's TLS
//!   settings), `store_tls` (TLS to Redis and PostgreSQL).
//!
//! * **Configuration** (2): `config` — one file per `[section]`, validated by
//!   `courier check-config`.
//!
//! * **Clients and state** (3): `schema_registry` (writers' schemas by id, cached),
//!   `kafka` (client settings, the poll thread, the
//!   rebalance context, admin helpers), `redis_conn` (the Redis client of the marker
//!   and the rate limit), `api_health` (the instance's verdict: breaker + marker),
//!   `status_page` (the board behind `/status`; its decisions are
//!   `core::status_page`), `otel` (optional OTLP export of delivery spans).
//!
//! * **Observability and operator commands** (4): `metrics` (names, the
//!   `/metrics`, `/healthz`, `/readyz` listener), `ops` (`courier dlq
//!   inspect|replay`).
//!
//! * **The pipeline** (5–8): `runtime` (what the actors and tasks share: the
//!   [`runtime::Pipeline`]), `auth` (what a request carries to prove who sends it:
//!   the bearer token from the environment, a rotating file or OAuth2, and the
//!   Standard Webhooks signature), `delivery` (the work of one event: enrich, POST,
//!   DLQ, parking lot; completion tokens), `actors` (supervisor, consumer,
//!   partition, delivery pool, DLQ writer, health), `app` (starts and stops one
//!   instance: `courier run`).
//!
//! * **The demo** (9): `demo` (`courier demo`: the pipeline against a mock
//!   cluster and the API stand-in, ending in the no-loss audit). Courier's own
//!   path never uses it.
//!
//! Outside this crate: `src/main.rs` (the `courier` binary: commands, exit codes);
//! `crates/courier-standins` (the API stand-in, the load generator, the audit and
//! test-only Kafka helpers: a dependency, for `courier sink` and `courier demo`,
//! and what the tests, benches and drills use); and the workspace's tooling, which
//! `cargo build --release` never compiles — `crates/courier-testkit` (runs Courier
//! processes, free ports, Prometheus text; a dev-dependency) and
//! `crates/courier-drill` (the chaos drills, docs/DRILLS.md).

pub(crate) mod actors;
pub(crate) mod api_health;
pub mod app;
pub mod auth;
pub(crate) mod clock;
pub mod config;
pub mod core;
pub mod delivery;
pub mod demo;
pub(crate) mod handle;
pub mod kafka;
pub mod metrics;
pub mod ops;
pub mod otel;
pub(crate) mod redis_conn;
pub mod runtime;
pub(crate) mod schema_registry;
pub mod status_page;
pub(crate) mod store_tls;
pub(crate) mod tls;
