//! Starting and stopping one Courier instance: the supervisor with its tree, and
//! the metrics/health listener. Used by `courier run` and by `courier demo`.
//! `preflight` (`courier check-config --online`) runs start-up's checks without
//! starting anything.

#[path = "app/preflight.rs"]
mod preflight;
pub use preflight::{check_online, Finding, Verdict};

use crate::actors::supervisor::{Supervisor, SupervisorArgs, SupervisorMsg};
use crate::config::Config;
use crate::metrics::Readiness;
use crate::runtime::{fatal_on_panic, Pipeline};
use crate::status_page::{BoardInfo, StatusBoard};
use metrics_exporter_prometheus::PrometheusHandle;
use ractor::{Actor, ActorRef};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Postgres(#[from] crate::delivery::enrich::EnrichSetupError),
    #[error("cannot start: {0}")]
    Spawn(String),
    #[error("metrics listener on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("pipeline.oversize = \"refuse\": an envelope for an event of pipeline.max_event_bytes ({max_event_bytes} bytes) takes {envelope_bytes} bytes, over {topic}'s max.message.bytes of {limit}; raise the topic's max.message.bytes, lower pipeline.max_event_bytes, or set pipeline.oversize = \"reference\"")]
    Oversize {
        max_event_bytes: usize,
        envelope_bytes: usize,
        topic: String,
        limit: usize,
    },
}

pub struct Running {
    supervisor: ActorRef<SupervisorMsg>,
    join: tokio::task::JoinHandle<()>,
    pub pipeline: Arc<Pipeline>,
    pub ready: Arc<Readiness>,
    http: Option<tokio::task::JoinHandle<()>>,
    /// Samples the error counts for `/status`.
    sampler: tokio::task::JoinHandle<()>,
    /// Sets the byte-budget gauges twice a second.
    budgets: tokio::task::JoinHandle<()>,
}

/// Starts the actor tree. Fails fast on what cannot work (missing token, missing
/// topic, partition-count mismatch, unreachable cluster metadata).
pub async fn start(
    config: Config,
    prometheus: Option<PrometheusHandle>,
) -> Result<Running, StartError> {
    config.validate()?;
    config.check_secrets()?;
    #[cfg(feature = "test-hooks")]
    if let Some(key) = &config.testing.poll_panic_on_key {
        let _ = crate::kafka::poller::PANIC_ON_KEY.set(key.clone().into_bytes());
    }
    #[cfg(feature = "test-hooks")]
    if let Some(delay) = config.testing.dlq_handover_delay {
        let _ = crate::kafka::poller::DLQ_HANDOVER_DELAY.set(delay);
    }
    if config.pipeline.oversize == crate::config::Oversize::Refuse {
        check_envelopes_fit(&config).await?;
    }
    // Only a warning: checked beside the start, never delaying it.
    let checked = config.clone();
    tokio::spawn(async move {
        warn_dlq_retention(&checked).await;
    });
    if config.uses_postgres() {
        crate::delivery::enrich::check_at_start(&config.enrichment, config.enrichment_password()?)
            .await?;
    }
    let ready = Arc::new(Readiness::new(
        config.metrics.stuck_after,
        config.metrics.wedged_after,
    ));
    let status = Arc::new(StatusBoard::new(
        BoardInfo::new(&config, crate::runtime::instance_id()),
        crate::runtime::now_ms(),
    ));
    let listen = config.metrics.listen.clone();
    let pipeline = Arc::new(Pipeline::new(config, status.clone())?);
    // These tasks are watched by nothing: a panic in one is fatal
    // (`runtime::fatal_on_panic`), never a process running on without it.
    let sampler = tokio::spawn({
        let p = pipeline.clone();
        async move {
            let sample = crate::status_page::http::sample_errors(status, crate::runtime::now_ms);
            fatal_on_panic(p, "the status sampler", sample).await;
        }
    });
    let http = if listen.is_empty() {
        None
    } else {
        let addr: SocketAddr = listen
            .parse()
            .map_err(|_| StartError::Spawn("metrics.listen".into()))?;
        // Bind first so a taken port is a clear start-up error.
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| StartError::Listen(addr, e))?;
        drop(listener);
        let (r, board, p) = (ready.clone(), pipeline.board.clone(), pipeline.clone());
        Some(tokio::spawn(async move {
            let serve = crate::metrics::serve(addr, prometheus, r, board);
            if let Some(Err(e)) = fatal_on_panic(p, "the metrics listener", serve).await {
                tracing::error!(error = %e, "metrics listener failed");
            }
        }))
    };
    let p = pipeline.clone();
    let budgets = tokio::spawn(async move {
        let gauges = async {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                p.show_budgets();
            }
        };
        fatal_on_panic(p.clone(), "the budget gauges", gauges).await;
    });
    let args = SupervisorArgs {
        pipeline: pipeline.clone(),
        ready: ready.clone(),
    };
    let (supervisor, join) = Actor::spawn(None, Supervisor, args).await.map_err(|e| {
        budgets.abort();
        StartError::Spawn(startup_reason(&e))
    })?;
    Ok(Running {
        supervisor,
        join,
        pipeline,
        ready,
        http,
        sampler,
        budgets,
    })
}

/// `pipeline.oversize = "refuse"`: the largest event Courier accepts must fit the
/// DLQ and the parking lot with its payload.
async fn check_envelopes_fit(config: &Config) -> Result<(), StartError> {
    let limits = crate::actors::dlq_writer::HeldTopics::read(&config.kafka)
        .await
        .limits;
    let envelope_bytes =
        crate::core::envelope::Envelope::largest_for(config.pipeline.max_event_bytes)
            .record_bytes();
    match limits.iter().find(|(_, &limit)| envelope_bytes > limit) {
        Some((topic, &limit)) => Err(StartError::Oversize {
            max_event_bytes: config.pipeline.max_event_bytes,
            envelope_bytes,
            topic: topic.clone(),
            limit,
        }),
        None => Ok(()),
    }
}

/// Warns when the DLQ topic's `retention.ms` is shorter than the longest time
/// an envelope waits there before it is due (the horizon of the longest DLQ
/// policy: `core::dlq_policy::horizon_ms`): the broker may delete envelopes
/// before their retry, and those events are lost (counted by
/// `courier_events_deleted_unread_total` once the DLQ's log start passes the
/// committed DLQ position). A topic whose config cannot be read is only
/// logged: the consumer refuses a missing one. `true`: read, and long enough.
async fn warn_dlq_retention(config: &Config) -> bool {
    let dlq = config.kafka.dlq_topic();
    let topics = [dlq.as_str()];
    let read = crate::kafka::admin::topic_setting(&config.kafka, &topics, "retention.ms");
    let retention = match tokio::time::timeout(Duration::from_secs(15), read).await {
        Ok(Ok(r)) => r.get(&dlq).and_then(|v| v.parse::<i64>().ok()),
        Ok(Err(e)) => {
            tracing::warn!(dlq = %dlq, error = %e, "cannot read the DLQ topic's retention.ms: not checked against the DLQ policy");
            return false;
        }
        Err(_) => {
            tracing::warn!(dlq = %dlq, "reading the DLQ topic's retention.ms timed out: not checked against the DLQ policy");
            return false;
        }
    };
    let Some(retention_ms) = retention else {
        tracing::warn!(dlq = %dlq, "the broker's answer has no retention.ms for the DLQ topic: not checked against the DLQ policy");
        return false;
    };
    let (base, cap) = (
        config.degraded.dlq_backoff_base_ms(),
        config.degraded.dlq_backoff_cap_ms(),
    );
    let policies = std::iter::once(("default".to_string(), config.retry.default)).chain(
        config
            .retry
            .types
            .iter()
            .map(|(t, p)| (format!("type {t}"), *p)),
    );
    let longest = policies
        .map(|(name, p)| (crate::core::dlq_policy::horizon_ms(p, base, cap), name))
        .max();
    if let Some((horizon_ms, policy)) = longest {
        // -1: no time limit.
        if retention_ms >= 0 && (retention_ms as u64) < horizon_ms {
            tracing::warn!(
                dlq = %dlq,
                retention_ms,
                horizon_ms,
                %policy,
                "the DLQ topic's retention.ms is shorter than the longest time an envelope waits there before its retry (the DLQ policy's horizon, from degraded.dlq_backoff_base/cap and [retry]): the broker can delete envelopes before they are retried, and their events are lost; raise the topic's retention.ms"
            );
            return false;
        }
    }
    true
}

/// ractor wraps a failed `pre_start` in layers; the innermost message is the one
/// an operator needs.
fn startup_reason(e: &ractor::SpawnErr) -> String {
    let mut msg = e.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = src {
        msg = s.to_string();
        src = s.source();
    }
    msg
}

impl Running {
    /// Graceful stop: stop fetching, let in-flight work finish within the grace
    /// period, store and commit, leave the group.
    pub async fn shutdown(self) {
        let grace = self.pipeline.config.pipeline.shutdown_grace + Duration::from_secs(30);
        let _ = self
            .supervisor
            .call(SupervisorMsg::Shutdown, Some(grace))
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.join).await;
        if let Some(h) = self.http {
            h.abort();
        }
        self.sampler.abort();
        self.budgets.abort();
    }

    /// Resolves when the supervisor gave up (restart budget exhausted).
    pub async fn fatal(&self) -> String {
        self.pipeline.wait_fatal().await
    }
}
