//! Registry formats (`input.format = "avro"`, `"protobuf"`, `"json_schema"`):
//! a main-topic record is decoded (`decode`) and handed to the partition
//! machine only once the schema its header names is at hand, so decoding
//! stays synchronous. A record whose schema is not
//! known yet waits here with every record after it (offset order is kept);
//! main p is paused meanwhile (the machine is told: `Input::SchemaWait`) and
//! the schema fetched off the actor (one fetch
//! per id for the whole process, `schema_registry`). A registry that does not
//! answer (down, 5xx, timeout) is systemic: the fetch is asked again with a
//! back-off and the partition waits — nothing is parked for it, nothing
//! stored past the waiting records (they were never begun). Other partitions
//! go on: each waits in its own task, and the actor's mailbox stays open for
//! completions, drains and timers. An answer that can never be a schema (an
//! unknown id, a refused one: `core::schema::registry`) ends the wait too: the
//! machine parks the records naming it with its reason.
//!
//! An id neither this partition nor the process's cache knows is asked for
//! only while the registry has not refused this partition too many ids
//! (`core::schema::unknown_ids`: 4 at once, one more each 15 s); past that,
//! its records go to the machine with no answer kept for it (nothing kept
//! per id), whose decoder parks them `unknown_schema` ("not asked"), and
//! the partition does not wait.

use super::PartitionMsg;
use crate::core::partition::Src;
use crate::core::schema::unknown_ids::{Ask, UnknownIds};
use crate::kafka::Record;
use crate::schema_registry::{Resolved, SchemaRegistry};
use ractor::ActorRef;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

mod known;
pub(super) use known::KnownMap;

/// Schemas this partition's records named, shared with its decoder.
pub(super) type Known = Arc<Mutex<KnownMap>>;

pub(super) struct SchemaGate {
    registry: Arc<SchemaRegistry>,
    pub known: Known,
    /// How long a refusal is kept (`negative_cache_ttl`).
    negative_ttl: Duration,
    /// Records waiting for a schema, in offset order.
    pending: VecDeque<Record>,
    /// The id being fetched.
    waiting: Option<u32>,
    /// It was in the process's cache when asked for (no round trip).
    waiting_cached: bool,
    /// How many refusals the registry may still give (`core::schema::unknown_ids`).
    unknown: UnknownIds,
    /// Where this partition's clock for `unknown` starts.
    epoch: Instant,
    /// Whether a record waited when the machine was last told
    /// (`Input::SchemaWait`).
    told_waiting: bool,
    /// Draining: nothing waits any more (the next owner re-reads what did).
    closed: bool,
    partition: i32,
}

/// The schema id a record names, when it is framed (an unframed record goes
/// to the machine, which parks it `not_registry_framed`).
fn schema_id(r: &Record) -> Option<u32> {
    crate::core::schema::schema_id(r.payload.as_deref()?)
}

impl SchemaGate {
    pub(super) fn new(registry: Arc<SchemaRegistry>, partition: i32) -> SchemaGate {
        SchemaGate {
            known: Arc::new(Mutex::new(KnownMap::new(registry.cache_max_bytes()))),
            negative_ttl: registry.negative_ttl(),
            registry,
            pending: VecDeque::new(),
            waiting: None,
            waiting_cached: false,
            unknown: UnknownIds::default(),
            epoch: Instant::now(),
            told_waiting: false,
            closed: false,
            partition,
        }
    }

    pub(super) fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// After records were taken in or a schema came: whether a record waits
    /// now, if that changed since the machine was last told (it decides main
    /// p's reading: `Input::SchemaWait`).
    pub(super) fn wait_changed(&mut self) -> Option<bool> {
        let waiting = self.is_waiting();
        (std::mem::replace(&mut self.told_waiting, waiting) != waiting).then_some(waiting)
    }

    /// Takes records in; returns those the machine may have now, and the id to
    /// fetch when a wait begins.
    pub(super) fn admit(&mut self, records: Vec<Record>) -> (Vec<Record>, Option<u32>) {
        self.admit_with(records, None)
    }

    /// [`Self::admit`], `just` known whatever its age (its answer has just
    /// come: the records waiting for it take it).
    fn admit_with(
        &mut self,
        records: Vec<Record>,
        just: Option<u32>,
    ) -> (Vec<Record>, Option<u32>) {
        if self.closed {
            return (records, None);
        }
        // DLQ records are envelopes: they never wait here.
        let (mut out, main): (Vec<Record>, Vec<Record>) =
            records.into_iter().partition(|r| r.src == Src::Dlq);
        self.pending.extend(main);
        if self.waiting.is_some() {
            return (out, None);
        }
        let now = Instant::now();
        let Ok(mut known) = self.known.lock() else {
            return (out, None);
        };
        while let Some(r) = self.pending.front() {
            match schema_id(r) {
                None => {}
                Some(id) if just == Some(id) || known.fresh(id, now) => known.hand_out(id),
                Some(id) => {
                    let cached = self.registry.is_cached(id);
                    match self.unknown.ask(cached, now - self.epoch) {
                        Ask::Fetch => {
                            self.waiting = Some(id);
                            self.waiting_cached = cached;
                            metrics::gauge!(crate::schema_registry::WAITING).increment(1.0);
                            return (out, Some(id));
                        }
                        // Handed out with no answer kept: its decoder
                        // parks it `unknown_schema`, "not asked".
                        Ask::Park => {
                            metrics::counter!(crate::schema_registry::FETCHES, "result" => "not_asked")
                                .increment(1);
                        }
                    }
                }
            }
            out.extend(self.pending.pop_front());
        }
        (out, None)
    }

    /// The fetch for `id` ended: its schema (or why it can never be read) is known.
    pub(super) fn resolved(
        &mut self,
        id: u32,
        schema: Arc<Resolved>,
    ) -> (Vec<Record>, Option<u32>) {
        let now = Instant::now();
        let expires = schema.is_refusal().then(|| now + self.negative_ttl);
        if schema.is_refusal() && self.waiting == Some(id) && !self.waiting_cached {
            self.unknown.refused(now - self.epoch);
        }
        if let Ok(mut k) = self.known.lock() {
            k.insert(id, schema, expires, now);
        }
        if self.waiting == Some(id) {
            self.waiting = None;
            metrics::gauge!(crate::schema_registry::WAITING).decrement(1.0);
        }
        let next = self.admit_with(Vec::new(), Some(id));
        // After the records taking it are handed out (and pin it).
        if let Ok(mut k) = self.known.lock() {
            k.evict();
        }
        next
    }

    /// Draining: the waiting records are dropped unbegun (never stored past).
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.pending.clear();
        if self.waiting.take().is_some() {
            metrics::gauge!(crate::schema_registry::WAITING).decrement(1.0);
        }
    }

    /// Fetches `id` off the actor, again after a back-off while the registry
    /// does not answer, until it answers or the actor is gone.
    pub(super) fn fetch(&self, id: u32, me: ActorRef<PartitionMsg>) {
        let registry = self.registry.clone();
        let partition = self.partition;
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(250);
            loop {
                match registry.get(id).await {
                    Ok(schema) => {
                        let _ = me.send_message(PartitionMsg::Schema { id, schema });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(partition, schema_id = id, error = %e, retry_in = ?delay, "schema registry: the partition waits for this schema");
                    }
                }
                tokio::time::sleep(delay).await;
                if me.get_status() != ractor::ActorStatus::Running {
                    return;
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
    }
}

impl Drop for SchemaGate {
    fn drop(&mut self) {
        if self.waiting.take().is_some() {
            metrics::gauge!(crate::schema_registry::WAITING).decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests;
