//! What a partition keeps of the registry's answers (`KnownMap`), within
//! `cache_max_bytes`.

use crate::schema_registry::Resolved;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::time::Instant;

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
        }
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
    /// records already handed out keep their pins.
    pub(super) fn insert(&mut self, id: u32, schema: Arc<Resolved>, expires: Option<Instant>) {
        let weight = schema.weight();
        let pins = match self.entries.remove(&id) {
            Some(old) => {
                self.order.remove(&old.used);
                self.weight -= old.weight;
                old.pins.get()
            }
            None => 0,
        };
        self.weight += weight;
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
            for (used, id) in victims {
                self.order.remove(&used);
                if let Some(e) = self.entries.remove(&id) {
                    self.weight -= e.weight;
                }
            }
        }
    }
}
