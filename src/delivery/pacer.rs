//! The DLQ drain's rate: one slot every 1/`degraded.drain_rate_per_sec`. The
//! decision is [`crate::core::pacer::Pacer`]'s; this is its clock and its wait,
//! which a handed-over partition's work leaves at once.

use super::token::CompletionToken;
use crate::core::pacer::Pacer;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) struct DrainPacer {
    pacer: Mutex<Pacer>,
    /// What the pacer's times count from.
    epoch: Instant,
}

impl DrainPacer {
    pub(crate) fn new(interval: Duration) -> DrainPacer {
        DrainPacer {
            pacer: Mutex::new(Pacer::new(interval)),
            epoch: Instant::now(),
        }
    }

    /// Waits for a slot; `false`: the partition was handed over first (no slot
    /// taken, nothing left behind for the others to wait behind).
    pub(crate) async fn slot(&self, token: &CompletionToken) -> bool {
        loop {
            if token.cancelled() {
                return false;
            }
            let at = {
                let mut pacer = self.pacer.lock().unwrap_or_else(|e| e.into_inner());
                match pacer.take(self.epoch.elapsed()) {
                    Ok(()) => return true,
                    Err(at) => self.epoch + at,
                }
            };
            // Nothing taken while waiting: ask again at `at` (another waiter may
            // have had that slot; then the next one).
            tokio::select! {
                biased;
                _ = token.until_cancelled() => return false,
                _ = tokio::time::sleep_until(at) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::partition::Src;
    use crate::delivery::token::{Inbox, Wake};
    use std::sync::Arc;

    struct Nobody;
    impl Wake for Nobody {
        fn wake(&self) {}
    }

    fn token(inbox: &Arc<Inbox>, offset: i64) -> CompletionToken {
        CompletionToken::new(inbox.clone(), 1, Src::Dlq, offset)
    }

    /// A waiter of a handed-over partition leaves at once, and the slot it
    /// waited for goes to the next waiter: nobody waits behind a slot nobody
    /// uses.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_takes_no_slot() {
        let pacer = Arc::new(DrainPacer::new(Duration::from_millis(100)));
        let t0 = Instant::now();
        let ours = Arc::new(Inbox::new(Nobody));
        let revoked = Arc::new(Inbox::new(Nobody));
        assert!(pacer.slot(&token(&ours, 1)).await, "the first slot is now");
        let waiter = {
            let (pacer, t) = (pacer.clone(), token(&revoked, 2));
            tokio::spawn(async move { (pacer.slot(&t).await, Instant::now()) })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        revoked.cancel();
        let (got, at) = waiter.await.unwrap();
        assert!(!got, "cancelled, no slot");
        assert_eq!(at - t0, Duration::from_millis(10), "left at the cancel");
        assert!(pacer.slot(&token(&ours, 3)).await);
        assert_eq!(
            Instant::now() - t0,
            Duration::from_millis(100),
            "the next waiter has the slot the cancelled one left"
        );
        assert!(!pacer.slot(&token(&revoked, 4)).await, "cancelled before");
        assert!(pacer.slot(&token(&ours, 5)).await);
        assert_eq!(Instant::now() - t0, Duration::from_millis(200));
    }
}
