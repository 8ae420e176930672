//! The pure core: no I/O, no clocks of its own. Everything here is decided from its
//! inputs and tested exhaustively; the actors only apply the decisions.
//!
//! # Layout
//!
//! Each module is a decision (or a value type) that a shell module carries out;
//! time, randomness and what the broker or the API said are inputs. Grouped by job
//! (the shell that uses each in brackets):
//!
//! * **Offsets and the partition pair**: `partition` (the [`partition::PartitionMachine`]
//!   of main p + DLQ p, with its model-based test; carried out by
//!   `actors::partition`), `offsets` (the commit watermark), `completed` (offsets
//!   done above it, encoded in commit metadata), `deleted` (events the log lost
//!   before the group read them), `ordering` (what may be in flight together),
//!   `fsm` (which of main p and DLQ p is read), `byte_budget` (the process-wide byte
//!   budget), `commit_pace` (commits before auto-commit, of all partitions, coalesced
//!   into one request per 10 ms; `actors::partition::commits`).
//!
//! * **What a record is, and its request** (`kafka`, `actors::partition`,
//!   `delivery`): `input` (record formats → [`event::Event`]), `event` (CloudEvents
//!   decoding and validation), `envelope` (the DLQ / parking-lot envelope and its
//!   headers), `mapping` (an event's request: route, URL, method, headers, body),
//!   `destination` (where a route sends, and a partition's verdict from its
//!   destinations'),
//!   `trace` (W3C trace context), `text` (record-chosen text made safe for logs and
//!   errors), `expr` (the expression language of filters and route predicates:
//!   CEL compiled once, evaluated per event within bounds).
//!
//! * **What an answer means and what follows** (`delivery`, `api_health`): `answer`
//!   (the one reading of an answer: what the breaker hears of the call and what it
//!   means for the event), `classify`
//!   (an answer or transport failure → a class and a reason), `status_policy`
//!   (what each HTTP status code means, `[api.status]`), `attempt` (the decision
//!   after a failed try or a failed DLQ round: retry, wait at the gate, dead-letter,
//!   park), `batch` (a batch's body, its per-item results, bisection of a batch
//!   refused as a whole), `backoff` (in-place retries' delays), `dlq_policy` (a DLQ event at the
//!   head of the drain), `systemic` (a systemic answer as a hypothesis a later call
//!   refutes), `breaker` (the local circuit breaker and its gate).
//!
//! * **Credentials toward the API** (`auth`): `credentials` (when to fetch or
//!   refresh an OAuth2 token), `webhook_signature` (Standard Webhooks secrets and
//!   signatures).
//!
//! * **Limits toward the API** (`delivery::limits`, `delivery::ratelimit`,
//!   `delivery::pacer`): `concurrency` (the adaptive limit), `ratelimit` (GCRA),
//!   `pacer` (the DLQ drain's rate).
//!
//! * **The process** (`actors::supervisor`, `metrics`, `status_page`): `restart`
//!   (the restart budget), `liveness` (readiness and liveness), `group_watch`
//!   (a consumer stuck outside its group), `status_page` (what
//!   the `/status` page shows: the marker's state, the verdict's source, recent
//!   errors).

pub(crate) mod answer;
pub(crate) mod attempt;
pub(crate) mod backoff;
pub mod batch;
pub(crate) mod breaker;
pub(crate) mod byte_budget;
pub mod classify;
pub(crate) mod commit_pace;
pub mod completed;
pub(crate) mod concurrency;
pub(crate) mod credentials;
pub(crate) mod deleted;
pub(crate) mod destination;
pub(crate) mod dlq_policy;
pub mod envelope;
pub mod event;
pub mod expr;
pub(crate) mod fsm;
pub(crate) mod group_watch;
pub mod input;
pub(crate) mod liveness;
pub(crate) mod mapping;
pub(crate) mod offsets;
pub(crate) mod ordering;
pub(crate) mod pacer;
pub mod partition;
pub(crate) mod ratelimit;
pub(crate) mod restart;
pub mod schema;
pub(crate) mod status_page;
pub(crate) mod status_policy;
pub(crate) mod systemic;
pub(crate) mod text;
pub(crate) mod trace;
pub(crate) mod webhook_signature;
