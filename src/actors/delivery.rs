//! Delivery pool: hands each job to a task of its own. The global concurrency
//! limit is the deliverer's semaphore, so the pool never holds more than
//! `pipeline.concurrency` HTTP calls open; jobs beyond that wait for a permit
//! (bounded in turn by the per-partition in-flight limits).

use crate::delivery::{Deliverer, Job};
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tracing::Instrument;

pub enum DeliveryMsg {
    Run(Job),
}

pub struct DeliveryPool;

pub struct DeliveryState {
    deliverer: Arc<Deliverer>,
}

impl Actor for DeliveryPool {
    type Msg = DeliveryMsg;
    type State = DeliveryState;
    type Arguments = Arc<Pipeline>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        pipeline: Arc<Pipeline>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(DeliveryState {
            deliverer: Arc::new(Deliverer::new(pipeline)?),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            DeliveryMsg::Run(job) => {
                // A root span: the message may carry the sender's span (ractor
                // propagates it), and chaining every event under the previous
                // one would keep them all alive.
                let span = tracing::info_span!(
                    parent: None,
                    "event",
                    id = job.item.event_id().unwrap_or("-"),
                    topic = %job.item.topic,
                    partition = job.item.partition,
                    offset = job.item.offset,
                );
                tokio::spawn(state.deliverer.clone().run(job).instrument(span));
            }
        }
        Ok(())
    }
}
