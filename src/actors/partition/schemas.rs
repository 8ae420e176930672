//! Registry formats (`input.format = "avro"`, `"protobuf"`, `"json_schema"`):
//! a main-topic record reaches the partition machine only once the schema its
//! header names is at hand, so the machine's decoding stays synchronous and
//! pure. A record whose schema is not
//! known yet waits here with every record after it (offset order is kept);
//! main p is paused meanwhile and the schema fetched off the actor (one fetch
//! per id for the whole process, `schema_registry`). A registry that does not
//! answer (down, 5xx, timeout) is systemic: the fetch is asked again with a
//! back-off and the partition waits — nothing is parked for it, nothing
//! stored past the waiting records (they were never begun). Other partitions
//! go on: each waits in its own task, and the actor's mailbox stays open for
//! completions, drains and timers.

use super::PartitionMsg;
use crate::kafka::Record;
use crate::schema_registry::{Resolved, SchemaRegistry};
use ractor::ActorRef;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Schemas this partition's records named, shared with its decoder. Entries
/// are `Arc`s of the registry cache's; kept for the partition's life (a
/// partition names a handful of ids), so a record the machine begins late
/// (after a wait for the byte budget) still finds its schema.
pub type Known = Arc<Mutex<HashMap<u32, Arc<Resolved>>>>;

pub struct SchemaGate {
    registry: Arc<SchemaRegistry>,
    pub known: Known,
    /// Records waiting for a schema, in offset order.
    pending: VecDeque<Record>,
    /// The id being fetched.
    waiting: Option<u32>,
    /// What the machine last asked of main p's reading (applied when the wait ends).
    pub machine_reading: bool,
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
    pub fn new(registry: Arc<SchemaRegistry>, partition: i32) -> SchemaGate {
        SchemaGate {
            registry,
            known: Known::default(),
            pending: VecDeque::new(),
            waiting: None,
            machine_reading: true,
            closed: false,
            partition,
        }
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    fn is_known(&self, id: u32) -> bool {
        self.known
            .lock()
            .map(|k| k.contains_key(&id))
            .unwrap_or(false)
    }

    /// Takes records in; returns those the machine may have now, and the id to
    /// fetch when a wait begins.
    pub fn admit(&mut self, records: Vec<Record>) -> (Vec<Record>, Option<u32>) {
        if self.closed {
            return (records, None);
        }
        // DLQ records are envelopes: they never wait here.
        let (mut out, main): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| r.dlq);
        self.pending.extend(main);
        if self.waiting.is_some() {
            return (out, None);
        }
        while let Some(r) = self.pending.front() {
            match schema_id(r) {
                Some(id) if self.is_known(id) => {}
                None => {}
                Some(id) => {
                    self.waiting = Some(id);
                    metrics::gauge!(crate::schema_registry::WAITING).increment(1.0);
                    return (out, Some(id));
                }
            }
            out.extend(self.pending.pop_front());
        }
        (out, None)
    }

    /// The fetch for `id` ended: its schema (or its absence) is known.
    pub fn resolved(&mut self, id: u32, schema: Arc<Resolved>) -> (Vec<Record>, Option<u32>) {
        if let Ok(mut k) = self.known.lock() {
            k.insert(id, schema);
        }
        if self.waiting == Some(id) {
            self.waiting = None;
            metrics::gauge!(crate::schema_registry::WAITING).decrement(1.0);
        }
        self.admit(Vec::new())
    }

    /// Draining: the waiting records are dropped unbegun (never stored past).
    pub fn close(&mut self) {
        self.closed = true;
        self.pending.clear();
        if self.waiting.take().is_some() {
            metrics::gauge!(crate::schema_registry::WAITING).decrement(1.0);
        }
    }

    /// Fetches `id` off the actor, again after a back-off while the registry
    /// does not answer, until it answers or the actor is gone.
    pub fn fetch(&self, id: u32, me: ActorRef<PartitionMsg>) {
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
mod tests {
    use super::*;
    use crate::config::schema_registry::SchemaRegistryConfig;

    fn rec(offset: i64, dlq: bool, payload: &[u8]) -> Record {
        Record {
            partition: 0,
            offset,
            dlq,
            key: None,
            payload: Some(bytes::Bytes::copy_from_slice(payload)),
            timestamp_ms: None,
            headers: None,
        }
    }

    fn framed(id: u32) -> Vec<u8> {
        let mut v = crate::core::schema::frame::header(id).to_vec();
        v.push(0);
        v
    }

    fn offsets(rs: &[Record]) -> Vec<i64> {
        rs.iter().map(|r| r.offset).collect()
    }

    fn gate() -> SchemaGate {
        let registry = SchemaRegistry::new(
            &SchemaRegistryConfig {
                url: "http://127.0.0.1:1".into(),
                ..Default::default()
            },
            crate::core::input::InputFormat::Avro,
        );
        SchemaGate::new(Arc::new(registry), 0)
    }

    #[test]
    fn records_wait_behind_an_unknown_schema_in_offset_order() {
        let mut g = gate();
        // Unframed records go on (the machine parks them); the first record
        // naming an unresolved id stops everything after it on main p.
        let (now, fetch) = g.admit(vec![
            rec(0, false, b"{}"),
            rec(1, false, &framed(7)),
            rec(2, false, b"{}"),
            rec(3, false, &framed(8)),
        ]);
        assert_eq!((offsets(&now), fetch), (vec![0], Some(7)));
        assert!(g.is_waiting());
        // While waiting: main records queue, DLQ records (envelopes) pass.
        let (now, fetch) = g.admit(vec![rec(4, false, &framed(7)), rec(0, true, &framed(7))]);
        assert_eq!((offsets(&now), now[0].dlq, fetch), (vec![0], true, None));
        // 7 resolved: 1, 2 go, then 3 waits for 8.
        let (now, fetch) = g.resolved(7, Arc::new(Resolved::Unknown));
        assert_eq!((offsets(&now), fetch), (vec![1, 2], Some(8)));
        let (now, fetch) = g.resolved(8, Arc::new(Resolved::Unknown));
        assert_eq!((offsets(&now), fetch), (vec![3, 4], None));
        assert!(!g.is_waiting());
        // Known ids pass at once.
        let (now, fetch) = g.admit(vec![rec(5, false, &framed(8))]);
        assert_eq!((offsets(&now), fetch), (vec![5], None));
    }

    #[test]
    fn a_drain_drops_the_waiting_records_unbegun() {
        let mut g = gate();
        let (_, fetch) = g.admit(vec![rec(0, false, &framed(7)), rec(1, false, &framed(7))]);
        assert_eq!(fetch, Some(7));
        g.close();
        assert!(!g.is_waiting());
        // A late answer hands nothing over; later records go to the machine
        // (which ignores them while draining).
        assert!(g.resolved(7, Arc::new(Resolved::Unknown)).0.is_empty());
        assert_eq!(
            offsets(&g.admit(vec![rec(2, false, &framed(9))]).0),
            vec![2]
        );
    }
}
