//! Commits around a handover (a revoke's drain, a shutdown's): the committed
//! position of a side never goes back, whatever was waiting in the shell's
//! coalesced commits (`actors::partition::commits`) when the drain began.

use super::tests::{commit_kinds, main_recs, progress, Rec, T};
use super::*;

/// The shell's commits as the machine's effects drive them, in the worst
/// order the shell allows: a `Commit::Soon` waits in the coalesced set (the
/// latest per side) until a flush, which may come after the revoke's
/// synchronous commit (a flush is a timer task: up to the pace floor later,
/// more on a busy runtime); a `Commit::Now` is sent at once and takes the
/// side's waiting commit back; [`Effect::ForgetWaitingCommits`] takes both
/// back; the revoke's synchronous commit
/// (`kafka::CourierContext::pre_rebalance`, or the shutdown's final commit)
/// sends what is stored.
#[derive(Default)]
struct Shell {
    stored: [Option<i64>; 2],
    waiting: [Option<i64>; 2],
    /// Every position committed, in order.
    committed: Vec<(Src, i64)>,
}

impl Shell {
    fn apply(&mut self, fx: &[Effect<Rec>]) {
        for e in fx {
            match e {
                Effect::Store {
                    src,
                    offset,
                    commit,
                    ..
                } => {
                    let i = src.index();
                    self.stored[i] = Some(offset.get());
                    match commit {
                        Commit::No => {}
                        Commit::Soon => self.waiting[i] = Some(offset.get()),
                        Commit::Now => {
                            self.waiting[i] = None;
                            self.committed.push((*src, offset.get()));
                        }
                    }
                }
                Effect::ForgetWaitingCommits => self.waiting = [None, None],
                _ => {}
            }
        }
    }

    /// The revoke's synchronous commit of what is stored.
    fn revoke_commit(&mut self) {
        for src in Src::BOTH {
            if let Some(o) = self.stored[src.index()] {
                self.committed.push((src, o));
            }
        }
    }

    /// The coalesced flush: what waits is committed.
    fn flush(&mut self) {
        for src in Src::BOTH {
            if let Some(o) = self.waiting[src.index()].take() {
                self.committed.push((src, o));
            }
        }
    }

    /// A committed position that went back: (side, from, to).
    fn went_back(&self) -> Option<(Src, i64, i64)> {
        Src::BOTH.into_iter().find_map(|src| {
            let side: Vec<i64> = self
                .committed
                .iter()
                .filter(|(s, _)| *s == src)
                .map(|(_, o)| *o)
                .collect();
            side.windows(2)
                .find(|w| w[1] < w[0])
                .map(|w| (src, w[0], w[1]))
        })
    }
}

fn drained<I>(fx: &[Effect<I>]) -> bool {
    fx.iter().any(|e| matches!(e, Effect::HandedOver))
}

/// Offsets 0..3; 0 and 1 done commit 2 (`Commit::Soon`, waiting for the
/// flush), 2 done is stored at 3 without a commit (one event since: not due).
fn soon_then_stored() -> (T, Shell) {
    let mut t = T::new(progress(2));
    let mut sh = Shell::default();
    t.normal();
    sh.apply(&t.feed(main_recs(0..3, |_| None)));
    let fx = t.done(Src::Main, &[0, 1]);
    assert_eq!(commit_kinds(&fx), vec![(2, Commit::Soon)]);
    sh.apply(&fx);
    t.ms += 1;
    sh.apply(&t.done(Src::Main, &[2]));
    (t, sh)
}

/// The drain finds the position stored already (no store of its own): the
/// commit that waited since 2 must not follow the revoke's commit of 3.
#[test]
fn a_drain_with_nothing_to_store_forgets_the_waiting_commit() {
    let (mut t, mut sh) = soon_then_stored();
    let fx = t.feed(Input::Timer(Timer::Store));
    assert_eq!(commit_kinds(&fx), vec![], "3 is stored, not committed");
    sh.apply(&fx);
    assert_eq!(sh.stored[Src::Main.index()], Some(3));
    let fx = t.feed(Input::Handover);
    assert!(drained(&fx));
    sh.apply(&fx);
    sh.revoke_commit();
    sh.flush();
    assert_eq!(
        sh.went_back(),
        None,
        "the committed position went back (side, from, to): {:?}",
        sh.committed
    );
}

/// The drain's own store is not committed (`Commit::No`: moved, not due): the
/// commit waiting since 2 must not follow the revoke's commit of 3.
#[test]
fn a_drain_whose_store_is_not_committed_forgets_the_waiting_commit() {
    let (mut t, mut sh) = soon_then_stored();
    let fx = t.feed(Input::Handover);
    assert!(drained(&fx));
    sh.apply(&fx);
    assert_eq!(sh.stored[Src::Main.index()], Some(3));
    sh.revoke_commit();
    sh.flush();
    assert_eq!(
        sh.went_back(),
        None,
        "the committed position went back (side, from, to): {:?}",
        sh.committed
    );
}

/// Jobs answered while the drain waits for the rest: nothing they make due
/// waits for a flush (it could come after the handover's commit); the
/// drain's answer at its deadline leaves nothing waiting either.
#[test]
fn nothing_waits_for_a_flush_once_a_drain_began() {
    let mut t = T::new(progress(2));
    let mut sh = Shell::default();
    t.normal();
    sh.apply(&t.feed(main_recs(0..10, |_| None)));
    sh.apply(&t.feed(Input::Handover));
    t.ms += 20;
    let fx = t.done(Src::Main, &[0, 1, 2, 3]);
    assert!(
        !commit_kinds(&fx).iter().any(|(_, c)| *c == Commit::Soon),
        "a commit left waiting during a drain: {fx:?}"
    );
    sh.apply(&fx);
    t.ms += 20;
    sh.apply(&t.done(Src::Main, &[4]));
    sh.apply(&t.feed(Input::Timer(Timer::Store)));
    let fx = t.feed(Input::Timer(Timer::DrainTimeout));
    assert!(drained(&fx));
    sh.apply(&fx);
    sh.revoke_commit();
    sh.flush();
    assert_eq!(
        sh.went_back(),
        None,
        "the committed position went back (side, from, to): {:?}",
        sh.committed
    );
    assert_eq!(sh.committed.last(), Some(&(Src::Main, 5)));
}
