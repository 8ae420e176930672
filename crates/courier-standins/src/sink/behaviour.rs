//! [`Behaviour`]: how the stand-in misbehaves, swapped whole at any moment
//! (`PUT /behaviour`, [`SinkHandle::set_behaviour`](super::SinkHandle::set_behaviour)).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::faults;

/// How the stand-in misbehaves. Every field has a default (a healthy, instant API),
/// so a JSON document only needs the fields it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Behaviour {
    /// Added to every delivery before answering.
    pub latency_ms: u64,
    /// Uniform extra latency in `0..=latency_jitter_ms`.
    pub latency_jitter_ms: u64,
    /// When set, the API is "down": every delivery is answered with this status.
    pub down_status: Option<u16>,
    /// Scripted failures per event id. An id with a rule is governed by the rule
    /// alone: `fail_rate` never applies to it.
    pub fail_ids: HashMap<String, FailRule>,
    /// Scripted failures per entity key (the load generator's `data.key`, else
    /// `subject`: the key of the order checks), for an event no `fail_ids`
    /// rule covers; `times` counts the attempts of each id, as in `fail_ids`.
    /// An entity the API cannot write for a while (a locked row).
    pub fail_keys: HashMap<String, FailRule>,
    /// Probability (0..=1) of answering `fail_status` to a delivery not covered above.
    pub fail_rate: f64,
    /// Status used by `fail_rate`.
    pub fail_status: u16,
    /// When set, a delivery without `Authorization: Bearer <token>` gets 401
    /// (credentials revoked, or never sent).
    pub required_token: Option<String>,
    /// When set (and `required_token` is not), a delivery's bearer token must
    /// be one this OAuth2 introspection endpoint (RFC 7662) says is active,
    /// and not past its `exp`: 401 otherwise.
    pub introspect_url: Option<String>,
    /// The body of every non-2xx answer (e.g. an API's JSON error); none when unset.
    pub fail_body: Option<String>,
    /// Hidden capacity: at most this many deliveries handled at once; one
    /// above it is answered 429 at once (no latency, no `Retry-After`). A
    /// batch request takes one slot.
    pub capacity: Option<u64>,
    /// Batch endpoint: a batch body (more than one event) larger than this many
    /// bytes is answered 413 as a whole (counted in `Audit::batch_refused_413`).
    /// A single event is never refused for its size.
    pub batch_max_bytes: Option<usize>,
    /// Batch endpoint: a request holding any of these ids is answered 400 as a
    /// whole, a request of that one event alone included (counted in
    /// `Audit::batch_refused_whole`); nothing in it is delivered.
    pub batch_poison_ids: HashSet<String>,
    /// Batch endpoint: answer a batch with a plain status and no per-item
    /// results: 200 when every item succeeds, else the first failing item's
    /// status for the whole batch (and every item booked as failed with it).
    pub batch_whole_status: bool,
    /// Batch endpoint: an API that applies a batch's items in order, per
    /// key: an item after a failed item of its key in the same request is
    /// not applied either, and answered 503 (counted in
    /// `Audit::batch_items_held_back`). Items without the load generator's
    /// key are left as they are. What `api.batch.ordered = true` is for.
    pub keep_key_order: bool,
    /// Batch endpoint: where the items are in a templated batch (a JSON object
    /// body), as a JSON pointer; default `"/events"` (`{"events": [...]}`).
    pub batch_items_pointer: String,
    /// Batch endpoint: list the per-item results in reverse order, so that only
    /// matching by id (`api.batch.result_id = "/id"`) reads them right.
    pub batch_results_reversed: bool,
    /// Batch endpoint: answers that say less than they seem to (an HTML 200,
    /// a body cut mid-way, conflicting or missing per-item results); see
    /// [`faults`].
    pub batch_faults: faults::BatchFaults,
    /// Schemas served at `GET /schemas/ids/{id}` (the Confluent registry API's
    /// one read Courier makes): the demo's stand-in registry; see [`registry`].
    ///
    /// [`registry`]: super::registry
    pub schemas: BTreeMap<u32, String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            latency_ms: 0,
            latency_jitter_ms: 0,
            down_status: None,
            fail_ids: HashMap::new(),
            fail_keys: HashMap::new(),
            fail_rate: 0.0,
            fail_status: 503,
            required_token: None,
            introspect_url: None,
            fail_body: None,
            capacity: None,
            batch_max_bytes: None,
            batch_poison_ids: HashSet::new(),
            batch_whole_status: false,
            keep_key_order: false,
            batch_items_pointer: "/events".into(),
            batch_results_reversed: false,
            batch_faults: faults::BatchFaults::default(),
            schemas: BTreeMap::new(),
        }
    }
}

impl Behaviour {
    /// What `GET|PUT /behaviour` answer: the behaviour with `required_token`
    /// shown as `***` (set) — the token is a credential, and whoever can read
    /// the control port need not learn it.
    pub fn redacted(&self) -> Behaviour {
        Behaviour {
            required_token: self.required_token.as_ref().map(|_| REDACTED.into()),
            ..self.clone()
        }
    }
}

/// What [`Behaviour::redacted`] shows for a token.
const REDACTED: &str = "***";

/// A scripted failure for one event id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailRule {
    /// Status to answer while the rule fails.
    pub status: u16,
    /// `None`: fail forever. `Some(n)`: the first `n` attempts for the id fail, later
    /// ones succeed. Attempts are counted by the audit, so every attempt counts
    /// (including ones answered by `down_status`), and `reset` starts the count over.
    pub times: Option<u32>,
    /// Sent as `Retry-After` (seconds) on the failures of this rule.
    pub retry_after_s: Option<u64>,
}

impl Default for FailRule {
    fn default() -> Self {
        FailRule {
            status: 503,
            times: None,
            retry_after_s: None,
        }
    }
}
