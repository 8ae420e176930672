//! What a partition keeps of the registry's answers (`KnownMap`), within
//! `cache_max_bytes`, and at most [`MAX_REFUSALS`] refusals.

use crate::schema_registry::Resolved;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::time::Instant;

/// The most refusals (unknown ids, answers that can never be read, ids not
/// asked for) a partition keeps; past it, the oldest goes.
pub(crate) const MAX_REFUSALS: usize = 1024;

/// The schemas (and refusals) a partition's records named: `Arc`s of the
/// registry cache's, their weights within `cache_max_bytes`, the least
/// recently named leaving first. A schema named by a record handed to the
/// machine and not begun yet stays (the machine begins records late, after a
/// wait for the byte budget, and its decoder must still find the schema): a
/// handed record pins its id until the decoder looks it up. A refusal (an
/// unknown id, a schema that can never be read) is kept
/// `negative_cache_ttl`, then asked again; under pressure it may go even
/// while pinned (its record is then parked `unknown_schema`, parked all the
/// same).
pub(crate) struct KnownMap {
    entries: HashMap<u32, Entry>,
    /// Ids by when they were last named, oldest first.
    order: BTreeMap<u64, u32>,
    tick: u64,
    weight: usize,
    budget: usize,
    /// Refusals by when they expire, as inserted (an id answered again
    /// leaves a stale slot, skipped when it comes up).
    refusals: VecDeque<(Instant, u32)>,
    /// Refusals in `entries`.
    refused: usize,
}

struct Entry {
    schema: Arc<Resolved>,
    weight: usize,
    /// Records handed to the machine naming it and not looked up since (at
    /// least: a record the machine drops unbegun never looks it up).
    pins: Cell<u32>,
    /// Its key in `order`.
    used: u64,
    /// A refusal: when to ask the registry again.
    expires: Option<Instant>,
}

impl KnownMap {
    pub(super) fn new(budget: usize) -> KnownMap {
        KnownMap {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            weight: 0,
            budget,
            refusals: VecDeque::new(),
            refused: 0,
        }
    }

    /// Refusals kept.
    #[cfg(test)]
    pub(crate) fn refusals(&self) -> usize {
        self.refused
    }

    /// The decoder's lookup as the machine begins a record naming `id`: its
    /// schema; that record no longer pins it.
    pub(crate) fn get(&self, id: &u32) -> Option<&Arc<Resolved>> {
        let e = self.entries.get(id)?;
        e.pins.set(e.pins.get().saturating_sub(1));
        Some(&e.schema)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the kept schemas weigh (`Resolved::weight`).
    #[cfg(test)]
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }

    /// Known, and not a refusal due to be asked again.
    pub(super) fn fresh(&self, id: u32, now: Instant) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|e| e.expires.is_none_or(|t| now < t))
    }

    fn touch(&mut self, id: u32) {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(&id) {
            self.order.remove(&e.used);
            e.used = self.tick;
            self.order.insert(self.tick, id);
        }
    }

    /// A record naming `id` goes to the machine.
    pub(super) fn hand_out(&mut self, id: u32) {
        if let Some(e) = self.entries.get(&id) {
            e.pins.set(e.pins.get().saturating_add(1));
        }
        self.touch(id);
    }

    /// The registry's answer for `id` (a refusal kept until `expires`); the
    /// records already handed out keep their pins. Expired refusals no
    /// record pins go first, and the oldest refusals past
    /// [`MAX_REFUSALS`].
    pub(super) fn insert(
        &mut self,
        id: u32,
        schema: Arc<Resolved>,
        expires: Option<Instant>,
        now: Instant,
    ) {
        self.sweep(now);
        let weight = schema.weight();
        let refusal = schema.is_refusal();
        let pins = match self.remove(id) {
            Some(old) => old.pins.get(),
            None => 0,
        };
        self.weight += weight;
        if refusal {
            self.refused += 1;
            if let Some(t) = expires {
                self.refusals.push_back((t, id));
            }
        }
        self.entries.insert(
            id,
            Entry {
                schema,
                weight,
                pins: Cell::new(pins),
                used: 0,
                expires,
            },
        );
        self.touch(id);
        while self.refused > MAX_REFUSALS {
            let Some((t, old)) = self.refusals.pop_front() else {
                break;
            };
            if self.is_refusal_until(old, t) {
                self.remove(old);
            }
        }
        // Stale slots (ids answered again) are bounded too.
        if self.refusals.len() > 2 * MAX_REFUSALS {
            let entries = &self.entries;
            self.refusals.retain(|(t, id)| {
                entries
                    .get(id)
                    .is_some_and(|e| e.schema.is_refusal() && e.expires == Some(*t))
            });
        }
    }

    /// Whether `id` is the refusal that expires at `t`.
    fn is_refusal_until(&self, id: u32, t: Instant) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|e| e.schema.is_refusal() && e.expires == Some(t))
    }

    /// Expired refusals that no record pins, gone. (A pinned one stays for
    /// the record that names it, until evicted or answered again.)
    fn sweep(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.refusals.front() {
            if t > now {
                return;
            }
            self.refusals.pop_front();
            let unpinned = self.entries.get(&id).is_some_and(|e| e.pins.get() == 0);
            if self.is_refusal_until(id, t) && unpinned {
                self.remove(id);
            }
        }
    }

    /// `id`'s entry, out of the map and its books.
    fn remove(&mut self, id: u32) -> Option<Entry> {
        let e = self.entries.remove(&id)?;
        self.order.remove(&e.used);
        self.weight -= e.weight;
        if e.schema.is_refusal() {
            self.refused -= 1;
        }
        Some(e)
    }

    /// Down to the budget, least recently named first: entries no record
    /// pins, then pinned refusals. Pinned schemas stay.
    pub(super) fn evict(&mut self) {
        for pinned_refusals in [false, true] {
            if self.weight <= self.budget {
                return;
            }
            let mut over = self.weight - self.budget;
            let mut victims = Vec::new();
            for (&used, id) in &self.order {
                let Some(e) = self.entries.get(id) else {
                    continue;
                };
                let free = if pinned_refusals {
                    e.schema.is_refusal()
                } else {
                    e.pins.get() == 0
                };
                if free {
                    victims.push((used, *id));
                    over = over.saturating_sub(e.weight);
                    if over == 0 {
                        break;
                    }
                }
            }
            for (_, id) in victims {
                self.remove(id);
            }
        }
    }
}
