//! Delivery pool: hands each job to a task of its own. The global concurrency
//! limit is the deliverer's semaphore, so the pool never holds more than
//! `pipeline.concurrency` HTTP calls open; jobs beyond that wait for a permit
//! (bounded in turn by the per-partition in-flight limits).

use crate::delivery::{Deliverer, Job};
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;

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
                // The event's span is made by the task once it starts its work (see
                // `Deliverer::run`), not here: jobs waiting for a permit stay small.
                tokio::spawn(state.deliverer.clone().run(job));
            }
        }
        Ok(())
    }
}
