//! The books: the state shared by the handle and the handlers ([`Shared`]),
//! the bookkeeping behind its one mutex ([`Book`]), and the guards a
//! delivery holds while it is handled ([`InFlight`], [`CapacitySlot`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Instant;

use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

use super::{batch, introspect, order, tls, Audit, Behaviour, DeliveredCount, RequestSample};

/// State shared by the handle and the request handlers.
pub(super) struct Shared {
    /// Swapped whole; a request takes an `Arc` snapshot, never a deep clone.
    pub(super) behaviour: RwLock<Arc<Behaviour>>,
    /// All bookkeeping, behind one mutex held only for a few map operations.
    pub(super) book: Mutex<Book>,
    /// Distinct ids answered 2xx; written under the `book` lock, read lock-free.
    pub(super) delivered_count: AtomicU64,
    pub(super) in_flight: AtomicU64,
    /// Deliveries holding a slot of `Behaviour::capacity`.
    pub(super) capacity_used: AtomicU64,
    pub(super) peak: AtomicU64,
    pub(super) record_bodies: AtomicBool,
    pub(super) record_requests: AtomicBool,
    pub(super) http2_requests: AtomicU64,
    pub(super) handshakes: Arc<tls::HandshakeStats>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) introspector: introspect::Introspector,
}

/// The mutable part of the audit.
pub(super) struct Book {
    /// Bumped by every reset; requests remember the generation they were recorded in.
    pub(super) generation: u64,
    /// Start of `per_second[0]`.
    pub(super) epoch: Instant,
    pub(super) delivered: BookMap<u32>,
    pub(super) attempts: BookMap<u32>,
    pub(super) order: Vec<String>,
    pub(super) requests_total: u64,
    pub(super) failures_total: u64,
    pub(super) bad_requests: u64,
    pub(super) per_second: Vec<u64>,
    pub(super) per_second_redelivery: Vec<u64>,
    pub(super) per_second_over_capacity: Vec<u64>,
    pub(super) bodies_sample: HashMap<String, Value>,
    pub(super) requests_sample: HashMap<String, RequestSample>,
    pub(super) key_order: order::KeyOrder,
    pub(super) batch: batch::BatchBook,
}

/// A map of the books keyed by event id or key. The ids are the stand-in's
/// own clients' (tests and benches), so a fast hash (foldhash) is safe here;
/// every request books several entries under the one lock.
pub(super) type BookMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The most events a reset may reserve room for (`POST /reset?expect=`).
pub(super) const MAX_EXPECT: usize = 50_000_000;

impl Book {
    /// Fresh books with room for `expect` events: a map that grows rehashes
    /// every entry under the books' lock, which stalls every request for as
    /// long (tens of ms at 100,000 ids: it showed as a pause in the benches
    /// at 57,344 and 114,688 deliveries, where the id maps grow).
    pub(super) fn new(generation: u64, expect: usize) -> Book {
        Book {
            generation,
            epoch: Instant::now(),
            delivered: BookMap::with_capacity_and_hasher(expect, Default::default()),
            attempts: BookMap::with_capacity_and_hasher(expect, Default::default()),
            order: Vec::with_capacity(expect),
            requests_total: 0,
            failures_total: 0,
            bad_requests: 0,
            per_second: Vec::new(),
            per_second_redelivery: Vec::new(),
            per_second_over_capacity: Vec::new(),
            bodies_sample: HashMap::new(),
            requests_sample: HashMap::new(),
            key_order: order::KeyOrder::with_capacity(expect),
            batch: batch::BatchBook::default(),
        }
    }

    /// Books a well-formed delivery of `id`; returns its attempt number (1-based).
    pub(super) fn attempt(&mut self, id: &str, received: Instant, body: Option<Value>) -> u32 {
        self.count_request(received);
        let attempt = match self.attempts.get_mut(id) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                self.attempts.insert(id.to_owned(), 1);
                1
            }
        };
        if let Some(body) = body {
            self.bodies_sample.insert(id.to_owned(), body);
        }
        attempt
    }

    /// Books the answer to a delivery of `id`, checking its key's order at its
    /// first delivery (`mark`: none for events without one). A DLQ
    /// `redelivery` counts in the stale-writes check only (`sink::order`).
    /// True if it is the id's first 2xx.
    pub(super) fn answer(
        &mut self,
        id: String,
        status: StatusCode,
        mark: Option<&order::Mark>,
        redelivery: bool,
    ) -> bool {
        if !status.is_success() {
            self.failures_total += 1;
            return false;
        }
        if let Some(mark) = mark.filter(|_| !redelivery) {
            self.key_order.accepted(mark);
        }
        let first = match self.delivered.get_mut(&id) {
            Some(n) => {
                *n += 1;
                false
            }
            None => {
                if let Some(mark) = mark {
                    self.key_order.first_write(&id, mark, redelivery);
                    if !redelivery {
                        self.key_order.first_delivery(&id, mark);
                    }
                }
                self.delivered.insert(id.clone(), 1);
                true
            }
        };
        self.order.push(id);
        first
    }

    pub(super) fn count_redelivery(&mut self, received: Instant) {
        let second = received.saturating_duration_since(self.epoch).as_secs() as usize;
        if self.per_second_redelivery.len() <= second {
            self.per_second_redelivery.resize(second + 1, 0);
        }
        self.per_second_redelivery[second] += 1;
    }

    pub(super) fn count_request(&mut self, received: Instant) {
        self.requests_total += 1;
        let second = received.saturating_duration_since(self.epoch).as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
    }
}

impl Shared {
    pub(super) fn book(&self) -> MutexGuard<'_, Book> {
        // Nothing panics while holding the lock; if something ever did, the books
        // are still the best information there is.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn behaviour(&self) -> Arc<Behaviour> {
        self.behaviour
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn audit(&self) -> Audit {
        let book = self.book();
        let last_writes = book.key_order.last_write_violations();
        Audit {
            delivered: book
                .delivered
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            attempts: book.attempts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            order: book.order.clone(),
            requests_total: book.requests_total,
            failures_total: book.failures_total,
            bad_requests: book.bad_requests,
            max_concurrent: self.peak.load(Relaxed),
            per_second: book.per_second.clone(),
            per_second_redelivery: book.per_second_redelivery.clone(),
            per_second_over_capacity: book.per_second_over_capacity.clone(),
            bodies_sample: book.bodies_sample.clone(),
            http2_requests: self.http2_requests.load(Relaxed),
            tls_handshake_failures: self.handshakes.failures.load(Relaxed),
            tls_first_failure_unix_ms: self.handshakes.first_failure_unix_ms.load(Relaxed),
            requests_sample: book.requests_sample.clone(),
            batch_requests: book.batch.requests,
            batch_items: book.batch.items,
            batch_singles: book.batch.singles,
            batch_max_items: book.batch.max_items,
            batch_refused_413: book.batch.refused_413,
            batch_refused_whole: book.batch.refused_whole,
            batch_key_mismatches: book.batch.key_mismatches,
            batch_keyless: book.batch.keyless,
            batch_same_key_items: book.batch.same_key_items,
            per_second_batches: book.batch.per_second.clone(),
            order_checked: book.key_order.checked,
            order_violations: book.key_order.violations,
            order_violation_examples: book.key_order.examples.clone(),
            order_last_write_violations: last_writes.0,
            order_last_write_examples: last_writes.1,
            writes_checked: book.key_order.writes_checked,
            stale_writes: book.key_order.stale_writes,
            stale_write_examples: book.key_order.stale_examples.clone(),
            batch_items_held_back: book.batch.held_back,
        }
    }

    pub(super) fn delivered(&self) -> DeliveredCount {
        let book = self.book();
        DeliveredCount {
            distinct: book.delivered.len() as u64,
            total: book.order.len() as u64,
            requests_total: book.requests_total,
            batch_requests: book.batch.requests,
            failures_total: book.failures_total,
        }
    }

    /// Clears the books, with room for `expect` events ([`Book::new`]).
    pub(super) fn reset(&self, expect: usize) {
        let mut book = self.book();
        *book = Book::new(book.generation + 1, expect);
        self.delivered_count.store(0, Relaxed);
        self.peak.store(0, Relaxed);
        self.http2_requests.store(0, Relaxed);
    }

    pub(super) fn record_bad_request(&self, received: Instant) {
        let mut book = self.book();
        book.count_request(received);
        book.bad_requests += 1;
        book.failures_total += 1;
    }

    /// Books a well-formed request; returns its attempt number for the id (1-based)
    /// and the generation it belongs to.
    pub(super) fn record_attempt(
        &self,
        id: &str,
        received: Instant,
        body: Option<Value>,
    ) -> (u32, u64) {
        let mut book = self.book();
        let attempt = book.attempt(id, received, body);
        (attempt, book.generation)
    }

    pub(super) fn record_answer(
        &self,
        id: String,
        generation: u64,
        status: StatusCode,
        mark: Option<&order::Mark>,
        redelivery: bool,
    ) {
        self.record_answers(generation, redelivery, [(id, status, mark)]);
    }

    /// Books the answers of one request's deliveries (a batch's items, in
    /// order) under one lock; `mark` and `redelivery` as in [`Book::answer`].
    pub(super) fn record_answers<'m>(
        &self,
        generation: u64,
        redelivery: bool,
        answers: impl IntoIterator<Item = (String, StatusCode, Option<&'m order::Mark>)>,
    ) {
        let mut book = self.book();
        if book.generation != generation {
            return; // recorded before a reset: not part of the current books
        }
        for (id, status, mark) in answers {
            if book.answer(id, status, mark, redelivery) {
                self.delivered_count.fetch_add(1, Relaxed);
            }
        }
    }
}

pub(super) fn write(
    lock: &RwLock<Arc<Behaviour>>,
) -> std::sync::RwLockWriteGuard<'_, Arc<Behaviour>> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a request as "being handled" for as long as it lives, including when the
/// handler is dropped early because the client hung up.
pub(super) struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    pub(super) fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Relaxed) + 1;
        shared.peak.fetch_max(now, Relaxed);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A slot of the hidden capacity (`Behaviour::capacity`), held while a
/// delivery is handled.
pub(super) struct CapacitySlot<'a>(Option<&'a Shared>);

impl<'a> CapacitySlot<'a> {
    /// A slot, or `None` when the capacity is full (the request is counted in
    /// `per_second_over_capacity`).
    pub(super) fn take(shared: &'a Shared, received: Instant) -> Option<CapacitySlot<'a>> {
        let Some(capacity) = shared.behaviour().capacity else {
            return Some(CapacitySlot(None));
        };
        if shared.capacity_used.fetch_add(1, Relaxed) < capacity {
            return Some(CapacitySlot(Some(shared)));
        }
        shared.capacity_used.fetch_sub(1, Relaxed);
        let mut book = shared.book();
        let second = received.saturating_duration_since(book.epoch).as_secs() as usize;
        if book.per_second_over_capacity.len() <= second {
            book.per_second_over_capacity.resize(second + 1, 0);
        }
        book.per_second_over_capacity[second] += 1;
        None
    }
}

impl Drop for CapacitySlot<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.capacity_used.fetch_sub(1, Relaxed);
        }
    }
}

impl Shared {
    pub(super) fn new(behaviour: Behaviour) -> (Arc<Shared>, watch::Receiver<bool>) {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            behaviour: RwLock::new(Arc::new(behaviour)),
            book: Mutex::new(Book::new(0, 0)),
            delivered_count: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            capacity_used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            record_bodies: AtomicBool::new(false),
            record_requests: AtomicBool::new(false),
            http2_requests: AtomicU64::new(0),
            handshakes: Arc::default(),
            shutdown,
            introspector: introspect::Introspector::default(),
        });
        (shared, shutdown_rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DLQ redelivery is a write like any other for the stale-writes
    /// check, left out of the first-delivery check; an id written again is a
    /// duplicate, not a stale write.
    #[test]
    fn a_redelivery_behind_its_key_is_a_stale_write_a_rewrite_a_duplicate() {
        let mut book = Book::new(1, 10);
        let now = Instant::now();
        let mark = |seq| order::Mark {
            key: "key-0".into(),
            seq,
        };
        for (id, seq, redelivery) in [("e-1", 1, false), ("e-0", 0, true), ("e-1", 1, false)] {
            book.attempt(id, now, None);
            book.answer(id.into(), StatusCode::OK, Some(&mark(seq)), redelivery);
        }
        let k = &book.key_order;
        assert_eq!((k.writes_checked, k.stale_writes), (2, 1));
        assert_eq!((k.checked, k.violations), (1, 0));
        assert_eq!(book.delivered.get("e-1"), Some(&2));
    }

    #[test]
    fn books_reset_for_n_events_do_not_grow_while_they_book_them() {
        let mut book = Book::new(1, 10_000);
        let caps = |b: &Book| {
            (
                b.delivered.capacity(),
                b.attempts.capacity(),
                b.order.capacity(),
            )
        };
        let before = caps(&book);
        assert!(before.0 >= 10_000 && before.1 >= 10_000 && before.2 >= 10_000);
        let now = Instant::now();
        for i in 0..10_000 {
            let id = format!("ev-{i}");
            let mark = order::Mark {
                key: format!("key-{}", i % 5_000),
                seq: i,
            };
            assert_eq!(book.attempt(&id, now, None), 1);
            assert!(book.answer(id, StatusCode::OK, Some(&mark), false));
        }
        assert_eq!(caps(&book), before, "a map or the order grew");
        assert_eq!(book.delivered.len(), 10_000);
    }
}
