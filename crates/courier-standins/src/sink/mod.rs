//! The API stand-in ("sink"): a real HTTP server that plays the flaky external API
//! Courier delivers events to.
//!
//! Integration tests, the demo, chaos drills and the benchmarks all point Courier at
//! it, so it has two jobs:
//!
//! 1. **Misbehave on demand.** A [`Behaviour`] adds latency, takes the whole API down,
//!    fails chosen event ids a number of times, or fails a random fraction of requests.
//!    It can be swapped at any moment, from Rust ([`SinkHandle::set_behaviour`]) or
//!    over HTTP (`PUT /behaviour`), which is how a drill breaks the API under load.
//! 2. **Keep exact books.** Every delivery attempt and every answer is recorded in an
//!    [`Audit`], so a test can prove "every event delivered, none lost" and count the
//!    duplicates that at-least-once delivery allows.
//!
//! HTTP surface:
//!
//! | route             | purpose                                               |
//! |-------------------|-------------------------------------------------------|
//! | `POST /events`    | the delivery endpoint (CloudEvent JSON with a string `id`; header `Idempotency-Key` must equal it) |
//! | `POST /batch`, `POST /batch/*` | the batch endpoint (`[api.batch]`): many events per request, per-item results; see [`batch`] |
//! | `GET /audit`      | the [`Audit`] as JSON                                 |
//! | `GET /audit/delivered` | the [`DeliveredCount`] as JSON: cheap to poll in a loop (no per-id maps) |
//! | `GET /behaviour`  | the current [`Behaviour`] as JSON (`required_token` shown as `***`) |
//! | `PUT /behaviour`  | replace the [`Behaviour`] (JSON; missing fields take their defaults) |
//! | `POST /reset`     | clear the audit; `?expect=N` reserves room for N events in the books (a bench's run size), so they do not grow, and stall every request while they do, mid-run |
//! | `POST\|PUT\|PATCH /routes/*` | a mapped delivery (`[[api.routes]]`): the id is the `Idempotency-Key`, any body |
//! | `GET /healthz`    | liveness                                              |
//! | `GET /schemas/ids/{id}` | a schema registry's read of a schema by id ([`Behaviour::schemas`]; the demo's Avro input) |
//!
//! Per `POST /events` the order is: validate (400 without latency if malformed),
//! record the attempt, sleep the simulated latency, then decide the answer
//! (`down_status` → `fail_ids` rule → `fail_keys` rule → `fail_rate` → 200) and book it.
//!
//! With [`SinkHandle::start_tls`] (`courier sink --tls-cert/--tls-key`) it serves
//! HTTPS instead, HTTP/2 or HTTP/1.1 by ALPN, optionally requiring client
//! certificates (`--tls-client-ca`); see [`tls`].
//!
//! It must stay fast (tens of thousands of requests/s on loopback) so that the
//! benchmarks measure Courier, not the stand-in. Hence: one short-held mutex for the
//! bookkeeping, the behaviour shared as an `Arc` snapshot (never cloned per request),
//! atomics for the concurrency gauge, HTTP/1.1 keep-alive and `TCP_NODELAY`.
//!
//! # Parts
//!
//! | file | holds |
//! |---|---|
//! | `behaviour.rs` | [`Behaviour`] and [`FailRule`]: how it misbehaves |
//! | `handle.rs` | [`SinkHandle`]: start (HTTP or HTTPS), the router, the controls; [`run_standalone`] |
//! | `deliver.rs` | a delivery from request to answer: `POST /events`, `/routes/*` |
//! | [`batch`] | the batch endpoint, `POST /batch` |
//! | [`faults`] | the batch endpoint's misleading answers |
//! | `order.rs` | the per-key order checks (first deliveries, last writes, stale writes) and an order-keeping API's batch answer |
//! | `probe.rs` | reading an event's id and order mark without parsing all of it |
//! | `introspect.rs` | asking an OAuth2 introspection endpoint about a token |
//! | `registry.rs` | the stand-in schema registry, `GET /schemas/ids/{id}` |
//! | `control.rs` | the control routes: `/audit`, `/behaviour`, `/reset` |
//! | `book.rs` | the books (one short-held mutex) and the shared state |
//! | `audit.rs` | what a test reads back: [`Audit`], [`DeliveredCount`], [`RequestSample`] |
//! | `tls.rs` | HTTPS: [`SinkTls`], certificate swaps, handshake counts |

mod audit;
pub mod batch;
mod behaviour;
mod book;
mod control;
mod deliver;
pub mod faults;
mod handle;
mod introspect;
mod order;
mod probe;
mod registry;
mod tls;

pub use audit::{Audit, DeliveredCount, RequestSample};
pub use behaviour::{Behaviour, FailRule};
pub use handle::{run_standalone, SinkHandle};
pub use tls::{SinkTls, SinkTlsError};

// What the older parts (`batch`, `order`, `registry`) reach as `super::…`.
use book::{Book, BookMap, CapacitySlot, InFlight, Shared};
use deliver::{
    decide, event_of_value, latency, parse_delivery, parse_event, respond, status_code, Answer,
    Delivered, REDELIVERY,
};

/// The wall clock in Unix milliseconds (0 before 1970).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Header that must carry the event id on every delivery.
const IDEMPOTENCY_KEY: &str = "idempotency-key";
