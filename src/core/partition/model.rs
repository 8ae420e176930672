//! Model-based property test of the partition machine.
//!
//! A harness plays the rest of the world: the consumer (records of a main log and
//! a DLQ log, in order; the main log's read position moving back — a reset: the
//! rest of the log comes again as a new incarnation, renumbered from an offset
//! already read; trailing transaction markers that are never handed over, and
//! probes of them answered truthfully, late or never; lag checks, accurate or
//! stale), the
//! delivery side (answers jobs in any order, makes jobs vanish, even
//! [`MAX_ERRORED`] times in a row), the clock (timers fire in due order), the
//! health verdict (flapping), failing stores and pauses, late reports of an
//! earlier generation, and a revoke at any point. After every input it checks the
//! effects against a reference model that only knows what was fed and answered:
//!
//! - a stored offset never passes a record of the log not taken in and answered
//!   done, never goes past the log's end, and never goes back (within an
//!   incarnation of the log);
//! - a reset: every record of the new incarnation is delivered (none dropped as
//!   a duplicate, none skipped for the earlier owner's metadata), nothing is
//!   stored until the old incarnation's records are done, then only positions
//!   of the new log, with no metadata until [`LOGS_AFTER_RESET`] lag checks
//!   read the topic's id after the reset, then with metadata naming it (and
//!   only offsets of the new log done); the reset is noted with its new
//!   position;
//! - an idle side whose log ends with markers is stored to the log's end once a
//!   probe proves nothing is there, never on a stale proof;
//! - `key` mode: a key's events are dispatched one at a time, each only once every
//!   earlier event of the key is done; `partition` mode: the same for the
//!   partition's events;
//! - DLQ records are dispatched first in offset order and only once due; main p is
//!   never resumed while a due DLQ record waits at the head of the queue, nor while
//!   the API is judged down;
//! - nothing is dispatched while the API is judged down (mode `paused`), nothing
//!   after a drain was requested, no job twice at once;
//! - DLQ p is not read while the partition holds `limit` DLQ records;
//! - the fetch budget and readiness counts add up (records and bytes fed − taken
//!   in = the backlog; begun − finished = held);
//! - the in-flight byte budget, shared with other partitions (played by the
//!   harness, which takes and gives back bytes of its own): every take found it
//!   not used up, so the use never passes the limit by more than one record;
//!   the machine's share and the harness's add up to the use; the machine asks
//!   for a waker at most once until it comes; DLQ p is not read while DLQ
//!   records wait for the budget; a dropped machine gives its share back;
//! - main p is never resumed while a record waits for its schema;
//! - DLQ records beyond the DLQ half of the budget are handed back
//!   (`rewind`): none of them was dispatched; the harness seeks DLQ p back
//!   (late, or failing first); records sent before the seek lands are never
//!   dispatched, and the re-read delivers every record;
//! - an earlier owner's commit metadata (some main offsets done, encoded within
//!   a budget that may force it to a prefix): an offset it names is never
//!   dispatched, one it does not name is never completed without an answer (the
//!   stored offset would pass it); every metadata stored names only offsets
//!   done (answered, or named by the earlier owner) above its position;
//! - the drain is answered exactly once, when nothing is in flight or at its
//!   deadline; as it begins it takes back the commits waiting for a flush,
//!   and none is left waiting after that (a flush after the handover's
//!   commit would move the committed position back);
//! - liveness: once the API is up, every job is answered and the other
//!   partitions give their bytes back, every record is done and the stored
//!   positions equal the ends of both logs (a budget that never wakes a waiting
//!   machine would leave records undone).

use super::tests::{Plain, Rec, GEN, LOG, RUN_MAX};
use super::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone)]
enum Action {
    /// The next `n` main records; `reset`: first, the read position moves
    /// back (the rest of the log comes as a new incarnation).
    FeedMain {
        n: usize,
        reset: bool,
    },
    /// Clean probe answers arrive (possibly stale by now).
    ProbeAnswers,
    FeedDlq {
        n: usize,
    },
    /// Answers one in-flight job.
    Answer {
        pick: usize,
        errored: bool,
    },
    AnswerAll,
    /// One job vanishes `times` times in a row (each time dispatched again after
    /// its back-off).
    Vanish {
        pick: usize,
        times: u32,
    },
    /// A report of the previous generation.
    LateReport {
        offset: i64,
        errored: bool,
    },
    Verdict {
        api_unavailable: bool,
    },
    Positions {
        stale: bool,
    },
    Advance {
        ms: u64,
    },
    FailNextStore,
    FailNextReading,
    /// Another partition takes `n` bytes of the in-flight budget (if it is not
    /// used up), or gives back one of its takes.
    ExternalTake {
        n: u64,
    },
    ExternalGive {
        pick: usize,
    },
    /// The budget's waker message arrives.
    Wake,
    /// A main record begins or ends waiting for its schema (the shell's
    /// schema gate).
    SchemaWait {
        waiting: bool,
    },
    /// The seek back of DLQ p asked last (`Effect::RewindDlq`) lands, or
    /// fails.
    SeekLands {
        ok: bool,
    },
    /// A lag check read the topics' ids (the same log: no topic is replaced
    /// here).
    Logs,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (1usize..8, prop::bool::weighted(0.1)).prop_map(|(n, reset)| Action::FeedMain { n, reset }),
        2 => Just(Action::ProbeAnswers),
        3 => (1usize..4).prop_map(|n| Action::FeedDlq { n }),
        8 => (any::<usize>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, errored)| Action::Answer { pick, errored }),
        2 => Just(Action::AnswerAll),
        1 => (any::<usize>(), prop_oneof![1u32..4, (MAX_ERRORED - 1)..(MAX_ERRORED + 3)])
            .prop_map(|(pick, times)| Action::Vanish { pick, times }),
        1 => (0i64..200, any::<bool>()).prop_map(|(offset, errored)| Action::LateReport { offset, errored }),
        2 => prop::bool::weighted(0.3).prop_map(|api_unavailable| Action::Verdict { api_unavailable }),
        2 => any::<bool>().prop_map(|stale| Action::Positions { stale }),
        2 => Just(Action::Logs),
        4 => prop_oneof![0u64..20, 0u64..3_000].prop_map(|ms| Action::Advance { ms }),
        1 => Just(Action::FailNextStore),
        1 => Just(Action::FailNextReading),
        2 => (1u64..800).prop_map(|n| Action::ExternalTake { n }),
        2 => any::<usize>().prop_map(|pick| Action::ExternalGive { pick }),
        3 => Just(Action::Wake),
        2 => prop::bool::weighted(0.8).prop_map(|ok| Action::SeekLands { ok }),
        1 => any::<bool>().prop_map(|waiting| Action::SchemaWait { waiting }),
    ]
}

#[derive(Debug, Clone)]
struct Scenario {
    ordering: OrderingMode,
    limit: usize,
    backlog_cap: usize,
    backlog_bytes_cap: usize,
    /// The in-flight byte budget (`u64::MAX`: unlimited).
    budget: u64,
    min_pause_ms: u64,
    main: Vec<Rec>,
    dlq: Vec<Rec>,
    actions: Vec<Action>,
    /// Revoke (drain) before this action.
    drain_at: Option<prop::sample::Index>,
    /// After the drain request, jobs in flight are answered only after the
    /// drain's deadline.
    drain_stalls: bool,
    /// An earlier owner's work: which main records it finished (by index in
    /// the log, above offset 100, its committed position), and the metadata's
    /// size budget.
    prev_done: Option<(Vec<bool>, usize)>,
    /// Transaction markers after the main log's last record.
    markers: i64,
}

/// Wall-clock ms at the harness's start.
const WALL0: i64 = 1_700_000_000_000;

/// Offsets with gaps (compaction, transaction markers); keys from a small set,
/// some events without one; a few bad records (parked at once).
fn main_log() -> impl Strategy<Value = Vec<Rec>> {
    let rec = (
        1i64..3,
        prop::option::weighted(0.85, 0u8..4),
        prop::bool::weighted(0.1),
        size(),
        prop::option::weighted(0.4, 0u8..2),
    );
    prop::collection::vec(rec, 0..120).prop_map(|v| {
        let mut offset = 99;
        v.into_iter()
            .map(|(gap, key, bad, size, run)| {
                offset += gap;
                let mut r = Rec::main(offset, key);
                r.size = size;
                r.run = run;
                if bad {
                    r.kind = Kind::Immediate;
                }
                r
            })
            .collect()
    })
}

/// DLQ records due from 2 s ago to 3 s ahead; a few unreadable ones.
fn dlq_log() -> impl Strategy<Value = Vec<Rec>> {
    let rec = (
        1i64..3,
        -2_000i64..3_000,
        prop::bool::weighted(0.05),
        size(),
        prop::option::weighted(0.7, 0u8..3),
    );
    prop::collection::vec(rec, 0..25).prop_map(|v| {
        let mut offset = 9;
        v.into_iter()
            .map(|(gap, due_in, unreadable, size, key)| {
                offset += gap;
                let mut r = Rec::dlq(offset, WALL0 + due_in);
                r.size = size;
                r.key = key;
                if unreadable {
                    r.kind = Kind::Immediate;
                }
                r
            })
            .collect()
    })
}

/// Record sizes: mostly small, some larger than a small budget.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 1usize..300, 1 => 300usize..3_000]
}

/// The largest size [`size`] or an external take makes.
const MAX_SIZE: u64 = 3_000;

fn ordering() -> impl Strategy<Value = OrderingMode> {
    prop_oneof![
        3 => Just(OrderingMode::Key),
        1 => Just(OrderingMode::Partition),
        1 => Just(OrderingMode::Unordered),
    ]
}

prop_compose! {
    fn scenario()(
        ordering in ordering(),
        limit in 1usize..6,
        backlog_cap in 1usize..10,
        backlog_bytes_cap in prop_oneof![Just(usize::MAX), 1usize..2_000],
        budget in prop_oneof![Just(u64::MAX), 1u64..1_500],
        min_pause_ms in prop_oneof![Just(0u64), Just(50), Just(400)],
        main in main_log(),
        dlq in dlq_log(),
        actions in prop::collection::vec(action(), 1..300),
        drain_at in prop::option::weighted(0.3, any::<prop::sample::Index>()),
        drain_stalls in any::<bool>(),
        prev_done in prop::option::weighted(0.3, (
            prop::collection::vec(any::<bool>(), 0..120),
            prop_oneof![Just(4096usize), 4usize..70],
        )),
        markers in prop_oneof![2 => Just(0i64), 1 => 1i64..3],
    ) -> Scenario {
        Scenario { ordering, limit, backlog_cap, backlog_bytes_cap, budget, min_pause_ms, main, dlq, actions, drain_at, drain_stalls, prev_done, markers }
    }
}

/// A record in the model: its log's incarnation and its offset (ordered as the
/// machine's slots are).
type Id = (u32, i64);

struct Harness {
    m: PartitionMachine<Plain>,
    /// Per side: the incarnation the machine reads (resets it noted).
    inc: [u32; 2],
    /// `Input::Logs` fed since the side's last reset.
    logs_since_reset: [u8; 2],
    /// Where each incarnation of the main log starts (after the first).
    reset_at: Vec<i64>,
    /// Slot of a dispatched job → the record.
    slots: BTreeMap<(Src, i64), Id>,
    /// Clean probe answers not delivered yet.
    probes: Vec<Input<Rec>>,
    markers: i64,
    ordering: OrderingMode,
    limit: usize,
    base: Instant,
    ms: u64,
    logs: [Vec<Rec>; 2],
    /// How many records of each log were sent.
    sent: [usize; 2],
    /// Records sent, the model's "taken in".
    taken: [BTreeMap<Id, Rec>; 2],
    done: [BTreeSet<Id>; 2],
    /// Of them, those answered in the input being fed (the machine takes
    /// a batch's answers one by one).
    answering: BTreeSet<(Src, Id)>,
    /// Positions the harness saw stored successfully.
    stored: [Option<i64>; 2],
    /// Jobs in flight, by slot.
    in_flight: Vec<(Src, i64)>,
    /// The members of the run being dispatched (`Effect::DispatchRun`).
    run_mates: Vec<Id>,
    ever_dispatched: [BTreeSet<Id>; 2],
    timers: Vec<(u64, Timer)>,
    api_unavailable: bool,
    reading: [Option<bool>; 2],
    drain_requested: bool,
    /// `Effect::ForgetWaitingCommits` seen (once, as the drain began).
    forgot_commits: u32,
    drain_deadline_passed: bool,
    drained: u32,
    /// Records sent − `TakenIn`, and their bytes.
    outstanding: usize,
    outstanding_bytes: usize,
    budget: Arc<ByteBudget>,
    /// The other partitions' takes.
    external: Vec<u64>,
    /// The machine asked for a waker and its message has not come yet.
    awaiting: bool,
    /// The waker was called (its message is on its way).
    woken: Arc<AtomicBool>,
    /// `Begun` − `Finished`.
    held: usize,
    fail_store: bool,
    fail_reading: bool,
    /// A seek back of DLQ p not landed: the index in the DLQ log of the
    /// record it seeks to, and whether it is asked (a failed one is not,
    /// until the machine asks again). DLQ records sent meanwhile were
    /// polled before it: never taken in.
    seek: Option<(usize, bool)>,
    /// A main record waits for its schema.
    schema_wait: bool,
}

impl Harness {
    fn new(s: &Scenario, api_unavailable: bool) -> Result<Harness, TestCaseError> {
        let budget = Arc::new(ByteBudget::new(s.budget));
        let skip = s.prev_done.as_ref().and_then(|(bits, max_bytes)| {
            const COMMITTED: i64 = 100;
            let done: BTreeSet<i64> = s
                .main
                .iter()
                .zip(bits)
                .filter(|(r, b)| **b && r.offset > COMMITTED)
                .map(|(r, _)| r.offset)
                .collect();
            let end = s.main.last()?.offset + 1;
            let unfinished = (COMMITTED..end).filter(|o| !done.contains(o));
            let metadata = completed::encode(LOG, COMMITTED, end, unfinished, *max_bytes);
            completed::decode(LOG, COMMITTED, &metadata)
        });
        // What the machine must skip counts as done from the start.
        let named: BTreeSet<Id> = s
            .main
            .iter()
            .map(|r| (0, r.offset))
            .filter(|(_, o)| skip.as_ref().is_some_and(|c| c.contains(*o)))
            .collect();
        let settings = Settings {
            generation: GEN,
            ordering: s.ordering,
            limit: s.limit,
            backlog_cap: s.backlog_cap,
            backlog_bytes_cap: s.backlog_bytes_cap,
            budget: budget.clone(),
            min_pause: Duration::from_millis(s.min_pause_ms),
            destinations: crate::core::destination::DestSet::first(1),
            destination_hold: Duration::from_secs(30),
            drain_timeout: Duration::from_millis(2_000),
            sides: [
                SideStart {
                    skip,
                    ..SideStart::on_log(LOG)
                },
                SideStart::on_log(LOG),
            ],
            pace: Pace {
                metadata_max_bytes: DEFAULT_MAX_METADATA_BYTES,
                interval: Duration::from_millis(250),
                after: 3,
                floor: super::COMMIT_FLOOR,
            },
        };
        let mut h = Harness {
            m: PartitionMachine::new(settings),
            inc: [0, 0],
            logs_since_reset: [0, 0],
            reset_at: Vec::new(),
            slots: BTreeMap::new(),
            probes: Vec::new(),
            markers: s.markers,
            ordering: s.ordering,
            limit: s.limit,
            base: Instant::now(),
            ms: 0,
            logs: [s.main.clone(), s.dlq.clone()],
            sent: [0, 0],
            taken: [BTreeMap::new(), BTreeMap::new()],
            done: [named, BTreeSet::new()],
            answering: BTreeSet::new(),
            stored: [None, None],
            in_flight: Vec::new(),
            run_mates: Vec::new(),
            ever_dispatched: [BTreeSet::new(), BTreeSet::new()],
            timers: Vec::new(),
            api_unavailable,
            reading: [None, None],
            drain_requested: false,
            forgot_commits: 0,
            drain_deadline_passed: false,
            drained: 0,
            outstanding: 0,
            outstanding_bytes: 0,
            budget,
            external: Vec::new(),
            awaiting: false,
            woken: Arc::new(AtomicBool::new(false)),
            held: 0,
            fail_store: false,
            fail_reading: false,
            seek: None,
            schema_wait: false,
        };
        h.feed(Input::Verdict {
            down: down_if(api_unavailable),
        })?;
        Ok(h)
    }

    fn now(&self) -> Now {
        Now {
            mono: self.base + Duration::from_millis(self.ms),
            wall_ms: WALL0 + self.ms as i64,
        }
    }

    /// Feeds one input, checks and carries out its effects (failures go back in).
    fn feed(&mut self, input: Input<Rec>) -> Result<(), TestCaseError> {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let late = matches!(&input, Input::Reports(r) if r.iter().all(|r| r.generation != GEN));
            let fx = self.m.handle(input, self.now());
            if late {
                prop_assert!(fx.is_empty(), "a late report changed something: {fx:?}");
            }
            for e in fx {
                inputs.extend(self.effect(e)?);
            }
            self.check_state()?;
        }
        Ok(())
    }

    fn effect(&mut self, e: Effect<Rec>) -> Result<Option<Input<Rec>>, TestCaseError> {
        match e {
            // A divert is a job like a dispatch (its answer is the DLQ's):
            // with one destination, an event whose key has a record in the
            // DLQ (one read from DLQ p) follows it there once the partition
            // holds its share of events behind the DLQ.
            Effect::Dispatch { src, offset, item } => {
                prop_assert_eq!(item.src, src);
                if item.inc == 0 {
                    prop_assert_eq!(item.offset, offset, "a slot before any reset is the offset");
                }
                let id = (item.inc, item.offset);
                if let Some(&was) = self.slots.get(&(src, offset)) {
                    prop_assert_eq!(was, id, "one slot for two records");
                }
                self.slots.insert((src, offset), id);
                self.on_dispatch(src, offset, id)?;
            }
            // A divert of one event is a job like a dispatch (its answer
            // is the DLQ's): with one destination, an event whose key has a
            // record in the DLQ (one read from DLQ p) follows it there once
            // the partition holds its share of events behind the DLQ. A
            // divert of a run is the run's jobs, as a dispatched run.
            Effect::Divert { src, mut run, .. } if run.len() == 1 => {
                let (offset, item) = run.remove(0);
                return self.effect(Effect::Dispatch { src, offset, item });
            }
            Effect::DispatchRun { src, run } | Effect::Divert { src, run, .. } => {
                prop_assert_eq!(src, Src::Main, "a run of DLQ records");
                prop_assert!(
                    run.len() >= 2 && run.len() <= RUN_MAX as usize,
                    "a run of {} events",
                    run.len()
                );
                let group = run[0].1.run;
                prop_assert!(group.is_some(), "a run of events of no run group");
                let mut ids = Vec::with_capacity(run.len());
                for (slot, item) in &run {
                    prop_assert_eq!(item.src, src);
                    prop_assert_eq!(item.run, group, "a run of two groups");
                    let id = (item.inc, item.offset);
                    if let Some(&was) = self.slots.get(&(src, *slot)) {
                        prop_assert_eq!(was, id, "one slot for two records");
                    }
                    self.slots.insert((src, *slot), id);
                    ids.push(id);
                }
                // Each member goes out with the run's others beside it: none
                // of them counts as "its lane busy" or "before it, not done".
                self.run_mates = ids;
                for (slot, item) in &run {
                    self.on_dispatch(src, *slot, (item.inc, item.offset))?;
                }
                self.run_mates.clear();
            }
            Effect::Probe { src, from, to } => {
                prop_assert!(!self.drain_requested, "probed while draining");
                prop_assert!(from < to, "probe of nothing");
                // The truth: no record of the current log in [from, to).
                let i = src.index();
                let inc = *self.taken[i].keys().next_back().map_or(&0, |(inc, _)| inc);
                let log = self.current_log(src, inc);
                let clean = log.iter().all(|o| *o < from.get() || *o >= to.get())
                    && to.get() <= self.log_end(src, inc);
                if clean {
                    self.probes.push(Input::Probed { src, from, to });
                }
            }
            Effect::SetReading { src, on } => {
                if std::mem::take(&mut self.fail_reading) {
                    self.reading[src.index()] = None;
                    return Ok(Some(Input::ReadingFailed { src }));
                }
                if src == Src::Main && on && !self.drain_requested {
                    prop_assert!(
                        !self.api_unavailable,
                        "main p resumed while the API is down"
                    );
                    prop_assert!(
                        !self.schema_wait,
                        "main p resumed while a record waits for its schema"
                    );
                    if let Some((&head, r)) = self.dlq_head() {
                        let Kind::Queued { not_before_ms } = r.kind else {
                            unreachable!()
                        };
                        prop_assert!(
                            not_before_ms > self.now().wall_ms,
                            "main p resumed while DLQ record {:?} is due",
                            head
                        );
                    }
                }
                self.reading[src.index()] = Some(on);
            }
            Effect::Store {
                src,
                offset,
                metadata,
                commit,
            } => {
                let offset = offset.get();
                let i = src.index();
                let inc = self.inc[i];
                if inc > 0 && self.logs_since_reset[i] < LOGS_AFTER_RESET {
                    prop_assert!(
                        metadata.is_empty(),
                        "{:?} metadata {} stored onto a new incarnation before its log's id was read",
                        src,
                        metadata
                    );
                }
                if inc > 0 && self.logs_since_reset[i] >= LOGS_AFTER_RESET {
                    prop_assert_eq!(
                        completed::made_for(&metadata),
                        Some(LOG),
                        "{:?}: a commit of a new incarnation whose log's id is known names it",
                        src
                    );
                }
                if !metadata.is_empty() {
                    let named = completed::decode(LOG, offset, &metadata);
                    prop_assert!(named.is_some(), "unreadable metadata {}", metadata);
                    let named = named.unwrap_or_default();
                    // Offsets missing from the log (gaps) may be named: there
                    // is nothing to deliver there.
                    let wrong = self
                        .current_log(src, inc)
                        .into_iter()
                        .find(|o| named.contains(*o) && !self.done[i].contains(&(inc, *o)));
                    prop_assert!(
                        wrong.is_none(),
                        "{:?} metadata at {} names {:?}, not done",
                        src,
                        offset,
                        wrong
                    );
                }
                // Earlier incarnations: all done before anything is stored.
                let done = &self.done[i];
                if let Some(old) = self.taken[i]
                    .keys()
                    .find(|id| id.0 < inc && !done.contains(id))
                {
                    prop_assert!(
                        false,
                        "{:?} stored {} with {:?} of an earlier incarnation unfinished",
                        src,
                        offset,
                        old
                    );
                }
                // The current log: every record below the position taken in
                // and done, and the position within the log.
                if let Some(o) = self
                    .current_log(src, inc)
                    .into_iter()
                    .find(|o| *o < offset && !done.contains(&(inc, *o)))
                {
                    prop_assert!(
                        false,
                        "{:?} stored {} past {} (not taken in, or unfinished)",
                        src,
                        offset,
                        o
                    );
                }
                let end = self.log_end(src, inc);
                prop_assert!(
                    offset <= end,
                    "{:?} stored {} past the end {}",
                    src,
                    offset,
                    end
                );
                if let Some(before) = self.stored[src.index()] {
                    prop_assert!(
                        // Metadata alone is committed: auto-commit would
                        // not send it.
                        offset > before || (commit != Commit::No && offset == before),
                        "{:?} stored {} after {} (metadata alone: {:?})",
                        src,
                        offset,
                        before,
                        commit
                    );
                }
                prop_assert!(
                    commit != Commit::Soon || self.forgot_commits == 0,
                    "{:?} commit of {} left waiting for a flush after the drain began",
                    src,
                    offset
                );
                if std::mem::take(&mut self.fail_store) {
                    return Ok(Some(Input::StoreFailed {
                        src,
                        offset: NextOffset::at(offset),
                    }));
                }
                self.stored[src.index()] = Some(offset);
            }
            Effect::Schedule { after, timer } => {
                let due = self.ms + after.as_millis() as u64;
                self.timers.push((due, timer));
            }
            Effect::ForgetWaitingCommits => {
                prop_assert!(
                    self.drain_requested,
                    "waiting commits forgotten without a drain"
                );
                self.forgot_commits += 1;
                prop_assert_eq!(self.forgot_commits, 1, "waiting commits forgotten twice");
            }
            Effect::HandedOver => {
                prop_assert!(self.drain_requested, "drained without a request");
                prop_assert_eq!(
                    self.forgot_commits,
                    1,
                    "drained without forgetting the waiting commits"
                );
                prop_assert!(
                    self.in_flight.is_empty() || self.drain_deadline_passed,
                    "drained with {} in flight before the deadline",
                    self.in_flight.len()
                );
                self.drained += 1;
                prop_assert_eq!(self.drained, 1, "drained twice");
            }
            Effect::TakenIn { records, bytes } => {
                prop_assert!(records <= self.outstanding && bytes <= self.outstanding_bytes);
                self.outstanding -= records;
                self.outstanding_bytes -= bytes;
            }
            Effect::AwaitBudget => {
                prop_assert!(!self.awaiting, "asked for a second waker");
                self.awaiting = true;
                let woken = self.woken.clone();
                self.budget
                    .wait(Box::new(move || woken.store(true, Ordering::SeqCst)));
            }
            Effect::Begun { main, dlq } => self.held += main + dlq,
            Effect::Skipped(_) => {}
            Effect::Finished(n) => {
                prop_assert!(n <= self.held);
                self.held -= n;
            }
            Effect::Note(Note::RefusedReport { src, error }) => {
                prop_assert!(false, "{:?}: a real completion was refused: {}", src, error);
            }
            Effect::Note(Note::PositionReset { src, from, to, .. }) => {
                let i = src.index();
                prop_assert_eq!(src, Src::Main, "the DLQ log never moves back here");
                let inc = self.inc[i] as usize;
                prop_assert!(inc < self.reset_at.len(), "a reset the log never made");
                prop_assert_eq!(to, self.reset_at[inc], "reset to another position");
                prop_assert!(to < from, "a reset forward: {} → {}", from, to);
                self.inc[i] += 1;
                self.logs_since_reset[i] = 0;
                self.stored[i] = None;
            }
            Effect::ReadFromStart { src } => {
                prop_assert!(false, "{:?}: no topic is replaced here", src);
            }
            Effect::RewindDlq { to } => {
                prop_assert!(!self.drain_requested, "DLQ p sought back while draining");
                let dlq = Src::Dlq.index();
                let log = &self.logs[dlq];
                let idx = log.iter().position(|r| r.offset == to);
                let Some(idx) = idx.filter(|i| *i < self.sent[dlq]) else {
                    return Err(TestCaseError::fail(format!(
                        "DLQ p sought back to {to}, not a record sent"
                    )));
                };
                // What is handed back was not begun: never dispatched,
                // never done. It is read again.
                let back: Vec<Id> = self.taken[dlq].range((0, to)..).map(|(o, _)| *o).collect();
                for id in back {
                    prop_assert!(
                        !self.ever_dispatched[dlq].contains(&id) && !self.done[dlq].contains(&id),
                        "DLQ {:?} handed back after it was dispatched",
                        id
                    );
                    self.taken[dlq].remove(&id);
                }
                if let Some((was, asked)) = self.seek {
                    prop_assert_eq!(was, idx, "a second seek back, to another record");
                    prop_assert!(!asked, "a seek back asked twice");
                }
                self.seek = Some((idx, true));
            }
            Effect::Mode { .. } | Effect::Lag { .. } | Effect::Note(_) => {}
        }
        Ok(None)
    }

    /// The offsets of one incarnation of a side's log.
    fn current_log(&self, src: Src, inc: u32) -> Vec<i64> {
        self.logs[src.index()]
            .iter()
            .filter(|r| r.inc == inc)
            .map(|r| r.offset)
            .collect()
    }

    /// Where one incarnation of a side's log ends (markers included). The
    /// main log's last incarnation ends with the markers; an earlier one
    /// ends where its last record was.
    fn log_end(&self, src: Src, inc: u32) -> i64 {
        let log = &self.logs[src.index()];
        let last = log
            .iter()
            .filter(|r| r.inc == inc)
            .map(|r| r.offset + 1)
            .max();
        let latest = log.last().is_none_or(|r| r.inc == inc);
        match (src, last) {
            (Src::Main, Some(end)) if latest => end + self.markers,
            (_, Some(end)) => end,
            (_, None) => i64::MIN,
        }
    }

    /// The lowest DLQ record taken in, queued for the drain and never dispatched.
    fn dlq_head(&self) -> Option<(&Id, &Rec)> {
        let dlq = Src::Dlq.index();
        self.taken[dlq].iter().find(|(o, r)| {
            matches!(r.kind, Kind::Queued { .. }) && !self.ever_dispatched[dlq].contains(o)
        })
    }

    fn on_dispatch(&mut self, src: Src, slot: i64, offset: Id) -> Result<(), TestCaseError> {
        prop_assert!(
            !self.api_unavailable,
            "{:?} {:?} dispatched while the API is down",
            src,
            offset
        );
        prop_assert!(self.m.mode() != Mode::Paused, "dispatched while paused");
        prop_assert!(
            !self.drain_requested,
            "{:?} {:?} dispatched after the drain request",
            src,
            offset
        );
        prop_assert!(
            !self.in_flight.contains(&(src, slot)),
            "{:?} {:?} dispatched twice at once",
            src,
            offset
        );
        let i = src.index();
        let Some(rec) = self.taken[i].get(&offset).cloned() else {
            return Err(TestCaseError::fail(format!(
                "{src:?} {offset:?} dispatched, never taken in"
            )));
        };
        prop_assert!(
            !self.done[i].contains(&offset),
            "{:?} {:?} dispatched after done",
            src,
            offset
        );
        let first = self.ever_dispatched[i].insert(offset);
        match (src, rec.kind) {
            (Src::Main, Kind::Ordered) => {
                let lane = |r: &Rec| match self.ordering {
                    OrderingMode::Key => rec.key.is_some() && r.key == rec.key,
                    OrderingMode::Partition => true,
                    OrderingMode::Unordered => false,
                };
                let same_lane = |o: &Id| {
                    let r = &self.taken[i][o];
                    r.kind == Kind::Ordered && lane(r) && !self.run_mates.contains(o)
                };
                if let Some(&(_, busy)) = self
                    .in_flight
                    .iter()
                    .find(|(s, o)| *s == Src::Main && same_lane(&self.slots[&(*s, *o)]))
                {
                    prop_assert!(
                        false,
                        "main {:?} dispatched while {} of its lane is in flight",
                        offset,
                        busy
                    );
                }
                if let Some(earlier) = self.taken[i]
                    .range(..offset)
                    .map(|(o, _)| o)
                    .find(|o| same_lane(o) && !self.done[i].contains(o))
                {
                    prop_assert!(
                        false,
                        "main {:?} dispatched before {:?} of its lane is done",
                        offset,
                        earlier
                    );
                }
            }
            (Src::Dlq, Kind::Queued { not_before_ms }) if first => {
                prop_assert!(
                    not_before_ms <= self.now().wall_ms,
                    "DLQ {:?} dispatched before due",
                    offset
                );
                // A key's envelopes one at a time, in order (the drain lanes).
                let same_lane = |a: &Rec, b: &Rec| match self.ordering {
                    OrderingMode::Key => a.key.is_some() && a.key == b.key,
                    OrderingMode::Partition => true,
                    OrderingMode::Unordered => false,
                };
                let queued = |r: &Rec| matches!(r.kind, Kind::Queued { .. });
                // In offset order, but for one waiting behind its lane.
                let skipped = self.taken[i].range(..offset).find(|(o, r)| {
                    let waits = self.taken[i].range(..**o).any(|(e, x)| {
                        let undone =
                            !self.done[i].contains(e) || self.answering.contains(&(Src::Dlq, *e));
                        queued(x) && same_lane(r, x) && undone
                    });
                    queued(r) && !self.ever_dispatched[i].contains(o) && !waits
                });
                prop_assert!(
                    skipped.is_none(),
                    "DLQ {:?} dispatched before {:?}",
                    offset,
                    skipped
                );
                let earlier = self.taken[i]
                    .range(..offset)
                    .find(|(o, r)| queued(r) && same_lane(&rec, r) && !self.done[i].contains(o));
                prop_assert!(
                    earlier.is_none(),
                    "DLQ {:?} dispatched before {:?} of its lane is done",
                    offset,
                    earlier
                );
            }
            _ => {}
        }
        self.in_flight.push((src, slot));
        Ok(())
    }

    fn check_state(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            self.outstanding,
            self.m.backlog(),
            "fetch budget: sent − taken in ≠ backlog"
        );
        prop_assert_eq!(
            self.outstanding_bytes,
            self.m.backlog_bytes(),
            "fetch budget: bytes sent − taken in ≠ backlog bytes"
        );
        let external: u64 = self.external.iter().sum();
        prop_assert_eq!(
            self.budget.used(),
            self.m.held_bytes() + external,
            "the budget's use is not the machine's share plus the others'"
        );
        // What the machine's follow state is charged is memory it must
        // count, not an admission: records are admitted by the rest.
        let follow = self.m.follow_charged();
        prop_assert!(
            self.budget.used() - follow < self.budget.limit().saturating_add(MAX_SIZE),
            "budget use {} (follow state {}) passed the limit {} by more than one record",
            self.budget.used(),
            follow,
            self.budget.limit()
        );
        if self.reading[Src::Dlq.index()] == Some(true) && !self.drain_requested {
            prop_assert_eq!(
                self.m.waiting(Src::Dlq),
                0,
                "DLQ p read while DLQ records wait for the budget"
            );
        }
        prop_assert_eq!(self.held, self.m.held(Src::Main) + self.m.held(Src::Dlq));
        if self.reading[Src::Dlq.index()] == Some(true) && !self.drain_requested {
            prop_assert!(
                self.m.held(Src::Dlq) < self.limit,
                "DLQ p read while {} DLQ records are held (limit {})",
                self.m.held(Src::Dlq),
                self.limit
            );
        }
        Ok(())
    }

    fn send(&mut self, src: Src, n: usize, reset: bool) -> Result<(), TestCaseError> {
        let i = src.index();
        let from = self.sent[i];
        if reset && from > 0 && from < self.logs[i].len() {
            // The read position moves back to an offset already read (an
            // offset reset, a recreated topic): the rest of the log comes as
            // a new incarnation from there, its gaps kept.
            // At or below an offset of the current incarnation already sent.
            let inc = self.logs[i][from - 1].inc;
            let read: Vec<i64> = self.logs[i][..from]
                .iter()
                .filter(|r| r.inc == inc)
                .map(|r| r.offset)
                .collect();
            let back = read[read.len() - 1 - (n % read.len())];
            let first = self.logs[i][from].offset;
            let inc = inc + 1;
            for r in &mut self.logs[i][from..] {
                r.offset = back + (r.offset - first);
                r.inc = inc;
            }
            self.reset_at.push(back);
        }
        let to = (from + n).min(self.logs[i].len());
        let batch: Vec<Rec> = self.logs[i][from..to].to_vec();
        // Polled before a seek back: the machine drops them (read again).
        let polled_before_seek = src == Src::Dlq && self.seek.is_some();
        for r in batch.iter().filter(|_| !polled_before_seek) {
            self.taken[i].insert((r.inc, r.offset), r.clone());
        }
        self.sent[i] = to;
        if batch.is_empty() {
            return Ok(());
        }
        self.outstanding += batch.len();
        self.outstanding_bytes += batch.iter().map(|r| r.size).sum::<usize>();
        self.feed(Input::Records(batch))
    }

    fn answer(&mut self, idx: usize, finished: Option<Finished>) -> Result<(), TestCaseError> {
        let (src, offset) = self.in_flight.remove(idx);
        if finished.is_some() {
            let id = self.slots[&(src, offset)];
            prop_assert!(self.done[src.index()].insert(id));
            self.answering.insert((src, id));
        }
        let report = Report {
            generation: GEN,
            src,
            offset,
            finished,
        };
        let fed = self.feed(Input::Reports(vec![report]));
        self.answering.clear();
        fed
    }

    fn answer_all(&mut self) -> Result<(), TestCaseError> {
        let reports: Vec<Report> = std::mem::take(&mut self.in_flight)
            .into_iter()
            .map(|(src, offset)| {
                let id = self.slots[&(src, offset)];
                self.done[src.index()].insert(id);
                self.answering.insert((src, id));
                Report {
                    generation: GEN,
                    src,
                    offset,
                    finished: Some(Finished::Delivered),
                }
            })
            .collect();
        if reports.is_empty() {
            return Ok(());
        }
        let fed = self.feed(Input::Reports(reports));
        self.answering.clear();
        fed
    }

    /// Fires every timer due by `until`, in due order, moving the clock along.
    fn advance_to(&mut self, until: u64) -> Result<(), TestCaseError> {
        loop {
            let next = (0..self.timers.len())
                .filter(|&i| self.timers[i].0 <= until)
                .min_by_key(|&i| self.timers[i].0);
            let Some(i) = next else { break };
            let (due, timer) = self.timers.remove(i);
            self.ms = self.ms.max(due);
            if timer == Timer::DrainTimeout {
                self.drain_deadline_passed = true;
            }
            self.feed(Input::Timer(timer))?;
        }
        self.ms = self.ms.max(until);
        Ok(())
    }

    fn positions(&mut self, stale: bool) -> Result<(), TestCaseError> {
        let dlq = &self.logs[Src::Dlq.index()];
        let end = |log: &[Rec], n: usize| log[..n].last().map_or(0, |r| r.offset + 1);
        let dlq_high = if stale {
            end(dlq, self.sent[Src::Dlq.index()])
        } else {
            end(dlq, dlq.len())
        };
        // Stale: the end as it was when the next record was not written yet
        // (the offsets before it held only markers then).
        let main = match self.logs[0].get(self.sent[0]) {
            Some(next) if stale => next.offset,
            _ => self.logs[0]
                .last()
                .map_or(0, |r| self.log_end(Src::Main, r.inc)),
        };
        let p = Positions {
            main_high: Some(main),
            dlq_high: dlq_high.max(10),
            dlq_start: 10,
        };
        self.feed(Input::Positions(p))
    }

    fn step(&mut self, a: &Action) -> Result<(), TestCaseError> {
        match *a {
            Action::FeedMain { n, reset } => self.send(Src::Main, n, reset),
            Action::ProbeAnswers => self.answer_probes(),
            Action::FeedDlq { n } => self.send(Src::Dlq, n, false),
            Action::Answer { pick, errored } if !self.in_flight.is_empty() => {
                let finished = (!errored).then_some(Finished::Delivered);
                self.answer(pick % self.in_flight.len(), finished)
            }
            Action::Answer { .. } => Ok(()),
            Action::AnswerAll => self.answer_all(),
            Action::Vanish { pick, times } if !self.in_flight.is_empty() => {
                let job = self.in_flight[pick % self.in_flight.len()];
                for _ in 0..times {
                    let Some(idx) = self.in_flight.iter().position(|j| *j == job) else {
                        break; // Not dispatched again (paused, or drained).
                    };
                    self.answer(idx, None)?;
                    let redispatch = Timer::Redispatch {
                        src: job.0,
                        offset: job.1,
                    };
                    let Some(&(due, _)) = self.timers.iter().find(|(_, t)| *t == redispatch) else {
                        break;
                    };
                    self.advance_to(due)?;
                }
                Ok(())
            }
            Action::Vanish { .. } => Ok(()),
            Action::LateReport { offset, errored } => {
                let report = Report {
                    generation: GEN - 1,
                    src: Src::Main,
                    offset: 100 + offset,
                    finished: (!errored).then_some(Finished::Delivered),
                };
                self.feed(Input::Reports(vec![report]))
            }
            Action::Verdict { api_unavailable } => {
                self.api_unavailable = api_unavailable;
                self.feed(Input::Verdict {
                    down: down_if(api_unavailable),
                })
            }
            Action::Positions { stale } => self.positions(stale),
            Action::Advance { ms } => self.advance_to(self.ms + ms),
            Action::FailNextStore => {
                self.fail_store = true;
                Ok(())
            }
            Action::FailNextReading => {
                self.fail_reading = true;
                Ok(())
            }
            Action::ExternalTake { n } => {
                if self.budget.try_take(n) {
                    self.external.push(n);
                }
                self.check_state()
            }
            Action::ExternalGive { pick } if !self.external.is_empty() => {
                let n = self.external.remove(pick % self.external.len());
                self.budget.give_back(n);
                self.check_state()
            }
            Action::ExternalGive { .. } => Ok(()),
            Action::Wake => self.wake(),
            Action::SeekLands { ok } => self.seek_lands(ok),
            Action::SchemaWait { waiting } => {
                self.schema_wait = waiting;
                self.feed(Input::SchemaWait { waiting })
            }
            Action::Logs => {
                for n in &mut self.logs_since_reset {
                    *n = n.saturating_add(1);
                }
                self.feed(Input::Logs([Some(LOG.into()), Some(LOG.into())]))
            }
        }
    }

    /// Delivers the clean probe answers (they may be stale by now).
    fn answer_probes(&mut self) -> Result<(), TestCaseError> {
        for p in std::mem::take(&mut self.probes) {
            self.feed(p)?;
        }
        Ok(())
    }

    /// Delivers the waker's message, if the waker was called.
    fn wake(&mut self) -> Result<(), TestCaseError> {
        if !self.woken.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        prop_assert!(self.awaiting, "woken without a waker");
        self.awaiting = false;
        self.feed(Input::Timer(Timer::Budget))
    }

    /// The seek back asked last lands (DLQ p is read again from its
    /// record), or fails; either is answered.
    fn seek_lands(&mut self, ok: bool) -> Result<(), TestCaseError> {
        let Some((idx, true)) = self.seek.filter(|_| !self.drain_requested) else {
            return Ok(());
        };
        self.seek = if ok {
            self.sent[Src::Dlq.index()] = idx;
            None
        } else {
            Some((idx, false))
        };
        self.feed(Input::DlqRewound { ok })
    }

    /// Revoke or shutdown.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        self.drain_requested = true;
        self.feed(Input::Handover)
    }

    /// The world turns benign: the API is up, the consumer sends everything left,
    /// every job is answered done, time runs. Then everything must be done and
    /// stored to the end (or, after a drain request, the drain answered).
    fn settle(&mut self, drain_stalls: bool) -> Result<(), TestCaseError> {
        self.fail_store = false;
        self.fail_reading = false;
        // The other partitions finish their work.
        for n in std::mem::take(&mut self.external) {
            self.budget.give_back(n);
        }
        if !self.drain_requested {
            self.api_unavailable = false;
            self.schema_wait = false;
            self.feed(Input::SchemaWait { waiting: false })?;
            self.feed(Input::Verdict {
                down: down_if(false),
            })?;
            self.positions(false)?;
        }
        for _ in 0..100_000 {
            if !self.drain_requested {
                self.seek_lands(true)?;
                self.send(Src::Main, 16, false)?;
                self.send(Src::Dlq, 16, false)?;
            }
            let stalled = drain_stalls && self.drain_requested && self.drained == 0;
            if self.woken.load(Ordering::SeqCst) {
                self.wake()?;
                continue;
            }
            if !self.in_flight.is_empty() && !stalled {
                self.answer_all()?;
                continue;
            }
            let Some(&(due, _)) = self.timers.iter().min_by_key(|(due, _)| *due) else {
                if stalled {
                    prop_assert!(false, "a drain with jobs in flight has no deadline");
                }
                break;
            };
            self.advance_to(due)?;
        }
        prop_assert!(
            self.in_flight.is_empty() && self.timers.is_empty(),
            "never settled"
        );
        if !self.drain_requested {
            // Lag checks, with the probes they ask for answered: a proof is
            // asked at most every other check.
            for _ in 0..4 {
                self.positions(false)?;
                self.answer_probes()?;
                let Some(&(due, _)) = self.timers.iter().min_by_key(|(due, _)| *due) else {
                    continue;
                };
                self.advance_to(due + 1_000)?;
            }
        }
        if self.drain_requested {
            prop_assert_eq!(self.drained, 1, "the drain was never answered");
            return Ok(());
        }
        prop_assert_eq!(self.outstanding, 0);
        prop_assert_eq!(self.held, 0, "events still held");
        prop_assert_eq!(self.m.held_bytes(), 0, "bytes still held");
        prop_assert_eq!(self.budget.used(), 0);
        for src in Src::BOTH {
            let i = src.index();
            let undone: Vec<Id> = self.taken[i]
                .keys()
                .filter(|o| !self.done[i].contains(o))
                .copied()
                .collect();
            prop_assert!(undone.is_empty(), "{:?} never done: {:?}", src, undone);
            let end = self.logs[i].last().map(|r| self.log_end(src, r.inc));
            prop_assert_eq!(self.stored[i], end, "{:?} not stored to the end", src);
            if let Some(last) = self.logs[i].last() {
                prop_assert_eq!(self.inc[i], last.inc, "{:?} resets not all noted", src);
            }
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 20_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_machine_keeps_its_invariants(s in scenario(), api_down_at_start in prop::bool::weighted(0.2)) {
        let mut h = Harness::new(&s, api_down_at_start)?;
        for (i, a) in s.actions.iter().enumerate() {
            if s.drain_at.map(|at| at.index(s.actions.len())) == Some(i) {
                h.drain()?;
            }
            h.step(a)?;
        }
        h.settle(s.drain_stalls)?;
        // Whatever it still held (a drain answered at its deadline), a machine
        // that is dropped gives back.
        let budget = h.budget.clone();
        drop(h);
        prop_assert_eq!(budget.used(), 0, "a dropped machine kept its bytes");
    }
}
