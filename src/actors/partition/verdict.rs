//! The destinations' verdicts reach the partition actor on their watch
//! channels (`ApiHealth::watch`, one per destination), straight from the
//! health actor: no relay through the consumer actor. A task of the actor's
//! own per destination turns each change into a [`PartitionMsg::Health`] in
//! its mailbox, in order with everything else; they end with the actor
//! ([`Watch`] aborts them when dropped). The actor keeps which are down and
//! gives the set to the machine, which makes the partition's verdict of it
//! (`core::destination::partition_verdict`, `core::partition::outage`).

use super::PartitionMsg;
use crate::core::destination::{DestSet, DestinationId};
use crate::runtime::Pipeline;
use ractor::ActorRef;

/// The tasks watching the destinations' verdicts for one actor incarnation.
pub(super) struct Watch(Vec<tokio::task::JoinHandle<()>>);

impl Watch {
    /// The destinations down now (what the actor starts from), and the tasks
    /// that hand over every later change.
    pub(super) fn start(pipeline: &Pipeline, me: ActorRef<PartitionMsg>) -> (DestSet, Watch) {
        let mut down = DestSet::default();
        let mut tasks = Vec::with_capacity(pipeline.destinations.len());
        for (i, d) in pipeline.destinations.iter().enumerate() {
            let id = DestinationId(i as u8);
            let mut verdicts = d.health.watch();
            if verdicts.borrow_and_update().api_unavailable {
                down.insert(id);
            }
            let me = me.clone();
            tasks.push(tokio::spawn(async move {
                // Ends when the health side is gone or the actor is.
                while verdicts.changed().await.is_ok() {
                    let unavailable = verdicts.borrow_and_update().api_unavailable;
                    if me
                        .send_message(PartitionMsg::Health { id, unavailable })
                        .is_err()
                    {
                        return;
                    }
                }
            }));
        }
        (down, Watch(tasks))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
