//! Records from the poll thread to the partition actors: split by partition
//! (keeping order), and fenced after a seek — records of the old read
//! position that were already polled are dropped until the first record of
//! the new read position arrives.

use super::{ConsumerState, PartitionMsg};
use crate::kafka::Record;
use std::collections::HashMap;

impl ConsumerState {
    /// Splits a batch by partition (keeping order) and hands each part over.
    pub(super) fn route(&mut self, records: Vec<Record>) {
        // Dropped records were never going to be taken in by an actor.
        let (mut dropped, mut dropped_bytes) = (0, 0);
        let mut by_part: HashMap<i32, Vec<Record>> = HashMap::new();
        for r in records {
            let Some(part) = self.parts.get_mut(&r.partition) else {
                // Not ours (any more): not stored, so re-read by the owner.
                dropped += 1;
                dropped_bytes += r.size();
                continue;
            };
            let side = r.src.index();
            if let Some(f) = part.fence[side] {
                if r.offset > f {
                    // Polled before the seek: the re-read brings it again.
                    dropped += 1;
                    dropped_bytes += r.size();
                    continue;
                }
                part.fence[side] = None;
            }
            part.first_forwarded[side].get_or_insert(r.offset);
            part.last_forwarded[side] = Some(r.offset);
            by_part.entry(r.partition).or_default().push(r);
        }
        for (p, recs) in by_part {
            let bytes = recs.iter().map(Record::size).sum();
            match self.parts.get(&p) {
                Some(part) => {
                    part.shared.buffered.add(recs.len(), bytes);
                    // If the actor just died, the records are lost with it;
                    // recovery seeks back to the watermark, which is below them.
                    let _ = part.actor.send_message(PartitionMsg::Records(recs));
                }
                None => {
                    dropped += recs.len();
                    dropped_bytes += bytes;
                }
            }
        }
        self.pipeline.buffered.sub(dropped, dropped_bytes);
    }
}
