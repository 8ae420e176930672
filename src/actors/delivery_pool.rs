//! Delivery pool: starts the work of each job. Deliveries (the API path) queue in
//! order on the pool's queue, which partition actors send to directly
//! (`PoolHandles::queue`: one hop per event instead of an actor message and
//! a channel), and a dispatcher task spawns each one only once it holds one of the
//! `pipeline.concurrency` permits: waiting jobs cost a queue entry (an `Arc` and a
//! token), not a task. The memory profile of a 2,048-permit run had 12 MB in tasks
//! parked on the semaphore (docs/BENCHMARKS.md). Parking-lot writes and DLQ
//! redeliveries come as messages; they do not use the API permits and start at
//! once (the drain has its own limit and pace).

use crate::core::destination::DestinationId;
use crate::delivery::peers::Peers;
use crate::delivery::{Deliverer, Job, Queued};
use crate::handle::{Binding, Handle};
use crate::runtime::Pipeline;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub(crate) enum DeliveryMsg {
    /// A job that does not take an API permit: a parking-lot write or a DLQ
    /// redelivery. Deliveries go to `PoolHandles::queue` instead.
    Run(Job),
    /// An event the partition diverts to the DLQ without a try
    /// (`core::partition::outage`), and why.
    /// One event, or one lane's run in offset order: written one after the
    /// other, so their envelopes keep that order in DLQ p.
    Divert(Vec<Job>, crate::core::destination::Diverted),
}

pub(crate) struct DeliveryPool;

pub(crate) struct DeliveryArgs {
    pub pipeline: Arc<Pipeline>,
    pub peers: Peers,
    /// Where this incarnation publishes its queue (partition actors hold the handles).
    pub queue: Binding<mpsc::UnboundedSender<Queued>>,
}

/// How partition actors reach the current delivery pool: its mailbox (parking-lot
/// writes, DLQ redeliveries) and its queue of deliveries.
#[derive(Clone)]
pub(crate) struct PoolHandles {
    pub pool: Handle<ActorRef<DeliveryMsg>>,
    pub queue: Handle<mpsc::UnboundedSender<Queued>>,
}

pub(crate) struct DeliveryState {
    /// One per destination, indexed by its id (`core::destination`).
    deliverers: Vec<Arc<Deliverer>>,
    _dispatchers: Vec<AbortOnDrop>,
}

/// Ends the dispatcher with the pool, however the pool ends (a panicking actor's
/// `post_stop` does not run, but its state is dropped). Queued jobs are dropped with
/// it: their tokens report errored and the partition actors dispatch them again, to
/// the queue of the re-spawned pool.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Actor for DeliveryPool {
    type Msg = DeliveryMsg;
    type State = DeliveryState;
    type Arguments = DeliveryArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        a: DeliveryArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let pipeline = a.pipeline.clone();
        let deliverers: Vec<Arc<Deliverer>> = Deliverer::all(a.pipeline, a.peers)?
            .into_iter()
            .map(Arc::new)
            .collect();
        let (queue, jobs) = mpsc::unbounded_channel();
        // Nothing else watches the dispatchers: a panic would leave every
        // queued delivery waiting forever, so it is fatal. One dispatcher per
        // destination, each taking its own destination's permits, so a
        // destination whose calls wait at its breaker's gate holds no other
        // destination's deliveries; with more than one, a router hands each
        // delivery to its destination's dispatcher.
        let mut dispatchers = Vec::with_capacity(deliverers.len() + 1);
        let spawn =
            |name: &'static str,
             f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
                let p = pipeline.clone();
                AbortOnDrop(tokio::spawn(async move {
                    crate::runtime::fatal_on_panic(p, name, f).await;
                }))
            };
        if let [only] = &deliverers[..] {
            dispatchers.push(spawn(
                "the delivery dispatcher",
                Box::pin(dispatch(only.clone(), jobs)),
            ));
        } else {
            let mut queues = Vec::with_capacity(deliverers.len());
            for d in &deliverers {
                let (tx, rx) = mpsc::unbounded_channel();
                queues.push(tx);
                dispatchers.push(spawn(
                    "a destination's delivery dispatcher",
                    Box::pin(dispatch(d.clone(), rx)),
                ));
            }
            dispatchers.push(spawn("the delivery router", Box::pin(route(queues, jobs))));
        }
        a.queue.bind(queue);
        Ok(DeliveryState {
            deliverers,
            _dispatchers: dispatchers,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // Parking-lot writes and DLQ redeliveries (deliveries go to the queue).
            DeliveryMsg::Run(job) => {
                let deliverer = state.deliverer(&job).clone();
                tokio::spawn(deliverer.run(job, None));
            }
            DeliveryMsg::Divert(jobs, why) => {
                let Some(first) = jobs.first() else {
                    return Ok(());
                };
                let deliverer = state.deliverer(first).clone();
                tokio::spawn(async move {
                    for job in jobs {
                        deliverer.clone().divert(job, why).await;
                    }
                });
            }
        }
        Ok(())
    }
}

impl DeliveryState {
    /// The deliverer of the job's destination (the default one's for an id
    /// the configuration does not have, which no route gives).
    fn deliverer(&self, job: &Job) -> &Arc<Deliverer> {
        let d = &self.deliverers;
        d.get(job.item.target.destination.index()).unwrap_or(&d[0])
    }
}

/// Hands each queued delivery to its destination's dispatcher, in order (a
/// run's events share their route, so their destination).
async fn route(
    queues: Vec<mpsc::UnboundedSender<Queued>>,
    mut jobs: mpsc::UnboundedReceiver<Queued>,
) {
    while let Some(queued) = jobs.recv().await {
        let dest = match &queued {
            Queued::One(job) => job.item.target.destination,
            Queued::Run(run) => run
                .first()
                .map_or(DestinationId::DEFAULT, |j| j.item.target.destination),
        };
        let Some(queue) = queues.get(dest.index()).or(queues.first()) else {
            return;
        };
        // A dispatcher ends only with the pool (which ends this router too).
        if queue.send(queued).is_err() {
            return;
        }
    }
}

/// Takes the queued deliveries in order and starts each with a permit (a
/// batched event's first try without a task: `delivery::inline`; a run: with
/// a permit per event, in one task).
async fn dispatch(deliverer: Arc<Deliverer>, mut jobs: mpsc::UnboundedReceiver<Queued>) {
    // The permits follow the adaptive concurrency limit (delivery::limits).
    while let Some(queued) = jobs.recv().await {
        let job = match queued {
            Queued::One(job) => job,
            Queued::Run(mut run) => {
                // Runs hold at most `pipeline.concurrency` events
                // (`core::mapping::Routes::run_group`), and with batching the
                // permits stay at that number: all of them come.
                let mut permits = Vec::with_capacity(run.len());
                while permits.len() < run.len() {
                    let Some(permit) = deliverer.permit().await else {
                        return; // Never closed.
                    };
                    permits.push(permit);
                }
                // Handed over meanwhile: dropped, they report errored.
                run.retain(|j| !j.token.cancelled());
                permits.truncate(run.len());
                if !run.is_empty() {
                    tokio::spawn(deliverer.clone().run_ordered(run, permits));
                }
                continue;
            }
        };
        // A job of a partition being handed over never takes a permit: dropped,
        // its token reports errored and the next owner delivers the event.
        if job.token.cancelled() {
            continue;
        }
        let Some(permit) = deliverer.permit().await else {
            return; // Never closed.
        };
        if job.token.cancelled() {
            continue; // Handed over while it waited: the permit goes back.
        }
        deliverer.start(job, permit);
    }
}
