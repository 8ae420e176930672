//! [`Turn`]: what the input being handled brings and makes — its time, the
//! effects decided so far, and the counts reported once at its end
//! ([`Effect::Begun`], [`Effect::Finished`], [`Effect::Skipped`]).

use super::per_side::PerSide;
use super::{Effect, Src};
use std::time::Instant;

/// One input's handling.
pub(super) struct Turn<I> {
    /// The time of the input being handled.
    pub(super) clock: Option<Instant>,
    /// The effects so far, in order.
    pub(super) fx: Vec<Effect<I>>,
    /// Records begun, per side.
    pub(super) begun: PerSide<usize>,
    /// Events finished (durable outcome).
    pub(super) finished: usize,
    /// Records completed without dispatch.
    pub(super) skipped: usize,
}

impl<I> Default for Turn<I> {
    fn default() -> Self {
        Turn {
            clock: None,
            fx: Vec::new(),
            begun: PerSide::default(),
            finished: 0,
            skipped: 0,
        }
    }
}

impl<I> Turn<I> {
    /// Adds an effect, if there is one.
    pub(super) fn push(&mut self, effect: Option<Effect<I>>) {
        self.fx.extend(effect);
    }

    /// Reports the counts (those above zero) and resets them. Returns
    /// whether records were skipped.
    pub(super) fn count(&mut self) -> bool {
        let begun = std::mem::take(&mut self.begun);
        if begun.iter().any(|&n| n > 0) {
            self.fx.push(Effect::Begun {
                main: begun[Src::Main],
                dlq: begun[Src::Dlq],
            });
        }
        if self.finished > 0 {
            self.fx
                .push(Effect::Finished(std::mem::take(&mut self.finished)));
        }
        let skipped = std::mem::take(&mut self.skipped);
        if skipped > 0 {
            self.fx.push(Effect::Skipped(skipped));
        }
        skipped > 0
    }

    /// The effects of the input, in order.
    pub(super) fn close(&mut self) -> Vec<Effect<I>> {
        std::mem::take(&mut self.fx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_effects_once_and_only_above_zero() {
        let mut t: Turn<()> = Turn::default();
        t.push(Some(Effect::HandedOver));
        t.push(None);
        t.begun[Src::Main] += 2;
        t.begun[Src::Dlq] += 1;
        t.skipped += 1;
        assert!(t.count());
        let begun = Effect::Begun { main: 2, dlq: 1 };
        let fx = vec![Effect::HandedOver, begun, Effect::Skipped(1)];
        assert_eq!(t.close(), fx);
        assert!(!t.count(), "reset");
        assert_eq!(t.close(), vec![]);
        t.finished += 1;
        assert!(!t.count());
        assert_eq!(t.close(), vec![Effect::Finished(1)]);
    }
}
