//! What a test reads back: the [`Audit`] snapshot of the books, its cheap
//! totals ([`DeliveredCount`]) and the [`RequestSample`]s.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A snapshot of the stand-in's books since start (or the last reset).
///
/// Every delivery request gets exactly one answer, so once the server is quiet
/// `requests_total == Σ delivered + failures_total` and
/// `requests_total == Σ attempts + bad_requests`. (A client that hangs up during
/// the simulated latency leaves an attempt without an answer.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Audit {
    /// Event id → number of 2xx answers for it (> 1 means duplicate deliveries).
    pub delivered: HashMap<String, u32>,
    /// Event id → number of well-formed delivery requests for it, whatever the answer.
    pub attempts: HashMap<String, u32>,
    /// Event ids in the order they were answered 2xx (duplicates appear again).
    pub order: Vec<String>,
    /// All delivery requests, including bad ones; each event of a batch
    /// request counts as one (`batch_requests` counts the requests).
    pub requests_total: u64,
    /// Non-2xx answers sent, including the 400s counted in `bad_requests`.
    pub failures_total: u64,
    /// Requests without a JSON object body with a string `id`, or whose
    /// `Idempotency-Key` header is missing or differs from that id; answered 400.
    pub bad_requests: u64,
    /// Peak number of delivery requests being handled at once.
    pub max_concurrent: u64,
    /// Requests received in each whole second since start (index = second);
    /// each event of a batch request counts as one.
    pub per_second: Vec<u64>,
    /// The same, for requests marked `Courier-Redelivery` (DLQ drain), so a test
    /// can measure the drain rate apart from the main path.
    #[serde(default)]
    pub per_second_redelivery: Vec<u64>,
    /// Last body received per id; only filled while
    /// [`SinkHandle::set_record_bodies`] is on.
    ///
    /// [`SinkHandle::set_record_bodies`]: super::SinkHandle::set_record_bodies
    pub bodies_sample: HashMap<String, Value>,
    /// Requests answered 429 for being above `Behaviour::capacity`, per whole
    /// second (same index as `per_second`).
    #[serde(default)]
    pub per_second_over_capacity: Vec<u64>,
    /// Delivery requests that arrived over HTTP/2 (h2c or negotiated by ALPN).
    #[serde(default)]
    pub http2_requests: u64,
    /// TLS handshakes that failed (the client refused the certificate, or sent
    /// none when one is required, ...). Not cleared by a reset.
    #[serde(default)]
    pub tls_handshake_failures: u64,
    /// Unix time in ms of the first failed TLS handshake; 0 if none.
    #[serde(default)]
    pub tls_first_failure_unix_ms: i64,
    /// Last request per id (method, path, headers); only filled while
    /// [`SinkHandle::set_record_requests`] is on.
    ///
    /// [`SinkHandle::set_record_requests`]: super::SinkHandle::set_record_requests
    #[serde(default)]
    pub requests_sample: HashMap<String, RequestSample>,
    /// Well-formed requests to the batch endpoint (a single event sent there
    /// included), whatever the answer: bisection's extra requests show here.
    pub batch_requests: u64,
    /// Events in those requests (Σ of their sizes).
    pub batch_items: u64,
    /// Those requests that carried a single event (not a batch body).
    pub batch_singles: u64,
    /// The most events one batch request carried.
    pub batch_max_items: u64,
    /// Batch requests answered 413 for `Behaviour::batch_max_bytes`.
    pub batch_refused_413: u64,
    /// Batch requests answered 400 as a whole for a `Behaviour::batch_poison_ids`
    /// id (a lone poison event included).
    pub batch_refused_whole: u64,
    /// Batch bodies whose `Idempotency-Key` is not the one Courier derives from
    /// their item ids (`core::batch::idempotency_key`); still answered.
    pub batch_key_mismatches: u64,
    /// Batch bodies sent without an `Idempotency-Key` (a generic batching
    /// client's JSON array): booked per item like the others.
    #[serde(default)]
    pub batch_keyless: u64,
    /// Batch items whose key an earlier item of the same request has (the
    /// load generator's `data.key`): runs of `ordered = true`; 0 without it in
    /// `key` mode. Redeliveries left out.
    #[serde(default)]
    pub batch_same_key_items: u64,
    /// Batch-endpoint requests received in each whole second (same index as
    /// `per_second`, which counts events).
    pub per_second_batches: Vec<u64>,
    /// First deliveries whose per-key order was checked: events carrying the
    /// load generator's `data.key` (or `subject`) and `data.seq`, DLQ
    /// redeliveries left out.
    pub order_checked: u64,
    /// Of those, how many came with a `seq` below one already delivered for
    /// their key (per-key order broken).
    pub order_violations: u64,
    /// The first few violations, described (`key: id (seq s) after seq t`).
    pub order_violation_examples: Vec<String>,
    /// Keys whose events' *last* acceptances are out of `seq` order (every
    /// 2xx counted, duplicates too; redeliveries left out): an API applying
    /// each accepted item, last write wins, would not end in produced order.
    /// The promise of `ordered = true` (`sink::order`).
    #[serde(default)]
    pub order_last_write_violations: u64,
    #[serde(default)]
    pub order_last_write_examples: Vec<String>,
    /// First writes (an id's first 2xx) carrying the load generator's mark,
    /// DLQ redeliveries included: what the stale-writes check looked at.
    #[serde(default)]
    pub writes_checked: u64,
    /// Of those, how many had a `seq` below the latest one already applied
    /// for their key: an API applying each write per key went back in time
    /// (`sink::order`; an id written again is a duplicate, not counted here).
    /// Courier's per-key order promises 0, through the DLQ too.
    #[serde(default)]
    pub stale_writes: u64,
    /// The first few stale writes, described (`key: id (seq s) written after seq t`).
    #[serde(default)]
    pub stale_write_examples: Vec<String>,
    /// Batch items answered as not applied because an earlier item of their
    /// key in the same request failed (`Behaviour::keep_key_order`).
    #[serde(default)]
    pub batch_items_held_back: u64,
}

/// How much was delivered since the last reset (`GET /audit/delivered`): the
/// totals of the [`Audit`] without its per-id maps, for polling while a
/// backlog drains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveredCount {
    /// Distinct ids answered 2xx.
    pub distinct: u64,
    /// 2xx answers, duplicates included (`distinct` + the duplicates).
    pub total: u64,
    /// Delivery requests, each event of a batch counting as one (`Audit::requests_total`).
    pub requests_total: u64,
    /// Requests to the batch endpoint (`Audit::batch_requests`).
    pub batch_requests: u64,
    /// Non-2xx answers (`Audit::failures_total`).
    pub failures_total: u64,
}

/// What a request looked like: for tests of request mapping and forwarded headers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSample {
    pub method: String,
    /// Path and query, as received (percent-encoding kept).
    pub path: String,
    /// Header names lowercased; `authorization` left out.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body, as text (lossy).
    pub body: String,
}

impl Audit {
    /// Extra 2xx answers beyond the first, summed over all ids.
    pub fn duplicates(&self) -> u64 {
        self.delivered
            .values()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum()
    }

    /// The busiest whole second, in requests.
    pub fn peak_rps(&self) -> u64 {
        self.per_second.iter().copied().max().unwrap_or(0)
    }

    /// The busiest whole second of DLQ redeliveries.
    pub fn peak_redelivery_rps(&self) -> u64 {
        self.per_second_redelivery
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }
}
