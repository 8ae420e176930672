//! The options every scenario runs with (from the command line): the CI or the
//! full version, the load's rate and size, the cluster, the settle timeout. Its
//! own module because the scenario runner (`scenarios`) and the scenarios it
//! dispatches to in other files (`hostile`, `partial_api`) all read it, and
//! those must not import the runner back.

use crate::cluster::ClusterCfg;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Opts {
    pub short: bool,
    pub rate: u64,
    /// Overrides the scenario's event count (rate × its load duration).
    pub events: Option<usize>,
    pub cluster: ClusterCfg,
    pub toxiproxy_script: PathBuf,
    pub settle_timeout: Duration,
}

impl Opts {
    /// `short` seconds in the CI version, `full` otherwise.
    pub fn pick(&self, short: f64, full: f64) -> Duration {
        Duration::from_secs_f64(if self.short { short } else { full })
    }
    pub fn rounds(&self, short: usize, full: usize) -> usize {
        if self.short {
            short
        } else {
            full
        }
    }
    pub fn warm(&self) -> Duration {
        self.pick(3.0, 10.0)
    }
    pub fn tail(&self) -> Duration {
        self.pick(4.0, 15.0)
    }
    /// DLQ records an outage's onset may add: what is in flight when it starts.
    pub fn dlq_bound(&self) -> i64 {
        (self.cluster.instances * (self.cluster.concurrency + 40)) as i64
    }
}
