//! The offsets completed above the watermark, encoded for a commit's metadata.
//!
//! The committed offset of a partition is its watermark: the lowest unfinished
//! offset. Everything above it that was already finished would be delivered a
//! second time by the next owner. So, like Confluent's Parallel Consumer, Courier
//! commits with each offset a compact list of the offsets already done above it;
//! the next owner skips them and redelivers only what was really in flight.
//!
//! Format (ASCII, within the broker's `offset.metadata.max.bytes`, read at start,
//! 4,096 by default): `c2:`, the identity of the log it was made for (the
//! topic's id, Kafka's URL-safe base64 UUID), `:`, then URL-safe base64 (no
//! padding) of LEB128 varints —
//! the watermark `W`, then run lengths alternating *unfinished*, *done*,
//! *unfinished*, … covering `[W, W + Σ runs)`. The first run is unfinished (`W`
//! itself is, by definition). Offsets past the last run are unknown, never done.
//!
//! Safety: decoding only ever yields offsets that were done when the metadata
//! was made, and only for the log and the watermark it was made for (a metadata
//! string whose topic id differs from the topic's id now — the topic was deleted
//! and recreated under the same name — or whose `W` differs from the committed
//! offset is ignored; so is one without an identity, `c1`, or when the topic's id
//! is not known). When the encoding would not
//! fit, runs are dropped from the end: fewer offsets are skipped (more duplicates),
//! never a wrong one.
//!
//! Reading it back: at an assignment, [`assess`]; after a partition actor
//! crashed, [`after_crash`] (`crash.rs`: where the next incarnation starts,
//! what it skips, whether the side is read again).
//!
//! # Invariant I20: metadata identity
//!
//! *Enforced in* `src/core/completed.rs`, `src/actors/consumer/recovery.rs`, `src/kafka/identity.rs`
//! (metadata identity, cap, crash). Metadata `c2:<topic id>:…` is bound to the topic's id
//! (every store carries it, with nothing done above the watermark too, so the *position* is
//! bound as well: a committed position whose metadata names another id was made for another
//! log, by an owner that missed a recreation, and the partition is read from its log's start
//! instead, see I18), read at each assignment with DescribeTopics (rdkafka 0.39 has no safe API for topic ids:
//! raw `rd_kafka_DescribeTopics`/`rd_kafka_TopicDescription_topic_id`); `decode` refuses
//! another id, no id, or the id-less `c1` (one round of duplicates after the upgrade, never a
//! wrong skip). When the id cannot be read at the assignment (`completed::assess` →
//! `SideStart::verify`), nothing the committed metadata names is skipped; if that metadata
//! names a log, nothing is stored for the side until a lag check reads the id (the same:
//! stores resume, naming it; another: the partition is read from its log's start); naming
//! none, the position is taken as Kafka takes any committed offset. After a position reset
//! (I18) a side's commits name the new log once the second lag check after the reset read
//! its id (the first may predate the reset's records; about 2 s); until then they carry no
//! metadata, and an idle side that learns its log's id stores again. Its cap is the smallest
//! `offset.metadata.max.bytes` of the brokers
//! (DescribeConfigs at start; Kafka's 4,096 if unreadable, logged). After a partition actor
//! crashes, the re-read skips what the crashed incarnation's last stored metadata names
//! (`PartitionShared` keeps it with the stored position). Leader epochs (a truncation that
//! rewrote offsets above `W`) are not bound yet: rdkafka 0.39 exposes them only through raw
//! calls on messages and partition lists. A truncation moves the position back, which I18
//! handles whatever the cause; what is not detected is a truncation that removed offsets
//! Courier had already committed past and that were then rewritten with other records (an
//! unclean leader election losing acknowledged writes): no broker here can produce one on
//! demand.
//!
//! *Tested by:* `core::completed` unit tests (another id, no id, `c1` refused; the budget
//! counts the id; `assess` with an unreadable id); `core::partition::log_tests` (commits after
//! a reset name the new id: seen failing with `None`; an idle side commits the log it
//! learns); the recreation tests of `tests/positions.rs` wait until the committed metadata
//! names the new topic id; `tests/positions.rs::metadata_of_a_recreated_topic_skips_nothing` (old
//! metadata committed onto a recreated topic: all 30 new events delivered, 0 skipped; seen
//! failing on 87cb04e: 29 skipped, never delivered),
//! `a_crashed_partition_actor_skips_what_its_metadata_names` (99 done above a stuck event,
//! then a crash: 0 delivered again; 99 on 87cb04e);
//! `a_position_committed_for_the_old_log_skips_nothing` (the old log's position 300 committed
//! onto the recreated topic, 500 long: 500 of 500 delivered; seen failing without the check:
//! 300 never delivered); `commit_metadata_stays_within_the_brokers_limit` (the test broker
//! runs with `offset.metadata.max.bytes = 1024`, not Kafka's default; every other event
//! retried in place: the committed metadata reached 1,021 bytes and no commit was refused;
//! seen failing with 4,096 assumed: `OffsetMetadataTooLarge`). A commit the broker refuses
//! for some partitions only is logged too (`CourierContext::commit_callback`, at most once
//! per 10 s), not only a commit refused whole.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

mod crash;
pub(crate) use crash::{after_crash, Crashed};

/// Kafka's default `offset.metadata.max.bytes`.
pub(crate) const DEFAULT_MAX_METADATA_BYTES: usize = 4096;

const PREFIX: &str = "c2:";

/// A log's identity as the metadata carries it: the topic id, 1–64 characters
/// of base64 (librdkafka spells it with the standard alphabet, Kafka's tools
/// with the URL-safe one; anything else, `:` above all, is no identity:
/// nothing is encoded for it and nothing decoded).
fn valid_log(log: &str) -> bool {
    (1..=64).contains(&log.len())
        && log
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=-_".contains(&b))
}

/// Encodes the done offsets in `[watermark, begun_end)` of the log `log` (the
/// topic's id): every offset there that is not in `unfinished` (ascending, all
/// within the range). Returns the metadata string, at most `max_bytes` long:
/// the log and the watermark alone when nothing is done above it (so that a
/// position is always bound to its log: one committed onto another log is
/// known as such), empty when not even that fits or the log has no usable
/// identity.
pub(crate) fn encode(
    log: &str,
    watermark: i64,
    begun_end: i64,
    unfinished: impl IntoIterator<Item = i64>,
    max_bytes: usize,
) -> String {
    if !valid_log(log) {
        return String::new();
    }
    // Runs: unfinished, done, unfinished, done, …
    let mut runs: Vec<u64> = Vec::new();
    let mut cursor = watermark;
    let mut pending_unfinished = 0u64;
    for o in unfinished {
        if o < cursor || o >= begun_end {
            continue; // Not in range (or not ascending): ignore, never trust.
        }
        let done = (o - cursor) as u64;
        if done > 0 {
            runs.push(pending_unfinished);
            runs.push(done);
            pending_unfinished = 0;
        }
        pending_unfinished += 1;
        cursor = o + 1;
    }
    let tail_done = (begun_end - cursor) as u64;
    if tail_done > 0 {
        runs.push(pending_unfinished);
        runs.push(tail_done);
    }
    // `runs` ends with a done run (or is empty): trailing unfinished offsets
    // need no mention.
    let budget = max_bytes.saturating_sub(PREFIX.len() + log.len() + 1);
    let fits = |n: usize| n.div_ceil(3) * 4 <= budget;
    // A prefix of the runs encodes to a prefix of the bytes: keep whole
    // (unfinished, done) pairs while they fit, drop the rest.
    let mut bytes = Vec::with_capacity(10 * (runs.len() + 1));
    leb128(watermark as u64, &mut bytes);
    let mut kept = None;
    for pair in runs.chunks(2) {
        for r in pair {
            leb128(*r, &mut bytes);
        }
        if !fits(bytes.len()) {
            break;
        }
        kept = Some(bytes.len());
    }
    let n = match kept {
        Some(n) => n,
        None => {
            // The watermark alone.
            let mut w = Vec::with_capacity(10);
            leb128(watermark as u64, &mut w);
            if !fits(w.len()) {
                return String::new();
            }
            w.len()
        }
    };
    format!("{PREFIX}{log}:{}", URL_SAFE_NO_PAD.encode(&bytes[..n]))
}

/// The done offsets a commit's metadata names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completed {
    /// Half-open ranges `[start, end)` of done offsets, ascending.
    ranges: Vec<(i64, i64)>,
}

impl Completed {
    /// Whether `offset` was done when the metadata was made.
    pub fn contains(&self, offset: i64) -> bool {
        let i = self.ranges.partition_point(|&(_, end)| end <= offset);
        self.ranges
            .get(i)
            .is_some_and(|&(start, end)| start <= offset && offset < end)
    }

    /// How many offsets it names.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| (e - s) as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The offsets up to which it says anything (the end of its last range).
    pub(crate) fn end(&self) -> Option<i64> {
        self.ranges.last().map(|&(_, e)| e)
    }

    /// How many of the offsets in `[from, to)` it names (deleted-unread
    /// accounting: `core::deleted`).
    pub(crate) fn count_within(&self, from: i64, to: i64) -> u64 {
        self.ranges
            .iter()
            .map(|&(s, e)| (e.min(to) - s.max(from)).max(0) as u64)
            .sum()
    }
}

/// Decodes `metadata` committed with offset `committed` on the log `log` (the
/// topic's id now). `None` for anything that is not Courier's, is malformed, or
/// was made for another log or another watermark.
pub fn decode(log: &str, committed: i64, metadata: &str) -> Option<Completed> {
    let (made_for, body) = metadata.strip_prefix(PREFIX)?.split_once(':')?;
    if !valid_log(log) || made_for != log {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(body).ok()?;
    let mut it = Leb128Iter { bytes: &bytes };
    let watermark = i64::try_from(it.next()?).ok()?;
    if watermark != committed {
        return None;
    }
    let mut cursor = watermark;
    let mut ranges = Vec::new();
    while let Some(unfinished) = it.next() {
        let done = it.next()?;
        let start = cursor.checked_add(i64::try_from(unfinished).ok()?)?;
        let end = start.checked_add(i64::try_from(done).ok()?)?;
        if done > 0 {
            ranges.push((start, end));
        }
        cursor = end;
    }
    if it.bytes.is_empty() {
        Some(Completed { ranges })
    } else {
        None
    }
}

/// The log (topic id) a metadata string says it was made for; for tools
/// reading back commits of a known topic (Courier itself compares with the
/// topic's id now, see [`decode`]).
pub fn made_for(metadata: &str) -> Option<&str> {
    let (log, _) = metadata.strip_prefix(PREFIX)?.split_once(':')?;
    valid_log(log).then_some(log)
}

/// What a new owner makes of a side's committed position and its metadata
/// at the assignment ([`assess`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// The offsets an earlier owner finished above the position: skipped.
    pub skip: Option<Completed>,
    /// The position was made for another log (its metadata names another
    /// topic id: an owner that missed the topic's recreation committed it
    /// onto this one): the side is read from its log's start.
    pub other_log: bool,
    /// The topic's id could not be read: the log the position was made for
    /// (the id its metadata names), to be checked against the topic's id
    /// before anything is stored for the side
    /// (`core::partition::SideStart::verify`). `None` when the id was read,
    /// or when the metadata names no log (nothing to check the position
    /// against: it is taken as it is, as Kafka takes any committed offset).
    pub verify: Option<String>,
}

/// Judges a committed position `at` with its `metadata`, given the topic's
/// id now (`now`; `None`: it could not be read).
pub(crate) fn assess(at: i64, metadata: &str, now: Option<&str>) -> Assessment {
    let Some(now) = now else {
        // Nothing it names can be tied to a log: skip nothing, and check
        // the position once the id is read.
        return Assessment {
            verify: made_for(metadata).map(str::to_string),
            ..Assessment::default()
        };
    };
    Assessment {
        skip: decode(now, at, metadata),
        other_log: made_for(metadata).is_some_and(|made| made != now),
        verify: None,
    }
}

fn leb128(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

struct Leb128Iter<'a> {
    bytes: &'a [u8],
}

impl Iterator for Leb128Iter<'_> {
    type Item = u64;
    /// `None` at the end, and for a truncated or over-long varint (the caller
    /// then sees fewer values than it needs and refuses the whole string).
    fn next(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.bytes.iter().enumerate() {
            if i >= 10 {
                self.bytes = &[];
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Some(v);
            }
        }
        self.bytes = &[];
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A topic id as Kafka prints it.
    const LOG: &str = "q6AUPnmAS0yMtYhZ7I9-Ag";

    /// At the assignment: with the topic's id known, the metadata's done
    /// offsets are skipped if it was made for that log, and a position made
    /// for another log is read from the start. With the id unknown, nothing
    /// it names is trusted: no skip, and a position bound to a log is
    /// checked against the id before anything is stored (a recreated topic
    /// whose new log is longer than the old position would otherwise lose
    /// the new log's records below it). A position with no log named has
    /// nothing to be checked against.
    #[test]
    fn the_assignment_trusts_only_what_it_can_tie_to_the_log() {
        const OTHER: &str = "v4g9i7bSQhKgX0PRVSvhWg";
        let meta = encode(LOG, 10, 15, [10, 13], 4096);
        let a = assess(10, &meta, Some(LOG));
        assert_eq!(a.skip.map(|c| c.len()), Some(3));
        assert!(!a.other_log);
        assert_eq!(a.verify, None);
        let a = assess(10, &meta, Some(OTHER));
        assert_eq!((a.skip, a.other_log, a.verify), (None, true, None));
        let a = assess(10, &meta, None);
        assert_eq!(a.skip, None, "nothing skipped for a log not known");
        assert!(!a.other_log);
        assert_eq!(
            a.verify.as_deref(),
            Some(LOG),
            "a position bound to a log is checked against the topic's id before it is trusted"
        );
        for unbound in ["", "someone else's"] {
            assert_eq!(assess(10, unbound, None), Assessment::default());
        }
    }

    #[test]
    fn named_cases() {
        // Nothing above the watermark, or nothing done there: the log and the
        // watermark alone, naming nothing done; not even that when it does
        // not fit, or the log has no identity.
        for m in [
            encode(LOG, 10, 10, [], 4096),
            encode(LOG, 10, 13, [10, 11, 12], 4096),
        ] {
            assert_eq!(m, format!("c2:{LOG}:Cg"));
            assert_eq!(made_for(&m), Some(LOG));
            assert_eq!(decode(LOG, 10, &m).map(|c| c.len()), Some(0));
            assert_eq!(decode(LOG, 11, &m), None);
        }
        assert_eq!(encode(LOG, 10, 10, [], 3 + LOG.len() + 1 + 1), "");
        assert_eq!(encode("no:log", 10, 10, [], 4096), "");
        // 10 unfinished, 11..13 done, 13 unfinished, 14 done.
        let m = encode(LOG, 10, 15, [10, 13], 4096);
        let c = decode(LOG, 10, &m).unwrap();
        let done: Vec<i64> = (8..20).filter(|o| c.contains(*o)).collect();
        assert_eq!(done, vec![11, 12, 14]);
        assert_eq!(c.len(), 3);
        // Made for another watermark, or not ours: ignored.
        assert_eq!(decode(LOG, 11, &m), None);
        assert_eq!(decode(LOG, 10, ""), None);
        assert_eq!(decode(LOG, 10, "something else"), None);
        assert_eq!(decode(LOG, 10, "c2:!!"), None);
    }

    #[test]
    fn metadata_is_bound_to_its_log() {
        let m = encode(LOG, 10, 15, [10, 13], 4096);
        assert!(m.starts_with(&format!("c2:{LOG}:")), "{m}");
        assert_eq!(made_for(&m), Some(LOG));
        // The topic was deleted and recreated: another id, same name.
        assert_eq!(decode("OTHERidOTHERidOTHERid0", 10, &m), None);
        // The topic's id is not known now: nothing is trusted.
        assert_eq!(decode("", 10, &m), None);
        // librdkafka's spelling (standard base64) is an identity too.
        let std = "CTj/xQ4sRmOo79E+oypA0w";
        let m = encode(std, 10, 15, [10, 13], 4096);
        assert!(decode(std, 10, &m).is_some_and(|c| c.len() == 3), "{m}");
        // No identity, nothing encoded; an identity that could forge the
        // format is none.
        assert_eq!(encode("", 10, 15, [10, 13], 4096), "");
        assert_eq!(encode("a:b", 10, 15, [10, 13], 4096), "");
        // The format before the identity (`c1`, made for any log): refused.
        let c1 = format!("c1:{}", m.rsplit(':').next().unwrap());
        assert_eq!(decode(LOG, 10, &c1), None);
    }

    #[test]
    fn the_budget_counts_the_identity() {
        // The prefix and the identity take 26 bytes: a budget that leaves no
        // room for the watermark's group of four encodes nothing.
        assert_eq!(encode(LOG, 10, 15, [10, 13], 29), "");
        let m = encode(LOG, 10, 15, [10, 13], 30);
        assert!(m.len() <= 30 && decode(LOG, 10, &m).is_some(), "{m}");
        // The broker's `offset.metadata.max.bytes` far below 4,096: still a
        // decodable prefix within it.
        let unfinished: Vec<i64> = (0..1_000).step_by(2).collect();
        let m = encode(LOG, 0, 1_000, unfinished.iter().copied(), 100);
        assert!(!m.is_empty() && m.len() <= 100, "{}", m.len());
        assert!(decode(LOG, 0, &m).is_some());
    }

    #[test]
    fn a_long_gap_pattern_degrades_to_a_prefix() {
        // Every other offset unfinished over 100,000 offsets: far beyond 4 KB.
        let unfinished: Vec<i64> = (0..100_000).step_by(2).collect();
        let m = encode(LOG, 0, 100_000, unfinished.iter().copied(), 4096);
        assert!(m.len() <= 4096, "{}", m.len());
        let c = decode(LOG, 0, &m).unwrap();
        assert!(c.len() > 1_000, "still useful: {}", c.len());
        assert!(c.end().unwrap() < 100_000);
        assert!(unfinished.iter().all(|o| !c.contains(*o)));
        // A budget too small for anything: no metadata at all.
        assert_eq!(encode(LOG, 0, 100, [0], 29), "");
    }

    proptest! {
        /// Whatever the in-flight pattern and budget: decoding names only offsets
        /// that were done, all of them when it fits, and stays within the budget.
        #[test]
        fn never_names_an_unfinished_offset(
            watermark in 0i64..1_000_000_000_000,
            span in 0i64..2_000,
            holes in proptest::collection::btree_set(0i64..2_000, 0..300),
            max_bytes in prop_oneof![Just(4096usize), 0usize..230],
        ) {
            let end = watermark + span;
            // The watermark is unfinished by definition when anything was begun.
            let mut unfinished: BTreeSet<i64> =
                holes.iter().map(|h| watermark + h).filter(|o| *o < end).collect();
            if span > 0 {
                unfinished.insert(watermark);
            }
            let m = encode(LOG, watermark, end, unfinished.iter().copied(), max_bytes);
            prop_assert!(m.len() <= max_bytes);
            if m.is_empty() {
                return Ok(());
            }
            let c = decode(LOG, watermark, &m).expect("decodes what it encoded");
            for o in watermark.saturating_sub(3)..end + 3 {
                let done = o >= watermark && o < end && !unfinished.contains(&o);
                if c.contains(o) {
                    prop_assert!(done, "{} named done", o);
                }
            }
            if max_bytes == 4096 {
                prop_assert_eq!(c.len() as usize, (span as usize) - unfinished.len());
            }
        }

        /// Arbitrary strings never panic the decoder and never name an offset
        /// below the committed one.
        #[test]
        fn decode_survives_anything(committed in 0i64..1000, s in "c2:AAAAAAAAAAAAAAAAAAAAAA:[A-Za-z0-9_-]{0,40}|\\PC{0,40}") {
            if let Some(c) = decode("AAAAAAAAAAAAAAAAAAAAAA", committed, &s) {
                for o in 0..committed {
                    prop_assert!(!c.contains(o));
                }
            }
        }
    }
}
