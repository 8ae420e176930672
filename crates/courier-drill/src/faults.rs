//! [`Faults`]: what a scenario broke (Redis or Kafka stopped, a proxy cut)
//! and must heal whatever happens; the scenarios (`scenarios`,
//! `destination_outage`) set it, the run heals it.

use crate::cluster::Services;
use crate::toxiproxy::Toxiproxy;

/// What a scenario broke and must heal whatever happens.
#[derive(Default)]
pub(crate) struct Faults {
    pub(crate) redis_down: bool,
    pub(crate) kafka_down: bool,
    pub(crate) toxiproxy: Option<Toxiproxy>,
}

impl Faults {
    pub(crate) async fn heal(&mut self, svc: &Services) -> anyhow::Result<()> {
        let mut res = Ok(());
        if self.redis_down {
            res = res.and(svc.ctl("redis-start").await);
            self.redis_down = false;
        }
        if self.kafka_down {
            res = res.and(svc.ctl("kafka-start").await);
            self.kafka_down = false;
        }
        if let Some(t) = &self.toxiproxy {
            res = res.and(t.set_enabled(true).await);
        }
        res
    }
}
