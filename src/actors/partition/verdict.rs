//! The health verdict reaches the partition actor on its watch channel
//! (`ApiHealth::watch`), straight from the health actor: no relay through the
//! consumer actor. A task of the actor's own turns each change into a
//! [`PartitionMsg::Health`] in its mailbox, in order with everything else;
//! it ends with the actor ([`Watch`] aborts it when dropped).

use super::PartitionMsg;
use crate::api_health::HealthVerdict;
use ractor::ActorRef;
use tokio::sync::watch;

/// The task watching the verdict for one actor incarnation.
pub(super) struct Watch(tokio::task::JoinHandle<()>);

impl Watch {
    /// The verdict now (what the actor starts from), and the task that hands
    /// over every later change.
    pub(super) fn start(
        mut verdicts: watch::Receiver<HealthVerdict>,
        me: ActorRef<PartitionMsg>,
    ) -> (HealthVerdict, Watch) {
        let now = *verdicts.borrow_and_update();
        let task = tokio::spawn(async move {
            // Ends when the health side is gone or the actor is.
            while verdicts.changed().await.is_ok() {
                let v = *verdicts.borrow_and_update();
                if me.send_message(PartitionMsg::Health(v)).is_err() {
                    return;
                }
            }
        });
        (now, Watch(task))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}
