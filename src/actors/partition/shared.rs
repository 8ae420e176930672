//! What a partition actor shares with the consumer actor and the process-wide
//! counts, and gives back when it stops or crashes.

use super::Src;
use crate::core::offsets::NextOffset;
use crate::kafka::poller::Buffered;
use crate::metrics::Readiness;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// State that outlives one incarnation of the actor (the consumer actor reads it
/// to recover after a crash).
#[derive(Debug)]
pub(crate) struct PartitionShared {
    /// Last stored watermark per side, -1 when none.
    pub stored: [AtomicI64; 2],
    /// The metadata stored with it (the offsets done above it,
    /// `core::completed`): after a crash the next incarnation skips them.
    meta: [Mutex<String>; 2],
    /// Events this partition counts in `Readiness::held` (given back when the
    /// actor stops or crashes).
    pub held: AtomicI64,
    /// Records (and bytes) routed to this partition's actor and not yet taken in
    /// (its share of `Pipeline::buffered`, given back when the actor stops or
    /// crashes).
    pub buffered: Buffered,
}

impl Default for PartitionShared {
    fn default() -> Self {
        PartitionShared {
            stored: [AtomicI64::new(-1), AtomicI64::new(-1)],
            meta: [Mutex::new(String::new()), Mutex::new(String::new())],
            held: AtomicI64::new(0),
            buffered: Buffered::default(),
        }
    }
}

impl PartitionShared {
    /// Gives back the records routed to the actor that it never took in.
    pub(crate) fn release_buffered(&self, total: &Buffered) {
        self.buffered.release_into(total);
    }

    /// Gives this partition's held events back to the readiness count.
    pub(crate) fn release_held(&self, ready: &Readiness) {
        let n = self.held.swap(0, Ordering::SeqCst);
        ready.held.fetch_sub(n, Ordering::Relaxed);
    }

    /// Records left the fetch budget (begun, or handed back): the poll thread may
    /// fetch again.
    pub(super) fn taken_in(&self, records: usize, bytes: usize, total: &Buffered) {
        self.buffered.sub(records, bytes);
        total.sub(records, bytes);
    }

    pub(super) fn begun(&self, n: usize, ready: &Readiness) {
        ready.begun(n);
        self.held.fetch_add(n as i64, Ordering::Relaxed);
    }

    pub(super) fn finished(&self, n: usize, ready: &Readiness) {
        for _ in 0..n {
            ready.finished();
        }
        self.held.fetch_sub(n as i64, Ordering::Relaxed);
    }

    pub(super) fn set_stored(&self, src: Src, offset: NextOffset, metadata: &str) {
        // The metadata first: whoever reads the new position finds the
        // metadata made for it (or an older one, which `decode` refuses).
        if let Ok(mut m) = self.meta[src.index()].lock() {
            m.clear();
            m.push_str(metadata);
        }
        self.stored[src.index()].store(offset.get(), Ordering::SeqCst);
    }

    /// The last stored position of a side and the metadata stored with it.
    pub(crate) fn stored_with_metadata(&self, src: Src) -> Option<(i64, String)> {
        let meta = self.meta[src.index()].lock().ok()?.clone();
        Some((self.stored(src)?, meta))
    }

    /// Events this partition holds (begun, not finished).
    pub(crate) fn held(&self) -> i64 {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn stored(&self, src: Src) -> Option<i64> {
        let v = self.stored[src.index()].load(Ordering::SeqCst);
        (v >= 0).then_some(v)
    }
}
