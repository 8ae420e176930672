//! Supervisor: starts the long-lived actors (DLQ writer, delivery pool, consumer),
//! re-spawns any that fails from the configuration it keeps, counts restarts, and
//! gives up — ending the process non-zero — after too many within the window.
//! (ractor's default handler would stop the supervisor on the first child failure.)
//!
//! It also wires them: each child is given, at construction, handles to the peers it
//! sends to (`crate::handle`), and the supervisor re-points a peer's handles when
//! it re-spawns that peer. Dependents keep running: a re-spawned DLQ writer or
//! delivery pool is reached through the handles they already hold.

use crate::actors::consumer::{ConsumerActor, ConsumerArgs, ConsumerMsg};
use crate::actors::delivery_pool::{DeliveryArgs, DeliveryMsg, DeliveryPool, PoolHandles};
use crate::actors::dlq_writer::{DlqWriter, DlqWriterMsg};
use crate::actors::health::{HealthActor, HealthArgs, HealthMsg};
use crate::delivery::peers::{BreakerAlarm, Peers};
use crate::delivery::Queued;
use crate::handle::Binding;
use crate::metrics::Readiness;
use crate::runtime::Pipeline;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::sync::Arc;
use std::time::Duration;

pub(crate) enum SupervisorMsg {
    Shutdown(RpcReplyPort<()>),
}

pub(crate) struct SupervisorArgs {
    pub pipeline: Arc<Pipeline>,
    pub ready: Arc<Readiness>,
}

pub(crate) struct SupervisorState {
    pipeline: Arc<Pipeline>,
    ready: Arc<Readiness>,
    consumer: Option<ActorRef<ConsumerMsg>>,
    delivery: Option<ActorRef<DeliveryMsg>>,
    writer: Option<ActorRef<DlqWriterMsg>>,
    health: Option<ActorRef<HealthMsg>>,
    bindings: Bindings,
    stopping: bool,
}

/// The supervisor's side of every handle it gives out.
#[derive(Default)]
struct Bindings {
    delivery: Binding<ActorRef<DeliveryMsg>>,
    /// Bound by each delivery pool incarnation to its own queue.
    queue: Binding<tokio::sync::mpsc::UnboundedSender<Queued>>,
    writer: Binding<ActorRef<DlqWriterMsg>>,
    health: Binding<ActorRef<HealthMsg>>,
}

pub(crate) struct Supervisor;

#[derive(Clone, Copy, Debug)]
enum Child {
    Consumer,
    Delivery,
    Writer,
    Health,
}

impl Child {
    fn name(self) -> &'static str {
        match self {
            Child::Consumer => "consumer",
            Child::Delivery => "delivery_pool",
            Child::Writer => "dlq_writer",
            Child::Health => "health",
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut s = SupervisorState {
            pipeline: args.pipeline,
            ready: args.ready,
            consumer: None,
            delivery: None,
            writer: None,
            health: None,
            bindings: Bindings::default(),
            stopping: false,
        };
        // Order matters: the consumer dispatches into the pool, the pool writes
        // through the writer.
        for child in [
            Child::Health,
            Child::Writer,
            Child::Delivery,
            Child::Consumer,
        ] {
            s.spawn(&myself, child).await?;
        }
        Ok(s)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Shutdown(reply) => {
                s.stopping = true;
                if let Some(c) = &s.consumer {
                    let grace = s.pipeline.config.pipeline.shutdown_grace + Duration::from_secs(15);
                    let _ = c.call(ConsumerMsg::Shutdown, Some(grace)).await;
                }
                myself.stop_children(Some("shutdown".into()));
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) if !s.stopping => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        if s.stopping {
            return Ok(());
        }
        let Some(child) = s.which(&cell) else {
            return Ok(());
        };
        tracing::error!(actor = child.name(), reason = %why, "actor failed; restarting it");
        if let Err(e) = s.pipeline.record_restart(child.name()) {
            s.pipeline
                .fatal(format!("{} keeps failing: {e}", child.name()));
            return Ok(());
        }
        if matches!(child, Child::Consumer) {
            // Its partition actors belonged to the old consumer: stop them; the new
            // consumer joins the group and gets its own assignment.
            cell.stop_children(Some("consumer restarted".into()));
        }
        if let Err(e) = s.spawn(&myself, child).await {
            s.pipeline
                .fatal(format!("cannot restart {}: {e}", child.name()));
        }
        Ok(())
    }
}

impl SupervisorState {
    fn which(&self, cell: &ActorCell) -> Option<Child> {
        let id = cell.get_id();
        if self.consumer.as_ref().is_some_and(|a| a.get_id() == id) {
            Some(Child::Consumer)
        } else if self.delivery.as_ref().is_some_and(|a| a.get_id() == id) {
            Some(Child::Delivery)
        } else if self.writer.as_ref().is_some_and(|a| a.get_id() == id) {
            Some(Child::Writer)
        } else if self.health.as_ref().is_some_and(|a| a.get_id() == id) {
            Some(Child::Health)
        } else {
            None
        }
    }

    async fn spawn(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        child: Child,
    ) -> Result<(), ActorProcessingErr> {
        let sup = myself.get_cell();
        match child {
            Child::Writer => {
                let (a, _) =
                    Actor::spawn_linked(None, DlqWriter, self.pipeline.clone(), sup).await?;
                self.bindings.writer.bind(a.clone());
                self.writer = Some(a);
            }
            Child::Delivery => {
                let args = DeliveryArgs {
                    pipeline: self.pipeline.clone(),
                    peers: Peers {
                        dlq_writer: self.bindings.writer.handle(),
                        breaker_alarm: {
                            let health = self.bindings.health.handle();
                            BreakerAlarm::new(move || {
                                if let Some(h) = health.current() {
                                    let _ = h.send_message(HealthMsg::Tripped);
                                }
                            })
                        },
                    },
                    queue: self.bindings.queue.clone(),
                };
                let (a, _) = Actor::spawn_linked(None, DeliveryPool, args, sup).await?;
                self.bindings.delivery.bind(a.clone());
                self.delivery = Some(a);
            }
            Child::Consumer => {
                // Whatever the previous consumer had handed over died with it and
                // its partition actors.
                self.pipeline.buffered.reset();
                let args = ConsumerArgs {
                    pipeline: self.pipeline.clone(),
                    ready: self.ready.clone(),
                    delivery: PoolHandles {
                        pool: self.bindings.delivery.handle(),
                        queue: self.bindings.queue.handle(),
                    },
                };
                let (a, _) = Actor::spawn_linked(None, ConsumerActor, args, sup).await?;
                self.consumer = Some(a);
            }
            Child::Health => {
                let args = HealthArgs {
                    pipeline: self.pipeline.clone(),
                    ready: self.ready.clone(),
                };
                let (a, _) = Actor::spawn_linked(None, HealthActor, args, sup).await?;
                self.bindings.health.bind(a.clone());
                self.health = Some(a);
            }
        }
        Ok(())
    }
}
