//! Courier's stand-ins and test tools: what the tests, the benches, the chaos
//! drills and `courier demo` run Courier against, and how they check it.
//!
//! * `sink` — the API stand-in (`courier sink`): a real HTTP(S) server that
//!   misbehaves on demand and keeps exact books of what it received.
//! * `loadgen` — synthetic CloudEvents (JSON or Avro), with bad input on request.
//! * `audit` — the no-loss audit every test, drill and demo run ends with.
//! * `admin` — Kafka helpers that set up and read back a run: create topics,
//!   change their configs, delete records, add partitions, read a topic.
//!
//! The root package `courier` depends on this crate (its binary's `sink` and
//! `demo` commands), so this crate does not depend on `courier`: it reads what
//! Courier writes (DLQ envelopes, batch keys, the schema registry's framing) on
//! its own, as an independent checker should.

pub mod admin;
pub mod audit;
pub mod loadgen;
pub mod sink;
