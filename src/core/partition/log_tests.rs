//! Which log a side's commits name (`core::completed`'s topic id) after its
//! position moved under it: every commit of a new incarnation names the
//! new log once a lag check begun after the reset has read the topic's id
//! ([`LOGS_AFTER_RESET`]), for the actor's lifetime.

use super::tests::{check, main_recs, reads_from_start, resets, settings, Rec, LOG, NEW_LOG, T};
use super::*;

/// The logs the stores in `fx` name (`None`: no metadata).
fn named_logs(fx: &[Effect<Rec>]) -> Vec<(i64, Option<String>)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Store {
                offset, metadata, ..
            } => Some((
                offset.get(),
                completed::made_for(metadata).map(str::to_string),
            )),
            _ => None,
        })
        .collect()
}

/// Offsets 10..15 read, done and stored with metadata of `LOG`.
fn read_ten_to_fifteen() -> T {
    let mut t = T::new(settings(OrderingMode::Unordered, 10, 100));
    t.normal();
    check(&mut t, LOG, 15);
    t.feed(main_recs(10..15, |_| None));
    let fx = t.done(Src::Main, &[10, 11, 12, 13, 14]);
    assert!(named_logs(&fx).is_empty());
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(named_logs(&fx), vec![(15, Some(LOG.into()))]);
    t
}

/// An offset reset on the same log (a truncation, an out-of-range
/// position): once a lag check has read the topic's id again, every commit
/// of the new incarnation names it.
#[test]
fn commits_after_an_offset_reset_name_the_log() {
    let mut t = read_ten_to_fifteen();
    let fx = t.feed(main_recs(0..3, |_| None));
    assert_eq!(resets(&fx), vec![(Src::Main, 15, 0)]);
    // The first lookup may predate the records of the reset: the second
    // began after them.
    check(&mut t, LOG, 3);
    check(&mut t, LOG, 3);
    t.done(Src::Main, &[15, 16, 17]);
    t.ms += 1_000;
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(
        named_logs(&fx),
        vec![(3, Some(LOG.into()))],
        "the new incarnation's commit names its log: {fx:?}"
    );
    // And so on for the actor's lifetime.
    t.feed(main_recs(3..5, |_| None));
    t.done(Src::Main, &[18, 19]);
    t.ms += 1_000;
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(named_logs(&fx), vec![(5, Some(LOG.into()))]);
}

/// A recreation that librdkafka's reset found first: once the lag check
/// confirms the new id, commits name the new log.
#[test]
fn commits_after_a_recreation_name_the_new_log() {
    let mut t = read_ten_to_fifteen();
    let fx = t.feed(main_recs(0..3, |_| None));
    assert_eq!(resets(&fx), vec![(Src::Main, 15, 0)]);
    let fx = check(&mut t, NEW_LOG, 3);
    assert!(reads_from_start(&fx).is_empty(), "the reset began it");
    check(&mut t, NEW_LOG, 3);
    t.done(Src::Main, &[15, 16, 17]);
    t.ms += 1_000;
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(
        named_logs(&fx),
        vec![(3, Some(NEW_LOG.into()))],
        "the new log's commit names it: {fx:?}"
    );
}

/// A recreation seen by its id first (the new log was read again from its
/// start, which lay above the position): commits name the new log.
#[test]
fn commits_after_reading_a_replaced_log_again_name_it() {
    let mut t = read_ten_to_fifteen();
    assert_eq!(
        reads_from_start(&check(&mut t, NEW_LOG, 90)),
        vec![Src::Main]
    );
    t.feed(main_recs(80..81, |_| None));
    t.done(Src::Main, &[80]);
    let fx = t.feed(Input::ReadingFrom {
        src: Src::Main,
        start: Some(80),
    });
    assert_eq!(
        named_logs(&fx),
        vec![(81, Some(NEW_LOG.into()))],
        "the new log's commit names it: {fx:?}"
    );
}

/// The topic's id was not known at assignment: once a lag check reads it,
/// commits name it.
#[test]
fn commits_name_a_log_first_read_after_the_assignment() {
    let mut t = T::new(Settings {
        sides: Default::default(),
        ..settings(OrderingMode::Unordered, 10, 100)
    });
    t.normal();
    t.feed(main_recs(0..2, |_| None));
    t.done(Src::Main, &[0]);
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(named_logs(&fx), vec![(1, None)], "not known yet");
    check(&mut t, LOG, 2);
    t.done(Src::Main, &[1]);
    t.ms += 1_000;
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(
        named_logs(&fx),
        vec![(2, Some(LOG.into()))],
        "the commit names the log read: {fx:?}"
    );
}

/// The topic's id could not be read at the assignment, and the committed
/// position names the log it was made for: nothing is stored until a lag
/// check reads the id. Another id: the position was another log's, and the
/// side reads its log from the start.
#[test]
fn a_position_made_for_another_log_is_not_trusted_while_the_id_is_unknown() {
    let mut t = T::new(Settings {
        sides: [
            SideStart {
                verify: Some(LOG.into()),
                ..SideStart::default()
            },
            SideStart::default(),
        ],
        ..settings(OrderingMode::Unordered, 10, 100)
    });
    t.normal();
    t.feed(main_recs(300..302, |_| None));
    let fx = t.done(Src::Main, &[300, 301]);
    let mut stored = named_logs(&fx);
    stored.extend(named_logs(&t.feed(Input::Timer(Timer::Store))));
    assert_eq!(stored, vec![], "stored before the position was checked");
    let fx = check(&mut t, NEW_LOG, 500);
    assert_eq!(
        reads_from_start(&fx),
        vec![Src::Main],
        "the position was made for another log: {fx:?}"
    );
}

/// The same, and the id read is the position's log: stores resume, naming it.
#[test]
fn a_position_checked_against_the_log_read_later_is_stored() {
    let mut t = T::new(Settings {
        sides: [
            SideStart {
                verify: Some(LOG.into()),
                ..SideStart::default()
            },
            SideStart::default(),
        ],
        ..settings(OrderingMode::Unordered, 10, 100)
    });
    t.normal();
    t.feed(main_recs(300..302, |_| None));
    t.done(Src::Main, &[300, 301]);
    assert_eq!(named_logs(&t.feed(Input::Timer(Timer::Store))), vec![]);
    let fx = check(&mut t, LOG, 302);
    assert!(reads_from_start(&fx).is_empty());
    t.ms += 1_000;
    let mut stored = named_logs(&fx);
    stored.extend(named_logs(&t.feed(Input::Timer(Timer::Store))));
    assert_eq!(stored, vec![(302, Some(LOG.into()))]);
}

/// A side idle after its reset (everything done and stored without
/// metadata) commits the log it learns: the lag check that gives the id
/// asks for a store, whose commit names the log (metadata alone changed:
/// auto-commit would not send it).
#[test]
fn an_idle_side_commits_the_log_it_learns() {
    let mut t = read_ten_to_fifteen();
    t.feed(main_recs(0..3, |_| None));
    t.done(Src::Main, &[15, 16, 17]);
    t.ms += 1_000;
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(named_logs(&fx), vec![(3, None)]);
    t.ms += 1_000;
    check(&mut t, LOG, 3);
    let fx = check(&mut t, LOG, 3);
    let store_timer = Effect::Schedule {
        after: STORE_DELAY,
        timer: Timer::Store,
    };
    assert!(
        fx.contains(&store_timer),
        "a store asked for once the log is known: {fx:?}"
    );
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(named_logs(&fx), vec![(3, Some(LOG.into()))]);
    assert!(
        fx.iter().any(|e| matches!(
            e,
            Effect::Store {
                commit: Commit::Soon,
                ..
            }
        )),
        "committed: {fx:?}"
    );
}
