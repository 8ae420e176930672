//! A process-wide byte budget shared by the partition machines: the bytes of the
//! events they hold (begun and not yet durable, DLQ records waiting for the drain
//! included).
//!
//! The rule: a record may be taken in only while the budget is not used up
//! (`used < limit`). The use can therefore exceed the limit by at most the one
//! record taken last — which is what lets an event larger than the whole budget
//! still go (never a deadlock), without letting two go past it. A machine that
//! is refused waits with a *waker*: the first give-back that leaves the budget
//! not used up calls it (once), and the machine tries again.
//!
//! No I/O and no clock: an atomic counter and a list of callbacks. What a waker
//! does (the actor sends itself a message) is up to whoever registers it.
//!
//! DLQ records read back and held for their redelivery (most of them not due
//! yet) may hold at most half of the budget, process-wide
//! ([`ByteBudget::dlq_full`]): the other half stays for main p's events, so
//! envelopes waiting out a long back-off never starve the main topic
//! (`core::partition::rewind`).
//!
//! With several destinations (`core::destination`) the budget also counts the
//! bytes each destination's events hold ([`ByteBudget::hold_for`]), so that a
//! destination that is down holds at most its share of it
//! (`core::partition::outage`); the counts are kept by the machines and given
//! back when they finish or are dropped.

use crate::core::destination::{DestinationId, MAX_DESTINATIONS};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// What a record costs against the byte budgets besides its value, key and
/// headers (`kafka::Record::size`): Courier's own state for it (the record, then
/// the decoded event with its strings, the held-events map and ordering lane
/// entries, the delivery queue entry, the completion token). Measured: with
/// 512-byte events the heap held ~2.5–3 KB per event begun (docs/BENCHMARKS.md,
/// "Memory and partitions"). With batching on, `max_in_flight_per_partition`'s
/// default is as many events as `max_in_flight_bytes` holds at this.
pub(crate) const RECORD_OVERHEAD: usize = 2048;

/// Called once when the budget has room again.
pub(crate) type Waker = Box<dyn FnOnce() + Send>;

pub struct ByteBudget {
    limit: u64,
    used: AtomicU64,
    /// Registered wakers (and their count, read without the lock on the hot path).
    waiting: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
    /// Bytes held by each destination's events (several destinations only).
    by_destination: [AtomicU64; MAX_DESTINATIONS],
    /// Bytes held by DLQ records (taken with [`ByteBudget::try_take`] too).
    dlq: AtomicU64,
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudget")
            .field("limit", &self.limit)
            .field("used", &self.used())
            .field("waiting", &self.waiting.load(Ordering::SeqCst))
            .finish()
    }
}

/// Takes `n` from a count of bytes held, never below zero.
fn sub_saturating(count: &AtomicU64, n: u64, order: Ordering) {
    let _ = count.fetch_update(order, order, |h| Some(h.saturating_sub(n)));
}

impl ByteBudget {
    /// A budget of `limit` bytes (at least 1).
    pub(crate) fn new(limit: u64) -> ByteBudget {
        ByteBudget {
            limit: limit.max(1),
            used: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            wakers: Mutex::new(Vec::new()),
            by_destination: std::array::from_fn(|_| AtomicU64::new(0)),
            dlq: AtomicU64::new(0),
        }
    }

    /// `n` more bytes are held by DLQ records (bytes already taken with
    /// [`ByteBudget::try_take`]: this only counts them).
    pub(crate) fn hold_dlq(&self, n: u64) {
        self.dlq.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` bytes of DLQ records are no longer held.
    pub(crate) fn release_dlq(&self, n: u64) {
        sub_saturating(&self.dlq, n, Ordering::SeqCst);
    }

    /// DLQ records hold their half of the budget: another is not begun
    /// (unless its partition holds none: each partition may hold one, so
    /// that its drain's head is known).
    pub(crate) fn dlq_full(&self) -> bool {
        self.dlq.load(Ordering::SeqCst) >= self.dlq_limit()
    }

    /// DLQ records hold at most a quarter of the budget (half their share):
    /// a partition that handed DLQ records back reads DLQ p again.
    pub(crate) fn dlq_has_room(&self) -> bool {
        self.dlq.load(Ordering::SeqCst) <= self.dlq_limit() / 2
    }

    /// What DLQ records may hold: half of the budget (at least 1).
    fn dlq_limit(&self) -> u64 {
        (self.limit / 2).max(1)
    }

    /// `n` more bytes are held by destination `d`'s events (bytes already
    /// taken with [`ByteBudget::try_take`]: this only counts them).
    pub(crate) fn hold_for(&self, d: DestinationId, n: u64) {
        if let Some(held) = self.by_destination.get(d.index()) {
            held.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `n` bytes of destination `d`'s events are no longer held.
    pub(crate) fn release_for(&self, d: DestinationId, n: u64) {
        if let Some(held) = self.by_destination.get(d.index()) {
            sub_saturating(held, n, Ordering::Relaxed);
        }
    }

    /// The bytes destination `d`'s events hold, process-wide.
    pub(crate) fn held_for(&self, d: DestinationId) -> u64 {
        self.by_destination
            .get(d.index())
            .map_or(0, |held| held.load(Ordering::Relaxed))
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// The budget is used up: nothing more is taken in until some is given back.
    pub(crate) fn exhausted(&self) -> bool {
        self.used() >= self.limit
    }

    /// Takes `n` bytes if the budget is not used up; `false` (nothing taken)
    /// otherwise.
    pub(crate) fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used < self.limit).then(|| used.saturating_add(n))
            })
            .is_ok()
    }

    /// Takes `n` bytes whatever the use: memory already held that the budget
    /// must count (a partition's follow state), so that what it admits next
    /// leaves room for it. Given back with [`ByteBudget::give_back`].
    pub(crate) fn charge(&self, n: u64) {
        self.used.fetch_add(n, Ordering::SeqCst);
    }

    /// Gives `n` bytes back; wakes the waiting machines if that leaves room.
    pub(crate) fn give_back(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(n))
            })
            .unwrap_or(0);
        debug_assert!(before >= n, "gave back {n} bytes of {before} taken");
        if self.waiting.load(Ordering::SeqCst) > 0 && !self.exhausted() {
            self.wake_all();
        }
    }

    /// Registers `waker`, to be called once the budget has room; at once if it
    /// has room already (a give-back may have come between the refusal and this
    /// call: no wake-up is lost).
    pub(crate) fn wait(&self, waker: Waker) {
        {
            let mut w = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            w.push(waker);
            self.waiting.store(w.len(), Ordering::SeqCst);
        }
        if !self.exhausted() {
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        let wakers = {
            let mut w = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            self.waiting.store(0, Ordering::SeqCst);
            std::mem::take(&mut *w)
        };
        // Called outside the lock: a waker may take or wait again.
        for wake in wakers {
            wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn dlq_records_hold_at_most_half_and_read_again_at_a_quarter() {
        let b = ByteBudget::new(1_000);
        assert!(!b.dlq_full() && b.dlq_has_room());
        b.hold_dlq(300);
        assert!(!b.dlq_full() && !b.dlq_has_room(), "300 > 250");
        b.hold_dlq(200);
        assert!(b.dlq_full(), "half of the budget");
        b.release_dlq(250);
        assert!(!b.dlq_full() && b.dlq_has_room());
        b.release_dlq(1_000);
        assert!(b.dlq_has_room(), "never below nothing");
    }

    #[test]
    fn takes_while_not_used_up_so_one_oversized_record_still_goes() {
        let b = ByteBudget::new(100);
        assert!(b.try_take(60));
        assert!(b.try_take(60), "60 < 100: taken, the use goes to 120");
        assert_eq!(b.used(), 120);
        assert!(b.exhausted());
        assert!(!b.try_take(1), "used up: nothing more");
        b.give_back(120);
        assert!(b.try_take(1_000), "larger than the whole budget, alone");
        assert!(!b.try_take(1));
        b.give_back(1_000);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_waiter_is_woken_once_when_room_comes_back() {
        let b = Arc::new(ByteBudget::new(10));
        assert!(b.try_take(10));
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        b.wait(Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(woken.load(Ordering::SeqCst), 0, "still used up");
        b.give_back(5);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        b.give_back(5);
        assert_eq!(woken.load(Ordering::SeqCst), 1, "woken once");
    }

    #[test]
    fn a_waiter_registered_after_the_give_back_is_woken_at_once() {
        let b = ByteBudget::new(10);
        let woken = Arc::new(AtomicBool::new(false));
        let w = woken.clone();
        b.wait(Box::new(move || w.store(true, Ordering::SeqCst)));
        assert!(woken.load(Ordering::SeqCst));
    }

    /// Threads taking and giving back: the use never passes the limit by more
    /// than one take, and ends at zero.
    #[test]
    fn concurrent_takes_overshoot_by_at_most_one() {
        let b = Arc::new(ByteBudget::new(1_000));
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (b, peak) = (b.clone(), peak.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let n = 1 + (i * 7 + t) % 300;
                        if b.try_take(n) {
                            peak.fetch_max(b.used(), Ordering::SeqCst);
                            b.give_back(n);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Every take found the use below the limit, so the use stays below the
        // limit plus the largest take, whatever the interleaving.
        assert!(peak.load(Ordering::SeqCst) < 1_000 + 300);
        assert_eq!(b.used(), 0);
    }
}
